//! Opening a selector table safely. Before SQLite sees a file we read its
//! 100-byte header ourselves: random bytes, a truncated file, a foreign
//! application or a newer schema are rejected with an error that names the file,
//! and the file is never written in those cases (WAL mode and migrations are
//! switched on only after the checks pass).

use crate::error::{Result, TableError};
use crate::schema::{self, APPLICATION_ID, Migrated, SCHEMA_VERSION};
use rusqlite::{Connection, ErrorCode, OpenFlags};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How to open a selector table. `Default` creates a missing file read-write and
/// skips the full integrity check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenOptions {
    /// Run `PRAGMA integrity_check` (reads every page; fine for selector-sized files).
    pub check_integrity: bool,
    /// Create the file (and its parent directories) when missing.
    pub create: bool,
    /// Open without writing anything; an old schema then errors instead of migrating.
    pub read_only: bool,
    /// How long a writer waits for another process's lock before failing.
    pub busy_timeout: Duration,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            check_integrity: false,
            create: true,
            read_only: false,
            busy_timeout: Duration::from_secs(30),
        }
    }
}

impl OpenOptions {
    /// For the runtime: never create, never write, check nothing expensive.
    pub fn read_only() -> Self {
        OpenOptions {
            create: false,
            read_only: true,
            ..Self::default()
        }
    }
}

/// An open selector table (one SQLite connection). Writes take `&mut self`;
/// use one `SelectorDb` per thread or process — SQLite's WAL mode and the busy
/// timeout serialize concurrent writers without losing rows.
pub struct SelectorDb {
    pub(crate) conn: Connection,
    pub(crate) path: PathBuf,
}

impl std::fmt::Debug for SelectorDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SelectorDb")
            .field("path", &self.path)
            .finish()
    }
}

/// Maps an SQLite error to a [`TableError`] that names the file; damage codes
/// become [`TableError::Corrupt`].
pub(crate) fn sql_err(path: &Path, context: &'static str, e: rusqlite::Error) -> TableError {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseCorrupt) => TableError::Corrupt {
            path: path.to_path_buf(),
            detail: e.to_string(),
        },
        Some(ErrorCode::NotADatabase) => TableError::NotSqlite {
            path: path.to_path_buf(),
            detail: e.to_string(),
        },
        _ => TableError::Sqlite {
            path: path.to_path_buf(),
            context,
            source: e,
        },
    }
}

/// `application_id`, `user_version` and whether the schema is empty.
///
/// Reading the schema touches page 1 and the schema table: damaged files fail
/// here rather than on the first query. One read transaction, so the ids and
/// the schema come from the same snapshot: read separately, another
/// process's first migration could commit in between and show
/// application_id 0 with user_version 3, which looks foreign.
fn read_ids(conn: &mut Connection) -> rusqlite::Result<(u32, u32, bool)> {
    let tx = conn.transaction()?;
    let (app, version) = schema::header_ids(&tx)?;
    let empty = schema::is_empty(&tx)?;
    tx.commit()?;
    Ok((app, version, empty))
}

/// SQLite's answer to a reader that cannot create the WAL index.
fn is_read_only_directory(e: &rusqlite::Error) -> bool {
    e.sqlite_error().is_some_and(|f| {
        matches!(
            f.extended_code,
            rusqlite::ffi::SQLITE_READONLY_DIRECTORY | rusqlite::ffi::SQLITE_READONLY_CANTINIT
        ) || f.code == ErrorCode::CannotOpen
    })
}

fn wal_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push("-wal");
    PathBuf::from(p)
}

/// `file:` URI of `path` with `immutable=1`; `%`, `?` and `#` (and every
/// byte that is not plain ASCII) are percent-encoded so any file name works.
fn immutable_uri(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut uri = String::from("file:");
    for &b in abs.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push_str("?immutable=1");
    uri
}

/// What the header says, read without SQLite.
enum Header {
    /// Missing or zero-length file.
    Absent,
    /// A plausible SQLite file.
    Sqlite,
}

const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

fn read_header(path: &Path) -> Result<Header> {
    let io = |action, source| TableError::Io {
        path: path.to_path_buf(),
        action,
        source,
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Header::Absent),
        Err(e) => return Err(io("stat", e)),
    };
    if meta.is_dir() {
        return Err(TableError::NotSqlite {
            path: path.to_path_buf(),
            detail: "it is a directory".to_string(),
        });
    }
    let len = meta.len();
    if len == 0 {
        return Ok(Header::Absent);
    }
    let mut head = [0u8; 100];
    let mut f = std::fs::File::open(path).map_err(|e| io("open", e))?;
    let n = read_up_to(&mut f, &mut head).map_err(|e| io("read", e))?;
    if n < 16 || &head[..16] != SQLITE_MAGIC {
        return Err(TableError::NotSqlite {
            path: path.to_path_buf(),
            detail: "the file does not start with the sqlite header".to_string(),
        });
    }
    if n < 100 {
        return Err(TableError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("truncated: {n} bytes, shorter than the 100-byte header"),
        });
    }
    let be32 = |o: usize| u32::from_be_bytes([head[o], head[o + 1], head[o + 2], head[o + 3]]);
    let page_size = match u16::from_be_bytes([head[16], head[17]]) {
        1 => 65536u64,
        p if p >= 512 && p.is_power_of_two() => p as u64,
        p => {
            return Err(TableError::Corrupt {
                path: path.to_path_buf(),
                detail: format!("invalid page size {p} in the header"),
            });
        }
    };
    // The in-header page count is trustworthy only when the change counter
    // (offset 24) matches version-valid-for (offset 92); every SQLite since
    // 3.7.0 keeps them in step. A file shorter than that count lost its tail.
    // A non-empty WAL means a checkpoint may have been cut short (kill -9):
    // the header can then already count pages that only the WAL holds, and
    // SQLite finishes the job on open. Trust it in that case.
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let wal_pending = std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0);
    let pages = be32(28) as u64;
    if !wal_pending && pages > 0 && be32(24) == be32(92) && len < pages * page_size {
        return Err(TableError::Corrupt {
            path: path.to_path_buf(),
            detail: format!(
                "truncated: {len} bytes on disk, the header says {pages} pages of {page_size} bytes"
            ),
        });
    }
    let app = be32(68);
    let version = be32(60);
    if app != APPLICATION_ID && app != 0 {
        return Err(TableError::Foreign {
            path: path.to_path_buf(),
            found: app,
            expected: APPLICATION_ID,
        });
    }
    if app == APPLICATION_ID && version > SCHEMA_VERSION {
        return Err(TableError::NewerSchema {
            path: path.to_path_buf(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(Header::Sqlite)
}

fn read_up_to(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

impl SelectorDb {
    /// Opens (creating if missing) a selector table read-write.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, OpenOptions::default())
    }

    /// Opens a selector table with explicit options. See the module docs for
    /// what is checked before anything is written.
    pub fn open_with(path: impl AsRef<Path>, opts: OpenOptions) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let fresh = match read_header(&path)? {
            Header::Absent if !opts.create || opts.read_only => {
                return Err(TableError::NotFound { path });
            }
            Header::Absent => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(|source| TableError::Io {
                        path: dir.to_path_buf(),
                        action: "create directory",
                        source,
                    })?;
                }
                true
            }
            Header::Sqlite => false,
        };
        let flags = if opts.read_only {
            OpenFlags::SQLITE_OPEN_READ_ONLY
        } else if fresh {
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE
        };
        let flags = flags | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let e = |ctx| {
            let path = path.clone();
            move |err| sql_err(&path, ctx, err)
        };
        let connect = |flags: OpenFlags, target: &str| -> Result<(Connection, (u32, u32, bool))> {
            let mut conn = Connection::open_with_flags(target, flags).map_err(e("opening"))?;
            conn.busy_timeout(opts.busy_timeout)
                .map_err(e("setting the busy timeout"))?;
            let ids = read_ids(&mut conn).map_err(e("reading the header"))?;
            Ok((conn, ids))
        };
        let target = path.to_string_lossy().into_owned();
        let (mut conn, (app, version, empty)) = match connect(flags, &target) {
            // A WAL reader needs the shared-memory index next to the file,
            // which SQLite cannot make in a directory it cannot write (a
            // table shipped on a read-only partition). Such a table has no
            // writer, so it is read as an immutable file: no locks, no
            // index, and nothing but the file itself is read.
            Err(TableError::Sqlite { source, .. })
                if opts.read_only && !path.is_dir() && is_read_only_directory(&source) =>
            {
                if std::fs::metadata(wal_path(&path)).is_ok_and(|m| m.len() > 0) {
                    return Err(TableError::UncheckpointedWal { path });
                }
                connect(flags | OpenFlags::SQLITE_OPEN_URI, &immutable_uri(&path))?
            }
            Err(TableError::Sqlite { source, .. })
                if !opts.read_only && source.sqlite_error_code() == Some(ErrorCode::ReadOnly) =>
            {
                return Err(TableError::NotWritable { path });
            }
            r => r?,
        };
        if app != APPLICATION_ID && !(app == 0 && version == 0 && empty) {
            return Err(TableError::Foreign {
                path,
                found: app,
                expected: APPLICATION_ID,
            });
        }
        if version > SCHEMA_VERSION {
            return Err(TableError::NewerSchema {
                path,
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        if opts.check_integrity {
            check_integrity(&conn, &path)?;
        }
        if opts.read_only {
            // v5 only added `verdicts`, which a reader of a v4 file finds
            // empty (`SelectorDb::verdict`): a table shipped read-only
            // before verdicts existed still serves its selections.
            // An SQLite file with no schema yet is a table a tuner is
            // creating right now (or one that was never filled): to a
            // reader that is no table, not an old one to upgrade.
            if version == 0 && empty {
                return Err(TableError::NotFound { path });
            }
            if version < schema::READ_ONLY_OLDEST {
                return Err(TableError::NeedsMigration {
                    path,
                    found: version,
                    current: SCHEMA_VERSION,
                });
            }
        } else {
            // WAL lets readers (the runtime) proceed while a tuner writes, and
            // writers queue on the busy timeout instead of failing.
            //
            // Switching the journal mode needs an exclusive lock and SQLite
            // may answer SQLITE_BUSY at once, without the busy handler, when
            // another connection is opening the same fresh file (seen with two
            // writers under qemu). So retry until the busy timeout, re-reading
            // the mode: usually the other opener has switched it already.
            let deadline = std::time::Instant::now() + opts.busy_timeout;
            loop {
                let mode: String = conn
                    .pragma_query_value(None, "journal_mode", |r| r.get(0))
                    .map_err(e("reading the journal mode"))?;
                if mode.eq_ignore_ascii_case("wal") {
                    break;
                }
                match conn
                    .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0))
                {
                    Ok(_) => break,
                    Err(rusqlite::Error::SqliteFailure(f, _))
                        if f.code == rusqlite::ErrorCode::DatabaseBusy
                            && std::time::Instant::now() < deadline =>
                    {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                    Err(err) => return Err(e("switching to wal mode")(err)),
                }
            }
            conn.pragma_update(None, "synchronous", "NORMAL")
                .map_err(e("setting synchronous"))?;
            if version < SCHEMA_VERSION {
                match schema::migrate_to(&mut conn, SCHEMA_VERSION)
                    .map_err(e("migrating the schema"))?
                {
                    Migrated::Done { .. } => {}
                    Migrated::Foreign { app } => {
                        return Err(TableError::Foreign {
                            path,
                            found: app,
                            expected: APPLICATION_ID,
                        });
                    }
                    Migrated::Newer { found } => {
                        return Err(TableError::NewerSchema {
                            path,
                            found,
                            supported: SCHEMA_VERSION,
                        });
                    }
                }
            }
        }
        conn.pragma_update(None, "foreign_keys", true)
            .map_err(e("enabling foreign keys"))?;
        Ok(SelectorDb { conn, path })
    }

    /// The file this table lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version of the open file (always [`SCHEMA_VERSION`] after a successful open).
    pub fn schema_version(&self) -> Result<u32> {
        schema::header_ids(&self.conn)
            .map(|(_, v)| v)
            .map_err(|e| sql_err(&self.path, "reading the header", e))
    }

    /// Runs `PRAGMA integrity_check` now.
    pub fn check_integrity(&self) -> Result<()> {
        check_integrity(&self.conn, &self.path)
    }
}

fn check_integrity(conn: &Connection, path: &Path) -> Result<()> {
    let mut stmt = conn
        .prepare("PRAGMA integrity_check(20)")
        .map_err(|e| sql_err(path, "checking integrity", e))?;
    let lines: Vec<String> = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .and_then(|rows| rows.collect())
        .map_err(|e| sql_err(path, "checking integrity", e))?;
    if lines.len() == 1 && lines[0] == "ok" {
        Ok(())
    } else {
        Err(TableError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("integrity check: {}", lines.join("; ")),
        })
    }
}
