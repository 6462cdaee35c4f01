//! The f32 / f16-weight GEMV (`gemv` `n×k`), and the route of a quantized
//! `gemv` to the family its default runs.
//!
//! Tuned: every available ISA × the family's parameter candidates × thread
//! counts, the analytic default first. GEMV problems rotate through enough
//! copies of the weights to exceed the last-level cache of every core, so a
//! decode-shaped kernel is timed streaming its weights from memory, as it
//! does in a real model, not from a warm cache. Pinned: one configuration,
//! warm unless `--cold`.

use super::common::{
    Copies, WeightElem, candidate_of, copies, reference_gemv, thread_counts, tune_dim,
};
use super::qgemm::QGemmTune;
use super::qgemv::QGemvTune;
use super::quant;
use super::spec::{Machine, OpName, OpSpec, PinRequest};
use crate::TunerError;
use crate::campaign::{KernelProblem, Work};
use half::f16;
use tiletune_kernels::choice::{KernelChoice, Op, WeightKind};
use tiletune_kernels::gemv::{self, GemvConfig, GemvParams, GemvShape};
use tiletune_kernels::testing::{Rng, max_rel_err};
use tiletune_kernels::{Isa, Tunable};
use tiletune_tables::{Candidate, Problem};

pub(super) const OPS: &[OpSpec] = &[
    // Pinned quantized GEMVs are `qgemv_a32` / `qgemv_a8`.
    OpSpec::new(
        OpName::Exact("gemv"),
        &["n", "k"],
        &["f32", "f16"],
        "gemv",
        pin,
        |d| d.terms(&[&["n", "k"], &["n"], &["k"]]),
    )
    .tuned(quant::WEIGHT_DTYPES, tune),
];

/// The tuned GEMV of `spec`. A quantized weight is tuned over the family
/// its default runs (`KernelChoice::default_for`, the runtime's rule too):
/// where the format has a GEMM, decode runs it at m = 1 on the one packed
/// copy, and the search is that GEMM with the per-row W·A8 GEMV beside it;
/// the other formats are the per-row GEMV's.
fn tune(spec: &Problem, m: &Machine) -> Result<Box<dyn KernelProblem>, TunerError> {
    let (n, k) = (tune_dim(spec, "n")?, tune_dim(spec, "k")?);
    if let Some(format) = quant::format_of(spec.dtype()) {
        let default = KernelChoice::default_for(
            Op::Gemv,
            WeightKind::Quant(format),
            1,
            n,
            k,
            &m.caps,
            1,
            None,
        );
        return Ok(match default {
            KernelChoice::QGemv(_) => Box::new(QGemvTune::new(spec.clone(), format, n, k, m)?),
            _ => Box::new(QGemmTune::new(spec.clone(), format, 1, n, k, m)?),
        });
    }
    let shape = GemvShape { n, k };
    Ok(match spec.dtype() {
        "f16" => Box::new(GemvProblem::<f16>::new(spec.clone(), shape, m)),
        _ => Box::new(GemvProblem::<f32>::new(spec.clone(), shape, m)),
    })
}

/// One forced configuration, warm unless `--cold`.
fn pin(req: &PinRequest) -> Result<Box<dyn KernelProblem>, TunerError> {
    let m = req.machine;
    let shape = GemvShape {
        n: req.dims[0],
        k: req.dims[1],
    };
    let params: GemvParams = req.params_or(|| GemvParams::default_for(&shape, &m.caps))?;
    let cfg = GemvConfig {
        isa: Some(
            req.config
                .isa
                .unwrap_or_else(|| gemv::resolve_isa(None).unwrap_or(Isa::Scalar)),
        ),
        params,
        threads: req.threads(m.max_threads),
    };
    let (spec, cold) = (req.spec.clone(), req.config.cold);
    Ok(match req.spec.dtype() {
        "f16" => Box::new(GemvProblem::<f16>::build(spec, shape, m, vec![cfg], cold)),
        _ => Box::new(GemvProblem::<f32>::build(spec, shape, m, vec![cfg], cold)),
    })
}

struct GemvProblem<W: WeightElem> {
    spec: Problem,
    shape: GemvShape,
    seed: u64,
    /// Weight copies to rotate through (1: cache-warm).
    copies: usize,
    /// Made by the first use, dropped by `release` (see [`Copies`]).
    data: Option<GemvData<W>>,
    cands: Vec<Candidate>,
    cfgs: Vec<GemvConfig>,
    default: usize,
}

/// The operands of a [`GemvProblem`].
struct GemvData<W: Clone> {
    /// Rotated weight copies (cold-cache timing).
    w: Copies<Vec<W>>,
    x: Vec<f32>,
    y: Vec<f32>,
    reference: Vec<f32>,
}

impl<W: WeightElem> GemvProblem<W>
where
    GemvProblem<W>: GemvCall,
{
    fn new(spec: Problem, shape: GemvShape, m: &Machine) -> Self {
        let default_cfg = GemvConfig {
            isa: Some(gemv::resolve_isa(None).unwrap_or(Isa::Scalar)),
            params: GemvParams::default_for(&shape, &m.caps),
            threads: m.max_threads.max(1),
        };
        let mut cfgs = vec![default_cfg];
        for &isa in gemv::variants().iter().filter(|i| i.is_available()) {
            for params in GemvParams::candidates(&shape, &m.caps) {
                for threads in thread_counts(m.max_threads) {
                    let c = GemvConfig {
                        isa: Some(isa),
                        params,
                        threads,
                    };
                    if !cfgs.contains(&c) {
                        cfgs.push(c);
                    }
                }
            }
        }
        Self::build(spec, shape, m, cfgs, true)
    }

    /// Inputs, reference and candidates for `cfgs`; `cold` rotates enough
    /// weight copies to exceed the LLC, else one copy stays cache-warm.
    fn build(
        spec: Problem,
        shape: GemvShape,
        m: &Machine,
        cfgs: Vec<GemvConfig>,
        cold: bool,
    ) -> Self {
        let copies = copies(shape.n * shape.k * size_of::<W>(), m, cold);
        let cands = cfgs
            .iter()
            .map(|&c| candidate_of(&KernelChoice::Gemv(c)))
            .collect();
        GemvProblem {
            spec,
            shape,
            seed: m.seed,
            copies,
            data: None,
            cands,
            cfgs,
            default: 0,
        }
    }

    /// The operands, made on first use.
    fn data(&mut self) -> &mut GemvData<W> {
        let (shape, seed, copies) = (self.shape, self.seed, self.copies);
        self.data.get_or_insert_with(|| {
            let mut rng = Rng::new(seed);
            let w0: Vec<W> = (0..shape.n * shape.k)
                .map(|_| W::from_f32(rng.uniform(-1.0, 1.0)))
                .collect();
            let x = rng.vec_f32(shape.k);
            let reference = reference_gemv(&w0, &x, shape);
            GemvData {
                w: Copies::new(w0, copies),
                x,
                y: vec![0.0; shape.n],
                reference,
            }
        })
    }
}

/// Dispatch to the right typed entry point.
trait GemvCall {
    /// Runs `cfg` on the first weight copy, or with `next` on the next one.
    fn call(&mut self, next: bool, cfg: &GemvConfig) -> tiletune_kernels::Result<()>;
}
impl GemvCall for GemvProblem<f32> {
    fn call(&mut self, next: bool, cfg: &GemvConfig) -> tiletune_kernels::Result<()> {
        let shape = self.shape;
        let d = self.data();
        let w = if next { d.w.next() } else { d.w.first() };
        gemv::gemv_f32(w, &d.x, None, &mut d.y, shape, false, cfg)
    }
}
impl GemvCall for GemvProblem<f16> {
    fn call(&mut self, next: bool, cfg: &GemvConfig) -> tiletune_kernels::Result<()> {
        let shape = self.shape;
        let d = self.data();
        let w = if next { d.w.next() } else { d.w.first() };
        gemv::gemv_f16_f32(w, &d.x, None, &mut d.y, shape, false, cfg)
    }
}

impl<W: WeightElem> KernelProblem for GemvProblem<W>
where
    GemvProblem<W>: GemvCall,
{
    fn spec(&self) -> &Problem {
        &self.spec
    }
    fn candidates(&self) -> &[Candidate] {
        &self.cands
    }
    fn default_index(&self) -> usize {
        self.default
    }
    fn validate(&mut self, i: usize) -> Result<f32, String> {
        let cfg = self.cfgs[i];
        self.data().y.fill(f32::NAN);
        self.call(false, &cfg).map_err(|e| e.to_string())?;
        let k = self.shape.k;
        let d = self.data();
        Ok(max_rel_err(&d.y, &d.reference) / (k.max(1) as f32).sqrt())
    }
    fn tolerance(&self) -> f32 {
        // f32 accumulation error grows like sqrt(k)·eps; the error above is
        // already divided by sqrt(k). f16 weights are widened exactly, so the
        // same bound holds.
        1e-5
    }
    fn run(&mut self, i: usize) {
        let cfg = self.cfgs[i];
        // Validation already proved this candidate runs on this shape.
        let _ = self.call(true, &cfg);
    }
    fn prepare(&mut self) {
        self.data();
    }
    fn release(&mut self) {
        self.data = None;
    }
    fn work(&self) -> Work {
        let (n, k) = (self.shape.n as u64, self.shape.k as u64);
        Work {
            bytes: n * k * size_of::<W>() as u64 + 4 * (n + k),
            flops: 2 * n * k,
        }
    }
}
