//! AVX2 + FMA RoPE: rotate_half works on 8 contiguous pairs `(i, i + d/2)`;
//! interleaved rotates 4 adjacent pairs per register with `vfmaddsub`
//! (even lanes `a·c - b·s`, odd lanes `b·c + a·s`).

use super::RopeLayout;
use std::arch::x86_64::*;

/// Rotates the first `2 * cos.len()` features of one head in place.
///
/// # Safety
/// AVX2 + FMA; `x.len() >= 2 * cos.len()`, `sin.len() == cos.len()`.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn head(x: &mut [f32], cos: &[f32], sin: &[f32], layout: RopeLayout) {
    let half = cos.len();
    debug_assert!(x.len() >= 2 * half && sin.len() == half);
    let p = x.as_mut_ptr();
    let (pc, ps) = (cos.as_ptr(), sin.as_ptr());
    let mut i = 0;
    // SAFETY: every access is below half (cos/sin) or 2·half (x).
    unsafe {
        match layout {
            RopeLayout::RotateHalf => {
                while i + 8 <= half {
                    let a = _mm256_loadu_ps(p.add(i));
                    let b = _mm256_loadu_ps(p.add(half + i));
                    let c = _mm256_loadu_ps(pc.add(i));
                    let s = _mm256_loadu_ps(ps.add(i));
                    _mm256_storeu_ps(p.add(i), _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
                    _mm256_storeu_ps(p.add(half + i), _mm256_fmadd_ps(b, c, _mm256_mul_ps(a, s)));
                    i += 8;
                }
                while i < half {
                    let (a, b) = (*p.add(i), *p.add(half + i));
                    let (c, s) = (*pc.add(i), *ps.add(i));
                    *p.add(i) = a.mul_add(c, -(b * s));
                    *p.add(half + i) = b.mul_add(c, a * s);
                    i += 1;
                }
            }
            RopeLayout::Interleaved => {
                while i + 4 <= half {
                    let v = _mm256_loadu_ps(p.add(2 * i));
                    let c4 = _mm_loadu_ps(pc.add(i));
                    let s4 = _mm_loadu_ps(ps.add(i));
                    let c = _mm256_set_m128(_mm_unpackhi_ps(c4, c4), _mm_unpacklo_ps(c4, c4));
                    let s = _mm256_set_m128(_mm_unpackhi_ps(s4, s4), _mm_unpacklo_ps(s4, s4));
                    let sw = _mm256_permute_ps::<0b1011_0001>(v);
                    _mm256_storeu_ps(p.add(2 * i), _mm256_fmaddsub_ps(v, c, _mm256_mul_ps(sw, s)));
                    i += 4;
                }
                while i < half {
                    let (a, b) = (*p.add(2 * i), *p.add(2 * i + 1));
                    let (c, s) = (*pc.add(i), *ps.add(i));
                    *p.add(2 * i) = a.mul_add(c, -(b * s));
                    *p.add(2 * i + 1) = b.mul_add(c, a * s);
                    i += 1;
                }
            }
        }
    }
}
