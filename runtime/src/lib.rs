//! tiletune's inference runtime: reads models (GGUF over a memory map,
//! safetensors folders), builds their configuration, tokenizer and chat
//! template, runs a reference decoder and samples tokens. The execution plan
//! built from the selector table, and the tuned kernels it dispatches to, come
//! on top of this foundation.
//!
//! Module map, in the order a model is loaded:
//! - [`gguf`]: GGUF v2/v3 reader (bounds-checked, fuzzed) and a small writer.
//! - [`safetensors`]: safetensors files, sharded HF folders ([`safetensors::HfModelDir`]).
//! - [`config`]: [`config::ModelConfig`] from GGUF metadata or `config.json`, one helper.
//! - [`tokenizer`]: byte-level BPE from GGUF or `tokenizer.json`, streaming decode.
//! - [`chat`]: the model's Jinja chat template (minijinja), ChatML fallback.
//! - [`models`]: plain scalar f32 reference decoder for Llama, Qwen2, Qwen3.
//! - [`sampling`]: greedy/temperature/top-k/top-p/min-p/repetition penalty, stop criteria.
//! - [`generate`]: the prefill + sample loop with streaming text.
//! - [`plan`]: the execution plan (kernel choice per problem from the selector table).
//! - [`models::FastModel`]: the decoder on the tuned kernels, weights kept quantized.
//! - [`engine`]: all of the above as every front end loads it ([`engine::Engine`]).
//! - [`perplexity`]: llama-perplexity's chunked score on the fast decoder.
//!
//! Architecture invariant: `runtime` never depends on `tuner`, `pmu`,
//! `bench-harness` or `reports`; all its errors are [`LoadError`]s.

pub mod chat;
pub mod config;
pub mod convert;
pub mod engine;
pub mod error;
pub mod generate;
pub mod gguf;
pub mod input;
pub mod models;
pub mod perplexity;
pub mod plan;
pub mod problems;
pub mod quantize;
pub mod safetensors;
pub mod sampling;
pub mod tokenizer;
pub mod vision;

pub use error::{LoadError, Result};
pub use gguf::{GgmlType, GgufFile, TensorInfo};
