//! The result of one counting window: raw and multiplex-scaled values per
//! event, which backend produced them, and whether any were multiplexed.
//!
//! Multiplexing: when more groups are open than the PMU can hold at once, the
//! kernel rotates them and reports for each group `time_enabled` (the window)
//! and `time_running` (how long it actually counted). The estimate for the
//! whole window is `raw * time_enabled / time_running`, the scaling `perf stat`
//! applies; a value with `time_running < time_enabled` is flagged because it is
//! an extrapolation, and a group that never ran has no value at all.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Which mechanism produced the counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Backend {
    /// Hardware counters through `perf_event_open` on the named PMU.
    Hardware { pmu: String },
    /// Kernel software events through `perf_event_open`.
    PerfSoftware,
    /// `getrusage(RUSAGE_THREAD)` + the thread CPU clock, when
    /// `perf_event_open` itself is unavailable (seccomp, qemu-user: ENOSYS).
    Rusage,
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Hardware { pmu } => write!(f, "hardware ({pmu})"),
            Backend::PerfSoftware => f.write_str("perf software events"),
            Backend::Rusage => f.write_str("getrusage"),
        }
    }
}

/// One event's value over the window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CounterValue {
    /// What the counter read.
    pub raw: u64,
    /// `raw` scaled to the whole window (equal to `raw` when not multiplexed).
    pub scaled: f64,
    pub time_enabled_ns: u64,
    pub time_running_ns: u64,
    /// The group was not on the PMU for the whole window.
    pub multiplexed: bool,
}

impl CounterValue {
    /// A value counted for the whole window.
    pub fn exact(raw: u64) -> CounterValue {
        CounterValue {
            raw,
            scaled: raw as f64,
            time_enabled_ns: 0,
            time_running_ns: 0,
            multiplexed: false,
        }
    }

    /// Scales a raw reading by `enabled / running`; `None` if the group never ran.
    pub fn scaled_from(raw: u64, enabled_ns: u64, running_ns: u64) -> Option<CounterValue> {
        if running_ns == 0 {
            return None;
        }
        let multiplexed = running_ns < enabled_ns;
        let scaled = if multiplexed {
            raw as f64 * enabled_ns as f64 / running_ns as f64
        } else {
            raw as f64
        };
        Some(CounterValue {
            raw,
            scaled,
            time_enabled_ns: enabled_ns,
            time_running_ns: running_ns,
            multiplexed,
        })
    }
}

/// Counts of one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    pub backend: Backend,
    /// Pipeline slots per cycle of the PMU, for top-down.
    pub slots: Option<u32>,
    pub values: BTreeMap<String, CounterValue>,
    /// Events that were planned but produced no value (group never scheduled).
    pub missing: Vec<String>,
    /// Caveats of this window: events the PMU refused, a run that could
    /// migrate across clusters' PMUs.
    #[serde(default)]
    pub notes: Vec<String>,
    /// Threads whose counts are summed here (the caller plus the workers it
    /// was given); 0 in records from before threads were counted.
    #[serde(default)]
    pub threads: usize,
}

impl Counts {
    /// No values yet.
    pub fn empty(backend: Backend) -> Counts {
        Counts {
            backend,
            slots: None,
            values: BTreeMap::new(),
            missing: Vec::new(),
            notes: Vec::new(),
            threads: 1,
        }
    }

    /// Adds `v` to the value of `name` (summing the threads of one window).
    pub fn accumulate(&mut self, name: &str, v: CounterValue) {
        match self.values.get_mut(name) {
            Some(old) => {
                old.raw += v.raw;
                old.scaled += v.scaled;
                old.time_enabled_ns += v.time_enabled_ns;
                old.time_running_ns += v.time_running_ns;
                old.multiplexed |= v.multiplexed;
            }
            None => {
                self.values.insert(name.to_string(), v);
            }
        }
    }

    /// Records an exactly counted value.
    pub fn insert_exact(&mut self, name: &str, raw: u64) {
        self.values
            .insert(name.to_string(), CounterValue::exact(raw));
    }

    /// The scaled value of an event, if counted.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.values.get(name).map(|v| v.scaled)
    }

    /// Whether any value is an extrapolation from a multiplexed group.
    pub fn multiplexed(&self) -> bool {
        self.values.values().any(|v| v.multiplexed)
    }

    /// The same counts divided by `runs` (per-run averages); `runs = 0` is
    /// treated as 1.
    pub fn per_run(&self, runs: u64) -> Counts {
        let d = runs.max(1) as f64;
        let mut out = self.clone();
        for v in out.values.values_mut() {
            v.scaled /= d;
            v.raw /= runs.max(1);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_flags_multiplexing() {
        let v = CounterValue::scaled_from(100, 1000, 1000).unwrap();
        assert!(!v.multiplexed);
        assert_eq!(v.scaled, 100.0);
        let v = CounterValue::scaled_from(100, 1000, 250).unwrap();
        assert!(v.multiplexed);
        assert_eq!(v.scaled, 400.0);
        assert_eq!(CounterValue::scaled_from(100, 1000, 0), None);
    }

    #[test]
    fn per_run_and_serde_round_trip() {
        let mut c = Counts::empty(Backend::Hardware {
            pmu: "armv8_cortex_a76".into(),
        });
        c.insert_exact("CPU_CYCLES", 1000);
        c.values.insert(
            "INST_RETIRED".into(),
            CounterValue::scaled_from(500, 10, 5).unwrap(),
        );
        assert!(c.multiplexed());
        let p = c.per_run(10);
        assert_eq!(p.get("CPU_CYCLES"), Some(100.0));
        assert_eq!(p.get("INST_RETIRED"), Some(100.0));
        let json = serde_json::to_string(&c).unwrap();
        let back: Counts = serde_json::from_str(&json).unwrap();
        assert_eq!(back, c);
        assert!(json.contains("\"kind\":\"hardware\""));
    }

    #[test]
    fn accumulate_sums_threads_and_keeps_the_multiplex_flag() {
        let mut c = Counts::empty(Backend::PerfSoftware);
        c.accumulate("task-clock", CounterValue::exact(10));
        c.accumulate("task-clock", CounterValue::scaled_from(5, 10, 5).unwrap());
        let v = c.values["task-clock"];
        assert_eq!((v.raw, v.scaled), (15, 20.0));
        assert!(v.multiplexed);
        // Records written before `threads` existed still parse.
        let old = r#"{"backend":{"kind":"perf_software"},"slots":null,"values":{},"missing":[]}"#;
        assert_eq!(serde_json::from_str::<Counts>(old).unwrap().threads, 0);
    }
}
