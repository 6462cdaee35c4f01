//! NEON micro-kernels over interleave 4 or 8: one q register holds 4 quant
//! bytes of each of 4 weight rows (`V` = nr / 4 registers per chunk), and
//! the tile's i32 lanes are columns of C.
//!
//! Without the dot product extension a chunk's 16 products go through
//! `smull`/`smull2` (i16, exact: |q_w · q_x| ≤ 128 · 127) and are pairwise
//! accumulated into two i32 vectors with `sadalp` (rows 0–1 and rows 2–3,
//! two partial sums per row); one `addp` per block folds them into the
//! 4 row sums. Weight chunks (for 4-bit formats, their nibbles) are loaded
//! and split once and used for `MR` activation rows; the 4 activation bytes
//! are broadcast with `ld1r`. The 5-bit kinds put each nibble's fifth bit
//! in with one bit select (`bsl`, mask 0x10) from the block's bit-sliced
//! plane, shifted per chunk so the chunk's bit sits at bit 4 (byte shifts:
//! no lane crossing); Q6_K puts in bits 4 and 5 with one `bsl` (mask 0x30)
//! per half from its planes of bit pairs, shifted per chunk (`ushl`), and
//! keeps one sum per half-block; MXFP4 maps its nibble codes with one `tbl` each.
//! Scaling uses separately rounded multiplies
//! and adds (bit-equal to the scalar micro-kernel). Each tile is a block's
//! integer sums (`sums`) and their scaling (`scale`), run by `unroll!`:
//! with `ku` 2 two blocks' sums are formed before either is scaled, for
//! in-order cores. `tiles!` is shared with the
//! `sdot` variant (`dotprod.rs`), which replaces the step.

use super::ActBlock;
use std::arch::aarch64::*;
use std::arch::asm;

/// 4 f32 values from the 4 f16 bits at `p` (`fcvtl`, exact; its intrinsic
/// needs the f16 type, unstable in Rust 1.95, hence `asm!`).
///
/// # Safety
/// `p` must point to 4 readable values.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn f16x4(p: *const u16) -> float32x4_t {
    // SAFETY: forwarded from the caller.
    let v = unsafe { vld1_u16(p) };
    let o: float32x4_t;
    // SAFETY: register-only base-NEON instruction.
    unsafe {
        asm!(
            "fcvtl {o:v}.4s, {i:v}.4h",
            i = in(vreg) v,
            o = out(vreg) o,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    o
}

/// The 4 bytes at `p` in the low lanes of a vector.
///
/// # Safety
/// `p` must point to 4 readable bytes.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn bytes4(p: *const u8) -> uint8x8_t {
    // SAFETY: forwarded from the caller.
    vreinterpret_u8_u32(vdup_n_u32(unsafe { p.cast::<u32>().read_unaligned() }))
}

/// The f32 values of the 4 E8M0 codes at `p`, exactly `e8m0_to_f32_half`:
/// widened (`uxtl` ×2), bits `(e − 1) << 23`, or for the two subnormal
/// codes 0 and 1 `0x0020_0000 << e`, selected on `e < 2`.
///
/// # Safety
/// `p` must point to 4 readable bytes.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn e8m0x4(p: *const u8) -> float32x4_t {
    // SAFETY: forwarded from the caller.
    let e = vmovl_u16(vget_low_u16(vmovl_u8(unsafe { bytes4(p) })));
    let normal = vshlq_n_u32::<23>(vsubq_u32(e, vdupq_n_u32(1)));
    let sub = vshlq_u32(vdupq_n_u32(0x0020_0000), vreinterpretq_s32_u32(e));
    let small = vcltq_u32(e, vdupq_n_u32(2));
    vreinterpretq_f32_u32(vbslq_u32(small, sub, normal))
}

/// The 4 signed byte codes at `p` as f32 (`sxtl` ×2, `scvtf`; exact).
///
/// # Safety
/// `p` must point to 4 readable bytes.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn codes4(p: *const u8) -> float32x4_t {
    // SAFETY: forwarded from the caller.
    let c = vreinterpret_s8_u8(unsafe { bytes4(p) });
    vcvtq_f32_s32(vmovl_s16(vget_low_s16(vmovl_s8(c))))
}

/// 4 scales from scale index `at` (`gb·nr + row`) as f32: f16 bits
/// widened (`SC_F16`), E8M0 bytes decoded (`SC_E8M0`), or sub-block codes
/// times their super-scales `sup` (`SC_KSUB`).
///
/// # Safety
/// The job's streams for `SC` must hold `at + 4` values.
#[inline]
#[target_feature(enable = "neon")]
pub(super) unsafe fn scales4<const SC: u8>(
    job: &super::Job<'_>,
    at: usize,
    sup: float32x4_t,
) -> float32x4_t {
    use super::pack::{SC_E8M0, SC_F16};
    // SAFETY: forwarded from the caller.
    unsafe {
        match SC {
            SC_F16 => f16x4(job.sc.dh.as_ptr().add(at)),
            SC_E8M0 => e8m0x4(job.sc.dc.as_ptr().add(at)),
            _ => vmulq_f32(codes4(job.sc.dc.as_ptr().add(at)), sup),
        }
    }
}

/// 4 second values (mins, Q6_K's upper-half scales) from index `at`: f16
/// bits (`SC_F16`) or codes times their super-scales `sup`.
///
/// # Safety
/// As for [`scales4`], for a kind with second values.
#[inline]
#[target_feature(enable = "neon")]
pub(super) unsafe fn seconds4<const SC: u8>(
    job: &super::Job<'_>,
    at: usize,
    sup: float32x4_t,
) -> float32x4_t {
    use super::pack::SC_F16;
    // SAFETY: forwarded from the caller.
    unsafe {
        match SC {
            SC_F16 => f16x4(job.sc.mh.as_ptr().add(at)),
            _ => vmulq_f32(codes4(job.sc.mc.as_ptr().add(at)), sup),
        }
    }
}

/// The `4·V` super-scales (`sd`, `sm`) of group block `gb` (`SC_KSUB`; zero
/// otherwise), widened once per super-block by the tiles.
///
/// # Safety
/// The job's super-scale streams must hold block `gb`'s (`nr = 4·V`).
#[inline]
#[target_feature(enable = "neon")]
pub(super) unsafe fn supers4<const SC: u8, const V: usize>(
    job: &super::Job<'_>,
    gb: usize,
) -> ([float32x4_t; V], [float32x4_t; V]) {
    if SC != super::pack::SC_KSUB {
        return ([vdupq_n_f32(0.0); V], [vdupq_n_f32(0.0); V]);
    }
    let at = gb / 8 * 4 * V;
    // SAFETY: forwarded from the caller.
    unsafe {
        (
            std::array::from_fn(|v| f16x4(job.sc.sd.as_ptr().add(at + 4 * v))),
            std::array::from_fn(|v| f16x4(job.sc.sm.as_ptr().add(at + 4 * v))),
        )
    }
}

/// Requests the quants (`bs` bytes per block from group `g`'s `qb`) and
/// the scales of the block `job.pf` blocks after block `b` of group `g`
/// (`prfm pldl1keep`, through `prefetch::line`), as the x86 tiles do;
/// nothing at `pf` 0. `min`: the F16-scaled kind has mins.
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn prefetch_ahead<const SC: u8, const V: usize>(
    job: &super::Job<'_>,
    qb: *const u8,
    g: usize,
    b: usize,
    bs: usize,
    min: bool,
) {
    if job.pf == 0 {
        return;
    }
    let ahead = b + job.pf;
    crate::prefetch::lines(qb, ahead * bs, (ahead + 1) * bs);
    let gb = g * job.nb + b;
    if V == 1 {
        super::prefetch_scales::<SC, 4>(job, gb, min);
    } else {
        super::prefetch_scales::<SC, 8>(job, gb, min);
    }
}

/// The 4 activation bytes at `p`, broadcast to every i32 lane (`ld1r`).
///
/// # Safety
/// `p` must point to 4 readable bytes.
#[inline]
#[target_feature(enable = "neon")]
pub(super) unsafe fn bcast4(p: *const i8) -> int8x16_t {
    // SAFETY: forwarded from the caller; ld1r has no alignment requirement
    // beyond the element's, and i32 reads of unaligned addresses are
    // allowed on aarch64 for normal memory.
    vreinterpretq_s8_s32(unsafe { vld1q_dup_s32(p.cast::<i32>()) })
}

/// Partial sums of one row pair group: lanes (r0, r0, r1, r1), (r2, r2, r3, r3).
pub(super) type Acc = (int32x4_t, int32x4_t);

#[inline]
#[target_feature(enable = "neon")]
pub(super) fn zero_acc() -> Acc {
    (vdupq_n_s32(0), vdupq_n_s32(0))
}

/// `s + w · x` per 4-byte group with `smull` + `sadalp`.
#[inline]
#[target_feature(enable = "neon")]
fn step_neon(s: Acc, w: int8x16_t, x: int8x16_t) -> Acc {
    let lo = vmull_s8(vget_low_s8(w), vget_low_s8(x));
    let hi = vmull_high_s8(w, x);
    (vpadalq_s16(s.0, lo), vpadalq_s16(s.1, hi))
}

/// The 4 row sums.
#[inline]
#[target_feature(enable = "neon")]
fn finish_neon(s: Acc) -> int32x4_t {
    vpaddq_s32(s.0, s.1)
}

/// Generates the Q4 and int8 tiles and the dispatching entry for one
/// feature set and its step/finish functions.
macro_rules! tiles {
    ($feat:literal, $step:ident, $fin:ident, $q4:ident, $i8:ident, $entry:ident) => {
        /// Q4_0 (`MIN = false`) or Q4_1 (`MIN = true`) tile, interleave
        /// `4·V`; `X` `NIB`, or `NIB_FIVE` for Q5_0 / Q5_1 (nibbles plus the
        /// fifth-bit plane), or `NIB_LUT` for MXFP4 (`MIN = false`; codes
        /// through `MXFP4_LUT`), or `NIB_SIX` for Q6_K (`MIN = false`;
        /// nibbles plus the planes of bit pairs, 0..63, one sum and
        /// scale per half). `SC`: how the scales are stored (`SC_F16`,
        /// `SC_E8M0`, `SC_KSUB`).
        ///
        /// # Safety
        /// Needs the features above; `g` a group of the job, rows
        /// `i0 .. i0 + MR` inside its activations, `out` ≥ `MR · 4V`.
        #[target_feature(enable = $feat)]
        unsafe fn $q4<
            const MR: usize,
            const V: usize,
            const MIN: bool,
            const X: u8,
            const SC: u8,
            const KU: usize,
        >(
            job: &$crate::qgemm::Job<'_>,
            g: usize,
            i0: usize,
            out: &mut [f32],
        ) {
            let (nb, nr) = (job.nb, 4 * V);
            debug_assert!(job.nr == nr && out.len() >= MR * nr);
            debug_assert!(job.acts.len() >= (i0 + MR) * nb);
            use $crate::qgemm::pack::{MXFP4_LUT, NIB_FIVE, NIB_LUT, NIB_SIX};
            let (five, six, table) = (X == NIB_FIVE, X == NIB_SIX, X == NIB_LUT);
            let mask = vdupq_n_u8(0x0F);
            let bit4 = vdupq_n_u8(0x10);
            let bits45 = vdupq_n_u8(0x30);
            // SAFETY: the table is 16 bytes.
            let lut = unsafe { vld1q_u8(MXFP4_LUT.as_ptr()) };
            // Quant bytes per row and block: 4 per plane, then 16 nibble bytes.
            let planes = 4 * (five as usize + 2 * six as usize);
            let rb = planes + 16;
            let mut acc = [[vdupq_n_f32(0.0); V]; MR];
            // SAFETY (pointer offsets below): group g has nb blocks of nr
            // scales (and mins) and rb·nr quant bytes; rows i0 + i < i0 + MR
            // each hold nb activation blocks.
            let (qb, ab) = unsafe {
                (
                    job.qs.as_ptr().add(g * nb * rb * nr),
                    job.acts.as_ptr().add(i0 * nb),
                )
            };
            let (mut sdv, mut smv) = ([vdupq_n_f32(0.0); V], [vdupq_n_f32(0.0); V]);
            // The integer sums of block b per row and vector: the whole
            // block's (Q6_K: its low half's) and Q6_K's high half's.
            let sums = |b: usize| {
                $crate::qgemm::neon::prefetch_ahead::<SC, V>(job, qb, g, b, rb * nr, MIN);
                let mut s = [[$crate::qgemm::neon::zero_acc(); V]; MR];
                // Q6_K: sums of the high halves (values 16..32).
                let mut s2 = [[$crate::qgemm::neon::zero_acc(); V]; MR];
                // Q6_K's planes of bit pairs (low and high halves), shifted
                // per chunk below.
                let mut h6 = [[vdupq_n_u8(0); V]; 2];
                if six {
                    for (h, plane) in h6.iter_mut().enumerate() {
                        for (v, p) in plane.iter_mut().enumerate() {
                            // SAFETY: the two planes of 4·nr bytes open
                            // block b.
                            *p = unsafe { vld1q_u8(qb.add(b * rb * nr + 4 * h * nr + 16 * v)) };
                        }
                    }
                }
                // The fifth-bit plane (rows 4v .. 4v + 4 in vector v), for
                // the low nibbles moved up by 4: bit c of each byte is at
                // bit 4 after c right shifts.
                let (mut hl, mut hh) = ([vdupq_n_u8(0); V], [vdupq_n_u8(0); V]);
                if five {
                    for v in 0..V {
                        // SAFETY: the 4·nr plane bytes open block b.
                        let h = unsafe { vld1q_u8(qb.add(b * rb * nr + 16 * v)) };
                        (hl[v], hh[v]) = (vshlq_n_u8::<4>(h), h);
                    }
                }
                for c in 0..4 {
                    for v in 0..V {
                        // SAFETY: 16 bytes of chunk c of block b (after
                        // its planes).
                        let u = unsafe {
                            vld1q_u8(qb.add(b * rb * nr + planes * nr + 4 * nr * c + 16 * v))
                        };
                        let (mut lo, mut hi) = (vandq_u8(u, mask), vshrq_n_u8::<4>(u));
                        if table {
                            (lo, hi) = (vqtbl1q_u8(lut, lo), vqtbl1q_u8(lut, hi));
                        }
                        if five {
                            lo = vbslq_u8(bit4, hl[v], lo);
                            hi = vbslq_u8(bit4, hh[v], hi);
                            hl[v] = vshrq_n_u8::<1>(hl[v]);
                            hh[v] = vshrq_n_u8::<1>(hh[v]);
                        }
                        if six {
                            // Pair bits 2c, 2c + 1 to bits 4 and 5 (a
                            // negative count shifts right).
                            let left = vdupq_n_s8(4 - 2 * c as i8);
                            lo = vbslq_u8(bits45, vshlq_u8(h6[0][v], left), lo);
                            hi = vbslq_u8(bits45, vshlq_u8(h6[1][v], left), hi);
                        }
                        let (lo, hi) = (vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi));
                        for (i, (si, s2i)) in s.iter_mut().zip(s2.iter_mut()).enumerate() {
                            // SAFETY: block b of row i0 + i; 16 + 4c + 4 <= 32.
                            let (xl, xh) = unsafe {
                                let xp = (*ab.add(i * nb + b)).qs.as_ptr();
                                (
                                    $crate::qgemm::neon::bcast4(xp.add(4 * c)),
                                    $crate::qgemm::neon::bcast4(xp.add(16 + 4 * c)),
                                )
                            };
                            if six {
                                si[v] = $step(si[v], lo, xl);
                                s2i[v] = $step(s2i[v], hi, xh);
                            } else {
                                si[v] = $step($step(si[v], lo, xl), hi, xh);
                            }
                        }
                    }
                }
                (s, s2)
            };
            // acc += the scaled sums of block b, in block order.
            let scale = |b: usize, (s, s2): ([[_; V]; MR], [[_; V]; MR])| {
                if b % 8 == 0 {
                    // SAFETY: super-block b / 8 of group g (K-quants).
                    (sdv, smv) = unsafe { $crate::qgemm::neon::supers4::<SC, V>(job, g * nb + b) };
                }
                for (i, ai) in acc.iter_mut().enumerate() {
                    // SAFETY: block b of row i0 + i.
                    let x = unsafe { &*ab.add(i * nb + b) };
                    for v in 0..V {
                        if six {
                            // Σ(u − 32)x per half; the halves' scales
                            // applied one after the other, as the scalar
                            // tile does.
                            let lo = vsubq_s32($fin(s[i][v]), vdupq_n_s32(32 * x.sum_lo()));
                            let hi = vsubq_s32($fin(s2[i][v]), vdupq_n_s32(32 * x.sum_hi()));
                            let at = (g * nb + b) * nr + 4 * v;
                            // SAFETY: 4 of the nr scales and second codes of block b.
                            let (dw, mw) = unsafe {
                                (
                                    $crate::qgemm::neon::scales4::<SC>(job, at, sdv[v]),
                                    $crate::qgemm::neon::seconds4::<SC>(job, at, smv[v]),
                                )
                            };
                            let dd = vmulq_f32(dw, vdupq_n_f32(x.d()));
                            ai[v] = vaddq_f32(ai[v], vmulq_f32(dd, vcvtq_f32_s32(lo)));
                            let dm = vmulq_f32(mw, vdupq_n_f32(x.d()));
                            ai[v] = vaddq_f32(ai[v], vmulq_f32(dm, vcvtq_f32_s32(hi)));
                            continue;
                        }
                        let mut si = $fin(s[i][v]);
                        if !MIN {
                            let off = match X {
                                NIB_FIVE => 16,
                                NIB_LUT => 12,
                                _ => 8,
                            };
                            si = vsubq_s32(si, vdupq_n_s32(off * x.sum()));
                        }
                        let at = (g * nb + b) * nr + 4 * v;
                        // SAFETY: 4 of the nr scales of block b.
                        let dw = unsafe { $crate::qgemm::neon::scales4::<SC>(job, at, sdv[v]) };
                        let dd = vmulq_f32(dw, vdupq_n_f32(x.d()));
                        let mut t = vmulq_f32(dd, vcvtq_f32_s32(si));
                        if MIN {
                            // SAFETY: Q4_1/Q5_1 jobs carry mins shaped like the scales.
                            let mw =
                                unsafe { $crate::qgemm::neon::seconds4::<SC>(job, at, smv[v]) };
                            t = vaddq_f32(t, vmulq_f32(mw, vdupq_n_f32(x.s())));
                        }
                        ai[v] = vaddq_f32(ai[v], t);
                    }
                }
            };
            unroll!(KU, nb, sums, scale);
            for (i, ai) in acc.iter().enumerate() {
                for (v, a) in ai.iter().enumerate() {
                    // SAFETY: out holds MR · nr floats.
                    unsafe { vst1q_f32(out.as_mut_ptr().add(i * nr + 4 * v), *a) };
                }
            }
        }

        /// Int8 tile (Q8_0), interleave `4·V`. `SC` as for the Q4 tile.
        ///
        /// # Safety
        /// As for the Q4 tile.
        #[target_feature(enable = $feat)]
        unsafe fn $i8<const MR: usize, const V: usize, const SC: u8, const KU: usize>(
            job: &$crate::qgemm::Job<'_>,
            g: usize,
            i0: usize,
            out: &mut [f32],
        ) {
            let (nb, nr) = (job.nb, 4 * V);
            debug_assert!(job.nr == nr && out.len() >= MR * nr);
            debug_assert!(job.acts.len() >= (i0 + MR) * nb);
            let mut acc = [[vdupq_n_f32(0.0); V]; MR];
            // SAFETY: as in the Q4 tile, with 32·nr quant bytes per block.
            let (qb, ab) = unsafe {
                (
                    job.qs.as_ptr().add(g * nb * 32 * nr).cast::<i8>(),
                    job.acts.as_ptr().add(i0 * nb),
                )
            };
            let mut sdv = [vdupq_n_f32(0.0); V];
            // The integer sums of block b per row and vector.
            let sums = |b: usize| {
                $crate::qgemm::neon::prefetch_ahead::<SC, V>(job, qb.cast(), g, b, 32 * nr, false);
                let mut s = [[$crate::qgemm::neon::zero_acc(); V]; MR];
                for c in 0..8 {
                    for v in 0..V {
                        // SAFETY: 16 bytes of chunk c of block b.
                        let w = unsafe { vld1q_s8(qb.add(b * 32 * nr + 4 * nr * c + 16 * v)) };
                        for (i, si) in s.iter_mut().enumerate() {
                            // SAFETY: block b of row i0 + i; 4c + 4 <= 32.
                            let xb = unsafe {
                                $crate::qgemm::neon::bcast4(
                                    (*ab.add(i * nb + b)).qs.as_ptr().add(4 * c),
                                )
                            };
                            si[v] = $step(si[v], w, xb);
                        }
                    }
                }
                s
            };
            // acc += the scaled sums of block b, in block order.
            let scale = |b: usize, s: [[$crate::qgemm::neon::Acc; V]; MR]| {
                if b % 8 == 0 {
                    // SAFETY: super-block b / 8 of group g (K-quants).
                    sdv = unsafe { $crate::qgemm::neon::supers4::<SC, V>(job, g * nb + b).0 };
                }
                for (i, ai) in acc.iter_mut().enumerate() {
                    // SAFETY: block b of row i0 + i.
                    let x = unsafe { &*ab.add(i * nb + b) };
                    for v in 0..V {
                        let at = (g * nb + b) * nr + 4 * v;
                        // SAFETY: 4 of the nr scales of block b.
                        let dw = unsafe { $crate::qgemm::neon::scales4::<SC>(job, at, sdv[v]) };
                        let dd = vmulq_f32(dw, vdupq_n_f32(x.d()));
                        let t = vmulq_f32(dd, vcvtq_f32_s32($fin(s[i][v])));
                        ai[v] = vaddq_f32(ai[v], t);
                    }
                }
            };
            unroll!(KU, nb, sums, scale);
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
        /// Needs the features above; shapes as the driver guarantees.
        pub(super) unsafe fn $entry(
            job: &$crate::qgemm::Job<'_>,
            g: usize,
            i0: usize,
            mr: usize,
            out: &mut [f32],
        ) {
            use $crate::qgemm::pack::{
                Kind, NIB, NIB_FIVE, NIB_LUT, NIB_SIX, SC_E8M0, SC_F16, SC_KSUB,
            };
            // SAFETY (all arms): forwarded from the caller.
            unsafe {
                match (job.kind, job.sc.mode) {
                    (Kind::Q4_0, SC_F16) => {
                        by_v_mr_ku!(job, mr, $q4::<false, NIB, SC_F16>(job, g, i0, out))
                    }
                    (Kind::Q4_1, SC_F16) => {
                        by_v_mr_ku!(job, mr, $q4::<true, NIB, SC_F16>(job, g, i0, out))
                    }
                    (Kind::Q4_1, SC_KSUB) => {
                        by_v_mr_ku!(job, mr, $q4::<true, NIB, SC_KSUB>(job, g, i0, out))
                    }
                    (Kind::Q5_0, SC_F16) => {
                        by_v_mr_ku!(job, mr, $q4::<false, NIB_FIVE, SC_F16>(job, g, i0, out))
                    }
                    (Kind::Q5_1, SC_F16) => {
                        by_v_mr_ku!(job, mr, $q4::<true, NIB_FIVE, SC_F16>(job, g, i0, out))
                    }
                    (Kind::Q5_1, SC_KSUB) => {
                        by_v_mr_ku!(job, mr, $q4::<true, NIB_FIVE, SC_KSUB>(job, g, i0, out))
                    }
                    (Kind::Mxfp4, SC_E8M0) => {
                        by_v_mr_ku!(job, mr, $q4::<false, NIB_LUT, SC_E8M0>(job, g, i0, out))
                    }
                    (Kind::Q6K, SC_KSUB) => {
                        by_v_mr_ku!(job, mr, $q4::<false, NIB_SIX, SC_KSUB>(job, g, i0, out))
                    }
                    (Kind::I8, SC_F16) => by_v_mr_ku!(job, mr, $i8::<SC_F16>(job, g, i0, out)),
                    // No format packs these (see `pack::scale_mode`); the
                    // scalar tile reads every scale mode.
                    _ => $crate::qgemm::scalar::tile(job, g, i0, mr, out),
                }
            }
        }
    };
}

pub(super) use tiles;

tiles!("neon", step_neon, finish_neon, q4_neon, i8_neon, tile);

/// Quantizes `x` (32 values per block of `out`) block by block with
/// [`quantize_act_block`].
///
/// # Safety
/// Needs NEON (baseline on aarch64).
#[target_feature(enable = "neon")]
pub(super) unsafe fn quantize_act_row(x: &[f32], out: &mut [ActBlock]) {
    for (o, x) in out.iter_mut().zip(x.chunks_exact(32)) {
        // SAFETY: forwarded from the caller.
        let (d, qs, lo, sum) = unsafe { quantize_act_block(x.try_into().expect("chunks of 32")) };
        *o = ActBlock::from_f32_scale(d, lo, sum, qs);
    }
}

/// One activation block quantized exactly as `legacy::quantize_q8_1`
/// does: `d = amax / 127` and `q = round(x · (1/d))`, with `frinta`
/// (round to nearest, ties away from zero: Rust's `round`). Returns `(d,
/// quants, Σ quants 0..16, Σ quants)`; finite inputs.
///
/// # Safety
/// Needs NEON (baseline on aarch64).
#[target_feature(enable = "neon")]
pub(super) unsafe fn quantize_act_block(x: &[f32; 32]) -> (f32, [i8; 32], i32, i32) {
    // SAFETY: x holds 32 floats, 4 per load.
    let v: [float32x4_t; 8] = std::array::from_fn(|j| unsafe { vld1q_f32(x.as_ptr().add(4 * j)) });
    let amax = v
        .iter()
        .fold(vdupq_n_f32(0.0), |m, &x| vmaxq_f32(m, vabsq_f32(x)));
    let d = vmaxvq_f32(amax) / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let q: [int32x4_t; 8] =
        std::array::from_fn(|j| vcvtq_s32_f32(vrndaq_f32(vmulq_n_f32(v[j], id))));
    let mut qs = [0i8; 32];
    for (j, pair) in q.chunks_exact(2).enumerate() {
        // |q| ≤ 127: the narrowing keeps every value.
        let n16 = vcombine_s16(vqmovn_s32(pair[0]), vqmovn_s32(pair[1]));
        // SAFETY: bytes 8j .. 8j + 8 of qs.
        unsafe { vst1_s8(qs.as_mut_ptr().add(8 * j), vqmovn_s16(n16)) };
    }
    let lo: i32 = q[..4].iter().map(|&v| vaddvq_s32(v)).sum();
    let hi: i32 = q[4..].iter().map(|&v| vaddvq_s32(v)).sum();
    (d, qs, lo, lo + hi)
}
