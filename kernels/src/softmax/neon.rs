//! NEON softmax: as `avx2.rs` with 4 lanes.

use super::TopList;
use crate::eltwise::neon::exp4;
use std::arch::aarch64::*;

/// Softmax of `x[..vis]·scale` in place, zeros in `x[vis..]`.
///
/// # Safety
/// NEON; `vis <= x.len()`.
#[target_feature(enable = "neon")]
pub unsafe fn row(x: &mut [f32], vis: usize, scale: f32) {
    let (head, tail) = x.split_at_mut(vis);
    tail.fill(0.0);
    let n = head.len();
    let p = head.as_mut_ptr();
    let sv = vdupq_n_f32(scale);
    let mut mv = vdupq_n_f32(f32::NEG_INFINITY);
    let mut i = 0;
    // SAFETY: all accesses below n.
    unsafe {
        while i + 4 <= n {
            mv = vmaxq_f32(mv, vmulq_f32(vld1q_f32(p.add(i)), sv));
            i += 4;
        }
        let mut m = vmaxvq_f32(mv);
        for &v in &head[i..] {
            m = m.max(v * scale);
        }
        let shift = super::shift_for(m);
        let shv = vdupq_n_f32(shift);
        let mut acc = vdupq_n_f32(0.0);
        i = 0;
        while i + 4 <= n {
            let e = exp4(vsubq_f32(vmulq_f32(vld1q_f32(p.add(i)), sv), shv));
            vst1q_f32(p.add(i), e);
            acc = vaddq_f32(acc, e);
            i += 4;
        }
        let mut sum = vaddvq_f32(acc);
        for v in &mut head[i..] {
            *v = (*v * scale - shift).exp();
            sum += *v;
        }
        let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
        let iv = vdupq_n_f32(inv);
        i = 0;
        while i + 4 <= n {
            vst1q_f32(p.add(i), vmulq_f32(vld1q_f32(p.add(i)), iv));
            i += 4;
        }
        for v in &mut head[i..] {
            *v *= inv;
        }
    }
}

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

/// `Σ e^(x - shift)`.
///
/// # Safety
/// NEON.
#[target_feature(enable = "neon")]
pub unsafe fn sum_exp(x: &[f32], shift: f32) -> f32 {
    let n = x.len();
    let shv = vdupq_n_f32(shift);
    let mut acc = [vdupq_n_f32(0.0); 2];
    let mut i = 0;
    while i + 8 <= n {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: i + 8 <= n.
            let v = unsafe { vld1q_f32(x.as_ptr().add(i + 4 * k)) };
            *a = vaddq_f32(*a, exp4(vsubq_f32(v, shv)));
        }
        i += 8;
    }
    let mut s = vaddvq_f32(vaddq_f32(acc[0], acc[1]));
    for &v in &x[i..] {
        s += (v - shift).exp();
    }
    s
}
