//! Model hyper-parameters, read from GGUF metadata (`{arch}.embedding_length`,
//! `{arch}.block_count`, ...) or from a Hugging Face `config.json`, through one
//! helper: each source fills a [`RawConfig`] of optional fields, and
//! [`RawConfig::finish`] applies the per-architecture defaults and checks the
//! values against each other, so both sources obey the same rules.

use crate::error::{LoadError, Result};
use crate::gguf::GgufFile;
use serde_json::Value;

/// Decoder architectures the runtime runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// Llama 2/3, TinyLlama, SmolLM2.
    Llama,
    /// Qwen2, Qwen2.5: bias on q, k and v.
    Qwen2,
    /// Qwen3: RMSNorm on each head of q and k before RoPE, explicit head_dim.
    Qwen3,
    /// The language model of Qwen2-VL / Qwen2.5-VL: Qwen2 with multimodal
    /// RoPE ([`ModelConfig::mrope_sections`]).
    Qwen2Vl,
}

impl Arch {
    /// From `general.architecture` or HF `model_type`.
    pub fn from_name(name: &str) -> Result<Self> {
        match name.to_ascii_lowercase().as_str() {
            "llama" | "llamaforcausallm" => Ok(Arch::Llama),
            "qwen2" | "qwen2forcausallm" => Ok(Arch::Qwen2),
            "qwen3" | "qwen3forcausallm" => Ok(Arch::Qwen3),
            "qwen2vl"
            | "qwen2_vl"
            | "qwen2_5_vl"
            | "qwen2_5_vl_text"
            | "qwen2_5_vlforconditionalgeneration" => Ok(Arch::Qwen2Vl),
            _ => Err(LoadError::UnsupportedArch(name.to_string())),
        }
    }

    /// The GGUF metadata prefix (`llama`, `qwen2`, `qwen3`).
    pub fn gguf_name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Qwen2Vl => "qwen2vl",
        }
    }
}

/// RoPE frequency scaling, where the checkpoint asks for one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RopeScaling {
    /// Positions divided by `factor`.
    Linear { factor: f32 },
    /// Llama 3.1 frequency-dependent scaling.
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_max_pos: usize,
    },
    /// YaRN.
    Yarn {
        factor: f32,
        original_max_pos: usize,
    },
}

/// Hyper-parameters of one decoder.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub arch: Arch,
    pub vocab: usize,
    pub hidden: usize,
    pub intermediate: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    /// Explicit: Qwen3 has head_dim != hidden / n_heads in some sizes.
    pub head_dim: usize,
    pub rope_theta: f32,
    pub rope_scaling: Option<RopeScaling>,
    /// Per-pair RoPE frequency divisors (`head_dim / 2`): pair `i` turns at
    /// `θ^(-2i/hd) / rope_freqs[i]`. This is llama.cpp's `rope_freqs.weight`
    /// tensor, read from a GGUF that has one, or computed from
    /// [`RopeScaling::Llama3`] as llama.cpp's converter computes it; a
    /// llama.cpp GGUF states Llama 3 scaling only through this tensor.
    pub rope_freqs: Option<Vec<f32>>,
    pub rms_eps: f32,
    pub max_pos: usize,
    /// The output projection reuses the token embedding.
    pub tied_embeddings: bool,
    pub qkv_bias: bool,
    pub qk_norm: bool,
    pub bos_id: Option<u32>,
    pub eos_ids: Vec<u32>,
    /// Multimodal RoPE: how many RoPE pairs follow the temporal, height and
    /// width positions (`rope_scaling.mrope_section`, llama.cpp's
    /// `rope.dimension_sections`), in that order; they add up to
    /// `head_dim / 2`. `None` for plain RoPE.
    pub mrope_sections: Option<[usize; 3]>,
}

/// Fields as a source states them; `None` means "not stated".
#[derive(Clone, Debug, Default)]
pub struct RawConfig {
    pub arch: Option<Arch>,
    pub vocab: Option<u64>,
    pub hidden: Option<u64>,
    pub intermediate: Option<u64>,
    pub n_layers: Option<u64>,
    pub n_heads: Option<u64>,
    pub n_kv_heads: Option<u64>,
    pub head_dim: Option<u64>,
    pub rope_theta: Option<f64>,
    pub rope_scaling: Option<RopeScaling>,
    /// llama.cpp's `rope_freqs` tensor, when the source has one.
    pub rope_freqs: Option<Vec<f32>>,
    pub rms_eps: Option<f64>,
    pub max_pos: Option<u64>,
    pub tied_embeddings: Option<bool>,
    pub qkv_bias: Option<bool>,
    pub qk_norm: Option<bool>,
    pub bos_id: Option<u32>,
    pub eos_ids: Vec<u32>,
    pub mrope_sections: Option<Vec<u64>>,
}

/// The values of an integer array, when every one is a non-negative integer.
pub(crate) fn int_array(a: &crate::gguf::Array) -> Option<Vec<u64>> {
    a.to_i64_vec()?
        .into_iter()
        .map(|x| u64::try_from(x).ok())
        .collect()
}

/// The GGUF tensor of per-pair RoPE frequency divisors (llama.cpp's name).
pub const ROPE_FREQS: &str = "rope_freqs.weight";

/// Upper bound on any dimension: larger values are corrupt metadata, and
/// refusing them early keeps later size computations far from overflow.
const MAX_DIM: u64 = 1 << 24;

/// The `rope_freqs` values (one frequency divisor per RoPE pair) of Llama 3
/// scaling, computed as llama.cpp's converter does (`LlamaModel.
/// generate_extra_tensors`, the same bands as transformers'
/// `_compute_llama3_parameters`): a pair whose wavelength `2π / f` is
/// shorter than `original_max_pos / high_freq_factor` keeps its frequency
/// (1), one longer than `original_max_pos / low_freq_factor` is slowed by
/// `factor`, and in between the divisor is `1 / ((1 - s) / factor + s)` with
/// `s = (original_max_pos / wavelength - low) / (high - low)`.
pub fn llama3_rope_freqs(scaling: RopeScaling, theta: f32, head_dim: usize) -> Result<Vec<f32>> {
    let RopeScaling::Llama3 {
        factor,
        low_freq_factor: low,
        high_freq_factor: high,
        original_max_pos,
    } = scaling
    else {
        return Err(LoadError::Config(
            "llama3_rope_freqs needs llama3 rope scaling; report this as a bug".into(),
        ));
    };
    let ok = |v: f32| v.is_finite() && v > 0.0;
    if !(ok(factor) && ok(low) && ok(high) && high > low && original_max_pos > 0) {
        return Err(LoadError::Config(format!(
            "llama3 rope scaling needs factor, low_freq_factor < high_freq_factor and original_max_position_embeddings all positive, got {factor}, {low}, {high}, {original_max_pos}; fix config.json"
        )));
    }
    let (old, factor, low, high) = (
        original_max_pos as f64,
        factor as f64,
        low as f64,
        high as f64,
    );
    let (low_wl, high_wl) = (old / low, old / high);
    Ok((0..head_dim / 2)
        .map(|i| {
            let f = 1.0 / (theta as f64).powf((2 * i) as f64 / head_dim as f64);
            let wl = 2.0 * std::f64::consts::PI / f;
            let d = if wl < high_wl {
                1.0
            } else if wl > low_wl {
                factor
            } else {
                let s = (old / wl - low) / (high - low);
                1.0 / ((1.0 - s) / factor + s)
            };
            d as f32
        })
        .collect())
}

impl RawConfig {
    /// Applies defaults and checks consistency.
    pub fn finish(self) -> Result<ModelConfig> {
        let arch = self
            .arch
            .ok_or_else(|| LoadError::Config("architecture is not stated".into()))?;
        let need = |v: Option<u64>, what: &str| -> Result<usize> {
            match v {
                Some(v) if (1..=MAX_DIM).contains(&v) => Ok(v as usize),
                Some(v) => Err(LoadError::Config(format!(
                    "{what} = {v} is out of range 1..={MAX_DIM}"
                ))),
                None => Err(LoadError::Config(format!("{what} is missing"))),
            }
        };
        let hidden = need(self.hidden, "hidden size")?;
        let n_heads = need(self.n_heads, "attention head count")?;
        let n_kv_heads = need(self.n_kv_heads.or(self.n_heads), "kv head count")?;
        if !n_heads.is_multiple_of(n_kv_heads) {
            return Err(LoadError::Config(format!(
                "{n_heads} attention heads are not a multiple of {n_kv_heads} kv heads"
            )));
        }
        let head_dim = match self.head_dim {
            Some(h) => need(Some(h), "head dim")?,
            None if hidden.is_multiple_of(n_heads) => hidden / n_heads,
            None => {
                return Err(LoadError::Config(format!(
                    "head dim is not stated and hidden {hidden} is not a multiple of {n_heads} heads"
                )));
            }
        };
        if !head_dim.is_multiple_of(2) {
            return Err(LoadError::Config(format!(
                "head dim {head_dim} is odd; rope needs pairs"
            )));
        }
        let rope_theta = self.rope_theta.unwrap_or(10_000.0) as f32;
        let rms_eps = self.rms_eps.unwrap_or(1e-6) as f32;
        if !(rope_theta.is_finite() && rope_theta > 0.0) {
            return Err(LoadError::Config(format!(
                "rope theta {rope_theta} must be positive"
            )));
        }
        if !(rms_eps.is_finite() && rms_eps >= 0.0) {
            return Err(LoadError::Config(format!(
                "rms eps {rms_eps} must be non-negative"
            )));
        }
        let half = head_dim / 2;
        let rope_freqs = match (self.rope_freqs, self.rope_scaling) {
            (Some(f), _) => {
                if f.len() != half {
                    return Err(LoadError::Config(format!(
                        "rope_freqs has {} values, head dim {head_dim} needs {half}; the file does not match its config",
                        f.len()
                    )));
                }
                if let Some(bad) = f.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
                    return Err(LoadError::Config(format!(
                        "rope_freqs value {bad} must be finite and positive; the file is corrupt"
                    )));
                }
                Some(f)
            }
            (None, Some(s @ RopeScaling::Llama3 { .. })) => {
                Some(llama3_rope_freqs(s, rope_theta, head_dim)?)
            }
            (None, _) => None,
        };
        let mrope_sections = match (self.mrope_sections, arch) {
            (None, Arch::Qwen2Vl) => {
                return Err(LoadError::Config(
                    "a Qwen2-VL language model states its M-RoPE sections (mrope_section); the config lacks them".into(),
                ));
            }
            (None, _) => None,
            (Some(s), _) => {
                // llama.cpp writes four sections, the last 0 for Qwen2-VL.
                let (three, rest) = s.split_at(s.len().min(3));
                if three.len() != 3
                    || rest.iter().any(|&r| r != 0)
                    || three.iter().sum::<u64>() != half as u64
                {
                    return Err(LoadError::Config(format!(
                        "M-RoPE sections {s:?} must be three counts (t, h, w) adding up to head_dim / 2 = {half}"
                    )));
                }
                Some([three[0] as usize, three[1] as usize, three[2] as usize])
            }
        };
        Ok(ModelConfig {
            arch,
            vocab: need(self.vocab, "vocab size")?,
            hidden,
            intermediate: need(self.intermediate, "intermediate size")?,
            n_layers: need(self.n_layers, "layer count")?,
            n_heads,
            n_kv_heads,
            head_dim,
            rope_theta,
            rope_scaling: self.rope_scaling,
            rope_freqs,
            rms_eps,
            max_pos: need(self.max_pos.or(Some(4096)), "max positions")?,
            tied_embeddings: self.tied_embeddings.unwrap_or(false),
            qkv_bias: self
                .qkv_bias
                .unwrap_or(matches!(arch, Arch::Qwen2 | Arch::Qwen2Vl)),
            qk_norm: self.qk_norm.unwrap_or(arch == Arch::Qwen3),
            bos_id: self.bos_id,
            eos_ids: self.eos_ids,
            mrope_sections,
        })
    }
}

impl ModelConfig {
    /// From GGUF metadata; tied embeddings, qkv bias and qk-norm are read off
    /// the tensors that are present.
    pub fn from_gguf(g: &GgufFile) -> Result<Self> {
        let arch = Arch::from_name(g.get_str("general.architecture")?)?;
        let a = arch.gguf_name();
        let opt_u64 = |key: &str| -> Result<Option<u64>> {
            match g.get(key) {
                None => Ok(None),
                Some(_) => g.get_u64(key).map(Some),
            }
        };
        let opt_f64 = |key: &str| -> Result<Option<f64>> {
            match g.get(key) {
                None => Ok(None),
                Some(_) => g.get_f32(key).map(|v| Some(v.into())),
            }
        };
        let vocab = match opt_u64(&format!("{a}.vocab_size"))? {
            Some(v) => Some(v),
            None => match g.get("tokenizer.ggml.tokens") {
                Some(_) => Some(g.get_array("tokenizer.ggml.tokens")?.len() as u64),
                None => g
                    .tensor_info("token_embd.weight")
                    .and_then(|t| t.dims.get(1).copied()),
            },
        };
        let rope_scaling = match g.get(&format!("{a}.rope.scaling.type")) {
            None => None,
            Some(_) => {
                let factor = opt_f64(&format!("{a}.rope.scaling.factor"))?.unwrap_or(1.0) as f32;
                let orig = opt_u64(&format!("{a}.rope.scaling.original_context_length"))?
                    .unwrap_or(0) as usize;
                match g.get_str(&format!("{a}.rope.scaling.type"))? {
                    "none" => None,
                    "linear" => Some(RopeScaling::Linear { factor }),
                    "yarn" => Some(RopeScaling::Yarn {
                        factor,
                        original_max_pos: orig,
                    }),
                    other => {
                        return Err(LoadError::Config(format!(
                            "rope scaling `{other}` is not supported"
                        )));
                    }
                }
            }
        };
        // llama.cpp states Llama 3 scaling only as this tensor (no
        // `rope.scaling.type`); its length is checked against head_dim in
        // `finish`.
        let rope_freqs = match g.tensor_info(ROPE_FREQS) {
            None => None,
            Some(_) => {
                let (info, data) = g.tensor_data(ROPE_FREQS)?;
                let v =
                    crate::models::dequant::dequantize(info.ggml_type, data).ok_or_else(|| {
                        LoadError::BadTensor {
                            path: g.path().to_path_buf(),
                            tensor: ROPE_FREQS.into(),
                            what: format!(
                                "type {} is not readable; llama.cpp writes it as f32",
                                info.ggml_type
                            ),
                        }
                    })?;
                Some(v)
            }
        };
        let id = |key: &str| -> Result<Option<u32>> {
            match g.get(key) {
                None => Ok(None),
                Some(_) => g.get_u32(key).map(Some),
            }
        };
        let mut eos_ids: Vec<u32> = Vec::new();
        for key in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"] {
            eos_ids.extend(id(key)?);
        }
        eos_ids.dedup();
        let sections_key = format!("{a}.rope.dimension_sections");
        let mrope_sections = match g.get(&sections_key) {
            None => None,
            Some(_) => Some(int_array(g.get_array(&sections_key)?).ok_or_else(|| {
                LoadError::Config(format!(
                    "{sections_key} must be an array of non-negative integers"
                ))
            })?),
        };
        RawConfig {
            arch: Some(arch),
            vocab,
            hidden: opt_u64(&format!("{a}.embedding_length"))?,
            intermediate: opt_u64(&format!("{a}.feed_forward_length"))?,
            n_layers: opt_u64(&format!("{a}.block_count"))?,
            n_heads: opt_u64(&format!("{a}.attention.head_count"))?,
            n_kv_heads: opt_u64(&format!("{a}.attention.head_count_kv"))?,
            head_dim: opt_u64(&format!("{a}.attention.key_length"))?,
            rope_theta: opt_f64(&format!("{a}.rope.freq_base"))?,
            rope_scaling,
            rope_freqs,
            rms_eps: opt_f64(&format!("{a}.attention.layer_norm_rms_epsilon"))?,
            max_pos: opt_u64(&format!("{a}.context_length"))?,
            tied_embeddings: Some(g.tensor_info("output.weight").is_none()),
            qkv_bias: Some(g.tensor_info("blk.0.attn_q.bias").is_some()),
            qk_norm: Some(g.tensor_info("blk.0.attn_q_norm.weight").is_some()),
            bos_id: id("tokenizer.ggml.bos_token_id")?,
            eos_ids,
            mrope_sections,
        }
        .finish()
    }

    /// From the text of a Hugging Face `config.json`.
    pub fn from_hf_json(text: &str) -> Result<Self> {
        let mut v: Value = serde_json::from_str(text)
            .map_err(|e| LoadError::Config(format!("config.json: {e}")))?;
        // A multimodal checkpoint (Qwen2.5-VL) nests the language model's
        // fields under `text_config` (transformers 5) or keeps them at the
        // top (older files); the nested ones win, the top level fills in.
        if let Some(Value::Object(t)) = v.get("text_config").cloned()
            && let Value::Object(top) = &mut v
        {
            for (k, x) in t {
                if k != "model_type" {
                    top.insert(k, x);
                }
            }
        }
        let arch_name = v
            .get("model_type")
            .and_then(Value::as_str)
            .or_else(|| v.get("architectures")?.get(0)?.as_str())
            .ok_or_else(|| {
                LoadError::Config("config.json states neither model_type nor architectures".into())
            })?;
        let arch = Arch::from_name(arch_name)?;
        let u = |k: &str| v.get(k).and_then(Value::as_u64);
        let f = |k: &str| v.get(k).and_then(Value::as_f64);
        let b = |k: &str| v.get(k).and_then(Value::as_bool);
        let ids = |k: &str| -> Vec<u32> {
            match v.get(k) {
                Some(Value::Number(n)) => n
                    .as_u64()
                    .and_then(|x| u32::try_from(x).ok())
                    .into_iter()
                    .collect(),
                Some(Value::Array(a)) => a
                    .iter()
                    .filter_map(|x| u32::try_from(x.as_u64()?).ok())
                    .collect(),
                _ => Vec::new(),
            }
        };
        // transformers 5 writes the RoPE base and scaling together as
        // `rope_parameters: {rope_type, rope_theta, factor, ...}` instead of
        // top-level `rope_theta` and `rope_scaling`; without reading it a
        // Qwen3 saved by `save_pretrained` silently got the default base
        // (10000 instead of, e.g., 1e6). Read either spelling.
        let rope_params = v.get("rope_parameters").filter(|s| s.is_object());
        let rope_theta =
            f("rope_theta").or_else(|| rope_params.and_then(|p| p.get("rope_theta")?.as_f64()));
        let rope_scaling = match v
            .get("rope_scaling")
            .filter(|s| !s.is_null())
            .or(rope_params)
        {
            None => None,
            Some(s) => {
                let ty = s
                    .get("rope_type")
                    .or_else(|| s.get("type"))
                    .and_then(Value::as_str)
                    .unwrap_or("default");
                let sf = |k: &str, d: f64| s.get(k).and_then(Value::as_f64).unwrap_or(d) as f32;
                let orig = s
                    .get("original_max_position_embeddings")
                    .and_then(Value::as_u64)
                    .unwrap_or(0) as usize;
                match ty {
                    // M-RoPE's sections are read below; its frequencies are
                    // the default ones.
                    "default" | "mrope" => None,
                    "linear" => Some(RopeScaling::Linear {
                        factor: sf("factor", 1.0),
                    }),
                    // Defaults as llama.cpp's converter.
                    "llama3" => Some(RopeScaling::Llama3 {
                        factor: sf("factor", 8.0),
                        low_freq_factor: sf("low_freq_factor", 1.0),
                        high_freq_factor: sf("high_freq_factor", 4.0),
                        original_max_pos: if orig == 0 { 8192 } else { orig },
                    }),
                    "yarn" => Some(RopeScaling::Yarn {
                        factor: sf("factor", 1.0),
                        original_max_pos: orig,
                    }),
                    other => {
                        return Err(LoadError::Config(format!(
                            "rope scaling `{other}` is not supported"
                        )));
                    }
                }
            }
        };
        RawConfig {
            arch: Some(arch),
            vocab: u("vocab_size"),
            hidden: u("hidden_size"),
            intermediate: u("intermediate_size"),
            n_layers: u("num_hidden_layers"),
            n_heads: u("num_attention_heads"),
            n_kv_heads: u("num_key_value_heads"),
            head_dim: u("head_dim"),
            rope_theta,
            rope_scaling,
            rope_freqs: None,
            rms_eps: f("rms_norm_eps"),
            max_pos: u("max_position_embeddings"),
            tied_embeddings: b("tie_word_embeddings"),
            // Llama and Qwen3 state `attention_bias`; Qwen2 always has it.
            qkv_bias: match arch {
                Arch::Qwen2 | Arch::Qwen2Vl => Some(true),
                _ => b("attention_bias"),
            },
            qk_norm: Some(arch == Arch::Qwen3),
            bos_id: ids("bos_token_id").first().copied(),
            eos_ids: ids("eos_token_id"),
            mrope_sections: v
                .get("rope_scaling")
                .filter(|s| !s.is_null())
                .or(rope_params)
                .and_then(|s| s.get("mrope_section")?.as_array())
                .map(|a| a.iter().filter_map(Value::as_u64).collect()),
        }
        .finish()
    }

    /// From a `config.json` file.
    pub fn from_hf_file(path: &std::path::Path) -> Result<Self> {
        let text = crate::input::read_text(path, crate::input::JSON_LIMIT)?;
        Self::from_hf_json(&text)
    }

    /// What each RoPE pair's frequency `θ^(-2i/hd)` is divided by:
    /// [`Self::rope_freqs`] times a linear scaling factor, `None` for plain
    /// RoPE. YaRN is an error: no decoder here implements it.
    pub fn rope_freq_divisors(&self) -> Result<Option<Vec<f32>>> {
        let linear = match self.rope_scaling {
            Some(RopeScaling::Yarn { .. }) => {
                return Err(LoadError::Config(
                    "yarn rope scaling is not implemented; use a model without it".into(),
                ));
            }
            Some(RopeScaling::Linear { factor }) => {
                if !(factor.is_finite() && factor > 0.0) {
                    return Err(LoadError::Config(format!(
                        "linear rope scaling factor {factor} must be positive; fix the model's config"
                    )));
                }
                Some(factor)
            }
            _ => None,
        };
        Ok(match (&self.rope_freqs, linear) {
            (None, None) => None,
            (Some(f), l) => Some(f.iter().map(|v| v * l.unwrap_or(1.0)).collect()),
            (None, Some(l)) => Some(vec![l; self.head_dim / 2]),
        })
    }

    /// Query heads per kv head (GQA group size).
    pub fn gqa_group(&self) -> usize {
        self.n_heads / self.n_kv_heads
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::write::GgufWriter;

    #[test]
    fn gguf_and_json_give_the_same_qwen3_config() {
        let mut w = GgufWriter::new();
        w.kv("general.architecture", "qwen3")
            .kv("qwen3.vocab_size", 1000u32)
            .kv("qwen3.embedding_length", 64u32)
            .kv("qwen3.feed_forward_length", 128u32)
            .kv("qwen3.block_count", 2u32)
            .kv("qwen3.attention.head_count", 4u32)
            .kv("qwen3.attention.head_count_kv", 2u32)
            .kv("qwen3.attention.key_length", 32u32)
            .kv("qwen3.rope.freq_base", 1_000_000f32)
            .kv("qwen3.attention.layer_norm_rms_epsilon", 1e-6f32)
            .kv("qwen3.context_length", 512u32)
            .kv("tokenizer.ggml.bos_token_id", 1u32)
            .kv("tokenizer.ggml.eos_token_id", 2u32);
        w.tensor_f32("blk.0.attn_q_norm.weight", &[32], &[1.0; 32])
            .unwrap();
        let g = GgufFile::from_vec(w.to_bytes()).unwrap();
        let from_gguf = ModelConfig::from_gguf(&g).unwrap();
        let json = r#"{"model_type": "qwen3", "vocab_size": 1000, "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 32, "rope_theta": 1000000.0,
            "rms_norm_eps": 1e-6, "max_position_embeddings": 512, "tie_word_embeddings": true,
            "attention_bias": false, "bos_token_id": 1, "eos_token_id": [2]}"#;
        let from_json = ModelConfig::from_hf_json(json).unwrap();
        assert_eq!(from_gguf, from_json);
        assert_eq!(from_gguf.head_dim, 32); // != 64 / 4
        assert!(from_gguf.qk_norm && from_gguf.tied_embeddings && !from_gguf.qkv_bias);
        assert_eq!(from_gguf.gqa_group(), 2);
    }

    #[test]
    fn defaults_and_rope_scaling() {
        let json = r#"{"architectures": ["LlamaForCausalLM"], "vocab_size": 10, "hidden_size": 8,
            "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
            "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}"#;
        let c = ModelConfig::from_hf_json(json).unwrap();
        assert_eq!((c.arch, c.n_kv_heads, c.head_dim), (Arch::Llama, 2, 4));
        assert_eq!(c.rope_theta, 10_000.0);
        assert!(!c.qkv_bias && !c.qk_norm && !c.tied_embeddings);
        assert!(matches!(
            c.rope_scaling,
            Some(RopeScaling::Llama3 {
                original_max_pos: 8192,
                ..
            })
        ));
    }

    #[test]
    fn transformers5_rope_parameters() {
        let base = r#""model_type": "qwen3", "vocab_size": 10, "hidden_size": 8,
            "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2"#;
        let json = format!(
            r#"{{{base}, "rope_parameters": {{"rope_theta": 1000000.0, "rope_type": "default"}}}}"#
        );
        let c = ModelConfig::from_hf_json(&json).unwrap();
        assert_eq!((c.rope_theta, c.rope_scaling), (1e6, None));
        let json = format!(
            r#"{{{base}, "rope_parameters": {{"rope_theta": 500000.0, "rope_type": "llama3",
            "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192}}}}"#
        );
        let c = ModelConfig::from_hf_json(&json).unwrap();
        assert_eq!(c.rope_theta, 5e5);
        assert!(matches!(
            c.rope_scaling,
            Some(RopeScaling::Llama3 {
                original_max_pos: 8192,
                ..
            })
        ));
    }

    /// Llama 3.1's own scaling (θ 5e5, hd 128, factor 8, original context
    /// 8192): short wavelengths keep their frequency, long ones are slowed
    /// by the factor, the band between rises monotonically; linear scaling
    /// is one divisor for every pair; YaRN is refused.
    #[test]
    fn rope_freq_divisors() {
        let base = r#""model_type": "llama", "vocab_size": 10, "hidden_size": 256,
            "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
            "rope_theta": 500000.0"#;
        let cfg = |scaling: &str| {
            ModelConfig::from_hf_json(&format!(r#"{{{base}, "rope_scaling": {scaling}}}"#))
        };
        let c = cfg(
            r#"{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}"#,
        )
        .unwrap();
        let f = c.rope_freqs.clone().unwrap();
        assert_eq!(f.len(), 64);
        assert!(f.windows(2).all(|w| w[0] <= w[1]), "{f:?}");
        let wl = |i: usize| 2.0 * std::f64::consts::PI * 5e5f64.powf(2.0 * i as f64 / 128.0);
        for (i, &d) in f.iter().enumerate() {
            match wl(i) {
                w if w < 2048.0 => assert_eq!(d, 1.0, "pair {i}"),
                w if w > 8192.0 => assert_eq!(d, 8.0, "pair {i}"),
                _ => assert!(d > 1.0 && d < 8.0, "pair {i}: {d}"),
            }
        }
        assert!(f.iter().any(|&d| d > 1.0 && d < 8.0));
        assert_eq!(c.rope_freq_divisors().unwrap(), Some(f));
        let c = cfg(r#"{"type": "linear", "factor": 4.0}"#).unwrap();
        assert_eq!(
            (c.rope_freqs.clone(), c.rope_freq_divisors().unwrap()),
            (None, Some(vec![4.0; 64]))
        );
        let c = cfg(r#"{"rope_type": "yarn", "factor": 4.0}"#).unwrap();
        assert!(c.rope_freq_divisors().is_err());
        let c = cfg("null").unwrap();
        assert_eq!(c.rope_freq_divisors().unwrap(), None);
        for bad in [
            r#"{"rope_type": "llama3", "factor": 0.0}"#,
            r#"{"rope_type": "llama3", "low_freq_factor": 4.0, "high_freq_factor": 4.0}"#,
        ] {
            assert!(cfg(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn inconsistent_configs_are_errors() {
        let base = r#""vocab_size": 10, "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1"#;
        for extra in [
            r#""num_attention_heads": 3, "num_key_value_heads": 2"#,
            r#""num_attention_heads": 3"#,
            r#""num_attention_heads": 0"#,
            r#""num_attention_heads": 2, "head_dim": 3"#,
            r#""num_attention_heads": 2, "rope_theta": -1.0"#,
        ] {
            let json = format!(r#"{{"model_type": "llama", {base}, {extra}}}"#);
            assert!(ModelConfig::from_hf_json(&json).is_err(), "{extra}");
        }
        let e = ModelConfig::from_hf_json(r#"{"model_type": "gpt_neox"}"#).unwrap_err();
        assert!(matches!(e, LoadError::UnsupportedArch(_)));
        assert!(ModelConfig::from_hf_json("{").is_err());
    }
}
