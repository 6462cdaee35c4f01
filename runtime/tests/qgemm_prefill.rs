//! Prefill through the quantized GEMM (weights repacked at load) against
//! prefill through the per-row scalar W·A8 GEMV, on tiny random GGUF models
//! (Llama, and Qwen2 with q/k/v biases) in Q4_0, Q4_1, Q5_0 and Q8_0.
//!
//! The GEMM of every ISA is bit-identical to the scalar GEMV per row, and
//! everything else in the two runs is the same code, so the last-token
//! logits must be **equal**, not close: any slip in the integration (row
//! order, bias, the interleave the weights were packed with) shows up.
//! The per-row plan comes from a selector table whose prefill winners are
//! `scalar.a8`; a third plan (`scalar.qgemm` with interleave 4 for the
//! 16-row bucket, the default elsewhere) checks that buckets planned with
//! different interleaves share one repacked copy correctly.

mod common;
use tiletune_kernels::quant::{self, QuantFormat};
use tiletune_kernels::{CpuCaps, KERNEL_ABI};
use tiletune_runtime::config::{Arch, ModelConfig};
use tiletune_runtime::gguf::GgufFile;
use tiletune_runtime::models::{FastModel, Weight};
use tiletune_runtime::plan::{ExecutionPlan, KernelChoice, PlanOptions};
use tiletune_runtime::problems::kernel_problems;
use tiletune_tables::{Candidate, Problem, Selection, SelectorDb, SocRecord};

fn config(arch: Arch) -> ModelConfig {
    let json = format!(
        r#"{{"model_type": "{}", "vocab_size": 40, "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "max_position_embeddings": 64,
        "tie_word_embeddings": {}}}"#,
        arch.gguf_name(),
        arch != Arch::Llama
    );
    ModelConfig::from_hf_json(&json).unwrap()
}

fn gguf(cfg: &ModelConfig, fmt: QuantFormat, seed: u64) -> GgufFile {
    let mut rng = tiletune_kernels::testing::Rng::new(seed);
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
            .map(|_| {
                let x = rng.uniform(-0.2, 0.2);
                if norm { 1.0 + x } else { x }
            })
            .collect();
        let dims: Vec<u64> = shape.iter().rev().map(|&x| x as u64).collect();
        let name = w.gguf_name();
        if shape.len() == 1 {
            g.tensor_f32(&name, &dims, &vals).unwrap();
        } else {
            let b = quant::quantize(fmt, &vals).unwrap();
            let ty = fmt.ggml();
            g.tensor(&name, &dims, ty, b).unwrap();
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
        add(Weight::FfnNorm(l), &[d], true);
        add(Weight::Gate(l), &[f, d], false);
        add(Weight::Up(l), &[f, d], false);
        add(Weight::Down(l), &[d, f], false);
    }
    GgufFile::from_vec(g.to_bytes()).unwrap()
}

const SOC: &str = "qgemm-test-soc";
const THREADS: usize = 2;

/// A table whose winners are `pick(problem)` (decode `gemv` and prefill
/// `gemm` problems).
fn table(
    name: &str,
    problems: &[Problem],
    pick: impl Fn(&Problem) -> Option<(&'static str, serde_json::Value)>,
) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tt-qgemm-prefill-{}-{name}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sel.db");
    let mut db = SelectorDb::open(&path).unwrap();
    db.register_soc(&SocRecord {
        fingerprint: SOC.into(),
        name: "test".into(),
        probe: serde_json::json!({}),
        first_seen: 0,
    })
    .unwrap();
    for p in problems {
        if let Some((variant, params)) = pick(p) {
            db.put_selection(&Selection {
                soc: SOC.into(),
                kernel_abi: KERNEL_ABI,
                problem: p.clone(),
                thread_budget: THREADS,
                winner: Candidate::new(variant, params, 1).unwrap(),
                median_ns: 1.0,
                default_ns: None,
                speedup: None,
                campaign: None,
                selected_at: 0,
            })
            .unwrap();
        }
    }
    path
}

fn plan(g: &GgufFile, db: std::path::PathBuf) -> ExecutionPlan {
    let opts = PlanOptions {
        db: Some(db),
        threads: THREADS,
        qmode: None,
    };
    ExecutionPlan::build(
        &kernel_problems(g).unwrap(),
        SOC,
        &CpuCaps::default(),
        &opts,
    )
}

fn last_logits(cfg: &ModelConfig, g: &GgufFile, p: &ExecutionPlan, tokens: &[u32]) -> Vec<f32> {
    let fast = FastModel::new(cfg, g, p, 64).unwrap();
    let mut st = fast.new_state();
    fast.forward(tokens, &mut st, false).unwrap().to_vec()
}

/// The logits of a prefill of `tokens[..3]` then of each later token
/// decoded one at a time.
fn decode_logits(cfg: &ModelConfig, g: &GgufFile, p: &ExecutionPlan, tokens: &[u32]) -> Vec<f32> {
    let fast = FastModel::new(cfg, g, p, 64).unwrap();
    let mut st = fast.new_state();
    let mut out = fast.forward(&tokens[..3], &mut st, false).unwrap().to_vec();
    for &t in &tokens[3..] {
        out.extend_from_slice(fast.forward(&[t], &mut st, false).unwrap());
    }
    out
}

fn weight_bytes(cfg: &ModelConfig, g: &GgufFile, p: &ExecutionPlan) -> usize {
    FastModel::new(cfg, g, p, 64).unwrap().weight_bytes()
}

/// The formats both equality tests run: the nibble kinds (with and
/// without a min, with a fifth-bit plane) and int8.
const FORMATS: [QuantFormat; 4] = [
    QuantFormat::Q4_0,
    QuantFormat::Q4_1,
    QuantFormat::Q5_0,
    QuantFormat::Q8_0,
];

/// Decode (m = 1) runs the GEMM on the packed copy, which is then the only
/// copy kept (a tied embedding looks its rows up in it): its logits equal
/// the per-row scalar GEMV's step by step, and the weights held are the
/// packed ones alone; a table that gives decode a per-row kernel beside
/// a prefill GEMM is resolved to one copy (decode's GGUF rows), and the
/// plan says so on each moved line.
#[test]
fn gemm_decode_equals_per_row_decode_and_keeps_one_copy() {
    let tokens: Vec<u32> = (0..9).map(|i| (i * 11 + 5) % 40).collect();
    for arch in [Arch::Llama, Arch::Qwen2] {
        let cfg = config(arch);
        for fmt in FORMATS {
            let g = gguf(&cfg, fmt, 47);
            let problems = kernel_problems(&g).unwrap();
            let gemm = plan(&g, std::env::temp_dir().join("tt-qgemm-decode-no-such.db"));
            assert!(
                gemm.entries
                    .iter()
                    .filter(|e| e.problem.op() == "gemv")
                    .all(|e| matches!(e.kernel, KernelChoice::QGemm(q) if q.params.mr == 1)),
                "{arch:?} {fmt}: decode defaults to the GEMM at m = 1"
            );
            let rows_db = table("drows", &problems, |_| {
                Some(("scalar.a8", serde_json::json!({"rows_per_block": 1})))
            });
            let rows = plan(&g, rows_db.clone());
            let both_db = table("dboth", &problems, |p| {
                (p.op() == "gemv").then(|| ("scalar.a8", serde_json::json!({"rows_per_block": 1})))
            });
            let both = plan(&g, both_db.clone());
            assert_eq!(
                decode_logits(&cfg, &g, &gemm, &tokens),
                decode_logits(&cfg, &g, &rows, &tokens),
                "{arch:?} {fmt}: GEMM decode"
            );
            assert_eq!(
                decode_logits(&cfg, &g, &both, &tokens),
                decode_logits(&cfg, &g, &rows, &tokens),
                "{arch:?} {fmt}: per-row decode beside GEMM prefill"
            );
            let (wg, wr, wb) = (
                weight_bytes(&cfg, &g, &gemm),
                weight_bytes(&cfg, &g, &rows),
                weight_bytes(&cfg, &g, &both),
            );
            assert_eq!(wb, wr, "{arch:?} {fmt}: {wg} {wr} {wb}");
            assert!(wg < wb + wr, "{arch:?} {fmt}: one copy, not two");
            for e in both.entries.iter().filter(|e| e.problem.op() == "gemm") {
                assert!(matches!(e.kernel, KernelChoice::QGemv(_)), "{e:?}");
                let note = e.note.as_deref().unwrap_or_default();
                assert!(
                    note.starts_with("conflict: `") && note.contains("reads packed nr="),
                    "{note}"
                );
            }
            for db in [rows_db, both_db] {
                let _ = std::fs::remove_dir_all(db.parent().unwrap());
            }
        }
    }
}

#[test]
fn gemm_prefill_equals_per_row_scalar_gemv_prefill() {
    // 19 tokens: the 64-row bucket, tiles of 8 plus a remainder of 3.
    let tokens: Vec<u32> = (0..19).map(|i| (i * 7 + 3) % 40).collect();
    for arch in [Arch::Llama, Arch::Qwen2] {
        let cfg = config(arch);
        for fmt in FORMATS {
            let g = gguf(&cfg, fmt, 31);
            let problems = kernel_problems(&g).unwrap();
            let none = std::env::temp_dir().join("tt-qgemm-prefill-no-such.db");
            let gemm = plan(&g, none);
            assert!(
                gemm.entries
                    .iter()
                    .any(|e| e.problem.op() == "gemm" && matches!(e.kernel, KernelChoice::QGemm(_))),
                "{arch:?} {fmt}: the default plan should use the quantized GEMM"
            );
            let rows_db = table("rows", &problems, |_| {
                Some(("scalar.a8", serde_json::json!({"rows_per_block": 1})))
            });
            let rows = plan(&g, rows_db.clone());
            assert!(
                rows.entries
                    .iter()
                    .filter(|e| e.problem.op() == "gemm")
                    .all(|e| matches!(e.kernel, KernelChoice::QGemv(_))),
                "{arch:?} {fmt}: the table should force the per-row GEMV"
            );
            let mixed_db = table("mixed", &problems, |p| {
                (p.dim("m") == Some(16))
                    .then(|| ("scalar.qgemm", serde_json::json!({"mr": 2, "nr": 4})))
            });
            let mixed = plan(&g, mixed_db.clone());
            let want = last_logits(&cfg, &g, &rows, &tokens);
            assert_eq!(
                last_logits(&cfg, &g, &gemm, &tokens),
                want,
                "{arch:?} {fmt}: quantized GEMM prefill"
            );
            // The 16-row bucket (7 tokens) with the other plan's interleave.
            let short = &tokens[..7];
            assert_eq!(
                last_logits(&cfg, &g, &mixed, short),
                last_logits(&cfg, &g, &rows, short),
                "{arch:?} {fmt}: mixed interleaves"
            );
            for db in [rows_db, mixed_db] {
                let _ = std::fs::remove_dir_all(db.parent().unwrap());
            }
        }
    }
}

/// The plan `tiletune plan` prints is what runs: a prefill in the 64-row
/// bucket, one in the 16-row bucket and a decode step record the kernel
/// each linear-layer call ran, and each equals the plan's entry for that
/// call's problem, with a default plan and with tuned, nearest and
/// conflicting tables (the last resolved by the layout rule, its moved
/// lines saying `conflict:`).
#[test]
fn the_plan_is_what_runs() {
    let cfg = config(Arch::Qwen2);
    let g = gguf(&cfg, QuantFormat::Q4_0, 5);
    let problems = kernel_problems(&g).unwrap();
    let qgemm = |mr: usize, nr: usize| serde_json::json!({"mr": mr, "nr": nr, "pf": 0, "ku": 1});
    let tuned = table("runs-tuned", &problems, |p| {
        Some(("scalar.qgemm", qgemm(p.dim("m").unwrap_or(1).min(2), 8)))
    });
    // Winners stored for shapes 16 rows wider only: every lookup is nearest.
    let wide: Vec<Problem> = problems
        .iter()
        .map(|p| {
            let dims: Vec<(String, usize)> = p
                .dims()
                .iter()
                .map(|(n, v)| (n.clone(), if n == "n" { v + 16 } else { *v }))
                .collect();
            Problem::new(p.op(), p.dtype(), dims).unwrap()
        })
        .collect();
    let nearest = table("runs-nearest", &wide, |_| {
        Some(("scalar.qgemm", qgemm(1, 4)))
    });
    let conflict = table("runs-conflict", &problems, |p| {
        Some(if p.op() == "gemv" {
            ("scalar.qgemm", qgemm(1, 4))
        } else {
            ("scalar.qgemm", qgemm(2, 8))
        })
    });
    let none = std::env::temp_dir().join("tt-plan-runs-no-such.db");
    let tokens: Vec<u32> = (0..27).map(|i| (i * 5 + 1) % 40).collect();
    for (name, db, source) in [
        ("default", none, "default"),
        ("tuned", tuned.clone(), "tuned"),
        ("nearest", nearest.clone(), "nearest"),
        ("conflicting", conflict.clone(), "tuned"),
    ] {
        let plan = plan(&g, db);
        assert!(
            plan.entries.iter().all(|e| e.source.name() == source),
            "{name}: {plan}"
        );
        if name == "conflicting" {
            let moved = plan
                .entries
                .iter()
                .filter(|e| e.note.as_deref().is_some_and(|n| n.contains("conflict: `scalar.qgemm` reads packed nr=8, the weight holds packed nr=4")))
                .count();
            assert_eq!(
                moved,
                plan.entries
                    .iter()
                    .filter(|e| e.problem.op() == "gemm")
                    .count(),
                "{plan}"
            );
        }
        let fast = FastModel::new(&cfg, &g, &plan, 64).unwrap();
        let mut st = fast.new_state();
        st.record_calls();
        fast.forward(&tokens[..19], &mut st, false).unwrap();
        fast.forward(&tokens[19..26], &mut st, false).unwrap();
        fast.forward(&tokens[26..], &mut st, false).unwrap();
        let calls = st.take_calls();
        // 2 layers × 4 calls (q, k and v stacked; o; gate and up
        // stacked; down) + the tied LM head, three passes.
        assert_eq!(calls.len(), 3 * (2 * 4 + 1), "{name}");
        let mut seen = std::collections::HashSet::new();
        for c in &calls {
            let p = c.problem();
            let e = plan
                .get(&p)
                .unwrap_or_else(|| panic!("{name}: {p} ran but is not in the plan"));
            assert_eq!(
                c.kernel, e.kernel,
                "{name}: {p} ran {} but the plan says {}",
                c.kernel, e.kernel
            );
            seen.insert(p.key());
        }
        // Every bucket the three passes used, and decode, were recorded.
        for m in ["m=16,", "m=64,"] {
            assert!(seen.iter().any(|k| k.contains(m)), "{name}: {seen:?}");
        }
        assert!(seen.iter().any(|k| k.starts_with("gemv")), "{name}");
    }
    for db in [tuned, nearest, conflict] {
        let _ = std::fs::remove_dir_all(db.parent().unwrap());
    }
}
