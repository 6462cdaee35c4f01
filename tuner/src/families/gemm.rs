//! GEMM (`gemm` `m×n×k`): f32 / f16 weights, and quantized weights, whose
//! GEMM is the W·A8 one on repacked weights (`qgemm.rs`).
//!
//! Tuned: the family's parameter candidates × thread counts on the best
//! ISA and on every ISA that runs only where tuned (SME, `tuned_isas`), the
//! analytic default first; GEMM reuses its weights across rows, so it is
//! timed warm. Pinned: one configuration, the micro-kernel's default
//! params for the ISA forced.

use super::common::{
    COL_EDGE, Copies, ROW_EDGE, WeightElem, candidate_of, checked, copies, picked, reference_gemv,
    thread_counts, tune_dim, tuned_isas,
};
use super::qgemm::QGemmTune;
use super::quant;
use super::spec::{Machine, OpName, OpSpec, PinRequest};
use crate::TunerError;
use crate::campaign::{KernelProblem, Work};
use half::f16;
use tiletune_kernels::Isa;
use tiletune_kernels::choice::KernelChoice;
use tiletune_kernels::gemm::{self, GemmConfig, GemmParams, GemmShape};
use tiletune_kernels::gemv::GemvShape;
use tiletune_kernels::qgemm::{self, QGemm, QGemmParams, QGemmShape};
use tiletune_kernels::quant::QuantFormat;
use tiletune_kernels::testing::{Rng, max_rel_err};
use tiletune_tables::{Candidate, Problem};

pub(super) const OPS: &[OpSpec] = &[OpSpec::new(
    OpName::Exact("gemm"),
    &["m", "n", "k"],
    quant::WEIGHT_DTYPES,
    "gemm",
    pin,
    |d| d.terms(&[&["n", "k"], &["m", "k"], &["m", "n"]]),
)
.fma_bound()
.tuned(quant::WEIGHT_DTYPES, tune)];

/// The tuned GEMM of `spec`; a quantized weight searches the W·A8 GEMM
/// with the per-row W·A8 GEMV beside it (every format has both).
fn tune(spec: &Problem, m: &Machine) -> Result<Box<dyn KernelProblem>, TunerError> {
    let (rows, n, k) = (
        tune_dim(spec, "m")?,
        tune_dim(spec, "n")?,
        tune_dim(spec, "k")?,
    );
    if let Some(format) = quant::format_of(spec.dtype()) {
        return Ok(Box::new(QGemmTune::new(
            spec.clone(),
            format,
            rows,
            n,
            k,
            m,
        )?));
    }
    let shape = GemmShape { m: rows, n, k };
    Ok(match spec.dtype() {
        "f16" => Box::new(GemmProblem::<f16>::new(spec.clone(), shape, m)),
        _ => Box::new(GemmProblem::<f32>::new(spec.clone(), shape, m)),
    })
}

/// The forced f32-activation GEMM configuration of `shape` (also the
/// fused projection's): the forced ISA, else the best; `--params`, else the
/// micro-kernel's default for that ISA (its shapes differ per ISA).
pub(super) fn pinned_config(req: &PinRequest, shape: &GemmShape) -> Result<GemmConfig, TunerError> {
    let isa = req
        .config
        .isa
        .unwrap_or_else(|| gemm::resolve_isa("gemm", None).unwrap_or(Isa::Scalar));
    let caps = &req.machine.caps;
    let params: GemmParams = req.params_or(|| GemmParams::default_for_isa(shape, caps, isa))?;
    Ok(GemmConfig {
        isa: Some(isa),
        params,
        threads: req.threads(req.machine.max_threads),
    })
}

/// One forced configuration, warm unless `--cold`.
fn pin(req: &PinRequest) -> Result<Box<dyn KernelProblem>, TunerError> {
    let (m, spec, cold) = (req.machine, req.spec, req.config.cold);
    let (rows, n, k) = (req.dims[0], req.dims[1], req.dims[2]);
    if spec.dtype() != "f32" && spec.dtype() != "f16" {
        // Quantized weights: the W·A8 GEMM on repacked weights.
        let format: QuantFormat = spec
            .dtype()
            .parse()
            .ok()
            .filter(|&f| qgemm::supports(f))
            .ok_or_else(|| req.unsupported_dtype())?;
        let qshape = QGemmShape {
            format,
            m: rows,
            n,
            k,
        };
        let isa = req
            .config
            .isa
            .unwrap_or_else(|| Isa::best_of(qgemm::variants(format)));
        let params: QGemmParams =
            req.params_or(|| QGemmParams::default_for_isa(&qshape, &m.caps, isa))?;
        let q = QGemm::new(format)
            .isa(isa)
            .params(params)
            .threads(req.threads(m.max_threads));
        return Ok(Box::new(QGemmTune::one(
            spec.clone(),
            q,
            (rows, n, k),
            m,
            cold,
        )?));
    }
    let shape = GemmShape { m: rows, n, k };
    let cfg = pinned_config(req, &shape)?;
    Ok(match spec.dtype() {
        "f16" => Box::new(GemmProblem::<f16>::build(
            spec.clone(),
            shape,
            m,
            vec![cfg],
            cold,
        )),
        _ => Box::new(GemmProblem::<f32>::build(
            spec.clone(),
            shape,
            m,
            vec![cfg],
            cold,
        )),
    })
}

struct GemmProblem<W: WeightElem> {
    spec: Problem,
    shape: GemmShape,
    seed: u64,
    /// Weight copies: one warm copy, or enough to exceed the LLC (`--cold`).
    copies: usize,
    /// Made by the first use, dropped by `release` (see [`Copies`]).
    data: Option<GemmData<W>>,
    cands: Vec<Candidate>,
    cfgs: Vec<GemmConfig>,
}

/// The operands of a [`GemmProblem`].
struct GemmData<W: Clone> {
    a: Vec<f32>,
    w: Copies<Vec<W>>,
    c: Vec<f32>,
    /// The checked outputs ([`checked`]): these rows of C, in each these
    /// columns; their reference, and a buffer for a candidate's.
    rows: Vec<usize>,
    cols: Vec<usize>,
    reference: Vec<f32>,
    got: Vec<f32>,
}

impl<W: WeightElem> GemmProblem<W> {
    fn new(spec: Problem, shape: GemmShape, m: &Machine) -> Self {
        let mut default_cfg = GemmConfig::new(&shape, &m.caps, m.max_threads.max(1));
        default_cfg.isa = Some(gemm::resolve_isa("gemm", None).unwrap_or(Isa::Scalar));
        let mut cfgs = vec![default_cfg];
        for isa in tuned_isas(gemm::GEMM_ISAS) {
            for params in GemmParams::candidates_for_isa(&shape, &m.caps, isa) {
                for threads in thread_counts(m.max_threads) {
                    let c = GemmConfig {
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
        Self::build(spec, shape, m, cfgs, false)
    }

    /// Inputs, reference and candidates for `cfgs`; `cold` rotates enough
    /// weight copies to exceed the LLC (GEMM reuses its weights across
    /// rows, so the tuner times it warm).
    fn build(
        spec: Problem,
        shape: GemmShape,
        m: &Machine,
        cfgs: Vec<GemmConfig>,
        cold: bool,
    ) -> Self {
        let copies = copies(shape.n * shape.k * size_of::<W>(), m, cold);
        let cands = cfgs
            .iter()
            .map(|&c| candidate_of(&KernelChoice::Gemm(c)))
            .collect();
        GemmProblem {
            spec,
            shape,
            seed: m.seed,
            copies,
            data: None,
            cands,
            cfgs,
        }
    }

    /// The operands, made on first use.
    fn data(&mut self) -> &mut GemmData<W> {
        let (shape, seed, copies) = (self.shape, self.seed, self.copies);
        self.data.get_or_insert_with(|| {
            let mut rng = Rng::new(seed);
            let a = rng.vec_f32(shape.m * shape.k);
            let w0: Vec<W> = (0..shape.n * shape.k)
                .map(|_| W::from_f32(rng.uniform(-1.0, 1.0)))
                .collect();
            let rows = checked(shape.m, ROW_EDGE, &mut rng);
            let cols = checked(shape.n, COL_EDGE, &mut rng);
            let k = shape.k;
            let ws: Vec<W> = cols
                .iter()
                .flat_map(|&j| &w0[j * k..(j + 1) * k])
                .copied()
                .collect();
            let mut reference = Vec::with_capacity(rows.len() * cols.len());
            for &i in &rows {
                let row = &a[i * k..(i + 1) * k];
                let s = GemvShape { n: cols.len(), k };
                reference.extend(reference_gemv(&ws, row, s));
            }
            GemmData {
                a,
                w: Copies::new(w0, copies),
                c: vec![0.0; shape.m * shape.n],
                rows,
                cols,
                reference,
                got: Vec::new(),
            }
        })
    }
}

trait GemmCall {
    /// Runs `cfg` on the first weight copy, or with `next` on the next one.
    fn call(&mut self, next: bool, cfg: &GemmConfig) -> tiletune_kernels::Result<()>;
}
impl GemmCall for GemmProblem<f32> {
    fn call(&mut self, next: bool, cfg: &GemmConfig) -> tiletune_kernels::Result<()> {
        let shape = self.shape;
        let d = self.data();
        let w = if next { d.w.next() } else { d.w.first() };
        gemm::gemm_f32(&d.a, w, None, &mut d.c, shape, false, cfg)
    }
}
impl GemmCall for GemmProblem<f16> {
    fn call(&mut self, next: bool, cfg: &GemmConfig) -> tiletune_kernels::Result<()> {
        let shape = self.shape;
        let d = self.data();
        let w = if next { d.w.next() } else { d.w.first() };
        gemm::gemm_f16w_f32(&d.a, w, None, &mut d.c, shape, false, cfg)
    }
}

impl<W: WeightElem> KernelProblem for GemmProblem<W>
where
    GemmProblem<W>: GemmCall,
{
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
        let cfg = self.cfgs[i];
        self.data().c.fill(f32::NAN);
        self.call(false, &cfg).map_err(|e| e.to_string())?;
        let (n, k) = (self.shape.n, self.shape.k);
        let d = self.data();
        if picked(&d.rows, &d.cols, &d.c, n, &mut d.got).is_none() {
            return Ok(f32::INFINITY);
        }
        Ok(max_rel_err(&d.got, &d.reference) / (k.max(1) as f32).sqrt())
    }
    fn tolerance(&self) -> f32 {
        1e-5
    }
    fn run(&mut self, i: usize) {
        let cfg = self.cfgs[i];
        let _ = self.call(true, &cfg);
    }
    fn prepare(&mut self) {
        self.data();
    }
    fn release(&mut self) {
        self.data = None;
    }
    fn work(&self) -> Work {
        let (m, n, k) = (
            self.shape.m as u64,
            self.shape.n as u64,
            self.shape.k as u64,
        );
        Work {
            bytes: n * k * size_of::<W>() as u64 + 4 * (m * k + m * n),
            flops: 2 * m * n * k,
        }
    }
}
