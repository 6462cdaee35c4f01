//! The 32-value "legacy" formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the
//! activation format Q8_1.
//!
//! Quantizers are line-by-line ports of ggml's reference quantizers
//! (`quantize_row_q4_0_ref` … in `ggml/src/ggml-quants.c`): same expression
//! order, same f32 rounding points, same truncating casts, so they produce
//! the same bytes as llama.cpp's `llama-quantize` without an imatrix. The
//! dequantizers follow `dequantize_row_*` (`x * d`, or `x * d + m`, unfused).

use super::blocks::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1, F16Le, QK};

/// The value of largest magnitude (with its sign), first one on ties, as the
/// `amax`/`max` loop of the reference quantizers finds it.
#[inline]
fn signed_absmax(x: &[f32]) -> f32 {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

#[inline]
fn min_max(x: &[f32]) -> (f32, f32) {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// `quantize_row_q4_0_ref` for one block.
pub fn quantize_q4_0(x: &[f32; QK]) -> BlockQ4_0 {
    let max = signed_absmax(x);
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0u8; QK / 2];
    for j in 0..QK / 2 {
        let x0 = x[j] * id;
        let x1 = x[QK / 2 + j] * id;
        // `(int8_t)(x + 8.5f)` truncates toward zero; the value is >= 0 here.
        let xi0 = ((x0 + 8.5) as i8).min(15) as u8;
        let xi1 = ((x1 + 8.5) as i8).min(15) as u8;
        qs[j] = xi0 | (xi1 << 4);
    }
    BlockQ4_0 {
        d: F16Le::from_f32(d),
        qs,
    }
}

/// `dequantize_row_q4_0` for one block.
pub fn dequantize_q4_0(b: &BlockQ4_0, y: &mut [f32; QK]) {
    let d = b.d.to_f32();
    for j in 0..QK / 2 {
        y[j] = ((b.qs[j] & 0x0F) as i32 - 8) as f32 * d;
        y[j + QK / 2] = ((b.qs[j] >> 4) as i32 - 8) as f32 * d;
    }
}

/// `quantize_row_q4_1_ref` for one block.
pub fn quantize_q4_1(x: &[f32; QK]) -> BlockQ4_1 {
    let (min, max) = min_max(x);
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0u8; QK / 2];
    for j in 0..QK / 2 {
        let x0 = (x[j] - min) * id;
        let x1 = (x[QK / 2 + j] - min) * id;
        let xi0 = ((x0 + 0.5) as i8).min(15) as u8;
        let xi1 = ((x1 + 0.5) as i8).min(15) as u8;
        qs[j] = xi0 | (xi1 << 4);
    }
    BlockQ4_1 {
        d: F16Le::from_f32(d),
        m: F16Le::from_f32(min),
        qs,
    }
}

/// `dequantize_row_q4_1` for one block.
pub fn dequantize_q4_1(b: &BlockQ4_1, y: &mut [f32; QK]) {
    let d = b.d.to_f32();
    let m = b.m.to_f32();
    for j in 0..QK / 2 {
        y[j] = (b.qs[j] & 0x0F) as f32 * d + m;
        y[j + QK / 2] = (b.qs[j] >> 4) as f32 * d + m;
    }
}

/// `quantize_row_q5_0_ref` for one block.
pub fn quantize_q5_0(x: &[f32; QK]) -> BlockQ5_0 {
    let max = signed_absmax(x);
    let d = max / -16.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0u8; QK / 2];
    let mut qh = 0u32;
    for j in 0..QK / 2 {
        let x0 = x[j] * id;
        let x1 = x[QK / 2 + j] * id;
        let xi0 = ((x0 + 16.5) as i8).min(31) as u8;
        let xi1 = ((x1 + 16.5) as i8).min(31) as u8;
        qs[j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
        qh |= (((xi0 & 0x10) >> 4) as u32) << j;
        qh |= (((xi1 & 0x10) >> 4) as u32) << (j + QK / 2);
    }
    BlockQ5_0 {
        d: F16Le::from_f32(d),
        qh: qh.to_le_bytes(),
        qs,
    }
}

/// The five-bit value `j` of a Q5 block (low nibble | fifth bit).
#[inline]
pub(crate) fn q5_value(qs: &[u8; QK / 2], qh: u32, j: usize) -> u8 {
    let lo = if j < QK / 2 {
        qs[j] & 0x0F
    } else {
        qs[j - QK / 2] >> 4
    };
    lo | ((((qh >> j) & 1) as u8) << 4)
}

/// `dequantize_row_q5_0` for one block.
pub fn dequantize_q5_0(b: &BlockQ5_0, y: &mut [f32; QK]) {
    let d = b.d.to_f32();
    let qh = u32::from_le_bytes(b.qh);
    for (j, v) in y.iter_mut().enumerate() {
        *v = (q5_value(&b.qs, qh, j) as i32 - 16) as f32 * d;
    }
}

/// `quantize_row_q5_1_ref` for one block.
pub fn quantize_q5_1(x: &[f32; QK]) -> BlockQ5_1 {
    let (min, max) = min_max(x);
    let d = (max - min) / 31.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0u8; QK / 2];
    let mut qh = 0u32;
    for j in 0..QK / 2 {
        let x0 = (x[j] - min) * id;
        let x1 = (x[QK / 2 + j] - min) * id;
        // The reference casts to uint8_t without clamping; the value is in 0..=31.
        let xi0 = (x0 + 0.5) as u8;
        let xi1 = (x1 + 0.5) as u8;
        qs[j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
        qh |= (((xi0 & 0x10) >> 4) as u32) << j;
        qh |= (((xi1 & 0x10) >> 4) as u32) << (j + QK / 2);
    }
    BlockQ5_1 {
        d: F16Le::from_f32(d),
        m: F16Le::from_f32(min),
        qh: qh.to_le_bytes(),
        qs,
    }
}

/// `dequantize_row_q5_1` for one block.
pub fn dequantize_q5_1(b: &BlockQ5_1, y: &mut [f32; QK]) {
    let d = b.d.to_f32();
    let m = b.m.to_f32();
    let qh = u32::from_le_bytes(b.qh);
    for (j, v) in y.iter_mut().enumerate() {
        *v = q5_value(&b.qs, qh, j) as f32 * d + m;
    }
}

/// `quantize_row_q8_0_ref` for one block.
pub fn quantize_q8_0(x: &[f32; QK]) -> BlockQ8_0 {
    let amax = x.iter().fold(0.0f32, |a, &v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; QK];
    for (q, &v) in qs.iter_mut().zip(x) {
        // `roundf`: half away from zero, like f32::round.
        *q = (v * id).round() as i8;
    }
    BlockQ8_0 {
        d: F16Le::from_f32(d),
        qs,
    }
}

/// `dequantize_row_q8_0` for one block.
pub fn dequantize_q8_0(b: &BlockQ8_0, y: &mut [f32; QK]) {
    let d = b.d.to_f32();
    for (v, &q) in y.iter_mut().zip(&b.qs) {
        *v = q as f32 * d;
    }
}

/// `quantize_row_q8_1_ref` for one block.
pub fn quantize_q8_1(x: &[f32; QK]) -> BlockQ8_1 {
    let amax = x.iter().fold(0.0f32, |a, &v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; QK];
    let mut sum = 0i32;
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = (v * id).round() as i8;
        sum += *q as i32;
    }
    BlockQ8_1 {
        d: F16Le::from_f32(d),
        s: F16Le::from_f32(sum as f32 * d),
        qs,
    }
}

/// Dequantizes a Q8_1 block (`d * q`; the sum is redundant).
pub fn dequantize_q8_1(b: &BlockQ8_1, y: &mut [f32; QK]) {
    let d = b.d.to_f32();
    for (v, &q) in y.iter_mut().zip(&b.qs) {
        *v = q as f32 * d;
    }
}
