//! AVX2 + FMA RMSNorm / LayerNorm: f32 sums in four 8-lane accumulators
//! (32 elements in flight), then one fused scale pass.

use super::NormKind;
use crate::eltwise::avx2::hsum8;
use std::arch::x86_64::*;

/// `Σ (x - shift)²` over `n` floats at `s`.
///
/// # Safety
/// AVX2 + FMA; `s` valid for `n` reads.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn sum_sq(s: *const f32, n: usize, shift: f32) -> f32 {
    let c = _mm256_set1_ps(shift);
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    // SAFETY: every load is below n.
    unsafe {
        while i + 32 <= n {
            for (k, a) in acc.iter_mut().enumerate() {
                let d = _mm256_sub_ps(_mm256_loadu_ps(s.add(i + 8 * k)), c);
                *a = _mm256_fmadd_ps(d, d, *a);
            }
            i += 32;
        }
        while i + 8 <= n {
            let d = _mm256_sub_ps(_mm256_loadu_ps(s.add(i)), c);
            acc[0] = _mm256_fmadd_ps(d, d, acc[0]);
            i += 8;
        }
        let mut t = hsum8(_mm256_add_ps(
            _mm256_add_ps(acc[0], acc[1]),
            _mm256_add_ps(acc[2], acc[3]),
        ));
        while i < n {
            let d = *s.add(i) - shift;
            t += d * d;
            i += 1;
        }
        t
    }
}

/// `Σ x` over `n` floats at `s`.
///
/// # Safety
/// AVX2 + FMA; `s` valid for `n` reads.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn sum(s: *const f32, n: usize) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    // SAFETY: every load is below n.
    unsafe {
        while i + 32 <= n {
            for (k, a) in acc.iter_mut().enumerate() {
                *a = _mm256_add_ps(*a, _mm256_loadu_ps(s.add(i + 8 * k)));
            }
            i += 32;
        }
        while i + 8 <= n {
            acc[0] = _mm256_add_ps(acc[0], _mm256_loadu_ps(s.add(i)));
            i += 8;
        }
        let mut t = hsum8(_mm256_add_ps(
            _mm256_add_ps(acc[0], acc[1]),
            _mm256_add_ps(acc[2], acc[3]),
        ));
        while i < n {
            t += *s.add(i);
            i += 1;
        }
        t
    }
}

/// Normalises one row of `n` floats from `s` into `o` (which may equal `s`).
///
/// # Safety
/// AVX2 + FMA; `s`, `w` (and `b`) valid for `n` reads, `o` for `n` writes.
#[target_feature(enable = "avx2,fma")]
unsafe fn row(
    kind: NormKind,
    s: *const f32,
    o: *mut f32,
    n: usize,
    w: *const f32,
    b: Option<*const f32>,
    eps: f32,
) {
    // SAFETY: forwarded from the caller; every access is below n.
    unsafe {
        let (mean, var) = match kind {
            NormKind::Rms => (0.0, sum_sq(s, n, 0.0) / n as f32),
            NormKind::Layer => {
                let mean = sum(s, n) / n as f32;
                (mean, sum_sq(s, n, mean) / n as f32)
            }
        };
        let inv = super::inv_std(var, eps);
        let (vm, vi) = (_mm256_set1_ps(mean), _mm256_set1_ps(inv));
        let mut i = 0;
        while i + 8 <= n {
            let y = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(s.add(i)), vm), vi);
            let y = match b {
                Some(b) => _mm256_fmadd_ps(y, _mm256_loadu_ps(w.add(i)), _mm256_loadu_ps(b.add(i))),
                None => _mm256_mul_ps(y, _mm256_loadu_ps(w.add(i))),
            };
            _mm256_storeu_ps(o.add(i), y);
            i += 8;
        }
        while i < n {
            let y = (*s.add(i) - mean) * inv;
            *o.add(i) = match b {
                Some(b) => y.mul_add(*w.add(i), *b.add(i)),
                None => y * *w.add(i),
            };
            i += 1;
        }
    }
}

/// Normalises a block of rows of length `w.len()`; `src = None` is in place.
///
/// # Safety
/// AVX2 + FMA; `src` (if any) has `dst`'s length, a multiple of `w.len()`;
/// `b` (if any) has `w`'s length.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn rows(
    kind: NormKind,
    src: Option<&[f32]>,
    dst: &mut [f32],
    w: &[f32],
    b: Option<&[f32]>,
    eps: f32,
) {
    let d = w.len();
    let nrows = dst.len() / d;
    let pd = dst.as_mut_ptr();
    let ps: *const f32 = src.map_or(pd as *const f32, |s| s.as_ptr());
    for r in 0..nrows {
        // SAFETY: row r lies inside both buffers.
        unsafe {
            row(
                kind,
                ps.add(r * d),
                pd.add(r * d),
                d,
                w.as_ptr(),
                b.map(|b| b.as_ptr()),
                eps,
            )
        };
    }
}
