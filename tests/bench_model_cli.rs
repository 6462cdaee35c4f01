//! `tiletune bench model` through the real binary on a tiny synthetic GGUF
//! model built here: the JSON output carries llama-bench's field names with
//! the same meanings (one record per thread count and test, in llama-bench's
//! order, statistics consistent with the samples), jsonl and markdown print
//! the same tests, and bad flags give clear errors.
//!
//! These spawn the built binary, which qemu-user cannot do from inside an
//! emulated test process, so under qemu they report a skip.

use std::path::Path;
use std::process::{Command, Output};
#[path = "support/tiny_gguf.rs"]
mod tiny_gguf;
use tiny_gguf::{Broken, tiny_model, tiny_model_as};

fn under_qemu() -> bool {
    std::env::var_os("QEMU_CPU").is_some()
}

fn tiletune(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tiletune"))
        .args(args)
        .output()
        .expect("the tiletune binary runs")
}

/// A selector table path that does not exist: every plan entry is a default.
fn no_db(dir: &Path) -> String {
    dir.join("no-such.db").to_str().unwrap().to_string()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "status {:?}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("utf-8 output")
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn json_has_llama_bench_fields_and_consistent_statistics() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let db = no_db(dir.path());
    let out = tiletune(&[
        "bench",
        "model",
        "-m",
        model.to_str().unwrap(),
        "-p",
        "16,0",
        "-n",
        "8",
        "-t",
        "1,2",
        "-r",
        "3",
        "-o",
        "json",
        "--db",
        &db,
    ]);
    let recs: Vec<serde_json::Value> = serde_json::from_str(&ok(&out)).expect("a JSON array");
    // llama-bench's order: per thread count, prompt tests then generation tests.
    let order: Vec<(u64, u64, u64)> = recs
        .iter()
        .map(|r| {
            (
                r["n_threads"].as_u64().unwrap(),
                r["n_prompt"].as_u64().unwrap(),
                r["n_gen"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(order, [(1, 16, 0), (1, 0, 8), (2, 16, 0), (2, 0, 8)]);
    for r in &recs {
        for s in [
            "build_commit",
            "cpu_info",
            "backends",
            "model_filename",
            "model_type",
            "type_k",
            "type_v",
            "test_time",
        ] {
            assert!(r[s].is_string(), "{s} is a string in {r}");
        }
        for n in [
            "build_number",
            "model_size",
            "model_n_params",
            "n_batch",
            "n_threads",
            "n_depth",
            "avg_ns",
            "stddev_ns",
        ] {
            assert!(r[n].is_u64(), "{n} is an integer in {r}");
        }
        assert!(r["backends"].as_str().unwrap().starts_with("tiletune ("));
        assert_eq!(r["model_filename"], model.to_str().unwrap());
        assert_eq!(r["model_type"], "llama 0M all F32");
        assert_eq!(r["n_depth"], 0);
        // llama-bench's default cache type, and ours.
        assert_eq!((&r["type_k"], &r["type_v"]), (&"f16".into(), &"f16".into()));
        assert_eq!(r["n_batch"], 2048);
        // Every tensor's elements: embeddings, output norm, output, layers.
        let per_layer = 32 + 32 * 32 + 2 * 16 * 32 + 32 * 32 + 32 + 3 * 64 * 32;
        assert_eq!(r["model_n_params"], 2 * 31 * 32 + 32 + 2 * per_layer);
        assert_eq!(
            r["model_size"].as_u64().unwrap(),
            4 * r["model_n_params"].as_u64().unwrap()
        );
        let ns: Vec<u64> = r["samples_ns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        let ts: Vec<f64> = r["samples_ts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(ns.len(), 3);
        assert_eq!(ts.len(), 3);
        let tokens = r["n_prompt"].as_u64().unwrap() + r["n_gen"].as_u64().unwrap();
        for (&n, &t) in ns.iter().zip(&ts) {
            assert!(close(t, 1e9 * tokens as f64 / n as f64), "{t} vs {n} ns");
        }
        let mean = ts.iter().sum::<f64>() / 3.0;
        assert!(close(r["avg_ts"].as_f64().unwrap(), mean));
        let var = ts.iter().map(|t| (t - mean).powi(2)).sum::<f64>() / 2.0;
        let sd = r["stddev_ts"].as_f64().unwrap();
        assert!(
            (sd - var.sqrt()).abs() <= 1e-6 * mean.max(1.0),
            "{sd} vs {}",
            var.sqrt()
        );
        assert_eq!(r["avg_ns"].as_u64().unwrap(), ns.iter().sum::<u64>() / 3);
        // A token reads every tensor but the untied embedding (31 × 32 f32).
        let bytes = r["decode_weight_bytes"].as_u64().unwrap();
        assert_eq!(bytes, r["model_size"].as_u64().unwrap() - 4 * 31 * 32);
        let gbps = &r["decode_weight_gbps"];
        if r["n_prompt"] == 0 {
            let want = r["avg_ts"].as_f64().unwrap() * bytes as f64 / 1e9;
            assert!(close(gbps.as_f64().unwrap(), want), "{gbps} vs {want}");
        } else {
            assert!(
                gbps.is_null(),
                "a prompt test has no decode bandwidth: {gbps}"
            );
        }
        let plan = &r["plan"];
        assert!(plan["tuned"].is_u64() && plan["nearest"].is_u64() && plan["default"].is_u64());
        assert_eq!(plan["tuned"], 0, "no table, so nothing is tuned");
        assert_eq!(
            plan["differ"], 0,
            "no table, so every kernel is the default's"
        );
        assert!(plan["default"].as_u64().unwrap() > 0);
    }
}

#[test]
fn jsonl_and_markdown_print_the_same_tests() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let m = model.to_str().unwrap();
    let db = no_db(dir.path());
    let common = [
        "-m", m, "-p", "4,8", "-n", "0", "-t", "1", "-r", "1", "--db", &db,
    ];
    let mut args = vec!["bench", "model", "-o", "jsonl"];
    args.extend(common);
    let lines: Vec<serde_json::Value> = ok(&tiletune(&args))
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object a line"))
        .collect();
    let prompts: Vec<u64> = lines
        .iter()
        .map(|r| r["n_prompt"].as_u64().unwrap())
        .collect();
    assert_eq!(prompts, [4, 8]);
    assert!(lines.iter().all(|r| r["n_gen"] == 0));

    let mut args = vec!["bench", "model"];
    args.extend(common);
    let md = ok(&tiletune(&args));
    let rows: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
    assert_eq!(rows.len(), 4, "header, rule and two tests:\n{md}");
    assert!(rows[0].contains("t/s") && rows[0].contains("test"));
    assert!(
        rows[2].contains(" pp4 ") && rows[3].contains(" pp8 "),
        "{md}"
    );
    assert!(rows[2].contains(" ± "), "{md}");

    // A non-default cache type shows in llama-bench's type_k/type_v columns.
    let mut args = vec!["bench", "model", "--kv-type", "f32"];
    args.extend(common);
    let md = ok(&tiletune(&args));
    let header = md.lines().next().unwrap();
    assert!(
        header.contains("type_k") && header.contains("type_v"),
        "{md}"
    );
    assert!(md.lines().nth(2).unwrap().contains(" f32 "), "{md}");

    // --json is -o json.
    let mut args = vec!["--json", "bench", "model"];
    args.extend(common);
    let recs: Vec<serde_json::Value> = serde_json::from_str(&ok(&tiletune(&args))).unwrap();
    assert_eq!(recs.len(), 2);

    // -d: every test again at each depth, named as llama-bench names it,
    // with n_depth in the records; the context must hold depth + test.
    let depth = [
        "-m", m, "-p", "4", "-n", "3", "-d", "0,16", "-t", "1", "-r", "2", "--db", &db,
    ];
    let mut args = vec!["bench", "model", "-o", "jsonl"];
    args.extend(depth);
    let recs: Vec<(u64, u64, u64)> = ok(&tiletune(&args))
        .lines()
        .map(|l| {
            let r: serde_json::Value = serde_json::from_str(l).unwrap();
            let f = |k: &str| r[k].as_u64().unwrap();
            (f("n_depth"), f("n_prompt"), f("n_gen"))
        })
        .collect();
    assert_eq!(recs, [(0, 4, 0), (0, 0, 3), (16, 4, 0), (16, 0, 3)]);
    let mut args = vec!["bench", "model"];
    args.extend(depth);
    let md = ok(&tiletune(&args));
    assert!(
        md.contains(" pp4 @ d16 ") && md.contains(" tg3 @ d16 "),
        "{md}"
    );
    let mut args = vec!["bench", "model", "--db", &db];
    args.extend(["-m", m, "-p", "100", "-n", "0", "-d", "100", "-r", "1"]);
    let out = tiletune(&args);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("-d"));
}

#[test]
fn bad_flags_give_clear_errors() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let m = model.to_str().unwrap();
    let db = no_db(dir.path());
    let missing = dir.path().join("missing.gguf");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["-m", m, "-r", "0"], "--repetitions"),
        (vec!["-m", m, "-t", "0"], "--threads"),
        (vec!["-m", m, "-t", "1,x"], "invalid value 'x'"),
        (vec!["-m", m, "-p", "-4"], "-4"),
        (vec!["-m", m, "-p", "0", "-n", "0"], "nothing to run"),
        (vec!["-m", m, "-o", "xml"], "possible values"),
        (vec!["-m", m, "-b", "0"], "--batch-size"),
        (vec!["-m", m, "--qmode", "a4"], "use a8 or a32"),
        (
            vec!["-m", m, "-p", "1000", "-n", "0", "-r", "1"],
            "at most 128",
        ),
        (vec!["-m", missing.to_str().unwrap()], "does not exist"),
        (vec!["-m", m, "--kv-type", "q4_0"], "use f32, f16 or q8_0"),
        // head_dim 8: Q8_0 pages need a multiple of 32.
        (vec!["-m", m, "--kv-type", "q8_0"], "multiple of 32"),
    ];
    for (flags, want) in cases {
        let mut args = vec!["bench", "model", "--db", &db];
        args.extend(&flags);
        let out = tiletune(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flags:?} should fail");
        assert!(
            err.contains(want),
            "{flags:?}: stderr lacks `{want}`:\n{err}"
        );
    }
}

/// `tune --model` ends with the model-level check: the tuned plan against
/// the default plan, per phase, stored as verdicts that `plan` and `table
/// show` print, and the workload decides the joint layout choice.
#[test]
fn tune_model_ends_with_a_model_level_verdict_that_plan_shows() {
    if under_qemu() {
        eprintln!("skipped under qemu: spawns the binary");
        return;
    }
    let dir = std::env::temp_dir().join(format!("tt-tune-verdict-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let model = tiny_model(&dir);
    let m = model.to_str().unwrap();
    let db = dir.join("sel.db");
    let db = db.to_str().unwrap();
    let bad = tiletune(&["tune", "--model", m, "--db", db, "--workload", "pp0"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("ppN nor tgN")
            || String::from_utf8_lossy(&bad.stderr).contains("token count"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let out = ok(&tiletune(&[
        "tune",
        "--model",
        m,
        "--db",
        db,
        "--quick",
        "--budget",
        "4s",
        "--threads",
        "2",
        "--workload",
        "pp32,tg16",
    ]));
    assert!(out.contains("joint layout choice for pp32,tg16"), "{out}");
    assert!(out.contains("model-level check"), "{out}");
    assert!(
        out.contains("prefill pp32") && out.contains("decode  tg16"),
        "{out}"
    );
    // The check's first line says whether it times anything.
    let as_default = out.matches("not timed: the tuned plan runs").count();
    assert_eq!(
        out.contains("model-level check: nothing to time"),
        as_default == 2,
        "{out}"
    );
    assert_eq!(
        out.contains("model-level check: tuned plan against default plan, 3 alternated rounds"),
        as_default < 2,
        "{out}"
    );
    // It ends with what the runtime makes of the verdicts.
    assert!(
        out.contains("verdict prefill: ") && out.contains("verdict decode: "),
        "{out}"
    );
    let plan = ok(&tiletune(&["plan", "--model", m, "--db", db, "-t", "2"]));
    for (phase, test) in [("prefill", "prefill pp32"), ("decode", "decode  tg16")] {
        let line = plan
            .lines()
            .find(|l| l.starts_with(&format!("verdict {phase}: ")))
            .unwrap_or_else(|| panic!("no `{phase}` verdict line:\n{plan}"));
        assert!(
            line.contains("the tuned choices run") || line.contains("the defaults run"),
            "{line}"
        );
        // A phase is timed, unless its tuned choices are the default
        // plan's (or none were made): then tune says it did not time it,
        // and plan says why.
        let timed = out
            .lines()
            .find(|l| l.trim_start().starts_with(test))
            .unwrap_or_else(|| panic!("no `{test}` line:\n{out}"));
        if timed.contains("not timed") {
            assert!(
                timed.contains("the tuned plan runs the default plan's choices"),
                "{timed}"
            );
            assert!(
                line.contains("each the default plan's (nothing to time); the defaults run")
                    || line.contains("nothing tuned; the defaults run"),
                "{line}"
            );
        } else {
            assert!(timed.contains("tok/s"), "{timed}");
            assert!(line.contains("over 3 alternated rounds"), "{line}");
        }
    }
    let show = ok(&tiletune(&["table", "show", "--db", db]));
    assert!(show.contains("model-level verdicts"), "{show}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Thread counts, chunk counts, budgets and shapes out of range (`-t 0`,
/// `-t 5000`, a budget that overflows the clock, an operand too large to
/// allocate) are refused with a message; more threads than CPUs
/// run, with a warning.
#[test]
fn thread_chunk_and_budget_limits_are_said() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let m = model.to_str().unwrap();
    let db = no_db(dir.path());
    let text = dir.path().join("t.txt");
    std::fs::write(&text, "abc ab abc a b c ".repeat(20)).unwrap();
    let t = text.to_str().unwrap();
    let refused: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "run", "--model", m, "--db", &db, "-t", "0", "--prompt", "ab",
            ],
            "0 threads cannot run anything",
        ),
        (
            vec![
                "run", "--model", m, "--db", &db, "-t", "5000", "--prompt", "ab",
            ],
            "more than the 1024",
        ),
        (
            vec!["plan", "--model", m, "--db", &db, "-t", "0"],
            "0 threads",
        ),
        (
            vec![
                "ppl", "--model", m, "--db", &db, "-f", t, "-c", "16", "--chunks", "0",
            ],
            "--chunks",
        ),
        (
            vec![
                "tune",
                "--op",
                "gemv",
                "--dtype",
                "f32",
                "--shape",
                "8x8",
                "--db",
                &db,
                "--budget",
                "99999999999999999h",
            ],
            "longer than a budget may be",
        ),
        (
            vec![
                "tune", "--op", "gemv", "--dtype", "f32", "--shape", "8x8", "--db", &db, "-t", "0",
            ],
            "0 threads",
        ),
        // Sizes are checked before anything is allocated.
        (
            vec!["bench", "gemv", "--shape", "18446744073709551615x2"],
            "too large for gemv",
        ),
        (
            vec!["bench", "gemm", "--shape", "100000x100000x100000"],
            "too large for gemm",
        ),
        (
            vec![
                "tune",
                "--op",
                "gemv",
                "--dtype",
                "f32",
                "--shape",
                "99999999x99999999",
                "--db",
                &db,
            ],
            "too large",
        ),
    ];
    for (args, want) in refused {
        let out = tiletune(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(
            !err.contains("panicked") && !err.contains("memory allocation"),
            "{args:?}: {err}"
        );
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let many = (cpus + 2).to_string();
    let out = tiletune(&[
        "run", "--model", m, "--db", &db, "-t", &many, "--prompt", "ab", "-n", "2", "--temp", "0",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!("warning: {many} threads on the")),
        "{err}"
    );
}

/// A garbage `--db` is one warning line on stderr (path, reason, "running
/// the default plan") and the model still runs; `run`'s summary line says
/// where its plan came from.
#[test]
fn an_unusable_table_is_one_warning_and_run_names_its_plan() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let m = model.to_str().unwrap();
    let junk = dir.path().join("junk.db");
    std::fs::write(&junk, vec![0x5au8; 4096]).unwrap();
    let j = junk.to_str().unwrap();
    for args in [
        vec![
            "run", "--model", m, "--db", j, "--prompt", "ab", "-n", "2", "--temp", "0",
        ],
        vec!["plan", "--model", m, "--db", j],
    ] {
        let out = tiletune(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {err}");
        let warnings: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("warning: selector table"))
            .collect();
        assert_eq!(warnings.len(), 1, "{args:?}: {err}");
        assert!(
            warnings[0].contains(j) && warnings[0].ends_with("running the default plan"),
            "{}",
            warnings[0]
        );
        if args[0] == "run" {
            assert!(err.contains("| plan default |"), "{err}");
        }
    }
}

/// A context larger than the model holds is clamped with a warning, and a
/// generation that fills the context says so instead of "MaxTokens".
#[test]
fn context_limits_are_said() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let m = model.to_str().unwrap();
    let db = no_db(dir.path());
    let out = tiletune(&[
        "run", "--model", m, "--db", &db, "--prompt", "ab", "-n", "2", "--temp", "0", "--ctx",
        "40000",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("warning: --ctx 40000 is more than the 128 positions this model holds"),
        "{err}"
    );
    let out = tiletune(&[
        "run", "--model", m, "--db", &db, "--prompt", "ab", "-n", "100", "--temp", "0", "--ctx",
        "8",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("stop: ContextFull"), "{err}");
}

/// A device, a directory or an oversized input is refused before it is
/// read: `ppl -f /dev/zero` read until memory ran out.
#[test]
fn inputs_that_are_not_regular_files_are_refused() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let m = model.to_str().unwrap();
    let db = no_db(dir.path());
    let d = dir.path().to_str().unwrap();
    for (args, want) in [
        (
            vec!["ppl", "--model", m, "--db", &db, "-f", "/dev/zero"],
            "/dev/zero is a character device, not a regular file",
        ),
        (
            vec!["ppl", "--model", m, "--db", &db, "-f", d],
            "is a directory, not a regular file",
        ),
        (
            vec!["run", "--model", "/dev/zero", "--db", &db, "-p", "a"],
            "/dev/zero is a character device",
        ),
    ] {
        let out = tiletune(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// A file whose meaning is broken is refused by `plan` and `tune --model`
/// as by `run`, with what is wrong, never with a normal-looking plan.
#[test]
fn plan_and_tune_refuse_a_model_run_would_refuse() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = no_db(dir.path());
    for (i, (broken, want)) in [
        (Broken::Layers(0), "out of range"),
        (Broken::Layers(999), "blk.2.attn_norm.weight"),
        (Broken::KvHeads(3), "not a multiple of 3 kv heads"),
        (Broken::NoEmbedding, "token_embd.weight"),
    ]
    .into_iter()
    .enumerate()
    {
        let model = tiny_model_as(dir.path(), &format!("bad{i}.gguf"), broken);
        let m = model.to_str().unwrap();
        for args in [
            vec!["plan", "--model", m, "--db", &db],
            vec![
                "run", "--model", m, "--db", &db, "--prompt", "ab", "-n", "1",
            ],
            vec![
                "tune", "--model", m, "--db", &db, "--quick", "--budget", "1s",
            ],
        ] {
            let out = tiletune(&args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{args:?} accepted a broken file");
            assert!(err.contains(want), "{args:?}: {err}");
            assert!(!err.contains("panicked"), "{args:?}: {err}");
        }
    }
}

/// llama.cpp's flag names mean the same here, on every subcommand that
/// takes them, and each has help text.
#[test]
fn llama_cpp_flag_names_work_across_subcommands() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let m = model.to_str().unwrap();
    let db = no_db(dir.path());
    let prompt = dir.path().join("prompt.txt");
    std::fs::write(&prompt, "ab abc").unwrap();
    let p = prompt.to_str().unwrap();

    // -f reads the prompt, -c sizes the context, -n -1 runs until the end of
    // text or a full context (never "MaxTokens"), -s seeds the sampler.
    let out = tiletune(&[
        "run", "-m", m, "--db", &db, "-f", p, "-c", "12", "-n", "-1", "-s", "3", "--top-k", "5",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("stop: ContextFull") || err.contains("stop: Eog"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ab abc"));
    let out = tiletune(&[
        "run",
        "-m",
        m,
        "--db",
        &db,
        "--ctx-size",
        "12",
        "-p",
        "ab",
        "-n",
        "1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    for (args, want) in [
        (
            vec!["run", "-m", m, "-p", "ab", "-f", p],
            "cannot be used with",
        ),
        (
            vec!["run", "-m", m, "-p", "ab", "-n", "-2"],
            "`-2` is not a token count",
        ),
        (
            vec!["bench", "gemv", "--shape", "8x8", "-t", "0"],
            "0 threads cannot run anything",
        ),
    ] {
        let out = tiletune(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
    }

    let help = ok(&tiletune(&["run", "--help"]));
    for (flag, says) in [
        ("--top-k", "k most likely tokens"),
        ("--top-p", "nucleus"),
        ("--min-p", "less likely than p times"),
        ("--repeat-penalty", "discourages repeats"),
        ("-s, --seed", "same seed"),
        ("--temp", "0 is greedy"),
    ] {
        // The help text follows the flag, on its line or on the next ones.
        let at = help
            .find(flag)
            .unwrap_or_else(|| panic!("{flag} missing from run --help"));
        let next_flag = help[at + flag.len()..]
            .find("\n  -")
            .map_or(help.len(), |i| at + flag.len() + i);
        assert!(
            help[at..next_flag].contains(says),
            "{flag} lacks its help text:\n{help}"
        );
    }
    let help = ok(&tiletune(&["tune", "--help"]));
    assert!(help.contains("-m, --model"), "{help}");
    assert!(help.contains("q4_k") && help.contains("mxfp4"), "{help}");
    assert!(ok(&tiletune(&["bench", "gemv", "--help"])).contains("-t, --threads"));
}

/// A shape whose buffers cannot fit in memory is refused with its size and
/// the memory available, before anything is allocated (it aborted).
#[test]
fn a_problem_larger_than_memory_is_refused() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let out = tiletune(&["bench", "attention", "--shape", "4096x4096x4096x4096"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("of memory is available; use a smaller shape"),
        "{err}"
    );
}

/// The hostile inputs of issue #18 and more of the same kinds, through the
/// real binary: each is a clear error (or, where marked, a warning and a
/// normal run), never a panic, an abort, a signal or a silent success.
#[test]
fn a_battery_of_hostile_inputs_gets_clear_errors() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let m = model.to_str().unwrap();
    let db = no_db(dir.path());
    let scratch = |name: &str, bytes: &[u8]| -> String {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p.to_str().unwrap().to_string()
    };
    let full = std::fs::read(&model).unwrap();
    let truncated = scratch("truncated.gguf", &full[..full.len() / 2]);
    let header_only = scratch("header.gguf", &full[..24]);
    let empty = scratch("empty.gguf", b"");
    let random: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let noise = scratch("noise.gguf", &random);
    let garbage_db = scratch("garbage.db", &random);
    let deep = scratch("deep.json", "[".repeat(100_000).as_bytes());
    let not_json = scratch("not.json", b"{\"abi\": 3, \"rows\": [");
    let tdb = dir.path().join("t.db");
    let tdb = tdb.to_str().unwrap();
    let dir_s = dir.path().to_str().unwrap();
    let big = "18446744073709551615";

    enum Want {
        /// Exits with status 1 or 2 and says this on stderr.
        Fails(&'static str),
        /// Exits 0 and says this on stderr (a warning).
        Warns(&'static str),
    }
    use Want::*;
    let cases: Vec<(Vec<String>, Want)> = vec![
        (
            vec!["bench", "gemv", "--shape", &format!("{big}x2")],
            Fails("too large"),
        ),
        (
            vec!["bench", "gemm", "--shape", &format!("{big}x2x2")],
            Fails("too large"),
        ),
        (
            vec!["bench", "qgemv", "--shape", &format!("{big}x32")],
            Fails("too large"),
        ),
        (
            vec!["bench", "softmax", "--shape", &format!("{big}x2")],
            Fails("too large"),
        ),
        (
            vec!["bench", "attention", "--shape", &format!("2x1x8x{big}")],
            Fails("too large"),
        ),
        (
            vec!["bench", "gemv", "--shape", "100000x100000"],
            Fails("too large"),
        ),
        (
            vec!["bench", "gemm", "--shape", "100000x100000x100000"],
            Fails("too large"),
        ),
        (
            vec!["bench", "embed", "--shape", "40000x40000x40000"],
            Fails("of memory is available"),
        ),
        (
            vec!["bench", "eltwise", "--op", "silu", "--shape", "2000000000"],
            Fails("of memory is available"),
        ),
        (
            vec!["bench", "norm", "--shape", "40000x40000"],
            Fails("of memory is available"),
        ),
        (
            vec!["bench", "rope", "--shape", "40000x40000x40000"],
            Fails("of memory is available"),
        ),
        (
            vec!["bench", "matmul-rope", "--shape", "40000x40000x40000x40000"],
            Fails("of memory is available"),
        ),
        (
            vec![
                "bench",
                "roofline",
                "--no-store",
                "--array-mib",
                "100000000",
            ],
            Fails("of memory is available"),
        ),
        (
            vec!["bench", "roofline", "--no-store", "--array-mib", big],
            Fails("more memory than can be addressed"),
        ),
        (
            vec!["bench", "gemv", "--shape", "0x8"],
            Fails("positive sizes"),
        ),
        (
            vec!["bench", "gemv", "--shape", "8x8", "--isa", "sse9"],
            Fails("sse9"),
        ),
        (
            vec!["bench", "gemv", "--shape", "8x8", "--params", "[1]"],
            Fails("JSON object"),
        ),
        (
            vec![
                "bench",
                "gemv",
                "--shape",
                "8x8",
                "--params",
                "{\"nr\": 1e308}",
            ],
            Fails("nr"),
        ),
        (
            vec![
                "tune",
                "--op",
                "gemv",
                "--dtype",
                "f32",
                "--shape",
                &format!("{big}x2"),
                "--db",
                tdb,
            ],
            Fails("too large"),
        ),
        (
            vec![
                "tune",
                "--op",
                "gemv",
                "--dtype",
                "f32",
                "--shape",
                "99999999x99999999",
                "--db",
                tdb,
            ],
            Fails("too large"),
        ),
        (
            vec![
                "tune",
                "--suite",
                "llm-decode",
                "--budget",
                "99999999999999999h",
                "--db",
                tdb,
            ],
            Fails("budget"),
        ),
        (
            vec![
                "tune", "--op", "conv", "--dtype", "f32", "--shape", "2x2", "--db", tdb,
            ],
            Fails("unknown op `conv`"),
        ),
        (
            vec!["run", "-m", &truncated, "--db", &db, "-p", "ab"],
            Fails("truncated.gguf"),
        ),
        (
            vec!["run", "-m", &header_only, "--db", &db, "-p", "ab"],
            Fails("header.gguf"),
        ),
        (
            vec!["run", "-m", &empty, "--db", &db, "-p", "ab"],
            Fails("empty.gguf"),
        ),
        (
            vec!["run", "-m", &noise, "--db", &db, "-p", "ab"],
            Fails("noise.gguf"),
        ),
        (
            vec!["run", "-m", dir_s, "--db", &db, "-p", "ab"],
            Fails("config.json"),
        ),
        (
            vec!["plan", "-m", &truncated, "--db", &db],
            Fails("truncated.gguf"),
        ),
        (
            vec!["ppl", "-m", m, "--db", &db, "-f", "/dev/zero"],
            Fails("not a regular file"),
        ),
        (
            vec!["run", "-m", m, "--db", &db, "-p", "ab", "-t", "0"],
            Fails("0 threads"),
        ),
        (
            vec!["run", "-m", m, "--db", &db, "-p", "ab", "-t", "5000"],
            Fails("5000 threads"),
        ),
        (
            vec![
                "run",
                "-m",
                m,
                "--db",
                &db,
                "-p",
                "ab",
                "-n",
                "18446744073709551616",
            ],
            Fails("not a token count"),
        ),
        (
            vec!["run", "-m", m, "--db", &db, "--token-ids", "99999999"],
            Fails("99999999"),
        ),
        (
            vec!["run", "-m", m, "--db", &db, "--token-ids", "1,,2"],
            Fails("--token-ids"),
        ),
        (
            vec!["run", "-m", m, "--db", &db, "--token-ids", ""],
            Fails("--token-ids"),
        ),
        (
            vec!["run", "-m", m, "--db", &db, "-p", "ab", "--kv-type", "q8_0"],
            Fails("multiple of 32"),
        ),
        (
            vec!["run", "-m", m, "--db", &garbage_db, "-p", "ab", "-n", "1"],
            Warns("running the default plan"),
        ),
        (
            vec!["table", "import", &deep, "--db", tdb],
            Fails("deep.json"),
        ),
        (
            vec!["table", "import", &not_json, "--db", tdb],
            Fails("not.json"),
        ),
        (
            vec!["table", "show", "--db", &garbage_db],
            Fails("garbage.db"),
        ),
    ]
    .into_iter()
    .map(|(a, w)| (a.into_iter().map(String::from).collect(), w))
    .collect();

    let mut bad = Vec::new();
    for (args, want) in &cases {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = tiletune(&argv);
        let err = String::from_utf8_lossy(&out.stderr);
        let crashed = out.status.code().is_none()
            || out.status.code() == Some(101)
            || err.contains("panicked")
            || err.contains("memory allocation of");
        let ok = match want {
            Fails(says) => matches!(out.status.code(), Some(1 | 2)) && err.contains(says),
            Warns(says) => out.status.success() && err.contains(says),
        };
        if crashed || !ok {
            bad.push(format!(
                "tiletune {}\n  status {:?}\n  {}",
                args.join(" "),
                out.status,
                err.trim()
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {} cases:\n{}",
        bad.len(),
        cases.len(),
        bad.join("\n")
    );
}
