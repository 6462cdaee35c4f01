//! Fused q/k projection + rotary position embedding:
//! `out[m, n] = RoPE(x[m, k] · W[n, k]ᵀ + bias)`, with `n = n_heads · head_dim`
//! and each head of each row rotated at that row's position.
//!
//! Layouts ([`RopeLayout`]): `RotateHalf` (Hugging Face / Qwen / Llama: pair
//! `i` with `i + rotary_dim/2`) and `Interleaved` (GPT-J: pair `2i` with
//! `2i + 1`). Partial rotary (`rotary_dim < head_dim`) rotates the first
//! `rotary_dim` dimensions of each head and leaves the rest as projected.
//! Angle of pair `i` at position `p`: `p · theta^(−2i/rotary_dim)`.
//!
//! How it is fused: the GEMM driver (`crate::gemm`) computes C in blocks of
//! `mc` rows × `nc` columns, with `nc` and the thread split rounded to whole
//! heads; when the last k-slice of a block is done, an epilogue rotates that
//! block's heads while they are still in L1/L2, instead of a second pass over
//! the whole output. So every ISA variant of this family is the matching
//! GEMM variant (same micro-kernel tables, same [`GemmParams`](crate::gemm::GemmParams)) plus the
//! rotation, which is written in plain Rust over contiguous slices (the
//! compiler vectorizes it; it costs O(m·n) next to the O(m·n·k) product, so
//! there are no per-ISA files here). cos/sin for the call's positions are
//! tabulated once per call (`m × rotary_dim/2`, computed in f64).
//!
//! The scalar variant is the reference (`scalar.rs`: plain matmul, then
//! plain RoPE, in f64), not a fused kernel; it shares only the angle formula
//! with the fused path.

pub(crate) mod scalar;
#[cfg(test)]
mod tests;

use crate::gemm::{self, GemmConfig, GemmShape, WElem};
use crate::pool::check_threads;
use crate::{Isa, KernelError, Result};
use half::f16;
use serde::{Deserialize, Serialize};

/// Which dimensions of a head are rotated together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RopeLayout {
    /// Pairs `(i, i + rotary_dim/2)`: Hugging Face, Qwen, Llama.
    RotateHalf,
    /// Pairs `(2i, 2i + 1)`: GPT-J, GPT-NeoX-interleaved checkpoints.
    Interleaved,
}

/// The rotary embedding applied to each head of the projection.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RopeSpec {
    /// Width of one head; `n` must be a multiple of it.
    pub head_dim: usize,
    /// Leading dimensions of each head that are rotated; even, ≤ `head_dim`
    /// (0 = no rotation).
    pub rotary_dim: usize,
    /// Base of the frequencies (10 000 for Llama 2, 1 000 000 for Qwen2/3).
    pub theta: f32,
    pub layout: RopeLayout,
}

/// The position of each row of `x`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Positions<'a> {
    /// Row `r` is at position `offset + r` (a prompt chunk or one decode step).
    Offset(usize),
    /// Row `r` is at `positions[r]` (batched decoding); length must be `m`.
    PerRow(&'a [usize]),
}

impl<'a> Positions<'a> {
    fn of_row(&self, r: usize) -> usize {
        match self {
            Positions::Offset(o) => o + r,
            Positions::PerRow(p) => p[r],
        }
    }

    /// The positions of rows `r0..r1` as their own block.
    fn rows(&self, r0: usize, r1: usize) -> Positions<'a> {
        match *self {
            Positions::Offset(o) => Positions::Offset(o + r0),
            Positions::PerRow(p) => Positions::PerRow(&p[r0..r1]),
        }
    }
}

const OP: &str = "matmul_rope";
const OP_F16: &str = "matmul_rope_f16w";

/// `out = RoPE(x · Wᵀ + bias)` with f32 weights `W[n, k]`; `cfg` as for
/// [`gemm::gemm_f32`] (same variants, micro-kernels and threads). Errors on
/// wrong buffer lengths, `n` not a multiple of `head_dim`, an odd or too
/// large `rotary_dim`, a non-positive `theta`, or `positions` of the wrong
/// length, before any work.
#[allow(clippy::too_many_arguments)]
pub fn matmul_rope_f32(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    shape: GemmShape,
    rope: &RopeSpec,
    positions: Positions<'_>,
    cfg: &GemmConfig,
) -> Result<()> {
    run(OP, x, w, bias, out, shape, rope, positions, cfg)
}

/// [`matmul_rope_f32`] with f16 weights (W16A32).
#[allow(clippy::too_many_arguments)]
pub fn matmul_rope_f16w_f32(
    x: &[f32],
    w: &[f16],
    bias: Option<&[f32]>,
    out: &mut [f32],
    shape: GemmShape,
    rope: &RopeSpec,
    positions: Positions<'_>,
    cfg: &GemmConfig,
) -> Result<()> {
    run(OP_F16, x, w, bias, out, shape, rope, positions, cfg)
}

fn check_rope(
    op: &'static str,
    shape: GemmShape,
    rope: &RopeSpec,
    positions: Positions<'_>,
) -> Result<()> {
    let bad = |reason: String| Err(KernelError::InvalidShape { op, reason });
    if rope.head_dim == 0 || !shape.n.is_multiple_of(rope.head_dim) {
        return bad(format!(
            "n = {} must be a positive multiple of head_dim = {}",
            shape.n, rope.head_dim
        ));
    }
    if !rope.rotary_dim.is_multiple_of(2) || rope.rotary_dim > rope.head_dim {
        return bad(format!(
            "rotary_dim = {} must be even and at most head_dim = {}",
            rope.rotary_dim, rope.head_dim
        ));
    }
    if !(rope.theta.is_finite() && rope.theta > 0.0) {
        return bad(format!(
            "theta = {} must be finite and positive",
            rope.theta
        ));
    }
    if let Positions::PerRow(p) = positions {
        crate::error::check_len(op, "positions", p.len(), shape.m)?;
    }
    Ok(())
}

/// Rotates one head in place with tabulated `cos`/`sin` (`rotary_dim/2` each).
fn rope_head(head: &mut [f32], cos: &[f32], sin: &[f32], rope: &RopeSpec) {
    let half = rope.rotary_dim / 2;
    match rope.layout {
        RopeLayout::RotateHalf => {
            let (x1, rest) = head.split_at_mut(half);
            let x2 = &mut rest[..half];
            for (((a, b), &c), &s) in x1.iter_mut().zip(x2.iter_mut()).zip(cos).zip(sin) {
                let (x, y) = (*a, *b);
                *a = x * c - y * s;
                *b = y * c + x * s;
            }
        }
        RopeLayout::Interleaved => {
            for ((pair, &c), &s) in head[..rope.rotary_dim]
                .chunks_exact_mut(2)
                .zip(cos)
                .zip(sin)
            {
                let (x, y) = (pair[0], pair[1]);
                pair[0] = x * c - y * s;
                pair[1] = y * c + x * s;
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn run<W: WElem>(
    op: &'static str,
    x: &[f32],
    w: &[W],
    bias: Option<&[f32]>,
    out: &mut [f32],
    shape: GemmShape,
    rope: &RopeSpec,
    positions: Positions<'_>,
    cfg: &GemmConfig,
) -> Result<()> {
    gemm::check_shape(op, x, w, bias, out, shape)?;
    check_rope(op, shape, rope, positions)?;
    if gemm::resolve_isa(op, cfg.isa)? == Isa::Scalar {
        return run_reference(op, x, w, bias, out, shape, rope, positions, cfg);
    }
    let half = rope.rotary_dim / 2;
    // cos/sin per (row, pair), once per call, outside every loop.
    let mut cos = vec![0.0f32; shape.m * half];
    let mut sin = vec![0.0f32; shape.m * half];
    for r in 0..shape.m {
        let pos = positions.of_row(r);
        for i in 0..half {
            let (s, c) = scalar::angle(pos, i, rope.rotary_dim, rope.theta).sin_cos();
            cos[r * half + i] = c as f32;
            sin[r * half + i] = s as f32;
        }
    }
    let epilogue = |row: usize, seg: &mut [f32], col0: usize| {
        debug_assert!(
            col0.is_multiple_of(rope.head_dim) && seg.len().is_multiple_of(rope.head_dim)
        );
        if half == 0 {
            return;
        }
        let (c, s) = (&cos[row * half..][..half], &sin[row * half..][..half]);
        for head in seg.chunks_exact_mut(rope.head_dim) {
            rope_head(head, c, s, rope);
        }
    };
    gemm::run(
        op,
        x,
        w,
        bias,
        out,
        shape,
        false,
        cfg,
        Some((&epilogue, rope.head_dim)),
    )
}

/// The scalar variant is the reference itself (plain matmul, then plain
/// RoPE), split over rows so that `threads` workers are used.
#[allow(clippy::too_many_arguments)]
fn run_reference<W: WElem>(
    op: &'static str,
    x: &[f32],
    w: &[W],
    bias: Option<&[f32]>,
    out: &mut [f32],
    shape: GemmShape,
    rope: &RopeSpec,
    positions: Positions<'_>,
    cfg: &GemmConfig,
) -> Result<()> {
    check_threads(op, cfg.threads)?;
    cfg.params.validate_for(op, Isa::Scalar)?;
    let GemmShape { m, n, k } = shape;
    if m == 0 || n == 0 {
        return Ok(());
    }
    let rows_per = m.div_ceil(cfg.threads);
    let block = |r0: usize, chunk: &mut [f32]| {
        let r1 = r0 + chunk.len() / n;
        let xs = &x[r0 * k..r1 * k];
        scalar::matmul_rope_ref(
            xs,
            w,
            bias,
            chunk,
            r1 - r0,
            n,
            k,
            rope,
            positions.rows(r0, r1),
        );
    };
    if cfg.threads == 1 {
        block(0, out);
    } else {
        crate::pool::pool(cfg.threads).scope(|s| {
            for (t, chunk) in out.chunks_mut(rows_per * n).enumerate() {
                let block = &block;
                s.spawn(move |_| block(t * rows_per, chunk));
            }
        });
    }
    Ok(())
}
