//! NEON dot-product (FEAT_DotProd) I8 micro-tile: one `sdot` per 16 int8
//! pairs (four products summed into each i32 lane, exact). `vdotq_s32` is
//! unstable in Rust 1.95, so `sdot` is emitted with `asm!` inside a
//! `#[target_feature(enable = "dotprod")]` function. The k tail (< 16) is a
//! scalar loop. Each 64 bytes of the weight rows first request their bytes
//! `pf` further on (`prfm`, see `by_lines!` in `mod.rs`). This is also the GEMV
//! (m = 1) path of the i8mm variant.

use super::prefetch_rows;
use std::arch::aarch64::*;
use std::arch::asm;

/// `acc + Σ_{4 bytes} a·b` per i32 lane (`sdot v.4s, v.16b, v.16b`).
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: register-only instruction, available under the dotprod feature.
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// # Safety
/// Needs FEAT_DotProd; `a` holds `MR` rows of `k`, `w` holds `NR` rows of `k`.
#[target_feature(enable = "neon,dotprod")]
unsafe fn tile_sdot<const MR: usize, const NR: usize>(
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
                *vc = sdot(*vc, av, wv[c]);
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

/// Dotprod tile for `mr ∈ {1, 2}`, `nr ∈ {1, 2, 4}`, prefetching `pf` bytes
/// ahead in each weight row.
///
/// # Safety
/// Needs FEAT_DotProd; `a` holds `mr` rows of `k`, `w` holds `nr` rows of `k`.
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
            (1, 1) => tile_sdot::<1, 1>(a, w, k, pf, acc),
            (1, 2) => tile_sdot::<1, 2>(a, w, k, pf, acc),
            (1, 4) => tile_sdot::<1, 4>(a, w, k, pf, acc),
            (2, 1) => tile_sdot::<2, 1>(a, w, k, pf, acc),
            (2, 2) => tile_sdot::<2, 2>(a, w, k, pf, acc),
            _ => tile_sdot::<2, 4>(a, w, k, pf, acc),
        }
    }
}
