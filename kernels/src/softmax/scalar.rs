//! Scalar reference for the softmax family: std `f32::exp`, sums in f64.

use super::TopList;

/// Softmax of `x[..vis]·scale` in place; `x[vis..]` (the masked tail) is set
/// to 0. See the module docs for the ±∞/NaN rules.
pub fn row(x: &mut [f32], vis: usize, scale: f32) {
    let (head, tail) = x.split_at_mut(vis);
    tail.fill(0.0);
    let m = head
        .iter()
        .fold(f32::NEG_INFINITY, |m, &v| m.max(v * scale));
    let shift = super::shift_for(m);
    let mut sum = 0.0f64;
    for v in head.iter_mut() {
        *v = (*v * scale - shift).exp();
        sum += *v as f64;
    }
    let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
    for v in head.iter_mut() {
        *v = (*v as f64 * inv) as f32;
    }
}

/// Max of `x` and the top-k selection into `list`.
pub fn max_topk(x: &[f32], list: &mut TopList<'_>) -> f32 {
    let mut m = f32::NEG_INFINITY;
    for (i, &v) in x.iter().enumerate() {
        m = m.max(v);
        list.offer(i, v);
    }
    m
}

/// `Σ e^(x - shift)`.
pub fn sum_exp(x: &[f32], shift: f32) -> f32 {
    x.iter().map(|&v| (v - shift).exp() as f64).sum::<f64>() as f32
}
