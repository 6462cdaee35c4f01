//! AVX-512F RMSNorm / LayerNorm: f32 sums in four 16-lane accumulators
//! (64 elements in flight); tails use masked loads, then one fused scale pass.

use super::NormKind;
use crate::eltwise::avx512::tail_mask;
use std::arch::x86_64::*;

/// `Σ (x - shift)²` over `n` floats at `s`.
///
/// # Safety
/// AVX-512F; `s` valid for `n` reads.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn sum_sq(s: *const f32, n: usize, shift: f32) -> f32 {
    let c = _mm512_set1_ps(shift);
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut i = 0;
    // SAFETY: every load is below n.
    unsafe {
        while i + 64 <= n {
            for (k, a) in acc.iter_mut().enumerate() {
                let d = _mm512_sub_ps(_mm512_loadu_ps(s.add(i + 16 * k)), c);
                *a = _mm512_fmadd_ps(d, d, *a);
            }
            i += 64;
        }
        while i < n {
            let m = tail_mask((n - i).min(16));
            let d = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, s.add(i)), c);
            acc[0] = _mm512_fmadd_ps(d, d, acc[0]);
            i += 16;
        }
        let t = _mm512_reduce_add_ps(_mm512_add_ps(
            _mm512_add_ps(acc[0], acc[1]),
            _mm512_add_ps(acc[2], acc[3]),
        ));
        t
    }
}

/// `Σ x` over `n` floats at `s`.
///
/// # Safety
/// AVX-512F; `s` valid for `n` reads.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn sum(s: *const f32, n: usize) -> f32 {
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut i = 0;
    // SAFETY: every load is below n.
    unsafe {
        while i + 64 <= n {
            for (k, a) in acc.iter_mut().enumerate() {
                *a = _mm512_add_ps(*a, _mm512_loadu_ps(s.add(i + 16 * k)));
            }
            i += 64;
        }
        while i < n {
            let m = tail_mask((n - i).min(16));
            acc[0] = _mm512_add_ps(acc[0], _mm512_maskz_loadu_ps(m, s.add(i)));
            i += 16;
        }
        let t = _mm512_reduce_add_ps(_mm512_add_ps(
            _mm512_add_ps(acc[0], acc[1]),
            _mm512_add_ps(acc[2], acc[3]),
        ));
        t
    }
}

/// Normalises one row of `n` floats from `s` into `o` (which may equal `s`).
///
/// # Safety
/// AVX-512F; `s`, `w` (and `b`) valid for `n` reads, `o` for `n` writes.
#[target_feature(enable = "avx512f")]
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
        let (vm, vi) = (_mm512_set1_ps(mean), _mm512_set1_ps(inv));
        let mut i = 0;
        while i < n {
            let m = tail_mask((n - i).min(16));
            let x = _mm512_maskz_loadu_ps(m, s.add(i));
            let y = _mm512_mul_ps(_mm512_sub_ps(x, vm), vi);
            let wv = _mm512_maskz_loadu_ps(m, w.add(i));
            let y = match b {
                Some(b) => _mm512_fmadd_ps(y, wv, _mm512_maskz_loadu_ps(m, b.add(i))),
                None => _mm512_mul_ps(y, wv),
            };
            _mm512_mask_storeu_ps(o.add(i), m, y);
            i += 16;
        }
    }
}

/// Normalises a block of rows of length `w.len()`; `src = None` is in place.
///
/// # Safety
/// AVX-512F; `src` (if any) has `dst`'s length, a multiple of `w.len()`;
/// `b` (if any) has `w`'s length.
#[target_feature(enable = "avx512f")]
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
