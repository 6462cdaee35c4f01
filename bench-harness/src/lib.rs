//! How tiletune measures one thing: warm-up, adaptive repetition until a
//! minimum count and time, robust statistics (median, MAD, order-statistic
//! confidence interval, modified-z outliers), counters read around the timed
//! region, cold-cache input rotation, thread pinning, a drift guard against
//! throttling, the environment record, and this machine's roofline ceilings.
//!
//! # Map
//! - [`measure`] — [`Harness`] and its schedule; [`Measurement`] is the record.
//! - [`clock`] — the [`Clock`] trait, the system clock and a [`MockClock`] that
//!   makes schedules and statistics deterministic in tests.
//! - [`stats`] — the statistics, with the methods cited.
//! - [`rotate`] — cold vs hot cache ([`Rotation`]).
//! - [`pin`] — `sched_setaffinity` pinning and [`Placement`].
//! - [`drift`] — [`DriftGuard`] and its reference kernel.
//! - [`env`] — [`Environment`].
//! - [`roofline`] — STREAM bandwidth and FMA peaks ([`Ceilings`]), and which
//!   ceiling a kernel run is measured against ([`roofline::Roofline`]).
//! - [`report`] — [`KernelReport`], one timed kernel configuration and its text.
//! - [`peers`] — llama.cpp and MNN run as child processes, their outputs
//!   parsed, and side-by-side comparisons run in alternation.
//!
//! ```
//! use tiletune_bench::{Harness, MeasureConfig};
//! let mut h = Harness::new(MeasureConfig::quick())?;
//! let v: Vec<f32> = (0..1024).map(|i| i as f32).collect();
//! let m = h.measure("sum", || { std::hint::black_box(v.iter().sum::<f32>()); })?;
//! assert!(m.summary.median > 0.0);
//! # Ok::<(), tiletune_bench::BenchError>(())
//! ```

pub mod clock;
pub mod drift;
pub mod env;
pub mod error;
pub mod measure;
pub mod peers;
pub mod pin;
pub mod report;
pub mod roofline;
pub mod rotate;
pub mod stats;

pub use clock::{Clock, MockClock, SystemClock};
pub use drift::{DriftCheck, DriftConfig, DriftGuard, DriftReport};
pub use env::Environment;
pub use error::BenchError;
pub use measure::{Harness, MeasureConfig, MeasureProgress, Measurement};
pub use pin::{PinGuard, Placement};
pub use report::KernelReport;
pub use roofline::{Ceilings, RooflineConfig};
pub use rotate::Rotation;
pub use stats::Summary;
