//! llama.cpp's `llama-bench`: its `-o json` and `-o jsonl` records (field
//! names as `tools/llama-bench/llama-bench.cpp` prints them:
//! `test::get_fields()` plus `samples_ns` / `samples_ts`) read here, and its
//! tests, statistics and output formats, which tiletune's own `bench model`
//! follows so that both engines go through this one parser and their numbers
//! mean the same thing.
//!
//! # Map
//! - this file — [`parse_llama_bench`] and [`LlamaBenchRecord`].
//! - [`schedule`] — the test definitions ([`TestPlan`], [`Session`]) over any
//!   [`TestModel`].
//! - [`glibc_rand`] — [`GlibcRand`], the token ids' source.
//! - [`stats`] — llama-bench's `avg` and `stdev`.
//! - [`record`] — [`TestRecord`] and its markdown / JSON [`Printer`].

pub mod glibc_rand;
pub mod record;
pub mod schedule;
pub mod stats;

pub use glibc_rand::GlibcRand;
pub use record::{
    Format, ModelInfo, PlanCounts, Printer, RunInfo, TensorInfo, TestRecord, rfc3339_now,
};
pub use schedule::{Session, Step, Test, TestModel, TestPlan, TokenSource, test_gen, test_prompt};

use super::{RateSample, output_error};
use crate::BenchError;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One llama-bench test (one model × settings × `pp`/`tg` case).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LlamaBenchRecord {
    pub build_commit: String,
    pub build_number: i64,
    pub model_filename: String,
    /// `llama_model_desc`, e.g. `llama ?B Q4_1`.
    pub model_type: String,
    pub n_threads: usize,
    pub n_prompt: usize,
    pub n_gen: usize,
    /// Tokens already in the context (`-d`); 0 in files from builds without it.
    pub n_depth: usize,
    /// Mean and sample standard deviation of `samples_ts` as llama-bench computed them.
    pub avg_ts: f64,
    pub stddev_ts: f64,
    /// Tokens per second of each repetition (older builds lack it: then `[avg_ts]`).
    pub samples_ts: Vec<f64>,
    /// The record as printed.
    pub raw: Value,
}

impl LlamaBenchRecord {
    /// llama-bench's own test label: `pp512`, `tg128`, `pp512+tg128`, with ` @ dN` for a depth.
    pub fn test(&self) -> String {
        test_name(self.n_prompt, self.n_gen, self.n_depth)
    }

    /// The version a peer result is keyed by: `b<build_number>-<build_commit>`
    /// for llama.cpp; tiletune's `bench model` records carry
    /// `tiletune_version` (build number 0), giving `<version>-<commit>`, or
    /// the version alone when the commit is unknown.
    pub fn version(&self) -> String {
        match self.raw.get("tiletune_version").and_then(Value::as_str) {
            Some(v) if self.build_commit.is_empty() || self.build_commit == "unknown" => {
                v.to_string()
            }
            Some(v) => format!("{v}-{}", self.build_commit),
            None => format!("b{}-{}", self.build_number, self.build_commit),
        }
    }

    /// The record as a sample for the side-by-side table.
    pub fn to_sample(&self, engine: &str) -> RateSample {
        RateSample {
            engine: engine.to_string(),
            engine_version: self.version(),
            test: self.test(),
            threads: self.n_threads,
            tokens_per_s: self.samples_ts.clone(),
            raw: self.raw.clone(),
        }
    }
}

/// The test label llama-bench prints for these token counts.
pub fn test_name(n_prompt: usize, n_gen: usize, n_depth: usize) -> String {
    let mut s = if n_prompt > 0 && n_gen == 0 {
        format!("pp{n_prompt}")
    } else if n_gen > 0 && n_prompt == 0 {
        format!("tg{n_gen}")
    } else {
        format!("pp{n_prompt}+tg{n_gen}")
    };
    if n_depth > 0 {
        s.push_str(&format!(" @ d{n_depth}"));
    }
    s
}

const HINT: &str = "run llama-bench with `-o json` or `-o jsonl` and read its stdout";

/// Parses `-o json` (one array) or `-o jsonl` (one object per line); the
/// format is recognised from the first non-blank character.
pub fn parse_llama_bench(engine: &str, text: &str) -> Result<Vec<LlamaBenchRecord>, BenchError> {
    let err = |reason: String| output_error(engine, reason, HINT);
    let t = text.trim_start();
    let values: Vec<Value> = match t.chars().next() {
        None => return Err(err("the output is empty".into())),
        Some('[') => match serde_json::from_str::<Value>(t) {
            Ok(Value::Array(a)) => a,
            Ok(_) => return Err(err("expected a JSON array of test records".into())),
            Err(e) => return Err(err(format!("invalid or truncated JSON ({e})"))),
        },
        Some('{') => {
            let mut v = Vec::new();
            for (i, line) in t.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
                v.push(
                    serde_json::from_str::<Value>(line)
                        .map_err(|e| err(format!("line {} is not a JSON object ({e})", i + 1)))?,
                );
            }
            v
        }
        Some(c) => {
            return Err(err(format!(
                "expected JSON (`[` or `{{`), found `{c}` at the start: {}",
                excerpt(t)
            )));
        }
    };
    if values.is_empty() {
        return Err(err("the output holds no test records".into()));
    }
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| record(&v).map_err(|r| err(format!("record {}: {r}", i + 1))))
        .collect()
}

fn record(v: &Value) -> Result<LlamaBenchRecord, String> {
    let obj = v.as_object().ok_or("not a JSON object")?;
    let get = |k: &str| obj.get(k).ok_or(format!("field `{k}` is missing"));
    let string = |k: &str| -> Result<String, String> {
        get(k)?
            .as_str()
            .map(str::to_string)
            .ok_or(format!("field `{k}` is not a string"))
    };
    let uint = |k: &str| -> Result<usize, String> {
        get(k)?
            .as_u64()
            .map(|x| x as usize)
            .ok_or(format!("field `{k}` is not a non-negative integer"))
    };
    let float = |k: &str| -> Result<f64, String> {
        get(k)?
            .as_f64()
            .filter(|x| x.is_finite())
            .ok_or(format!("field `{k}` is not a finite number"))
    };
    let avg_ts = float("avg_ts")?;
    let samples_ts = match obj.get("samples_ts") {
        None => vec![avg_ts],
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| x.as_f64().filter(|x| x.is_finite() && *x >= 0.0))
            .collect::<Option<Vec<f64>>>()
            .ok_or("field `samples_ts` holds a value that is not a finite number")?,
        Some(_) => return Err("field `samples_ts` is not an array".into()),
    };
    if samples_ts.is_empty() {
        return Err("field `samples_ts` is empty".into());
    }
    let n_prompt = uint("n_prompt")?;
    let n_gen = uint("n_gen")?;
    if n_prompt == 0 && n_gen == 0 {
        return Err("both `n_prompt` and `n_gen` are 0".into());
    }
    Ok(LlamaBenchRecord {
        build_commit: string("build_commit")?,
        build_number: get("build_number")?
            .as_i64()
            .ok_or("field `build_number` is not an integer")?,
        model_filename: string("model_filename")?,
        model_type: string("model_type")?,
        n_threads: uint("n_threads")?,
        n_prompt,
        n_gen,
        n_depth: if obj.contains_key("n_depth") {
            uint("n_depth")?
        } else {
            0
        },
        avg_ts,
        stddev_ts: float("stddev_ts")?,
        samples_ts,
        raw: v.clone(),
    })
}

/// The first line of `t`, shortened, for error messages.
pub(crate) fn excerpt(t: &str) -> String {
    let line = t.lines().next().unwrap_or("");
    let mut s: String = line.chars().take(60).collect();
    if s.len() < line.len() {
        s.push('…');
    }
    format!("`{s}`")
}
