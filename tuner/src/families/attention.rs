//! Paged attention, pinned for `tiletune bench`: `attention`
//! `heads×kv_heads×head_dim×ctx` (+ `rows`, 1 = decode, and optionally
//! `page`), the last `rows` positions of a `ctx`-token sequence against a KV
//! cache of dtype f32, f16 or q8_0; reference: [`attention::dense_reference`]
//! over the gathered cache. The byte count follows the causal mask (row `r`
//! reads `pos0 + r + 1` keys and values).

use super::common::{candidate, copies};
use super::pinned::{Check, Pinned, PinnedKernel};
use super::spec::{OpName, OpSpec, PinRequest};
use crate::TunerError;
use crate::campaign::{KernelProblem, Work};
use tiletune_kernels::attention::{
    self, AttnParams, AttnQuery, AttnScratch, AttnShape, KvDtype, PagedKvCache, SeqId,
    default_page_size,
};
use tiletune_kernels::testing::Rng;
use tiletune_kernels::{Isa, Tunable};

pub(super) const OPS: &[OpSpec] = &[OpSpec::new(
    OpName::Exact("attention"),
    &["heads", "kv_heads", "head_dim", "ctx"],
    &["f32", "f16", "q8_0"],
    "paged_attention",
    pin,
    |d| {
        // K and V, and the queries and the output.
        let kv = &["ctx", "kv_heads", "head_dim"][..];
        d.terms(&[
            kv,
            kv,
            &["rows", "heads", "head_dim"],
            &["rows", "heads", "head_dim"],
        ])
    },
)
// f32 work on every ISA: with an int8 dot product only the Q8_0 scores,
// a third of it, are int8.
.optional_dims(&["rows", "page"])
.float()];

fn pin(req: &PinRequest) -> Result<Box<dyn KernelProblem>, TunerError> {
    let (spec, m) = (req.spec, req.machine);
    let (heads, kv_heads, head_dim, ctx) = (req.dims[0], req.dims[1], req.dims[2], req.dims[3]);
    let rows = spec.dim("rows").unwrap_or(1);
    if rows > ctx {
        return Err(req.bad_shape(format!(
            "rows = {rows} query rows do not fit a context of {ctx}; pass --rows at most the context"
        )));
    }
    if !heads.is_multiple_of(kv_heads) {
        return Err(req.bad_shape(format!(
            "heads = {heads} must be a multiple of kv_heads = {kv_heads} (grouped-query attention)"
        )));
    }
    let dtype = match spec.dtype() {
        "f16" => KvDtype::F16,
        "q8_0" => KvDtype::Q8_0,
        _ => KvDtype::F32,
    };
    let page = spec
        .dim("page")
        .unwrap_or_else(|| default_page_size(head_dim, dtype, &m.caps));
    let shape = AttnShape {
        n_q_heads: heads,
        n_kv_heads: kv_heads,
        head_dim,
        q_rows: rows,
        kv_len: ctx,
    };
    let mut params: AttnParams = req.params_or(|| AttnParams::default_for(&shape, &m.caps))?;
    params.threads = req.threads(params.threads);
    params.validate()?;
    let isa = req
        .config
        .isa
        .unwrap_or_else(tiletune_kernels::attention::best_isa);

    let (kvh, hd) = (kv_heads, head_dim);
    let mut rng = Rng::new(m.seed);
    let k = rng.vec_f32(ctx * kvh * hd);
    let v = rng.vec_f32(ctx * kvh * hd);
    let q: Vec<f32> = (0..rows * heads * hd)
        .map(|_| rng.uniform(-2.0, 2.0))
        .collect();
    let build = || -> Result<(PagedKvCache, SeqId), TunerError> {
        let mut c = PagedKvCache::new(1, kvh, hd, page, dtype, ctx.div_ceil(page))?;
        let seq = c.alloc_sequence();
        c.append_batch(seq, 0, &k, &v)?;
        Ok((c, seq))
    };
    let first = build()?;
    let row_bytes = match dtype {
        KvDtype::F32 => 4 * hd,
        KvDtype::F16 => 2 * hd,
        KvDtype::Q8_0 => hd / 32 * 34,
    };
    let kv_bytes = 2 * ctx * kvh * row_bytes;
    let mut caches = vec![first];
    for _ in 1..copies(kv_bytes, m, req.config.cold) {
        caches.push(caches[0].clone());
    }
    let pos0 = ctx - rows;
    let query = AttnQuery::new(heads, rows, pos0, hd);
    let (kd, vd) = caches[0].0.gather(caches[0].1, 0)?;
    let mut reference = vec![0.0; q.len()];
    let qs = dtype.query_as_scored(&q);
    attention::dense_reference(
        &shape,
        pos0,
        query.scale,
        &qs,
        &kd,
        &vd,
        &mut reference,
        None,
    )?;
    // The kernel tests hold every variant to 1e-5 absolute + 1e-5 relative
    // of the f64 oracle on the same (rounded) K/V and, for Q8_0, the same
    // quantized query (outputs are convex combinations of values in [-1,
    // 1], so `Relative` 2e-5 is the same bound), plus, where the variant
    // rounds its Q8_0 value weights, 1.01 times the most that rounding may
    // move each output.
    let (check, tolerance) = if dtype == KvDtype::Q8_0 && attention::rounds_q8_value_weights(isa) {
        let mut bound = vec![0.0; q.len()];
        attention::dense_q8_value_bound(
            &shape,
            pos0,
            query.scale,
            &qs,
            &kd,
            &vd,
            page,
            &mut bound,
        )?;
        let magnitude = (bound.iter().zip(&reference))
            .map(|(&b, &w)| 1.01 * b as f64 + 1e-5 * (2.0 + w.abs() as f64))
            .collect();
        let reference = reference.iter().map(|&w| w as f64).collect();
        (
            Check::RowScaled {
                reference,
                magnitude,
            },
            1.0,
        )
    } else {
        (Check::Relative(reference), 2e-5)
    };
    // Σ over rows of the visible positions (causal mask).
    let visible: u64 = (0..rows).map(|r| (pos0 + r + 1) as u64).sum();
    let work = Work {
        bytes: visible * 2 * (kvh * row_bytes) as u64 + 8 * q.len() as u64,
        flops: visible * 4 * (heads * hd) as u64,
    };
    Ok(Pinned {
        spec: spec.clone(),
        candidate: candidate(Some(isa), &params, params.threads),
        kernel: AttnKernel {
            isa,
            params,
            query,
            caches,
            out: vec![0.0; q.len()],
            scratch: AttnScratch::new(),
            q,
        },
        check,
        tolerance,
        work,
    }
    .boxed())
}

/// The operands of a pinned paged attention.
struct AttnKernel {
    isa: Isa,
    params: AttnParams,
    query: AttnQuery,
    /// Identical caches rotated through for cold-cache timing.
    caches: Vec<(PagedKvCache, SeqId)>,
    q: Vec<f32>,
    out: Vec<f32>,
    /// The kernel's buffers, reused across calls as the runtime does.
    scratch: AttnScratch,
}

impl PinnedKernel for AttnKernel {
    fn copies(&self) -> usize {
        self.caches.len()
    }
    fn call(&mut self, copy: usize, _validating: bool) -> tiletune_kernels::Result<()> {
        let (cache, seq) = &self.caches[copy];
        attention::paged_attention_scratch(
            cache,
            *seq,
            0,
            &self.query,
            &self.q,
            &mut self.out,
            None,
            self.isa,
            &self.params,
            &mut self.scratch,
        )
    }
    fn output(&mut self) -> &mut [f32] {
        &mut self.out
    }
}
