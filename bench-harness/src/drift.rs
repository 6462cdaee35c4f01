//! Drift guard: during a long sweep, re-measure a fixed reference kernel every
//! `interval` measurements and flag when its median moved more than
//! `threshold` from the baseline taken at the start. Phones and laptops
//! throttle: a tuning result taken while the reference ran 10% slower is
//! recorded as such instead of silently winning or losing.

use crate::clock::Clock;
use crate::error::BenchError;
use crate::measure::{Harness, MeasureConfig};
use serde::{Deserialize, Serialize};
use std::hint::black_box;
use std::time::Duration;

/// Iterations of [`reference_kernel`]; 4 chains × 2 flops each per iteration.
pub const REFERENCE_ITERS: usize = 8192;

/// The fixed reference: four independent multiply-add chains of known length,
/// register-resident (no memory traffic), so its time tracks the core clock.
/// `black_box` on the inputs keeps the compiler from folding the loop.
pub fn reference_kernel() -> f32 {
    let m = black_box(0.999_999_f32);
    let c = black_box(1.0e-3_f32);
    let mut acc = [0.0f32, 0.25, 0.5, 0.75];
    for _ in 0..REFERENCE_ITERS {
        for a in &mut acc {
            *a = *a * m + c;
        }
    }
    black_box(acc.iter().sum())
}

/// When and how strictly to check.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DriftConfig {
    /// Check after every `interval` ticks (measurements); 0 disables ticks.
    pub interval: usize,
    /// Relative change of the reference median that counts as drift.
    pub threshold: f64,
    /// How each reference measurement is taken.
    pub measure: MeasureConfig,
}

impl Default for DriftConfig {
    fn default() -> Self {
        DriftConfig {
            interval: 20,
            threshold: 0.05,
            measure: MeasureConfig::default()
                .warmup(2, Duration::from_millis(2))
                .min(11, Duration::from_millis(20))
                .max(500, Duration::from_millis(200)),
        }
    }
}

/// One re-measurement of the reference.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DriftCheck {
    /// Tick count when the check ran.
    pub at_tick: usize,
    pub median_ns: f64,
    /// `median / baseline`.
    pub ratio: f64,
    pub drifted: bool,
}

/// The guard's record, attached to a sweep's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriftReport {
    pub baseline_ns: f64,
    pub threshold: f64,
    pub checks: Vec<DriftCheck>,
    /// Any check drifted.
    pub drifted: bool,
    /// Largest |ratio − 1| seen.
    pub max_deviation: f64,
}

/// Re-measures `reference` during a sweep.
pub struct DriftGuard<C: Clock, F: FnMut()> {
    harness: Harness<C>,
    reference: F,
    cfg: DriftConfig,
    baseline_ns: f64,
    ticks: usize,
    checks: Vec<DriftCheck>,
}

impl<C: Clock, F: FnMut()> DriftGuard<C, F> {
    /// Measures the baseline now.
    pub fn new(clock: C, cfg: DriftConfig, mut reference: F) -> Result<Self, BenchError> {
        if cfg.threshold.is_nan() || cfg.threshold <= 0.0 {
            return Err(BenchError::InvalidConfig {
                reason: format!("drift threshold must be > 0, got {}", cfg.threshold),
            });
        }
        let mut harness = Harness::with_clock(cfg.measure, clock)?;
        let baseline_ns = harness
            .measure("drift-reference", &mut reference)?
            .summary
            .median;
        Ok(DriftGuard {
            harness,
            reference,
            cfg,
            baseline_ns,
            ticks: 0,
            checks: Vec::new(),
        })
    }

    pub fn baseline_ns(&self) -> f64 {
        self.baseline_ns
    }

    /// Counts one measurement of the sweep; every `interval` ticks the
    /// reference is re-measured and the check returned.
    pub fn tick(&mut self) -> Result<Option<DriftCheck>, BenchError> {
        self.ticks += 1;
        if self.cfg.interval == 0 || !self.ticks.is_multiple_of(self.cfg.interval) {
            return Ok(None);
        }
        self.check_now().map(Some)
    }

    /// Re-measures the reference now.
    pub fn check_now(&mut self) -> Result<DriftCheck, BenchError> {
        let m = self
            .harness
            .measure("drift-reference", &mut self.reference)?;
        let median = m.summary.median;
        let ratio = if self.baseline_ns > 0.0 {
            median / self.baseline_ns
        } else {
            f64::NAN
        };
        let check = DriftCheck {
            at_tick: self.ticks,
            median_ns: median,
            ratio,
            drifted: ratio.is_nan() || (ratio - 1.0).abs() > self.cfg.threshold,
        };
        self.checks.push(check);
        Ok(check)
    }

    /// Everything seen so far.
    pub fn report(&self) -> DriftReport {
        DriftReport {
            baseline_ns: self.baseline_ns,
            threshold: self.cfg.threshold,
            checks: self.checks.clone(),
            drifted: self.checks.iter().any(|c| c.drifted),
            max_deviation: self
                .checks
                .iter()
                .map(|c| (c.ratio - 1.0).abs())
                .fold(0.0, f64::max),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{MockClock, SystemClock};
    use std::cell::Cell;
    use std::rc::Rc;

    #[test]
    fn flags_only_changes_beyond_the_threshold() {
        let clock = MockClock::new();
        let cost = Rc::new(Cell::new(1000u64));
        let (h, c) = (clock.clone(), cost.clone());
        let cfg = DriftConfig {
            interval: 3,
            ..DriftConfig::default()
        };
        let mut g = DriftGuard::new(clock, cfg, move || h.advance_ns(c.get())).unwrap();
        assert_eq!(g.baseline_ns(), 1000.0);
        assert_eq!(g.tick().unwrap(), None);
        assert_eq!(g.tick().unwrap(), None);
        let first = g.tick().unwrap().expect("third tick checks");
        assert_eq!((first.at_tick, first.ratio, first.drifted), (3, 1.0, false));
        // Throttled: 6% slower.
        cost.set(1060);
        g.tick().unwrap();
        g.tick().unwrap();
        let hot = g.tick().unwrap().unwrap();
        assert!(hot.drifted && (hot.ratio - 1.06).abs() < 1e-12, "{hot:?}");
        // 3% slower is within 5%.
        cost.set(1030);
        let ok = g.check_now().unwrap();
        assert!(!ok.drifted);
        // Faster counts too (a turbo boost on the baseline is drift as well).
        cost.set(900);
        assert!(g.check_now().unwrap().drifted);
        let r = g.report();
        assert!(r.drifted);
        assert_eq!(r.checks.len(), 4);
        assert!((r.max_deviation - 0.1).abs() < 1e-12);
        assert_eq!(r.threshold, 0.05);
    }

    #[test]
    fn bad_threshold_is_rejected_and_the_real_reference_runs() {
        let cfg = DriftConfig {
            threshold: 0.0,
            ..DriftConfig::default()
        };
        assert!(DriftGuard::new(MockClock::new(), cfg, || {}).is_err());
        // Expected value of one chain: x_{n+1} = x_n * m + c, computed the same way.
        let (m, c) = (0.999_999_f32, 1.0e-3_f32);
        let want: f32 = [0.0f32, 0.25, 0.5, 0.75]
            .iter()
            .map(|&x0| (0..REFERENCE_ITERS).fold(x0, |x, _| x * m + c))
            .sum();
        assert_eq!(reference_kernel(), want);
        let cfg = DriftConfig {
            measure: MeasureConfig::quick(),
            ..DriftConfig::default()
        };
        let mut g = DriftGuard::new(SystemClock::new(), cfg, || {
            black_box(reference_kernel());
        })
        .unwrap();
        assert!(g.baseline_ns() > 0.0);
        assert!(g.check_now().unwrap().ratio > 0.0);
    }
}
