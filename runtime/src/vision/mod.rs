//! The Qwen2.5-VL vision tower on the kernels: images in, language-model
//! embeddings out.
//!
//! Read from a GGUF file in llama.cpp's `mmproj` form (`clip.*` keys,
//! `v.*` and `mm.*` tensors): llama.cpp's converter writes it beside the
//! language model, and `tiletune`'s own conversion of a Hugging Face folder
//! puts the same keys and tensors into the one image it writes.
//!
//! The forward pass is transformers' `Qwen2_5_VisionTransformerPretrainedModel`:
//! the Conv3d patch embedding as a GEMM over the processor's flattened
//! patches, the rows reordered window by window (windows of
//! `window_size / patch / merge` merged patches a side), 2-D RoPE (the first
//! quarter of each head's pairs follow the patch's row, the second its
//! column), `depth` blocks of RMSNorm → attention → RMSNorm → SwiGLU MLP, the
//! blocks at `full_attn` attending over the whole image and the others within
//! their window, then the merger (RMSNorm, 2×2 patches concatenated, Linear →
//! GELU → Linear to the language model's width) and the windows' order
//! undone. Every matrix product is the execution plan's GEMM for the
//! weight's problem ([`tower_problems`]); norms, SwiGLU,
//! GELU, RoPE and the residual adds are the kernel crate's in-place ops, and
//! attention is its segment kernel
//! ([`tiletune_kernels::attention::segment_attention`]).

pub mod image;
pub mod prompt;

use crate::gguf::GgmlType;
use crate::gguf::GgufFile;
use crate::models::{LinScratch, Linear};
use crate::plan::ExecutionPlan;
use crate::{LoadError, Result};
use image::{Pixels, Preprocess};
use tiletune_kernels::attention::{self, AttnParams, SegScratch, SegShape, segment_attention};
use tiletune_kernels::eltwise::{self, EltOp};
use tiletune_kernels::norm::Norm;
use tiletune_kernels::rope::{self, RopeShape, RowAngles};
use tiletune_kernels::{Isa, KernelError};
use tiletune_tables::Problem;

/// The rows every vision GEMM of the blocks and patch embedding is planned
/// for: a 448×448 image's 1024 patches. The merger's run at a quarter.
pub const VISION_ROWS: usize = 1024;

/// The `clip.projector_type` of Qwen2.5-VL's merger (llama.cpp's name).
pub const PROJECTOR_QWEN25VL: &str = "qwen2.5vl_merger";

fn kerr(e: KernelError) -> LoadError {
    LoadError::Config(format!(
        "vision kernel call failed: {e}; the tower's weights do not fit its config, report this as a bug"
    ))
}

/// The GEMM problems of a vision tower held in `g` (an mmproj file or a
/// converted folder's image): each block's and the merger's weight at the
/// rows it runs for a 448×448 image ([`VISION_ROWS`]
/// patches, a quarter of them after the merge), and the patch embedding,
/// which the runtime assembles as f32. Empty when `g` has no tower. They
/// join the language model's problems ([`crate::problems::kernel_problems`])
/// in the load-time plan and in `tune --model`.
pub fn tower_problems(g: &GgufFile) -> Result<Vec<Problem>> {
    if !has_vision(g) {
        return Ok(Vec::new());
    }
    let cfg = VisionConfig::from_gguf(g)?;
    let unit = cfg.pre.merge * cfg.pre.merge;
    let key = |e: tiletune_tables::TableError| LoadError::BadTensor {
        path: g.path().to_path_buf(),
        tensor: String::new(),
        what: e.to_string(),
    };
    let mut out: Vec<Problem> = Vec::new();
    let mut push = |p: Problem| {
        if !out.contains(&p) {
            out.push(p);
        }
    };
    push(
        Problem::new(
            "gemm",
            GgmlType::F32.key(),
            [
                ("m", VISION_ROWS),
                ("n", cfg.hidden),
                ("k", cfg.patch_len()),
            ],
        )
        .map_err(key)?,
    );
    for t in g.tensors() {
        if !(t.name.starts_with("v.blk.") || t.name.starts_with("mm.")) || t.dims.len() != 2 {
            continue;
        }
        let m = if t.name.starts_with("mm.") {
            VISION_ROWS / unit
        } else {
            VISION_ROWS
        };
        let (n, k) = (t.dims[1] as usize, t.dims[0] as usize);
        push(Problem::new("gemm", t.ggml_type.key(), [("m", m), ("n", n), ("k", k)]).map_err(key)?);
    }
    Ok(out)
}

/// The vision tower's hyper-parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct VisionConfig {
    pub hidden: usize,
    pub intermediate: usize,
    pub depth: usize,
    pub n_heads: usize,
    /// The language model's width, the merger's output.
    pub out_hidden: usize,
    /// Window side in pixels (112: 4×4 merged patches).
    pub window: usize,
    /// The blocks that attend over the whole image.
    pub full_attn: Vec<usize>,
    pub eps: f32,
    pub rope_theta: f64,
    pub pre: Preprocess,
}

/// The GGUF keys of a vision tower (llama.cpp's `clip.*`).
pub mod keys {
    pub const HAS_VISION: &str = "clip.has_vision_encoder";
    pub const PROJECTOR: &str = "clip.projector_type";
    pub const VISION_PROJECTOR: &str = "clip.vision.projector_type";
    pub const PROJECTION_DIM: &str = "clip.vision.projection_dim";
    pub const IMAGE_SIZE: &str = "clip.vision.image_size";
    pub const PATCH_SIZE: &str = "clip.vision.patch_size";
    pub const EMBEDDING_LENGTH: &str = "clip.vision.embedding_length";
    pub const FEED_FORWARD_LENGTH: &str = "clip.vision.feed_forward_length";
    pub const BLOCK_COUNT: &str = "clip.vision.block_count";
    pub const HEAD_COUNT: &str = "clip.vision.attention.head_count";
    pub const EPS: &str = "clip.vision.attention.layer_norm_epsilon";
    pub const IMAGE_MEAN: &str = "clip.vision.image_mean";
    pub const IMAGE_STD: &str = "clip.vision.image_std";
    pub const N_WA_PATTERN: &str = "clip.vision.n_wa_pattern";
    pub const WINDOW_SIZE: &str = "clip.vision.window_size";
    pub const MIN_PIXELS: &str = "clip.vision.image_min_pixels";
    pub const MAX_PIXELS: &str = "clip.vision.image_max_pixels";
    pub const USE_SILU: &str = "clip.use_silu";
}

/// True when `g` holds a vision tower (an mmproj file, or a converted
/// folder's image).
pub fn has_vision(g: &GgufFile) -> bool {
    g.get(keys::HAS_VISION).is_some() && g.tensor_info("v.patch_embd.weight").is_some()
}

impl VisionConfig {
    /// From the `clip.*` keys. Qwen2.5-VL's fixed parts (14-pixel patches
    /// over 2 frames, 2×2 merge, RoPE base 10000) are llama.cpp's too.
    pub fn from_gguf(g: &GgufFile) -> Result<Self> {
        let proj = g
            .get_str(keys::PROJECTOR)
            .or_else(|_| g.get_str(keys::VISION_PROJECTOR))?;
        if proj != PROJECTOR_QWEN25VL {
            return Err(LoadError::Config(format!(
                "{}: vision projector `{proj}` is not supported; tiletune runs Qwen2.5-VL's `{PROJECTOR_QWEN25VL}`",
                g.path().display()
            )));
        }
        let u = |k: &str| -> Result<usize> { Ok(g.get_u64(k)? as usize) };
        let opt_u = |k: &str| -> Result<Option<usize>> {
            match g.get(k) {
                None => Ok(None),
                Some(_) => u(k).map(Some),
            }
        };
        let depth = u(keys::BLOCK_COUNT)?;
        let wa = u(keys::N_WA_PATTERN)?;
        // llama.cpp's rule: block `i` attends fully when `(i + 1) % n_wa == 0`.
        let full_attn = (0..depth)
            .filter(|i| wa == 0 || (i + 1) % wa == 0)
            .collect();
        let triple = |k: &str| -> Result<[f32; 3]> {
            let a = g.get_array(k)?;
            match a {
                crate::gguf::Array::F32(v) if v.len() == 3 => Ok([v[0], v[1], v[2]]),
                _ => Err(LoadError::Config(format!(
                    "{}: {k} must hold three f32 values (R, G, B)",
                    g.path().display()
                ))),
            }
        };
        let patch = u(keys::PATCH_SIZE)?;
        let cfg = VisionConfig {
            hidden: u(keys::EMBEDDING_LENGTH)?,
            intermediate: u(keys::FEED_FORWARD_LENGTH)?,
            depth,
            n_heads: u(keys::HEAD_COUNT)?,
            out_hidden: u(keys::PROJECTION_DIM)?,
            window: opt_u(keys::WINDOW_SIZE)?.unwrap_or(112),
            full_attn,
            eps: match g.get(keys::EPS) {
                None => 1e-6,
                Some(_) => g.get_f32(keys::EPS)?,
            },
            rope_theta: 10_000.0,
            pre: Preprocess {
                patch,
                temporal_patch: 2,
                merge: 2,
                min_pixels: opt_u(keys::MIN_PIXELS)?.unwrap_or(56 * 56),
                max_pixels: opt_u(keys::MAX_PIXELS)?.unwrap_or(28 * 28 * 1280),
                mean: triple(keys::IMAGE_MEAN)?,
                std: triple(keys::IMAGE_STD)?,
            },
        };
        cfg.check()?;
        Ok(cfg)
    }

    fn check(&self) -> Result<()> {
        let bad = |what: String| Err(LoadError::Config(format!("vision tower: {what}")));
        if self.hidden == 0 || self.n_heads == 0 || !self.hidden.is_multiple_of(self.n_heads) {
            return bad(format!(
                "width {} does not split into {} heads",
                self.hidden, self.n_heads
            ));
        }
        if !self.head_dim().is_multiple_of(4) {
            return bad(format!(
                "head dim {} is not a multiple of 4, which 2-D RoPE needs",
                self.head_dim()
            ));
        }
        let unit = self.pre.patch * self.pre.merge;
        if self.pre.patch == 0 || self.window < unit || !self.window.is_multiple_of(unit) {
            return bad(format!(
                "window {} is not a multiple of patch × merge = {unit}",
                self.window
            ));
        }
        if self.pre.std.contains(&0.0) || self.pre.min_pixels > self.pre.max_pixels {
            return bad("image std has a zero, or min pixels exceed max pixels".into());
        }
        Ok(())
    }

    pub fn head_dim(&self) -> usize {
        self.hidden / self.n_heads
    }

    /// Values per flattened patch: 3 channels × temporal patch × patch².
    pub fn patch_len(&self) -> usize {
        3 * self.pre.temporal_patch * self.pre.patch * self.pre.patch
    }
}

struct Block {
    ln1: Vec<f32>,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    ln2: Vec<f32>,
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// The vision tower, weights held as the plan's kernels read them.
pub struct VisionModel {
    cfg: VisionConfig,
    patch: Linear,
    blocks: Vec<Block>,
    post_ln: Vec<f32>,
    mm0: Linear,
    mm2: Linear,
    threads: usize,
}

/// What one image's encoding produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoded {
    /// `(t, h, w)` in patches.
    pub grid: [usize; 3],
    /// `tokens × out_hidden` embeddings, in the image's row-major merged order.
    pub embeddings: Vec<f32>,
    /// Where the time went.
    pub profile: EncodeProfile,
}

/// The tower's wall time split by kind of work: the GEMMs (patch
/// embedding, every block's projections and MLP, the merger), attention
/// (the segment kernel) and the rest (norms, RoPE, SwiGLU, GELU, residual
/// adds, the window reorder). Two clock reads per kernel call, a few
/// hundred per image: nothing next to the work they time.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EncodeProfile {
    pub gemm: std::time::Duration,
    pub attention: std::time::Duration,
    pub total: std::time::Duration,
}

impl EncodeProfile {
    /// `total - gemm - attention`.
    pub fn rest(&self) -> std::time::Duration {
        self.total.saturating_sub(self.gemm + self.attention)
    }
}

/// Runs `f`, adding its wall time to `acc`.
fn timed<T>(acc: &mut std::time::Duration, f: impl FnOnce() -> T) -> T {
    let t0 = std::time::Instant::now();
    let r = f();
    *acc += t0.elapsed();
    r
}

impl Encoded {
    pub fn tokens(&self, width: usize) -> usize {
        self.embeddings.len() / width
    }
}

fn f32_vec(g: &GgufFile, name: &str, numel: usize) -> Result<Vec<f32>> {
    let (info, data) = g.tensor_data(name)?;
    let v = crate::models::dequant::dequantize(info.ggml_type, data).ok_or_else(|| {
        LoadError::BadTensor {
            path: g.path().to_path_buf(),
            tensor: name.into(),
            what: format!("type {} is not readable here", info.ggml_type),
        }
    })?;
    if v.len() != numel {
        return Err(LoadError::BadTensor {
            path: g.path().to_path_buf(),
            tensor: name.into(),
            what: format!(
                "{} elements, the vision config implies {numel}; the file does not match its config",
                v.len()
            ),
        });
    }
    Ok(v)
}

/// The patch embedding `(hidden, 3·2·p·p)` from llama.cpp's two Conv2D
/// slices `v.patch_embd.weight` (frame 0) and `.weight.1` (frame 1), each
/// `(hidden, 3, p, p)`: column `c·2p² + t·p² + y·p + x`, the processor's
/// order.
fn patch_weight(g: &GgufFile, cfg: &VisionConfig) -> Result<Vec<f32>> {
    let (e, p) = (cfg.hidden, cfg.pre.patch);
    let plane = p * p;
    let f0 = f32_vec(g, "v.patch_embd.weight", e * 3 * plane)?;
    let f1 = f32_vec(g, "v.patch_embd.weight.1", e * 3 * plane)?;
    let k = cfg.patch_len();
    let mut w = vec![0.0; e * k];
    for o in 0..e {
        for c in 0..3 {
            for (t, f) in [&f0, &f1].into_iter().enumerate() {
                let src = &f[(o * 3 + c) * plane..][..plane];
                w[o * k + (c * 2 + t) * plane..][..plane].copy_from_slice(src);
            }
        }
    }
    Ok(w)
}

impl VisionModel {
    /// Loads the tower from `g` with the kernels `plan` chose for its
    /// problems.
    pub fn new(g: &GgufFile, plan: &ExecutionPlan) -> Result<Self> {
        let cfg = VisionConfig::from_gguf(g)?;
        let (e, f) = (cfg.hidden, cfg.intermediate);
        let merged = e * cfg.pre.merge * cfg.pre.merge;
        let rows = VISION_ROWS;
        let lin = |name: &str, n: usize, k: usize, m: usize| -> Result<Linear> {
            let mut l =
                Linear::load_named(g, plan, &format!("{name}.weight"), n, k, true, Some(m))?;
            l.bias = Some(f32_vec(g, &format!("{name}.bias"), n)?);
            Ok(l)
        };
        let mut blocks = Vec::with_capacity(cfg.depth);
        for i in 0..cfg.depth {
            let b = |s: &str| format!("v.blk.{i}.{s}");
            blocks.push(Block {
                ln1: f32_vec(g, &b("ln1.weight"), e)?,
                q: lin(&b("attn_q"), e, e, rows)?,
                k: lin(&b("attn_k"), e, e, rows)?,
                v: lin(&b("attn_v"), e, e, rows)?,
                o: lin(&b("attn_out"), e, e, rows)?,
                ln2: f32_vec(g, &b("ln2.weight"), e)?,
                gate: lin(&b("ffn_gate"), f, e, rows)?,
                up: lin(&b("ffn_up"), f, e, rows)?,
                down: lin(&b("ffn_down"), e, f, rows)?,
            });
        }
        let patch = Linear::dense_f32(patch_weight(g, &cfg)?, e, cfg.patch_len(), plan, rows);
        let merged_rows = rows / (cfg.pre.merge * cfg.pre.merge);
        Ok(VisionModel {
            post_ln: f32_vec(g, "v.post_ln.weight", e)?,
            mm0: lin("mm.0", merged, merged, merged_rows)?,
            mm2: lin("mm.2", cfg.out_hidden, merged, merged_rows)?,
            patch,
            blocks,
            threads: plan.threads.max(1),
            cfg,
        })
    }

    pub fn config(&self) -> &VisionConfig {
        &self.cfg
    }

    /// Preprocesses and encodes one picture.
    pub fn encode_image(&self, img: &image::Rgb) -> Result<Encoded> {
        let px = image::preprocess(img, &self.cfg.pre)?;
        self.encode(&px)
    }

    /// Runs the tower on preprocessed pixels, inside the plan's pool.
    pub fn encode(&self, px: &Pixels) -> Result<Encoded> {
        tiletune_kernels::pool::install_awake(self.threads, || self.encode_in_pool(px))
    }

    fn encode_in_pool(&self, px: &Pixels) -> Result<Encoded> {
        let t0 = std::time::Instant::now();
        let mut prof = EncodeProfile::default();
        let cfg = &self.cfg;
        let [t, gh, gw] = px.grid;
        let m = cfg.pre.merge;
        let unit = m * m;
        let n = t * gh * gw;
        let (e, f, nh, hd) = (cfg.hidden, cfg.intermediate, cfg.n_heads, cfg.head_dim());
        if n == 0
            || !gh.is_multiple_of(m)
            || !gw.is_multiple_of(m)
            || px.data.len() != n * cfg.patch_len()
        {
            return Err(LoadError::Config(format!(
                "pixels of grid {:?} ({} values) do not fit this tower (patches of {} values, {m}×{m} merge); preprocess the image with this model's settings",
                px.grid,
                px.data.len(),
                cfg.patch_len()
            )));
        }
        let win = windows(t, gh / m, gw / m, cfg.window / cfg.pre.patch / m, unit);
        let mut cx = LinScratch::default();
        // Patch embedding, then rows in window order (groups of `unit`).
        let mut emb = vec![0.0; n * e];
        timed(&mut prof.gemm, || {
            self.patch.forward(&px.data, n, &mut emb, &mut cx)
        })?;
        let mut x = vec![0.0; n * e];
        for (j, &src) in win.order.iter().enumerate() {
            x[j * unit * e..(j + 1) * unit * e]
                .copy_from_slice(&emb[src * unit * e..(src + 1) * unit * e]);
        }
        // 2-D RoPE angles per (reordered) row.
        let q4 = hd / 4;
        let inv: Vec<f64> = (0..q4)
            .map(|j| cfg.rope_theta.powf(-((2 * j) as f64) / (hd / 2) as f64))
            .collect();
        let freqs: Vec<f64> = (0..hd / 2).map(|i| inv[i % q4]).collect();
        let section: Vec<u8> = (0..hd / 2).map(|i| u8::from(i >= q4)).collect();
        let bw = gw / m;
        let pos = |row: usize, s: u8| -> f64 {
            let (j, r) = (row / unit, row % unit);
            let u = win.order[j] % (gh / m * bw);
            let (y, x) = ((u / bw) * m + r / m, (u % bw) * m + r % m);
            if s == 0 { y as f64 } else { x as f64 }
        };
        let mut angles = RowAngles::new();
        angles.fill(n, &freqs, &section, pos).map_err(kerr)?;
        let full = [0, n];
        let shape = SegShape {
            rows: n,
            n_q_heads: nh,
            n_kv_heads: nh,
            head_dim: hd,
        };
        let rs = RopeShape {
            rows: n,
            n_heads: nh,
            head_dim: hd,
        };
        let isa = Isa::best_of(&attention::ISAS);
        let ap = AttnParams {
            threads: self.threads,
            kv_block: 0,
        };
        let scale = 1.0 / (hd as f32).sqrt();
        let mut seg = SegScratch::new();
        let (mut h, mut q, mut k, mut v, mut att, mut o) = (
            vec![0.0; n * e],
            vec![0.0; n * e],
            vec![0.0; n * e],
            vec![0.0; n * e],
            vec![0.0; n * e],
            vec![0.0; n * e],
        );
        let (mut g, mut u) = (vec![0.0; n * f], vec![0.0; n * f]);
        for (l, b) in self.blocks.iter().enumerate() {
            Norm::rms(&b.ln1, cfg.eps)
                .forward(&x, &mut h, n)
                .map_err(kerr)?;
            timed(&mut prof.gemm, || -> Result<()> {
                b.q.forward(&h, n, &mut q, &mut cx)?;
                b.k.forward(&h, n, &mut k, &mut cx)?;
                b.v.forward(&h, n, &mut v, &mut cx)
            })?;
            rope::rope_rows(&mut q, rs, &angles, rope::RopeLayout::RotateHalf).map_err(kerr)?;
            rope::rope_rows(&mut k, rs, &angles, rope::RopeLayout::RotateHalf).map_err(kerr)?;
            let bounds: &[usize] = if cfg.full_attn.contains(&l) {
                &full
            } else {
                &win.bounds
            };
            timed(&mut prof.attention, || {
                segment_attention(
                    &q, &k, &v, &mut att, shape, bounds, scale, isa, &ap, &mut seg,
                )
            })
            .map_err(kerr)?;
            timed(&mut prof.gemm, || b.o.forward(&att, n, &mut o, &mut cx))?;
            eltwise::add_from(&mut x, &o).map_err(kerr)?;
            Norm::rms(&b.ln2, cfg.eps)
                .forward(&x, &mut h, n)
                .map_err(kerr)?;
            timed(&mut prof.gemm, || -> Result<()> {
                b.gate.forward(&h, n, &mut g, &mut cx)?;
                b.up.forward(&h, n, &mut u, &mut cx)
            })?;
            eltwise::swiglu(&mut g, &u).map_err(kerr)?;
            timed(&mut prof.gemm, || b.down.forward(&g, n, &mut o, &mut cx))?;
            eltwise::add_from(&mut x, &o).map_err(kerr)?;
        }
        Norm::rms(&self.post_ln, cfg.eps)
            .forward(&x, &mut h, n)
            .map_err(kerr)?;
        let nm = n / unit;
        let mut y = vec![0.0; nm * self.mm0.n()];
        timed(&mut prof.gemm, || self.mm0.forward(&h, nm, &mut y, &mut cx))?;
        eltwise::apply(EltOp::GeluErf, &mut y);
        let w = cfg.out_hidden;
        let mut z = vec![0.0; nm * w];
        timed(&mut prof.gemm, || self.mm2.forward(&y, nm, &mut z, &mut cx))?;
        let mut out = vec![0.0; nm * w];
        for (j, &src) in win.order.iter().enumerate() {
            out[src * w..(src + 1) * w].copy_from_slice(&z[j * w..(j + 1) * w]);
        }
        prof.total = t0.elapsed();
        Ok(Encoded {
            grid: px.grid,
            embeddings: out,
            profile: prof,
        })
    }
}

/// The window layout of transformers' `get_vision_window_index`: merged
/// patches in window order (`order[j]` is the image-order index of the
/// `j`-th) and the window bounds in patch rows.
struct Windows {
    order: Vec<usize>,
    bounds: Vec<usize>,
}

fn windows(t: usize, lh: usize, lw: usize, ws: usize, unit: usize) -> Windows {
    let (nwh, nww) = (lh.div_ceil(ws), lw.div_ceil(ws));
    let mut order = Vec::with_capacity(t * lh * lw);
    let mut bounds = vec![0];
    for f in 0..t {
        for wy in 0..nwh {
            for wx in 0..nww {
                let before = order.len();
                for y in wy * ws..((wy + 1) * ws).min(lh) {
                    for x in wx * ws..((wx + 1) * ws).min(lw) {
                        order.push((f * lh + y) * lw + x);
                    }
                }
                let end = order.len() * unit;
                if order.len() > before {
                    bounds.push(end);
                }
            }
        }
    }
    Windows { order, bounds }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_follow_transformers() {
        // 5×6 merged patches, windows of 4: a 4×4, a 4×2, a 1×4 and a 1×2
        // window (transformers' get_vision_window_index on grid (1, 10, 12)).
        let w = windows(1, 5, 6, 4, 4);
        assert_eq!(w.bounds, [0, 64, 96, 112, 120]);
        assert_eq!(&w.order[..6], &[0, 1, 2, 3, 6, 7]);
        assert_eq!(&w.order[16..24], &[4, 5, 10, 11, 16, 17, 22, 23]);
        assert_eq!(&w.order[24..], &[24, 25, 26, 27, 28, 29]);
    }
}
