//! `tiletune compare`: tiletune next to its peers on this machine, from one
//! run. `compare --model M` alternates tiletune's own `bench model` with
//! llama.cpp's `llama-bench` and MNN's `llm_bench` round by round and prints
//! tokens/s side by side; `compare kernels` runs llama.cpp's
//! `test-backend-ops perf -o MUL_MAT` and tiletune's GEMV/GEMM at the same
//! types and shapes; `compare ppl` scores a text with tiletune (f32 and
//! int8 activations) and with `llama-perplexity`; `compare image` times a vision
//! model's image encode against `llama-mtmd-cli` (one file each: `model.rs`,
//! `kernels.rs`, `ppl.rs`, `image.rs`; `output.rs` writes and stores what
//! they share).
//! Running, collecting and printing live in `tiletune_bench::peers::compare`;
//! these modules read the flags and store the results as peer results in
//! the selector table.

use super::Global;
use std::path::PathBuf;
use std::process::ExitCode;

mod image;
mod kernels;
mod model;
mod output;
mod ppl;

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
  tiletune compare ppl -m m.gguf -f wiki.test.raw --llama-perplexity llama.cpp/build/bin/llama-perplexity
  tiletune compare image -m vl.gguf --mmproj mmproj.gguf --image a.png --llama-mtmd-cli llama.cpp/build/bin/llama-mtmd-cli -t 1,2"
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
    Kernels(kernels::Args),
    /// Perplexity of a text: tiletune with f32 activations (`--qmode a32`,
    /// row A32) and int8 ones (`--qmode a8`, row A8), the weights as the
    /// file has them, next to `llama-perplexity`.
    Ppl(ppl::Args),
    /// A vision model's image encode time next to llama.cpp's
    /// `llama-mtmd-cli`, on the same language GGUF + mmproj and pictures.
    Image(image::Args),
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
    /// More arguments for llama-bench, split at spaces, e.g. '--repack 0'
    /// (its own weight layouts off: where its AMX path faults, as b11549's
    /// does on a Sapphire Rapids KVM guest).
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub llama_args: Option<String>,
    /// MNN's llm_bench [default: `llm_bench` on PATH]; runs only with --mnn-config.
    #[arg(long, value_name = "PATH")]
    pub mnn_bench: Option<PathBuf>,
    /// The MNN model's config.json (MNN does not read GGUF; convert the same
    /// model with MNN's llmexport first).
    #[arg(long, value_name = "CFG")]
    pub mnn_config: Option<PathBuf>,
    #[command(flatten)]
    pub tests: super::bench_model::TestLengths,
    /// KV cache type of both engines: f32, f16 or q8_0 (llama-bench's
    /// -ctk and -ctv; tiletune's --kv-type) [default: each engine's own, f16].
    #[arg(long, value_parser = super::model_args::parse_kv_type)]
    pub kv_type: Option<tiletune_kernels::attention::KvDtype>,
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
        Some(CompareCommand::Kernels(k)) => kernels::run(g, k),
        Some(CompareCommand::Ppl(p)) => ppl::run(g, p),
        Some(CompareCommand::Image(i)) => image::run(g, i),
        None => model::run(g, args.model),
    }
}
