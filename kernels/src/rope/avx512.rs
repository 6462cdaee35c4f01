//! AVX-512F RoPE: rotate_half on 16 pairs with masked tails; interleaved on
//! 8 adjacent pairs per register (`cos`/`sin` duplicated with `vpermps`,
//! combined with `vfmaddsub`).

use super::RopeLayout;
use crate::simd::avx512::tail_mask;
use std::arch::x86_64::*;

/// Rotates the first `2 * cos.len()` features of one head in place.
///
/// # Safety
/// AVX-512F; `x.len() >= 2 * cos.len()`, `sin.len() == cos.len()`.
#[target_feature(enable = "avx512f")]
pub unsafe fn head(x: &mut [f32], cos: &[f32], sin: &[f32], layout: RopeLayout) {
    let half = cos.len();
    debug_assert!(x.len() >= 2 * half && sin.len() == half);
    let p = x.as_mut_ptr();
    let (pc, ps) = (cos.as_ptr(), sin.as_ptr());
    let mut i = 0;
    // SAFETY: every access is masked or bounded below half (cos/sin) or 2·half (x).
    unsafe {
        match layout {
            RopeLayout::RotateHalf => {
                while i < half {
                    let m = tail_mask((half - i).min(16));
                    let a = _mm512_maskz_loadu_ps(m, p.add(i));
                    let b = _mm512_maskz_loadu_ps(m, p.add(half + i));
                    let c = _mm512_maskz_loadu_ps(m, pc.add(i));
                    let s = _mm512_maskz_loadu_ps(m, ps.add(i));
                    _mm512_mask_storeu_ps(p.add(i), m, _mm512_fmsub_ps(a, c, _mm512_mul_ps(b, s)));
                    _mm512_mask_storeu_ps(
                        p.add(half + i),
                        m,
                        _mm512_fmadd_ps(b, c, _mm512_mul_ps(a, s)),
                    );
                    i += 16;
                }
            }
            RopeLayout::Interleaved => {
                let dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
                while i + 8 <= half {
                    let v = _mm512_loadu_ps(p.add(2 * i));
                    let c = _mm512_permutexvar_ps(
                        dup,
                        _mm512_castps256_ps512(_mm256_loadu_ps(pc.add(i))),
                    );
                    let s = _mm512_permutexvar_ps(
                        dup,
                        _mm512_castps256_ps512(_mm256_loadu_ps(ps.add(i))),
                    );
                    let sw = _mm512_permute_ps::<0b1011_0001>(v);
                    _mm512_storeu_ps(p.add(2 * i), _mm512_fmaddsub_ps(v, c, _mm512_mul_ps(sw, s)));
                    i += 8;
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
