//! `tiletune cache list|clean|path`: the conversion cache behind `--model
//! HF_DIR` (`tiletune_runtime::convert::{list, clean}`), so the GGUF images
//! it keeps can be seen and removed.

use super::Global;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use tiletune_runtime::convert::{CacheEntry, clean, default_cache_dir, list};
use tiletune_tables::UtcTime;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub action: Action,
    /// The cache directory (default: $XDG_CACHE_HOME/tiletune/converted).
    #[arg(long, global = true, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// List the converted images: key, size, file type, when, the folder
    /// each came from and whether a run of that folder would still use it.
    List,
    /// Remove the images no run can use again (their folder changed or is
    /// gone, or an older converter wrote them) and the files of
    /// conversions that did not finish; `--all` removes every image.
    Clean {
        /// Remove every image, current ones too (they are converted again
        /// on the next run of their folder).
        #[arg(long)]
        all: bool,
    },
    /// Print the cache directory.
    Path,
}

fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b => format!("{:.1} KiB", b as f64 / 1024.0),
    }
}

fn entry_json(e: &CacheEntry) -> serde_json::Value {
    serde_json::json!({
        "key": e.key,
        "path": e.path,
        "bytes": e.bytes,
        "source": e.source,
        "file_type": e.file_type,
        "created": e.created,
        "state": e.state.describe(),
        "stale": e.state.is_stale(),
    })
}

pub fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let dir = args.dir.unwrap_or_else(default_cache_dir);
    let mut out = std::io::stdout().lock();
    match args.action {
        Action::Path => writeln!(out, "{}", dir.display())?,
        Action::List => {
            let entries = list(&dir)?;
            if g.json {
                let doc: Vec<_> = entries.iter().map(entry_json).collect();
                writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
                return Ok(ExitCode::SUCCESS);
            }
            if entries.is_empty() {
                writeln!(out, "no converted images in {}", dir.display())?;
                return Ok(ExitCode::SUCCESS);
            }
            writeln!(
                out,
                "{:<32}  {:>10}  {:<8}  {:<20}  {:<15}  source",
                "key", "size", "type", "converted (UTC)", "state"
            )?;
            for e in &entries {
                writeln!(
                    out,
                    "{:<32}  {:>10}  {:<8}  {:<20}  {:<15}  {}",
                    e.key,
                    human(e.bytes),
                    e.file_type.as_deref().unwrap_or("?"),
                    UtcTime::from_unix(e.created as i64).to_string(),
                    e.state.describe(),
                    e.source
                        .as_ref()
                        .map_or("(unknown)".into(), |s| s.display().to_string())
                )?;
            }
            let total: u64 = entries.iter().map(|e| e.bytes).sum();
            let stale: Vec<_> = entries.iter().filter(|e| e.state.is_stale()).collect();
            writeln!(
                out,
                "{} image(s), {} in {}; {} stale ({}): `tiletune cache clean` removes them",
                entries.len(),
                human(total),
                dir.display(),
                stale.len(),
                human(stale.iter().map(|e| e.bytes).sum())
            )?;
        }
        Action::Clean { all } => {
            let done = clean(&dir, all)?;
            if g.json {
                let doc = serde_json::json!({
                    "removed": done.removed.iter().map(entry_json).collect::<Vec<_>>(),
                    "partial": done.partial,
                    "bytes": done.bytes,
                });
                writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
                return Ok(ExitCode::SUCCESS);
            }
            for e in &done.removed {
                writeln!(
                    out,
                    "removed {} ({}, {})",
                    e.key,
                    human(e.bytes),
                    e.state.describe()
                )?;
            }
            for p in &done.partial {
                writeln!(out, "removed {} (an unfinished conversion)", p.display())?;
            }
            writeln!(out, "freed {} in {}", human(done.bytes), dir.display())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
