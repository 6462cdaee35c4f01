//! Which stored ceiling a kernel run is measured against, and where the run
//! sits under it. Ceilings are stored one row per (kind, threads): the
//! three STREAM bandwidths in GB/s, the FMA peak of each f32 lane in
//! GFLOP/s and the dot-product peak of each int8 lane in GOP/s;
//! [`CeilingKind`]'s `Display` is the kind's stable text in the table and
//! `FromStr` reads it back.
//!
//! An int8 kernel is measured against the int8 peak of its ISA, never the
//! f32 FMA peak: one `vpdpbusd` does 64 multiply-adds where one `vfmadd`
//! does 16, so int8 work under the FMA roof reads as 100–400% of it. AVX2
//! names f32 and int8 kernels alike, so there the kernel's work, not its
//! ISA, picks the roof.

use super::{Ceilings, FmaIsa, Int8Isa};
use serde::Serialize;
use std::fmt;
use std::io::Write;
use std::str::FromStr;

/// One kind of ceiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CeilingKind {
    MemBwCopy,
    MemBwTriad,
    MemBwRead,
    FmaPeak(FmaIsa),
    Int8Peak(Int8Isa),
}

/// What a kernel's arithmetic is, which decides its compute roof.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arithmetic {
    F32,
    /// Integer multiply-adds on int8 operands (i8gemm, qgemm, qgemv's W·A8).
    Int8,
}

/// The ISA part of a stored variant: `avx512_vnni` of `avx512_vnni.a8`.
fn variant_isa(variant: &str) -> &str {
    variant.split('.').next().unwrap_or(variant)
}

impl Arithmetic {
    /// From a problem's dtype and a candidate's stored variant
    /// (`tiletune_kernels::KernelChoice::variant`): the int8 GEMM's dtypes
    /// (`i8`, `i8_zp`), the quantized kernels that quantize activations to
    /// int8 (`<isa>.a8`, `<isa>.qgemm`), and any variant on an int8
    /// dot-product ISA (those exist only in the integer families) are int8.
    pub fn of_kernel(dtype: &str, variant: &str) -> Arithmetic {
        let int8 = matches!(dtype, "i8" | "i8_zp")
            || variant.ends_with(".a8")
            || variant.ends_with(".qgemm")
            || Int8Isa::from_name(variant_isa(variant)).is_some_and(Int8Isa::integer_only);
        if int8 {
            Arithmetic::Int8
        } else {
            Arithmetic::F32
        }
    }

    /// The unit its rate is counted in: an int8 multiply-add is no
    /// floating-point operation.
    pub fn unit(self) -> &'static str {
        match self {
            Arithmetic::F32 => "GFLOP/s",
            Arithmetic::Int8 => "GOP/s",
        }
    }
}

impl CeilingKind {
    /// Every kind, for parsing.
    fn all() -> impl Iterator<Item = CeilingKind> {
        [
            CeilingKind::MemBwCopy,
            CeilingKind::MemBwTriad,
            CeilingKind::MemBwRead,
        ]
        .into_iter()
        .chain(FmaIsa::ALL.map(CeilingKind::FmaPeak))
        .chain(Int8Isa::ALL.map(CeilingKind::Int8Peak))
    }

    /// The stored text, as `Display` writes it.
    pub fn name(self) -> String {
        self.to_string()
    }

    pub fn unit(self) -> &'static str {
        match self {
            CeilingKind::FmaPeak(_) => Arithmetic::F32.unit(),
            CeilingKind::Int8Peak(_) => Arithmetic::Int8.unit(),
            _ => "GB/s",
        }
    }

    /// Whether this is a compute roof (flat on a roofline) rather than a bandwidth.
    pub fn is_compute(self) -> bool {
        matches!(self, CeilingKind::FmaPeak(_) | CeilingKind::Int8Peak(_))
    }

    /// The compute roof of a kernel variant (`avx2`, `avx512_vnni.a8`,
    /// `neon_i8mm.qgemm`, ...) doing `arith`: the int8 peak of its ISA for
    /// int8 work, the FMA peak of its lane for f32. `Err` says why int8
    /// work on an ISA without a measured int8 lane has no roof.
    pub fn compute_roof(arith: Arithmetic, variant: &str) -> Result<Self, String> {
        let isa = variant_isa(variant);
        match (arith, Int8Isa::from_name(isa)) {
            (Arithmetic::Int8, Some(lane)) => Ok(CeilingKind::Int8Peak(lane)),
            (Arithmetic::Int8, None) => Err(format!(
                "int8 work on `{isa}` has no measured roof: `tiletune bench roofline` measures the int8 peak of {} only",
                Int8Isa::ALL.map(Int8Isa::name).join(", ")
            )),
            (Arithmetic::F32, _) => Ok(CeilingKind::FmaPeak(fma_lane(isa))),
        }
    }

    /// The ceiling a kernel candidate of `dtype` is measured against: STREAM
    /// triad for bandwidth-bound ops, else the compute roof of its variant
    /// for its arithmetic ([`Arithmetic::of_kernel`]); int8 work on an ISA
    /// without an int8 lane stays on the FMA roof of its lane here, which
    /// the kernel report names.
    pub fn for_kernel(bandwidth_bound: bool, dtype: &str, variant: &str) -> Self {
        if bandwidth_bound {
            return CeilingKind::MemBwTriad;
        }
        let arith = Arithmetic::of_kernel(dtype, variant);
        CeilingKind::compute_roof(arith, variant)
            .unwrap_or(CeilingKind::FmaPeak(fma_lane(variant_isa(variant))))
    }
}

/// The FMA lane a kernel ISA's f32 code runs on.
fn fma_lane(isa: &str) -> FmaIsa {
    match isa {
        "avx2" | "avx_vnni" => FmaIsa::Avx2Fma,
        i if i.starts_with("avx512") => FmaIsa::Avx512,
        i if i.starts_with("neon") => FmaIsa::Neon,
        _ => FmaIsa::Scalar,
    }
}

impl fmt::Display for CeilingKind {
    /// `mem_bw_copy`, `mem_bw_triad`, `mem_bw_read`, `fma_peak_<lane>` with
    /// the lane's `+` spelled `_` (`fma_peak_avx2_fma`), `int8_peak_<lane>`
    /// (`int8_peak_avx512_vnni`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CeilingKind::MemBwCopy => f.write_str("mem_bw_copy"),
            CeilingKind::MemBwTriad => f.write_str("mem_bw_triad"),
            CeilingKind::MemBwRead => f.write_str("mem_bw_read"),
            CeilingKind::FmaPeak(isa) => write!(f, "fma_peak_{}", isa.name().replace('+', "_")),
            CeilingKind::Int8Peak(isa) => write!(f, "int8_peak_{}", isa.name()),
        }
    }
}

/// A stored kind text no tiletune writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownCeilingKind(pub String);

impl fmt::Display for UnknownCeilingKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown ceiling kind `{}` (expected mem_bw_*, fma_peak_* or int8_peak_*)",
            self.0
        )
    }
}

impl std::error::Error for UnknownCeilingKind {}

impl FromStr for CeilingKind {
    type Err = UnknownCeilingKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CeilingKind::all()
            .find(|k| k.to_string() == s)
            .ok_or_else(|| UnknownCeilingKind(s.to_string()))
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
    /// every FMA and int8 peak.
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
        v.extend(self.int8.iter().map(|p| CeilingRow {
            kind: CeilingKind::Int8Peak(p.isa),
            threads: p.threads,
            value: p.gops,
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
            "{:>7}  {:>16}  {:>16}  {:>16}  {:>10}  check",
            "threads", "copy", "triad", "read", "read ahead"
        )?;
        for b in &self.bandwidth {
            let ahead = bytes_ahead(b.read_ahead);
            writeln!(
                out,
                "{:>7}  {:>7.1} / {:>6.1}  {:>7.1} / {:>6.1}  {:>7.1} / {:>6.1}  {:>10}  {}",
                b.threads,
                b.copy_gbs,
                b.copy_median_gbs,
                b.triad_gbs,
                b.triad_median_gbs,
                b.read_gbs,
                b.read_median_gbs,
                ahead,
                if b.validated { "ok" } else { "WRONG RESULT" }
            )?;
        }
        for b in self
            .bandwidth
            .iter()
            .filter(|b| !b.read_by_ahead.is_empty())
        {
            let rates: Vec<String> = b
                .read_by_ahead
                .iter()
                .map(|r| format!("{} {:.1}", bytes_ahead(r.ahead), r.gbs))
                .collect();
            writeln!(
                out,
                "read by prefetch distance, {} thread(s), best GB/s: {}",
                b.threads,
                rates.join(" · ")
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
        if !self.int8.is_empty() {
            writeln!(
                out,
                "\nint8 peak (GOP/s, a multiply-add = 2 ops; best / median)"
            )?;
            writeln!(
                out,
                "{:<12} {:>5} {:>4} {:>7}  {:>18}",
                "isa", "lanes", "acc", "threads", "GOP/s"
            )?;
            for p in &self.int8 {
                writeln!(
                    out,
                    "{:<12} {:>5} {:>4} {:>7}  {:>8.1} / {:>7.1}",
                    p.isa.name(),
                    p.lanes,
                    p.accumulators,
                    p.threads,
                    p.gops,
                    p.median_gops
                )?;
            }
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
    /// A run of `gbs` GB/s and `gflops` GFLOP/s or, on an int8 roof, GOP/s
    /// (`None`: the op has no flop count) against the ceiling looked up for `kind` at `threads`: `Err`
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
                let achieved = if kind.is_compute() { gflops } else { Some(gbs) };
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

/// A prefetch distance as the table prints it: `none`, `512 B`, `8 KiB`.
fn bytes_ahead(n: usize) -> String {
    match n {
        0 => "none".to_string(),
        n if n % 1024 == 0 => format!("{} KiB", n / 1024),
        n => format!("{n} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roofline::{RooflineConfig, measure_ceilings};

    #[test]
    fn kernels_are_matched_to_their_lane_or_to_bandwidth() {
        let kind = |bw, isa| CeilingKind::for_kernel(bw, "f32", isa).name();
        assert_eq!(kind(false, "avx2"), "fma_peak_avx2_fma");
        // AVX2 names f32 and int8 kernels alike: the work decides.
        assert_eq!(kind(false, "avx2.qgemm"), "int8_peak_avx2");
        assert_eq!(
            CeilingKind::for_kernel(false, "i8", "avx2").name(),
            "int8_peak_avx2"
        );
        // The two cases of issue #18: int8 kernels on their int8 roof.
        assert_eq!(kind(false, "avx512_vnni"), "int8_peak_avx512_vnni");
        assert_eq!(kind(false, "neon_i8mm"), "int8_peak_neon_i8mm");
        assert_eq!(kind(false, "avx_vnni"), "int8_peak_avx_vnni");
        assert_eq!(kind(false, "neon_dotprod.qgemm"), "int8_peak_neon_dotprod");
        assert_eq!(kind(true, "neon_dotprod"), "mem_bw_triad");
        assert_eq!(kind(false, "avx512"), "fma_peak_avx512");
        assert_eq!(kind(false, "neon"), "fma_peak_neon");
        assert_eq!(kind(false, "scalar"), "fma_peak_scalar");
        assert_eq!(CeilingKind::MemBwRead.unit(), "GB/s");
        assert_eq!(CeilingKind::FmaPeak(FmaIsa::Neon).unit(), "GFLOP/s");
        assert_eq!(CeilingKind::Int8Peak(Int8Isa::NeonI8mm).unit(), "GOP/s");
    }

    #[test]
    fn int8_work_finds_its_int8_roof_and_f32_stays_on_the_fma_roof() {
        use Arithmetic::{F32, Int8};
        let arith = Arithmetic::of_kernel;
        assert_eq!(arith("i8", "avx512_vnni"), Int8);
        assert_eq!(arith("i8_zp", "avx2"), Int8);
        assert_eq!(arith("q4_0", "avx2.a8"), Int8);
        assert_eq!(arith("f32", "avx2"), F32);
        assert_eq!(arith("f32", "avx_vnni"), Int8);
        assert_eq!(arith("q4_0", "neon.qgemm"), Int8);
        assert_eq!(arith("q4_0", "avx512.a32"), F32);
        assert_eq!(arith("f32", "avx512"), F32);
        let roof = |a, v| CeilingKind::compute_roof(a, v).map(|k| k.to_string());
        assert_eq!(
            roof(Int8, "avx512_vnni.qgemm").unwrap(),
            "int8_peak_avx512_vnni"
        );
        assert_eq!(roof(Int8, "neon_i8mm").unwrap(), "int8_peak_neon_i8mm");
        assert_eq!(roof(F32, "avx512.a32").unwrap(), "fma_peak_avx512");
        assert_eq!(roof(F32, "avx2").unwrap(), "fma_peak_avx2_fma");
        assert_eq!(roof(Int8, "avx2.a8").unwrap(), "int8_peak_avx2");
        // Int8 work on an ISA without an int8 lane has no roof, never the FMA one.
        let err = roof(Int8, "avx512.qgemm").unwrap_err();
        assert!(
            err.contains("`avx512`") && err.contains("avx512_vnni"),
            "{err}"
        );
    }

    #[test]
    fn every_kind_reads_back_from_its_stored_text() {
        for k in CeilingKind::all() {
            assert_eq!(k.to_string().parse::<CeilingKind>(), Ok(k));
        }
        assert_eq!(
            "fma_peak_avx2_fma".parse(),
            Ok(CeilingKind::FmaPeak(FmaIsa::Avx2Fma))
        );
        assert_eq!(
            "int8_peak_neon_dotprod".parse(),
            Ok(CeilingKind::Int8Peak(Int8Isa::NeonDotprod))
        );
        let err = "fma_peak_sse9".parse::<CeilingKind>().unwrap_err();
        assert!(err.to_string().contains("fma_peak_sse9"));
    }

    #[test]
    fn an_int8_run_is_a_fraction_of_its_int8_peak() {
        let kind = CeilingKind::Int8Peak(Int8Isa::Avx512Vnni);
        let stored = Ok(Some(StoredCeiling {
            value: 400.0,
            unit: kind.unit().into(),
        }));
        let r = Roofline::against(kind, 1, stored, 5.0, Some(100.0));
        assert_eq!(
            r.describe(),
            "25.0% of int8_peak_avx512_vnni 400.0 GOP/s at 1 thread(s)"
        );
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
        cfg.int8_isas = Some(Vec::new());
        let mut c = measure_ceilings(&cfg, |_| {}).unwrap();
        let mut buf = Vec::new();
        c.write_table(&mut buf, true).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(text.contains("quick mode"));
        assert!(
            text.contains("read by prefetch distance, 1 thread(s), best GB/s: none "),
            "{text}"
        );
        assert!(
            text.contains(" · 512 B ") && text.contains(" · 8 KiB "),
            "{text}"
        );
        assert_eq!(bytes_ahead(1024), "1 KiB");
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
        c.int8.push(crate::roofline::Int8Point {
            isa: Int8Isa::NeonI8mm,
            lanes: 4,
            accumulators: 16,
            threads: 2,
            gops: 123.0,
            median_gops: 120.0,
        });
        let rows = c.rows();
        assert_eq!(rows[1].kind.to_string(), "int8_peak_neon_i8mm");
        assert_eq!((rows[1].threads, rows[1].value), (2, 123.0));
        let mut buf = Vec::new();
        c.write_table(&mut buf, false).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(text.contains("int8 peak (GOP/s"), "{text}");
        assert!(text.contains("neon_i8mm"), "{text}");
    }
}
