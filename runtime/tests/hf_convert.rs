//! Hugging Face folder → GGUF conversion (`tiletune_runtime::convert`) for
//! every architecture: small random Llama (q/k rows permuted for ggml's
//! adjacent-pair RoPE, untied, bf16 weights) and Qwen2 (qkv bias, tied)
//! folders are written, converted, and the reference decoder run on the
//! GGUF image must give the logits it gives on the safetensors folder.
//! Also: the cache writes one file per (folder, weight type) and reuses it.

use std::path::{Path, PathBuf};
use tiletune_runtime::config::ModelConfig;
use tiletune_runtime::convert::{
    Bf16Weights, CacheState, Image, TokenizerKeys, cached_gguf, hf_to_gguf,
};
use tiletune_runtime::gguf::Array;
use tiletune_runtime::models::{Model, Weight};
use tiletune_runtime::quantize::{self, FileType, QuantizeOptions};
use tiletune_runtime::safetensors::{SafetensorsModel, StDtype, write_safetensors};
use tiletune_runtime::tokenizer::Tokenizer;
use tiletune_runtime::{GgmlType, GgufFile};

struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        let p =
            std::env::temp_dir().join(format!("tiletune-hf-convert-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }

    /// A random model folder for `config` in `dtype` at `<scratch>/<name>`.
    fn folder(&self, name: &str, config: &str, dtype: StDtype) -> PathBuf {
        let d = self.0.join(name);
        std::fs::create_dir_all(&d).unwrap();
        write_folder(&d, config, dtype);
        d
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Seeded uniform values in [-scale, scale) (64-bit LCG, top bits).
fn random(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// Writes a random model folder for `config` (JSON text) and returns it.
fn write_folder(dir: &Path, config: &str, dtype: StDtype) {
    std::fs::write(dir.join("config.json"), config).unwrap();
    let cfg = ModelConfig::from_hf_json(config).unwrap();
    let (h, hd, i) = (cfg.hidden, cfg.head_dim, cfg.intermediate);
    let (q, kv) = (cfg.n_heads * hd, cfg.n_kv_heads * hd);
    let mut shapes: Vec<(Weight, Vec<usize>)> = vec![
        (Weight::TokenEmbedding, vec![cfg.vocab, h]),
        (Weight::OutputNorm, vec![h]),
    ];
    if !cfg.tied_embeddings {
        shapes.push((Weight::Output, vec![cfg.vocab, h]));
    }
    for l in 0..cfg.n_layers {
        shapes.extend([
            (Weight::AttnNorm(l), vec![h]),
            (Weight::Q(l), vec![q, h]),
            (Weight::K(l), vec![kv, h]),
            (Weight::V(l), vec![kv, h]),
            (Weight::O(l), vec![h, q]),
            (Weight::FfnNorm(l), vec![h]),
            (Weight::Gate(l), vec![i, h]),
            (Weight::Up(l), vec![i, h]),
            (Weight::Down(l), vec![h, i]),
        ]);
        if cfg.qkv_bias {
            shapes.extend([
                (Weight::QBias(l), vec![q]),
                (Weight::KBias(l), vec![kv]),
                (Weight::VBias(l), vec![kv]),
            ]);
        }
    }
    let data: Vec<(String, Vec<usize>, Vec<u8>)> = shapes
        .iter()
        .enumerate()
        .map(|(k, (w, shape))| {
            let n: usize = shape.iter().product();
            let norm = shape.len() == 1
                && !matches!(w, Weight::QBias(_) | Weight::KBias(_) | Weight::VBias(_));
            let v = random(n, k as u64 + 1, 0.5);
            let v: Vec<f32> = if norm {
                v.iter().map(|x| 1.0 + x).collect()
            } else {
                v
            };
            let bytes = match dtype {
                StDtype::BF16 => v
                    .iter()
                    .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
                    .collect(),
                StDtype::F16 => v
                    .iter()
                    .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
                    .collect(),
                _ => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            };
            (w.hf_name(), shape.clone(), bytes)
        })
        .collect();
    let refs: Vec<(&str, StDtype, &[usize], &[u8])> = data
        .iter()
        .map(|(n, s, b)| (n.as_str(), dtype, s.as_slice(), b.as_slice()))
        .collect();
    std::fs::write(dir.join("model.safetensors"), write_safetensors(&refs)).unwrap();
}

const LLAMA: &str = r#"{"model_type": "llama", "hidden_size": 64, "intermediate_size": 96,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "vocab_size": 48, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
 "max_position_embeddings": 64, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}"#;

const QWEN2: &str = r#"{"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 96,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "vocab_size": 48, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
 "max_position_embeddings": 64, "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2}"#;

fn check_arch(tag: &str, config: &str, dtype: StDtype) {
    let s = Scratch::new(tag);
    write_folder(&s.0, config, dtype);
    let hf_cfg = ModelConfig::from_hf_file(&s.0.join("config.json")).unwrap();
    let st = SafetensorsModel::open_dir(&s.0).unwrap();
    let want_model = Model::new(&hf_cfg, &st).unwrap();

    let g = GgufFile::from_vec(hf_to_gguf(&s.0).unwrap()).unwrap();
    let g_cfg = ModelConfig::from_gguf(&g).unwrap();
    assert_eq!(g_cfg, hf_cfg, "{tag}: config through GGUF metadata");
    let got_model = Model::new(&g_cfg, &g).unwrap();

    let tokens = [1u32, 7, 30, 47, 0, 12, 12, 5];
    let want = want_model
        .forward(&tokens, &mut want_model.new_cache())
        .unwrap();
    let got = got_model
        .forward(&tokens, &mut got_model.new_cache())
        .unwrap();
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
    let err = got
        .iter()
        .zip(&want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    // Same f32 weights, same math; only the RoPE pairing differs for llama.
    assert!(
        err <= 1e-5 * scale,
        "{tag}: max abs error {err}, largest logit {scale}"
    );
}

#[test]
fn llama_bf16_untied_converts_exactly() {
    check_arch("llama", LLAMA, StDtype::BF16);
}

/// f16 q/k rows are permuted as they are, without a round trip through f32.
#[test]
fn llama_f16_untied_converts_exactly() {
    check_arch("llama-f16", LLAMA, StDtype::F16);
}

#[test]
fn qwen2_f32_tied_with_bias_converts_exactly() {
    check_arch("qwen2", QWEN2, StDtype::F32);
}

#[test]
fn cache_converts_once_per_weight_type() {
    let s = Scratch::new("cache");
    let model = s.folder("m", QWEN2, StDtype::F32);
    let cache = s.0.join("cache");
    let a = cached_gguf(&model, None, &cache).unwrap();
    let b = cached_gguf(&model, None, &cache).unwrap();
    assert_eq!(a, b);
    let q = cached_gguf(&model, Some(FileType::Q8_0), &cache).unwrap();
    assert_ne!(a, q);
    let g = GgufFile::open(&q).unwrap();
    let t = g.tensor_info("blk.0.attn_q.weight").unwrap();
    assert_eq!(t.ggml_type.id(), 8, "q8_0 weights");
    let t = g.tensor_info("blk.0.attn_norm.weight").unwrap();
    assert_eq!(t.ggml_type.id(), 0, "norms stay f32");
    let mut files: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(
        files.len(),
        4,
        "one image and its record per weight type, no temp files left: {files:?}"
    );
    assert!(
        files
            .iter()
            .all(|f| f.ends_with(".gguf") || f.ends_with(".json")),
        "{files:?}"
    );
}

/// Weights replaced by a file of the same size with the same modification
/// time (as `cp -p` or an unpacked archive leaves them) are converted again,
/// not served from the stale image.
#[test]
fn the_cache_is_keyed_by_content_not_size_and_mtime() {
    let s = Scratch::new("cache-content");
    let model = s.folder("m", QWEN2, StDtype::F32);
    let cache = s.0.join("cache");
    let before = cached_gguf(&model, None, &cache).unwrap();
    let weights = std::fs::read_dir(&model)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .unwrap();
    let mtime = std::fs::metadata(&weights).unwrap().modified().unwrap();
    let mut bytes = std::fs::read(&weights).unwrap();
    // Flip a bit in the last tensor's data (the header stays valid).
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&weights, &bytes).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&weights)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    assert_eq!(
        std::fs::metadata(&weights).unwrap().modified().unwrap(),
        mtime
    );
    let after = cached_gguf(&model, None, &cache).unwrap();
    assert_ne!(before, after, "changed weights get a new image");
    assert_ne!(
        std::fs::read(&before).unwrap(),
        std::fs::read(&after).unwrap()
    );
    // Unchanged contents still hit the cache.
    assert_eq!(cached_gguf(&model, None, &cache).unwrap(), after);
    // The listing tells the two apart by contents too.
    let listed = tiletune_runtime::convert::list(&cache).unwrap();
    let state = |p: &std::path::Path| listed.iter().find(|e| e.path == p).unwrap().state;
    assert_eq!(state(&before), CacheState::Changed);
    assert_eq!(state(&after), CacheState::Current);
}

/// The image written one tensor at a time is the image made in memory,
/// byte for byte, for every way a tensor is made: llama's permuted q/k from
/// bf16 and f16, f16 kept as it is, f32, the Qwen2.5-VL tower's split qkv
/// and patch frames.
#[test]
fn the_streamed_image_is_the_image_in_memory() {
    let s = Scratch::new("streamed");
    let mut folders =
        vec![PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf_qwen25vl/model")];
    for (tag, config, dtype) in [
        ("llama-bf16", LLAMA, StDtype::BF16),
        ("llama-f16", LLAMA, StDtype::F16),
        ("qwen2-f16", QWEN2, StDtype::F16),
        ("qwen2-f32", QWEN2, StDtype::F32),
    ] {
        folders.push(s.folder(tag, config, dtype));
    }
    for d in folders {
        let image = Image::open(&d, TokenizerKeys::WhenNamed, Bf16Weights::Widen).unwrap();
        let out = s.0.join("out.gguf");
        let mut seen = Vec::new();
        let n = image.write(&out, |i, total| seen.push((i, total))).unwrap();
        let want = image.to_bytes().unwrap();
        let got = std::fs::read(&out).unwrap();
        assert_eq!(n as usize, got.len());
        assert!(got == want, "{}: the streamed file differs", d.display());
        assert_eq!(seen.len(), image.len(), "{}", d.display());
        assert!(
            seen.iter()
                .enumerate()
                .all(|(k, &(i, t))| i == k && t == image.len())
        );
    }
}

/// A folder whose weights do not match its config (a third layer it does
/// not hold) fails when the image is planned, before a byte is written.
#[test]
fn a_folder_that_does_not_match_its_config_fails_before_writing() {
    let s = Scratch::new("mismatch");
    write_folder(&s.0, QWEN2, StDtype::F32);
    let three = QWEN2.replace(r#""num_hidden_layers": 2"#, r#""num_hidden_layers": 3"#);
    std::fs::write(s.0.join("config.json"), three).unwrap();
    let e = Image::open(&s.0, TokenizerKeys::WhenNamed, Bf16Weights::Widen)
        .err()
        .expect("layer 2 is missing");
    assert!(e.to_string().contains("model.layers.2."), "{e}");
}

/// A bf16 image kept as BF16 (what `convert` and `--quant` quantize from)
/// gives, for every output type, the bytes the image widened to f32 gives:
/// bf16 → f32 is exact. Kept, the matrices are BF16, half the bytes.
#[test]
fn a_kept_bf16_image_quantizes_to_the_bytes_of_the_widened_one() {
    let s = Scratch::new("bf16-kept");
    let d = s.folder("m", LLAMA, StDtype::BF16);
    let widened = GgufFile::from_vec(
        Image::open(&d, TokenizerKeys::WhenNamed, Bf16Weights::Widen)
            .unwrap()
            .to_bytes()
            .unwrap(),
    )
    .unwrap();
    let kept = Image::open(&d, TokenizerKeys::WhenNamed, Bf16Weights::Keep)
        .unwrap()
        .write_mapped(&s.0, |_, _| {})
        .unwrap();
    for (name, want) in [
        ("blk.0.attn_q.weight", GgmlType::BF16),
        ("output.weight", GgmlType::BF16),
        ("blk.0.attn_norm.weight", GgmlType::F32),
    ] {
        assert_eq!(kept.tensor_info(name).unwrap().ggml_type, want, "{name}");
    }
    assert_eq!(
        widened
            .tensor_info("blk.0.attn_q.weight")
            .unwrap()
            .ggml_type,
        GgmlType::F32
    );
    for ft in [
        FileType::F32,
        FileType::F16,
        FileType::BF16,
        FileType::Q8_0,
        FileType::Q4_K_M,
        FileType::Q6_K,
    ] {
        let o = QuantizeOptions::new(ft);
        let out = |g: &GgufFile, tag: &str| {
            let path = s.0.join(format!("{tag}.gguf"));
            quantize::quantize(g, &o, &quantize::plan(g, &o).unwrap(), &path, |_, _| {}).unwrap();
            std::fs::read(path).unwrap()
        };
        assert!(
            out(&kept, "kept") == out(&widened, "widened"),
            "{}: the outputs differ",
            ft.name()
        );
    }
}

/// The temporary image `convert` quantizes from has no name: nothing of it
/// is in the scratch directory while it is mapped, so nothing is left if
/// the process dies.
#[test]
fn the_temporary_image_leaves_no_file() {
    let s = Scratch::new("unnamed");
    let d = s.folder("m", QWEN2, StDtype::F32);
    let scratch = s.0.join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let image = Image::open(&d, TokenizerKeys::WhenNamed, Bf16Weights::Keep).unwrap();
    let mapped = image.write_mapped(&scratch, |_, _| {}).unwrap();
    assert_eq!(mapped.tensors().len(), image.len());
    assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0);
    let missing = s.0.join("missing");
    let e = image
        .write_mapped(&missing, |_, _| {})
        .err()
        .expect("no such directory");
    assert!(e.to_string().contains("cannot write"), "{e}");
}

/// As llama.cpp's converter: an embedding with more rows than the tokenizer
/// has tokens (Qwen2.5's) gets a token list of one entry per row, the rest
/// `[PAD<id>]` and unused, or llama.cpp refuses the file. A tokenizer with
/// more tokens than rows does not belong to the weights.
#[test]
fn the_token_list_has_a_token_per_embedding_row() {
    let fixture =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf_qwen25vl/model");
    let g = GgufFile::from_vec(hf_to_gguf(&fixture).unwrap()).unwrap();
    let rows = g.tensor_info("token_embd.weight").unwrap().dims[1] as usize;
    let Ok(Array::String(tokens)) = g.get_array("tokenizer.ggml.tokens") else {
        panic!("no token list")
    };
    let Ok(Array::I32(kinds)) = g.get_array("tokenizer.ggml.token_type") else {
        panic!("no token types")
    };
    let named = Tokenizer::parts_from_json_file(&fixture.join("tokenizer.json"))
        .unwrap()
        .tokens
        .len();
    assert!(
        named < rows,
        "the fixture has {named} tokens for {rows} rows"
    );
    assert_eq!((tokens.len(), kinds.len()), (rows, rows));
    for id in named..rows {
        assert_eq!(tokens[id], format!("[PAD{id}]"));
        assert_eq!(kinds[id], 5, "unused");
    }

    let s = Scratch::new("vocab");
    write_folder(&s.0, QWEN2, StDtype::F32);
    std::fs::copy(fixture.join("tokenizer.json"), s.0.join("tokenizer.json")).unwrap();
    let e = Image::open(&s.0, TokenizerKeys::Required, Bf16Weights::Widen)
        .err()
        .expect("269 tokens for 48 rows");
    assert!(e.to_string().contains("vocab_size is 48"), "{e}");
}
