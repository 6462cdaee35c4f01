//! NEON RoPE: rotate_half on 4 contiguous pairs; interleaved de-interleaves
//! 4 pairs with `ld2`/`st2` so both layouts share the same arithmetic.

use super::RopeLayout;
use std::arch::aarch64::*;

/// Rotates the first `2 * cos.len()` features of one head in place.
///
/// # Safety
/// NEON; `x.len() >= 2 * cos.len()`, `sin.len() == cos.len()`.
#[target_feature(enable = "neon")]
pub unsafe fn head(x: &mut [f32], cos: &[f32], sin: &[f32], layout: RopeLayout) {
    let half = cos.len();
    debug_assert!(x.len() >= 2 * half && sin.len() == half);
    let p = x.as_mut_ptr();
    let (pc, ps) = (cos.as_ptr(), sin.as_ptr());
    let mut i = 0;
    // SAFETY: every access is below half (cos/sin) or 2·half (x).
    unsafe {
        while i + 4 <= half {
            let c = vld1q_f32(pc.add(i));
            let s = vld1q_f32(ps.add(i));
            let (a, b) = match layout {
                RopeLayout::RotateHalf => (vld1q_f32(p.add(i)), vld1q_f32(p.add(half + i))),
                RopeLayout::Interleaved => {
                    let v = vld2q_f32(p.add(2 * i));
                    (v.0, v.1)
                }
            };
            let na = vfmsq_f32(vmulq_f32(a, c), b, s);
            let nb = vfmaq_f32(vmulq_f32(b, c), a, s);
            match layout {
                RopeLayout::RotateHalf => {
                    vst1q_f32(p.add(i), na);
                    vst1q_f32(p.add(half + i), nb);
                }
                RopeLayout::Interleaved => vst2q_f32(p.add(2 * i), float32x4x2_t(na, nb)),
            }
            i += 4;
        }
        while i < half {
            let (ia, ib) = match layout {
                RopeLayout::RotateHalf => (i, half + i),
                RopeLayout::Interleaved => (2 * i, 2 * i + 1),
            };
            let (a, b) = (*p.add(ia), *p.add(ib));
            let (c, s) = (*pc.add(i), *ps.add(i));
            *p.add(ia) = a.mul_add(c, -(b * s));
            *p.add(ib) = b.mul_add(c, a * s);
            i += 1;
        }
    }
}
