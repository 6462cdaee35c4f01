//! [`Simd`] for AVX2 + FMA + F16C: 8 lanes in a `ymm` register.

use super::Simd;
use super::expc::*;
use core::arch::x86_64::*;
use half::f16;

/// AVX2 + FMA + F16C (the `Isa::Avx2` level).
#[derive(Clone, Copy)]
pub(crate) struct Avx2;

// SAFETY (all methods): the caller runs with AVX2, FMA and F16C enabled and
// passes pointers valid for 8 lanes, per the `Simd` contract.
impl Simd for Avx2 {
    type V = __m256;
    type Bcast = __m256;
    const LANES: usize = 8;
    const BCAST_GROUP: usize = 1;
    const MASKED_TAIL: bool = false;

    #[inline(always)]
    unsafe fn zero() -> __m256 {
        unsafe { _mm256_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m256 {
        unsafe { _mm256_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn load_f16(p: *const f16) -> __m256 {
        // f16 is a transparent u16.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
    }
    #[inline(always)]
    unsafe fn add(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn sub(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_sub_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn fma(a: __m256, b: __m256, c: __m256) -> __m256 {
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn max(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_max_ps(a, b) }
    }
    /// Pairwise halves: 256 → 128 → 64 → 32 bits.
    #[inline(always)]
    unsafe fn reduce_add(v: __m256) -> f32 {
        unsafe {
            let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            let s = _mm_add_ss(s, _mm_movehdup_ps(s));
            _mm_cvtss_f32(s)
        }
    }
    /// NaN handling as `maxps`: not propagated; callers detect NaN through
    /// the sum that follows.
    #[inline(always)]
    unsafe fn reduce_max(v: __m256) -> f32 {
        unsafe {
            let s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
            let s = _mm_max_ss(s, _mm_movehdup_ps(s));
            _mm_cvtss_f32(s)
        }
    }
    #[inline(always)]
    unsafe fn exp(x: __m256) -> __m256 {
        unsafe { exp8(x) }
    }
    #[inline(always)]
    unsafe fn prefetch(p: *const u8) {
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p as *const i8) }
    }
    #[inline(always)]
    unsafe fn load_bcast(p: *const f32, i: usize) -> __m256 {
        unsafe { _mm256_set1_ps(*p.add(i)) }
    }
    #[inline(always)]
    unsafe fn fma_bcast(acc: __m256, b: __m256, a: __m256, _i: usize) -> __m256 {
        unsafe { _mm256_fmadd_ps(a, b, acc) }
    }
}

/// `e^x`, 8 lanes: Cody–Waite reduction `x = n·ln2 + r`, Cephes polynomial,
/// and `2ⁿ` applied as two factors `2^(n>>1)·2^(n-(n>>1))` so that subnormal
/// results round gradually and `n = 128` overflows to `+∞`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn exp8(x: __m256) -> __m256 {
    // min/max return their second operand when either is NaN: order them so
    // that a NaN input survives the clamp.
    let x = _mm256_max_ps(
        _mm256_set1_ps(EXP_LO),
        _mm256_min_ps(_mm256_set1_ps(EXP_HI), x),
    );
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(LOG2E),
    ));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    let mut p = _mm256_set1_ps(EXP_POLY[0]);
    for &c in &EXP_POLY[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let r2 = _mm256_mul_ps(r, r);
    let y = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0));
    let ni = _mm256_cvtps_epi32(n);
    let n1 = _mm256_srai_epi32::<1>(ni);
    let n2 = _mm256_sub_epi32(ni, n1);
    let bias = _mm256_set1_epi32(127);
    let s1 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(n1, bias)));
    let s2 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(n2, bias)));
    _mm256_mul_ps(_mm256_mul_ps(y, s1), s2)
}
