//! AVX2 + FMA element-wise kernels, 8 lanes, and the 8-lane vector math
//! (`exp8`, `sigmoid`-style helpers) that norm, softmax and rope reuse.
//! Tails go through a zero-padded stack buffer so every lane count runs
//! the same code.

use super::EltOp;
use super::scalar::{GELU_CUBIC, QUICK_GELU_ALPHA, SQRT_2_OVER_PI};
use super::vconst::*;
use std::arch::x86_64::*;

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
    let ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0), x);
    let z = _mm256_min_ps(
        _mm256_set1_ps(ERFC_Z_MAX),
        _mm256_mul_ps(ax, _mm256_set1_ps(FRAC_1_SQRT_2)),
    );
    let one = _mm256_set1_ps(1.0);
    let t = _mm256_div_ps(one, _mm256_fmadd_ps(z, _mm256_set1_ps(0.5), one));
    let mut p = _mm256_set1_ps(ERFC_POLY[0]);
    for &c in &ERFC_POLY[1..] {
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(c));
    }
    // e^(-z²) with the rounding error of z² folded back in: e^(-hi-lo) ≈ e^(-hi)(1-lo).
    let hi = _mm256_mul_ps(z, z);
    let lo = _mm256_fmsub_ps(z, z, hi);
    let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), hi));
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

/// Applies `$f` to every 8-lane block of `$x` in place.
macro_rules! map_inplace {
    ($x:expr, |$v:ident| $body:expr) => {{
        let x: &mut [f32] = $x;
        let n = x.len();
        let p = x.as_mut_ptr();
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 <= n.
            let $v = unsafe { _mm256_loadu_ps(p.add(i)) };
            let r = $body;
            unsafe { _mm256_storeu_ps(p.add(i), r) };
            i += 8;
        }
        if i < n {
            let mut buf = [0f32; 8];
            buf[..n - i].copy_from_slice(&x[i..]);
            // SAFETY: buf holds 8 floats.
            let $v = unsafe { _mm256_loadu_ps(buf.as_ptr()) };
            let r = $body;
            unsafe { _mm256_storeu_ps(buf.as_mut_ptr(), r) };
            x[i..].copy_from_slice(&buf[..n - i]);
        }
    }};
}

/// Applies `$f` to 8-lane blocks of `$a` and `$b` (same length), storing into `$a`.
macro_rules! zip_inplace {
    ($a:expr, $b:expr, |$va:ident, $vb:ident| $body:expr) => {{
        let a: &mut [f32] = $a;
        let b: &[f32] = $b;
        debug_assert_eq!(a.len(), b.len());
        let n = a.len().min(b.len());
        let pa = a.as_mut_ptr();
        let pb = b.as_ptr();
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 <= n for both slices.
            let ($va, $vb) = unsafe { (_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i))) };
            let r = $body;
            unsafe { _mm256_storeu_ps(pa.add(i), r) };
            i += 8;
        }
        if i < n {
            let mut ba = [0f32; 8];
            let mut bb = [0f32; 8];
            ba[..n - i].copy_from_slice(&a[i..n]);
            bb[..n - i].copy_from_slice(&b[i..n]);
            // SAFETY: both buffers hold 8 floats.
            let ($va, $vb) = unsafe { (_mm256_loadu_ps(ba.as_ptr()), _mm256_loadu_ps(bb.as_ptr())) };
            let r = $body;
            unsafe { _mm256_storeu_ps(ba.as_mut_ptr(), r) };
            a[i..n].copy_from_slice(&ba[..n - i]);
        }
    }};
}

/// Unary op in place.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn unary(op: EltOp, x: &mut [f32]) {
    match op {
        EltOp::Silu => map_inplace!(x, |v| silu8(v)),
        EltOp::GeluTanh => map_inplace!(x, |v| gelu_tanh8(v)),
        EltOp::GeluErf => map_inplace!(x, |v| gelu_erf8(v)),
        EltOp::QuickGelu => map_inplace!(x, |v| x_sigmoid8(v, QUICK_GELU_ALPHA)),
        EltOp::Relu => map_inplace!(x, |v| relu8(v)),
        EltOp::Relu2 => map_inplace!(x, |v| relu2_8(v)),
        EltOp::Sigmoid => map_inplace!(x, |v| sigmoid8(v)),
    }
}

/// `x *= c`.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn mul_const(x: &mut [f32], c: f32) {
    let c = _mm256_set1_ps(c);
    map_inplace!(x, |v| _mm256_mul_ps(v, c));
}

/// `a += b`.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `b.len() == a.len()`.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn add_from(a: &mut [f32], b: &[f32]) {
    zip_inplace!(a, b, |va, vb| _mm256_add_ps(va, vb));
}

/// `gate = silu(gate) · up`.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `up.len() == gate.len()`.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn swiglu(gate: &mut [f32], up: &[f32]) {
    zip_inplace!(gate, up, |g, u| _mm256_mul_ps(silu8(g), u));
}

/// Horizontal sum of 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn hsum8(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Horizontal max of 8 lanes (NaN handling as `maxps`: not propagated;
/// callers detect NaN through the sum that follows).
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn hmax8(v: __m256) -> f32 {
    let s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_max_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}
