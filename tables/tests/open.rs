//! Opening damaged, foreign, newer and missing files: each gives a clear error
//! naming the file, and the file is left byte-for-byte unchanged.

mod common;
use common::*;
use std::path::Path;
use tiletune_tables::{OpenOptions, SCHEMA_VERSION, SelectorDb, TableError};

/// A table with enough rows to span many pages.
fn populated(path: &Path) {
    let mut db = SelectorDb::open(path).unwrap();
    let c = setup(&mut db, "socA");
    let ms: Vec<_> = (0..300)
        .map(|i| {
            meas(
                &c,
                "socA",
                &gemv(64 + i, 896),
                &cand("avx512", 8, 1),
                1000.0 + i as f64,
            )
        })
        .collect();
    assert_eq!(db.insert_measurements(&ms).unwrap(), 300);
    db.put_selection(&sel(
        "socA",
        Some(&c),
        &gemv(64, 896),
        &cand("avx512", 8, 1),
        1000.0,
    ))
    .unwrap();
    // Dropping the last connection checkpoints the WAL into the main file.
}

fn assert_unchanged_after<T: std::fmt::Debug>(
    path: &Path,
    open: impl FnOnce() -> Result<T, TableError>,
) -> TableError {
    let before = std::fs::read(path).unwrap();
    let err = open().expect_err("opening must fail");
    let after = std::fs::read(path).unwrap();
    assert!(before == after, "the file was modified by a failed open");
    let msg = err.to_string();
    assert!(
        msg.contains(&path.display().to_string()),
        "error does not name the file: {msg}"
    );
    err
}

fn xorshift_bytes(n: usize, mut s: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect()
}

#[test]
fn random_bytes_are_not_a_database() {
    let dir = tmp();
    let path = db_path(dir.path());
    std::fs::write(&path, xorshift_bytes(8192, 0x9e37_79b9_7f4a_7c15)).unwrap();
    let err = assert_unchanged_after(&path, || SelectorDb::open(&path));
    assert!(matches!(err, TableError::NotSqlite { .. }), "{err}");
    assert!(err.to_string().contains("--db"), "{err}");
    // Read-only and integrity-checked opens fail the same way.
    let opts = OpenOptions {
        check_integrity: true,
        ..OpenOptions::read_only()
    };
    let err = assert_unchanged_after(&path, || SelectorDb::open_with(&path, opts));
    assert!(matches!(err, TableError::NotSqlite { .. }), "{err}");
}

#[test]
fn truncated_database_is_corrupt() {
    let dir = tmp();
    let path = db_path(dir.path());
    populated(&path);
    let full = std::fs::read(&path).unwrap();
    assert!(full.len() >= 8 * 4096, "fixture too small: {}", full.len());
    for cut in [full.len() / 2, 4096 + 17, 60] {
        std::fs::write(&path, &full[..cut]).unwrap();
        let err = assert_unchanged_after(&path, || SelectorDb::open(&path));
        assert!(
            matches!(err, TableError::Corrupt { .. }),
            "cut {cut}: {err}"
        );
        assert!(err.to_string().contains("truncated"), "{err}");
    }
}

#[test]
fn damaged_pages_fail_the_integrity_check() {
    let dir = tmp();
    let path = db_path(dir.path());
    populated(&path);
    let mut bytes = std::fs::read(&path).unwrap();
    let page = 4096;
    // Overwrite every page after the first (the schema stays readable).
    let junk = xorshift_bytes(bytes.len() - page, 7);
    bytes[page..].copy_from_slice(&junk);
    std::fs::write(&path, &bytes).unwrap();
    let opts = OpenOptions {
        check_integrity: true,
        ..OpenOptions::default()
    };
    let err = assert_unchanged_after(&path, || SelectorDb::open_with(&path, opts));
    assert!(matches!(err, TableError::Corrupt { .. }), "{err}");
}

#[test]
fn foreign_sqlite_files_are_refused() {
    let dir = tmp();
    // Another program's database: tables, no application id.
    let plain = dir.path().join("plain.db");
    {
        let c = rusqlite::Connection::open(&plain).unwrap();
        c.execute_batch("CREATE TABLE notes (t TEXT); INSERT INTO notes VALUES ('hi');")
            .unwrap();
    }
    let err = assert_unchanged_after(&plain, || SelectorDb::open(&plain));
    assert!(matches!(err, TableError::Foreign { found: 0, .. }), "{err}");
    assert!(
        err.to_string().contains("not a tiletune selector table"),
        "{err}"
    );

    // Another application id (rejected from the header, before sqlite opens it).
    let other = dir.path().join("other.db");
    {
        let c = rusqlite::Connection::open(&other).unwrap();
        c.pragma_update(None, "application_id", 0x1234_5678)
            .unwrap();
        c.execute_batch("CREATE TABLE x (y);").unwrap();
    }
    let err = assert_unchanged_after(&other, || SelectorDb::open(&other));
    assert!(
        matches!(
            err,
            TableError::Foreign {
                found: 0x1234_5678,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn newer_schema_is_refused_with_upgrade_advice() {
    let dir = tmp();
    let path = db_path(dir.path());
    populated(&path);
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.pragma_update(None, "user_version", SCHEMA_VERSION + 2)
            .unwrap();
    }
    for opts in [OpenOptions::default(), OpenOptions::read_only()] {
        let err = assert_unchanged_after(&path, || SelectorDb::open_with(&path, opts));
        assert!(matches!(err, TableError::NewerSchema { .. }), "{err}");
        let want = format!(
            "newer tiletune (schema {} > {SCHEMA_VERSION}); upgrade tiletune",
            SCHEMA_VERSION + 2
        );
        assert!(err.to_string().contains(&want), "{err}");
    }
}

#[test]
fn missing_file_is_created_only_when_asked() {
    let dir = tmp();
    let path = dir.path().join("deep/er/selector.db");
    let err = SelectorDb::open_with(&path, OpenOptions::read_only()).unwrap_err();
    assert!(matches!(err, TableError::NotFound { .. }), "{err}");
    let no_create = OpenOptions {
        create: false,
        ..OpenOptions::default()
    };
    assert!(matches!(
        SelectorDb::open_with(&path, no_create).unwrap_err(),
        TableError::NotFound { .. }
    ));
    assert!(!path.exists());
    let db = SelectorDb::open(&path).unwrap();
    assert_eq!(db.schema_version().unwrap(), SCHEMA_VERSION);
    db.check_integrity().unwrap();
    drop(db);
    // A fresh table reopens read-only, integrity-checked, and says it is WAL.
    let opts = OpenOptions {
        check_integrity: true,
        ..OpenOptions::read_only()
    };
    let db = SelectorDb::open_with(&path, opts).unwrap();
    assert!(db.socs().unwrap().is_empty());
    let c = rusqlite::Connection::open(&path).unwrap();
    let mode: String = c
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[test]
fn read_only_open_writes_nothing() {
    let dir = tmp();
    let path = db_path(dir.path());
    populated(&path);
    let before = std::fs::read(&path).unwrap();
    let db = SelectorDb::open_with(&path, OpenOptions::read_only()).unwrap();
    assert_eq!(db.count_measurements(None).unwrap(), 300);
    let mut db = db;
    let err = db.register_soc(&soc("socB")).unwrap_err();
    assert!(matches!(err, TableError::Sqlite { .. }), "{err}");
    drop(db);
    assert!(before == std::fs::read(&path).unwrap());
}

#[test]
fn committed_rows_survive_a_crash_before_checkpoint() {
    let dir = tmp();
    let path = db_path(dir.path());
    let crashed = dir.path().join("crashed");
    std::fs::create_dir(&crashed).unwrap();
    let mut db = SelectorDb::open(&path).unwrap();
    let c = setup(&mut db, "socA");
    for i in 0..50 {
        let m = meas(&c, "socA", &gemv(8 + i, 8), &cand("avx2", 4, 1), 10.0);
        assert!(db.insert_measurement(&m).unwrap());
    }
    // Copying the files while the connection is open is what a kill -9 leaves:
    // the rows are committed in the WAL, not yet in the main file.
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    assert!(
        std::fs::metadata(&wal).unwrap().len() > 0,
        "expected an uncheckpointed wal"
    );
    std::fs::copy(&path, crashed.join("selector.db")).unwrap();
    std::fs::copy(&wal, crashed.join("selector.db-wal")).unwrap();
    drop(db);
    let opts = OpenOptions {
        check_integrity: true,
        ..OpenOptions::default()
    };
    let db = SelectorDb::open_with(crashed.join("selector.db"), opts).unwrap();
    assert_eq!(db.count_measurements(Some("socA")).unwrap(), 50);
}

/// An SQLite file without a schema yet (a tuner creating the table at this
/// moment) is no table to a reader, not an old one to upgrade; a writer
/// makes it a table.
#[test]
fn a_file_with_no_schema_yet_is_no_table_to_a_reader() {
    let dir = tmp();
    let path = dir.path().join("fresh.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        // A page on disk, no tables, no ids: what a creator has written
        // before its first migration commits.
        c.execute_batch("PRAGMA journal_mode = WAL; PRAGMA page_size = 4096; VACUUM;")
            .unwrap();
    }
    assert!(std::fs::metadata(&path).unwrap().len() > 0);
    let err = SelectorDb::open_with(&path, OpenOptions::read_only()).unwrap_err();
    assert!(matches!(err, TableError::NotFound { .. }), "{err}");
    let db = SelectorDb::open(&path).unwrap();
    assert_eq!(db.schema_version().unwrap(), SCHEMA_VERSION);
}
