//! Where tuning problems come from: built-in suites of common small-LLM
//! shapes, or a single problem given on the command line.
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

/// Parses `--op OP --dtype DT --shape AxB[xC]` into a problem, naming the
/// dims in the op's canonical order.
pub fn parse_problem(op: &str, dtype: &str, shape: &str) -> Result<Problem, TunerError> {
    let names = dim_names(op).ok_or_else(|| TunerError::UnknownOp {
        op: op.to_string(),
        known: "gemv and gemm".into(),
    })?;
    let dims = parse_dims(op, names, shape)?;
    problem(op, dtype, &dims)
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

/// The canonical dimension names of each tunable op, in `--shape` order.
pub fn dim_names(op: &str) -> Option<&'static [&'static str]> {
    Some(match op {
        "gemv" => &["n", "k"],
        "gemm" => &["m", "n", "k"],
        _ => return None,
    })
}

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
    fn shapes_too_large_to_allocate_are_refused() {
        for shape in ["18446744073709551615x2", "99999999x99999999", "65536x65537"] {
            let e = parse_problem("gemv", "f32", shape).unwrap_err();
            assert!(matches!(e, TunerError::TooLarge { .. }), "{shape}: {e}");
        }
        let e = parse_problem("gemm", "f32", "100000x100000x100000").unwrap_err();
        assert!(e.to_string().contains("too large for gemm"), "{e}");
        // The largest real shapes still parse: a 7B LM head, its prefill.
        assert!(parse_problem("gemv", "q8_0", "152064x3584").is_ok());
        assert!(parse_problem("gemm", "q8_0", "256x152064x3584").is_ok());
    }

    #[test]
    fn parse_names_dims_in_order() {
        let p = parse_problem("gemv", "q4_0", "4864x896").unwrap();
        assert_eq!(p.dim("n"), Some(4864));
        assert_eq!(p.dim("k"), Some(896));
        assert_eq!(p.to_string(), "gemv/q4_0/n=4864,k=896");
        let g = parse_problem("gemm", "f32", "16x896x896").unwrap();
        assert_eq!(g.dim("m"), Some(16));
    }

    #[test]
    fn parse_rejects_bad_input() {
        assert!(matches!(
            parse_problem("conv", "f32", "1x2"),
            Err(TunerError::UnknownOp { .. })
        ));
        for bad in ["4864", "4864x", "ax896", "0x896", "1x2x3"] {
            assert!(parse_problem("gemv", "f32", bad).is_err(), "{bad}");
        }
    }

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
