//! AVX-512 (BW) and AVX-512 VNNI micro-kernels over interleave 16: one zmm
//! holds 4 quant bytes of each of 16 weight rows, so its 16 i32 lanes are 16
//! columns of C.
//!
//! The same scheme as the AVX2 tiles (see `avx2.rs`) at twice the width.
//! With VNNI there is also a panel tile ([`panel_tile`]) for every format:
//! each group is unpacked once per call into a per-worker panel that every
//! row tile reads ([`fill_panel`], whose layout AMX's tile reads too,
//! signed).
//! AVX-512 has no `vpsignb`, so without VNNI the int8 tile's sign trick
//! negates the broadcast activations under the mask of negative weights
//! (`vpmovb2m` + masked `vpsubb`); with VNNI the weights are biased to
//! unsigned instead and the sums start at the bias. The 5-bit kinds merge
//! each nibble vector with its shifted fifth-bit plane in one `vpternlogd`
//! (`lo | (plane & 0x10)`);
//! Q6_K takes each half's nibbles and its shifted bit pairs in one
//! `vpternlogd` bit select; MXFP4 maps its nibble codes with one `vpshufb`
//! each. Without VNNI the nibble products of a block are summed in i16 (no
//! saturation, as on AVX2; 5-bit and MXFP4 products two chunks at a time,
//! Q6_K's 6-bit ones one chunk) before `vpmaddwd`. Scaling uses
//! separately rounded multiplies and adds (bit-equal to the scalar
//! micro-kernel).

use super::pack::Kind;
use super::pack::{MXFP4_LUT, NIB, NIB_FIVE, NIB_LUT, NIB_SIX, SC_E8M0, SC_F16, SC_KSUB};
use super::prefetch_scales;
use super::{ActBlock, Job, zmm_panel_block};
use std::arch::x86_64::*;

/// Q6_K's bit pairs of chunk `c` moved to bits 4 and 5 of each byte, from
/// a plane masked into its `even` pairs (chunks 0, 2: bits 0–1, 4–5) and
/// its `odd` ones (1, 3: bits 2–3, 6–7). Bits 6 and 7 of the result are
/// clear: what a 16-bit shift moves there comes from a masked-off pair.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn q6_pairs(c: usize, even: __m512i, odd: __m512i) -> __m512i {
    match c {
        0 => _mm512_slli_epi16::<4>(even),
        1 => _mm512_slli_epi16::<2>(odd),
        2 => even,
        _ => _mm512_srli_epi16::<2>(odd),
    }
}

/// Q6_K's two planes of bit pairs at `q` (low and high halves), each
/// masked into its even and odd pairs for [`q6_values`].
///
/// # Safety
/// `q` must point to 128 readable bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn q6_planes(q: *const u8) -> [__m512i; 4] {
    // SAFETY: forwarded from the caller.
    let (p0, p1) = unsafe {
        (
            _mm512_loadu_si512(q.cast()),
            _mm512_loadu_si512(q.add(64).cast()),
        )
    };
    let (even, odd) = (_mm512_set1_epi8(0x33), _mm512_set1_epi8(0xCCu8 as i8));
    [
        _mm512_and_si512(p0, even),
        _mm512_and_si512(p0, odd),
        _mm512_and_si512(p1, even),
        _mm512_and_si512(p1, odd),
    ]
}

/// Q6_K's 6-bit values (0..63) of chunk `c`, low and high halves: the
/// nibble bits from `v`, bits 4 and 5 from the masked `pairs` (whose bits
/// 6 and 7 are clear) in one bit select each (`c ? a : b`, truth table
/// 0xE4).
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn q6_values(c: usize, v: __m512i, pairs: &[__m512i; 4]) -> (__m512i, __m512i) {
    let mask = _mm512_set1_epi8(0x0F);
    (
        _mm512_ternarylogic_epi32::<0xE4>(v, q6_pairs(c, pairs[0], pairs[1]), mask),
        _mm512_ternarylogic_epi32::<0xE4>(
            _mm512_srli_epi16::<4>(v),
            q6_pairs(c, pairs[2], pairs[3]),
            mask,
        ),
    )
}

/// One chunk's low and high nibbles `lo`, `hi` as the values of nibble
/// kind `X`: MXFP4's codes through its table (`lut`, [`MXFP4_LUT`] in
/// every 128-bit lane: `vpshufb` looks up per lane), the 5-bit kinds' fifth
/// bits merged from the planes `hl`, `hh` (chunk `c`'s bits at bit 4 after
/// `c` one-bit shifts; 16-bit shifts keep bit 4 within its byte), which
/// move on to the next chunk's. Plain nibbles are returned as they are.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) fn nibble_values<const X: u8>(
    (mut lo, mut hi): (__m512i, __m512i),
    lut: __m512i,
    (hl, hh): (&mut __m512i, &mut __m512i),
) -> (__m512i, __m512i) {
    if X == NIB_LUT {
        lo = _mm512_shuffle_epi8(lut, lo);
        hi = _mm512_shuffle_epi8(lut, hi);
    }
    if X == NIB_FIVE {
        let bit4 = _mm512_set1_epi8(0x10);
        // a | (b & c): truth table 0xF8.
        lo = _mm512_ternarylogic_epi32::<0xF8>(lo, *hl, bit4);
        hi = _mm512_ternarylogic_epi32::<0xF8>(hi, *hh, bit4);
        *hl = _mm512_srli_epi16::<1>(*hl);
        *hh = _mm512_srli_epi16::<1>(*hh);
    }
    (lo, hi)
}

/// The 4 activation bytes at `p`, broadcast to every i32 lane.
///
/// # Safety
/// `p` must point to 4 readable bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn bcast4(p: *const i8) -> __m512i {
    // SAFETY: forwarded from the caller.
    _mm512_set1_epi32(unsafe { p.cast::<i32>().read_unaligned() })
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn q4_step_bw(s: __m512i, lo: __m512i, xl: __m512i, hi: __m512i, xh: __m512i) -> __m512i {
    let p = _mm512_add_epi16(_mm512_maddubs_epi16(lo, xl), _mm512_maddubs_epi16(hi, xh));
    _mm512_add_epi16(s, p)
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn q4_finish_bw(s: __m512i) -> __m512i {
    _mm512_madd_epi16(s, _mm512_set1_epi16(1))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn i8_step_bw(s: __m512i, aw: __m512i, sx: __m512i) -> __m512i {
    let p = _mm512_madd_epi16(_mm512_maddubs_epi16(aw, sx), _mm512_set1_epi16(1));
    _mm512_add_epi32(s, p)
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,avx512vnni")]
fn q4_step_vnni(s: __m512i, lo: __m512i, xl: __m512i, hi: __m512i, xh: __m512i) -> __m512i {
    _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(s, lo, xl), hi, xh)
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,avx512vnni")]
fn q4_finish_vnni(s: __m512i) -> __m512i {
    s
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,avx512vnni")]
fn i8_step_vnni(s: __m512i, aw: __m512i, sx: __m512i) -> __m512i {
    _mm512_dpbusd_epi32(s, aw, sx)
}

/// 16 f32 values from the 16 f16 bits at `p` (`vcvtph2ps`, exact).
///
/// # Safety
/// `p` must point to 16 readable values.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn f16x16(p: *const u16) -> __m512 {
    // SAFETY: forwarded from the caller.
    _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(p.cast()) })
}

/// 16 signed byte codes at `p` as f32 (`vpmovsxbd`, `vcvtdq2ps`; exact).
///
/// # Safety
/// `p` must point to 16 readable bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn codes16(p: *const u8) -> __m512 {
    // SAFETY: forwarded from the caller.
    let c = unsafe { _mm_loadu_si128(p.cast()) };
    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c))
}

/// The f32 values of E8M0 codes in i32 lanes (0..255), exactly
/// `e8m0_to_f32_half`: bits `(e − 1) << 23`, or for the two subnormal
/// codes 0 and 1 `0x0020_0000 << e`, blended on `e < 2`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn e8m0_ps(e: __m512i) -> __m512 {
    let normal = _mm512_slli_epi32::<23>(_mm512_sub_epi32(e, _mm512_set1_epi32(1)));
    let sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x0020_0000), e);
    let small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
    _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, sub))
}

/// The 16 scales of group block `gb` as f32: f16 bits widened
/// ([`SC_F16`]), E8M0 bytes decoded ([`SC_E8M0`]), or sub-block codes times
/// the block's super-scales `sup` ([`SC_KSUB`]).
///
/// # Safety
/// The job's streams for `SC` hold block `gb` (interleave 16).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub(super) unsafe fn scales<const SC: u8>(job: &Job<'_>, gb: usize, sup: __m512) -> __m512 {
    let at = gb * 16;
    // SAFETY: forwarded from the caller.
    unsafe {
        match SC {
            SC_F16 => f16x16(job.sc.dh.as_ptr().add(at)),
            SC_E8M0 => {
                let e = _mm_loadu_si128(job.sc.dc.as_ptr().add(at).cast());
                e8m0_ps(_mm512_cvtepu8_epi32(e))
            }
            _ => _mm512_mul_ps(codes16(job.sc.dc.as_ptr().add(at)), sup),
        }
    }
}

/// The 16 second values (mins, Q6_K's upper-half scales) of group block
/// `gb`: f16 bits ([`SC_F16`]) or codes times the super-scales `sup`.
///
/// # Safety
/// As for [`scales`], for a kind with second values.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub(super) unsafe fn seconds<const SC: u8>(job: &Job<'_>, gb: usize, sup: __m512) -> __m512 {
    let at = gb * 16;
    // SAFETY: forwarded from the caller.
    unsafe {
        match SC {
            SC_F16 => f16x16(job.sc.mh.as_ptr().add(at)),
            _ => _mm512_mul_ps(codes16(job.sc.mc.as_ptr().add(at)), sup),
        }
    }
}

/// The super-scales (`sd`, `sm`) of group block `gb` ([`SC_KSUB`]; zero
/// otherwise), widened once per super-block by the tiles.
///
/// # Safety
/// As for [`scales`].
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub(super) unsafe fn supers<const SC: u8>(job: &Job<'_>, gb: usize) -> (__m512, __m512) {
    if SC != SC_KSUB {
        return (_mm512_setzero_ps(), _mm512_setzero_ps());
    }
    let at = gb / 8 * 16;
    // SAFETY: forwarded from the caller.
    unsafe {
        (
            f16x16(job.sc.sd.as_ptr().add(at)),
            f16x16(job.sc.sm.as_ptr().add(at)),
        )
    }
}

/// Generates the Q4 and int8 tiles and the dispatching entry for one
/// feature set and its step functions.
macro_rules! tiles {
    ($feat:literal, $q4step:ident, $q4fin:ident, $i8step:ident, $i8bias:expr, $q4:ident, $i8:ident, $entry:ident) => {
        /// Q4_0 (`MIN = false`) or Q4_1 (`MIN = true`) tile, interleave
        /// 16; `X` [`NIB`], or [`NIB_FIVE`] for Q5_0 / Q5_1 (nibbles plus the
        /// fifth-bit plane), or [`NIB_LUT`] for MXFP4 (`MIN = false`; codes
        /// through [`MXFP4_LUT`]), or [`NIB_SIX`] for Q6_K (`MIN = false`;
        /// nibbles plus the planes of bit pairs, 0..63, one sum and
        /// scale per half). `SC`: how the scales are stored ([`SC_F16`],
        /// [`SC_E8M0`], [`SC_KSUB`]).
        ///
        /// # Safety
        /// Needs the features above; `g` a group of the job, rows
        /// `i0 .. i0 + MR` inside its activations, `out` ≥ `MR · 16`.
        #[target_feature(enable = $feat)]
        unsafe fn $q4<const MR: usize, const MIN: bool, const X: u8, const SC: u8>(
            job: &Job<'_>,
            g: usize,
            i0: usize,
            out: &mut [f32],
        ) {
            let nb = job.nb;
            debug_assert!(job.nr == 16 && out.len() >= MR * 16);
            debug_assert!(job.acts.len() >= (i0 + MR) * nb);
            let mask = _mm512_set1_epi8(0x0F);
            let (five, six) = (X == NIB_FIVE, X == NIB_SIX);
            // MXFP4's table for [`nibble_values`].
            // SAFETY: the table is 16 bytes.
            let lut = _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(MXFP4_LUT.as_ptr().cast()) });
            // Bytes per block: 16 rows × (4 bytes per plane + 16 nibble bytes).
            let planes = 64 * (five as usize + 2 * six as usize);
            let bs = planes + 256;
            let mut acc = [_mm512_setzero_ps(); MR];
            // SAFETY (pointer offsets below): group g has nb blocks of
            // 16 scales (and mins) and bs quant bytes; rows i0 + i < i0 + MR
            // each hold nb activation blocks.
            let (qb, ab) = unsafe {
                (
                    job.qs.as_ptr().add(g * nb * bs),
                    job.acts.as_ptr().add(i0 * nb),
                )
            };
            let (mut sdv, mut smv) = (_mm512_setzero_ps(), _mm512_setzero_ps());
            for b in 0..nb {
                let gb = g * nb + b;
                prefetch_scales::<SC, 16>(job, gb, MIN);
                if b % 8 == 0 {
                    // SAFETY: super-block b / 8 of group g (K-quants).
                    (sdv, smv) = unsafe { supers::<SC>(job, gb) };
                }
                if job.pf > 0 {
                    for l in 0..bs / 64 {
                        _mm_prefetch::<_MM_HINT_T0>(
                            qb.wrapping_add((b + job.pf) * bs + 64 * l).cast(),
                        );
                    }
                }
                // The fifth-bit plane, for the low nibbles moved up by 4
                // (bit c of each byte → bit 4 at chunk c after c right
                // shifts; 16-bit shifts keep bit 4 within its byte).
                let (mut hl, mut hh) = if five {
                    // SAFETY: the 64 plane bytes open block b.
                    let h = unsafe { _mm512_loadu_si512(qb.add(b * bs).cast()) };
                    (_mm512_slli_epi16::<4>(h), h)
                } else {
                    (_mm512_setzero_si512(), _mm512_setzero_si512())
                };
                // Q6_K's planes of bit pairs, low and high halves.
                let pairs = if six {
                    // SAFETY: the two planes of 64 bytes open block b.
                    unsafe { q6_planes(qb.add(b * bs)) }
                } else {
                    [_mm512_setzero_si512(); 4]
                };
                let mut s = [_mm512_setzero_si512(); MR];
                // Q6_K: sums of the high halves (values 16..32).
                let mut s2 = [_mm512_setzero_si512(); MR];
                // Sums of chunks 0 and 1 of 5-bit (and MXFP4's 0..24) values:
                // i16 would overflow over 4 chunks.
                let mut part = [_mm512_setzero_si512(); MR];
                for c in 0..4 {
                    // SAFETY: chunk c of block b (after its planes) is 64
                    // bytes inside the group.
                    let v = unsafe { _mm512_loadu_si512(qb.add(b * bs + planes + 64 * c).cast()) };
                    let (lo, hi) = if six {
                        q6_values(c, v, &pairs)
                    } else {
                        (
                            _mm512_and_si512(v, mask),
                            _mm512_and_si512(_mm512_srli_epi16::<4>(v), mask),
                        )
                    };
                    let (lo, hi) = nibble_values::<X>((lo, hi), lut, (&mut hl, &mut hh));
                    for (i, (si, s2i)) in s.iter_mut().zip(s2.iter_mut()).enumerate() {
                        // SAFETY: block b of row i0 + i; 4c + 16 + 4 <= 32.
                        let (xl, xh) = unsafe {
                            let xp = (*ab.add(i * nb + b)).qs.as_ptr();
                            (bcast4(xp.add(4 * c)), bcast4(xp.add(16 + 4 * c)))
                        };
                        if six {
                            // Values up to 63: i16 holds one chunk's
                            // products (4 · 63 · 127), so widen per chunk.
                            *si = $i8step(*si, lo, xl);
                            *s2i = $i8step(*s2i, hi, xh);
                        } else {
                            *si = $q4step(*si, lo, xl, hi, xh);
                        }
                    }
                    if (X == NIB_FIVE || X == NIB_LUT) && c == 1 {
                        for (p, si) in part.iter_mut().zip(s.iter_mut()) {
                            *p = $q4fin(*si);
                            *si = _mm512_setzero_si512();
                        }
                    }
                }
                // SAFETY: the 16 scales of block b.
                let dw = unsafe { scales::<SC>(job, gb, sdv) };
                for (i, a) in acc.iter_mut().enumerate() {
                    // SAFETY: block b of row i0 + i.
                    let x = unsafe { &*ab.add(i * nb + b) };
                    if six {
                        // Σ(u − 32)x per half; the halves' scales applied
                        // one after the other, as the scalar tile does.
                        let lo = _mm512_sub_epi32(s[i], _mm512_set1_epi32(32 * x.sum_lo()));
                        let hi = _mm512_sub_epi32(s2[i], _mm512_set1_epi32(32 * x.sum_hi()));
                        let dd = _mm512_mul_ps(dw, _mm512_set1_ps(x.d()));
                        *a = _mm512_add_ps(*a, _mm512_mul_ps(dd, _mm512_cvtepi32_ps(lo)));
                        // SAFETY: Q6_K jobs carry second codes shaped like the scales.
                        let mw = unsafe { seconds::<SC>(job, gb, smv) };
                        let dm = _mm512_mul_ps(mw, _mm512_set1_ps(x.d()));
                        *a = _mm512_add_ps(*a, _mm512_mul_ps(dm, _mm512_cvtepi32_ps(hi)));
                        continue;
                    }
                    let mut si = $q4fin(s[i]);
                    if X != NIB {
                        si = _mm512_add_epi32(part[i], si);
                    }
                    if !MIN {
                        let off = match X {
                            NIB_FIVE => 16,
                            NIB_LUT => 12,
                            _ => 8,
                        };
                        si = _mm512_sub_epi32(si, _mm512_set1_epi32(off * x.sum()));
                    }
                    let dd = _mm512_mul_ps(dw, _mm512_set1_ps(x.d()));
                    let mut t = _mm512_mul_ps(dd, _mm512_cvtepi32_ps(si));
                    if MIN {
                        // SAFETY: Q4_1/Q5_1 jobs carry mins shaped like the scales.
                        let mw = unsafe { seconds::<SC>(job, gb, smv) };
                        t = _mm512_add_ps(t, _mm512_mul_ps(mw, _mm512_set1_ps(x.s())));
                    }
                    *a = _mm512_add_ps(*a, t);
                }
            }
            for (i, a) in acc.iter().enumerate() {
                // SAFETY: out holds MR · 16 floats.
                unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(16 * i), *a) };
            }
        }

        /// Int8 tile (Q8_0), interleave 16. `SC` as for the Q4 tile.
        ///
        /// With VNNI (bias 128: `vpdpbusd` sums each four u8 × i8 products
        /// in i32, unsaturated), each chunk's weights become `w + 128`
        /// once for every row and a row's sums start at `−128·Σx`: one
        /// `vpxord` a chunk instead of the sign trick's masked `vpsubb`
        /// per row, 1.5× the GEMM (docs/PERF.md). Without VNNI (bias 0),
        /// `vpmaddubsw`'s i16 pairs would saturate (`255 · 128 · 2`), so
        /// the signs move onto the activations.
        ///
        /// # Safety
        /// As for the Q4 tile.
        #[target_feature(enable = $feat)]
        unsafe fn $i8<const MR: usize, const SC: u8>(
            job: &Job<'_>,
            g: usize,
            i0: usize,
            out: &mut [f32],
        ) {
            let nb = job.nb;
            debug_assert!(job.nr == 16 && out.len() >= MR * 16);
            debug_assert!(job.acts.len() >= (i0 + MR) * nb);
            let mut acc = [_mm512_setzero_ps(); MR];
            // SAFETY: as in the Q4 tile, with 512 quant bytes per block.
            let (qb, ab) = unsafe {
                (
                    job.qs.as_ptr().add(g * nb * 512),
                    job.acts.as_ptr().add(i0 * nb),
                )
            };
            let mut sdv = _mm512_setzero_ps();
            for b in 0..nb {
                let gb = g * nb + b;
                prefetch_scales::<SC, 16>(job, gb, false);
                if b % 8 == 0 {
                    // SAFETY: super-block b / 8 of group g (K-quants).
                    sdv = unsafe { supers::<SC>(job, gb).0 };
                }
                if job.pf > 0 {
                    for l in 0..8 {
                        _mm_prefetch::<_MM_HINT_T0>(
                            qb.wrapping_add((b + job.pf) * 512 + 64 * l).cast(),
                        );
                    }
                }
                // SAFETY: block b of row i0 + i.
                let mut s: [__m512i; MR] = std::array::from_fn(|i| {
                    _mm512_set1_epi32(-$i8bias * unsafe { (*ab.add(i * nb + b)).sum() })
                });
                // SAFETY: the 16 scales of block b.
                let dw = unsafe { scales::<SC>(job, gb, sdv) };
                for c in 0..8 {
                    // SAFETY: chunk c of block b is 64 bytes inside the group.
                    let w = unsafe { _mm512_loadu_si512(qb.add(b * 512 + 64 * c).cast()) };
                    let (aw, neg) = if $i8bias == 0 {
                        (_mm512_abs_epi8(w), _mm512_movepi8_mask(w))
                    } else {
                        (_mm512_xor_si512(w, _mm512_set1_epi8(-$i8bias as i8)), 0)
                    };
                    for (i, si) in s.iter_mut().enumerate() {
                        // SAFETY: block b of row i0 + i; 4c + 4 <= 32.
                        let xb = unsafe { bcast4((*ab.add(i * nb + b)).qs.as_ptr().add(4 * c)) };
                        let sx = if $i8bias == 0 {
                            _mm512_mask_sub_epi8(xb, neg, _mm512_setzero_si512(), xb)
                        } else {
                            xb
                        };
                        *si = $i8step(*si, aw, sx);
                    }
                }
                for (i, a) in acc.iter_mut().enumerate() {
                    // SAFETY: block b of row i0 + i.
                    let x = unsafe { &*ab.add(i * nb + b) };
                    let dd = _mm512_mul_ps(dw, _mm512_set1_ps(x.d()));
                    let t = _mm512_mul_ps(dd, _mm512_cvtepi32_ps(s[i]));
                    *a = _mm512_add_ps(*a, t);
                }
            }
            for (i, a) in acc.iter().enumerate() {
                // SAFETY: out holds MR · 16 floats.
                unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(16 * i), *a) };
            }
        }

        /// Rows `i0 .. i0 + mr` (mr ∈ 1, 2, 4, 8) × group `g`.
        ///
        /// # Safety
        /// Needs the features above; the job has interleave 16; shapes as
        /// the driver guarantees.
        pub(super) unsafe fn $entry(
            job: &Job<'_>,
            g: usize,
            i0: usize,
            mr: usize,
            out: &mut [f32],
        ) {
            // SAFETY (all arms): forwarded from the caller.
            unsafe {
                match (job.kind, job.sc.mode) {
                    (Kind::Q4_0, SC_F16) => by_mr!(mr, $q4::<false, NIB, SC_F16>(job, g, i0, out)),
                    (Kind::Q4_1, SC_F16) => by_mr!(mr, $q4::<true, NIB, SC_F16>(job, g, i0, out)),
                    (Kind::Q4_1, SC_KSUB) => by_mr!(mr, $q4::<true, NIB, SC_KSUB>(job, g, i0, out)),
                    (Kind::Q5_0, SC_F16) => {
                        by_mr!(mr, $q4::<false, NIB_FIVE, SC_F16>(job, g, i0, out))
                    }
                    (Kind::Q5_1, SC_F16) => {
                        by_mr!(mr, $q4::<true, NIB_FIVE, SC_F16>(job, g, i0, out))
                    }
                    (Kind::Q5_1, SC_KSUB) => {
                        by_mr!(mr, $q4::<true, NIB_FIVE, SC_KSUB>(job, g, i0, out))
                    }
                    (Kind::Mxfp4, SC_E8M0) => {
                        by_mr!(mr, $q4::<false, NIB_LUT, SC_E8M0>(job, g, i0, out))
                    }
                    (Kind::Q6K, SC_KSUB) => {
                        by_mr!(mr, $q4::<false, NIB_SIX, SC_KSUB>(job, g, i0, out))
                    }
                    (Kind::I8, SC_F16) => by_mr!(mr, $i8::<SC_F16>(job, g, i0, out)),
                    // No format packs these (see `pack::scale_mode`); the
                    // scalar tile reads every scale mode.
                    _ => super::scalar::tile(job, g, i0, mr, out),
                }
            }
        }
    };
}

tiles!(
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c",
    q4_step_bw,
    q4_finish_bw,
    i8_step_bw,
    0,
    q4_bw,
    i8_bw,
    tile
);

tiles!(
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,avx512vnni",
    q4_step_vnni,
    q4_finish_vnni,
    i8_step_vnni,
    I8_BIAS,
    q4_vnni,
    i8_vnni,
    tile_vnni
);

/// What `vpdpbusd` (u8 × i8) reads for an int8 weight `w` (Q8_0): the
/// byte `w + 128`, a flip of its sign bit, so a row's sums start at
/// `−128·Σx`. The register tile flips each chunk as it loads it, the
/// panel fill once per call.
const I8_BIAS: i32 = 128;

/// [`panel_vnni`]'s scaling: one scale per block and an offset, a scale
/// and a min ([`MINS`]), or a scale per half-block ([`HALVES`], Q6_K).
const OFFSET: u8 = 0;
const MINS: u8 = 1;
const HALVES: u8 = 2;

/// VNNI tile over a panel ([`fill_panel`]): the register tile's sums and
/// scaling without its unpacking. Each row's sums start at its offset
/// `−off·Σx` (Q4_0 8, Q5_0 16, MXFP4 12, Q8_0's bias 128; 0 for the kinds
/// with a min); Q6_K's two halves sum apart, from `−32·Σx` of each half.
/// So a block costs a row its 8 `vpdpbusd` and the scaling. (Without
/// VNNI the i16 sums need the offset after widening, and the panel
/// measured no faster there: docs/PERF.md, "the panel on AVX-512".)
///
/// # Safety
/// Needs AVX-512 F/BW and VNNI; the panel filled for `nb` blocks (with
/// second values unless `MODE` is [`OFFSET`]); rows `i0 .. i0 + MR`
/// inside `acts` (`nb` blocks per row); `out` ≥ `MR · 16`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,avx512vnni")]
unsafe fn panel_vnni<const MR: usize, const MODE: u8>(
    acts: &[ActBlock],
    nb: usize,
    panel: *const u8,
    (i0, off): (usize, i32),
    out: &mut [f32],
) {
    debug_assert!(out.len() >= MR * 16);
    debug_assert!(acts.len() >= (i0 + MR) * nb);
    let halves = MODE == HALVES;
    let mut acc = [_mm512_setzero_ps(); MR];
    // SAFETY: rows i0 + i < i0 + MR each hold nb blocks.
    let ab = unsafe { acts.as_ptr().add(i0 * nb) };
    for b in 0..nb {
        // SAFETY: block b of the panel.
        let pb = unsafe { panel.add(b * zmm_panel_block(MODE != OFFSET)) };
        let start = |i: usize, hi: bool| {
            // SAFETY: block b of row i0 + i.
            let x = unsafe { &*ab.add(i * nb + b) };
            let sum = match (halves, hi) {
                (false, _) => x.sum(),
                (true, false) => x.sum_lo(),
                (true, true) => x.sum_hi(),
            };
            _mm512_set1_epi32(-off * sum)
        };
        let mut s: [__m512i; MR] = std::array::from_fn(|i| start(i, false));
        let mut s2: [__m512i; MR] = if halves {
            std::array::from_fn(|i| start(i, true))
        } else {
            [_mm512_setzero_si512(); MR]
        };
        for c in 0..4 {
            // SAFETY: values 4c.. and 16 + 4c.. of the panel's block b
            // (aligned).
            let (wl, wh) = unsafe {
                (
                    _mm512_load_si512(pb.add(64 * c).cast()),
                    _mm512_load_si512(pb.add(256 + 64 * c).cast()),
                )
            };
            for (i, (si, s2i)) in s.iter_mut().zip(s2.iter_mut()).enumerate() {
                // SAFETY: block b of row i0 + i; 4c + 16 + 4 <= 32.
                let (xl, xh) = unsafe {
                    let xp = (*ab.add(i * nb + b)).qs.as_ptr();
                    (bcast4(xp.add(4 * c)), bcast4(xp.add(16 + 4 * c)))
                };
                if halves {
                    *si = i8_step_vnni(*si, wl, xl);
                    *s2i = i8_step_vnni(*s2i, wh, xh);
                } else {
                    *si = q4_step_vnni(*si, wl, xl, wh, xh);
                }
            }
        }
        // SAFETY: the panel's scales (and second values) of block b
        // (aligned).
        let (dw, mw) = unsafe {
            (
                _mm512_load_ps(pb.add(512).cast()),
                if MODE == OFFSET {
                    _mm512_setzero_ps()
                } else {
                    _mm512_load_ps(pb.add(576).cast())
                },
            )
        };
        for (i, a) in acc.iter_mut().enumerate() {
            // SAFETY: block b of row i0 + i.
            let x = unsafe { &*ab.add(i * nb + b) };
            let dd = _mm512_mul_ps(dw, _mm512_set1_ps(x.d()));
            let mut t = _mm512_mul_ps(dd, _mm512_cvtepi32_ps(s[i]));
            if halves {
                // The halves' scales one after the other, as the register
                // tile applies them.
                *a = _mm512_add_ps(*a, t);
                let dm = _mm512_mul_ps(mw, _mm512_set1_ps(x.d()));
                t = _mm512_mul_ps(dm, _mm512_cvtepi32_ps(s2[i]));
            } else if MODE == MINS {
                t = _mm512_add_ps(t, _mm512_mul_ps(mw, _mm512_set1_ps(x.s())));
            }
            *a = _mm512_add_ps(*a, t);
        }
    }
    for (i, a) in acc.iter().enumerate() {
        // SAFETY: out holds MR · 16 floats.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(16 * i), *a) };
    }
}

/// Rows `i0 .. i0 + mr` (mr ∈ 1, 2, 4, 8) × the panel's 16 columns.
///
/// # Safety
/// As for [`panel_vnni`], the panel filled by [`fill_panel`]`::<true>`
/// for the job.
pub(super) unsafe fn panel_tile(
    job: &Job<'_>,
    panel: *const u8,
    i0: usize,
    mr: usize,
    out: &mut [f32],
) {
    let (a, nb) = (job.acts, job.nb);
    let at = (
        i0,
        if job.kind == Kind::I8 {
            I8_BIAS
        } else {
            job.kind.offset()
        },
    );
    macro_rules! by_mr {
        ($mode:expr) => {
            match mr {
                8 => panel_vnni::<8, { $mode }>(a, nb, panel, at, out),
                4 => panel_vnni::<4, { $mode }>(a, nb, panel, at, out),
                2 => panel_vnni::<2, { $mode }>(a, nb, panel, at, out),
                _ => panel_vnni::<1, { $mode }>(a, nb, panel, at, out),
            }
        };
    }
    // SAFETY (all arms): forwarded from the caller.
    unsafe {
        match job.kind {
            Kind::Q4_1 | Kind::Q5_1 => by_mr!(MINS),
            Kind::Q6K => by_mr!(HALVES),
            _ => by_mr!(OFFSET),
        }
    }
}

/// [`fill`]'s `X` for int8 values (Q8_0), beside the nibble kinds' `X`.
const INT8: u8 = u8::MAX;

/// Unpacks group `g` (16 columns) of `job` into `panel`, once for every
/// row tile of the call: `X` the values' kind ([`NIB`], [`NIB_FIVE`],
/// [`NIB_LUT`], [`NIB_SIX`] or [`INT8`]), `MIN` whether the format has a
/// min, `SC` how its scales are stored. Block `b` (`zmm_panel_block`
/// bytes) is 8 rows of 64 bytes, row `r` holding values `4r .. 4r + 4` of
/// the block for each of the 16 columns (4 bytes per column), then the 16
/// scales as f32, then (the kinds with a min, and Q6_K) the 16 second
/// values: the register tiles' own f32 values ([`scales`], [`seconds`]).
/// `UNSIGNED`: the codes as they are (Q8_0's biased by 128), the operands
/// `vpdpbusd` takes unsigned; else the codes less their offsets (Q8_0's
/// as they are), AMX's signed ones.
///
/// # Safety
/// Needs AVX-512 F/BW; `job` of the kind `X`, `MIN` and `SC` describe at
/// interleave 16, `g` one of its groups; `panel` holds `nb` blocks,
/// 64-byte aligned.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn fill<const X: u8, const MIN: bool, const SC: u8, const UNSIGNED: bool>(
    job: &Job<'_>,
    g: usize,
    panel: *mut u8,
) {
    debug_assert!(job.nr == 16);
    let nb = job.nb;
    let five = X == NIB_FIVE;
    let mask = _mm512_set1_epi8(0x0F);
    // MXFP4's table for [`nibble_values`]. SAFETY: the table is 16 bytes.
    let lut = _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(MXFP4_LUT.as_ptr().cast()) });
    // What each stored byte is less: the kind's offset for signed nibble
    // values, −[`I8_BIAS`] for unsigned int8 ones (a flip of the sign bit).
    let off = _mm512_set1_epi8(match (X == INT8, UNSIGNED) {
        (true, true) => -I8_BIAS as i8,
        (false, false) => job.kind.offset() as i8,
        _ => 0,
    });
    let six = X == NIB_SIX;
    // Bytes per block: the int8 values, or the bit planes (the fifth
    // bits; Q6_K's two of bit pairs) and the nibbles.
    let planes = 64 * (five as usize + 2 * six as usize);
    let bs = if X == INT8 { 512 } else { planes + 256 };
    // Scales, then second values (mins, Q6_K's upper-half scales).
    let seconds_too = MIN || six;
    // SAFETY: group g holds nb blocks of bs quant bytes.
    let qb = unsafe { job.qs.as_ptr().add(g * nb * bs) };
    let (mut sdv, mut smv) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    for b in 0..nb {
        let gb = g * nb + b;
        if b % 8 == 0 {
            // SAFETY: super-block b / 8 of group g (K-quants).
            (sdv, smv) = unsafe { supers::<SC>(job, gb) };
        }
        if job.pf > 0 {
            for l in 0..bs / 64 {
                _mm_prefetch::<_MM_HINT_T0>(qb.wrapping_add((b + job.pf) * bs + 64 * l).cast());
            }
        }
        // SAFETY: block b of group g is bs bytes at qb + b·bs; the stores
        // stay inside block b of the panel (values at 0..512, scales at
        // 512, mins at 576); the scales (and mins) of block gb.
        unsafe {
            let (q, pb) = (qb.add(b * bs), panel.add(b * zmm_panel_block(seconds_too)));
            if X == INT8 {
                // The packed chunks are the panel's rows already.
                for c in 0..8 {
                    let v = _mm512_loadu_si512(q.add(64 * c).cast());
                    _mm512_store_si512(pb.add(64 * c).cast(), _mm512_sub_epi8(v, off));
                }
            } else {
                // The fifth-bit plane, moved to bit 4 chunk by chunk as
                // the register tiles move it.
                let (mut hl, mut hh) = if five {
                    let h = _mm512_loadu_si512(q.cast());
                    (_mm512_slli_epi16::<4>(h), h)
                } else {
                    (_mm512_setzero_si512(), _mm512_setzero_si512())
                };
                // Q6_K's planes of bit pairs, low and high halves.
                let pairs = if six {
                    q6_planes(q)
                } else {
                    [_mm512_setzero_si512(); 4]
                };
                for c in 0..4 {
                    let v = _mm512_loadu_si512(q.add(planes + 64 * c).cast());
                    let (lo, hi) = if six {
                        q6_values(c, v, &pairs)
                    } else {
                        nibble_values::<X>(
                            (
                                _mm512_and_si512(v, mask),
                                _mm512_and_si512(_mm512_srli_epi16::<4>(v), mask),
                            ),
                            lut,
                            (&mut hl, &mut hh),
                        )
                    };
                    _mm512_store_si512(pb.add(64 * c).cast(), _mm512_sub_epi8(lo, off));
                    _mm512_store_si512(pb.add(256 + 64 * c).cast(), _mm512_sub_epi8(hi, off));
                }
            }
            _mm512_store_ps(pb.add(512).cast(), scales::<SC>(job, gb, sdv));
            if seconds_too {
                _mm512_store_ps(pb.add(576).cast(), seconds::<SC>(job, gb, smv));
            }
        }
    }
}

/// Unpacks group `g` of `job` into `panel` ([`fill`] for its kind and
/// scales; `UNSIGNED` for the VNNI tile, signed for AMX's).
///
/// # Safety
/// Needs AVX-512 F/BW; `job` at interleave 16 of a format with a panel
/// (`super::panels`), `g` one of its groups; `panel` holds `nb` blocks,
/// 64-byte aligned.
pub(super) unsafe fn fill_panel<const UNSIGNED: bool>(job: &Job<'_>, g: usize, panel: *mut u8) {
    // SAFETY (all arms): forwarded from the caller, each arm the kind and
    // scale mode it was packed with.
    unsafe {
        match (job.kind, job.sc.mode) {
            (Kind::Q4_0, SC_F16) => fill::<NIB, false, SC_F16, UNSIGNED>(job, g, panel),
            (Kind::Q4_1, SC_F16) => fill::<NIB, true, SC_F16, UNSIGNED>(job, g, panel),
            (Kind::Q4_1, SC_KSUB) => fill::<NIB, true, SC_KSUB, UNSIGNED>(job, g, panel),
            (Kind::Q5_0, SC_F16) => fill::<NIB_FIVE, false, SC_F16, UNSIGNED>(job, g, panel),
            (Kind::Q5_1, SC_F16) => fill::<NIB_FIVE, true, SC_F16, UNSIGNED>(job, g, panel),
            (Kind::Q5_1, SC_KSUB) => fill::<NIB_FIVE, true, SC_KSUB, UNSIGNED>(job, g, panel),
            (Kind::Mxfp4, SC_E8M0) => fill::<NIB_LUT, false, SC_E8M0, UNSIGNED>(job, g, panel),
            (Kind::I8, SC_F16) => fill::<INT8, false, SC_F16, UNSIGNED>(job, g, panel),
            (Kind::Q6K, SC_KSUB) => fill::<NIB_SIX, false, SC_KSUB, UNSIGNED>(job, g, panel),
            (kind, mode) => unreachable!("no panel for {kind:?} with scale mode {mode}"),
        }
    }
}

/// Quantizes `x` (32 values per block of `out`) exactly as
/// `legacy::quantize_q8_1` does, sixteen blocks at a time
/// ([`quantize_act_16`]); the last `out.len() % 16` blocks with the AVX2
/// row quantizer (the same bytes).
///
/// # Safety
/// Needs AVX-512 F/BW/VL/DQ.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub(super) unsafe fn quantize_act_row(x: &[f32], out: &mut [ActBlock]) {
    let mut chunks = out.chunks_exact_mut(16);
    let mut xs = x.chunks_exact(16 * 32);
    for (o, x) in (&mut chunks).zip(&mut xs) {
        // SAFETY: forwarded from the caller.
        unsafe {
            quantize_act_16(
                x.try_into().expect("16 blocks"),
                o.try_into().expect("16 blocks"),
            )
        };
    }
    // SAFETY: AVX-512 here implies AVX2, FMA and F16C.
    unsafe { super::avx2::quantize_act_row(xs.remainder(), chunks.into_remainder()) };
}

/// The `vpermt2d` indices of one step of a transposed reduction: `p` and
/// `q` each hold `16 / l` groups of `l` lanes; the step's result holds
/// twice the groups (`p`'s, then `q`'s) of `l / 2` lanes, each the first
/// half of its group combined with the second (`first` picks the first
/// halves, `!first` the second).
const fn halves(l: usize, first: bool) -> [i32; 16] {
    let (h, groups) = (l / 2, 16 / l);
    let mut idx = [0i32; 16];
    let mut lane = 0;
    while lane < 16 {
        let (g, t) = (lane / h, lane % h);
        let from = if g < groups {
            g * l
        } else {
            16 + (g - groups) * l
        };
        idx[lane] = (from + t + if first { 0 } else { h }) as i32;
        lane += 1;
    }
    idx
}

/// One step of a transposed reduction (see [`halves`]) with `op`, on
/// groups of `L` lanes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn fold<const L: usize>(
    p: __m512i,
    q: __m512i,
    op: impl Fn(__m512i, __m512i) -> __m512i,
) -> __m512i {
    // SAFETY: the index arrays are 16 i32 (one zmm), read unaligned.
    let (a, b) = unsafe {
        (
            _mm512_loadu_si512(const { halves(L, true) }.as_ptr().cast()),
            _mm512_loadu_si512(const { halves(L, false) }.as_ptr().cast()),
        )
    };
    op(
        _mm512_permutex2var_epi32(p, a, q),
        _mm512_permutex2var_epi32(p, b, q),
    )
}

/// Sixteen vectors reduced lane-wise with `op` to one whose lane `j` is
/// `op` over vector `j`'s lanes: four steps of [`fold`] (15 pairs), where
/// sixteen separate reductions would take 4 dependent shuffle steps each.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn reduce_16(v: [__m512i; 16], op: impl Fn(__m512i, __m512i) -> __m512i + Copy) -> __m512i {
    let v8: [__m512i; 8] = std::array::from_fn(|i| fold::<16>(v[2 * i], v[2 * i + 1], op));
    let v4: [__m512i; 4] = std::array::from_fn(|i| fold::<8>(v8[2 * i], v8[2 * i + 1], op));
    let v2: [__m512i; 2] = std::array::from_fn(|i| fold::<4>(v4[2 * i], v4[2 * i + 1], op));
    fold::<2>(v2[0], v2[1], op)
}

/// Sixteen activation blocks quantized as `legacy::quantize_q8_1`
/// quantizes each (`d = amax / 127`, `q = round(x · (1/d))`, [`quant16`]):
/// the maxima and the quants' sums are reduced for all sixteen at once,
/// `d` and `1/d` are one division each, and `d` and `s` are rounded to f16
/// as one vector. A block's own chain of reductions, divisions and
/// conversions is too long for the core to overlap with the next block's
/// (docs/PERF.md, "the activations' quantization, sixteen blocks at a
/// time").
///
/// # Safety
/// Needs AVX-512 F/BW/VL/DQ.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn quantize_act_16(x: &[f32; 512], out: &mut [ActBlock; 16]) {
    let at = |j: usize, h: usize| {
        // SAFETY: j < 16, h < 2: floats 32j + 16h .. + 16 of x.
        unsafe { _mm512_loadu_ps(x.as_ptr().add(32 * j + 16 * h)) }
    };
    let imax = |a: __m512i, b: __m512i| {
        _mm512_castps_si512(_mm512_max_ps(
            _mm512_castsi512_ps(a),
            _mm512_castsi512_ps(b),
        ))
    };
    let amax = reduce_16(
        std::array::from_fn(|j| {
            _mm512_castps_si512(_mm512_max_ps(
                _mm512_abs_ps(at(j, 0)),
                _mm512_abs_ps(at(j, 1)),
            ))
        }),
        imax,
    );
    let d = _mm512_div_ps(_mm512_castsi512_ps(amax), _mm512_set1_ps(127.0));
    let nonzero = _mm512_cmp_ps_mask::<_CMP_NEQ_OQ>(d, _mm512_setzero_ps());
    let mut id = [0f32; 16];
    // SAFETY: id holds 16 floats.
    unsafe {
        _mm512_storeu_ps(
            id.as_mut_ptr(),
            _mm512_maskz_div_ps(nonzero, _mm512_set1_ps(1.0), d),
        )
    };
    // Each block's two halves of quants, summed to 8 lanes each (the first
    // step of `reduce_16`, pairing a block's halves) as they are made.
    let block_sums: [__m512i; 16] = std::array::from_fn(|j| {
        let idj = _mm512_set1_ps(id[j]);
        let (qa, qb) = (quant16(at(j, 0), idj), quant16(at(j, 1), idj));
        // SAFETY: block j's 32 quant bytes, 16 per store (|q| ≤ 127
        // saturates to itself).
        unsafe {
            let qs = out[j].qs.as_mut_ptr();
            _mm_storeu_si128(qs.cast(), _mm512_cvtsepi32_epi8(qa));
            _mm_storeu_si128(qs.add(16).cast(), _mm512_cvtsepi32_epi8(qb));
        }
        fold::<16>(qa, qb, |a, b| _mm512_add_epi32(a, b))
    });
    // Lane 2j: block j's Σq of values 0..16, lane 2j + 1: of 16..32 (the
    // first vector blocks 0..8, the second 8..16).
    let add = |a, b| _mm512_add_epi32(a, b);
    let h4: [__m512i; 8] =
        std::array::from_fn(|i| fold::<8>(block_sums[2 * i], block_sums[2 * i + 1], add));
    let h2: [__m512i; 4] = std::array::from_fn(|i| fold::<4>(h4[2 * i], h4[2 * i + 1], add));
    let (first, second) = (fold::<2>(h2[0], h2[1], add), fold::<2>(h2[2], h2[3], add));
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let lo = _mm512_permutex2var_epi32(first, even, second);
    let hi = _mm512_permutex2var_epi32(first, _mm512_add_epi32(even, _mm512_set1_epi32(1)), second);
    let sum = _mm512_add_epi32(lo, hi);
    let s = _mm512_mul_ps(_mm512_cvtepi32_ps(sum), d);
    // Rounded to f16 to nearest even (as `half` rounds) and widened back.
    let f16 = |v: __m512| _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v));
    let mut fields = [[0u8; 64]; 4];
    // SAFETY: each field row holds 16 4-byte values.
    unsafe {
        _mm512_storeu_ps(fields[0].as_mut_ptr().cast(), f16(d));
        _mm512_storeu_ps(fields[1].as_mut_ptr().cast(), f16(s));
        _mm512_storeu_si512(fields[2].as_mut_ptr().cast(), sum);
        _mm512_storeu_si512(fields[3].as_mut_ptr().cast(), lo);
    }
    for (j, o) in out.iter_mut().enumerate() {
        let field =
            |f: usize| -> [u8; 4] { fields[f][4 * j..4 * j + 4].try_into().expect("4 bytes") };
        (o.d, o.s, o.sum, o.sum_lo) = (field(0), field(1), field(2), field(3));
    }
}

/// The quants of 16 values scaled by `id`: `round(x · id)` with Rust's
/// `round` (half away from zero), as `legacy::quantize_q8_1` rounds (a
/// libm call on baseline x86-64: a tenth of a prefill profile with the
/// loop around it). `vrndscaleps` has no half-away mode, so each
/// product is truncated and moved one step away from zero where the
/// dropped fraction is at least 0.5 (`v − trunc(v)` is exact); finite
/// inputs.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn quant16(x: __m512, id: __m512) -> __m512i {
    let v = _mm512_mul_ps(x, id);
    let t = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(v);
    let half =
        _mm512_cmp_ps_mask::<_CMP_GE_OQ>(_mm512_abs_ps(_mm512_sub_ps(v, t)), _mm512_set1_ps(0.5));
    // ±1 with the sign of v.
    let step = _mm512_or_ps(_mm512_and_ps(v, _mm512_set1_ps(-0.0)), _mm512_set1_ps(1.0));
    _mm512_cvtps_epi32(_mm512_mask_add_ps(t, half, t, step))
}
