//! The GEMM reference: a plain triple loop with f64 accumulation.
//!
//! Accumulating in f64 makes the reference more accurate than any f32
//! variant, so a variant's error against it is its own rounding error
//! (≈ √k·ε·|terms| for random data), which the tests bound. f16 weights are
//! widened exactly to f32 first, so W16A32 shares the reference.

use super::WElem;

/// `C[i,j] = (C[i,j] if accumulate) + bias[j] + Σ_p A[i,p]·W[j,p]`, all of
/// `m` rows; lengths were checked by the caller.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_ref<W: WElem>(
    a: &[f32],
    w: &[W],
    bias: Option<&[f32]>,
    c: &mut [f32],
    m: usize,
    n: usize,
    k: usize,
    accumulate: bool,
) {
    for i in 0..m {
        let a_row = &a[i * k..(i + 1) * k];
        for j in 0..n {
            let w_row = &w[j * k..(j + 1) * k];
            let mut s = 0.0f64;
            for (&x, &y) in a_row.iter().zip(w_row) {
                s += x as f64 * y.to_f32() as f64;
            }
            if let Some(b) = bias {
                s += b[j] as f64;
            }
            let out = &mut c[i * n + j];
            if accumulate {
                s += *out as f64;
            }
            *out = s as f32;
        }
    }
}
