//! [`Simd`] for AVX-512F: 16 lanes in a `zmm` register, tails masked.
//! The f16 and i8 tail loads need AVX-512BW (and VL), which the entry
//! points that use them enable.

use super::Simd;
use super::expc::*;
use core::arch::x86_64::*;
use half::f16;

/// AVX-512F (the `Isa::Avx512` level).
#[derive(Clone, Copy)]
pub(crate) struct Avx512;

/// Mask of the first `n` lanes (`n <= 16`).
#[inline(always)]
pub(crate) fn tail_mask(n: usize) -> __mmask16 {
    ((1u32 << n) - 1) as __mmask16
}

// SAFETY (all methods): the caller runs with AVX-512F enabled (and BW + VL
// for `load_tail_f16`) and passes pointers valid for the lanes touched, per the
// `Simd` contract.
impl Simd for Avx512 {
    type V = __m512;
    type Bcast = __m512;
    const LANES: usize = 16;
    const BCAST_GROUP: usize = 1;
    const MASKED_TAIL: bool = true;

    #[inline(always)]
    unsafe fn zero() -> __m512 {
        unsafe { _mm512_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m512 {
        unsafe { _mm512_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m512 {
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m512) {
        unsafe { _mm512_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn load_f16(p: *const f16) -> __m512 {
        // f16 is a transparent u16.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
    }
    #[inline(always)]
    unsafe fn add(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn sub(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_sub_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn fma(a: __m512, b: __m512, c: __m512) -> __m512 {
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn max(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_max_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn reduce_add(v: __m512) -> f32 {
        unsafe { _mm512_reduce_add_ps(v) }
    }
    #[inline(always)]
    unsafe fn reduce_max(v: __m512) -> f32 {
        unsafe { _mm512_reduce_max_ps(v) }
    }
    #[inline(always)]
    unsafe fn exp(x: __m512) -> __m512 {
        unsafe { exp16(x) }
    }
    #[inline(always)]
    unsafe fn prefetch(p: *const u8) {
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p as *const i8) }
    }
    #[inline(always)]
    unsafe fn load_bcast(p: *const f32, i: usize) -> __m512 {
        unsafe { _mm512_set1_ps(*p.add(i)) }
    }
    #[inline(always)]
    unsafe fn fma_bcast(acc: __m512, b: __m512, a: __m512, _i: usize) -> __m512 {
        unsafe { _mm512_fmadd_ps(a, b, acc) }
    }
    #[inline(always)]
    unsafe fn load_tail(p: *const f32, n: usize) -> __m512 {
        unsafe { _mm512_maskz_loadu_ps(tail_mask(n), p) }
    }
    #[inline(always)]
    unsafe fn load_tail_f16(p: *const f16, n: usize) -> __m512 {
        unsafe { _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail_mask(n), p as *const i16)) }
    }
    #[inline(always)]
    unsafe fn store_tail(p: *mut f32, v: __m512, n: usize) {
        unsafe { _mm512_mask_storeu_ps(p, tail_mask(n), v) }
    }
    #[inline(always)]
    unsafe fn add_tail(acc: __m512, v: __m512, n: usize) -> __m512 {
        unsafe { _mm512_mask_add_ps(acc, tail_mask(n), acc, v) }
    }
    #[inline(always)]
    unsafe fn zero_tail(v: __m512, n: usize) -> __m512 {
        unsafe { _mm512_maskz_mov_ps(tail_mask(n), v) }
    }
}

/// `e^x`, 16 lanes (see `avx2::exp8` for the method); `2ⁿ` scaling uses
/// `vscalefps`, which rounds subnormal results once and overflows to `+∞`
/// by itself.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn exp16(x: __m512) -> __m512 {
    // Second operand is returned for NaN: keep x second so NaN survives.
    let x = _mm512_max_ps(
        _mm512_set1_ps(EXP_LO),
        _mm512_min_ps(_mm512_set1_ps(EXP_HI), x),
    );
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(LOG2E)),
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    let mut p = _mm512_set1_ps(EXP_POLY[0]);
    for &c in &EXP_POLY[1..] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    let r2 = _mm512_mul_ps(r, r);
    let y = _mm512_add_ps(_mm512_fmadd_ps(p, r2, r), _mm512_set1_ps(1.0));
    _mm512_scalef_ps(y, n)
}
