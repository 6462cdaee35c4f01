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

/// The result `tiletune --json ppl` prints as its last stdout line; `compare
/// ppl` reads it back from that child process. Fields in printed order.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PplScore {
    /// Chunks scored.
    pub chunks: usize,
    /// Tokens per chunk.
    pub ctx: usize,
    pub ppl: f64,
    /// Predictions scored (the second half of each chunk).
    pub scored: usize,
    /// Scoring time, loading excluded.
    pub seconds: f64,
}

/// [`PplScore`] as read: a missing `ppl` is refused by [`PplScore::from_output`]
/// with its own message, missing counts read as 0.
#[derive(Deserialize)]
struct PplWire {
    #[serde(default)]
    chunks: usize,
    #[serde(default)]
    ctx: usize,
    ppl: Option<f64>,
    #[serde(default)]
    scored: usize,
    #[serde(default)]
    seconds: f64,
}

impl PplScore {
    /// The last JSON line of `tiletune --json ppl`'s stdout (running values come before it).
    pub fn from_output(stdout: &str) -> Result<Self, BenchError> {
        let err = |reason: String| BenchError::PplResult { reason };
        let line = stdout
            .lines()
            .rev()
            .find(|l| l.trim_start().starts_with('{'))
            .ok_or_else(|| err("tiletune ppl printed no JSON result line".into()))?;
        let w: PplWire = serde_json::from_str(line)
            .map_err(|e| err(format!("tiletune ppl's result line is not JSON: {e}")))?;
        let ppl = w
            .ppl
            .filter(|x| x.is_finite())
            .ok_or_else(|| err("tiletune ppl's result has no finite `ppl`".into()))?;
        Ok(PplScore {
            chunks: w.chunks,
            ctx: w.ctx,
            ppl,
            scored: w.scored,
            seconds: w.seconds,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_ppl_reads_the_json_line_and_refuses_garbage() {
        let out = "[1]20.1 [2]19.5 \n{\"ppl\":19.5,\"chunks\":2,\"ctx\":128,\"scored\":126,\"seconds\":1.5}\n";
        let s = PplScore::from_output(out).unwrap();
        assert_eq!((s.ppl, s.chunks, s.seconds), (19.5, 2, 1.5));
        assert!(PplScore::from_output("").is_err());
        assert!(PplScore::from_output("{not json").is_err());
        let e = PplScore::from_output("{\"ppl\":null}").unwrap_err();
        assert_eq!(e.to_string(), "tiletune ppl's result has no finite `ppl`");
    }

    #[test]
    fn own_ppl_is_printed_as_it_is_read() {
        let s = PplScore {
            chunks: 2,
            ctx: 128,
            ppl: 19.5,
            scored: 126,
            seconds: 1.5,
        };
        let line = serde_json::to_string(&s).unwrap();
        assert_eq!(
            line,
            "{\"chunks\":2,\"ctx\":128,\"ppl\":19.5,\"scored\":126,\"seconds\":1.5}"
        );
        assert_eq!(PplScore::from_output(&line).unwrap(), s);
    }
}
