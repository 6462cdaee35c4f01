//! NEON + dot product (`sdot`, FEAT_DotProd) W·A8 quantized GEMV.
//!
//! Same kernels as the NEON W·A8 path (`neon::a8_family`), with the block dot
//! product done by two `sdot` instructions (4 int8 products per i32 lane
//! each). `vdotq_s32` is still unstable in Rust 1.95
//! (`stdarch_neon_dotprod`), so `sdot` is emitted with `asm!` inside a
//! `#[target_feature(enable = "dotprod")]` function.

use super::neon::{a8_family, kq_family};
use super::{A8Rows, QGemvParams, drive};
use crate::quant::blocks::{
    BlockMxfp4, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8_0,
    BlockQ8_1, BlockQ8K, e8m0_to_f32_half,
};
use std::arch::aarch64::*;
use std::arch::asm;

/// `acc + Σ_{4 bytes} a·b` per i32 lane (`sdot v.4s, v.16b, v.16b`).
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: register-only instruction, available under the dotprod feature.
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// Block dot product of 32 int8 pairs: four i32 partial sums.
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn dot32_sdot(wl: int8x16_t, wh: int8x16_t, xl: int8x16_t, xh: int8x16_t) -> int32x4_t {
    sdot(sdot(vdupq_n_s32(0), wl, xl), wh, xh)
}

a8_family!(
    "neon,dotprod",
    dot32_sdot,
    a8_q4_0,
    a8_q8_0,
    a8_mxfp4,
    a8_q4_1,
    a8_q5_0,
    a8_q5_1
);

/// Dot product of 16 int8 pairs: one `sdot`.
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn dot16_sdot(w: int8x16_t, x: int8x16_t) -> int32x4_t {
    sdot(vdupq_n_s32(0), w, x)
}

kq_family!("neon,dotprod", dot32_sdot, dot16_sdot, a8_q4_k, a8_q6_k);

/// W·A8 with `sdot`.
///
/// # Safety
/// The CPU must support FEAT_DotProd; shapes as in `drive`.
pub unsafe fn gemv_a8(w: A8Rows<'_>, y: &mut [f32], rpb: QGemvParams) {
    // SAFETY (all arms): forwarded from the caller.
    unsafe {
        match w {
            A8Rows::Q4_0(w, x) => drive(
                w,
                x,
                x.len(),
                y,
                rpb,
                [a8_q4_0::<1>, a8_q4_0::<2>, a8_q4_0::<4>],
            ),
            A8Rows::Q8_0(w, x) => drive(
                w,
                x,
                x.len(),
                y,
                rpb,
                [a8_q8_0::<1>, a8_q8_0::<2>, a8_q8_0::<4>],
            ),
            A8Rows::Mxfp4(w, x) => drive(
                w,
                x,
                x.len(),
                y,
                rpb,
                [a8_mxfp4::<1>, a8_mxfp4::<2>, a8_mxfp4::<4>],
            ),
            A8Rows::Q4_1(w, x) => drive(
                w,
                x,
                x.len(),
                y,
                rpb,
                [a8_q4_1::<1>, a8_q4_1::<2>, a8_q4_1::<4>],
            ),
            A8Rows::Q4K(w, x) => drive(
                w,
                x,
                x.len(),
                y,
                rpb,
                [a8_q4_k::<1>, a8_q4_k::<2>, a8_q4_k::<4>],
            ),
            A8Rows::Q6K(w, x) => drive(
                w,
                x,
                x.len(),
                y,
                rpb,
                [a8_q6_k::<1>, a8_q6_k::<2>, a8_q6_k::<4>],
            ),
            A8Rows::Q5_0(w, x) => drive(
                w,
                x,
                x.len(),
                y,
                rpb,
                [a8_q5_0::<1>, a8_q5_0::<2>, a8_q5_0::<4>],
            ),
            A8Rows::Q5_1(w, x) => drive(
                w,
                x,
                x.len(),
                y,
                rpb,
                [a8_q5_1::<1>, a8_q5_1::<2>, a8_q5_1::<4>],
            ),
        }
    }
}

/// W·A8 over 4-row interleaved Q4_0 groups (see `repack.rs`): each 16-byte
/// load holds one 4-value chunk of all four rows; `sdot` against the
/// broadcast activation group leaves row r's partial sum in lane r, so the
/// four scales apply as one vector and no horizontal reduction is needed.
///
/// # Safety
/// Needs FEAT_DotProd; `w` holds `y.len() / 4` groups of `x.len()` blocks.
#[target_feature(enable = "neon,dotprod")]
pub(super) unsafe fn gemv_a8_q4_0x4(
    w: &[super::repack::BlockQ4_0x4],
    x: &[BlockQ8_0],
    y: &mut [f32],
) {
    use super::neon::fp16;
    let nb = x.len();
    debug_assert!(w.len() * 4 == y.len() * nb);
    let m4 = vdupq_n_u8(0x0F);
    let k8 = vdupq_n_s8(8);
    for (g, yg) in y.chunks_exact_mut(4).enumerate() {
        let mut acc = vdupq_n_f32(0.0);
        for (b, xb) in x.iter().enumerate() {
            let gb = &w[g * nb + b];
            // SAFETY: x.qs is 32 bytes.
            let (xl, xh) = unsafe {
                (
                    vreinterpretq_s32_s8(vld1q_s8(xb.qs.as_ptr())),
                    vreinterpretq_s32_s8(vld1q_s8(xb.qs.as_ptr().add(16))),
                )
            };
            // SAFETY: qs is 64 bytes.
            let v: [uint8x16_t; 4] =
                std::array::from_fn(|c| unsafe { vld1q_u8(gb.qs.as_ptr().add(16 * c)) });
            let lo = |q: uint8x16_t| vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, m4)), k8);
            let hi = |q: uint8x16_t| vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8::<4>(q)), k8);
            let bc = |v: int32x4_t| vreinterpretq_s8_s32(v);
            let mut s = vdupq_n_s32(0);
            s = sdot(s, lo(v[0]), bc(vdupq_laneq_s32::<0>(xl)));
            s = sdot(s, lo(v[1]), bc(vdupq_laneq_s32::<1>(xl)));
            s = sdot(s, lo(v[2]), bc(vdupq_laneq_s32::<2>(xl)));
            s = sdot(s, lo(v[3]), bc(vdupq_laneq_s32::<3>(xl)));
            s = sdot(s, hi(v[0]), bc(vdupq_laneq_s32::<0>(xh)));
            s = sdot(s, hi(v[1]), bc(vdupq_laneq_s32::<1>(xh)));
            s = sdot(s, hi(v[2]), bc(vdupq_laneq_s32::<2>(xh)));
            s = sdot(s, hi(v[3]), bc(vdupq_laneq_s32::<3>(xh)));
            let dx = fp16(xb.d);
            let d = [
                fp16(gb.d[0]) * dx,
                fp16(gb.d[1]) * dx,
                fp16(gb.d[2]) * dx,
                fp16(gb.d[3]) * dx,
            ];
            // SAFETY: d is 4 floats.
            acc = vfmaq_f32(acc, vcvtq_f32_s32(s), unsafe { vld1q_f32(d.as_ptr()) });
        }
        // SAFETY: yg holds 4 floats.
        unsafe { vst1q_f32(yg.as_mut_ptr(), acc) };
    }
}
