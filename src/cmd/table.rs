//! `tiletune table show|export|import|merge|path`: look at and move selector
//! tables. Wiring only; the logic lives in `tiletune-tables`.

use super::Global;
use anyhow::{Context, bail};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tiletune_kernels::KERNEL_ABI;
use tiletune_tables::{
    DB_ENV, ImportStats, OpenOptions, Selection, SelectorDb, SocExport, TableError, Verdict,
    default_db_path, read_any, read_export, write_export,
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
                print_show(&mut out, &sels, &verdicts, &names)?;
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

/// `812 ns`, `12.4 µs`, `3.10 ms`.
fn fmt_ns(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.1} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// Per SoC, its selections and then its model-level verdicts.
fn print_show(
    out: &mut impl Write,
    sels: &[Selection],
    verdicts: &[Verdict],
    names: &std::collections::HashMap<String, String>,
) -> anyhow::Result<()> {
    let socs: std::collections::BTreeSet<&str> = sels
        .iter()
        .map(|s| s.soc.as_str())
        .chain(verdicts.iter().map(|v| v.soc.as_str()))
        .collect();
    for (i, soc) in socs.into_iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        let mine: Vec<Selection> = sels.iter().filter(|s| s.soc == soc).cloned().collect();
        let after_selections = !mine.is_empty();
        if after_selections {
            print_selections(out, &mine, names)?;
        }
        let mine: Vec<&Verdict> = verdicts.iter().filter(|v| v.soc == soc).collect();
        if !mine.is_empty() {
            if after_selections {
                writeln!(out)?;
            }
            writeln!(out, "model-level verdicts for {}:", soc_cell(soc, names))?;
            print_verdicts(out, &mine)?;
        }
    }
    Ok(())
}

fn soc_cell(soc: &str, names: &std::collections::HashMap<String, String>) -> String {
    names
        .get(soc)
        .map_or(soc.to_string(), |n| format!("{n} ({})", short(soc)))
}

fn print_selections(
    out: &mut impl Write,
    sels: &[Selection],
    names: &std::collections::HashMap<String, String>,
) -> anyhow::Result<()> {
    let header = [
        "soc",
        "abi",
        "op",
        "dtype",
        "shape",
        "budget",
        "winner",
        "placement",
        "median",
        "speedup",
    ];
    let rows: Vec<Vec<String>> = sels
        .iter()
        .map(|s| {
            vec![
                soc_cell(&s.soc, names),
                s.kernel_abi.to_string(),
                s.problem.op().to_string(),
                s.problem.dtype().to_string(),
                s.problem.dims_string(),
                s.thread_budget.to_string(),
                format!("{} {}", s.winner.variant(), s.winner.params_json()),
                placement_cell(s.winner.placement()),
                fmt_ns(s.median_ns),
                s.speedup.map_or("-".to_string(), |x| format!("{x:.2}x")),
            ]
        })
        .collect();
    print_table(out, &header, &rows, &[1, 5, 8, 9])
}

/// One line per verdict: the whole model timed with the tuned plan against
/// the default one, medians over the alternated rounds.
fn print_verdicts(out: &mut impl Write, verdicts: &[&Verdict]) -> anyhow::Result<()> {
    let header = [
        "model",
        "phase",
        "threads",
        "test",
        "default ms",
        "tuned ms",
        "ratio",
        "verdict",
    ];
    let rows: Vec<Vec<String>> = verdicts
        .iter()
        .map(|v| {
            vec![
                v.model_name.clone(),
                v.phase.to_string(),
                v.threads.to_string(),
                v.test.clone(),
                format!("{:.1}", v.default_median_s() * 1e3),
                format!("{:.1}", v.tuned_median_s() * 1e3),
                format!("{:.2}x", v.ratio),
                if v.won { "tuned runs" } else { "default runs" }.to_string(),
            ]
        })
        .collect();
    print_table(out, &header, &rows, &[2, 4, 5, 6])
}

/// Columns padded to their widest cell; `numeric` columns right-aligned.
fn print_table(
    out: &mut impl Write,
    header: &[&str],
    rows: &[Vec<String>],
    numeric: &[usize],
) -> anyhow::Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |out: &mut dyn Write, cells: &[&str]| -> std::io::Result<()> {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            let pad = w - c.chars().count();
            if numeric.contains(&i) {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            } else {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            }
        }
        writeln!(out, "{}", s.trim_end())
    };
    line(out, header)?;
    for r in rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        line(out, &cells)?;
    }
    Ok(())
}

/// `t2`, or `t2@cluster1 (cpus 4,5)` when pinned.
fn placement_cell(p: &tiletune_tables::Placement) -> String {
    if !p.is_pinned() {
        return p.name();
    }
    let cpus: Vec<String> = p.cpus().iter().map(|c| c.to_string()).collect();
    format!("{} (cpus {})", p.name(), cpus.join(","))
}

/// The first 12 characters of a fingerprint: enough to tell SoCs apart on screen.
fn short(fp: &str) -> &str {
    fp.char_indices().nth(12).map_or(fp, |(i, _)| &fp[..i])
}

#[cfg(test)]
mod tests {
    use super::*;
    use tiletune_tables::{Candidate, Phase, Placement, Problem};

    #[test]
    fn show_prints_the_placement_column() {
        let sel = |winner: Candidate| Selection {
            soc: "socA".into(),
            kernel_abi: 1,
            problem: Problem::new("gemv", "f32", [("n", 64), ("k", 32)]).unwrap(),
            thread_budget: 2,
            winner,
            median_ns: 1500.0,
            default_ns: Some(3000.0),
            speedup: Some(2.0),
            campaign: None,
            selected_at: 0,
        };
        let pinned = Placement::pinned(2, vec![1], vec![4, 5]).unwrap();
        let sels = [
            sel(Candidate::placed("neon", serde_json::json!({"nr": 4}), pinned).unwrap()),
            sel(Candidate::new("neon", serde_json::json!({"nr": 8}), 1).unwrap()),
        ];
        let mut out = Vec::new();
        print_selections(&mut out, &sels, &Default::default()).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("placement"), "{text}");
        assert!(lines[1].contains("t2@cluster1 (cpus 4,5)"), "{text}");
        assert!(lines[2].contains(" t1 "), "{text}");
        assert!(lines[1].contains(r#"neon {"nr":4}"#), "{text}");
    }

    #[test]
    fn show_prints_model_level_verdicts_after_the_selections() {
        let sel = Selection {
            soc: "socA".into(),
            kernel_abi: 1,
            problem: Problem::new("gemv", "f32", [("n", 64), ("k", 32)]).unwrap(),
            thread_budget: 2,
            winner: Candidate::new("neon", serde_json::json!({"nr": 8}), 2).unwrap(),
            median_ns: 1500.0,
            default_ns: Some(3000.0),
            speedup: Some(2.0),
            campaign: None,
            selected_at: 0,
        };
        let verdict = |phase, tuned_s: Vec<f64>, won| Verdict {
            soc: "socA".into(),
            kernel_abi: 1,
            model: "d1g35t".into(),
            model_name: "SmolLM2-135M.gguf".into(),
            phase,
            threads: 2,
            plan_digest: "p1".into(),
            test: if phase == Phase::Prefill {
                "pp512"
            } else {
                "tg128"
            }
            .into(),
            default_s: vec![0.214, 0.2, 0.21],
            ratio: 0.21 / tuned_s[1],
            tuned_s,
            won,
            campaign: None,
            measured_at: 0,
        };
        let verdicts = [
            verdict(Phase::Prefill, vec![0.19, 0.196, 0.2], true),
            verdict(Phase::Decode, vec![0.22, 0.2206, 0.23], false),
        ];
        let names = [("socA".to_string(), "Test SoC".to_string())].into();
        let mut out = Vec::new();
        print_show(&mut out, &[sel], &verdicts, &names).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("placement"), "{text}");
        assert!(lines[1].contains("Test SoC (socA)"), "{text}");
        assert_eq!(lines[2], "", "{text}");
        assert_eq!(
            lines[3], "model-level verdicts for Test SoC (socA):",
            "{text}"
        );
        for h in [
            "model",
            "phase",
            "threads",
            "test",
            "default ms",
            "tuned ms",
            "ratio",
        ] {
            assert!(lines[4].contains(h), "{h:?} missing: {text}");
        }
        let prefill: Vec<&str> = lines[5].split_whitespace().collect();
        assert_eq!(
            prefill,
            [
                "SmolLM2-135M.gguf",
                "prefill",
                "2",
                "pp512",
                "210.0",
                "196.0",
                "1.07x",
                "tuned",
                "runs"
            ],
            "{text}"
        );
        assert!(
            lines[6].contains("decode") && lines[6].contains("tg128"),
            "{text}"
        );
        assert!(
            lines[6].contains("220.6") && lines[6].contains("0.95x"),
            "{text}"
        );
        assert!(lines[6].ends_with("default runs"), "{text}");
        assert_eq!(lines.len(), 7, "{text}");
    }
}
