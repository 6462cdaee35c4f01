//! The one error type of the bench-harness crate.

/// What can go wrong while measuring.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A configuration value is out of range.
    #[error("invalid measurement config: {reason}")]
    InvalidConfig { reason: String },
    /// Pinning to the requested CPUs failed.
    #[error(
        "cannot pin to CPUs {cpus:?}: {source}; pick CPUs from `tiletune probe` that this process may use"
    )]
    Pin {
        cpus: Vec<usize>,
        #[source]
        source: std::io::Error,
    },
    /// The requested CPU set is empty or beyond the kernel's CPU set size.
    #[error("invalid CPU set {cpus:?}: give at least one CPU number below {max}")]
    InvalidCpus { cpus: Vec<usize>, max: usize },
    /// Counting around the timed region failed.
    #[error(transparent)]
    Counters(#[from] tiletune_pmu::PmuError),
    /// A worker thread panicked during a roofline measurement.
    #[error("a roofline worker thread panicked; rerun with fewer threads")]
    WorkerPanicked,
    /// A peer engine's output (llama.cpp, MNN, or tiletune's own
    /// llama-bench-compatible JSON) is empty, truncated or not the format asked for.
    #[error("cannot read {engine} output: {reason}; {hint}")]
    PeerOutput {
        engine: String,
        reason: String,
        /// What to check next (the flag that selects the format, ...).
        hint: String,
    },
    /// A file or folder a comparison needs could not be made or written.
    #[error("{what}: {error}")]
    Io {
        /// What was attempted, with the path (`cannot create /tmp/x`).
        what: String,
        error: std::io::Error,
    },
    /// `tiletune --json ppl`'s result line is missing or malformed.
    #[error("{reason}")]
    PplResult { reason: String },
    /// A peer engine could not be started, exited with an error or timed out.
    #[error(
        "{engine} failed: {reason} (command: {command}){}",
        tail_note(stderr_tail)
    )]
    PeerRun {
        engine: String,
        command: String,
        reason: String,
        /// The last lines it wrote to stderr.
        stderr_tail: String,
    },
}

fn tail_note(tail: &str) -> String {
    if tail.trim().is_empty() {
        "; it wrote nothing to stderr".to_string()
    } else {
        format!("; last lines of its stderr:\n{tail}")
    }
}
