//! Kernel families as the tuner sees them: a [`KernelProblem`] per family,
//! instantiated with seeded random inputs, the scalar reference's output, and
//! the search space (ISA variants × the family's parameter candidates ×
//! thread counts).
//!
//! GEMV problems rotate through enough copies of the weights to exceed the
//! last-level cache of every core, so a decode-shaped kernel is timed streaming its weights
//! from memory, as it does in a real model, not from a warm cache.
//!
//! [`one`] pins a single configuration of any family (including the ones the
//! tuner does not search yet) for `tiletune bench`.

mod more;
pub mod one;
pub mod qgemm;
pub mod quant;

pub use one::{
    OneConfig, bandwidth_bound, bench_dims, bench_dtypes, bench_optional_dims, instantiate_one,
    parse_bench_problem, parse_bench_problem_with,
};

use crate::TunerError;
use crate::campaign::{KernelProblem, Work};
use half::f16;
use tiletune_kernels::choice::{KernelChoice, Op, WeightKind};
use tiletune_kernels::gemm::{self, GemmConfig, GemmParams, GemmShape};
use tiletune_kernels::gemv::{self, GemvConfig, GemvParams, GemvShape};
use tiletune_kernels::testing::{Rng, max_rel_err};
use tiletune_kernels::{CpuCaps, Isa, Tunable};
use tiletune_tables::{Candidate, Problem};

/// The dtypes each op can be tuned for.
pub fn supported_dtypes(op: &str) -> &'static [&'static str] {
    match op {
        "gemv" => &[
            "f32", "f16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q6_k", "mxfp4",
        ],
        "gemm" => &[
            "f32", "f16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q6_k", "mxfp4",
        ],
        _ => &[],
    }
}

/// What the tuner needs to know about the machine to build a problem.
#[derive(Debug, Clone, Copy)]
pub struct Machine {
    pub caps: CpuCaps,
    /// Thread counts to search (e.g. `[1, 2]`, or one cluster's sizes).
    pub max_threads: usize,
    /// Seed for the random inputs.
    pub seed: u64,
}

impl Machine {
    /// A 2-core machine with a 1 MiB LLC, for tests: its cold-cache
    /// rotations stay small.
    #[doc(hidden)]
    pub fn small_for_tests(seed: u64) -> Machine {
        Machine {
            caps: CpuCaps {
                l1d: 32 << 10,
                l2: 256 << 10,
                l3: 1 << 20,
                cores: 2,
            },
            max_threads: 2,
            seed,
        }
    }
}

/// Builds the problem for `spec` on this machine.
pub fn instantiate(spec: &Problem, m: &Machine) -> Result<Box<dyn KernelProblem>, TunerError> {
    let unsupported = || TunerError::UnsupportedDtype {
        op: spec.op().to_string(),
        dtype: spec.dtype().to_string(),
        supported: supported_dtypes(spec.op()).join(", "),
    };
    let dim = |n: &str| {
        spec.dim(n).ok_or_else(|| TunerError::BadShape {
            op: spec.op().to_string(),
            shape: spec.to_string(),
            expected: n.to_string(),
        })
    };
    // A quantized weight is tuned over the family its default runs
    // (`KernelChoice::default_for`, the runtime's rule too): where the
    // format has a GEMM, decode runs it at m = 1 on the one packed copy,
    // and the search is that GEMM with the per-row W·A8 GEMV beside it;
    // the other formats are the per-row GEMV's.
    if let Some(format) = quant::format_of(spec.dtype()) {
        let op =
            Op::from_name(spec.op()).ok_or_else(|| TunerError::UnknownOp(spec.op().to_string()))?;
        let (rows, n, k) = match op {
            Op::Gemv => (1, dim("n")?, dim("k")?),
            Op::Gemm => (dim("m")?, dim("n")?, dim("k")?),
        };
        let default =
            KernelChoice::default_for(op, WeightKind::Quant(format), rows, n, k, &m.caps, 1, None);
        return match default {
            KernelChoice::QGemv(_) if op == Op::Gemv => Ok(Box::new(quant::QGemvTune::new(
                spec.clone(),
                format,
                n,
                k,
                m,
            )?)),
            _ => Ok(Box::new(qgemm::QGemmTune::new(
                spec.clone(),
                format,
                rows,
                n,
                k,
                m,
            )?)),
        };
    }
    match (spec.op(), spec.dtype()) {
        ("gemv", "f32") => Ok(Box::new(GemvProblem::<f32>::new(
            spec.clone(),
            GemvShape {
                n: dim("n")?,
                k: dim("k")?,
            },
            m,
        ))),
        ("gemv", "f16") => Ok(Box::new(GemvProblem::<f16>::new(
            spec.clone(),
            GemvShape {
                n: dim("n")?,
                k: dim("k")?,
            },
            m,
        ))),
        ("gemm", "f32") => Ok(Box::new(GemmProblem::<f32>::new(
            spec.clone(),
            GemmShape {
                m: dim("m")?,
                n: dim("n")?,
                k: dim("k")?,
            },
            m,
        ))),
        ("gemm", "f16") => Ok(Box::new(GemmProblem::<f16>::new(
            spec.clone(),
            GemmShape {
                m: dim("m")?,
                n: dim("n")?,
                k: dim("k")?,
            },
            m,
        ))),
        ("gemv" | "gemm", _) => Err(unsupported()),
        _ => Err(TunerError::UnknownOp(spec.op().to_string())),
    }
}

/// The largest `|got − want| / Σ|w·x|` over rows after a 1e-6 absolute
/// allowance (the bound the quantized kernels' own tests use); a NaN output
/// is an infinite error.
fn row_scaled_err(got: &[f32], want: &[f64], magnitude: &[f64]) -> f32 {
    let mut worst = 0.0f64;
    for ((&g, &w), &mag) in got.iter().zip(want).zip(magnitude) {
        let d = (g as f64 - w).abs();
        if d.is_nan() {
            return f32::INFINITY;
        }
        worst = worst.max((d - 1e-6).max(0.0) / mag.max(f64::MIN_POSITIVE));
    }
    worst as f32
}

/// The Linux thread ids of the pool a `threads`-thread kernel runs on
/// (`tiletune_kernels::pool::pool`), for counting and pinning its workers;
/// empty for one thread, which runs inline on the caller. The pool is
/// created here if it does not exist yet, as the kernel's first call would.
pub fn worker_tids(threads: usize) -> Vec<i32> {
    if threads <= 1 {
        return Vec::new();
    }
    tiletune_kernels::pool::pool(threads).broadcast(|_| tiletune_pmu::counters::current_tid())
}

/// Thread counts to search: 1..=max.
fn thread_counts(max: usize) -> Vec<usize> {
    (1..=max.max(1)).collect()
}

/// A weight element the f32-activation kernels take.
pub trait WeightElem: Copy + Send + Sync + 'static {
    fn from_f32(x: f32) -> Self;
    fn to_f32(self) -> f32;
}
impl WeightElem for f32 {
    fn from_f32(x: f32) -> Self {
        x
    }
    fn to_f32(self) -> f32 {
        self
    }
}
impl WeightElem for f16 {
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
}

/// Enough copies of a `bytes`-sized buffer to exceed twice over the last-level
/// cache of every core: a VM reports one LLC, but its vCPUs may sit on
/// different L3 slices (a Zen CCD each), and a 2-thread run rotating through
/// 2× one slice was then partly served from the two slices together
/// (docs/PERF.md, fourth run: "cold" GEMVs above the measured bandwidth).
///
/// No small cap: with at most 64 copies a small decode GEMV (SmolLM2's
/// 192×576 Q4_1, 69 KB) rotated through 4.4 MB, inside the LLC, where one
/// thread beat two by 3×; in the model, which streams every weight from
/// DRAM, that one-thread pick made decode ~8% slower (docs/PERF.md, sixth
/// run). [`Copies`] makes them only while the problem is timed.
fn cold_copies(bytes: usize, caps: &CpuCaps) -> usize {
    (2 * caps.l3.max(caps.l2) * caps.cores.max(1))
        .div_ceil(bytes.max(1))
        .max(1)
}

/// The weight copies a cold-cache timing rotates through: made on first use
/// (a validation, before anything is timed) and dropped again by
/// [`Copies::release`] when the campaign is done with the problem, so a
/// campaign holds one problem's copies at a time, not every problem's.
pub(crate) struct Copies<T: Clone> {
    copies: Vec<T>,
    want: usize,
    next: usize,
}

impl<T: Clone> Copies<T> {
    /// `want` copies of `first` (1: a single, cache-warm copy).
    pub(crate) fn new(first: T, want: usize) -> Self {
        Copies {
            copies: vec![first],
            want: want.max(1),
            next: 0,
        }
    }

    /// The first copy, for validation, which runs before any timing:
    /// the missing copies are made here, so no timed run pays for them.
    pub(crate) fn first(&mut self) -> &T {
        self.fill();
        &self.copies[0]
    }

    /// The first copy, without making any.
    pub(crate) fn peek(&self) -> &T {
        &self.copies[0]
    }

    /// The copy the next timed run reads, in rotation.
    pub(crate) fn next(&mut self) -> &T {
        self.fill();
        self.next = (self.next + 1) % self.copies.len();
        &self.copies[self.next]
    }

    /// Makes the missing copies.
    fn fill(&mut self) {
        while self.copies.len() < self.want {
            self.copies.push(self.copies[0].clone());
        }
    }

    /// Drops every copy but the first; the next use makes them again.
    pub(crate) fn release(&mut self) {
        self.copies.truncate(1);
        self.copies.shrink_to_fit();
        self.next = 0;
    }

    /// How many copies are held now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.copies.len()
    }
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
        let copies = if cold {
            cold_copies(shape.n * shape.k * size_of::<W>(), &m.caps)
        } else {
            1
        };
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

/// Plain f64-accumulated reference, independent of the kernels under test.
fn reference_gemv<W: WeightElem>(w: &[W], x: &[f32], s: GemvShape) -> Vec<f32> {
    (0..s.n)
        .map(|r| {
            w[r * s.k..(r + 1) * s.k]
                .iter()
                .zip(x)
                .map(|(&a, &b)| a.to_f32() as f64 * b as f64)
                .sum::<f64>() as f32
        })
        .collect()
}

fn candidate<P: serde::Serialize>(isa: Option<Isa>, params: &P, threads: usize) -> Candidate {
    candidate_named(isa.unwrap_or(Isa::Scalar).name(), params, threads)
}

/// The candidate naming a kernel choice: its stored text
/// ([`KernelChoice::variant`] and [`KernelChoice::params_json`]).
pub(crate) fn candidate_of(c: &KernelChoice) -> Candidate {
    Candidate::new(c.variant(), c.params_json(), c.threads())
        .expect("kernel choices name valid candidate keys")
}

fn candidate_named<P: serde::Serialize>(variant: &str, params: &P, threads: usize) -> Candidate {
    let params = serde_json::to_value(params).expect("params structs serialize to JSON objects");
    Candidate::new(variant, params, threads)
        .expect("ISA names (with a .a32/.a8 mode) and thread counts >= 1 are valid candidate keys")
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
    reference: Vec<f32>,
}

impl<W: WeightElem> GemmProblem<W> {
    fn new(spec: Problem, shape: GemmShape, m: &Machine) -> Self {
        let mut default_cfg = GemmConfig::new(&shape, &m.caps, m.max_threads.max(1));
        default_cfg.isa = Some(gemm::resolve_isa("gemm", None).unwrap_or(Isa::Scalar));
        let mut cfgs = vec![default_cfg];
        for params in GemmParams::candidates(&shape, &m.caps) {
            for threads in thread_counts(m.max_threads) {
                let c = GemmConfig {
                    isa: default_cfg.isa,
                    params,
                    threads,
                };
                if !cfgs.contains(&c) {
                    cfgs.push(c);
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
        let copies = if cold {
            cold_copies(shape.n * shape.k * size_of::<W>(), &m.caps)
        } else {
            1
        };
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
            let mut reference = vec![0.0f32; shape.m * shape.n];
            for i in 0..shape.m {
                let row = &a[i * shape.k..(i + 1) * shape.k];
                let r = reference_gemv(
                    &w0,
                    row,
                    GemvShape {
                        n: shape.n,
                        k: shape.k,
                    },
                );
                reference[i * shape.n..(i + 1) * shape.n].copy_from_slice(&r);
            }
            GemmData {
                a,
                w: Copies::new(w0, copies),
                c: vec![0.0; shape.m * shape.n],
                reference,
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
        let k = self.shape.k;
        let d = self.data();
        Ok(max_rel_err(&d.c, &d.reference) / (k.max(1) as f32).sqrt())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The tuner's default candidate is the runtime's default plan entry:
    /// both come from `KernelChoice::default_for`, so a tuned speed-up is
    /// measured against what actually runs without a table.
    #[test]
    fn the_default_candidate_is_the_runtimes_default_choice() {
        let mach = Machine::small_for_tests(3);
        for (op, dtype, m, n, k) in [
            ("gemv", "q4_0", 1, 64, 256),
            ("gemm", "q4_0", 64, 64, 256),
            ("gemv", "q6_k", 1, 32, 256),
            ("gemm", "q8_0", 16, 48, 64),
            ("gemv", "f32", 1, 64, 32),
            ("gemm", "f32", 16, 64, 32),
        ] {
            let spec = if op == "gemv" {
                Problem::new(op, dtype, [("n", n), ("k", k)]).unwrap()
            } else {
                Problem::new(op, dtype, [("m", m), ("n", n), ("k", k)]).unwrap()
            };
            let p = instantiate(&spec, &mach).unwrap();
            let want = KernelChoice::default_for(
                Op::from_name(op).unwrap(),
                WeightKind::of_dtype(dtype),
                m,
                n,
                k,
                &mach.caps,
                mach.max_threads,
                None,
            );
            assert_eq!(
                p.candidates()[p.default_index()],
                candidate_of(&want),
                "{spec}"
            );
        }
    }

    fn machine() -> Machine {
        Machine::small_for_tests(7)
    }

    /// A small tensor rotates through twice the LLC of every core like a
    /// large one (no copy cap), and the copies exist only between the
    /// first use and `release`.
    #[test]
    fn cold_copies_exceed_the_cache_and_live_only_while_timed() {
        let caps = machine().caps;
        let want = 2 * caps.l3 * caps.cores;
        for bytes in [100, 69 << 10, 3 << 20] {
            let n = cold_copies(bytes, &caps);
            assert!(n * bytes >= want, "{bytes} B x {n}");
            assert!(
                (n - 1) * bytes < want.max(bytes),
                "{bytes} B x {n}: one too many"
            );
        }
        let mut c = Copies::new(vec![7u8; 100], 5);
        assert_eq!(c.held(), 1);
        assert_eq!(c.peek().len(), 100);
        assert_eq!(c.held(), 1, "peek makes no copy");
        assert_eq!(c.first()[0], 7);
        assert_eq!(c.held(), 5);
        // The timed runs visit every copy in turn.
        let seen: Vec<*const u8> = (0..5).map(|_| c.next().as_ptr()).collect();
        let mut distinct = seen.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 5);
        c.release();
        assert_eq!(c.held(), 1);
        c.next();
        assert_eq!(c.held(), 5, "used again after release: made again");
    }

    /// A problem's operands are made again, identically, after `release`:
    /// the same validation errors before and after.
    #[test]
    fn released_problems_make_the_same_operands_again() {
        for spec in [
            Problem::new("gemv", "q4_1", [("n", 9), ("k", 64)]).unwrap(),
            Problem::new("gemm", "q4_k", [("m", 3), ("n", 5), ("k", 256)]).unwrap(),
            Problem::new("gemv", "f32", [("n", 7), ("k", 33)]).unwrap(),
            Problem::new("gemm", "f16", [("m", 3), ("n", 9), ("k", 17)]).unwrap(),
        ] {
            let mut p = instantiate(&spec, &machine()).unwrap();
            p.prepare();
            let before: Vec<f32> = (0..p.candidates().len())
                .map(|i| p.validate(i).unwrap())
                .collect();
            p.run(0);
            p.release();
            let after: Vec<f32> = (0..p.candidates().len())
                .map(|i| p.validate(i).unwrap())
                .collect();
            assert_eq!(before, after, "{spec}");
        }
    }

    #[test]
    fn every_offered_candidate_validates() {
        for spec in [
            Problem::new("gemv", "q4_0", [("n", 9), ("k", 64)]).unwrap(),
            Problem::new("gemv", "q4_k", [("n", 3), ("k", 256)]).unwrap(),
            Problem::new("gemv", "mxfp4", [("n", 5), ("k", 96)]).unwrap(),
            Problem::new("gemv", "f32", [("n", 37), ("k", 70)]).unwrap(),
            Problem::new("gemv", "f16", [("n", 16), ("k", 33)]).unwrap(),
            Problem::new("gemm", "f32", [("m", 5), ("n", 19), ("k", 23)]).unwrap(),
            Problem::new("gemm", "f16", [("m", 3), ("n", 9), ("k", 17)]).unwrap(),
            Problem::new("gemm", "q4_1", [("m", 5), ("n", 19), ("k", 64)]).unwrap(),
            Problem::new("gemm", "q5_0", [("m", 17), ("n", 9), ("k", 96)]).unwrap(),
            Problem::new("gemm", "q6_k", [("m", 3), ("n", 4), ("k", 256)]).unwrap(),
            Problem::new("gemm", "q4_k", [("m", 2), ("n", 9), ("k", 512)]).unwrap(),
            Problem::new("gemm", "q5_1", [("m", 5), ("n", 7), ("k", 64)]).unwrap(),
            Problem::new("gemm", "mxfp4", [("m", 3), ("n", 5), ("k", 96)]).unwrap(),
        ] {
            let mut p = instantiate(&spec, &machine()).unwrap();
            assert!(!p.candidates().is_empty());
            let tol = p.tolerance();
            for i in 0..p.candidates().len() {
                let err = p.validate(i).unwrap();
                assert!(err <= tol, "{spec}: {:?}: err {err}", p.candidates()[i]);
            }
        }
    }

    #[test]
    fn quantized_decode_searches_the_gemm_where_it_exists_else_both_activation_modes() {
        for dtype in [
            "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q6_k", "mxfp4",
        ] {
            let format = quant::format_of(dtype).unwrap();
            let k = if dtype.ends_with("_k") { 256 } else { 64 };
            let p = instantiate(
                &Problem::new("gemv", dtype, [("n", 4), ("k", k)]).unwrap(),
                &machine(),
            )
            .unwrap();
            let variants: Vec<&str> = p.candidates().iter().map(|c| c.variant()).collect();
            assert!(variants.iter().any(|v| v.ends_with(".a8")), "{variants:?}");
            let kinds: &[&str] = if tiletune_kernels::qgemm::supports(format) {
                assert!(variants[0].ends_with(".qgemm"), "{dtype}: {variants:?}");
                assert!(
                    p.candidates()
                        .iter()
                        .filter(|c| c.variant().ends_with(".qgemm"))
                        .all(|c| c.params()["mr"] == 1),
                    "{dtype}: decode is m = 1"
                );
                &["a8", "qgemm"]
            } else {
                assert!(variants.iter().any(|v| v.ends_with(".a32")), "{variants:?}");
                &["a8", "a32"]
            };
            assert!(variants.iter().all(|v| {
                let (isa, kind) = v.split_once('.').unwrap();
                isa.parse::<Isa>().is_ok() && kinds.contains(&kind)
            }));
        }
    }

    #[test]
    fn quantized_prefill_searches_the_gemm_and_the_per_row_gemv() {
        let p = instantiate(
            &Problem::new("gemm", "q8_0", [("m", 16), ("n", 8), ("k", 64)]).unwrap(),
            &machine(),
        )
        .unwrap();
        let variants: Vec<&str> = p.candidates().iter().map(|c| c.variant()).collect();
        assert!(variants[0].ends_with(".qgemm"), "{variants:?}");
        assert!(variants.iter().any(|v| v.ends_with(".a8")), "{variants:?}");
        assert!(variants.iter().all(|v| {
            let (isa, kind) = v.split_once('.').unwrap();
            isa.parse::<Isa>().is_ok() && matches!(kind, "a8" | "qgemm")
        }));
        // The K-quants have both too.
        let p = instantiate(
            &Problem::new("gemm", "q4_k", [("m", 4), ("n", 4), ("k", 256)]).unwrap(),
            &machine(),
        )
        .unwrap();
        assert!(p.candidates()[0].variant().ends_with(".qgemm"));
        assert!(p.candidates().iter().any(|c| c.variant().ends_with(".a8")));
    }

    #[test]
    fn unknown_dtype_and_op_are_clear_errors() {
        let e = instantiate(
            &Problem::new("gemv", "q9_9", [("n", 4), ("k", 4)]).unwrap(),
            &machine(),
        );
        assert!(matches!(e, Err(TunerError::UnsupportedDtype { .. })));
        let e = instantiate(
            &Problem::new("conv", "f32", [("n", 4)]).unwrap(),
            &machine(),
        );
        assert!(matches!(e, Err(TunerError::UnknownOp(_))));
    }
}
