//! AVX2 + FMA (+ F16C) GEMM micro-kernels: 8 f32 lanes, 16 ymm registers
//! (`mr · nr/8` accumulators + `nr/8` W vectors + one broadcast ≤ 16), and
//! the F16C row conversion and 8×8 transposing pack that AVX-512 reuses.

use crate::simd::Elem;
use crate::simd::avx2::Avx2;
use core::arch::x86_64::*;
use half::f16;

super::body::gemm_kernels! {
    isa: Avx2, feature: "avx2,fma,f16c", needs: "AVX2, FMA and F16C",
    packed: [(k6x16, 6, 2), (k4x24, 4, 3), (k8x8, 8, 1), (k4x16, 4, 2), (k2x32, 2, 4)],
    direct: [(d1x4_f32, d1x4_f16, 1, 4), (d2x4_f32, d2x4_f16, 2, 4),
             (d4x2_f32, d4x2_f16, 4, 2), (d3x3_f32, d3x3_f16, 3, 3)],
}

/// Widens `src` into `dst` (same length) with F16C, 8 at a time.
///
/// # Safety
/// The CPU must support AVX2 and F16C (the `Avx2` level guarantees both).
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
    // SAFETY: forwarded contract.
    unsafe { super::body::f16_to_f32::<Avx2>(src, dst) }
}

/// Packs 8 W rows (row `j` at `w + j·ldw`, `kb` long) into 8 adjacent
/// columns of a packed panel with row stride `nr`: `dst[p·nr + j] = W[j][p]`,
/// 8×8 blocks at a time with an in-register transpose (unpack, shuffle,
/// permute2f128), so packing costs ~3 shuffles per 8 values instead of 8
/// scalar stores.
#[inline(always)]
unsafe fn pack8_body<W: Elem>(w: *const W, ldw: usize, kb: usize, dst: *mut f32, nr: usize) {
    // SAFETY: 8 rows of kb readable; kb rows of 8 writable at stride nr.
    unsafe {
        let kv = kb / 8 * 8;
        let mut p = 0;
        while p < kv {
            let mut r = [_mm256_setzero_ps(); 8];
            for (j, v) in r.iter_mut().enumerate() {
                *v = W::load::<Avx2>(w.add(j * ldw + p));
            }
            let mut s = [_mm256_setzero_ps(); 8];
            for h in 0..2 {
                let (r0, r1, r2, r3) = (r[4 * h], r[4 * h + 1], r[4 * h + 2], r[4 * h + 3]);
                let (t0, t1) = (_mm256_unpacklo_ps(r0, r1), _mm256_unpackhi_ps(r0, r1));
                let (t2, t3) = (_mm256_unpacklo_ps(r2, r3), _mm256_unpackhi_ps(r2, r3));
                s[4 * h] = _mm256_shuffle_ps::<0x44>(t0, t2);
                s[4 * h + 1] = _mm256_shuffle_ps::<0xEE>(t0, t2);
                s[4 * h + 2] = _mm256_shuffle_ps::<0x44>(t1, t3);
                s[4 * h + 3] = _mm256_shuffle_ps::<0xEE>(t1, t3);
            }
            for t in 0..4 {
                let lo = _mm256_permute2f128_ps::<0x20>(s[t], s[t + 4]);
                let hi = _mm256_permute2f128_ps::<0x31>(s[t], s[t + 4]);
                _mm256_storeu_ps(dst.add((p + t) * nr), lo);
                _mm256_storeu_ps(dst.add((p + t + 4) * nr), hi);
            }
            p += 8;
        }
        for p in kv..kb {
            for j in 0..8 {
                *dst.add(p * nr + j) = (*w.add(j * ldw + p)).to_f32();
            }
        }
    }
}

/// [`pack8_body`] for f32 weights.
///
/// # Safety
/// AVX2 available; 8 rows of `kb` readable at `w` (stride `ldw`), `kb` rows
/// of 8 writable at `dst` (stride `nr`).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn pack8_f32(w: *const f32, ldw: usize, kb: usize, dst: *mut f32, nr: usize) {
    // SAFETY: forwarded contract.
    unsafe { pack8_body(w, ldw, kb, dst, nr) }
}

/// [`pack8_body`] for f16 weights (widened with F16C on load).
///
/// # Safety
/// As [`pack8_f32`], and F16C available.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn pack8_f16(w: *const f16, ldw: usize, kb: usize, dst: *mut f32, nr: usize) {
    // SAFETY: forwarded contract.
    unsafe { pack8_body(w, ldw, kb, dst, nr) }
}
