//! The rest of the kernel zoo as one-configuration problems for `tiletune
//! bench` (same contract as [`super::one`]: one candidate, seeded inputs, an
//! independent reference computed once, `run(0)` timed):
//!
//! - `attention` `heads×kv_heads×head_dim×ctx` (+ `rows`, 1 = decode, and
//!   optionally `page`): paged attention of the last `rows` positions of a
//!   `ctx`-token sequence against a KV cache of dtype f32, f16 or q8_0;
//!   reference: [`attention::dense_reference`] over the gathered cache.
//! - `i8gemm` `m×n×k` (m = 1 is the GEMV), dtype `i8` (symmetric
//!   activations) or `i8_zp` (asymmetric, with a zero point); reference: the
//!   f64 product of the dequantized operands.
//! - `embed_lookup` `tokens×vocab×dim` and `lm_head` `vocab×dim`, dtype
//!   `u1`..`u7` (bits per value; optional `group` dim, default 32): the
//!   group-quantized embedding table as token lookup and as the tied LM head
//!   GEMV; reference: `scale · (q − zero)` unpacked value by value, in f64.
//! - `matmul_rope` `m×heads×head_dim×k` (f32 or f16 weights): the fused
//!   projection + rotate-half RoPE (θ = 10⁶, positions `0..m`); reference:
//!   the f64 product, then the rotation in f64.
//!
//! Byte counts are the compulsory traffic of one run; the attention's count
//! follows the causal mask (row `r` reads `pos0 + r + 1` keys and values).

use super::one::{copies, params_or};
use super::{Machine, candidate, row_scaled_err};
use crate::TunerError;
use crate::campaign::{KernelProblem, Work};
use half::f16;
use tiletune_kernels::attention::{
    self, AttnParams, AttnQuery, AttnScratch, AttnShape, KvDtype, PagedKvCache, SeqId,
    default_page_size,
};
use tiletune_kernels::embed::{self, LmHead, LmHeadParams, LmHeadShape, PackedEmbedding};
use tiletune_kernels::gemm::{GemmConfig, GemmParams, GemmShape};
use tiletune_kernels::i8gemm::{self, I8Gemm, I8GemmParams, I8GemmShape, QActivations, QWeights};
use tiletune_kernels::matmul_rope::{self as mr, Positions, RopeLayout, RopeSpec};
use tiletune_kernels::testing::{Rng, max_rel_err};
use tiletune_kernels::{Isa, KernelError, Tunable};
use tiletune_tables::{Candidate, Problem};

/// The ops this module instantiates.
pub(super) const OPS: [&str; 5] = [
    "attention",
    "i8gemm",
    "embed_lookup",
    "lm_head",
    "matmul_rope",
];

/// The `--shape` dims of an op of this module.
pub(super) fn dims(op: &str) -> Option<&'static [&'static str]> {
    Some(match op {
        "attention" => &["heads", "kv_heads", "head_dim", "ctx"],
        "i8gemm" => &["m", "n", "k"],
        "embed_lookup" => &["tokens", "vocab", "dim"],
        "lm_head" => &["vocab", "dim"],
        "matmul_rope" => &["m", "heads", "head_dim", "k"],
        _ => return None,
    })
}

/// Dims given by flags rather than `--shape`, with what they mean when absent.
pub(super) fn optional_dims(op: &str) -> &'static [&'static str] {
    match op {
        "attention" => &["rows", "page"],
        "embed_lookup" | "lm_head" => &["group"],
        _ => &[],
    }
}

pub(super) fn dtypes(op: &str) -> &'static [&'static str] {
    match op {
        "attention" => &["f32", "f16", "q8_0"],
        "i8gemm" => &["i8", "i8_zp"],
        "embed_lookup" | "lm_head" => &["u1", "u2", "u3", "u4", "u5", "u6", "u7"],
        "matmul_rope" => &["f32", "f16"],
        _ => &[],
    }
}

/// The kernel's own op name, for errors.
pub(super) fn static_op(op: &str) -> &'static str {
    match op {
        "attention" => "paged_attention",
        "i8gemm" => "i8gemm",
        "matmul_rope" => "matmul_rope",
        _ => "embed",
    }
}

/// Builds the one-candidate problem of `spec` (an op of [`OPS`]); `dims` are
/// its [`dims`] in order, already checked.
pub(super) fn instantiate(
    spec: &Problem,
    dims: &[usize],
    m: &Machine,
    one: &super::OneConfig,
) -> Result<Box<dyn KernelProblem>, TunerError> {
    let sop = static_op(spec.op());
    let threads = |default: usize| one.threads.unwrap_or(default).max(1);
    let bad =
        |reason: String| -> TunerError { KernelError::InvalidShape { op: sop, reason }.into() };
    match spec.op() {
        "attention" => {
            let (heads, kv_heads, head_dim, ctx) = (dims[0], dims[1], dims[2], dims[3]);
            let rows = spec.dim("rows").unwrap_or(1);
            if rows > ctx {
                return Err(bad(format!(
                    "rows = {rows} query rows do not fit a context of {ctx}; pass --rows at most the context"
                )));
            }
            if !heads.is_multiple_of(kv_heads) {
                return Err(bad(format!(
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
            let mut params: AttnParams =
                params_or(sop, one, || AttnParams::default_for(&shape, &m.caps))?;
            params.threads = threads(params.threads);
            params.validate()?;
            let isa = one.isa.unwrap_or_else(tiletune_kernels::eltwise::best_isa);
            Ok(Box::new(AttnOne::new(
                spec.clone(),
                shape,
                dtype,
                page,
                isa,
                params,
                m,
                one.cold,
            )?))
        }
        "i8gemm" => {
            let shape = I8GemmShape {
                m: dims[0],
                n: dims[1],
                k: dims[2],
            };
            if shape.k > i8gemm::MAX_K {
                return Err(bad(format!(
                    "k = {} exceeds {}: the i32 accumulators would overflow",
                    shape.k,
                    i8gemm::MAX_K
                )));
            }
            let params: I8GemmParams =
                params_or(sop, one, || I8GemmParams::default_for(&shape, &m.caps))?;
            let mut g = I8Gemm::new().params(params).threads(threads(m.max_threads));
            if let Some(isa) = one.isa {
                g = g.isa(isa);
            }
            Ok(Box::new(I8One::new(
                spec.clone(),
                g,
                shape,
                spec.dtype() == "i8_zp",
                m,
                one.cold,
            )?))
        }
        "embed_lookup" | "lm_head" => {
            let bits: usize = spec.dtype()[1..].parse().unwrap_or(4);
            let group = spec.dim("group").unwrap_or(32);
            let lookup = spec.op() == "embed_lookup";
            let (tokens, vocab, dim) = if lookup {
                (dims[0], dims[1], dims[2])
            } else {
                (0, dims[0], dims[1])
            };
            let mut rng = Rng::new(m.seed);
            let w = rng.vec_f32(vocab * dim);
            let emb = PackedEmbedding::quantize(&w, vocab, dim, bits, group)?;
            if lookup {
                // A memory copy with a shift per value: one scalar variant,
                // one thread.
                if let Some(isa) = one.isa.filter(|&i| i != Isa::Scalar) {
                    return Err(KernelError::NoVariant { op: sop, isa }.into());
                }
                if one.threads.is_some_and(|t| t != 1) || one.params.is_some() {
                    return Err(KernelError::InvalidParams {
                        op: sop,
                        reason: "the embedding lookup has no parameters and runs on one thread; drop --params and --threads".into(),
                    }
                    .into());
                }
                let ids = (0..tokens).map(|_| rng.below(vocab) as u32).collect();
                return Ok(Box::new(LookupOne::new(
                    spec.clone(),
                    emb,
                    ids,
                    m,
                    one.cold,
                )));
            }
            let shape = LmHeadShape { vocab, dim, bits };
            let params: LmHeadParams =
                params_or(sop, one, || LmHeadParams::default_for(&shape, &m.caps))?;
            let mut head = LmHead::new().params(params).threads(threads(m.max_threads));
            if let Some(isa) = one.isa {
                head = head.isa(isa);
            }
            let x = rng.vec_f32(dim);
            Ok(Box::new(LmHeadOne::new(
                spec.clone(),
                head,
                emb,
                x,
                m,
                one.cold,
            )))
        }
        _ => {
            let (rows, heads, head_dim, k) = (dims[0], dims[1], dims[2], dims[3]);
            if !head_dim.is_multiple_of(2) {
                return Err(bad(format!(
                    "head_dim = {head_dim} must be even (RoPE rotates pairs)"
                )));
            }
            let shape = GemmShape {
                m: rows,
                n: heads * head_dim,
                k,
            };
            let isa = one.isa.unwrap_or_else(|| {
                tiletune_kernels::gemm::resolve_isa("gemm", None).unwrap_or(Isa::Scalar)
            });
            let params: GemmParams = params_or(sop, one, || {
                GemmParams::default_for_isa(&shape, &m.caps, isa)
            })?;
            let cfg = GemmConfig {
                isa: Some(isa),
                params,
                threads: threads(m.max_threads),
            };
            let rope = RopeSpec {
                head_dim,
                rotary_dim: head_dim,
                theta: 1.0e6,
                layout: RopeLayout::RotateHalf,
            };
            Ok(Box::new(MatmulRopeOne::new(
                spec.clone(),
                shape,
                rope,
                cfg,
                spec.dtype() == "f16",
                m,
                one.cold,
            )))
        }
    }
}

/// Paged attention with one configuration.
struct AttnOne {
    spec: Problem,
    isa: Isa,
    params: AttnParams,
    query: AttnQuery,
    /// Identical caches rotated through for cold-cache timing.
    caches: Vec<(PagedKvCache, SeqId)>,
    next: usize,
    q: Vec<f32>,
    out: Vec<f32>,
    /// The kernel's buffers, reused across calls as the runtime does.
    scratch: AttnScratch,
    reference: Vec<f32>,
    cands: Vec<Candidate>,
    work: Work,
}

impl AttnOne {
    #[allow(clippy::too_many_arguments)]
    fn new(
        spec: Problem,
        shape: AttnShape,
        dtype: KvDtype,
        page: usize,
        isa: Isa,
        params: AttnParams,
        m: &Machine,
        cold: bool,
    ) -> Result<Self, TunerError> {
        let (ctx, kvh, hd) = (shape.kv_len, shape.n_kv_heads, shape.head_dim);
        let mut rng = Rng::new(m.seed);
        let k = rng.vec_f32(ctx * kvh * hd);
        let v = rng.vec_f32(ctx * kvh * hd);
        let q: Vec<f32> = (0..shape.q_rows * shape.n_q_heads * hd)
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
        for _ in 1..copies(kv_bytes, &m.caps, cold) {
            caches.push(caches[0].clone());
        }
        let pos0 = ctx - shape.q_rows;
        let query = AttnQuery::new(shape.n_q_heads, shape.q_rows, pos0, hd);
        let (kd, vd) = caches[0].0.gather(caches[0].1, 0)?;
        let mut reference = vec![0.0; q.len()];
        attention::dense_reference(
            &shape,
            pos0,
            query.scale,
            &q,
            &kd,
            &vd,
            &mut reference,
            None,
        )?;
        // Σ over rows of the visible positions (causal mask).
        let visible: u64 = (0..shape.q_rows).map(|r| (pos0 + r + 1) as u64).sum();
        let work = Work {
            bytes: visible * 2 * (kvh * row_bytes) as u64 + 8 * q.len() as u64,
            flops: visible * 4 * (shape.n_q_heads * hd) as u64,
        };
        Ok(AttnOne {
            cands: vec![candidate(Some(isa), &params, params.threads)],
            spec,
            isa,
            params,
            query,
            caches,
            next: 0,
            out: vec![0.0; q.len()],
            scratch: AttnScratch::new(),
            q,
            reference,
            work,
        })
    }

    fn call(&mut self, copy: usize) -> tiletune_kernels::Result<()> {
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
}

impl KernelProblem for AttnOne {
    fn spec(&self) -> &Problem {
        &self.spec
    }
    fn candidates(&self) -> &[Candidate] {
        &self.cands
    }
    fn default_index(&self) -> usize {
        0
    }
    fn validate(&mut self, _i: usize) -> Result<f32, String> {
        self.out.fill(f32::NAN);
        self.call(0).map_err(|e| e.to_string())?;
        Ok(max_rel_err(&self.out, &self.reference))
    }
    /// The kernel tests hold every variant to 1e-5 absolute + 1e-5 relative
    /// of the f64 oracle on the same (rounded) K/V; outputs are convex
    /// combinations of values in [-1, 1], so this is the same bound.
    fn tolerance(&self) -> f32 {
        2e-5
    }
    fn run(&mut self, _i: usize) {
        self.next = (self.next + 1) % self.caches.len();
        let _ = self.call(self.next);
    }
    fn work(&self) -> Work {
        self.work
    }
}

/// Int8 GEMM/GEMV with one configuration; activations are quantized once
/// outside the timed region (as a runtime does once per layer input).
struct I8One {
    spec: Problem,
    g: I8Gemm,
    shape: I8GemmShape,
    a: QActivations,
    w: Vec<QWeights>,
    next: usize,
    c: Vec<f32>,
    reference: Vec<f32>,
    cands: Vec<Candidate>,
}

impl I8One {
    fn new(
        spec: Problem,
        g: I8Gemm,
        shape: I8GemmShape,
        asymmetric: bool,
        m: &Machine,
        cold: bool,
    ) -> Result<Self, TunerError> {
        let (rows, n, k) = (shape.m, shape.n, shape.k);
        let mut rng = Rng::new(m.seed);
        let wf = rng.vec_f32(n * k);
        // Asymmetric activations: a shifted range, as after a SiLU.
        let af: Vec<f32> = (0..rows * k)
            .map(|_| rng.uniform(if asymmetric { -0.3 } else { -1.0 }, 1.0))
            .collect();
        let w0 = i8gemm::quantize_weights(&wf, n, k)?;
        let a = i8gemm::quantize_activations(&af, rows, k, asymmetric)?;
        let reference = i8gemm::reference_f32(&a, &w0, None);
        let mut w = vec![w0];
        for _ in 1..copies(n * k, &m.caps, cold) {
            w.push(w[0].clone());
        }
        Ok(I8One {
            cands: vec![candidate(Some(g.isa), &g.params, g.threads)],
            spec,
            g,
            shape,
            a,
            w,
            next: 0,
            c: vec![0.0; rows * n],
            reference,
        })
    }
}

impl KernelProblem for I8One {
    fn spec(&self) -> &Problem {
        &self.spec
    }
    fn candidates(&self) -> &[Candidate] {
        &self.cands
    }
    fn default_index(&self) -> usize {
        0
    }
    fn validate(&mut self, _i: usize) -> Result<f32, String> {
        self.c.fill(f32::NAN);
        self.g
            .run(&self.a, &self.w[0], None, &mut self.c)
            .map_err(|e| e.to_string())?;
        Ok(max_rel_err(&self.c, &self.reference))
    }
    /// Exact i32 accumulation; only the f32 epilogue (two products) rounds.
    fn tolerance(&self) -> f32 {
        1e-5
    }
    fn run(&mut self, _i: usize) {
        self.next = (self.next + 1) % self.w.len();
        let _ = self.g.run(&self.a, &self.w[self.next], None, &mut self.c);
    }
    fn work(&self) -> Work {
        let (m, n, k) = (
            self.shape.m as u64,
            self.shape.n as u64,
            self.shape.k as u64,
        );
        Work {
            // int8 weights + their scales and sums, int8 activations + scales, f32 out.
            bytes: n * k + 8 * n + m * k + 4 * m + 4 * m * n,
            flops: 2 * m * n * k,
        }
    }
}

/// `scale · (q − zero)` of element `i` of row `r`, in f64.
fn dequant(e: &PackedEmbedding, r: usize, i: usize) -> f64 {
    let rb = e.row_bytes();
    let q = embed::scalar::get(&e.data[r * rb..(r + 1) * rb], e.bits, i) as f64;
    let g = r * e.groups_per_row() + i / e.group;
    e.scales[g] as f64 * (q - e.zeros[g] as f64)
}

/// Bytes of one packed row with its per-group scale and zero.
fn packed_row_bytes(e: &PackedEmbedding) -> u64 {
    (e.row_bytes() + 8 * e.groups_per_row()) as u64
}

/// Token lookup from a packed table.
struct LookupOne {
    spec: Problem,
    emb: Vec<PackedEmbedding>,
    next: usize,
    ids: Vec<u32>,
    out: Vec<f32>,
    reference: Vec<f32>,
    cands: Vec<Candidate>,
}

impl LookupOne {
    fn new(spec: Problem, emb: PackedEmbedding, ids: Vec<u32>, m: &Machine, cold: bool) -> Self {
        let dim = emb.dim;
        let mut reference = Vec::with_capacity(ids.len() * dim);
        for &id in &ids {
            reference.extend((0..dim).map(|i| dequant(&emb, id as usize, i) as f32));
        }
        let bytes = emb.data.len() + 8 * emb.scales.len();
        let mut tables = vec![emb];
        for _ in 1..copies(bytes, &m.caps, cold) {
            tables.push(tables[0].clone());
        }
        LookupOne {
            spec,
            emb: tables,
            next: 0,
            out: vec![0.0; ids.len() * dim],
            ids,
            reference,
            cands: vec![candidate(Some(Isa::Scalar), &serde_json::json!({}), 1)],
        }
    }
}

impl KernelProblem for LookupOne {
    fn spec(&self) -> &Problem {
        &self.spec
    }
    fn candidates(&self) -> &[Candidate] {
        &self.cands
    }
    fn default_index(&self) -> usize {
        0
    }
    fn validate(&mut self, _i: usize) -> Result<f32, String> {
        self.out.fill(f32::NAN);
        self.emb[0]
            .lookup(&self.ids, &mut self.out)
            .map_err(|e| e.to_string())?;
        Ok(max_rel_err(&self.out, &self.reference))
    }
    /// One f32 multiply-subtract per value.
    fn tolerance(&self) -> f32 {
        1e-6
    }
    fn run(&mut self, _i: usize) {
        self.next = (self.next + 1) % self.emb.len();
        let _ = self.emb[self.next].lookup(&self.ids, &mut self.out);
    }
    fn work(&self) -> Work {
        let e = &self.emb[0];
        let t = self.ids.len() as u64;
        Work {
            bytes: t * (packed_row_bytes(e) + 4 * e.dim as u64),
            flops: 0,
        }
    }
}

/// The tied LM head GEMV over a packed table.
struct LmHeadOne {
    spec: Problem,
    head: LmHead,
    emb: Vec<PackedEmbedding>,
    next: usize,
    x: Vec<f32>,
    logits: Vec<f32>,
    reference: Vec<f64>,
    magnitude: Vec<f64>,
    cands: Vec<Candidate>,
}

impl LmHeadOne {
    fn new(
        spec: Problem,
        head: LmHead,
        emb: PackedEmbedding,
        x: Vec<f32>,
        m: &Machine,
        cold: bool,
    ) -> Self {
        let vocab = emb.vocab;
        let (mut reference, mut magnitude) = (Vec::with_capacity(vocab), Vec::with_capacity(vocab));
        for r in 0..vocab {
            let (mut s, mut mag) = (0.0f64, 0.0f64);
            for (i, &xi) in x.iter().enumerate() {
                let p = dequant(&emb, r, i) * xi as f64;
                s += p;
                mag += p.abs();
            }
            reference.push(s);
            magnitude.push(mag);
        }
        let bytes = emb.data.len() + 8 * emb.scales.len();
        let mut tables = vec![emb];
        for _ in 1..copies(bytes, &m.caps, cold) {
            tables.push(tables[0].clone());
        }
        LmHeadOne {
            cands: vec![candidate(Some(head.isa), &head.params, head.threads)],
            spec,
            head,
            emb: tables,
            next: 0,
            x,
            logits: vec![0.0; vocab],
            reference,
            magnitude,
        }
    }
}

impl KernelProblem for LmHeadOne {
    fn spec(&self) -> &Problem {
        &self.spec
    }
    fn candidates(&self) -> &[Candidate] {
        &self.cands
    }
    fn default_index(&self) -> usize {
        0
    }
    fn validate(&mut self, _i: usize) -> Result<f32, String> {
        self.logits.fill(f32::NAN);
        self.head
            .run(&self.emb[0], &self.x, &mut self.logits)
            .map_err(|e| e.to_string())?;
        Ok(row_scaled_err(
            &self.logits,
            &self.reference,
            &self.magnitude,
        ))
    }
    /// f32 accumulation with the zero point factored out of each group: the
    /// bound the quantized GEMV problems use, relative to Σ|w·x| per row.
    fn tolerance(&self) -> f32 {
        1e-5
    }
    fn run(&mut self, _i: usize) {
        self.next = (self.next + 1) % self.emb.len();
        let _ = self
            .head
            .run(&self.emb[self.next], &self.x, &mut self.logits);
    }
    fn work(&self) -> Work {
        let e = &self.emb[0];
        let (vocab, dim) = (e.vocab as u64, e.dim as u64);
        Work {
            bytes: vocab * packed_row_bytes(e) + 4 * dim + 4 * vocab,
            flops: 2 * vocab * dim,
        }
    }
}

/// Weights of the fused projection.
enum RopeWeights {
    F32(Vec<Vec<f32>>),
    F16(Vec<Vec<f16>>),
}

/// The fused projection + RoPE with one configuration.
struct MatmulRopeOne {
    spec: Problem,
    shape: GemmShape,
    rope: RopeSpec,
    cfg: GemmConfig,
    x: Vec<f32>,
    w: RopeWeights,
    next: usize,
    out: Vec<f32>,
    reference: Vec<f32>,
    cands: Vec<Candidate>,
}

impl MatmulRopeOne {
    fn new(
        spec: Problem,
        shape: GemmShape,
        rope: RopeSpec,
        cfg: GemmConfig,
        f16_weights: bool,
        m: &Machine,
        cold: bool,
    ) -> Self {
        let (rows, n, k) = (shape.m, shape.n, shape.k);
        let mut rng = Rng::new(m.seed);
        let x = rng.vec_f32(rows * k);
        let wf = rng.vec_f32(n * k);
        // The reference reads the weights the kernel reads (f16 widened).
        let (w, wv) = if f16_weights {
            let w16: Vec<f16> = wf.iter().map(|&v| f16::from_f32(v)).collect();
            let wv = w16.iter().map(|v| v.to_f32()).collect();
            let n_copies = copies(2 * n * k, &m.caps, cold);
            (RopeWeights::F16(vec![w16; n_copies]), wv)
        } else {
            let n_copies = copies(4 * n * k, &m.caps, cold);
            (RopeWeights::F32(vec![wf.clone(); n_copies]), wf)
        };
        let reference = matmul_rope_reference(&x, &wv, shape, &rope);
        MatmulRopeOne {
            cands: vec![candidate(cfg.isa, &cfg.params, cfg.threads)],
            spec,
            shape,
            rope,
            cfg,
            x,
            w,
            next: 0,
            out: vec![0.0; rows * n],
            reference,
        }
    }

    fn call(&mut self, copy: usize) -> tiletune_kernels::Result<()> {
        match &self.w {
            RopeWeights::F32(w) => mr::matmul_rope_f32(
                &self.x,
                &w[copy],
                None,
                &mut self.out,
                self.shape,
                &self.rope,
                Positions::Offset(0),
                &self.cfg,
            ),
            RopeWeights::F16(w) => mr::matmul_rope_f16w_f32(
                &self.x,
                &w[copy],
                None,
                &mut self.out,
                self.shape,
                &self.rope,
                Positions::Offset(0),
                &self.cfg,
            ),
        }
    }

    fn copies(&self) -> usize {
        match &self.w {
            RopeWeights::F32(w) => w.len(),
            RopeWeights::F16(w) => w.len(),
        }
    }
}

/// `RoPE(x · Wᵀ)` in f64: row `r` at position `r`, rotate-half pairs
/// `(i, i + rd/2)` at angle `r · θ^(−2i/rd)`.
fn matmul_rope_reference(x: &[f32], w: &[f32], shape: GemmShape, rope: &RopeSpec) -> Vec<f32> {
    let (rows, n, k) = (shape.m, shape.n, shape.k);
    let mut y = vec![0.0f64; rows * n];
    for r in 0..rows {
        for j in 0..n {
            y[r * n + j] = (0..k)
                .map(|t| x[r * k + t] as f64 * w[j * k + t] as f64)
                .sum();
        }
    }
    let (hd, half) = (rope.head_dim, rope.rotary_dim / 2);
    for r in 0..rows {
        for h in 0..n / hd {
            let base = r * n + h * hd;
            for i in 0..half {
                let freq = (rope.theta as f64).powf(-2.0 * i as f64 / rope.rotary_dim as f64);
                let (sin, cos) = (r as f64 * freq).sin_cos();
                let (a, b) = (y[base + i], y[base + i + half]);
                y[base + i] = a * cos - b * sin;
                y[base + i + half] = a * sin + b * cos;
            }
        }
    }
    y.into_iter().map(|v| v as f32).collect()
}

impl KernelProblem for MatmulRopeOne {
    fn spec(&self) -> &Problem {
        &self.spec
    }
    fn candidates(&self) -> &[Candidate] {
        &self.cands
    }
    fn default_index(&self) -> usize {
        0
    }
    fn validate(&mut self, _i: usize) -> Result<f32, String> {
        self.out.fill(f32::NAN);
        self.call(0).map_err(|e| e.to_string())?;
        Ok(max_rel_err(&self.out, &self.reference) / (self.shape.k.max(1) as f32).sqrt())
    }
    /// As for GEMM: f32 accumulation error grows like √k·ε (the error is
    /// divided by √k); the rotation adds a few ulp.
    fn tolerance(&self) -> f32 {
        1e-5
    }
    fn run(&mut self, _i: usize) {
        self.next = (self.next + 1) % self.copies();
        let _ = self.call(self.next);
    }
    fn work(&self) -> Work {
        let (m, n, k) = (
            self.shape.m as u64,
            self.shape.n as u64,
            self.shape.k as u64,
        );
        let elem = match self.w {
            RopeWeights::F32(_) => 4,
            RopeWeights::F16(_) => 2,
        };
        Work {
            bytes: 4 * m * k + elem * n * k + 4 * m * n,
            // The product; the rotation (6 flops per pair) is counted too.
            flops: 2 * m * n * k + 3 * m * n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{OneConfig, instantiate_one, parse_bench_problem_with};
    use super::*;

    fn machine() -> Machine {
        Machine::small_for_tests(5)
    }

    fn build(
        op: &str,
        dtype: &str,
        shape: &str,
        extra: &[(&str, usize)],
        cfg: &OneConfig,
    ) -> Result<Box<dyn KernelProblem>, String> {
        let spec = parse_bench_problem_with(op, dtype, shape, extra).map_err(|e| e.to_string())?;
        instantiate_one(&spec, &machine(), cfg).map_err(|e| e.to_string())
    }

    /// Every op, dtype and available ISA validates against its reference,
    /// with one and two threads, warm and cold; an ISA a family lacks says so.
    #[test]
    fn every_op_validates_on_every_available_isa() {
        type Case<'a> = (&'a str, &'a str, &'a str, &'a [(&'a str, usize)]);
        let cases: &[Case] = &[
            ("attention", "f32", "4x2x16x37", &[("rows", 1), ("page", 8)]),
            ("attention", "f16", "2x1x8x20", &[("rows", 5)]),
            (
                "attention",
                "q8_0",
                "4x4x32x70",
                &[("rows", 3), ("page", 16)],
            ),
            ("i8gemm", "i8", "1x9x40", &[]),
            ("i8gemm", "i8_zp", "3x5x33", &[]),
            ("embed_lookup", "u3", "5x11x64", &[]),
            ("embed_lookup", "u7", "2x3x128", &[("group", 64)]),
            ("lm_head", "u1", "13x64", &[]),
            ("lm_head", "u5", "6x256", &[("group", 128)]),
            ("matmul_rope", "f32", "3x2x8x19", &[]),
            ("matmul_rope", "f16", "1x3x16x33", &[]),
        ];
        for &(op, dtype, shape, extra) in cases {
            for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
                for (threads, cold) in [(1, false), (2, true)] {
                    let cfg = OneConfig {
                        isa: Some(isa),
                        threads: (op != "embed_lookup").then_some(threads),
                        cold,
                        ..OneConfig::default()
                    };
                    let what = format!("{op} {dtype} {shape} {extra:?} {isa} t{threads}");
                    let mut p = match build(op, dtype, shape, extra, &cfg) {
                        Ok(p) => p,
                        Err(e) => {
                            assert!(e.contains("variant"), "{what}: {e}");
                            continue;
                        }
                    };
                    assert_eq!(p.candidates().len(), 1);
                    match p.validate(0) {
                        Ok(err) => assert!(err <= p.tolerance(), "{what}: error {err}"),
                        Err(e) => assert!(e.contains("variant"), "{what}: {e}"),
                    }
                    p.run(0);
                    p.run(0);
                    let w = p.work();
                    assert!(w.bytes > 0, "{what}");
                    assert_eq!(w.flops == 0, op == "embed_lookup", "{what}");
                }
            }
        }
    }

    /// The RoPE reference is written independently of the kernel: check it
    /// on its own against the definition.
    #[test]
    fn rope_reference_rotates_by_position() {
        let x = rope_reference_sample();
        // A rotation by position 0 is the identity; by position 1 it is not.
        assert_eq!(x[0], x[1]);
        assert_ne!(x[2], x[3]);
    }

    /// Row 0 (position 0) and row 1 (position 1) of a one-head projection
    /// with identity-like weights: [row0 before, row0 after, row1 before, row1 after].
    fn rope_reference_sample() -> [f32; 4] {
        let shape = GemmShape { m: 2, n: 4, k: 4 };
        let mut w = vec![0.0f32; 16];
        for i in 0..4 {
            w[i * 4 + i] = 1.0;
        }
        let x = [1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0];
        let rope = RopeSpec {
            head_dim: 4,
            rotary_dim: 4,
            theta: 10_000.0,
            layout: RopeLayout::RotateHalf,
        };
        let y = matmul_rope_reference(&x, &w, shape, &rope);
        [x[0], y[0], x[4], y[4]]
    }

    #[test]
    fn bad_input_says_what_to_do() {
        let err = |op: &str, dtype: &str, shape: &str, extra: &[(&str, usize)], cfg: OneConfig| {
            build(op, dtype, shape, extra, &cfg)
                .err()
                .unwrap_or_else(|| panic!("{op} {shape} should fail"))
        };
        let d = OneConfig::default;
        assert!(err("attention", "f32", "4x2x16x8", &[("rows", 9)], d()).contains("--rows"));
        assert!(err("attention", "f32", "3x2x16x8", &[], d()).contains("multiple of kv_heads"));
        assert!(err("attention", "q8_0", "2x2x16x8", &[], d()).contains("multiple of 32"));
        assert!(
            err("attention", "bf16", "2x2x16x8", &[], d()).contains("supported: f32, f16, q8_0")
        );
        assert!(err("attention", "f32", "2x2x16", &[], d()).contains("heads"));
        assert!(err("i8gemm", "i8", "1x4x70000", &[], d()).contains("exceeds"));
        assert!(err("i8gemm", "i8", "1x4x8", &[("rows", 2)], d()).contains("optionally"));
        assert!(err("lm_head", "u8", "4x64", &[], d()).contains("supported"));
        assert!(err("lm_head", "u4", "4x40", &[], d()).contains("embed"));
        assert!(err("matmul_rope", "f32", "1x2x7x8", &[], d()).contains("even"));
        let threads2 = OneConfig {
            threads: Some(2),
            ..OneConfig::default()
        };
        assert!(err("embed_lookup", "u4", "2x4x64", &[], threads2).contains("one thread"));
        let avx = OneConfig {
            isa: Some(Isa::Avx2),
            ..OneConfig::default()
        };
        assert!(err("embed_lookup", "u4", "2x4x64", &[], avx).contains("variant"));
    }
}
