//! AVX-512F element-wise kernels, 16 lanes, on `simd`'s `exp16`. Tails
//! use masked loads and stores.

use super::scalar::{GELU_CUBIC, QUICK_GELU_ALPHA, SQRT_2_OVER_PI};
use super::vconst::*;
use crate::simd::avx512::{Avx512, exp16};
use std::arch::x86_64::*;

/// Where `x = -∞`, returns `-0` instead of `v`.
#[inline]
#[target_feature(enable = "avx512f")]
fn fix_neg_inf(x: __m512, v: __m512) -> __m512 {
    let m = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(x, _mm512_set1_ps(f32::NEG_INFINITY));
    _mm512_mask_blend_ps(m, v, _mm512_set1_ps(-0.0))
}

/// `x / (1 + e^(-a·x))` with the `x = -∞` limit `-0`.
#[inline]
#[target_feature(enable = "avx512f")]
fn x_sigmoid16(x: __m512, a: f32) -> __m512 {
    let e = exp16(_mm512_mul_ps(x, _mm512_set1_ps(-a)));
    fix_neg_inf(x, _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0), e)))
}

#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn sigmoid16(x: __m512) -> __m512 {
    let e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), x));
    _mm512_div_ps(_mm512_set1_ps(1.0), _mm512_add_ps(_mm512_set1_ps(1.0), e))
}

#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn silu16(x: __m512) -> __m512 {
    x_sigmoid16(x, 1.0)
}

#[inline]
#[target_feature(enable = "avx512f")]
fn gelu_tanh16(x: __m512) -> __m512 {
    let k = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(GELU_CUBIC), x), x);
    // mul + add, not fma: the exp argument matches the reference bit for bit.
    let u = _mm512_mul_ps(
        _mm512_set1_ps(SQRT_2_OVER_PI),
        _mm512_add_ps(x, _mm512_mul_ps(k, x)),
    );
    let e = exp16(_mm512_mul_ps(u, _mm512_set1_ps(-2.0)));
    fix_neg_inf(x, _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0), e)))
}

#[inline]
#[target_feature(enable = "avx512f")]
fn gelu_erf16(x: __m512) -> __m512 {
    let ax = _mm512_min_ps(_mm512_set1_ps(ERFC_AX_MAX), _mm512_abs_ps(x));
    let z = _mm512_mul_ps(ax, _mm512_set1_ps(FRAC_1_SQRT_2));
    let one = _mm512_set1_ps(1.0);
    let t = _mm512_div_ps(one, _mm512_fmadd_ps(z, _mm512_set1_ps(0.5), one));
    let mut p = _mm512_set1_ps(ERFC_POLY[0]);
    for &c in &ERFC_POLY[1..] {
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(c));
    }
    // e^(-z²) from z² = x²/2 = hi + lo exactly (see avx2.rs).
    let half = _mm512_set1_ps(0.5);
    let sq = _mm512_mul_ps(ax, ax);
    let lo = _mm512_mul_ps(_mm512_fmsub_ps(ax, ax, sq), half);
    let e = exp16(_mm512_mul_ps(sq, _mm512_set1_ps(-0.5)));
    let e = _mm512_fnmadd_ps(e, lo, e);
    let q = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5), e), _mm512_mul_ps(t, p));
    let neg = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_setzero_ps());
    let phi = _mm512_mask_blend_ps(neg, _mm512_sub_ps(one, q), q);
    fix_neg_inf(x, _mm512_mul_ps(x, phi))
}

#[inline]
#[target_feature(enable = "avx512f")]
fn relu16(x: __m512) -> __m512 {
    // Second operand returned for NaN and for ±0 pairs, as in the reference.
    _mm512_max_ps(_mm512_setzero_ps(), x)
}

#[inline]
#[target_feature(enable = "avx512f")]
fn relu2_16(x: __m512) -> __m512 {
    let r = relu16(x);
    _mm512_mul_ps(r, r)
}

super::body::act_impl!(Avx512: silu16, gelu_tanh16, gelu_erf16, |x| x_sigmoid16(x, QUICK_GELU_ALPHA), relu16, relu2_16, sigmoid16);

super::body::elt_kernels! { isa: Avx512, feature: "avx512f", needs: "AVX-512F" }
