//! The reference GEMV: plain Rust, one row at a time, a sequential f32 sum.
//! Every other variant is tested against it; the tuner validates candidates
//! against it before timing them.

use super::Weight;

/// Reference for rows `rows` of `y = W · x (+ bias) (+ y if accumulate)`:
/// `y` holds those rows only (`y.len() == rows.len()`), `w` is the whole
/// `[n, k]` matrix, `bias` (if any) the whole `[n]` vector. The epilogue order
/// is `(dot + bias) + y_old`, the order the SIMD drivers use too.
///
/// Panics if the slices are shorter than the shape implies (the safe entry
/// points check lengths before calling it).
pub fn gemv_rows<T: Weight>(
    w: &[T],
    x: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    rows: std::ops::Range<usize>,
    k: usize,
    accumulate: bool,
) {
    for (yi, i) in y.iter_mut().zip(rows) {
        let row = &w[i * k..(i + 1) * k];
        let mut dot = 0f32;
        for (wj, xj) in row.iter().zip(&x[..k]) {
            dot += wj.to_f32() * xj;
        }
        if let Some(b) = bias {
            dot += b[i];
        }
        if accumulate {
            dot += *yi;
        }
        *yi = dot;
    }
}

/// Reference for the whole output: `y.len() == n`, `w.len() == n · k`.
pub fn gemv<T: Weight>(w: &[T], x: &[f32], bias: Option<&[f32]>, y: &mut [f32], accumulate: bool) {
    let n = y.len();
    let k = x.len();
    gemv_rows(w, x, bias, y, 0..n, k, accumulate);
}
