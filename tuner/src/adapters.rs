//! The campaign's [`Store`] over the SQLite selector table and its
//! [`Measure`] over the bench harness: the two places where the tuner's
//! abstract loop meets real files and real clocks.

use crate::TunerError;
use crate::campaign::{Measure, MeasurementRecord, Outcome, Selection, Stats, Store};
use crate::strategy::FULL_FIDELITY;
use serde_json::json;
use std::time::Duration;
use tiletune_bench::{Harness, MeasureConfig};
use tiletune_pmu::EventSetKind;
use tiletune_tables::{Candidate, MeasurementStats, Placement, Problem, SelectorDb, now_unix};

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
        // A row without the statistics a score needs (one another tool
        // wrote) is measured again rather than scored as zero spread.
        if m.stats.fidelity.unwrap_or(0) < fidelity {
            return None;
        }
        Some(Outcome::Valid(Stats {
            median_s: m.median_ns? * 1e-9,
            mad_s: m.stats.mad_ns? * 1e-9,
            samples: usize::try_from(m.stats.samples?).ok()?,
            counters: m.counters,
        }))
    }

    fn record(&mut self, r: &MeasurementRecord) -> Result<(), TunerError> {
        let mut stats = MeasurementStats {
            fidelity: Some(r.fidelity),
            work: Some(r.work),
            ..MeasurementStats::default()
        };
        let (median_ns, counters, valid, reason) = match &r.outcome {
            Outcome::Valid(s) => {
                stats.median_ns = Some(s.median_s * 1e9);
                stats.mad_ns = Some(s.mad_s * 1e9);
                stats.samples = Some(s.samples as u64);
                (Some(s.median_s * 1e9), s.counters.clone(), true, None)
            }
            Outcome::Invalid { reason } => {
                (None, serde_json::Value::Null, false, Some(reason.clone()))
            }
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
        Ok(self.db.replace_measurement(&m)?)
    }

    fn select(&mut self, s: &Selection) -> Result<(), TunerError> {
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
        // Another tuner running on the same table at the same time may have
        // stored a faster winner; the table keeps the faster one.
        self.db.put_campaign_selection(&sel)?;
        Ok(())
    }
}

/// Times candidates with the bench harness; fidelity scales the minimum
/// measurement time linearly up to `full` at [`FULL_FIDELITY`].
///
/// Candidates are timed as the runtime runs them: from inside the pool of
/// the problem's thread budget `N`, with that pool's other workers kept
/// awake (`pool::install_awake`, what the forward pass runs in). Either
/// difference would make a timing the model never sees:
/// - from outside the pool, every 2-thread run pays a cold cross-pool
///   injection (~20 µs on the VM measured in docs/PERF.md, third run), and
///   small decode GEMVs would move to one thread for "speedups" the model
///   does not get;
/// - with idle workers asleep, a 1-thread pick looks faster than it is in
///   the model, where waking the workers is paid by the next
///   multi-threaded kernel (docs/PERF.md, fourth run).
///
/// A pinned placement is timed in its own pool (`pool(t)`, or on the
/// caller for one thread), pinned as the runtime pins it.
pub struct HarnessMeasure {
    pub full: MeasureConfig,
    /// Thread budget of the problem measured next (its pool's size).
    budget: usize,
    /// Threads of the candidate measured next.
    threads: usize,
    /// CPUs the next candidate is pinned to (its placement's), if pinned.
    pin: Option<Vec<usize>>,
}

impl HarnessMeasure {
    /// A schedule for tuning: long enough for a stable median at full
    /// fidelity, short enough that a suite fits a few minutes.
    pub fn for_tuning() -> Self {
        HarnessMeasure::new(
            MeasureConfig::default()
                .warmup(2, Duration::from_millis(20))
                .min(9, Duration::from_millis(120))
                .max(400, Duration::from_millis(800)),
        )
    }

    /// A harness measure with this full-fidelity schedule.
    pub fn new(full: MeasureConfig) -> Self {
        HarnessMeasure {
            full,
            budget: 1,
            threads: 1,
            pin: None,
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

/// One measurement on the calling thread: `workers` are the TIDs of the
/// pool that runs the kernel's work (the caller may be one of them).
fn measure_here(
    cfg: MeasureConfig,
    workers: Vec<i32>,
    pin: Option<Vec<usize>>,
    run: &mut (dyn FnMut() + Send),
) -> Stats {
    let mut fallback = None;
    let measured = Harness::new(cfg).and_then(|h| {
        // Pinned before the counters are attached, so they open on the
        // placement's CPUs (that cluster's PMU); the harness pins the
        // caller and each worker for the measurement and restores them.
        let mut h = h.workers(workers);
        if let Some(cpus) = pin {
            h = h.pinned(cpus);
        }
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
                // The mean wall time of the runs the counts are per-run
                // means of (the median above is of samples): a count and
                // this compare like for like, also on a loaded machine.
                "run_ns": m.elapsed_ns / m.runs.max(1) as f64,
                "metrics": m.metrics,
                "fallback": fallback.map(|n| n.to_string()),
                // Where a pinned run was pinned and observed.
                "placement": m.placement,
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

impl Measure for HarnessMeasure {
    fn measure(&mut self, fidelity: u32, run: &mut (dyn FnMut() + Send)) -> Stats {
        let cfg = self.config(fidelity);
        let pin = self.pin.clone();
        let size = if pin.is_some() {
            self.threads
        } else {
            self.budget.max(self.threads)
        };
        // With more than one thread the measuring thread becomes one of the
        // workers, so it is in `tids`: its counters are the caller's (the
        // counter set skips the duplicate) and, when pinned, it gets its
        // worker's one CPU, as `pool::pin_workers` gives it in the runtime.
        // One thread runs inline on the caller, with no workers.
        let tids = crate::families::worker_tids(size);
        tiletune_kernels::pool::install_awake(size, move || measure_here(cfg, tids, pin, run))
    }

    fn use_budget(&mut self, threads: usize) {
        self.budget = threads.max(1);
    }

    fn use_threads(&mut self, threads: usize) {
        self.threads = threads.max(1);
        self.pin = None;
    }

    fn use_placement(&mut self, placement: &Placement) {
        self.use_threads(placement.threads());
        if placement.is_pinned() {
            self.pin = Some(placement.cpus().to_vec());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::families::{Machine, OneConfig, instantiate_one, parse_bench_problem};
    use tiletune_kernels::CpuCaps;

    /// A 1-thread candidate of a 2-thread problem is timed on a worker of
    /// the 2-thread pool, where the runtime would run it; a 1-thread
    /// problem, and a pinned placement, on the caller.
    #[test]
    fn candidates_run_in_the_pool_of_their_problems_budget() {
        let quick = MeasureConfig::quick().min(5, Duration::from_millis(1));
        let mut m = HarnessMeasure::new(quick);
        let on = |m: &mut HarnessMeasure| {
            let mut name = None;
            m.measure(FULL_FIDELITY, &mut || {
                name.get_or_insert_with(|| std::thread::current().name().map(str::to_string));
            });
            name.flatten().unwrap_or_default()
        };
        m.use_budget(2);
        m.use_threads(1);
        assert!(on(&mut m).starts_with("tiletune-2t-"), "{}", on(&mut m));
        m.use_threads(2);
        assert!(on(&mut m).starts_with("tiletune-2t-"));
        m.use_budget(1);
        m.use_threads(1);
        assert!(!on(&mut m).starts_with("tiletune-"));
    }

    /// A 2-thread kernel's work runs on its pool's workers: timed from
    /// outside the pool only the blocked caller is counted; timed as the
    /// runtime calls it (from inside the pool, the measuring thread being
    /// one of the two workers) both workers are counted, several times the
    /// blocked caller's task-clock.
    #[test]
    fn a_two_thread_kernel_is_counted_on_its_workers() {
        let machine = Machine {
            caps: CpuCaps {
                l1d: 32 << 10,
                l2: 1 << 20,
                l3: 8 << 20,
                cores: 2,
            },
            max_threads: 2,
            seed: 1,
            memory: None,
            streamed: None,
        };
        // The blocked caller costs a wake-up per run (5 µs quiet, 10 µs on
        // a loaded machine), whatever the kernel: an 8 MB matrix keeps the
        // work many times that, so "several times" holds under load too.
        let spec = parse_bench_problem("gemv", "f32", "2048x1024").unwrap();
        let one = OneConfig {
            threads: Some(2),
            ..OneConfig::default()
        };
        let mut p = instantiate_one(&spec, &machine, &one).unwrap();
        let quick = MeasureConfig::quick().min(7, Duration::from_millis(20));
        let task_clock = |m: &mut HarnessMeasure, p: &mut Box<dyn crate::KernelProblem>| {
            let s = m.measure(FULL_FIDELITY, &mut || p.run(0));
            let counts = &s.counters["counts"];
            (
                counts["values"]["task-clock"]["scaled"].as_f64().unwrap(),
                counts["threads"].as_u64().unwrap(),
                s.counters["run_ns"].as_f64().unwrap(),
            )
        };
        let mut m = HarnessMeasure::new(quick);
        let (alone, threads, _) = task_clock(&mut m, &mut p);
        assert_eq!(threads, 1);
        m.use_threads(2);
        let (all, threads, wall) = task_clock(&mut m, &mut p);
        assert_eq!(threads, 2, "the measuring worker and its sibling");
        eprintln!(
            "task-clock per run: caller alone {alone:.0} ns, caller + workers {all:.0} ns, mean wall {wall:.0} ns ({:.2}× wall)",
            all / wall
        );
        assert!(
            all > 3.0 * alone,
            "with workers {all} ns/run, caller {alone}"
        );
        // At most both workers busy for the whole run (the sibling spins
        // when idle: it is kept awake). Both figures are means over the
        // same runs, so a loaded machine (CI runs tests side by side)
        // slows both; the margin is for the counters' start and stop,
        // just outside the timed runs.
        assert!(all < 2.5 * wall, "{all} ns/run over {wall} ns/run");
        m.use_threads(1);
        assert_eq!(m.threads, 1);
    }
}
