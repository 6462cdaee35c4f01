//! NEON dot-product (FEAT_DotProd) I8 micro-tile: one `sdot` per 16 int8
//! pairs (four products summed into each i32 lane, exact). `sdot` comes from
//! `crate::qsimd` (its intrinsic is unstable). The k tail (< 16) is a
//! scalar loop. Each 64 bytes of the weight rows first request their bytes
//! `pf` further on (`prfm`, see `by_lines!` in `mod.rs`). This is also the GEMV
//! (m = 1) path of the i8mm variant.

use super::neon::dot_tile;
use crate::qsimd::sdot;
use std::arch::aarch64::*;

dot_tile!("neon,dotprod", tile_sdot, sdot);

tile_entry!(
    /// Dotprod tile for `mr ∈ {1, 2}`, `nr ∈ {1, 2, 4}`, prefetching `pf` bytes
    /// ahead in each weight row.
    ///
    /// # Safety
    /// Needs FEAT_DotProd; `a` holds `mr` rows of `k`, `w` holds `nr` rows of `k`.
    tile(a, w, _wsum, k, pf, acc)
        => tile_sdot(a, w, k, pf, acc)
);
