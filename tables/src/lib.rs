//! The SQLite selector table: what the tuner measured and chose, per SoC, and
//! what the runtime asks at model load.
//!
//! - [`key`]: kernel identity as plain data ([`Problem`], [`Candidate`]) with
//!   stable key strings. This crate never runs a kernel and does not depend on
//!   the kernel crate; the caller passes the kernel ABI version (`kernel_abi`)
//!   with every read and write, so rows from incompatible kernels never match.
//! - [`db`]: opening a file safely ([`SelectorDb::open_with`], [`OpenOptions`]):
//!   corrupt, foreign and newer-schema files give a [`TableError`] naming the
//!   file and the fix, and are left untouched.
//! - [`schema`]: versioned schema (`PRAGMA user_version`) and migrations.
//! - [`records`]: SoCs, campaigns, measurements (idempotent inserts on the
//!   complete key, so resumed campaigns never duplicate), selections, ceilings,
//!   peer results.
//! - [`lookup`]: complete-key lookup with the explicit nearest-shape fallback
//!   ([`Lookup`]), batched for the runtime ([`SelectorDb::lookup_many`]).
//! - [`verdict`]: the model-level check of a tuned plan per phase and thread
//!   budget ([`Verdict`]), which the runtime reads to decide whether a phase
//!   runs its tuned choices.
//! - [`exchange`]: JSON export per SoC, idempotent import, merge.
//! - [`path`]: the default database location ([`default_db_path`]).
//!
//! Concurrency: the file is in WAL mode and every write is one `BEGIN
//! IMMEDIATE` transaction under a busy timeout, so several tuner processes can
//! write one file and readers never block them.
//!
//! The tuner's and the runtime's side in brief:
//!
//! ```
//! use serde_json::json;
//! use tiletune_tables::*;
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("selector.db");
//! const KERNEL_ABI: u32 = 1; // owned by the kernel crate, passed in by the caller
//! let mut db = SelectorDb::open(&path)?; // creates, migrates, switches to WAL
//! let soc = SocRecord { fingerprint: "3f2a…".into(), name: "Zen 5".into(),
//!                       probe: json!({}), first_seen: now_unix() };
//! db.register_soc(&soc)?;
//! let campaign = Campaign::new(&soc.fingerprint, "0.1.0", KERNEL_ABI, "exhaustive");
//! db.start_campaign(&campaign)?;
//!
//! let problem = Problem::new("gemv", "q4_0", [("n", 4864), ("k", 896)])?;
//! let cand = Candidate::new("avx512", json!({"nr": 8, "kc": 256}), 2)?;
//! if db.measured(&soc.fingerprint, KERNEL_ABI, &problem, &cand)?.is_none() {
//!     db.insert_measurement(&Measurement {
//!         campaign: campaign.id.clone(), soc: soc.fingerprint.clone(), kernel_abi: KERNEL_ABI,
//!         problem: problem.clone(), candidate: cand.clone(), median_ns: Some(81_000.0),
//!         stats: MeasurementStats { median_ns: Some(81_000.0), ..Default::default() },
//!         counters: json!({}), valid: true,
//!         invalid_reason: None, measured_at: now_unix(),
//!     })?;
//! }
//! db.put_selection(&Selection {
//!     soc: soc.fingerprint.clone(), kernel_abi: KERNEL_ABI, problem: problem.clone(),
//!     thread_budget: 2, winner: cand, median_ns: 81_000.0, default_ns: Some(120_000.0),
//!     speedup: None, campaign: Some(campaign.id.clone()), selected_at: now_unix(),
//! })?;
//!
//! // The runtime, at model load: one read for every problem the model runs.
//! let ro = SelectorDb::open_with(&path, OpenOptions::read_only())?;
//! let asks = [problem, Problem::new("gemv", "q4_0", [("n", 4800), ("k", 900)])?];
//! let got = ro.lookup_many(&soc.fingerprint, KERNEL_ABI, 2, &asks)?;
//! assert_eq!(got[0].source(), "exact");
//! assert!(matches!(&got[1], Lookup::Nearest { from, .. } if from == &asks[0]));
//! # Ok::<(), TableError>(())
//! ```

pub mod db;
pub mod error;
pub mod exchange;
pub mod key;
pub mod lookup;
pub mod path;
pub mod records;
pub mod schema;
mod store;
pub mod verdict;

pub use db::{OpenOptions, SelectorDb};
pub use error::{Result, TableError};
pub use exchange::{
    EXPORT_FORMAT, EXPORT_VERSION, ImportStats, SocExport, parse_export, read_any, read_export,
    write_export,
};
pub use key::{Candidate, Placement, Problem, canonical_json};
pub use lookup::Lookup;
pub use path::{
    DB_ENV, TABLE_DIR_ENV, default_db_path, default_db_path_from, table_for_soc, table_for_soc_from,
};
pub use records::{
    Campaign, Ceiling, Measurement, MeasurementStats, PeerResult, Selection, SocRecord, UtcTime,
    Work, now_unix,
};
pub use schema::{APPLICATION_ID, SCHEMA_VERSION};
pub use store::CampaignClaim;
pub use verdict::{Phase, Verdict};
