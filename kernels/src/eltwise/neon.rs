//! NEON element-wise kernels, 4 lanes, on `simd`'s `exp4`. Tails go
//! through a zero-padded stack buffer.

use super::scalar::{GELU_CUBIC, QUICK_GELU_ALPHA, SQRT_2_OVER_PI};
use super::vconst::*;
use crate::simd::neon::{Neon, exp4};
use std::arch::aarch64::*;

/// Where `x = -∞`, returns `-0` instead of `v`.
#[inline]
#[target_feature(enable = "neon")]
fn fix_neg_inf(x: float32x4_t, v: float32x4_t) -> float32x4_t {
    let m = vceqq_f32(x, vdupq_n_f32(f32::NEG_INFINITY));
    vbslq_f32(m, vdupq_n_f32(-0.0), v)
}

/// `x / (1 + e^(-a·x))` with the `x = -∞` limit `-0`.
#[inline]
#[target_feature(enable = "neon")]
fn x_sigmoid4(x: float32x4_t, a: f32) -> float32x4_t {
    let e = exp4(vmulq_f32(x, vdupq_n_f32(-a)));
    fix_neg_inf(x, vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0), e)))
}

#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn sigmoid4(x: float32x4_t) -> float32x4_t {
    let e = exp4(vnegq_f32(x));
    vdivq_f32(vdupq_n_f32(1.0), vaddq_f32(vdupq_n_f32(1.0), e))
}

#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn silu4(x: float32x4_t) -> float32x4_t {
    x_sigmoid4(x, 1.0)
}

#[inline]
#[target_feature(enable = "neon")]
fn gelu_tanh4(x: float32x4_t) -> float32x4_t {
    let k = vmulq_f32(vmulq_f32(vdupq_n_f32(GELU_CUBIC), x), x);
    // mul + add, not fma: the exp argument matches the reference bit for bit.
    let u = vmulq_f32(vdupq_n_f32(SQRT_2_OVER_PI), vaddq_f32(x, vmulq_f32(k, x)));
    let e = exp4(vmulq_f32(u, vdupq_n_f32(-2.0)));
    fix_neg_inf(x, vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0), e)))
}

#[inline]
#[target_feature(enable = "neon")]
fn gelu_erf4(x: float32x4_t) -> float32x4_t {
    let ax = vminq_f32(vdupq_n_f32(ERFC_AX_MAX), vabsq_f32(x));
    let z = vmulq_f32(ax, vdupq_n_f32(FRAC_1_SQRT_2));
    let one = vdupq_n_f32(1.0);
    let t = vdivq_f32(one, vfmaq_f32(one, z, vdupq_n_f32(0.5)));
    let mut p = vdupq_n_f32(ERFC_POLY[0]);
    for &c in &ERFC_POLY[1..] {
        p = vfmaq_f32(vdupq_n_f32(c), p, t);
    }
    // e^(-z²) from z² = x²/2 = hi + lo exactly (see avx2.rs); vfmsq gives
    // sq - ax·ax fused, the negated rounding error.
    let sq = vmulq_f32(ax, ax);
    let lo = vmulq_f32(vfmsq_f32(sq, ax, ax), vdupq_n_f32(-0.5));
    let e = exp4(vmulq_f32(sq, vdupq_n_f32(-0.5)));
    let e = vfmsq_f32(e, e, lo);
    let q = vmulq_f32(vmulq_f32(vdupq_n_f32(0.5), e), vmulq_f32(t, p));
    let neg = vcltq_f32(x, vdupq_n_f32(0.0));
    let phi = vbslq_f32(neg, q, vsubq_f32(one, q));
    fix_neg_inf(x, vmulq_f32(x, phi))
}

#[inline]
#[target_feature(enable = "neon")]
fn relu4(x: float32x4_t) -> float32x4_t {
    // A select rather than fmax: keeps -0 as -0, exactly as the reference.
    let zero = vdupq_n_f32(0.0);
    vbslq_f32(vcltq_f32(x, zero), zero, x)
}

#[inline]
#[target_feature(enable = "neon")]
fn relu2_4(x: float32x4_t) -> float32x4_t {
    let r = relu4(x);
    vmulq_f32(r, r)
}

super::body::act_impl!(Neon: silu4, gelu_tanh4, gelu_erf4, |x| x_sigmoid4(x, QUICK_GELU_ALPHA), relu4, relu2_4, sigmoid4);

super::body::elt_kernels! { isa: Neon, feature: "neon", needs: "NEON" }
