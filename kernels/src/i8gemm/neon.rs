//! NEON I8 micro-tile (baseline aarch64, no dotprod).
//!
//! 16 int8 pairs per step: `smull`/`smull2` give eight exact i16 products
//! each (|p| ≤ 128·128 = 16384) and `sadalp` pairwise-adds them into the
//! i32 accumulator, so nothing saturates even for −128·−128. The k tail
//! (< 16) is a scalar loop. Each 64 bytes of the weight rows first request
//! their bytes `pf` further on (`prfm`, see `by_lines!` in `mod.rs`).

use std::arch::aarch64::*;

/// Stamps the tile `$name::<MR, NR>` under the features `$feat` whose
/// step over 16 int8 pairs of a row pair is `$dot(acc, a, w)`: the loads,
/// prefetch and scalar tail are the same for every aarch64 dot product
/// (`dotprod.rs` stamps the `sdot` one).
macro_rules! dot_tile {
    ($feat:literal, $name:ident, $dot:path) => {
        /// # Safety
        /// Needs the features above; `a` holds `MR` rows of `k`, `w` holds
        /// `NR` rows of `k`.
        #[target_feature(enable = $feat)]
        unsafe fn $name<const MR: usize, const NR: usize>(
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
                        *vc = $dot(*vc, av, wv[c]);
                    }
                }
            };
            by_lines!(16, k, kv, |t| super::prefetch_rows::<NR>(w, k, t, pf), step);
            for r in 0..MR {
                for c in 0..NR {
                    let tail: i32 = (kv..k)
                        .map(|t| a[r * k + t] as i32 * w[c * k + t] as i32)
                        .sum();
                    acc[r * NR + c] = vaddvq_s32(v[r][c]) + tail;
                }
            }
        }
    };
}
pub(super) use dot_tile;

/// `acc` plus the 16 exact products `a · w` pairwise-added into 4 lanes
/// (`smull`, `smull2`, two `sadalp`).
#[inline]
#[target_feature(enable = "neon")]
fn smull_acc(acc: int32x4_t, a: int8x16_t, w: int8x16_t) -> int32x4_t {
    let lo = vmull_s8(vget_low_s8(a), vget_low_s8(w));
    let hi = vmull_high_s8(a, w);
    vpadalq_s16(vpadalq_s16(acc, lo), hi)
}

dot_tile!("neon", tile_neon, smull_acc);

tile_entry!(
    /// NEON tile for `mr ∈ {1, 2}`, `nr ∈ {1, 2, 4}`, prefetching `pf` bytes
    /// ahead in each weight row.
    ///
    /// # Safety
    /// Needs NEON; `a` holds `mr` rows of `k`, `w` holds `nr` rows of `k`.
    tile(a, w, _wsum, k, pf, acc)
        => tile_neon(a, w, k, pf, acc)
);
