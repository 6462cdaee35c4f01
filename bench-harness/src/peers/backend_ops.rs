//! llama.cpp `test-backend-ops perf` results, from its console output or
//! from `--output sql` (the machine format: one `INSERT INTO
//! test_backend_ops (...) VALUES (...)` per test, fields as
//! `test_result::get_fields()` in `tests/test-backend-ops.cpp`), and the
//! MUL_MAT shape (`type_a`, `type_b`, `m`, `n`, `k`, `bs`, `nr`) read from a
//! test's parameter string.
//!
//! In ggml's MUL_MAT, `a` is the weight (`k × m`, of `type_a`) and `b` the
//! activations (`k × n`): `m` is tiletune's output rows N, `n` its tokens M.

use super::llama_bench::excerpt;
use super::output_error;
use crate::BenchError;
use serde::{Deserialize, Serialize};

/// One `perf` result of one op.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpPerf {
    /// The backend (`CPU`), from the `Backend i/n: NAME` header or the SQL row.
    pub backend: Option<String>,
    /// e.g. `MUL_MAT`.
    pub op: String,
    /// The test's parameter string, e.g. `type_a=q4_0,type_b=f32,m=4096,...`.
    pub params: String,
    pub supported: bool,
    pub runs: u64,
    pub us_per_run: f64,
    /// FLOP per second, for ops that count FLOPs (MUL_MAT does).
    pub flops_per_s: Option<f64>,
    /// Bytes the op touches per run (sources + destination), SQL format only.
    pub memory_bytes: Option<u64>,
    pub build_commit: Option<String>,
}

impl OpPerf {
    /// The MUL_MAT shape, if this is a MUL_MAT test.
    pub fn mul_mat(&self) -> Option<MulMatShape> {
        (self.op == "MUL_MAT")
            .then(|| MulMatShape::parse(&self.params))
            .flatten()
    }
}

/// The shape of a MUL_MAT test: `dst (m × n) = a (k × m, type_a)ᵀ · b (k × n, type_b)`,
/// batched `bs[0]·nr[0] × bs[1]·nr[1]` times.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MulMatShape {
    pub type_a: String,
    pub type_b: String,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub bs: [u64; 2],
    pub nr: [u64; 2],
    /// True when a permutation, a strided view or overlapping sources make
    /// the layout differ from two plain row-major matrices.
    pub unusual_layout: bool,
}

impl MulMatShape {
    /// Reads `type_a=..,type_b=..,m=..,n=..,k=..,bs=[..],nr=[..],...`.
    pub fn parse(params: &str) -> Option<MulMatShape> {
        let mut kv: Vec<(&str, &str)> = Vec::new();
        // Split on commas outside brackets: `bs=[1,1]` is one value.
        let (mut depth, mut start) = (0i32, 0usize);
        for (i, c) in params.char_indices() {
            match c {
                '[' => depth += 1,
                ']' => depth -= 1,
                ',' if depth == 0 => {
                    kv.push(params[start..i].split_once('=')?);
                    start = i + 1;
                }
                _ => {}
            }
        }
        if start < params.len() {
            kv.push(params[start..].split_once('=')?);
        }
        let get = |k: &str| kv.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
        let num = |k: &str| get(k)?.parse::<u64>().ok();
        let pair = |k: &str| -> Option<[u64; 2]> {
            match get(k) {
                None => Some([1, 1]),
                Some(v) => {
                    let mut it = v
                        .strip_prefix('[')?
                        .strip_suffix(']')?
                        .split(',')
                        .map(|x| x.trim().parse::<u64>().ok());
                    let p = [it.next()??, it.next()??];
                    it.next().is_none().then_some(p)
                }
            }
        };
        let is = |k: &str, v: &str| get(k).is_none_or(|x| x == v);
        Some(MulMatShape {
            type_a: get("type_a")?.to_string(),
            type_b: get("type_b")?.to_string(),
            m: num("m")?,
            n: num("n")?,
            k: num("k")?,
            bs: pair("bs")?,
            nr: pair("nr")?,
            unusual_layout: !(is("per", "[0,1,2,3]")
                && is("k_v", "0")
                && is("m_v", "0")
                && is("src_overlap", "0")),
        })
    }

    /// True for one plain matrix product (no batch, no repeat, plain layout).
    pub fn is_single(&self) -> bool {
        self.bs == [1, 1] && self.nr == [1, 1] && !self.unusual_layout
    }

    /// `2·m·n·k` per product times the batch, as test-backend-ops counts it.
    pub fn flops(&self) -> f64 {
        2.0 * (self.m * self.n * self.k) as f64
            * (self.bs[0] * self.nr[0] * self.bs[1] * self.nr[1]) as f64
    }
}

const HINT: &str =
    "run `test-backend-ops perf -o MUL_MAT -b CPU` (add `--output sql` for the machine format)";

/// Parses either format: SQL when any line starts with `INSERT INTO
/// test_backend_ops`, else the console format. Errors when no perf result
/// is found.
pub fn parse_backend_ops(engine: &str, text: &str) -> Result<Vec<OpPerf>, BenchError> {
    let err = |reason: String| output_error(engine, reason, HINT);
    if text.trim().is_empty() {
        return Err(err("the output is empty".into()));
    }
    if text.trim_start().starts_with("\"backend_name\"") {
        return Err(err(
            "this is the csv format, which has no timings; use `--output sql` or the console format"
                .into(),
        ));
    }
    let sql = text
        .lines()
        .any(|l| l.trim_start().starts_with("INSERT INTO test_backend_ops"));
    let out = if sql {
        parse_sql(text).map_err(err)?
    } else {
        parse_console(text).map_err(err)?
    };
    if out.is_empty() {
        return Err(err(format!(
            "no perf results found (does the filter match any test? the output starts {})",
            excerpt(text.trim_start())
        )));
    }
    Ok(out)
}

/// Removes ANSI colour sequences (`ESC [ ... m`).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\u{1b}' && it.peek() == Some(&'[') {
            for d in it.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn parse_console(text: &str) -> Result<Vec<OpPerf>, String> {
    let mut backend = None;
    let mut out = Vec::new();
    for (no, raw) in text.lines().enumerate() {
        let line = strip_ansi(raw);
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("Backend ") {
            // `Backend 1/1: CPU`
            if let Some((_, name)) = rest.split_once(": ") {
                backend = Some(name.trim().to_string());
            }
            continue;
        }
        let Some((head, tail)) = l.split_once("): ") else {
            continue;
        };
        let Some((op, params)) = head.split_once('(') else {
            continue;
        };
        if op.is_empty() || !op.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let tail = tail.trim();
        let base = |supported, runs, us, flops| OpPerf {
            backend: backend.clone(),
            op: op.to_string(),
            params: params.to_string(),
            supported,
            runs,
            us_per_run: us,
            flops_per_s: flops,
            memory_bytes: None,
            build_commit: None,
        };
        if tail.starts_with("not supported") {
            out.push(base(false, 0, 0.0, None));
            continue;
        }
        if !tail.contains("runs -") {
            continue; // a `test`-mode line (OK/FAIL) or other noise
        }
        // `N runs - T us/run - X GFLOP/run - Y TFLOPS` or `... - K kB/run - Z GB/s`
        let parts: Vec<&str> = tail.split(" - ").map(str::trim).collect();
        let bad = |what: &str| format!("line {}: {what}: `{l}`", no + 1);
        let runs = parts
            .first()
            .and_then(|p| p.strip_suffix("runs"))
            .and_then(|p| p.trim().parse::<u64>().ok())
            .ok_or_else(|| bad("cannot read the run count"))?;
        let us = parts
            .get(1)
            .and_then(|p| p.strip_suffix("us/run"))
            .and_then(|p| p.trim().parse::<f64>().ok())
            .filter(|x| x.is_finite() && *x > 0.0)
            .ok_or_else(|| bad("cannot read us/run"))?;
        let flops = match parts.get(3) {
            Some(p) if p.ends_with("FLOPS") => Some(
                scaled_flops(p.trim_end_matches('S'))
                    .ok_or_else(|| bad("cannot read the FLOP rate"))?,
            ),
            _ => None,
        };
        out.push(base(true, runs, us, flops));
    }
    Ok(out)
}

/// `9.52 TFLOP` → 9.52e12.
fn scaled_flops(s: &str) -> Option<f64> {
    let (num, unit) = s.trim().split_once(' ')?;
    let mult = match unit.trim() {
        "TFLOP" => 1e12,
        "GFLOP" => 1e9,
        "MFLOP" => 1e6,
        "kFLOP" => 1e3,
        _ => return None,
    };
    num.trim()
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite())
        .map(|x| x * mult)
}

/// The quoted values of `VALUES ('a', 'b', ...)`; the printer does not
/// escape quotes and no field holds one.
fn sql_values(s: &str) -> Option<Vec<&str>> {
    let body = s.split_once("VALUES (")?.1;
    let mut vals = Vec::new();
    let mut rest = body.trim_start();
    loop {
        let r = rest.strip_prefix('\'')?;
        let end = r.find('\'')?;
        vals.push(&r[..end]);
        rest = r[end + 1..].trim_start();
        if let Some(r) = rest.strip_prefix(',') {
            rest = r.trim_start();
        } else if rest.starts_with(')') {
            return Some(vals);
        } else {
            return None;
        }
    }
}

fn parse_sql(text: &str) -> Result<Vec<OpPerf>, String> {
    let mut out = Vec::new();
    for (no, line) in text.lines().enumerate() {
        let l = line.trim();
        if !l.starts_with("INSERT INTO test_backend_ops") {
            continue;
        }
        let bad = |what: &str| format!("line {}: {what}", no + 1);
        let fields: Vec<&str> = l
            .split_once('(')
            .and_then(|(_, r)| r.split_once(')'))
            .map(|(f, _)| f.split(',').map(str::trim).collect())
            .ok_or_else(|| bad("no field list"))?;
        let values = sql_values(l).ok_or_else(|| bad("truncated or malformed VALUES list"))?;
        if values.len() != fields.len() {
            return Err(bad(&format!(
                "{} fields but {} values",
                fields.len(),
                values.len()
            )));
        }
        let get = |k: &str| {
            fields
                .iter()
                .position(|f| *f == k)
                .map(|i| values[i])
                .ok_or_else(|| bad(&format!("field `{k}` is missing")))
        };
        let num = |k: &str| -> Result<f64, String> {
            get(k)?
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| bad(&format!("field `{k}` is not a number")))
        };
        if get("test_mode")? != "perf" {
            continue;
        }
        let supported = get("supported")? == "1";
        let flops = num("flops")?;
        let us = num("time_us")?;
        if supported && us <= 0.0 {
            return Err(bad("time_us is not positive"));
        }
        out.push(OpPerf {
            backend: Some(get("backend_name")?.to_string()),
            op: get("op_name")?.to_string(),
            params: get("op_params")?.to_string(),
            supported,
            runs: num("n_runs")? as u64,
            us_per_run: us,
            flops_per_s: (flops > 0.0).then_some(flops),
            memory_bytes: Some(num("memory_kb")? as u64 * 1024),
            build_commit: Some(get("build_commit")?.to_string()),
        });
    }
    Ok(out)
}
