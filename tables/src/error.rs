//! The one error type of this crate. Every variant that concerns a file names
//! it and says what the user can do next: the runtime prints these and falls
//! back to built-in defaults, the CLI prints them and exits.

use std::path::PathBuf;

/// Everything that can go wrong reading or writing a selector table.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// The file does not exist, is empty, or holds no schema yet, and the
    /// caller asked not to create it.
    #[error(
        "selector table {path} does not exist; run `tiletune tune` to create one, or pass --db to use another file"
    )]
    NotFound { path: PathBuf },

    /// The file is not an SQLite database at all (random bytes, another format).
    #[error(
        "{path} is not an sqlite database ({detail}); move it away, or pass --db to use another file"
    )]
    NotSqlite { path: PathBuf, detail: String },

    /// An SQLite database that is damaged: truncated, failed integrity check, malformed pages.
    #[error(
        "selector table {path} is corrupt ({detail}); rename or delete it and re-run `tiletune tune` \
         (or `tiletune table import` a previous export), or pass --db to use another file"
    )]
    Corrupt { path: PathBuf, detail: String },

    /// A healthy SQLite database that some other program wrote.
    #[error(
        "{path} is an sqlite database but not a tiletune selector table (application_id {found:#010x}, \
         expected {expected:#010x}); pass --db to use another file"
    )]
    Foreign {
        path: PathBuf,
        found: u32,
        expected: u32,
    },

    /// Written by a newer tiletune whose schema this build does not know.
    #[error(
        "{path} was written by a newer tiletune (schema {found} > {supported}); upgrade tiletune, \
         or pass --db to use another file"
    )]
    NewerSchema {
        path: PathBuf,
        found: u32,
        supported: u32,
    },

    /// An older schema opened read-only: the upgrade needs a write.
    #[error(
        "{path} has schema {found} and needs an upgrade to {current}, which a read-only open cannot do; \
         open it once read-write (e.g. `tiletune table show --db {path}`)"
    )]
    NeedsMigration {
        path: PathBuf,
        found: u32,
        current: u32,
    },

    /// A read-only open in a directory that cannot be written, of a table
    /// whose write-ahead log still holds changes: reading the file alone
    /// would miss them.
    #[error(
        "{path} cannot be read where it is: its directory is not writable and its write-ahead log ({path}-wal) holds changes not yet in the file; open it once where it is writable (e.g. `tiletune table show --db {path}`) so they are written into it"
    )]
    UncheckpointedWal { path: PathBuf },

    /// A read-write open of a table that this process cannot write.
    #[error(
        "{path} is not writable here (the file or its directory is read-only); reading it works, writing needs a writable copy: pass --db with a path you can write"
    )]
    NotWritable { path: PathBuf },

    /// Any other SQLite failure (disk full, permission, busy past the timeout).
    #[error(
        "sqlite failed on {path} while {context}: {source}; check the file's permissions and free space"
    )]
    Sqlite {
        path: PathBuf,
        context: &'static str,
        #[source]
        source: rusqlite::Error,
    },

    /// Reading or writing a file next to the database (exports, directories).
    #[error("cannot {action} {path}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },

    /// A problem or candidate key part that would make keys ambiguous.
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidKey {
        what: &'static str,
        value: String,
        reason: String,
    },

    /// A JSON export file that is not one, or not one this build reads.
    #[error("{path} is not a usable tiletune selector export: {detail}")]
    BadExport { path: PathBuf, detail: String },

    /// A row refers to something the table does not hold (e.g. an unregistered SoC).
    #[error("{what} {key:?} is not in {path}; {hint}")]
    Unknown {
        path: PathBuf,
        what: &'static str,
        key: String,
        hint: &'static str,
    },
}

/// Result alias for this crate.
pub type Result<T, E = TableError> = std::result::Result<T, E>;
