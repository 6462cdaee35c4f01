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

#[test]
fn two_processes_lose_no_rows() {
    let dir = tmp();
    let path = db_path(dir.path());
    let exe = std::env::current_exe().unwrap();
    let mut children = Vec::new();
    for id in 0..2 {
        let spawned = Command::new(&exe)
            .args(["--exact", "child_writer", "--test-threads", "1", "--quiet"])
            .env("TILETUNE_TEST_DB", &path)
            .env("TILETUNE_TEST_ID", id.to_string())
            .stdout(Stdio::null())
            .spawn();
        match spawned {
            Ok(child) => children.push(child),
            // Under qemu-user without binfmt_misc the test binary cannot exec
            // itself; the thread test above covers the same locking there.
            Err(e) if e.raw_os_error() == Some(libc_enoexec()) => {
                eprintln!("skipping: cannot exec {} ({e})", exe.display());
                return;
            }
            Err(e) => panic!("spawn {}: {e}", exe.display()),
        }
    }
    for mut child in children {
        assert!(child.wait().unwrap().success(), "a writer process failed");
    }
    let db = SelectorDb::open(&path).unwrap();
    assert_eq!(db.count_measurements(Some("socA")).unwrap(), 2 * PER_WRITER);
}

/// ENOEXEC ("exec format error") on Linux.
fn libc_enoexec() -> i32 {
    8
}
