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
use crate::gguf::GgmlType;
use crate::gguf::write::GgufWriter;
use crate::models::Weight;
use crate::safetensors::{HfModelDir, StDtype};
use crate::tokenizer::{BpeParts, Tokenizer};
use std::path::Path;

mod cache;
mod vision;
pub use cache::{CacheEntry, CacheState, Cleaned, cached_gguf, clean, default_cache_dir, list};

/// Bumped whenever the image layout changes, so stale cache files are not reused.
const CONVERTER_VERSION: u32 = 4;

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
        .collect()
}

/// llama.cpp's `permute` for llama q/k: within each head, rows `[a0..a_{d/2}, b0..]`
/// become `[a0, b0, a1, b1, ...]`, so rotating adjacent pairs equals HF's rotate_half.
fn permute_rows(w: &[f32], n_head: usize, rows: usize, cols: usize) -> Vec<f32> {
    let hd = rows / n_head;
    let half = hd / 2;
    let mut out = vec![0f32; w.len()];
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

/// Converts the folder `dir` into a GGUF image: f32 and f16 checkpoints as
/// they are, bf16 as f32, 1-D tensors always f32. Llama 3 RoPE scaling
/// becomes a `rope_freqs.weight` tensor (f32, one frequency divisor per
/// pair), as llama.cpp's converter writes it.
pub fn hf_to_gguf(dir: &Path) -> Result<Vec<u8>> {
    hf_to_gguf_with(dir, TokenizerKeys::WhenNamed)
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

/// [`hf_to_gguf`], with the tokenizer keys llama.cpp's converter writes
/// (`tokenizer.ggml.model`, `.pre`, `.tokens`, `.token_type`, `.merges`,
/// the special ids and flags) taken from the folder's `tokenizer.json`.
pub fn hf_to_gguf_with(dir: &Path, keys: TokenizerKeys) -> Result<Vec<u8>> {
    if !dir.join("config.json").is_file() {
        return Err(LoadError::Config(format!(
            "{} has no config.json; pass a GGUF file or a Hugging Face model folder (config.json + *.safetensors)",
            dir.display()
        )));
    }
    let hf = HfModelDir::open(dir)?;
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
    let tok = tokenizer_parts(dir, keys)?;
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

    if let Some(f) = &cfg.rope_freqs {
        w.tensor(ROPE_FREQS, &[f.len() as u64], GgmlType::F32, f32_bytes(f))?;
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
        let hf_name = wt.hf_name();
        let (info, raw) = hf.weights.tensor(&hf_name)?;
        let shape = info.shape.clone();
        let src_dtype = info.dtype;
        let dims: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
        let name = wt.gguf_name();
        let bad = |what: String| LoadError::BadTensor {
            path: dir.to_path_buf(),
            tensor: hf_name.clone(),
            what,
        };
        if shape.len() == 1 {
            let (_, v) = hf.weights.tensor_f32(&hf_name)?;
            w.tensor(&name, &dims, GgmlType::F32, f32_bytes(&v))?;
            continue;
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
        // Unchanged f16 needs no round trip through f32.
        if src_dtype == StDtype::F16 && permute.is_none() {
            w.tensor(&name, &dims, GgmlType::F16, raw.to_vec())?;
            continue;
        }
        let (_, mut v) = hf.weights.tensor_f32(&hf_name)?;
        if let Some(h) = permute {
            v = permute_rows(&v, h, rows, cols);
        }
        match src_dtype {
            StDtype::F16 => w.tensor(&name, &dims, GgmlType::F16, f16_bytes(&v))?,
            _ => w.tensor(&name, &dims, GgmlType::F32, f32_bytes(&v))?,
        };
    }
    if cfg.arch == Arch::Qwen2Vl {
        vision::write(dir, &hf, &mut w)?;
    }
    Ok(w.to_bytes())
}

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
