//! The reference quantized GEMV, in plain Rust.
//!
//! W·A32: each weight block is dequantized with the bit-exact dequantizer
//! of [`crate::quant`] and dotted with `x` in order, so the reference is the
//! f32 product of exactly the values ggml would dequantize.
//!
//! W·A8: the integer dot product of each weight block with its Q8 activation
//! block is exact (i32), then scaled as ggml's generic `ggml_vec_dot_*`
//! functions do: `(d_w · d_x) · Σ q_w q_x`, plus `m_w · s_x` for the
//! offset formats, plus the K-quants' per-sub-block scales and mins.

use super::{A8Rows, Rows};
use crate::quant::blocks::{
    BlockMxfp4, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8_0, BlockQ8_1,
    BlockQ8K, KSubBlock, KVALUES_MXFP4, QK, QK_K, e8m0_to_f32_half,
};
use crate::quant::{QuantFormat, kquants, legacy, mxfp4};

/// One row of W·A32: `Σ_b dot(dequant(w_b), x_b)`.
fn row_a32<B, const N: usize>(w: &[B], x: &[f32], deq: fn(&B, &mut [f32; N])) -> f32 {
    let mut buf = [0.0f32; N];
    let mut acc = 0.0f32;
    for (b, xs) in w.iter().zip(x.chunks_exact(N)) {
        deq(b, &mut buf);
        let mut s = 0.0f32;
        for (&wv, &xv) in buf.iter().zip(xs) {
            s += wv * xv;
        }
        acc += s;
    }
    acc
}

fn rows_a32<B, const N: usize>(w: &[B], x: &[f32], y: &mut [f32], deq: fn(&B, &mut [f32; N])) {
    let nb = x.len() / N;
    for (r, out) in y.iter_mut().enumerate() {
        *out = row_a32(&w[r * nb..(r + 1) * nb], x, deq);
    }
}

/// W·A32 over the rows in `w` (one output per row of `y`).
pub fn gemv_a32(w: Rows<'_>, x: &[f32], y: &mut [f32]) {
    match w {
        Rows::Q4_0(w) => rows_a32(w, x, y, legacy::dequantize_q4_0),
        Rows::Q4_1(w) => rows_a32(w, x, y, legacy::dequantize_q4_1),
        Rows::Q5_0(w) => rows_a32(w, x, y, legacy::dequantize_q5_0),
        Rows::Q5_1(w) => rows_a32(w, x, y, legacy::dequantize_q5_1),
        Rows::Q8_0(w) => rows_a32(w, x, y, legacy::dequantize_q8_0),
        Rows::Q4K(w) => rows_a32(w, x, y, kquants::dequantize_q4_k),
        Rows::Q5K(w) => rows_a32(w, x, y, kquants::dequantize_q5_k),
        Rows::Q6K(w) => rows_a32(w, x, y, kquants::dequantize_q6_k),
        Rows::Mxfp4(w) => rows_a32(w, x, y, mxfp4::dequantize_mxfp4),
    }
}

/// Signed 4-bit quants of a Q4_0 block in value order (`q - 8`).
#[inline]
fn q4_0_values(b: &BlockQ4_0) -> [i8; QK] {
    let mut v = [0i8; QK];
    for j in 0..QK / 2 {
        v[j] = (b.qs[j] & 0x0F) as i8 - 8;
        v[j + QK / 2] = (b.qs[j] >> 4) as i8 - 8;
    }
    v
}

#[inline]
fn idot(a: &[i8], b: &[i8]) -> i32 {
    a.iter().zip(b).map(|(&p, &q)| p as i32 * q as i32).sum()
}

fn a8_q4_0(w: &BlockQ4_0, x: &BlockQ8_0) -> f32 {
    let sumi = idot(&q4_0_values(w), &x.qs);
    (w.d.to_f32() * x.d.to_f32()) * sumi as f32
}

fn a8_q8_0(w: &BlockQ8_0, x: &BlockQ8_0) -> f32 {
    (w.d.to_f32() * x.d.to_f32()) * idot(&w.qs, &x.qs) as f32
}

fn a8_q5_0(w: &BlockQ5_0, x: &BlockQ8_0) -> f32 {
    let qh = u32::from_le_bytes(w.qh);
    let v: [i8; QK] = std::array::from_fn(|j| legacy::q5_value(&w.qs, qh, j) as i8 - 16);
    (w.d.to_f32() * x.d.to_f32()) * idot(&v, &x.qs) as f32
}

fn a8_mxfp4(w: &BlockMxfp4, x: &BlockQ8_0) -> f32 {
    let mut v = [0i8; QK];
    for j in 0..QK / 2 {
        v[j] = KVALUES_MXFP4[(w.qs[j] & 0x0F) as usize];
        v[j + QK / 2] = KVALUES_MXFP4[(w.qs[j] >> 4) as usize];
    }
    (e8m0_to_f32_half(w.e) * x.d.to_f32()) * idot(&v, &x.qs) as f32
}

fn a8_q4_1(w: &BlockQ4_1, x: &BlockQ8_1) -> f32 {
    let mut sumi = 0i32;
    for j in 0..QK / 2 {
        sumi += (w.qs[j] & 0x0F) as i32 * x.qs[j] as i32;
        sumi += (w.qs[j] >> 4) as i32 * x.qs[j + QK / 2] as i32;
    }
    (w.d.to_f32() * x.d.to_f32()) * sumi as f32 + w.m.to_f32() * x.s.to_f32()
}

fn a8_q5_1(w: &BlockQ5_1, x: &BlockQ8_1) -> f32 {
    let qh = u32::from_le_bytes(w.qh);
    let sumi: i32 = (0..QK)
        .map(|j| legacy::q5_value(&w.qs, qh, j) as i32 * x.qs[j] as i32)
        .sum();
    (w.d.to_f32() * x.d.to_f32()) * sumi as f32 + w.m.to_f32() * x.s.to_f32()
}

/// Q4_K / Q5_K × Q8_K: per sub-block `sc · Σ q x`, minus `m` times the
/// activation sums, as `ggml_vec_dot_q4_K_q8_K` / `_q5_K_` do.
fn a8_k_sub<B: KSubBlock>(w: &B, x: &BlockQ8K) -> f32 {
    let mut sum_sc = 0i32;
    let mut sum_m = 0i32;
    for j in 0..QK_K / 32 {
        let (sc, m) = kquants::get_scale_min_k4(j, w.scales());
        let v = kquants::k_sub_values(w, j);
        let sumi: i32 = (0..32).map(|l| v[l] as i32 * x.qs[32 * j + l] as i32).sum();
        sum_sc += sc as i32 * sumi;
        sum_m += m as i32 * (x.bsum(2 * j) as i32 + x.bsum(2 * j + 1) as i32);
    }
    let dx = x.d();
    (w.d().to_f32() * dx) * sum_sc as f32 - (w.dmin().to_f32() * dx) * sum_m as f32
}

fn a8_q6_k(w: &BlockQ6K, x: &BlockQ8K) -> f32 {
    let mut sum = 0i32;
    for j in 0..QK_K / 16 {
        let u = kquants::q6_k_sub_values(w, j / 2);
        let sumi: i32 = (0..16)
            .map(|l| (u[16 * (j % 2) + l] as i32 - 32) * x.qs[16 * j + l] as i32)
            .sum();
        sum += w.scales[j] as i32 * sumi;
    }
    (w.d.to_f32() * x.d()) * sum as f32
}

fn rows_a8<B, X>(w: &[B], xq: &[X], y: &mut [f32], dot: fn(&B, &X) -> f32) {
    let nb = xq.len();
    for (r, out) in y.iter_mut().enumerate() {
        let mut acc = 0.0f32;
        for (b, xb) in w[r * nb..(r + 1) * nb].iter().zip(xq) {
            acc += dot(b, xb);
        }
        *out = acc;
    }
}

/// W·A8 over the rows in `w`, with activations already quantized.
pub fn gemv_a8(w: A8Rows<'_>, y: &mut [f32]) {
    match w {
        A8Rows::Q4_0(w, x) => rows_a8(w, x, y, a8_q4_0),
        A8Rows::Q5_0(w, x) => rows_a8(w, x, y, a8_q5_0),
        A8Rows::Q8_0(w, x) => rows_a8(w, x, y, a8_q8_0),
        A8Rows::Mxfp4(w, x) => rows_a8(w, x, y, a8_mxfp4),
        A8Rows::Q4_1(w, x) => rows_a8(w, x, y, a8_q4_1),
        A8Rows::Q5_1(w, x) => rows_a8(w, x, y, a8_q5_1),
        A8Rows::Q4K(w, x) => rows_a8(w, x, y, a8_k_sub),
        A8Rows::Q5K(w, x) => rows_a8(w, x, y, a8_k_sub),
        A8Rows::Q6K(w, x) => rows_a8(w, x, y, a8_q6_k),
    }
}

/// The formats the scalar reference covers (all weight formats).
pub const FORMATS: [QuantFormat; 9] = [
    QuantFormat::Q4_0,
    QuantFormat::Q4_1,
    QuantFormat::Q5_0,
    QuantFormat::Q5_1,
    QuantFormat::Q8_0,
    QuantFormat::Q4K,
    QuantFormat::Q5K,
    QuantFormat::Q6K,
    QuantFormat::Mxfp4,
];
