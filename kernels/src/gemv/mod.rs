//! GEMV: one activation vector times an LLM weight matrix (the `m = 1` case of
//! GEMM, i.e. every linear layer during decode).
//!
//! `W` is `[n, k]` row-major (out × in, the layout GGUF and safetensors store),
//! and the kernels compute
//!
//! ```text
//! y[i] = Σ_j W[i, j] · x[j]  (+ bias[i])  (+ y[i] if accumulate)
//! ```
//!
//! for f32 weights ([`gemv_f32`]) and for f16 weights with f32 activations
//! ([`gemv_f16_f32`], "W16A32"; F16C / AVX-512 `vcvtph2ps` on x86, `fcvtl` on
//! aarch64). Everything is accumulated in f32.
//!
//! GEMV is memory-bandwidth bound: every weight is used exactly once, so the
//! kernels are built to stream `W` once at full speed and keep `x` in cache.
//! A block of [`GemvParams::nr`] rows is computed together so that each `x`
//! vector load is shared by `nr` rows (the loads of `x` are then a `1/nr`
//! overhead on the `W` stream); [`GemvParams::unroll`] independent
//! accumulators per row hide the FMA latency; an optional software prefetch
//! runs [`GemvParams::prefetch`] bytes ahead in every row stream; and an
//! optional k-block [`GemvParams::kc`] keeps the slice of `x` in use resident
//! in L1 when `k` is large.
//!
//! Threads split the `n` output rows into `threads` contiguous ranges aligned
//! to `nr` (so each worker streams its own contiguous part of `W`), run on the
//! pool with exactly that many workers ([`crate::pool`]).
//!
//! Variants: [`scalar`] (the reference), `avx2` (AVX2 + FMA + F16C), `avx512`
//! (AVX-512 F/BW/VL) on x86-64, and `neon` on aarch64.

use crate::error::check_len;
use crate::pool::{Disjoint, check_threads, parallel_ranges};
use crate::tune::{CpuCaps, Tunable};
use crate::{Isa, KernelError, Result};
use half::f16;
use serde::{Deserialize, Serialize};

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod body;
#[cfg(target_arch = "aarch64")]
mod neon;
pub mod scalar;
#[cfg(test)]
mod tests;

/// Problem shape: `W` is `[n, k]`, `x` has `k` entries, `y` has `n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GemvShape {
    /// Output rows (`W` rows, `y` length).
    pub n: usize,
    /// Reduction length (`W` columns, `x` length).
    pub k: usize,
}

/// Tunable parameters of the GEMV kernels. Every variant accepts every valid
/// set (the scalar reference ignores them), so a tuner can time any of them
/// on any ISA.
///
/// Valid ranges (checked by [`Tunable::validate`]):
/// - `nr` ∈ {1, 2, 4, 8}: rows computed together, sharing each `x` load;
/// - `unroll` ∈ {1, 2, 4}: independent accumulator vectors per row;
/// - `prefetch`: software-prefetch distance in bytes ahead of each row's `W`
///   stream, a multiple of 64 up to [`GemvParams::MAX_PREFETCH`]; 0 = none;
/// - `kc`: k-block length in elements, 0 (no blocking: the whole `k` at once)
///   or a positive multiple of 64 (so blocks start on whole vectors for every
///   ISA and unroll).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GemvParams {
    pub nr: usize,
    pub unroll: usize,
    pub prefetch: usize,
    pub kc: usize,
}

impl GemvParams {
    /// Largest accepted prefetch distance in bytes.
    pub const MAX_PREFETCH: usize = 8192;
    /// Accepted row-block heights.
    pub const NR: [usize; 4] = [1, 2, 4, 8];
    /// Accepted accumulator counts per row.
    pub const UNROLL: [usize; 3] = [1, 2, 4];

    /// Rows per block when nothing else is known: `nr · unroll` accumulators
    /// plus `unroll` registers of `x` plus one for the weight load must fit
    /// the smallest register file among the variants (16 vector registers on
    /// AVX2), and `nr · unroll ≥ 8` independent FMA chains cover the FMA
    /// latency × throughput product (4 cycles × 2 per cycle) of current cores.
    pub const DEFAULT_NR: usize = 4;
    /// See [`GemvParams::DEFAULT_NR`].
    pub const DEFAULT_UNROLL: usize = 2;
}

/// DRAM latency the default prefetch distance must cover (ns): a typical
/// loaded-latency figure for both server and phone memory systems.
const MEM_LATENCY_NS: usize = 100;
/// Bandwidth one core can pull from DRAM (bytes per ns = GB/s): ~20-30 on
/// current server and big phone cores; the prefetch distance only has to be
/// long enough, so err high.
const CORE_BANDWIDTH_GBPS: usize = 24;

impl Tunable for GemvParams {
    type Shape = GemvShape;

    /// The analytic model:
    /// - `nr`, `unroll`: see [`GemvParams::DEFAULT_NR`]; `nr` is lowered for
    ///   tiny `n` so that the 1-row tail path is not the only one used.
    /// - `prefetch`: the bytes that must be in flight to hide memory latency
    ///   (latency × per-core bandwidth ≈ 100 ns × 24 GB/s = 2.4 KB) are spread
    ///   over the `nr` concurrent row streams, rounded up to a cache line
    ///   (640 bytes for `nr = 4`).
    ///   When the whole `W` fits in half of L2 it is likely cache-resident
    ///   (small layers called repeatedly), so no prefetch is issued.
    /// - `kc`: `x` should stay in L1 while `W` streams through it, so it may
    ///   take half of L1D; when `k · 4` bytes exceed that, `k` is blocked into
    ///   the largest multiple of 64 elements that fits.
    fn default_for(shape: &GemvShape, cpu: &CpuCaps) -> Self {
        let mut nr = Self::DEFAULT_NR;
        while nr > 1 && nr > shape.n {
            nr /= 2;
        }
        let unroll = Self::DEFAULT_UNROLL;
        let w_bytes = shape.n.saturating_mul(shape.k).saturating_mul(4);
        let prefetch = if w_bytes <= cpu.l2 / 2 {
            0
        } else {
            let in_flight = MEM_LATENCY_NS * CORE_BANDWIDTH_GBPS;
            (in_flight / nr)
                .next_multiple_of(64)
                .min(Self::MAX_PREFETCH)
        };
        let x_budget = (cpu.l1d / 2 / 4) / 64 * 64;
        let kc = if shape.k <= x_budget || x_budget == 0 {
            0
        } else {
            x_budget
        };
        GemvParams {
            nr,
            unroll,
            prefetch,
            kc,
        }
    }

    /// Every `nr × unroll` pair with at most 16 accumulators (more spill on
    /// every ISA), crossed with no prefetch, a short and a long distance, all
    /// at the default `kc`; plus, when the default blocks `k`, the same pairs
    /// unblocked with the default prefetch. 33 to 44 entries.
    fn candidates(shape: &GemvShape, cpu: &CpuCaps) -> Vec<Self> {
        let def = Self::default_for(shape, cpu);
        let mut out = vec![def];
        let mut push = |p: GemvParams| {
            if !out.contains(&p) {
                out.push(p);
            }
        };
        for nr in Self::NR {
            for unroll in Self::UNROLL {
                if nr * unroll > 16 {
                    continue;
                }
                for prefetch in [0, 256, 1024] {
                    push(GemvParams {
                        nr,
                        unroll,
                        prefetch,
                        kc: def.kc,
                    });
                }
                if def.kc != 0 {
                    push(GemvParams {
                        nr,
                        unroll,
                        prefetch: def.prefetch,
                        kc: 0,
                    });
                }
            }
        }
        out
    }

    fn validate(&self) -> Result<()> {
        let bad = |reason: String| Err(KernelError::InvalidParams { op: "gemv", reason });
        if !Self::NR.contains(&self.nr) {
            return bad(format!("nr = {} must be one of 1, 2, 4, 8", self.nr));
        }
        if !Self::UNROLL.contains(&self.unroll) {
            return bad(format!("unroll = {} must be one of 1, 2, 4", self.unroll));
        }
        if !self.prefetch.is_multiple_of(64) || self.prefetch > Self::MAX_PREFETCH {
            return bad(format!(
                "prefetch = {} must be a multiple of 64 bytes in 0..={}",
                self.prefetch,
                Self::MAX_PREFETCH
            ));
        }
        if !self.kc.is_multiple_of(64) {
            return bad(format!(
                "kc = {} must be 0 (no k blocking) or a multiple of 64",
                self.kc
            ));
        }
        Ok(())
    }
}

/// How one GEMV call runs: which variant, which parameters, how many threads.
/// Mirrors `GemmConfig` of the GEMM family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GemvConfig {
    /// The variant to run; `None` picks the best one this CPU supports. A
    /// forced variant the CPU lacks gives [`KernelError::IsaUnavailable`]; one
    /// this family does not implement (e.g. `Avx512Vnni`) gives
    /// [`KernelError::NoVariant`] (see [`variants`]).
    pub isa: Option<Isa>,
    pub params: GemvParams,
    /// Worker count, at least 1; the call uses exactly this many workers.
    pub threads: usize,
}

impl GemvConfig {
    /// Best variant, analytic default parameters, one thread.
    pub fn default_for(shape: &GemvShape, cpu: &CpuCaps) -> Self {
        GemvConfig {
            isa: None,
            params: GemvParams::default_for(shape, cpu),
            threads: 1,
        }
    }
}

/// The variants this family implements on the architecture it was compiled
/// for (available on this CPU or not), scalar first.
pub fn variants() -> &'static [Isa] {
    #[cfg(target_arch = "x86_64")]
    {
        &[Isa::Scalar, Isa::Avx2, Isa::Avx512]
    }
    #[cfg(target_arch = "aarch64")]
    {
        &[Isa::Scalar, Isa::Neon]
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        &[Isa::Scalar]
    }
}

/// The variant a call with `requested` runs: the best implemented one when
/// `None`, else `requested` if the CPU has it and the family implements it.
pub fn resolve_isa(requested: Option<Isa>) -> Result<Isa> {
    match requested {
        None => Ok(Isa::best_of(variants())),
        Some(isa) if !isa.is_available() => Err(KernelError::IsaUnavailable { op: "gemv", isa }),
        Some(isa) if !variants().contains(&isa) => Err(KernelError::NoVariant { op: "gemv", isa }),
        Some(isa) => Ok(isa),
    }
}

/// `y = W · x (+ bias) (+ y if accumulate)` with f32 weights `w` (`[n, k]`
/// row-major).
///
/// Errors: a buffer whose length does not match `shape`
/// ([`KernelError::ShapeMismatch`]), `n · k` overflowing `usize`
/// ([`KernelError::InvalidShape`]), invalid parameters, zero threads, or an
/// unavailable / unimplemented variant. Nothing is written on error.
pub fn gemv_f32(
    w: &[f32],
    x: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    shape: GemvShape,
    accumulate: bool,
    cfg: &GemvConfig,
) -> Result<()> {
    gemv_generic("gemv_f32", w, x, bias, y, shape, accumulate, cfg)
}

/// `y = W · x (+ bias) (+ y if accumulate)` with f16 weights `w` (`[n, k]`
/// row-major) and f32 activations; weights are widened exactly to f32 and all
/// arithmetic is f32. Errors as for [`gemv_f32`].
pub fn gemv_f16_f32(
    w: &[f16],
    x: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    shape: GemvShape,
    accumulate: bool,
    cfg: &GemvConfig,
) -> Result<()> {
    gemv_generic("gemv_f16_f32", w, x, bias, y, shape, accumulate, cfg)
}

/// A weight element type the kernels can widen to f32. Sealed: f32 and f16.
pub trait Weight: Copy + Send + Sync + 'static + sealed::Sealed {
    /// Whether the type is IEEE binary16 (selects the widening load in the
    /// ISA kernels; a compile-time constant, so the branch folds away).
    const IS_F16: bool;
    /// The zero used to pad partial vectors.
    const ZERO: Self;
    fn to_f32(self) -> f32;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
}

impl Weight for f32 {
    const IS_F16: bool = false;
    const ZERO: Self = 0.0;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
}

impl Weight for f16 {
    const IS_F16: bool = true;
    const ZERO: Self = f16::ZERO;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
}

/// An ISA row-block kernel: the dot products of `R` consecutive rows of `W`
/// (row stride `ldw` elements, starting at `w`) with `x[..len]`, written to
/// `out[..R]`; `pf` is the prefetch distance in bytes (0 = none).
///
/// # Safety
/// The CPU supports the kernel's ISA; `w` is valid for reading `R` rows of
/// `len` elements at stride `ldw`, `x` for `len` elements, `out` for `R`
/// writes.
pub(crate) type DotFn<T> =
    unsafe fn(w: *const T, ldw: usize, x: *const f32, len: usize, pf: usize, out: *mut f32);

/// Picks the monomorphized `$kernel::<T, R, U>` for runtime `(nr, unroll)`;
/// shared by the ISA files so that each only writes the generic kernel.
macro_rules! select_dot {
    ($kernel:ident, $t:ty, $nr:expr, $unroll:expr) => {
        match ($nr, $unroll) {
            (1, 1) => $kernel::<$t, 1, 1> as $crate::gemv::DotFn<$t>,
            (1, 2) => $kernel::<$t, 1, 2>,
            (1, _) => $kernel::<$t, 1, 4>,
            (2, 1) => $kernel::<$t, 2, 1>,
            (2, 2) => $kernel::<$t, 2, 2>,
            (2, _) => $kernel::<$t, 2, 4>,
            (4, 1) => $kernel::<$t, 4, 1>,
            (4, 2) => $kernel::<$t, 4, 2>,
            (4, _) => $kernel::<$t, 4, 4>,
            (_, 1) => $kernel::<$t, 8, 1>,
            (_, 2) => $kernel::<$t, 8, 2>,
            (_, _) => $kernel::<$t, 8, 4>,
        }
    };
}
pub(crate) use select_dot;

/// The row-block kernels of one ISA for one parameter set: `block` for
/// `nr` rows and `single` for the leftover rows.
struct Kernels<T> {
    block: DotFn<T>,
    single: DotFn<T>,
}

fn kernels_for<T: Weight>(isa: Isa, p: &GemvParams) -> Option<Kernels<T>> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => Some(Kernels {
            block: avx2::select::<T>(p.nr, p.unroll),
            single: avx2::select::<T>(1, p.unroll),
        }),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => Some(Kernels {
            block: avx512::select::<T>(p.nr, p.unroll),
            single: avx512::select::<T>(1, p.unroll),
        }),
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => Some(Kernels {
            block: neon::select::<T>(p.nr, p.unroll),
            single: neon::select::<T>(1, p.unroll),
        }),
        _ => None,
    }
}

#[allow(clippy::too_many_arguments)]
fn gemv_generic<T: Weight>(
    op: &'static str,
    w: &[T],
    x: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    shape: GemvShape,
    accumulate: bool,
    cfg: &GemvConfig,
) -> Result<()> {
    let GemvShape { n, k } = shape;
    let wlen = n.checked_mul(k).ok_or_else(|| KernelError::InvalidShape {
        op,
        reason: format!("n · k = {n} · {k} overflows usize; use a smaller shape"),
    })?;
    check_len(op, "w", w.len(), wlen)?;
    check_len(op, "x", x.len(), k)?;
    check_len(op, "y", y.len(), n)?;
    if let Some(b) = bias {
        check_len(op, "bias", b.len(), n)?;
    }
    cfg.params.validate()?;
    check_threads(op, cfg.threads)?;
    let isa = resolve_isa(cfg.isa)?;

    let out = Disjoint::new(y);
    let p = cfg.params;
    match kernels_for::<T>(isa, &p) {
        None => parallel_ranges(n, cfg.threads, 1, |rows| {
            // SAFETY: `rows` lies inside `0..n`, this worker's alone.
            let y = unsafe { out.part(rows.clone()) };
            scalar::gemv_rows(w, x, bias, y, rows, k, accumulate);
        }),
        Some(kern) => parallel_ranges(n, cfg.threads, p.nr, |rows| {
            // SAFETY: `rows` lies inside `0..n`, this worker's alone.
            let y = unsafe { out.part(rows.clone()) };
            // SAFETY: `resolve_isa` checked the CPU runs `isa`, and the
            // lengths of `w`, `x`, `y`, `bias` were checked against the shape.
            unsafe { run_rows(&kern, &p, w, x, bias, y, rows, k, accumulate) };
        }),
    }
    Ok(())
}

/// Drives the row-block kernels over `rows` (`y` is that range of the
/// output): k-blocks outermost so the slice of `x` stays hot across all rows,
/// row blocks of `nr`, then single rows, with the bias / accumulate epilogue
/// applied when the first k-block is written.
///
/// # Safety
/// The kernels in `kern` run on this CPU; `w.len() == n · k` with `rows`
/// inside `0..n`, `x.len() == k`, `y.len() == rows.len()`, `bias` (if any)
/// covers `rows`.
#[allow(clippy::too_many_arguments)]
unsafe fn run_rows<T: Weight>(
    kern: &Kernels<T>,
    p: &GemvParams,
    w: &[T],
    x: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    rows: std::ops::Range<usize>,
    k: usize,
    accumulate: bool,
) {
    let kc = if p.kc == 0 { k.max(1) } else { p.kc };
    let nr = p.nr;
    let mut d = [0f32; 8];
    let mut k0 = 0;
    // At least one k-block even when k == 0, so the epilogue still runs.
    loop {
        let len = kc.min(k - k0);
        let first = k0 == 0;
        let mut i = rows.start;
        while i < rows.end {
            let (f, h) = if rows.end - i >= nr {
                (kern.block, nr)
            } else {
                (kern.single, 1)
            };
            // SAFETY: rows i..i + h lie inside `rows`, columns k0..k0 + len
            // inside 0..k (caller's contract).
            unsafe {
                f(
                    w.as_ptr().add(i * k + k0),
                    k,
                    x.as_ptr().add(k0),
                    len,
                    p.prefetch,
                    d.as_mut_ptr(),
                )
            };
            for (r, &dr) in d[..h].iter().enumerate() {
                let yi = &mut y[i + r - rows.start];
                *yi = if first {
                    let mut v = dr;
                    if let Some(b) = bias {
                        v += b[i + r];
                    }
                    if accumulate {
                        v += *yi;
                    }
                    v
                } else {
                    *yi + dr
                };
            }
            i += h;
        }
        k0 += len;
        if k0 >= k {
            break;
        }
    }
}
