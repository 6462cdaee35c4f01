//! `tiletune_runtime::quantize` on small random GGUF models built here: the
//! type each tensor gets (llama-quantize's rules: the output matrix, the
//! `use_more_bits` layers of a Q4_K_M file, the fallbacks for rows that are
//! not whole super-blocks), bytes equal to the kernel crate's quantizers
//! (which `kernels/tests/quant_vectors.rs` pins to the `gguf` package's),
//! the metadata copied, requantizing refused without the flag, and the
//! written file loading and running.

mod common;
use tiletune_kernels::qgemv::QMode;
use tiletune_kernels::quant::{self, QuantFormat};
use tiletune_runtime::GgmlType;
use tiletune_runtime::config::ModelConfig;
use tiletune_runtime::gguf::GgufFile;
use tiletune_runtime::gguf::Value;
use tiletune_runtime::models::{FastModel, Model, Weight};
use tiletune_runtime::plan::{ExecutionPlan, PlanOptions};
use tiletune_runtime::problems::kernel_problems;
use tiletune_runtime::quantize::{self as q, FileType, QuantizeOptions, TensorChoice};

/// 16 layers; hidden 256 (whole q4_K super-blocks), intermediate 320 (not:
/// `ffn_down`'s rows fall back), 4 heads of 64, 2 kv heads.
fn config(tied: bool) -> ModelConfig {
    let json = format!(
        r#"{{"model_type": "qwen2", "vocab_size": 64, "hidden_size": 256, "intermediate_size": 320,
        "num_hidden_layers": 16, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "max_position_embeddings": 64,
        "tie_word_embeddings": {tied}}}"#
    );
    ModelConfig::from_hf_json(&json).unwrap()
}

/// The model's tensors in f32, or with 2-D weights stored as `store`.
fn model(cfg: &ModelConfig, store: Option<QuantFormat>) -> Vec<u8> {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.4
    };
    let mut g = common::header(cfg);
    g.kv("general.name", "quantize-test")
        .kv("general.file_type", 0u32);
    let (d, f, nh, nkv, hd, v) = (256, 320, 4, 2, 64, cfg.vocab);
    let mut add = |w: Weight, shape: &[usize]| {
        let n: usize = shape.iter().product();
        let norm = shape.len() == 1;
        let vals: Vec<f32> = (0..n).map(|_| rnd() + f32::from(u8::from(norm))).collect();
        let dims: Vec<u64> = shape.iter().rev().map(|&x| x as u64).collect();
        match store {
            Some(fmt) if !norm => {
                let ty = fmt.ggml();
                let b = quant::quantize(fmt, &vals).unwrap();
                g.tensor(&w.gguf_name(), &dims, ty, b).unwrap();
            }
            _ => {
                g.tensor_f32(&w.gguf_name(), &dims, &vals).unwrap();
            }
        }
    };
    add(Weight::TokenEmbedding, &[v, d]);
    add(Weight::OutputNorm, &[d]);
    if !cfg.tied_embeddings {
        add(Weight::Output, &[v, d]);
    }
    for l in 0..cfg.n_layers {
        add(Weight::AttnNorm(l), &[d]);
        add(Weight::Q(l), &[nh * hd, d]);
        add(Weight::K(l), &[nkv * hd, d]);
        add(Weight::V(l), &[nkv * hd, d]);
        add(Weight::QBias(l), &[nh * hd]);
        add(Weight::KBias(l), &[nkv * hd]);
        add(Weight::VBias(l), &[nkv * hd]);
        add(Weight::O(l), &[d, nh * hd]);
        add(Weight::FfnNorm(l), &[d]);
        add(Weight::Gate(l), &[f, d]);
        add(Weight::Up(l), &[f, d]);
        add(Weight::Down(l), &[d, f]);
    }
    g.to_bytes()
}

fn write(dir: &std::path::Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn choice<'a>(plan: &'a [TensorChoice], name: &str) -> &'a TensorChoice {
    plan.iter().find(|c| c.name == name).unwrap()
}

/// llama.cpp's layers with more bits for 16 layers: i < 2, i >= 14, and
/// (i - 2) % 3 == 2.
const MORE_BITS: [usize; 8] = [0, 1, 4, 7, 10, 13, 14, 15];

#[test]
fn q4_k_m_gives_each_tensor_llama_quantizes_type() {
    let dir = tempfile::tempdir().unwrap();
    let g = GgufFile::open(write(dir.path(), "f32.gguf", &model(&config(false), None))).unwrap();
    let plan = q::plan(&g, &QuantizeOptions::new(FileType::Q4_K_M)).unwrap();
    assert_eq!(choice(&plan, "output.weight").to, GgmlType::Q6_K);
    assert_eq!(choice(&plan, "token_embd.weight").to, GgmlType::Q4_K);
    assert_eq!(choice(&plan, "output_norm.weight").to, GgmlType::F32);
    for l in 0..16 {
        let more = MORE_BITS.contains(&l);
        let t = |n: &str| choice(&plan, &format!("blk.{l}.{n}.weight")).clone();
        assert_eq!(
            t("attn_v").to,
            if more { GgmlType::Q6_K } else { GgmlType::Q4_K },
            "layer {l}"
        );
        // ffn_down's rows of 320 are not whole 256-blocks: q6_K → q8_0, q4_K → q5_0.
        let down = t("ffn_down");
        assert_eq!(
            down.to,
            if more { GgmlType::Q8_0 } else { GgmlType::Q5_0 },
            "layer {l}"
        );
        assert!(down.fallback);
        for n in ["attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"] {
            assert_eq!(t(n).to, GgmlType::Q4_K, "layer {l} {n}");
            assert!(!t(n).fallback);
        }
        assert_eq!(t("attn_norm").to, GgmlType::F32);
        assert_eq!(
            choice(&plan, &format!("blk.{l}.attn_q.bias")).to,
            GgmlType::F32
        );
    }
    // Tied: the embedding is the output matrix and gets its type.
    let g = GgufFile::open(write(dir.path(), "tied.gguf", &model(&config(true), None))).unwrap();
    let plan = q::plan(&g, &QuantizeOptions::new(FileType::Q4_K_M)).unwrap();
    assert_eq!(choice(&plan, "token_embd.weight").to, GgmlType::Q6_K);
    // Q4_0 also puts the output matrix in Q6_K; Q8_0 keeps it Q8_0; --pure
    // and the type flags override.
    let plan = q::plan(&g, &QuantizeOptions::new(FileType::Q4_0)).unwrap();
    assert_eq!(choice(&plan, "token_embd.weight").to, GgmlType::Q6_K);
    assert_eq!(choice(&plan, "blk.3.ffn_down.weight").to, GgmlType::Q4_0);
    let plan = q::plan(&g, &QuantizeOptions::new(FileType::Q8_0)).unwrap();
    assert_eq!(choice(&plan, "token_embd.weight").to, GgmlType::Q8_0);
    let mut o = QuantizeOptions::new(FileType::Q4_0);
    o.pure = true;
    let plan = q::plan(&g, &o).unwrap();
    assert_eq!(choice(&plan, "token_embd.weight").to, GgmlType::Q4_0);
    o.pure = false;
    o.output_tensor_type = Some(GgmlType::Q8_0);
    let plan = q::plan(&g, &o).unwrap();
    assert_eq!(choice(&plan, "token_embd.weight").to, GgmlType::Q8_0);
    // F16 converts every weight, with no per-tensor rule.
    let plan = q::plan(&g, &QuantizeOptions::new(FileType::F16)).unwrap();
    assert!(plan.iter().all(|c| c.to
        == if c.dims.len() == 1 {
            GgmlType::F32
        } else {
            GgmlType::F16
        }));
}

#[test]
fn written_tensors_are_the_quantizers_bytes_and_the_file_runs() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(false);
    let input = write(dir.path(), "f32.gguf", &model(&cfg, None));
    let g = GgufFile::open(&input).unwrap();
    let o = QuantizeOptions::new(FileType::Q4_K_M);
    let plan = q::plan(&g, &o).unwrap();
    let out = dir.path().join("q4km.gguf");
    let mut seen = Vec::new();
    let sum = q::quantize(&g, &o, &plan, &out, |i, _| seen.push(i)).unwrap();
    assert_eq!(seen, (0..plan.len()).collect::<Vec<_>>());
    assert_eq!(sum.tensors, plan.len());
    assert_eq!(sum.fallbacks, 16);
    assert_eq!(sum.file_bytes, std::fs::metadata(&out).unwrap().len());
    let (bpw_in, bpw_out) = sum.bpw();
    assert!(
        (bpw_in - 32.0).abs() < 1e-9 && bpw_out < 6.5,
        "{bpw_in} {bpw_out}"
    );

    let w = GgufFile::open(&out).unwrap();
    for c in &plan {
        let (info, bytes) = w.tensor_data(&c.name).unwrap();
        assert_eq!(info.ggml_type, c.to, "{}", c.name);
        assert_eq!(info.dims, c.dims);
        let (_, src) = g.tensor_data(&c.name).unwrap();
        let want = match QuantFormat::of(c.to) {
            None => src.to_vec(),
            Some(fmt) => {
                let f: Vec<f32> = src
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                    .collect();
                quant::quantize(fmt, &f).unwrap()
            }
        };
        assert!(bytes == want.as_slice(), "{}: bytes differ", c.name);
    }
    // Every key is copied; the file type and quantization version are set.
    let kv = |f: &GgufFile, k: &str| {
        f.metadata()
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    for (k, v) in g.metadata() {
        if k != "general.file_type" {
            assert_eq!(kv(&w, k).as_ref(), Some(v), "{k}");
        }
    }
    assert_eq!(kv(&w, "general.file_type"), Some(Value::U32(15)));
    assert_eq!(kv(&w, "general.quantization_version"), Some(Value::U32(2)));

    // The file loads and runs on the tuned kernels as the reference decoder
    // runs it (W·A32: only summation order differs).
    let cfg_w = ModelConfig::from_gguf(&w).unwrap();
    let opts = PlanOptions {
        db: Some(dir.path().join("no-such.db")),
        threads: 2,
        qmode: Some(QMode::A32),
    };
    let plan = ExecutionPlan::build(
        &kernel_problems(&w).unwrap(),
        "test-soc",
        &Default::default(),
        &opts,
    );
    let fast = FastModel::new(&cfg_w, &w, &plan, 16).unwrap();
    let tokens = [1, 5, 9];
    let got = fast
        .forward(&tokens, &mut fast.new_state(), true)
        .unwrap()
        .to_vec();
    let reference = Model::new(&cfg_w, &w).unwrap();
    let want = reference
        .forward(&tokens, &mut reference.new_cache())
        .unwrap();
    let e = common::rel_err(&got, &want);
    assert!(e < 1e-3, "q4_K_M file, fast against reference: {e}");
}

#[test]
fn requantizing_needs_the_flag_and_bad_requests_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let input = write(
        dir.path(),
        "q8.gguf",
        &model(&config(false), Some(QuantFormat::Q8_0)),
    );
    let g = GgufFile::open(&input).unwrap();
    let mut o = QuantizeOptions::new(FileType::Q4_0);
    let e = q::plan(&g, &o).unwrap_err().to_string();
    assert!(
        e.contains("already q8_0") && e.contains("--allow-requantize"),
        "{e}"
    );
    o.allow_requantize = true;
    let plan = q::plan(&g, &o).unwrap();
    let out = dir.path().join("q4.gguf");
    q::quantize(&g, &o, &plan, &out, |_, _| {}).unwrap();
    // Requantized from the dequantized q8_0 values.
    let w = GgufFile::open(&out).unwrap();
    let (_, src) = g.tensor_data("blk.2.ffn_gate.weight").unwrap();
    let mut f = vec![0f32; 320 * 256];
    quant::dequantize(QuantFormat::Q8_0, src, &mut f).unwrap();
    let (_, got) = w.tensor_data("blk.2.ffn_gate.weight").unwrap();
    assert_eq!(
        got,
        quant::quantize(QuantFormat::Q4_0, &f).unwrap().as_slice()
    );

    let mut o = QuantizeOptions::new(FileType::Q8_0);
    o.allow_requantize = true;
    // Writing over the input is refused; a missing directory is an error
    // and leaves no file.
    let plan = q::plan(&g, &o).unwrap();
    let e = q::quantize(&g, &o, &plan, &input, |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("is the input file"), "{e}");
    let missing = dir.path().join("no/such/dir/out.gguf");
    assert!(q::quantize(&g, &o, &plan, &missing, |_, _| {}).is_err());
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with(".tiletune-write-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Q4_K_S: `attn_v` of the first four layers and `ffn_down` of the first
/// eighth in Q5_K; Q5_K_M: Q4_K_M's layers in Q6_K over Q5_K; Q5_K_S: Q5_K
/// throughout. Rows of 320 fall back as llama.cpp does (q5_K → q5_1).
#[test]
fn q4_k_s_q5_k_s_and_q5_k_m_give_llama_quantizes_types() {
    let dir = tempfile::tempdir().unwrap();
    let g = GgufFile::open(write(dir.path(), "f32.gguf", &model(&config(false), None))).unwrap();
    let plan = |ft| q::plan(&g, &QuantizeOptions::new(ft)).unwrap();
    let (ks, km, k5s) = (
        plan(FileType::Q4_K_S),
        plan(FileType::Q5_K_M),
        plan(FileType::Q5_K_S),
    );
    for p in [&ks, &km, &k5s] {
        assert_eq!(choice(p, "output.weight").to, GgmlType::Q6_K);
    }
    let pick = |c: bool, a: GgmlType, b: GgmlType| if c { a } else { b };
    for l in 0..16 {
        let t = |p: &[TensorChoice], n: &str| choice(p, &format!("blk.{l}.{n}.weight")).to;
        let more = MORE_BITS.contains(&l);
        use GgmlType::{Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0};
        assert_eq!(t(&ks, "attn_v"), pick(l < 4, Q5_K, Q4_K), "{l}");
        // 16 / 8 = 2 layers of ffn_down in Q5_K, which falls back to Q5_1.
        assert_eq!(t(&ks, "ffn_down"), pick(l < 2, Q5_1, Q5_0), "{l}");
        assert_eq!(t(&km, "attn_v"), pick(more, Q6_K, Q5_K), "{l}");
        assert_eq!(t(&km, "ffn_down"), pick(more, Q8_0, Q5_1), "{l}");
        assert_eq!(t(&k5s, "attn_v"), Q5_K, "{l}");
        assert_eq!(t(&k5s, "ffn_down"), Q5_1, "{l}");
        for n in ["attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"] {
            assert_eq!(t(&ks, n), GgmlType::Q4_K, "{l} {n}");
            assert_eq!(t(&km, n), GgmlType::Q5_K, "{l} {n}");
        }
    }
}

/// `--pure` drops the per-tensor rules but not the fallbacks: llama.cpp
/// applies `tensor_type_fallback` to every quantized type.
#[test]
fn pure_still_falls_back_where_rows_are_not_whole_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let g = GgufFile::open(write(dir.path(), "f32.gguf", &model(&config(false), None))).unwrap();
    let mut o = QuantizeOptions::new(FileType::Q4_K_M);
    o.pure = true;
    let plan = q::plan(&g, &o).unwrap();
    assert_eq!(choice(&plan, "output.weight").to, GgmlType::Q4_K);
    for l in 0..16 {
        let t = |n: &str| choice(&plan, &format!("blk.{l}.{n}.weight")).clone();
        assert_eq!(t("attn_v").to, GgmlType::Q4_K, "{l}");
        let down = t("ffn_down");
        assert_eq!((down.to, down.fallback), (GgmlType::Q5_0, true), "{l}");
    }
}

#[test]
fn types_without_a_quantizer_are_refused_by_name() {
    for t in ["Q3_K_M", "Q3_K_S", "IQ4_XS", "Q2_K", "TQ1_0"] {
        let e = FileType::parse(t).unwrap_err();
        assert!(e.contains("does not have yet"), "{t}: {e}");
    }
}
