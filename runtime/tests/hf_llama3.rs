//! Llama 3 RoPE scaling against Hugging Face `transformers` itself: a small
//! random Llama checkpoint with `rope_type: llama3` (factor 8, low/high
//! frequency factors 1/4, original_max_position_embeddings 16, so the
//! scaling changes the frequencies a 24-token prompt uses), written by
//! `save_pretrained` in bf16, and the logits and greedy tokens
//! `transformers` computed for it (tests/fixtures/hf_llama3/make_hf_llama3.py,
//! README.md there for versions).
//!
//! Checked three ways, each for prefill logits and token-by-token decode
//! logits within 1e-4 of the largest |logit| and identical greedy tokens:
//! the reference decoder on the safetensors folder (scaling from
//! config.json), and the reference and fast decoders on the GGUF image the
//! converter writes (scaling from its `rope_freqs.weight` tensor alone, the
//! way a llama.cpp-made GGUF states it: the tensor equals the values
//! llama.cpp's own converter computed for this config, and there is no
//! scaling key). A model with the scaling dropped is far off, so the
//! comparison does see it. Gated (`TILETUNE_LLAMA3_LLAMACPP_GGUF`): the same
//! on a GGUF made by llama.cpp's own converter from the fixture folder.

mod common;

use std::path::PathBuf;

use serde::Deserialize;
use tiletune_kernels::CpuCaps;
use tiletune_runtime::GgufFile;
use tiletune_runtime::config::{Arch, ModelConfig, ROPE_FREQS, RopeScaling};
use tiletune_runtime::convert::hf_to_gguf;
use tiletune_runtime::gguf::GgmlType;
use tiletune_runtime::models::{FastModel, Model};
use tiletune_runtime::plan::{ExecutionPlan, PlanOptions};
use tiletune_runtime::problems::kernel_problems;
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
    inv_freq: Vec<f32>,
    llamacpp_rope_freqs: Vec<f32>,
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf_llama3")
}

fn fixture() -> (HfModelDir, Expected) {
    let hf = HfModelDir::open(&dir()).unwrap();
    let text = std::fs::read_to_string(dir().join("expected.json")).unwrap();
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

/// The decoder under test: `reset` starts a new sequence, `forward`
/// continues it and returns the logits of every token it was given.
trait Lm {
    fn reset(&mut self);
    fn forward(&mut self, tokens: &[u32]) -> Vec<f32>;
}

struct Reference<'a> {
    model: &'a Model,
    cache: tiletune_runtime::models::KvCache,
}

impl Lm for Reference<'_> {
    fn reset(&mut self) {
        self.cache = self.model.new_cache();
    }
    fn forward(&mut self, tokens: &[u32]) -> Vec<f32> {
        self.model.forward(tokens, &mut self.cache).unwrap()
    }
}

struct Fast<'a> {
    model: &'a FastModel,
    st: tiletune_runtime::models::RunState,
}

impl Lm for Fast<'_> {
    fn reset(&mut self) {
        self.st.reset();
    }
    fn forward(&mut self, tokens: &[u32]) -> Vec<f32> {
        self.model
            .forward(tokens, &mut self.st, true)
            .unwrap()
            .to_vec()
    }
}

/// Prefill, token-by-token decode and greedy generation against
/// transformers.
fn check(what: &str, lm: &mut dyn Lm, exp: &Expected, vocab: usize) {
    let want: Vec<f32> = exp.prefill_logits.concat();
    lm.reset();
    let e = common::rel_err(&lm.forward(&exp.tokens), &want);
    assert!(e <= F32_REL, "{what}: prefill relative error {e:e}");
    lm.reset();
    let got: Vec<f32> = exp.tokens.iter().flat_map(|&t| lm.forward(&[t])).collect();
    let e = common::rel_err(&got, &exp.decode_logits.concat());
    assert!(e <= F32_REL, "{what}: decode relative error {e:e}");
    // `generate(do_sample=False)` through the runtime's sampler.
    let mut sampler = Sampler::new(SamplerConfig::greedy()).unwrap();
    lm.reset();
    let logits = lm.forward(&exp.tokens);
    let mut last = logits[logits.len() - vocab..].to_vec();
    let mut history = exp.tokens.clone();
    let mut out = Vec::new();
    while out.len() < exp.greedy.len() {
        let id = sampler.sample(&last, &history).unwrap();
        out.push(id);
        history.push(id);
        last = lm.forward(&[id]);
    }
    assert_eq!(out, exp.greedy, "{what}: greedy tokens");
}

#[test]
fn the_fixture_exercises_llama3_scaling() {
    let (hf, exp) = fixture();
    let c = &hf.config;
    assert_eq!(c.arch, Arch::Llama);
    assert_eq!(
        c.rope_scaling,
        Some(RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_pos: 16,
        })
    );
    assert!(exp.tokens.len() > 16 && c.max_pos > exp.tokens.len() + exp.greedy.len());
    let f = c.rope_freqs.as_ref().unwrap();
    // Some pairs in the interpolated band, the rest slowed by the factor.
    assert!(
        f.iter().filter(|&&v| v > 1.0 && v < 8.0).count() >= 2,
        "{f:?}"
    );
    assert!(f.iter().filter(|&&v| v == 8.0).count() >= 8, "{f:?}");
}

/// The divisors equal llama.cpp's converter's `rope_freqs` (its own Python
/// run on this config) and give transformers' scaled `inv_freq`.
#[test]
fn rope_freqs_match_llamacpp_and_transformers() {
    let (hf, exp) = fixture();
    let c = &hf.config;
    let f = c.rope_freqs.as_ref().unwrap();
    assert_eq!(f.len(), exp.llamacpp_rope_freqs.len());
    for (i, (got, want)) in f.iter().zip(&exp.llamacpp_rope_freqs).enumerate() {
        assert!(
            (got - want).abs() <= 1e-6 * want,
            "pair {i}: {got} vs llama.cpp {want}"
        );
    }
    let hd = c.head_dim as f64;
    for (i, (d, want)) in f.iter().zip(&exp.inv_freq).enumerate() {
        let got = (c.rope_theta as f64).powf(-2.0 * i as f64 / hd) / *d as f64;
        let rel = (got - *want as f64).abs() / *want as f64;
        assert!(
            rel <= 1e-6,
            "pair {i}: inv_freq {got} vs transformers {want}"
        );
    }
}

#[test]
fn reference_on_the_folder_matches_transformers() {
    let (hf, exp) = fixture();
    let model = Model::new(&hf.config, &hf.weights).unwrap();
    let mut lm = Reference {
        model: &model,
        cache: model.new_cache(),
    };
    check("folder, reference", &mut lm, &exp, hf.config.vocab);
}

/// Without the scaling the same weights are far from transformers: the
/// 1e-4 comparison above does depend on it.
#[test]
fn dropping_the_scaling_breaks_the_match() {
    let (hf, exp) = fixture();
    let cfg = ModelConfig {
        rope_scaling: None,
        rope_freqs: None,
        ..hf.config.clone()
    };
    let model = Model::new(&cfg, &hf.weights).unwrap();
    let got = model.forward(&exp.tokens, &mut model.new_cache()).unwrap();
    let e = common::rel_err(&got, &exp.prefill_logits.concat());
    assert!(e > 0.1, "unscaled RoPE is within {e} of transformers");
}

fn converted() -> GgufFile {
    GgufFile::from_vec(hf_to_gguf(&dir()).unwrap()).unwrap()
}

/// The image states the scaling as llama.cpp does: a `rope_freqs.weight`
/// f32 tensor of llama.cpp's values and no `rope.scaling.*` keys.
#[test]
fn converted_gguf_states_the_scaling_as_llamacpp() {
    let (hf, exp) = fixture();
    let g = converted();
    let (info, data) = g.tensor_data(ROPE_FREQS).unwrap();
    assert_eq!(info.ggml_type, GgmlType::F32);
    assert_eq!(info.dims, vec![hf.config.head_dim as u64 / 2]);
    let v: Vec<f32> = data
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    for (got, want) in v.iter().zip(&exp.llamacpp_rope_freqs) {
        assert!((got - want).abs() <= 1e-6 * want, "{got} vs {want}");
    }
    assert!(g.get("llama.rope.scaling.type").is_none());
    assert!(g.get("llama.rope.scaling.factor").is_none());
    assert_eq!(g.get_u64("llama.rope.dimension_count").unwrap(), 32);
    let c = ModelConfig::from_gguf(&g).unwrap();
    assert_eq!(c.rope_scaling, None);
    assert_eq!(c.rope_freqs.as_deref(), Some(v.as_slice()));
    assert_eq!(c.rope_freqs, hf.config.rope_freqs);
    // Everything else reads back as config.json states it.
    let plain = |c: &ModelConfig| ModelConfig {
        rope_scaling: None,
        ..c.clone()
    };
    assert_eq!(plain(&c), plain(&hf.config));
}

#[test]
fn reference_on_the_converted_gguf_matches_transformers() {
    let (hf, exp) = fixture();
    let g = converted();
    let cfg = ModelConfig::from_gguf(&g).unwrap();
    let model = Model::new(&cfg, &g).unwrap();
    let mut lm = Reference {
        model: &model,
        cache: model.new_cache(),
    };
    check("gguf, reference", &mut lm, &exp, hf.config.vocab);
}

/// The plan without a selector table (every kernel its default), 2 threads.
fn default_plan(g: &GgufFile) -> ExecutionPlan {
    let opts = PlanOptions {
        db: Some(std::env::temp_dir().join("tiletune-hf-llama3-tests-no-such.db")),
        threads: 2,
        qmode: None,
    };
    ExecutionPlan::build(
        &kernel_problems(g).unwrap(),
        "test-soc",
        &CpuCaps::default(),
        &opts,
    )
}

#[test]
fn fast_on_the_converted_gguf_matches_transformers() {
    let (hf, exp) = fixture();
    let g = converted();
    let cfg = ModelConfig::from_gguf(&g).unwrap();
    let plan = default_plan(&g);
    let model = FastModel::new(&cfg, &g, &plan, 64).unwrap();
    let mut lm = Fast {
        model: &model,
        st: model.new_state(),
    };
    check("gguf, fast", &mut lm, &exp, hf.config.vocab);
}

/// A GGUF whose `rope_freqs` does not fit its head dim, or holds a
/// non-positive value, is refused with a message, not run.
#[test]
fn bad_rope_freqs_are_errors() {
    let (hf, _) = fixture();
    let half = hf.config.head_dim / 2;
    for (len, bad) in [(half - 1, 1.0f32), (half, 0.0), (half, f32::NAN)] {
        let mut w = common::header(&hf.config);
        let mut f = vec![1.0f32; len];
        f[len / 2] = bad;
        w.tensor_f32(ROPE_FREQS, &[len as u64], &f).unwrap();
        let g = GgufFile::from_vec(w.to_bytes()).unwrap();
        let e = ModelConfig::from_gguf(&g).unwrap_err().to_string();
        assert!(e.contains("rope_freqs"), "{e}");
    }
}

/// Gated: the GGUF llama.cpp's own converter writes for the fixture folder
/// (path in `TILETUNE_LLAMA3_LLAMACPP_GGUF`; how to make it is in the
/// fixture's README.md), run by the reference and fast decoders, matches
/// transformers as the converter's image does.
#[test]
fn llamacpp_made_gguf_matches_transformers() {
    let Some(path) = std::env::var_os("TILETUNE_LLAMA3_LLAMACPP_GGUF") else {
        eprintln!("skipped: set TILETUNE_LLAMA3_LLAMACPP_GGUF to run it");
        return;
    };
    let (hf, exp) = fixture();
    let g = GgufFile::open(std::path::Path::new(&path)).unwrap();
    let cfg = ModelConfig::from_gguf(&g).unwrap();
    assert_eq!(cfg.rope_scaling, None, "llama.cpp writes no scaling keys");
    let f = cfg.rope_freqs.as_ref().expect("a rope_freqs.weight tensor");
    assert_eq!(f, &exp.llamacpp_rope_freqs);
    let model = Model::new(&cfg, &g).unwrap();
    let mut lm = Reference {
        model: &model,
        cache: model.new_cache(),
    };
    check("llama.cpp gguf, reference", &mut lm, &exp, hf.config.vocab);
    let plan = default_plan(&g);
    let fast = FastModel::new(&cfg, &g, &plan, 64).unwrap();
    let mut lm = Fast {
        model: &fast,
        st: fast.new_state(),
    };
    check("llama.cpp gguf, fast", &mut lm, &exp, hf.config.vocab);
}
