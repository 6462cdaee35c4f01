//! The Matmul+RoPE reference: the plain GEMM reference, then a plain RoPE
//! pass over the finished output, both in f64 where it matters (dot products
//! and angles). Kept self-contained so it does not depend on the standalone
//! `rope` family it may one day be compared with.

use super::{Positions, RopeLayout, RopeSpec};
use crate::gemm::WElem;

/// Rotation angle of pair `i` (of `rotary_dim / 2`) at position `pos`:
/// `pos · theta^(−2i / rotary_dim)`, as in Hugging Face `inv_freq`.
pub(crate) fn angle(pos: usize, i: usize, rotary_dim: usize, theta: f32) -> f64 {
    let inv_freq = (theta as f64).powf(-((2 * i) as f64) / rotary_dim as f64);
    pos as f64 * inv_freq
}

/// Rotates one head in place, in f64; pairs per `spec.layout`, only the
/// first `rotary_dim` dimensions.
fn rope_head_ref(head: &mut [f32], pos: usize, spec: &RopeSpec) {
    let half = spec.rotary_dim / 2;
    for i in 0..half {
        let (s, c) = angle(pos, i, spec.rotary_dim, spec.theta).sin_cos();
        let (p, q) = match spec.layout {
            RopeLayout::RotateHalf => (i, i + half),
            RopeLayout::Interleaved => (2 * i, 2 * i + 1),
        };
        let (x, y) = (head[p] as f64, head[q] as f64);
        head[p] = (x * c - y * s) as f32;
        head[q] = (y * c + x * s) as f32;
    }
}

/// `out = RoPE(x · Wᵀ + bias)` per row and head; lengths checked by the caller.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_rope_ref<W: WElem>(
    x: &[f32],
    w: &[W],
    bias: Option<&[f32]>,
    out: &mut [f32],
    m: usize,
    n: usize,
    k: usize,
    spec: &RopeSpec,
    positions: Positions<'_>,
) {
    crate::gemm::scalar::gemm_ref(x, w, bias, out, m, n, k, false);
    if n == 0 {
        return;
    }
    for (r, row) in out.chunks_exact_mut(n).enumerate() {
        let pos = positions.of_row(r);
        for head in row.chunks_exact_mut(spec.head_dim) {
            rope_head_ref(head, pos, spec);
        }
    }
}
