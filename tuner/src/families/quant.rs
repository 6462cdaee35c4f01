//! Quantized GEMV (`gemv` with a GGUF weight dtype) as the tuner sees it:
//! both activation modes (W·A32 and W·A8) × every ISA variant the format has
//! on this CPU × the family's parameter candidates × thread counts.
//!
//! Variants are named `<isa>.a32` / `<isa>.a8`: the runtime's execution plan
//! reads the activation mode back from that name. Each mode is validated
//! against the scalar reference kernel *of that mode* (W·A8 quantizes the
//! activations, and for Q4_1/Q5_1 uses the Q8_1 block sum that GGUF stores
//! in f16, so its exact answer differs from W·A32's by design), with the
//! bound the kernel's own tests use: `|got − want| ≤ 1e-6 + 1e-5 · Σ|w·x|`
//! per row.

use super::{Copies, Machine, candidate_of, cold_copies, thread_counts};
use crate::TunerError;
use crate::campaign::{KernelProblem, Work};
use tiletune_kernels::choice::KernelChoice;
use tiletune_kernels::qgemv::{self, QGemv, QGemvParams, QMode};
use tiletune_kernels::quant::{self, QuantFormat};
use tiletune_kernels::testing::Rng;
use tiletune_kernels::{Isa, Tunable};
use tiletune_tables::{Candidate, Problem};

/// Weight dtypes the quantized GEMV tunes (the runtime's dtype names).
pub const DTYPES: [&str; 8] = [
    "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q6_k", "mxfp4",
];

/// The kernel crate's format for a runtime dtype name (`q4_k` ↔ `Q4_K`).
pub fn format_of(dtype: &str) -> Option<QuantFormat> {
    DTYPES
        .contains(&dtype)
        .then(|| dtype.parse().ok())
        .flatten()
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
        let mut rng = Rng::new(m.seed);
        let wf: Vec<f32> = (0..n * k).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let x = rng.vec_f32(k);
        let w0 = quant::quantize(format, &wf)?;
        let mut wd = vec![0.0f32; n * k];
        quant::dequantize(format, &w0, &mut wd)?;
        // Σ|w·x| per row scales the tolerance; the exact answer of each mode
        // comes from the scalar reference kernel.
        let magnitude = |xd: &[f32]| -> Vec<f64> {
            wd.chunks_exact(k.max(1))
                .take(n)
                .map(|row| {
                    row.iter()
                        .zip(xd)
                        .map(|(&a, &b)| (a as f64 * b as f64).abs())
                        .sum()
                })
                .collect()
        };
        let m32 = magnitude(&x);
        let xq = qgemv::quantize_activations(format, &x)?;
        let mut xd = vec![0.0f32; k];
        quant::dequantize(qgemv::activation_format(format), &xq, &mut xd)?;
        let m8 = magnitude(&xd);
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
            w: Copies::new(w0.clone(), cold_copies(w0.len(), &m.caps)),
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
        Ok(super::row_scaled_err(
            &self.y,
            &data.reference,
            &data.magnitude,
        ))
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
