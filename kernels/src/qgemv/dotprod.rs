//! NEON + dot product (`sdot`, FEAT_DotProd) W·A8 quantized GEMV.
//!
//! Same kernels as the NEON W·A8 path (`neon::a8_family`), with the block dot
//! product done by two `sdot` instructions (4 int8 products per i32 lane
//! each; `sdot` from `crate::qsimd`, its intrinsic being unstable).

use super::neon::{a8_family, kq_family};
use super::{A8Rows, QGemvParams, a8_entry};
use crate::qsimd::sdot;
use crate::quant::blocks::{
    BlockMxfp4, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K,
    BlockQ8_0, BlockQ8_1, BlockQ8K, KSubBlock, e8m0_to_f32_half,
};
use std::arch::aarch64::*;

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

kq_family!("neon,dotprod", dot32_sdot, dot16_sdot, a8_k_sub, a8_q6_k);

/// W·A8 with `sdot`.
///
/// # Safety
/// The CPU must support FEAT_DotProd; shapes as in `drive`.
pub unsafe fn gemv_a8(w: A8Rows<'_>, y: &mut [f32], rpb: QGemvParams) {
    // SAFETY (all arms): forwarded from the caller.
    unsafe {
        a8_entry!(w, y, rpb, [
            Q4_0 => a8_q4_0, Q8_0 => a8_q8_0, Mxfp4 => a8_mxfp4, Q4_1 => a8_q4_1,
            Q4K => a8_k_sub<BlockQ4K>, Q5K => a8_k_sub<BlockQ5K>, Q6K => a8_q6_k,
            Q5_0 => a8_q5_0, Q5_1 => a8_q5_1,
        ])
    }
}
