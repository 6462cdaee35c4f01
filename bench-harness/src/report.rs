//! [`KernelReport`]: everything one timed kernel configuration reports (the
//! problem, the candidate, its validation against the scalar reference, the
//! measurement and where it sits under this machine's ceilings), and the
//! text `tiletune bench <family>` prints from it (`--json` prints it as is).

use crate::roofline::{Arithmetic, Roofline};
use crate::{Environment, Measurement};
use serde::Serialize;
use std::io::Write;

/// Everything one `bench <family>` run reports.
#[derive(Debug, Serialize)]
pub struct KernelReport {
    pub problem: String,
    pub isa: String,
    pub params: serde_json::Value,
    pub threads: usize,
    /// The `--placement` name, when one was given.
    pub placement: Option<String>,
    pub cold: bool,
    pub soc: String,
    pub soc_fingerprint: String,
    /// Validation error against the scalar reference and its tolerance.
    pub validation_error: f32,
    pub tolerance: f32,
    pub bytes_per_run: u64,
    pub flops_per_run: u64,
    /// Whether `flops_per_run` and `gflops` count f32 FLOPs or int8 ops.
    pub arithmetic: Arithmetic,
    /// GFLOP/s, or GOP/s for int8 work.
    pub gflops: Option<f64>,
    pub gbytes_per_s: f64,
    pub roofline: Roofline,
    pub counters_note: Option<String>,
    pub quick: bool,
    pub environment: Environment,
    pub measurement: Measurement,
}

/// A duration in ns with the unit that keeps it readable.
fn ns(x: f64) -> String {
    if x >= 1e9 {
        format!("{:.3} s", x / 1e9)
    } else if x >= 1e6 {
        format!("{:.3} ms", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.3} µs", x / 1e3)
    } else {
        format!("{x:.1} ns")
    }
}

impl KernelReport {
    /// The report as text: the run, its statistics, then counters and
    /// derived metrics when they were read.
    pub fn write_text(&self, out: &mut impl Write) -> std::io::Result<()> {
        let r = self;
        let s = &r.measurement.summary;
        writeln!(
            out,
            "{}  isa {}  params {}  threads {}  {}{}",
            r.problem,
            r.isa,
            r.params,
            r.threads,
            if r.cold { "cold cache" } else { "warm cache" },
            if r.quick {
                " — quick mode, not a measurement"
            } else {
                ""
            }
        )?;
        writeln!(out, "soc: {} [{}]", r.soc, r.soc_fingerprint)?;
        if let Some(p) = &r.measurement.placement {
            writeln!(
                out,
                "placement: {}caller on cpus {:?}, workers on cpus {:?}",
                r.placement
                    .as_deref()
                    .map_or(String::new(), |n| format!("{n}: ")),
                p.pinned_to,
                p.workers
            )?;
        }
        writeln!(
            out,
            "validated: max error {:.2e} (tolerance {:.0e})",
            r.validation_error, r.tolerance
        )?;
        writeln!(out)?;
        let rows: Vec<(&str, String)> = vec![
            ("median", ns(s.median)),
            (
                "MAD",
                format!("{} ({:.1}%)", ns(s.mad), 100.0 * s.relative_mad()),
            ),
            ("min / max", format!("{} / {}", ns(s.min), ns(s.max))),
            (
                "95% CI",
                format!("{} .. {}", ns(s.ci95_low), ns(s.ci95_high)),
            ),
            (
                "samples",
                format!(
                    "{} × {} runs ({} outliers)",
                    s.n,
                    r.measurement.iters_per_sample,
                    s.outliers.len()
                ),
            ),
            (
                r.arithmetic.unit(),
                r.gflops.map_or("-".into(), |g| format!("{g:.2}")),
            ),
            ("GB/s", format!("{:.2}", r.gbytes_per_s)),
            ("roofline", r.roofline.describe()),
        ];
        for (k, v) in rows {
            writeln!(out, "{k:>10}  {v}")?;
        }
        if let Some(note) = &r.counters_note {
            writeln!(
                out,
                "
counters: {note}"
            )?;
        }
        if let Some(c) = &r.measurement.counts {
            writeln!(
                out,
                "
counters per run ({}, summed over {} thread(s)):",
                c.backend, c.threads
            )?;
            for (name, v) in &c.values {
                writeln!(
                    out,
                    "{name:>24}  {:>14.0}{}",
                    v.scaled,
                    if v.multiplexed {
                        "  (multiplexed, scaled)"
                    } else {
                        ""
                    }
                )?;
            }
        }
        if let Some(mx) = &r.measurement.metrics {
            let derived = [
                ("IPC", mx.ipc, false),
                ("L1D miss rate", mx.l1d_miss_rate, true),
                ("L2 miss rate", mx.l2_miss_rate, true),
                ("LLC miss rate", mx.llc_miss_rate, true),
                ("branch MPKI", mx.branch_mpki, false),
                ("frontend stalls", mx.frontend_stall_share, true),
                ("backend stalls", mx.backend_stall_share, true),
                ("SIMD share", mx.simd_share, true),
            ];
            for (name, v, pct) in derived {
                if let Some(v) = v {
                    if pct {
                        writeln!(out, "{name:>24}  {:>13.1}%", 100.0 * v)?;
                    } else {
                        writeln!(out, "{name:>24}  {v:>14.2}")?;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roofline::{CeilingKind, StoredCeiling};
    use crate::{Harness, MeasureConfig};

    #[test]
    fn durations_keep_a_readable_unit() {
        assert_eq!(ns(12.34), "12.3 ns");
        assert_eq!(ns(1_500.0), "1.500 µs");
        assert_eq!(ns(2_000_000.0), "2.000 ms");
        assert_eq!(ns(3e9), "3.000 s");
    }

    #[test]
    fn text_report_shows_the_run_and_its_roofline() {
        let mut h = Harness::new(MeasureConfig::quick()).unwrap();
        let v: Vec<f32> = (0..256).map(|i| i as f32).collect();
        let m = h
            .measure("sum", || {
                std::hint::black_box(v.iter().sum::<f32>());
            })
            .unwrap();
        let stored = Ok(Some(StoredCeiling {
            value: 10.0,
            unit: "GB/s".into(),
        }));
        let r = KernelReport {
            problem: "gemv/f32/4x4".into(),
            isa: "scalar".into(),
            params: serde_json::json!({}),
            threads: 1,
            placement: None,
            cold: true,
            soc: "soc".into(),
            soc_fingerprint: "fp".into(),
            validation_error: 0.0,
            tolerance: 1e-5,
            bytes_per_run: 64,
            flops_per_run: 0,
            arithmetic: Arithmetic::F32,
            gflops: None,
            gbytes_per_s: 1.0,
            roofline: Roofline::against(CeilingKind::MemBwTriad, 1, stored, 1.0, None),
            counters_note: Some("counters off".into()),
            quick: true,
            environment: Environment::capture("fp", "0", None),
            measurement: m,
        };
        let mut out = Vec::new();
        r.write_text(&mut out).unwrap();
        let t = String::from_utf8(out).unwrap();
        assert!(
            t.starts_with(
                "gemv/f32/4x4  isa scalar  params {}  threads 1  cold cache — quick mode"
            ),
            "{t}"
        );
        assert!(
            t.contains("  roofline  10.0% of mem_bw_triad 10.0 GB/s at 1 thread(s)"),
            "{t}"
        );
        assert!(t.contains("   GFLOP/s  -"), "{t}");
        assert!(t.contains("\ncounters: counters off"), "{t}");
    }
}
