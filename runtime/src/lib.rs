//! tiletune's inference runtime: reads models (GGUF over a memory map,
//! safetensors folders), builds their configuration, tokenizer and chat
//! template, and samples tokens. The model forward pass and the execution
//! plan built from the selector table come on top of this foundation.
//!
//! Architecture invariant: `runtime` never depends on `tuner`, `pmu`,
//! `bench-harness` or `reports`; all its errors are [`LoadError`]s.

pub mod chat;
pub mod config;
pub mod error;
pub mod gguf;
pub mod models;
pub mod safetensors;
pub mod sampling;
pub mod tokenizer;

pub use error::{LoadError, Result};
pub use gguf::{GgmlType, GgufFile, TensorInfo};
