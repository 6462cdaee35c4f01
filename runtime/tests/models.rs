//! Reference decoder tests on tiny random models built here: prefill equals
//! token-by-token decode, a GGUF llama (q/k rows permuted as llama.cpp's
//! converter does, interleaved RoPE) equals the same weights in Hugging Face
//! safetensors form (rotate_half RoPE), and a Qwen3 checkpoint written by
//! tests/fixtures/make_tiny_qwen3.py reproduces the logits its independent
//! numpy forward pass computed.

use tiletune_runtime::config::{Arch, ModelConfig};
use tiletune_runtime::gguf::GgufFile;
use tiletune_runtime::gguf::write::GgufWriter;
use tiletune_runtime::models::{Model, Weight};
use tiletune_runtime::safetensors::{
    SafetensorsFile, SafetensorsModel, StDtype, write_safetensors,
};

struct Rng(u64);
impl Rng {
    fn f(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.4
    }
}

fn tiny(arch: Arch) -> ModelConfig {
    let json = format!(
        r#"{{"model_type": "{}", "vocab_size": 50, "hidden_size": 24, "intermediate_size": 40,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": {},
        "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "max_position_embeddings": 64,
        "tie_word_embeddings": {}}}"#,
        arch.gguf_name(),
        if arch == Arch::Qwen3 { 8 } else { 6 },
        arch != Arch::Llama
    );
    ModelConfig::from_hf_json(&json).unwrap()
}

/// Every weight the config needs, with (shape, values), HF names.
fn random_weights(cfg: &ModelConfig, seed: u64) -> Vec<(Weight, Vec<usize>, Vec<f32>)> {
    let mut rng = Rng(seed);
    let (d, f, hd, nh, nkv, v) = (
        cfg.hidden,
        cfg.intermediate,
        cfg.head_dim,
        cfg.n_heads,
        cfg.n_kv_heads,
        cfg.vocab,
    );
    let mut out = Vec::new();
    let mut add = |w: Weight, shape: Vec<usize>, norm: bool| {
        let n: usize = shape.iter().product();
        let vals = (0..n)
            .map(|_| if norm { 1.0 + rng.f() } else { rng.f() })
            .collect();
        out.push((w, shape, vals));
    };
    add(Weight::TokenEmbedding, vec![v, d], false);
    add(Weight::OutputNorm, vec![d], true);
    if !cfg.tied_embeddings {
        add(Weight::Output, vec![v, d], false);
    }
    for l in 0..cfg.n_layers {
        add(Weight::AttnNorm(l), vec![d], true);
        add(Weight::Q(l), vec![nh * hd, d], false);
        add(Weight::K(l), vec![nkv * hd, d], false);
        add(Weight::V(l), vec![nkv * hd, d], false);
        add(Weight::O(l), vec![d, nh * hd], false);
        if cfg.qkv_bias {
            add(Weight::QBias(l), vec![nh * hd], false);
            add(Weight::KBias(l), vec![nkv * hd], false);
            add(Weight::VBias(l), vec![nkv * hd], false);
        }
        if cfg.qk_norm {
            add(Weight::QNorm(l), vec![hd], true);
            add(Weight::KNorm(l), vec![hd], true);
        }
        add(Weight::FfnNorm(l), vec![d], true);
        add(Weight::Gate(l), vec![f, d], false);
        add(Weight::Up(l), vec![f, d], false);
        add(Weight::Down(l), vec![d, f], false);
    }
    out
}

fn to_safetensors(ws: &[(Weight, Vec<usize>, Vec<f32>)]) -> SafetensorsModel {
    let names: Vec<String> = ws.iter().map(|w| w.0.hf_name()).collect();
    let bytes: Vec<Vec<u8>> = ws
        .iter()
        .map(|w| w.2.iter().flat_map(|x| x.to_le_bytes()).collect())
        .collect();
    let entries: Vec<(&str, StDtype, &[usize], &[u8])> = ws
        .iter()
        .enumerate()
        .map(|(i, w)| {
            (
                names[i].as_str(),
                StDtype::F32,
                w.1.as_slice(),
                bytes[i].as_slice(),
            )
        })
        .collect();
    let img = write_safetensors(&entries);
    // Tests run in parallel threads of one process: a process-wide counter
    // keeps their directories apart (pid + weight count alone collided).
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "tiletune-models-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("model.safetensors"), img).unwrap();
    let m = SafetensorsModel::open_dir(&dir).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    m
}

/// llama.cpp's `LlamaModel.permute` for q/k rows: (head, 2, hd/2) → (head, hd/2, 2).
fn permute_rows(w: &[f32], n_heads: usize, hd: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; w.len()];
    for h in 0..n_heads {
        for i in 0..hd / 2 {
            for j in 0..2 {
                let src = h * hd + j * hd / 2 + i;
                let dst = h * hd + 2 * i + j;
                out[dst * cols..(dst + 1) * cols].copy_from_slice(&w[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}

fn to_gguf(cfg: &ModelConfig, ws: &[(Weight, Vec<usize>, Vec<f32>)]) -> GgufFile {
    let a = cfg.arch.gguf_name();
    let mut g = GgufWriter::new();
    g.kv("general.architecture", a)
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
        .kv(&format!("{a}.rope.freq_base"), cfg.rope_theta)
        .kv(
            &format!("{a}.attention.layer_norm_rms_epsilon"),
            cfg.rms_eps,
        )
        .kv(&format!("{a}.context_length"), cfg.max_pos as u32);
    for (w, shape, vals) in ws {
        let vals = match (cfg.arch, w) {
            (Arch::Llama, Weight::Q(_)) => {
                permute_rows(vals, cfg.n_heads, cfg.head_dim, cfg.hidden)
            }
            (Arch::Llama, Weight::K(_)) => {
                permute_rows(vals, cfg.n_kv_heads, cfg.head_dim, cfg.hidden)
            }
            _ => vals.clone(),
        };
        let dims: Vec<u64> = shape.iter().rev().map(|&x| x as u64).collect();
        g.tensor_f32(&w.gguf_name(), &dims, &vals).unwrap();
    }
    GgufFile::from_vec(g.to_bytes()).unwrap()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

const TOKENS: [u32; 7] = [3, 17, 42, 0, 49, 17, 8];

#[test]
fn prefill_equals_token_by_token_decode() {
    for arch in [Arch::Llama, Arch::Qwen2, Arch::Qwen3] {
        let cfg = tiny(arch);
        let model = Model::new(&cfg, &to_safetensors(&random_weights(&cfg, 11))).unwrap();
        let mut cache = model.new_cache();
        let all = model.forward(&TOKENS, &mut cache).unwrap();
        let mut cache = model.new_cache();
        // Mixed chunking: 3 tokens, then one at a time.
        let mut chunked = model.forward(&TOKENS[..3], &mut cache).unwrap();
        for t in &TOKENS[3..] {
            chunked.extend(model.forward(&[*t], &mut cache).unwrap());
        }
        assert!(max_abs_diff(&all, &chunked) < 1e-5, "{arch:?}");
        assert!(all.iter().all(|x| x.is_finite()));
    }
}

#[test]
fn gguf_and_safetensors_forms_agree() {
    for arch in [Arch::Llama, Arch::Qwen2, Arch::Qwen3] {
        let cfg = tiny(arch);
        let ws = random_weights(&cfg, 5);
        let st = Model::new(&cfg, &to_safetensors(&ws)).unwrap();
        let gguf = to_gguf(&cfg, &ws);
        let gcfg = ModelConfig::from_gguf(&gguf).unwrap();
        assert_eq!(gcfg.tied_embeddings, cfg.tied_embeddings, "{arch:?}");
        let gm = Model::new(&gcfg, &gguf).unwrap();
        let a = st.forward(&TOKENS, &mut st.new_cache()).unwrap();
        let b = gm.forward(&TOKENS, &mut gm.new_cache()).unwrap();
        assert!(
            max_abs_diff(&a, &b) < 1e-5,
            "{arch:?}: {}",
            max_abs_diff(&a, &b)
        );
    }
}

#[test]
fn bad_inputs_are_errors() {
    let cfg = tiny(Arch::Qwen3);
    let ws = random_weights(&cfg, 1);
    let model = Model::new(&cfg, &to_safetensors(&ws)).unwrap();
    let mut cache = model.new_cache();
    assert!(model.forward(&[50], &mut cache).is_err());
    assert!(model.forward(&[1; 65], &mut model.new_cache()).is_err());
    // Weights that do not match the config.
    let mut other = cfg.clone();
    other.intermediate = 41;
    assert!(Model::new(&other, &to_safetensors(&ws)).is_err());
}

#[test]
fn tiny_qwen3_matches_numpy_reference() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny_qwen3");
    let dir = std::path::Path::new(dir);
    let cfg = ModelConfig::from_hf_file(&dir.join("config.json")).unwrap();
    assert_eq!(cfg.arch, Arch::Qwen3);
    assert_ne!(cfg.head_dim * cfg.n_heads, cfg.hidden);
    let weights = SafetensorsModel::open_dir(dir).unwrap();
    let model = Model::new(&cfg, &weights).unwrap();
    let refs: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("logits.json")).unwrap()).unwrap();
    let ids: Vec<u32> = refs["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let want: Vec<f32> = refs["logits"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
        })
        .collect();
    let got = model.forward(&ids, &mut model.new_cache()).unwrap();
    let largest = want.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let err = max_abs_diff(&got, &want);
    assert!(
        err <= 1e-4 * largest.max(1.0),
        "max abs error {err}, largest logit {largest}"
    );
    // And token by token.
    let mut cache = model.new_cache();
    let stepped: Vec<f32> = ids
        .iter()
        .flat_map(|&t| model.forward(&[t], &mut cache).unwrap())
        .collect();
    assert!(max_abs_diff(&stepped, &want) <= 1e-4 * largest.max(1.0));
    let _ = SafetensorsFile::open(&dir.join("model.safetensors")).unwrap();
}

/// A byte-level tokenizer with no merges: id = byte, plus two control tokens.
fn byte_tokenizer() -> tiletune_runtime::tokenizer::Tokenizer {
    use tiletune_runtime::tokenizer::{BpeParts, PreTokenizer, TokenKind, Tokenizer};
    // GPT-2's byte → char map, rebuilt here so the test does not depend on internals.
    let mut tokens = Vec::new();
    let mut n = 0;
    for b in 0..=255u32 {
        let printable = matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
        let c = if printable {
            char::from_u32(b).unwrap()
        } else {
            n += 1;
            char::from_u32(255 + n).unwrap()
        };
        tokens.push(c.to_string());
    }
    let mut kinds = vec![TokenKind::Normal; 256];
    tokens.extend(["<|im_start|>".to_string(), "<|im_end|>".to_string()]);
    kinds.extend([TokenKind::Control, TokenKind::Control]);
    Tokenizer::from_parts(BpeParts {
        tokens,
        kinds,
        merges: vec![],
        pre: PreTokenizer::from_gguf_name("gpt2").unwrap(),
        bos: None,
        eos: Some(257),
        eog: vec![],
        add_bos: false,
        add_eos: false,
        ignore_merges: false,
        add_prefix_space: false,
    })
    .unwrap()
}

#[test]
fn generate_streams_and_stops() {
    use tiletune_runtime::generate::generate;
    use tiletune_runtime::sampling::{Sampler, SamplerConfig, StopCriteria, StopReason};
    let tok = byte_tokenizer();
    let mut cfg = tiny(Arch::Qwen3);
    cfg.vocab = tok.vocab_size();
    let model = Model::new(&cfg, &to_safetensors(&random_weights(&cfg, 3))).unwrap();
    let prompt = tok.encode("hi <|im_start|>", false, true).unwrap();
    assert_eq!(prompt.len(), 4);

    // Budget stop: 6 tokens, streamed text equals the returned text.
    let mut streamed = String::new();
    let mut sampler = Sampler::new(SamplerConfig::greedy()).unwrap();
    let mut stop = StopCriteria::new(tok.eog_ids(), vec![], 6);
    let mut cache = model.new_cache();
    let g = generate(
        &model,
        &tok,
        &mut cache,
        &prompt,
        &mut sampler,
        &mut stop,
        |s| streamed.push_str(s),
    )
    .unwrap();
    assert_eq!(g.stop, StopReason::MaxTokens);
    assert_eq!(g.tokens.len(), 6);
    assert_eq!(streamed, g.text);
    assert_eq!(g.text, tok.decode(&g.tokens, true));
    // The cache holds the prompt and every fed-back token (the last is sampled, not fed).
    assert_eq!(cache.len(cfg.n_kv_heads * cfg.head_dim), prompt.len() + 5);
    // Same result as the plain prefill + argmax loop.
    let mut c2 = model.new_cache();
    let mut logits = model.forward(&prompt, &mut c2).unwrap();
    let mut want = Vec::new();
    for _ in 0..6 {
        let row = &logits[logits.len() - cfg.vocab..];
        let id = row
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)))
            .unwrap()
            .0 as u32;
        want.push(id);
        logits = model.forward(&[id], &mut c2).unwrap();
    }
    assert_eq!(g.tokens, want);

    // EOG stop: make the first greedy token an end-of-generation id.
    let mut stop = StopCriteria::new(vec![want[0]], vec![], 6);
    let g = generate(
        &model,
        &tok,
        &mut model.new_cache(),
        &prompt,
        &mut sampler,
        &mut stop,
        |_| {},
    )
    .unwrap();
    assert_eq!(
        (g.stop, g.tokens.len(), g.text.as_str()),
        (StopReason::Eog, 1, "")
    );
}
