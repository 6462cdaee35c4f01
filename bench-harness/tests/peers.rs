//! The peer parsers on recorded outputs of real llama.cpp runs (exact
//! values), on MNN reports written from its source's format, and on
//! empty, truncated and foreign input (a clear error, never a panic); the
//! child-process runner and the round-robin comparison with fake peers
//! (shell scripts in a temporary directory).

#[path = "../../tests/support/script.rs"]
mod script;

use script::script;
use std::path::{Path, PathBuf};
use tiletune_bench::BenchError;
use tiletune_bench::peers::{
    self, Engine, LlamaBenchEngine, PeerCommand, RateSample, parse_backend_ops, parse_llama_bench,
    parse_mnn_bench, parse_perplexity,
};

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/peers")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/peers")
        .join(name)
}

/// The error must be a parse error whose message mentions `needle`.
fn assert_output_error(r: Result<impl std::fmt::Debug, BenchError>, needle: &str) {
    match r {
        Err(e @ BenchError::PeerOutput { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(needle), "`{msg}` does not mention `{needle}`");
        }
        other => panic!("expected a PeerOutput error mentioning `{needle}`, got {other:?}"),
    }
}

// ---- llama-bench ------------------------------------------------------------

#[test]
fn llama_bench_json_recorded_on_smollm2() {
    let r = parse_llama_bench("llama.cpp", &fixture("llama-bench-smollm2.json")).unwrap();
    assert_eq!(r.len(), 4);
    let tests: Vec<(String, usize)> = r.iter().map(|x| (x.test(), x.n_threads)).collect();
    assert_eq!(
        tests,
        [
            ("pp64".into(), 1),
            ("tg16".into(), 1),
            ("pp64".into(), 2),
            ("tg16".into(), 2)
        ]
    );
    assert_eq!(r[0].avg_ts, 79.774545);
    assert_eq!(r[0].stddev_ts, 2.002626);
    assert_eq!(r[0].samples_ts, [81.1906, 78.3585]);
    assert_eq!(r[1].samples_ts, [48.1764, 47.6318]);
    assert_eq!(r[3].avg_ts, 3.088536);
    assert_eq!(r[0].version(), "b1-0c1e570");
    assert_eq!(r[0].model_type, "llama 256M Q4_1");
    assert_eq!(
        r[0].model_filename,
        "/work/data/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    );
    assert_eq!(r[0].raw["model_size"], 96576768);
    let s = r[2].to_sample("llama.cpp");
    assert_eq!(
        (s.test.as_str(), s.threads, s.tokens_per_s.as_slice()),
        ("pp64", 2, [17.9426, 23.8059].as_slice())
    );
}

#[test]
fn llama_bench_jsonl_recorded_on_smollm2() {
    let r = parse_llama_bench("llama.cpp", &fixture("llama-bench-smollm2.jsonl")).unwrap();
    assert_eq!(r.len(), 4);
    assert_eq!(r[1].test(), "tg16");
    assert_eq!(r[1].n_threads, 1);
    assert_eq!(r[1].avg_ts, 47.338582);
    assert_eq!(r[1].samples_ts, [49.8861, 44.791]);
    assert_eq!(r[2].samples_ts, [12.9805, 15.4383]);
}

#[test]
fn llama_bench_json_recorded_on_qwen() {
    let r = parse_llama_bench("llama.cpp", &fixture("llama-bench-qwen.json")).unwrap();
    assert_eq!(r.len(), 2);
    assert_eq!((r[0].test(), r[0].n_threads), ("pp32".to_string(), 2));
    assert_eq!(r[0].samples_ts, [5.44591, 3.73135]);
    assert_eq!(r[1].test(), "tg8");
    assert_eq!(r[1].avg_ts, 0.788175);
    assert_eq!(r[1].model_type, "qwen2 1B Q4_K - Medium");
}

#[test]
fn tiletune_bench_model_records_are_versioned_by_tiletune_version() {
    let json = fixture("llama-bench-qwen.json");
    let own = json
        .replace(
            "\"build_number\": 1,",
            "\"build_number\": 0, \"tiletune_version\": \"0.1.0\",",
        )
        .replace("\"0c1e570\"", "\"unknown\"");
    let r = parse_llama_bench("tiletune", &own).unwrap();
    assert_eq!(r[0].version(), "0.1.0");
    let own = json.replace(
        "\"build_number\": 1,",
        "\"build_number\": 0, \"tiletune_version\": \"0.1.0\",",
    );
    assert_eq!(
        parse_llama_bench("tiletune", &own).unwrap()[1].version(),
        "0.1.0-0c1e570"
    );
}

#[test]
fn llama_bench_test_names_follow_llama_bench() {
    assert_eq!(peers::test_name(512, 0, 0), "pp512");
    assert_eq!(peers::test_name(0, 128, 0), "tg128");
    assert_eq!(peers::test_name(512, 128, 0), "pp512+tg128");
    assert_eq!(peers::test_name(0, 128, 4096), "tg128 @ d4096");
}

#[test]
fn llama_bench_bad_input_is_a_clear_error() {
    let json = fixture("llama-bench-smollm2.json");
    assert_output_error(parse_llama_bench("llama.cpp", ""), "empty");
    assert_output_error(parse_llama_bench("llama.cpp", "  \n"), "empty");
    assert_output_error(
        parse_llama_bench("llama.cpp", &json[..json.len() / 2]),
        "truncated",
    );
    assert_output_error(
        parse_llama_bench("llama.cpp", "| model | size |\n|---|---|"),
        "expected JSON",
    );
    assert_output_error(parse_llama_bench("llama.cpp", "[]"), "no test records");
    assert_output_error(parse_llama_bench("llama.cpp", "{\"a\": 1}"), "missing");
    assert_output_error(
        parse_llama_bench("llama.cpp", "[1, 2]"),
        "not a JSON object",
    );
    // A JSONL stream cut inside its last line.
    let jsonl = fixture("llama-bench-smollm2.jsonl");
    assert_output_error(
        parse_llama_bench("llama.cpp", &jsonl[..jsonl.len() - 40]),
        "line 4",
    );
    // Wrong types inside an otherwise valid record.
    let bad = json.replacen("\"n_threads\": 1", "\"n_threads\": \"one\"", 1);
    assert_output_error(parse_llama_bench("llama.cpp", &bad), "n_threads");
    let bad = json.replacen("[ 81.1906, 78.3585 ]", "[ 81.1906, \"x\" ]", 1);
    assert_output_error(parse_llama_bench("llama.cpp", &bad), "samples_ts");
    // Every prefix of a record is refused or parsed, never a panic.
    for cut in (0..jsonl.len()).step_by(97) {
        let _ = parse_llama_bench("llama.cpp", &jsonl[..cut]);
    }
}

// ---- MNN ----------------------------------------------------------------------

fn mnn_rates(name: &str) -> (usize, Vec<(String, f64, f64)>) {
    let r = parse_mnn_bench("mnn", &fixture(name)).unwrap();
    let rates = r
        .rates
        .iter()
        .map(|x| (x.test.clone(), x.tokens_per_s, x.std))
        .collect();
    (r.threads, rates)
}

#[test]
fn mnn_reports_recorded_on_both_models() {
    let (t, rates) = mnn_rates("mnn-llm_bench-smollm2.json");
    assert_eq!(t, 2);
    assert_eq!(
        rates,
        [
            ("pp64".into(), 247.63184066454819, 128.79180263993585),
            ("tg16".into(), 40.27099538171545, 1.781669908410034),
            (
                "pp64+tg16 prefill".into(),
                350.0819359178616,
                2.3601083961736668
            ),
            (
                "pp64+tg16 decode".into(),
                38.505440126201538,
                0.6309897007453926
            ),
        ]
    );
    let (t, rates) = mnn_rates("mnn-llm_bench-smollm2-p512-n128.json");
    assert_eq!(t, 2);
    assert_eq!(
        rates,
        [
            ("pp512".into(), 363.55954150065596, 19.757916344017049),
            ("tg128".into(), 46.149195964304968, 0.7595533875197716),
        ]
    );
    // Loading times ride along and are ignored.
    let (t, rates) = mnn_rates("mnn-llm_bench-smollm2-load.json");
    assert_eq!(
        (t, rates[0].0.as_str(), rates[0].1),
        (1, "pp32", 420.097698742534)
    );
    let r = parse_mnn_bench("mnn", &fixture("mnn-llm_bench-qwen25coder.json")).unwrap();
    assert_eq!(r.model, "qwen25coder-mnn");
    assert_eq!(r.rates[0].tokens_per_s, 54.796786798923857);
    assert_eq!(r.rates[3].test, "pp64+tg16 decode");
    assert_eq!(r.rates[3].tokens_per_s, 19.803078985345345);
}

#[test]
fn mnn_mixed_threads_and_failed_loads_are_refused() {
    // `-t 1,2` in one run: the report names one thread count for both.
    assert_output_error(
        parse_mnn_bench("mnn", &fixture("mnn-llm_bench-smollm2-t1-2.json")),
        "once per thread count",
    );
    // A missing model: exit 0, a report with rate 0, and error messages.
    assert_output_error(
        parse_mnn_bench("mnn", &fixture("mnn-llm_bench-missing-model.json")),
        "failed to load",
    );
    let why = peers::mnn_load_failure("", &fixture("mnn-llm_bench-missing-model.stderr.txt"));
    assert!(why.unwrap().contains("Unable to open config file"));
    assert_eq!(peers::mnn_load_failure("| model | t/s |", ""), None);
}

#[test]
fn mnn_report_in_the_source_format() {
    let r = parse_mnn_bench("mnn", &fixture("mnn-llm_bench-from-source-format.json")).unwrap();
    assert_eq!(r.model, "Qwen2.5-0.5B-Instruct-MNN");
    assert_eq!(r.backend, "CPU");
    assert_eq!(r.threads, 2);
    assert_eq!(r.precision, Some(2));
    assert_eq!(r.rates.len(), 2);
    assert_eq!(r.rates[0].test, "pp512");
    assert_eq!(r.rates[0].tokens_per_s, 151.38241577148438);
    assert_eq!(r.rates[0].std, 2.5);
    assert_eq!(r.rates[1].test, "tg128");
    assert_eq!(r.rates[1].tokens_per_s, 24.615384615384617);
    let s = r.to_samples("mnn", "sha256:abc");
    assert_eq!(s.len(), 2);
    assert_eq!(
        (
            s[1].test.as_str(),
            s[1].threads,
            s[1].tokens_per_s.as_slice()
        ),
        ("tg128", 2, [24.615384615384617].as_slice())
    );
    assert_eq!(s[1].engine_version, "sha256:abc");
}

#[test]
fn mnn_prefill_and_decode_entries_give_two_rates() {
    let r = parse_mnn_bench("mnn", &fixture("mnn-llm_bench-pg-from-source-format.json")).unwrap();
    assert_eq!(r.threads, 4);
    // The second entry has no samples (llm_bench omits tps): no rate.
    let got: Vec<(&str, f64, f64)> = r
        .rates
        .iter()
        .map(|x| (x.test.as_str(), x.tokens_per_s, x.std))
        .collect();
    assert_eq!(
        got,
        [
            ("pp64+tg16 prefill", 300.5, 1.5),
            ("pp64+tg16 decode", 40.25, 0.5)
        ]
    );
}

#[test]
fn mnn_bad_input_is_a_clear_error() {
    let text = fixture("mnn-llm_bench-from-source-format.json");
    assert_output_error(parse_mnn_bench("mnn", ""), "empty");
    assert_output_error(
        parse_mnn_bench("mnn", &text[..text.len() - 30]),
        "truncated",
    );
    assert_output_error(parse_mnn_bench("mnn", "[1]"), "one JSON object");
    assert_output_error(
        parse_mnn_bench("mnn", &text.replace("\"results\"", "\"res\"")),
        "results",
    );
    assert_output_error(
        parse_mnn_bench("mnn", &text.replace("\"threads\":2", "\"threads\":0")),
        "threads",
    );
    assert_output_error(
        parse_mnn_bench("mnn", &text.replace("\"prefill\"", "\"warmup\"")),
        "unknown result type",
    );
    assert_output_error(
        parse_mnn_bench(
            "mnn",
            r#"{"model":"m","backend":"CPU","threads":1,"results":[{"type":"decode","generate_len":8}]}"#,
        ),
        "no measured rates",
    );
    for cut in (0..text.len()).step_by(7) {
        let _ = parse_mnn_bench("mnn", &text[..cut]);
    }
}

// ---- test-backend-ops ----------------------------------------------------------

#[test]
fn backend_ops_console_recorded() {
    // Cut off by a timeout: the partial last test and `time`'s lines are ignored.
    let r = parse_backend_ops("llama.cpp", &fixture("test-backend-ops-mul_mat.txt")).unwrap();
    assert_eq!(r.len(), 36);
    assert!(r.iter().all(|p| p.op == "MUL_MAT" && p.supported));
    assert!(r.iter().all(|p| p.backend.as_deref() == Some("CPU")));
    let first = &r[0];
    assert_eq!((first.runs, first.us_per_run), (60, 20245.80));
    assert_eq!(first.flops_per_s, Some(6.64e9));
    let s = first.mul_mat().unwrap();
    assert_eq!((s.m, s.n, s.k, s.bs, s.nr), (16416, 1, 128, [8, 1], [4, 1]));
    assert!(s.unusual_layout && !s.is_single());
    let q = r
        .iter()
        .find(|p| p.params.starts_with("type_a=q4_0,type_b=f32,m=4096,n=1,"))
        .unwrap();
    assert_eq!(
        (q.runs, q.us_per_run, q.flops_per_s),
        (138, 9133.52, Some(12.86e9))
    );
    let s = q.mul_mat().unwrap();
    assert_eq!(
        (s.type_a.as_str(), s.type_b.as_str(), s.m, s.n, s.k),
        ("q4_0", "f32", 4096, 1, 14336)
    );
    assert!(s.is_single());
    assert_eq!(s.flops(), 2.0 * 4096.0 * 14336.0);
    // The console line rounds: 117.44 MFLOP/run at 9133.52 µs is 12.86 GFLOPS.
    assert!((s.flops() / (q.us_per_run * 1e3) - 12.86).abs() < 0.01);
    let last = r.last().unwrap();
    assert!(
        last.params
            .starts_with("type_a=q5_0,type_b=f32,m=4096,n=2,")
    );
    assert_eq!(
        (last.runs, last.us_per_run, last.flops_per_s),
        (140, 9207.19, Some(25.51e9))
    );
}

#[test]
fn backend_ops_subset_in_console_sql_and_csv() {
    let console =
        parse_backend_ops("llama.cpp", &fixture("test-backend-ops-mul_mat-subset.txt")).unwrap();
    let got: Vec<(String, f64)> = console
        .iter()
        .map(|p| (p.mul_mat().unwrap().type_a, p.us_per_run))
        .collect();
    assert_eq!(
        got,
        [
            ("q4_0".into(), 8369.51),
            ("q4_1".into(), 11965.73),
            ("q8_0".into(), 7614.91)
        ]
    );
    let sql =
        parse_backend_ops("llama.cpp", &fixture("test-backend-ops-mul_mat-subset.sql")).unwrap();
    let got: Vec<(String, f64, u64, Option<u64>)> = sql
        .iter()
        .map(|p| {
            (
                p.mul_mat().unwrap().type_a,
                p.us_per_run,
                p.runs,
                p.memory_bytes,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("q4_0".into(), 5479.014493, 207, Some(32328 * 1024)),
            ("q4_1".into(), 8835.23913, 138, Some(35912 * 1024)),
            ("q8_0".into(), 7669.0, 138, Some(61000 * 1024))
        ]
    );
    assert_eq!(sql[1].flops_per_s, Some(13292284483.331324));
    assert_output_error(
        parse_backend_ops("llama.cpp", &fixture("test-backend-ops-mul_mat-subset.csv")),
        "csv format",
    );
}

#[test]
fn backend_ops_sql_recorded() {
    let r = parse_backend_ops("llama.cpp", &fixture("test-backend-ops-mul_mat-sql.txt")).unwrap();
    assert_eq!(r.len(), 4);
    let p = &r[0];
    assert_eq!(p.backend.as_deref(), Some("CPU"));
    assert_eq!(p.build_commit.as_deref(), Some("0c1e570-dirty"));
    assert_eq!((p.runs, p.us_per_run), (138, 7847.724638));
    assert_eq!(p.flops_per_s, Some(14964912432.8477));
    assert_eq!(p.memory_bytes, Some(32328 * 1024));
    let s = p.mul_mat().unwrap();
    assert_eq!((s.type_a.as_str(), s.n), ("q4_0", 1));
    let s = r[3].mul_mat().unwrap();
    assert_eq!((s.type_a.as_str(), s.m, s.n, s.k), ("q8_0", 4096, 8, 14336));
    assert_eq!(r[3].us_per_run, 28518.333333);
    assert_eq!(r[3].memory_bytes, Some(61504 * 1024));
}

#[test]
fn backend_ops_unsupported_and_bad_input() {
    let text =
        "Backend 1/1: CPU\n  MUL_MAT(type_a=iq1_m,type_b=f16,m=16,n=1,k=256): not supported\n";
    let r = parse_backend_ops("llama.cpp", text).unwrap();
    assert_eq!(r.len(), 1);
    assert!(!r[0].supported);
    assert_output_error(parse_backend_ops("llama.cpp", ""), "empty");
    assert_output_error(
        parse_backend_ops(
            "llama.cpp",
            "Testing 1 devices\n\nBackend 1/1: CPU\n  Backend CPU: OK\n",
        ),
        "no perf results",
    );
    assert_output_error(
        parse_backend_ops(
            "llama.cpp",
            "  MUL_MAT(type_a=q4_0,type_b=f32,m=1,n=1,k=32):   12 runs - garbage us/run - 1 kFLOP/run - 1 GFLOPS\n",
        ),
        "us/run",
    );
    let sql = fixture("test-backend-ops-mul_mat-sql.txt");
    let cut = sql.rfind("'perf'").unwrap();
    assert_output_error(parse_backend_ops("llama.cpp", &sql[..cut + 10]), "VALUES");
    for c in (0..sql.len()).step_by(53) {
        let _ = parse_backend_ops("llama.cpp", &sql[..c]);
    }
    let console = fixture("test-backend-ops-mul_mat.txt");
    for c in (0..console.len()).step_by(31) {
        let _ = parse_backend_ops("llama.cpp", &console[..c]);
    }
}

#[test]
fn mul_mat_params_parse_with_defaults_and_refuse_junk() {
    let s = peers::MulMatShape::parse("type_a=f16,type_b=f32,m=64,n=8,k=32").unwrap();
    assert_eq!((s.bs, s.nr, s.unusual_layout), ([1, 1], [1, 1], false));
    assert!(peers::MulMatShape::parse("type_a=f16,m=64,n=8,k=32").is_none());
    assert!(peers::MulMatShape::parse("type_a=f16,type_b=f32,m=x,n=8,k=32").is_none());
    assert!(peers::MulMatShape::parse("type_a=f16,type_b=f32,m=1,n=8,k=32,bs=[1").is_none());
    assert!(peers::MulMatShape::parse("").is_none());
}

// ---- perplexity ----------------------------------------------------------------

#[test]
fn perplexity_recorded_on_both_models() {
    let q = parse_perplexity("llama.cpp", &fixture("llama-perplexity-qwen.txt")).unwrap();
    assert_eq!((q.ppl, q.plus_minus), (9.8635, Some(1.00855)));
    assert_eq!(q.chunks.len(), 11);
    assert_eq!((q.chunks[0], q.chunks[10]), (3.7078, 9.8635));
    let s = parse_perplexity("llama.cpp", &fixture("llama-perplexity-smollm2.txt")).unwrap();
    assert_eq!((s.ppl, s.plus_minus), (21.6365, Some(2.32539)));
    assert_eq!(s.chunks.len(), 12);
    assert_eq!(s.chunks[2], 21.0029);
}

#[test]
fn perplexity_in_tiletune_format_and_with_a_rate() {
    let text = "[1]20.5000 [2]18.6000 \nFinal estimate: PPL = 18.6000 (254 tokens scored, 3.1 s)\n";
    let e = parse_perplexity("tiletune", text).unwrap();
    assert_eq!((e.ppl, e.plus_minus), (18.6, None));
    assert_eq!(e.chunks, [20.5, 18.6]);
    let with_rate = format!(
        "{}llama_perf_context_print: prompt eval time =    1234.56 ms /  1536 tokens (    0.80 ms per token,  1244.17 tokens per second)\n",
        fixture("llama-perplexity-qwen.txt")
    );
    assert_eq!(
        parse_perplexity("llama.cpp", &with_rate)
            .unwrap()
            .tokens_per_s,
        Some(1244.17)
    );
}

#[test]
fn perplexity_bad_input_is_a_clear_error() {
    let text = fixture("llama-perplexity-qwen.txt");
    assert_output_error(parse_perplexity("llama.cpp", ""), "empty");
    let cut = text.find("Final").unwrap();
    assert_output_error(
        parse_perplexity("llama.cpp", &text[..cut]),
        "Final estimate",
    );
    assert_output_error(
        parse_perplexity("llama.cpp", "Final estimate: PPL = nan +/- nan\n"),
        "perplexity",
    );
    assert_output_error(
        parse_perplexity("llama.cpp", "Final estimate: PPL = 9.8 +/- x\n"),
        "+/-",
    );
    for c in 0..text.len() {
        if text.is_char_boundary(c) {
            let _ = parse_perplexity("llama.cpp", &text[..c]);
        }
    }
}

// ---- running peers -----------------------------------------------------------------

fn under_qemu() -> bool {
    std::env::var_os("QEMU_CPU").is_some()
}

#[test]
fn peer_failures_carry_the_stderr_tail() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: spawns host shell scripts");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fail = script(
        dir.path(),
        "fail",
        "echo 'loading model' >&2; echo 'error: cannot open model' >&2; exit 1",
    );
    let e = PeerCommand::new("llama.cpp", &fail)
        .arg("-m")
        .arg("x.gguf")
        .run()
        .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, BenchError::PeerRun { .. }));
    assert!(msg.contains("exited with status 1"), "{msg}");
    assert!(msg.contains("error: cannot open model"), "{msg}");
    assert!(msg.contains("-m x.gguf"), "{msg}");

    // A peer killed by a signal names it: SIGILL points at the ISA.
    let ill = script(
        dir.path(),
        "ill",
        "echo 'load_tensors: AMX' >&2; kill -ILL $$",
    );
    let e = PeerCommand::new("llama.cpp", &ill).run().unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("SIGILL, an illegal instruction"), "{msg}");
    assert!(msg.contains("load_tensors: AMX"), "{msg}");
    let other = script(dir.path(), "usr1", "kill -USR1 $$");
    let e = PeerCommand::new("llama.cpp", &other).run().unwrap_err();
    assert!(e.to_string().contains("killed by signal 10"), "{e}");

    let e = PeerCommand::new("mnn", dir.path().join("absent"))
        .run()
        .unwrap_err();
    assert!(e.to_string().contains("cannot start"), "{e}");

    let slow = script(dir.path(), "slow", "exec sleep 5");
    let t0 = std::time::Instant::now();
    let e = PeerCommand::new("llama.cpp", &slow)
        .timeout(std::time::Duration::from_millis(200))
        .run()
        .unwrap_err();
    assert!(e.to_string().contains("killed"), "{e}");
    assert!(t0.elapsed().as_secs_f64() < 4.0);

    // Large output on both pipes does not dead-lock.
    let chatty = script(
        dir.path(),
        "chatty",
        "i=0; while [ $i -lt 2000 ]; do echo 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'; echo 'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy' >&2; i=$((i+1)); done",
    );
    let o = PeerCommand::new("llama.cpp", &chatty).run().unwrap();
    assert_eq!(o.stdout.lines().count(), 2000);
    assert_eq!(o.stderr.lines().count(), 2000);
}

#[test]
fn alternation_pools_rounds_and_drops_failing_peers() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: spawns host shell scripts");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs.log");
    let log = |name: &str| format!("echo {name} >> '{}'", runs.display());
    // Two engines that print recorded llama-bench output, one that prints
    // garbage, one that fails: each run appends its name to runs.log.
    let a = script(
        dir.path(),
        "a",
        &format!(
            "{}; cat '{}'",
            log("a"),
            fixture_path("llama-bench-smollm2.json").display()
        ),
    );
    let b = script(
        dir.path(),
        "b",
        &format!(
            "{}; cat '{}'",
            log("b"),
            fixture_path("llama-bench-smollm2.jsonl").display()
        ),
    );
    let garbage = script(
        dir.path(),
        "garbage",
        &format!(
            "{}; echo 'Segmentation fault?'; echo 'ggml_abort' >&2",
            log("garbage")
        ),
    );
    let fail = script(
        dir.path(),
        "fail",
        &format!("{}; echo 'unknown argument: -o' >&2; exit 1", log("fail")),
    );
    let mut engines: Vec<Box<dyn Engine>> = vec![
        Box::new(LlamaBenchEngine::new(
            "tiletune",
            PeerCommand::new("tiletune", &a),
        )),
        Box::new(LlamaBenchEngine::new(
            "llama.cpp",
            PeerCommand::new("llama.cpp", &b),
        )),
        Box::new(LlamaBenchEngine::new(
            "junk",
            PeerCommand::new("junk", &garbage),
        )),
        Box::new(LlamaBenchEngine::new(
            "broken",
            PeerCommand::new("broken", &fail),
        )),
    ];
    let mut seen = Vec::new();
    let rounds = peers::alternate(&mut engines, 2, |e, r| seen.push(format!("{e}{r}")));
    assert_eq!(
        seen,
        [
            "tiletune1",
            "llama.cpp1",
            "junk1",
            "broken1",
            "tiletune2",
            "llama.cpp2"
        ]
    );
    let order = std::fs::read_to_string(&runs).unwrap();
    assert_eq!(order, "a\nb\ngarbage\nfail\na\nb\n");
    assert_eq!(rounds.failures.len(), 2);
    assert_eq!(
        (rounds.failures[0].engine.as_str(), rounds.failures[0].round),
        ("junk", 1)
    );
    assert!(
        rounds.failures[0].error.contains("expected JSON"),
        "{}",
        rounds.failures[0].error
    );
    assert!(
        rounds.failures[0].error.contains("ggml_abort"),
        "{}",
        rounds.failures[0].error
    );
    assert!(rounds.failures[1].error.contains("unknown argument: -o"));
    assert_eq!(rounds.samples.len(), 16);

    let rows = peers::side_by_side(&rounds.samples, "tiletune", &["tiletune", "llama.cpp"]);
    let keys: Vec<(&str, &str, usize)> = rows
        .iter()
        .map(|r| (r.engine.as_str(), r.test.as_str(), r.threads))
        .collect();
    assert_eq!(
        keys,
        [
            ("tiletune", "pp64", 1),
            ("llama.cpp", "pp64", 1),
            ("tiletune", "pp64", 2),
            ("llama.cpp", "pp64", 2),
            ("tiletune", "tg16", 1),
            ("llama.cpp", "tg16", 1),
            ("tiletune", "tg16", 2),
            ("llama.cpp", "tg16", 2),
        ]
    );
    // Two rounds × two repetitions each, pooled.
    assert_eq!(rows[0].samples, [81.1906, 78.3585, 81.1906, 78.3585]);
    let mean_a = (81.1906 + 78.3585) / 2.0;
    let mean_b = (74.2941 + 76.1565) / 2.0;
    assert!((rows[0].mean - mean_a).abs() < 1e-9);
    assert!((rows[1].mean - mean_b).abs() < 1e-9);
    assert_eq!(rows[0].ratio, Some(1.0));
    assert!((rows[1].ratio.unwrap() - mean_b / mean_a).abs() < 1e-12);
    // Sample std of {x, y, x, y} is |x − y| / sqrt(3)·sqrt(... ) — computed directly:
    let d = [81.1906f64, 78.3585, 81.1906, 78.3585];
    let var = d.iter().map(|x| (x - mean_a).powi(2)).sum::<f64>() / 3.0;
    assert!((rows[0].std.unwrap() - var.sqrt()).abs() < 1e-9);
    assert_eq!(rows[1].engine_version, "b1-0c1e570");
}

#[test]
fn mnn_engine_runs_once_per_thread_count_in_a_scratch_directory() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: spawns host shell scripts");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let calls = dir.path().join("calls.log");
    // A fake llm_bench: logs its cwd and -t, writes the recorded report to -j.
    let fake = script(
        dir.path(),
        "llm_bench",
        &format!(
            "t=; out=; while [ $# -gt 0 ]; do case \"$1\" in -t) t=$2;; -p) p=$2;; -n) n=$2;; -j) out=$2;; esac; shift; done; \
             echo \"$(pwd) $t $p $n\" >> '{}'; mkdir -p tmp; sed \"s/\\\"threads\\\":2/\\\"threads\\\":$t/\" '{}' > \"$out\"",
            calls.display(),
            fixture_path("mnn-llm_bench-smollm2-p512-n128.json").display()
        ),
    );
    let cfg = dir.path().join("config.json");
    std::fs::write(&cfg, "{}").unwrap();
    let mut e = peers::MnnBenchEngine::new(
        fake.clone(),
        cfg.clone(),
        "sha256:x".into(),
        vec![1, 2],
        vec![512],
        vec![128],
        work.clone(),
        None,
    );
    let s = e.run_round().unwrap();
    let got: Vec<(&str, usize, f64)> = s
        .iter()
        .map(|x| (x.test.as_str(), x.threads, x.tokens_per_s[0]))
        .collect();
    assert_eq!(
        got,
        [
            ("pp512", 1, 363.55954150065596),
            ("tg128", 1, 46.149195964304968),
            ("pp512", 2, 363.55954150065596),
            ("tg128", 2, 46.149195964304968)
        ]
    );
    let log = std::fs::read_to_string(&calls).unwrap();
    let cwd = work.canonicalize().unwrap();
    assert_eq!(
        log,
        format!("{0} 1 512 128\n{0} 2 512 128\n", cwd.display())
    );
    // Lists run pairwise (one -p and one -n per llm_bench run), 0 where a
    // list is shorter, and a pair of zeros not at all.
    std::fs::remove_file(&calls).unwrap();
    let mut e = peers::MnnBenchEngine::new(
        fake.clone(),
        cfg.clone(),
        "sha256:x".into(),
        vec![2],
        vec![512, 64, 0],
        vec![128],
        work.clone(),
        None,
    );
    assert_eq!(e.run_round().unwrap().len(), 4);
    let log = std::fs::read_to_string(&calls).unwrap();
    assert_eq!(log, format!("{0} 2 512 128\n{0} 2 64 0\n", cwd.display()));
    assert!(work.join("tmp").is_dir());

    // A model that does not load: exit 0, messages, a report of zeros.
    let broken = script(
        dir.path(),
        "llm_bench_broken",
        &format!(
            "out=; while [ $# -gt 0 ]; do [ \"$1\" = -j ] && out=$2; shift; done; \
             cat '{}' >&2; cp '{}' \"$out\"",
            fixture_path("mnn-llm_bench-missing-model.stderr.txt").display(),
            fixture_path("mnn-llm_bench-missing-model.json").display()
        ),
    );
    let mut e = peers::MnnBenchEngine::new(
        broken,
        cfg,
        "v".into(),
        vec![2],
        vec![8],
        vec![4],
        work,
        None,
    );
    let err = e.run_round().unwrap_err().to_string();
    assert!(
        err.contains("did not load") && err.contains("Unable to open config file"),
        "{err}"
    );
}

#[test]
fn side_by_side_without_the_reference_has_no_ratio() {
    let s = |engine: &str, ts: f64| RateSample {
        engine: engine.into(),
        engine_version: "v".into(),
        test: "tg16".into(),
        threads: 1,
        tokens_per_s: vec![ts],
        raw: serde_json::Value::Null,
    };
    let rows = peers::side_by_side(&[s("llama.cpp", 10.0), s("mnn", 12.0)], "tiletune", &[]);
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.ratio.is_none() && r.std.is_none()));
    assert_eq!(peers::mean_std(&[]).1, None);
    let (m, sd) = peers::mean_std(&[1.0, 3.0]);
    assert_eq!((m, sd), (2.0, Some(std::f64::consts::SQRT_2)));
}
