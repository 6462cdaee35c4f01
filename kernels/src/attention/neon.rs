//! NEON page kernels: the f32/f16 bodies of `body.rs` at 4 lanes (f16 rows
//! widened with `fcvtl`, base ARMv8 floating point), and the Q8_0 kernels,
//! whose rows are widened `i8 → i16 → i32 → f32` in registers, a whole
//! 32-block at a time.

use crate::quant::{BlockQ8_0, QK};
use crate::simd::neon::Neon;
use std::arch::aarch64::*;

super::body::page_kernels! { isa: Neon, feature: "neon", needs: "NEON" }

/// The 32 quants of a block as 8 vectors of 4 f32.
///
/// # Safety
/// NEON available.
#[inline(always)]
unsafe fn widen32(qs: &[i8; QK]) -> [float32x4_t; 8] {
    unsafe {
        let mut r = [vdupq_n_f32(0.0); 8];
        for h in 0..2 {
            let b = vld1q_s8(qs.as_ptr().add(16 * h));
            let lo = vmovl_s8(vget_low_s8(b));
            let hi = vmovl_s8(vget_high_s8(b));
            r[4 * h] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
            r[4 * h + 1] = vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo)));
            r[4 * h + 2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
            r[4 * h + 3] = vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi)));
        }
        r
    }
}

/// Scores against Q8_0 rows: per block `d · Σ q·qs`.
///
/// # Safety
/// NEON; `q.len()` is a multiple of 32 and `k` holds `out.len()` rows of
/// `q.len() / 32` blocks.
#[target_feature(enable = "neon")]
pub unsafe fn scores_q8(q: &[f32], k: &[BlockQ8_0], scale: f32, out: &mut [f32]) {
    let nb = q.len() / QK;
    debug_assert_eq!(k.len(), out.len() * nb);
    let qp = q.as_ptr();
    for (s, kr) in out.iter_mut().zip(k.chunks_exact(nb)) {
        let mut acc = vdupq_n_f32(0.0);
        for (b, blk) in kr.iter().enumerate() {
            // SAFETY: 32 quants per block, 32 query values per block.
            unsafe {
                let x = widen32(&blk.qs);
                let qb = qp.add(b * QK);
                let mut s0 = vmulq_f32(vld1q_f32(qb), x[0]);
                let mut s1 = vmulq_f32(vld1q_f32(qb.add(4)), x[1]);
                for u in 1..4 {
                    s0 = vfmaq_f32(s0, vld1q_f32(qb.add(8 * u)), x[2 * u]);
                    s1 = vfmaq_f32(s1, vld1q_f32(qb.add(8 * u + 4)), x[2 * u + 1]);
                }
                acc = vfmaq_n_f32(acc, vaddq_f32(s0, s1), blk.d.to_f32());
            }
        }
        *s = vaddvq_f32(acc) * scale;
    }
}

/// Value axpy over Q8_0 rows: per block `acc += (p·d) · qs`, the block's
/// 32 accumulators held in registers across the page's rows.
///
/// # Safety
/// NEON; `acc.len()` is a multiple of 32 and `v` holds `p.len()` rows of
/// `acc.len() / 32` blocks.
#[target_feature(enable = "neon")]
pub unsafe fn accum_q8(acc: &mut [f32], p: &[f32], v: &[BlockQ8_0]) {
    let nb = acc.len() / QK;
    debug_assert_eq!(v.len(), p.len() * nb);
    for (b, ab) in acc.chunks_exact_mut(QK).enumerate() {
        let ap = ab.as_mut_ptr();
        // SAFETY: ab holds 32 values; each block holds 32 quants.
        unsafe {
            let mut a = [vdupq_n_f32(0.0); 8];
            for (u, au) in a.iter_mut().enumerate() {
                *au = vld1q_f32(ap.add(4 * u));
            }
            for (t, &pt) in p.iter().enumerate() {
                let blk = &v[t * nb + b];
                let pd = pt * blk.d.to_f32();
                let x = widen32(&blk.qs);
                for (au, xu) in a.iter_mut().zip(x) {
                    *au = vfmaq_n_f32(*au, xu, pd);
                }
            }
            for (u, au) in a.iter().enumerate() {
                vst1q_f32(ap.add(4 * u), *au);
            }
        }
    }
}
