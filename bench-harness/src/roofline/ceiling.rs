//! Which stored ceiling a kernel run is measured against, and where the run
//! sits under it. Ceilings are stored one row per (kind, threads): the
//! three STREAM bandwidths in GB/s and the FMA peak of each ISA lane in
//! GFLOP/s; [`CeilingKind::name`] is the kind's stable text in the table.

use super::{Ceilings, FmaIsa};
use serde::Serialize;
use std::io::Write;

/// One kind of ceiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CeilingKind {
    MemBwCopy,
    MemBwTriad,
    MemBwRead,
    FmaPeak(FmaIsa),
}

impl CeilingKind {
    /// The stored text: `mem_bw_copy`, `mem_bw_triad`, `mem_bw_read`,
    /// `fma_peak_<lane>` with the lane's `+` spelled `_` (`fma_peak_avx2_fma`).
    pub fn name(self) -> String {
        match self {
            CeilingKind::MemBwCopy => "mem_bw_copy".into(),
            CeilingKind::MemBwTriad => "mem_bw_triad".into(),
            CeilingKind::MemBwRead => "mem_bw_read".into(),
            CeilingKind::FmaPeak(isa) => format!("fma_peak_{}", isa.name().replace('+', "_")),
        }
    }

    pub fn unit(self) -> &'static str {
        match self {
            CeilingKind::FmaPeak(_) => "GFLOP/s",
            _ => "GB/s",
        }
    }

    /// The ceiling a kernel candidate is measured against: STREAM triad for
    /// bandwidth-bound ops, else the FMA peak of the lane its ISA variant
    /// (`avx2`, `avx512_vnni`, `neon_dotprod`, ...) runs on.
    pub fn for_kernel(bandwidth_bound: bool, variant: &str) -> Self {
        if bandwidth_bound {
            return CeilingKind::MemBwTriad;
        }
        CeilingKind::FmaPeak(match variant {
            "avx2" | "avx_vnni" => FmaIsa::Avx2Fma,
            i if i.starts_with("avx512") => FmaIsa::Avx512,
            i if i.starts_with("neon") => FmaIsa::Neon,
            _ => FmaIsa::Scalar,
        })
    }
}

/// One ceiling to store.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CeilingRow {
    pub kind: CeilingKind,
    pub threads: usize,
    pub value: f64,
}

impl Ceilings {
    /// Every ceiling to store: the bandwidths of validated STREAM runs only,
    /// every FMA peak.
    pub fn rows(&self) -> Vec<CeilingRow> {
        let mut v = Vec::new();
        for b in self.bandwidth.iter().filter(|b| b.validated) {
            v.extend(
                [
                    (CeilingKind::MemBwCopy, b.copy_gbs),
                    (CeilingKind::MemBwTriad, b.triad_gbs),
                    (CeilingKind::MemBwRead, b.read_gbs),
                ]
                .map(|(kind, value)| CeilingRow {
                    kind,
                    threads: b.threads,
                    value,
                }),
            );
        }
        v.extend(self.fma.iter().map(|f| CeilingRow {
            kind: CeilingKind::FmaPeak(f.isa),
            threads: f.threads,
            value: f.gflops,
        }));
        v
    }

    /// The table `tiletune bench roofline` prints; `quick` marks a smoke test.
    pub fn write_table(&self, out: &mut impl Write, quick: bool) -> std::io::Result<()> {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        writeln!(
            out,
            "roofline: 3 arrays × {:.1} MiB (LLC {:.1} MiB), {} reps, workers {}{}",
            mib(self.array_bytes),
            mib(self.llc_bytes),
            self.reps,
            if self.pinned { "pinned" } else { "not pinned" },
            if quick {
                " — quick mode, not a measurement"
            } else {
                ""
            }
        )?;
        writeln!(
            out,
            "\nmemory bandwidth (GB/s, STREAM byte counting; best / median)"
        )?;
        writeln!(
            out,
            "{:>7}  {:>16}  {:>16}  {:>16}  check",
            "threads", "copy", "triad", "read"
        )?;
        for b in &self.bandwidth {
            writeln!(
                out,
                "{:>7}  {:>7.1} / {:>6.1}  {:>7.1} / {:>6.1}  {:>7.1} / {:>6.1}  {}",
                b.threads,
                b.copy_gbs,
                b.copy_median_gbs,
                b.triad_gbs,
                b.triad_median_gbs,
                b.read_gbs,
                b.read_median_gbs,
                if b.validated { "ok" } else { "WRONG RESULT" }
            )?;
        }
        writeln!(out, "\nFMA peak (f32 GFLOP/s; best / median)")?;
        writeln!(
            out,
            "{:<9} {:>5} {:>4} {:>7}  {:>18}",
            "isa", "lanes", "acc", "threads", "GFLOP/s"
        )?;
        for p in &self.fma {
            writeln!(
                out,
                "{:<9} {:>5} {:>4} {:>7}  {:>8.1} / {:>7.1}",
                p.isa.name(),
                p.lanes,
                p.accumulators,
                p.threads,
                p.gflops,
                p.median_gflops
            )?;
        }
        writeln!(
            out,
            "\npeak: {:.1} GB/s (triad), {:.1} GFLOP/s; ridge point {:.2} flop/byte",
            self.peak_bandwidth_gbs,
            self.peak_gflops,
            self.ridge_point()
        )
    }
}

/// A stored ceiling's value and unit.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredCeiling {
    pub value: f64,
    pub unit: String,
}

/// Where a run sits against this machine's stored ceiling.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Roofline {
    Measured {
        kind: String,
        threads: usize,
        ceiling: f64,
        unit: String,
        percent: f64,
    },
    Missing {
        kind: String,
        threads: usize,
        note: String,
    },
}

impl Roofline {
    /// A run of `gbs` GB/s and `gflops` GFLOP/s (`None`: the op has no flop
    /// count) against the ceiling looked up for `kind` at `threads`: `Err`
    /// says why none could be read.
    pub fn against(
        kind: CeilingKind,
        threads: usize,
        stored: Result<Option<StoredCeiling>, String>,
        gbs: f64,
        gflops: Option<f64>,
    ) -> Self {
        let name = kind.name();
        let missing = |why: String| Roofline::Missing {
            kind: name.clone(),
            threads,
            note: format!("{why}; run `tiletune bench roofline` first"),
        };
        match stored {
            Ok(Some(c)) if c.value > 0.0 => {
                let achieved = match kind {
                    CeilingKind::FmaPeak(_) => gflops,
                    _ => Some(gbs),
                };
                match achieved {
                    Some(a) => Roofline::Measured {
                        kind: name.clone(),
                        threads,
                        ceiling: c.value,
                        unit: c.unit,
                        percent: 100.0 * a / c.value,
                    },
                    None => missing("this op has no flop count".into()),
                }
            }
            Ok(_) => missing(format!(
                "no `{name}` ceiling stored for this SoC at {threads} thread(s)"
            )),
            Err(why) => missing(why),
        }
    }

    /// One line: `42.0% of mem_bw_triad 20.0 GB/s at 2 thread(s)`, or the note.
    pub fn describe(&self) -> String {
        match self {
            Roofline::Measured {
                kind,
                threads,
                ceiling,
                unit,
                percent,
            } => format!("{percent:.1}% of {kind} {ceiling:.1} {unit} at {threads} thread(s)"),
            Roofline::Missing { note, .. } => note.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roofline::{RooflineConfig, measure_ceilings};

    #[test]
    fn kernels_are_matched_to_their_lane_or_to_bandwidth() {
        let kind = |bw, isa| CeilingKind::for_kernel(bw, isa).name();
        assert_eq!(kind(false, "avx2"), "fma_peak_avx2_fma");
        assert_eq!(kind(false, "avx512_vnni"), "fma_peak_avx512");
        assert_eq!(kind(true, "neon_dotprod"), "mem_bw_triad");
        assert_eq!(kind(false, "avx512"), "fma_peak_avx512");
        assert_eq!(kind(false, "neon_i8mm"), "fma_peak_neon");
        assert_eq!(kind(false, "scalar"), "fma_peak_scalar");
        assert_eq!(CeilingKind::MemBwRead.unit(), "GB/s");
        assert_eq!(CeilingKind::FmaPeak(FmaIsa::Neon).unit(), "GFLOP/s");
    }

    #[test]
    fn a_run_sits_under_its_ceiling_or_says_what_is_missing() {
        let c = |value| {
            Ok(Some(StoredCeiling {
                value,
                unit: "GB/s".into(),
            }))
        };
        let r = Roofline::against(CeilingKind::MemBwTriad, 2, c(20.0), 5.0, None);
        assert_eq!(
            r.describe(),
            "25.0% of mem_bw_triad 20.0 GB/s at 2 thread(s)"
        );
        let fma = CeilingKind::FmaPeak(FmaIsa::Scalar);
        let r = Roofline::against(fma, 1, c(10.0), 5.0, None);
        assert_eq!(
            r.describe(),
            "this op has no flop count; run `tiletune bench roofline` first"
        );
        let r = Roofline::against(fma, 1, c(0.0), 5.0, Some(1.0));
        assert!(
            r.describe()
                .starts_with("no `fma_peak_scalar` ceiling stored for this SoC at 1 thread(s)")
        );
        let r = Roofline::against(
            fma,
            1,
            Err("no selector table at /x".into()),
            5.0,
            Some(1.0),
        );
        assert!(matches!(&r, Roofline::Missing { kind, .. } if kind == "fma_peak_scalar"));
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["status"], "missing");
    }

    #[test]
    fn table_lists_every_point_and_rows_keep_validated_bandwidth() {
        let mut cfg = RooflineConfig::tiny();
        cfg.threads = vec![1];
        cfg.isas = Some(vec![FmaIsa::Scalar]);
        let mut c = measure_ceilings(&cfg, |_| {}).unwrap();
        let mut buf = Vec::new();
        c.write_table(&mut buf, true).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(text.contains("quick mode"));
        assert!(text.contains("scalar"));
        assert!(text.contains("ok"));
        assert_eq!(
            text.lines()
                .filter(|l| l.trim_start().starts_with("1 "))
                .count(),
            1
        );
        let kinds: Vec<String> = c.rows().iter().map(|r| r.kind.name()).collect();
        assert_eq!(
            kinds,
            [
                "mem_bw_copy",
                "mem_bw_triad",
                "mem_bw_read",
                "fma_peak_scalar"
            ]
        );
        c.bandwidth[0].validated = false;
        assert_eq!(c.rows().len(), 1);
    }
}
