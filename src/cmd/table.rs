//! `tiletune table show|export|import|merge|path`: look at and move selector
//! tables. Wiring only; the logic lives in `tiletune-tables`, the text of
//! `show` in `table_show`.

use super::Global;
use anyhow::{Context, bail};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tiletune_kernels::KERNEL_ABI;
use tiletune_tables::{
    DB_ENV, ImportStats, OpenOptions, SelectorDb, SocExport, TableError, default_db_path, read_any,
    read_export, write_export,
};
use tiletune_tuner::screen::{Refusal, screen_export};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Selector table file [default: $TILETUNE_DB, else $XDG_DATA_HOME/tiletune/selector.db,
    /// else ~/.local/share/tiletune/selector.db].
    #[arg(long, global = true, value_name = "PATH")]
    pub db: Option<PathBuf>,
    #[command(subcommand)]
    pub command: TableCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum TableCommand {
    /// Print the tuned winners: op, dtype, shape, thread budget, winner, its
    /// placement (`t2`, or `t2@cluster1` when pinned to a cluster), median,
    /// speedup; then, per SoC, the model-level verdicts of `tune --model`
    /// (whole model, tuned plan against default, per phase and thread count).
    Show(ShowArgs),
    /// Write one JSON file per SoC (schema-versioned, for `import` or `merge` elsewhere).
    Export(ExportArgs),
    /// Add the rows of JSON exports to the table (importing twice adds nothing).
    Import {
        /// Files written by `tiletune table export`.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Merge other selector tables or JSON exports into this one; SoCs stay
    /// apart and, for the same key, the faster selection wins.
    Merge {
        /// Selector table files (.db) or JSON exports.
        #[arg(required = true)]
        inputs: Vec<PathBuf>,
    },
    /// Print where the selector table is and whether it exists.
    Path,
}

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// Only this SoC (its fingerprint, as `tiletune probe` prints it)
    /// [default: this machine's SoC].
    #[arg(long, value_name = "FINGERPRINT", conflicts_with = "all")]
    pub soc: Option<String>,
    /// Every SoC in the table.
    #[arg(long)]
    pub all: bool,
    /// Run `PRAGMA integrity_check` first.
    #[arg(long)]
    pub check: bool,
}

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// A directory (one `<fingerprint>.json` per SoC) or, with exactly one SoC, a `.json` file.
    #[arg(long, short, value_name = "PATH", default_value = ".")]
    pub out: PathBuf,
    /// Only this SoC.
    #[arg(long, value_name = "FINGERPRINT")]
    pub soc: Option<String>,
}

pub fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let (db_path, source) = match args.db {
        Some(p) => (p, "--db"),
        None if std::env::var_os(DB_ENV).is_some_and(|v| !v.is_empty()) => {
            (default_db_path(), DB_ENV)
        }
        None => (default_db_path(), "default"),
    };
    let mut out = std::io::stdout().lock();
    match args.command {
        TableCommand::Path => {
            let exists = db_path.exists();
            if g.json {
                let v = serde_json::json!({"path": db_path, "exists": exists, "source": source});
                writeln!(out, "{v}")?;
            } else {
                writeln!(out, "{}", db_path.display())?;
                if g.verbose {
                    let state = if exists { "exists" } else { "not created yet" };
                    writeln!(out, "  from {source}; {state}")?;
                }
            }
        }
        TableCommand::Show(a) => {
            let ro = OpenOptions {
                check_integrity: a.check,
                ..OpenOptions::read_only()
            };
            let db = match SelectorDb::open_with(&db_path, ro) {
                // Showing a table older than the read-only reader knows
                // upgrades it in place, as any writer would.
                Err(TableError::NeedsMigration { .. }) => SelectorDb::open_with(
                    &db_path,
                    OpenOptions {
                        create: false,
                        check_integrity: a.check,
                        ..OpenOptions::default()
                    },
                )?,
                r => r?,
            };
            // Default to this machine: a table merged from several devices
            // otherwise shows winners that do not apply here.
            let here = if a.all || a.soc.is_some() {
                None
            } else {
                tiletune_soc::probe().ok().map(|s| s.fingerprint)
            };
            let soc = if a.all {
                None
            } else {
                a.soc.as_deref().or(here.as_deref())
            };
            let sels = db.selections(soc)?;
            let verdicts = db.verdicts(soc)?;
            if g.json {
                let v = serde_json::json!({"selections": sels, "verdicts": verdicts});
                serde_json::to_writer_pretty(&mut out, &v)?;
                writeln!(out)?;
            } else if sels.is_empty() && verdicts.is_empty() {
                let scope = soc.map_or("any soc".to_string(), |s| format!("soc {s}"));
                writeln!(
                    out,
                    "no selections for {scope} in {}; run `tiletune tune` first",
                    db_path.display()
                )?;
            } else {
                let names = db
                    .socs()?
                    .into_iter()
                    .map(|s| (s.fingerprint, s.name))
                    .collect();
                super::table_show::print_show(&mut out, &sels, &verdicts, &names)?;
            }
        }
        TableCommand::Export(a) => {
            let db = SelectorDb::open_with(&db_path, OpenOptions::read_only())?;
            let exports = match &a.soc {
                Some(fp) => vec![db.export_soc(fp)?],
                None => db.export_all()?,
            };
            let written = write_exports(&a.out, &exports)?;
            if g.json {
                writeln!(out, "{}", serde_json::json!({ "written": written }))?;
            } else {
                for p in &written {
                    writeln!(out, "{}", p.display())?;
                }
            }
        }
        TableCommand::Import { files } => {
            let mut db = SelectorDb::open(&db_path)?;
            let mut report = Vec::new();
            for f in &files {
                let mut export = read_export(f)?;
                say_refused(f, &screen_export(&mut export, KERNEL_ABI));
                let st = db
                    .import(&export)
                    .with_context(|| format!("importing {}", f.display()))?;
                report.push((f.clone(), export.soc.fingerprint, st));
            }
            print_import_report(&mut out, g.json, &report)?;
        }
        TableCommand::Merge { inputs } => {
            let mut db = SelectorDb::open(&db_path)?;
            let mut report = Vec::new();
            for input in &inputs {
                if same_file(input, &db_path) {
                    bail!(
                        "{} is the target table itself; pass other tables to merge, or choose the target with --db",
                        input.display()
                    );
                }
                for mut export in read_any(input)? {
                    say_refused(input, &screen_export(&mut export, KERNEL_ABI));
                    let st = db
                        .import(&export)
                        .with_context(|| format!("merging {}", input.display()))?;
                    report.push((input.clone(), export.soc.fingerprint, st));
                }
            }
            print_import_report(&mut out, g.json, &report)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Rows the runtime could not run are left out of an import, each said.
fn say_refused(from: &Path, refused: &[Refusal]) {
    if refused.is_empty() {
        return;
    }
    eprintln!(
        "warning: {}: {} row(s) left out, the runtime could not run them:",
        from.display(),
        refused.len()
    );
    for r in refused {
        eprintln!("  {}: {}", r.row, r.reason);
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Writes the exports to `out`: a `.json` file for exactly one SoC, else a directory.
fn write_exports(out: &Path, exports: &[SocExport]) -> anyhow::Result<Vec<PathBuf>> {
    if exports.is_empty() {
        bail!("the table holds no socs yet; nothing to export");
    }
    if out.extension().is_some_and(|e| e == "json") {
        if exports.len() != 1 {
            bail!(
                "the table holds {} socs and an export file holds one; pass --soc FINGERPRINT or a directory as --out",
                exports.len()
            );
        }
        write_export(out, &exports[0])?;
        return Ok(vec![out.to_path_buf()]);
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut written = Vec::new();
    for e in exports {
        // Fingerprints are hashes, but keep the file name safe whatever they hold.
        let name: String = e
            .soc
            .fingerprint
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = out.join(format!("{name}.json"));
        write_export(&path, e)?;
        written.push(path);
    }
    Ok(written)
}

fn print_import_report(
    out: &mut impl Write,
    json: bool,
    report: &[(PathBuf, String, ImportStats)],
) -> anyhow::Result<()> {
    if json {
        let rows: Vec<_> = report
            .iter()
            .map(|(f, soc, st)| serde_json::json!({"input": f, "soc": soc, "stats": st}))
            .collect();
        serde_json::to_writer_pretty(&mut *out, &rows)?;
        writeln!(out)?;
        return Ok(());
    }
    for (f, soc, st) in report {
        writeln!(
            out,
            "{} [soc {soc}]: +{} measurements, +{} selections, {} replaced by faster, {} kept, \
             +{} campaigns, +{} ceilings, +{} peer results, +{} verdicts, {} replaced by newer",
            f.display(),
            st.measurements_added,
            st.selections_added,
            st.selections_replaced,
            st.selections_kept,
            st.campaigns_added,
            st.ceilings_added,
            st.peer_results_added,
            st.verdicts_added,
            st.verdicts_replaced
        )?;
    }
    Ok(())
}
