//! Derived metrics: ratios computed from raw (multiplex-scaled) counts.
//!
//! Every metric is `None` when an event it needs was not counted (or counted
//! zero in its denominator), never a made-up number. Formulas:
//!
//! - IPC = `INST_RETIRED / CPU_CYCLES` (x86: `instructions / cycles`).
//! - L1D miss rate = `L1D_CACHE_REFILL / L1D_CACHE`
//!   (x86: `L1-dcache-load-misses / L1-dcache-loads`); L2 miss rate =
//!   `L2D_CACHE_REFILL / L2D_CACHE`; x86 LLC miss rate =
//!   `cache-misses / cache-references`. These follow the `l1d_cache_miss_ratio`
//!   / `l2_cache_miss_ratio` metrics of Linux
//!   `tools/perf/pmu-events/arch/arm64/arm/*/metrics.json`.
//! - Branch MPKI = `1000 * BR_MIS_PRED / INST_RETIRED`
//!   (x86: `1000 * branch-misses / instructions`).
//! - Frontend / backend stall share = `STALL_FRONTEND / CPU_CYCLES`,
//!   `STALL_BACKEND / CPU_CYCLES` (cycles with no operation issued, Arm ARM
//!   D11 event descriptions).
//! - SIMD share = `ASE_SPEC / INST_SPEC` (speculatively executed Advanced
//!   SIMD operations over all speculatively executed instructions).
//! - Arm top-down level 1, from Linux `tools/perf/pmu-events/arch/arm64/sbsa.json`
//!   (the SBSA/Arm "TopdownL1" metric group, following Arm's Neoverse
//!   telemetry / top-down methodology), with `S = slots * CPU_CYCLES`:
//!   - frontend bound = `STALL_SLOT_FRONTEND / S`
//!   - backend bound = `STALL_SLOT_BACKEND / S`
//!   - bad speculation = `(1 - OP_RETIRED / OP_SPEC) * (1 - STALL_SLOT / S)`
//!   - retiring = `(OP_RETIRED / OP_SPEC) * (1 - STALL_SLOT / S)`
//!
//!   `slots` is read from `/sys/bus/event_source/devices/<pmu>/caps/slots`.

use crate::counts::Counts;
use serde::{Deserialize, Serialize};

/// Arm top-down level 1 fractions of all issue slots (each in `[0, 1]` up to
/// counting noise; they sum to ~1).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TopDown {
    pub frontend_bound: f64,
    pub backend_bound: f64,
    pub bad_speculation: f64,
    pub retiring: f64,
}

/// Metrics derived from one [`Counts`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    pub ipc: Option<f64>,
    pub l1d_miss_rate: Option<f64>,
    pub l2_miss_rate: Option<f64>,
    pub llc_miss_rate: Option<f64>,
    pub branch_mpki: Option<f64>,
    pub frontend_stall_share: Option<f64>,
    pub backend_stall_share: Option<f64>,
    pub simd_share: Option<f64>,
    pub topdown: Option<TopDown>,
    /// CPU time of the counted thread(s) in ns (`task-clock`).
    pub task_clock_ns: Option<f64>,
}

fn ratio(num: Option<f64>, den: Option<f64>) -> Option<f64> {
    match (num, den) {
        (Some(n), Some(d)) if d > 0.0 && n.is_finite() && d.is_finite() => Some(n / d),
        _ => None,
    }
}

impl Metrics {
    /// Computes every metric whose events are present in `c`.
    pub fn from_counts(c: &Counts) -> Metrics {
        let g = |name: &str| c.get(name);
        let either = |a: &str, b: &str| g(a).or_else(|| g(b));
        let cycles = either("CPU_CYCLES", "cycles");
        let insts = either("INST_RETIRED", "instructions");
        let topdown = c.slots.and_then(|slots| {
            let s = cycles? * f64::from(slots);
            let fe = ratio(g("STALL_SLOT_FRONTEND"), Some(s))?;
            let be = ratio(g("STALL_SLOT_BACKEND"), Some(s))?;
            let stalled = ratio(g("STALL_SLOT"), Some(s))?;
            let retired_frac = ratio(g("OP_RETIRED"), g("OP_SPEC"))?;
            Some(TopDown {
                frontend_bound: fe,
                backend_bound: be,
                bad_speculation: (1.0 - retired_frac) * (1.0 - stalled),
                retiring: retired_frac * (1.0 - stalled),
            })
        });
        Metrics {
            ipc: ratio(insts, cycles),
            l1d_miss_rate: ratio(g("L1D_CACHE_REFILL"), g("L1D_CACHE"))
                .or_else(|| ratio(g("L1-dcache-load-misses"), g("L1-dcache-loads"))),
            l2_miss_rate: ratio(g("L2D_CACHE_REFILL"), g("L2D_CACHE")),
            llc_miss_rate: ratio(g("cache-misses"), g("cache-references")),
            branch_mpki: ratio(either("BR_MIS_PRED", "branch-misses"), insts).map(|r| r * 1000.0),
            frontend_stall_share: ratio(g("STALL_FRONTEND"), cycles),
            backend_stall_share: ratio(g("STALL_BACKEND"), cycles),
            simd_share: ratio(g("ASE_SPEC"), g("INST_SPEC")),
            topdown,
            task_clock_ns: g("task-clock"),
        }
    }

    /// `(name, value)` pairs of the metrics that are present, for tables.
    pub fn present(&self) -> Vec<(&'static str, f64)> {
        let mut v = Vec::new();
        let mut push = |n, x: Option<f64>| {
            if let Some(x) = x {
                v.push((n, x));
            }
        };
        push("ipc", self.ipc);
        push("l1d_miss_rate", self.l1d_miss_rate);
        push("l2_miss_rate", self.l2_miss_rate);
        push("llc_miss_rate", self.llc_miss_rate);
        push("branch_mpki", self.branch_mpki);
        push("frontend_stall_share", self.frontend_stall_share);
        push("backend_stall_share", self.backend_stall_share);
        push("simd_share", self.simd_share);
        if let Some(t) = self.topdown {
            push("topdown_frontend_bound", Some(t.frontend_bound));
            push("topdown_backend_bound", Some(t.backend_bound));
            push("topdown_bad_speculation", Some(t.bad_speculation));
            push("topdown_retiring", Some(t.retiring));
        }
        push("task_clock_ns", self.task_clock_ns);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::Metrics;
    use crate::counts::{Backend, Counts};

    fn counts(pairs: &[(&str, f64)], slots: Option<u32>) -> Counts {
        let mut c = Counts::empty(Backend::PerfSoftware);
        c.slots = slots;
        for (n, v) in pairs {
            c.insert_exact(n, *v as u64);
        }
        c
    }

    fn close(a: Option<f64>, b: f64) {
        let a = a.expect("metric missing");
        assert!((a - b).abs() < 1e-12, "{a} vs {b}");
    }

    #[test]
    fn arm_ratios_on_synthetic_counts() {
        let c = counts(
            &[
                ("CPU_CYCLES", 1000.0),
                ("INST_RETIRED", 2500.0),
                ("L1D_CACHE", 800.0),
                ("L1D_CACHE_REFILL", 40.0),
                ("L2D_CACHE", 50.0),
                ("L2D_CACHE_REFILL", 5.0),
                ("BR_MIS_PRED", 5.0),
                ("STALL_FRONTEND", 100.0),
                ("STALL_BACKEND", 300.0),
                ("INST_SPEC", 3000.0),
                ("ASE_SPEC", 750.0),
            ],
            None,
        );
        let m = Metrics::from_counts(&c);
        close(m.ipc, 2.5);
        close(m.l1d_miss_rate, 0.05);
        close(m.l2_miss_rate, 0.1);
        close(m.branch_mpki, 2.0);
        close(m.frontend_stall_share, 0.1);
        close(m.backend_stall_share, 0.3);
        close(m.simd_share, 0.25);
        assert_eq!(m.topdown, None, "no slots, no top-down");
        assert_eq!(m.llc_miss_rate, None);
    }

    #[test]
    fn topdown_level1_formulas() {
        // 4 slots * 1000 cycles = 4000 slots; 1000 stalled (400 FE, 600 BE);
        // 2700 of 3000 speculated ops retired.
        let c = counts(
            &[
                ("CPU_CYCLES", 1000.0),
                ("STALL_SLOT", 1000.0),
                ("STALL_SLOT_FRONTEND", 400.0),
                ("STALL_SLOT_BACKEND", 600.0),
                ("OP_SPEC", 3000.0),
                ("OP_RETIRED", 2700.0),
            ],
            Some(4),
        );
        let t = Metrics::from_counts(&c).topdown.expect("top-down");
        assert!((t.frontend_bound - 0.1).abs() < 1e-12);
        assert!((t.backend_bound - 0.15).abs() < 1e-12);
        assert!((t.bad_speculation - 0.1 * 0.75).abs() < 1e-12);
        assert!((t.retiring - 0.9 * 0.75).abs() < 1e-12);
        // With consistent counts the four parts add up to one.
        let sum = t.frontend_bound + t.backend_bound + t.bad_speculation + t.retiring;
        assert!((sum - 1.0).abs() < 1e-12, "{sum}");
        // A missing event disables top-down instead of inventing it.
        let mut c2 = c.clone();
        c2.values.remove("OP_SPEC");
        assert_eq!(Metrics::from_counts(&c2).topdown, None);
    }

    #[test]
    fn x86_and_software_ratios() {
        let c = counts(
            &[
                ("cycles", 2000.0),
                ("instructions", 1000.0),
                ("branch-misses", 3.0),
                ("L1-dcache-loads", 400.0),
                ("L1-dcache-load-misses", 4.0),
                ("cache-references", 10.0),
                ("cache-misses", 2.0),
                ("task-clock", 12345.0),
            ],
            None,
        );
        let m = Metrics::from_counts(&c);
        close(m.ipc, 0.5);
        close(m.branch_mpki, 3.0);
        close(m.l1d_miss_rate, 0.01);
        close(m.llc_miss_rate, 0.2);
        close(m.task_clock_ns, 12345.0);
        assert_eq!(m.simd_share, None);
        let names: Vec<_> = m.present().iter().map(|p| p.0).collect();
        assert_eq!(
            names,
            [
                "ipc",
                "l1d_miss_rate",
                "llc_miss_rate",
                "branch_mpki",
                "task_clock_ns"
            ]
        );
    }

    #[test]
    fn zero_denominators_give_none() {
        let c = counts(&[("CPU_CYCLES", 0.0), ("INST_RETIRED", 10.0)], Some(4));
        let m = Metrics::from_counts(&c);
        assert_eq!(m.ipc, None);
        assert_eq!(m.topdown, None);
    }
}
