//! The quantized GEMV (`gemv` with a GGUF weight dtype, and the pinned
//! `qgemv_a32` / `qgemv_a8` of `tiletune bench`).
//!
//! Tuned: both activation modes (W·A32 and W·A8) × every ISA variant the
//! format has on this CPU × the family's parameter candidates × thread
//! counts. Variants are named `<isa>.a32` / `<isa>.a8`: the runtime's
//! execution plan reads the activation mode back from that name. Each mode
//! is validated against the scalar reference kernel *of that mode* (W·A8
//! quantizes the activations, and for Q4_1/Q5_1 uses the Q8_1 block sum that
//! GGUF stores in f16, so its exact answer differs from W·A32's by design),
//! with the bound the kernel's own tests use: `|got − want| ≤ 1e-6 + 1e-5 ·
//! Σ|w·x|` per row.
//!
//! Pinned (`qgemv_a32` / `qgemv_a8` `n×k`, dtype the weight format): one
//! mode, checked against the f64 product of the dequantized operands. W·A8
//! activations are quantized once outside the timed region (a runtime
//! quantizes them once per token and reuses them for every matrix that
//! reads them).

use super::common::{
    Copies, candidate, candidate_of, copies, for_each_dequantized_row, random_weights,
    row_scaled_err, thread_counts,
};
use super::pinned::{Check, Pinned, PinnedKernel};
use super::spec::{Machine, OpName, OpSpec, PinRequest};
use crate::TunerError;
use crate::campaign::{KernelProblem, Work};
use tiletune_kernels::choice::KernelChoice;
use tiletune_kernels::qgemv::{self, QGemv, QGemvParams, QGemvShape, QMode};
use tiletune_kernels::quant::{self, QuantFormat};
use tiletune_kernels::testing::Rng;
use tiletune_kernels::{Isa, Tunable};
use tiletune_tables::{Candidate, Problem};

/// `qgemv_a32` and `qgemv_a8`: the pinned quantized GEMV of one activation
/// mode (the tuned one is `gemv` with a quantized dtype, in `gemv.rs`).
pub(super) const OPS: &[OpSpec] = &[
    OpSpec::new(
        OpName::Exact("qgemv_a32"),
        &["n", "k"],
        super::quant::DTYPES,
        "qgemv",
        |req| pin(req, QMode::A32),
        |d| d.terms(&[&["n", "k"], &["n"], &["k"]]),
    ),
    OpSpec::new(
        OpName::Exact("qgemv_a8"),
        &["n", "k"],
        super::quant::DTYPES,
        "qgemv",
        |req| pin(req, QMode::A8),
        |d| d.terms(&[&["n", "k"], &["n"], &["k"]]),
    )
    .int8(),
];

/// One configuration of one mode.
fn pin(req: &PinRequest, mode: QMode) -> Result<Box<dyn KernelProblem>, TunerError> {
    let m = req.machine;
    let format: QuantFormat = req
        .spec
        .dtype()
        .parse()
        .map_err(|_| req.unsupported_dtype())?;
    let shape = QGemvShape {
        format,
        mode,
        n: req.dims[0],
        k: req.dims[1],
    };
    format.check_k(req.op.kernel, shape.k)?;
    let params: QGemvParams = req.params_or(|| QGemvParams::default_for(&shape, &m.caps))?;
    let mut q = QGemv::new(format, mode)
        .params(params)
        .threads(req.threads(m.max_threads));
    if let Some(isa) = req.config.isa {
        q = q.isa(isa);
    }
    let (n, k) = (shape.n, shape.k);
    let w0 = random_weights(format, n, k, m.seed, m.max_threads)?;
    let mut rng = Rng::new(m.seed);
    let x = rng.vec_f32(k);
    let (xq, xd) = match mode {
        QMode::A32 => (Vec::new(), x.clone()),
        QMode::A8 => {
            let xq = qgemv::quantize_activations(format, &x)?;
            let mut xd = vec![0.0f32; k];
            quant::dequantize(qgemv::activation_format(format), &xq, &mut xd)?;
            (xq, xd)
        }
    };
    let (mut reference, mut magnitude) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for_each_dequantized_row(format, &w0, (n, k), |row| {
        let terms = row.iter().zip(&xd).map(|(&a, &b)| a as f64 * b as f64);
        reference.push(terms.clone().sum::<f64>());
        magnitude.push(terms.map(f64::abs).sum::<f64>());
    })?;
    if mode == QMode::A8 {
        offset_term_with_stored_s(format, &w0, &xq, &xd, k, &mut reference);
    }
    let x_bytes = match mode {
        QMode::A32 => 4 * k as u64,
        QMode::A8 => xq.len() as u64,
    };
    let work = Work {
        bytes: w0.len() as u64 + x_bytes + 4 * n as u64,
        flops: 2 * (n * k) as u64,
    };
    Ok(Pinned {
        spec: req.spec.clone(),
        candidate: candidate(Some(q.isa), &q.params, q.threads),
        kernel: QGemvKernel {
            q,
            k,
            w: vec![w0.clone(); copies(w0.len(), m, req.config.cold)],
            x,
            xq,
            y: vec![0.0; n],
        },
        // The largest `|got − want| / Σ|w·x|` over rows (after a 1e-6
        // absolute allowance), the bound the kernel's own tests use.
        check: Check::RowScaled {
            reference,
            magnitude,
        },
        tolerance: 1e-5,
        work,
    }
    .boxed())
}

/// The operands of a pinned quantized GEMV.
struct QGemvKernel {
    q: QGemv,
    k: usize,
    w: Vec<Vec<u8>>,
    x: Vec<f32>,
    xq: Vec<u8>,
    y: Vec<f32>,
}

impl PinnedKernel for QGemvKernel {
    fn copies(&self) -> usize {
        self.w.len()
    }
    fn call(&mut self, copy: usize, _validating: bool) -> tiletune_kernels::Result<()> {
        match self.q.mode {
            QMode::A32 => self.q.run(&self.w[copy], &self.x, &mut self.y),
            QMode::A8 => self
                .q
                .run_prequantized(&self.w[copy], &self.xq, self.k, &mut self.y),
        }
    }
    fn output(&mut self) -> &mut [f32] {
        &mut self.y
    }
}

/// ggml's Q4_1 / Q5_1 × Q8_1 dot takes the offset term `m·Σx` of each
/// block with the activation block's stored `s` (an f16 of `d·Σq`), not
/// the exact `Σx`: the product the kernels define uses it, as their own
/// tests' reference does. Moves `reference` (the f64 product of the
/// dequantized operands) onto that definition; other formats are left as
/// they are. Against the exact `Σx` a right Q4_1 W·A8 GEMV is 1.7e-5 of
/// Σ|w·x| off at 4096×4096, beyond the tolerance.
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

/// One mode's inputs and reference.
struct ModeData {
    xq: Vec<u8>,
    reference: Vec<f64>,
    magnitude: Vec<f64>,
}

pub(super) struct QGemvTune {
    spec: Problem,
    k: usize,
    /// Rotated weight copies (cold-cache timing).
    w: Copies<Vec<u8>>,
    x: Vec<f32>,
    y: Vec<f32>,
    a32: ModeData,
    a8: ModeData,
    cands: Vec<Candidate>,
    kernels: Vec<QGemv>,
}

impl QGemvTune {
    pub(super) fn new(
        spec: Problem,
        format: QuantFormat,
        n: usize,
        k: usize,
        m: &Machine,
    ) -> Result<Self, TunerError> {
        let w0 = random_weights(format, n, k, m.seed, m.max_threads)?;
        let mut rng = Rng::new(m.seed);
        let x = rng.vec_f32(k);
        let xq = qgemv::quantize_activations(format, &x)?;
        let mut xd = vec![0.0f32; k];
        quant::dequantize(qgemv::activation_format(format), &xq, &mut xd)?;
        // Σ|w·x| per row scales the tolerance; the exact answer of each mode
        // comes from the scalar reference kernel.
        let (mut m32, mut m8) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let size = |w: &[f32], x: &[f32]| -> f64 {
            w.iter()
                .zip(x)
                .map(|(&a, &b)| (a as f64 * b as f64).abs())
                .sum()
        };
        for_each_dequantized_row(format, &w0, (n, k), |row| {
            m32.push(size(row, &x));
            m8.push(size(row, &xd));
        })?;
        let mut y = vec![0.0f32; n];
        QGemv::new(format, QMode::A32)
            .isa(Isa::Scalar)
            .run(&w0, &x, &mut y)?;
        let r32: Vec<f64> = y.iter().map(|&v| v as f64).collect();
        QGemv::new(format, QMode::A8)
            .isa(Isa::Scalar)
            .run_prequantized(&w0, &xq, k, &mut y)?;
        let r8: Vec<f64> = y.iter().map(|&v| v as f64).collect();

        let shape = qgemv::QGemvShape {
            format,
            mode: QMode::A32,
            n,
            k,
        };
        let caps = m.caps;
        let default_params = QGemvParams::default_for(&shape, &caps);
        // Default first: the best W·A8 variant (integer dot products are the
        // fast path wherever the format has them) with analytic params.
        let mut kernels = Vec::new();
        for mode in [QMode::A8, QMode::A32] {
            let isas: Vec<Isa> = qgemv::variants(format, mode)
                .iter()
                .copied()
                .filter(|i| i.is_available())
                .collect();
            let mut params = vec![default_params];
            for p in QGemvParams::candidates(&shape, &caps) {
                if !params.contains(&p) {
                    params.push(p);
                }
            }
            for &isa in isas.iter().rev() {
                for &p in &params {
                    for t in thread_counts(m.max_threads) {
                        let q = QGemv::new(format, mode).isa(isa).params(p).threads(t);
                        if !kernels.contains(&q) {
                            kernels.push(q);
                        }
                    }
                }
            }
        }
        // The analytic default runs on every core available.
        if let Some(pos) = kernels
            .iter()
            .position(|q| q.threads == m.max_threads.max(1))
        {
            kernels.swap(0, pos);
        }
        let cands = kernels
            .iter()
            .map(|q| candidate_of(&KernelChoice::QGemv(*q)))
            .collect();
        Ok(QGemvTune {
            spec,
            k,
            w: Copies::new(w0.clone(), copies(w0.len(), m, true)),
            x,
            y: vec![0.0; n],
            a32: ModeData {
                xq: Vec::new(),
                reference: r32,
                magnitude: m32,
            },
            a8: ModeData {
                xq,
                reference: r8,
                magnitude: m8,
            },
            cands,
            kernels,
        })
    }

    /// Runs kernel `i` on the first weight copy, or with `next` on the
    /// next one.
    fn call(&mut self, i: usize, next: bool) -> tiletune_kernels::Result<()> {
        let q = self.kernels[i];
        let w = if next { self.w.next() } else { self.w.first() };
        match q.mode {
            QMode::A32 => q.run(w, &self.x, &mut self.y),
            QMode::A8 => q.run_prequantized(w, &self.a8.xq, self.k, &mut self.y),
        }
    }
}

impl KernelProblem for QGemvTune {
    fn spec(&self) -> &Problem {
        &self.spec
    }
    fn candidates(&self) -> &[Candidate] {
        &self.cands
    }
    fn default_index(&self) -> usize {
        0
    }
    fn validate(&mut self, i: usize) -> Result<f32, String> {
        self.y.fill(f32::NAN);
        self.call(i, false).map_err(|e| e.to_string())?;
        let data = match self.kernels[i].mode {
            QMode::A32 => &self.a32,
            QMode::A8 => &self.a8,
        };
        Ok(row_scaled_err(&self.y, &data.reference, &data.magnitude))
    }
    fn tolerance(&self) -> f32 {
        1e-5
    }
    fn run(&mut self, i: usize) {
        let _ = self.call(i, true);
    }
    fn release(&mut self) {
        self.w.release();
    }
    fn work(&self) -> Work {
        let (n, k) = (self.y.len() as u64, self.k as u64);
        Work {
            bytes: self.w.peek().len() as u64 + 4 * k + 4 * n,
            flops: 2 * n * k,
        }
    }
}
