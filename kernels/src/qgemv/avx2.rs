//! AVX2 + FMA + F16C quantized GEMV, and the AVX-VNNI W·A8 variant.
//!
//! W·A32: a 32-value block becomes four `__m256` of f32 (nibbles split with
//! `and`/`srli`, MXFP4 codes looked up with `pshufb`, widened with
//! `vpmovsxbd`), dotted with the four activation vectors, then scaled once:
//! `acc = fma(d, Σ q·x, acc)`. W·A8: a block is one `__m256i` of int8 in
//! value order; signed × signed products use the sign trick
//! (`|w|` × `sign(x, w)`) so the u8 × i8 instructions apply —
//! `vpmaddubsw` + `vpmaddwd` (AVX2) or `vpdpbusd` (AVX-VNNI) — and the i32
//! lanes are converted and scaled by `d_w · d_x` once per block.

use super::{A8Rows, QGemvParams, Rows, a8_entry, a32_entry};
use crate::quant::blocks::{
    BlockMxfp4, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K,
    BlockQ8_0, BlockQ8_1, BlockQ8K, F16Le, KSubBlock, KVALUES_MXFP4, QK, QK_K, e8m0_to_f32_half,
};
use crate::quant::kquants::get_scale_min_k4;
use std::arch::x86_64::*;

/// `GGML_FP16_TO_FP32` with F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn fp16(h: F16Le) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(
        u16::from_le_bytes(h.0) as i32
    )))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Splits 16 packed bytes into (low nibbles, high nibbles): values 0..16 and
/// 16..32 of a block in order.
///
/// # Safety
/// `qs` must point to 16 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibbles(qs: *const u8) -> (__m128i, __m128i) {
    // SAFETY: the caller guarantees 16 readable bytes.
    let q = unsafe { _mm_loadu_si128(qs.cast()) };
    let m = _mm_set1_epi8(0x0F);
    (
        _mm_and_si128(q, m),
        _mm_and_si128(_mm_srli_epi16::<4>(q), m),
    )
}

/// Σ q·x over one block, with the 32 int8 quants `lo` (values 0..16) and
/// `hi` (16..32) widened to f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_i8_f32(lo: __m128i, hi: __m128i, x: &[__m256; 4]) -> __m256 {
    let f = |v: __m128i| _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
    let mut s = _mm256_mul_ps(f(lo), x[0]);
    s = _mm256_fmadd_ps(f(_mm_srli_si128::<8>(lo)), x[1], s);
    s = _mm256_fmadd_ps(f(hi), x[2], s);
    _mm256_fmadd_ps(f(_mm_srli_si128::<8>(hi)), x[3], s)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn mxfp4_table() -> __m128i {
    // SAFETY: KVALUES_MXFP4 is 16 bytes.
    unsafe { _mm_loadu_si128(KVALUES_MXFP4.as_ptr().cast()) }
}

/// Generates a W·A32 row-group kernel: `$body` maps (block `$b`, activation
/// vectors `$x`, their lane sums `$xs`, accumulator `$acc`) to the new
/// accumulator.
macro_rules! a32_kernel {
    ($name:ident, $B:ty, |$b:ident, $x:ident, $xs:ident, $acc:ident| $body:expr) => {
        /// # Safety
        /// Needs AVX2, FMA and F16C; `w` holds `y.len()` rows of `x.len() / 32` blocks.
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $name<const R: usize>(w: &[$B], x: &[f32], y: &mut [f32]) {
            let nb = x.len() / QK;
            debug_assert!(w.len() == R * nb && y.len() == R);
            let mut accs = [_mm256_setzero_ps(); R];
            for i in 0..nb {
                let xp = x[QK * i..QK * i + QK].as_ptr();
                // SAFETY: the slice above holds 32 floats.
                let $x = unsafe {
                    [
                        _mm256_loadu_ps(xp),
                        _mm256_loadu_ps(xp.add(8)),
                        _mm256_loadu_ps(xp.add(16)),
                        _mm256_loadu_ps(xp.add(24)),
                    ]
                };
                #[allow(unused_variables)]
                let $xs = _mm256_add_ps(_mm256_add_ps($x[0], $x[1]), _mm256_add_ps($x[2], $x[3]));
                for (r, acc) in accs.iter_mut().enumerate() {
                    // SAFETY: r < R and i < nb, so the index is in bounds (debug-asserted).
                    let $b = unsafe { w.get_unchecked(r * nb + i) };
                    let $acc = *acc;
                    *acc = $body;
                }
            }
            for (out, acc) in y.iter_mut().zip(accs) {
                *out = hsum(acc);
            }
        }
    };
}

a32_kernel!(a32_q4_0, BlockQ4_0, |b, x, xs, acc| {
    // SAFETY: qs is 16 bytes.
    let (lo, hi) = unsafe { nibbles(b.qs.as_ptr()) };
    let eight = _mm_set1_epi8(8);
    let s = dot_i8_f32(_mm_sub_epi8(lo, eight), _mm_sub_epi8(hi, eight), &x);
    _mm256_fmadd_ps(_mm256_set1_ps(fp16(b.d)), s, acc)
});

a32_kernel!(a32_q4_1, BlockQ4_1, |b, x, xs, acc| {
    // SAFETY: qs is 16 bytes.
    let (lo, hi) = unsafe { nibbles(b.qs.as_ptr()) };
    let s = dot_i8_f32(lo, hi, &x);
    // Σ (d q + m) x = d Σ q x + m Σ x; `xs` lanes sum to Σ x.
    let acc = _mm256_fmadd_ps(_mm256_set1_ps(fp16(b.d)), s, acc);
    _mm256_fmadd_ps(_mm256_set1_ps(fp16(b.m)), xs, acc)
});

a32_kernel!(a32_q8_0, BlockQ8_0, |b, x, xs, acc| {
    // SAFETY: qs is 32 bytes.
    let (lo, hi) = unsafe {
        (
            _mm_loadu_si128(b.qs.as_ptr().cast()),
            _mm_loadu_si128(b.qs.as_ptr().add(16).cast()),
        )
    };
    let s = dot_i8_f32(lo, hi, &x);
    _mm256_fmadd_ps(_mm256_set1_ps(fp16(b.d)), s, acc)
});

a32_kernel!(a32_mxfp4, BlockMxfp4, |b, x, xs, acc| {
    // SAFETY: qs is 16 bytes.
    let (lo, hi) = unsafe { nibbles(b.qs.as_ptr()) };
    let t = mxfp4_table();
    let s = dot_i8_f32(_mm_shuffle_epi8(t, lo), _mm_shuffle_epi8(t, hi), &x);
    _mm256_fmadd_ps(_mm256_set1_ps(e8m0_to_f32_half(b.e)), s, acc)
});

a32_kernel!(a32_q5_0, BlockQ5_0, |b, x, xs, acc| {
    // SAFETY: qs is 16 bytes.
    let q = _mm256_sub_epi8(
        unsafe { q5_values(b.qs.as_ptr(), b.qh) },
        _mm256_set1_epi8(16),
    );
    let s = dot_i8_f32(
        _mm256_castsi256_si128(q),
        _mm256_extracti128_si256::<1>(q),
        &x,
    );
    _mm256_fmadd_ps(_mm256_set1_ps(fp16(b.d)), s, acc)
});

a32_kernel!(a32_q5_1, BlockQ5_1, |b, x, xs, acc| {
    // SAFETY: qs is 16 bytes.
    let q = unsafe { q5_values(b.qs.as_ptr(), b.qh) };
    let s = dot_i8_f32(
        _mm256_castsi256_si128(q),
        _mm256_extracti128_si256::<1>(q),
        &x,
    );
    let acc = _mm256_fmadd_ps(_mm256_set1_ps(fp16(b.d)), s, acc);
    _mm256_fmadd_ps(_mm256_set1_ps(fp16(b.m)), xs, acc)
});

/// Q4_K / Q5_K W·A32: per 32-value sub-block, the nibbles (low half of a
/// 32-byte run for even sub-blocks, high half for odd), with Q5_K's fifth
/// bit (bit j of `qh`) ORed in as 16, are widened and dotted with `x`;
/// `acc += d·sc · Σ q·x − dmin·m · Σ x`.
///
/// # Safety
/// Needs AVX2, FMA and F16C; `w` holds `y.len()` rows of `x.len() / 256` super-blocks.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn a32_k_sub<B: KSubBlock, const R: usize>(w: &[B], x: &[f32], y: &mut [f32]) {
    let nb = x.len() / QK_K;
    debug_assert!(w.len() == R * nb && y.len() == R);
    let mut accs = [_mm256_setzero_ps(); R];
    let m4 = _mm_set1_epi8(0x0F);
    let one = _mm_set1_epi8(1);
    for i in 0..nb {
        for j in 0..QK_K / 32 {
            let xp = x[QK_K * i + 32 * j..QK_K * i + 32 * j + 32].as_ptr();
            // SAFETY: the slice above holds 32 floats.
            let xv = unsafe {
                [
                    _mm256_loadu_ps(xp),
                    _mm256_loadu_ps(xp.add(8)),
                    _mm256_loadu_ps(xp.add(16)),
                    _mm256_loadu_ps(xp.add(24)),
                ]
            };
            let xs = _mm256_add_ps(_mm256_add_ps(xv[0], xv[1]), _mm256_add_ps(xv[2], xv[3]));
            for (r, acc) in accs.iter_mut().enumerate() {
                // SAFETY: in bounds (debug-asserted above).
                let b = unsafe { w.get_unchecked(r * nb + i) };
                let (sc, m) = get_scale_min_k4(j, b.scales());
                let qp = b.qs()[32 * (j / 2)..32 * (j / 2) + 32].as_ptr();
                // SAFETY: the slice above holds 32 bytes.
                let (qa, qb) = unsafe {
                    (
                        _mm_loadu_si128(qp.cast()),
                        _mm_loadu_si128(qp.add(16).cast()),
                    )
                };
                let (mut qa, mut qb) = if j % 2 == 0 {
                    (_mm_and_si128(qa, m4), _mm_and_si128(qb, m4))
                } else {
                    (
                        _mm_and_si128(_mm_srli_epi16::<4>(qa), m4),
                        _mm_and_si128(_mm_srli_epi16::<4>(qb), m4),
                    )
                };
                if B::FIVE {
                    let hp = b.qh().as_ptr();
                    let sh = _mm_cvtsi32_si128(j as i32);
                    // SAFETY: qh holds 32 bytes.
                    let (ha, hb) = unsafe {
                        (
                            _mm_loadu_si128(hp.cast()),
                            _mm_loadu_si128(hp.add(16).cast()),
                        )
                    };
                    // Bit j of each byte to bit 4 (a 16-bit lane shift brings
                    // the neighbour byte's bits only above bit 0).
                    let fifth =
                        |h: __m128i| _mm_slli_epi16::<4>(_mm_and_si128(_mm_srl_epi16(h, sh), one));
                    qa = _mm_or_si128(qa, fifth(ha));
                    qb = _mm_or_si128(qb, fifth(hb));
                }
                let s = dot_i8_f32(qa, qb, &xv);
                let a = _mm256_fmadd_ps(_mm256_set1_ps(fp16(b.d()) * sc as f32), s, *acc);
                *acc = _mm256_fnmadd_ps(_mm256_set1_ps(fp16(b.dmin()) * m as f32), xs, a);
            }
        }
    }
    for (out, acc) in y.iter_mut().zip(accs) {
        *out = hsum(acc);
    }
}

/// Q6_K W·A32: per 16-value group, the 6-bit values are rebuilt from
/// `ql`/`qh`, re-centred, widened and dotted; `acc += d·sc · Σ q·x`.
///
/// # Safety
/// Needs AVX2, FMA and F16C; `w` holds `y.len()` rows of `x.len() / 256` super-blocks.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn a32_q6_k<const R: usize>(w: &[BlockQ6K], x: &[f32], y: &mut [f32]) {
    let nb = x.len() / QK_K;
    debug_assert!(w.len() == R * nb && y.len() == R);
    let mut accs = [_mm256_setzero_ps(); R];
    let m4 = _mm_set1_epi8(0x0F);
    let m2 = _mm_set1_epi8(3);
    let k32 = _mm_set1_epi8(32);
    for i in 0..nb {
        for g in 0..QK_K / 16 {
            let (c, p, h) = (g / 8, (g % 8) / 2, g % 2);
            let xp = x[QK_K * i + 16 * g..QK_K * i + 16 * g + 16].as_ptr();
            // SAFETY: the slice above holds 16 floats.
            let (x0, x1) = unsafe { (_mm256_loadu_ps(xp), _mm256_loadu_ps(xp.add(8))) };
            for (r, acc) in accs.iter_mut().enumerate() {
                // SAFETY: in bounds (debug-asserted above).
                let b = unsafe { w.get_unchecked(r * nb + i) };
                let lo_at = 64 * c + 32 * (p & 1) + 16 * h;
                let hi_at = 32 * c + 16 * h;
                // SAFETY: ql has 128 bytes and qh 64; both 16-byte runs are inside.
                let (ql, qh) = unsafe {
                    (
                        _mm_loadu_si128(b.ql[lo_at..lo_at + 16].as_ptr().cast()),
                        _mm_loadu_si128(b.qh[hi_at..hi_at + 16].as_ptr().cast()),
                    )
                };
                let lo = if p < 2 {
                    _mm_and_si128(ql, m4)
                } else {
                    _mm_and_si128(_mm_srli_epi16::<4>(ql), m4)
                };
                let hb = _mm_and_si128(_mm_srl_epi16(qh, _mm_cvtsi32_si128(2 * p as i32)), m2);
                let q = _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16::<4>(hb)), k32);
                let f = |v: __m128i| _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
                let s = _mm256_fmadd_ps(f(_mm_srli_si128::<8>(q)), x1, _mm256_mul_ps(f(q), x0));
                *acc = _mm256_fmadd_ps(_mm256_set1_ps(fp16(b.d) * b.scales[g] as f32), s, *acc);
            }
        }
    }
    for (out, acc) in y.iter_mut().zip(accs) {
        *out = hsum(acc);
    }
}

/// W·A32 over the rows of `w`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `w` holds `y.len()` rows of
/// `x.len() / block_size` blocks.
pub unsafe fn gemv_a32(w: Rows<'_>, x: &[f32], y: &mut [f32], rpb: QGemvParams) {
    // SAFETY (all arms): forwarded from the caller.
    unsafe {
        a32_entry!(w, x, y, rpb, [
            Q4_0 => a32_q4_0, Q4_1 => a32_q4_1, Q8_0 => a32_q8_0, Mxfp4 => a32_mxfp4,
            Q4K => a32_k_sub<BlockQ4K>, Q5K => a32_k_sub<BlockQ5K>, Q6K => a32_q6_k,
            Q5_0 => a32_q5_0, Q5_1 => a32_q5_1,
        ])
    }
}

/// Signed int8 dot of two 32-byte vectors, 8 i32 partial sums (AVX2).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn sdot_avx2(w: __m256i, x: __m256i) -> __m256i {
    let p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    _mm256_madd_epi16(p, _mm256_set1_epi16(1))
}

/// Unsigned (0..=15) × signed int8 dot, 8 i32 partial sums (AVX2).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn udot_avx2(w: __m256i, x: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1))
}

/// Signed int8 dot with `vpdpbusd` (AVX-VNNI).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
fn sdot_vnni(w: __m256i, x: __m256i) -> __m256i {
    _mm256_dpbusd_avx_epi32(
        _mm256_setzero_si256(),
        _mm256_sign_epi8(w, w),
        _mm256_sign_epi8(x, w),
    )
}

/// Unsigned × signed int8 dot with `vpdpbusd` (AVX-VNNI).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
fn udot_vnni(w: __m256i, x: __m256i) -> __m256i {
    _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), w, x)
}

/// 32 nibbles of a block as one vector of bytes in value order.
///
/// # Safety
/// `qs` must point to 16 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibbles256(qs: *const u8) -> __m256i {
    // SAFETY: forwarded.
    let (lo, hi) = unsafe { nibbles(qs) };
    _mm256_set_m128i(hi, lo)
}

/// Generates a signed-weight W·A8 kernel under `$feat` using `$dot`:
/// `$decode` maps a weight block `$b` to (its int8 values in value order,
/// its f32 scale).
macro_rules! signed_kernel {
    ($feat:literal, $dot:ident, $name:ident, $B:ty, |$b:ident| $decode:expr) => {
        /// # Safety
        /// Needs the target features above; `w` holds `y.len()` rows of `x.len()` blocks.
        #[target_feature(enable = $feat)]
        unsafe fn $name<const R: usize>(w: &[$B], x: &[BlockQ8_0], y: &mut [f32]) {
            let nb = x.len();
            debug_assert!(w.len() == R * nb && y.len() == R);
            let mut accs = [_mm256_setzero_ps(); R];
            for (i, xb) in x.iter().enumerate() {
                // SAFETY: qs is 32 bytes.
                let xv = unsafe { _mm256_loadu_si256(xb.qs.as_ptr().cast()) };
                let dx = fp16(xb.d);
                for (r, acc) in accs.iter_mut().enumerate() {
                    // SAFETY: in bounds (debug-asserted above).
                    let $b = unsafe { w.get_unchecked(r * nb + i) };
                    let (wv, dw): (__m256i, f32) = $decode;
                    let s = _mm256_cvtepi32_ps($dot(wv, xv));
                    *acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx), s, *acc);
                }
            }
            for (out, acc) in y.iter_mut().zip(accs) {
                *out = hsum(acc);
            }
        }
    };
}

/// Generates an offset-format × Q8_1 kernel under `$feat` using the
/// unsigned dot `$dot`: `$decode` maps a weight block `$b` to its unsigned
/// quants in value order (no sign trick needed); the offset term
/// `m · s_x` is accumulated in scalar.
macro_rules! offset_kernel {
    ($feat:literal, $dot:ident, $name:ident, $B:ty, |$b:ident| $decode:expr) => {
        /// # Safety
        /// Needs the target features above; `w` holds `y.len()` rows of `x.len()` blocks.
        #[target_feature(enable = $feat)]
        unsafe fn $name<const R: usize>(w: &[$B], x: &[BlockQ8_1], y: &mut [f32]) {
            let nb = x.len();
            debug_assert!(w.len() == R * nb && y.len() == R);
            let mut accs = [_mm256_setzero_ps(); R];
            let mut offs = [0.0f32; R];
            for (i, xb) in x.iter().enumerate() {
                // SAFETY: qs is 32 bytes.
                let xv = unsafe { _mm256_loadu_si256(xb.qs.as_ptr().cast()) };
                let (dx, sx) = (fp16(xb.d), fp16(xb.s));
                for r in 0..R {
                    // SAFETY: in bounds (debug-asserted above).
                    let $b = unsafe { w.get_unchecked(r * nb + i) };
                    let q: __m256i = $decode;
                    let s = _mm256_cvtepi32_ps($dot(q, xv));
                    accs[r] = _mm256_fmadd_ps(_mm256_set1_ps(fp16($b.d) * dx), s, accs[r]);
                    offs[r] += fp16($b.m) * sx;
                }
            }
            for r in 0..R {
                y[r] = hsum(accs[r]) + offs[r];
            }
        }
    };
}

/// The 32 fifth bits of a Q5 block (`qh`, bit j = value j) as bytes
/// `0x10` / `0x00` in value order (llama.cpp's `bytes_from_bits_32`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q5_high_bits(qh: [u8; 4]) -> __m256i {
    let shuf = _mm256_set_epi64x(
        0x0303_0303_0303_0303,
        0x0202_0202_0202_0202,
        0x0101_0101_0101_0101,
        0,
    );
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(i32::from_le_bytes(qh)), shuf);
    let set = _mm256_cmpeq_epi8(
        _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe)),
        _mm256_set1_epi64x(-1),
    );
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

/// Unsigned 5-bit quants (0..32) of a Q5 block in value order.
///
/// # Safety
/// `qs` must point to 16 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_values(qs: *const u8, qh: [u8; 4]) -> __m256i {
    // SAFETY: forwarded.
    _mm256_or_si256(unsafe { nibbles256(qs) }, q5_high_bits(qh))
}

macro_rules! a8_family {
    (
        $feat:literal, $sdot:ident, $udot:ident, $q4_0:ident, $q8_0:ident, $mxfp4:ident, $q4_1:ident,
        $q5_0:ident, $q5_1:ident
    ) => {
        signed_kernel!($feat, $sdot, $q4_0, BlockQ4_0, |b| {
            // SAFETY: qs is 16 bytes.
            let q = unsafe { nibbles256(b.qs.as_ptr()) };
            (_mm256_sub_epi8(q, _mm256_set1_epi8(8)), fp16(b.d))
        });
        signed_kernel!($feat, $sdot, $q8_0, BlockQ8_0, |b| {
            // SAFETY: qs is 32 bytes.
            (
                unsafe { _mm256_loadu_si256(b.qs.as_ptr().cast()) },
                fp16(b.d),
            )
        });
        signed_kernel!($feat, $sdot, $mxfp4, BlockMxfp4, |b| {
            // SAFETY: qs is 16 bytes.
            let q = unsafe { nibbles256(b.qs.as_ptr()) };
            let t = _mm256_broadcastsi128_si256(mxfp4_table());
            (_mm256_shuffle_epi8(t, q), e8m0_to_f32_half(b.e))
        });
        offset_kernel!($feat, $udot, $q4_1, BlockQ4_1, |b| {
            // SAFETY: qs is 16 bytes.
            unsafe { nibbles256(b.qs.as_ptr()) }
        });
        signed_kernel!($feat, $sdot, $q5_0, BlockQ5_0, |b| {
            // SAFETY: qs is 16 bytes.
            let q = unsafe { q5_values(b.qs.as_ptr(), b.qh) };
            (_mm256_sub_epi8(q, _mm256_set1_epi8(16)), fp16(b.d))
        });
        offset_kernel!($feat, $udot, $q5_1, BlockQ5_1, |b| {
            // SAFETY: qs is 16 bytes.
            unsafe { q5_values(b.qs.as_ptr(), b.qh) }
        });
    };
}

a8_family!(
    "avx2,fma,f16c",
    sdot_avx2,
    udot_avx2,
    a8_q4_0,
    a8_q8_0,
    a8_mxfp4,
    a8_q4_1,
    a8_q5_0,
    a8_q5_1
);
a8_family!(
    "avx2,fma,f16c,avxvnni",
    sdot_vnni,
    udot_vnni,
    vnni_q4_0,
    vnni_q8_0,
    vnni_mxfp4,
    vnni_q4_1,
    vnni_q5_0,
    vnni_q5_1
);

/// Q4_K / Q5_K × Q8_K: per 64-value chunk, one 32-byte load gives two
/// sub-blocks (low / high nibbles, with Q5_K's fifth bits ORed in as 16);
/// each sub-block's unsigned dot is scaled by its 6-bit scale in i32, the
/// super-block sum by `d · d_x` in f32, and the mins term `dmin · d_x · Σ
/// m_j · bsum_j` is accumulated in scalar. Values below 32 times |x| ≤ 127
/// keep `vpmaddubsw`'s pair sums inside i16.
///
/// # Safety
/// Needs AVX2, FMA and F16C; `w` holds `y.len()` rows of `x.len()` super-blocks.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn a8_k_sub<B: KSubBlock, const R: usize>(w: &[B], x: &[BlockQ8K], y: &mut [f32]) {
    let nb = x.len();
    debug_assert!(w.len() == R * nb && y.len() == R);
    let mut accs = [_mm256_setzero_ps(); R];
    let mut offs = [0.0f32; R];
    let m4 = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(1);
    for (i, xb) in x.iter().enumerate() {
        let dx = xb.d();
        for r in 0..R {
            // SAFETY: in bounds (debug-asserted above).
            let b = unsafe { w.get_unchecked(r * nb + i) };
            let mut sumi = _mm256_setzero_si256();
            let mut summ = 0i32;
            // SAFETY: qh holds 32 bytes.
            let qh = unsafe { _mm256_loadu_si256(b.qh().as_ptr().cast()) };
            for c in 0..4 {
                let (sc0, m0) = get_scale_min_k4(2 * c, b.scales());
                let (sc1, m1) = get_scale_min_k4(2 * c + 1, b.scales());
                // SAFETY: qs has 128 bytes and x.qs 256; offsets stay inside.
                let (q, xl, xh) = unsafe {
                    (
                        _mm256_loadu_si256(b.qs().as_ptr().add(32 * c).cast()),
                        _mm256_loadu_si256(xb.qs.as_ptr().add(64 * c).cast()),
                        _mm256_loadu_si256(xb.qs.as_ptr().add(64 * c + 32).cast()),
                    )
                };
                let mut lo = _mm256_and_si256(q, m4);
                let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
                if B::FIVE {
                    let fifth = |bit: i32| {
                        let h = _mm256_srl_epi16(qh, _mm_cvtsi32_si128(bit));
                        _mm256_slli_epi16::<4>(_mm256_and_si256(h, one))
                    };
                    lo = _mm256_or_si256(lo, fifth(2 * c as i32));
                    hi = _mm256_or_si256(hi, fifth(2 * c as i32 + 1));
                }
                let pl = _mm256_mullo_epi32(udot_avx2(lo, xl), _mm256_set1_epi32(sc0 as i32));
                let ph = _mm256_mullo_epi32(udot_avx2(hi, xh), _mm256_set1_epi32(sc1 as i32));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
                summ += m0 as i32 * (xb.bsum(4 * c) as i32 + xb.bsum(4 * c + 1) as i32);
                summ += m1 as i32 * (xb.bsum(4 * c + 2) as i32 + xb.bsum(4 * c + 3) as i32);
            }
            let s = _mm256_cvtepi32_ps(sumi);
            accs[r] = _mm256_fmadd_ps(_mm256_set1_ps(fp16(b.d()) * dx), s, accs[r]);
            offs[r] -= (fp16(b.dmin()) * dx) * summ as f32;
        }
    }
    for r in 0..R {
        y[r] = hsum(accs[r]) + offs[r];
    }
}

/// Q6_K × Q8_K: each 32-value group is rebuilt from `ql` nibbles and two
/// `qh` bits, re-centred to `q − 32`, dotted with the sign trick; its two
/// 16-value halves carry their own scales (lanes 0..4 and 4..8 of the dot).
///
/// # Safety
/// Needs AVX2, FMA and F16C; `w` holds `y.len()` rows of `x.len()` super-blocks.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn a8_q6_k<const R: usize>(w: &[BlockQ6K], x: &[BlockQ8K], y: &mut [f32]) {
    let nb = x.len();
    debug_assert!(w.len() == R * nb && y.len() == R);
    let mut accs = [_mm256_setzero_ps(); R];
    let m4 = _mm256_set1_epi8(0x0F);
    let m2 = _mm256_set1_epi8(3);
    let k32 = _mm256_set1_epi8(32);
    for (i, xb) in x.iter().enumerate() {
        let dx = xb.d();
        for (r, acc) in accs.iter_mut().enumerate() {
            // SAFETY: in bounds (debug-asserted above).
            let b = unsafe { w.get_unchecked(r * nb + i) };
            let mut sumi = _mm256_setzero_si256();
            for c in 0..2 {
                // SAFETY: ql has 128 bytes, qh 64; offsets stay inside.
                let (ql0, ql1, qh) = unsafe {
                    (
                        _mm256_loadu_si256(b.ql.as_ptr().add(64 * c).cast()),
                        _mm256_loadu_si256(b.ql.as_ptr().add(64 * c + 32).cast()),
                        _mm256_loadu_si256(b.qh.as_ptr().add(32 * c).cast()),
                    )
                };
                let high = |sh: __m256i| _mm256_slli_epi16::<4>(_mm256_and_si256(sh, m2));
                let parts = [
                    _mm256_or_si256(_mm256_and_si256(ql0, m4), high(qh)),
                    _mm256_or_si256(_mm256_and_si256(ql1, m4), high(_mm256_srli_epi16::<2>(qh))),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4),
                        high(_mm256_srli_epi16::<4>(qh)),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
                        high(_mm256_srli_epi16::<6>(qh)),
                    ),
                ];
                for (p, q) in parts.into_iter().enumerate() {
                    let g = 128 * c + 32 * p;
                    // SAFETY: g + 32 <= 256.
                    let xv = unsafe { _mm256_loadu_si256(xb.qs.as_ptr().add(g).cast()) };
                    let d = sdot_avx2(_mm256_sub_epi8(q, k32), xv);
                    let sc = _mm256_set_m128i(
                        _mm_set1_epi32(b.scales[g / 16 + 1] as i32),
                        _mm_set1_epi32(b.scales[g / 16] as i32),
                    );
                    sumi = _mm256_add_epi32(sumi, _mm256_mullo_epi32(d, sc));
                }
            }
            let s = _mm256_cvtepi32_ps(sumi);
            *acc = _mm256_fmadd_ps(_mm256_set1_ps(fp16(b.d) * dx), s, *acc);
        }
    }
    for (out, acc) in y.iter_mut().zip(accs) {
        *out = hsum(acc);
    }
}

/// W·A8 with `vpmaddubsw` (AVX2).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; shapes as in `drive`.
pub unsafe fn gemv_a8(w: A8Rows<'_>, y: &mut [f32], rpb: QGemvParams) {
    // SAFETY (all arms): forwarded from the caller.
    unsafe {
        a8_entry!(w, y, rpb, [
            Q4_0 => a8_q4_0, Q8_0 => a8_q8_0, Mxfp4 => a8_mxfp4, Q4_1 => a8_q4_1,
            Q4K => a8_k_sub<BlockQ4K>, Q5K => a8_k_sub<BlockQ5K>, Q6K => a8_q6_k,
            Q5_0 => a8_q5_0, Q5_1 => a8_q5_1,
        ])
    }
}

/// W·A8 with `vpdpbusd` on 256-bit registers (AVX-VNNI).
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX-VNNI; shapes as in `drive`.
pub unsafe fn gemv_a8_vnni(w: A8Rows<'_>, y: &mut [f32], rpb: QGemvParams) {
    // SAFETY (all arms): forwarded from the caller.
    unsafe {
        a8_entry!(w, y, rpb, [
            Q4_0 => vnni_q4_0, Q8_0 => vnni_q8_0, Mxfp4 => vnni_mxfp4, Q4_1 => vnni_q4_1,
            Q5_0 => vnni_q5_0, Q5_1 => vnni_q5_1,
        ])
    }
}
