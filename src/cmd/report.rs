//! `tiletune report`: an HTML report with plots and a Markdown summary of
//! what the selector table holds about one SoC. Wiring only: rows come from
//! `tiletune-tables`, the report from `tiletune-reports`.

use super::Global;
use anyhow::{Context, bail};
use std::path::PathBuf;
use std::process::ExitCode;
use tiletune_tables::{OpenOptions, SelectorDb, default_db_path, now_unix};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Selector table to report on [default: $TILETUNE_DB, else the XDG data directory].
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// Output directory; report.html and report.md are written into it (created if needed).
    #[arg(short, long, value_name = "DIR")]
    pub out: PathBuf,
    /// The SoC to report on, by fingerprint [default: this machine's SoC].
    #[arg(long, value_name = "FINGERPRINT")]
    pub soc: Option<String>,
    /// Most candidates listed per problem in the PMU section.
    #[arg(long, default_value_t = 12)]
    pub pmu_rows: usize,
}

pub fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let db_path = args.db.clone().unwrap_or_else(default_db_path);
    if !db_path.exists() {
        bail!(
            "no selector table at {}: run `tiletune tune` (and `tiletune bench roofline`) first, or pass --db",
            db_path.display()
        );
    }
    let db = SelectorDb::open_with(&db_path, OpenOptions::read_only())?;
    let fingerprint = match args.soc {
        Some(fp) => fp,
        None => {
            tiletune_soc::probe()
                .context("probing this SoC (pass --soc FINGERPRINT to report on another)")?
                .fingerprint
        }
    };
    if db.soc(&fingerprint)?.is_none() {
        let known: Vec<String> = db
            .socs()?
            .into_iter()
            .map(|s| format!("{} ({})", s.fingerprint, s.name))
            .collect();
        if known.is_empty() {
            bail!(
                "{} holds no SoC yet: run `tiletune tune` (and `tiletune bench roofline`) first",
                db_path.display()
            );
        }
        bail!(
            "{} has no rows for SoC {fingerprint}; it holds: {}. Pass one with --soc, or run `tiletune tune` on this machine",
            db_path.display(),
            known.join(", ")
        );
    }
    eprintln!("reading {} (SoC {fingerprint})", db_path.display());
    let export = db.export_soc(&fingerprint)?;
    eprintln!(
        "drawing plots: {} selections, {} measurements, {} ceilings, {} peer results",
        export.selections.len(),
        export.measurements.len(),
        export.ceilings.len(),
        export.peer_results.len()
    );
    let report = tiletune_reports::ReportBuilder::new(&export)
        .tool(concat!("tiletune ", env!("CARGO_PKG_VERSION")))
        .source(db_path.display().to_string())
        .generated_at(now_unix())
        .max_pmu_rows(args.pmu_rows)
        .build()?;
    let written = report.write_to(&args.out)?;
    if g.json {
        println!(
            "{}",
            serde_json::json!({
                "html": written.html,
                "markdown": written.markdown,
                "plots": written.plots,
            })
        );
    } else {
        println!(
            "wrote {} ({} plots) and {}",
            written.html.display(),
            written.plots,
            written.markdown.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}
