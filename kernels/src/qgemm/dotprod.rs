//! NEON + dot product (FEAT_DotProd) micro-kernels: the NEON tiles
//! (`neon.rs`, same layout and scaling) with each chunk's 16 products summed
//! into the 4 row lanes by one `sdot` (broadcast activation bytes × 4 bytes
//! of each of 4 weight rows; `sdot` from `crate::qsimd`).

use super::neon::{Acc, tiles};
use crate::qsimd::sdot;
use std::arch::aarch64::*;

/// `sdot` into the first accumulator (the second stays zero).
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn step_sdot(s: Acc, w: int8x16_t, x: int8x16_t) -> Acc {
    (sdot(s.0, w, x), s.1)
}

/// The 4 row sums.
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn finish_sdot(s: Acc) -> int32x4_t {
    s.0
}

tiles!(
    "neon,dotprod",
    step_sdot,
    finish_sdot,
    q4_sdot,
    i8_sdot,
    tile
);
