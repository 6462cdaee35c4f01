//! The one error type of the pmu crate.

use std::path::PathBuf;

/// What can go wrong while discovering PMUs or counting.
#[derive(Debug, thiserror::Error)]
pub enum PmuError {
    /// A sysfs file could not be read.
    #[error("cannot read {path}: {source}; check that sysfs is mounted")]
    Sysfs {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A sysfs or procfs value did not have the expected format.
    #[error(
        "cannot parse {what} from {text:?}; the kernel format may have changed, please report it"
    )]
    Parse { what: &'static str, text: String },
    /// `perf_event_open` refused an event.
    #[error(
        "cannot open counter {event}: {source}; use `--counters software` to count without a PMU"
    )]
    Open {
        event: String,
        #[source]
        source: std::io::Error,
    },
    /// Enabling, disabling or reading an opened group failed.
    #[error("counter {op} failed: {source}; use `--counters software` to count without a PMU")]
    Control {
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// `stop` was called without a `start`.
    #[error("counters were stopped without being started; call start() before stop()")]
    NotStarted,
}
