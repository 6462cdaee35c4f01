//! The fast decoder: the reference decoder's math on the kernel crate, with
//! each linear layer run by the kernel the [`ExecutionPlan`] chose for it.
//!
//! f32 and f16 weights stay as they are and run through GEMV (decode) and
//! GEMM (prefill). A quantized weight whose format has a quantized GEMM
//! (`qgemm::FORMATS`) is repacked once at load and that packed copy is the
//! only one kept: decode runs the GEMM at m = 1 (several times faster than
//! the per-row GEMV: no horizontal sums), prefill at m rows, and a tied
//! embedding looks its rows up in it. The other quantized formats the
//! quantized GEMV reads stay in their GGUF blocks and run the GEMV row by
//! row, as does a forced W·A32 (`--qmode a32`) or a per-row winner from the
//! selector table (then both copies are kept). Any other type is
//! dequantized to f32 at load. RMSNorm, SwiGLU, RoPE, softmax and residual adds are the kernel
//! crate's. A [`RunState`] holds the KV cache and every scratch buffer, so a
//! decode step allocates nothing once the first step has sized them.
//!
//! The KV cache is the kernel crate's paged cache (one sequence, pages of
//! the kernel's default size for this CPU, f32, f16 or Q8_0 pages) and
//! attention is its paged kernel: online softmax over pages, GQA, split over
//! the plan's threads. The library defaults to f32 pages, which reproduce
//! the reference decoder to rounding; [`FastModel::with_kv_dtype`] picks
//! f16 (the command line's default, as llama.cpp's) or Q8_0. The attention
//! kernel's own buffers (row statistics, a page of scores per worker, split-K
//! partial states) are the state's [`AttnScratch`], reused from call to call.

use half::f16;
use std::sync::atomic::{AtomicBool, Ordering};
use tiletune_kernels::attention::{
    self, AttnParams, AttnQuery, AttnScratch, AttnShape, KvDtype, PagedKvCache, SeqId,
    default_page_size,
};
use tiletune_kernels::eltwise;
use tiletune_kernels::gemm::{GemmShape, gemm_f16w_f32, gemm_f32};
use tiletune_kernels::gemv::{GemvShape, gemv_f16_f32, gemv_f32};
use tiletune_kernels::mem::HugeBuf;
use tiletune_kernels::norm::Norm;
use tiletune_kernels::qgemm::{self, PackedQ};
use tiletune_kernels::qgemv::{QGemv, QMode, activation_format};
use tiletune_kernels::quant::{self, QuantFormat};
use tiletune_kernels::rope::{self, Positions, RopeCache, RopeShape};
use tiletune_kernels::{CpuCaps, Isa, Tunable};

use super::{RopeLayout, Weight, WeightSource, dequant};
use crate::config::ModelConfig;
use crate::error::{LoadError, Result};
use crate::gguf::{GgmlType, GgufFile};
use crate::plan::{ExecutionPlan, KernelChoice, Layout, Op, WeightKind};
use crate::problems::{PREFILL_BUCKETS, prefill_bucket};

fn kerr(e: tiletune_kernels::KernelError) -> LoadError {
    LoadError::Config(format!(
        "kernel call failed: {e}; the plan or the weights do not fit the model, report this as a bug"
    ))
}

/// A weight matrix `(n, k)` in the form its kernels read.
#[derive(Clone, Debug)]
enum WData {
    F32(HugeBuf<f32>),
    F16(HugeBuf<f16>),
    /// A quantized weight: its GGUF `blocks` while a per-row quantized
    /// GEMV (or the embedding lookup alone) reads them, and/or the same
    /// weights `packed` for the quantized GEMM. At least one is present;
    /// both only when the plan mixes the two kinds (a forced W·A32 decode,
    /// or a table whose winners differ between decode and prefill).
    Quant {
        format: QuantFormat,
        blocks: Option<HugeBuf<u8>>,
        /// Boxed: a `PackedQ` is several vectors, the other variants one.
        packed: Option<Box<PackedQ>>,
    },
}

/// One linear layer with its kernels: decode (m = 1) and one per prefill
/// bucket. A stack of layers that read the same activations
/// ([`crate::problems::STACKS`]) is one `Linear` whose rows are theirs in
/// turn and whose results go to one buffer per layer (`parts`).
#[derive(Clone, Debug)]
pub(crate) struct Linear {
    w: WData,
    n: usize,
    k: usize,
    /// Output features of each stacked layer (`[n]` for one layer).
    parts: Vec<usize>,
    pub(crate) bias: Option<Vec<f32>>,
    /// The weight's element type.
    dtype: GgmlType,
    decode: KernelChoice,
    prefill: [KernelChoice; PREFILL_BUCKETS.len()],
}

impl Linear {
    /// Loads weight `w` as an `(n, k)` matrix; `matmul` is false for an
    /// untied token embedding, which is only looked up row by row.
    fn load(
        g: &GgufFile,
        plan: &ExecutionPlan,
        w: Weight,
        n: usize,
        k: usize,
        matmul: bool,
    ) -> Result<Self> {
        Self::load_named(g, plan, &w.gguf_name(), n, k, matmul, None)
    }

    /// Loads tensor `name` as an `(n, k)` matrix. With `rows = Some(m)`
    /// every call runs the plan's GEMM for `m` rows (a vision tower's
    /// layers: one problem per weight, [`crate::vision::tower_problems`]),
    /// else the decode GEMV and the prefill buckets' GEMMs.
    pub(crate) fn load_named(
        g: &GgufFile,
        plan: &ExecutionPlan,
        name: &str,
        n: usize,
        k: usize,
        matmul: bool,
        rows: Option<usize>,
    ) -> Result<Self> {
        Self::load_stacked(g, plan, &[(name.to_string(), n)], k, matmul, rows)
    }

    /// Loads tensors `parts` (name, rows) stacked by rows as one `(Σ rows,
    /// k)` matrix, as [`Self::load_named`] loads one; they must share one
    /// element type ([`crate::problems::stack_runs`] cuts stacks so).
    fn load_stacked(
        g: &GgufFile,
        plan: &ExecutionPlan,
        parts: &[(String, usize)],
        k: usize,
        matmul: bool,
        rows: Option<usize>,
    ) -> Result<Self> {
        let name = parts
            .iter()
            .map(|p| p.0.as_str())
            .collect::<Vec<_>>()
            .join(" + ");
        let bad = |tensor: &str, what: String| LoadError::BadTensor {
            path: g.path().to_path_buf(),
            tensor: tensor.to_string(),
            what,
        };
        let mut datas = Vec::with_capacity(parts.len());
        let mut dtype = None;
        for (part, n) in parts {
            let (info, data) = g.tensor_data(part)?;
            if info.dims.len() != 2 || info.dims[0] != k as u64 || info.dims[1] != *n as u64 {
                return Err(bad(
                    part,
                    format!(
                        "dims {:?}, the config implies [{k}, {n}]; the weights do not match the config",
                        info.dims
                    ),
                ));
            }
            if dtype.is_some_and(|t| t != info.ggml_type) {
                return Err(bad(
                    part,
                    "stacked with a tensor of another type; report this as a bug".into(),
                ));
            }
            dtype = Some(info.ggml_type);
            datas.push(data);
        }
        let Some(dtype) = dtype else {
            return Err(LoadError::Config(
                "a linear layer of no tensors; report this as a bug".into(),
            ));
        };
        let n: usize = parts.iter().map(|p| p.1).sum();
        // Each tensor is read where it lies, a stack's one after the other:
        // joining them first would copy most of the model's bytes once more.
        let len: usize = datas.iter().map(|d| d.len()).sum();
        let bad = |what: String| bad(&name, what);
        let (decode, prefill) = match rows {
            Some(m) => {
                let c = plan.kernel(Op::Gemm, dtype, m, n, k);
                (c, [c; PREFILL_BUCKETS.len()])
            }
            None => (
                plan.kernel(Op::Gemv, dtype, 1, n, k),
                PREFILL_BUCKETS.map(|m| plan.kernel(Op::Gemm, dtype, m, n, k)),
            ),
        };
        let wd = match WeightKind::of(dtype) {
            WeightKind::F32 => {
                let mut w = HugeBuf::zeroed(len / 4);
                let values = datas.iter().flat_map(|d| d.chunks_exact(4));
                for (o, b) in w.iter_mut().zip(values) {
                    *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
                WData::F32(w)
            }
            WeightKind::F16 => {
                let mut w = HugeBuf::zeroed(len / 2);
                let values = datas.iter().flat_map(|d| d.chunks_exact(2));
                for (o, b) in w.iter_mut().zip(values) {
                    *o = f16::from_bits(u16::from_le_bytes([b[0], b[1]]));
                }
                WData::F16(w)
            }
            WeightKind::Quant(f) => {
                f.check_k("load", k).map_err(|e| bad(e.to_string()))?;
                if len != n * f.row_bytes(k) {
                    return Err(bad(format!("data does not hold {n} rows of {k} elements")));
                }
                // The plan gives every kernel of a weight one layout
                // (`plan::resolve_layouts`); it is held as that, once.
                let layout = if matmul {
                    Some(one_layout(&decode, &prefill).map_err(bad)?)
                } else {
                    None
                };
                let packed = match layout {
                    Some(Layout::Packed { nr }) => Some(Box::new(
                        qgemm::repack_stacked_on(f, &datas, n, k, nr, plan.threads)
                            .map_err(|e| bad(e.to_string()))?,
                    )),
                    _ => None,
                };
                let blocks = packed.is_none().then(|| {
                    let mut b = HugeBuf::zeroed(len);
                    let mut at = 0;
                    for d in &datas {
                        b[at..at + d.len()].copy_from_slice(d);
                        at += d.len();
                    }
                    b
                });
                WData::Quant {
                    format: f,
                    blocks,
                    packed,
                }
            }
            WeightKind::Dequantized => {
                let mut w = Vec::with_capacity(n * k);
                for d in &datas {
                    w.extend(dequant::dequantize(dtype, d).ok_or_else(|| {
                        bad(format!(
                            "type {} is not supported; re-quantize to q4_0, q8_0, q4_K, q6_K, f16 or f32",
                            dtype
                        ))
                    })?);
                }
                WData::F32(HugeBuf::from_slice(&w))
            }
        };
        let ok = match &wd {
            WData::F32(v) => v.len() == n * k,
            WData::F16(v) => v.len() == n * k,
            WData::Quant { .. } => true,
        };
        if !ok {
            return Err(bad(format!("data does not hold {n} rows of {k} elements")));
        }
        for d in datas {
            g.release(d);
        }
        Ok(Linear {
            w: wd,
            n,
            k,
            parts: parts.iter().map(|p| p.1).collect(),
            bias: None,
            dtype,
            decode,
            prefill,
        })
    }

    /// An f32 `(n, k)` matrix built in memory (a vision tower's patch
    /// embedding, assembled from its two temporal slices), run by the plan's
    /// f32 GEMM for `rows` rows.
    pub(crate) fn dense_f32(
        w: Vec<f32>,
        n: usize,
        k: usize,
        plan: &ExecutionPlan,
        rows: usize,
    ) -> Self {
        debug_assert_eq!(w.len(), n * k);
        let c = plan.kernel(Op::Gemm, GgmlType::F32, rows, n, k);
        Linear {
            w: WData::F32(HugeBuf::from_slice(&w)),
            n,
            k,
            parts: vec![n],
            bias: None,
            dtype: GgmlType::F32,
            decode: c,
            prefill: [c; PREFILL_BUCKETS.len()],
        }
    }

    /// Output features.
    pub(crate) fn n(&self) -> usize {
        self.n
    }

    /// Row `r` of the weight as f32 (the embedding lookup).
    fn row(&self, r: usize, out: &mut [f32]) -> Result<()> {
        let k = self.k;
        match &self.w {
            WData::F32(w) => out.copy_from_slice(&w[r * k..(r + 1) * k]),
            WData::F16(w) => out
                .iter_mut()
                .zip(&w[r * k..(r + 1) * k])
                .for_each(|(o, h)| *o = h.to_f32()),
            WData::Quant {
                format,
                blocks: Some(b),
                ..
            } => {
                let rb = format.row_bytes(k);
                quant::dequantize(*format, &b[r * rb..(r + 1) * rb], out).map_err(kerr)?;
            }
            WData::Quant {
                packed: Some(p), ..
            } => p.dequantize_row(r, out).map_err(kerr)?,
            WData::Quant { .. } => {
                return Err(LoadError::Config(
                    "a quantized weight holds neither blocks nor a packed copy; report this as a bug"
                        .into(),
                ));
            }
        }
        Ok(())
    }

    /// Bytes of weights held (the packed copy and/or the GGUF blocks).
    fn weight_bytes(&self) -> usize {
        match &self.w {
            WData::F32(v) => 4 * v.len(),
            WData::F16(v) => 2 * v.len(),
            WData::Quant { blocks, packed, .. } => {
                blocks.as_ref().map_or(0, |b| b.len()) + packed.as_deref().map_or(0, PackedQ::bytes)
            }
        }
    }

    /// `y (m, n) = x (m, k) · Wᵀ (+ bias)`; `cx` holds the W·A8 scratch.
    pub(crate) fn forward(
        &self,
        x: &[f32],
        m: usize,
        y: &mut [f32],
        cx: &mut LinScratch,
    ) -> Result<()> {
        self.forward_parts(x, m, &mut [y], cx, &mut false)
    }

    /// [`forward`](Self::forward) with one buffer per stacked layer: `y[i]`
    /// gets layer i's `(m, parts[i])` results. `quantized` says that `xq`
    /// already holds `x` quantized for the quantized GEMM (every format's
    /// GEMM takes the same activation blocks): a stack cut in two by a type
    /// change quantizes its input once. Set it false whenever `x` changes.
    fn forward_parts(
        &self,
        x: &[f32],
        m: usize,
        y: &mut [&mut [f32]],
        cx: &mut LinScratch,
        quantized: &mut bool,
    ) -> Result<()> {
        let (n, k) = (self.n, self.k);
        let x = &x[..m * k];
        if y.len() != self.parts.len() {
            return Err(LoadError::Config(format!(
                "{} output buffers for a stack of {} layers; report this as a bug",
                y.len(),
                self.parts.len()
            )));
        }
        for (y, &w) in y.iter_mut().zip(&self.parts) {
            let all = std::mem::take(y);
            *y = &mut all[..m * w];
        }
        let kernel = if m == 1 {
            &self.decode
        } else {
            let b = prefill_bucket(m);
            let i = PREFILL_BUCKETS.iter().position(|&p| p == b).unwrap_or(0);
            &self.prefill[i]
        };
        if let Some(calls) = &mut cx.calls {
            calls.push(KernelCall {
                dtype: self.dtype,
                m,
                n,
                k,
                kernel: *kernel,
            });
        }
        match (&self.w, kernel) {
            (
                WData::Quant {
                    format,
                    packed: Some(p),
                    ..
                },
                KernelChoice::QGemm(q),
            ) if q.format == *format && p.nr() == q.params.nr => {
                let xq = &mut cx.xq;
                let bytes = qgemm::act_bytes(m, k);
                if !*quantized {
                    if xq.len() < bytes {
                        xq.resize(bytes, 0);
                    }
                    qgemm::quantize_activations_on(x, m, k, &mut xq[..bytes], q.threads)
                        .map_err(kerr)?;
                    *quantized = true;
                }
                // Each stacked layer's results straight into its buffer.
                q.run_prequantized_parts(p, &xq[..bytes], m, y)
                    .map_err(kerr)?;
                if let Some(b) = &self.bias {
                    let mut off = 0;
                    for (y, &w) in y.iter_mut().zip(&self.parts) {
                        for i in 0..m {
                            eltwise::add_from(&mut y[i * w..(i + 1) * w], &b[off..off + w])
                                .map_err(kerr)?;
                        }
                        off += w;
                    }
                }
                Ok(())
            }
            _ => match y {
                [y] => self.run_whole(kernel, x, m, y, &mut cx.xq, quantized),
                _ => {
                    // The other kernels write one (m, n) matrix: into
                    // scratch, then each layer's columns out of it.
                    let mut all = std::mem::take(&mut cx.stacked);
                    resize(&mut all, m * n);
                    let r = self.run_whole(kernel, x, m, &mut all[..m * n], &mut cx.xq, quantized);
                    let mut off = 0;
                    for (y, &w) in y.iter_mut().zip(&self.parts) {
                        for i in 0..m {
                            y[i * w..(i + 1) * w]
                                .copy_from_slice(&all[i * n + off..i * n + off + w]);
                        }
                        off += w;
                    }
                    cx.stacked = all;
                    r
                }
            },
        }
    }

    /// `y (m, n)` by a kernel other than the packed quantized GEMM.
    fn run_whole(
        &self,
        kernel: &KernelChoice,
        x: &[f32],
        m: usize,
        y: &mut [f32],
        xq: &mut Vec<u8>,
        quantized: &mut bool,
    ) -> Result<()> {
        let (n, k) = (self.n, self.k);
        let bias = self.bias.as_deref();
        match (&self.w, kernel) {
            (WData::F32(w), KernelChoice::Gemv(c)) if m == 1 => {
                gemv_f32(w, x, bias, y, GemvShape { n, k }, false, c).map_err(kerr)
            }
            (WData::F16(w), KernelChoice::Gemv(c)) if m == 1 => {
                gemv_f16_f32(w, x, bias, y, GemvShape { n, k }, false, c).map_err(kerr)
            }
            (WData::F32(w), KernelChoice::Gemm(c)) => {
                gemm_f32(x, w, bias, y, GemmShape::new(m, n, k), false, c).map_err(kerr)
            }
            (WData::F16(w), KernelChoice::Gemm(c)) => {
                gemm_f16w_f32(x, w, bias, y, GemmShape::new(m, n, k), false, c).map_err(kerr)
            }
            (
                WData::Quant {
                    format,
                    blocks: Some(w),
                    ..
                },
                KernelChoice::QGemv(q),
            ) if q.format == *format => {
                *quantized = false;
                qgemv_rows(q, w, x, k, n, y, bias, xq)
            }
            (_, k) => Err(LoadError::Config(format!(
                "the plan gave {} to a weight it cannot run; report this as a bug",
                k.variant()
            ))),
        }
    }
}

/// One linear-layer call as run: the weight's dtype and shape, the rows
/// multiplied, and the kernel that ran.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelCall {
    pub dtype: GgmlType,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub kernel: KernelChoice,
}

impl KernelCall {
    /// The plan problem this call was planned as: the GEMV at one row, else
    /// the GEMM of the row count's prefill bucket.
    pub fn problem(&self) -> tiletune_tables::Problem {
        let p = if self.m == 1 {
            tiletune_tables::Problem::new("gemv", self.dtype.key(), [("n", self.n), ("k", self.k)])
        } else {
            tiletune_tables::Problem::new(
                "gemm",
                self.dtype.key(),
                [("m", prefill_bucket(self.m)), ("n", self.n), ("k", self.k)],
            )
        };
        p.expect("a loaded weight's dtype and shape make a valid problem key")
    }
}

/// A linear layer's per-call scratch: the quantized activations of W·A8,
/// and the call record when one is being kept.
#[derive(Clone, Debug, Default)]
pub(crate) struct LinScratch {
    xq: Vec<u8>,
    /// A stack's `(m, n)` results where its kernel writes one matrix.
    stacked: Vec<f32>,
    calls: Option<Vec<KernelCall>>,
}

/// The one layout every kernel of a weight reads, or why there is none
/// (a plan that did not resolve its conflicts: a bug).
fn one_layout(
    decode: &KernelChoice,
    prefill: &[KernelChoice],
) -> std::result::Result<Layout, String> {
    let layout = decode.layout();
    match prefill.iter().find(|p| p.layout() != layout) {
        None => Ok(layout),
        Some(p) => Err(format!(
            "the plan gives this weight two layouts ({layout} for decode, {} for `{}`); report this as a bug",
            p.layout(),
            p.variant()
        )),
    }
}

/// `y = x · Wᵀ (+ bias)` one row at a time with the quantized GEMV; `xq`
/// is scratch for W·A8.
#[allow(clippy::too_many_arguments)]
fn qgemv_rows(
    q: &QGemv,
    w: &[u8],
    x: &[f32],
    k: usize,
    n: usize,
    y: &mut [f32],
    bias: Option<&[f32]>,
    xq: &mut Vec<u8>,
) -> Result<()> {
    let act = activation_format(q.format);
    let xb = act.row_bytes(k);
    if q.mode == QMode::A8 && xq.len() < xb {
        xq.resize(xb, 0);
    }
    for (xr, yr) in x.chunks_exact(k).zip(y.chunks_exact_mut(n)) {
        match q.mode {
            QMode::A32 => q.run(w, xr, yr).map_err(kerr)?,
            QMode::A8 => {
                quant::quantize_into(act, xr, &mut xq[..xb]).map_err(kerr)?;
                q.run_prequantized(w, &xq[..xb], k, yr).map_err(kerr)?;
            }
        }
        if let Some(b) = bias {
            eltwise::add_from(yr, b).map_err(kerr)?;
        }
    }
    Ok(())
}

#[derive(Clone, Debug)]
struct Layer {
    attn_norm: Vec<f32>,
    /// q, k and v, stacked where their types agree: one to three matrices.
    qkv: Vec<Linear>,
    o: Linear,
    qk_norm: Option<[Vec<f32>; 2]>,
    ffn_norm: Vec<f32>,
    /// gate and up, likewise.
    gate_up: Vec<Linear>,
    down: Linear,
}

/// Loads a stack of layers that read the same activations: `(weight,
/// output features, bias)` each, in stacking order, `k` input features;
/// [`crate::problems::stack_runs`] says which run as one matrix.
fn load_stack(
    g: &GgufFile,
    plan: &ExecutionPlan,
    layers: &[(Weight, usize, Option<Weight>)],
    k: usize,
) -> Result<Vec<Linear>> {
    let names: Vec<String> = layers.iter().map(|l| l.0.gguf_name()).collect();
    let mut out = Vec::new();
    for run in crate::problems::stack_runs(g, &names) {
        let parts: Vec<(String, usize)> = run
            .clone()
            .map(|i| (names[i].clone(), layers[i].1))
            .collect();
        let mut lin = Linear::load_stacked(g, plan, &parts, k, true, None)?;
        if layers[run.clone()].iter().any(|l| l.2.is_some()) {
            let mut bias = Vec::with_capacity(lin.n);
            for &(_, n, b) in &layers[run] {
                match b {
                    Some(b) => bias.extend(load_vec(g, b, n)?),
                    None => bias.resize(bias.len() + n, 0.0),
                }
            }
            lin.bias = Some(bias);
        }
        out.push(lin);
    }
    Ok(out)
}

/// Runs a stack's matrices in turn on `x`, each into the next of `y`'s
/// buffers (one per stacked layer).
fn forward_stack(
    stack: &[Linear],
    x: &[f32],
    m: usize,
    y: &mut [&mut [f32]],
    cx: &mut LinScratch,
) -> Result<()> {
    let mut quantized = false;
    let mut rest = y;
    for lin in stack {
        let (now, later) = rest.split_at_mut(lin.parts.len().min(rest.len()));
        lin.forward_parts(x, m, now, cx, &mut quantized)?;
        rest = later;
    }
    Ok(())
}

/// How q and k are rotated. One way today: the kernel crate's RoPE on a
/// cos/sin table with the model's frequency scaling (Llama 3 `rope_freqs`,
/// linear) folded in; a scheme the table cannot hold would be a variant.
#[derive(Clone, Debug)]
enum Rope {
    Kernel(RopeCache, rope::RopeLayout),
    /// Multimodal RoPE (Qwen2-VL): pair `i` turns at `freqs[i]` by the
    /// position component `section[i]` (0 temporal, 1 height, 2 width) of
    /// its row; rotate-half pairing. Text rows have all three equal.
    Multimodal {
        freqs: Vec<f64>,
        section: Vec<u8>,
    },
}

/// What one forward pass runs beyond token ids: rows whose input embedding
/// is given (an image's merged patches, `(first row, rows × hidden)`), and
/// the rows' M-RoPE positions `(t, h, w)` (`None`: text positions that
/// continue the state's).
#[derive(Debug, Clone, Copy, Default)]
pub struct Extra<'a> {
    pub embeds: &'a [(usize, &'a [f32])],
    pub positions: Option<&'a [[u32; 3]]>,
}

/// The KV cache and scratch buffers of one sequence.
#[derive(Clone, Debug)]
pub struct RunState {
    /// Every layer's keys and values; `seq` is this state's one sequence.
    kv: PagedKvCache,
    seq: SeqId,
    pos: usize,
    ctx: usize,
    x: Vec<f32>,
    h: Vec<f32>,
    q: Vec<f32>,
    kk: Vec<f32>,
    vv: Vec<f32>,
    att: Vec<f32>,
    o: Vec<f32>,
    g: Vec<f32>,
    u: Vec<f32>,
    logits: Vec<f32>,
    /// How much of `logits` the last pass wrote (`rows × vocab`).
    logits_len: usize,
    lin: LinScratch,
    attn: AttnScratch,
    /// For each cached position, the RoPE position the next token after
    /// it takes (M-RoPE: an image's tokens advance it by its larger side,
    /// not by their count); empty means "equal to the cache position".
    rope_next: Vec<u32>,
    angles: rope::RowAngles,
}

impl RunState {
    /// The RoPE position of the next token (the cache length unless an
    /// image's M-RoPE positions moved it).
    pub fn rope_pos(&self) -> u32 {
        match self.pos.checked_sub(1).and_then(|i| self.rope_next.get(i)) {
            Some(&p) => p,
            None => self.pos as u32,
        }
    }

    /// Positions held in the cache.
    pub fn len(&self) -> usize {
        self.pos
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.pos == 0
    }

    /// Most positions this state can hold.
    pub fn capacity(&self) -> usize {
        self.ctx
    }

    /// The dtype of the KV cache pages.
    pub fn kv_dtype(&self) -> KvDtype {
        self.kv.dtype()
    }

    /// Tokens per KV cache page.
    pub fn page_size(&self) -> usize {
        self.kv.page_size()
    }

    /// Records from now on which kernel each linear layer call runs
    /// ([`RunState::take_calls`]), the check that `tiletune plan` prints
    /// what runs.
    pub fn record_calls(&mut self) {
        self.lin.calls = Some(Vec::new());
    }

    /// The calls recorded since [`RunState::record_calls`], in order; the
    /// recording goes on.
    pub fn take_calls(&mut self) -> Vec<KernelCall> {
        self.lin
            .calls
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Takes the logits the last forward pass returned (its `rows ×
    /// vocab`), so a caller that keeps them (an array handed to another
    /// language) needs no copy; the next pass allocates its buffer anew.
    pub fn take_logits(&mut self) -> Vec<f32> {
        let mut v = std::mem::take(&mut self.logits);
        v.truncate(std::mem::take(&mut self.logits_len));
        v
    }

    /// The logits the last forward pass returned, until the state is
    /// truncated or they are taken (empty then).
    pub fn last_logits(&self) -> &[f32] {
        &self.logits[..self.logits_len]
    }

    /// Forgets every cached position (the buffers are kept).
    pub fn reset(&mut self) {
        self.truncate(0);
    }

    /// Drops cached positions from `len` on (a chat rewinding a turn); the
    /// pages past them go back to the cache's pool.
    pub fn truncate(&mut self, len: usize) {
        self.pos = self.pos.min(len);
        // They were the logits of a position that may be gone now.
        self.logits_len = 0;
        self.rope_next.truncate(self.pos);
        self.sync_cache();
    }

    /// Cuts every layer of the cache back to `pos`: after a forward pass
    /// that failed halfway, some layers hold tokens that `pos` does not count.
    fn sync_cache(&mut self) {
        // The only error is an unknown sequence, and `seq` is this cache's own.
        self.kv
            .truncate(self.seq, self.pos)
            .expect("the state's sequence belongs to its cache");
    }
}

/// A stop flag nobody raises, for passes that cannot be stopped.
pub(super) static NEVER: AtomicBool = AtomicBool::new(false);

/// The decoder on the tuned kernels.
#[derive(Clone, Debug)]
pub struct FastModel {
    cfg: ModelConfig,
    embed: Linear, // (vocab, d); also the LM head when tied
    output: Option<Linear>,
    layers: Vec<Layer>,
    norm: Vec<f32>,
    rope: Rope,
    max_ctx: usize,
    kv_dtype: KvDtype,
    /// The machine's caches with `cores` = the plan's threads: what the
    /// attention defaults and the page size are derived from.
    attn_caps: CpuCaps,
}

fn load_vec(g: &GgufFile, w: Weight, numel: usize) -> Result<Vec<f32>> {
    WeightSource::load(g, w, numel)
}

fn resize(v: &mut Vec<f32>, len: usize) {
    if v.len() < len {
        v.resize(len, 0.0);
    }
}

impl FastModel {
    /// Builds the model from a GGUF file with the kernels of `plan`; the
    /// context (KV cache capacity) is at most `max_ctx` positions.
    pub fn new(
        cfg: &ModelConfig,
        g: &GgufFile,
        plan: &ExecutionPlan,
        max_ctx: usize,
    ) -> Result<Self> {
        let (d, f, hd) = (cfg.hidden, cfg.intermediate, cfg.head_dim);
        let (qd, kvd) = (cfg.n_heads * hd, cfg.n_kv_heads * hd);
        let max_ctx = max_ctx.min(cfg.max_pos).max(1);
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for l in 0..cfg.n_layers {
            let bias = |b: Weight| cfg.qkv_bias.then_some(b);
            let qkv = load_stack(
                g,
                plan,
                &[
                    (Weight::Q(l), qd, bias(Weight::QBias(l))),
                    (Weight::K(l), kvd, bias(Weight::KBias(l))),
                    (Weight::V(l), kvd, bias(Weight::VBias(l))),
                ],
                d,
            )?;
            let qk_norm = if cfg.qk_norm {
                Some([
                    load_vec(g, Weight::QNorm(l), hd)?,
                    load_vec(g, Weight::KNorm(l), hd)?,
                ])
            } else {
                None
            };
            layers.push(Layer {
                attn_norm: load_vec(g, Weight::AttnNorm(l), d)?,
                qkv,
                o: Linear::load(g, plan, Weight::O(l), d, qd, true)?,
                qk_norm,
                ffn_norm: load_vec(g, Weight::FfnNorm(l), d)?,
                gate_up: load_stack(
                    g,
                    plan,
                    &[(Weight::Gate(l), f, None), (Weight::Up(l), f, None)],
                    d,
                )?,
                down: Linear::load(g, plan, Weight::Down(l), d, f, true)?,
            });
        }
        let output = if !cfg.tied_embeddings && g.has(Weight::Output) {
            Some(Linear::load(g, plan, Weight::Output, cfg.vocab, d, true)?)
        } else {
            None
        };
        let embed = Linear::load(
            g,
            plan,
            Weight::TokenEmbedding,
            cfg.vocab,
            d,
            output.is_none(),
        )?;
        let layout = g.rope_layout(cfg);
        let rope = {
            let theta = cfg.rope_theta as f64;
            let cache = match cfg.rope_freq_divisors()? {
                None => RopeCache::new(theta, hd, max_ctx),
                Some(d) => RopeCache::with_freq_factors(theta, hd, max_ctx, &d),
            }
            .map_err(kerr)?;
            let l = match layout {
                RopeLayout::Halves => rope::RopeLayout::RotateHalf,
                RopeLayout::Interleaved => rope::RopeLayout::Interleaved,
            };
            match cfg.mrope_sections {
                None => Rope::Kernel(cache, l),
                Some(sec) => {
                    let divs = cfg.rope_freq_divisors()?;
                    let freqs = (0..hd / 2)
                        .map(|i| {
                            let f = theta.powf(-((2 * i) as f64) / hd as f64);
                            divs.as_ref().map_or(f, |d| f / d[i] as f64)
                        })
                        .collect();
                    let section = (0..hd / 2)
                        .map(|i| u8::from(i >= sec[0]) + u8::from(i >= sec[0] + sec[1]))
                        .collect();
                    Rope::Multimodal { freqs, section }
                }
            }
        };
        Ok(FastModel {
            cfg: cfg.clone(),
            embed,
            output,
            layers,
            norm: load_vec(g, Weight::OutputNorm, d)?,
            rope,
            max_ctx,
            kv_dtype: KvDtype::F32,
            attn_caps: CpuCaps {
                cores: plan.threads.max(1),
                ..plan.caps
            },
        })
    }

    /// The same model with KV cache pages of `dtype` in the states it makes
    /// from now on. Q8_0 needs `head_dim` to be a multiple of 32.
    pub fn with_kv_dtype(mut self, dtype: KvDtype) -> Result<Self> {
        if dtype == KvDtype::Q8_0 && !self.cfg.head_dim.is_multiple_of(32) {
            return Err(LoadError::Config(format!(
                "a q8_0 KV cache needs head_dim to be a multiple of 32, this model has {}; use --kv-type f16 or f32",
                self.cfg.head_dim
            )));
        }
        self.kv_dtype = dtype;
        Ok(self)
    }

    /// The dtype of the KV cache pages of new states.
    pub fn kv_dtype(&self) -> KvDtype {
        self.kv_dtype
    }

    /// Bytes of weight matrices held (packed copies and GGUF blocks; norms
    /// and biases are not counted).
    pub fn weight_bytes(&self) -> usize {
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                l.qkv
                    .iter()
                    .chain(&l.gate_up)
                    .chain([&l.o, &l.down])
                    .map(Linear::weight_bytes)
                    .sum::<usize>()
            })
            .sum();
        layers + self.embed.weight_bytes() + self.output.as_ref().map_or(0, Linear::weight_bytes)
    }

    /// The configuration it was built from.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// Most positions a [`RunState`] of this model holds.
    pub fn max_ctx(&self) -> usize {
        self.max_ctx
    }

    /// A state with a paged KV cache for [`Self::max_ctx`] positions, in
    /// pages of the kernel's default size for this CPU and page dtype.
    pub fn new_state(&self) -> RunState {
        let (nkv, hd) = (self.cfg.n_kv_heads, self.cfg.head_dim);
        let ps = default_page_size(hd, self.kv_dtype, &self.attn_caps);
        // Every dimension is at least 1 and Q8_0 was checked against
        // head_dim in `with_kv_dtype`, the cache's only other error.
        let mut kv = PagedKvCache::new(
            self.layers.len().max(1),
            nkv,
            hd,
            ps,
            self.kv_dtype,
            self.max_ctx.div_ceil(ps),
        )
        .expect("the model's shape was checked at load");
        let seq = kv.alloc_sequence();
        RunState {
            kv,
            seq,
            pos: 0,
            ctx: self.max_ctx,
            x: Vec::new(),
            h: Vec::new(),
            q: Vec::new(),
            kk: Vec::new(),
            vv: Vec::new(),
            att: Vec::new(),
            o: Vec::new(),
            g: Vec::new(),
            u: Vec::new(),
            logits: Vec::new(),
            logits_len: 0,
            lin: LinScratch::default(),
            attn: AttnScratch::new(),
            rope_next: Vec::new(),
            angles: rope::RowAngles::new(),
        }
    }

    /// Runs `tokens` after the positions in `st`; returns the logits of the
    /// last token (`vocab`), or of every token (`n × vocab`) with `all`.
    pub fn forward<'s>(
        &self,
        tokens: &[u32],
        st: &'s mut RunState,
        all: bool,
    ) -> Result<&'s [f32]> {
        match self.forward_unless(tokens, st, all, &NEVER)? {
            Some(logits) => Ok(logits),
            None => unreachable!("the pass stops only when its flag is raised"),
        }
    }

    /// [`FastModel::forward`], but checks `stop` before each layer and
    /// returns `None` as soon as it is raised, with `st` as it was: a Ctrl-C
    /// then ends a long prefill within one layer's time.
    pub fn forward_unless<'s>(
        &self,
        tokens: &[u32],
        st: &'s mut RunState,
        all: bool,
        stop: &AtomicBool,
    ) -> Result<Option<&'s [f32]>> {
        self.forward_extra(tokens, Extra::default(), st, all, stop)
    }

    /// [`FastModel::forward_unless`] with some rows' embeddings given and
    /// M-RoPE positions (a multimodal prompt); the ids of embedded rows are
    /// not looked up but must still be in the vocabulary.
    pub fn forward_extra<'s>(
        &self,
        tokens: &[u32],
        extra: Extra<'_>,
        st: &'s mut RunState,
        all: bool,
        stop: &AtomicBool,
    ) -> Result<Option<&'s [f32]>> {
        // The pass runs on a worker of the plan's pool: each kernel's
        // parallel section then starts from inside the pool (its tasks go to
        // workers that are still spinning from the previous kernel) instead
        // of injecting from outside and sleeping on a latch, which costs two
        // thread wake-ups per call — hundreds per token in decode.
        // The pool's other workers are kept awake for the pass (see
        // `pool::install_awake`): a kernel's cost then does not depend on
        // how long the pool sat idle before it.
        let threads = self.attn_caps.cores;
        tiletune_kernels::pool::install_awake(threads, || {
            self.forward_in_pool(tokens, extra, st, all, stop)
        })
    }

    fn forward_in_pool<'s>(
        &self,
        tokens: &[u32],
        extra: Extra<'_>,
        st: &'s mut RunState,
        all: bool,
        stop: &AtomicBool,
    ) -> Result<Option<&'s [f32]>> {
        let cfg = &self.cfg;
        let (d, f, vocab, eps) = (cfg.hidden, cfg.intermediate, cfg.vocab, cfg.rms_eps);
        let (nh, nkv, hd) = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim);
        let (qd, kvd) = (nh * hd, nkv * hd);
        let n = tokens.len();
        let start = st.pos;
        if n == 0 {
            return Err(LoadError::Config("forward needs at least one token".into()));
        }
        if start + n > st.ctx {
            return Err(LoadError::Config(format!(
                "{} positions exceed the context of {}; start a new sequence or raise the context",
                start + n,
                st.ctx
            )));
        }
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= vocab) {
            return Err(LoadError::Tokenizer(format!(
                "token id {t} is outside the {vocab}-token vocabulary"
            )));
        }
        resize(&mut st.x, n * d);
        resize(&mut st.h, n * d);
        resize(&mut st.q, n * qd);
        resize(&mut st.kk, n * kvd);
        resize(&mut st.vv, n * kvd);
        resize(&mut st.att, n * qd);
        resize(&mut st.o, n * d);
        resize(&mut st.g, n * f);
        resize(&mut st.u, n * f);
        for (i, &t) in tokens.iter().enumerate() {
            self.embed.row(t as usize, &mut st.x[i * d..(i + 1) * d])?;
        }
        for &(first, e) in extra.embeds {
            let rows = e.len() / d;
            if !e.len().is_multiple_of(d) || first + rows > n {
                return Err(LoadError::Config(format!(
                    "embeddings of {} values at row {first} do not fit {n} rows of width {d}; the vision tower's output width must be the language model's",
                    e.len()
                )));
            }
            st.x[first * d..(first + rows) * d].copy_from_slice(e);
        }
        let rope_start = st.rope_pos();
        if let Some(p) = extra.positions
            && p.len() != n
        {
            return Err(LoadError::Config(format!(
                "{} M-RoPE positions for {n} tokens; give one per token",
                p.len()
            )));
        }
        if let Rope::Multimodal { freqs, section } = &self.rope {
            let pos = |r: usize, s: u8| -> f64 {
                match extra.positions {
                    Some(p) => p[r][s as usize] as f64,
                    None => (rope_start as usize + r) as f64,
                }
            };
            st.angles.fill(n, freqs, section, pos).map_err(kerr)?;
        } else if extra.positions.is_some() {
            return Err(LoadError::Config(
                "M-RoPE positions were given to a model without M-RoPE; images need a Qwen2-VL language model".into(),
            ));
        }
        st.sync_cache();
        let attn_isa = Isa::best_of(&attention::ISAS);
        let attn_query = AttnQuery::new(nh, n, start, hd);
        let attn_params = AttnParams::default_for(
            &AttnShape {
                n_q_heads: nh,
                n_kv_heads: nkv,
                head_dim: hd,
                q_rows: n,
                kv_len: start + n,
            },
            &self.attn_caps,
        );
        for (l, layer) in self.layers.iter().enumerate() {
            if stop.load(Ordering::Relaxed) {
                // The layers before this one hold keys for positions `pos`
                // does not count; cut them back now.
                st.sync_cache();
                return Ok(None);
            }
            let x = &mut st.x[..n * d];
            let h = &mut st.h[..n * d];
            Norm::rms(&layer.attn_norm, eps)
                .forward(x, h, n)
                .map_err(kerr)?;
            forward_stack(
                &layer.qkv,
                h,
                n,
                &mut [&mut st.q, &mut st.kk, &mut st.vv],
                &mut st.lin,
            )?;
            let (q, k) = (&mut st.q[..n * qd], &mut st.kk[..n * kvd]);
            if let Some([qn, kn]) = &layer.qk_norm {
                Norm::rms(qn, eps)
                    .forward_inplace(q, n * nh)
                    .map_err(kerr)?;
                Norm::rms(kn, eps)
                    .forward_inplace(k, n * nkv)
                    .map_err(kerr)?;
            }
            let sq = RopeShape {
                rows: n,
                n_heads: nh,
                head_dim: hd,
            };
            let sk = RopeShape { n_heads: nkv, ..sq };
            match &self.rope {
                Rope::Kernel(cache, lay) => {
                    let pos = Positions::Offset(start);
                    rope::rope(q, sq, pos, cache, *lay).map_err(kerr)?;
                    rope::rope(k, sk, pos, cache, *lay).map_err(kerr)?;
                }
                Rope::Multimodal { .. } => {
                    let lay = rope::RopeLayout::RotateHalf;
                    rope::rope_rows(q, sq, &st.angles, lay).map_err(kerr)?;
                    rope::rope_rows(k, sk, &st.angles, lay).map_err(kerr)?;
                }
            }
            st.kv
                .append_batch(st.seq, l, k, &st.vv[..n * kvd])
                .map_err(kerr)?;
            let att = &mut st.att[..n * qd];
            attention::paged_attention_scratch(
                &st.kv,
                st.seq,
                l,
                &attn_query,
                q,
                att,
                None,
                attn_isa,
                &attn_params,
                &mut st.attn,
            )
            .map_err(kerr)?;
            layer.o.forward(att, n, &mut st.o, &mut st.lin)?;
            let x = &mut st.x[..n * d];
            eltwise::add_from(x, &st.o[..n * d]).map_err(kerr)?;
            let h = &mut st.h[..n * d];
            Norm::rms(&layer.ffn_norm, eps)
                .forward(x, h, n)
                .map_err(kerr)?;
            forward_stack(
                &layer.gate_up,
                h,
                n,
                &mut [&mut st.g, &mut st.u],
                &mut st.lin,
            )?;
            eltwise::swiglu(&mut st.g[..n * f], &st.u[..n * f]).map_err(kerr)?;
            layer
                .down
                .forward(&st.g[..n * f], n, &mut st.o, &mut st.lin)?;
            eltwise::add_from(&mut st.x[..n * d], &st.o[..n * d]).map_err(kerr)?;
        }
        if extra.positions.is_some() || !st.rope_next.is_empty() {
            // Positions diverge from the cache's once an image is in it.
            st.rope_next.resize(start, 0);
            for r in 0..start {
                if st.rope_next[r] == 0 {
                    st.rope_next[r] = r as u32 + 1;
                }
            }
            let mut next = rope_start;
            for r in 0..n {
                next = match extra.positions {
                    Some(p) => next.max(p[r].iter().copied().max().unwrap_or(0) + 1),
                    None => next + 1,
                };
                st.rope_next.push(next);
            }
        }
        st.pos = start + n;
        let rows = if all { n } else { 1 };
        let xs = &st.x[(n - rows) * d..n * d];
        let h = &mut st.h[..rows * d];
        Norm::rms(&self.norm, eps)
            .forward(xs, h, rows)
            .map_err(kerr)?;
        resize(&mut st.logits, rows * vocab);
        let head = self.output.as_ref().unwrap_or(&self.embed);
        head.forward(h, rows, &mut st.logits, &mut st.lin)?;
        st.logits_len = rows * vocab;
        Ok(Some(&st.logits[..rows * vocab]))
    }
}
