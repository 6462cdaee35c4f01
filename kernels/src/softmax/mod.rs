//! Softmax over rows, and its two fused forms used by the runtime:
//! Softmax + TopK for sampling, and Softmax + causal mask for attention.
//!
//! All of them are numerically stable: the row max is subtracted before
//! `exp`. The rules for non-finite inputs are the same in every variant:
//!
//! - a `-∞` entry gets probability `0`;
//! - a row whose entries are all `-∞` (or an empty visible part) becomes all
//!   `0` (as flash-attention does; `torch.softmax` would give NaN);
//! - a `+∞` entry or a NaN anywhere makes the whole row NaN (`∞ - ∞`).
//!
//! The SIMD variants use the shared vector `exp` and f32 sums; against the
//! reference (std `exp`, f64 sums) they agree within `1e-5·p + 1e-9` for
//! rows of up to a few thousand entries (tested).

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod body;
pub mod scalar;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "aarch64")]
mod neon;

use crate::eltwise::{
    best_isa, check_row_threads, default_row_threads, for_row_blocks, resolve_isa,
    thread_candidates,
};
use crate::error::check_len;
use crate::tune::{CpuCaps, Tunable};
use crate::{Isa, KernelError, Result};
use serde::{Deserialize, Serialize};

/// The value subtracted before `exp`: the row max, except that an all-`-∞`
/// row uses 0 (so its entries give `e^-∞ = 0`, not `e^NaN`).
#[inline]
pub(crate) fn shift_for(max: f32) -> f32 {
    if max == f32::NEG_INFINITY { 0.0 } else { max }
}

/// Problem shape: `rows` rows of `dim` scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SoftmaxShape {
    pub rows: usize,
    pub dim: usize,
}

/// Tunable parameters: threads over rows (`1..=256`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SoftmaxParams {
    pub threads: usize,
}

impl Tunable for SoftmaxParams {
    type Shape = SoftmaxShape;

    /// One thread below 256 KiB of scores, else one per 128 KiB, at most
    /// one per row and per core.
    fn default_for(shape: &SoftmaxShape, cpu: &CpuCaps) -> Self {
        SoftmaxParams {
            threads: default_row_threads(shape.rows * shape.dim * 4, shape.rows, cpu),
        }
    }

    fn candidates(shape: &SoftmaxShape, cpu: &CpuCaps) -> Vec<Self> {
        let mut v = vec![Self::default_for(shape, cpu)];
        for threads in thread_candidates(shape.rows, cpu) {
            if !v.contains(&SoftmaxParams { threads }) {
                v.push(SoftmaxParams { threads });
            }
        }
        v
    }

    fn validate(&self) -> Result<()> {
        check_row_threads("softmax", self.threads)
    }
}

/// A causal mask over a block of attention scores `[q_rows, kv_len]`: query
/// row `i` sits at position `pos0 + i` and may see key positions
/// `0..=pos0 + i`; everything after is set to probability 0. Scores are
/// multiplied by `scale` (e.g. `1/√head_dim`) before the softmax.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CausalMask {
    pub q_rows: usize,
    pub kv_len: usize,
    pub pos0: usize,
    pub scale: f32,
}

fn run_rows(
    op: &'static str,
    x: &mut [f32],
    dim: usize,
    isa: Isa,
    params: &SoftmaxParams,
    visible: impl Fn(usize) -> usize + Sync,
    scale: f32,
) -> Result<()> {
    let isa = resolve_isa(op, isa)?;
    params.validate()?;
    for_row_blocks(x, dim, params.threads, |first, block| {
        for (r, row) in block.chunks_exact_mut(dim).enumerate() {
            let vis = visible(first + r);
            match isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: AVX2 + FMA checked by resolve_isa; vis <= dim.
                Isa::Avx2 => unsafe { avx2::row(row, vis, scale) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: AVX-512F checked by resolve_isa; vis <= dim.
                Isa::Avx512 => unsafe { avx512::row(row, vis, scale) },
                #[cfg(target_arch = "aarch64")]
                // SAFETY: NEON is always present on aarch64; vis <= dim.
                Isa::Neon => unsafe { neon::row(row, vis, scale) },
                _ => scalar::row(row, vis, scale),
            }
        }
    });
    Ok(())
}

fn check_rows(op: &'static str, x_len: usize, rows: usize, dim: usize) -> Result<()> {
    let expected = rows.checked_mul(dim).ok_or(KernelError::InvalidShape {
        op,
        reason: format!("rows × dim = {rows} × {dim} overflows"),
    })?;
    check_len(op, "x", x_len, expected)
}

/// Softmax of each of the `rows` rows of `x` (`[rows, dim]`), in place,
/// best variant and default parameters.
pub fn softmax(x: &mut [f32], rows: usize, dim: usize) -> Result<()> {
    let p = SoftmaxParams::default_for(&SoftmaxShape { rows, dim }, &crate::eltwise::host_caps());
    softmax_with(x, rows, dim, best_isa(), &p)
}

/// [`softmax`] with a forced variant and parameters.
pub fn softmax_with(
    x: &mut [f32],
    rows: usize,
    dim: usize,
    isa: Isa,
    params: &SoftmaxParams,
) -> Result<()> {
    check_rows("softmax", x.len(), rows, dim)?;
    run_rows("softmax", x, dim, isa, params, |_| dim, 1.0)
}

/// Causal-masked, scaled softmax of attention scores in place; see
/// [`CausalMask`]. Masked scores are never read, so they may hold anything.
pub fn softmax_causal(scores: &mut [f32], mask: &CausalMask) -> Result<()> {
    let p = SoftmaxParams::default_for(
        &SoftmaxShape {
            rows: mask.q_rows,
            dim: mask.kv_len,
        },
        &crate::eltwise::host_caps(),
    );
    softmax_causal_with(scores, mask, best_isa(), &p)
}

/// [`softmax_causal`] with a forced variant and parameters.
pub fn softmax_causal_with(
    scores: &mut [f32],
    mask: &CausalMask,
    isa: Isa,
    params: &SoftmaxParams,
) -> Result<()> {
    const OP: &str = "softmax_causal";
    check_rows(OP, scores.len(), mask.q_rows, mask.kv_len)?;
    if mask.pos0.saturating_add(mask.q_rows) > mask.kv_len {
        return Err(KernelError::InvalidShape {
            op: OP,
            reason: format!(
                "pos0 + q_rows = {} + {} exceeds kv_len = {}; the key cache must hold every query's own position",
                mask.pos0, mask.q_rows, mask.kv_len
            ),
        });
    }
    let pos0 = mask.pos0;
    run_rows(
        OP,
        scores,
        mask.kv_len,
        isa,
        params,
        |r| pos0 + r + 1,
        mask.scale,
    )
}

/// A top-k list kept sorted by value, descending, ties by lower index, NaN
/// below every number. Backed by the caller's output buffers, so selecting
/// allocates nothing.
pub struct TopList<'a> {
    idx: &'a mut [u32],
    val: &'a mut [f32],
    len: usize,
}

/// `a` ranks above `b`: greater, or a number against NaN.
#[inline]
fn ranks_above(a: f32, b: f32) -> bool {
    a > b || (b.is_nan() && !a.is_nan())
}

impl<'a> TopList<'a> {
    fn new(idx: &'a mut [u32], val: &'a mut [f32]) -> Self {
        TopList { idx, val, len: 0 }
    }

    /// k.
    pub fn capacity(&self) -> usize {
        self.idx.len()
    }

    /// The value a newcomer must beat once the list is full (`-∞` before).
    pub fn threshold(&self) -> f32 {
        if self.len < self.idx.len() {
            f32::NEG_INFINITY
        } else {
            self.val[self.len - 1]
        }
    }

    /// Offers element `i` with value `v`. Elements must be offered in
    /// increasing index order (that is what makes ties go to the lower index).
    #[inline]
    pub fn offer(&mut self, i: usize, v: f32) {
        let k = self.idx.len();
        if k == 0 {
            return;
        }
        if self.len == k && !ranks_above(v, self.val[k - 1]) {
            return;
        }
        let mut p = self.len.min(k - 1);
        while p > 0 && ranks_above(v, self.val[p - 1]) {
            self.val[p] = self.val[p - 1];
            self.idx[p] = self.idx[p - 1];
            p -= 1;
        }
        self.val[p] = v;
        self.idx[p] = i as u32;
        self.len = (self.len + 1).min(k);
    }
}

/// Softmax + TopK for sampling: writes the `k = indices.len()` most likely
/// entries of `logits` into `indices` / `probs`, sorted by probability
/// descending (ties: lower index first; NaN logits rank last), with the
/// probabilities normalised over the **whole** row. `logits` is untouched.
/// Requires `1 <= k <= logits.len() < 2^32` and `probs.len() == k`.
pub fn softmax_topk(logits: &[f32], indices: &mut [u32], probs: &mut [f32]) -> Result<()> {
    softmax_topk_with(logits, indices, probs, best_isa())
}

/// [`softmax_topk`] with a forced variant.
pub fn softmax_topk_with(
    logits: &[f32],
    indices: &mut [u32],
    probs: &mut [f32],
    isa: Isa,
) -> Result<()> {
    const OP: &str = "softmax_topk";
    let k = indices.len();
    check_len(OP, "probs", probs.len(), k)?;
    if k == 0 || k > logits.len() || logits.len() > u32::MAX as usize {
        return Err(KernelError::InvalidShape {
            op: OP,
            reason: format!(
                "k = {k} must be in 1..={} (the row length, below 2^32)",
                logits.len()
            ),
        });
    }
    let isa = resolve_isa(OP, isa)?;
    let mut list = TopList::new(indices, probs);
    let (max, sum) = match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2 + FMA checked by resolve_isa.
        Isa::Avx2 => unsafe {
            let m = avx2::max_topk(logits, &mut list);
            (m, avx2::sum_exp(logits, shift_for(m)))
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512F checked by resolve_isa.
        Isa::Avx512 => unsafe {
            let m = avx512::max_topk(logits, &mut list);
            (m, avx512::sum_exp(logits, shift_for(m)))
        },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is always present on aarch64.
        Isa::Neon => unsafe {
            let m = neon::max_topk(logits, &mut list);
            (m, neon::sum_exp(logits, shift_for(m)))
        },
        _ => {
            let m = scalar::max_topk(logits, &mut list);
            (m, scalar::sum_exp(logits, shift_for(m)))
        }
    };
    debug_assert_eq!(list.len, k);
    let shift = shift_for(max);
    let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
    for p in probs.iter_mut() {
        *p = (*p - shift).exp() * inv;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
