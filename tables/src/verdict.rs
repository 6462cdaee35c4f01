//! Model-level verdicts: kernel winners chosen one problem at a time need not
//! add up to a faster model (a winner timed alone can lose once it shares
//! caches and cores with the rest of the forward pass), so `tune --model`
//! ends by timing the whole model, tuned plan against default plan, per phase
//! and thread budget. A [`Verdict`] stores that check; the runtime reads it at
//! model load (read-only) and runs a phase's tuned choices only when the
//! verdict for the current plan says they won.

use crate::db::SelectorDb;
use crate::error::{Result, TableError};
use crate::records::{conv_err, invalid};
use crate::store::{require_campaign, require_soc};
use rusqlite::{Connection, Row, params};
use serde::{Deserialize, Serialize};

/// A phase of inference as `bench model` times it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Prefill,
    Decode,
}

impl Phase {
    /// Both phases, in the order a model runs them.
    pub const ALL: [Phase; 2] = [Phase::Prefill, Phase::Decode];

    /// `prefill` or `decode`: the stored and printed name.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Prefill => "prefill",
            Phase::Decode => "decode",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Phase {
    type Err = TableError;

    fn from_str(s: &str) -> Result<Self> {
        Phase::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| invalid("phase", s, "expected `prefill` or `decode`"))
    }
}

/// The model-level check of a tuned plan: one phase, one thread budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub soc: String,
    pub kernel_abi: u32,
    /// The model's key: a digest of its kernel problem list (the runtime computes it).
    pub model: String,
    /// A readable name (the file name), for display only.
    pub model_name: String,
    pub phase: Phase,
    /// Thread budget the plans were built and timed for.
    pub threads: usize,
    /// Digest of the tuned choices of this phase that were timed: a verdict whose
    /// digest differs from the plan's current one is stale.
    pub plan_digest: String,
    /// The test timed, llama-bench style: `pp512`, `tg128`.
    pub test: String,
    /// Seconds per round, alternated: default_s[i] and tuned_s[i] are round i.
    pub default_s: Vec<f64>,
    pub tuned_s: Vec<f64>,
    /// median(default_s) / median(tuned_s): > 1 means the tuned plan is faster.
    pub ratio: f64,
    /// Whether the tuned choices won beyond the noise (decided by the tuner).
    pub won: bool,
    pub campaign: Option<String>,
    pub measured_at: i64,
}

impl Verdict {
    /// The median of the default plan's rounds, in seconds (NaN without rounds).
    pub fn default_median_s(&self) -> f64 {
        median(&self.default_s)
    }

    /// The median of the tuned plan's rounds, in seconds (NaN without rounds).
    pub fn tuned_median_s(&self) -> f64 {
        median(&self.tuned_s)
    }

    /// `SmolLM2.gguf decode threads=2`: the row in errors.
    pub(crate) fn label(&self) -> String {
        format!(
            "{} {} threads={}",
            self.model_name, self.phase, self.threads
        )
    }
}

/// The middle value, or the mean of the two middle values of an even count.
fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// What `put_verdict` and the importer refuse: a verdict the runtime could
/// not trust.
pub(crate) fn check_verdict(v: &Verdict) -> Result<()> {
    let bad = |reason: String| Err(invalid("verdict", v.label(), reason));
    if v.model.is_empty() {
        return bad("model is empty; pass the digest of the model's kernel problem list".into());
    }
    if v.plan_digest.is_empty() {
        return bad("plan_digest is empty; pass the digest of the tuned choices timed".into());
    }
    if v.threads == 0 {
        return bad("threads is 0; pass the thread budget the plans were timed with".into());
    }
    if v.default_s.is_empty() || v.tuned_s.is_empty() {
        return bad("no rounds; time both plans in at least one round".into());
    }
    if v.default_s.len() != v.tuned_s.len() {
        return bad(format!(
            "default_s has {} rounds and tuned_s {}; time both plans in every round",
            v.default_s.len(),
            v.tuned_s.len()
        ));
    }
    for (name, xs) in [("default_s", &v.default_s), ("tuned_s", &v.tuned_s)] {
        if let Some((i, x)) = xs
            .iter()
            .enumerate()
            .find(|(_, x)| !(x.is_finite() && **x > 0.0))
        {
            return bad(format!(
                "{name}[{i}] is {x}; every round must be a positive finite number of seconds"
            ));
        }
    }
    if !(v.ratio.is_finite() && v.ratio > 0.0) {
        return bad(format!(
            "ratio is {}; pass median(default_s) / median(tuned_s)",
            v.ratio
        ));
    }
    Ok(())
}

// ---- rows ------------------------------------------------------------------

pub(crate) const VERDICT_COLS: &str = "soc, kernel_abi, model, model_name, phase, threads, \
     plan_digest, test, default_s, tuned_s, ratio, won, campaign, measured_at";

/// The display order: by model name, phase (prefill first), thread budget;
/// the remaining key columns only break ties.
pub(crate) const VERDICT_ORDER: &str = "model_name, CASE phase WHEN 'prefill' THEN 0 ELSE 1 END, \
     threads, model, soc, kernel_abi";

fn seconds_col(r: &Row<'_>, idx: usize) -> rusqlite::Result<Vec<f64>> {
    serde_json::from_str(&r.get::<_, String>(idx)?).map_err(|e| conv_err(idx, e))
}

pub(crate) fn verdict_row(r: &Row<'_>) -> rusqlite::Result<Verdict> {
    Ok(Verdict {
        soc: r.get(0)?,
        kernel_abi: r.get(1)?,
        model: r.get(2)?,
        model_name: r.get(3)?,
        phase: r.get::<_, String>(4)?.parse().map_err(|e| conv_err(4, e))?,
        threads: r.get(5)?,
        plan_digest: r.get(6)?,
        test: r.get(7)?,
        default_s: seconds_col(r, 8)?,
        tuned_s: seconds_col(r, 9)?,
        ratio: r.get(10)?,
        won: r.get(11)?,
        campaign: r.get(12)?,
        measured_at: r.get(13)?,
    })
}

/// Writes `v` over any row with its key, inside the caller's transaction.
pub(crate) fn insert_verdict(c: &Connection, v: &Verdict) -> rusqlite::Result<()> {
    // Infallible for finite f64 lists, which check_verdict guarantees.
    let json = |xs: &[f64]| serde_json::to_string(xs).unwrap_or_else(|_| "[]".to_string());
    c.prepare_cached(&format!(
        "INSERT OR REPLACE INTO verdicts ({VERDICT_COLS})
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"
    ))?
    .execute(params![
        v.soc,
        v.kernel_abi,
        v.model,
        v.model_name,
        v.phase.name(),
        v.threads,
        v.plan_digest,
        v.test,
        json(&v.default_s),
        json(&v.tuned_s),
        v.ratio,
        v.won,
        v.campaign,
        v.measured_at,
    ])?;
    Ok(())
}

impl SelectorDb {
    /// Stores a verdict, replacing the one with the same (soc, kernel ABI,
    /// model, phase, threads). Refuses rounds that are missing, unpaired or
    /// not positive finite seconds, a zero thread budget and an empty model
    /// or plan digest.
    pub fn put_verdict(&mut self, v: &Verdict) -> Result<()> {
        check_verdict(v)?;
        let e = self.err("storing a verdict");
        self.write("storing a verdict", |tx, path| {
            require_soc(tx, path, &v.soc)?;
            if let Some(c) = &v.campaign {
                require_campaign(tx, path, c)?;
            }
            insert_verdict(tx, v).map_err(&e)
        })
    }

    /// Removes the verdict with this key, if one is stored (`tune --model`
    /// when a phase's tuned choices are now the default plan's: a verdict
    /// for choices that no longer run would read as stale). Returns whether
    /// one was.
    pub fn delete_verdict(
        &mut self,
        soc: &str,
        kernel_abi: u32,
        model: &str,
        phase: Phase,
        threads: usize,
    ) -> Result<bool> {
        let e = self.err("removing a verdict");
        self.write("removing a verdict", |tx, _| {
            tx.execute(
                "DELETE FROM verdicts WHERE soc = ?1 AND kernel_abi = ?2 AND model = ?3
                   AND phase = ?4 AND threads = ?5",
                params![soc, kernel_abi, model, phase.name(), threads],
            )
            .map(|n| n > 0)
            .map_err(&e)
        })
    }

    /// Whether the file has the `verdicts` table: a v4 file opened
    /// read-only does not, and holds no verdicts.
    fn has_verdicts(&self) -> Result<bool> {
        let n: i64 = self
            .conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'verdicts'",
                [],
                |r| r.get(0),
            )
            .map_err(|e| crate::TableError::Sqlite {
                path: self.path.clone(),
                context: "reading the schema",
                source: e,
            })?;
        Ok(n > 0)
    }

    /// Every verdict for one SoC (or all), by model name, phase and threads.
    pub fn verdicts(&self, soc: Option<&str>) -> Result<Vec<Verdict>> {
        if !self.has_verdicts()? {
            return Ok(Vec::new());
        }
        self.query_vec(
            &format!(
                "SELECT {VERDICT_COLS} FROM verdicts WHERE ?1 IS NULL OR soc = ?1
                 ORDER BY {VERDICT_ORDER}"
            ),
            [soc],
            verdict_row,
        )
    }

    /// The verdict for one complete key, if the tuner stored one.
    pub fn verdict(
        &self,
        soc: &str,
        kernel_abi: u32,
        model: &str,
        phase: Phase,
        threads: usize,
    ) -> Result<Option<Verdict>> {
        if !self.has_verdicts()? {
            return Ok(None);
        }
        Ok(self
            .query_vec(
                &format!(
                    "SELECT {VERDICT_COLS} FROM verdicts
                     WHERE soc = ?1 AND kernel_abi = ?2 AND model = ?3 AND phase = ?4
                       AND threads = ?5"
                ),
                params![soc, kernel_abi, model, phase.name(), threads],
                verdict_row,
            )?
            .pop())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_parse_their_names_and_say_what_is_accepted() {
        for p in Phase::ALL {
            assert_eq!(p.name().parse::<Phase>().unwrap(), p);
            assert_eq!(p.to_string(), p.name());
            assert_eq!(serde_json::to_string(&p).unwrap(), format!("\"{p}\""));
        }
        let err = "Decode".parse::<Phase>().unwrap_err().to_string();
        assert!(err.contains("`prefill` or `decode`"), "{err}");
    }

    #[test]
    fn medians_take_the_middle_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
