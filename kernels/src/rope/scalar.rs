//! Scalar reference for RoPE: each rotation formed in f64 and rounded once.

use super::RopeLayout;

/// Rotates the first `cos.len() * 2` features of one head in place.
pub fn head(x: &mut [f32], cos: &[f32], sin: &[f32], layout: RopeLayout) {
    let half = cos.len();
    for i in 0..half {
        let (ia, ib) = match layout {
            RopeLayout::RotateHalf => (i, i + half),
            RopeLayout::Interleaved => (2 * i, 2 * i + 1),
        };
        let (a, b) = (x[ia] as f64, x[ib] as f64);
        let (c, s) = (cos[i] as f64, sin[i] as f64);
        x[ia] = (a * c - b * s) as f32;
        x[ib] = (b * c + a * s) as f32;
    }
}
