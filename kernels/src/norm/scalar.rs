//! Scalar references for RMSNorm and LayerNorm. Sums are accumulated in
//! f64 and the output is formed in f64 and rounded once, so the reference is
//! accurate to about one f32 ulp whatever the row length.

use super::NormKind;

/// Normalises one row: `dst = norm(src)`; `src = None` means in place.
pub fn row(
    kind: NormKind,
    src: Option<&[f32]>,
    dst: &mut [f32],
    w: &[f32],
    b: Option<&[f32]>,
    eps: f32,
) {
    let n = dst.len();
    if n == 0 {
        return;
    }
    let (mean, var) = {
        let x: &[f32] = src.unwrap_or(dst);
        match kind {
            NormKind::Rms => (0.0, x.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / n as f64),
            NormKind::Layer => {
                let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
                let var = x
                    .iter()
                    .map(|&v| (v as f64 - mean) * (v as f64 - mean))
                    .sum::<f64>()
                    / n as f64;
                (mean, var)
            }
        }
    };
    let inv = 1.0 / (var + eps as f64).sqrt();
    for i in 0..n {
        let xi = src.map_or(dst[i], |s| s[i]) as f64;
        let bias = b.map_or(0.0, |b| b[i] as f64);
        dst[i] = ((xi - mean) * inv * w[i] as f64 + bias) as f32;
    }
}

/// Normalises a block of rows of length `w.len()`.
pub fn rows(
    kind: NormKind,
    src: Option<&[f32]>,
    dst: &mut [f32],
    w: &[f32],
    b: Option<&[f32]>,
    eps: f32,
) {
    let d = w.len();
    for (r, out) in dst.chunks_exact_mut(d).enumerate() {
        row(kind, src.map(|s| &s[r * d..(r + 1) * d]), out, w, b, eps);
    }
}
