//! End-to-end checks of `tiletune tune` and `tiletune table` through the real
//! binary: a campaign fills the selector table, a campaign killed with
//! SIGKILL resumes without losing or duplicating rows, and bad input gives a
//! clear error.
//!
//! These spawn the built binary, which qemu-user cannot do from inside an
//! emulated test process, so under qemu they report a skip.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

fn under_qemu() -> bool {
    std::env::var_os("QEMU_CPU").is_some()
}

fn tiletune(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tiletune"))
        .args(args)
        .output()
        .expect("the tiletune binary runs")
}

fn selections(db: &Path) -> Vec<serde_json::Value> {
    let out = tiletune(&[
        "--json",
        "table",
        "show",
        "--all",
        "--db",
        db.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("table show --json prints JSON");
    v["selections"]
        .as_array()
        .cloned()
        .expect("table show --json has a selections list")
}

fn measurement_count(db: &Path) -> usize {
    measurement_keys(db).len()
}

/// `problem|candidate` of every stored measurement.
fn measurement_keys(db: &Path) -> Vec<String> {
    let file = db.with_extension("export.json");
    let out = tiletune(&[
        "table",
        "export",
        "--db",
        db.to_str().unwrap(),
        "--out",
        file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    v["measurements"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .map(|m| format!("{}|{}", m["problem"], m["candidate"]))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn tune_fills_the_table_and_show_displays_it() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sel.db");
    let out = tiletune(&[
        "tune",
        "--op",
        "gemv",
        "--dtype",
        "f32",
        "--shape",
        "37x70",
        "--quick",
        "--strategy",
        "halving",
        "--db",
        db.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("gemv/f32/n=37,k=70"), "{text}");
    let sels = selections(&db);
    assert_eq!(sels.len(), 1, "{sels:?}");
    assert_eq!(sels[0]["problem"]["op"], "gemv");
    // Every timed candidate carries counters read around the timed region:
    // hardware ones where the PMU is readable, else the flagged fallback.
    let file = db.with_extension("export.json");
    let out = tiletune(&[
        "table",
        "export",
        "--db",
        db.to_str().unwrap(),
        "--out",
        file.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let export: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let timed: Vec<&serde_json::Value> = export["measurements"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["valid"] == true)
        .collect();
    assert!(!timed.is_empty());
    for m in timed {
        let c = &m["counters"];
        assert!(c["counts"].is_object(), "{c}");
        assert!(c["metrics"].is_object() || c["fallback"].is_string(), "{c}");
        // The work model goes with the measurement: 2·n·k flops.
        assert_eq!(m["stats"]["work"]["flops"], 2 * 37 * 70, "{}", m["stats"]);
        assert!(m["stats"]["work"]["bytes"].as_u64().unwrap() > 4 * 37 * 70);
    }
    // ... and the report places the problem on the roofline with it.
    let report = dir.path().join("report");
    let out = tiletune(&[
        "report",
        "--db",
        db.to_str().unwrap(),
        "-o",
        report.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = std::fs::read_to_string(report.join("report.md")).unwrap();
    assert!(
        md.contains("FLOP/byte") && !md.contains("not on the roofline"),
        "{md}"
    );
    let speedup = sels[0]["speedup"].as_f64().unwrap();
    assert!(
        speedup >= 1.0,
        "the default is a candidate, so the winner is never slower: {speedup}"
    );
}

/// `tune --suite llm-decode` at one thread, quick: long enough to be
/// interrupted mid-campaign.
fn suite_args(db: &Path) -> [&str; 10] {
    [
        "tune",
        "--suite",
        "llm-decode",
        "--quick",
        "--strategy",
        "descent",
        "--threads",
        "1",
        "--db",
        db.to_str().unwrap(),
    ]
}

/// Starts `args` with stderr piped, and waits until `at_least`
/// measurements are stored (or 20 s have passed): how many there are.
fn start_and_wait(args: &[&str], db: &Path, at_least: usize) -> (std::process::Child, usize) {
    let child = Command::new(env!("CARGO_BIN_EXE_tiletune"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stored = 0;
    for _ in 0..400 {
        std::thread::sleep(Duration::from_millis(50));
        if db.exists() {
            stored = measurement_count(db);
            if stored >= at_least {
                break;
            }
        }
    }
    (child, stored)
}

#[test]
fn killed_campaign_resumes_without_loss_or_duplicates() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sel.db");
    let args = suite_args(&db);
    // Let it commit some measurements, then SIGKILL it mid-campaign.
    let (mut child, before) = start_and_wait(&args, &db, 5);
    child.kill().unwrap();
    child.wait().unwrap();
    let killed_at = measurement_count(&db);
    assert!(
        killed_at >= before && killed_at > 0,
        "{killed_at} measurements before the kill"
    );

    let out = tiletune(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("resuming campaign"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = measurement_count(&db);
    assert!(after >= killed_at, "nothing lost: {after} < {killed_at}");
    // Measurements are keyed by (SoC, ABI, problem, candidate): whatever the
    // interruption, no candidate is stored twice. (A rerun may still add a
    // few: descent confirms its winner at full fidelity, and that longer
    // measurement replaces the shorter one it was chosen by.)
    let out = tiletune(&args);
    assert!(out.status.success());
    let keys = measurement_keys(&db);
    let mut unique = keys.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), keys.len(), "duplicated measurements");
    assert!(keys.len() >= after);
    let problems = 13; // llm-decode: distinct linear shapes of the three suite models
    assert_eq!(selections(&db).len(), problems);
}

/// Ctrl-C stops a campaign at the next candidate: it says so, exits with
/// the shell's 130, keeps every measurement, and the same command run
/// again resumes the campaign and completes it.
#[test]
fn ctrl_c_stops_the_campaign_and_the_same_command_resumes_it() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sel.db");
    let args = suite_args(&db);
    // The handler is installed before the table is opened: once a
    // measurement is stored, SIGINT reaches it.
    let (child, before) = start_and_wait(&args, &db, 3);
    assert!(before >= 3, "the campaign stored no measurements");
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        err.contains("stopping after the measurement in flight"),
        "{err}"
    );
    assert!(err.contains("the campaign was stopped"), "{err}");
    let stopped_at = measurement_count(&db);
    assert!(stopped_at >= before, "{stopped_at} < {before}");
    let problems = 13; // llm-decode: distinct linear shapes of the three suite models
    assert!(selections(&db).len() < problems);

    let out = tiletune(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("resuming campaign"), "{err}");
    assert!(measurement_count(&db) >= stopped_at);
    assert_eq!(selections(&db).len(), problems);
}

/// Two tuners on one table at once: the second does not take over the
/// first's live campaign, both finish their own, and the table ends with
/// one winner per problem and no lock file.
#[test]
fn two_tuners_on_one_table_keep_their_own_campaigns() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sel.db");
    let args = [
        "tune",
        "--suite",
        "llm-decode",
        "--quick",
        "--strategy",
        "descent",
        "--threads",
        "1",
        "--db",
        db.to_str().unwrap(),
    ];
    let first = Command::new(env!("CARGO_BIN_EXE_tiletune"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Until the first tuner has made its table, an export may find a file
    // with no schema yet: wait for one that reads.
    let file = dir.path().join("probe.json");
    for _ in 0..400 {
        std::thread::sleep(Duration::from_millis(50));
        let out = tiletune(&[
            "table",
            "export",
            "--db",
            db.to_str().unwrap(),
            "--out",
            file.to_str().unwrap(),
        ]);
        let n = out.status.success().then(|| {
            let v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
            v["measurements"].as_array().map_or(0, Vec::len)
        });
        if n.is_some_and(|n| n >= 3) {
            break;
        }
    }
    let second = tiletune(&args);
    let first = first.wait_with_output().unwrap();
    for (name, out) in [("first", &first), ("second", &second)] {
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(!err.contains("resuming campaign"), "{err}");
    // measurement_keys writes the export read here.
    assert!(!measurement_keys(&db).is_empty());
    let export = db.with_extension("export.json");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&export).unwrap()).unwrap();
    let campaigns = v["campaigns"].as_array().unwrap();
    assert_eq!(campaigns.len(), 2, "{campaigns:?}");
    assert!(campaigns.iter().all(|c| !c["finished_at"].is_null()));
    assert_eq!(selections(&db).len(), 13);
    let locks: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".lock"))
        .collect();
    assert!(locks.is_empty(), "{locks:?}");
}

#[test]
fn bad_input_is_a_clear_error() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sel.db");
    let d = db.to_str().unwrap();
    for (args, needle) in [
        (
            vec![
                "tune", "--op", "conv", "--dtype", "f32", "--shape", "4x4", "--db", d,
            ],
            "unknown op",
        ),
        (
            vec![
                "tune", "--op", "gemv", "--dtype", "f32", "--shape", "4x", "--db", d,
            ],
            "not a shape",
        ),
        (
            vec![
                "tune", "--op", "gemv", "--dtype", "q9", "--shape", "4x4", "--db", d,
            ],
            "no gemv kernel for dtype",
        ),
        (vec!["tune", "--suite", "nope", "--db", d], "unknown suite"),
        (vec!["tune", "--db", d], "say what to tune"),
    ] {
        let out = tiletune(&args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    // A corrupt table is refused and left as it was.
    std::fs::write(
        &db,
        b"definitely not sqlite, just bytes ....................",
    )
    .unwrap();
    let before = std::fs::read(&db).unwrap();
    let out = tiletune(&[
        "tune", "--op", "gemv", "--dtype", "f32", "--shape", "8x8", "--quick", "--db", d,
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(d),
        "the error names the file"
    );
    assert_eq!(std::fs::read(&db).unwrap(), before);
}
