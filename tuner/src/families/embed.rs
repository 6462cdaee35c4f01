//! The group-quantized embedding table, pinned for `tiletune bench`:
//! `embed_lookup` `tokens×vocab×dim`, dtype `u1`..`u7` (bits per value;
//! optional `group` dim, default 32), the token lookup; reference:
//! `scale · (q − zero)` unpacked value by value, in f64. The same table as
//! the tied LM head GEMV is `lm_head.rs`.

use super::common::{candidate, copies};
use super::pinned::{Check, Pinned, PinnedKernel};
use super::spec::{Machine, OpName, OpSpec, PinRequest};
use crate::TunerError;
use crate::campaign::{KernelProblem, Work};
use tiletune_kernels::embed::{self, PackedEmbedding};
use tiletune_kernels::testing::Rng;
use tiletune_kernels::{Isa, KernelError};
use tiletune_tables::Problem;

/// The dtypes of a packed table: bits per value.
pub(super) const DTYPES: &[&str] = &["u1", "u2", "u3", "u4", "u5", "u6", "u7"];

pub(super) const OPS: &[OpSpec] = &[OpSpec::new(
    OpName::Exact("embed_lookup"),
    &["tokens", "vocab", "dim"],
    DTYPES,
    "embed",
    pin,
    |d| d.terms(&[&["vocab", "dim"], &["tokens", "dim"]]),
)
.optional_dims(&["group"])];

/// A seeded `vocab × dim` table packed at the problem's bits and group,
/// and its generator, from which the problem's other inputs are drawn next
/// (token ids, activations): the seeded inputs depend on that order.
pub(super) fn packed_table(
    spec: &Problem,
    m: &Machine,
    vocab: usize,
    dim: usize,
) -> Result<(PackedEmbedding, Rng), TunerError> {
    let bits: usize = spec.dtype()[1..].parse().unwrap_or(4);
    let group = spec.dim("group").unwrap_or(32);
    let mut rng = Rng::new(m.seed);
    let w = rng.vec_f32(vocab * dim);
    Ok((PackedEmbedding::quantize(&w, vocab, dim, bits, group)?, rng))
}

/// `copies` of `emb` (the first is `emb`).
pub(super) fn table_copies(emb: PackedEmbedding, copies: usize) -> Vec<PackedEmbedding> {
    let mut tables = vec![emb];
    for _ in 1..copies {
        tables.push(tables[0].clone());
    }
    tables
}

/// Bytes of a table and its scales, what a cold rotation must exceed.
pub(super) fn table_bytes(e: &PackedEmbedding) -> usize {
    e.data.len() + 8 * e.scales.len()
}

/// `scale · (q − zero)` of element `i` of row `r`, in f64.
pub(super) fn dequant(e: &PackedEmbedding, r: usize, i: usize) -> f64 {
    let rb = e.row_bytes();
    let q = embed::scalar::get(&e.data[r * rb..(r + 1) * rb], e.bits, i) as f64;
    let g = r * e.groups_per_row() + i / e.group;
    e.scales[g] as f64 * (q - e.zeros[g] as f64)
}

/// Bytes of one packed row with its per-group scale and zero.
pub(super) fn packed_row_bytes(e: &PackedEmbedding) -> u64 {
    (e.row_bytes() + 8 * e.groups_per_row()) as u64
}

fn pin(req: &PinRequest) -> Result<Box<dyn KernelProblem>, TunerError> {
    let m = req.machine;
    let (tokens, vocab, dim) = (req.dims[0], req.dims[1], req.dims[2]);
    let (emb, mut rng) = packed_table(req.spec, m, vocab, dim)?;
    // A memory copy with a shift per value: one scalar variant, one thread.
    if let Some(isa) = req.config.isa.filter(|&i| i != Isa::Scalar) {
        return Err(KernelError::NoVariant {
            op: req.op.kernel,
            isa,
        }
        .into());
    }
    if req.config.threads.is_some_and(|t| t != 1) || req.config.params.is_some() {
        return Err(KernelError::InvalidParams {
            op: req.op.kernel,
            reason: "the embedding lookup has no parameters and runs on one thread; drop --params and --threads".into(),
        }
        .into());
    }
    let ids: Vec<u32> = (0..tokens).map(|_| rng.below(vocab) as u32).collect();
    let mut reference = Vec::with_capacity(ids.len() * dim);
    for &id in &ids {
        reference.extend((0..dim).map(|i| dequant(&emb, id as usize, i) as f32));
    }
    let work = Work {
        bytes: tokens as u64 * (packed_row_bytes(&emb) + 4 * dim as u64),
        flops: 0,
    };
    let n = copies(table_bytes(&emb), m, req.config.cold);
    Ok(Pinned {
        spec: req.spec.clone(),
        candidate: candidate(Some(Isa::Scalar), &serde_json::json!({}), 1),
        kernel: LookupKernel {
            tables: table_copies(emb, n),
            out: vec![0.0; ids.len() * dim],
            ids,
        },
        check: Check::Relative(reference),
        // One f32 multiply-subtract per value.
        tolerance: 1e-6,
        work,
    }
    .boxed())
}

/// The operands of a pinned token lookup.
struct LookupKernel {
    tables: Vec<PackedEmbedding>,
    ids: Vec<u32>,
    out: Vec<f32>,
}

impl PinnedKernel for LookupKernel {
    fn copies(&self) -> usize {
        self.tables.len()
    }
    fn call(&mut self, copy: usize, _validating: bool) -> tiletune_kernels::Result<()> {
        self.tables[copy].lookup(&self.ids, &mut self.out)
    }
    fn output(&mut self) -> &mut [f32] {
        &mut self.out
    }
}
