//! The fused projection + RoPE, pinned for `tiletune bench`: `matmul_rope`
//! `m×heads×head_dim×k` (f32 or f16 weights), rotate-half RoPE (θ = 10⁶,
//! positions `0..m`); reference: the f64 product, then the rotation in f64.

use super::common::{candidate, copies};
use super::pinned::{Check, Pinned, PinnedKernel};
use super::spec::{OpName, OpSpec, PinRequest};
use crate::TunerError;
use crate::campaign::{KernelProblem, Work};
use half::f16;
use tiletune_kernels::gemm::{GemmConfig, GemmShape};
use tiletune_kernels::matmul_rope::{self as mr, Positions, RopeLayout, RopeSpec};
use tiletune_kernels::testing::Rng;

pub(super) const OPS: &[OpSpec] = &[OpSpec::new(
    OpName::Exact("matmul_rope"),
    &["m", "heads", "head_dim", "k"],
    &["f32", "f16"],
    "matmul_rope",
    pin,
    |d| {
        d.terms(&[
            &["heads", "head_dim", "k"],
            &["m", "k"],
            &["m", "heads", "head_dim"],
        ])
    },
)
.fma_bound()];

fn pin(req: &PinRequest) -> Result<Box<dyn KernelProblem>, TunerError> {
    let m = req.machine;
    let (rows, heads, head_dim, k) = (req.dims[0], req.dims[1], req.dims[2], req.dims[3]);
    if !head_dim.is_multiple_of(2) {
        return Err(req.bad_shape(format!(
            "head_dim = {head_dim} must be even (RoPE rotates pairs)"
        )));
    }
    let shape = GemmShape {
        m: rows,
        n: heads * head_dim,
        k,
    };
    let cfg = super::gemm::pinned_config(req, &shape)?;
    let rope = RopeSpec {
        head_dim,
        rotary_dim: head_dim,
        theta: 1.0e6,
        layout: RopeLayout::RotateHalf,
    };
    let n = shape.n;
    let mut rng = Rng::new(m.seed);
    let x = rng.vec_f32(rows * k);
    let wf = rng.vec_f32(n * k);
    // The reference reads the weights the kernel reads (f16 widened).
    let cold = req.config.cold;
    let (w, wv, elem) = if req.spec.dtype() == "f16" {
        let w16: Vec<f16> = wf.iter().map(|&v| f16::from_f32(v)).collect();
        let wv = w16.iter().map(|v| v.to_f32()).collect();
        let n_copies = copies(2 * n * k, m, cold);
        (RopeWeights::F16(vec![w16; n_copies]), wv, 2)
    } else {
        let n_copies = copies(4 * n * k, m, cold);
        (RopeWeights::F32(vec![wf.clone(); n_copies]), wf, 4)
    };
    let reference = matmul_rope_reference(&x, &wv, shape, &rope);
    let (m64, n64, k64) = (rows as u64, n as u64, k as u64);
    Ok(Pinned {
        spec: req.spec.clone(),
        candidate: candidate(cfg.isa, &cfg.params, cfg.threads),
        kernel: MatmulRopeKernel {
            shape,
            rope,
            cfg,
            x,
            w,
            out: vec![0.0; rows * n],
        },
        check: Check::PerSqrtK { reference, k },
        // As for GEMM: f32 accumulation error grows like √k·ε (the error is
        // divided by √k); the rotation adds a few ulp.
        tolerance: 1e-5,
        work: Work {
            bytes: 4 * m64 * k64 + elem * n64 * k64 + 4 * m64 * n64,
            // The product; the rotation (6 flops per pair) is counted too.
            flops: 2 * m64 * n64 * k64 + 3 * m64 * n64,
        },
    }
    .boxed())
}

/// Weights of the fused projection, one per copy.
enum RopeWeights {
    F32(Vec<Vec<f32>>),
    F16(Vec<Vec<f16>>),
}

/// The operands of a pinned fused projection + RoPE.
struct MatmulRopeKernel {
    shape: GemmShape,
    rope: RopeSpec,
    cfg: GemmConfig,
    x: Vec<f32>,
    w: RopeWeights,
    out: Vec<f32>,
}

impl PinnedKernel for MatmulRopeKernel {
    fn copies(&self) -> usize {
        match &self.w {
            RopeWeights::F32(w) => w.len(),
            RopeWeights::F16(w) => w.len(),
        }
    }
    fn call(&mut self, copy: usize, _validating: bool) -> tiletune_kernels::Result<()> {
        match &self.w {
            RopeWeights::F32(w) => mr::matmul_rope_f32(
                &self.x,
                &w[copy],
                None,
                &mut self.out,
                self.shape,
                &self.rope,
                Positions::Offset(0),
                &self.cfg,
            ),
            RopeWeights::F16(w) => mr::matmul_rope_f16w_f32(
                &self.x,
                &w[copy],
                None,
                &mut self.out,
                self.shape,
                &self.rope,
                Positions::Offset(0),
                &self.cfg,
            ),
        }
    }
    fn output(&mut self) -> &mut [f32] {
        &mut self.out
    }
}

/// `RoPE(x · Wᵀ)` in f64: row `r` at position `r`, rotate-half pairs
/// `(i, i + rd/2)` at angle `r · θ^(−2i/rd)`.
fn matmul_rope_reference(x: &[f32], w: &[f32], shape: GemmShape, rope: &RopeSpec) -> Vec<f32> {
    let (rows, n, k) = (shape.m, shape.n, shape.k);
    let mut y = vec![0.0f64; rows * n];
    for r in 0..rows {
        for j in 0..n {
            y[r * n + j] = (0..k)
                .map(|t| x[r * k + t] as f64 * w[j * k + t] as f64)
                .sum();
        }
    }
    let (hd, half) = (rope.head_dim, rope.rotary_dim / 2);
    for r in 0..rows {
        for h in 0..n / hd {
            let base = r * n + h * hd;
            for i in 0..half {
                let freq = (rope.theta as f64).powf(-2.0 * i as f64 / rope.rotary_dim as f64);
                let (sin, cos) = (r as f64 * freq).sin_cos();
                let (a, b) = (y[base + i], y[base + i + half]);
                y[base + i] = a * cos - b * sin;
                y[base + i + half] = a * sin + b * cos;
            }
        }
    }
    y.into_iter().map(|v| v as f32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The RoPE reference is written independently of the kernel: check it
    /// on its own against the definition.
    #[test]
    fn rope_reference_rotates_by_position() {
        let x = rope_reference_sample();
        // A rotation by position 0 is the identity; by position 1 it is not.
        assert_eq!(x[0], x[1]);
        assert_ne!(x[2], x[3]);
    }

    /// Row 0 (position 0) and row 1 (position 1) of a one-head projection
    /// with identity-like weights: [row0 before, row0 after, row1 before, row1 after].
    fn rope_reference_sample() -> [f32; 4] {
        let shape = GemmShape { m: 2, n: 4, k: 4 };
        let mut w = vec![0.0f32; 16];
        for i in 0..4 {
            w[i * 4 + i] = 1.0;
        }
        let x = [1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0];
        let rope = RopeSpec {
            head_dim: 4,
            rotary_dim: 4,
            theta: 10_000.0,
            layout: RopeLayout::RotateHalf,
        };
        let y = matmul_rope_reference(&x, &w, shape, &rope);
        [x[0], y[0], x[4], y[4]]
    }
}
