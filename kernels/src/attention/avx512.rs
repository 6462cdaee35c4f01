//! AVX-512 (F + BW + VL) row kernels: 16 lanes, head-dim tails done with
//! masked loads, f16 rows widened with `vcvtph2ps zmm`, Q8_0 rows widened
//! `i8 → i32 → f32` in registers (a 32-block is two vectors). Same loop
//! structure as the AVX2 file: one key row at a time for scores, a 64-wide
//! accumulator slice held in registers across the page for the value axpy.

use crate::eltwise::avx512::{exp16, tail_mask};
use crate::quant::{BlockQ8_0, QK};
use half::f16;
use std::arch::x86_64::*;

/// A page element that loads as 16 f32 lanes.
trait Lane16: Copy {
    /// # Safety
    /// AVX-512 F/BW/VL available; `p` valid for 16 reads.
    unsafe fn load16(p: *const Self) -> __m512;
    /// # Safety
    /// As `load16`, `p` valid for the lanes set in `m`.
    unsafe fn load_mask(m: __mmask16, p: *const Self) -> __m512;
}

impl Lane16 for f32 {
    #[inline(always)]
    unsafe fn load16(p: *const f32) -> __m512 {
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn load_mask(m: __mmask16, p: *const f32) -> __m512 {
        unsafe { _mm512_maskz_loadu_ps(m, p) }
    }
}

impl Lane16 for f16 {
    #[inline(always)]
    unsafe fn load16(p: *const f16) -> __m512 {
        // f16 is a transparent u16.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
    }
    #[inline(always)]
    unsafe fn load_mask(m: __mmask16, p: *const f16) -> __m512 {
        unsafe { _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p as *const i16)) }
    }
}

/// Dot products of `q` with the `R` rows of `hd` values at `k`: the `R`
/// rows share each load of `q` and run `R` independent FMA chains; the
/// head-dim tail is a masked load.
///
/// # Safety
/// AVX-512 F/BW/VL + FMA + F16C; `k` valid for `R · hd` reads, `q.len() == hd`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
unsafe fn dot_rows<T: Lane16, const R: usize>(q: &[f32], k: *const T) -> [f32; R] {
    let hd = q.len();
    let qp = q.as_ptr();
    let mut a = [_mm512_setzero_ps(); R];
    let mut i = 0;
    // SAFETY: full loads stay below hd; the tail load is masked to it.
    unsafe {
        while i + 16 <= hd {
            let qv = _mm512_loadu_ps(qp.add(i));
            for (r, ar) in a.iter_mut().enumerate() {
                *ar = _mm512_fmadd_ps(qv, T::load16(k.add(r * hd + i)), *ar);
            }
            i += 16;
        }
        if i < hd {
            let m = tail_mask(hd - i);
            let qv = _mm512_maskz_loadu_ps(m, qp.add(i));
            for (r, ar) in a.iter_mut().enumerate() {
                *ar = _mm512_fmadd_ps(qv, T::load_mask(m, k.add(r * hd + i)), *ar);
            }
        }
    }
    a.map(|v| _mm512_reduce_add_ps(v))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
fn scores_dense<T: Lane16>(q: &[f32], k: &[T], scale: f32, out: &mut [f32]) {
    let hd = q.len();
    debug_assert_eq!(k.len(), out.len() * hd);
    let kp = k.as_ptr();
    let mut t = 0;
    // SAFETY: rows t..t + 4 (or t) lie within k.
    unsafe {
        while t + 4 <= out.len() {
            let d = dot_rows::<T, 4>(q, kp.add(t * hd));
            for (o, x) in out[t..t + 4].iter_mut().zip(d) {
                *o = x * scale;
            }
            t += 4;
        }
        while t < out.len() {
            out[t] = dot_rows::<T, 1>(q, kp.add(t * hd))[0] * scale;
            t += 1;
        }
    }
}

/// `s[j] = e^(s[j] - m)` (vector `exp16`, masked tail); returns the sum.
///
/// # Safety
/// AVX-512 F/BW/VL + FMA + F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
pub unsafe fn exp_sum(s: &mut [f32], m: f32) -> f32 {
    let n = s.len();
    let p = s.as_mut_ptr();
    let mv = _mm512_set1_ps(m);
    let mut acc = _mm512_setzero_ps();
    let mut i = 0;
    // SAFETY: the mask covers only lanes below n.
    unsafe {
        while i < n {
            let mk = tail_mask((n - i).min(16));
            let e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, p.add(i)), mv));
            _mm512_mask_storeu_ps(p.add(i), mk, e);
            acc = _mm512_mask_add_ps(acc, mk, acc, e);
            i += 16;
        }
    }
    _mm512_reduce_add_ps(acc)
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
fn accum_dense<T: Lane16>(acc: &mut [f32], p: &[f32], v: &[T]) {
    let hd = acc.len();
    debug_assert_eq!(v.len(), p.len() * hd);
    let ap = acc.as_mut_ptr();
    let vp = v.as_ptr();
    let mut i = 0;
    // SAFETY: lanes i..i+64 are below hd; the tail is masked to hd.
    unsafe {
        while i + 64 <= hd {
            let mut a = [
                _mm512_loadu_ps(ap.add(i)),
                _mm512_loadu_ps(ap.add(i + 16)),
                _mm512_loadu_ps(ap.add(i + 32)),
                _mm512_loadu_ps(ap.add(i + 48)),
            ];
            for (t, &pt) in p.iter().enumerate() {
                let pv = _mm512_set1_ps(pt);
                let r = vp.add(t * hd + i);
                for (u, au) in a.iter_mut().enumerate() {
                    *au = _mm512_fmadd_ps(pv, T::load16(r.add(16 * u)), *au);
                }
            }
            for (u, au) in a.iter().enumerate() {
                _mm512_storeu_ps(ap.add(i + 16 * u), *au);
            }
            i += 64;
        }
        while i < hd {
            let m = tail_mask((hd - i).min(16));
            let mut a = _mm512_maskz_loadu_ps(m, ap.add(i));
            for (t, &pt) in p.iter().enumerate() {
                a = _mm512_fmadd_ps(_mm512_set1_ps(pt), T::load_mask(m, vp.add(t * hd + i)), a);
            }
            _mm512_mask_storeu_ps(ap.add(i), m, a);
            i += 16;
        }
    }
}

/// 16 int8 at `p` as 16 f32 lanes.
///
/// # Safety
/// AVX-512F available; `p` valid for 16 reads.
#[inline(always)]
unsafe fn load16_i8(p: *const i8) -> __m512 {
    unsafe { _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p as *const __m128i))) }
}

/// # Safety
/// AVX-512 F/BW/VL + FMA + F16C; `k` holds `out.len()` rows of `q.len()` values.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
pub unsafe fn scores_f32(q: &[f32], k: &[f32], scale: f32, out: &mut [f32]) {
    scores_dense(q, k, scale, out)
}

/// # Safety
/// AVX-512 F/BW/VL + FMA + F16C; `k` holds `out.len()` rows of `q.len()` values.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
pub unsafe fn scores_f16(q: &[f32], k: &[f16], scale: f32, out: &mut [f32]) {
    scores_dense(q, k, scale, out)
}

/// # Safety
/// AVX-512 F/BW/VL + FMA + F16C; `v` holds `p.len()` rows of `acc.len()` values.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
pub unsafe fn accum_f32(acc: &mut [f32], p: &[f32], v: &[f32]) {
    accum_dense(acc, p, v)
}

/// # Safety
/// AVX-512 F/BW/VL + FMA + F16C; `v` holds `p.len()` rows of `acc.len()` values.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
pub unsafe fn accum_f16(acc: &mut [f32], p: &[f32], v: &[f16]) {
    accum_dense(acc, p, v)
}

/// Scores against Q8_0 rows: per block `d · Σ q·qs`.
///
/// # Safety
/// AVX-512 F/BW/VL + FMA + F16C; `q.len()` is a multiple of 32 and `k`
/// holds `out.len()` rows of `q.len() / 32` blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
pub unsafe fn scores_q8(q: &[f32], k: &[BlockQ8_0], scale: f32, out: &mut [f32]) {
    let nb = q.len() / QK;
    debug_assert_eq!(k.len(), out.len() * nb);
    let qp = q.as_ptr();
    for (s, kr) in out.iter_mut().zip(k.chunks_exact(nb)) {
        let mut acc = _mm512_setzero_ps();
        for (b, blk) in kr.iter().enumerate() {
            let x = blk.qs.as_ptr();
            let qb = qp.wrapping_add(b * QK);
            // SAFETY: 32 quants per block, 32 query values per block.
            unsafe {
                let mut s = _mm512_mul_ps(_mm512_loadu_ps(qb), load16_i8(x));
                s = _mm512_fmadd_ps(_mm512_loadu_ps(qb.add(16)), load16_i8(x.add(16)), s);
                acc = _mm512_fmadd_ps(s, _mm512_set1_ps(blk.d.to_f32()), acc);
            }
        }
        *s = _mm512_reduce_add_ps(acc) * scale;
    }
}

/// Value axpy over Q8_0 rows: per block `acc += (p·d) · qs`.
///
/// # Safety
/// AVX-512 F/BW/VL + FMA + F16C; `acc.len()` is a multiple of 32 and `v`
/// holds `p.len()` rows of `acc.len() / 32` blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
pub unsafe fn accum_q8(acc: &mut [f32], p: &[f32], v: &[BlockQ8_0]) {
    let nb = acc.len() / QK;
    debug_assert_eq!(v.len(), p.len() * nb);
    for (b, ab) in acc.chunks_exact_mut(QK).enumerate() {
        let ap = ab.as_mut_ptr();
        // SAFETY: ab holds 32 values; each block holds 32 quants.
        unsafe {
            let (mut a0, mut a1) = (_mm512_loadu_ps(ap), _mm512_loadu_ps(ap.add(16)));
            for (t, &pt) in p.iter().enumerate() {
                let blk = &v[t * nb + b];
                let pd = _mm512_set1_ps(pt * blk.d.to_f32());
                let x = blk.qs.as_ptr();
                a0 = _mm512_fmadd_ps(pd, load16_i8(x), a0);
                a1 = _mm512_fmadd_ps(pd, load16_i8(x.add(16)), a1);
            }
            _mm512_storeu_ps(ap, a0);
            _mm512_storeu_ps(ap.add(16), a1);
        }
    }
}
