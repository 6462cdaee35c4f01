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
//! - [`exchange`]: JSON export per SoC, idempotent import, merge.
//! - [`path`]: the default database location ([`default_db_path`]).
//!
//! Concurrency: the file is in WAL mode and every write is one `BEGIN
//! IMMEDIATE` transaction under a busy timeout, so several tuner processes can
//! write one file and readers never block them.

pub mod db;
pub mod error;
pub mod exchange;
pub mod key;
pub mod lookup;
pub mod path;
pub mod records;
pub mod schema;

pub use db::{OpenOptions, SelectorDb};
pub use error::{Result, TableError};
pub use exchange::{
    EXPORT_FORMAT, EXPORT_VERSION, ImportStats, SocExport, read_any, read_export, write_export,
};
pub use key::{Candidate, Problem, canonical_json};
pub use lookup::Lookup;
pub use path::{DB_ENV, default_db_path, default_db_path_from};
pub use records::{Campaign, Ceiling, Measurement, PeerResult, Selection, SocRecord, now_unix};
pub use schema::{APPLICATION_ID, SCHEMA_VERSION};
