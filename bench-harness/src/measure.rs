//! The measurement routine: warm up, pick how many runs one sample batches,
//! then take samples until both a minimum count and a minimum time are
//! reached (within a hard budget), like criterion's adaptive routine. The
//! counters, when given, are read around the whole timed region and reported
//! per run.
//!
//! The schedule:
//! 1. **Warm-up**: run until `warmup_runs` runs *and* `warmup_time` have
//!    passed (or `max_time` is spent). Caches, branch predictors, page tables
//!    and the CPU frequency settle; the mean warm-up run time estimates the
//!    cost of one run.
//! 2. **Batching**: a sample times `iters_per_sample = ceil(min_sample_time /
//!    estimate)` consecutive runs, so short kernels are not dominated by the
//!    clock's resolution and read cost. A sample's value is its time divided
//!    by the runs it holds.
//! 3. **Sampling**: stop once `samples >= min_samples` and the sampling time
//!    `>= min_time`; or, with `budget_exhausted` set, at `max_samples` or
//!    `max_time`.

use crate::clock::{Clock, SystemClock};
use crate::error::BenchError;
use crate::pin::{PinGuard, Placement, WorkerPin};
use crate::stats::Summary;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tiletune_pmu::{CounterOptions, CounterSet, Counts, EventSetKind, FallbackNote, Metrics};

/// Upper bound on runs batched into one sample (guards against a zero estimate).
pub const MAX_ITERS_PER_SAMPLE: u64 = 1 << 20;

/// When to stop warming up and sampling.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MeasureConfig {
    pub warmup_runs: u64,
    pub warmup_time: Duration,
    pub min_samples: usize,
    pub min_time: Duration,
    pub max_samples: usize,
    pub max_time: Duration,
    /// Runs are batched so one sample lasts at least this long.
    pub min_sample_time: Duration,
}

impl Default for MeasureConfig {
    fn default() -> Self {
        MeasureConfig {
            warmup_runs: 3,
            warmup_time: Duration::from_millis(100),
            min_samples: 20,
            min_time: Duration::from_millis(300),
            max_samples: 2000,
            max_time: Duration::from_secs(5),
            min_sample_time: Duration::from_micros(50),
        }
    }
}

impl MeasureConfig {
    /// A short schedule for smoke tests and CI (numbers are not for reports).
    pub fn quick() -> MeasureConfig {
        MeasureConfig {
            warmup_runs: 1,
            warmup_time: Duration::from_millis(1),
            min_samples: 7,
            min_time: Duration::from_millis(2),
            max_samples: 200,
            max_time: Duration::from_millis(200),
            min_sample_time: Duration::from_micros(20),
        }
    }

    pub fn warmup(mut self, runs: u64, time: Duration) -> Self {
        self.warmup_runs = runs;
        self.warmup_time = time;
        self
    }

    pub fn min(mut self, samples: usize, time: Duration) -> Self {
        self.min_samples = samples;
        self.min_time = time;
        self
    }

    pub fn max(mut self, samples: usize, time: Duration) -> Self {
        self.max_samples = samples;
        self.max_time = time;
        self
    }

    pub fn min_sample_time(mut self, t: Duration) -> Self {
        self.min_sample_time = t;
        self
    }

    /// Checks that the limits are consistent.
    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |reason: &str| {
            Err(BenchError::InvalidConfig {
                reason: reason.to_string(),
            })
        };
        if self.min_samples == 0 {
            return bad("min_samples must be at least 1");
        }
        if self.max_samples < self.min_samples {
            return bad("max_samples must be >= min_samples");
        }
        if self.max_time < self.min_time {
            return bad("max_time must be >= min_time");
        }
        Ok(())
    }
}

/// The record of one measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    pub name: String,
    /// Per-run time of each sample, ns.
    pub samples_ns: Vec<f64>,
    pub iters_per_sample: u64,
    /// Timed runs (samples × iters_per_sample).
    pub runs: u64,
    pub warmup_runs: u64,
    /// Wall time of the sampling phase, ns.
    pub elapsed_ns: f64,
    pub summary: Summary,
    /// Sampling stopped at `max_samples`/`max_time` before the minimums.
    pub budget_exhausted: bool,
    /// Counter values per run, when counters were attached.
    pub counts: Option<Counts>,
    pub metrics: Option<Metrics>,
    /// Where the run was pinned and observed, when pinned.
    pub placement: Option<Placement>,
}

impl Measurement {
    /// Median time of one run.
    pub fn median(&self) -> Duration {
        Duration::from_nanos(self.summary.median.round() as u64)
    }

    /// GFLOP/s at the median, given the flops of one run.
    pub fn gflops(&self, flops_per_run: f64) -> f64 {
        flops_per_run / self.summary.median
    }

    /// GB/s (10^9 bytes) at the median, given the bytes one run moves.
    pub fn gbytes_per_s(&self, bytes_per_run: f64) -> f64 {
        bytes_per_run / self.summary.median
    }
}

/// Where a measurement is, for a progress display.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeasureProgress {
    /// Still warming up (no sample taken yet).
    pub warming_up: bool,
    pub samples: usize,
    /// Time spent in the current phase.
    pub spent: Duration,
    /// Estimated share of the schedule done, 0..=1: the larger of the
    /// sample and time shares of the minimums (sampling stops when both are
    /// reached, or at the maximums).
    pub fraction: f64,
}

/// Runs closures under a [`MeasureConfig`], timed by a [`Clock`].
pub struct Harness<C: Clock = SystemClock> {
    cfg: MeasureConfig,
    clock: C,
    progress: Option<Box<dyn FnMut(MeasureProgress)>>,
    counters: Option<CounterSet>,
    pin: Option<Vec<usize>>,
    /// Pool workers (TIDs) that run the measured closure's work.
    workers: Vec<i32>,
}

impl Harness<SystemClock> {
    /// A harness on the system clock.
    pub fn new(cfg: MeasureConfig) -> Result<Self, BenchError> {
        Harness::with_clock(cfg, SystemClock::new())
    }
}

impl<C: Clock> Harness<C> {
    /// A harness on any clock (a [`crate::MockClock`] in tests).
    pub fn with_clock(cfg: MeasureConfig, clock: C) -> Result<Self, BenchError> {
        cfg.validate()?;
        Ok(Harness {
            cfg,
            clock,
            counters: None,
            pin: None,
            workers: Vec::new(),
            progress: None,
        })
    }

    /// Calls `f` after the warm-up and after every sample (outside the timed
    /// region), e.g. to draw a progress bar.
    pub fn on_progress(mut self, f: impl FnMut(MeasureProgress) + 'static) -> Self {
        self.progress = Some(Box::new(f));
        self
    }

    /// Reads these counters around every timed region.
    pub fn with_counters(mut self, counters: CounterSet) -> Self {
        self.counters = Some(counters);
        self
    }

    /// Pins the measuring thread to `cpus` for each measurement (restored
    /// afterwards) and records the placement. Call before
    /// [`Harness::attach_counters`] so the counters use that cluster's PMU.
    pub fn pinned(mut self, cpus: Vec<usize>) -> Self {
        self.pin = Some(cpus);
        self
    }

    /// The threads (Linux TIDs) of the pool the measured kernel runs on: a
    /// multi-threaded kernel's work happens on its pool's persistent workers,
    /// not on the measuring thread, so their counters are opened and summed
    /// with the caller's (see `tiletune_pmu::counters`), and when the harness
    /// is [`Harness::pinned`] each worker is pinned to one CPU of the set.
    /// Call before [`Harness::attach_counters`].
    pub fn workers(mut self, tids: Vec<i32>) -> Self {
        self.workers = tids;
        self
    }

    /// Opens counters of `kind` for the pinned CPUs (big.LITTLE: that
    /// cluster's PMU) and attaches them; returns the fallback note, if any.
    pub fn attach_counters(&mut self, kind: EventSetKind) -> Option<FallbackNote> {
        let mut opts = CounterOptions::new(kind).threads(self.workers.clone());
        if let Some(cpus) = &self.pin {
            opts = opts.cpus(cpus.clone());
        }
        let (set, note) = CounterSet::with_options(&opts);
        self.counters = Some(set);
        note
    }

    pub fn config(&self) -> &MeasureConfig {
        &self.cfg
    }

    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The attached counters, if any.
    pub fn counters(&self) -> Option<&CounterSet> {
        self.counters.as_ref()
    }

    /// Measures `f`, one call = one run.
    pub fn measure<F: FnMut()>(&mut self, name: &str, mut f: F) -> Result<Measurement, BenchError> {
        let cfg = self.cfg;
        let mut pin = self.pin.as_deref().map(PinGuard::pin).transpose()?;
        let worker_pin = match &self.pin {
            Some(cpus) if !self.workers.is_empty() => Some(WorkerPin::pin(&self.workers, cpus)?),
            _ => None,
        };
        // 1. Warm-up.
        let t0 = self.clock.now();
        let mut warm = 0u64;
        loop {
            f();
            warm += 1;
            let spent = self.clock.now() - t0;
            let done = warm >= cfg.warmup_runs && spent >= cfg.warmup_time;
            // The run cap only matters for a clock that does not move.
            if done || spent >= cfg.max_time || warm >= MAX_ITERS_PER_SAMPLE {
                break;
            }
        }
        let warm_ns = (self.clock.now() - t0).as_nanos() as f64;
        if let Some(p) = self.progress.as_mut() {
            p(MeasureProgress {
                warming_up: true,
                samples: 0,
                spent: self.clock.now() - t0,
                fraction: 0.0,
            });
        }
        let estimate_ns = warm_ns / warm as f64;

        // 2. Batching.
        let target_ns = cfg.min_sample_time.as_nanos() as f64;
        let iters = if target_ns <= 0.0 {
            1
        } else if estimate_ns <= 0.0 {
            MAX_ITERS_PER_SAMPLE
        } else {
            ((target_ns / estimate_ns).ceil() as u64).clamp(1, MAX_ITERS_PER_SAMPLE)
        };

        // 3. Sampling.
        if let Some(c) = self.counters.as_mut() {
            c.start()?;
        }
        let start = self.clock.now();
        let mut samples = Vec::with_capacity(cfg.min_samples.min(cfg.max_samples));
        let mut exhausted = false;
        loop {
            let s0 = self.clock.now();
            for _ in 0..iters {
                f();
            }
            let s1 = self.clock.now();
            samples.push((s1 - s0).as_nanos() as f64 / iters as f64);
            let spent = s1 - start;
            if let Some(p) = self.progress.as_mut() {
                p(MeasureProgress {
                    warming_up: false,
                    samples: samples.len(),
                    spent,
                    fraction: schedule_fraction(&cfg, samples.len(), spent),
                });
            }
            if samples.len() >= cfg.min_samples && spent >= cfg.min_time {
                break;
            }
            if samples.len() >= cfg.max_samples || spent >= cfg.max_time {
                exhausted = true;
                break;
            }
        }
        let elapsed_ns = (self.clock.now() - start).as_nanos() as f64;
        let runs = samples.len() as u64 * iters;
        let counts = match self.counters.as_mut() {
            Some(c) => Some(c.stop()?.per_run(runs)),
            None => None,
        };
        let placement = pin.as_mut().map(|g| {
            g.observe();
            let mut p = g.placement().clone();
            p.workers = worker_pin
                .as_ref()
                .map(|w| w.assigned().to_vec())
                .unwrap_or_default();
            p
        });
        drop(worker_pin);
        drop(pin);
        let summary = Summary::of(&samples).expect("at least one sample is always taken");
        Ok(Measurement {
            name: name.to_string(),
            samples_ns: samples,
            iters_per_sample: iters,
            runs,
            warmup_runs: warm,
            elapsed_ns,
            summary,
            budget_exhausted: exhausted,
            metrics: counts.as_ref().map(Metrics::from_counts),
            counts,
            placement,
        })
    }
}

/// How far sampling is, 0..=1: it ends when both minimums are met (so the
/// smaller share is what remains) or when either maximum is hit.
fn schedule_fraction(cfg: &MeasureConfig, samples: usize, spent: Duration) -> f64 {
    let share = |a: f64, b: f64| if b > 0.0 { (a / b).min(1.0) } else { 1.0 };
    let to_min = share(samples as f64, cfg.min_samples as f64)
        .min(share(spent.as_secs_f64(), cfg.min_time.as_secs_f64()));
    let to_max = share(samples as f64, cfg.max_samples as f64)
        .max(share(spent.as_secs_f64(), cfg.max_time.as_secs_f64()));
    to_min.max(to_max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::MockClock;
    use tiletune_pmu::EventSetKind;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn schedule_batches_short_runs_and_meets_both_minimums() {
        let clock = MockClock::new();
        let cfg = MeasureConfig::default()
            .warmup(5, us(20))
            .min(20, Duration::from_millis(1))
            .max(10_000, Duration::from_secs(1))
            .min_sample_time(us(10));
        let mut h = Harness::with_clock(cfg, clock.clone()).unwrap();
        let handle = clock.clone();
        let mut calls = 0u64;
        let m = h
            .measure("1us", || {
                handle.advance(us(1));
                calls += 1;
            })
            .unwrap();
        // Warm-up: 20 runs of 1 us reach both 5 runs and 20 us.
        assert_eq!(m.warmup_runs, 20);
        assert_eq!(m.iters_per_sample, 10);
        // 10 us per sample, 1 ms minimum -> 100 samples (> 20).
        assert_eq!(m.samples_ns.len(), 100);
        assert_eq!(m.runs, 1000);
        assert_eq!(calls, 1020);
        assert!(!m.budget_exhausted);
        assert_eq!(m.summary.median, 1000.0);
        assert_eq!(m.summary.mad, 0.0);
        assert_eq!((m.summary.ci95_low, m.summary.ci95_high), (1000.0, 1000.0));
        assert_eq!(m.median(), us(1));
        assert_eq!(m.gflops(2000.0), 2.0);
        assert_eq!(m.elapsed_ns, 1_000_000.0);
    }

    #[test]
    fn progress_is_reported_per_sample_and_reaches_one() {
        let clock = MockClock::new();
        let cfg = MeasureConfig::default()
            .warmup(1, Duration::ZERO)
            .min(4, us(40))
            .min_sample_time(Duration::ZERO);
        let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let sink = seen.clone();
        let mut h = Harness::with_clock(cfg, clock.clone())
            .unwrap()
            .on_progress(move |p| sink.borrow_mut().push(p));
        let handle = clock.clone();
        let m = h.measure("10us", || handle.advance(us(10))).unwrap();
        let seen = seen.borrow();
        // Warm-up, then one report per sample.
        assert_eq!(seen.len(), 1 + m.samples_ns.len());
        assert!(seen[0].warming_up);
        let f: Vec<f64> = seen[1..].iter().map(|p| p.fraction).collect();
        assert!(f.windows(2).all(|w| w[0] <= w[1]), "{f:?}");
        assert_eq!(*f.last().unwrap(), 1.0);
        assert_eq!(f[0], 0.25);
    }

    #[test]
    fn scripted_durations_give_exact_statistics_and_outliers() {
        let clock = MockClock::new();
        let cfg = MeasureConfig::default()
            .warmup(1, Duration::ZERO)
            .min(9, Duration::ZERO)
            .min_sample_time(Duration::ZERO);
        let mut h = Harness::with_clock(cfg, clock.clone()).unwrap();
        // First value is the warm-up run; then 9 samples, one far outlier.
        let script = [500u64, 100, 101, 99, 100, 102, 98, 100, 400, 101];
        let mut i = 0;
        let handle = clock.clone();
        let m = h
            .measure("scripted", || {
                handle.advance_ns(script[i]);
                i += 1;
            })
            .unwrap();
        assert_eq!(m.warmup_runs, 1);
        assert_eq!(m.iters_per_sample, 1);
        assert_eq!(
            m.samples_ns,
            [100., 101., 99., 100., 102., 98., 100., 400., 101.]
        );
        assert_eq!(m.summary.median, 100.0);
        assert_eq!(m.summary.mad, 1.0);
        assert_eq!(m.summary.min, 98.0);
        assert_eq!(m.summary.max, 400.0);
        assert_eq!(m.summary.outliers, vec![7]);
        assert!(m.summary.ci_exact);
    }

    #[test]
    fn slow_runs_stop_at_the_time_budget_and_say_so() {
        let clock = MockClock::new();
        let cfg = MeasureConfig::default()
            .warmup(3, Duration::ZERO)
            .min(10, Duration::from_secs(1))
            .max(100, Duration::from_secs(3));
        let mut h = Harness::with_clock(cfg, clock.clone()).unwrap();
        let handle = clock.clone();
        let m = h
            .measure("1s", || handle.advance(Duration::from_secs(1)))
            .unwrap();
        assert_eq!(m.warmup_runs, 3);
        assert_eq!(m.iters_per_sample, 1);
        assert_eq!(m.samples_ns.len(), 3);
        assert!(m.budget_exhausted);
        // A clock that never moves ends at max_samples instead of spinning.
        let frozen = MockClock::new();
        let cfg = MeasureConfig::default()
            .warmup(2, Duration::ZERO)
            .min(1, Duration::from_millis(1))
            .max(3, Duration::from_secs(5));
        let mut h = Harness::with_clock(cfg, frozen).unwrap();
        let mut n = 0u64;
        let m = h.measure("free", || n += 1).unwrap();
        assert_eq!(m.samples_ns.len(), 3);
        assert_eq!(m.iters_per_sample, MAX_ITERS_PER_SAMPLE);
        assert!(m.budget_exhausted);
    }

    #[test]
    fn invalid_configs_are_rejected() {
        for cfg in [
            MeasureConfig::default().min(0, Duration::ZERO),
            MeasureConfig::default().max(1, Duration::from_secs(5)),
            MeasureConfig::default().max(100, Duration::from_millis(1)),
        ] {
            assert!(Harness::with_clock(cfg, MockClock::new()).is_err());
        }
    }

    #[test]
    fn real_clock_with_counters_reports_per_run_counts() {
        let (set, _note) = CounterSet::new(EventSetKind::Software);
        let mut h = Harness::new(MeasureConfig::quick())
            .unwrap()
            .with_counters(set);
        let mut x = 1u64;
        let m = h
            .measure("spin", || {
                for i in 0..200 {
                    x = std::hint::black_box(x.wrapping_mul(3).wrapping_add(i));
                }
            })
            .unwrap();
        assert!(m.samples_ns.len() >= 7);
        assert!(m.summary.median > 0.0);
        assert!(m.summary.min <= m.summary.median && m.summary.median <= m.summary.max);
        let c = m.counts.as_ref().unwrap();
        let per_run = c.get("task-clock").unwrap();
        // Per-run CPU time is of the order of the per-run wall time.
        assert!(
            per_run > 0.0 && per_run < 100.0 * m.summary.max,
            "{per_run}"
        );
        assert!(m.metrics.unwrap().task_clock_ns.is_some());
        assert_eq!(m.placement, None);
    }

    #[test]
    fn pinned_measurements_record_placement_and_restore_affinity() {
        let before = crate::pin::affinity().unwrap();
        let cpu = before[0];
        let mut h = Harness::new(MeasureConfig::quick())
            .unwrap()
            .pinned(vec![cpu]);
        let note = h.attach_counters(EventSetKind::Auto);
        let m = h
            .measure("pinned", || {
                std::hint::black_box((0..100u32).sum::<u32>());
            })
            .unwrap();
        let p = m.placement.as_ref().unwrap();
        assert_eq!(p.pinned_to, vec![cpu]);
        assert!(p.honoured(), "{p:?}");
        assert_eq!(crate::pin::affinity().unwrap(), before);
        // Counts come either from hardware or from the fallback it announced.
        let c = m.counts.unwrap();
        match c.backend {
            tiletune_pmu::Backend::Hardware { .. } => assert!(note.is_none()),
            _ => assert!(note.is_some()),
        }
        // Pinning to a CPU outside the set is an error, not a silent no-op.
        let mut h = Harness::new(MeasureConfig::quick()).unwrap().pinned(vec![]);
        assert!(h.measure("bad", || {}).is_err());
    }
}
