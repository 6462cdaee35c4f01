//! `tiletune table import` leaves out the rows the runtime could not run,
//! says each on stderr, and imports the rest.
//!
//! Under qemu-user the binary cannot be spawned from the emulated test
//! process, so there the test reports a skip.

use serde_json::json;
use std::process::Command;
use tiletune_kernels::KERNEL_ABI;
use tiletune_tables::{
    Candidate, Problem, Selection, SelectorDb, SocExport, SocRecord, write_export,
};

fn selection(variant: &str, params: serde_json::Value, threads: usize) -> Selection {
    Selection {
        soc: "00c0ffee00c0ffee".into(),
        kernel_abi: KERNEL_ABI,
        problem: Problem::new("gemv", "f32", [("n", 64), ("k", 64)]).unwrap(),
        thread_budget: 2,
        winner: Candidate::new(variant, params, threads).unwrap(),
        median_ns: 1000.0,
        default_ns: Some(1500.0),
        speedup: None,
        campaign: None,
        selected_at: 0,
    }
}

#[test]
fn import_refuses_rows_the_runtime_could_not_run() {
    if std::env::var_os("QEMU_CPU").is_some() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let good = json!({"nr": 4, "unroll": 1, "prefetch": 0, "kc": 0});
    let mut bad_nr = good.clone();
    bad_nr["nr"] = json!(0);
    let mut export = SocExport {
        format: tiletune_tables::exchange::EXPORT_FORMAT.into(),
        version: tiletune_tables::exchange::EXPORT_VERSION,
        soc: SocRecord {
            fingerprint: "00c0ffee00c0ffee".into(),
            name: "Imported SoC".into(),
            probe: json!({}),
            first_seen: 0,
        },
        campaigns: vec![],
        measurements: vec![],
        selections: vec![],
        ceilings: vec![],
        peer_results: vec![],
        verdicts: vec![],
    };
    // Three problems: one good row, one with nr = 0, one with an ISA that
    // does not exist.
    let mut s = selection("scalar", good.clone(), 2);
    export.selections.push(s.clone());
    s.problem = Problem::new("gemv", "f32", [("n", 128), ("k", 64)]).unwrap();
    s.winner = Candidate::new("scalar", bad_nr, 2).unwrap();
    export.selections.push(s.clone());
    s.problem = Problem::new("gemv", "f32", [("n", 256), ("k", 64)]).unwrap();
    s.winner = Candidate::new("avx9000", good, 2).unwrap();
    export.selections.push(s);
    let file = dir.path().join("export.json");
    write_export(&file, &export).unwrap();
    let db = dir.path().join("sel.db");
    let out = Command::new(env!("CARGO_BIN_EXE_tiletune"))
        .args(["table", "import", "--db", db.to_str().unwrap()])
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("2 row(s) left out"), "{err}");
    assert!(err.contains("nr = 0"), "{err}");
    assert!(err.contains("unknown ISA `avx9000`"), "{err}");
    let sels = SelectorDb::open(&db).unwrap().selections(None).unwrap();
    assert_eq!(sels.len(), 1);
    assert_eq!(sels[0].problem.dim("n"), Some(64));
}
