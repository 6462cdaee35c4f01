//! The `tiletune` command line: argument parsing and wiring only. Every piece
//! of logic lives in a library crate; each subcommand is one module in `cmd/`.

mod cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Kernel autotuning and benchmarking for CPU LLM inference on ARM and x86 SoCs.
#[derive(Debug, Parser)]
#[command(name = "tiletune", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// Emit machine-readable JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// Print more detail (where each choice came from, skipped steps).
    #[arg(short, long, global = true)]
    pub verbose: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Describe this SoC: cores, clusters, caches, ISA features, PMU, fingerprint.
    Probe(cmd::probe::Args),
    /// Show, export, import and merge the selector table of tuned winners.
    Table(cmd::table::Args),
    /// Tune kernels on this SoC and store the winners in the selector table.
    Tune(cmd::tune::Args),
    /// Measure kernels and this machine's roofline ceilings.
    Bench(cmd::bench::Args),
    /// Show a model's execution plan: kernel choice per problem and its source.
    Plan(cmd::plan::Args),
    /// Run a prompt through a model and stream the generated text.
    Run(cmd::run::Args),
    /// Perplexity of a text file, computed as llama-perplexity does.
    Ppl(cmd::ppl::Args),
    /// Chat with a model in the terminal.
    Chat(cmd::chat::Args),
    /// Download a model by id from Hugging Face or ModelScope into the hub's cache.
    Pull(cmd::pull::Args),
    /// Convert a Hugging Face model folder to a GGUF file (any type quantize writes).
    Convert(cmd::convert::Args),
    /// List or clean the GGUF images Hugging Face folders were converted to.
    Cache(cmd::cache::Args),
    /// Re-quantize a GGUF file as llama-quantize does (same types, tensor
    /// choices and flags).
    Quantize(cmd::quantize::Args),
    /// Side by side with llama.cpp and MNN on this machine: model tokens/s
    /// (alternating engines), MUL_MAT kernels (`compare kernels`) and
    /// perplexity (`compare ppl`).
    Compare(cmd::compare::Args),
    /// Write an HTML report with plots (and a Markdown summary) of the selector table.
    Report(cmd::report::Args),
    /// Run probe, bench, tune, run, compare or plan on a phone (adb) or a
    /// board (ssh) and merge its rows into this machine's table.
    Remote(cmd::remote::Args),
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(err) => {
            // A closed pipe (`tiletune probe | head`) is not a failure.
            if let Some(io) = err.downcast_ref::<std::io::Error>()
                && io.kind() == std::io::ErrorKind::BrokenPipe
            {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {}", cmd::error_text(&*err));
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    let global = cmd::Global {
        json: cli.json,
        verbose: cli.verbose,
    };
    match cli.command {
        Command::Probe(args) => cmd::probe::run(&global, args),
        Command::Table(args) => cmd::table::run(&global, args),
        Command::Tune(args) => cmd::tune::run(&global, args),
        Command::Bench(args) => cmd::bench::run(&global, args),
        Command::Plan(args) => cmd::plan::run(&global, args),
        Command::Run(args) => cmd::run::run(&global, args),
        Command::Ppl(args) => cmd::ppl::run(&global, args),
        Command::Chat(args) => cmd::chat::run(&global, args),
        Command::Pull(args) => cmd::pull::run(&global, args),
        Command::Convert(args) => cmd::convert::run(&global, args),
        Command::Cache(args) => cmd::cache::run(&global, args),
        Command::Quantize(args) => cmd::quantize::run(&global, args),
        Command::Compare(args) => cmd::compare::run(&global, args),
        Command::Report(args) => cmd::report::run(&global, args),
        Command::Remote(args) => cmd::remote::run(&global, args),
    }
}
