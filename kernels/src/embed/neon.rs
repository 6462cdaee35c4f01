//! NEON LM-head GEMV over the bit-packed table.
//!
//! Eight values of a row span `B` bytes, read as one little-endian u64 (see
//! `avx2.rs`); its two 4·B-bit halves are broadcast into two `uint32x4_t`,
//! shifted right by (0, B, 2B, 3B) with `ushl` (negative shift counts),
//! masked and converted with `ucvtf`. B is a const generic (one kernel per
//! width 1..=7). Before each row block the three streams are requested
//! `pf` bytes ahead (`prfm`, [`super::Rows::prefetch`]), as on x86.

use super::load8;
use std::arch::aarch64::*;

/// # Safety
/// Needs NEON; shapes as in `avx2::rows` (group % 8 = 0).
#[target_feature(enable = "neon")]
unsafe fn rows<const B: usize, const R: usize>(
    data: &[u8],
    group: usize,
    scales: &[f32],
    zeros: &[f32],
    x: &[f32],
    xs: &[f32],
    y: &mut [f32],
) {
    let gpr = xs.len();
    let rb = x.len() * B / 8;
    let b = B as i32;
    let shifts = [0, -b, -2 * b, -3 * b];
    // SAFETY: shifts is 4 i32.
    let sh = unsafe { vld1q_s32(shifts.as_ptr()) };
    let mask = vdupq_n_u32((1 << B) - 1);
    let m4 = (1u64 << (4 * B)) - 1;
    let mut acc = [vdupq_n_f32(0.0); R];
    let mut corr = [0.0f32; R];
    for g in 0..gpr {
        let mut s = [vdupq_n_f32(0.0); R];
        let mut i = g * group;
        while i < (g + 1) * group {
            // SAFETY: i + 8 <= x.len().
            let (x0, x1) = unsafe {
                (
                    vld1q_f32(x.as_ptr().add(i)),
                    vld1q_f32(x.as_ptr().add(i + 4)),
                )
            };
            for (r, sr) in s.iter_mut().enumerate() {
                let u = load8::<B>(data, r * rb + i / 8 * B);
                let lo = vandq_u32(vshlq_u32(vdupq_n_u32((u & m4) as u32), sh), mask);
                let hi = vandq_u32(vshlq_u32(vdupq_n_u32((u >> (4 * B)) as u32), sh), mask);
                *sr = vfmaq_f32(*sr, vcvtq_f32_u32(lo), x0);
                *sr = vfmaq_f32(*sr, vcvtq_f32_u32(hi), x1);
            }
            i += 8;
        }
        for r in 0..R {
            let sc = scales[r * gpr + g];
            acc[r] = vfmaq_n_f32(acc[r], s[r], sc);
            corr[r] += sc * zeros[r * gpr + g] * xs[g];
        }
    }
    for r in 0..R {
        y[r] = vaddvq_f32(acc[r]) - corr[r];
    }
}

super::body::lm_head_driver! { feature: "neon", needs: "NEON" }
