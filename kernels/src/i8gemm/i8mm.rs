//! NEON int8 matrix multiply (FEAT_I8MM) micro-tile.
//!
//! `smmla vd.4s, vn.16b, vm.16b` treats `vn` as a 2×8 int8 matrix (two rows
//! of A, 8 values of k each), `vm` as 2×8 (two rows of W) and adds the 2×2
//! i32 product `vn · vmᵀ` to `vd` = [r0·c0, r0·c1, r1·c0, r1·c1]. A 2×NR
//! tile is NR/2 `smmla`s per 8 values of k (an odd weight row is paired with
//! zeros). `smmla` comes from `crate::qsimd` (its intrinsic is
//! unstable). Tiles with
//! one activation row (GEMV) would waste half of each `smmla`, so they run
//! the `sdot` tile instead. The k tail (< 8) is a scalar loop. Each 64
//! bytes of the weight rows first request their bytes `pf` further on
//! (`prfm`, see `by_lines!` in `mod.rs`).

use super::prefetch_rows;
use crate::qsimd::smmla;
use std::arch::aarch64::*;

/// 2 activation rows × `NR` weight rows.
///
/// # Safety
/// Needs FEAT_I8MM; `a` holds 2 rows of `k`, `w` holds `NR` rows of `k`.
#[target_feature(enable = "neon,dotprod,i8mm")]
unsafe fn tile_mmla<const NR: usize>(a: &[i8], w: &[i8], k: usize, pf: usize, acc: &mut [i32; 8]) {
    debug_assert!(a.len() >= 2 * k && w.len() >= NR * k);
    let pairs = NR.div_ceil(2);
    let mut v = [vdupq_n_s32(0); 2];
    let kv = k / 8 * 8;
    // Bytes t..t + 8 of every row.
    let step = |t: usize| {
        // SAFETY: t + 8 <= kv <= k keeps each 8-byte load inside its row.
        let an = unsafe { vcombine_s8(vld1_s8(a.as_ptr().add(t)), vld1_s8(a.as_ptr().add(k + t))) };
        for (p, vp) in v.iter_mut().enumerate().take(pairs) {
            let c0 = 2 * p;
            // SAFETY: as above; row c0 + 1 exists only when c0 + 1 < NR.
            let w0 = unsafe { vld1_s8(w.as_ptr().add(c0 * k + t)) };
            let w1 = if c0 + 1 < NR {
                // SAFETY: as above.
                unsafe { vld1_s8(w.as_ptr().add((c0 + 1) * k + t)) }
            } else {
                vdup_n_s8(0)
            };
            *vp = smmla(*vp, an, vcombine_s8(w0, w1));
        }
    };
    by_lines!(8, k, kv, |t| prefetch_rows::<NR>(w, k, t, pf), step);
    for (p, vp) in v.iter().enumerate().take(pairs) {
        let mut l = [0i32; 4];
        // SAFETY: l holds 4 i32.
        unsafe { vst1q_s32(l.as_mut_ptr(), *vp) };
        for (i, &val) in l.iter().enumerate() {
            let (r, c) = (i / 2, 2 * p + i % 2);
            if c < NR {
                let tail: i32 = (kv..k)
                    .map(|t| a[r * k + t] as i32 * w[c * k + t] as i32)
                    .sum();
                acc[r * NR + c] = val + tail;
            }
        }
    }
}

/// I8MM tile for `mr ∈ {1, 2}`, `nr ∈ {1, 2, 4}` (`mr = 1` runs `sdot`),
/// prefetching `pf` bytes ahead in each weight row.
///
/// # Safety
/// Needs FEAT_I8MM (and so FEAT_DotProd); `a` holds `mr` rows of `k`, `w`
/// holds `nr` rows of `k`.
pub unsafe fn tile(
    a: &[i8],
    w: &[i8],
    wsum: &[i32],
    k: usize,
    (mr, nr): (usize, usize),
    pf: usize,
    acc: &mut [i32; 8],
) {
    // SAFETY (all arms): forwarded from the caller.
    unsafe {
        match (mr, nr) {
            (1, _) => super::dotprod::tile(a, w, wsum, k, (mr, nr), pf, acc),
            (_, 1) => tile_mmla::<1>(a, w, k, pf, acc),
            (_, 2) => tile_mmla::<2>(a, w, k, pf, acc),
            _ => tile_mmla::<4>(a, w, k, pf, acc),
        }
    }
}
