//! `tiletune compare image`: a vision model's image encode time, tiletune
//! vs llama.cpp's `llama-mtmd-cli`, on llama.cpp's two-file form.

use super::output::{available_threads, print_doc, tiletune_exe, write_json_file};
use crate::cmd::Global;
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tiletune_bench::peers::compare::ImageCompare;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The language model GGUF (llama.cpp's converter's first file).
    #[arg(long, short = 'm', value_name = "FILE")]
    pub model: PathBuf,
    /// Its mmproj GGUF (the converter's `--mmproj` file).
    #[arg(long, value_name = "FILE")]
    pub mmproj: PathBuf,
    /// PNG or JPEG pictures to encode (repeatable).
    #[arg(long, value_name = "FILE", required = true)]
    pub image: Vec<PathBuf>,
    /// llama.cpp's llama-mtmd-cli [default: on PATH; skipped if absent].
    #[arg(long, value_name = "PATH")]
    pub llama_mtmd_cli: Option<PathBuf>,
    /// Thread counts, comma separated [default: the CPUs this process may use].
    #[arg(short = 't', long, value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Rounds: in each, every engine encodes every picture once, in turn.
    #[arg(short = 'r', long = "reps", default_value_t = 3)]
    pub reps: usize,
    /// Give up on one engine run after this many seconds.
    #[arg(long, default_value_t = 3600)]
    pub timeout: u64,
    /// Also write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

pub(super) fn run(g: &Global, a: Args) -> anyhow::Result<ExitCode> {
    for f in [&a.model, &a.mmproj].into_iter().chain(&a.image) {
        if !f.is_file() {
            anyhow::bail!("{} does not exist", f.display());
        }
    }
    if a.reps == 0 {
        anyhow::bail!("--reps must be at least 1");
    }
    let threads = match a.threads.is_empty() {
        true => vec![available_threads()],
        false => a.threads.clone(),
    };
    if threads.contains(&0) {
        anyhow::bail!("-t: thread counts must be at least 1");
    }
    let soc = tiletune_soc::probe().context("probing this SoC")?;
    let cmp = ImageCompare {
        model: a.model.clone(),
        mmproj: a.mmproj.clone(),
        images: a.image.clone(),
        tiletune: tiletune_exe()?,
        llama_mtmd_cli: a.llama_mtmd_cli.clone(),
        threads,
        rounds: a.reps,
        timeout: Duration::from_secs(a.timeout.max(1)),
    };
    let doc = cmp.run(&soc.name, &soc.fingerprint, |c| eprintln!("{c}"));
    if let Some(p) = &a.out {
        write_json_file(p, &doc)?;
        eprintln!("wrote {}", p.display());
    }
    print_doc(g, &doc, |o| doc.write_table(o))?;
    Ok(match doc.rows.iter().any(|r| r.engine == "tiletune") {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    })
}
