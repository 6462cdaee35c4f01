//! Reports from a selector table: a self-contained HTML page (plots inline as
//! SVG, drawn with `plotters`, no scripts, no network) and a Markdown summary
//! with the same tables.
//!
//! The report shows what the table holds about one SoC: its probe record,
//! the machine ceilings, a roofline with each tuned problem's default and
//! tuned point, tuned-vs-default speedups (and the model-level verdicts of
//! `tune --model`: whole model, tuned plan against default), parameter
//! heatmaps, PMU metrics
//! per candidate (or the software-counter fallback note), and peer-engine
//! comparisons with the perplexity table. A section without data says so and
//! what to run, instead of drawing an empty plot.
//!
//! - [`model`]: rows → plot models (pure, unit-tested).
//! - [`plot`]: plot models → SVG; [`labels`] places point labels so none overlap.
//! - [`doc`]: sections, tables and plots → HTML and Markdown, with escaping.
//! - [`report`]: assembling the sections ([`ReportBuilder`]) and writing files.
//!
//! This crate reads rows; it never measures or runs a kernel.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use tiletune_tables::{OpenOptions, SelectorDb};
//! let db = SelectorDb::open_with("selector.db", OpenOptions::read_only())?;
//! let export = db.export_soc("981478f80a49abf9")?;
//! let written = tiletune_reports::ReportBuilder::new(&export)
//!     .tool("tiletune 0.1.0")
//!     .build()?
//!     .write_to(std::path::Path::new("report"))?;
//! println!("{} ({} plots)", written.html.display(), written.plots);
//! # Ok(()) }
//! ```

pub mod doc;
pub mod error;
pub mod labels;
pub mod model;
pub mod plot;
pub mod report;

pub use error::{ReportError, Result};
pub use report::{Report, ReportBuilder, Written, utc_string};
