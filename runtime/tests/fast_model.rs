//! The fast decoder ([`FastModel`], kernels + execution plan) against the
//! reference decoder on tiny random GGUF models built here, in f32, f16 and
//! quantized forms, and (gated by `TILETUNE_MODELS_DIR`) on SmolLM2.
//!
//! Tolerances, as max |Δlogit| relative to the largest |logit|: f32/f16 and
//! quantized W·A32 1e-4 (same weights, only summation order differs);
//! quantized W·A8 5e-2 (activations rounded to 8 bits per block).

mod common;
use common::rel_err;
use tiletune_kernels::CpuCaps;
use tiletune_kernels::qgemv::QMode;
use tiletune_kernels::quant::{self, QuantFormat};
use tiletune_runtime::GgmlType;
use tiletune_runtime::config::{Arch, ModelConfig};
use tiletune_runtime::gguf::GgufFile;
use tiletune_runtime::models::{FastModel, Model, Weight};
use tiletune_runtime::plan::{ExecutionPlan, PlanOptions};
use tiletune_runtime::problems::kernel_problems;

struct Rng(u64);
impl Rng {
    fn f(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.4
    }
}

fn config(arch: Arch, hidden: usize, inter: usize, hd: usize) -> ModelConfig {
    let json = format!(
        r#"{{"model_type": "{}", "vocab_size": 50, "hidden_size": {hidden}, "intermediate_size": {inter},
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": {hd},
        "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "max_position_embeddings": 64,
        "tie_word_embeddings": {}}}"#,
        arch.gguf_name(),
        arch != Arch::Llama
    );
    ModelConfig::from_hf_json(&json).unwrap()
}

/// How the 2-D weights are stored.
#[derive(Clone, Copy, Debug)]
enum Store {
    F32,
    F16,
    Q(QuantFormat),
}

/// A random GGUF model for `cfg` with 2-D weights stored as `store`.
fn gguf(cfg: &ModelConfig, store: Store, seed: u64) -> GgufFile {
    let mut rng = Rng(seed);
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
            .map(|_| if norm { 1.0 + rng.f() } else { rng.f() })
            .collect();
        let dims: Vec<u64> = shape.iter().rev().map(|&x| x as u64).collect();
        let name = w.gguf_name();
        match (shape.len(), store) {
            (1, _) | (_, Store::F32) => {
                g.tensor_f32(&name, &dims, &vals).unwrap();
            }
            (_, Store::F16) => {
                let b = vals
                    .iter()
                    .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
                    .collect();
                g.tensor(&name, &dims, GgmlType::F16, b).unwrap();
            }
            (_, Store::Q(fmt)) => {
                let b = quant::quantize(fmt, &vals).unwrap();
                let ty = fmt.ggml();
                g.tensor(&name, &dims, ty, b).unwrap();
            }
        }
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

fn plan_for(g: &GgufFile, qmode: Option<QMode>) -> ExecutionPlan {
    let db = std::env::temp_dir().join("tiletune-fast-model-tests-no-such.db");
    let opts = PlanOptions {
        db: Some(db),
        threads: 2,
        qmode,
    };
    ExecutionPlan::build(
        &kernel_problems(g).unwrap(),
        "test-soc",
        &CpuCaps::default(),
        &opts,
    )
}

const TOKENS: [u32; 7] = [3, 17, 42, 0, 49, 17, 8];

/// Prefill logits of every position, then chunked decode, against the reference.
fn check(cfg: &ModelConfig, store: Store, qmode: Option<QMode>, tol: f32) {
    let g = gguf(cfg, store, 7);
    let reference = Model::new(cfg, &g).unwrap();
    let want = reference
        .forward(&TOKENS, &mut reference.new_cache())
        .unwrap();
    let plan = plan_for(&g, qmode);
    let fast = FastModel::new(cfg, &g, &plan, 32).unwrap();
    let mut st = fast.new_state();
    let got = fast.forward(&TOKENS, &mut st, true).unwrap().to_vec();
    let e = rel_err(&got, &want);
    assert!(e <= tol, "{:?} {store:?} {qmode:?} prefill: {e}", cfg.arch);
    // 3 tokens of prefill, then one at a time: the last logits of each call.
    let mut st = fast.new_state();
    let vocab = cfg.vocab;
    let mut chunked = fast.forward(&TOKENS[..3], &mut st, true).unwrap().to_vec();
    for t in &TOKENS[3..] {
        chunked.extend_from_slice(fast.forward(&[*t], &mut st, false).unwrap());
    }
    assert_eq!(chunked.len(), TOKENS.len() * vocab);
    let e = rel_err(&chunked, &want);
    assert!(e <= tol, "{:?} {store:?} {qmode:?} decode: {e}", cfg.arch);
    assert_eq!(st.len(), TOKENS.len());
}

#[test]
fn f32_and_f16_match_reference() {
    for arch in [Arch::Llama, Arch::Qwen2, Arch::Qwen3] {
        let cfg = config(arch, 24, 40, if arch == Arch::Qwen3 { 8 } else { 6 });
        check(&cfg, Store::F32, None, 1e-4);
        check(&cfg, Store::F16, None, 1e-4);
    }
}

#[test]
fn legacy_quants_match_reference() {
    for arch in [Arch::Llama, Arch::Qwen2] {
        let cfg = config(arch, 64, 96, 16);
        for fmt in [QuantFormat::Q4_0, QuantFormat::Q4_1, QuantFormat::Q8_0] {
            check(&cfg, Store::Q(fmt), Some(QMode::A32), 1e-4);
            check(&cfg, Store::Q(fmt), Some(QMode::A8), 5e-2);
        }
    }
}

#[test]
fn k_quants_match_reference() {
    let cfg = config(Arch::Llama, 256, 256, 64);
    for fmt in [QuantFormat::Q4K, QuantFormat::Q6K] {
        check(&cfg, Store::Q(fmt), Some(QMode::A32), 1e-4);
        check(&cfg, Store::Q(fmt), Some(QMode::A8), 5e-2);
    }
}

#[test]
fn bad_inputs_are_errors() {
    let cfg = config(Arch::Qwen2, 24, 40, 6);
    let g = gguf(&cfg, Store::F32, 3);
    let fast = FastModel::new(&cfg, &g, &plan_for(&g, None), 8).unwrap();
    let mut st = fast.new_state();
    assert!(fast.forward(&[50], &mut st, false).is_err());
    assert!(fast.forward(&[], &mut st, false).is_err());
    assert!(fast.forward(&[1; 9], &mut st, false).is_err());
    assert!(fast.forward(&[1; 8], &mut st, false).is_ok());
    assert!(fast.forward(&[1], &mut st, false).is_err());
    st.reset();
    assert!(fast.forward(&[1], &mut st, false).is_ok());
}

/// A raised stop flag ends a pass before its first layer and leaves the state
/// as it was: the next pass continues as if the stopped one never ran.
#[test]
fn a_stopped_pass_leaves_the_state_as_it_was() {
    use std::sync::atomic::AtomicBool;
    let cfg = config(Arch::Qwen3, 24, 40, 8);
    let g = gguf(&cfg, Store::F32, 5);
    let fast = FastModel::new(&cfg, &g, &plan_for(&g, None), 32).unwrap();
    let mut want_st = fast.new_state();
    fast.forward(&TOKENS[..3], &mut want_st, false).unwrap();
    let want = fast
        .forward(&TOKENS[3..], &mut want_st, true)
        .unwrap()
        .to_vec();

    let mut st = fast.new_state();
    fast.forward(&TOKENS[..3], &mut st, false).unwrap();
    let raised = AtomicBool::new(true);
    let stopped = fast.forward_unless(&TOKENS[3..], &mut st, true, &raised);
    assert!(stopped.unwrap().is_none());
    assert_eq!(st.len(), 3);
    let lowered = AtomicBool::new(false);
    let got = fast
        .forward_unless(&TOKENS[3..], &mut st, true, &lowered)
        .unwrap()
        .expect("a lowered flag runs the pass")
        .to_vec();
    assert_eq!(got, want);
    assert_eq!(st.len(), TOKENS.len());
}

/// Greedy tokens of the fast model (W·A32) equal the reference model's on
/// SmolLM2 for a short prompt.
#[test]
fn smollm2_greedy_matches_reference() {
    let Some(dir) = std::env::var_os("TILETUNE_MODELS_DIR") else {
        eprintln!("skipped: TILETUNE_MODELS_DIR is not set");
        return;
    };
    let path = std::path::Path::new(&dir).join("SmolLM2-135M-Instruct.Q4_1.gguf");
    let g = GgufFile::open(&path).unwrap();
    let cfg = ModelConfig::from_gguf(&g).unwrap();
    let tok = tiletune_runtime::tokenizer::Tokenizer::from_gguf(&g).unwrap();
    let prompt = tok.encode("The capital of France is", true, false).unwrap();
    let argmax = |l: &[f32]| {
        l.iter()
            .enumerate()
            .fold((0, f32::MIN), |b, (i, &v)| if v > b.1 { (i, v) } else { b })
            .0 as u32
    };
    let steps = 6;
    let reference = Model::new(&cfg, &g).unwrap();
    let mut cache = reference.new_cache();
    let mut want = Vec::new();
    let mut l = reference.forward(&prompt, &mut cache).unwrap();
    for _ in 0..steps {
        let t = argmax(&l[l.len() - cfg.vocab..]);
        want.push(t);
        l = reference.forward(&[t], &mut cache).unwrap();
    }
    let plan = plan_for(&g, Some(QMode::A32));
    let fast = FastModel::new(&cfg, &g, &plan, 64).unwrap();
    let mut st = fast.new_state();
    let mut got = Vec::new();
    let mut t = argmax(fast.forward(&prompt, &mut st, false).unwrap());
    for _ in 0..steps {
        got.push(t);
        t = argmax(fast.forward(&[t], &mut st, false).unwrap());
    }
    assert_eq!(got, want);
}

/// A [`Generator`] stepped by hand gives what [`generate_fast`] gives and
/// what a hand-written greedy loop over `forward` gives, bit for bit; its
/// stop conditions (token budget, end-of-generation id, full context) end
/// it on the token that met them, and `take_logits` hands over exactly the
/// logits the pass returned.
#[test]
fn a_generator_steps_as_generate_runs() {
    use tiletune_runtime::models::{Generator, generate_fast};
    use tiletune_runtime::sampling::{Sampler, SamplerConfig, StopCriteria, StopReason};
    let cfg = config(Arch::Qwen3, 24, 40, 8);
    let g = gguf(&cfg, Store::F32, 11);
    let fast = FastModel::new(&cfg, &g, &plan_for(&g, None), 16).unwrap();
    let greedy = || Sampler::new(SamplerConfig::greedy()).unwrap();
    let argmax = |l: &[f32]| {
        l.iter()
            .enumerate()
            .fold(
                (0, f32::NEG_INFINITY),
                |b, (i, &x)| if x > b.1 { (i, x) } else { b },
            )
            .0 as u32
    };

    // By hand: the prompt, then one token at a time.
    let mut st = fast.new_state();
    let mut want = vec![argmax(fast.forward(&TOKENS[..4], &mut st, false).unwrap())];
    let mut want_logits = Vec::new();
    for _ in 0..4 {
        let l = fast
            .forward(&[*want.last().unwrap()], &mut st, false)
            .unwrap();
        want_logits.push(l.to_vec());
        want.push(argmax(l));
    }

    let mut st = fast.new_state();
    let mut steps =
        Generator::new(&TOKENS[..4], greedy(), StopCriteria::new(vec![], vec![], 5)).unwrap();
    let mut got = Vec::new();
    let mut seen = Vec::new();
    while let Some(step) = steps
        .next_token(&fast, None, &mut st, |l| seen.push(l.to_vec()))
        .unwrap()
    {
        assert!(step.text.is_empty(), "no tokenizer, no text");
        got.push(step.token.unwrap());
        assert_eq!(step.stop.is_some(), got.len() == 5, "{step:?}");
    }
    assert_eq!(got, want);
    assert_eq!(seen[1..], want_logits[..]);
    assert_eq!(steps.stopped(), Some(StopReason::MaxTokens));
    // The last sampled token is not run: the state holds all but it.
    assert_eq!(st.len(), 4 + 4);
    assert!(
        steps
            .next_token(&fast, None, &mut st, |_| {})
            .unwrap()
            .is_none()
    );

    let mut st = fast.new_state();
    let res = generate_fast(
        &fast,
        None,
        &mut st,
        &TOKENS[..4],
        &mut greedy(),
        &mut StopCriteria::new(vec![], vec![], 5),
        |_| {},
        |_| {},
    )
    .unwrap();
    assert_eq!(res.tokens, want);
    assert_eq!(res.stop, StopReason::MaxTokens);

    // An end-of-generation id stops on (and keeps) the first token that is it.
    let k = (1..want.len())
        .find(|&i| !want[..i].contains(&want[i]))
        .expect("greedy tokens that are not all one id");
    let mut st = fast.new_state();
    let mut steps = Generator::new(
        &TOKENS[..4],
        greedy(),
        StopCriteria::new(vec![want[k]], vec![], 99),
    )
    .unwrap();
    while steps
        .next_token(&fast, None, &mut st, |_| {})
        .unwrap()
        .is_some()
    {}
    assert_eq!(steps.tokens(), &want[..=k]);
    assert_eq!(steps.stopped(), Some(StopReason::Eog));

    // A full context stops it: 16 positions, a 14-token prompt, then the
    // first sampled token (position 15) and the second (16, not run).
    let mut st = fast.new_state();
    let mut steps =
        Generator::new(&[1; 14], greedy(), StopCriteria::new(vec![], vec![], 99)).unwrap();
    while steps
        .next_token(&fast, None, &mut st, |_| {})
        .unwrap()
        .is_some()
    {}
    assert_eq!(steps.stopped(), Some(StopReason::ContextFull));
    assert_eq!(steps.tokens().len(), 3);
    assert_eq!(st.len(), 16);
    assert!(Generator::new(&[], greedy(), StopCriteria::new(vec![], vec![], 1)).is_err());

    // take_logits hands over the pass's rows × vocab, and the next pass
    // still runs.
    let mut st = fast.new_state();
    let want = fast.forward(&TOKENS, &mut st, true).unwrap().to_vec();
    assert_eq!(st.take_logits(), want);
    let mut again = fast.new_state();
    let last = fast
        .forward(&TOKENS[..2], &mut again, false)
        .unwrap()
        .to_vec();
    assert_eq!(again.take_logits(), last);
    assert_eq!(last.len(), cfg.vocab);
}
