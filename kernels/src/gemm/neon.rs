//! NEON GEMM micro-kernels: 4 f32 lanes, 32 q registers. Packed kernels
//! (mr a multiple of 4) keep `mr · nr/4` accumulators, `nr/4` W vectors and
//! `mr/4` A vectors in registers (≤ 31 of 32) and multiply by A lanes with
//! `fmla v.4s, v.4s, v.s[i]`; f16 weights are widened with `fcvtl`.

use crate::simd::Elem;
use crate::simd::neon::Neon;
use core::arch::aarch64::*;
use half::f16;

super::body::gemm_kernels! {
    isa: Neon, feature: "neon", needs: "NEON",
    packed: [(k8x12, 8, 3), (k12x8, 12, 2), (k8x8, 8, 2), (k4x16, 4, 4), (k4x24, 4, 6)],
    direct: [(d1x8_f32, d1x8_f16, 1, 8), (d2x8_f32, d2x8_f16, 2, 8),
             (d4x4_f32, d4x4_f16, 4, 4), (d3x6_f32, d3x6_f16, 3, 6)],
}

/// Widens `src` into `dst` (same length) with `fcvtl`, 4 at a time.
///
/// # Safety
/// NEON must be available (always true on aarch64).
#[target_feature(enable = "neon")]
pub(super) unsafe fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
    // SAFETY: forwarded contract.
    unsafe { super::body::f16_to_f32::<Neon>(src, dst) }
}

/// Packs 4 W rows (row `j` at `w + j·ldw`, `kb` long) into 4 adjacent
/// columns of a packed panel with row stride `nr`: `dst[p·nr + j] = W[j][p]`,
/// 4×4 blocks at a time with an in-register transpose (`trn1`/`trn2` on 32-
/// then 64-bit lanes).
#[inline(always)]
unsafe fn pack4_body<W: Elem>(w: *const W, ldw: usize, kb: usize, dst: *mut f32, nr: usize) {
    // SAFETY: 4 rows of kb readable; kb rows of 4 writable at stride nr.
    unsafe {
        let kv = kb / 4 * 4;
        let mut p = 0;
        while p < kv {
            let r0 = W::load::<Neon>(w.add(p));
            let r1 = W::load::<Neon>(w.add(ldw + p));
            let r2 = W::load::<Neon>(w.add(2 * ldw + p));
            let r3 = W::load::<Neon>(w.add(3 * ldw + p));
            let t0 = vreinterpretq_f64_f32(vtrn1q_f32(r0, r1));
            let t1 = vreinterpretq_f64_f32(vtrn2q_f32(r0, r1));
            let t2 = vreinterpretq_f64_f32(vtrn1q_f32(r2, r3));
            let t3 = vreinterpretq_f64_f32(vtrn2q_f32(r2, r3));
            vst1q_f32(dst.add(p * nr), vreinterpretq_f32_f64(vtrn1q_f64(t0, t2)));
            vst1q_f32(
                dst.add((p + 1) * nr),
                vreinterpretq_f32_f64(vtrn1q_f64(t1, t3)),
            );
            vst1q_f32(
                dst.add((p + 2) * nr),
                vreinterpretq_f32_f64(vtrn2q_f64(t0, t2)),
            );
            vst1q_f32(
                dst.add((p + 3) * nr),
                vreinterpretq_f32_f64(vtrn2q_f64(t1, t3)),
            );
            p += 4;
        }
        for p in kv..kb {
            for j in 0..4 {
                *dst.add(p * nr + j) = (*w.add(j * ldw + p)).to_f32();
            }
        }
    }
}

/// [`pack4_body`] for f32 weights.
///
/// # Safety
/// 4 rows of `kb` readable at `w` (stride `ldw`), `kb` rows of 4 writable at
/// `dst` (stride `nr`).
#[target_feature(enable = "neon")]
pub(super) unsafe fn pack4_f32(w: *const f32, ldw: usize, kb: usize, dst: *mut f32, nr: usize) {
    // SAFETY: forwarded contract.
    unsafe { pack4_body(w, ldw, kb, dst, nr) }
}

/// [`pack4_body`] for f16 weights (widened with `fcvtl` on load).
///
/// # Safety
/// As [`pack4_f32`].
#[target_feature(enable = "neon")]
pub(super) unsafe fn pack4_f16(w: *const f16, ldw: usize, kb: usize, dst: *mut f32, nr: usize) {
    // SAFETY: forwarded contract.
    unsafe { pack4_body(w, ldw, kb, dst, nr) }
}
