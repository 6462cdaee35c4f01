//! MNN `llm_bench -j FILE` reports (the `jsonAggregator` printer of
//! `transformers/llm/engine/tools/llm_bench.cpp`): one object with the run
//! settings of the *first* test (`model`, `backend`, `threads`, ...) and a
//! `results` array of `prefill` / `decode` / `prefill_and_decode` entries
//! with mean tokens/s (`tps`) and sample standard deviation (`std`).
//!
//! The report names one thread count for all its results, so a comparison
//! runs `llm_bench` once per thread count. A model that fails to load still
//! gives exit status 0 and a report (with rates of 0): [`load_failure`]
//! reads the messages that tell.

use super::llama_bench::excerpt;
use super::{RateSample, output_error};
use crate::BenchError;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One `results` entry, flattened into llama-bench's test labels.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MnnRate {
    /// `pp512`, `tg128`; a `prefill_and_decode` entry gives two rates,
    /// `pp512+tg128 prefill` and `pp512+tg128 decode`.
    pub test: String,
    pub tokens_per_s: f64,
    pub std: f64,
}

/// A whole `llm_bench` JSON report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MnnReport {
    /// The model directory's name.
    pub model: String,
    pub backend: String,
    pub threads: usize,
    /// 0 normal, 1 high, 2 low (fp16 where the backend has it).
    pub precision: Option<i64>,
    pub rates: Vec<MnnRate>,
    pub raw: Value,
}

impl MnnReport {
    /// One sample per rate: with `-rep 1` a rate is one measurement, which
    /// is how a comparison runs it (rounds alternate with the other engines).
    pub fn to_samples(&self, engine: &str, version: &str) -> Vec<RateSample> {
        self.rates
            .iter()
            .map(|r| RateSample {
                engine: engine.to_string(),
                engine_version: version.to_string(),
                test: r.test.clone(),
                threads: self.threads,
                tokens_per_s: vec![r.tokens_per_s],
                raw: self.raw.clone(),
            })
            .collect()
    }
}

const HINT: &str =
    "run llm_bench with `-j FILE` and read FILE (it is written when llm_bench exits)";

/// Parses an `llm_bench -j` report.
pub fn parse_mnn_bench(engine: &str, text: &str) -> Result<MnnReport, BenchError> {
    let err = |reason: String| output_error(engine, reason, HINT);
    let t = text.trim();
    if t.is_empty() {
        return Err(err("the report is empty".into()));
    }
    let v: Value = serde_json::from_str(t).map_err(|e| {
        err(format!(
            "invalid or truncated JSON ({e}) starting {}",
            excerpt(t)
        ))
    })?;
    let obj = v
        .as_object()
        .ok_or_else(|| err("expected one JSON object".into()))?;
    let field = |k: &str| {
        obj.get(k)
            .ok_or_else(|| err(format!("field `{k}` is missing")))
    };
    let text_field = |k: &str| -> Result<String, BenchError> {
        field(k)?
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| err(format!("field `{k}` is not a string")))
    };
    let threads = field("threads")?
        .as_u64()
        .filter(|&t| t > 0)
        .ok_or_else(|| err("field `threads` is not a positive integer".into()))?
        as usize;
    let results = field("results")?
        .as_array()
        .ok_or_else(|| err("field `results` is not an array".into()))?;
    let mut rates = Vec::new();
    for (i, r) in results.iter().enumerate() {
        entry(r, &mut rates).map_err(|why| err(format!("result {}: {why}", i + 1)))?;
    }
    if rates.is_empty() {
        return Err(err(
            "the report holds no measured rates (every test failed or none ran)".into(),
        ));
    }
    if let Some(dup) = rates
        .iter()
        .enumerate()
        .find(|(i, r)| rates[..*i].iter().any(|q| q.test == r.test))
    {
        return Err(err(format!(
            "test `{}` appears twice: the report mixes several runs (e.g. `-t 1,2`) under one thread count; run llm_bench once per thread count",
            dup.1.test
        )));
    }
    Ok(MnnReport {
        model: text_field("model")?,
        backend: text_field("backend")?,
        threads,
        precision: obj.get("precision").and_then(Value::as_i64),
        rates,
        raw: v.clone(),
    })
}

fn entry(r: &Value, out: &mut Vec<MnnRate>) -> Result<(), String> {
    let o = r.as_object().ok_or("not a JSON object")?;
    let uint = |k: &str| {
        o.get(k)
            .and_then(Value::as_u64)
            .filter(|&x| x > 0)
            .map(|x| x as usize)
            .ok_or(format!("field `{k}` is missing or not a positive integer"))
    };
    // A rate is absent when the test produced no samples; llm_bench then
    // omits both keys, which is not an error of the report.
    let rate = |tps: &str, std: &str| -> Result<Option<(f64, f64)>, String> {
        match (o.get(tps), o.get(std)) {
            (None, _) => Ok(None),
            (Some(t), s) => {
                let t = t
                    .as_f64()
                    .filter(|x| x.is_finite())
                    .ok_or(format!("field `{tps}` is not a finite number"))?;
                // llm_bench writes 0 (and absurd prefill rates) when the model
                // failed to load, and still exits 0.
                if t <= 0.0 {
                    return Err(format!(
                        "`{tps}` is {t}: llm_bench reports this when the model failed to load; check --mnn-config and its stderr"
                    ));
                }
                let s = match s {
                    None => 0.0,
                    Some(s) => s
                        .as_f64()
                        .filter(|x| x.is_finite())
                        .ok_or(format!("field `{std}` is not a finite number"))?,
                };
                Ok(Some((t, s)))
            }
        }
    };
    let kind = o
        .get("type")
        .and_then(Value::as_str)
        .ok_or("field `type` is missing")?;
    let mut push = |test: String, r: Option<(f64, f64)>| {
        if let Some((t, s)) = r {
            out.push(MnnRate {
                test,
                tokens_per_s: t,
                std: s,
            });
        }
    };
    match kind {
        "prefill" => push(format!("pp{}", uint("prompt_len")?), rate("tps", "std")?),
        "decode" => push(format!("tg{}", uint("generate_len")?), rate("tps", "std")?),
        "prefill_and_decode" => {
            let name = format!("pp{}+tg{}", uint("prompt_len")?, uint("generate_len")?);
            push(
                format!("{name} prefill"),
                rate("prefill_tps", "prefill_std")?,
            );
            push(format!("{name} decode"), rate("decode_tps", "decode_std")?);
        }
        other => return Err(format!("unknown result type `{other}`")),
    }
    Ok(())
}

/// The messages `llm_bench` prints when its model did not load (it still
/// exits 0 and writes a report); `None` when there are none.
pub fn load_failure(stdout: &str, stderr: &str) -> Option<String> {
    const SIGNS: [&str; 4] = [
        "Unable to open config file",
        "LLM in error state",
        "tokenizer file not found",
        "File not exist",
    ];
    let lines: Vec<&str> = stderr
        .lines()
        .chain(stdout.lines())
        .filter(|l| SIGNS.iter().any(|s| l.contains(s)))
        .collect();
    (!lines.is_empty()).then(|| lines.join("; "))
}
