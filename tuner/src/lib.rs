//! The tuner: which candidates to time for which problems, in what order,
//! and which one wins.
//!
//! - [`suite`] says where problems come from (built-in suites, one problem
//!   from the command line);
//! - [`strategy`] searches a candidate list without knowing what it measures;
//! - [`placement`] lists thread placements (per cluster on big.LITTLE);
//! - [`campaign`] validates every candidate against the scalar reference
//!   before timing it, records each measurement as it is taken (so a killed
//!   campaign resumes without losing or repeating work), and writes winners.
//!
//! The tuner never parses models and never opens SQLite itself: the store it
//! writes to is a trait `adapters` implements over `tiletune-tables`, which `tiletune-flow` drives.

pub mod acceptance;
pub mod adapters;
pub mod budget;
pub mod campaign;
pub mod families;
pub mod joint;
pub mod one_run;
pub mod placement;
pub mod screen;
pub mod strategy;
pub mod suite;

pub use campaign::{KernelProblem, Measure, Selection, Stats, Store};
pub use strategy::Strategy;
use tiletune_soc::human_bytes;
pub use tiletune_tables::{Candidate, Problem};

/// What can go wrong when setting up a campaign.
#[derive(Debug, thiserror::Error)]
pub enum TunerError {
    #[error("unknown op `{op}`; the ops here are {known}")]
    UnknownOp { op: String, known: String },
    #[error(
        "`{shape}` is not a shape for {op}: expected {expected} with positive sizes, e.g. --shape 4864x896"
    )]
    BadShape {
        op: String,
        shape: String,
        expected: String,
    },
    #[error("unknown suite `{0}`; built-in suites are llm-decode and llm-prefill")]
    UnknownSuite(String),
    #[error("no {op} kernel for dtype `{dtype}`; supported: {supported}")]
    UnsupportedDtype {
        op: String,
        dtype: String,
        supported: String,
    },
    #[error(
        "`{shape}` is too large for {op}: one operand would hold {elements} elements, more than the 2^31 (8 GiB as f32) tiletune allocates for one; use a smaller shape"
    )]
    TooLarge {
        op: String,
        shape: String,
        elements: usize,
    },
    #[error(
        "{problem} needs about {} for its buffers, and {} of memory is available; use a smaller shape",
        human_bytes(*need),
        human_bytes(*available)
    )]
    OutOfMemory {
        problem: String,
        need: u64,
        available: u64,
    },
    #[error("{0}")]
    BadBudget(String),
    #[error("bad workload {0}")]
    BadWorkload(String),
    #[error("bad thread placement `{placement}`: {reason}")]
    BadPlacement { placement: String, reason: String },
    #[error("{problem} with {variant}: {why}")]
    WrongKernel {
        problem: String,
        variant: String,
        why: String,
    },
    #[error(transparent)]
    Bench(#[from] tiletune_bench::BenchError),
    #[error(transparent)]
    Kernel(#[from] tiletune_kernels::KernelError),
    #[error(transparent)]
    Key(#[from] tiletune_tables::TableError),
}
