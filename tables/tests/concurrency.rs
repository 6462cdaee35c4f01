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

/// A campaign a live tuner holds is not resumed by another; once the holder
/// lets go (or dies: the lock goes with the process) it is.
#[test]
fn a_claimed_campaign_is_left_to_its_tuner() {
    let dir = tmp();
    let path = db_path(dir.path());
    let mut db = SelectorDb::open(&path).unwrap();
    db.register_soc(&soc("socA")).unwrap();
    let c = Campaign::new("socA", "0.1.0", ABI, "descent");
    let held = db.claim_campaign(&c.id).unwrap();
    db.start_campaign(&c).unwrap();
    let other = SelectorDb::open(&path).unwrap();
    assert!(
        other
            .claim_unfinished_campaign("socA", ABI, "descent")
            .unwrap()
            .is_none()
    );
    assert!(other.claim_campaign(&c.id).is_err());
    drop(held);
    let (resumed, claim) = other
        .claim_unfinished_campaign("socA", ABI, "descent")
        .unwrap()
        .expect("an unheld unfinished campaign is resumable");
    assert_eq!(resumed.id, c.id);
    drop(claim);
    // A finished campaign is never resumed, and no lock file stays behind.
    db.finish_campaign(&c.id, 1, &serde_json::json!([]))
        .unwrap();
    assert!(
        other
            .claim_unfinished_campaign("socA", ABI, "descent")
            .unwrap()
            .is_none()
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".lock"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Two campaigns that ran at the same time: the faster winner stays, from
/// whichever stored first. A campaign started after the other finished is
/// a re-tune and replaces it.
#[test]
fn concurrent_campaigns_keep_the_faster_winner() {
    let dir = tmp();
    let path = db_path(dir.path());
    let mut db = SelectorDb::open(&path).unwrap();
    db.register_soc(&soc("socA")).unwrap();
    let start = |db: &mut SelectorDb, at: i64| {
        let mut c = Campaign::new("socA", "0.1.0", ABI, "descent");
        c.started_at = at;
        db.start_campaign(&c).unwrap();
        c.id
    };
    let p = gemv(896, 896);
    let (a, b) = (start(&mut db, 100), start(&mut db, 101));
    let fast = sel("socA", Some(&a), &p, &cand("avx2", 4, 1), 1000.0);
    let slow = sel("socA", Some(&b), &p, &cand("avx2", 8, 1), 1500.0);
    assert!(db.put_campaign_selection(&fast).unwrap());
    assert!(!db.put_campaign_selection(&slow).unwrap());
    assert_eq!(db.selections(None).unwrap()[0].median_ns, 1000.0);
    // The other order: the faster one replaces the slower.
    let (c, d) = (start(&mut db, 102), start(&mut db, 103));
    let q = gemv(512, 896);
    let slow = sel("socA", Some(&c), &q, &cand("avx2", 8, 1), 1500.0);
    let fast = sel("socA", Some(&d), &q, &cand("avx2", 4, 1), 1000.0);
    assert!(db.put_campaign_selection(&slow).unwrap());
    assert!(db.put_campaign_selection(&fast).unwrap());
    let on_q = |db: &SelectorDb| {
        db.selections(None)
            .unwrap()
            .into_iter()
            .find(|s| s.problem == q)
            .unwrap()
    };
    assert_eq!(on_q(&db).median_ns, 1000.0);
    // After d finished, a later campaign's slower winner is a re-tune.
    db.finish_campaign(&d, 200, &serde_json::json!([])).unwrap();
    let e = start(&mut db, 300);
    let retune = sel("socA", Some(&e), &q, &cand("avx2", 8, 1), 1200.0);
    assert!(db.put_campaign_selection(&retune).unwrap());
    assert_eq!(on_q(&db).median_ns, 1200.0);
}

/// `resume_or_start_campaign` starts the fresh campaign while another
/// tuner holds the unfinished one, and resumes that one once it is let go.
#[test]
fn resume_or_start_leaves_a_held_campaign_and_resumes_a_free_one() {
    let dir = tmp();
    let path = db_path(dir.path());
    let mut db = SelectorDb::open(&path).unwrap();
    db.register_soc(&soc("socA")).unwrap();
    let first = Campaign::new("socA", "0.1.0", ABI, "descent");
    let (c, held, resumed) = db.resume_or_start_campaign(first.clone()).unwrap();
    assert!(!resumed);
    assert_eq!(c.id, first.id);
    let mut other = SelectorDb::open(&path).unwrap();
    let second = Campaign::new("socA", "0.1.0", ABI, "descent");
    let (c2, claim2, resumed) = other.resume_or_start_campaign(second.clone()).unwrap();
    assert!(!resumed, "the held campaign is not taken over");
    assert_eq!(c2.id, second.id);
    drop(claim2);
    drop(held);
    let third = Campaign::new("socA", "0.1.0", ABI, "descent");
    let (c3, _claim, resumed) = other.resume_or_start_campaign(third).unwrap();
    assert!(resumed);
    assert!([first.id, second.id].contains(&c3.id), "{}", c3.id);
}
