//! The reference decoder against Hugging Face `transformers` itself: small
//! random Qwen3 checkpoints written by `save_pretrained` and the logits and
//! greedy tokens `transformers` computed for them
//! (tests/fixtures/hf_qwen3/make_hf_qwen3.py, README.md there for versions).
//!
//! Two models: `tied` (tied embeddings, head_dim 24 != hidden 64 / 4 heads,
//! GQA 4:2, rope_theta 1e4) and `untied` (separate lm_head, head_dim 16 !=
//! hidden 32 / 6 heads, GQA 6:3, three layers, rope_theta 1e6 stated only in
//! transformers 5's `rope_parameters`). Every RMSNorm weight, q_norm and
//! k_norm included, is random. For each: prefill logits and token-by-token
//! decode logits within 1e-4 of the largest |logit|, identical greedy
//! tokens, and logits after load-time Q8_0 / Q4_0 quantization within stated
//! bounds of transformers' f32 logits.

use std::path::PathBuf;

use serde::Deserialize;
use tiletune_kernels::quant::{QuantFormat, dequantize, quantize};
use tiletune_runtime::config::ModelConfig;
use tiletune_runtime::models::{Model, RopeLayout, Weight, WeightSource};
use tiletune_runtime::safetensors::HfModelDir;
use tiletune_runtime::sampling::{Sampler, SamplerConfig};

/// f32 bound from issue 7: max abs error over the largest |logit|.
const F32_REL: f32 = 1e-4;

#[derive(Deserialize)]
struct Expected {
    tokens: Vec<u32>,
    prefill_logits: Vec<Vec<f32>>,
    decode_logits: Vec<Vec<f32>>,
    greedy: Vec<u32>,
}

fn fixture(name: &str) -> (HfModelDir, Expected) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hf_qwen3")
        .join(name);
    let hf = HfModelDir::open(&dir).unwrap();
    let text = std::fs::read_to_string(dir.join("expected.json")).unwrap();
    let exp: Expected = serde_json::from_str(&text).unwrap();
    let vocab = hf.config.vocab;
    assert_eq!(exp.prefill_logits.len(), exp.tokens.len());
    assert_eq!(exp.decode_logits.len(), exp.tokens.len());
    assert!(
        exp.prefill_logits
            .iter()
            .chain(&exp.decode_logits)
            .all(|r| r.len() == vocab)
    );
    (hf, exp)
}

/// Max |got - want| over the largest |want|.
fn rel_err(got: &[f32], want: &[Vec<f32>]) -> f32 {
    let want: Vec<f32> = want.concat();
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    assert!(scale > 0.0);
    let err = got
        .iter()
        .zip(&want)
        .fold(0.0f32, |m, (g, w)| m.max((g - w).abs()));
    err / scale
}

fn prefill(model: &Model, tokens: &[u32]) -> Vec<f32> {
    model.forward(tokens, &mut model.new_cache()).unwrap()
}

fn decode(model: &Model, tokens: &[u32]) -> Vec<f32> {
    let mut cache = model.new_cache();
    tokens
        .iter()
        .flat_map(|&t| model.forward(&[t], &mut cache).unwrap())
        .collect()
}

/// `generate(do_sample=False, max_new_tokens=n)`: greedy argmax through the
/// runtime's sampler, stopping after an end-of-generation id as
/// transformers does.
fn greedy(model: &Model, prompt: &[u32], n: usize) -> Vec<u32> {
    let cfg = model.config();
    let mut sampler = Sampler::new(SamplerConfig::greedy()).unwrap();
    let mut cache = model.new_cache();
    let logits = model.forward(prompt, &mut cache).unwrap();
    let mut last = logits[logits.len() - cfg.vocab..].to_vec();
    let mut history = prompt.to_vec();
    let mut out = Vec::new();
    while out.len() < n {
        let id = sampler.sample(&last, &history).unwrap();
        out.push(id);
        history.push(id);
        if cfg.eos_ids.contains(&id) {
            break;
        }
        last = model.forward(&[id], &mut cache).unwrap();
    }
    out
}

fn check_f32(name: &str) {
    let (hf, exp) = fixture(name);
    let model = Model::new(&hf.config, &hf.weights).unwrap();
    let e = rel_err(&prefill(&model, &exp.tokens), &exp.prefill_logits);
    assert!(e <= F32_REL, "{name}: prefill relative error {e:e}");
    let e = rel_err(&decode(&model, &exp.tokens), &exp.decode_logits);
    assert!(e <= F32_REL, "{name}: decode relative error {e:e}");
    assert_eq!(
        greedy(&model, &exp.tokens, exp.greedy.len()),
        exp.greedy,
        "{name}: greedy tokens"
    );
}

#[test]
fn tied_matches_transformers() {
    let (hf, _) = fixture("tied");
    let c = &hf.config;
    // The fixture really has the properties the test claims to cover.
    assert!(c.tied_embeddings && !hf.weights.contains(&Weight::Output.hf_name()));
    assert!(c.qk_norm && c.head_dim * c.n_heads != c.hidden && c.n_kv_heads < c.n_heads);
    assert_eq!(c.rope_theta, 1e4);
    check_f32("tied");
}

#[test]
fn untied_matches_transformers() {
    let (hf, _) = fixture("untied");
    let c = &hf.config;
    assert!(!c.tied_embeddings && hf.weights.contains(&Weight::Output.hf_name()));
    assert!(c.qk_norm && c.head_dim * c.n_heads != c.hidden && c.n_kv_heads < c.n_heads);
    // Stated only as transformers 5's `rope_parameters.rope_theta`.
    assert_eq!(c.rope_theta, 1e6);
    assert!(c.eos_ids.contains(&2));
    check_f32("untied");
}

/// Load-time quantization as a test helper: every matrix (embedding,
/// lm_head, projections) goes through `format` and back; norm weights stay
/// f32, as llama.cpp keeps them.
struct Quantized<'a> {
    inner: &'a dyn WeightSource,
    format: QuantFormat,
}

impl WeightSource for Quantized<'_> {
    fn load(&self, w: Weight, numel: usize) -> tiletune_runtime::Result<Vec<f32>> {
        let v = self.inner.load(w, numel)?;
        let is_norm = matches!(
            w,
            Weight::OutputNorm
                | Weight::AttnNorm(_)
                | Weight::FfnNorm(_)
                | Weight::QNorm(_)
                | Weight::KNorm(_)
        );
        if is_norm {
            return Ok(v);
        }
        // Every row length of these fixtures is a multiple of 32, so
        // quantizing the flat tensor is quantizing row by row.
        let bytes = quantize(self.format, &v).unwrap();
        let mut out = vec![0.0f32; v.len()];
        dequantize(self.format, &bytes, &mut out).unwrap();
        Ok(out)
    }

    fn has(&self, w: Weight) -> bool {
        self.inner.has(w)
    }

    fn rope_layout(&self, cfg: &ModelConfig) -> RopeLayout {
        self.inner.rope_layout(cfg)
    }
}

fn check_quantized(name: &str, format: QuantFormat, bound: f32) {
    let (hf, exp) = fixture(name);
    let q = Quantized {
        inner: &hf.weights,
        format,
    };
    let model = Model::new(&hf.config, &q).unwrap();
    let e = rel_err(&prefill(&model, &exp.tokens), &exp.prefill_logits);
    assert!(
        e <= bound,
        "{name} {format:?}: prefill relative error {e} > {bound}"
    );
    let e = rel_err(&decode(&model, &exp.tokens), &exp.decode_logits);
    assert!(
        e <= bound,
        "{name} {format:?}: decode relative error {e} > {bound}"
    );
}

// The bounds are max abs error over the largest |logit| of transformers' f32
// forward. Q8_0 round-trips each weight with ~0.5% RMS error; these random
// models (strong residual branches, see make_hf_qwen3.py) amplify that to a
// measured 2.1% (tied) and 3.9% (untied) of the largest logit, so Q8_0 is held
// to 5%. Q4_0's grid is 16 times coarser and measures 41% / 49%: its bound
// only guards against gross breakage (a wrong block layout, a dropped scale)
// that would put the logits as far off as another random model's.

#[test]
fn q8_0_stays_close_to_transformers() {
    for name in ["tied", "untied"] {
        check_quantized(name, QuantFormat::Q8_0, 0.05);
    }
}

#[test]
fn q4_0_stays_close_to_transformers() {
    for name in ["tied", "untied"] {
        check_quantized(name, QuantFormat::Q4_0, 0.75);
    }
}
