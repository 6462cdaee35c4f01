//! The on-disk schema and its migrations. The schema version lives in
//! `PRAGMA user_version`, the file's identity in `PRAGMA application_id`
//! ([`APPLICATION_ID`], "ttun"), both in the SQLite header so they can be read
//! before touching any table.
//!
//! Migrations are append-only: `MIGRATIONS[i]` takes a file from version `i` to
//! `i + 1`. Never edit a released step; add a new one and bump
//! [`SCHEMA_VERSION`].
//!
//! - v1: socs, campaigns, measurements, selections.
//! - v2: `selections.speedup` (default_ns / median_ns, backfilled) and an index
//!   for the nearest-shape lookup (soc, kernel_abi, op, dtype, thread_budget).
//! - v3: `ceilings` (machine limits from `bench roofline`) and `peer_results`
//!   (llama.cpp / MNN numbers kept for comparisons).
//! - v4: `placement` and `placement_cpus` on measurements and selections:
//!   the thread placement a candidate ran on (`t2`, `t2@cluster1`) and the
//!   CPUs it pinned to (JSON list, empty when not pinned). Older rows become
//!   unpinned `t{threads}`, whose candidate key is unchanged.
//! - v5: `verdicts`: the model-level check of a tuned plan (tuned against
//!   default, whole model, per phase and thread budget) that the runtime
//!   reads to decide whether a phase runs its tuned choices.

use rusqlite::{Connection, TransactionBehavior};

/// `PRAGMA application_id` of every tiletune selector table: "ttun" in ASCII.
pub const APPLICATION_ID: u32 = 0x7474_756e;

/// The oldest schema a read-only open reads as it is (every later step
/// only added a table that readers treat as empty when it is absent).
pub const READ_ONLY_OLDEST: u32 = 4;

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// v0 → v1: the first schema.
const V1: &str = "
CREATE TABLE socs (
    fingerprint TEXT PRIMARY KEY NOT NULL,
    name        TEXT NOT NULL,
    probe       TEXT NOT NULL,     -- JSON: the full probe record
    first_seen  INTEGER NOT NULL   -- unix seconds
) STRICT;

CREATE TABLE campaigns (
    id           TEXT PRIMARY KEY NOT NULL,  -- globally unique, so merges never collide
    soc          TEXT NOT NULL REFERENCES socs(fingerprint),
    started_at   INTEGER NOT NULL,
    finished_at  INTEGER,
    tool_version TEXT NOT NULL,
    kernel_abi   INTEGER NOT NULL,
    git_commit   TEXT,
    strategy     TEXT NOT NULL,
    budget_s     REAL,
    drift_flags  TEXT NOT NULL       -- JSON
) STRICT;
CREATE INDEX campaigns_soc ON campaigns(soc);

CREATE TABLE measurements (
    id             INTEGER PRIMARY KEY,
    campaign       TEXT NOT NULL REFERENCES campaigns(id),
    soc            TEXT NOT NULL REFERENCES socs(fingerprint),
    kernel_abi     INTEGER NOT NULL,
    problem_key    TEXT NOT NULL,
    op             TEXT NOT NULL,
    dtype          TEXT NOT NULL,
    dims           TEXT NOT NULL,    -- JSON [[name, size], ...]
    candidate_key  TEXT NOT NULL,
    variant        TEXT NOT NULL,
    params         TEXT NOT NULL,    -- canonical JSON object
    threads        INTEGER NOT NULL,
    median_ns      REAL,             -- NULL when the candidate was never timed
    stats          TEXT NOT NULL,    -- JSON
    counters       TEXT NOT NULL,    -- JSON
    valid          INTEGER NOT NULL,
    invalid_reason TEXT,
    measured_at    INTEGER NOT NULL,
    -- One measurement per complete key: a resumed or concurrent campaign
    -- inserts with OR IGNORE and never duplicates.
    UNIQUE (soc, kernel_abi, problem_key, candidate_key)
) STRICT;
CREATE INDEX measurements_campaign ON measurements(campaign);

CREATE TABLE selections (
    soc           TEXT NOT NULL REFERENCES socs(fingerprint),
    kernel_abi    INTEGER NOT NULL,
    problem_key   TEXT NOT NULL,
    op            TEXT NOT NULL,
    dtype         TEXT NOT NULL,
    dims          TEXT NOT NULL,
    thread_budget INTEGER NOT NULL,
    candidate_key TEXT NOT NULL,
    variant       TEXT NOT NULL,
    params        TEXT NOT NULL,
    threads       INTEGER NOT NULL,
    median_ns     REAL NOT NULL,
    default_ns    REAL,
    campaign      TEXT REFERENCES campaigns(id),
    selected_at   INTEGER NOT NULL,
    PRIMARY KEY (soc, problem_key, thread_budget, kernel_abi)
) STRICT;
";

/// v1 → v2: store the speedup over the default (backfilled for old rows) and
/// index the columns the nearest-shape fallback filters on.
const V2: &str = "
ALTER TABLE selections ADD COLUMN speedup REAL;
UPDATE selections SET speedup = default_ns / median_ns
    WHERE default_ns IS NOT NULL AND median_ns > 0;
CREATE INDEX selections_family ON selections(soc, kernel_abi, op, dtype, thread_budget);
";

/// v2 → v3: machine ceilings and peer-engine results.
const V3: &str = "
CREATE TABLE ceilings (
    id          INTEGER PRIMARY KEY,
    soc         TEXT NOT NULL REFERENCES socs(fingerprint),
    kind        TEXT NOT NULL,     -- e.g. mem_bw_triad, fma_peak_avx512
    threads     INTEGER NOT NULL,
    value       REAL NOT NULL,
    unit        TEXT NOT NULL,     -- e.g. GB/s, GFLOP/s
    campaign    TEXT REFERENCES campaigns(id),
    measured_at INTEGER NOT NULL,
    UNIQUE (soc, kind, threads, measured_at)
) STRICT;

CREATE TABLE peer_results (
    id             INTEGER PRIMARY KEY,
    soc            TEXT NOT NULL REFERENCES socs(fingerprint),
    model          TEXT NOT NULL,
    engine         TEXT NOT NULL,  -- llama.cpp, mnn, tiletune
    engine_version TEXT NOT NULL,
    test           TEXT NOT NULL,  -- e.g. pp512, tg128
    threads        INTEGER NOT NULL,
    tokens_per_s   REAL NOT NULL,
    std            REAL,
    json           TEXT NOT NULL,  -- the engine's raw record
    measured_at    INTEGER NOT NULL,
    UNIQUE (soc, model, engine, engine_version, test, threads, measured_at)
) STRICT;
";

/// v3 → v4: the placement of every candidate. Rows from before placements
/// ran unpinned.
const V4: &str = "
ALTER TABLE measurements ADD COLUMN placement TEXT NOT NULL DEFAULT '';
ALTER TABLE measurements ADD COLUMN placement_cpus TEXT NOT NULL DEFAULT '[]';
UPDATE measurements SET placement = 't' || threads;
ALTER TABLE selections ADD COLUMN placement TEXT NOT NULL DEFAULT '';
ALTER TABLE selections ADD COLUMN placement_cpus TEXT NOT NULL DEFAULT '[]';
UPDATE selections SET placement = 't' || threads;
";

/// v4 → v5: model-level verdicts. The round timings are JSON lists of
/// seconds, read back whole; nothing filters on them.
const V5: &str = "
CREATE TABLE verdicts (
    soc         TEXT NOT NULL REFERENCES socs(fingerprint),
    kernel_abi  INTEGER NOT NULL,
    model       TEXT NOT NULL,     -- digest of the model's kernel problem list
    model_name  TEXT NOT NULL,     -- for display only
    phase       TEXT NOT NULL CHECK (phase IN ('prefill', 'decode')),
    threads     INTEGER NOT NULL,
    plan_digest TEXT NOT NULL,     -- digest of the tuned choices that were timed
    test        TEXT NOT NULL,     -- e.g. pp512, tg128
    default_s   TEXT NOT NULL,     -- JSON [seconds per round]
    tuned_s     TEXT NOT NULL,     -- JSON [seconds per round], same rounds
    ratio       REAL NOT NULL,     -- median(default_s) / median(tuned_s)
    won         INTEGER NOT NULL,
    campaign    TEXT REFERENCES campaigns(id),
    measured_at INTEGER NOT NULL,
    PRIMARY KEY (soc, kernel_abi, model, phase, threads)
) STRICT;
";

const MIGRATIONS: &[&str] = &[V1, V2, V3, V4, V5];

/// Reads `(application_id, user_version)` from the header.
pub(crate) fn header_ids(conn: &Connection) -> rusqlite::Result<(u32, u32)> {
    let app: i64 = conn.pragma_query_value(None, "application_id", |r| r.get(0))?;
    let ver: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    // Both are 32-bit header fields that SQLite reports signed.
    Ok((app as u32, ver as u32))
}

/// Whether the database holds no schema objects at all (a fresh file).
pub(crate) fn is_empty(conn: &Connection) -> rusqlite::Result<bool> {
    let n: i64 = conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
    Ok(n == 0)
}

/// Outcome of [`migrate_to`] read under the write lock.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Migrated {
    /// Went from `from` to the target.
    Done { from: u32 },
    /// Somebody else's schema appeared meanwhile; the caller reports it.
    Foreign { app: u32 },
    /// A newer schema appeared meanwhile.
    Newer { found: u32 },
}

/// Brings the file to `target` (≤ [`SCHEMA_VERSION`]) in one immediate
/// transaction. The version is re-read under the lock, so two processes that
/// open a fresh or old file at once migrate it exactly once.
pub(crate) fn migrate_to(conn: &mut Connection, target: u32) -> rusqlite::Result<Migrated> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let (app, from) = header_ids(&tx)?;
    if app != APPLICATION_ID && !(app == 0 && from == 0 && is_empty(&tx)?) {
        return Ok(Migrated::Foreign { app });
    }
    if from > SCHEMA_VERSION {
        return Ok(Migrated::Newer { found: from });
    }
    for step in MIGRATIONS.iter().take(target as usize).skip(from as usize) {
        tx.execute_batch(step)?;
    }
    if from < target {
        tx.pragma_update(None, "application_id", APPLICATION_ID as i64)?;
        tx.pragma_update(None, "user_version", target as i64)?;
    }
    tx.commit()?;
    Ok(Migrated::Done { from })
}

/// Writes a file at schema `version` (older than current) for migration tests
/// and for reproducing a user's old file. Not for normal use.
#[doc(hidden)]
pub fn create_at_version(path: &std::path::Path, version: u32) -> rusqlite::Result<Connection> {
    let mut conn = Connection::open(path)?;
    conn.pragma_update(None, "foreign_keys", true)?;
    migrate_to(&mut conn, version.min(SCHEMA_VERSION))?;
    Ok(conn)
}
