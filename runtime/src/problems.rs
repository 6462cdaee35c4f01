//! The kernel problems a model runs: one GEMV per linear weight for decode
//! (m = 1) and one GEMM per weight and prefill row bucket, keyed as the
//! selector table keys them. A layer's weights that read the same
//! activations (q, k and v; gate and up) are one weight where their element
//! types agree ([`STACKS`]): stacked by rows, they are one kernel call.
//!
//! This is the list the tuner sweeps for `tiletune tune --model` and the
//! list the runtime looks up once at load: both come from here, so what is
//! tuned is exactly what is run.

use crate::gguf::{GgmlType, GgufFile};
use crate::{LoadError, Result};
use std::collections::HashSet;
use std::ops::Range;
use tiletune_tables::Problem;

/// Prefill row buckets: a prompt of length `m` uses the plan of the smallest
/// bucket ≥ `m` (the largest for longer prompts).
pub const PREFILL_BUCKETS: [usize; 3] = [16, 64, 256];

/// Groups of a layer's weights (GGUF names after `blk.N.`) that read the
/// same activations, in the order their rows are stacked. Decode reads
/// each weight once per token, and a small one is mostly the start of a
/// stream: SmolLM2's k and v (192 × 576 Q4_1) decode at 19 GB/s alone, its
/// q, k and v stacked at 28 (docs/PERF.md, "One call for q, k and v").
pub const STACKS: [&[&str]; 2] = [&["attn_q", "attn_k", "attn_v"], &["ffn_gate", "ffn_up"]];

/// One linear layer's weight as the kernels see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinearWeight {
    /// The tensors stacked by rows into this matrix ([`STACKS`]; most
    /// weights are one tensor).
    pub tensors: Vec<String>,
    /// The weight's element type (keyed in problems as `f32`, `q4_0`,
    /// `q6_k`, ...).
    pub dtype: GgmlType,
    /// Output features (rows of W; of all its tensors).
    pub n: usize,
    /// Input features (columns of W).
    pub k: usize,
}

impl LinearWeight {
    /// True for the LM head (`output.weight`, or the token embedding tied
    /// to it). Prefill runs it on the prompt's last row only, a GEMV;
    /// perplexity runs it on every row.
    pub fn is_lm_head(&self) -> bool {
        matches!(
            self.tensors.as_slice(),
            [t] if t == "output.weight" || t == "token_embd.weight"
        )
    }
}

/// Every weight the model multiplies activations by: all 2-D tensors but the
/// token embedding, which is a lookup; when the model has no `output.weight`
/// the embedding doubles as the (tied) LM head and is listed as such. The
/// tensors of a stack ([`stack_runs`]) are listed as one weight, where the
/// first of them is in the file.
pub fn linear_weights(g: &GgufFile) -> Result<Vec<LinearWeight>> {
    let has_output = g.tensor_info("output.weight").is_some();
    let mut out = Vec::new();
    let mut listed: HashSet<&str> = HashSet::new();
    for t in g.tensors() {
        if t.dims.len() != 2 || listed.contains(t.name.as_str()) {
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
        let names = stack_of(&t.name).unwrap_or_else(|| vec![t.name.clone()]);
        for run in stack_runs(g, &names) {
            let infos: Vec<_> = names[run]
                .iter()
                .filter_map(|n| g.tensor_info(n))
                .filter(|t| t.dims.len() == 2)
                .collect();
            if infos.is_empty() {
                continue;
            }
            // GGUF lists dims innermost first: ne0 = k (contiguous), ne1 = n.
            let mut n = 0usize;
            for i in &infos {
                listed.insert(i.name.as_str());
                n = n
                    .checked_add(to_usize(g, &i.name, i.dims[1])?)
                    .ok_or_else(|| bad_dim(g, &i.name, i.dims[1]))?;
            }
            out.push(LinearWeight {
                tensors: infos.iter().map(|i| i.name.clone()).collect(),
                dtype: infos[0].ggml_type,
                n,
                k: to_usize(g, &infos[0].name, infos[0].dims[0])?,
            });
        }
    }
    Ok(out)
}

/// The bytes of weights one decoded token reads, as the file stores them:
/// every linear weight ([`linear_weights`], the LM head included) and the
/// language model's 1-D tensors (norms, biases). A token embedding that is
/// not the tied LM head is a lookup of one row and is not counted, nor is a
/// vision tower. Decode's weight bandwidth (issue #23 item 3) is this times
/// tokens per second; the file's size overstates it by the embedding's
/// bytes (docs/PERF.md, "Decode bytes per token, corrected").
pub fn decode_weight_bytes(g: &GgufFile) -> Result<u64> {
    let mut bytes: u64 = 0;
    for w in linear_weights(g)? {
        for t in &w.tensors {
            bytes += g.tensor_info(t).map_or(0, |i| i.size);
        }
    }
    for t in g.tensors() {
        if t.dims.len() == 1 && !is_vision_tensor(&t.name) {
            bytes += t.size;
        }
    }
    Ok(bytes)
}

/// The stack tensor `name` is in ([`STACKS`]), all its tensors' names in
/// stacking order; `None` for a tensor in none.
fn stack_of(name: &str) -> Option<Vec<String>> {
    let rest = name.strip_prefix("blk.")?;
    let (layer, base) = rest.split_once('.')?;
    let base = base.strip_suffix(".weight")?;
    let layer: usize = layer.parse().ok()?;
    let stack = STACKS.iter().find(|s| s.contains(&base))?;
    Some(
        stack
            .iter()
            .map(|b| format!("blk.{layer}.{b}.weight"))
            .collect(),
    )
}

/// How the tensors `names` (a stack, in order) are run: each range is one
/// matrix, the longest runs of consecutive 2-D tensors with one element
/// type and row length. A name the file lacks is a run of its own (the
/// loader then says it is missing). The loader and the problem list both
/// cut stacks here, so what is tuned is what runs.
pub fn stack_runs(g: &GgufFile, names: &[String]) -> Vec<Range<usize>> {
    let key = |n: &String| {
        g.tensor_info(n)
            .filter(|t| t.dims.len() == 2)
            .map(|t| (t.ggml_type, t.dims[0]))
    };
    let mut runs: Vec<Range<usize>> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        match runs.last_mut() {
            Some(r) if key(name).is_some() && key(name) == key(&names[r.start]) => r.end = i + 1,
            _ => runs.push(i..i + 1),
        }
    }
    runs
}

fn bad_dim(g: &GgufFile, tensor: &str, d: u64) -> LoadError {
    LoadError::BadTensor {
        path: g.path().to_path_buf(),
        tensor: tensor.to_string(),
        what: format!("dimension {d} does not fit this machine's address space"),
    }
}

fn to_usize(g: &GgufFile, tensor: &str, d: u64) -> Result<usize> {
    usize::try_from(d).map_err(|_| bad_dim(g, tensor, d))
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

/// How many of the model's matrices one forward pass runs with problem
/// `p`'s kernel, on the rows `p` is keyed by: a decode GEMV runs on every
/// weight of its dtype and shape; a prefill GEMM on every such weight but
/// the LM head ([`LinearWeight::is_lm_head`]), whose prompt rows only
/// perplexity multiplies. Zero for a problem no language-model weight runs
/// (a vision tower's).
pub fn matrices(weights: &[LinearWeight], p: &Problem) -> usize {
    let shape = |w: &LinearWeight| {
        w.dtype.key() == p.dtype() && Some(w.n) == p.dim("n") && Some(w.k) == p.dim("k")
    };
    match p.op() {
        "gemv" => weights.iter().filter(|w| shape(w)).count(),
        "gemm" => weights
            .iter()
            .filter(|w| shape(w) && !w.is_lm_head())
            .count(),
        _ => 0,
    }
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
        model_with(tied, false)
    }

    /// One layer; `v16` stores v as f16, the others f32.
    fn model_with(tied: bool, v16: bool) -> GgufFile {
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
        if v16 {
            w.tensor("blk.0.attn_v.weight", &[8, 4], GgmlType::F16, vec![0; 64])
                .unwrap();
        } else {
            w.tensor_f32("blk.0.attn_v.weight", &[8, 4], &z(32))
                .unwrap();
        }
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
        let names: Vec<Vec<String>> = linear_weights(&g)
            .unwrap()
            .into_iter()
            .map(|w| w.tensors)
            .collect();
        assert_eq!(
            names,
            [
                vec![
                    "blk.0.attn_q.weight",
                    "blk.0.attn_k.weight",
                    "blk.0.attn_v.weight"
                ],
                vec!["blk.0.ffn_down.weight"],
                vec!["output.weight"]
            ]
        );
        let w = linear_weights(&g).unwrap();
        assert_eq!((w[0].n, w[0].k, w[0].dtype), (16, 8, GgmlType::F32));
        assert_eq!((w[1].n, w[1].k, w[1].dtype), (8, 16, GgmlType::F32));
    }

    /// Decode reads every matrix and norm; the embedding only when it is
    /// the tied LM head (a lookup reads one row).
    #[test]
    fn decode_weight_bytes_count_the_embedding_only_as_the_tied_lm_head() {
        // f32: q 64, k 32, v 32, ffn_down 128 and the norm 8 values; the
        // embedding and the LM head 256 each.
        let matrices_and_norm = 4 * (64 + 32 + 32 + 128 + 8);
        assert_eq!(
            decode_weight_bytes(&model(false)).unwrap(),
            matrices_and_norm + 4 * 256
        );
        assert_eq!(
            decode_weight_bytes(&model(true)).unwrap(),
            matrices_and_norm + 4 * 256
        );
        let g = model(false);
        let file: u64 = g.tensors().iter().map(|t| t.size).sum();
        assert_eq!(file, matrices_and_norm + 2 * 4 * 256);
    }

    #[test]
    fn a_type_change_cuts_a_stack() {
        let g = model_with(false, true);
        let w = linear_weights(&g).unwrap();
        let qkv: Vec<_> = w
            .iter()
            .filter(|w| w.tensors[0].contains("attn"))
            .map(|w| (w.tensors.len(), w.n, w.dtype))
            .collect();
        assert_eq!(qkv, [(2, 12, GgmlType::F32), (1, 4, GgmlType::F16)]);
        let names: Vec<String> = ["attn_q", "attn_k", "attn_v", "attn_gone"]
            .iter()
            .map(|t| format!("blk.0.{t}.weight"))
            .collect();
        // A tensor the file lacks is a run of its own.
        assert_eq!(stack_runs(&g, &names), [0..2, 2..3, 3..4]);
        assert_eq!(stack_of("blk.0.attn_output.weight"), None);
        assert_eq!(stack_of("blk.x.attn_q.weight"), None);
        assert_eq!(
            stack_of("blk.3.ffn_up.weight").unwrap(),
            ["blk.3.ffn_gate.weight", "blk.3.ffn_up.weight"]
        );
    }

    #[test]
    fn tied_embedding_is_the_lm_head() {
        let w = linear_weights(&model(true)).unwrap();
        let head = w
            .iter()
            .find(|w| w.tensors == ["token_embd.weight"])
            .unwrap();
        assert_eq!((head.n, head.k), (32, 8));
    }

    #[test]
    fn problems_are_one_per_weight_shape() {
        let p = kernel_problems(&model(false)).unwrap();
        // q, k and v stacked, down and the head: 3 gemv shapes, each in
        // 3 buckets.
        assert_eq!(p.iter().filter(|p| p.op() == "gemv").count(), 3);
        assert_eq!(p.len(), 3 * (1 + PREFILL_BUCKETS.len()));
        assert!(p.contains(&Problem::new("gemv", "f32", [("n", 16), ("k", 8)]).unwrap()));
    }

    #[test]
    fn prefill_never_runs_the_heads_gemms() {
        for tied in [false, true] {
            let g = model(tied);
            let w = linear_weights(&g).unwrap();
            let head = w.iter().find(|w| w.is_lm_head()).unwrap();
            assert_eq!(w.iter().filter(|w| w.is_lm_head()).count(), 1);
            let gemv = Problem::new("gemv", "f32", [("n", head.n), ("k", head.k)]).unwrap();
            assert_eq!(matrices(&w, &gemv), 1, "tied {tied}");
            for m in PREFILL_BUCKETS {
                let gemm =
                    Problem::new("gemm", "f32", [("m", m), ("n", head.n), ("k", head.k)]).unwrap();
                assert_eq!(matrices(&w, &gemm), 0, "tied {tied}, m {m}");
            }
        }
        // Every layer's weight of one shape counts; another dtype does not.
        let mut w = linear_weights(&model(false)).unwrap();
        let down = w[1].clone();
        w.push(LinearWeight {
            tensors: vec!["blk.1.ffn_down.weight".into()],
            ..down.clone()
        });
        w.push(LinearWeight {
            tensors: vec!["blk.2.ffn_down.weight".into()],
            dtype: GgmlType::F16,
            ..down
        });
        let gemm = Problem::new("gemm", "f32", [("m", 16), ("n", 8), ("k", 16)]).unwrap();
        assert_eq!(matrices(&w, &gemm), 2);
        let other = Problem::new("gemm", "f32", [("m", 16), ("n", 9), ("k", 16)]).unwrap();
        assert_eq!(matrices(&w, &other), 0);
    }

    #[test]
    fn buckets_round_up() {
        assert_eq!(prefill_bucket(1), 16);
        assert_eq!(prefill_bucket(17), 64);
        assert_eq!(prefill_bucket(10_000), 256);
    }
}
