//! The result of a perplexity run: `llama-perplexity` prints running values
//! `[1]12.3456,[2]...` and ends with `Final estimate: PPL = x +/- y`;
//! `tiletune ppl` prints the same final line without the `+/-` term.

use super::llama_bench::excerpt;
use super::output_error;
use crate::BenchError;
use serde::{Deserialize, Serialize};

/// A perplexity run's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PerplexityEstimate {
    pub ppl: f64,
    /// llama-perplexity's `+/-` (standard error of the estimate), when printed.
    pub plus_minus: Option<f64>,
    /// The running estimate after each chunk, in order.
    pub chunks: Vec<f64>,
    /// Tokens evaluated per second, from `llama_perf_context_print`'s
    /// `prompt eval time` line when present.
    pub tokens_per_s: Option<f64>,
}

const HINT: &str = "perplexity needs a text of at least 2 × ctx tokens; check its stderr";

/// Reads the final estimate (stdout and stderr may be passed concatenated).
pub fn parse_perplexity(engine: &str, text: &str) -> Result<PerplexityEstimate, BenchError> {
    let err = |reason: String| output_error(engine, reason, HINT);
    if text.trim().is_empty() {
        return Err(err("the output is empty".into()));
    }
    const KEY: &str = "Final estimate: PPL = ";
    let Some(pos) = text.rfind(KEY) else {
        return Err(err(format!(
            "no `{}` line (the run stopped early?); the output starts {}",
            KEY.trim_end(),
            excerpt(text.trim_start())
        )));
    };
    let rest = &text[pos + KEY.len()..];
    let line = rest.lines().next().unwrap_or("");
    let mut words = line.split_whitespace();
    let ppl = words
        .next()
        .and_then(|w| w.parse::<f64>().ok())
        .filter(|x| x.is_finite() && *x >= 1.0)
        .ok_or_else(|| err(format!("cannot read a perplexity ≥ 1 from `{line}`")))?;
    let plus_minus = match (words.next(), words.next()) {
        (Some("+/-"), Some(w)) => Some(
            w.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| err(format!("cannot read the `+/-` term of `{line}`")))?,
        ),
        _ => None,
    };
    Ok(PerplexityEstimate {
        ppl,
        plus_minus,
        chunks: running_values(&text[..pos]),
        tokens_per_s: prompt_eval_rate(text),
    })
}

/// Every `[i]value` in order (separated by commas or spaces).
fn running_values(text: &str) -> Vec<f64> {
    let mut out = Vec::new();
    for piece in text.split(['[', '\n']).skip(1) {
        let Some((idx, rest)) = piece.split_once(']') else {
            continue;
        };
        if idx.is_empty() || !idx.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let num: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '-' | '+'))
            .collect();
        if let Ok(v) = num.parse::<f64>() {
            out.push(v);
        }
    }
    out
}

/// `... prompt eval time = 1234.56 ms / 1024 tokens ( 1.21 ms per token, 829.44 tokens per second)`.
fn prompt_eval_rate(text: &str) -> Option<f64> {
    let line = text
        .lines()
        .rev()
        .find(|l| l.contains("prompt eval time"))?;
    let before = line.split("tokens per second").next()?;
    before
        .rsplit([',', '('])
        .next()?
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x > 0.0)
}
