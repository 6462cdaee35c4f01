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
}
