//! AVX-512 quantized GEMV (F/BW/VL/DQ), and the AVX-512 VNNI W·A8 variant.
//!
//! W·A32: a 32-value block is two `__m512` (low nibbles = values 0..16,
//! high = 16..32), widened with `vpmovsxbd` and dotted with two activation
//! vectors. W·A8: two consecutive blocks share one `__m512i` (lanes 0..8 of
//! the i32 result belong to the first block, 8..16 to the second), so each
//! `vpmaddubsw`/`vpdpbusd` covers 64 products; an odd last block is paired
//! with zeros. AVX-512BW has no `vpsignb`, so the sign trick uses
//! `vpabsb` and a masked negate (`x` negated where `w < 0`).

use super::{A8Rows, QGemvParams, Rows, a8_entry, a32_entry};
use crate::quant::blocks::{
    BlockMxfp4, BlockQ4_0, BlockQ4_1, BlockQ8_0, BlockQ8_1, F16Le, KVALUES_MXFP4, QK,
    e8m0_to_f32_half,
};
use std::arch::x86_64::*;

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn fp16(h: F16Le) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(
        u16::from_le_bytes(h.0) as i32
    )))
}

/// Splits 16 packed bytes into (low nibbles, high nibbles).
///
/// # Safety
/// `qs` must point to 16 readable bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn nibbles(qs: *const u8) -> (__m128i, __m128i) {
    // SAFETY: the caller guarantees 16 readable bytes.
    let q = unsafe { _mm_loadu_si128(qs.cast()) };
    let m = _mm_set1_epi8(0x0F);
    (
        _mm_and_si128(q, m),
        _mm_and_si128(_mm_srli_epi16::<4>(q), m),
    )
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn mxfp4_table() -> __m128i {
    // SAFETY: KVALUES_MXFP4 is 16 bytes.
    unsafe { _mm_loadu_si128(KVALUES_MXFP4.as_ptr().cast()) }
}

/// Σ q·x over one block given its int8 quants `lo` (values 0..16), `hi` (16..32).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn dot_i8_f32(lo: __m128i, hi: __m128i, x: &[__m512; 2]) -> __m512 {
    let f = |v: __m128i| _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v));
    _mm512_fmadd_ps(f(hi), x[1], _mm512_mul_ps(f(lo), x[0]))
}

macro_rules! a32_kernel {
    ($name:ident, $B:ty, |$b:ident, $x:ident, $xs:ident, $acc:ident| $body:expr) => {
        /// # Safety
        /// Needs AVX-512 F/BW/VL/DQ (+ the AVX2 level); `w` holds `y.len()`
        /// rows of `x.len() / 32` blocks.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
        unsafe fn $name<const R: usize>(w: &[$B], x: &[f32], y: &mut [f32]) {
            let nb = x.len() / QK;
            debug_assert!(w.len() == R * nb && y.len() == R);
            let mut accs = [_mm512_setzero_ps(); R];
            for i in 0..nb {
                let xp = x[QK * i..QK * i + QK].as_ptr();
                // SAFETY: the slice above holds 32 floats.
                let $x = unsafe { [_mm512_loadu_ps(xp), _mm512_loadu_ps(xp.add(16))] };
                #[allow(unused_variables)]
                let $xs = _mm512_add_ps($x[0], $x[1]);
                for (r, acc) in accs.iter_mut().enumerate() {
                    // SAFETY: r < R and i < nb (debug-asserted above).
                    let $b = unsafe { w.get_unchecked(r * nb + i) };
                    let $acc = *acc;
                    *acc = $body;
                }
            }
            for (out, acc) in y.iter_mut().zip(accs) {
                *out = _mm512_reduce_add_ps(acc);
            }
        }
    };
}

a32_kernel!(a32_q4_0, BlockQ4_0, |b, x, xs, acc| {
    // SAFETY: qs is 16 bytes.
    let (lo, hi) = unsafe { nibbles(b.qs.as_ptr()) };
    let eight = _mm_set1_epi8(8);
    let s = dot_i8_f32(_mm_sub_epi8(lo, eight), _mm_sub_epi8(hi, eight), &x);
    _mm512_fmadd_ps(_mm512_set1_ps(fp16(b.d)), s, acc)
});

a32_kernel!(a32_q4_1, BlockQ4_1, |b, x, xs, acc| {
    // SAFETY: qs is 16 bytes.
    let (lo, hi) = unsafe { nibbles(b.qs.as_ptr()) };
    let s = dot_i8_f32(lo, hi, &x);
    let acc = _mm512_fmadd_ps(_mm512_set1_ps(fp16(b.d)), s, acc);
    _mm512_fmadd_ps(_mm512_set1_ps(fp16(b.m)), xs, acc)
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
    _mm512_fmadd_ps(_mm512_set1_ps(fp16(b.d)), s, acc)
});

a32_kernel!(a32_mxfp4, BlockMxfp4, |b, x, xs, acc| {
    // SAFETY: qs is 16 bytes.
    let (lo, hi) = unsafe { nibbles(b.qs.as_ptr()) };
    let t = mxfp4_table();
    let s = dot_i8_f32(_mm_shuffle_epi8(t, lo), _mm_shuffle_epi8(t, hi), &x);
    _mm512_fmadd_ps(_mm512_set1_ps(e8m0_to_f32_half(b.e)), s, acc)
});

/// W·A32 over the rows of `w`.
///
/// # Safety
/// The CPU must support the AVX-512 level; `w` holds `y.len()` rows of
/// `x.len() / block_size` blocks. Other formats fall back to scalar.
pub unsafe fn gemv_a32(w: Rows<'_>, x: &[f32], y: &mut [f32], rpb: QGemvParams) {
    // SAFETY (all arms): forwarded from the caller.
    unsafe {
        a32_entry!(w, x, y, rpb, [
            Q4_0 => a32_q4_0, Q4_1 => a32_q4_1, Q8_0 => a32_q8_0, Mxfp4 => a32_mxfp4,
        ])
    }
}

/// Two 32-byte halves as one 64-byte vector.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn pair(a: __m256i, b: __m256i) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b)
}

/// 16 lanes: `a` in lanes 0..8, `b` in 8..16.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn pair_ps(a: f32, b: f32) -> __m512 {
    _mm512_insertf32x8::<1>(_mm512_castps256_ps512(_mm256_set1_ps(a)), _mm256_set1_ps(b))
}

/// Signed × signed int8 dot, 16 i32 partial sums (AVX-512BW).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn sdot_bw(w: __m512i, x: __m512i) -> __m512i {
    let neg = _mm512_movepi8_mask(w);
    let sx = _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x);
    let p = _mm512_maddubs_epi16(_mm512_abs_epi8(w), sx);
    _mm512_madd_epi16(p, _mm512_set1_epi16(1))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn udot_bw(w: __m512i, x: __m512i) -> __m512i {
    _mm512_madd_epi16(_mm512_maddubs_epi16(w, x), _mm512_set1_epi16(1))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,avx512vnni")]
fn sdot_vnni(w: __m512i, x: __m512i) -> __m512i {
    let neg = _mm512_movepi8_mask(w);
    let sx = _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x);
    _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(w), sx)
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,avx512vnni")]
fn udot_vnni(w: __m512i, x: __m512i) -> __m512i {
    _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, x)
}

/// 32 nibbles of a block as bytes in value order.
///
/// # Safety
/// `qs` must point to 16 readable bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn nibbles256(qs: *const u8) -> __m256i {
    // SAFETY: forwarded.
    let (lo, hi) = unsafe { nibbles(qs) };
    _mm256_set_m128i(hi, lo)
}

/// Generates a W·A8 kernel over block pairs. `$decode` maps a weight
/// block `$b` to (int8 values in order, f32 scale, f32 offset `m`), and
/// `$xdecode` maps an activation block to (its quants, `d`, `s`).
macro_rules! a8_kernel {
    ($feat:literal, $dot:ident, $name:ident, $B:ty, $X:ty, |$b:ident| $decode:expr) => {
        /// # Safety
        /// Needs the target features above; `w` holds `y.len()` rows of `x.len()` blocks.
        #[target_feature(enable = $feat)]
        unsafe fn $name<const R: usize>(w: &[$B], x: &[$X], y: &mut [f32]) {
            let nb = x.len();
            debug_assert!(w.len() == R * nb && y.len() == R);
            let mut accs = [_mm512_setzero_ps(); R];
            let mut offs = [0.0f32; R];
            let mut i = 0;
            while i < nb {
                let two = i + 1 < nb;
                let xq = |j: usize| -> (__m256i, f32, f32) {
                    let xb = &x[j];
                    // SAFETY: qs is 32 bytes.
                    let q = unsafe { _mm256_loadu_si256(xb.qs.as_ptr().cast()) };
                    (q, fp16(xb.d), act_sum(xb))
                };
                let (x0, dx0, sx0) = xq(i);
                let (x1, dx1, sx1) = if two {
                    xq(i + 1)
                } else {
                    (_mm256_setzero_si256(), 0.0, 0.0)
                };
                let xv = pair(x0, x1);
                for r in 0..R {
                    let dec = |j: usize| -> (__m256i, f32, f32) {
                        // SAFETY: r < R and j < nb (debug-asserted above).
                        let $b = unsafe { w.get_unchecked(r * nb + j) };
                        $decode
                    };
                    let (w0, d0, m0) = dec(i);
                    let (w1, d1, m1) = if two {
                        dec(i + 1)
                    } else {
                        (_mm256_setzero_si256(), 0.0, 0.0)
                    };
                    let s = _mm512_cvtepi32_ps($dot(pair(w0, w1), xv));
                    accs[r] = _mm512_fmadd_ps(pair_ps(d0 * dx0, d1 * dx1), s, accs[r]);
                    offs[r] += m0 * sx0 + m1 * sx1;
                }
                i += 2;
            }
            for r in 0..R {
                y[r] = _mm512_reduce_add_ps(accs[r]) + offs[r];
            }
        }
    };
}

/// The activation block's `s = d · Σq` term (zero for Q8_0, which pairs
/// with offset-free formats).
trait ActSum {
    fn sum(&self) -> f32;
}
impl ActSum for BlockQ8_0 {
    #[inline(always)]
    fn sum(&self) -> f32 {
        0.0
    }
}
impl ActSum for BlockQ8_1 {
    #[inline(always)]
    fn sum(&self) -> f32 {
        self.s.to_f32()
    }
}
#[inline(always)]
fn act_sum<X: ActSum>(x: &X) -> f32 {
    x.sum()
}

macro_rules! a8_family {
    ($feat:literal, $sdot:ident, $udot:ident, $q4_0:ident, $q8_0:ident, $mxfp4:ident, $q4_1:ident) => {
        a8_kernel!($feat, $sdot, $q4_0, BlockQ4_0, BlockQ8_0, |b| {
            // SAFETY: qs is 16 bytes.
            let q = unsafe { nibbles256(b.qs.as_ptr()) };
            (_mm256_sub_epi8(q, _mm256_set1_epi8(8)), fp16(b.d), 0.0)
        });
        a8_kernel!($feat, $sdot, $q8_0, BlockQ8_0, BlockQ8_0, |b| {
            // SAFETY: qs is 32 bytes.
            (
                unsafe { _mm256_loadu_si256(b.qs.as_ptr().cast()) },
                fp16(b.d),
                0.0,
            )
        });
        a8_kernel!($feat, $sdot, $mxfp4, BlockMxfp4, BlockQ8_0, |b| {
            // SAFETY: qs is 16 bytes.
            let q = unsafe { nibbles256(b.qs.as_ptr()) };
            let t = _mm256_broadcastsi128_si256(mxfp4_table());
            (_mm256_shuffle_epi8(t, q), e8m0_to_f32_half(b.e), 0.0)
        });
        a8_kernel!($feat, $udot, $q4_1, BlockQ4_1, BlockQ8_1, |b| {
            // SAFETY: qs is 16 bytes.
            (unsafe { nibbles256(b.qs.as_ptr()) }, fp16(b.d), fp16(b.m))
        });
    };
}

a8_family!(
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c",
    sdot_bw,
    udot_bw,
    a8_q4_0,
    a8_q8_0,
    a8_mxfp4,
    a8_q4_1
);
a8_family!(
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,avx512vnni",
    sdot_vnni,
    udot_vnni,
    vnni_q4_0,
    vnni_q8_0,
    vnni_mxfp4,
    vnni_q4_1
);

/// W·A8 with `vpmaddubsw` on 512-bit registers (AVX-512BW).
///
/// # Safety
/// The CPU must support the AVX-512 level; shapes as in `drive`. Other
/// formats fall back to scalar.
pub unsafe fn gemv_a8(w: A8Rows<'_>, y: &mut [f32], rpb: QGemvParams) {
    // SAFETY (all arms): forwarded from the caller.
    unsafe {
        a8_entry!(w, y, rpb, [
            Q4_0 => a8_q4_0, Q8_0 => a8_q8_0, Mxfp4 => a8_mxfp4, Q4_1 => a8_q4_1,
        ])
    }
}

/// W·A8 with `vpdpbusd` on 512-bit registers (AVX-512 VNNI).
///
/// # Safety
/// The CPU must support the AVX-512 level and AVX512_VNNI; shapes as in `drive`.
pub unsafe fn gemv_a8_vnni(w: A8Rows<'_>, y: &mut [f32], rpb: QGemvParams) {
    // SAFETY (all arms): forwarded from the caller.
    unsafe {
        a8_entry!(w, y, rpb, [
            Q4_0 => vnni_q4_0, Q8_0 => vnni_q8_0, Mxfp4 => vnni_mxfp4, Q4_1 => vnni_q4_1,
        ])
    }
}
