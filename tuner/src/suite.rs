//! Where tuning problems come from: built-in suites of common small-LLM
//! shapes (a single problem given on the command line is parsed by
//! [`crate::families::parse_tune_problem`], from its op's description), and
//! the one shape parser of `tune` and `bench` ([`parse_dims`]).
//!
//! A problem is `(op, dtype, dims)`, e.g. `(gemv, q4_0, n=4864,k=896)`. Dims
//! are named so that shapes of different ops never get confused and so the
//! nearest-shape fallback can compare them dimension by dimension.

use crate::TunerError;
use tiletune_tables::Problem;

/// A problem whose names are literals known to be valid keys.
fn problem(op: &str, dtype: &str, dims: &[(&str, usize)]) -> Result<Problem, TunerError> {
    Ok(Problem::new(op, dtype, dims.iter().copied())?)
}

/// Splits `AxB[xC]` (also `,`-separated) into positive sizes named by
/// `names`, in order: the one shape parser of `tune` and `bench`.
pub fn parse_dims<'n>(
    op: &str,
    names: &[&'n str],
    shape: &str,
) -> Result<Vec<(&'n str, usize)>, TunerError> {
    let bad = || TunerError::BadShape {
        op: op.to_string(),
        shape: shape.to_string(),
        expected: names.join("x"),
    };
    let vals: Vec<usize> = shape
        .split(['x', 'X', ','])
        .map(|s| s.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|_| bad())?;
    if vals.len() != names.len() || vals.contains(&0) {
        return Err(bad());
    }
    // Every operand of these ops spans at most two of the dims (a weight
    // n×k, activations m×k, an output m×n, a cache seq×dim): refuse a shape
    // before anything is allocated when one of them could not be.
    let mut largest = vals.iter().copied().max().unwrap_or(0);
    for (i, &a) in vals.iter().enumerate() {
        for &b in &vals[i + 1..] {
            largest = largest.max(a.saturating_mul(b));
        }
    }
    if largest > MAX_OPERAND_ELEMENTS {
        return Err(TunerError::TooLarge {
            op: op.to_string(),
            shape: shape.to_string(),
            elements: largest,
        });
    }
    Ok(names.iter().copied().zip(vals).collect())
}

/// The most elements one operand of a problem may hold: 2^31, 8 GiB as
/// f32, a third of this class of machine's memory.
pub const MAX_OPERAND_ELEMENTS: usize = 1 << 31;

/// Linear-layer shapes `(n, k)` of small LLMs the suites cover, with where
/// they come from. Each model contributes q, k/v, o, gate/up and down.
fn llm_linear_shapes() -> Vec<(usize, usize)> {
    let mut v = vec![
        // SmolLM2-135M: hidden 576, 9 heads / 3 kv heads × 64, ffn 1536.
        (576, 576),
        (192, 576),
        (1536, 576),
        (576, 1536),
        // Qwen2.5-0.5B: hidden 896, 14 heads / 2 kv heads × 64, ffn 4864.
        (896, 896),
        (128, 896),
        (4864, 896),
        (896, 4864),
        // Qwen3-0.6B: hidden 1024, 16 heads / 8 kv heads × 128, ffn 3072.
        (2048, 1024),
        (1024, 1024),
        (1024, 2048),
        (3072, 1024),
        (1024, 3072),
    ];
    v.sort_unstable();
    v.dedup();
    v
}

/// Prefill row-count buckets: the runtime rounds a prompt's length to one of
/// these when it looks up a GEMM plan.
pub const PREFILL_M_BUCKETS: [usize; 3] = [16, 64, 256];

/// A built-in suite by name.
pub fn suite(name: &str, dtypes: &[&str]) -> Result<Vec<Problem>, TunerError> {
    let shapes = llm_linear_shapes();
    let mut out = Vec::new();
    match name {
        "llm-decode" => {
            for dt in dtypes {
                for &(n, k) in &shapes {
                    out.push(problem("gemv", dt, &[("n", n), ("k", k)])?);
                }
            }
        }
        "llm-prefill" => {
            for dt in dtypes {
                for &m in &PREFILL_M_BUCKETS {
                    for &(n, k) in &shapes {
                        out.push(problem("gemm", dt, &[("m", m), ("n", n), ("k", k)])?);
                    }
                }
            }
        }
        other => {
            return Err(TunerError::UnknownSuite(other.to_string()));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suites_cover_models_and_reject_unknown() {
        let d = suite("llm-decode", &["f32"]).unwrap();
        assert!(d.contains(&problem("gemv", "f32", &[("n", 4864), ("k", 896)]).unwrap()));
        let p = suite("llm-prefill", &["f32"]).unwrap();
        assert_eq!(p.len(), d.len() * PREFILL_M_BUCKETS.len());
        assert!(suite("llm-everything", &["f32"]).is_err());
        assert!(suite("llm-decode", &["f/32"]).is_err());
    }
}
