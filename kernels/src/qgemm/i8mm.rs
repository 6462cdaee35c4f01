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
//! into the rows once per block; scaling is the NEON tiles' (bit-equal to
//! the scalar GEMV). A tile of one row runs the `sdot` tile. `vmmlaq_s32`
//! is unstable in Rust 1.95, so `smmla` is emitted with `asm!`.

use super::Job;
use super::pack::Kind;
use std::arch::aarch64::*;
use std::arch::asm;

/// `acc + a · bᵀ` for 2×8 int8 `a`, `b` (`smmla`).
#[inline]
#[target_feature(enable = "neon,dotprod,i8mm")]
fn smmla(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: register-only instruction, available under the i8mm feature.
    unsafe {
        asm!(
            "smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

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

/// Shared tile body: `MR` rows (even) × `4V` columns; `KIND` 0 = Q4_0,
/// 1 = Q4_1, 2 = int8.
///
/// # Safety
/// Needs FEAT_I8MM; `g` a group of the job, rows `i0 .. i0 + 2P` inside its
/// activations, `out` ≥ `MR · 4V`.
#[target_feature(enable = "neon,dotprod,i8mm")]
unsafe fn tile_mmla<const MR: usize, const V: usize, const KIND: u8>(
    job: &Job<'_>,
    g: usize,
    i0: usize,
    out: &mut [f32],
) {
    let (nb, nr, pairs) = (job.nb, 4 * V, MR / 2);
    debug_assert!(MR.is_multiple_of(2) && job.nr == nr && out.len() >= MR * nr);
    debug_assert!(job.acts.len() >= (i0 + MR) * nb);
    let rb = if KIND == 2 { 32 } else { 16 };
    let mask = vdupq_n_u8(0x0F);
    let mut acc = [[vdupq_n_f32(0.0); V]; MR];
    // SAFETY (pointer offsets below): group g has nb blocks of nr scales
    // (and mins) and rb·nr quant bytes; rows i0 .. i0 + MR hold nb blocks.
    let (qb, db, ab) = unsafe {
        (
            job.qs.as_ptr().add(g * nb * rb * nr),
            job.d.as_ptr().add(g * nb * nr),
            job.acts.as_ptr().add(i0 * nb),
        )
    };
    for b in 0..nb {
        // [pair][v] → (rows 0-1 product, rows 2-3 product); the first
        // MR / 2 entries are used.
        let mut s = [[(vdupq_n_s32(0), vdupq_n_s32(0)); V]; MR];
        // Each step: two chunks of weights (k offsets ka .. ka + 8 in the
        // activation block).
        let steps: &[(usize, usize, bool)] = if KIND == 2 {
            &[(0, 0, false), (2, 8, false), (4, 16, false), (6, 24, false)]
        } else {
            &[(0, 0, false), (0, 16, true), (2, 8, false), (2, 24, true)]
        };
        for &(c, ka, high) in steps {
            for v in 0..V {
                // SAFETY: chunks c and c + 1 of block b, 16 bytes each.
                let (wa, wb) = unsafe {
                    let p = qb.add(b * rb * nr + 4 * nr * c + 16 * v);
                    (vld1q_u8(p), vld1q_u8(p.add(4 * nr)))
                };
                let (wa, wb) = if KIND == 2 {
                    (vreinterpretq_s8_u8(wa), vreinterpretq_s8_u8(wb))
                } else if high {
                    (
                        vreinterpretq_s8_u8(vshrq_n_u8::<4>(wa)),
                        vreinterpretq_s8_u8(vshrq_n_u8::<4>(wb)),
                    )
                } else {
                    (
                        vreinterpretq_s8_u8(vandq_u8(wa, mask)),
                        vreinterpretq_s8_u8(vandq_u8(wb, mask)),
                    )
                };
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
        }
        for (p, sp) in s.iter().enumerate().take(pairs) {
            for v in 0..V {
                let (r0, r1) = unzip_rows(sp[v].0, sp[v].1);
                for (h, si) in [(0, r0), (1, r1)] {
                    let i = 2 * p + h;
                    // SAFETY: block b of row i0 + i.
                    let x = unsafe { &*ab.add(i * nb + b) };
                    let si = if KIND == 0 {
                        vsubq_s32(si, vdupq_n_s32(8 * x.sum()))
                    } else {
                        si
                    };
                    // SAFETY: 4 of the nr scales of block b.
                    let dw = unsafe { vld1q_f32(db.add(b * nr + 4 * v)) };
                    let dd = vmulq_f32(dw, vdupq_n_f32(x.d()));
                    let mut t = vmulq_f32(dd, vcvtq_f32_s32(si));
                    if KIND == 1 {
                        // SAFETY: Q4_1 jobs carry mins shaped like the scales.
                        let mw =
                            unsafe { vld1q_f32(job.m.as_ptr().add((g * nb + b) * nr + 4 * v)) };
                        t = vaddq_f32(t, vmulq_f32(mw, vdupq_n_f32(x.s())));
                    }
                    acc[i][v] = vaddq_f32(acc[i][v], t);
                }
            }
        }
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
        Kind::Q4_0 => 0,
        Kind::Q4_1 => 1,
        Kind::I8 => 2,
    };
    // SAFETY (all arms): forwarded from the caller.
    unsafe {
        match (k, job.nr, mr) {
            (_, _, 1) => super::dotprod::tile(job, g, i0, 1, out),
            (0, 4, 8) => tile_mmla::<8, 1, 0>(job, g, i0, out),
            (0, 4, 4) => tile_mmla::<4, 1, 0>(job, g, i0, out),
            (0, 4, _) => tile_mmla::<2, 1, 0>(job, g, i0, out),
            (0, _, 8) => tile_mmla::<8, 2, 0>(job, g, i0, out),
            (0, _, 4) => tile_mmla::<4, 2, 0>(job, g, i0, out),
            (0, _, _) => tile_mmla::<2, 2, 0>(job, g, i0, out),
            (1, 4, 8) => tile_mmla::<8, 1, 1>(job, g, i0, out),
            (1, 4, 4) => tile_mmla::<4, 1, 1>(job, g, i0, out),
            (1, 4, _) => tile_mmla::<2, 1, 1>(job, g, i0, out),
            (1, _, 8) => tile_mmla::<8, 2, 1>(job, g, i0, out),
            (1, _, 4) => tile_mmla::<4, 2, 1>(job, g, i0, out),
            (1, _, _) => tile_mmla::<2, 2, 1>(job, g, i0, out),
            (_, 4, 8) => tile_mmla::<8, 1, 2>(job, g, i0, out),
            (_, 4, 4) => tile_mmla::<4, 1, 2>(job, g, i0, out),
            (_, 4, _) => tile_mmla::<2, 1, 2>(job, g, i0, out),
            (_, _, 8) => tile_mmla::<8, 2, 2>(job, g, i0, out),
            (_, _, 4) => tile_mmla::<4, 2, 2>(job, g, i0, out),
            (_, _, _) => tile_mmla::<2, 2, 2>(job, g, i0, out),
        }
    }
}
