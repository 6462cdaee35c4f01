//! AVX2 + FMA element-wise kernels, 8 lanes, on `simd`'s `exp8`.
//! Tails go through a zero-padded stack buffer so every lane count runs
//! the same code.

use super::scalar::{GELU_CUBIC, QUICK_GELU_ALPHA, SQRT_2_OVER_PI};
use super::vconst::*;
use crate::simd::avx2::{Avx2, exp8};
use std::arch::x86_64::*;

/// `x / (1 + e^(-a·x))` with the `x = -∞` limit `-0`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn x_sigmoid8(x: __m256, a: f32) -> __m256 {
    let e = exp8(_mm256_mul_ps(x, _mm256_set1_ps(-a)));
    let v = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0), e));
    fix_neg_inf(x, v)
}

/// Where `x = -∞`, returns `-0` instead of `v` (which is NaN there).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn fix_neg_inf(x: __m256, v: __m256) -> __m256 {
    let m = _mm256_cmp_ps::<_CMP_EQ_OQ>(x, _mm256_set1_ps(f32::NEG_INFINITY));
    _mm256_blendv_ps(v, _mm256_set1_ps(-0.0), m)
}

#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn sigmoid8(x: __m256) -> __m256 {
    let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
    _mm256_div_ps(_mm256_set1_ps(1.0), _mm256_add_ps(_mm256_set1_ps(1.0), e))
}

#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn silu8(x: __m256) -> __m256 {
    x_sigmoid8(x, 1.0)
}

#[inline]
#[target_feature(enable = "avx2,fma")]
fn gelu_tanh8(x: __m256) -> __m256 {
    // x·sigmoid(2u), u = √(2/π)·(x + 0.044715·x³)
    let k = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(GELU_CUBIC), x), x);
    // mul + add, not fma: the same roundings as the reference, so the exp
    // argument is bit-identical and its error is not amplified by |u|.
    let u = _mm256_mul_ps(
        _mm256_set1_ps(SQRT_2_OVER_PI),
        _mm256_add_ps(x, _mm256_mul_ps(k, x)),
    );
    let e = exp8(_mm256_mul_ps(u, _mm256_set1_ps(-2.0)));
    fix_neg_inf(x, _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0), e)))
}

#[inline]
#[target_feature(enable = "avx2,fma")]
fn gelu_erf8(x: __m256) -> __m256 {
    // x·Φ(x), Φ(x) = ½erfc(|x|/√2) for x < 0 and 1 - ½erfc(|x|/√2) otherwise.
    let ax = _mm256_min_ps(
        _mm256_set1_ps(ERFC_AX_MAX),
        _mm256_andnot_ps(_mm256_set1_ps(-0.0), x),
    );
    let z = _mm256_mul_ps(ax, _mm256_set1_ps(FRAC_1_SQRT_2));
    let one = _mm256_set1_ps(1.0);
    let t = _mm256_div_ps(one, _mm256_fmadd_ps(z, _mm256_set1_ps(0.5), one));
    let mut p = _mm256_set1_ps(ERFC_POLY[0]);
    for &c in &ERFC_POLY[1..] {
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(c));
    }
    // e^(-z²) from z² = x²/2 = hi + lo exactly (fma gives the rounding error
    // of x², halving is exact), then e^(-hi-lo) ≈ e^(-hi)·(1 - lo): the
    // rounding of z itself would cost 2z² ulps of relative error in the tail.
    let half = _mm256_set1_ps(0.5);
    let sq = _mm256_mul_ps(ax, ax);
    let lo = _mm256_mul_ps(_mm256_fmsub_ps(ax, ax, sq), half);
    let e = exp8(_mm256_mul_ps(sq, _mm256_set1_ps(-0.5)));
    let e = _mm256_fnmadd_ps(e, lo, e);
    let q = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5), e), _mm256_mul_ps(t, p));
    let neg = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_setzero_ps());
    let phi = _mm256_blendv_ps(_mm256_sub_ps(one, q), q, neg);
    fix_neg_inf(x, _mm256_mul_ps(x, phi))
}

#[inline]
#[target_feature(enable = "avx2,fma")]
fn relu8(x: __m256) -> __m256 {
    // maxps returns the second operand for NaN and for ±0 pairs, which keeps
    // NaN and -0 exactly as the reference does.
    _mm256_max_ps(_mm256_setzero_ps(), x)
}

#[inline]
#[target_feature(enable = "avx2,fma")]
fn relu2_8(x: __m256) -> __m256 {
    let r = relu8(x);
    _mm256_mul_ps(r, r)
}

super::body::act_impl!(Avx2: silu8, gelu_tanh8, gelu_erf8, |x| x_sigmoid8(x, QUICK_GELU_ALPHA), relu8, relu2_8, sigmoid8);

super::body::elt_kernels! { isa: Avx2, feature: "avx2,fma", needs: "AVX2 and FMA" }
