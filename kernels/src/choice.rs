//! The one typed choice of a kernel for a weight: family, ISA, activation
//! mode, parameters and thread count ([`KernelChoice`]), and what that
//! choice needs the weight to be held as in memory ([`Layout`]).
//!
//! Every crate that names a kernel goes through this type: the tuner names
//! its candidates with [`KernelChoice::variant`] and
//! [`KernelChoice::params_json`], the selector table stores that text, and
//! the runtime reads a stored winner back once with
//! [`KernelChoice::from_stored`], which also refuses a choice this CPU or
//! this weight cannot run. The rule for what runs when nothing is tuned
//! ([`KernelChoice::default_for`]) lives here too, so the tuner's default
//! candidate and the runtime's default plan cannot disagree.
//!
//! Stored text (`variant`): `<isa>` for the f32/f16 GEMV and GEMM (the
//! problem's op tells which), `<isa>.a8` / `<isa>.a32` for the per-row
//! quantized GEMV, `<isa>.qgemm` for the quantized GEMM on repacked
//! weights. The problem's op and dtype disambiguate them, so the text needs
//! no version of its own and every table written with it reads as it is.
//! [`fmt::Display`] adds the family, format and thread count
//! (`qgemm/q4_0:avx512_vnni {"ku":1,"mr":1,"nr":16,"pf":16} t2`) and
//! [`FromStr`] reads that back exactly.

use std::fmt;
use std::str::FromStr;

use serde_json::Value;

use crate::dtype::GgmlType;
use crate::gemm::{self, GemmConfig, GemmParams, GemmShape};
use crate::gemv::{self, GemvConfig, GemvParams, GemvShape};
use crate::qgemm::{self, QGemm, QGemmParams, QGemmShape};
use crate::qgemv::{self, QGemv, QGemvParams, QGemvShape, QMode};
use crate::quant::QuantFormat;
use crate::{CpuCaps, Isa, Tunable};

/// Weight formats the per-row quantized GEMV reads straight from GGUF
/// blocks: those a runtime keeps quantized ([`WeightKind::Quant`]).
pub const QGEMV_FORMATS: [QuantFormat; 9] = qgemv::scalar::FORMATS;

/// How the runtime keeps a weight of a given GGUF dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WeightKind {
    F32,
    F16,
    /// Kept quantized: packed for the quantized GEMM, or in its GGUF rows.
    Quant(QuantFormat),
    /// Any other type: dequantized to f32 at load and run as f32.
    Dequantized,
}

impl WeightKind {
    /// The kind of a weight of element type `t`.
    pub fn of(t: GgmlType) -> Self {
        match t {
            GgmlType::F32 => WeightKind::F32,
            GgmlType::F16 => WeightKind::F16,
            t => QuantFormat::of(t)
                .filter(|f| QGEMV_FORMATS.contains(f))
                .map_or(WeightKind::Dequantized, WeightKind::Quant),
        }
    }

    /// The kind for a dtype as the problem keys spell it (`f32`, `q4_k`,
    /// ...); a name that is no element type is [`WeightKind::Dequantized`].
    pub fn of_dtype(dtype: &str) -> Self {
        GgmlType::parse(dtype).map_or(WeightKind::Dequantized, Self::of)
    }
}

/// The op of a kernel problem: one activation row (decode) or several.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Gemv,
    Gemm,
}

impl Op {
    /// The op of a problem key (`gemv`, `gemm`), `None` for any other.
    pub fn from_name(op: &str) -> Option<Op> {
        match op {
            "gemv" => Some(Op::Gemv),
            "gemm" => Some(Op::Gemm),
            _ => None,
        }
    }
}

/// What a choice needs the weight held as. A weight holds one of these
/// (see [`KernelChoice::layout`]): every kernel that reads it must agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Layout {
    /// f32 (or f16) rows: the GEMV and the GEMM read the same array.
    Dense,
    /// The GGUF blocks as stored, read by the per-row quantized GEMV.
    Rows,
    /// Repacked for the quantized GEMM with `nr` rows interleaved.
    Packed { nr: usize },
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Layout::Dense => f.write_str("dense"),
            Layout::Rows => f.write_str("gguf rows"),
            Layout::Packed { nr } => write!(f, "packed nr={nr}"),
        }
    }
}

/// Why a stored or written choice cannot run here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ChoiceError(pub String);

fn err<T>(s: impl Into<String>) -> Result<T, ChoiceError> {
    Err(ChoiceError(s.into()))
}

/// A concrete kernel configuration for one weight and one row count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KernelChoice {
    /// f32 or f16 weights, one row of activations.
    Gemv(GemvConfig),
    /// f32 or f16 weights, several rows.
    Gemm(GemmConfig),
    /// Quantized weights read in their GGUF blocks, one row at a time.
    QGemv(QGemv),
    /// Quantized weights repacked at load, W·A8, any number of rows.
    QGemm(QGemm),
}

/// The suffix of the quantized GEMM's stored variant (`<isa>.qgemm`).
const QGEMM_SUFFIX: &str = ".qgemm";

impl KernelChoice {
    /// The family as [`fmt::Display`] spells it.
    pub fn family(&self) -> &'static str {
        match self {
            KernelChoice::Gemv(_) => "gemv",
            KernelChoice::Gemm(_) => "gemm",
            KernelChoice::QGemv(_) => "qgemv",
            KernelChoice::QGemm(_) => "qgemm",
        }
    }

    /// The ISA variant (an f32 config left to auto-dispatch reports the
    /// variant that would run).
    pub fn isa(&self) -> Isa {
        match self {
            KernelChoice::Gemv(c) => c.isa.unwrap_or_else(|| Isa::best_of(gemv::variants())),
            KernelChoice::Gemm(c) => c.isa.unwrap_or_else(|| Isa::best_of(gemm::GEMM_ISAS)),
            KernelChoice::QGemv(q) => q.isa,
            KernelChoice::QGemm(q) => q.isa,
        }
    }

    /// The variant as the selector table stores it (see the module docs).
    pub fn variant(&self) -> String {
        match self {
            KernelChoice::Gemv(c) => c.isa.map_or("auto", Isa::name).to_string(),
            KernelChoice::Gemm(c) => c.isa.map_or("auto", Isa::name).to_string(),
            KernelChoice::QGemv(q) => format!("{}.{}", q.isa.name(), q.mode.name()),
            KernelChoice::QGemm(q) => format!("{}{QGEMM_SUFFIX}", q.isa.name()),
        }
    }

    /// The parameters as JSON (the table's `params` text).
    pub fn params_json(&self) -> Value {
        let v = match self {
            KernelChoice::Gemv(c) => serde_json::to_value(c.params),
            KernelChoice::Gemm(c) => serde_json::to_value(c.params),
            KernelChoice::QGemv(q) => serde_json::to_value(q.params),
            KernelChoice::QGemm(q) => serde_json::to_value(q.params),
        };
        v.unwrap_or(Value::Null)
    }

    /// Worker count.
    pub fn threads(&self) -> usize {
        match self {
            KernelChoice::Gemv(c) => c.threads,
            KernelChoice::Gemm(c) => c.threads,
            KernelChoice::QGemv(q) => q.threads,
            KernelChoice::QGemm(q) => q.threads,
        }
    }

    /// What the weight must be held as for this choice.
    pub fn layout(&self) -> Layout {
        match self {
            KernelChoice::Gemv(_) | KernelChoice::Gemm(_) => Layout::Dense,
            KernelChoice::QGemv(_) => Layout::Rows,
            KernelChoice::QGemm(q) => Layout::Packed { nr: q.params.nr },
        }
    }

    /// What runs when nothing is tuned: for a quantized weight whose
    /// format has a GEMM, that GEMM (decode as its m = 1 case, on the one
    /// packed copy), unless W·A32 is forced; for other formats the per-row
    /// GEMV; f32/f16 the dense GEMV or GEMM. Each with the best variant
    /// this CPU runs and its analytic parameters.
    #[allow(clippy::too_many_arguments)]
    pub fn default_for(
        op: Op,
        kind: WeightKind,
        m: usize,
        n: usize,
        k: usize,
        caps: &CpuCaps,
        threads: usize,
        qmode: Option<QMode>,
    ) -> Self {
        match kind {
            WeightKind::Quant(format) if qgemm::supports(format) && qmode != Some(QMode::A32) => {
                let isa = Isa::best_of(qgemm::variants(format));
                let shape = QGemmShape { format, m, n, k };
                KernelChoice::QGemm(QGemm {
                    format,
                    isa,
                    params: QGemmParams::default_for_isa(&shape, caps, isa),
                    threads,
                })
            }
            WeightKind::Quant(format) => {
                let mode = qmode.unwrap_or(QMode::A8);
                let shape = QGemvShape { format, mode, n, k };
                KernelChoice::QGemv(QGemv {
                    format,
                    mode,
                    isa: Isa::best_of(qgemv::variants(format, mode)),
                    params: QGemvParams::default_for(&shape, caps),
                    threads,
                })
            }
            _ if op == Op::Gemm => {
                let shape = GemmShape::new(m, n, k);
                let isa = Isa::best_of(gemm::GEMM_ISAS);
                KernelChoice::Gemm(GemmConfig {
                    isa: Some(isa),
                    params: GemmParams::default_for_isa(&shape, caps, isa),
                    threads,
                })
            }
            _ => {
                let shape = GemvShape { n, k };
                KernelChoice::Gemv(GemvConfig {
                    isa: Some(Isa::best_of(gemv::variants())),
                    params: GemvParams::default_for(&shape, caps),
                    threads,
                })
            }
        }
    }

    /// A stored choice (`variant`, `params`, `threads` as the table holds
    /// them) for a problem of `op` on a weight of `kind`, or why it cannot
    /// run here: more threads than `budget`, an ISA this CPU lacks or the
    /// family does not implement, parameters out of range, an interleave
    /// the variant does not read, or an activation mode other than the
    /// forced `qmode`.
    pub fn from_stored(
        op: Op,
        kind: WeightKind,
        variant: &str,
        params: &Value,
        threads: usize,
        budget: usize,
        qmode: Option<QMode>,
    ) -> Result<Self, ChoiceError> {
        Self::parse_stored(
            op,
            kind,
            variant,
            params,
            threads,
            budget,
            qmode,
            Isa::is_available,
        )
    }

    /// The checks of [`KernelChoice::from_stored`] that do not depend on the
    /// CPU this runs on: what a table import applies to rows that may be
    /// for another device (an ISA must exist, not be available here).
    pub fn check_stored(
        op: Op,
        kind: WeightKind,
        variant: &str,
        params: &Value,
        threads: usize,
        budget: usize,
    ) -> Result<Self, ChoiceError> {
        Self::parse_stored(op, kind, variant, params, threads, budget, None, |_| true)
    }

    #[allow(clippy::too_many_arguments)]
    fn parse_stored(
        op: Op,
        kind: WeightKind,
        variant: &str,
        params: &Value,
        threads: usize,
        budget: usize,
        qmode: Option<QMode>,
        available: impl Fn(Isa) -> bool,
    ) -> Result<Self, ChoiceError> {
        if threads == 0 || threads > budget {
            return err(format!("{threads} threads outside the budget of {budget}"));
        }
        let isa_of = |s: &str| -> Result<Isa, ChoiceError> {
            let isa = Isa::from_str(s).map_err(|e| ChoiceError(e.to_string()))?;
            if available(isa) {
                Ok(isa)
            } else {
                err(format!("this cpu lacks {isa}"))
            }
        };
        fn parse<P: serde::de::DeserializeOwned + Tunable>(v: &Value) -> Result<P, ChoiceError> {
            let p: P = serde_json::from_value(v.clone()).map_err(|e| ChoiceError(e.to_string()))?;
            p.validate().map_err(|e| ChoiceError(e.to_string()))?;
            Ok(p)
        }
        match kind {
            WeightKind::Quant(format) if variant.ends_with(QGEMM_SUFFIX) => {
                if qmode == Some(QMode::A32) {
                    return err("the quantized GEMM is W·A8, the forced mode is a32");
                }
                let isa = isa_of(&variant[..variant.len() - QGEMM_SUFFIX.len()])?;
                if !qgemm::variants(format).contains(&isa) {
                    return err(format!("qgemm has no {isa} variant for {format}"));
                }
                let params: QGemmParams = parse(params)?;
                if !qgemm::interleaves(isa).contains(&params.nr) {
                    return err(format!(
                        "the {isa} qgemm does not read interleave {}",
                        params.nr
                    ));
                }
                Ok(KernelChoice::QGemm(QGemm {
                    format,
                    isa,
                    params,
                    threads,
                }))
            }
            WeightKind::Quant(format) => {
                let (isa, mode) = variant
                    .split_once('.')
                    .ok_or_else(|| ChoiceError("expected `<isa>.a32` or `<isa>.a8`".into()))?;
                let mode = match mode {
                    "a32" => QMode::A32,
                    "a8" => QMode::A8,
                    m => return err(format!("unknown activation mode `{m}`")),
                };
                if qmode.is_some_and(|q| q != mode) {
                    return err("activation mode differs from the forced one");
                }
                let isa = isa_of(isa)?;
                if !qgemv::variants(format, mode).contains(&isa) {
                    return err(format!("qgemv has no {isa} variant for {format}"));
                }
                Ok(KernelChoice::QGemv(QGemv {
                    format,
                    mode,
                    isa,
                    params: parse(params)?,
                    threads,
                }))
            }
            _ if op == Op::Gemm => {
                let isa = isa_of(variant)?;
                let params: GemmParams = parse(params)?;
                // The micro-kernel shapes of another architecture's variants
                // are not in this build; their ranges were checked by parse.
                if isa.is_native_arch() {
                    params
                        .validate_for("gemm", isa)
                        .map_err(|e| ChoiceError(e.to_string()))?;
                }
                Ok(KernelChoice::Gemm(GemmConfig {
                    isa: Some(isa),
                    params,
                    threads,
                }))
            }
            _ => {
                let isa = isa_of(variant)?;
                if isa.is_native_arch() && !gemv::variants().contains(&isa) {
                    return err(format!("gemv has no {isa} variant"));
                }
                Ok(KernelChoice::Gemv(GemvConfig {
                    isa: Some(isa),
                    params: parse(params)?,
                    threads,
                }))
            }
        }
    }

    /// This choice made to read `layout`, for a weight whose other kernels
    /// hold it so (the one rule the runtime resolves a conflicting table
    /// by): unchanged when it already reads it; for a packed layout the
    /// same variant and parameters with that interleave when the variant
    /// reads it, else the best available variant that reads it, with its
    /// analytic parameters for this shape; for GGUF rows the default
    /// per-row W·A8 GEMV. `None` when nothing reads `layout` for this
    /// weight (a dense layout for a quantized weight, or the reverse).
    pub fn for_layout(
        self,
        layout: Layout,
        (m, n, k): (usize, usize, usize),
        caps: &CpuCaps,
    ) -> Option<Self> {
        if self.layout() == layout {
            return Some(self);
        }
        let (format, threads) = match self {
            KernelChoice::QGemm(q) => (q.format, q.threads),
            KernelChoice::QGemv(q) => (q.format, q.threads),
            _ => return None,
        };
        match layout {
            Layout::Dense => None,
            Layout::Rows => {
                let mode = QMode::A8;
                let shape = QGemvShape { format, mode, n, k };
                Some(KernelChoice::QGemv(QGemv {
                    format,
                    mode,
                    isa: Isa::best_of(qgemv::variants(format, mode)),
                    params: QGemvParams::default_for(&shape, caps),
                    threads,
                }))
            }
            Layout::Packed { nr } => {
                if !qgemm::supports(format) {
                    return None;
                }
                if let KernelChoice::QGemm(mut q) = self
                    && qgemm::interleaves(q.isa).contains(&nr)
                {
                    q.params.nr = nr;
                    return Some(KernelChoice::QGemm(q));
                }
                let readers: Vec<Isa> = qgemm::variants(format)
                    .iter()
                    .copied()
                    .filter(|&i| qgemm::interleaves(i).contains(&nr))
                    .collect();
                let isa = Isa::best_of(&readers);
                let shape = QGemmShape { format, m, n, k };
                let mut params = QGemmParams::default_for_isa(&shape, caps, isa);
                params.nr = nr;
                Some(KernelChoice::QGemm(QGemm {
                    format,
                    isa,
                    params,
                    threads,
                }))
            }
        }
    }
}

impl fmt::Display for KernelChoice {
    /// `<family>:<variant> <params JSON> t<threads>`, with the format for
    /// the quantized families: `qgemm:avx512_vnni.qgemm` would repeat
    /// itself, so the quantized variants are written `qgemm/q4_0:avx2`,
    /// `qgemv/q4_0:avx2.a8`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let head = match self {
            KernelChoice::Gemv(_) | KernelChoice::Gemm(_) => {
                format!("{}:{}", self.family(), self.isa().name())
            }
            KernelChoice::QGemv(q) => {
                format!(
                    "qgemv/{}:{}.{}",
                    q.format.name(),
                    q.isa.name(),
                    q.mode.name()
                )
            }
            KernelChoice::QGemm(q) => format!("qgemm/{}:{}", q.format.name(), q.isa.name()),
        };
        write!(f, "{head} {} t{}", self.params_json(), self.threads())
    }
}

impl FromStr for KernelChoice {
    type Err = ChoiceError;

    /// Reads [`fmt::Display`]'s text back. The ISA must be one this CPU
    /// runs, as for a stored choice.
    fn from_str(s: &str) -> Result<Self, ChoiceError> {
        let bad = || {
            ChoiceError(format!(
                "`{s}` is not a kernel choice; expected e.g. `qgemm/q4_0:avx2 {{\"mr\":4,\"nr\":8,\"pf\":16,\"ku\":1}} t2`"
            ))
        };
        let (head, rest) = s.trim().split_once(' ').ok_or_else(bad)?;
        let (params, threads) = rest.trim().rsplit_once(' ').ok_or_else(bad)?;
        let threads: usize = threads
            .strip_prefix('t')
            .and_then(|t| t.parse().ok())
            .ok_or_else(bad)?;
        let params: Value = serde_json::from_str(params).map_err(|_| bad())?;
        let (family, variant) = head.split_once(':').ok_or_else(bad)?;
        let quant = |fmt: &str| -> Result<WeightKind, ChoiceError> {
            let f = QuantFormat::from_str(fmt).map_err(|e| ChoiceError(e.to_string()))?;
            Ok(WeightKind::Quant(f))
        };
        let (op, kind, variant) = match family.split_once('/') {
            None if family == "gemv" => (Op::Gemv, WeightKind::F32, variant.to_string()),
            None if family == "gemm" => (Op::Gemm, WeightKind::F32, variant.to_string()),
            Some(("qgemm", fmt)) => (Op::Gemm, quant(fmt)?, format!("{variant}{QGEMM_SUFFIX}")),
            Some(("qgemv", fmt)) => (Op::Gemv, quant(fmt)?, variant.to_string()),
            _ => return Err(bad()),
        };
        let c = Self::from_stored(op, kind, &variant, &params, threads, usize::MAX, None)?;
        // A per-row GEMV text must not read as the GEMM or the reverse.
        if c.family() != family.split('/').next().unwrap_or_default() {
            return Err(bad());
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps() -> CpuCaps {
        CpuCaps::default()
    }

    /// Every default and every stored name the tuner writes reads back as
    /// itself, through the stored text and through `Display`.
    #[test]
    fn choices_round_trip_through_both_texts() {
        let mut all = Vec::new();
        for kind in [
            WeightKind::F32,
            WeightKind::F16,
            WeightKind::Quant(QuantFormat::Q4_0),
            WeightKind::Quant(QuantFormat::Q6K),
        ] {
            for (op, m) in [(Op::Gemv, 1), (Op::Gemm, 64)] {
                for qmode in [None, Some(QMode::A32), Some(QMode::A8)] {
                    all.push((
                        op,
                        kind,
                        KernelChoice::default_for(op, kind, m, 64, 256, &caps(), 2, qmode),
                    ));
                }
            }
        }
        for (op, kind, c) in all {
            let back = KernelChoice::from_stored(
                op,
                kind,
                &c.variant(),
                &c.params_json(),
                c.threads(),
                2,
                None,
            )
            .unwrap();
            assert_eq!(back, c);
            let text = c.to_string();
            let parsed: KernelChoice = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            // f16 and f32 dense choices are the same configuration.
            assert_eq!(parsed, c, "{text}");
            assert_eq!(parsed.to_string(), text);
        }
        assert!("qgemm/q4_0:scalar {} t1".parse::<KernelChoice>().is_err());
        assert!("gemv:nope {} t1".parse::<KernelChoice>().is_err());
        assert!("whatever".parse::<KernelChoice>().is_err());
    }

    #[test]
    fn the_default_runs_the_gemm_for_every_format_that_has_one() {
        for f in QGEMV_FORMATS {
            for (op, m) in [(Op::Gemv, 1), (Op::Gemm, 64)] {
                let d = KernelChoice::default_for(
                    op,
                    WeightKind::Quant(f),
                    m,
                    64,
                    256,
                    &caps(),
                    1,
                    None,
                );
                match d {
                    KernelChoice::QGemm(q) => {
                        assert!(qgemm::supports(f), "{f}");
                        if m == 1 {
                            assert_eq!(q.params.mr, 1);
                        }
                    }
                    KernelChoice::QGemv(_) => assert!(!qgemm::supports(f), "{f}"),
                    _ => panic!("{f}: {d:?}"),
                }
            }
            // Decode and every prefill bucket agree on the layout by default.
            let layouts: Vec<Layout> = [1, 16, 64, 256]
                .iter()
                .map(|&m| {
                    let op = if m == 1 { Op::Gemv } else { Op::Gemm };
                    KernelChoice::default_for(
                        op,
                        WeightKind::Quant(f),
                        m,
                        64,
                        256,
                        &caps(),
                        1,
                        None,
                    )
                    .layout()
                })
                .collect();
            assert!(layouts.windows(2).all(|w| w[0] == w[1]), "{f}: {layouts:?}");
        }
    }

    #[test]
    fn stored_choices_are_checked() {
        let k = WeightKind::Quant(QuantFormat::Q4_1);
        let sp = serde_json::json!({"mr": 2, "nr": 16});
        let ok = |op, v: &str, p: &Value, q| KernelChoice::from_stored(op, k, v, p, 1, 2, q);
        assert!(ok(Op::Gemm, "scalar.qgemm", &sp, None).is_ok());
        assert!(ok(Op::Gemv, "scalar.qgemm", &sp, None).is_ok());
        assert!(
            ok(
                Op::Gemm,
                "scalar.qgemm",
                &serde_json::json!({"mr": 4, "nr": 12}),
                None
            )
            .is_err()
        );
        assert!(ok(Op::Gemm, "scalar.qgemm", &sp, Some(QMode::A32)).is_err());
        assert!(KernelChoice::from_stored(Op::Gemm, k, "scalar.qgemm", &sp, 3, 2, None).is_err());
        let qv = KernelChoice::QGemv(QGemv::new(QuantFormat::Q4_1, QMode::A8)).params_json();
        assert!(matches!(
            ok(Op::Gemm, "scalar.a8", &qv, None),
            Ok(KernelChoice::QGemv(_))
        ));
        assert!(ok(Op::Gemm, "scalar", &qv, None).is_err());
        assert!(ok(Op::Gemm, "scalar.a16", &qv, None).is_err());
        assert!(ok(Op::Gemm, "scalar.a8", &qv, Some(QMode::A32)).is_err());
    }

    #[test]
    fn a_choice_is_moved_to_a_layout_without_dropping_to_scalar() {
        let f = QuantFormat::Q4_0;
        let shape = (64, 64, 256);
        let d = KernelChoice::default_for(
            Op::Gemm,
            WeightKind::Quant(f),
            64,
            64,
            256,
            &caps(),
            2,
            None,
        );
        assert_eq!(d.for_layout(d.layout(), shape, &caps()), Some(d));
        for &nr in &qgemm::INTERLEAVES {
            let moved = d.for_layout(Layout::Packed { nr }, shape, &caps()).unwrap();
            assert_eq!(moved.layout(), Layout::Packed { nr });
            assert_eq!(moved.threads(), 2);
            let readers: Vec<Isa> = qgemm::variants(f)
                .iter()
                .copied()
                .filter(|&i| qgemm::interleaves(i).contains(&nr))
                .collect();
            assert_eq!(moved.isa(), Isa::best_of(&readers), "nr {nr}");
        }
        let rows = d.for_layout(Layout::Rows, shape, &caps()).unwrap();
        assert!(matches!(rows, KernelChoice::QGemv(q) if q.mode == QMode::A8 && q.threads == 2));
        assert_eq!(d.for_layout(Layout::Dense, shape, &caps()), None);
    }
}
