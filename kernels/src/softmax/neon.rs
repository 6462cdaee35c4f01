//! NEON softmax: the row and `sum_exp` of `body.rs` at 4 lanes, and top-k
//! as `avx2.rs` with 4 lanes.

use super::TopList;
use crate::simd::neon::Neon;
use std::arch::aarch64::*;

super::body::softmax_kernels! { isa: Neon, feature: "neon", needs: "NEON" }

/// Max of `x` and the top-k selection into `list`.
///
/// # Safety
/// NEON.
#[target_feature(enable = "neon")]
pub unsafe fn max_topk(x: &[f32], list: &mut TopList<'_>) -> f32 {
    let n = x.len();
    let mut m = f32::NEG_INFINITY;
    let fill = list.capacity().min(n);
    for (i, &v) in x[..fill].iter().enumerate() {
        m = m.max(v);
        list.offer(i, v);
    }
    let mut mv = vdupq_n_f32(f32::NEG_INFINITY);
    let mut thr = list.threshold();
    let mut tv = vdupq_n_f32(thr);
    let mut i = fill;
    while i + 4 <= n {
        // SAFETY: i + 4 <= n.
        let v = unsafe { vld1q_f32(x.as_ptr().add(i)) };
        mv = vmaxq_f32(mv, v);
        if thr.is_nan() || vmaxvq_u32(vcgtq_f32(v, tv)) != 0 {
            for j in 0..4 {
                list.offer(i + j, x[i + j]);
            }
            thr = list.threshold();
            tv = vdupq_n_f32(thr);
        }
        i += 4;
    }
    // fmax propagates NaN; the max only picks the shift, and a NaN row ends
    // up NaN through the sum either way.
    let mut m = m.max(vmaxvq_f32(mv));
    for (j, &v) in x[i..].iter().enumerate() {
        m = m.max(v);
        list.offer(i + j, v);
    }
    m
}
