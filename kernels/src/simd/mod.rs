//! Per-ISA f32 vector operations, so that a kernel family writes its loop
//! once and each ISA file only instantiates it.
//!
//! [`Simd`] is implemented by one zero-sized marker per ISA ([`avx2::Avx2`],
//! [`avx512::Avx512`], [`neon::Neon`]). Every method is `#[inline(always)]`
//! and carries no `target_feature` of its own: a generic body written against
//! `S: Simd` is `#[inline(always)]` too and is instantiated inside the ISA's
//! `#[target_feature]` entry point, where the intrinsics inline (LLVM inlines
//! a callee into a caller whose features are a superset of its own). Calling
//! a generic body from anywhere else leaves the intrinsics out of line.
//!
//! What differs between ISAs beyond width and names is a constant of the
//! trait, so the bodies branch on it and the other branch folds away:
//! [`Simd::MASKED_TAIL`] (AVX-512 finishes a row with a masked vector where
//! the others run a scalar loop) and the broadcast operand of
//! [`Simd::fma_bcast`] (NEON multiplies by a lane of a loaded vector).

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;

use half::f16;

/// f32 vector operations of one ISA.
///
/// # Safety
/// Every method is `unsafe`: the CPU must support the ISA the implementor
/// names, and pointer arguments must be valid for the lanes they touch
/// (`LANES` unless a length is given).
pub(crate) trait Simd: Copy {
    /// A vector of `LANES` f32, laid out as `[f32; LANES]`.
    type V: Copy;
    /// What [`Simd::fma_bcast`] multiplies by: a broadcast on x86, a
    /// vector whose lanes are used one at a time on NEON.
    type Bcast: Copy;
    const LANES: usize;
    /// Values [`Simd::load_bcast`] reads from one address (1, or 4 on NEON:
    /// a multiple of it must be readable).
    const BCAST_GROUP: usize;
    /// Tails are finished with [`Simd::load_tail`] / [`Simd::store_tail`]
    /// instead of a scalar loop.
    const MASKED_TAIL: bool;

    unsafe fn zero() -> Self::V;
    unsafe fn splat(x: f32) -> Self::V;
    unsafe fn load(p: *const f32) -> Self::V;
    unsafe fn store(p: *mut f32, v: Self::V);
    /// `LANES` f16 widened to f32.
    unsafe fn load_f16(p: *const f16) -> Self::V;
    unsafe fn add(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn sub(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
    /// `a · b + c`, fused.
    unsafe fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    unsafe fn max(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn reduce_add(v: Self::V) -> f32;
    unsafe fn reduce_max(v: Self::V) -> f32;
    /// `e^x` lane by lane, the vector exponential of `eltwise`.
    unsafe fn exp(x: Self::V) -> Self::V;
    /// Hints the cache line at `p` into L1 for reading. Prefetches never
    /// fault, so `p` may point anywhere.
    unsafe fn prefetch(p: *const u8);

    /// The operand for rows `i..` of a packed A panel whose step starts at
    /// `p` (`p` readable for `BCAST_GROUP` values from `i` rounded down).
    unsafe fn load_bcast(p: *const f32, i: usize) -> Self::Bcast;
    /// `acc + b · a[i]`, where `a = load_bcast(p, i)`.
    unsafe fn fma_bcast(acc: Self::V, b: Self::V, a: Self::Bcast, i: usize) -> Self::V;

    /// The first `n <= LANES` values at `p`, the rest zero. Only called
    /// when `MASKED_TAIL`: those ISAs run a row's last vectors (or all of
    /// them) through these with `n = min(left, LANES)`.
    #[inline(always)]
    unsafe fn load_tail(_p: *const f32, _n: usize) -> Self::V {
        unreachable!("no masked tails on this ISA")
    }
    /// As [`Simd::load_tail`], f16 widened.
    #[inline(always)]
    unsafe fn load_tail_f16(_p: *const f16, _n: usize) -> Self::V {
        unreachable!("no masked tails on this ISA")
    }
    /// Stores the first `n <= LANES` lanes. Only called when `MASKED_TAIL`.
    #[inline(always)]
    unsafe fn store_tail(_p: *mut f32, _v: Self::V, _n: usize) {
        unreachable!("no masked tails on this ISA")
    }

    /// `v` in the first `n <= LANES` lanes, zero in the others. Only called
    /// when `MASKED_TAIL`.
    #[inline(always)]
    unsafe fn zero_tail(_v: Self::V, _n: usize) -> Self::V {
        unreachable!("no masked tails on this ISA")
    }
    /// `acc + v` in the first `n <= LANES` lanes, `acc` in the others. Only
    /// called when `MASKED_TAIL`.
    #[inline(always)]
    unsafe fn add_tail(_acc: Self::V, _v: Self::V, _n: usize) -> Self::V {
        unreachable!("no masked tails on this ISA")
    }
}

/// An element type that loads as f32 lanes: f32 itself, or f16 widened.
pub(crate) trait Elem: Copy {
    /// # Safety
    /// As [`Simd::load`].
    unsafe fn load<S: Simd>(p: *const Self) -> S::V;
    /// # Safety
    /// As [`Simd::load_tail`].
    unsafe fn load_tail<S: Simd>(p: *const Self, n: usize) -> S::V;
    fn to_f32(self) -> f32;
}

impl Elem for f32 {
    #[inline(always)]
    unsafe fn load<S: Simd>(p: *const f32) -> S::V {
        // SAFETY: per the trait contract.
        unsafe { S::load(p) }
    }
    #[inline(always)]
    unsafe fn load_tail<S: Simd>(p: *const f32, n: usize) -> S::V {
        // SAFETY: per the trait contract.
        unsafe { S::load_tail(p, n) }
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
}

impl Elem for f16 {
    #[inline(always)]
    unsafe fn load<S: Simd>(p: *const f16) -> S::V {
        // SAFETY: per the trait contract.
        unsafe { S::load_f16(p) }
    }
    #[inline(always)]
    unsafe fn load_tail<S: Simd>(p: *const f16, n: usize) -> S::V {
        // SAFETY: per the trait contract.
        unsafe { S::load_tail_f16(p, n) }
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
}

/// The constants of the vector exponential (`exp8`, `exp16`, `exp4` in the
/// ISA files, [`Simd::exp`]).
pub(crate) mod expc {
    /// Inputs are clamped to `[EXP_LO, EXP_HI]`: above `ln(f32::MAX) ≈ 88.72`
    /// the result must overflow to `+∞`, and below `-104` it rounds to `0`
    /// (the smallest subnormal is `e^-103.3`). NaN survives the clamp.
    pub const EXP_HI: f32 = 88.8;
    pub const EXP_LO: f32 = -104.0;
    pub const LOG2E: f32 = std::f32::consts::LOG2_E;
    /// `ln 2` split Cody–Waite style (Cephes `expf`): `LN2_HI` has few
    /// mantissa bits so `n·LN2_HI` is exact for `|n| < 2^9`.
    pub const LN2_HI: f32 = 0.693_359_4;
    pub const LN2_LO: f32 = -2.121_944_4e-4;
    /// Cephes `expf` polynomial (S. L. Moshier, Cephes Math Library 2.2):
    /// `e^r ≈ 1 + r + r²·P(r)` on `|r| ≤ ln2/2`, highest degree first;
    /// relative error ≈ 1 ulp.
    pub const EXP_POLY: [f32; 6] = [
        1.987_569_1e-4,
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5, // Cephes: 5.0000001201e-1, which rounds to 0.5 in f32
    ];
}
