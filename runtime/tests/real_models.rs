//! Tests on the real models (gated): set `TILETUNE_MODELS_DIR` to the folder
//! `scripts/fetch-models` prints. Without it each test prints a note and passes
//! without checking anything. The expected token ids come from Hugging Face
//! `tokenizers` (see tests/fixtures/make_tokenizer_refs.py).

use std::path::PathBuf;
use tiletune_runtime::config::{Arch, ModelConfig};
use tiletune_runtime::gguf::{GgmlType, GgufFile};
use tiletune_runtime::tokenizer::{StreamDecoder, Tokenizer};

const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const QWEN25: &str = "qwen2.5-coder-0.5b-instruct.gguf";

fn model(name: &str) -> Option<PathBuf> {
    let Some(dir) = std::env::var_os("TILETUNE_MODELS_DIR") else {
        eprintln!("skipped: TILETUNE_MODELS_DIR is not set (run scripts/fetch-models)");
        return None;
    };
    let path = PathBuf::from(dir).join(name);
    assert!(
        path.exists(),
        "{} is missing; run scripts/fetch-models",
        path.display()
    );
    Some(path)
}

#[test]
fn smollm2_config_and_tensors() {
    let Some(path) = model(SMOLLM2) else { return };
    let g = GgufFile::open(&path).unwrap();
    let c = ModelConfig::from_gguf(&g).unwrap();
    assert_eq!(c.arch, Arch::Llama);
    assert_eq!(
        (c.vocab, c.hidden, c.intermediate, c.n_layers),
        (49152, 576, 1536, 30)
    );
    assert_eq!((c.n_heads, c.n_kv_heads, c.head_dim), (9, 3, 64));
    assert_eq!(c.rope_theta, 100_000.0);
    assert!((c.rms_eps - 1e-5).abs() < 1e-9);
    assert_eq!(c.max_pos, 8192);
    assert!(c.tied_embeddings && !c.qkv_bias && !c.qk_norm);
    assert_eq!((c.bos_id, c.eos_ids.as_slice()), (Some(1), &[2][..]));
    assert_eq!(g.tensors().len(), 272);
    let (info, data) = g.tensor_data("blk.0.attn_q.weight").unwrap();
    assert_eq!(
        (info.ggml_type, info.dims.as_slice()),
        (GgmlType::Q4_1, &[576, 576][..])
    );
    assert_eq!(data.len(), 576 * 576 / 32 * 20);
    assert_eq!(
        g.tensor_info("token_embd.weight").unwrap().ggml_type,
        GgmlType::Q8_0
    );
}

#[test]
fn qwen25_config_and_tensors() {
    let Some(path) = model(QWEN25) else { return };
    let g = GgufFile::open(&path).unwrap();
    let c = ModelConfig::from_gguf(&g).unwrap();
    assert_eq!(c.arch, Arch::Qwen2);
    assert_eq!(
        (c.vocab, c.hidden, c.intermediate, c.n_layers),
        (151936, 896, 4864, 24)
    );
    assert_eq!((c.n_heads, c.n_kv_heads, c.head_dim), (14, 2, 64));
    assert_eq!(c.rope_theta, 1_000_000.0);
    assert!(!c.tied_embeddings && c.qkv_bias && !c.qk_norm);
    assert_eq!(c.eos_ids, [151645]);
    let types: std::collections::HashSet<GgmlType> =
        g.tensors().iter().map(|t| t.ggml_type).collect();
    for t in [
        GgmlType::Q5_0,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::F32,
    ] {
        assert!(types.contains(&t), "{t}");
    }
}

fn check_tokenizer(name: &str) {
    let Some(path) = model(name) else { return };
    let g = GgufFile::open(&path).unwrap();
    let tok = Tokenizer::from_gguf(&g).unwrap();
    let refs: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/tokenizer_refs.json")).unwrap();
    let m = &refs["models"][name];
    assert_eq!(tok.vocab_size() as u64, m["vocab"].as_u64().unwrap());
    assert_eq!(tok.pre_tokenizer().name(), m["pre"].as_str().unwrap());
    for case in m["cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let want: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let got = tok.encode(text, false, true).unwrap();
        assert_eq!(got, want, "{name}: {text:?}");
        assert_eq!(tok.decode(&got, false), text);
        // Streaming decode gives the same text without broken characters.
        let mut d = StreamDecoder::new();
        let mut s: String = got
            .iter()
            .map(|&id| tok.decode_stream(&mut d, id, false))
            .collect();
        s.push_str(&d.flush());
        assert_eq!(s, text);
    }
}

#[test]
fn smollm2_tokenizer_matches_hf() {
    check_tokenizer(SMOLLM2);
}

#[test]
fn qwen25_tokenizer_matches_hf() {
    check_tokenizer(QWEN25);
}

fn check_chat(name: &str) {
    use tiletune_runtime::chat::{ChatTemplate, Message};
    let Some(path) = model(name) else { return };
    let g = GgufFile::open(&path).unwrap();
    let tok = Tokenizer::from_gguf(&g).unwrap();
    let t = ChatTemplate::from_gguf(&g, &tok).unwrap();
    assert!(!t.is_fallback());
    let refs: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/chat_refs.json")).unwrap();
    for case in refs["models"][name].as_array().unwrap() {
        let msgs: Vec<Message> = case["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| Message::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
            .collect();
        let add_gen = case["add_generation_prompt"].as_bool().unwrap();
        assert_eq!(
            t.render(&msgs, add_gen).unwrap(),
            case["text"].as_str().unwrap(),
            "{name}: {msgs:?}"
        );
    }
}

#[test]
fn smollm2_chat_template_matches_jinja2() {
    check_chat(SMOLLM2);
}

#[test]
fn qwen25_chat_template_matches_jinja2() {
    check_chat(QWEN25);
}

/// The reference decoder on a real GGUF against an independent numpy forward
/// (tests/fixtures/make_{smollm2,qwen25}_refs.py): argmax at every prompt
/// position, the largest logits of the last one, and the greedy continuation.
fn check_reference_forward(name: &str, refs: &str) {
    use tiletune_runtime::models::Model;
    use tiletune_runtime::sampling::{Sampler, SamplerConfig};
    let Some(path) = model(name) else { return };
    let refs: serde_json::Value = serde_json::from_str(refs).unwrap();
    let ids = |k: &str| -> Vec<u32> {
        refs[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect()
    };
    let g = GgufFile::open(&path).unwrap();
    let cfg = ModelConfig::from_gguf(&g).unwrap();
    let tok = Tokenizer::from_gguf(&g).unwrap();
    let prompt = tok
        .encode(refs["prompt"].as_str().unwrap(), false, true)
        .unwrap();
    assert_eq!(prompt, ids("token_ids"));
    let model = Model::new(&cfg, &g).unwrap();
    let mut cache = model.new_cache();
    let logits = model.forward(&prompt, &mut cache).unwrap();
    let v = cfg.vocab;
    let argmax: Vec<u32> = logits
        .chunks_exact(v)
        .map(|row| {
            row.iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .unwrap()
                .0 as u32
        })
        .collect();
    assert_eq!(argmax, ids("argmax_per_position"));
    let last = &logits[(prompt.len() - 1) * v..];
    let top_ids = ids("last_top_ids");
    let top_vals: Vec<f32> = refs["last_top_logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    let scale = top_vals[0].abs().max(1.0);
    for (&id, &want) in top_ids.iter().zip(&top_vals) {
        let err = (last[id as usize] - want).abs();
        // f32 through every layer vs numpy: 2e-3 of the largest logit.
        assert!(
            err <= 2e-3 * scale,
            "token {id}: {} vs {want}",
            last[id as usize]
        );
    }
    let mut sampler = Sampler::new(SamplerConfig::greedy()).unwrap();
    let mut next = sampler.sample(last, &prompt).unwrap();
    let mut generated = vec![next];
    while generated.len() < ids("greedy_ids").len() {
        let l = model.forward(&[next], &mut cache).unwrap();
        next = sampler.sample(&l, &[]).unwrap();
        generated.push(next);
    }
    assert_eq!(generated, ids("greedy_ids"));
    assert_eq!(
        tok.decode(&generated, false),
        refs["greedy_text"].as_str().unwrap()
    );
}

#[test]
fn smollm2_reference_forward_matches_numpy() {
    check_reference_forward(SMOLLM2, include_str!("fixtures/smollm2_refs.json"));
}

#[test]
fn qwen25_reference_forward_matches_numpy() {
    check_reference_forward(QWEN25, include_str!("fixtures/qwen25_refs.json"));
}

/// `tiletune plan` prints what runs, on SmolLM2: a prefill (64-row bucket)
/// and a decode step record the kernel every linear-layer call ran, equal
/// to the plan's entry, with the default plan and with a conflicting table
/// (decode at the scalar GEMM's interleave 4, prefill at 8: the layout rule
/// moves prefill to 4 and says so).
#[test]
fn smollm2_the_plan_is_what_runs() {
    use tiletune_kernels::{CpuCaps, KERNEL_ABI};
    use tiletune_runtime::models::FastModel;
    use tiletune_runtime::plan::{ExecutionPlan, PlanOptions};
    use tiletune_runtime::problems::kernel_problems;
    use tiletune_tables::{Candidate, Selection, SelectorDb, SocRecord};
    let Some(path) = model(SMOLLM2) else { return };
    let g = GgufFile::open(&path).unwrap();
    let cfg = ModelConfig::from_gguf(&g).unwrap();
    let problems = kernel_problems(&g).unwrap();
    let dir = std::env::temp_dir().join(format!("tt-real-plan-runs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db_path = dir.join("conflict.db");
    {
        let mut db = SelectorDb::open(&db_path).unwrap();
        db.register_soc(&SocRecord {
            fingerprint: "real-soc".into(),
            name: "test".into(),
            probe: serde_json::json!({}),
            first_seen: 0,
        })
        .unwrap();
        for p in problems.iter().filter(|p| p.dtype() == "q4_1") {
            let (mr, nr) = if p.op() == "gemv" { (1, 4) } else { (4, 8) };
            db.put_selection(&Selection {
                soc: "real-soc".into(),
                kernel_abi: KERNEL_ABI,
                problem: p.clone(),
                thread_budget: 2,
                winner: Candidate::new(
                    "scalar.qgemm",
                    serde_json::json!({"mr": mr, "nr": nr, "pf": 0, "ku": 1}),
                    2,
                )
                .unwrap(),
                median_ns: 1.0,
                default_ns: None,
                speedup: None,
                campaign: None,
                selected_at: 0,
            })
            .unwrap();
        }
    }
    let tokens: Vec<u32> = (0..20).map(|i| 100 + i * 37).collect();
    for db in [dir.join("none.db"), db_path] {
        let opts = PlanOptions {
            db: Some(db.clone()),
            threads: 2,
            qmode: None,
        };
        let plan = ExecutionPlan::build(&problems, "real-soc", &CpuCaps::default(), &opts);
        let conflicts = plan
            .entries
            .iter()
            .filter(|e| {
                e.note
                    .as_deref()
                    .is_some_and(|n| n.starts_with("conflict:"))
            })
            .count();
        let fast = FastModel::new(&cfg, &g, &plan, 64).unwrap();
        let mut st = fast.new_state();
        st.record_calls();
        fast.forward(&tokens[..19], &mut st, false).unwrap();
        fast.forward(&tokens[19..], &mut st, false).unwrap();
        let calls = st.take_calls();
        // 30 layers × 4 calls (q, k and v stacked; o; gate and up
        // stacked; down) + the tied LM head, two passes.
        assert_eq!(calls.len(), 2 * (30 * 4 + 1), "{}", db.display());
        for c in &calls {
            let p = c.problem();
            let e = plan.get(&p).unwrap();
            assert_eq!(
                c.kernel, e.kernel,
                "{p}: ran {} but the plan says {}",
                c.kernel, e.kernel
            );
        }
        if db.ends_with("conflict.db") {
            // Every q4_1 prefill bucket conflicts with decode's layout.
            assert_eq!(conflicts, 3 * 4, "{plan}");
            assert!(calls.iter().any(|c| c.kernel.variant() == "scalar.qgemm"));
        } else {
            assert_eq!(conflicts, 0, "{plan}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
