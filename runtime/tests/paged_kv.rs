//! The fast decoder's paged KV cache: f32, f16 and Q8_0 pages against the
//! reference decoder, prefill-then-decode against one long prefill, and
//! `truncate`/`reset` (a chat rewinding a turn) against a fresh state, on
//! tiny random GGUF models built here. Pages are made small (16 tokens,
//! from a 4 KiB L1D in the plan's caches) so every sequence spans several
//! pages and its last page is partial.
//!
//! Tolerances, as max |Δlogit| relative to the largest |logit|: against the
//! reference decoder, f32 pages 1e-4 (as the other fast-model tests: only
//! summation order differs), f16 pages 5e-3 (keys and values rounded to
//! 11-bit mantissas), Q8_0 pages 5e-2 (a step of amax/127 per 32 values).
//! Chunked prefill + decode against one prefill (GEMV and GEMM paths give
//! keys and values that differ in the last bits, which can move a cached
//! value by one rounding step): f32 pages 1e-4, f16 1e-3, Q8_0 2e-3 (seen:
//! 1e-6, 4e-5, 2e-4). A rewound state and a fresh one run the very same
//! kernels on the same data, so they agree to 1e-6.

mod common;
use common::rel_err;
use tiletune_kernels::CpuCaps;
use tiletune_kernels::attention::KvDtype;
use tiletune_kernels::qgemv::QMode;
use tiletune_runtime::config::{Arch, ModelConfig};
use tiletune_runtime::gguf::GgufFile;
use tiletune_runtime::models::{FastModel, Model, Weight};
use tiletune_runtime::plan::{ExecutionPlan, PlanOptions};
use tiletune_runtime::problems::kernel_problems;

fn config(arch: Arch, hd: usize) -> ModelConfig {
    let json = format!(
        r#"{{"model_type": "{}", "vocab_size": 50, "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": {hd},
        "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "max_position_embeddings": 64,
        "tie_word_embeddings": {}}}"#,
        arch.gguf_name(),
        arch != Arch::Llama
    );
    ModelConfig::from_hf_json(&json).unwrap()
}

/// A random f32 GGUF model for `cfg`.
fn gguf(cfg: &ModelConfig, seed: u64) -> GgufFile {
    let mut s = seed;
    let mut rnd = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.4
    };
    let (d, f, hd, nh, nkv, v) = (
        cfg.hidden,
        cfg.intermediate,
        cfg.head_dim,
        cfg.n_heads,
        cfg.n_kv_heads,
        cfg.vocab,
    );
    let mut g = common::header(cfg);
    let mut add = |w: Weight, shape: &[usize], norm: bool| {
        let n: usize = shape.iter().product();
        let vals: Vec<f32> = (0..n)
            .map(|_| if norm { 1.0 + rnd() } else { rnd() })
            .collect();
        let dims: Vec<u64> = shape.iter().rev().map(|&x| x as u64).collect();
        g.tensor_f32(&w.gguf_name(), &dims, &vals).unwrap();
    };
    add(Weight::TokenEmbedding, &[v, d], false);
    add(Weight::OutputNorm, &[d], true);
    if !cfg.tied_embeddings {
        add(Weight::Output, &[v, d], false);
    }
    for l in 0..cfg.n_layers {
        add(Weight::AttnNorm(l), &[d], true);
        add(Weight::Q(l), &[nh * hd, d], false);
        add(Weight::K(l), &[nkv * hd, d], false);
        add(Weight::V(l), &[nkv * hd, d], false);
        add(Weight::O(l), &[d, nh * hd], false);
        if cfg.qkv_bias {
            add(Weight::QBias(l), &[nh * hd], false);
            add(Weight::KBias(l), &[nkv * hd], false);
            add(Weight::VBias(l), &[nkv * hd], false);
        }
        if cfg.qk_norm {
            add(Weight::QNorm(l), &[hd], true);
            add(Weight::KNorm(l), &[hd], true);
        }
        add(Weight::FfnNorm(l), &[d], true);
        add(Weight::Gate(l), &[f, d], false);
        add(Weight::Up(l), &[f, d], false);
        add(Weight::Down(l), &[d, f], false);
    }
    GgufFile::from_vec(g.to_bytes()).unwrap()
}

/// The fast model with default kernels on 2 threads and a 4 KiB L1D, which
/// makes the default page 16 tokens for these head sizes.
fn fast(cfg: &ModelConfig, g: &GgufFile, dtype: KvDtype) -> FastModel {
    let db = std::env::temp_dir().join("tiletune-paged-kv-tests-no-such.db");
    let opts = PlanOptions {
        db: Some(db),
        threads: 2,
        qmode: Some(QMode::A32),
    };
    let caps = CpuCaps {
        l1d: 4 << 10,
        ..CpuCaps::default()
    };
    let plan = ExecutionPlan::build(&kernel_problems(g).unwrap(), "test-soc", &caps, &opts);
    FastModel::new(cfg, g, &plan, 64)
        .unwrap()
        .with_kv_dtype(dtype)
        .unwrap()
}

fn tokens(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i * 7 + seed * 13 + 3) % 50)
        .collect()
}

const ARCHS: [Arch; 3] = [Arch::Llama, Arch::Qwen2, Arch::Qwen3];

fn tolerance(dtype: KvDtype) -> f32 {
    match dtype {
        KvDtype::F32 => 1e-4,
        KvDtype::F16 => 5e-3,
        KvDtype::Q8_0 => 5e-2,
    }
}

#[test]
fn every_page_dtype_matches_the_reference() {
    let toks = tokens(45, 1);
    for arch in ARCHS {
        let cfg = config(arch, 32);
        let g = gguf(&cfg, 11);
        let reference = Model::new(&cfg, &g).unwrap();
        let want = reference
            .forward(&toks, &mut reference.new_cache())
            .unwrap();
        for dtype in KvDtype::ALL {
            let m = fast(&cfg, &g, dtype);
            let mut st = m.new_state();
            assert_eq!((st.kv_dtype(), st.page_size()), (dtype, 16));
            let got = m.forward(&toks, &mut st, true).unwrap().to_vec();
            let e = rel_err(&got, &want);
            assert!(e <= tolerance(dtype), "{arch:?} {dtype:?} prefill: {e}");
            // Token by token after a 5-token prefill.
            let mut st = m.new_state();
            let mut dec = m.forward(&toks[..5], &mut st, true).unwrap().to_vec();
            for t in &toks[5..] {
                dec.extend_from_slice(m.forward(&[*t], &mut st, false).unwrap());
            }
            let e = rel_err(&dec, &want);
            assert!(e <= tolerance(dtype), "{arch:?} {dtype:?} decode: {e}");
        }
    }
}

/// Prefill in pieces (crossing page boundaries), then decode, equals one
/// prefill of everything.
#[test]
fn prefill_then_decode_equals_one_long_prefill() {
    let toks = tokens(60, 2);
    for arch in ARCHS {
        let cfg = config(arch, 32);
        let g = gguf(&cfg, 12);
        for dtype in KvDtype::ALL {
            let m = fast(&cfg, &g, dtype);
            let vocab = cfg.vocab;
            let whole = m.forward(&toks, &mut m.new_state(), true).unwrap().to_vec();
            let mut st = m.new_state();
            let mut got = Vec::new();
            for (a, b) in [(0, 7), (7, 16), (16, 35), (35, 40)] {
                got.extend_from_slice(m.forward(&toks[a..b], &mut st, true).unwrap());
            }
            for t in &toks[40..] {
                got.extend_from_slice(m.forward(&[*t], &mut st, false).unwrap());
            }
            assert_eq!(got.len(), toks.len() * vocab);
            assert_eq!(st.len(), toks.len());
            let e = rel_err(&got, &whole);
            let tol = match dtype {
                KvDtype::F32 => 1e-4,
                KvDtype::F16 => 1e-3,
                KvDtype::Q8_0 => 2e-3,
            };
            assert!(e <= tol, "{arch:?} {dtype:?}: {e}");
        }
    }
}

/// A chat rewinds a turn with `truncate` and starts over with `reset`:
/// what runs next must see exactly the kept positions.
#[test]
fn truncate_and_reset_rewind_the_cache() {
    let cfg = config(Arch::Qwen3, 32);
    let g = gguf(&cfg, 13);
    let (a, b, c) = (tokens(21, 3), tokens(19, 4), tokens(12, 5));
    for dtype in KvDtype::ALL {
        let m = fast(&cfg, &g, dtype);
        // Fresh: a then c.
        let mut fresh = m.new_state();
        m.forward(&a, &mut fresh, false).unwrap();
        let want = m.forward(&c, &mut fresh, true).unwrap().to_vec();
        // a, then b (into a third page), rewound to a (mid-page), then c.
        let mut st = m.new_state();
        m.forward(&a, &mut st, false).unwrap();
        m.forward(&b, &mut st, false).unwrap();
        assert_eq!(st.len(), 40);
        st.truncate(100);
        assert_eq!(st.len(), 40, "truncating past the end changes nothing");
        st.truncate(a.len());
        assert_eq!(st.len(), a.len());
        let got = m.forward(&c, &mut st, true).unwrap().to_vec();
        let e = rel_err(&got, &want);
        assert!(e <= 1e-6, "{dtype:?} truncate: {e}");
        // Rewind into the middle of `a` and run the rest of it plus c.
        st.truncate(9);
        let mut rest = a[9..].to_vec();
        rest.extend_from_slice(&c);
        let got = m.forward(&rest, &mut st, true).unwrap().to_vec();
        let mut whole_st = m.new_state();
        m.forward(&a[..9], &mut whole_st, false).unwrap();
        let want_rest = m.forward(&rest, &mut whole_st, true).unwrap().to_vec();
        // The rewound positions' K/V were computed in a longer prefill than
        // `whole_st`'s, another GEMM tiling, so they differ in the last bits;
        // musl's libm (the static device build) rounds differently from
        // glibc's and lands at 1.03e-6 here, glibc's below 1e-6.
        let e = rel_err(&got, &want_rest);
        assert!(e <= 2e-6, "{dtype:?} truncate mid-prompt: {e}");
        // Reset, then the same as a fresh state; the whole context fits again.
        st.reset();
        assert!(st.is_empty());
        m.forward(&a, &mut st, false).unwrap();
        let got = m.forward(&c, &mut st, true).unwrap().to_vec();
        assert!(rel_err(&got, &want) <= 1e-6, "{dtype:?} reset");
        st.reset();
        assert!(m.forward(&tokens(64, 6), &mut st, false).is_ok());
        assert_eq!(st.len(), st.capacity());
    }
}

#[test]
fn q8_0_pages_need_head_dim_a_multiple_of_32() {
    let cfg = config(Arch::Llama, 16);
    let g = gguf(&cfg, 14);
    let db = std::env::temp_dir().join("tiletune-paged-kv-tests-no-such.db");
    let opts = PlanOptions {
        db: Some(db),
        threads: 1,
        qmode: None,
    };
    let plan = ExecutionPlan::build(
        &kernel_problems(&g).unwrap(),
        "test-soc",
        &CpuCaps::default(),
        &opts,
    );
    let m = FastModel::new(&cfg, &g, &plan, 16).unwrap();
    assert_eq!(m.kv_dtype(), KvDtype::F32, "the library default");
    let err = m.clone().with_kv_dtype(KvDtype::Q8_0).unwrap_err();
    assert!(err.to_string().contains("multiple of 32"), "{err}");
    let m = m.with_kv_dtype(KvDtype::F16).unwrap();
    assert!(m.forward(&[1, 2, 3], &mut m.new_state(), false).is_ok());
}

/// On SmolLM2 (head_dim 64, 3 query heads per KV head, real page sizes), a
/// 100-token prefill of the fast model with each page dtype against the
/// reference decoder (W·A32, so only the cache and summation order differ).
#[test]
fn smollm2_long_prefill_matches_reference() {
    let Some(dir) = std::env::var_os("TILETUNE_MODELS_DIR") else {
        eprintln!("skipped: TILETUNE_MODELS_DIR is not set");
        return;
    };
    let path = std::path::Path::new(&dir).join("SmolLM2-135M-Instruct.Q4_1.gguf");
    let g = GgufFile::open(&path).unwrap();
    let cfg = ModelConfig::from_gguf(&g).unwrap();
    let toks: Vec<u32> = (0..100u32)
        .map(|i| (i * 7919 + 13) % cfg.vocab as u32)
        .collect();
    let reference = Model::new(&cfg, &g).unwrap();
    let want = reference
        .forward(&toks, &mut reference.new_cache())
        .unwrap();
    let opts = PlanOptions {
        db: Some(std::env::temp_dir().join("tiletune-paged-kv-tests-no-such.db")),
        threads: 2,
        qmode: Some(QMode::A32),
    };
    let (_, caps) = tiletune_runtime::plan::this_soc();
    let plan = ExecutionPlan::build(&kernel_problems(&g).unwrap(), "test-soc", &caps, &opts);
    for dtype in KvDtype::ALL {
        let m = FastModel::new(&cfg, &g, &plan, 128)
            .unwrap()
            .with_kv_dtype(dtype)
            .unwrap();
        let got = m.forward(&toks, &mut m.new_state(), true).unwrap().to_vec();
        let e = rel_err(&got, &want);
        eprintln!("{dtype:?}: {e}");
        assert!(e <= tolerance(dtype), "{dtype:?}: {e}");
    }
}
