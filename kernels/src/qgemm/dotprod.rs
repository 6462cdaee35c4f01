//! NEON + dot product (FEAT_DotProd) micro-kernels: the NEON tiles
//! (`neon.rs`, same layout and scaling) with each chunk's 16 products summed
//! into the 4 row lanes by one `sdot` (broadcast activation bytes × 4 bytes
//! of each of 4 weight rows). `vdotq_s32` is unstable in Rust 1.95, so
//! `sdot` is emitted with `asm!` under `#[target_feature(enable = "dotprod")]`.

use super::neon::{Acc, tiles};
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
