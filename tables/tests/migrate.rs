//! A file written at schema v1 (and v2, v3, v4) opens, migrates to the current schema,
//! keeps its rows and gains what the later versions add.

mod common;
use common::*;
use tiletune_tables::schema::create_at_version;
use tiletune_tables::{
    Candidate, Ceiling, OpenOptions, Phase, Placement, SCHEMA_VERSION, SelectorDb, TableError,
};

/// Rows inserted with v1's columns by raw SQL, the way a v1 build wrote them.
fn write_v1_rows(c: &rusqlite::Connection) {
    c.execute_batch(
        r#"
        INSERT INTO socs VALUES ('socA', 'old soc', '{"arch":"aarch64"}', 1600000000);
        INSERT INTO campaigns VALUES ('c-1', 'socA', 1600000001, 1600000100, '0.0.9', 3, 'abc123',
            'exhaustive', 60.0, '[]');
        INSERT INTO measurements (campaign, soc, kernel_abi, problem_key, op, dtype, dims,
            candidate_key, variant, params, threads, median_ns, stats, counters, valid,
            invalid_reason, measured_at)
        VALUES ('c-1', 'socA', 3, 'gemv/q4_0/n=4864,k=896', 'gemv', 'q4_0', '[["n",4864],["k",896]]',
            'neon/t1/{"nr":4}', 'neon', '{"nr":4}', 1, 2000.0, '{"median_ns":2000.0}', '{}', 1,
            NULL, 1600000050);
        INSERT INTO selections (soc, kernel_abi, problem_key, op, dtype, dims, thread_budget,
            candidate_key, variant, params, threads, median_ns, default_ns, campaign, selected_at)
        VALUES ('socA', 3, 'gemv/q4_0/n=4864,k=896', 'gemv', 'q4_0', '[["n",4864],["k",896]]', 1,
            'neon/t1/{"nr":4}', 'neon', '{"nr":4}', 1, 2000.0, 3000.0, 'c-1', 1600000100);
        "#,
    )
    .unwrap();
}

#[test]
fn v1_file_migrates_to_current() {
    let dir = tmp();
    let path = db_path(dir.path());
    {
        let c = create_at_version(&path, 1).unwrap();
        let v: u32 = c
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v, 1);
        // v1 has neither the speedup column nor the ceilings table.
        assert!(c.execute_batch("SELECT speedup FROM selections").is_err());
        assert!(c.execute_batch("SELECT * FROM ceilings").is_err());
        write_v1_rows(&c);
    }
    // A read-only open cannot migrate and says how to.
    let err = SelectorDb::open_with(&path, OpenOptions::read_only()).unwrap_err();
    assert!(
        matches!(err, TableError::NeedsMigration { found: 1, .. }),
        "{err}"
    );

    let mut db = SelectorDb::open(&path).unwrap();
    assert_eq!(db.schema_version().unwrap(), SCHEMA_VERSION);
    db.check_integrity().unwrap();
    let sels = db.selections(Some("socA")).unwrap();
    assert_eq!(sels.len(), 1);
    // v2 backfilled the speedup from default_ns / median_ns.
    assert_eq!(sels[0].speedup, Some(1.5));
    assert_eq!(sels[0].winner.key(), r#"neon/t1/{"nr":4}"#);
    assert_eq!(sels[0].problem, gemv(4864, 896));
    // The v1 measurement is still what `measured` finds, so a resume skips it.
    let m = db
        .measured("socA", 3, &gemv(4864, 896), &sels[0].winner)
        .unwrap();
    assert_eq!(m.unwrap().median_ns, Some(2000.0));
    // v3 added ceilings.
    let ceiling = Ceiling {
        soc: "socA".into(),
        kind: "mem_bw_triad".into(),
        threads: 4,
        value: 21.5,
        unit: "GB/s".into(),
        campaign: Some("c-1".into()),
        measured_at: 1_600_000_200,
    };
    assert!(db.put_ceiling(&ceiling).unwrap());
    assert!(!db.put_ceiling(&ceiling).unwrap());
    assert_eq!(
        db.latest_ceiling("socA", "mem_bw_triad", 4).unwrap(),
        Some(ceiling)
    );
    drop(db);
    // Reopening does not migrate again.
    let db = SelectorDb::open_with(&path, OpenOptions::read_only()).unwrap();
    assert_eq!(db.selections(None).unwrap(), sels);
}

#[test]
fn v2_file_migrates_to_current() {
    let dir = tmp();
    let path = db_path(dir.path());
    {
        let c = create_at_version(&path, 2).unwrap();
        assert!(c.execute_batch("SELECT speedup FROM selections").is_ok());
        assert!(c.execute_batch("SELECT * FROM peer_results").is_err());
    }
    let db = SelectorDb::open(&path).unwrap();
    assert_eq!(db.schema_version().unwrap(), SCHEMA_VERSION);
    assert!(db.peer_results(None).unwrap().is_empty());
}

/// v3 → v4: rows written before placements existed read as unpinned
/// `t{threads}` with unchanged keys, a resume still finds them, and pinned
/// candidates can be stored next to them.
#[test]
fn v3_file_migrates_to_placements() {
    let dir = tmp();
    let path = db_path(dir.path());
    {
        let c = create_at_version(&path, 3).unwrap();
        assert!(c.execute_batch("SELECT placement FROM selections").is_err());
        write_v1_rows(&c);
        // A two-thread winner too, to see the backfill use each row's count.
        c.execute_batch(
            r#"
            INSERT INTO selections (soc, kernel_abi, problem_key, op, dtype, dims, thread_budget,
                candidate_key, variant, params, threads, median_ns, default_ns, campaign, selected_at)
            VALUES ('socA', 3, 'gemv/q4_0/n=4864,k=896', 'gemv', 'q4_0', '[["n",4864],["k",896]]', 2,
                'neon/t2/{"nr":4}', 'neon', '{"nr":4}', 2, 1500.0, 3000.0, 'c-1', 1600000100);
            "#,
        )
        .unwrap();
    }
    let err = SelectorDb::open_with(&path, OpenOptions::read_only()).unwrap_err();
    assert!(
        matches!(err, TableError::NeedsMigration { found: 3, .. }),
        "{err}"
    );
    let mut db = SelectorDb::open(&path).unwrap();
    assert_eq!(db.schema_version().unwrap(), SCHEMA_VERSION);
    let sels = db.selections(Some("socA")).unwrap();
    assert_eq!(sels.len(), 2);
    for s in &sels {
        let t = s.winner.threads();
        assert_eq!(s.winner.placement().name(), format!("t{t}"));
        assert!(!s.winner.placement().is_pinned());
        assert_eq!(s.winner.key(), format!(r#"neon/t{t}/{{"nr":4}}"#));
    }
    let old = &sels[0].winner;
    assert!(
        db.measured("socA", 3, &gemv(4864, 896), old)
            .unwrap()
            .is_some()
    );
    // A pinned candidate of the same variant and params is another key.
    let placed = Candidate::placed(
        "neon",
        serde_json::json!({"nr": 4}),
        Placement::pinned(1, vec![1], vec![4, 5]).unwrap(),
    )
    .unwrap();
    assert!(
        db.measured("socA", 3, &gemv(4864, 896), &placed)
            .unwrap()
            .is_none()
    );
    let mut m = meas("c-1", "socA", &gemv(4864, 896), &placed, 1800.0);
    m.kernel_abi = 3;
    assert!(db.insert_measurement(&m).unwrap());
    let back = db
        .measured("socA", 3, &gemv(4864, 896), &placed)
        .unwrap()
        .unwrap();
    assert_eq!(back.candidate, placed);
    assert_eq!(back.candidate.placement().cpus(), [4, 5]);
}

/// v4 → v5: a table from before verdicts reads read-only as it is (no
/// verdicts), keeps its selections when migrated, gains an empty
/// `verdicts` table, and a verdict stored next to them reads back on the
/// runtime's read-only open.
#[test]
fn v4_file_migrates_to_verdicts() {
    let dir = tmp();
    let path = db_path(dir.path());
    {
        let c = create_at_version(&path, 4).unwrap();
        assert!(c.execute_batch("SELECT placement FROM selections").is_ok());
        assert!(c.execute_batch("SELECT * FROM verdicts").is_err());
        write_v1_rows(&c);
    }
    // Read-only, as the runtime opens a shipped table: v4 serves its
    // selections as it is, with no verdicts.
    {
        let ro = SelectorDb::open_with(&path, OpenOptions::read_only()).unwrap();
        assert_eq!(ro.selections(Some("socA")).unwrap().len(), 1);
        assert!(ro.verdicts(None).unwrap().is_empty());
        assert_eq!(ro.verdict("socA", 3, "m", Phase::Prefill, 1).unwrap(), None);
    }
    let mut db = SelectorDb::open(&path).unwrap();
    assert_eq!(db.schema_version().unwrap(), SCHEMA_VERSION);
    db.check_integrity().unwrap();
    let sels = db.selections(Some("socA")).unwrap();
    assert_eq!(sels.len(), 1);
    assert_eq!(sels[0].winner.placement().name(), "t1");
    assert!(db.verdicts(None).unwrap().is_empty());
    let mut v = verdict("socA", "old.gguf", Phase::Prefill, 1);
    v.kernel_abi = 3;
    v.campaign = Some("c-1".into());
    db.put_verdict(&v).unwrap();
    drop(db);
    let ro = SelectorDb::open_with(&path, OpenOptions::read_only()).unwrap();
    assert_eq!(ro.selections(None).unwrap(), sels);
    assert_eq!(
        ro.verdict("socA", 3, "m-old.gguf", Phase::Prefill, 1)
            .unwrap(),
        Some(v)
    );
}
