//! The end-to-end flows that span the tuner, the runtime, the bench harness
//! and the selector table, written once for every front end (the `tiletune`
//! binary, the C ABI, the Python package on it).
//!
//! The flow that needs this crate is `tune --model`: a campaign over the
//! kernel problems a model runs (the runtime lists them, the tuner times
//! them), the joint layout choice, and the model-level A/B check of the
//! tuned plan against the default plan on the model itself (the runtime
//! runs it, the bench harness schedules it as `llama-bench` would), whose
//! verdicts go to the table. The tuner must not parse models and the
//! runtime must not tune, so neither can hold it; the binary must stay glue.
//!
//! - [`tune()`]: one campaign (a suite, one problem or a model), reporting
//!   progress as typed [`event::TuneEvent`]s and returning a
//!   [`tune::TuneReport`]; nothing here prints;
//! - [`accept`]: the model-level check that ends `tune --model`;
//! - [`bench::BenchModel`]: the runtime's fast decoder as `llama-bench`'s
//!   test schedule sees it (also what `tiletune bench model` times).
//!
//! **Architecture invariant:** `flow` holds no kernel, no search strategy,
//! no model code and no SQL: it calls the crates that own them.

pub mod accept;
pub mod bench;
mod error;
pub mod event;
pub mod tune;

pub use error::{FlowError, Result};
pub use event::TuneEvent;
pub use tune::{Target, TuneOptions, TuneReport, tune};

use tiletune_tables::{OpenOptions, SelectorDb, SocRecord, now_unix};

/// Opens (creating if needed) the selector table at `path` for writing,
/// and registers this SoC in it so its rows have a parent.
pub fn open_for_writing(path: &std::path::Path, soc: &tiletune_soc::SocInfo) -> Result<SelectorDb> {
    let mut db = SelectorDb::open_with(
        path,
        OpenOptions {
            create: true,
            ..OpenOptions::default()
        },
    )?;
    db.register_soc(&SocRecord {
        fingerprint: soc.fingerprint.clone(),
        name: soc.name.clone(),
        probe: serde_json::to_value(soc)?,
        first_seen: now_unix(),
    })?;
    Ok(db)
}
