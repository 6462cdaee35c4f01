//! AVX2 and AVX-VNNI micro-kernels over interleave 8 or 16: one ymm holds 4
//! quant bytes of each of 8 weight rows, so its 8 i32 lanes are 8 columns
//! of C; at interleave 16 a chunk is two such ymm (`V` = 2), and each
//! activation broadcast serves both: one broadcast per two `vpmaddubsw`
//! instead of one each, paid for in registers (the 8-row tile's sums and
//! accumulators spill). Which is faster depends on the format and the
//! core, so both are tuner candidates (docs/PERF.md, "two ymm per chunk").
//!
//! For Q4_0 prefill there is also a panel tile ([`panel_tile`]): each 16
//! columns are unpacked once per call into a per-worker panel (signed
//! values, column offsets, f32 scales) that every row tile reads, with
//! the activations biased to unsigned once. Its 16 columns give two
//! `vpmaddubsw` per broadcast at either packing, which is what pays here:
//! the register tile at interleave 8 is bound by loads (a broadcast per
//! `vpmaddubsw`), not by the unpacking the panel saves (docs/PERF.md, "the
//! panel tile").
//!
//! Per block and 4-byte chunk the weight vector is loaded (and, for the
//! 4- and 5-bit formats, split into low and high nibbles) once, then
//! multiplied by the broadcast 4 activation bytes of each of the `MR` rows.
//! The 5-bit kinds OR each nibble vector with its fifth bits: the block's
//! bit-sliced plane (one ymm) shifted so chunk c's bit sits at bit 4, then
//! masked (shift, AND, OR per half); MXFP4's nibble codes go through a
//! 16-entry `vpshufb` table to unsigned values. Unsigned values feed
//! `vpmaddubsw` (u8 × i8) directly; signed int8 weights use the sign trick
//! (`|w|` × `sign(x, w)`). Without VNNI the nibble products of a whole block are
//! summed in i16 (≤ 8 · 2 · 15 · 128 < 2¹⁵, so no saturation) before one
//! `vpmaddwd`; 5-bit (and MXFP4's 0..24) products only over two chunks at
//! a time (≤ 4 · 2 · 31 · 128 < 2¹⁵); Q6_K's 6-bit products (one chunk
//! per half: ≤ 4 · 63 · 127) and int8 products go to i32 per chunk. Q6_K's
//! planes of bit pairs (one per half) are shifted per chunk so the chunk's
//! pair lands at bits 4 and 5, then masked and ORed in.
//! Each block's i32 sums are converted and scaled with separately rounded
//! multiplies and adds, as the scalar micro-kernel does (bit-equal results);
//! Q6_K's two half-block sums are scaled and added one after the other. The
//! scales are decoded in registers from the pack's codes (f16 by
//! `vcvtph2ps`; E8M0 bytes by building the f32 bits; K-quant sub-block
//! codes sign-extended, converted and multiplied by the super-scales,
//! widened once per super-block), exactly.

use super::pack::Kind;
use super::pack::{MXFP4_LUT, NIB, NIB_FIVE, NIB_LUT, NIB_SIX, SC_E8M0, SC_F16, SC_KSUB};
use super::{ActBlock, Job, PANEL_BLOCK, PANEL_COLS};
use std::arch::x86_64::*;

/// Q6_K's bit pairs of chunk `c` (bits `2c`, `2c + 1` of each plane byte)
/// shifted to bits 4 and 5; the other bits are the caller's to mask.
#[inline]
#[target_feature(enable = "avx2")]
fn q6_pairs(c: usize, plane: __m256i) -> __m256i {
    match c {
        0 => _mm256_slli_epi16::<4>(plane),
        1 => _mm256_slli_epi16::<2>(plane),
        2 => plane,
        _ => _mm256_srli_epi16::<2>(plane),
    }
}

/// The 4 activation bytes at `p`, broadcast to every i32 lane.
///
/// # Safety
/// `p` must point to 4 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bcast4(p: *const i8) -> __m256i {
    // SAFETY: forwarded from the caller.
    _mm256_set1_epi32(unsafe { p.cast::<i32>().read_unaligned() })
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q4_step_avx2(s: __m256i, lo: __m256i, xl: __m256i, hi: __m256i, xh: __m256i) -> __m256i {
    let p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xl), _mm256_maddubs_epi16(hi, xh));
    _mm256_add_epi16(s, p)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q4_finish_avx2(s: __m256i) -> __m256i {
    _mm256_madd_epi16(s, _mm256_set1_epi16(1))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn i8_step_avx2(s: __m256i, aw: __m256i, sx: __m256i) -> __m256i {
    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), _mm256_set1_epi16(1));
    _mm256_add_epi32(s, p)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
fn q4_step_vnni(s: __m256i, lo: __m256i, xl: __m256i, hi: __m256i, xh: __m256i) -> __m256i {
    _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(s, lo, xl), hi, xh)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
fn q4_finish_vnni(s: __m256i) -> __m256i {
    s
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
fn i8_step_vnni(s: __m256i, aw: __m256i, sx: __m256i) -> __m256i {
    _mm256_dpbusd_avx_epi32(s, aw, sx)
}

/// 8 f32 values from the 8 f16 bits at `p` (`vcvtph2ps`, exact).
///
/// # Safety
/// `p` must point to 8 readable values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16x8(p: *const u16) -> __m256 {
    // SAFETY: forwarded from the caller.
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p.cast()) })
}

/// 8 signed byte codes at `p` as f32 (`vpmovsxbd`, `vcvtdq2ps`; exact).
///
/// # Safety
/// `p` must point to 8 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn codes8(p: *const u8) -> __m256 {
    // SAFETY: forwarded from the caller.
    let c = unsafe { _mm_loadl_epi64(p.cast()) };
    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c))
}

/// The f32 values of E8M0 codes in i32 lanes (0..255), exactly
/// `e8m0_to_f32_half`: bits `(e − 1) << 23`, or for the two subnormal
/// codes 0 and 1 `0x0020_0000 << e`, blended on `e < 2`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn e8m0_ps(e: __m256i) -> __m256 {
    let normal = _mm256_slli_epi32::<23>(_mm256_sub_epi32(e, _mm256_set1_epi32(1)));
    let sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
    let small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, small))
}

/// The 8 scales from index `at` of the scale streams as f32: f16 bits
/// widened ([`SC_F16`]), E8M0 bytes decoded ([`SC_E8M0`]), or sub-block
/// codes times their super-scales `sup` ([`SC_KSUB`]). Group block `gb`'s
/// scales start at `gb · nr`; the tiles read them 8 rows (one ymm) at a
/// time.
///
/// # Safety
/// The job's streams for `SC` hold 8 values from `at`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scales<const SC: u8>(job: &Job<'_>, at: usize, sup: __m256) -> __m256 {
    // SAFETY: forwarded from the caller.
    unsafe {
        match SC {
            SC_F16 => f16x8(job.sc.dh.as_ptr().add(at)),
            SC_E8M0 => {
                let e = _mm_loadl_epi64(job.sc.dc.as_ptr().add(at).cast());
                e8m0_ps(_mm256_cvtepu8_epi32(e))
            }
            _ => _mm256_mul_ps(codes8(job.sc.dc.as_ptr().add(at)), sup),
        }
    }
}

/// The 8 second values (mins, Q6_K's upper-half scales) from index `at`:
/// f16 bits ([`SC_F16`]) or codes times the super-scales `sup`.
///
/// # Safety
/// As for [`scales`], for a kind with second values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn seconds<const SC: u8>(job: &Job<'_>, at: usize, sup: __m256) -> __m256 {
    // SAFETY: forwarded from the caller.
    unsafe {
        match SC {
            SC_F16 => f16x8(job.sc.mh.as_ptr().add(at)),
            _ => _mm256_mul_ps(codes8(job.sc.mc.as_ptr().add(at)), sup),
        }
    }
}

/// The super-scales (`sd`, `sm`) of group block `gb` ([`SC_KSUB`]; zero
/// otherwise) at interleave `8·V`, 8 rows per vector, widened once per
/// super-block by the tiles.
///
/// # Safety
/// As for [`scales`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn supers<const SC: u8, const V: usize>(
    job: &Job<'_>,
    gb: usize,
) -> ([__m256; V], [__m256; V]) {
    if SC != SC_KSUB {
        return ([_mm256_setzero_ps(); V], [_mm256_setzero_ps(); V]);
    }
    let at = gb / 8 * 8 * V;
    // SAFETY: forwarded from the caller.
    unsafe {
        (
            std::array::from_fn(|v| f16x8(job.sc.sd.as_ptr().add(at + 8 * v))),
            std::array::from_fn(|v| f16x8(job.sc.sm.as_ptr().add(at + 8 * v))),
        )
    }
}

/// [`super::prefetch_scales`] at interleave `8·V`.
#[inline]
fn prefetch_scales<const SC: u8, const V: usize>(job: &Job<'_>, gb: usize, min: bool) {
    if V == 1 {
        super::prefetch_scales::<SC, 8>(job, gb, min);
    } else {
        super::prefetch_scales::<SC, 16>(job, gb, min);
    }
}

/// `$f::<MR, V, params…>(args…)` for the job's interleave (8: `V` 1,
/// else 2 ymm per chunk) and tile height `mr`.
macro_rules! by_v_mr {
    ($job:expr, $mr:expr, $f:ident::<$($p:tt),*>($($a:expr),*)) => {
        if $job.nr == 8 {
            by_mr!($mr, $f::<1, $($p),*>($($a),*))
        } else {
            by_mr!($mr, $f::<2, $($p),*>($($a),*))
        }
    };
}

/// Generates the Q4 and int8 tiles and the dispatching entry for one
/// feature set and its step functions. A tile reads interleave `8·V`: `V`
/// ymm per 4-byte chunk (rows 8v .. 8v + 8 in the v-th), each activation
/// broadcast serving all `V`.
macro_rules! tiles {
    ($feat:literal, $q4step:ident, $q4fin:ident, $i8step:ident, $q4:ident, $i8:ident, $entry:ident) => {
        /// Q4_0 (`MIN = false`) or Q4_1 (`MIN = true`) tile, interleave
        /// `8·V`; `X` [`NIB`], or [`NIB_FIVE`] for Q5_0 / Q5_1 (nibbles
        /// plus the fifth-bit plane), or [`NIB_LUT`] for MXFP4 (`MIN =
        /// false`; codes through [`MXFP4_LUT`]), or [`NIB_SIX`] for Q6_K
        /// (`MIN = false`; nibbles plus the planes of bit pairs,
        /// 0..63, one sum and scale per half). `SC`: how the scales are
        /// stored ([`SC_F16`], [`SC_E8M0`], [`SC_KSUB`]).
        ///
        /// # Safety
        /// Needs the features above; `g` a group of the job, rows
        /// `i0 .. i0 + MR` inside its activations, `out` ≥ `MR · 8V`.
        #[target_feature(enable = $feat)]
        unsafe fn $q4<
            const MR: usize,
            const V: usize,
            const MIN: bool,
            const X: u8,
            const SC: u8,
        >(
            job: &Job<'_>,
            g: usize,
            i0: usize,
            out: &mut [f32],
        ) {
            let nb = job.nb;
            let nr = 8 * V;
            debug_assert!(job.nr == nr && out.len() >= MR * nr);
            debug_assert!(job.acts.len() >= (i0 + MR) * nb);
            let mask = _mm256_set1_epi8(0x0F);
            let bit4 = _mm256_set1_epi8(0x10);
            let bits45 = _mm256_set1_epi8(0x30);
            let (five, six, table) = (X == NIB_FIVE, X == NIB_SIX, X == NIB_LUT);
            // MXFP4's table in every 128-bit lane (vpshufb looks up per lane).
            // SAFETY: the table is 16 bytes.
            let lut =
                _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(MXFP4_LUT.as_ptr().cast()) });
            // Bytes per block: nr rows × (4 bytes per plane + 16 nibble
            // bytes); plane p at 32V·p, chunk c of the nibbles 32V·c after
            // the planes, each 32V bytes, v-th ymm 32v further.
            let planes = 32 * (five as usize + 2 * six as usize) * V;
            let bs = planes + 128 * V;
            let mut acc = [[_mm256_setzero_ps(); V]; MR];
            // SAFETY (pointer offsets below): group g has nb blocks of
            // nr scales (and mins) and bs quant bytes; rows i0 + i < i0 + MR
            // each hold nb activation blocks.
            let (qb, ab) = unsafe {
                (
                    job.qs.as_ptr().add(g * nb * bs),
                    job.acts.as_ptr().add(i0 * nb),
                )
            };
            let (mut sdv, mut smv) = ([_mm256_setzero_ps(); V], [_mm256_setzero_ps(); V]);
            for b in 0..nb {
                let gb = g * nb + b;
                prefetch_scales::<SC, V>(job, gb, MIN);
                if b % 8 == 0 {
                    // SAFETY: super-block b / 8 of group g (K-quants).
                    (sdv, smv) = unsafe { supers::<SC, V>(job, gb) };
                }
                // Every line of the block job.pf ahead (160- and 192-byte
                // blocks per 8 rows touch at most 3, 4).
                if job.pf > 0 {
                    for l in 0..bs.div_ceil(64) {
                        _mm_prefetch::<_MM_HINT_T0>(
                            qb.wrapping_add((b + job.pf) * bs + 64 * l).cast(),
                        );
                    }
                }
                // The fifth-bit plane, for the low nibbles moved up by 4
                // (bit c of each byte → bit 4 at chunk c after c right
                // shifts; 16-bit shifts keep bit 4 within its byte).
                let mut hl = [_mm256_setzero_si256(); V];
                let mut hh = [_mm256_setzero_si256(); V];
                // Q6_K's planes of bit pairs (low and high halves), shifted
                // per chunk below.
                let mut pairs = [[_mm256_setzero_si256(); V]; 2];
                for v in 0..V {
                    if five {
                        // SAFETY: the 32V plane bytes open block b.
                        let h = unsafe { _mm256_loadu_si256(qb.add(b * bs + 32 * v).cast()) };
                        (hl[v], hh[v]) = (_mm256_slli_epi16::<4>(h), h);
                    }
                    if six {
                        for (h, p) in pairs.iter_mut().enumerate() {
                            // SAFETY: the two planes of 32V bytes open block b.
                            p[v] = unsafe {
                                _mm256_loadu_si256(qb.add(b * bs + 32 * h * V + 32 * v).cast())
                            };
                        }
                    }
                }
                let mut s = [[_mm256_setzero_si256(); V]; MR];
                // Q6_K: sums of the high halves (values 16..32).
                let mut s2 = [[_mm256_setzero_si256(); V]; MR];
                // Sums of chunks 0 and 1 of 5-bit (and MXFP4's 0..24) values:
                // i16 would overflow over 4 chunks.
                let mut part = [[_mm256_setzero_si256(); V]; MR];
                for c in 0..4 {
                    let mut lo = [_mm256_setzero_si256(); V];
                    let mut hi = [_mm256_setzero_si256(); V];
                    for v in 0..V {
                        // SAFETY: chunk c of block b (after its planes), its
                        // v-th 32 bytes, inside the group.
                        let w = unsafe {
                            _mm256_loadu_si256(qb.add(b * bs + planes + 32 * V * c + 32 * v).cast())
                        };
                        lo[v] = _mm256_and_si256(w, mask);
                        hi[v] = _mm256_and_si256(_mm256_srli_epi16::<4>(w), mask);
                        if table {
                            lo[v] = _mm256_shuffle_epi8(lut, lo[v]);
                            hi[v] = _mm256_shuffle_epi8(lut, hi[v]);
                        }
                        if five {
                            lo[v] = _mm256_or_si256(lo[v], _mm256_and_si256(hl[v], bit4));
                            hi[v] = _mm256_or_si256(hi[v], _mm256_and_si256(hh[v], bit4));
                            hl[v] = _mm256_srli_epi16::<1>(hl[v]);
                            hh[v] = _mm256_srli_epi16::<1>(hh[v]);
                        }
                        if six {
                            let sl = q6_pairs(c, pairs[0][v]);
                            let sh = q6_pairs(c, pairs[1][v]);
                            lo[v] = _mm256_or_si256(lo[v], _mm256_and_si256(sl, bits45));
                            hi[v] = _mm256_or_si256(hi[v], _mm256_and_si256(sh, bits45));
                        }
                    }
                    for (i, (si, s2i)) in s.iter_mut().zip(s2.iter_mut()).enumerate() {
                        // SAFETY: block b of row i0 + i; 4c + 16 + 4 <= 32.
                        let (xl, xh) = unsafe {
                            let xp = (*ab.add(i * nb + b)).qs.as_ptr();
                            (bcast4(xp.add(4 * c)), bcast4(xp.add(16 + 4 * c)))
                        };
                        for v in 0..V {
                            if six {
                                // Values up to 63: i16 holds one chunk's
                                // products (4 · 63 · 127), so widen per chunk.
                                si[v] = $i8step(si[v], lo[v], xl);
                                s2i[v] = $i8step(s2i[v], hi[v], xh);
                            } else {
                                si[v] = $q4step(si[v], lo[v], xl, hi[v], xh);
                            }
                        }
                    }
                    if (X == NIB_FIVE || X == NIB_LUT) && c == 1 {
                        for (p, si) in part.iter_mut().zip(s.iter_mut()) {
                            for v in 0..V {
                                p[v] = $q4fin(si[v]);
                                si[v] = _mm256_setzero_si256();
                            }
                        }
                    }
                }
                // SAFETY: the nr scales of block b, 8 per vector.
                let dw: [__m256; V] =
                    std::array::from_fn(|v| unsafe { scales::<SC>(job, gb * nr + 8 * v, sdv[v]) });
                for (i, a) in acc.iter_mut().enumerate() {
                    // SAFETY: block b of row i0 + i.
                    let x = unsafe { &*ab.add(i * nb + b) };
                    let xd = _mm256_set1_ps(x.d());
                    if six {
                        // Σ(u − 32)x per half; the halves' scales applied
                        // one after the other, as the scalar tile does.
                        let (ol, oh) = (
                            _mm256_set1_epi32(32 * x.sum_lo()),
                            _mm256_set1_epi32(32 * x.sum_hi()),
                        );
                        for v in 0..V {
                            let lo = _mm256_sub_epi32(s[i][v], ol);
                            let hi = _mm256_sub_epi32(s2[i][v], oh);
                            let dd = _mm256_mul_ps(dw[v], xd);
                            a[v] = _mm256_add_ps(a[v], _mm256_mul_ps(dd, _mm256_cvtepi32_ps(lo)));
                            // SAFETY: Q6_K jobs carry second codes shaped like the scales.
                            let mw = unsafe { seconds::<SC>(job, gb * nr + 8 * v, smv[v]) };
                            let dm = _mm256_mul_ps(mw, xd);
                            a[v] = _mm256_add_ps(a[v], _mm256_mul_ps(dm, _mm256_cvtepi32_ps(hi)));
                        }
                        continue;
                    }
                    let off = match X {
                        NIB_FIVE => 16,
                        NIB_LUT => 12,
                        _ => 8,
                    };
                    let off = _mm256_set1_epi32(if MIN { 0 } else { off * x.sum() });
                    let xs = _mm256_set1_ps(if MIN { x.s() } else { 0.0 });
                    for v in 0..V {
                        let mut si = $q4fin(s[i][v]);
                        if X != NIB {
                            si = _mm256_add_epi32(part[i][v], si);
                        }
                        if !MIN {
                            si = _mm256_sub_epi32(si, off);
                        }
                        let dd = _mm256_mul_ps(dw[v], xd);
                        let mut t = _mm256_mul_ps(dd, _mm256_cvtepi32_ps(si));
                        if MIN {
                            // SAFETY: Q4_1/Q5_1 jobs carry mins shaped like the scales.
                            let mw = unsafe { seconds::<SC>(job, gb * nr + 8 * v, smv[v]) };
                            t = _mm256_add_ps(t, _mm256_mul_ps(mw, xs));
                        }
                        a[v] = _mm256_add_ps(a[v], t);
                    }
                }
            }
            for (i, a) in acc.iter().enumerate() {
                for v in 0..V {
                    // SAFETY: out holds MR · nr floats.
                    unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(nr * i + 8 * v), a[v]) };
                }
            }
        }

        /// Int8 tile (Q8_0), interleave `8·V`. `SC` as for the Q4 tile.
        ///
        /// # Safety
        /// As for the Q4 tile.
        #[target_feature(enable = $feat)]
        unsafe fn $i8<const MR: usize, const V: usize, const SC: u8>(
            job: &Job<'_>,
            g: usize,
            i0: usize,
            out: &mut [f32],
        ) {
            let nb = job.nb;
            let nr = 8 * V;
            debug_assert!(job.nr == nr && out.len() >= MR * nr);
            debug_assert!(job.acts.len() >= (i0 + MR) * nb);
            let bs = 256 * V;
            let mut acc = [[_mm256_setzero_ps(); V]; MR];
            // SAFETY: as in the Q4 tile, with bs quant bytes per block.
            let (qb, ab) = unsafe {
                (
                    job.qs.as_ptr().add(g * nb * bs),
                    job.acts.as_ptr().add(i0 * nb),
                )
            };
            let mut sdv = [_mm256_setzero_ps(); V];
            for b in 0..nb {
                let gb = g * nb + b;
                prefetch_scales::<SC, V>(job, gb, false);
                if b % 8 == 0 {
                    // SAFETY: super-block b / 8 of group g (K-quants).
                    sdv = unsafe { supers::<SC, V>(job, gb).0 };
                }
                if job.pf > 0 {
                    for l in 0..4 * V {
                        _mm_prefetch::<_MM_HINT_T0>(
                            qb.wrapping_add((b + job.pf) * bs + 64 * l).cast(),
                        );
                    }
                }
                let mut s = [[_mm256_setzero_si256(); V]; MR];
                // SAFETY: the nr scales of block b, 8 per vector.
                let dw: [__m256; V] =
                    std::array::from_fn(|v| unsafe { scales::<SC>(job, gb * nr + 8 * v, sdv[v]) });
                for c in 0..8 {
                    // SAFETY: chunk c of block b, its v-th 32 bytes, inside the group.
                    let w: [__m256i; V] = std::array::from_fn(|v| unsafe {
                        _mm256_loadu_si256(qb.add(b * bs + 32 * V * c + 32 * v).cast())
                    });
                    // |w|, once per chunk for every row.
                    let aw: [__m256i; V] = std::array::from_fn(|v| _mm256_sign_epi8(w[v], w[v]));
                    for (i, si) in s.iter_mut().enumerate() {
                        // SAFETY: block b of row i0 + i; 4c + 4 <= 32.
                        let xb = unsafe { bcast4((*ab.add(i * nb + b)).qs.as_ptr().add(4 * c)) };
                        for v in 0..V {
                            si[v] = $i8step(si[v], aw[v], _mm256_sign_epi8(xb, w[v]));
                        }
                    }
                }
                for (i, a) in acc.iter_mut().enumerate() {
                    // SAFETY: block b of row i0 + i.
                    let x = unsafe { &*ab.add(i * nb + b) };
                    let xd = _mm256_set1_ps(x.d());
                    for v in 0..V {
                        let dd = _mm256_mul_ps(dw[v], xd);
                        let t = _mm256_mul_ps(dd, _mm256_cvtepi32_ps(s[i][v]));
                        a[v] = _mm256_add_ps(a[v], t);
                    }
                }
            }
            for (i, a) in acc.iter().enumerate() {
                for v in 0..V {
                    // SAFETY: out holds MR · nr floats.
                    unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(nr * i + 8 * v), a[v]) };
                }
            }
        }

        /// Rows `i0 .. i0 + mr` (mr ∈ 1, 2, 4, 8) × group `g`.
        ///
        /// # Safety
        /// Needs the features above; the job has interleave 8 or 16; shapes
        /// as the driver guarantees.
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
                    (Kind::Q4_0, SC_F16) => {
                        by_v_mr!(job, mr, $q4::<false, NIB, SC_F16>(job, g, i0, out))
                    }
                    (Kind::Q4_1, SC_F16) => {
                        by_v_mr!(job, mr, $q4::<true, NIB, SC_F16>(job, g, i0, out))
                    }
                    (Kind::Q4_1, SC_KSUB) => {
                        by_v_mr!(job, mr, $q4::<true, NIB, SC_KSUB>(job, g, i0, out))
                    }
                    (Kind::Q5_0, SC_F16) => {
                        by_v_mr!(job, mr, $q4::<false, NIB_FIVE, SC_F16>(job, g, i0, out))
                    }
                    (Kind::Q5_1, SC_F16) => {
                        by_v_mr!(job, mr, $q4::<true, NIB_FIVE, SC_F16>(job, g, i0, out))
                    }
                    (Kind::Q5_1, SC_KSUB) => {
                        by_v_mr!(job, mr, $q4::<true, NIB_FIVE, SC_KSUB>(job, g, i0, out))
                    }
                    (Kind::Mxfp4, SC_E8M0) => {
                        by_v_mr!(job, mr, $q4::<false, NIB_LUT, SC_E8M0>(job, g, i0, out))
                    }
                    (Kind::Q6K, SC_KSUB) => {
                        by_v_mr!(job, mr, $q4::<false, NIB_SIX, SC_KSUB>(job, g, i0, out))
                    }
                    (Kind::I8, SC_F16) => by_v_mr!(job, mr, $i8::<SC_F16>(job, g, i0, out)),
                    // No format packs these (see `pack::scale_mode`); the
                    // scalar tile reads every scale mode.
                    _ => super::scalar::tile(job, g, i0, mr, out),
                }
            }
        }
    };
}

tiles!(
    "avx2,fma,f16c",
    q4_step_avx2,
    q4_finish_avx2,
    i8_step_avx2,
    q4_avx2,
    i8_avx2,
    tile
);

tiles!(
    "avx2,fma,f16c,avxvnni",
    q4_step_vnni,
    q4_finish_vnni,
    i8_step_vnni,
    q4_vnni,
    i8_vnni,
    tile_vnni
);

/// Unpacks columns `16u .. 16u + 16` of a Q4_0 job into `panel`, once for
/// every activation row: from one group at interleave 16 or two at
/// interleave 8 (the second missing at the end: zeros, columns the driver
/// does not write). Per block, chunk c's low values at `128c + 32v` and
/// high values at `128c + 64 + 32v` (v: columns 8v .. 8v + 8) as signed
/// bytes `q − 8`; at `512 + 32v` each column's `128·Σ(q − 8)` over the
/// block (i32), what [`panel_q4_0`] subtracts from its sums of
/// `(x + 128)·(q − 8)` to leave the definition's `Σ x·(q − 8)`; at `576 +
/// 32v` the scales as f32 (`vcvtph2ps`, exact). The panel's layout does not
/// depend on the packing, so prefill gets two ymm per chunk while the
/// weights keep interleave 8 for decode.
///
/// # Safety
/// Needs AVX2; the job is Q4_0 (f16 scales) at interleave 8 or 16 with
/// `groups` groups, `u < ⌈groups · nr / 16⌉`; `panel` holds
/// `nb · PANEL_BLOCK` bytes, 32-byte aligned.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn fill_panel_q4_0(job: &Job<'_>, groups: usize, u: usize, panel: *mut u8) {
    let (nb, nr) = (job.nb, job.nr);
    let bs = 16 * nr;
    let mask = _mm256_set1_epi8(0x0F);
    let eight = _mm256_set1_epi8(8);
    let ones8 = _mm256_set1_epi8(1);
    let ones16 = _mm256_set1_epi16(1);
    for v in 0..2 {
        // The source group and which of its ymm per chunk.
        let (g, sub) = if nr == 16 { (u, v) } else { (2 * u + v, 0) };
        if g >= groups {
            for b in 0..nb {
                for c in 0..4 {
                    // SAFETY: inside block b of the panel.
                    unsafe {
                        let pb = panel.add(b * PANEL_BLOCK);
                        _mm256_store_si256(pb.add(128 * c + 32 * v).cast(), _mm256_setzero_si256());
                        _mm256_store_si256(
                            pb.add(128 * c + 64 + 32 * v).cast(),
                            _mm256_setzero_si256(),
                        );
                        _mm256_store_si256(pb.add(512 + 32 * v).cast(), _mm256_setzero_si256());
                        _mm256_store_ps(pb.add(576 + 32 * v).cast(), _mm256_setzero_ps());
                    }
                }
            }
            continue;
        }
        // SAFETY: group g holds nb blocks of bs quant bytes.
        let qb = unsafe { job.qs.as_ptr().add(g * nb * bs) };
        for b in 0..nb {
            if job.pf > 0 {
                // Every line of the block ahead (2 at interleave 8, 4 at 16).
                for l in 0..bs / 64 {
                    _mm_prefetch::<_MM_HINT_T0>(qb.wrapping_add((b + job.pf) * bs + 64 * l).cast());
                }
            }
            // SAFETY: block b of the panel (the caller's size).
            let pb = unsafe { panel.add(b * PANEL_BLOCK) };
            // Σ(q − 8) of each 4-byte pair, in i16 (|·| ≤ 8 · 2 · 8).
            let mut cs = _mm256_setzero_si256();
            for c in 0..4 {
                // SAFETY: chunk c of block b, its sub-th 32 bytes, inside
                // group g; the stores stay inside block b of the panel.
                unsafe {
                    let w = _mm256_loadu_si256(qb.add(b * bs + bs / 4 * c + 32 * sub).cast());
                    let lo = _mm256_sub_epi8(_mm256_and_si256(w, mask), eight);
                    let hi =
                        _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16::<4>(w), mask), eight);
                    _mm256_store_si256(pb.add(128 * c + 32 * v).cast(), lo);
                    _mm256_store_si256(pb.add(128 * c + 64 + 32 * v).cast(), hi);
                    cs = _mm256_add_epi16(cs, _mm256_maddubs_epi16(ones8, lo));
                    cs = _mm256_add_epi16(cs, _mm256_maddubs_epi16(ones8, hi));
                }
            }
            let col = _mm256_slli_epi32::<7>(_mm256_madd_epi16(cs, ones16));
            // SAFETY: the offsets and scales follow the 512 value bytes;
            // the 8 f16 scales of rows 8·sub.. of group g, block b.
            unsafe {
                _mm256_store_si256(pb.add(512 + 32 * v).cast(), col);
                let d = f16x8(job.sc.dh.as_ptr().add((g * nb + b) * nr + 8 * sub));
                _mm256_store_ps(pb.add(576 + 32 * v).cast(), d);
            }
        }
    }
}

/// Q4_0 tile over a panel ([`fill_panel_q4_0`]), 16 columns, and the
/// activations biased to unsigned (`biased`: row i's block b at
/// `32·(i·nb + b)`, bytes `x + 128`): no unpacking per tile, and the
/// offset is one vector per block for every row instead of a per-row
/// `8·Σx` broadcast. Sums, scales and rounding are the Q4 tile's. The
/// i16 sums hold: 8 chunks · 2 · 255 · 8 = 32640 < 2¹⁵.
///
/// # Safety
/// Needs AVX2; the panel filled ([`fill_panel`]) for `nb` blocks; rows
/// `i0 .. i0 + MR` inside `acts` (`nb` blocks per row) and `biased`;
/// `out` ≥ `MR · 16`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn panel_q4_0<const MR: usize>(
    acts: &[super::ActBlock],
    nb: usize,
    panel: *const u8,
    biased: *const u8,
    i0: usize,
    out: &mut [f32],
) {
    const V: usize = 2;
    debug_assert!(out.len() >= MR * PANEL_COLS);
    debug_assert!(acts.len() >= (i0 + MR) * nb);
    let mut acc = [[_mm256_setzero_ps(); V]; MR];
    // SAFETY: rows i0 + i < i0 + MR each hold nb blocks in both forms.
    let (ab, xb) = unsafe { (acts.as_ptr().add(i0 * nb), biased.add(32 * i0 * nb)) };
    for b in 0..nb {
        // SAFETY: block b of the panel.
        let pb = unsafe { panel.add(b * PANEL_BLOCK) };
        let mut s = [[_mm256_setzero_si256(); V]; MR];
        for c in 0..4 {
            // SAFETY: chunk c of the panel's block b.
            let (wl, wh): ([__m256i; V], [__m256i; V]) = unsafe {
                (
                    std::array::from_fn(|v| _mm256_load_si256(pb.add(128 * c + 32 * v).cast())),
                    std::array::from_fn(|v| {
                        _mm256_load_si256(pb.add(128 * c + 64 + 32 * v).cast())
                    }),
                )
            };
            for (i, si) in s.iter_mut().enumerate() {
                // SAFETY: biased block b of row i0 + i; 4c + 16 + 4 <= 32.
                let (xl, xh) = unsafe {
                    let xp = xb.add(32 * (i * nb + b)).cast::<i8>();
                    (bcast4(xp.add(4 * c)), bcast4(xp.add(16 + 4 * c)))
                };
                for v in 0..V {
                    si[v] = q4_step_avx2(si[v], xl, wl[v], xh, wh[v]);
                }
            }
        }
        // SAFETY: the panel's offsets and scales of block b.
        let (col, dw): ([__m256i; V], [__m256; V]) = unsafe {
            (
                std::array::from_fn(|v| _mm256_load_si256(pb.add(512 + 32 * v).cast())),
                std::array::from_fn(|v| _mm256_load_ps(pb.add(576 + 32 * v).cast())),
            )
        };
        for (i, a) in acc.iter_mut().enumerate() {
            // SAFETY: block b of row i0 + i.
            let xd = _mm256_set1_ps(unsafe { (*ab.add(i * nb + b)).d() });
            for v in 0..V {
                let si = _mm256_sub_epi32(q4_finish_avx2(s[i][v]), col[v]);
                let dd = _mm256_mul_ps(dw[v], xd);
                a[v] = _mm256_add_ps(a[v], _mm256_mul_ps(dd, _mm256_cvtepi32_ps(si)));
            }
        }
    }
    for (i, a) in acc.iter().enumerate() {
        for (v, &av) in a.iter().enumerate() {
            // SAFETY: out holds MR · 16 floats.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(PANEL_COLS * i + 8 * v), av) };
        }
    }
}

/// Fills the panel of columns `16u .. 16u + 16` ([`fill_panel_q4_0`]).
///
/// # Safety
/// As there.
pub(super) unsafe fn fill_panel(job: &Job<'_>, groups: usize, u: usize, panel: *mut u8) {
    debug_assert!(job.kind == Kind::Q4_0 && job.sc.mode == SC_F16);
    // SAFETY: forwarded from the caller.
    unsafe { fill_panel_q4_0(job, groups, u, panel) }
}

/// Rows `i0 .. i0 + mr` (mr ∈ 1, 2, 4, 8) × the panel's 16 columns.
///
/// # Safety
/// As for [`panel_q4_0`].
pub(super) unsafe fn panel_tile(
    job: &Job<'_>,
    panel: *const u8,
    biased: *const u8,
    i0: usize,
    mr: usize,
    out: &mut [f32],
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        let (a, nb) = (job.acts, job.nb);
        match mr {
            8 => panel_q4_0::<8>(a, nb, panel, biased, i0, out),
            4 => panel_q4_0::<4>(a, nb, panel, biased, i0, out),
            2 => panel_q4_0::<2>(a, nb, panel, biased, i0, out),
            _ => panel_q4_0::<1>(a, nb, panel, biased, i0, out),
        }
    }
}

/// `a` and `b` rounded to f16 (to nearest even, as `half` rounds) and
/// widened back: one `vcvtps2ph` and one `vcvtph2ps` for both.
///
/// # Safety
/// Needs F16C (part of this crate's AVX2 level).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn f16_round_trip(a: f32, b: f32) -> (f32, f32) {
    let w = _mm_cvtph_ps(_mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_setr_ps(
        a, b, 0.0, 0.0,
    )));
    (_mm_cvtss_f32(w), _mm_cvtss_f32(_mm_movehdup_ps(w)))
}

/// Quantizes `x` (32 values per block of `out`) block by block with
/// [`quantize_act_block`], with the f16 rounding of `d` and `s` in
/// registers: through `half` (a runtime-dispatched call per value), with
/// a call per block, it costs a fifth of the quantization's time
/// (docs/PERF.md, "the activations' quantization, sixteen blocks at a
/// time").
///
/// # Safety
/// Needs AVX2 + FMA + F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn quantize_act_row(x: &[f32], out: &mut [ActBlock]) {
    for (o, x) in out.iter_mut().zip(x.chunks_exact(32)) {
        // SAFETY: forwarded from the caller.
        let (d, qs, lo, sum) = unsafe { quantize_act_block(x.try_into().expect("chunks of 32")) };
        let (d16, s16) = f16_round_trip(d, sum as f32 * d);
        *o = ActBlock::new(d16, s16, lo, sum, qs);
    }
}

/// One activation block quantized exactly as `legacy::quantize_q8_1`
/// does, as `avx512::quant16` does it (truncate, then one step
/// away from zero where the exact remainder is at least 0.5: Rust's
/// `round`), on 8 lanes. Returns `(d, quants, Σ quants 0..16, Σ
/// quants)`; finite inputs.
///
/// # Safety
/// Needs AVX2 + FMA.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn quantize_act_block(x: &[f32; 32]) -> (f32, [i8; 32], i32, i32) {
    // SAFETY: x holds 32 floats, 8 per load.
    let v: [__m256; 4] = std::array::from_fn(|j| unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * j)) });
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
    let m = v.iter().fold(_mm256_setzero_ps(), |m, &x| {
        _mm256_max_ps(m, _mm256_and_ps(x, abs))
    });
    let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
    let d = amax / 127.0;
    let id = _mm256_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
    let q: [__m256i; 4] = std::array::from_fn(|j| {
        let v = _mm256_mul_ps(v[j], id);
        let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(v);
        let away = _mm256_cmp_ps::<_CMP_GE_OQ>(
            _mm256_and_ps(_mm256_sub_ps(v, t), abs),
            _mm256_set1_ps(0.5),
        );
        // ±1 with the sign of v where the remainder reached 0.5, else 0.
        let step = _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.0)), _mm256_set1_ps(1.0));
        _mm256_cvtps_epi32(_mm256_add_ps(t, _mm256_and_ps(away, step)))
    });
    // Saturating packs work per 128-bit lane; the permute restores order.
    let p = _mm256_packs_epi16(
        _mm256_packs_epi32(q[0], q[1]),
        _mm256_packs_epi32(q[2], q[3]),
    );
    let p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    let mut qs = [0i8; 32];
    // SAFETY: qs is 32 bytes.
    unsafe { _mm256_storeu_si256(qs.as_mut_ptr().cast(), p) };
    let hsum = |v: __m256i| {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s)))
    };
    let lo = hsum(_mm256_add_epi32(q[0], q[1]));
    (d, qs, lo, lo + hsum(_mm256_add_epi32(q[2], q[3])))
}
