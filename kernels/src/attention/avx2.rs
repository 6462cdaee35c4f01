//! AVX2 + FMA + F16C row kernels: 8 lanes, f16 rows widened with
//! `vcvtph2ps`, Q8_0 rows widened `i8 → i32 → f32` in registers. Scores
//! take one key row at a time with two accumulators; the value axpy keeps
//! a 32-wide slice of the accumulator in registers across all rows of the
//! page, so it is loaded and stored once per page.

use crate::eltwise::avx2::{exp8, hsum8};
use crate::quant::{BlockQ8_0, QK};
use half::f16;
use std::arch::x86_64::*;

/// A page element that loads as 8 f32 lanes.
trait Lane8: Copy {
    /// # Safety
    /// AVX2 + F16C available; `p` valid for 8 reads.
    unsafe fn load8(p: *const Self) -> __m256;
    fn f32(self) -> f32;
}

impl Lane8 for f32 {
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> __m256 {
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    fn f32(self) -> f32 {
        self
    }
}

impl Lane8 for f16 {
    #[inline(always)]
    unsafe fn load8(p: *const f16) -> __m256 {
        // f16 is a transparent u16.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
    }
    #[inline(always)]
    fn f32(self) -> f32 {
        self.to_f32()
    }
}

/// Dot products of `q` with the `R` rows of `hd` values at `k`: the `R`
/// rows share each load of `q` and run `R` independent FMA chains.
///
/// # Safety
/// AVX2 + FMA + F16C; `k` valid for `R · hd` reads, `q.len() == hd`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_rows<T: Lane8, const R: usize>(q: &[f32], k: *const T) -> [f32; R] {
    let hd = q.len();
    let main = hd / 8 * 8;
    let qp = q.as_ptr();
    let mut a = [_mm256_setzero_ps(); R];
    let mut i = 0;
    let mut dots = [0.0f32; R];
    // SAFETY: lanes below `main` <= hd in q and in each row.
    unsafe {
        while i < main {
            let qv = _mm256_loadu_ps(qp.add(i));
            for (r, ar) in a.iter_mut().enumerate() {
                *ar = _mm256_fmadd_ps(qv, T::load8(k.add(r * hd + i)), *ar);
            }
            i += 8;
        }
        for (r, d) in dots.iter_mut().enumerate() {
            *d = hsum8(a[r]);
            for (j, &qj) in q.iter().enumerate().skip(main) {
                *d += qj * (*k.add(r * hd + j)).f32();
            }
        }
    }
    dots
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scores_dense<T: Lane8>(q: &[f32], k: &[T], scale: f32, out: &mut [f32]) {
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

/// `s[j] = e^(s[j] - m)` (vector `exp8`); returns the sum.
///
/// # Safety
/// AVX2 + FMA + F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn exp_sum(s: &mut [f32], m: f32) -> f32 {
    let n = s.len();
    let p = s.as_mut_ptr();
    let mv = _mm256_set1_ps(m);
    let mut acc = _mm256_setzero_ps();
    let mut i = 0;
    // SAFETY: i + 8 <= n.
    unsafe {
        while i + 8 <= n {
            let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(i)), mv));
            _mm256_storeu_ps(p.add(i), e);
            acc = _mm256_add_ps(acc, e);
            i += 8;
        }
    }
    let mut sum = hsum8(acc);
    for x in &mut s[i..] {
        *x = (*x - m).exp();
        sum += *x;
    }
    sum
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn accum_dense<T: Lane8>(acc: &mut [f32], p: &[f32], v: &[T]) {
    let hd = acc.len();
    debug_assert_eq!(v.len(), p.len() * hd);
    let ap = acc.as_mut_ptr();
    let vp = v.as_ptr();
    let mut i = 0;
    // SAFETY: lanes i..i+32 (or i+8) are below hd; row t starts at t·hd.
    unsafe {
        while i + 32 <= hd {
            let mut a = [
                _mm256_loadu_ps(ap.add(i)),
                _mm256_loadu_ps(ap.add(i + 8)),
                _mm256_loadu_ps(ap.add(i + 16)),
                _mm256_loadu_ps(ap.add(i + 24)),
            ];
            for (t, &pt) in p.iter().enumerate() {
                let pv = _mm256_set1_ps(pt);
                let r = vp.add(t * hd + i);
                for (u, au) in a.iter_mut().enumerate() {
                    *au = _mm256_fmadd_ps(pv, T::load8(r.add(8 * u)), *au);
                }
            }
            for (u, au) in a.iter().enumerate() {
                _mm256_storeu_ps(ap.add(i + 8 * u), *au);
            }
            i += 32;
        }
        while i + 8 <= hd {
            let mut a = _mm256_loadu_ps(ap.add(i));
            for (t, &pt) in p.iter().enumerate() {
                a = _mm256_fmadd_ps(_mm256_set1_ps(pt), T::load8(vp.add(t * hd + i)), a);
            }
            _mm256_storeu_ps(ap.add(i), a);
            i += 8;
        }
    }
    for (t, &pt) in p.iter().enumerate() {
        for j in i..hd {
            acc[j] += pt * v[t * hd + j].f32();
        }
    }
}

/// 8 int8 at `p` as 8 f32 lanes.
///
/// # Safety
/// AVX2 available; `p` valid for 8 reads.
#[inline(always)]
unsafe fn load8_i8(p: *const i8) -> __m256 {
    unsafe { _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p as *const __m128i))) }
}

/// # Safety
/// AVX2 + FMA + F16C; `k` holds `out.len()` rows of `q.len()` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn scores_f32(q: &[f32], k: &[f32], scale: f32, out: &mut [f32]) {
    scores_dense(q, k, scale, out)
}

/// # Safety
/// AVX2 + FMA + F16C; `k` holds `out.len()` rows of `q.len()` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn scores_f16(q: &[f32], k: &[f16], scale: f32, out: &mut [f32]) {
    scores_dense(q, k, scale, out)
}

/// # Safety
/// AVX2 + FMA + F16C; `v` holds `p.len()` rows of `acc.len()` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn accum_f32(acc: &mut [f32], p: &[f32], v: &[f32]) {
    accum_dense(acc, p, v)
}

/// # Safety
/// AVX2 + FMA + F16C; `v` holds `p.len()` rows of `acc.len()` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn accum_f16(acc: &mut [f32], p: &[f32], v: &[f16]) {
    accum_dense(acc, p, v)
}

/// Scores against Q8_0 rows: per block `d · Σ q·qs`, the block sum kept in
/// a vector and scaled by `d` with one FMA.
///
/// # Safety
/// AVX2 + FMA + F16C; `q.len()` is a multiple of 32 and `k` holds
/// `out.len()` rows of `q.len() / 32` blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn scores_q8(q: &[f32], k: &[BlockQ8_0], scale: f32, out: &mut [f32]) {
    let nb = q.len() / QK;
    debug_assert_eq!(k.len(), out.len() * nb);
    let qp = q.as_ptr();
    for (s, kr) in out.iter_mut().zip(k.chunks_exact(nb)) {
        let mut acc = _mm256_setzero_ps();
        for (b, blk) in kr.iter().enumerate() {
            let x = blk.qs.as_ptr();
            let qb = qp.wrapping_add(b * QK);
            // SAFETY: 32 quants per block, 32 query values per block.
            unsafe {
                let mut s = _mm256_mul_ps(_mm256_loadu_ps(qb), load8_i8(x));
                s = _mm256_fmadd_ps(_mm256_loadu_ps(qb.add(8)), load8_i8(x.add(8)), s);
                s = _mm256_fmadd_ps(_mm256_loadu_ps(qb.add(16)), load8_i8(x.add(16)), s);
                s = _mm256_fmadd_ps(_mm256_loadu_ps(qb.add(24)), load8_i8(x.add(24)), s);
                acc = _mm256_fmadd_ps(s, _mm256_set1_ps(blk.d.to_f32()), acc);
            }
        }
        *s = hsum8(acc) * scale;
    }
}

/// Value axpy over Q8_0 rows: per block `acc += (p·d) · qs`, the block's
/// 32 accumulators held in registers across the page's rows.
///
/// # Safety
/// AVX2 + FMA + F16C; `acc.len()` is a multiple of 32 and `v` holds
/// `p.len()` rows of `acc.len() / 32` blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn accum_q8(acc: &mut [f32], p: &[f32], v: &[BlockQ8_0]) {
    let nb = acc.len() / QK;
    debug_assert_eq!(v.len(), p.len() * nb);
    for (b, ab) in acc.chunks_exact_mut(QK).enumerate() {
        let ap = ab.as_mut_ptr();
        // SAFETY: ab holds 32 values; each block holds 32 quants.
        unsafe {
            let mut a = [
                _mm256_loadu_ps(ap),
                _mm256_loadu_ps(ap.add(8)),
                _mm256_loadu_ps(ap.add(16)),
                _mm256_loadu_ps(ap.add(24)),
            ];
            for (t, &pt) in p.iter().enumerate() {
                let blk = &v[t * nb + b];
                let pd = _mm256_set1_ps(pt * blk.d.to_f32());
                let x = blk.qs.as_ptr();
                for (u, au) in a.iter_mut().enumerate() {
                    *au = _mm256_fmadd_ps(pd, load8_i8(x.add(8 * u)), *au);
                }
            }
            for (u, au) in a.iter().enumerate() {
                _mm256_storeu_ps(ap.add(8 * u), *au);
            }
        }
    }
}
