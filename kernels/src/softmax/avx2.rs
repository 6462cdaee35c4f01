//! AVX2 + FMA softmax: the row and `sum_exp` of `body.rs` at 8 lanes;
//! top-k filters 8 candidates per compare against the current k-th value.

use super::TopList;
use crate::simd::Simd;
use crate::simd::avx2::Avx2;
use std::arch::x86_64::*;

super::body::softmax_kernels! { isa: Avx2, feature: "avx2,fma", needs: "AVX2 + FMA" }

/// Max of `x` and the top-k selection into `list`.
///
/// # Safety
/// AVX2 + FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn max_topk(x: &[f32], list: &mut TopList<'_>) -> f32 {
    let n = x.len();
    let mut m = f32::NEG_INFINITY;
    // Until the list is full every element enters it.
    let fill = list.capacity().min(n);
    for (i, &v) in x[..fill].iter().enumerate() {
        m = m.max(v);
        list.offer(i, v);
    }
    let mut mv = _mm256_set1_ps(m);
    let mut thr = list.threshold();
    let mut tv = _mm256_set1_ps(thr);
    let mut i = fill;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n.
        let v = unsafe { _mm256_loadu_ps(x.as_ptr().add(i)) };
        mv = _mm256_max_ps(mv, v);
        let mut bits = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GT_OQ>(v, tv)) as u32;
        if thr.is_nan() {
            // A NaN k-th value loses to every number: offer all lanes.
            bits = 0xff;
        }
        if bits != 0 {
            while bits != 0 {
                let j = bits.trailing_zeros() as usize;
                list.offer(i + j, x[i + j]);
                bits &= bits - 1;
            }
            thr = list.threshold();
            tv = _mm256_set1_ps(thr);
        }
        i += 8;
    }
    // SAFETY: AVX2 is enabled here.
    let mut m = m.max(unsafe { Avx2::reduce_max(mv) });
    for (j, &v) in x[i..].iter().enumerate() {
        m = m.max(v);
        list.offer(i + j, v);
    }
    m
}
