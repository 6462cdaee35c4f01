//! Reference (plain scalar f32) decoder for Llama, Qwen2 and Qwen3, laid out
//! like candle-transformers' `qwen3.rs`: `RotaryEmbedding`, `Mlp`,
//! `Attention`, `DecoderLayer`, `Model`, each built from a [`crate::config::ModelConfig`] and
//! a [`WeightSource`]. Simple loops, no SIMD, no threads: it is the
//! correctness reference the tuned execution plan is checked against, and it
//! is meant to be switched to the kernel crate's operators piece by piece.

mod decoder;
pub mod dequant;
mod fast;
mod generator;

pub use decoder::{Attention, DecoderLayer, KvCache, Mlp, Model, RopeLayout, RotaryEmbedding};
pub use fast::{Extra, FastModel, KernelCall, RunState};
pub(crate) use fast::{LinScratch, Linear};
pub use generator::{Generator, TokenStep, generate as generate_fast, generate_extra};

use crate::error::{LoadError, Result};
use crate::gguf::GgufFile;
use crate::safetensors::SafetensorsModel;

/// A weight by role; sources map it to their own tensor names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weight {
    TokenEmbedding,
    OutputNorm,
    Output,
    AttnNorm(usize),
    Q(usize),
    K(usize),
    V(usize),
    O(usize),
    QBias(usize),
    KBias(usize),
    VBias(usize),
    QNorm(usize),
    KNorm(usize),
    FfnNorm(usize),
    Gate(usize),
    Up(usize),
    Down(usize),
}

impl Weight {
    /// Every weight a model of `cfg` reads, in file order.
    pub fn required(cfg: &crate::config::ModelConfig) -> Vec<Weight> {
        use Weight::*;
        let mut v = vec![TokenEmbedding, OutputNorm];
        if !cfg.tied_embeddings {
            v.push(Output);
        }
        for l in 0..cfg.n_layers {
            v.extend([AttnNorm(l), Q(l), K(l), V(l), O(l)]);
            if cfg.qkv_bias {
                v.extend([QBias(l), KBias(l), VBias(l)]);
            }
            if cfg.qk_norm {
                v.extend([QNorm(l), KNorm(l)]);
            }
            v.extend([FfnNorm(l), Gate(l), Up(l), Down(l)]);
        }
        v
    }

    /// The GGUF (llama.cpp) tensor name.
    pub fn gguf_name(self) -> String {
        use Weight::*;
        match self {
            TokenEmbedding => "token_embd.weight".into(),
            OutputNorm => "output_norm.weight".into(),
            Output => "output.weight".into(),
            AttnNorm(l) => format!("blk.{l}.attn_norm.weight"),
            Q(l) => format!("blk.{l}.attn_q.weight"),
            K(l) => format!("blk.{l}.attn_k.weight"),
            V(l) => format!("blk.{l}.attn_v.weight"),
            O(l) => format!("blk.{l}.attn_output.weight"),
            QBias(l) => format!("blk.{l}.attn_q.bias"),
            KBias(l) => format!("blk.{l}.attn_k.bias"),
            VBias(l) => format!("blk.{l}.attn_v.bias"),
            QNorm(l) => format!("blk.{l}.attn_q_norm.weight"),
            KNorm(l) => format!("blk.{l}.attn_k_norm.weight"),
            FfnNorm(l) => format!("blk.{l}.ffn_norm.weight"),
            Gate(l) => format!("blk.{l}.ffn_gate.weight"),
            Up(l) => format!("blk.{l}.ffn_up.weight"),
            Down(l) => format!("blk.{l}.ffn_down.weight"),
        }
    }

    /// The Hugging Face tensor name.
    pub fn hf_name(self) -> String {
        use Weight::*;
        match self {
            TokenEmbedding => "model.embed_tokens.weight".into(),
            OutputNorm => "model.norm.weight".into(),
            Output => "lm_head.weight".into(),
            AttnNorm(l) => format!("model.layers.{l}.input_layernorm.weight"),
            Q(l) => format!("model.layers.{l}.self_attn.q_proj.weight"),
            K(l) => format!("model.layers.{l}.self_attn.k_proj.weight"),
            V(l) => format!("model.layers.{l}.self_attn.v_proj.weight"),
            O(l) => format!("model.layers.{l}.self_attn.o_proj.weight"),
            QBias(l) => format!("model.layers.{l}.self_attn.q_proj.bias"),
            KBias(l) => format!("model.layers.{l}.self_attn.k_proj.bias"),
            VBias(l) => format!("model.layers.{l}.self_attn.v_proj.bias"),
            QNorm(l) => format!("model.layers.{l}.self_attn.q_norm.weight"),
            KNorm(l) => format!("model.layers.{l}.self_attn.k_norm.weight"),
            FfnNorm(l) => format!("model.layers.{l}.post_attention_layernorm.weight"),
            Gate(l) => format!("model.layers.{l}.mlp.gate_proj.weight"),
            Up(l) => format!("model.layers.{l}.mlp.up_proj.weight"),
            Down(l) => format!("model.layers.{l}.mlp.down_proj.weight"),
        }
    }
}

/// Where the reference model gets f32 weights from.
pub trait WeightSource {
    /// The weight as f32 with its element count checked against `numel`.
    fn load(&self, w: Weight, numel: usize) -> Result<Vec<f32>>;
    /// True if the source holds `w` (optional weights: biases, lm_head).
    fn has(&self, w: Weight) -> bool;
    /// How RoPE pairs dimensions for this source's q/k weights.
    fn rope_layout(&self, cfg: &crate::config::ModelConfig) -> RopeLayout;
}

fn check_numel(name: &str, got: usize, want: usize) -> Result<()> {
    if got != want {
        return Err(LoadError::Config(format!(
            "tensor `{name}` has {got} elements, the config implies {want}; the weights do not match the config"
        )));
    }
    Ok(())
}

impl WeightSource for GgufFile {
    fn load(&self, w: Weight, numel: usize) -> Result<Vec<f32>> {
        let name = w.gguf_name();
        let (info, data) = self.tensor_data(&name)?;
        let v = dequant::dequantize(info.ggml_type, data).ok_or_else(|| LoadError::BadTensor {
            path: self.path().to_path_buf(),
            tensor: name.clone(),
            what: format!(
                "type {} is not read by the reference model (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q4_K, q6_K)",
                info.ggml_type
            ),
        })?;
        check_numel(&name, v.len(), numel)?;
        Ok(v)
    }

    fn has(&self, w: Weight) -> bool {
        self.tensor_info(&w.gguf_name()).is_some()
    }

    fn rope_layout(&self, cfg: &crate::config::ModelConfig) -> RopeLayout {
        // llama.cpp's converter permutes llama q/k rows so that rotating
        // adjacent pairs (ggml rope mode 0) equals HF's rotate_half; Qwen
        // models use NEOX mode on unpermuted weights.
        match cfg.arch {
            crate::config::Arch::Llama => RopeLayout::Interleaved,
            _ => RopeLayout::Halves,
        }
    }
}

impl WeightSource for SafetensorsModel {
    fn load(&self, w: Weight, numel: usize) -> Result<Vec<f32>> {
        let name = w.hf_name();
        let (_, v) = self.tensor_f32(&name)?;
        check_numel(&name, v.len(), numel)?;
        Ok(v)
    }

    fn has(&self, w: Weight) -> bool {
        self.contains(&w.hf_name())
    }

    fn rope_layout(&self, _: &crate::config::ModelConfig) -> RopeLayout {
        RopeLayout::Halves
    }
}

/// Checks that a GGUF file holds every tensor its config implies, so that
/// `plan` and `tune --model` refuse a file that `run` could not load (a
/// block count that does not match the tensors, a missing embedding)
/// instead of planning it. Shapes are checked when the weights load.
pub fn check_tensors(cfg: &crate::config::ModelConfig, g: &GgufFile) -> Result<()> {
    for w in Weight::required(cfg) {
        let name = w.gguf_name();
        if g.tensor_info(&name).is_none() {
            return Err(LoadError::BadTensor {
                path: g.path().to_path_buf(),
                tensor: name,
                what: format!(
                    "missing, but the metadata ({} layers, {}) needs it; the file is truncated or its metadata is wrong",
                    cfg.n_layers,
                    cfg.arch.gguf_name()
                ),
            });
        }
    }
    Ok(())
}
