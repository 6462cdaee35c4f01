//! `tiletune compare`: tiletune next to its peers on this machine, from one
//! run. `compare --model M` alternates tiletune's own `bench model` with
//! llama.cpp's `llama-bench` and MNN's `llm_bench` round by round and prints
//! tokens/s side by side; `compare kernels` runs llama.cpp's
//! `test-backend-ops perf -o MUL_MAT` and tiletune's GEMV/GEMM at the same
//! types and shapes; `compare ppl` scores a text with tiletune (W4A32 and
//! W4A8) and with `llama-perplexity` (those two in `compare_kernels` and
//! `compare_ppl`). Running, collecting and printing live in
//! `tiletune_bench::peers::compare`; this module reads the flags and stores
//! the results as peer results in the selector table.

use super::Global;
use anyhow::Context;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use tiletune_bench::peers::compare::ModelCompare;
use tiletune_tables::{PeerResult, now_unix};

#[derive(Debug, clap::Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "Engines run in turn, once per round (-r rounds), so drift hits them alike; \
a peer that is missing, fails or prints garbage is reported and skipped.

Examples:
  tiletune compare -m m.gguf --llama-bench llama.cpp/build/bin/llama-bench -p 512 -n 128 -t 1,2 -r 3 --out cmp.json
  tiletune compare -m m.gguf --mnn-bench MNN/build/llm_bench --mnn-config m-mnn/config.json -t 4
  tiletune compare kernels --llama-test-backend-ops llama.cpp/build/bin/test-backend-ops --types q4_0,q8_0
  tiletune compare ppl -m m.gguf -f wiki.test.raw --llama-perplexity llama.cpp/build/bin/llama-perplexity"
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<CompareCommand>,
    #[command(flatten)]
    pub model: ModelCompareArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum CompareCommand {
    /// llama.cpp's `test-backend-ops perf -o MUL_MAT` (CPU backend) next to
    /// tiletune's GEMV/GEMM at the same types and shapes: time per run,
    /// GFLOP/s and GB/s.
    Kernels(super::compare_kernels::Args),
    /// Perplexity of a text: tiletune W4A32 (`--qmode a32`) and W4A8
    /// (`--qmode a8`) next to `llama-perplexity`.
    Ppl(super::compare_ppl::Args),
}

/// `tiletune compare --model M`: model throughput, tiletune vs peers.
#[derive(Debug, clap::Args)]
pub struct ModelCompareArgs {
    /// GGUF model, run by tiletune and llama-bench.
    #[arg(long, short = 'm', value_name = "FILE", required = true)]
    pub model: Option<PathBuf>,
    /// llama.cpp's llama-bench [default: `llama-bench` on PATH; skipped if absent].
    #[arg(long, value_name = "PATH")]
    pub llama_bench: Option<PathBuf>,
    /// MNN's llm_bench [default: `llm_bench` on PATH]; runs only with --mnn-config.
    #[arg(long, value_name = "PATH")]
    pub mnn_bench: Option<PathBuf>,
    /// The MNN model's config.json (MNN does not read GGUF; convert the same
    /// model with MNN's llmexport first).
    #[arg(long, value_name = "CFG")]
    pub mnn_config: Option<PathBuf>,
    #[command(flatten)]
    pub tests: super::bench_model::TestLengths,
    /// Thread counts, comma separated [default: the CPUs this process may use].
    #[arg(short = 't', long, value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Rounds: in each, every engine runs each test once, in turn.
    #[arg(short = 'r', long = "reps", default_value_t = 3)]
    pub reps: usize,
    /// Give up on one engine run after this many seconds.
    #[arg(long, default_value_t = 3600)]
    pub timeout: u64,
    /// Also write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Selector table the results are stored in (as peer results) [default:
    /// $TILETUNE_DB, else the XDG data directory].
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// Print only; store nothing.
    #[arg(long)]
    pub no_store: bool,
}

pub fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Some(CompareCommand::Kernels(k)) => super::compare_kernels::run(g, k),
        Some(CompareCommand::Ppl(p)) => super::compare_ppl::run(g, p),
        None => model(g, args.model),
    }
}

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
    let stored = super::open_for_writing(&path, soc).and_then(|mut t| {
        let mut n = 0;
        for r in rows {
            n += t.put_peer_result(r)? as usize;
        }
        Ok(n)
    });
    match stored {
        Ok(n) => format!("stored {n} peer result(s) in {}", path.display()),
        Err(e) => format!("not stored in {}: {e:#}", path.display()),
    }
}

// ---- compare --model ------------------------------------------------------

fn model(g: &Global, a: ModelCompareArgs) -> anyhow::Result<ExitCode> {
    let model = super::pull::model_path(&a.model.clone().context("--model is required")?)?;
    if !model.is_file() {
        anyhow::bail!("model {} does not exist", model.display());
    }
    if a.reps == 0 {
        anyhow::bail!("--reps must be at least 1");
    }
    if a.tests
        .n_prompt
        .iter()
        .chain(&a.tests.n_gen)
        .all(|&x| x == 0)
    {
        anyhow::bail!("-p and -n are all 0; nothing to measure");
    }
    let threads = if a.threads.is_empty() {
        vec![available_threads()]
    } else {
        a.threads.clone()
    };
    if threads.contains(&0) {
        anyhow::bail!("-t: thread counts must be at least 1");
    }
    let soc = tiletune_soc::probe().context("probing this SoC")?;
    let cmp = ModelCompare {
        model: model.clone(),
        tiletune: tiletune_exe()?,
        llama_bench: a.llama_bench.clone(),
        mnn_bench: a.mnn_bench.clone(),
        mnn_config: a.mnn_config.clone(),
        n_prompt: a.tests.n_prompt.clone(),
        n_gen: a.tests.n_gen.clone(),
        threads,
        rounds: a.reps,
        timeout: Duration::from_secs(a.timeout.max(1)),
        report_dir: std::env::temp_dir().join(format!("tiletune-compare-{}", std::process::id())),
    };
    let run = cmp.run(&soc.name, &soc.fingerprint, |engine, round| {
        eprintln!("round {round}/{}: {engine}", a.reps);
    })?;
    let doc = &run.doc;

    let mut notes = Vec::new();
    if !a.no_store && !doc.rows.is_empty() {
        let now = now_unix();
        let results: Vec<PeerResult> = doc
            .rows
            .iter()
            .map(|r| PeerResult {
                soc: soc.fingerprint.clone(),
                model: doc.model.clone(),
                engine: r.engine.clone(),
                engine_version: r.engine_version.clone(),
                test: r.test.clone(),
                threads: r.threads,
                tokens_per_s: r.mean,
                std: r.std,
                json: run.stored_json(r),
                measured_at: now,
            })
            .collect();
        notes.push(store(&a.db, &results, &soc));
    }
    if let Some(p) = &a.out {
        write_json_file(p, doc)?;
        notes.push(format!("wrote {}", p.display()));
    }
    print_doc(g, doc, |o| doc.write_table(o))?;
    for n in notes {
        eprintln!("{n}");
    }
    Ok(if run.has_reference() {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "error: tiletune's own benchmark gave no result (see above); nothing to compare against"
        );
        ExitCode::FAILURE
    })
}
