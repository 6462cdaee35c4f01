//! One pinned configuration of any kernel family, for `tiletune bench`:
//! [`instantiate_one`] builds a [`KernelProblem`] with exactly one candidate
//! (a forced ISA, parameters from JSON, a thread count), seeded inputs and
//! the scalar reference's output, so the caller validates once and times
//! `run(0)`.
//!
//! Op names (the `op` of the [`Problem`]) and their shapes:
//! - `gemv` `n×k`, `gemm` `m×n×k` (dtype f32 or f16 weights);
//! - `qgemv_a32` / `qgemv_a8` `n×k` (dtype the weight format, e.g. q4_0);
//! - `eltwise_<op>` `len` (e.g. `eltwise_silu`), `rms_norm` / `layer_norm`
//!   `rows×dim`, `softmax` `rows×dim`, `rope` `rows×heads×head_dim` (f32);
//! - `attention`, `i8gemm`, `embed_lookup`, `lm_head`, `matmul_rope`: see
//!   [`super::more`].
//!
//! Byte counts are the compulsory traffic of one run (every operand read or
//! written once); flop counts are multiply-adds × 2 for the matrix ops and
//! 0 for the element-wise families, whose cost is transcendental functions
//! rather than flops (GFLOP/s is not reported for them).

use super::{GemmProblem, GemvProblem, Machine, candidate, cold_copies, more};
use crate::TunerError;
use crate::campaign::{KernelProblem, Work};
use half::f16;
use serde::de::DeserializeOwned;
use tiletune_kernels::eltwise::{self, EltOp, EltParams, EltShape};
use tiletune_kernels::gemm::{GemmConfig, GemmParams, GemmShape};
use tiletune_kernels::gemv::{GemvConfig, GemvParams, GemvShape};
use tiletune_kernels::norm::{Norm, NormKind, NormParams, NormShape};
use tiletune_kernels::qgemv::{self, QGemv, QGemvParams, QGemvShape, QMode};
use tiletune_kernels::quant::{self, QuantFormat};
use tiletune_kernels::rope::{self, Positions, RopeCache, RopeLayout, RopeParams, RopeShape};
use tiletune_kernels::softmax::{self, SoftmaxParams, SoftmaxShape};
use tiletune_kernels::testing::{Rng, max_rel_err};
use tiletune_kernels::{CpuCaps, Isa, KernelError, Tunable};
use tiletune_tables::{Candidate, Problem};

/// The configuration `tiletune bench` pins; `None` fields take the
/// family's defaults (best ISA, `Tunable::default_for`, its thread rule).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OneConfig {
    pub isa: Option<Isa>,
    /// The family's params struct as JSON (e.g. `{"rows_per_block":2}`).
    pub params: Option<serde_json::Value>,
    /// Overrides the thread count (also one given in `params`).
    pub threads: Option<usize>,
    /// Rotate input copies through more memory than the LLC holds.
    pub cold: bool,
}

/// Every op [`instantiate_one`] knows, with its shape's dimension names.
pub fn bench_dims(op: &str) -> Option<&'static [&'static str]> {
    Some(match op {
        "gemv" | "qgemv_a32" | "qgemv_a8" => &["n", "k"],
        "gemm" => &["m", "n", "k"],
        "rms_norm" | "layer_norm" | "softmax" => &["rows", "dim"],
        "rope" => &["rows", "heads", "head_dim"],
        o if o.strip_prefix("eltwise_").is_some() => &["len"],
        o => return more::dims(o),
    })
}

/// Dims of `op` set by flags rather than `--shape` (e.g. the attention's
/// `rows` and `page`), each optional.
pub fn bench_optional_dims(op: &str) -> &'static [&'static str] {
    more::optional_dims(op)
}

/// The dtypes [`instantiate_one`] accepts for `op`.
pub fn bench_dtypes(op: &str) -> &'static [&'static str] {
    match op {
        "gemv" => &["f32", "f16"],
        "gemm" => &[
            "f32", "f16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q6_k", "mxfp4",
        ],
        "qgemv_a32" | "qgemv_a8" => &[
            "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q6_k", "mxfp4",
        ],
        o if more::OPS.contains(&o) => more::dtypes(o),
        o if bench_dims(o).is_some() => &["f32"],
        _ => &[],
    }
}

/// Whether `op` is limited by memory bandwidth (its roofline is the STREAM
/// triad) rather than by FMA throughput (GEMM).
pub fn bandwidth_bound(op: &str) -> bool {
    !matches!(op, "gemm" | "matmul_rope")
}

/// Parses `AxB[xC]` into a problem for a [`bench_dims`] op; zero sizes are
/// refused.
pub fn parse_bench_problem(op: &str, dtype: &str, shape: &str) -> Result<Problem, TunerError> {
    parse_bench_problem_with(op, dtype, shape, &[])
}

/// [`parse_bench_problem`] plus the [`bench_optional_dims`] given by flags
/// (e.g. `[("rows", 1), ("page", 16)]`); a dim the op does not take, or a
/// zero, is refused.
pub fn parse_bench_problem_with(
    op: &str,
    dtype: &str,
    shape: &str,
    extra: &[(&str, usize)],
) -> Result<Problem, TunerError> {
    let names = bench_dims(op).ok_or_else(|| TunerError::UnknownOp(op.to_string()))?;
    let mut dims = crate::suite::parse_dims(op, names, shape)?;
    let optional = bench_optional_dims(op);
    for &(name, v) in extra {
        if !optional.contains(&name) || v == 0 {
            return Err(TunerError::BadShape {
                op: op.to_string(),
                shape: format!("{name}={v}"),
                expected: format!("{} and optionally {}", names.join("x"), optional.join(", ")),
            });
        }
        dims.push((name, v));
    }
    Ok(Problem::new(op, dtype, dims)?)
}

/// `op` as a `'static` name for kernel errors.
fn static_op(op: &str) -> &'static str {
    match op {
        "gemv" => "gemv",
        "gemm" => "gemm",
        "qgemv_a32" | "qgemv_a8" => "qgemv",
        "rms_norm" => "rms_norm",
        "layer_norm" => "layer_norm",
        "softmax" => "softmax",
        "rope" => "rope",
        o if more::OPS.contains(&o) => more::static_op(o),
        _ => "eltwise",
    }
}

/// Builds the one-candidate problem of `spec` under `one`.
pub fn instantiate_one(
    spec: &Problem,
    m: &Machine,
    one: &OneConfig,
) -> Result<Box<dyn KernelProblem>, TunerError> {
    let op = spec.op();
    let names = bench_dims(op).ok_or_else(|| TunerError::UnknownOp(op.to_string()))?;
    if !bench_dtypes(op).contains(&spec.dtype()) {
        return Err(TunerError::UnsupportedDtype {
            op: op.to_string(),
            dtype: spec.dtype().to_string(),
            supported: bench_dtypes(op).join(", "),
        });
    }
    let dims: Vec<usize> = names
        .iter()
        .map(|n| {
            spec.dim(n).ok_or_else(|| TunerError::BadShape {
                op: op.to_string(),
                shape: spec.to_string(),
                expected: names.join("x"),
            })
        })
        .collect::<Result<_, _>>()?;
    let sop = static_op(op);
    if let Some(isa) = one.isa
        && !isa.is_available()
    {
        return Err(KernelError::IsaUnavailable { op: sop, isa }.into());
    }
    if one.threads == Some(0) {
        return Err(KernelError::InvalidParams {
            op: sop,
            reason: "threads must be at least 1".into(),
        }
        .into());
    }
    if more::OPS.contains(&op) {
        return more::instantiate(spec, &dims, m, one);
    }
    let threads = |default: usize| one.threads.unwrap_or(default).max(1);
    match op {
        "gemv" => {
            let shape = GemvShape {
                n: dims[0],
                k: dims[1],
            };
            let params: GemvParams =
                params_or(sop, one, || GemvParams::default_for(&shape, &m.caps))?;
            let cfg = GemvConfig {
                isa: Some(one.isa.unwrap_or_else(|| {
                    tiletune_kernels::gemv::resolve_isa(None).unwrap_or(Isa::Scalar)
                })),
                params,
                threads: threads(m.max_threads),
            };
            let cfgs = vec![cfg];
            Ok(match spec.dtype() {
                "f16" => Box::new(GemvProblem::<f16>::build(
                    spec.clone(),
                    shape,
                    m,
                    cfgs,
                    one.cold,
                )),
                _ => Box::new(GemvProblem::<f32>::build(
                    spec.clone(),
                    shape,
                    m,
                    cfgs,
                    one.cold,
                )),
            })
        }
        "gemm" if spec.dtype() != "f32" && spec.dtype() != "f16" => {
            // Quantized weights: the W·A8 GEMM on repacked weights.
            let format: QuantFormat = spec
                .dtype()
                .parse()
                .ok()
                .filter(|&f| tiletune_kernels::qgemm::supports(f))
                .ok_or_else(|| TunerError::UnsupportedDtype {
                    op: op.to_string(),
                    dtype: spec.dtype().to_string(),
                    supported: bench_dtypes(op).join(", "),
                })?;
            let (mm, n, k) = (dims[0], dims[1], dims[2]);
            let qshape = tiletune_kernels::qgemm::QGemmShape {
                format,
                m: mm,
                n,
                k,
            };
            let isa = one
                .isa
                .unwrap_or_else(|| Isa::best_of(tiletune_kernels::qgemm::variants(format)));
            let params: tiletune_kernels::qgemm::QGemmParams = params_or(sop, one, || {
                tiletune_kernels::qgemm::QGemmParams::default_for_isa(&qshape, &m.caps, isa)
            })?;
            let q = tiletune_kernels::qgemm::QGemm::new(format)
                .isa(isa)
                .params(params)
                .threads(threads(m.max_threads));
            Ok(Box::new(super::qgemm::QGemmTune::one(
                spec.clone(),
                q,
                (mm, n, k),
                m,
                one.cold,
            )?))
        }
        "gemm" => {
            let shape = GemmShape {
                m: dims[0],
                n: dims[1],
                k: dims[2],
            };
            let isa = one.isa.unwrap_or_else(|| {
                tiletune_kernels::gemm::resolve_isa("gemm", None).unwrap_or(Isa::Scalar)
            });
            // Micro-kernel shapes differ per ISA: default for the one forced.
            let params: GemmParams = params_or(sop, one, || {
                GemmParams::default_for_isa(&shape, &m.caps, isa)
            })?;
            let cfg = GemmConfig {
                isa: Some(isa),
                params,
                threads: threads(m.max_threads),
            };
            let cfgs = vec![cfg];
            Ok(match spec.dtype() {
                "f16" => Box::new(GemmProblem::<f16>::build(
                    spec.clone(),
                    shape,
                    m,
                    cfgs,
                    one.cold,
                )),
                _ => Box::new(GemmProblem::<f32>::build(
                    spec.clone(),
                    shape,
                    m,
                    cfgs,
                    one.cold,
                )),
            })
        }
        "qgemv_a32" | "qgemv_a8" => {
            let format: QuantFormat =
                spec.dtype()
                    .parse()
                    .map_err(|_| TunerError::UnsupportedDtype {
                        op: op.to_string(),
                        dtype: spec.dtype().to_string(),
                        supported: bench_dtypes(op).join(", "),
                    })?;
            let mode = if op == "qgemv_a8" {
                QMode::A8
            } else {
                QMode::A32
            };
            let shape = QGemvShape {
                format,
                mode,
                n: dims[0],
                k: dims[1],
            };
            format.check_k(sop, shape.k)?;
            let params: QGemvParams =
                params_or(sop, one, || QGemvParams::default_for(&shape, &m.caps))?;
            let mut q = QGemv::new(format, mode)
                .params(params)
                .threads(threads(m.max_threads));
            if let Some(isa) = one.isa {
                q = q.isa(isa);
            }
            Ok(Box::new(QGemvOne::new(
                spec.clone(),
                q,
                shape,
                m,
                one.cold,
            )?))
        }
        "rms_norm" | "layer_norm" => {
            let shape = NormShape {
                rows: dims[0],
                dim: dims[1],
            };
            let mut params: NormParams =
                params_or(sop, one, || NormParams::default_for(&shape, &m.caps))?;
            params.threads = one.threads.unwrap_or(params.threads);
            params.validate()?;
            let kind = if op == "rms_norm" {
                NormKind::Rms
            } else {
                NormKind::Layer
            };
            let isa = one.isa.unwrap_or_else(eltwise::best_isa);
            Ok(Box::new(RowOne::new(
                spec.clone(),
                RowOp::Norm(kind),
                isa,
                &params,
                params.threads,
                dims[0],
                dims[1],
                1,
                m,
                one.cold,
            )))
        }
        "softmax" => {
            let shape = SoftmaxShape {
                rows: dims[0],
                dim: dims[1],
            };
            let mut params: SoftmaxParams =
                params_or(sop, one, || SoftmaxParams::default_for(&shape, &m.caps))?;
            params.threads = one.threads.unwrap_or(params.threads);
            params.validate()?;
            let isa = one.isa.unwrap_or_else(eltwise::best_isa);
            Ok(Box::new(RowOne::new(
                spec.clone(),
                RowOp::Softmax,
                isa,
                &params,
                params.threads,
                dims[0],
                dims[1],
                1,
                m,
                one.cold,
            )))
        }
        "rope" => {
            let shape = RopeShape {
                rows: dims[0],
                n_heads: dims[1],
                head_dim: dims[2],
            };
            let mut params: RopeParams =
                params_or(sop, one, || RopeParams::default_for(&shape, &m.caps))?;
            params.threads = one.threads.unwrap_or(params.threads);
            params.validate()?;
            let cache = RopeCache::new(10_000.0, shape.head_dim, shape.rows)?;
            let isa = one.isa.unwrap_or_else(eltwise::best_isa);
            Ok(Box::new(RowOne::new(
                spec.clone(),
                RowOp::Rope(Box::new(cache)),
                isa,
                &params,
                params.threads,
                dims[0],
                dims[2],
                dims[1],
                m,
                one.cold,
            )))
        }
        _ => {
            let name = op.strip_prefix("eltwise_").unwrap_or(op);
            let eop: EltOp =
                name.parse()
                    .map_err(|e: eltwise::ParseEltOpError| KernelError::InvalidParams {
                        op: sop,
                        reason: e.to_string(),
                    })?;
            let shape = EltShape { len: dims[0] };
            let mut params: EltParams =
                params_or(sop, one, || EltParams::default_for(&shape, &m.caps))?;
            params.threads = one.threads.unwrap_or(params.threads);
            params.validate()?;
            let isa = one.isa.unwrap_or_else(eltwise::best_isa);
            Ok(Box::new(RowOne::new(
                spec.clone(),
                RowOp::Elt(eop, params),
                isa,
                &params,
                params.threads,
                1,
                dims[0],
                1,
                m,
                one.cold,
            )))
        }
    }
}

/// `one.params` parsed as `P` and validated, else `default()`.
pub(super) fn params_or<P: Tunable + DeserializeOwned>(
    op: &'static str,
    one: &OneConfig,
    default: impl FnOnce() -> P,
) -> Result<P, TunerError> {
    let Some(v) = &one.params else {
        return Ok(default());
    };
    let p: P = serde_json::from_value(v.clone()).map_err(|e| KernelError::InvalidParams {
        op,
        reason: format!("params {v} do not parse: {e}"),
    })?;
    p.validate()?;
    Ok(p)
}

/// How many copies of a `bytes`-sized input to rotate through.
pub(super) fn copies(bytes: usize, caps: &CpuCaps, cold: bool) -> usize {
    if cold { cold_copies(bytes, caps) } else { 1 }
}

/// Quantized GEMV with one configuration. W·A8 activations are quantized
/// once outside the timed region (a runtime quantizes them once per token
/// and reuses them for every matrix that reads them).
struct QGemvOne {
    spec: Problem,
    q: QGemv,
    shape: QGemvShape,
    w: Vec<Vec<u8>>,
    next: usize,
    x: Vec<f32>,
    xq: Vec<u8>,
    y: Vec<f32>,
    /// f64 product of the dequantized operands, and Σ|w·x| per row.
    reference: Vec<f64>,
    magnitude: Vec<f64>,
    cands: Vec<Candidate>,
}

impl QGemvOne {
    fn new(
        spec: Problem,
        q: QGemv,
        shape: QGemvShape,
        m: &Machine,
        cold: bool,
    ) -> Result<Self, TunerError> {
        let (n, k) = (shape.n, shape.k);
        let mut rng = Rng::new(m.seed);
        let wf: Vec<f32> = (0..n * k).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let x = rng.vec_f32(k);
        let w0 = quant::quantize(shape.format, &wf)?;
        let mut wd = vec![0.0f32; n * k];
        quant::dequantize(shape.format, &w0, &mut wd)?;
        let (xq, xd) = match shape.mode {
            QMode::A32 => (Vec::new(), x.clone()),
            QMode::A8 => {
                let xq = qgemv::quantize_activations(shape.format, &x)?;
                let mut xd = vec![0.0f32; k];
                quant::dequantize(qgemv::activation_format(shape.format), &xq, &mut xd)?;
                (xq, xd)
            }
        };
        let (mut reference, mut magnitude) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for r in 0..n {
            let row = &wd[r * k..(r + 1) * k];
            let terms = row.iter().zip(&xd).map(|(&a, &b)| a as f64 * b as f64);
            reference.push(terms.clone().sum());
            magnitude.push(terms.map(f64::abs).sum());
        }
        if shape.mode == QMode::A8 {
            offset_term_with_stored_s(shape.format, &w0, &xq, &xd, k, &mut reference);
        }
        let cands = vec![candidate(Some(q.isa), &q.params, q.threads)];
        Ok(QGemvOne {
            spec,
            q,
            shape,
            w: vec![w0.clone(); copies(w0.len(), &m.caps, cold)],
            next: 0,
            x,
            xq,
            y: vec![0.0; n],
            reference,
            magnitude,
            cands,
        })
    }

    fn call(&mut self, copy: usize) -> tiletune_kernels::Result<()> {
        match self.shape.mode {
            QMode::A32 => self.q.run(&self.w[copy], &self.x, &mut self.y),
            QMode::A8 => {
                self.q
                    .run_prequantized(&self.w[copy], &self.xq, self.shape.k, &mut self.y)
            }
        }
    }
}

/// ggml's Q4_1 / Q5_1 × Q8_1 dot takes the offset term `m·Σx` of each
/// block with the activation block's stored `s` (an f16 of `d·Σq`), not
/// the exact `Σx`: the product the kernels define uses it, as their own
/// tests' reference does. Moves `reference` (the f64 product of the
/// dequantized operands) onto that definition; other formats are left as
/// they are. Without it the Q4_1 W·A8 GEMV "disagreed" by 1.7e-5 of Σ|w·x|
/// at 4096×4096, and `bench qgemv` refused to time it.
fn offset_term_with_stored_s(
    format: QuantFormat,
    w: &[u8],
    xq: &[u8],
    xd: &[f32],
    k: usize,
    reference: &mut [f64],
) {
    use tiletune_kernels::quant::blocks::{BlockQ4_1, BlockQ5_1, BlockQ8_1, cast_blocks};
    let mins: Vec<f32> = match format {
        QuantFormat::Q4_1 => cast_blocks::<BlockQ4_1>(w)
            .map(|b| b.iter().map(|b| b.m.to_f32()).collect())
            .unwrap_or_default(),
        QuantFormat::Q5_1 => cast_blocks::<BlockQ5_1>(w)
            .map(|b| b.iter().map(|b| b.m.to_f32()).collect())
            .unwrap_or_default(),
        _ => return,
    };
    let Some(xb) = cast_blocks::<BlockQ8_1>(xq) else {
        return;
    };
    let nb = k / 32;
    for (r, want) in reference.iter_mut().enumerate() {
        for (b, x) in xb.iter().enumerate().take(nb) {
            let Some(&m) = mins.get(r * nb + b) else {
                return;
            };
            let sum_x: f64 = xd[32 * b..32 * b + 32].iter().map(|&v| v as f64).sum();
            *want += m as f64 * (x.s.to_f32() as f64 - sum_x);
        }
    }
}

impl KernelProblem for QGemvOne {
    fn spec(&self) -> &Problem {
        &self.spec
    }
    fn candidates(&self) -> &[Candidate] {
        &self.cands
    }
    fn default_index(&self) -> usize {
        0
    }
    /// The largest `|got − want| / Σ|w·x|` over rows (after a 1e-6
    /// absolute allowance), the bound the kernel's own tests use.
    fn validate(&mut self, _i: usize) -> Result<f32, String> {
        self.y.fill(f32::NAN);
        self.call(0).map_err(|e| e.to_string())?;
        Ok(super::row_scaled_err(
            &self.y,
            &self.reference,
            &self.magnitude,
        ))
    }
    fn tolerance(&self) -> f32 {
        1e-5
    }
    fn run(&mut self, _i: usize) {
        self.next = (self.next + 1) % self.w.len();
        let _ = self.call(self.next);
    }
    fn work(&self) -> Work {
        let (n, k) = (self.shape.n as u64, self.shape.k as u64);
        let x_bytes = match self.shape.mode {
            QMode::A32 => 4 * k,
            QMode::A8 => self.xq.len() as u64,
        };
        Work {
            bytes: self.w[0].len() as u64 + x_bytes + 4 * n,
            flops: 2 * n * k,
        }
    }
}

/// The row-wise f32 families.
enum RowOp {
    Elt(EltOp, EltParams),
    Norm(NormKind),
    Softmax,
    Rope(Box<RopeCache>),
}

/// An element-wise, norm, softmax or RoPE call with one configuration over
/// `rows × heads` units of `dim` floats.
///
/// Norms run out of place (`src` → `out`). Softmax and RoPE run in place
/// on `out`: repeating them keeps values in range (softmax of
/// probabilities, rotations preserve norms). Element-wise ops are in place
/// but drift when repeated (SiLU of small negatives heads for subnormals,
/// ReLU² overflows), so each run first restores `out` from `src`, and the
/// byte count includes that copy.
struct RowOne {
    spec: Problem,
    op: RowOp,
    isa: Isa,
    threads: usize,
    rows: usize,
    heads: usize,
    dim: usize,
    /// Pristine inputs (rotated when cold) and the working buffers.
    src: Vec<Vec<f32>>,
    out: Vec<Vec<f32>>,
    next: usize,
    weight: Vec<f32>,
    bias: Vec<f32>,
    reference: Vec<f32>,
    cands: Vec<Candidate>,
}

const NORM_EPS: f32 = 1e-5;

impl RowOne {
    #[allow(clippy::too_many_arguments)]
    fn new<P: serde::Serialize>(
        spec: Problem,
        op: RowOp,
        isa: Isa,
        params: &P,
        threads: usize,
        rows: usize,
        dim: usize,
        heads: usize,
        m: &Machine,
        cold: bool,
    ) -> Self {
        let len = rows * heads * dim;
        let mut rng = Rng::new(m.seed);
        // ±4 covers the interesting range of every activation.
        let x: Vec<f32> = (0..len).map(|_| rng.uniform(-4.0, 4.0)).collect();
        let weight: Vec<f32> = (0..dim).map(|_| rng.uniform(0.5, 1.5)).collect();
        let bias: Vec<f32> = (0..dim).map(|_| rng.uniform(-0.5, 0.5)).collect();
        let mut reference = x.clone();
        match &op {
            RowOp::Elt(o, _) => eltwise::scalar::unary(*o, &mut reference),
            RowOp::Norm(kind) => {
                let b = (*kind == NormKind::Layer).then_some(&bias[..]);
                tiletune_kernels::norm::scalar::rows(
                    *kind,
                    Some(&x),
                    &mut reference,
                    &weight,
                    b,
                    NORM_EPS,
                )
            }
            RowOp::Softmax => {
                for r in reference.chunks_exact_mut(dim) {
                    softmax::scalar::row(r, dim, 1.0);
                }
            }
            RowOp::Rope(cache) => {
                for (u, h) in reference.chunks_exact_mut(dim).enumerate() {
                    let (cos, sin) = cache.at(u / heads);
                    rope::scalar::head(h, cos, sin, RopeLayout::RotateHalf);
                }
            }
        }
        let n = copies(4 * len, &m.caps, cold);
        let cands = vec![candidate(Some(isa), params, threads)];
        RowOne {
            spec,
            op,
            isa,
            threads,
            rows,
            heads,
            dim,
            src: vec![x.clone(); n],
            out: vec![x; n],
            next: 0,
            weight,
            bias,
            reference,
            cands,
        }
    }

    fn call(&mut self, copy: usize, restore: bool) -> tiletune_kernels::Result<()> {
        let (isa, threads) = (self.isa, self.threads);
        let out = &mut self.out[copy];
        let src = &self.src[copy];
        match &self.op {
            RowOp::Elt(o, p) => {
                out.copy_from_slice(src);
                eltwise::apply_with(*o, out, isa, p)
            }
            RowOp::Norm(kind) => {
                let norm = match kind {
                    NormKind::Rms => Norm::rms(&self.weight, NORM_EPS),
                    NormKind::Layer => Norm::layer(&self.weight, NORM_EPS).with_bias(&self.bias),
                };
                norm.forward_with(src, out, self.rows, isa, &NormParams { threads })
            }
            RowOp::Softmax => {
                if restore {
                    out.copy_from_slice(src);
                }
                softmax::softmax_with(out, self.rows, self.dim, isa, &SoftmaxParams { threads })
            }
            RowOp::Rope(cache) => {
                if restore {
                    out.copy_from_slice(src);
                }
                let shape = RopeShape {
                    rows: self.rows,
                    n_heads: self.heads,
                    head_dim: self.dim,
                };
                rope::rope_with(
                    out,
                    shape,
                    Positions::Offset(0),
                    cache,
                    RopeLayout::RotateHalf,
                    isa,
                    &RopeParams { threads },
                )
            }
        }
    }
}

impl KernelProblem for RowOne {
    fn spec(&self) -> &Problem {
        &self.spec
    }
    fn candidates(&self) -> &[Candidate] {
        &self.cands
    }
    fn default_index(&self) -> usize {
        0
    }
    fn validate(&mut self, _i: usize) -> Result<f32, String> {
        self.call(0, true).map_err(|e| e.to_string())?;
        Ok(max_rel_err(&self.out[0], &self.reference))
    }
    /// The kernels' own tests: 2e-6 relative for the vectorised
    /// transcendental approximations, a few ulp for norms, softmax and RoPE
    /// (the error here is relative to `1 + |want|`).
    fn tolerance(&self) -> f32 {
        match self.op {
            RowOp::Elt(..) => 4e-6,
            _ => 1e-5,
        }
    }
    fn run(&mut self, _i: usize) {
        self.next = (self.next + 1) % self.src.len();
        let _ = self.call(self.next, false);
    }
    fn work(&self) -> Work {
        let len = (self.rows * self.heads * self.dim) as u64;
        let (bytes, flops) = match &self.op {
            // Restore copy (read + write) and the op (read + write).
            RowOp::Elt(..) => (16 * len, 0),
            // x, out, weight (+ bias); ~4 flops per element (square-add,
            // scale, weight) and 2 more for the layer norm's mean and bias.
            RowOp::Norm(NormKind::Rms) => (8 * len + 4 * self.dim as u64, 4 * len),
            RowOp::Norm(NormKind::Layer) => (8 * len + 8 * self.dim as u64, 6 * len),
            // In place: read + write; exp is not counted as flops.
            RowOp::Softmax => (8 * len, 0),
            // In place plus the cos/sin rows; 3 flops per feature (a rotated
            // pair is 4 multiplies and 2 adds).
            RowOp::Rope(cache) => (
                8 * len + 4 * (self.rows * cache.rotary_dim()) as u64,
                3 * len,
            ),
        };
        Work { bytes, flops }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine() -> Machine {
        Machine::small_for_tests(3)
    }

    fn one(spec: &Problem, cfg: &OneConfig) -> Box<dyn KernelProblem> {
        instantiate_one(spec, &machine(), cfg).unwrap_or_else(|e| panic!("{spec}: {e}"))
    }

    #[test]
    fn every_op_on_every_available_isa_validates_with_one_candidate() {
        let specs = [
            ("gemv", "f32", "7x33"),
            ("gemv", "f16", "5x17"),
            ("gemm", "f32", "3x5x19"),
            ("gemm", "q4_1", "3x5x64"),
            ("gemm", "q8_0", "5x19x96"),
            ("qgemv_a32", "q5_1", "3x64"),
            ("qgemv_a8", "q6_k", "2x256"),
            ("qgemv_a8", "q8_0", "5x96"),
            ("eltwise_gelu_erf", "f32", "37"),
            ("eltwise_sigmoid", "f32", "1"),
            ("rms_norm", "f32", "3x21"),
            ("layer_norm", "f32", "2x16"),
            ("softmax", "f32", "4x9"),
            ("rope", "f32", "3x2x10"),
        ];
        for (op, dtype, shape) in specs {
            let spec = parse_bench_problem(op, dtype, shape).unwrap();
            for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
                for cold in [false, true] {
                    let cfg = OneConfig {
                        isa: Some(isa),
                        threads: Some(2),
                        cold,
                        ..OneConfig::default()
                    };
                    let mut p = one(&spec, &cfg);
                    assert_eq!(p.candidates().len(), 1);
                    assert_eq!(p.candidates()[0].threads(), 2);
                    match p.validate(0) {
                        Ok(err) => assert!(err <= p.tolerance(), "{spec} {isa}: {err}"),
                        // A family without this variant says so.
                        Err(e) => assert!(e.contains("variant"), "{spec} {isa}: {e}"),
                    }
                    p.run(0);
                    p.run(0);
                    let w = p.work();
                    assert!(w.bytes > 0, "{spec}");
                }
            }
        }
    }

    /// Q4_1 / Q5_1 × Q8_1 are defined with the activation block's stored
    /// `s`: against the exact `Σx` the W·A8 GEMV was 1.7e-5 (of Σ|w·x|) off
    /// at 4096×4096 and ~1e-6 over these 64 rows; with the stored `s` only
    /// f32 rounding is left (~1e-8).
    #[test]
    fn min_formats_are_checked_against_the_product_with_the_stored_s() {
        for dtype in ["q4_1", "q5_1"] {
            let spec = parse_bench_problem("qgemv_a8", dtype, "64x4096").unwrap();
            let mut p = one(&spec, &OneConfig::default());
            let err = p.validate(0).unwrap();
            assert!(err < 2e-7, "{dtype}: {err}");
        }
    }

    #[test]
    fn params_json_and_bad_input_are_checked() {
        let spec = parse_bench_problem("qgemv_a32", "q4_0", "4x64").unwrap();
        let cfg = OneConfig {
            params: Some(serde_json::json!({"rows_per_block": 2})),
            ..OneConfig::default()
        };
        let p = one(&spec, &cfg);
        assert_eq!(p.candidates()[0].params()["rows_per_block"], 2);
        let bad = |spec: &Problem, cfg: OneConfig| {
            instantiate_one(spec, &machine(), &cfg)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_else(|| panic!("{spec} should fail"))
        };
        let e = bad(
            &spec,
            OneConfig {
                params: Some(serde_json::json!({"rows_per_block": 3})),
                ..OneConfig::default()
            },
        );
        assert!(e.contains("rows_per_block 3"), "{e}");
        let e = bad(
            &spec,
            OneConfig {
                params: Some(serde_json::json!({"rows": 3})),
                ..OneConfig::default()
            },
        );
        assert!(e.contains("do not parse"), "{e}");
        let e = bad(
            &parse_bench_problem("qgemv_a32", "q4_k", "4x64").unwrap(),
            OneConfig::default(),
        );
        assert!(e.contains("256"), "{e}");
        let e = bad(
            &Problem::new("softmax", "f16", [("rows", 1), ("dim", 4)]).unwrap(),
            OneConfig::default(),
        );
        assert!(e.contains("supported: f32"), "{e}");
        let e = bad(
            &Problem::new("eltwise_tanhx", "f32", [("len", 4)]).unwrap(),
            OneConfig::default(),
        );
        assert!(e.contains("unknown element-wise op"), "{e}");
        assert!(parse_bench_problem("rope", "f32", "2x3").is_err());
        assert!(parse_bench_problem("conv", "f32", "2").is_err());
        let missing = Isa::ALL.into_iter().find(|i| !i.is_available()).unwrap();
        let e = bad(
            &parse_bench_problem("gemv", "f32", "4x4").unwrap(),
            OneConfig {
                isa: Some(missing),
                ..OneConfig::default()
            },
        );
        assert!(e.contains("not available"), "{e}");
    }
}
