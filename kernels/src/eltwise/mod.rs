//! In-place element-wise ops on `&mut [f32]`: the activations of LLM MLPs
//! (SiLU, GeLU tanh and erf, QuickGeLU, ReLU, ReLU², Sigmoid), `x *= c`,
//! `a += b`, and the fused SwiGLU gate `gate = silu(gate) · up`.
//!
//! The SIMD variants share one vectorised `exp` (`simd`'s: Cephes-style range
//! reduction to `[-ln2/2, ln2/2]` + degree-5 polynomial, exact `2ⁿ` scaling
//! in two factors, or `vscalefps` on AVX-512, so that results underflow
//! gradually and overflow to `+∞`)
//! and, for the erf GeLU, an `erfc` of the form `e^(-z²)·t·P(t)`,
//! `t = 1/(1 + z/2)`, with `P` a degree-9 polynomial fitted for this crate
//! (see `vconst`). Tanh is never computed: the tanh GeLU is
//! `x·sigmoid(2u)`.
//!
//! Accuracy against [`scalar`] (which uses std `f32::exp` and an f64
//! erfc), asserted by the tests on inputs in `[-110, 110]` plus specials:
//! every exp- or erf-based op (sigmoid, SiLU, QuickGeLU, both GeLUs, SwiGLU)
//! within `2e-6·|ref| + 1e-30`; ReLU, ReLU², `x*c`, `a+b` bit-exact. Measured
//! on `[-20, 20]` (identical on AVX2, AVX-512 and NEON): max relative error 3.0e-7 for the exp-based ops and 3.7e-7
//! for the erf GeLU, i.e. 2–3 ulp. NaN and ±∞ give the same result as the
//! reference.

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod body;
pub mod scalar;

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;

use crate::error::check_len;
use crate::tune::{CpuCaps, Tunable};
use crate::{Isa, KernelError, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Constants of the vectorised `erfc` of the ISA files (the `exp`'s are
/// `simd::expc`).
pub(crate) mod vconst {
    /// `erfc(z) ≈ e^(-z²)·t·P(t)`, `t = 1/(1 + z/2)`, fitted on `0 ≤ z ≤ 10`, the
    /// form of Abramowitz & Stegun 7.1.26 / Numerical Recipes' `erfcc` with
    /// coefficients fitted for this crate: `P` is the degree-9 Chebyshev
    /// approximation (mpmath `chebyfit`, 40 digits) of `erfcx(z(t))/t` on
    /// `t ∈ [1/6, 1]`, rounded to f32; highest degree first. Relative error
    /// of `P` evaluated in f32 Horner: < 1e-7 on the whole range.
    pub const ERFC_POLY: [f32; 10] = [
        1.876_646_8e-2,
        -1.568_326_8e-1,
        5.037_038e-1,
        -7.636_77e-1,
        4.937_229_8e-1,
        -1.340_835_8e-1,
        2.367_694_1e-1,
        2.364_906_5e-1,
        2.830_857e-1,
        2.820_542_8e-1,
    ];
    /// `|x|` is clamped here (`z = |x|/√2 ≤ 10.5`): `e^(-10.5²)` is below
    /// `e^EXP_LO` and so exactly `0`, which makes `x·Φ(x) = -0` for every
    /// `x < -14.85` (even `f32::MIN`) as in the reference, and keeps `x²`
    /// finite for `x = ±∞`.
    pub const ERFC_AX_MAX: f32 = 14.849_242;
    pub const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
}

/// The ISA variants this family (and norm, softmax, rope, which reuse its
/// vector math) implements.
pub const ISAS: [Isa; 4] = [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon];

/// The best variant of [`ISAS`] the running CPU supports.
pub fn best_isa() -> Isa {
    Isa::best_of(&ISAS)
}

/// The variants of [`ISAS`] the running CPU can execute, scalar first.
pub fn available_isas() -> Vec<Isa> {
    ISAS.iter().copied().filter(|i| i.is_available()).collect()
}

/// The CPU description the convenience entry points (those without
/// `_with`) derive their parameters from: default cache sizes, and the
/// cores this process may actually run on, so they never oversubscribe.
pub fn host_caps() -> CpuCaps {
    static CAPS: std::sync::OnceLock<CpuCaps> = std::sync::OnceLock::new();
    *CAPS.get_or_init(|| CpuCaps {
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        ..CpuCaps::default()
    })
}

/// Checks that a forced variant exists in [`ISAS`] and can run here.
pub(crate) fn resolve_isa(op: &'static str, isa: Isa) -> Result<Isa> {
    resolve_isa_of(op, isa, &ISAS)
}

/// Checks that a forced variant exists in a family's `variants` and can
/// run here.
pub(crate) fn resolve_isa_of(op: &'static str, isa: Isa, variants: &[Isa]) -> Result<Isa> {
    if !isa.is_available() {
        Err(KernelError::IsaUnavailable { op, isa })
    } else if !variants.contains(&isa) {
        Err(KernelError::NoVariant { op, isa })
    } else {
        Ok(isa)
    }
}

/// The unary element-wise ops, with stable names for selector tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EltOp {
    /// `x · sigmoid(x)`.
    Silu,
    /// `0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³)))`.
    GeluTanh,
    /// `x · Φ(x) = 0.5·x·(1 + erf(x/√2))`.
    GeluErf,
    /// `x · sigmoid(1.702·x)`.
    QuickGelu,
    /// `max(x, 0)` (NaN propagates).
    Relu,
    /// `max(x, 0)²`.
    Relu2,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
}

impl EltOp {
    /// Every op, in a fixed order.
    pub const ALL: [EltOp; 7] = [
        EltOp::Silu,
        EltOp::GeluTanh,
        EltOp::GeluErf,
        EltOp::QuickGelu,
        EltOp::Relu,
        EltOp::Relu2,
        EltOp::Sigmoid,
    ];

    /// The stable name used in selector-table keys and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            EltOp::Silu => "silu",
            EltOp::GeluTanh => "gelu_tanh",
            EltOp::GeluErf => "gelu_erf",
            EltOp::QuickGelu => "quick_gelu",
            EltOp::Relu => "relu",
            EltOp::Relu2 => "relu2",
            EltOp::Sigmoid => "sigmoid",
        }
    }
}

impl fmt::Display for EltOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error returned when parsing an unknown op name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown element-wise op `{0}`; expected one of silu, gelu_tanh, gelu_erf, quick_gelu, relu, relu2, sigmoid"
)]
pub struct ParseEltOpError(pub String);

impl FromStr for EltOp {
    type Err = ParseEltOpError;
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        EltOp::ALL
            .iter()
            .copied()
            .find(|o| o.name() == s)
            .ok_or_else(|| ParseEltOpError(s.to_string()))
    }
}

/// Problem shape of an element-wise call: the vector length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EltShape {
    pub len: usize,
}

/// Tunable parameters of the element-wise family.
///
/// Valid range: `1 ≤ threads ≤ 256`; `chunk` (elements per parallel task) a
/// multiple of 16 in `16..=1 << 24`. With `threads = 1` the call runs inline
/// and `chunk` is ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EltParams {
    pub threads: usize,
    pub chunk: usize,
}

/// Vectors below this many bytes run on one thread: a parallel task costs a
/// few microseconds to wake, which is what ~256 KiB of the cheapest op
/// (`a += b`, memory bound) takes on one core.
pub const PAR_MIN_BYTES: usize = 256 << 10;
/// Default task size: 16 Ki floats = 64 KiB, a quarter of a small L2, so a
/// task's input and output stay in L2 while it runs.
pub const DEFAULT_CHUNK: usize = 16 << 10;

impl Tunable for EltParams {
    type Shape = EltShape;

    fn default_for(shape: &EltShape, cpu: &CpuCaps) -> Self {
        let bytes = shape.len * 4;
        if bytes < PAR_MIN_BYTES || cpu.cores <= 1 {
            return EltParams {
                threads: 1,
                chunk: DEFAULT_CHUNK,
            };
        }
        // Each thread gets at least PAR_MIN_BYTES / 2 of work; the chunk is
        // sized from the L2 so one task's data stays resident.
        let threads = cpu.cores.min(bytes / (PAR_MIN_BYTES / 2)).clamp(1, 256);
        let chunk = ((cpu.l2 / 4 / 4) & !15).clamp(1024, 1 << 20);
        EltParams { threads, chunk }
    }

    fn candidates(shape: &EltShape, cpu: &CpuCaps) -> Vec<Self> {
        let mut out = vec![Self::default_for(shape, cpu)];
        let mut threads = vec![1];
        let mut t = 2;
        while t < cpu.cores {
            threads.push(t);
            t *= 2;
        }
        if cpu.cores > 1 {
            threads.push(cpu.cores.min(256));
        }
        for &threads in &threads {
            let chunks: &[usize] = if threads == 1 {
                &[DEFAULT_CHUNK]
            } else {
                &[4 << 10, 16 << 10, 64 << 10]
            };
            for &chunk in chunks {
                let p = EltParams { threads, chunk };
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
        out
    }

    fn validate(&self) -> Result<()> {
        crate::pool::check_threads("eltwise", self.threads)?;
        if self.threads > 256 {
            return Err(KernelError::InvalidParams {
                op: "eltwise",
                reason: format!("threads = {} exceeds 256", self.threads),
            });
        }
        if self.chunk < 16 || self.chunk > 1 << 24 || !self.chunk.is_multiple_of(16) {
            return Err(KernelError::InvalidParams {
                op: "eltwise",
                reason: format!(
                    "chunk = {} must be a multiple of 16 in 16..=16777216",
                    self.chunk
                ),
            });
        }
        Ok(())
    }
}

/// One element-wise operation, with its second operand if any.
#[derive(Clone, Copy)]
enum Op<'a> {
    Unary(EltOp),
    MulConst(f32),
    AddFrom(&'a [f32]),
    SwiGlu(&'a [f32]),
}

impl Op<'_> {
    fn name(&self) -> &'static str {
        match self {
            Op::Unary(_) => "eltwise",
            Op::MulConst(_) => "mul_const",
            Op::AddFrom(_) => "add_from",
            Op::SwiGlu(_) => "swiglu",
        }
    }
}

/// Runs `op` on `x`, whose first element is element `off` of the call (for
/// slicing the second operand). `isa` has been resolved.
fn run_span<'a>(isa: Isa, op: Op<'a>, x: &mut [f32], off: usize) {
    let n = x.len();
    let other = |b: &'a [f32]| -> &'a [f32] { &b[off..off + n] };
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa` was checked available (AVX2 + FMA) by `resolve_isa`;
        // second operands are sliced to `x.len()` by `other`.
        Isa::Avx2 => unsafe {
            match op {
                Op::Unary(u) => avx2::unary(u, x),
                Op::MulConst(c) => avx2::mul_const(x, c),
                Op::AddFrom(b) => avx2::add_from(x, other(b)),
                Op::SwiGlu(b) => avx2::swiglu(x, other(b)),
            }
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, AVX-512F checked available.
        Isa::Avx512 => unsafe {
            match op {
                Op::Unary(u) => avx512::unary(u, x),
                Op::MulConst(c) => avx512::mul_const(x, c),
                Op::AddFrom(b) => avx512::add_from(x, other(b)),
                Op::SwiGlu(b) => avx512::swiglu(x, other(b)),
            }
        },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is always present on aarch64; operands sliced above.
        Isa::Neon => unsafe {
            match op {
                Op::Unary(u) => neon::unary(u, x),
                Op::MulConst(c) => neon::mul_const(x, c),
                Op::AddFrom(b) => neon::add_from(x, other(b)),
                Op::SwiGlu(b) => neon::swiglu(x, other(b)),
            }
        },
        _ => match op {
            Op::Unary(u) => scalar::unary(u, x),
            Op::MulConst(c) => scalar::mul_const(x, c),
            Op::AddFrom(b) => scalar::add_from(x, other(b)),
            Op::SwiGlu(b) => scalar::swiglu(x, other(b)),
        },
    }
}

fn run(op: Op<'_>, x: &mut [f32], isa: Isa, params: &EltParams) -> Result<()> {
    let name = op.name();
    let isa = resolve_isa(name, isa)?;
    params.validate()?;
    if let Op::AddFrom(b) | Op::SwiGlu(b) = op {
        check_len(name, "second operand", b.len(), x.len())?;
    }
    if params.threads == 1 || x.len() <= params.chunk {
        run_span(isa, op, x, 0);
        return Ok(());
    }
    use rayon::prelude::*;
    let chunk = params.chunk;
    crate::pool::pool(params.threads).install(|| {
        x.par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(i, xs)| run_span(isa, op, xs, i * chunk));
    });
    Ok(())
}

fn default_params(len: usize) -> EltParams {
    EltParams::default_for(&EltShape { len }, &crate::eltwise::host_caps())
}

/// Applies `op` to `x` in place with the best variant and default
/// parameters.
pub fn apply(op: EltOp, x: &mut [f32]) {
    run(Op::Unary(op), x, best_isa(), &default_params(x.len()))
        .expect("the best variant with default parameters cannot fail");
}

/// Applies `op` to `x` in place with a forced variant and parameters.
pub fn apply_with(op: EltOp, x: &mut [f32], isa: Isa, params: &EltParams) -> Result<()> {
    run(Op::Unary(op), x, isa, params)
}

/// `x *= c` in place.
pub fn mul_const(x: &mut [f32], c: f32) {
    run(Op::MulConst(c), x, best_isa(), &default_params(x.len()))
        .expect("the best variant with default parameters cannot fail");
}

/// `x *= c` with a forced variant and parameters.
pub fn mul_const_with(x: &mut [f32], c: f32, isa: Isa, params: &EltParams) -> Result<()> {
    run(Op::MulConst(c), x, isa, params)
}

/// `a += b`; `b` must have `a`'s length.
pub fn add_from(a: &mut [f32], b: &[f32]) -> Result<()> {
    run(Op::AddFrom(b), a, best_isa(), &default_params(a.len()))
}

/// `a += b` with a forced variant and parameters.
pub fn add_from_with(a: &mut [f32], b: &[f32], isa: Isa, params: &EltParams) -> Result<()> {
    run(Op::AddFrom(b), a, isa, params)
}

/// Fused SwiGLU: `gate = silu(gate) · up`; `up` must have `gate`'s length.
pub fn swiglu(gate: &mut [f32], up: &[f32]) -> Result<()> {
    run(
        Op::SwiGlu(up),
        gate,
        best_isa(),
        &default_params(gate.len()),
    )
}

/// Fused SwiGLU with a forced variant and parameters.
pub fn swiglu_with(gate: &mut [f32], up: &[f32], isa: Isa, params: &EltParams) -> Result<()> {
    run(Op::SwiGlu(up), gate, isa, params)
}

/// Runs `f(first_row, rows)` over `x` viewed as rows of `row_len`, split
/// into `threads` contiguous blocks of whole rows on exactly `threads`
/// workers (inline when `threads == 1` or there is a single row). Used by
/// norm, softmax and rope.
pub(crate) fn for_row_blocks<F>(x: &mut [f32], row_len: usize, threads: usize, f: F)
where
    F: Fn(usize, &mut [f32]) + Sync,
{
    if row_len == 0 || x.is_empty() {
        return;
    }
    let rows = x.len() / row_len;
    if threads <= 1 || rows <= 1 {
        f(0, x);
        return;
    }
    use rayon::prelude::*;
    let per = rows.div_ceil(threads);
    crate::pool::pool(threads).install(|| {
        x.par_chunks_mut(per * row_len)
            .enumerate()
            .for_each(|(i, block)| f(i * per, block));
    });
}

/// Default thread count for a row-wise kernel touching `bytes` of data in
/// `rows` rows: one thread below [`PAR_MIN_BYTES`], else one per
/// `PAR_MIN_BYTES / 2`, at most one per row and per core.
pub(crate) fn default_row_threads(bytes: usize, rows: usize, cpu: &CpuCaps) -> usize {
    if bytes < PAR_MIN_BYTES {
        1
    } else {
        cpu.cores
            .min(rows)
            .min(bytes / (PAR_MIN_BYTES / 2))
            .clamp(1, 256)
    }
}

/// The thread counts worth timing: 1, powers of two below the core count,
/// the core count; never more than `rows`.
pub(crate) fn thread_candidates(rows: usize, cpu: &CpuCaps) -> Vec<usize> {
    let mut v = vec![1];
    let mut t = 2;
    while t < cpu.cores && t <= rows {
        v.push(t);
        t *= 2;
    }
    if cpu.cores > 1 && cpu.cores <= rows.max(1) && !v.contains(&cpu.cores) {
        v.push(cpu.cores.min(256));
    }
    v
}

/// Validates a row-parallel thread count.
pub(crate) fn check_row_threads(op: &'static str, threads: usize) -> Result<()> {
    crate::pool::check_threads(op, threads)?;
    if threads > 256 {
        return Err(KernelError::InvalidParams {
            op,
            reason: format!("threads = {threads} exceeds 256"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
