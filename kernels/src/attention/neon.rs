//! NEON page kernels: the bodies of `body.rs` at 4 lanes, four heads at a
//! time, f16 rows widened with `fcvtl` (base ARMv8 floating point), Q8_0
//! rows `i8 → i16 → i32 → f32`. Q8_0 keys are scored with `sdot` where
//! FEAT_DotProd is present, else widened from their quads by shifts.

use super::body::Quads;
use crate::simd::neon::Neon;
use std::arch::aarch64::*;

/// Quads widened to f32: value `i` of a lane is its byte `i`, moved to
/// the top and shifted back down with its sign.
#[derive(Clone, Copy)]
pub(super) struct Widen;

impl Quads<Neon> for Widen {
    const DOT: bool = false;
    type I = int32x4_t;
    #[inline(always)]
    unsafe fn load(p: *const i8) -> int32x4_t {
        // SAFETY: forwarded contract.
        unsafe { vreinterpretq_s32_s8(vld1q_s8(p)) }
    }
    #[inline(always)]
    unsafe fn start(_: i32) -> int32x4_t {
        // SAFETY: the caller's CPU has the ISA (the trait's contract).
        unsafe { vdupq_n_s32(0) }
    }
    #[inline(always)]
    unsafe fn dot(_: int32x4_t, _: int32x4_t, _: *const i8) -> int32x4_t {
        unreachable!("no int8 dot product without FEAT_DotProd")
    }
    #[inline(always)]
    unsafe fn to_f32(_: int32x4_t) -> float32x4_t {
        unreachable!("no int8 dot product without FEAT_DotProd")
    }
    #[inline(always)]
    unsafe fn value(k: int32x4_t, i: usize) -> float32x4_t {
        // SAFETY: the caller's CPU has the ISA (the trait's contract).
        unsafe {
            let x = match i {
                0 => vshrq_n_s32::<24>(vshlq_n_s32::<24>(k)),
                1 => vshrq_n_s32::<24>(vshlq_n_s32::<16>(k)),
                2 => vshrq_n_s32::<24>(vshlq_n_s32::<8>(k)),
                _ => vshrq_n_s32::<24>(k),
            };
            vcvtq_f32_s32(x)
        }
    }
}

/// `sdot` (s8 × s8): the quads as they are, accumulators from zero.
#[derive(Clone, Copy)]
pub(super) struct Dot;

impl Quads<Neon> for Dot {
    const DOT: bool = true;
    type I = int32x4_t;
    #[inline(always)]
    unsafe fn load(p: *const i8) -> int32x4_t {
        // SAFETY: forwarded contract.
        unsafe { <Widen as Quads<Neon>>::load(p) }
    }
    #[inline(always)]
    unsafe fn start(sum: i32) -> int32x4_t {
        // SAFETY: forwarded contract.
        unsafe { <Widen as Quads<Neon>>::start(sum) }
    }
    #[inline(always)]
    unsafe fn dot(acc: int32x4_t, k: int32x4_t, q: *const i8) -> int32x4_t {
        // SAFETY: four bytes at q (forwarded contract); the caller's
        // target features include dotprod.
        unsafe {
            let qv = vreinterpretq_s8_s32(vdupq_n_s32(q.cast::<i32>().read_unaligned()));
            crate::qsimd::sdot(acc, vreinterpretq_s8_s32(k), qv)
        }
    }
    #[inline(always)]
    unsafe fn to_f32(acc: int32x4_t) -> float32x4_t {
        // SAFETY: the caller's CPU has the ISA (the trait's contract).
        unsafe { vcvtq_f32_s32(acc) }
    }
    #[inline(always)]
    unsafe fn value(_: int32x4_t, _: usize) -> float32x4_t {
        unreachable!("sdot takes the quads whole")
    }
    #[inline(always)]
    unsafe fn narrow(y: float32x4_t, out: *mut i8) {
        // SAFETY: 4 bytes at out (forwarded contract).
        unsafe {
            let h = vmovn_u32(vreinterpretq_u32_f32(y));
            let b = vmovn_u16(vcombine_u16(h, h));
            vst1_lane_u32::<0>(out.cast(), vreinterpret_u32_u8(b));
        }
    }
}

super::body::page_kernels! { isa: Neon, heads: 4, vecs: 4, quads: Widen, feature: "neon", needs: "NEON" }
super::body::page_kernels! { q8_dot: Neon, heads: 4, vecs: 4, quads: Dot, feature: "neon,dotprod", needs: "NEON + FEAT_DotProd" }
