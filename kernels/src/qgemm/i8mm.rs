//! NEON int8 matrix multiply (FEAT_I8MM) micro-kernels over interleave 4 or
//! 8, on the same packed layout as the NEON tiles.
//!
//! `smmla vd.4s, vn.16b, vm.16b` adds the 2×2 i32 product of two 2×8 int8
//! matrices: two activation rows × 8 values of k (`vn`) by two weight rows
//! × the same 8 values (`vm`). Two consecutive 4-byte chunks of the packed
//! layout hold k `4c .. 4c + 8` of 4 weight rows; `zip1`/`zip2` on 32-bit
//! lanes turn them into the row pairs (0, 1) and (2, 3), once per chunk
//! pair and shared by every activation row pair. The activation pair is two
//! 8-byte loads. So an `MR × 4` tile takes `MR/2 · 2` `smmla` per 8 values
//! of k where `sdot` takes `MR · 2`. Lanes come out as
//! `[i0·r0, i0·r1, i1·r0, i1·r1]` and are unzipped (64-bit `zip1`/`zip2`)
//! into the rows once per block. The 5-bit kinds put the fifth bits into
//! each nibble chunk as the NEON tiles do (the plane shifted so the chunk's
//! bit sits at bit 4, one `bsl`), MXFP4 maps its codes with `tbl`. Scaling
//! is the NEON tiles' (bit-equal to
//! the scalar micro-kernel; Q6_K, nibbles plus its planes of bit pairs
//! (one shift and one `bsl` per chunk and half), runs its low-nibble steps
//! first, so its half-block sums are scaled after the second and the
//! fourth step). A tile of one row runs the `sdot` tile. `smmla` comes
//! from `crate::qsimd` (its intrinsic is unstable).

use super::Job;
use super::neon::{scales4, seconds4, supers4};
use super::pack::{Kind, MXFP4_LUT, SC_E8M0, SC_F16, SC_KSUB};
use crate::qsimd::smmla;
use std::arch::aarch64::*;

/// Weight row pairs (0, 1) and (2, 3) × 8 values of k from two chunks.
#[inline]
#[target_feature(enable = "neon,dotprod,i8mm")]
fn row_pairs(wa: int8x16_t, wb: int8x16_t) -> (int8x16_t, int8x16_t) {
    let (a, b) = (vreinterpretq_s32_s8(wa), vreinterpretq_s32_s8(wb));
    (
        vreinterpretq_s8_s32(vzip1q_s32(a, b)),
        vreinterpretq_s8_s32(vzip2q_s32(a, b)),
    )
}

/// The 8 activation bytes at `p` of rows `p` and `q` as one 2×8 matrix.
///
/// # Safety
/// `p` and `q` must point to 8 readable bytes.
#[inline]
#[target_feature(enable = "neon,dotprod,i8mm")]
unsafe fn act_pair(p: *const i8, q: *const i8) -> int8x16_t {
    // SAFETY: forwarded from the caller.
    unsafe { vcombine_s8(vld1_s8(p), vld1_s8(q)) }
}

/// (row i0, row i1) sums of 4 weight rows from the two `smmla` accumulators.
#[inline]
#[target_feature(enable = "neon,dotprod,i8mm")]
fn unzip_rows(s01: int32x4_t, s23: int32x4_t) -> (int32x4_t, int32x4_t) {
    let (a, b) = (vreinterpretq_s64_s32(s01), vreinterpretq_s64_s32(s23));
    (
        vreinterpretq_s32_s64(vzip1q_s64(a, b)),
        vreinterpretq_s32_s64(vzip2q_s64(a, b)),
    )
}

/// Chunk pair `(wa, wb)` with the bits of each `plane` byte that `mask`
/// selects once shifted left by `left` (for `wa`) and `left − step` (for
/// `wb`; negative counts shift right) put in: two shifts and two bit
/// selects. The fifth-bit plane steps by one bit a chunk, Q6_K's planes of
/// bit pairs by two.
#[inline]
#[target_feature(enable = "neon,dotprod,i8mm")]
fn merge_plane(
    plane: uint8x16_t,
    left: i8,
    step: i8,
    mask: uint8x16_t,
    (wa, wb): (uint8x16_t, uint8x16_t),
) -> (uint8x16_t, uint8x16_t) {
    let ha = vshlq_u8(plane, vdupq_n_s8(left));
    let hb = vshlq_u8(plane, vdupq_n_s8(left - step));
    (vbslq_u8(mask, ha, wa), vbslq_u8(mask, hb, wb))
}

/// `KIND` of [`tile_mmla`]: Q4_0 nibbles.
const K_Q4_0: u8 = 0;
/// Q4_1-kind nibbles (Q4_1, Q4_K): plus `m · s_x`.
const K_Q4_1: u8 = 1;
/// Int8 (Q8_0).
const K_I8: u8 = 2;
/// Nibbles plus the planes of bit pairs, offset 32, one scale per
/// half-block (Q6_K).
const K_Q6: u8 = 3;
/// Nibbles plus the fifth-bit plane, offset 16 (Q5_0).
const K_Q5_0: u8 = 4;
/// Nibbles plus the fifth-bit plane, plus `m · s_x` (Q5_1).
const K_Q5_1: u8 = 5;
/// Nibble codes through `MXFP4_LUT`, offset 12 (MXFP4).
const K_MXFP4: u8 = 6;

/// `acc[i][v] += (w · dx_i) · (Σ − off·Σx)` for the `2·pairs` rows of a
/// tile from the `smmla` sums `s` (reset to zero), plus `m · s_x` when `mw`
/// is given; `Σx` over the whole block (`half` 0), values 0..16 (1) or
/// 16..32 (2).
///
/// # Safety
/// `ab` points at the tile's first activation row, rows `nb` blocks apart,
/// `b` a block of them.
#[inline]
#[target_feature(enable = "neon,dotprod,i8mm")]
#[allow(clippy::too_many_arguments)]
unsafe fn scale_into<const MR: usize, const V: usize>(
    acc: &mut [[float32x4_t; V]; MR],
    s: &mut [[(int32x4_t, int32x4_t); V]; MR],
    ab: *const super::ActBlock,
    nb: usize,
    b: usize,
    w: [float32x4_t; V],
    mw: Option<[float32x4_t; V]>,
    off: i32,
    half: u8,
) {
    for (p, sp) in s.iter_mut().enumerate().take(MR / 2) {
        for v in 0..V {
            let (r0, r1) = unzip_rows(sp[v].0, sp[v].1);
            sp[v] = (vdupq_n_s32(0), vdupq_n_s32(0));
            for (h, si) in [(0, r0), (1, r1)] {
                let i = 2 * p + h;
                // SAFETY: block b of row i0 + i (the caller's bounds).
                let x = unsafe { &*ab.add(i * nb + b) };
                let si = if off != 0 {
                    let sum = match half {
                        0 => x.sum(),
                        1 => x.sum_lo(),
                        _ => x.sum_hi(),
                    };
                    vsubq_s32(si, vdupq_n_s32(off * sum))
                } else {
                    si
                };
                let dd = vmulq_f32(w[v], vdupq_n_f32(x.d()));
                let mut t = vmulq_f32(dd, vcvtq_f32_s32(si));
                if let Some(mw) = mw {
                    t = vaddq_f32(t, vmulq_f32(mw[v], vdupq_n_f32(x.s())));
                }
                acc[i][v] = vaddq_f32(acc[i][v], t);
            }
        }
    }
}

/// Shared tile body: `MR` rows (even) × `4V` columns; `KIND` one of the
/// `K_*` constants; `SC`: how the scales are stored (`SC_F16`,
/// `SC_E8M0`, `SC_KSUB`).
///
/// # Safety
/// Needs FEAT_I8MM; `g` a group of the job, rows `i0 .. i0 + MR` inside its
/// activations, `out` ≥ `MR · 4V`.
#[target_feature(enable = "neon,dotprod,i8mm")]
unsafe fn tile_mmla<const MR: usize, const V: usize, const KIND: u8, const SC: u8>(
    job: &Job<'_>,
    g: usize,
    i0: usize,
    out: &mut [f32],
) {
    let (nb, nr, pairs) = (job.nb, 4 * V, MR / 2);
    debug_assert!(MR.is_multiple_of(2) && job.nr == nr && out.len() >= MR * nr);
    debug_assert!(job.acts.len() >= (i0 + MR) * nb);
    let int8 = KIND == K_I8;
    let five = matches!(KIND, K_Q5_0 | K_Q5_1);
    let six = KIND == K_Q6;
    // Quant bytes per row and block: the bit planes, then the nibbles or
    // the int8 values.
    let planes = 4 * (five as usize + 2 * six as usize);
    let rb = planes + if int8 { 32 } else { 16 };
    let mask = vdupq_n_u8(0x0F);
    let bit4 = vdupq_n_u8(0x10);
    let bits45 = vdupq_n_u8(0x30);
    // SAFETY: the table is 16 bytes.
    let lut = unsafe { vld1q_u8(MXFP4_LUT.as_ptr()) };
    let mut acc = [[vdupq_n_f32(0.0); V]; MR];
    // SAFETY (pointer offsets below): group g has nb blocks of nr scales
    // (and mins) and rb·nr quant bytes; rows i0 .. i0 + MR hold nb blocks.
    let (qb, ab) = unsafe {
        (
            job.qs.as_ptr().add(g * nb * rb * nr),
            job.acts.as_ptr().add(i0 * nb),
        )
    };
    // Each step: two chunks of weights (k offsets ka .. ka + 8 in the
    // activation block); int8 steps 0, 1 cover values 0..16, steps 2, 3
    // values 16..32, and so do Q6_K's (low nibbles first: one scale per
    // half). Nibble chunk c's fifth bits are plane bit c (low nibbles) or
    // 4 + c (high); Q6_K's pairs are bits 2c, 2c + 1 of plane 0 (low) or 1
    // (high).
    let steps: &[(usize, usize, bool)] = if int8 {
        &[(0, 0, false), (2, 8, false), (4, 16, false), (6, 24, false)]
    } else if six {
        &[(0, 0, false), (2, 8, false), (0, 16, true), (2, 24, true)]
    } else {
        &[(0, 0, false), (0, 16, true), (2, 8, false), (2, 24, true)]
    };
    let (mut sdv, mut smv) = ([vdupq_n_f32(0.0); V], [vdupq_n_f32(0.0); V]);
    for b in 0..nb {
        let at = (g * nb + b) * nr;
        if b % 8 == 0 {
            // SAFETY: super-block b / 8 of group g (K-quants).
            (sdv, smv) = unsafe { supers4::<SC, V>(job, g * nb + b) };
        }
        // SAFETY: nr scales (and, for the kinds with one, second values)
        // of block b.
        let (dw, mw): ([float32x4_t; V], [float32x4_t; V]) = unsafe {
            (
                std::array::from_fn(|v| scales4::<SC>(job, at + 4 * v, sdv[v])),
                if matches!(KIND, K_Q4_1 | K_Q5_1 | K_Q6) {
                    std::array::from_fn(|v| seconds4::<SC>(job, at + 4 * v, smv[v]))
                } else {
                    [vdupq_n_f32(0.0); V]
                },
            )
        };
        // [pair][v] → (rows 0-1 product, rows 2-3 product); the first
        // MR / 2 entries are used.
        let mut s = [[(vdupq_n_s32(0), vdupq_n_s32(0)); V]; MR];
        // The fifth-bit plane (rows 4v .. 4v + 4 in vector v).
        let plane: [uint8x16_t; V] = if five {
            // SAFETY: the 4·nr plane bytes open block b.
            std::array::from_fn(|v| unsafe { vld1q_u8(qb.add(b * rb * nr + 16 * v)) })
        } else {
            [vdupq_n_u8(0); V]
        };
        // Q6_K's planes of bit pairs, low and high halves.
        let pairs6: [[uint8x16_t; V]; 2] = if six {
            // SAFETY: the two planes of 4·nr bytes open block b.
            std::array::from_fn(|h| {
                std::array::from_fn(|v| unsafe {
                    vld1q_u8(qb.add(b * rb * nr + 4 * h * nr + 16 * v))
                })
            })
        } else {
            [[vdupq_n_u8(0); V]; 2]
        };
        for (step, &(c, ka, high)) in steps.iter().enumerate() {
            for v in 0..V {
                // SAFETY: chunks c and c + 1 of block b (after its
                // planes), 16 bytes each.
                let (wa, wb) = unsafe {
                    let p = qb.add(b * rb * nr + planes * nr + 4 * nr * c + 16 * v);
                    (vld1q_u8(p), vld1q_u8(p.add(4 * nr)))
                };
                let (wa, wb) = if int8 {
                    (wa, wb)
                } else if high {
                    (vshrq_n_u8::<4>(wa), vshrq_n_u8::<4>(wb))
                } else {
                    (vandq_u8(wa, mask), vandq_u8(wb, mask))
                };
                let (wa, wb) = if KIND == K_MXFP4 {
                    (vqtbl1q_u8(lut, wa), vqtbl1q_u8(lut, wb))
                } else {
                    (wa, wb)
                };
                // Chunks c and c + 1: the fifth-bit plane's bit `4·high +
                // c` and the next to bit 4; Q6_K's pairs at bits 2c and
                // 2c + 2 of its plane `high` to bits 4 and 5.
                let (wa, wb) = if five {
                    let bit = 4 * high as i8 + c as i8;
                    merge_plane(plane[v], 4 - bit, 1, bit4, (wa, wb))
                } else if six {
                    merge_plane(
                        pairs6[high as usize][v],
                        4 - 2 * c as i8,
                        2,
                        bits45,
                        (wa, wb),
                    )
                } else {
                    (wa, wb)
                };
                let (wa, wb) = (vreinterpretq_s8_u8(wa), vreinterpretq_s8_u8(wb));
                let (w01, w23) = row_pairs(wa, wb);
                for (p, sp) in s.iter_mut().enumerate().take(pairs) {
                    // SAFETY: block b of rows i0 + 2p, i0 + 2p + 1;
                    // ka + 8 <= 32.
                    let a = unsafe {
                        act_pair(
                            (*ab.add(2 * p * nb + b)).qs.as_ptr().add(ka),
                            (*ab.add((2 * p + 1) * nb + b)).qs.as_ptr().add(ka),
                        )
                    };
                    sp[v] = (smmla(sp[v].0, a, w01), smmla(sp[v].1, a, w23));
                }
            }
            if six && step == 1 {
                // The low halves (values 0..16), with their scales.
                // SAFETY: rows and block as above.
                unsafe { scale_into(&mut acc, &mut s, ab, nb, b, dw, None, 32, 1) };
            }
        }
        let (w, m) = match KIND {
            K_Q6 => (mw, None),
            K_Q4_1 | K_Q5_1 => (dw, Some(mw)),
            _ => (dw, None),
        };
        let (off, half) = match KIND {
            K_Q4_0 => (8, 0),
            K_Q5_0 => (16, 0),
            K_MXFP4 => (12, 0),
            K_Q6 => (32, 2),
            _ => (0, 0),
        };
        // SAFETY: rows and block as above.
        unsafe { scale_into(&mut acc, &mut s, ab, nb, b, w, m, off, half) };
    }
    for (i, ai) in acc.iter().enumerate() {
        for (v, a) in ai.iter().enumerate() {
            // SAFETY: out holds MR · nr floats.
            unsafe { vst1q_f32(out.as_mut_ptr().add(i * nr + 4 * v), *a) };
        }
    }
}

/// Rows `i0 .. i0 + mr` (mr ∈ 1, 2, 4, 8) × group `g`, interleave 4 or 8.
///
/// # Safety
/// Needs FEAT_I8MM (and so dotprod); shapes as the driver guarantees.
pub(super) unsafe fn tile(job: &Job<'_>, g: usize, i0: usize, mr: usize, out: &mut [f32]) {
    let k = match job.kind {
        Kind::Q4_0 => K_Q4_0,
        Kind::Q4_1 => K_Q4_1,
        Kind::Q5_0 => K_Q5_0,
        Kind::Q5_1 => K_Q5_1,
        Kind::Mxfp4 => K_MXFP4,
        Kind::I8 => K_I8,
        Kind::Q6K => K_Q6,
    };
    if mr == 1 {
        // SAFETY: FEAT_I8MM implies the dot product; forwarded.
        return unsafe { super::dotprod::tile(job, g, i0, 1, out) };
    }
    macro_rules! by_shape {
        ($k:ident, $sc:ident) => {
            match (job.nr, mr) {
                (4, 8) => tile_mmla::<8, 1, $k, $sc>(job, g, i0, out),
                (4, 4) => tile_mmla::<4, 1, $k, $sc>(job, g, i0, out),
                (4, _) => tile_mmla::<2, 1, $k, $sc>(job, g, i0, out),
                (_, 8) => tile_mmla::<8, 2, $k, $sc>(job, g, i0, out),
                (_, 4) => tile_mmla::<4, 2, $k, $sc>(job, g, i0, out),
                (_, _) => tile_mmla::<2, 2, $k, $sc>(job, g, i0, out),
            }
        };
    }
    // SAFETY (all arms): forwarded from the caller.
    unsafe {
        match (k, job.sc.mode) {
            (K_Q4_0, SC_F16) => by_shape!(K_Q4_0, SC_F16),
            (K_Q4_1, SC_F16) => by_shape!(K_Q4_1, SC_F16),
            (K_Q4_1, SC_KSUB) => by_shape!(K_Q4_1, SC_KSUB),
            (K_Q5_0, SC_F16) => by_shape!(K_Q5_0, SC_F16),
            (K_Q5_1, SC_F16) => by_shape!(K_Q5_1, SC_F16),
            (K_Q5_1, SC_KSUB) => by_shape!(K_Q5_1, SC_KSUB),
            (K_MXFP4, SC_E8M0) => by_shape!(K_MXFP4, SC_E8M0),
            (K_I8, SC_F16) => by_shape!(K_I8, SC_F16),
            (K_Q6, SC_KSUB) => by_shape!(K_Q6, SC_KSUB),
            // No format packs these (see `pack::scale_mode`); the scalar
            // tile reads every scale mode.
            _ => super::scalar::tile(job, g, i0, mr, out),
        }
    }
}
