//! [`Simd`] for NEON: 4 lanes in a `q` register. A packed A panel is
//! loaded as whole vectors and multiplied lane by lane
//! (`fmla v.4s, v.4s, v.s[i]`): scalar A operands would each take a whole
//! register.

use super::Simd;
use super::expc::*;
use core::arch::aarch64::*;
use half::f16;

/// NEON (baseline on aarch64, the `Isa::Neon` level).
#[derive(Clone, Copy)]
pub(crate) struct Neon;

// SAFETY (all methods): NEON is baseline on aarch64; pointers are valid for
// 4 lanes, per the `Simd` contract.
impl Simd for Neon {
    type V = float32x4_t;
    type Bcast = float32x4_t;
    const LANES: usize = 4;
    const BCAST_GROUP: usize = 4;
    const MASKED_TAIL: bool = false;

    #[inline(always)]
    unsafe fn zero() -> float32x4_t {
        unsafe { vdupq_n_f32(0.0) }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> float32x4_t {
        unsafe { vdupq_n_f32(x) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> float32x4_t {
        unsafe { vld1q_f32(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: float32x4_t) {
        unsafe { vst1q_f32(p, v) }
    }
    /// `fcvtl` (base ARMv8 floating point, no FEAT_FP16 needed).
    #[inline(always)]
    unsafe fn load_f16(p: *const f16) -> float32x4_t {
        // f16 is a transparent u16.
        unsafe { vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p as *const u16))) }
    }
    #[inline(always)]
    unsafe fn add(a: float32x4_t, b: float32x4_t) -> float32x4_t {
        unsafe { vaddq_f32(a, b) }
    }
    #[inline(always)]
    unsafe fn sub(a: float32x4_t, b: float32x4_t) -> float32x4_t {
        unsafe { vsubq_f32(a, b) }
    }
    #[inline(always)]
    unsafe fn mul(a: float32x4_t, b: float32x4_t) -> float32x4_t {
        unsafe { vmulq_f32(a, b) }
    }
    #[inline(always)]
    unsafe fn fma(a: float32x4_t, b: float32x4_t, c: float32x4_t) -> float32x4_t {
        unsafe { vfmaq_f32(c, a, b) }
    }
    #[inline(always)]
    unsafe fn max(a: float32x4_t, b: float32x4_t) -> float32x4_t {
        unsafe { vmaxq_f32(a, b) }
    }
    #[inline(always)]
    unsafe fn reduce_add(v: float32x4_t) -> f32 {
        unsafe { vaddvq_f32(v) }
    }
    #[inline(always)]
    unsafe fn reduce_max(v: float32x4_t) -> f32 {
        unsafe { vmaxvq_f32(v) }
    }
    #[inline(always)]
    unsafe fn exp(x: float32x4_t) -> float32x4_t {
        unsafe { exp4(x) }
    }
    /// `prfm pldl1strm` (`core::arch::aarch64::_prefetch` is unstable).
    #[inline(always)]
    unsafe fn prefetch(p: *const u8) {
        unsafe {
            core::arch::asm!(
                "prfm pldl1strm, [{p}]",
                p = in(reg) p,
                options(nostack, readonly, preserves_flags)
            );
        }
    }
    #[inline(always)]
    unsafe fn load_bcast(p: *const f32, i: usize) -> float32x4_t {
        unsafe { vld1q_f32(p.add(i / 4 * 4)) }
    }
    /// `lane` is a constant once the kernels' loops unroll, so the match
    /// folds away.
    #[inline(always)]
    unsafe fn fma_bcast(acc: float32x4_t, b: float32x4_t, a: float32x4_t, i: usize) -> float32x4_t {
        unsafe {
            match i % 4 {
                0 => vfmaq_laneq_f32::<0>(acc, b, a),
                1 => vfmaq_laneq_f32::<1>(acc, b, a),
                2 => vfmaq_laneq_f32::<2>(acc, b, a),
                _ => vfmaq_laneq_f32::<3>(acc, b, a),
            }
        }
    }
}

/// `e^x`, 4 lanes (see `avx2::exp8` for the method). `fmin`/`fmax`
/// propagate NaN, so the clamp keeps NaN inputs NaN.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn exp4(x: float32x4_t) -> float32x4_t {
    let x = vmaxq_f32(vdupq_n_f32(EXP_LO), vminq_f32(vdupq_n_f32(EXP_HI), x));
    let ni = vcvtnq_s32_f32(vmulq_f32(x, vdupq_n_f32(LOG2E)));
    let n = vcvtq_f32_s32(ni);
    let r = vfmsq_f32(x, n, vdupq_n_f32(LN2_HI));
    let r = vfmsq_f32(r, n, vdupq_n_f32(LN2_LO));
    let mut p = vdupq_n_f32(EXP_POLY[0]);
    for &c in &EXP_POLY[1..] {
        p = vfmaq_f32(vdupq_n_f32(c), p, r);
    }
    let r2 = vmulq_f32(r, r);
    let y = vaddq_f32(vfmaq_f32(r, p, r2), vdupq_n_f32(1.0));
    let n1 = vshrq_n_s32::<1>(ni);
    let n2 = vsubq_s32(ni, n1);
    let bias = vdupq_n_s32(127);
    let s1 = vreinterpretq_f32_s32(vshlq_n_s32::<23>(vaddq_s32(n1, bias)));
    let s2 = vreinterpretq_f32_s32(vshlq_n_s32::<23>(vaddq_s32(n2, bias)));
    vmulq_f32(vmulq_f32(y, s1), s2)
}
