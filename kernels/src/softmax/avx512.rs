//! AVX-512F softmax: as `avx2.rs` with 16 lanes and masked tails (masked-off
//! lanes load as `-∞`, which is neutral for the max and gives `e^-∞ = 0`).

use super::TopList;
use crate::simd::avx512::exp16;
use crate::simd::avx512::tail_mask;
use std::arch::x86_64::*;

/// Softmax of `x[..vis]·scale` in place, zeros in `x[vis..]`.
///
/// # Safety
/// AVX-512F; `vis <= x.len()`.
#[target_feature(enable = "avx512f")]
pub unsafe fn row(x: &mut [f32], vis: usize, scale: f32) {
    let (head, tail) = x.split_at_mut(vis);
    tail.fill(0.0);
    let n = head.len();
    let p = head.as_mut_ptr();
    let sv = _mm512_set1_ps(scale);
    let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut mv = ninf;
    let mut i = 0;
    // SAFETY: every access is masked to lanes below n.
    unsafe {
        while i < n {
            let m = tail_mask((n - i).min(16));
            let v = _mm512_mask_loadu_ps(ninf, m, p.add(i));
            mv = _mm512_max_ps(mv, _mm512_mask_mul_ps(ninf, m, v, sv));
            i += 16;
        }
        let shift = super::shift_for(_mm512_reduce_max_ps(mv));
        let shv = _mm512_set1_ps(shift);
        let mut acc = _mm512_setzero_ps();
        i = 0;
        while i < n {
            let m = tail_mask((n - i).min(16));
            let v = _mm512_maskz_loadu_ps(m, p.add(i));
            let e = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_mul_ps(v, sv), shv)));
            _mm512_mask_storeu_ps(p.add(i), m, e);
            acc = _mm512_add_ps(acc, e);
            i += 16;
        }
        let sum = _mm512_reduce_add_ps(acc);
        let iv = _mm512_set1_ps(if sum == 0.0 { 0.0 } else { 1.0 / sum });
        i = 0;
        while i < n {
            let m = tail_mask((n - i).min(16));
            let v = _mm512_maskz_loadu_ps(m, p.add(i));
            _mm512_mask_storeu_ps(p.add(i), m, _mm512_mul_ps(v, iv));
            i += 16;
        }
    }
}

/// Max of `x` and the top-k selection into `list`.
///
/// # Safety
/// AVX-512F.
#[target_feature(enable = "avx512f")]
pub unsafe fn max_topk(x: &[f32], list: &mut TopList<'_>) -> f32 {
    let n = x.len();
    let mut m = f32::NEG_INFINITY;
    let fill = list.capacity().min(n);
    for (i, &v) in x[..fill].iter().enumerate() {
        m = m.max(v);
        list.offer(i, v);
    }
    let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut mv = ninf;
    let mut thr = list.threshold();
    let mut tv = _mm512_set1_ps(thr);
    let mut i = fill;
    while i < n {
        let lanes = (n - i).min(16);
        let mask = tail_mask(lanes);
        // SAFETY: masked to lanes below n.
        let v = unsafe { _mm512_mask_loadu_ps(ninf, mask, x.as_ptr().add(i)) };
        mv = _mm512_max_ps(mv, v);
        let mut bits = _mm512_mask_cmp_ps_mask::<_CMP_GT_OQ>(mask, v, tv) as u32;
        if thr.is_nan() {
            bits = mask as u32;
        }
        if bits != 0 {
            while bits != 0 {
                let j = bits.trailing_zeros() as usize;
                list.offer(i + j, x[i + j]);
                bits &= bits - 1;
            }
            thr = list.threshold();
            tv = _mm512_set1_ps(thr);
        }
        i += 16;
    }
    m.max(_mm512_reduce_max_ps(mv))
}

/// `Σ e^(x - shift)`.
///
/// # Safety
/// AVX-512F.
#[target_feature(enable = "avx512f")]
pub unsafe fn sum_exp(x: &[f32], shift: f32) -> f32 {
    let n = x.len();
    let shv = _mm512_set1_ps(shift);
    let mut acc = _mm512_setzero_ps();
    let mut i = 0;
    while i < n {
        let m = tail_mask((n - i).min(16));
        // SAFETY: masked to lanes below n.
        let v = unsafe { _mm512_maskz_loadu_ps(m, x.as_ptr().add(i)) };
        acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(v, shv))));
        i += 16;
    }
    _mm512_reduce_add_ps(acc)
}
