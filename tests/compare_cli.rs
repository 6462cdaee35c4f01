//! End-to-end checks of `tiletune compare` through the real binary, with
//! fake peers: shell scripts in a temporary directory that print recorded
//! llama.cpp output, print garbage, or fail. A peer that is missing, fails or
//! prints garbage is reported and never stops the comparison; the rows that
//! were measured are printed, written with `--out` and stored as peer results.
//!
//! tiletune's own model benchmark runs for real (a subprocess of the binary);
//! on the bogus model file used here it fails, which these tests also check.
//! A gated test (`TILETUNE_MODELS_DIR` and `TILETUNE_LLAMA_BIN`, the folder
//! holding llama-bench) runs the whole comparison on SmolLM2.
//!
//! These spawn the built binary, which qemu-user cannot do from inside an
//! emulated test process, so under qemu they report a skip.

#[path = "support/script.rs"]
mod script;

use script::script;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn under_qemu() -> bool {
    std::env::var_os("QEMU_CPU").is_some()
}

fn tiletune(args: &[&str], path_env: Option<&Path>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tiletune"));
    c.args(args);
    if let Some(p) = path_env {
        c.env("PATH", p);
    }
    c.output().expect("the tiletune binary runs")
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("bench-harness/tests/fixtures/peers")
        .join(name)
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The peer results stored in `db`, through `table export`.
fn peer_results(db: &Path) -> Vec<serde_json::Value> {
    let file = db.with_extension("export.json");
    let o = tiletune(
        &[
            "table",
            "export",
            "--db",
            db.to_str().unwrap(),
            "--out",
            file.to_str().unwrap(),
        ],
        None,
    );
    assert!(o.status.success(), "{}", text(&o).1);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    v["peer_results"].as_array().cloned().unwrap_or_default()
}

#[test]
fn help_describes_every_mode() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let (out, _) = text(&tiletune(&["compare", "--help"], None));
    for s in [
        "--llama-bench",
        "--mnn-config",
        "--reps",
        "kernels",
        "ppl",
        "--out",
    ] {
        assert!(out.contains(s), "compare --help lacks {s}:\n{out}");
    }
    let (out, _) = text(&tiletune(&["compare", "kernels", "--help"], None));
    assert!(
        out.contains("--llama-test-backend-ops") && out.contains("--types"),
        "{out}"
    );
    let (out, _) = text(&tiletune(&["compare", "ppl", "--help"], None));
    assert!(
        out.contains("--llama-perplexity") && out.contains("row A8"),
        "{out}"
    );
    let o = tiletune(&["compare"], None);
    assert!(!o.status.success());
    assert!(text(&o).1.contains("--model"));
}

#[test]
fn model_compare_reports_every_peer_and_stores_what_was_measured() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("not-a-model.gguf");
    std::fs::write(&model, b"GGUF but not really").unwrap();
    let argv = dir.path().join("argv.txt");
    let llama = script(
        dir.path(),
        "llama-bench",
        &format!(
            "echo \"$@\" >> '{}'; cat '{}'",
            argv.display(),
            fixture("llama-bench-smollm2.json").display()
        ),
    );
    let db = dir.path().join("sel.db");
    let out_json = dir.path().join("cmp.json");
    let o = tiletune(
        &[
            "compare",
            "--model",
            model.to_str().unwrap(),
            "--llama-bench",
            llama.to_str().unwrap(),
            "--llama-args",
            "--repack 0",
            "--mnn-config",
            dir.path().join("absent-config.json").to_str().unwrap(),
            "--mnn-bench",
            llama.to_str().unwrap(),
            "-p",
            "64",
            "-n",
            "16",
            "-t",
            "1,2",
            "-r",
            "2",
            "--db",
            db.to_str().unwrap(),
            "--out",
            out_json.to_str().unwrap(),
        ],
        None,
    );
    let (out, err) = text(&o);
    // tiletune's own benchmark cannot run a bogus model: reported, exit 1.
    assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
    assert!(out.contains("note: tiletune dropped in round 1"), "{out}");
    assert!(
        out.contains("note: mnn skipped") && out.contains("does not exist"),
        "{out}"
    );
    // The fake llama-bench ran both rounds; its rows are pooled.
    for row in ["pp64", "tg16"] {
        assert!(out.contains(row), "{out}");
    }
    assert!(err.contains("round 2/2: llama.cpp"), "{err}");
    // --llama-args reach llama-bench after the tests' own, in every round.
    let argv = std::fs::read_to_string(&argv).unwrap();
    assert_eq!(argv.lines().count(), 2, "{argv}");
    assert!(
        argv.lines()
            .all(|l| l.contains("-p 64") && l.ends_with("--repack 0")),
        "{argv}"
    );
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out_json).unwrap()).unwrap();
    let rows = doc["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{doc}");
    assert_eq!(rows[0]["engine"], "llama.cpp");
    assert_eq!(rows[0]["test"], "pp64");
    assert_eq!(rows[0]["threads"], 1);
    assert_eq!(
        rows[0]["samples"],
        serde_json::json!([81.1906, 78.3585, 81.1906, 78.3585])
    );
    assert!(rows[0]["ratio"].is_null());
    let stored = peer_results(&db);
    assert_eq!(stored.len(), 4, "{stored:?}");
    assert!(stored.iter().all(|p| p["engine"] == "llama.cpp"
        && p["engine_version"] == "b1-0c1e570"
        && p["model"] == "not-a-model.gguf"));
}

#[test]
fn mnn_runs_per_thread_count_and_is_stored() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.gguf");
    std::fs::write(&model, b"x").unwrap();
    let cfg = dir.path().join("config.json");
    std::fs::write(&cfg, "{}").unwrap();
    // A fake llm_bench writing the recorded SmolLM2 report (threads set to -t) to -j.
    let mnn = script(
        dir.path(),
        "llm_bench",
        &format!(
            "t=; out=; while [ $# -gt 0 ]; do case \"$1\" in -t) t=$2;; -j) out=$2;; esac; shift; done; \
             sed \"s/\\\"threads\\\":2/\\\"threads\\\":$t/\" '{}' > \"$out\"",
            fixture("mnn-llm_bench-smollm2-p512-n128.json").display()
        ),
    );
    let db = dir.path().join("sel.db");
    let out_json = dir.path().join("cmp.json");
    let o = tiletune(
        &[
            "compare",
            "-m",
            model.to_str().unwrap(),
            "--mnn-bench",
            mnn.to_str().unwrap(),
            "--mnn-config",
            cfg.to_str().unwrap(),
            "-t",
            "1,2",
            "-r",
            "2",
            "--db",
            db.to_str().unwrap(),
            "--out",
            out_json.to_str().unwrap(),
        ],
        Some(Path::new("/usr/bin:/bin")), // sed, but no llama-bench
    );
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
    assert!(out.contains("llama.cpp skipped"), "{out}");
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out_json).unwrap()).unwrap();
    let rows: Vec<(String, String, u64, usize)> = doc["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["engine"].as_str().unwrap().to_string(),
                r["test"].as_str().unwrap().to_string(),
                r["threads"].as_u64().unwrap(),
                r["samples"].as_array().unwrap().len(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("mnn".into(), "pp512".into(), 1, 2),
            ("mnn".into(), "pp512".into(), 2, 2),
            ("mnn".into(), "tg128".into(), 1, 2),
            ("mnn".into(), "tg128".into(), 2, 2),
        ]
    );
    let stored = peer_results(&db);
    assert_eq!(stored.len(), 4);
    assert!(
        stored.iter().all(|p| p["engine"] == "mnn"
            && p["engine_version"].as_str().unwrap().starts_with("sha256:"))
    );
    assert!(
        stored
            .iter()
            .any(|p| p["tokens_per_s"] == 363.55954150065596)
    );
}

#[test]
fn garbage_failing_and_missing_peers_never_crash_the_comparison() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.gguf");
    std::fs::write(&model, b"x").unwrap();
    let garbage = script(
        dir.path(),
        "garbage",
        "echo 'llama_model_load: error'; echo 'GGML_ASSERT failed' >&2",
    );
    let failing = script(
        dir.path(),
        "failing",
        "echo 'cannot open model' >&2; exit 1",
    );
    let cases = [
        (garbage.clone(), "expected JSON"),
        (failing.clone(), "exited with status 1"),
        (dir.path().join("absent"), "does not exist"),
    ];
    for (peer, needle) in cases {
        let o = tiletune(
            &[
                "compare",
                "-m",
                model.to_str().unwrap(),
                "--llama-bench",
                peer.to_str().unwrap(),
                "-p",
                "8",
                "-n",
                "4",
                "-t",
                "1",
                "-r",
                "1",
                "--no-store",
            ],
            None,
        );
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
        assert!(out.contains(needle), "{needle}: {out}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // With nothing on PATH, peers are skipped with a note.
    let empty = dir.path().join("empty-path");
    std::fs::create_dir(&empty).unwrap();
    let o = tiletune(
        &[
            "compare",
            "-m",
            model.to_str().unwrap(),
            "-p",
            "8",
            "-n",
            "4",
            "-t",
            "1",
            "-r",
            "1",
            "--no-store",
        ],
        Some(&empty),
    );
    let (out, _) = text(&o);
    assert!(
        out.contains("llama.cpp skipped: `llama-bench` is not on PATH"),
        "{out}"
    );
    assert!(out.contains("mnn skipped"), "{out}");
}

#[test]
fn kernel_compare_runs_tiletune_at_the_peer_shapes() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The recorded SQL output with the shapes shrunk so tiletune's side is quick.
    let sql = std::fs::read_to_string(fixture("test-backend-ops-mul_mat-sql.txt"))
        .unwrap()
        .replace("m=4096", "m=64")
        .replace("k=14336", "k=256");
    let canned = dir.path().join("sql.txt");
    std::fs::write(&canned, sql).unwrap();
    let args_log = dir.path().join("args.txt");
    let tbo = script(
        dir.path(),
        "test-backend-ops",
        &format!(
            "echo \"$@\" > '{}'; cat '{}'",
            args_log.display(),
            canned.display()
        ),
    );
    let out_json = dir.path().join("k.json");
    let o = tiletune(
        &[
            "compare",
            "kernels",
            "--llama-test-backend-ops",
            tbo.to_str().unwrap(),
            "--types",
            "q4_0,q8_0",
            "--batch",
            "1,8",
            "--quick",
            "--out",
            out_json.to_str().unwrap(),
        ],
        None,
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let args = std::fs::read_to_string(&args_log).unwrap();
    assert!(
        args.starts_with("perf -o MUL_MAT -b CPU --output sql -p ^type_a=(q4_0|q8_0),type_b=f32,")
            && args.contains("n=(1|8)"),
        "{args}"
    );
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out_json).unwrap()).unwrap();
    let rows = doc["rows"].as_array().unwrap();
    let engines: Vec<String> = rows
        .iter()
        .map(|r| format!("{} {} {}", r["type_a"], r["n"], r["engine"]))
        .collect();
    // n=1: llama.cpp, tiletune a8, a32 and the repacked GEMM at m=1;
    // n=8: llama.cpp and the repacked GEMM.
    assert_eq!(rows.len(), 12, "{engines:?}");
    assert_eq!(rows[0]["engine"], "llama.cpp");
    assert_eq!(rows[0]["us_per_run"], 7847.724638);
    assert!(
        rows[1]["engine"]
            .as_str()
            .unwrap()
            .starts_with("tiletune qgemv_a8")
    );
    assert!(
        rows[2]["engine"]
            .as_str()
            .unwrap()
            .starts_with("tiletune qgemv_a32")
    );
    let sp = rows[1]["speedup_vs_llama"].as_f64().unwrap();
    let us = rows[1]["us_per_run"].as_f64().unwrap();
    assert!((sp - 7847.724638 / us).abs() < 1e-9 * sp);
    assert!(
        rows[3]["engine"]
            .as_str()
            .unwrap()
            .starts_with("tiletune gemm"),
        "{engines:?}"
    );
    assert_eq!(
        engines
            .iter()
            .filter(|e| e.starts_with("\"q4_0\" 8 \"tiletune gemm"))
            .count(),
        1,
        "{engines:?}"
    );
    assert!(out.contains("vs llama"), "{out}");

    let failing = script(
        dir.path(),
        "tbo-fail",
        "echo 'ggml_backend_load_all: no CPU' >&2; exit 3",
    );
    let o = tiletune(
        &[
            "compare",
            "kernels",
            "--llama-test-backend-ops",
            failing.to_str().unwrap(),
        ],
        None,
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err.contains("exited with status 3") && err.contains("no CPU"),
        "{err}"
    );
}

#[test]
fn ppl_compare_reads_llama_perplexity_and_stores_it() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.gguf");
    std::fs::write(&model, b"x").unwrap();
    let txt = dir.path().join("t.txt");
    std::fs::write(&txt, "some text").unwrap();
    let perp = script(
        dir.path(),
        "llama-perplexity",
        &format!(
            "cat '{}' >&2",
            fixture("llama-perplexity-qwen.txt").display()
        ),
    );
    let db = dir.path().join("sel.db");
    let o = tiletune(
        &[
            "compare",
            "ppl",
            "-m",
            model.to_str().unwrap(),
            "-f",
            txt.to_str().unwrap(),
            "--llama-perplexity",
            perp.to_str().unwrap(),
            "--ctx",
            "128",
            "--db",
            db.to_str().unwrap(),
        ],
        None,
    );
    let (out, err) = text(&o);
    // tiletune cannot load the bogus model (both modes reported); llama's row stands.
    assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
    assert!(out.contains("9.8635 ± 1.00855"), "{out}");
    assert!(
        out.contains("tiletune A32 failed") && out.contains("tiletune A8 failed"),
        "{out}"
    );
    let stored = peer_results(&db);
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(stored[0]["test"], "ppl128");
    assert_eq!(stored[0]["json"]["ppl"], 9.8635);
    assert_eq!(stored[0]["json"]["plus_minus"], 1.00855);
}

/// Gated: the whole comparison on SmolLM2 with a real llama-bench; needs
/// `tiletune bench model` (it runs once that subcommand exists).
#[test]
fn real_model_compare_against_llama_bench() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let (Some(models), Some(bin)) = (
        std::env::var_os("TILETUNE_MODELS_DIR"),
        std::env::var_os("TILETUNE_LLAMA_BIN"),
    ) else {
        eprintln!(
            "skipped: set TILETUNE_MODELS_DIR and TILETUNE_LLAMA_BIN (llama.cpp's bin folder)"
        );
        return;
    };
    let has_bench_model = tiletune(&["bench", "model", "--help"], None)
        .status
        .success();
    if !has_bench_model {
        eprintln!("skipped: this build has no `tiletune bench model` yet");
        return;
    }
    let model = Path::new(&models).join("SmolLM2-135M-Instruct.Q4_1.gguf");
    let llama = Path::new(&bin).join("llama-bench");
    let dir = tempfile::tempdir().unwrap();
    let out_json = dir.path().join("cmp.json");
    let o = tiletune(
        &[
            "compare",
            "-m",
            model.to_str().unwrap(),
            "--llama-bench",
            llama.to_str().unwrap(),
            "-p",
            "32",
            "-n",
            "8",
            "-t",
            "1",
            "-r",
            "2",
            "--no-store",
            "--out",
            out_json.to_str().unwrap(),
        ],
        None,
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out_json).unwrap()).unwrap();
    let rows = doc["rows"].as_array().unwrap();
    for engine in ["tiletune", "llama.cpp"] {
        for test in ["pp32", "tg8"] {
            let r = rows
                .iter()
                .find(|r| r["engine"] == engine && r["test"] == test)
                .unwrap_or_else(|| panic!("no {engine} {test} row: {doc}"));
            assert_eq!(r["samples"].as_array().unwrap().len(), 2, "{r}");
            assert!(r["mean"].as_f64().unwrap() > 0.0);
            assert!(r["ratio"].as_f64().unwrap() > 0.0);
        }
    }
}
