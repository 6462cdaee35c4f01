//! The campaign's [`Store`] over the SQLite selector table and its
//! [`Measure`] over the bench harness: the two places where the tuner's
//! abstract loop meets real files and real clocks.

use crate::campaign::{Measure, MeasurementRecord, Outcome, Selection, Stats, Store};
use crate::strategy::FULL_FIDELITY;
use serde_json::json;
use std::time::Duration;
use tiletune_bench::{Harness, MeasureConfig};
use tiletune_pmu::EventSetKind;
use tiletune_tables::{Candidate, Problem, SelectorDb, now_unix};

/// Writes a campaign's measurements and selections into a selector table,
/// each in its own transaction, so a killed tuner loses at most the
/// measurement in flight.
pub struct DbStore<'a> {
    pub db: &'a mut SelectorDb,
    pub soc: String,
    pub kernel_abi: u32,
    pub campaign: String,
}

impl Store for DbStore<'_> {
    fn existing(
        &mut self,
        problem: &Problem,
        candidate: &Candidate,
        fidelity: u32,
    ) -> Option<Outcome> {
        let m = self
            .db
            .measured(&self.soc, self.kernel_abi, problem, candidate)
            .ok()??;
        if !m.valid {
            return Some(Outcome::Invalid {
                reason: m.invalid_reason.unwrap_or_else(|| "invalid".into()),
            });
        }
        let stored_fidelity = m
            .stats
            .get("fidelity")
            .and_then(|v| v.as_u64())
            .unwrap_or(0) as u32;
        if stored_fidelity < fidelity {
            return None;
        }
        Some(Outcome::Valid(Stats {
            median_s: m.median_ns? * 1e-9,
            mad_s: m
                .stats
                .get("mad_ns")
                .and_then(|v| v.as_f64())
                .unwrap_or(0.0)
                * 1e-9,
            samples: m.stats.get("samples").and_then(|v| v.as_u64()).unwrap_or(0) as usize,
            counters: m.counters,
        }))
    }

    fn record(&mut self, r: &MeasurementRecord) -> Result<(), String> {
        let (median_ns, stats, counters, valid, reason) = match &r.outcome {
            Outcome::Valid(s) => (
                Some(s.median_s * 1e9),
                json!({
                    "median_ns": s.median_s * 1e9,
                    "mad_ns": s.mad_s * 1e9,
                    "samples": s.samples,
                    "fidelity": r.fidelity,
                }),
                s.counters.clone(),
                true,
                None,
            ),
            Outcome::Invalid { reason } => (
                None,
                json!({ "fidelity": r.fidelity }),
                serde_json::Value::Null,
                false,
                Some(reason.clone()),
            ),
        };
        let m = tiletune_tables::Measurement {
            campaign: self.campaign.clone(),
            soc: self.soc.clone(),
            kernel_abi: self.kernel_abi,
            problem: r.problem.clone(),
            candidate: r.candidate.clone(),
            median_ns,
            stats,
            counters,
            valid,
            invalid_reason: reason,
            measured_at: now_unix(),
        };
        // A longer measurement of the same candidate replaces the shorter one.
        self.db.replace_measurement(&m).map_err(|e| e.to_string())
    }

    fn select(&mut self, s: &Selection) -> Result<(), String> {
        let sel = tiletune_tables::Selection {
            soc: self.soc.clone(),
            kernel_abi: self.kernel_abi,
            problem: s.problem.clone(),
            thread_budget: s.thread_budget,
            winner: s.winner.clone(),
            median_ns: s.median_s * 1e9,
            default_ns: Some(s.default_s * 1e9),
            speedup: None,
            campaign: Some(self.campaign.clone()),
            selected_at: now_unix(),
        };
        self.db.put_selection(&sel).map_err(|e| e.to_string())
    }
}

/// Times candidates with the bench harness; fidelity scales the minimum
/// measurement time linearly up to `full` at [`FULL_FIDELITY`].
pub struct HarnessMeasure {
    pub full: MeasureConfig,
}

impl HarnessMeasure {
    /// A schedule for tuning: long enough for a stable median at full
    /// fidelity, short enough that a suite fits a few minutes.
    pub fn for_tuning() -> Self {
        HarnessMeasure {
            full: MeasureConfig::default()
                .warmup(2, Duration::from_millis(20))
                .min(9, Duration::from_millis(120))
                .max(400, Duration::from_millis(800)),
        }
    }

    fn config(&self, fidelity: u32) -> MeasureConfig {
        let f = fidelity.clamp(1, FULL_FIDELITY);
        let scale = |d: Duration| d * f / FULL_FIDELITY;
        let mut c = self.full;
        c.min_time = scale(c.min_time);
        c.max_time = scale(c.max_time).max(c.min_time);
        c.min_samples = (c.min_samples * f as usize / FULL_FIDELITY as usize).max(5);
        c.warmup_time = scale(c.warmup_time);
        c
    }
}

impl Measure for HarnessMeasure {
    fn measure(&mut self, fidelity: u32, run: &mut dyn FnMut()) -> Stats {
        let cfg = self.config(fidelity);
        let mut fallback = None;
        let measured = Harness::new(cfg).and_then(|mut h| {
            // Hardware counters where the PMU is readable, else software
            // events; the fallback is said once and flagged in every row.
            fallback = h.attach_counters(EventSetKind::Auto);
            if let Some(note) = &fallback {
                note.emit_once();
            }
            h.measure("candidate", run)
        });
        match measured {
            Ok(m) => Stats {
                median_s: m.summary.median * 1e-9,
                mad_s: m.summary.mad * 1e-9,
                samples: m.summary.n,
                counters: json!({
                    "counts": m.counts,
                    "metrics": m.metrics,
                    "fallback": fallback.map(|n| n.to_string()),
                }),
            },
            // The schedule above is valid by construction; should the harness
            // still refuse, the candidate is recorded as unmeasurable (NaN),
            // which can never win.
            Err(e) => Stats {
                median_s: f64::NAN,
                mad_s: f64::NAN,
                samples: 0,
                counters: json!({ "error": e.to_string() }),
            },
        }
    }
}
