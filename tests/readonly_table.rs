//! A selector table in a directory this process cannot write (a table
//! shipped on a read-only partition) is read by every reading command, and a
//! writing command says it cannot write instead of failing inside SQLite.
//!
//! As root every directory is writable, so there the binary runs as `nobody`
//! through `setpriv`. Under qemu-user the binary cannot be spawned from the
//! emulated test process, so there the test reports a skip.

#[path = "support/script.rs"]
mod script;

use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tiletune_tables::{Campaign, Candidate, Problem, Selection, SelectorDb, SocRecord};

fn under_qemu() -> bool {
    std::env::var_os("QEMU_CPU").is_some()
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        .unwrap()
}

/// Runs the binary as a user who cannot write `dir`.
struct Unprivileged {
    bin: PathBuf,
    as_nobody: bool,
}

impl Unprivileged {
    fn new(scratch: &Path) -> Self {
        let built = PathBuf::from(env!("CARGO_BIN_EXE_tiletune"));
        if !is_root() {
            return Unprivileged {
                bin: built,
                as_nobody: false,
            };
        }
        assert!(
            Command::new("setpriv").arg("--help").output().is_ok(),
            "as root this test needs setpriv (util-linux) to run the binary unprivileged"
        );
        // `nobody` may not reach the build directory: give it a copy.
        let bin = scratch.join("tiletune");
        script::copy_executable(&built, &bin);
        Unprivileged {
            bin,
            as_nobody: true,
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut cmd = if self.as_nobody {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(&self.bin);
            c
        } else {
            Command::new(&self.bin)
        };
        cmd.args(args)
            .env("HOME", "/nonexistent")
            .output()
            .expect("the tiletune binary runs")
    }
}

fn fill(path: &Path) -> String {
    let fp = "00c0ffee00c0ffee";
    let mut db = SelectorDb::open(path).unwrap();
    db.register_soc(&SocRecord {
        fingerprint: fp.into(),
        name: "Shipped SoC".into(),
        probe: json!({}),
        first_seen: 0,
    })
    .unwrap();
    let c = Campaign::new(fp, "0.1.0", 1, "descent");
    db.start_campaign(&c).unwrap();
    db.put_selection(&Selection {
        soc: fp.into(),
        kernel_abi: 1,
        problem: Problem::new("gemv", "f32", [("n", 896), ("k", 896)]).unwrap(),
        thread_budget: 2,
        winner: Candidate::new("neon", json!({"nr": 8}), 2).unwrap(),
        median_ns: 120e3,
        default_ns: Some(300e3),
        speedup: None,
        campaign: Some(c.id.clone()),
        selected_at: 0,
    })
    .unwrap();
    fp.to_string()
}

fn mode(p: &Path, m: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
}

#[test]
fn a_table_in_a_read_only_directory_is_read_and_not_written() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: cannot spawn the aarch64 binary");
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    mode(scratch.path(), 0o755);
    let shipped = scratch.path().join("shipped");
    std::fs::create_dir(&shipped).unwrap();
    let table = shipped.join("sel.db");
    let fp = fill(&table);
    // Closed cleanly: the write-ahead log is checkpointed and gone.
    assert!(!shipped.join("sel.db-wal").exists() && !shipped.join("sel.db-shm").exists());
    mode(&table, 0o444);
    mode(&shipped, 0o555);
    let tt = Unprivileged::new(scratch.path());
    let db = table.to_str().unwrap();

    let out = tt.run(&["table", "show", "--all", "--db", db]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("Shipped SoC") && text.contains("neon"),
        "{text}"
    );
    let writable = scratch.path().join("out");
    std::fs::create_dir(&writable).unwrap();
    mode(&writable, 0o777);
    let export = writable.join("export.json");
    let out = tt.run(&[
        "table",
        "export",
        "--db",
        db,
        "--out",
        export.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::read_to_string(&export).unwrap().contains(&fp));

    let out = tt.run(&[
        "tune", "--op", "gemv", "--dtype", "f32", "--shape", "8x8", "--quick", "--db", db,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("not writable here") && err.contains("--db"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(&shipped).unwrap().count(),
        1,
        "nothing written"
    );

    // A log with changes not in the file cannot be read without its index:
    // refused with what to do, never read as if the log were empty.
    mode(&shipped, 0o755);
    std::fs::write(shipped.join("sel.db-wal"), [1u8; 64]).unwrap();
    mode(&shipped, 0o555);
    let out = tt.run(&["table", "show", "--all", "--db", db]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("write-ahead log"), "{err}");
    mode(&shipped, 0o755);
}
