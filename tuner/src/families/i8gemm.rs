//! The int8 GEMM: `i8gemm` `m×n×k` (m = 1 is the GEMV), dtype `i8`
//! (symmetric activations) or `i8_zp` (asymmetric, with a zero point);
//! reference: the f64 product of the dequantized operands. Activations are
//! quantized once outside the timed region (as a runtime does once per
//! layer input).
//!
//! Tuned: the analytic default first, then the tiles × prefetch distances ×
//! thread counts of the variant that runs untuned and of every variant that
//! runs only where tuned (SME, [`tuned_isas`]); timed warm, as a prefill
//! GEMM reuses its weights. Pinned: one configuration for `tiletune bench`,
//! the forced variant's default tile unless `--params` says otherwise.

use super::common::{candidate, copies, thread_counts, tune_dim, tuned_isas};
use super::spec::{Machine, OpName, OpSpec, PinRequest};
use crate::TunerError;
use crate::campaign::{KernelProblem, Work};
use tiletune_kernels::i8gemm::{self, I8Gemm, I8GemmParams, I8GemmShape, QActivations, QWeights};
use tiletune_kernels::testing::{Rng, max_rel_err};
use tiletune_kernels::{Isa, KernelError, Tunable};
use tiletune_tables::{Candidate, Problem};

pub(super) const OPS: &[OpSpec] = &[OpSpec::new(
    OpName::Exact("i8gemm"),
    &["m", "n", "k"],
    DTYPES,
    "i8gemm",
    pin,
    |d| d.terms(&[&["n", "k"], &["m", "k"], &["m", "n"]]),
)
.int8()
.tuned(DTYPES, tune)];

const DTYPES: &[&str] = &["i8", "i8_zp"];

/// The tuned problem: every candidate of the searched variants.
fn tune(spec: &Problem, m: &Machine) -> Result<Box<dyn KernelProblem>, TunerError> {
    let shape = I8GemmShape {
        m: tune_dim(spec, "m")?,
        n: tune_dim(spec, "n")?,
        k: tune_dim(spec, "k")?,
    };
    let default = I8Gemm::new()
        .params(I8GemmParams::default_for(&shape, &m.caps))
        .threads(m.max_threads.max(1));
    let mut cfgs = vec![default];
    for isa in tuned_isas(i8gemm::variants()) {
        for params in I8GemmParams::candidates_for_isa(&shape, &m.caps, isa) {
            for threads in thread_counts(m.max_threads) {
                let g = I8Gemm::new().isa(isa).params(params).threads(threads);
                if !cfgs.contains(&g) {
                    cfgs.push(g);
                }
            }
        }
    }
    Ok(Box::new(I8Problem::new(spec, m, shape, cfgs, 1)?))
}

/// One forced configuration, warm unless `--cold`.
fn pin(req: &PinRequest) -> Result<Box<dyn KernelProblem>, TunerError> {
    let m = req.machine;
    let shape = I8GemmShape {
        m: req.dims[0],
        n: req.dims[1],
        k: req.dims[2],
    };
    let isa = req
        .config
        .isa
        .unwrap_or_else(|| Isa::best_of(i8gemm::variants()));
    let params: I8GemmParams =
        req.params_or(|| I8GemmParams::default_for_isa(&shape, &m.caps, isa))?;
    let g = I8Gemm::new()
        .isa(isa)
        .params(params)
        .threads(req.threads(m.max_threads));
    let n = copies(shape.n * shape.k, m, req.config.cold);
    Ok(Box::new(I8Problem::new(req.spec, m, shape, vec![g], n)?))
}

/// Seeded operands, their f64 reference and the configurations timed on
/// them (the first is the default).
struct I8Problem {
    spec: Problem,
    cfgs: Vec<I8Gemm>,
    cands: Vec<Candidate>,
    a: QActivations,
    /// Weight copies the timed runs rotate through.
    w: Vec<QWeights>,
    next: usize,
    c: Vec<f32>,
    reference: Vec<f32>,
}

impl I8Problem {
    fn new(
        spec: &Problem,
        m: &Machine,
        shape: I8GemmShape,
        cfgs: Vec<I8Gemm>,
        copies: usize,
    ) -> Result<Self, TunerError> {
        let I8GemmShape { m: rows, n, k } = shape;
        if k > i8gemm::MAX_K {
            return Err(KernelError::InvalidShape {
                op: "i8gemm",
                reason: format!(
                    "k = {k} exceeds {}: the i32 accumulators would overflow",
                    i8gemm::MAX_K
                ),
            }
            .into());
        }
        let asymmetric = spec.dtype() == "i8_zp";
        let mut rng = Rng::new(m.seed);
        let wf = rng.vec_f32(n * k);
        // Asymmetric activations: a shifted range, as after a SiLU.
        let af: Vec<f32> = (0..rows * k)
            .map(|_| rng.uniform(if asymmetric { -0.3 } else { -1.0 }, 1.0))
            .collect();
        let w0 = i8gemm::quantize_weights(&wf, n, k)?;
        let a = i8gemm::quantize_activations(&af, rows, k, asymmetric)?;
        let reference = i8gemm::reference_f32(&a, &w0, None);
        let cands = cfgs
            .iter()
            .map(|g| candidate(Some(g.isa), &g.params, g.threads))
            .collect();
        Ok(I8Problem {
            spec: spec.clone(),
            cfgs,
            cands,
            a,
            w: vec![w0; copies.max(1)],
            next: 0,
            c: vec![0.0; rows * n],
            reference,
        })
    }
}

impl KernelProblem for I8Problem {
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
        self.c.fill(f32::NAN);
        self.cfgs[i]
            .run(&self.a, &self.w[0], None, &mut self.c)
            .map_err(|e| e.to_string())?;
        Ok(max_rel_err(&self.c, &self.reference))
    }
    /// Exact i32 accumulation; only the f32 epilogue (two products)
    /// rounds.
    fn tolerance(&self) -> f32 {
        1e-5
    }
    fn run(&mut self, i: usize) {
        self.next = (self.next + 1) % self.w.len();
        // Validation already proved this configuration runs on this shape.
        let _ = self.cfgs[i].run(&self.a, &self.w[self.next], None, &mut self.c);
    }
    fn work(&self) -> Work {
        let (m, n, k) = (self.a.m as u64, self.w[0].n as u64, self.a.k as u64);
        Work {
            // int8 weights + their scales and sums, int8 activations +
            // scales, f32 out.
            bytes: n * k + 8 * n + m * k + 4 * m + 4 * m * n,
            flops: 2 * m * n * k,
        }
    }
}
