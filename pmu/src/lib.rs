//! Hardware performance counters for tiletune: ARMv8 PMUv3 and x86 event sets
//! counted through `perf_event_open`, derived metrics (IPC, miss rates, stall
//! shares, Arm top-down level 1), and a fallback that always counts something.
//!
//! # Why `perf-event2`
//! The counters are opened with [`perf-event2`](https://docs.rs/perf-event2),
//! the maintained fork of `perf-event`. The original crate only knows the
//! generic hardware/software/cache events; ARMv8 PMUv3 events (STALL_SLOT,
//! ASE_SPEC, OP_SPEC, ...) have no generic alias and must be opened as raw
//! events (`Raw::new(config)`), which only the fork has. It also reads groups
//! with `time_enabled`/`time_running` (multiplexing) and exposes the
//! `perf_event_attr` so a raw event can be routed to one cluster's PMU type.
//!
//! # Map
//! - [`events`]: the named event tables and their encodings.
//! - [`sysfs`]: PMU discovery (`type`, `cpus`, `events/`, `caps/slots`) for
//!   heterogeneous (big.LITTLE) SoCs.
//! - [`plan`]: groups that fit the number of counters.
//! - [`availability`]: can a cycles counter be opened at all, and if not why.
//! - [`counters`]: [`CounterSet`] — open, start, stop, fall back.
//! - [`counts`] and [`metrics`]: results and what is derived from them.
//!
//! ```no_run
//! use tiletune_pmu::{CounterSet, EventSetKind};
//! let (mut set, note) = CounterSet::new(EventSetKind::Auto);
//! if let Some(n) = &note { n.emit_once(); }
//! set.start()?;
//! let x: u64 = (0..1_000_000u64).sum();
//! let counts = set.stop()?;
//! println!("{x} {:?}", tiletune_pmu::Metrics::from_counts(&counts).ipc);
//! # Ok::<(), tiletune_pmu::PmuError>(())
//! ```

pub mod availability;
pub mod counters;
pub mod counts;
pub mod error;
pub mod events;
pub mod metrics;
pub mod plan;
pub mod sysfs;

pub use counters::{CounterOptions, CounterSet, FallbackNote};
pub use counts::{Backend, CounterValue, Counts};
pub use error::PmuError;
pub use events::{EventDef, EventSetKind};
pub use metrics::{Metrics, TopDown};
pub use plan::{GroupPlan, PlanConfig};
