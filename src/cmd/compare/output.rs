//! What the comparisons share: the running binary (tiletune's own side runs
//! as a child process), the JSON file, the printed document and the peer
//! results stored in the selector table.

use crate::cmd::Global;
use anyhow::Context;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use tiletune_tables::PeerResult;

pub(super) fn tiletune_exe() -> anyhow::Result<PathBuf> {
    std::env::current_exe().context("cannot find the running tiletune binary")
}

pub(super) fn write_json_file(path: &Path, doc: &impl Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(doc)?;
    std::fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}

/// Prints a comparison on stdout: its document with `--json`, else its table.
pub(super) fn print_doc<D: Serialize>(
    g: &Global,
    doc: &D,
    table: impl FnOnce(&mut std::io::StdoutLock<'static>) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if g.json {
        serde_json::to_writer_pretty(&mut out, doc)?;
        writeln!(out)?;
    } else {
        table(&mut out)?;
    }
    Ok(())
}

/// The CPUs this process may use, the default thread count.
pub(super) fn available_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Stores peer results; a table that cannot be opened is reported, not fatal
/// (the printed comparison is the main result).
pub(super) fn store(
    db: &Option<PathBuf>,
    rows: &[PeerResult],
    soc: &tiletune_soc::SocInfo,
) -> String {
    let path = db.clone().unwrap_or_else(tiletune_tables::default_db_path);
    let stored = tiletune_flow::open_for_writing(&path, soc).and_then(|mut t| {
        let mut n = 0;
        for r in rows {
            n += t.put_peer_result(r)? as usize;
        }
        Ok(n)
    });
    match stored {
        Ok(n) => format!("stored {n} peer result(s) in {}", path.display()),
        Err(e) => format!(
            "not stored in {}: {}",
            path.display(),
            super::super::error_text(&e)
        ),
    }
}
