//! Hugging Face folder → GGUF image, so everything downstream of a GGUF file
//! (config, planning, the fast decoder, the chat template) runs a
//! `config.json` + `*.safetensors` checkpoint unchanged. Tensors get
//! llama.cpp's names and layout (dims innermost first, llama q/k rows
//! permuted for ggml's adjacent-pair RoPE), metadata gets the keys
//! [`ModelConfig::from_gguf`] and [`crate::chat::ChatTemplate::from_gguf`]
//! read. [`cached_gguf`] (`cache.rs`) writes the image once per (folder contents, file
//! type) under a cache directory, atomically; a file type other than the
//! checkpoint's own is applied by [`crate::quantize`], so a folder run with
//! `--quant T` gets the tensors `tiletune quantize` (and llama-quantize)
//! would give it.

use crate::config::{Arch, ROPE_FREQS, RopeScaling};
use crate::error::{LoadError, Result};
use crate::gguf::write::{GgufWriter, TensorOut, TensorSpec};
use crate::gguf::{GgmlType, GgufFile};
use crate::models::Weight;
use crate::safetensors::{HfModelDir, StDtype};
use crate::tokenizer::{BpeParts, Tokenizer};
use std::path::Path;

mod cache;
mod vision;
pub use cache::{CacheEntry, CacheState, Cleaned, cached_gguf, clean, default_cache_dir, list};

/// Bumped whenever the image layout changes, so stale cache files are not reused.
const CONVERTER_VERSION: u32 = 5;

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// llama.cpp's `permute` for llama q/k: within each head, rows `[a0..a_{d/2}, b0..]`
/// become `[a0, b0, a1, b1, ...]`, so rotating adjacent pairs equals HF's rotate_half.
fn permute_rows<T: Copy + Default>(w: &[T], n_head: usize, rows: usize, cols: usize) -> Vec<T> {
    let hd = rows / n_head;
    let half = hd / 2;
    let mut out = vec![T::default(); w.len()];
    for h in 0..n_head {
        for i in 0..half {
            for j in 0..2 {
                let src = h * hd + j * half + i;
                let dst = h * hd + 2 * i + j;
                out[dst * cols..(dst + 1) * cols].copy_from_slice(&w[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}

/// Converts the folder `dir` into a GGUF image in memory: f32 and f16
/// checkpoints as they are, bf16 as f32, 1-D tensors always f32. Llama 3
/// RoPE scaling becomes a `rope_freqs.weight` tensor (f32, one frequency
/// divisor per pair), as llama.cpp's converter writes it. Small models
/// (tests); [`Image::write`] writes a file one tensor at a time.
pub fn hf_to_gguf(dir: &Path) -> Result<Vec<u8>> {
    Image::open(dir, TokenizerKeys::WhenNamed, Bf16Weights::Widen)?.to_bytes()
}

/// Whether a conversion writes the tokenizer into the GGUF metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerKeys {
    /// When the folder's `tokenizer.json` has a pre-tokenizer llama.cpp
    /// names; otherwise the image holds no tokenizer (the runtime reads
    /// `tokenizer.json` beside it).
    WhenNamed,
    /// Always: a folder without a `tokenizer.json`, or with one llama.cpp
    /// would not tokenize the same way, is an error (a GGUF file meant to
    /// stand alone).
    Required,
}

/// What a bf16 checkpoint's matrices become in an [`Image`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bf16Weights {
    /// f32: the image the runtime runs as it is (its float kernels are f32).
    Widen,
    /// BF16, as in the checkpoint: for an image that [`crate::quantize`]
    /// gives another type next, which reads BF16 exactly, at half the
    /// bytes of f32 (15 GB, not 30, for a 7B).
    Keep,
}

/// Puts one tensor's bytes, made from the folder's weights, into a
/// [`TensorOut`].
type MakeBytes = Box<dyn Fn(&HfModelDir, &mut TensorOut<'_>) -> Result<()> + Send + Sync>;

/// One tensor of an [`Image`]: its spec, and how its bytes are made. The
/// maker releases the checkpoint's pages it has read
/// ([`SafetensorsModel::release`](crate::safetensors::SafetensorsModel::release)).
struct Pending {
    spec: TensorSpec,
    make: MakeBytes,
}

/// A folder's GGUF image before its tensors are read: the metadata, and
/// each tensor's name, shape and type with the way to make its bytes.
/// Every shape is checked when the image is planned, so a folder that does
/// not match its config fails before anything is written; the bytes are
/// made one tensor at a time as the file is written, so converting needs
/// one tensor's memory, not the model's (an f16 7B checkpoint is 15 GB).
pub struct Image {
    hf: HfModelDir,
    meta: GgufWriter,
    tensors: Vec<Pending>,
}

impl Image {
    /// Plans the image of `dir`, with the tokenizer keys llama.cpp's
    /// converter writes (`tokenizer.ggml.model`, `.pre`, `.tokens`,
    /// `.token_type`, `.merges`, the special ids and flags) taken from the
    /// folder's `tokenizer.json` as `keys` says, and bf16 matrices as
    /// `bf16` says.
    pub fn open(dir: &Path, keys: TokenizerKeys, bf16: Bf16Weights) -> Result<Image> {
        if !dir.join("config.json").is_file() {
            return Err(LoadError::Config(format!(
                "{} has no config.json; pass a GGUF file or a Hugging Face model folder (config.json + *.safetensors)",
                dir.display()
            )));
        }
        let hf = HfModelDir::open(dir)?;
        let mut w = metadata(dir, &hf, keys)?;
        let cfg = &hf.config;
        let mut tensors = Vec::new();
        if let Some(f) = &cfg.rope_freqs {
            let bytes = f32_bytes(f);
            tensors.push(Pending {
                spec: spec(ROPE_FREQS, &[f.len()], GgmlType::F32),
                make: Box::new(move |_, out| out.put(&bytes)),
            });
        }
        let mut weights = vec![Weight::TokenEmbedding, Weight::OutputNorm];
        if !cfg.tied_embeddings || hf.weights.contains(&Weight::Output.hf_name()) {
            weights.push(Weight::Output);
        }
        for l in 0..cfg.n_layers {
            weights.extend([
                Weight::AttnNorm(l),
                Weight::Q(l),
                Weight::K(l),
                Weight::V(l),
                Weight::O(l),
            ]);
            if cfg.qkv_bias {
                weights.extend([Weight::QBias(l), Weight::KBias(l), Weight::VBias(l)]);
            }
            if cfg.qk_norm {
                weights.extend([Weight::QNorm(l), Weight::KNorm(l)]);
            }
            weights.extend([
                Weight::FfnNorm(l),
                Weight::Gate(l),
                Weight::Up(l),
                Weight::Down(l),
            ]);
        }
        for wt in weights {
            tensors.push(language_tensor(dir, &hf, wt, bf16)?);
        }
        if cfg.arch == Arch::Qwen2Vl {
            vision::plan(dir, &hf, &mut w, &mut tensors)?;
        }
        Ok(Image {
            hf,
            meta: w,
            tensors,
        })
    }

    /// The image in memory.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut w = self.meta.clone();
        for t in &self.tensors {
            let s = &t.spec;
            let mut bytes = Vec::new();
            (t.make)(
                &self.hf,
                &mut TensorOut::new(&mut bytes, Path::new("<memory>")),
            )?;
            w.tensor(&s.name, &s.dims, s.ggml_type, bytes)?;
        }
        Ok(w.to_bytes())
    }

    /// Writes the image to `path` one tensor at a time, calling
    /// `progress(done, total)` (in tensors) before each; the file appears
    /// only when complete ([`GgufWriter::write_streamed`]). The
    /// checkpoint's mapped pages are released as they are converted.
    /// Returns the bytes written.
    pub fn write(&self, path: &Path, mut progress: impl FnMut(usize, usize)) -> Result<u64> {
        self.meta.write_streamed(path, &self.specs(), |i, out| {
            self.put(i, out, &mut progress)
        })
    }

    fn specs(&self) -> Vec<TensorSpec> {
        self.tensors.iter().map(|t| t.spec.clone()).collect()
    }

    /// Makes tensor `i`'s bytes into `out`, telling `progress` first.
    fn put(
        &self,
        i: usize,
        out: &mut TensorOut<'_>,
        progress: &mut impl FnMut(usize, usize),
    ) -> Result<()> {
        progress(i, self.tensors.len());
        (self.tensors[i].make)(&self.hf, out)
    }

    /// The number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether the image holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }
}

/// The image's metadata: llama.cpp's keys for the model, its tokenizer as
/// `keys` says, and its chat template.
fn metadata(dir: &Path, hf: &HfModelDir, keys: TokenizerKeys) -> Result<GgufWriter> {
    let cfg = &hf.config;
    let a = cfg.arch.gguf_name();
    let mut w = GgufWriter::new();
    w.kv("general.architecture", a)
        .kv(
            "general.name",
            dir.file_name().and_then(|n| n.to_str()).unwrap_or("hf"),
        )
        .kv(&format!("{a}.vocab_size"), cfg.vocab as u32)
        .kv(&format!("{a}.embedding_length"), cfg.hidden as u32)
        .kv(&format!("{a}.feed_forward_length"), cfg.intermediate as u32)
        .kv(&format!("{a}.block_count"), cfg.n_layers as u32)
        .kv(&format!("{a}.attention.head_count"), cfg.n_heads as u32)
        .kv(
            &format!("{a}.attention.head_count_kv"),
            cfg.n_kv_heads as u32,
        )
        .kv(&format!("{a}.attention.key_length"), cfg.head_dim as u32)
        .kv(&format!("{a}.attention.value_length"), cfg.head_dim as u32)
        .kv(&format!("{a}.rope.freq_base"), cfg.rope_theta)
        .kv(&format!("{a}.rope.dimension_count"), cfg.head_dim as u32)
        .kv(
            &format!("{a}.attention.layer_norm_rms_epsilon"),
            cfg.rms_eps,
        )
        .kv(&format!("{a}.context_length"), cfg.max_pos as u32);
    match cfg.rope_scaling {
        None => {}
        Some(RopeScaling::Linear { factor }) => {
            w.kv(&format!("{a}.rope.scaling.type"), "linear")
                .kv(&format!("{a}.rope.scaling.factor"), factor);
        }
        Some(RopeScaling::Yarn {
            factor,
            original_max_pos,
        }) => {
            w.kv(&format!("{a}.rope.scaling.type"), "yarn")
                .kv(&format!("{a}.rope.scaling.factor"), factor)
                .kv(
                    &format!("{a}.rope.scaling.original_context_length"),
                    original_max_pos as u32,
                );
        }
        // As llama.cpp's converter: no scaling keys, the per-pair frequency
        // divisors go into the `rope_freqs.weight` tensor (written below).
        Some(RopeScaling::Llama3 { .. }) => {}
    }
    if let Some(s) = cfg.mrope_sections {
        // llama.cpp's four sections; the fourth is unused by Qwen2-VL.
        let s: Vec<i32> = vec![s[0] as i32, s[1] as i32, s[2] as i32, 0];
        w.kv(&format!("{a}.rope.dimension_sections"), s);
    }
    let mut tok = tokenizer_parts(dir, keys)?;
    if let Some(p) = &mut tok {
        if p.tokens.len() > cfg.vocab {
            return Err(LoadError::Tokenizer(format!(
                "{}: {} tokens, but config.json's vocab_size is {}: the embedding has a row per token, so the tokenizer does not belong to these weights",
                dir.join("tokenizer.json").display(),
                p.tokens.len(),
                cfg.vocab
            )));
        }
        p.pad_to(cfg.vocab);
    }
    if let Some(p) = &tok {
        p.write_gguf(&mut w, p.pre.gguf_name().unwrap_or("default"));
    }
    // config.json's ids first, as llama.cpp's converter reads them; else
    // what tokenizer.json names.
    if let Some(b) = cfg.bos_id.or(tok.as_ref().and_then(|p| p.bos)) {
        w.kv("tokenizer.ggml.bos_token_id", b);
    }
    if let Some(e) = cfg
        .eos_ids
        .first()
        .copied()
        .or(tok.as_ref().and_then(|p| p.eos))
    {
        w.kv("tokenizer.ggml.eos_token_id", e);
    }
    if let Some(&e) = cfg.eos_ids.get(1) {
        w.kv("tokenizer.ggml.eot_token_id", e);
    }
    if let Some(t) = &hf.chat_template {
        w.kv("tokenizer.chat_template", t.as_str());
    }
    Ok(w)
}

/// A folder's image written to an unnamed temporary file and mapped: the
/// input [`crate::quantize`] takes to give the image another file type, in
/// one tensor's memory. The file has no name, so nothing is left on disk
/// when this is dropped or the process dies.
pub struct MappedImage {
    // The map keeps the file's pages alive; its handle can go.
    file: GgufFile,
}

impl std::ops::Deref for MappedImage {
    type Target = GgufFile;
    fn deref(&self) -> &GgufFile {
        &self.file
    }
}

impl Image {
    /// Writes the image to an unnamed temporary file in `scratch` and maps
    /// it; `progress` as for [`Image::write`].
    pub fn write_mapped(
        &self,
        scratch: &Path,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<MappedImage> {
        let name = scratch.join("<temporary image>");
        let file = tempfile::tempfile_in(scratch).map_err(|source| LoadError::Write {
            path: scratch.to_path_buf(),
            source,
        })?;
        let (file, _) = self
            .meta
            .write_streamed_into(&file, &name, &self.specs(), |i, out| {
                self.put(i, out, &mut progress)
            })?;
        Ok(MappedImage {
            file: GgufFile::map(file, name)?,
        })
    }
}

/// A tensor spec from a PyTorch-order shape (outermost first).
fn spec(name: &str, shape: &[usize], ggml_type: GgmlType) -> TensorSpec {
    TensorSpec {
        name: name.to_string(),
        dims: shape.iter().rev().map(|&d| d as u64).collect(),
        ggml_type,
    }
}

/// The language model's tensor `wt`: 1-D as f32; 2-D f16 as f16 (llama q/k
/// rows permuted for ggml's RoPE), bf16 as `bf16` says, f32 as f32.
fn language_tensor(dir: &Path, hf: &HfModelDir, wt: Weight, bf16: Bf16Weights) -> Result<Pending> {
    let cfg = &hf.config;
    let hf_name = wt.hf_name();
    let (info, _) = hf.weights.tensor(&hf_name)?;
    let shape = info.shape.clone();
    let src_dtype = info.dtype;
    let name = wt.gguf_name();
    let bad = |what: String| LoadError::BadTensor {
        path: dir.to_path_buf(),
        tensor: hf_name.clone(),
        what,
    };
    if shape.len() == 1 {
        return Ok(Pending {
            spec: spec(&name, &shape, GgmlType::F32),
            make: Box::new(move |hf, out| {
                out.put(&f32_bytes(&hf.weights.tensor_f32(&hf_name)?.1))?;
                hf.weights.release(hf.weights.tensor(&hf_name)?.1);
                Ok(())
            }),
        });
    }
    if shape.len() != 2 {
        return Err(bad(format!(
            "shape {shape:?} is not 2-D; the checkpoint does not match its config"
        )));
    }
    let (rows, cols) = (shape[0], shape[1]);
    let permute = match (cfg.arch, wt) {
        (Arch::Llama, Weight::Q(_)) => Some(cfg.n_heads),
        (Arch::Llama, Weight::K(_)) => Some(cfg.n_kv_heads),
        _ => None,
    };
    if let Some(h) = permute
        && (rows % h != 0 || (rows / h) % 2 != 0)
    {
        return Err(bad(format!(
            "{rows} rows do not split into {h} heads of even size"
        )));
    }
    let ggml_type = match (src_dtype, bf16) {
        (StDtype::F16, _) => GgmlType::F16,
        (StDtype::BF16, Bf16Weights::Keep) => GgmlType::BF16,
        (StDtype::F32, _) | (StDtype::BF16, Bf16Weights::Widen) => GgmlType::F32,
        (other, _) => {
            return Err(bad(format!(
                "dtype {other:?} is not a float type; expected F32, F16 or BF16"
            )));
        }
    };
    Ok(Pending {
        spec: spec(&name, &shape, ggml_type),
        make: Box::new(move |hf, out| {
            // Rows are permuted as bytes and put as they are or converted
            // a piece at a time: no copy of the tensor in f32 (an embedding
            // is a gigabyte of f32 at 1.5B).
            let mapped = hf.weights.tensor(&hf_name)?.1;
            let permuted;
            let raw = match permute {
                Some(h) => {
                    permuted = permute_rows(mapped, h, rows, cols * src_dtype.size());
                    hf.weights.release(mapped);
                    &permuted[..]
                }
                None => mapped,
            };
            let mut f32s = Vec::new();
            for piece in raw.chunks(PIECE) {
                if src_dtype == StDtype::BF16 && ggml_type == GgmlType::F32 {
                    f32s.clear();
                    for c in piece.chunks_exact(2) {
                        let x = half::bf16::from_le_bytes([c[0], c[1]]).to_f32();
                        f32s.extend_from_slice(&x.to_le_bytes());
                    }
                    out.put(&f32s)?;
                } else {
                    out.put(piece)?;
                }
                hf.weights.release(piece);
            }
            Ok(())
        }),
    })
}

/// Checkpoint bytes put (or converted) at a time, their pages released
/// after: a tensor is never whole in memory.
const PIECE: usize = 1 << 20;

/// The folder's tokenizer, when it goes into the image.
fn tokenizer_parts(dir: &Path, keys: TokenizerKeys) -> Result<Option<BpeParts>> {
    let path = dir.join("tokenizer.json");
    if !path.is_file() {
        return match keys {
            TokenizerKeys::WhenNamed => Ok(None),
            TokenizerKeys::Required => Err(LoadError::Config(format!(
                "{} has no tokenizer.json; a GGUF file carries its tokenizer, so copy tokenizer.json from the model repository",
                dir.display()
            ))),
        };
    }
    let parts = Tokenizer::parts_from_json_file(&path)?;
    match (parts.pre.gguf_name(), keys) {
        (Some(_), _) => Ok(Some(parts)),
        (None, TokenizerKeys::WhenNamed) => Ok(None),
        (None, TokenizerKeys::Required) => Err(LoadError::Tokenizer(format!(
            "{}: its pre-tokenizer (split patterns {:?}) is none of those llama.cpp names (gpt2, smollm, llama-bpe, qwen2), so a GGUF file would be tokenized differently; run the model from its folder instead",
            path.display(),
            parts.pre.patterns()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permute_matches_llama_cpp() {
        // One head of 4 rows × 1 col: halves [a0 a1 | b0 b1] → [a0 b0 a1 b1].
        let w = [0.0, 1.0, 2.0, 3.0];
        assert_eq!(permute_rows(&w, 1, 4, 1), vec![0.0, 2.0, 1.0, 3.0]);
        // Two heads of 2 rows × 2 cols: each head is already pairwise.
        let w: Vec<f32> = (0..8).map(|i| i as f32).collect();
        assert_eq!(permute_rows(&w, 2, 4, 2), w);
    }
}
