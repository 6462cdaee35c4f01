//! The int8 GEMM, pinned for `tiletune bench`: `i8gemm` `m×n×k` (m = 1 is
//! the GEMV), dtype `i8` (symmetric activations) or `i8_zp` (asymmetric,
//! with a zero point); reference: the f64 product of the dequantized
//! operands. Activations are quantized once outside the timed region (as a
//! runtime does once per layer input).

use super::common::{candidate, copies};
use super::pinned::{Check, Pinned, PinnedKernel};
use super::spec::{OpName, OpSpec, PinRequest};
use crate::TunerError;
use crate::campaign::{KernelProblem, Work};
use tiletune_kernels::Tunable;
use tiletune_kernels::i8gemm::{self, I8Gemm, I8GemmParams, I8GemmShape, QActivations, QWeights};
use tiletune_kernels::testing::Rng;

pub(super) const OPS: &[OpSpec] = &[OpSpec::new(
    OpName::Exact("i8gemm"),
    &["m", "n", "k"],
    &["i8", "i8_zp"],
    "i8gemm",
    pin,
    |d| d.terms(&[&["n", "k"], &["m", "k"], &["m", "n"]]),
)];

fn pin(req: &PinRequest) -> Result<Box<dyn KernelProblem>, TunerError> {
    let m = req.machine;
    let shape = I8GemmShape {
        m: req.dims[0],
        n: req.dims[1],
        k: req.dims[2],
    };
    if shape.k > i8gemm::MAX_K {
        return Err(req.bad_shape(format!(
            "k = {} exceeds {}: the i32 accumulators would overflow",
            shape.k,
            i8gemm::MAX_K
        )));
    }
    let params: I8GemmParams = req.params_or(|| I8GemmParams::default_for(&shape, &m.caps))?;
    let mut g = I8Gemm::new()
        .params(params)
        .threads(req.threads(m.max_threads));
    if let Some(isa) = req.config.isa {
        g = g.isa(isa);
    }
    let asymmetric = req.spec.dtype() == "i8_zp";
    let (rows, n, k) = (shape.m, shape.n, shape.k);
    let mut rng = Rng::new(m.seed);
    let wf = rng.vec_f32(n * k);
    // Asymmetric activations: a shifted range, as after a SiLU.
    let af: Vec<f32> = (0..rows * k)
        .map(|_| rng.uniform(if asymmetric { -0.3 } else { -1.0 }, 1.0))
        .collect();
    let w0 = i8gemm::quantize_weights(&wf, n, k)?;
    let a = i8gemm::quantize_activations(&af, rows, k, asymmetric)?;
    let reference = i8gemm::reference_f32(&a, &w0, None);
    let mut w = vec![w0];
    for _ in 1..copies(n * k, &m.caps, req.config.cold) {
        w.push(w[0].clone());
    }
    let (m64, n64, k64) = (rows as u64, n as u64, k as u64);
    Ok(Pinned {
        spec: req.spec.clone(),
        candidate: candidate(Some(g.isa), &g.params, g.threads),
        kernel: I8Kernel {
            g,
            a,
            w,
            c: vec![0.0; rows * n],
        },
        check: Check::Relative(reference),
        // Exact i32 accumulation; only the f32 epilogue (two products)
        // rounds.
        tolerance: 1e-5,
        work: Work {
            // int8 weights + their scales and sums, int8 activations +
            // scales, f32 out.
            bytes: n64 * k64 + 8 * n64 + m64 * k64 + 4 * m64 + 4 * m64 * n64,
            flops: 2 * m64 * n64 * k64,
        },
    }
    .boxed())
}

/// The operands of a pinned int8 GEMM.
struct I8Kernel {
    g: I8Gemm,
    a: QActivations,
    w: Vec<QWeights>,
    c: Vec<f32>,
}

impl PinnedKernel for I8Kernel {
    fn copies(&self) -> usize {
        self.w.len()
    }
    fn call(&mut self, copy: usize, _validating: bool) -> tiletune_kernels::Result<()> {
        self.g.run(&self.a, &self.w[copy], None, &mut self.c)
    }
    fn output(&mut self) -> &mut [f32] {
        &mut self.c
    }
}
