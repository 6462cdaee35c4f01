//! NEON I8 micro-tile (baseline aarch64, no dotprod).
//!
//! 16 int8 pairs per step: `smull`/`smull2` give eight exact i16 products
//! each (|p| ≤ 128·128 = 16384) and `sadalp` pairwise-adds them into the
//! i32 accumulator, so nothing saturates even for −128·−128. The k tail
//! (< 16) is a scalar loop. Each 64 bytes of the weight rows first request
//! their bytes `pf` further on (`prfm`, see `by_lines!` in `mod.rs`).

use super::prefetch_rows;
use std::arch::aarch64::*;

/// # Safety
/// Needs NEON; `a` holds `MR` rows of `k`, `w` holds `NR` rows of `k`.
#[target_feature(enable = "neon")]
unsafe fn tile_neon<const MR: usize, const NR: usize>(
    a: &[i8],
    w: &[i8],
    k: usize,
    pf: usize,
    acc: &mut [i32; 8],
) {
    debug_assert!(a.len() >= MR * k && w.len() >= NR * k);
    let mut v = [[vdupq_n_s32(0); NR]; MR];
    let kv = k / 16 * 16;
    // Bytes t..t + 16 of every row.
    let step = |t: usize| {
        // SAFETY: t + 16 <= kv <= k keeps each load inside its row.
        let wv: [int8x16_t; NR] =
            std::array::from_fn(|c| unsafe { vld1q_s8(w.as_ptr().add(c * k + t)) });
        for (r, vr) in v.iter_mut().enumerate() {
            // SAFETY: as above.
            let av = unsafe { vld1q_s8(a.as_ptr().add(r * k + t)) };
            for (c, vc) in vr.iter_mut().enumerate() {
                let lo = vmull_s8(vget_low_s8(av), vget_low_s8(wv[c]));
                let hi = vmull_high_s8(av, wv[c]);
                *vc = vpadalq_s16(vpadalq_s16(*vc, lo), hi);
            }
        }
    };
    by_lines!(16, k, kv, |t| prefetch_rows::<NR>(w, k, t, pf), step);
    for r in 0..MR {
        for c in 0..NR {
            let tail: i32 = (kv..k)
                .map(|t| a[r * k + t] as i32 * w[c * k + t] as i32)
                .sum();
            acc[r * NR + c] = vaddvq_s32(v[r][c]) + tail;
        }
    }
}

/// NEON tile for `mr ∈ {1, 2}`, `nr ∈ {1, 2, 4}`, prefetching `pf` bytes
/// ahead in each weight row.
///
/// # Safety
/// Needs NEON; `a` holds `mr` rows of `k`, `w` holds `nr` rows of `k`.
pub unsafe fn tile(
    a: &[i8],
    w: &[i8],
    _wsum: &[i32],
    k: usize,
    (mr, nr): (usize, usize),
    pf: usize,
    acc: &mut [i32; 8],
) {
    // SAFETY (all arms): forwarded from the caller.
    unsafe {
        match (mr, nr) {
            (1, 1) => tile_neon::<1, 1>(a, w, k, pf, acc),
            (1, 2) => tile_neon::<1, 2>(a, w, k, pf, acc),
            (1, 4) => tile_neon::<1, 4>(a, w, k, pf, acc),
            (2, 1) => tile_neon::<2, 1>(a, w, k, pf, acc),
            (2, 2) => tile_neon::<2, 2>(a, w, k, pf, acc),
            _ => tile_neon::<2, 4>(a, w, k, pf, acc),
        }
    }
}
