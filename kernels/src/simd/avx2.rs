//! [`Simd`] for AVX2 + FMA + F16C: 8 lanes in a `ymm` register.

use super::Simd;
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
        unsafe { crate::eltwise::avx2::exp8(x) }
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
