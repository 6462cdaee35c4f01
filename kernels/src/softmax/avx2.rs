//! AVX2 + FMA softmax: vector max, `exp8` with the sum, one scale pass;
//! top-k filters 8 candidates per compare against the current k-th value.

use super::TopList;
use crate::eltwise::avx2::{exp8, hmax8, hsum8};
use std::arch::x86_64::*;

/// Softmax of `x[..vis]·scale` in place, zeros in `x[vis..]`.
///
/// # Safety
/// AVX2 + FMA; `vis <= x.len()`.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn row(x: &mut [f32], vis: usize, scale: f32) {
    let (head, tail) = x.split_at_mut(vis);
    tail.fill(0.0);
    let n = head.len();
    let p = head.as_mut_ptr();
    let sv = _mm256_set1_ps(scale);
    let mut mv = _mm256_set1_ps(f32::NEG_INFINITY);
    let mut i = 0;
    // SAFETY: all accesses below n.
    unsafe {
        while i + 8 <= n {
            mv = _mm256_max_ps(mv, _mm256_mul_ps(_mm256_loadu_ps(p.add(i)), sv));
            i += 8;
        }
        let mut m = hmax8(mv);
        for &v in &head[i..] {
            m = m.max(v * scale);
        }
        let shift = super::shift_for(m);
        let shv = _mm256_set1_ps(shift);
        let mut acc = _mm256_setzero_ps();
        i = 0;
        while i + 8 <= n {
            // mul then sub (no fma): the exp argument rounds as in the reference.
            let e = exp8(_mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(p.add(i)), sv), shv));
            _mm256_storeu_ps(p.add(i), e);
            acc = _mm256_add_ps(acc, e);
            i += 8;
        }
        let mut sum = hsum8(acc);
        for v in &mut head[i..] {
            *v = (*v * scale - shift).exp();
            sum += *v;
        }
        let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
        let iv = _mm256_set1_ps(inv);
        i = 0;
        while i + 8 <= n {
            _mm256_storeu_ps(p.add(i), _mm256_mul_ps(_mm256_loadu_ps(p.add(i)), iv));
            i += 8;
        }
        for v in &mut head[i..] {
            *v *= inv;
        }
    }
}

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
    let mut m = m.max(hmax8(mv));
    for (j, &v) in x[i..].iter().enumerate() {
        m = m.max(v);
        list.offer(i + j, v);
    }
    m
}

/// `Σ e^(x - shift)`.
///
/// # Safety
/// AVX2 + FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn sum_exp(x: &[f32], shift: f32) -> f32 {
    let n = x.len();
    let shv = _mm256_set1_ps(shift);
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut i = 0;
    while i + 16 <= n {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: i + 16 <= n.
            let v = unsafe { _mm256_loadu_ps(x.as_ptr().add(i + 8 * k)) };
            *a = _mm256_add_ps(*a, exp8(_mm256_sub_ps(v, shv)));
        }
        i += 16;
    }
    let mut s = hsum8(_mm256_add_ps(acc[0], acc[1]));
    for &v in &x[i..] {
        s += (v - shift).exp();
    }
    s
}
