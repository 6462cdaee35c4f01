//! The one error type of the reports crate.

use std::path::PathBuf;

/// What can go wrong while building or writing a report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// plotters refused to draw (a bug in a plot model, not in the data).
    #[error("drawing the {plot} plot failed: {detail}; please report this with the selector table")]
    Plot { plot: String, detail: String },
    /// The output directory or a file in it could not be written.
    #[error("cannot write {path}: {source}; check that the directory exists and is writable")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Results of this crate.
pub type Result<T> = std::result::Result<T, ReportError>;
