//! `tiletune report` through the real binary: a missing table gives an error
//! that says what to run, an unknown SoC lists the ones the table holds, and
//! a table filled through the tables API becomes report.html and report.md,
//! whose empty sections say so.
//!
//! These spawn the built binary, which qemu-user cannot do from inside an
//! emulated test process, so under qemu they report a skip.

use serde_json::json;
use std::process::{Command, Output};
use tiletune_tables::{
    Campaign, Candidate, Measurement, MeasurementStats, Problem, Selection, SelectorDb, SocRecord,
    Work,
};

fn under_qemu() -> bool {
    std::env::var_os("QEMU_CPU").is_some()
}

fn tiletune(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tiletune"))
        .args(args)
        .output()
        .expect("the tiletune binary runs")
}

#[test]
fn missing_table_says_to_tune_first() {
    if under_qemu() {
        eprintln!("skipped under qemu-user");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("none.db");
    let out = tiletune(&[
        "report",
        "--db",
        db.to_str().unwrap(),
        "-o",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("run `tiletune tune`"), "{err}");
    assert!(!db.exists(), "a report never creates a table");
}

#[test]
fn report_from_a_table_writes_html_and_markdown() {
    if under_qemu() {
        eprintln!("skipped under qemu-user");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("selector.db");
    let fp = "00c0ffee00c0ffee";
    {
        let mut db = SelectorDb::open(&path).unwrap();
        db.register_soc(&SocRecord {
            fingerprint: fp.into(),
            name: "Test <SoC>".into(),
            probe: json!({"arch": "aarch64", "features": ["asimd"]}),
            first_seen: 0,
        })
        .unwrap();
        let c = Campaign::new(fp, "0.1.0", 1, "descent");
        db.start_campaign(&c).unwrap();
        let problem = Problem::new("gemv", "f32", [("n", 896), ("k", 896)]).unwrap();
        let mut ms = Vec::new();
        for (nr, t, ns) in [(4, 1, 300e3), (8, 1, 200e3), (4, 2, 180e3), (8, 2, 120e3)] {
            ms.push(Measurement {
                campaign: c.id.clone(),
                soc: fp.into(),
                kernel_abi: 1,
                problem: problem.clone(),
                candidate: Candidate::new("neon", json!({"nr": nr}), t).unwrap(),
                median_ns: Some(ns),
                stats: MeasurementStats {
                    median_ns: Some(ns),
                    // 2·n·k flops; f32 weights, x and y.
                    work: Some(Work {
                        bytes: 4 * (896 * 896 + 896 + 896),
                        flops: 2 * 896 * 896,
                    }),
                    ..MeasurementStats::default()
                },
                counters: json!({"metrics": {"task_clock_ns": ns}, "fallback": "no PMU in this test"}),
                valid: true,
                invalid_reason: None,
                measured_at: 0,
            });
        }
        db.insert_measurements(&ms).unwrap();
        db.put_selection(&Selection {
            soc: fp.into(),
            kernel_abi: 1,
            problem,
            thread_budget: 2,
            winner: ms[3].candidate.clone(),
            median_ns: 120e3,
            default_ns: Some(300e3),
            speedup: None,
            campaign: Some(c.id.clone()),
            selected_at: 0,
        })
        .unwrap();
    }
    let out_dir = dir.path().join("out");
    let db = path.to_str().unwrap();
    let wrong = tiletune(&[
        "report",
        "--db",
        db,
        "--soc",
        "nope",
        "-o",
        out_dir.to_str().unwrap(),
    ]);
    assert!(!wrong.status.success());
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert!(err.contains(fp) && err.contains("--soc"), "{err}");

    let out = tiletune(&[
        "report",
        "--db",
        db,
        "--soc",
        fp,
        "-o",
        out_dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(out_dir.join("report.html")).unwrap();
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    // Roofline (no ceilings, still the point), speedup and one heatmap.
    assert_eq!(html.matches("<figure class=\"plot\"").count(), 3, "{html}");
    assert!(html.contains("Test &lt;SoC&gt;"));
    assert!(html.contains("No machine ceilings stored"));
    assert!(html.contains("No peer speed results stored"));
    assert!(html.contains("no PMU in this test"));
    assert!(
        md.contains("| gemv f32 896x896 ≤2t | neon nr=8 t2 | 300 | 120 | 2.50× |"),
        "{md}"
    );
    assert!(md.contains("## Parameter heatmaps"));
    // The grid of nr × threads, best GFLOP/s per cell (1.6 MFLOP per run).
    assert!(md.contains("| threads \\\\ nr | 4 | 8 |"), "{md}");
}
