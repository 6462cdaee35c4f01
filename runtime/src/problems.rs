//! The kernel problems a model runs: one GEMV per linear weight for decode
//! (m = 1) and one GEMM per weight and prefill row bucket, keyed as the
//! selector table keys them.
//!
//! This is the list the tuner sweeps for `tiletune tune --model` and the
//! list the runtime looks up once at load: both come from here, so what is
//! tuned is exactly what is run.

use crate::gguf::{GgmlType, GgufFile};
use crate::{LoadError, Result};
use tiletune_tables::Problem;

/// Prefill row buckets: a prompt of length `m` uses the plan of the smallest
/// bucket ≥ `m` (the largest for longer prompts).
pub const PREFILL_BUCKETS: [usize; 3] = [16, 64, 256];

/// One linear layer's weight as the kernels see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinearWeight {
    pub tensor: String,
    /// The weight's element type (keyed in problems as `f32`, `q4_0`,
    /// `q6_k`, ...).
    pub dtype: GgmlType,
    /// Output features (rows of W).
    pub n: usize,
    /// Input features (columns of W).
    pub k: usize,
}

/// Every weight the model multiplies activations by: all 2-D tensors but the
/// token embedding, which is a lookup; when the model has no `output.weight`
/// the embedding doubles as the (tied) LM head and is listed as such.
pub fn linear_weights(g: &GgufFile) -> Result<Vec<LinearWeight>> {
    let has_output = g.tensor_info("output.weight").is_some();
    let mut out = Vec::new();
    for t in g.tensors() {
        if t.dims.len() != 2 {
            continue;
        }
        if t.name == "token_embd.weight" && has_output {
            continue;
        }
        // A vision tower's tensors (a converted Qwen2.5-VL folder holds
        // them beside the language model's) are planned by
        // `vision::tower_problems`.
        if is_vision_tensor(&t.name) {
            continue;
        }
        // GGUF lists dims innermost first: ne0 = k (contiguous), ne1 = n.
        let to_usize = |d: u64| {
            usize::try_from(d).map_err(|_| LoadError::BadTensor {
                path: g.path().to_path_buf(),
                tensor: t.name.clone(),
                what: format!("dimension {d} does not fit this machine's address space"),
            })
        };
        out.push(LinearWeight {
            tensor: t.name.clone(),
            dtype: t.ggml_type,
            n: to_usize(t.dims[1])?,
            k: to_usize(t.dims[0])?,
        });
    }
    Ok(out)
}

/// The distinct kernel problems of a model: `gemv(n, k)` per weight shape and
/// dtype, and `gemm(m, n, k)` per prefill bucket.
pub fn kernel_problems(g: &GgufFile) -> Result<Vec<Problem>> {
    let weights = linear_weights(g)?;
    problems_for(&weights).map_err(|e| LoadError::BadTensor {
        path: g.path().to_path_buf(),
        tensor: String::new(),
        what: e.to_string(),
    })
}

/// As [`kernel_problems`], from a weight list.
pub fn problems_for(
    weights: &[LinearWeight],
) -> std::result::Result<Vec<Problem>, tiletune_tables::TableError> {
    let mut out: Vec<Problem> = Vec::new();
    let mut push = |p: Problem| {
        if !out.contains(&p) {
            out.push(p);
        }
    };
    for w in weights {
        push(Problem::new(
            "gemv",
            w.dtype.key(),
            [("n", w.n), ("k", w.k)],
        )?);
    }
    for &m in &PREFILL_BUCKETS {
        for w in weights {
            push(Problem::new(
                "gemm",
                w.dtype.key(),
                [("m", m), ("n", w.n), ("k", w.k)],
            )?);
        }
    }
    Ok(out)
}

/// True for a vision tower's tensor (llama.cpp's `mmproj` names).
pub fn is_vision_tensor(name: &str) -> bool {
    name.starts_with("v.") || name.starts_with("mm.")
}

/// The prefill bucket a prompt of `m` rows is planned with.
pub fn prefill_bucket(m: usize) -> usize {
    PREFILL_BUCKETS
        .iter()
        .copied()
        .find(|&b| b >= m)
        .unwrap_or(PREFILL_BUCKETS[PREFILL_BUCKETS.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::write::GgufWriter;

    fn model(tied: bool) -> GgufFile {
        let mut w = GgufWriter::new();
        w.kv("general.architecture", "llama");
        let z = |n: usize| vec![0.0f32; n];
        w.tensor_f32("token_embd.weight", &[8, 32], &z(256))
            .unwrap();
        w.tensor_f32("blk.0.attn_norm.weight", &[8], &z(8)).unwrap();
        w.tensor_f32("blk.0.attn_q.weight", &[8, 8], &z(64))
            .unwrap();
        w.tensor_f32("blk.0.attn_k.weight", &[8, 4], &z(32))
            .unwrap();
        w.tensor_f32("blk.0.attn_v.weight", &[8, 4], &z(32))
            .unwrap();
        w.tensor_f32("blk.0.ffn_down.weight", &[16, 8], &z(128))
            .unwrap();
        if !tied {
            w.tensor_f32("output.weight", &[8, 32], &z(256)).unwrap();
        }
        GgufFile::from_vec(w.to_bytes()).unwrap()
    }

    #[test]
    fn linear_weights_skip_norms_and_untied_embedding() {
        let g = model(false);
        let names: Vec<String> = linear_weights(&g)
            .unwrap()
            .into_iter()
            .map(|w| w.tensor)
            .collect();
        assert_eq!(
            names,
            [
                "blk.0.attn_q.weight",
                "blk.0.attn_k.weight",
                "blk.0.attn_v.weight",
                "blk.0.ffn_down.weight",
                "output.weight"
            ]
        );
        let down = &linear_weights(&g).unwrap()[3];
        assert_eq!((down.n, down.k, down.dtype), (8, 16, GgmlType::F32));
    }

    #[test]
    fn tied_embedding_is_the_lm_head() {
        let w = linear_weights(&model(true)).unwrap();
        let head = w.iter().find(|w| w.tensor == "token_embd.weight").unwrap();
        assert_eq!((head.n, head.k), (32, 8));
    }

    #[test]
    fn problems_are_deduplicated_per_shape() {
        let p = kernel_problems(&model(false)).unwrap();
        // k and v share a shape: 4 distinct gemv shapes, each in 3 buckets.
        assert_eq!(p.iter().filter(|p| p.op() == "gemv").count(), 4);
        assert_eq!(p.len(), 4 * (1 + PREFILL_BUCKETS.len()));
        assert!(p.contains(&Problem::new("gemv", "f32", [("n", 4), ("k", 8)]).unwrap()));
    }

    #[test]
    fn buckets_round_up() {
        assert_eq!(prefill_bucket(1), 16);
        assert_eq!(prefill_bucket(17), 64);
        assert_eq!(prefill_bucket(10_000), 256);
    }
}
