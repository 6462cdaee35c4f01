//! Two writers on one file, each with its own connection, lose no rows:
//! WAL mode + BEGIN IMMEDIATE + busy timeout serialize them.

mod common;
use common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use tiletune_tables::{Campaign, SelectorDb};

const PER_WRITER: usize = 500;

/// Writes PER_WRITER measurements one transaction each (as the tuner does),
/// on problems disjoint from the other writer's.
fn writer(path: &Path, id: usize) {
    let mut db = SelectorDb::open(path).unwrap();
    db.register_soc(&soc("socA")).unwrap();
    let c = Campaign::new("socA", "0.1.0", ABI, format!("writer{id}"));
    db.start_campaign(&c).unwrap();
    for i in 0..PER_WRITER {
        let p = gemv(1 + id * PER_WRITER + i, 896);
        let m = meas(&c.id, "socA", &p, &cand("avx2", 4, 1), 100.0 + i as f64);
        assert!(db.insert_measurement(&m).unwrap());
        // Readers interleave with writers (the tuner checks before measuring).
        if i % 50 == 0 {
            assert!(
                db.measured("socA", ABI, &p, &m.candidate)
                    .unwrap()
                    .is_some()
            );
        }
    }
}

#[test]
fn two_threads_lose_no_rows() {
    let dir = tmp();
    let path = db_path(dir.path());
    std::thread::scope(|s| {
        for id in 0..2 {
            let path = &path;
            s.spawn(move || writer(path, id));
        }
    });
    let db = SelectorDb::open(&path).unwrap();
    assert_eq!(db.count_measurements(Some("socA")).unwrap(), 2 * PER_WRITER);
    assert_eq!(db.campaigns(Some("socA")).unwrap().len(), 2);
    db.check_integrity().unwrap();
}

/// The body of a child process in `two_processes_lose_no_rows`; a no-op when
/// run as an ordinary test.
#[test]
fn child_writer() {
    if let (Ok(path), Ok(id)) = (
        std::env::var("TILETUNE_TEST_DB"),
        std::env::var("TILETUNE_TEST_ID"),
    ) {
        writer(Path::new(&path), id.parse().unwrap());
    }
}

/// Whether this test binary can run itself. Under qemu-user without
/// binfmt_misc it cannot (the host kernel gets an aarch64 binary); depending on
/// how the libc spawns, that shows as ENOEXEC or as exit status 127.
fn can_exec_self(exe: &Path) -> bool {
    Command::new(exe)
        .args(["--list", "--exact", "child_writer"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn two_processes_lose_no_rows() {
    let dir = tmp();
    let path = db_path(dir.path());
    let exe = std::env::current_exe().unwrap();
    if !can_exec_self(&exe) {
        // The thread test above covers the same locking on this lane.
        eprintln!("skipping: cannot exec {} here (qemu-user?)", exe.display());
        return;
    }
    let children: Vec<_> = (0..2)
        .map(|id| {
            Command::new(&exe)
                .args(["--exact", "child_writer", "--test-threads", "1"])
                .env("TILETUNE_TEST_DB", &path)
                .env("TILETUNE_TEST_ID", id.to_string())
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        let status = child.wait().unwrap();
        assert!(status.success(), "a writer process failed: {status}");
    }
    let db = SelectorDb::open(&path).unwrap();
    assert_eq!(db.count_measurements(Some("socA")).unwrap(), 2 * PER_WRITER);
}
