//! The tied LM head, pinned for `tiletune bench`: `lm_head` `vocab×dim`,
//! the GEMV of an activation row over the packed embedding table of
//! `embed.rs` (dtype `u1`..`u7`, optional `group`); reference: the f64
//! product with `scale · (q − zero)` unpacked value by value.

use super::common::{candidate, copies};
use super::embed::{self, dequant, packed_row_bytes, packed_table, table_bytes, table_copies};
use super::pinned::{Check, Pinned, PinnedKernel, products};
use super::spec::{OpName, OpSpec, PinRequest};
use crate::TunerError;
use crate::campaign::{KernelProblem, Work};
use tiletune_kernels::Tunable;
use tiletune_kernels::embed::{LmHead, LmHeadParams, LmHeadShape, PackedEmbedding};

pub(super) const OPS: &[OpSpec] = &[OpSpec::new(
    OpName::Exact("lm_head"),
    &["vocab", "dim"],
    embed::DTYPES,
    "embed",
    pin,
    |d| d.terms(&[&["vocab", "dim"], &["vocab"], &["dim"]]),
)
.optional_dims(&["group"])];

fn pin(req: &PinRequest) -> Result<Box<dyn KernelProblem>, TunerError> {
    let m = req.machine;
    let (vocab, dim) = (req.dims[0], req.dims[1]);
    let (emb, mut rng) = packed_table(req.spec, m, vocab, dim)?;
    let shape = LmHeadShape {
        vocab,
        dim,
        bits: emb.bits,
    };
    let params: LmHeadParams = req.params_or(|| LmHeadParams::default_for(&shape, &m.caps))?;
    let mut head = LmHead::new()
        .params(params)
        .threads(req.threads(m.max_threads));
    if let Some(isa) = req.config.isa {
        head = head.isa(isa);
    }
    let x = rng.vec_f32(dim);
    let (reference, magnitude) = products((0..vocab).map(|r| {
        let emb = &emb;
        x.iter()
            .enumerate()
            .map(move |(i, &xi)| dequant(emb, r, i) * xi as f64)
    }));
    let (v64, d64) = (vocab as u64, dim as u64);
    let work = Work {
        bytes: v64 * packed_row_bytes(&emb) + 4 * d64 + 4 * v64,
        flops: 2 * v64 * d64,
    };
    let n = copies(table_bytes(&emb), m, req.config.cold);
    Ok(Pinned {
        spec: req.spec.clone(),
        candidate: candidate(Some(head.isa), &head.params, head.threads),
        kernel: LmHeadKernel {
            head,
            tables: table_copies(emb, n),
            x,
            logits: vec![0.0; vocab],
        },
        check: Check::RowScaled {
            reference,
            magnitude,
        },
        // f32 accumulation with the zero point factored out of each group:
        // the bound the quantized GEMV problems use, relative to Σ|w·x| per
        // row.
        tolerance: 1e-5,
        work,
    }
    .boxed())
}

/// The operands of a pinned LM head.
struct LmHeadKernel {
    head: LmHead,
    tables: Vec<PackedEmbedding>,
    x: Vec<f32>,
    logits: Vec<f32>,
}

impl PinnedKernel for LmHeadKernel {
    fn copies(&self) -> usize {
        self.tables.len()
    }
    fn call(&mut self, copy: usize, _validating: bool) -> tiletune_kernels::Result<()> {
        self.head.run(&self.tables[copy], &self.x, &mut self.logits)
    }
    fn output(&mut self) -> &mut [f32] {
        &mut self.logits
    }
}
