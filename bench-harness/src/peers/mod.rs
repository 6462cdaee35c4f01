//! Peer engines, run and read: llama.cpp (`llama-bench`, `test-backend-ops
//! perf`, `llama-perplexity`) and MNN (`llm_bench`), so tiletune's numbers
//! stand next to theirs from one run on one machine.
//!
//! # Map
//! - [`llama_bench`] — `llama-bench -o json|jsonl` records (also tiletune's
//!   own `bench model -o json`, which prints the same format), and
//!   llama-bench's tests, statistics and output formats that `bench model`
//!   follows.
//! - [`mnn`] — MNN `llm_bench -j` reports.
//! - [`backend_ops`] — `test-backend-ops perf` results (console or `--output sql`)
//!   and the MUL_MAT shape in their parameter strings.
//! - [`perplexity`] — the `Final estimate: PPL = x +/- y` of a perplexity run.
//! - [`run`] — a peer as a child process: captured output, timeout, stderr tail.
//! - [`side_by_side`] — engines alternated round by round, samples pooled
//!   into mean ± std and a ratio to the reference engine.
//! - [`compare`] — `tiletune compare`'s three modes (model, kernels, ppl):
//!   the engines run, their results collected into one document and table.
//!
//! Every parser returns [`BenchError::PeerOutput`] on empty, truncated or
//! foreign input; none panics.

pub mod backend_ops;
pub mod compare;
pub mod llama_bench;
pub mod mnn;
pub mod perplexity;
pub mod run;
pub mod side_by_side;

use crate::BenchError;
use serde::{Deserialize, Serialize};

pub use backend_ops::{MulMatShape, OpPerf, parse_backend_ops};
pub use llama_bench::{LlamaBenchRecord, parse_llama_bench, test_name};
pub use mnn::{MnnRate, MnnReport, load_failure as mnn_load_failure, parse_mnn_bench};
pub use perplexity::{PerplexityEstimate, PplScore, parse_perplexity};
pub use run::{PeerCommand, PeerOutput, binary_fingerprint, find_on_path, stderr_tail};
pub use side_by_side::{
    BenchTests, ComparisonRow, Engine, EngineFailure, LlamaBenchEngine, MnnBenchEngine, Rounds,
    alternate, mean_std, side_by_side,
};

/// Tokens/s of one engine on one test at one thread count, from one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RateSample {
    pub engine: String,
    pub engine_version: String,
    /// `pp512`, `tg128`, ... (llama-bench's labels).
    pub test: String,
    pub threads: usize,
    /// One value per repetition inside that run.
    pub tokens_per_s: Vec<f64>,
    /// The engine's own record.
    pub raw: serde_json::Value,
}

pub(crate) fn output_error(engine: &str, reason: String, hint: &str) -> BenchError {
    BenchError::PeerOutput {
        engine: engine.to_string(),
        reason,
        hint: hint.to_string(),
    }
}
