//! The crate's one error type: what the flows' own steps add (which step
//! of the model-level check failed) around the errors of the crates they
//! call, which pass through with their own messages.

use tiletune_runtime::LoadError;

/// Errors of a flow; messages say what to do next.
#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    #[error(transparent)]
    Tuner(#[from] tiletune_tuner::TunerError),
    #[error(transparent)]
    Model(#[from] LoadError),
    #[error(transparent)]
    Table(#[from] tiletune_tables::TableError),
    #[error("probing this SoC")]
    Probe(#[source] tiletune_soc::SocError),
    #[error("describing this SoC as JSON")]
    Json(#[from] serde_json::Error),
    /// One step of a model benchmark failed.
    #[error("{step} failed")]
    Step {
        step: &'static str,
        #[source]
        source: LoadError,
    },
    /// The model-level check could not time a test.
    #[error("{what} {tests}")]
    Check {
        /// `warming up` or `timing`.
        what: &'static str,
        tests: String,
        #[source]
        source: Box<FlowError>,
    },
    #[error("nothing to tune: none of the {0} problem(s) has a tunable kernel yet")]
    NothingToTune(usize),
    /// [`crate::TuneOptions::stop`] was raised.
    #[error(
        "the campaign was stopped; its measurements are kept, and the same campaign run again continues from them"
    )]
    Stopped,
}

/// Result alias of this crate.
pub type Result<T, E = FlowError> = std::result::Result<T, E>;
