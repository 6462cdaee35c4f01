//! The rows of a selector table as Rust types, their column lists and row
//! mappings, and the insert statements shared by the API (`store`) and import.

use crate::error::{Result, TableError};
use crate::key::{Candidate, Placement, Problem, canonical_json};
use rusqlite::types::Type;
use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};

/// Seconds since the Unix epoch, the unit of every `*_at` field.
pub fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// A UTC calendar date and time of day, for timestamps people read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtcTime {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    /// Seconds since midnight.
    pub secs: u32,
}

impl UtcTime {
    /// `unix` seconds since 1970-01-01 00:00 UTC (Howard Hinnant's
    /// civil-from-days, exact for every `i64` day count the clock gives).
    pub fn from_unix(unix: i64) -> UtcTime {
        let days = unix.div_euclid(86_400);
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        UtcTime {
            year: yoe + era * 400 + i64::from(month <= 2),
            month,
            day,
            secs: unix.rem_euclid(86_400) as u32,
        }
    }
}

/// `2026-11-29 23:05`: the date and the minute, as people read them.
impl std::fmt::Display for UtcTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:04}-{:02}-{:02} {:02}:{:02}",
            self.year,
            self.month,
            self.day,
            self.secs / 3600,
            self.secs % 3600 / 60
        )
    }
}

/// A SoC the table has rows for. `fingerprint` is the stable hash from the soc
/// crate; `probe` is its full probe record, kept so a table explains itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SocRecord {
    pub fingerprint: String,
    pub name: String,
    pub probe: Value,
    pub first_seen: i64,
}

/// One tuning run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Campaign {
    /// Globally unique (see [`Campaign::new_id`]) so tables from several devices merge without collisions.
    pub id: String,
    pub soc: String,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    pub tool_version: String,
    /// The kernel crate's ABI version the measurements were taken with.
    pub kernel_abi: u32,
    pub commit: Option<String>,
    pub strategy: String,
    pub budget_s: Option<f64>,
    /// Environment drift seen during the run (frequency changes, thermal throttling, …).
    pub drift_flags: Value,
}

impl Campaign {
    /// A campaign starting now with a fresh id.
    pub fn new(
        soc: impl Into<String>,
        tool_version: impl Into<String>,
        kernel_abi: u32,
        strategy: impl Into<String>,
    ) -> Self {
        Campaign {
            id: Self::new_id(),
            soc: soc.into(),
            started_at: now_unix(),
            finished_at: None,
            tool_version: tool_version.into(),
            kernel_abi,
            commit: None,
            strategy: strategy.into(),
            budget_s: None,
            drift_flags: Value::Array(Vec::new()),
        }
    }

    /// `c-<unix seconds hex>-<pid hex>-<64 random bits hex>`: unique across
    /// processes and devices without coordination.
    pub fn new_id() -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        // RandomState is seeded from the OS per process; mixing in time and
        // pid keeps ids distinct even if two states collide.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(nanos);
        h.write_u32(std::process::id());
        format!(
            "c-{:x}-{:x}-{:016x}",
            nanos / 1_000_000_000,
            std::process::id(),
            h.finish()
        )
    }
}

/// One timed (or rejected) candidate on one problem.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    pub campaign: String,
    pub soc: String,
    pub kernel_abi: u32,
    pub problem: Problem,
    pub candidate: Candidate,
    /// `None` when the candidate failed validation and was never timed.
    pub median_ns: Option<f64>,
    /// The harness's statistics and the problem's work model.
    pub stats: MeasurementStats,
    /// PMU counters, or the software fallback (flagged inside the JSON).
    pub counters: Value,
    /// False when the output disagreed with the scalar reference: never selectable.
    pub valid: bool,
    pub invalid_reason: Option<String>,
    pub measured_at: i64,
}

/// The bytes moved and the arithmetic done by one run of a problem, as the
/// tuner models them (`KernelProblem::work`): weights read once in their
/// stored format, activations in and outputs out. Stored with each
/// measurement so that reports place a problem on the roofline with the
/// model it was timed under rather than a second copy of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Work {
    pub bytes: u64,
    /// Floating-point operations, or integer multiply-adds counted as two.
    pub flops: u64,
}

impl Work {
    /// Operations per byte; `None` when the problem moves no bytes or does
    /// no arithmetic.
    pub fn intensity(&self) -> Option<f64> {
        (self.flops > 0 && self.bytes > 0).then(|| self.flops as f64 / self.bytes as f64)
    }

    /// GFLOP/s at a run time in nanoseconds (FLOP per ns is GFLOP/s).
    pub fn gflops(&self, ns: f64) -> Option<f64> {
        (self.flops > 0 && ns.is_finite() && ns > 0.0).then(|| self.flops as f64 / ns)
    }
}

/// The statistics of one measurement, stored as a JSON object in the
/// `stats` column. Every field is optional because rows come from other
/// tools and older tiletunes too (an import keeps what it does not know in
/// `other`, so a row survives an export/import round trip unchanged).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MeasurementStats {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_ns: Option<f64>,
    /// Median absolute deviation of the samples, ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mad_ns: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
    /// The strategy's fidelity level the candidate was timed at (a resumed
    /// campaign reuses a measurement only at its own fidelity or higher).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fidelity: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work: Option<Work>,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

impl MeasurementStats {
    /// The stats as the JSON the column stores.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("stats are plain numbers and JSON values")
    }
}

/// The winner for one complete key: SoC × kernel ABI × problem × thread budget.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Selection {
    pub soc: String,
    pub kernel_abi: u32,
    pub problem: Problem,
    /// The most threads the caller may use; the winner may use fewer.
    pub thread_budget: usize,
    pub winner: Candidate,
    pub median_ns: f64,
    /// The analytic default's median on the same problem, when measured.
    pub default_ns: Option<f64>,
    /// `default_ns / median_ns`; computed by the table on every write, ignored on input.
    pub speedup: Option<f64>,
    pub campaign: Option<String>,
    pub selected_at: i64,
}

impl Selection {
    /// `default_ns / median_ns` when both are meaningful.
    pub fn computed_speedup(&self) -> Option<f64> {
        match self.default_ns {
            Some(d) if d.is_finite() && d > 0.0 && self.median_ns > 0.0 => Some(d / self.median_ns),
            _ => None,
        }
    }
}

/// A measured machine limit (from `bench roofline`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ceiling {
    pub soc: String,
    /// e.g. `mem_bw_triad`, `fma_peak_avx512`.
    pub kind: String,
    pub threads: usize,
    pub value: f64,
    /// e.g. `GB/s`, `GFLOP/s`.
    pub unit: String,
    pub campaign: Option<String>,
    pub measured_at: i64,
}

/// A peer engine's (llama.cpp, MNN, …) result, kept for side-by-side comparisons.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeerResult {
    pub soc: String,
    pub model: String,
    pub engine: String,
    pub engine_version: String,
    /// e.g. `pp512`, `tg128`.
    pub test: String,
    pub threads: usize,
    pub tokens_per_s: f64,
    pub std: Option<f64>,
    /// The engine's raw record.
    pub json: Value,
    pub measured_at: i64,
}

// ---- row mapping -----------------------------------------------------------

pub(crate) fn conv_err(
    idx: usize,
    e: impl std::error::Error + Send + Sync + 'static,
) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, Box::new(e))
}

fn json_col(r: &Row<'_>, idx: usize) -> rusqlite::Result<Value> {
    let s: String = r.get(idx)?;
    serde_json::from_str(&s).map_err(|e| conv_err(idx, e))
}

fn problem_cols(r: &Row<'_>, op: usize) -> rusqlite::Result<Problem> {
    let dims: Vec<(String, usize)> =
        serde_json::from_str(&r.get::<_, String>(op + 2)?).map_err(|e| conv_err(op + 2, e))?;
    Problem::new(r.get::<_, String>(op)?, r.get::<_, String>(op + 1)?, dims)
        .map_err(|e| conv_err(op, e))
}

/// The candidate in columns `variant, params, threads` (from `variant`) and
/// `placement, placement_cpus` (from `placement`). An empty placement (a row
/// no migration filled in) is the unpinned `t{threads}`.
fn candidate_cols(r: &Row<'_>, variant: usize, placement: usize) -> rusqlite::Result<Candidate> {
    let c = Candidate::new(
        r.get::<_, String>(variant)?,
        json_col(r, variant + 1)?,
        r.get(variant + 2)?,
    )
    .map_err(|e| conv_err(variant, e))?;
    let name: String = r.get(placement)?;
    if name.is_empty() {
        return Ok(c);
    }
    let cpus: Vec<usize> = serde_json::from_str(&r.get::<_, String>(placement + 1)?)
        .map_err(|e| conv_err(placement + 1, e))?;
    Placement::from_name(&name, cpus)
        .and_then(|p| c.with_placement(p))
        .map_err(|e| conv_err(placement, e))
}

fn cpus_json(c: &Candidate) -> String {
    serde_json::to_string(c.placement().cpus()).unwrap_or_else(|_| "[]".to_string())
}

fn dims_json(p: &Problem) -> String {
    // Infallible for Vec<(String, usize)>; canonical form not needed here.
    serde_json::to_string(p.dims()).unwrap_or_else(|_| "[]".to_string())
}

pub(crate) const SOC_COLS: &str = "fingerprint, name, probe, first_seen";
pub(crate) fn soc_row(r: &Row<'_>) -> rusqlite::Result<SocRecord> {
    Ok(SocRecord {
        fingerprint: r.get(0)?,
        name: r.get(1)?,
        probe: json_col(r, 2)?,
        first_seen: r.get(3)?,
    })
}

pub(crate) const CAMPAIGN_COLS: &str = "id, soc, started_at, finished_at, tool_version, kernel_abi, \
     git_commit, strategy, budget_s, drift_flags";
pub(crate) fn campaign_row(r: &Row<'_>) -> rusqlite::Result<Campaign> {
    Ok(Campaign {
        id: r.get(0)?,
        soc: r.get(1)?,
        started_at: r.get(2)?,
        finished_at: r.get(3)?,
        tool_version: r.get(4)?,
        kernel_abi: r.get(5)?,
        commit: r.get(6)?,
        strategy: r.get(7)?,
        budget_s: r.get(8)?,
        drift_flags: json_col(r, 9)?,
    })
}

pub(crate) const MEAS_COLS: &str = "campaign, soc, kernel_abi, op, dtype, dims, variant, params, \
     threads, median_ns, stats, counters, valid, invalid_reason, measured_at, placement, \
     placement_cpus";
pub(crate) fn measurement_row(r: &Row<'_>) -> rusqlite::Result<Measurement> {
    Ok(Measurement {
        campaign: r.get(0)?,
        soc: r.get(1)?,
        kernel_abi: r.get(2)?,
        problem: problem_cols(r, 3)?,
        candidate: candidate_cols(r, 6, 15)?,
        median_ns: r.get(9)?,
        stats: serde_json::from_value(json_col(r, 10)?).map_err(|e| conv_err(10, e))?,
        counters: json_col(r, 11)?,
        valid: r.get(12)?,
        invalid_reason: r.get(13)?,
        measured_at: r.get(14)?,
    })
}

pub(crate) const SEL_COLS: &str = "soc, kernel_abi, op, dtype, dims, thread_budget, variant, params, \
     threads, median_ns, default_ns, speedup, campaign, selected_at, placement, placement_cpus";
pub(crate) fn selection_row(r: &Row<'_>) -> rusqlite::Result<Selection> {
    Ok(Selection {
        soc: r.get(0)?,
        kernel_abi: r.get(1)?,
        problem: problem_cols(r, 2)?,
        thread_budget: r.get(5)?,
        winner: candidate_cols(r, 6, 14)?,
        median_ns: r.get(9)?,
        default_ns: r.get(10)?,
        speedup: r.get(11)?,
        campaign: r.get(12)?,
        selected_at: r.get(13)?,
    })
}

pub(crate) const CEIL_COLS: &str = "soc, kind, threads, value, unit, campaign, measured_at";
pub(crate) fn ceiling_row(r: &Row<'_>) -> rusqlite::Result<Ceiling> {
    Ok(Ceiling {
        soc: r.get(0)?,
        kind: r.get(1)?,
        threads: r.get(2)?,
        value: r.get(3)?,
        unit: r.get(4)?,
        campaign: r.get(5)?,
        measured_at: r.get(6)?,
    })
}

pub(crate) const PEER_COLS: &str = "soc, model, engine, engine_version, test, threads, tokens_per_s, \
     std, json, measured_at";
pub(crate) fn peer_row(r: &Row<'_>) -> rusqlite::Result<PeerResult> {
    Ok(PeerResult {
        soc: r.get(0)?,
        model: r.get(1)?,
        engine: r.get(2)?,
        engine_version: r.get(3)?,
        test: r.get(4)?,
        threads: r.get(5)?,
        tokens_per_s: r.get(6)?,
        std: r.get(7)?,
        json: json_col(r, 8)?,
        measured_at: r.get(9)?,
    })
}

// ---- low-level writes shared by the public API and import ----------------

/// Insert helpers run inside a caller's transaction and return whether a row
/// was added (false: an identical key was already present).
pub(crate) mod insert {
    use super::*;

    pub fn soc_if_absent(c: &Connection, s: &SocRecord) -> rusqlite::Result<bool> {
        let exists = c
            .query_row(
                "SELECT 1 FROM socs WHERE fingerprint = ?1",
                [&s.fingerprint],
                |_| Ok(()),
            )
            .optional()?
            .is_some();
        if exists {
            // Keep the existing name and probe; remember the earliest sighting.
            c.execute(
                "UPDATE socs SET first_seen = min(first_seen, ?2) WHERE fingerprint = ?1",
                params![s.fingerprint, s.first_seen],
            )?;
            return Ok(false);
        }
        c.execute(
            "INSERT INTO socs (fingerprint, name, probe, first_seen) VALUES (?1, ?2, ?3, ?4)",
            params![
                s.fingerprint,
                s.name,
                canonical_json(&s.probe),
                s.first_seen
            ],
        )?;
        Ok(true)
    }

    pub fn campaign(c: &Connection, k: &Campaign) -> rusqlite::Result<bool> {
        let n = c.execute(
            "INSERT OR IGNORE INTO campaigns (id, soc, started_at, finished_at, tool_version, kernel_abi,
                 git_commit, strategy, budget_s, drift_flags)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                k.id,
                k.soc,
                k.started_at,
                k.finished_at,
                k.tool_version,
                k.kernel_abi,
                k.commit,
                k.strategy,
                k.budget_s,
                canonical_json(&k.drift_flags)
            ],
        )?;
        let added = n > 0;
        if !added && k.finished_at.is_some() {
            // A later export of the same campaign may know when it finished.
            c.execute(
                "UPDATE campaigns SET finished_at = ?2 WHERE id = ?1 AND finished_at IS NULL",
                params![k.id, k.finished_at],
            )?;
        }
        Ok(added)
    }

    pub fn measurement(c: &Connection, m: &Measurement, replace: bool) -> rusqlite::Result<bool> {
        let verb = if replace {
            "INSERT OR REPLACE"
        } else {
            "INSERT OR IGNORE"
        };
        let sql = format!(
            "{verb} INTO measurements (problem_key, candidate_key, {MEAS_COLS})
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                     ?18, ?19)"
        );
        let mut stmt = c.prepare_cached(&sql)?;
        let n = stmt.execute(params![
            m.problem.key(),
            m.candidate.key(),
            m.campaign,
            m.soc,
            m.kernel_abi,
            m.problem.op(),
            m.problem.dtype(),
            dims_json(&m.problem),
            m.candidate.variant(),
            m.candidate.params_json(),
            m.candidate.threads(),
            m.median_ns,
            canonical_json(&m.stats.to_json()),
            canonical_json(&m.counters),
            m.valid,
            m.invalid_reason,
            m.measured_at,
            m.candidate.placement().name(),
            cpus_json(&m.candidate),
        ])?;
        Ok(n > 0)
    }

    pub fn selection(c: &Connection, s: &Selection) -> rusqlite::Result<()> {
        c.prepare_cached(&format!(
            "INSERT OR REPLACE INTO selections (problem_key, candidate_key, {SEL_COLS})
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                     ?18)"
        ))?
        .execute(params![
            s.problem.key(),
            s.winner.key(),
            s.soc,
            s.kernel_abi,
            s.problem.op(),
            s.problem.dtype(),
            dims_json(&s.problem),
            s.thread_budget,
            s.winner.variant(),
            s.winner.params_json(),
            s.winner.threads(),
            s.median_ns,
            s.default_ns,
            s.computed_speedup(),
            s.campaign,
            s.selected_at,
            s.winner.placement().name(),
            cpus_json(&s.winner),
        ])?;
        Ok(())
    }

    pub fn ceiling(c: &Connection, k: &Ceiling) -> rusqlite::Result<bool> {
        let n = c.execute(
            &format!(
                "INSERT OR IGNORE INTO ceilings ({CEIL_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
            ),
            params![
                k.soc,
                k.kind,
                k.threads,
                k.value,
                k.unit,
                k.campaign,
                k.measured_at
            ],
        )?;
        Ok(n > 0)
    }

    pub fn peer(c: &Connection, p: &PeerResult) -> rusqlite::Result<bool> {
        let n = c.execute(
            &format!(
                "INSERT OR IGNORE INTO peer_results ({PEER_COLS})
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
            ),
            params![
                p.soc,
                p.model,
                p.engine,
                p.engine_version,
                p.test,
                p.threads,
                p.tokens_per_s,
                p.std,
                canonical_json(&p.json),
                p.measured_at
            ],
        )?;
        Ok(n > 0)
    }
}

pub(crate) fn invalid(
    what: &'static str,
    value: impl Into<String>,
    reason: impl Into<String>,
) -> TableError {
    TableError::InvalidKey {
        what,
        value: value.into(),
        reason: reason.into(),
    }
}

fn check_positive(what: &'static str, v: f64) -> Result<()> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(invalid(
            what,
            v.to_string(),
            "must be a positive finite number",
        ))
    }
}

pub(crate) fn check_measurement(m: &Measurement) -> Result<()> {
    match (m.valid, m.median_ns) {
        (true, None) => Err(invalid(
            "measurement",
            format!("{} {}", m.problem, m.candidate),
            "a valid measurement needs median_ns",
        )),
        (_, Some(ns)) => check_positive("median_ns", ns),
        (false, None) => Ok(()),
    }
}

pub(crate) fn check_selection(s: &Selection) -> Result<()> {
    check_positive("median_ns", s.median_ns)?;
    if let Some(d) = s.default_ns {
        check_positive("default_ns", d)?;
    }
    if s.thread_budget == 0 {
        return Err(invalid("thread budget", "0", "must be at least 1"));
    }
    if s.winner.threads() > s.thread_budget {
        return Err(invalid(
            "selection",
            s.winner.key(),
            format!(
                "uses {} threads, more than its thread budget {}",
                s.winner.threads(),
                s.thread_budget
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::UtcTime;

    #[test]
    fn unix_seconds_become_utc_dates() {
        let t = |y, mo, d, s| UtcTime {
            year: y,
            month: mo,
            day: d,
            secs: s,
        };
        assert_eq!(UtcTime::from_unix(0), t(1970, 1, 1, 0));
        // A leap day, and the second before the epoch.
        assert_eq!(UtcTime::from_unix(1_709_211_909), t(2024, 2, 29, 47_109));
        assert_eq!(UtcTime::from_unix(-1), t(1969, 12, 31, 86_399));
        assert_eq!(UtcTime::from_unix(951_868_800), t(2000, 3, 1, 0));
    }
}
