//! The crate's one error type. Everything that can go wrong while reading a
//! model (GGUF, safetensors, config.json), building its tokenizer or chat
//! template, or configuring sampling is a `LoadError`: each variant carries the
//! path or offset that locates the problem and says what to do next.

use std::path::PathBuf;

/// Errors of the runtime crate; messages are lowercase and say what to do next.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}; check that the file exists and is readable")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "cannot write {path}: {source}; check that its directory exists and is writable and that the disk has room"
    )]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{path} is {kind}, not a regular file; pass a file (copy a stream to a file first)")]
    NotRegular { path: PathBuf, kind: &'static str },

    /// `plan --soc FP` names a SoC the table cannot describe.
    #[error("selector table {path}: {detail}")]
    NoSuchSoc { path: PathBuf, detail: String },

    #[error(
        "{path} is {size} bytes, more than the {limit} bytes tiletune reads from a text file; pass a smaller file"
    )]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },

    #[error("{path} is not UTF-8 text (invalid byte at offset {offset}); pass a UTF-8 text file")]
    NotUtf8 { path: PathBuf, offset: u64 },

    #[error("{path}: not a gguf file (magic {magic:02x?}); pass a .gguf model file")]
    BadMagic { path: PathBuf, magic: [u8; 4] },

    #[error(
        "{path}: gguf version {version} is not supported (only v2 and v3); re-convert the model with a current llama.cpp"
    )]
    UnsupportedVersion { path: PathBuf, version: u32 },

    #[error(
        "{path}: truncated at offset {offset}: needed {needed} more bytes for {what}; the file is incomplete, download it again"
    )]
    Truncated {
        path: PathBuf,
        offset: u64,
        needed: u64,
        what: String,
    },

    #[error(
        "{path}: malformed at offset {offset}: {what}; the file is corrupt or not produced by a gguf writer"
    )]
    Malformed {
        path: PathBuf,
        offset: u64,
        what: String,
    },

    #[error(
        "{path}: tensor `{tensor}` has ggml type id {type_id}, which this runtime does not know; re-quantize the model to a supported type (f32, f16, bf16, q4_0, q8_0, k-quants, mxfp4, ...)"
    )]
    UnknownTensorType {
        path: PathBuf,
        tensor: String,
        type_id: u32,
    },

    #[error("{path}: tensor `{tensor}`: {what}")]
    BadTensor {
        path: PathBuf,
        tensor: String,
        what: String,
    },

    #[error("{path}: no tensor named `{name}`; list the model's tensors to see what it holds")]
    MissingTensor { path: PathBuf, name: String },

    #[error(
        "{path}: metadata key `{key}` is missing; the model's converter did not write it, re-convert the model"
    )]
    MissingKey { path: PathBuf, key: String },

    #[error("{path}: metadata key `{key}` has type {found}, expected {expected}")]
    WrongType {
        path: PathBuf,
        key: String,
        expected: &'static str,
        found: &'static str,
    },

    #[error("{path}: {what}; check the file against the safetensors format")]
    Safetensors { path: PathBuf, what: String },

    #[error("{path}: invalid json: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    #[error("model config: {0}")]
    Config(String),

    /// A picture that cannot be read or does not fit the vision tower.
    #[error("image: {0}")]
    Image(String),

    #[error("architecture `{0}` is not supported; supported: llama, qwen2, qwen3")]
    UnsupportedArch(String),

    #[error("tokenizer: {0}")]
    Tokenizer(String),

    #[error("chat template: {0}; pass a different template or use the chatml fallback")]
    Template(String),

    #[error("sampling: {0}")]
    Sampling(String),

    #[error("perplexity: {0}")]
    Perplexity(String),
}

/// Result alias used throughout the crate.
pub type Result<T, E = LoadError> = std::result::Result<T, E>;
