//! The crate's error type. Probing is deliberately forgiving: a missing or
//! unreadable file becomes a note in [`crate::SocInfo::notes`], so the only
//! hard error is a root directory that does not exist at all.

use std::path::PathBuf;

/// Everything that can stop a probe.
#[derive(Debug, thiserror::Error)]
pub enum SocError {
    /// `probe_root` was pointed at a path that is not a directory.
    #[error(
        "probe root {path} is not a directory: pass the folder that holds the pulled proc/ and sys/ trees"
    )]
    RootNotADirectory { path: PathBuf },
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, SocError>;
