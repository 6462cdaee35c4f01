//! `tiletune compare ppl`: perplexity of a text, tiletune with f32 (`A32`)
//! and int8 (`A8`) activations
//! next to `llama-perplexity`, run by `tiletune_bench::peers::compare::PplCompare`;
//! this module reads the flags, prints and stores the rows as peer results.

use super::output::{available_threads, print_doc, store, tiletune_exe, write_json_file};
use crate::cmd::Global;
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tiletune_bench::peers::compare::{PplCompare, locate, ppl};
use tiletune_tables::{PeerResult, now_unix};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// GGUF model.
    #[arg(long, short = 'm', value_name = "FILE")]
    pub model: PathBuf,
    /// Text file to score.
    #[arg(long, short = 'f', value_name = "FILE")]
    pub file: PathBuf,
    /// llama.cpp's llama-perplexity [default: `llama-perplexity` on PATH; skipped if absent].
    #[arg(long, value_name = "PATH")]
    pub llama_perplexity: Option<PathBuf>,
    /// Tokens per chunk (both engines).
    #[arg(long, short = 'c', default_value_t = 512)]
    pub ctx: usize,
    /// Score at most this many chunks (both engines) [default: all].
    #[arg(long)]
    pub chunks: Option<usize>,
    /// Worker threads, the same for both engines [default: the CPUs this
    /// process may use].
    #[arg(long, short = 't')]
    pub threads: Option<usize>,
    /// Give up on one engine run after this many seconds.
    #[arg(long, default_value_t = 3600)]
    pub timeout: u64,
    /// Also write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Selector table the results are stored in [default: $TILETUNE_DB, else
    /// the XDG data directory].
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// Print only; store nothing.
    #[arg(long)]
    pub no_store: bool,
}

pub fn run(g: &Global, mut a: Args) -> anyhow::Result<ExitCode> {
    a.model = crate::cmd::pull::model_path(&a.model)?;
    if !a.model.is_file() {
        anyhow::bail!("model {} does not exist", a.model.display());
    }
    if !a.file.is_file() {
        anyhow::bail!("text file {} does not exist", a.file.display());
    }
    if a.ctx < 4 {
        anyhow::bail!("--ctx must be at least 4");
    }
    let threads = match a.threads {
        Some(0) => anyhow::bail!("--threads must be at least 1"),
        Some(t) => t,
        None => available_threads(),
    };
    let soc = tiletune_soc::probe().context("probing this SoC")?;
    let cmp = PplCompare {
        model: a.model.clone(),
        file: a.file.clone(),
        tiletune: tiletune_exe()?,
        llama_perplexity: locate(
            &a.llama_perplexity,
            "llama-perplexity",
            "--llama-perplexity",
        ),
        ctx: a.ctx,
        chunks: a.chunks,
        threads,
        timeout: Duration::from_secs(a.timeout.max(1)),
    };
    let doc = cmp.run(&soc.name, &soc.fingerprint, |cmd| {
        eprintln!("running {cmd}")
    });
    let mut done = Vec::new();
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
                test: ppl::ppl_test_name(a.ctx, &r.mode),
                threads,
                tokens_per_s: r.tokens_per_s.unwrap_or(0.0),
                std: None,
                json: doc.stored_json(r),
                measured_at: now,
            })
            .collect();
        done.push(store(&a.db, &results, &soc));
    }
    if let Some(p) = &a.out {
        write_json_file(p, &doc)?;
        done.push(format!("wrote {}", p.display()));
    }
    print_doc(g, &doc, |o| doc.write_table(o))?;
    for n in done {
        eprintln!("{n}");
    }
    Ok(if doc.rows.iter().any(|r| r.engine == "tiletune") {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
