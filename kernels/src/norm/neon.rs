//! NEON RMSNorm / LayerNorm: f32 sums in four 4-lane accumulators
//! (16 elements in flight), then one fused scale pass.

use super::NormKind;
use std::arch::aarch64::*;

/// `Σ (x - shift)²` over `n` floats at `s`.
///
/// # Safety
/// NEON; `s` valid for `n` reads.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn sum_sq(s: *const f32, n: usize, shift: f32) -> f32 {
    let c = vdupq_n_f32(shift);
    let mut acc = [vdupq_n_f32(0.0); 4];
    let mut i = 0;
    // SAFETY: every load is below n.
    unsafe {
        while i + 16 <= n {
            for (k, a) in acc.iter_mut().enumerate() {
                let d = vsubq_f32(vld1q_f32(s.add(i + 4 * k)), c);
                *a = vfmaq_f32(*a, d, d);
            }
            i += 16;
        }
        while i + 4 <= n {
            let d = vsubq_f32(vld1q_f32(s.add(i)), c);
            acc[0] = vfmaq_f32(acc[0], d, d);
            i += 4;
        }
        let mut t = vaddvq_f32(vaddq_f32(
            vaddq_f32(acc[0], acc[1]),
            vaddq_f32(acc[2], acc[3]),
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
/// NEON; `s` valid for `n` reads.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn sum(s: *const f32, n: usize) -> f32 {
    let mut acc = [vdupq_n_f32(0.0); 4];
    let mut i = 0;
    // SAFETY: every load is below n.
    unsafe {
        while i + 16 <= n {
            for (k, a) in acc.iter_mut().enumerate() {
                *a = vaddq_f32(*a, vld1q_f32(s.add(i + 4 * k)));
            }
            i += 16;
        }
        while i + 4 <= n {
            acc[0] = vaddq_f32(acc[0], vld1q_f32(s.add(i)));
            i += 4;
        }
        let mut t = vaddvq_f32(vaddq_f32(
            vaddq_f32(acc[0], acc[1]),
            vaddq_f32(acc[2], acc[3]),
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
/// NEON; `s`, `w` (and `b`) valid for `n` reads, `o` for `n` writes.
#[target_feature(enable = "neon")]
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
        let (vm, vi) = (vdupq_n_f32(mean), vdupq_n_f32(inv));
        let mut i = 0;
        while i + 4 <= n {
            let y = vmulq_f32(vsubq_f32(vld1q_f32(s.add(i)), vm), vi);
            let y = match b {
                Some(b) => vfmaq_f32(vld1q_f32(b.add(i)), y, vld1q_f32(w.add(i))),
                None => vmulq_f32(y, vld1q_f32(w.add(i))),
            };
            vst1q_f32(o.add(i), y);
            i += 4;
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
/// NEON; `src` (if any) has `dst`'s length, a multiple of `w.len()`;
/// `b` (if any) has `w`'s length.
#[target_feature(enable = "neon")]
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
