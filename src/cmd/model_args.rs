//! The model, plan and sampling flags that `run`, `chat`, `ppl`, `plan` and
//! `bench model` share, and the one way they load a model:
//! [`tiletune_runtime::engine::Engine::load`], its notes printed as
//! warnings.

use std::path::PathBuf;
use tiletune_kernels::attention::KvDtype;
use tiletune_kernels::qgemv::QMode;
use tiletune_runtime::engine::{Engine, LoadOptions};
use tiletune_runtime::quantize::FileType;
use tiletune_runtime::sampling::{Sampler, SamplerConfig};

/// Model and plan flags shared by `run`, `plan`, `ppl` and `chat`.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// GGUF model file, or a Hugging Face model folder (config.json +
    /// *.safetensors, tokenizer.json for text): the folder is converted once
    /// to a GGUF image cached under $XDG_CACHE_HOME/tiletune/converted
    /// (`tiletune cache list` shows them). A model id (ORG/NAME[:QUANT]) is
    /// looked up in the hubs' caches, else pulled.
    #[arg(long, short = 'm', value_name = "FILE|DIR|ID")]
    pub model: PathBuf,
    /// File type when converting a Hugging Face folder, as `tiletune
    /// quantize` takes it (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
    /// Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, MXFP4) with its per-tensor choices (default: keep the
    /// checkpoint's f32/f16; bf16 becomes f32). Ignored for GGUF files.
    #[arg(long, value_parser = FileType::parse, value_name = "TYPE")]
    pub quant: Option<FileType>,
    /// Selector table (default: the user's table, see `tiletune table`).
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// Worker threads, also the table's thread budget (default: online cores).
    #[arg(long, short = 't', value_parser = super::parse_threads)]
    pub threads: Option<usize>,
    /// Force the activation mode of quantized weights: `a8` (8-bit
    /// activations, integer dot products) or `a32` (f32 activations).
    #[arg(long, value_parser = parse_qmode)]
    pub qmode: Option<QMode>,
    /// KV cache page type: f32, f16 or q8_0 (q8_0 needs a head size that
    /// is a multiple of 32). f32 is the default because it is the accurate
    /// one: teacher-forced on llama.cpp's greedy tokens for SmolLM2, f32
    /// pages stay within 0.02 logits of llama.cpp's picks, f16 pages drift
    /// up to 0.2 (tests/real_models_llamacpp.rs). f16 halves the cache
    /// memory and traffic (llama.cpp's default type); q8_0 quarters it.
    #[arg(long, value_parser = parse_kv_type, default_value = "f32")]
    pub kv_type: KvDtype,
    /// The vision tower of a multimodal model in llama.cpp's two-file
    /// form: the `mmproj` GGUF its converter wrote beside the language
    /// model (a converted Qwen2.5-VL folder needs none).
    #[arg(long, value_name = "FILE")]
    pub mmproj: Option<PathBuf>,
}

impl ModelArgs {
    /// The runtime's load options for these flags and `ctx` positions.
    pub fn load_options(&self, ctx: usize) -> LoadOptions {
        LoadOptions {
            quant: self.quant,
            db: self.db.clone(),
            threads: self.threads,
            qmode: self.qmode,
            kv_type: self.kv_type,
            ctx,
            mmproj: self.mmproj.clone(),
            ..LoadOptions::new(&self.model)
        }
    }

    /// Resolves a model id to its cached (or pulled) path.
    pub fn resolve(&mut self) -> anyhow::Result<()> {
        self.model = super::pull::model_path(&self.model)?;
        Ok(())
    }
}

/// A `--kv-type` value.
pub fn parse_kv_type(s: &str) -> Result<KvDtype, String> {
    KvDtype::ALL
        .into_iter()
        .find(|d| d.name() == s.to_ascii_lowercase())
        .ok_or_else(|| format!("`{s}` is not a KV cache type; use f32, f16 or q8_0"))
}

fn parse_qmode(s: &str) -> Result<QMode, String> {
    match s {
        "a8" => Ok(QMode::A8),
        "a32" => Ok(QMode::A32),
        _ => Err(format!("`{s}` is not a mode; use a8 or a32")),
    }
}

/// Loads the model in `a` for `ctx` positions, printing the load's notes
/// as warnings.
pub fn load(a: &ModelArgs, ctx: usize) -> anyhow::Result<Engine> {
    let opts = a.load_options(ctx);
    if let Some(t) = opts.threads {
        super::warn_oversubscribed(t);
    }
    let e = Engine::load(&opts).map_err(|e| match a.model.is_dir() {
        true => anyhow::Error::new(e).context(format!(
            "cannot load the model folder {}",
            a.model.display()
        )),
        false => e.into(),
    })?;
    for n in &e.notes {
        eprintln!("warning: {n}");
    }
    Ok(e)
}

/// Says so when `--ctx` asks for more positions than the model holds: the
/// cache is sized to the model's trained context instead.
pub fn warn_ctx_clamped(e: &Engine, ctx: usize) {
    if ctx > e.model.max_ctx() {
        eprintln!(
            "warning: --ctx {ctx} is more than the {} positions this model holds (its trained context); using {}",
            e.model.max_ctx(),
            e.model.max_ctx()
        );
    }
}

/// Sampling flags shared by `run` and `chat`.
#[derive(Debug, Clone, clap::Args)]
pub struct SampleArgs {
    /// Temperature: higher is more random; 0 is greedy (the most likely
    /// token every step, and the other sampling flags are ignored).
    #[arg(long = "temp", default_value_t = 0.8)]
    pub temp: f32,
    /// Top-k sampling: keep only the k most likely tokens; 0 keeps all.
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Top-p (nucleus) sampling: keep the most likely tokens whose
    /// probabilities add up to p; 1.0 keeps all.
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Min-p sampling: drop tokens less likely than p times the most likely
    /// one; 0.0 keeps all.
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Divide the logits of tokens already in the context by this (above 1
    /// discourages repeats); 1.0 is off.
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Seed of the sampler's random numbers: the same seed, prompt and
    /// flags give the same text.
    #[arg(long, short = 's', default_value_t = 0)]
    pub seed: u64,
}

impl SampleArgs {
    pub fn sampler(&self) -> anyhow::Result<Sampler> {
        let cfg = if self.temp == 0.0 {
            SamplerConfig {
                seed: self.seed,
                repeat_penalty: self.repeat_penalty,
                ..SamplerConfig::greedy()
            }
        } else {
            SamplerConfig {
                temperature: self.temp,
                top_k: self.top_k,
                top_p: self.top_p,
                min_p: self.min_p,
                repeat_penalty: self.repeat_penalty,
                seed: self.seed,
                ..SamplerConfig::default()
            }
        };
        Ok(Sampler::new(cfg)?)
    }
}
