//! The contract between kernel families and the tuner.
//!
//! Every family exposes its tile parameters as a `Copy` struct implementing
//! [`Tunable`]: an analytic default derived from the cache sizes (BLIS-style),
//! a candidate list (the tuner's search space) and a range check. The kernel
//! crate reads no files, so the cache sizes arrive as a [`CpuCaps`] built by
//! whoever probed the machine.

use serde::{Serialize, de::DeserializeOwned};
use std::fmt::Debug;

/// What the analytic cache model needs to know about the core a kernel runs
/// on. Sizes are in bytes, per core for L1/L2 and per cluster for L3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CpuCaps {
    pub l1d: usize,
    pub l2: usize,
    pub l3: usize,
    /// Cores available to one kernel call (the upper bound of the thread sweep).
    pub cores: usize,
}

impl Default for CpuCaps {
    /// A conservative mid-range core (Cortex-A76-like), used when nothing was
    /// probed: 64 KiB L1D, 512 KiB L2, 4 MiB L3, 4 cores.
    fn default() -> Self {
        CpuCaps {
            l1d: 64 << 10,
            l2: 512 << 10,
            l3: 4 << 20,
            cores: 4,
        }
    }
}

/// Tile parameters of one kernel family.
pub trait Tunable: Copy + Debug + PartialEq + Serialize + DeserializeOwned + Send + Sync {
    /// The problem shape the parameters are chosen for.
    type Shape: Copy + Debug;

    /// The analytic default for this shape on this core.
    fn default_for(shape: &Self::Shape, cpu: &CpuCaps) -> Self;

    /// The search space: every parameter set worth timing for this shape.
    /// Always contains `default_for(shape, cpu)` and only valid entries.
    fn candidates(shape: &Self::Shape, cpu: &CpuCaps) -> Vec<Self>;

    /// Checks the documented valid range; the entry points call it once.
    fn validate(&self) -> crate::Result<()>;
}

/// The `isa`, `params` and `threads` builder methods of a family's run
/// configuration (a struct with those three fields), written once; each is
/// checked when the configuration runs, not when it is set.
macro_rules! config_setters {
    ($params:ty) => {
        /// Forces a variant (checked when run).
        pub fn isa(mut self, isa: $crate::Isa) -> Self {
            self.isa = isa;
            self
        }

        /// Sets the tile parameters (checked when run).
        pub fn params(mut self, params: $params) -> Self {
            self.params = params;
            self
        }

        /// Sets the worker threads (checked when run).
        pub fn threads(mut self, threads: usize) -> Self {
            self.threads = threads;
            self
        }
    };
}
pub(crate) use config_setters;
