//! MXFP4 (OCP Microscaling FP4, E2M1 values with an E8M0 scale per 32), as
//! GGUF stores it (`block_mxfp4`), with ggml's reference quantizer
//! (`quantize_row_mxfp4_ref`): the shared exponent is
//! `floor(log2(amax)) - 2 + 127`, then each value takes the nearest table
//! entry (first one on ties).
//!
//! Spec: <https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf>.

use super::blocks::{BlockMxfp4, KVALUES_MXFP4, QK, e8m0_to_f32_half};

/// `best_index_mxfp4`: the code whose (doubled) value times `d` is nearest
/// to `x`, the lowest code on ties.
#[inline]
fn best_index(x: f32, d: f32) -> u8 {
    let mut best = 0u8;
    let mut best_err = (KVALUES_MXFP4[0] as f32 * d - x).abs();
    for (i, &k) in KVALUES_MXFP4.iter().enumerate().skip(1) {
        let err = (k as f32 * d - x).abs();
        if err < best_err {
            best = i as u8;
            best_err = err;
        }
    }
    best
}

/// `quantize_row_mxfp4_ref` for one block.
pub fn quantize_mxfp4(x: &[f32; QK]) -> BlockMxfp4 {
    let mut amax = 0.0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
        }
    }
    // `(uint8_t)(floorf(log2f(amax)) - 2 + 127)`; the value is in 0..=252
    // for every normal amax >= 2^-125, and `as u8` saturates below that.
    let e = if amax > 0.0 {
        (amax.log2().floor() - 2.0 + 127.0) as u8
    } else {
        0
    };
    let d = e8m0_to_f32_half(e);
    let mut qs = [0u8; QK / 2];
    for j in 0..QK / 2 {
        qs[j] = best_index(x[j], d) | (best_index(x[QK / 2 + j], d) << 4);
    }
    BlockMxfp4 { e, qs }
}

/// `dequantize_row_mxfp4` for one block.
pub fn dequantize_mxfp4(b: &BlockMxfp4, y: &mut [f32; QK]) {
    let d = e8m0_to_f32_half(b.e);
    for j in 0..QK / 2 {
        y[j] = KVALUES_MXFP4[(b.qs[j] & 0x0F) as usize] as f32 * d;
        y[j + QK / 2] = KVALUES_MXFP4[(b.qs[j] >> 4) as usize] as f32 * d;
    }
}
