//! A miniature sweep the way the tuner drives the harness: cold-cache inputs,
//! counters, a drift guard between measurements, and the environment record.

use std::cell::Cell;
use std::hint::black_box;
use tiletune_bench::drift::reference_kernel;
use tiletune_bench::{
    DriftConfig, DriftGuard, Environment, Harness, MeasureConfig, Rotation, SystemClock,
};
use tiletune_pmu::EventSetKind;

#[test]
fn cold_sweep_with_counters_and_drift_guard() {
    let llc = 64 << 10;
    let len = 2048; // 8 KiB of f32 per copy
    let visits: Vec<Cell<u64>> = (0..64).map(|_| Cell::new(0)).collect();
    let mut rot = Rotation::cold(len * 4, llc, |i| (i, vec![i as f32; len]));
    // 2 × 64 KiB / 8 KiB = 16 others + 1.
    assert_eq!(rot.len(), 17);
    assert!(rot.info().total_bytes >= 2 * llc);

    let mut harness = Harness::new(MeasureConfig::quick()).unwrap();
    let note = harness.attach_counters(EventSetKind::Auto);
    if let Some(n) = &note {
        assert!(!n.reason.is_empty());
    }
    let drift_cfg = DriftConfig {
        interval: 2,
        measure: MeasureConfig::quick(),
        ..DriftConfig::default()
    };
    let mut guard = DriftGuard::new(SystemClock::new(), drift_cfg, || {
        black_box(reference_kernel());
    })
    .unwrap();

    let mut results = Vec::new();
    for scale in [1.0f32, 2.0, 3.0, 4.0] {
        let m = harness
            .measure(&format!("scaled-sum x{scale}"), || {
                let (i, v) = rot.next();
                visits[*i].set(visits[*i].get() + 1);
                black_box(v.iter().map(|x| x * scale).sum::<f32>());
            })
            .unwrap();
        guard.tick().unwrap();
        results.push(m);
    }

    // Every copy was used, round-robin, so the counts differ by at most one.
    let used: Vec<u64> = visits[..rot.len()].iter().map(Cell::get).collect();
    let (lo, hi) = (used.iter().min().unwrap(), used.iter().max().unwrap());
    assert!(*lo > 0 && hi - lo <= 1, "{used:?}");
    assert!(visits[rot.len()..].iter().all(|v| v.get() == 0));
    let total_runs: u64 = results.iter().map(|m| m.runs + m.warmup_runs).sum();
    assert_eq!(used.iter().sum::<u64>(), total_runs);

    for m in &results {
        assert!(m.summary.n >= 7 || m.budget_exhausted);
        assert!(m.summary.ci95_low <= m.summary.median && m.summary.median <= m.summary.ci95_high);
        let c = m.counts.as_ref().expect("counters attached");
        assert!(!c.values.is_empty(), "{c:?}");
    }
    let report = guard.report();
    assert_eq!(report.checks.len(), 2);
    assert!(report.baseline_ns > 0.0);

    let env = Environment::capture("test-soc", "0.1.0", Some("abc"));
    assert_eq!(env.soc_fingerprint, "test-soc");
    assert!(env.timestamp > 0);
}
