//! The row-wise f32 families, pinned for `tiletune bench` (the tuner does
//! not search them yet): `eltwise_<op>` `len` (e.g. `eltwise_silu`),
//! `rms_norm` / `layer_norm` `rows×dim`, `softmax` `rows×dim` and `rope`
//! `rows×heads×head_dim`.
//!
//! Norms run out of place (`src` → `out`). Softmax and RoPE run in place
//! on `out`: repeating them keeps values in range (softmax of
//! probabilities, rotations preserve norms). Element-wise ops are in place
//! but drift when repeated (SiLU of small negatives heads for subnormals,
//! ReLU² overflows), so each run first restores `out` from `src`, and the
//! byte count includes that copy. The element-wise families' cost is
//! transcendental functions rather than flops: their flop count is 0.

use super::common::{candidate, copies};
use super::pinned::{Check, Pinned, PinnedKernel};
use super::spec::{OpName, OpSpec, PinRequest};
use crate::TunerError;
use crate::campaign::{KernelProblem, Work};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tiletune_kernels::eltwise::{self, EltOp, EltParams, EltShape};
use tiletune_kernels::norm::{self, Norm, NormKind, NormParams, NormShape};
use tiletune_kernels::rope::{self, Positions, RopeCache, RopeLayout, RopeParams, RopeShape};
use tiletune_kernels::softmax::{self, SoftmaxParams, SoftmaxShape};
use tiletune_kernels::testing::Rng;
use tiletune_kernels::{Isa, KernelError, Tunable};

/// The row-wise kernels take f32 only.
const F32: &[&str] = &["f32"];

pub(super) const OPS: &[OpSpec] = &[
    OpSpec::new(
        OpName::Exact("rms_norm"),
        &["rows", "dim"],
        F32,
        "rms_norm",
        pin_norm,
        |d| d.terms(&[&["rows", "dim"], &["rows", "dim"], &["dim"]]),
    ),
    OpSpec::new(
        OpName::Exact("layer_norm"),
        &["rows", "dim"],
        F32,
        "layer_norm",
        pin_norm,
        |d| d.terms(&[&["rows", "dim"], &["rows", "dim"], &["dim"]]),
    ),
    OpSpec::new(
        OpName::Exact("softmax"),
        &["rows", "dim"],
        F32,
        "softmax",
        pin_softmax,
        |d| d.terms(&[&["rows", "dim"], &["rows", "dim"]]),
    ),
    OpSpec::new(
        OpName::Exact("rope"),
        &["rows", "heads", "head_dim"],
        F32,
        "rope",
        pin_rope,
        |d| d.terms(&[&["rows", "heads", "head_dim"], &["rows", "head_dim"]]),
    ),
    OpSpec::new(
        OpName::Prefix("eltwise_"),
        &["len"],
        F32,
        "eltwise",
        pin_eltwise,
        |d| d.terms(&[&["len"], &["len"], &["len"]]),
    ),
];

const NORM_EPS: f32 = 1e-5;

fn pin_norm(req: &PinRequest) -> Result<Box<dyn KernelProblem>, TunerError> {
    let shape = NormShape {
        rows: req.dims[0],
        dim: req.dims[1],
    };
    let (params, threads) = row_params(
        req,
        || NormParams::default_for(&shape, &req.machine.caps),
        |p| &mut p.threads,
    )?;
    let kind = if req.spec.op() == "rms_norm" {
        NormKind::Rms
    } else {
        NormKind::Layer
    };
    let units = RowSetup {
        op: RowOp::Norm(kind),
        threads,
        rows: shape.rows,
        heads: 1,
        dim: shape.dim,
    };
    Ok(row_problem(req, &params, units))
}

fn pin_softmax(req: &PinRequest) -> Result<Box<dyn KernelProblem>, TunerError> {
    let shape = SoftmaxShape {
        rows: req.dims[0],
        dim: req.dims[1],
    };
    let (params, threads) = row_params(
        req,
        || SoftmaxParams::default_for(&shape, &req.machine.caps),
        |p| &mut p.threads,
    )?;
    let units = RowSetup {
        op: RowOp::Softmax,
        threads,
        rows: shape.rows,
        heads: 1,
        dim: shape.dim,
    };
    Ok(row_problem(req, &params, units))
}

fn pin_rope(req: &PinRequest) -> Result<Box<dyn KernelProblem>, TunerError> {
    let shape = RopeShape {
        rows: req.dims[0],
        n_heads: req.dims[1],
        head_dim: req.dims[2],
    };
    let (params, threads) = row_params(
        req,
        || RopeParams::default_for(&shape, &req.machine.caps),
        |p| &mut p.threads,
    )?;
    let cache = RopeCache::new(10_000.0, shape.head_dim, shape.rows)?;
    let units = RowSetup {
        op: RowOp::Rope(Box::new(cache)),
        threads,
        rows: shape.rows,
        heads: shape.n_heads,
        dim: shape.head_dim,
    };
    Ok(row_problem(req, &params, units))
}

fn pin_eltwise(req: &PinRequest) -> Result<Box<dyn KernelProblem>, TunerError> {
    let op = req.spec.op();
    let name = op.strip_prefix("eltwise_").unwrap_or(op);
    let eop: EltOp =
        name.parse()
            .map_err(|e: eltwise::ParseEltOpError| KernelError::InvalidParams {
                op: req.op.kernel,
                reason: e.to_string(),
            })?;
    let shape = EltShape { len: req.dims[0] };
    let (params, threads) = row_params(
        req,
        || EltParams::default_for(&shape, &req.machine.caps),
        |p| &mut p.threads,
    )?;
    let units = RowSetup {
        op: RowOp::Elt(eop, params),
        threads,
        rows: 1,
        heads: 1,
        dim: shape.len,
    };
    Ok(row_problem(req, &params, units))
}

/// `--params` (else the family's default) with `--threads` over its
/// thread count, validated, and that thread count.
fn row_params<P: Tunable + DeserializeOwned>(
    req: &PinRequest,
    default: impl FnOnce() -> P,
    threads: fn(&mut P) -> &mut usize,
) -> Result<(P, usize), TunerError> {
    let mut params = req.params_or(default)?;
    let t = threads(&mut params);
    *t = req.config.threads.unwrap_or(*t);
    let t = *t;
    params.validate()?;
    Ok((params, t))
}

/// The row-wise f32 families.
enum RowOp {
    Elt(EltOp, EltParams),
    Norm(NormKind),
    Softmax,
    Rope(Box<RopeCache>),
}

/// A row-wise call over `rows × heads` units of `dim` floats.
struct RowSetup {
    op: RowOp,
    threads: usize,
    rows: usize,
    heads: usize,
    dim: usize,
}

/// Seeded inputs, the scalar kernel's output and the work of one run.
fn row_problem<P: Serialize>(req: &PinRequest, params: &P, s: RowSetup) -> Box<dyn KernelProblem> {
    // The forced ISA, else the best the element-wise kernels have.
    let isa = req.config.isa.unwrap_or_else(eltwise::best_isa);
    let m = req.machine;
    let (rows, heads, dim) = (s.rows, s.heads, s.dim);
    let len = rows * heads * dim;
    let mut rng = Rng::new(m.seed);
    // ±4 covers the interesting range of every activation.
    let x: Vec<f32> = (0..len).map(|_| rng.uniform(-4.0, 4.0)).collect();
    let weight: Vec<f32> = (0..dim).map(|_| rng.uniform(0.5, 1.5)).collect();
    let bias: Vec<f32> = (0..dim).map(|_| rng.uniform(-0.5, 0.5)).collect();
    let mut reference = x.clone();
    match &s.op {
        RowOp::Elt(o, _) => eltwise::scalar::unary(*o, &mut reference),
        RowOp::Norm(kind) => {
            let b = (*kind == NormKind::Layer).then_some(&bias[..]);
            norm::scalar::rows(*kind, Some(&x), &mut reference, &weight, b, NORM_EPS)
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
    let len64 = len as u64;
    let (bytes, flops) = match &s.op {
        // Restore copy (read + write) and the op (read + write).
        RowOp::Elt(..) => (16 * len64, 0),
        // x, out, weight (+ bias); ~4 flops per element (square-add,
        // scale, weight) and 2 more for the layer norm's mean and bias.
        RowOp::Norm(NormKind::Rms) => (8 * len64 + 4 * dim as u64, 4 * len64),
        RowOp::Norm(NormKind::Layer) => (8 * len64 + 8 * dim as u64, 6 * len64),
        // In place: read + write; exp is not counted as flops.
        RowOp::Softmax => (8 * len64, 0),
        // In place plus the cos/sin rows; 3 flops per feature (a rotated
        // pair is 4 multiplies and 2 adds).
        RowOp::Rope(cache) => (
            8 * len64 + 4 * (rows * cache.rotary_dim()) as u64,
            3 * len64,
        ),
    };
    // The kernels' own tests: 2e-6 relative for the vectorised
    // transcendental approximations, a few ulp for norms, softmax and RoPE
    // (the error here is relative to `1 + |want|`).
    let tolerance = match s.op {
        RowOp::Elt(..) => 4e-6,
        _ => 1e-5,
    };
    let n = copies(4 * len, m, req.config.cold);
    Pinned {
        spec: req.spec.clone(),
        candidate: candidate(Some(isa), params, s.threads),
        kernel: RowKernel {
            isa,
            setup: s,
            src: vec![x.clone(); n],
            out: vec![x; n],
            weight,
            bias,
        },
        check: Check::Relative(reference),
        tolerance,
        work: Work { bytes, flops },
    }
    .boxed()
}

/// The operands of a row-wise call: pristine inputs (rotated when cold)
/// and the working buffers.
struct RowKernel {
    isa: Isa,
    setup: RowSetup,
    src: Vec<Vec<f32>>,
    out: Vec<Vec<f32>>,
    weight: Vec<f32>,
    bias: Vec<f32>,
}

impl PinnedKernel for RowKernel {
    fn copies(&self) -> usize {
        self.src.len()
    }
    fn call(&mut self, copy: usize, validating: bool) -> tiletune_kernels::Result<()> {
        let (isa, s) = (self.isa, &self.setup);
        let threads = s.threads;
        let out = &mut self.out[copy];
        let src = &self.src[copy];
        match &s.op {
            RowOp::Elt(o, p) => {
                out.copy_from_slice(src);
                eltwise::apply_with(*o, out, isa, p)
            }
            RowOp::Norm(kind) => {
                let norm = match kind {
                    NormKind::Rms => Norm::rms(&self.weight, NORM_EPS),
                    NormKind::Layer => Norm::layer(&self.weight, NORM_EPS).with_bias(&self.bias),
                };
                norm.forward_with(src, out, s.rows, isa, &NormParams { threads })
            }
            RowOp::Softmax => {
                if validating {
                    out.copy_from_slice(src);
                }
                softmax::softmax_with(out, s.rows, s.dim, isa, &SoftmaxParams { threads })
            }
            RowOp::Rope(cache) => {
                if validating {
                    out.copy_from_slice(src);
                }
                let shape = RopeShape {
                    rows: s.rows,
                    n_heads: s.heads,
                    head_dim: s.dim,
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
    fn output(&mut self) -> &mut [f32] {
        &mut self.out[0]
    }
}
