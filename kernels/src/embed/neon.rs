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

/// # Safety
/// As for [`rows`], with `y.len()` rows.
#[target_feature(enable = "neon")]
unsafe fn drive<const B: usize>(p: &super::Rows<'_>, y: &mut [f32], rpb: usize) {
    let gpr = p.xs.len();
    let rb = p.x.len() * B / 8;
    let mut r = 0;
    while r < y.len() {
        let n = if rpb >= 4 && r + 4 <= y.len() {
            4
        } else if rpb >= 2 && r + 2 <= y.len() {
            2
        } else {
            1
        };
        let (d, s, z) = (&p.data[r * rb..], &p.scales[r * gpr..], &p.zeros[r * gpr..]);
        p.prefetch(r, n, rb);
        let yr = &mut y[r..r + n];
        // SAFETY: forwarded; the slices start at row r and hold n rows.
        unsafe {
            match n {
                4 => rows::<B, 4>(d, p.group, s, z, p.x, p.xs, yr),
                2 => rows::<B, 2>(d, p.group, s, z, p.x, p.xs, yr),
                _ => rows::<B, 1>(d, p.group, s, z, p.x, p.xs, yr),
            }
        }
        r += n;
    }
}

/// LM-head GEMV for any width 1..=7.
///
/// # Safety
/// Needs NEON; `p` consistent with `y.len()` rows (checked by the entry point).
pub unsafe fn lm_head(p: &super::Rows<'_>, y: &mut [f32], rpb: usize) {
    // SAFETY (all arms): forwarded.
    unsafe {
        match p.bits {
            1 => drive::<1>(p, y, rpb),
            2 => drive::<2>(p, y, rpb),
            3 => drive::<3>(p, y, rpb),
            4 => drive::<4>(p, y, rpb),
            5 => drive::<5>(p, y, rpb),
            6 => drive::<6>(p, y, rpb),
            _ => drive::<7>(p, y, rpb),
        }
    }
}
