//! The vision tower of a Hugging Face Qwen2.5-VL folder into the GGUF image,
//! with the keys and tensor names llama.cpp's converter gives its `mmproj`
//! file (`Qwen2VLVisionModel`): `clip.*` metadata, the fused `qkv` split into
//! `attn_q`/`attn_k`/`attn_v`, the Conv3d patch embedding split into its two
//! frames (`v.patch_embd.weight`, `.weight.1`), the merger as `v.post_ln`,
//! `mm.0`, `mm.2`. The one image then loads as both halves of llama.cpp's
//! two-file form would ([`crate::vision::VisionModel`]).

use super::{Pending, f32_bytes, spec};
use crate::error::{LoadError, Result};
use crate::gguf::GgmlType;
use crate::gguf::write::GgufWriter;
use crate::safetensors::HfModelDir;
use crate::vision::{PROJECTOR_QWEN25VL, keys};
use serde_json::Value;
use std::path::Path;

/// A tower tensor's values from its checkpoint tensor's shape and values.
type Part = Box<dyn Fn(&[usize], Vec<f32>) -> Vec<f32> + Send + Sync>;

/// The preprocessing keys from `preprocessor_config.json` or
/// `processor_config.json` (transformers 5 nests them under
/// `image_processor`): mean, std, min and max pixels.
fn processor(dir: &Path) -> Result<([f32; 3], [f32; 3], u64, u64)> {
    let mut mean = [0.481_454_66, 0.457_827_5, 0.408_210_73];
    let mut std = [0.268_629_54, 0.261_302_6, 0.275_777_1];
    let (mut min_px, mut max_px) = (56 * 56, 28 * 28 * 1280);
    for name in ["preprocessor_config.json", "processor_config.json"] {
        let p = dir.join(name);
        if !p.is_file() {
            continue;
        }
        let text = crate::input::read_text(&p, crate::input::JSON_LIMIT)?;
        let v: Value =
            serde_json::from_str(&text).map_err(|source| LoadError::Json { path: p, source })?;
        let v = v.get("image_processor").cloned().unwrap_or(v);
        let three = |k: &str| -> Option<[f32; 3]> {
            let a = v.get(k)?.as_array()?;
            (a.len() == 3).then(|| [0, 1, 2].map(|i| a[i].as_f64().unwrap_or(0.0) as f32))
        };
        mean = three("image_mean").unwrap_or(mean);
        std = three("image_std").unwrap_or(std);
        let size = v.get("size");
        let num = |k: &str, sk: &str| {
            v.get(k)
                .and_then(Value::as_u64)
                .or_else(|| size?.get(sk)?.as_u64())
        };
        min_px = num("min_pixels", "shortest_edge").unwrap_or(min_px);
        max_px = num("max_pixels", "longest_edge").unwrap_or(max_px);
    }
    Ok((mean, std, min_px, max_px))
}

/// Adds the tower of the folder `dir` (whose `config.json` has a
/// `vision_config`) to an image: its keys to `w`, its tensors to `tensors`.
pub(super) fn plan(
    dir: &Path,
    hf: &HfModelDir,
    w: &mut GgufWriter,
    tensors: &mut Vec<Pending>,
) -> Result<()> {
    let text = crate::input::read_text(&dir.join("config.json"), crate::input::JSON_LIMIT)?;
    let cfg: Value =
        serde_json::from_str(&text).map_err(|e| LoadError::Config(format!("config.json: {e}")))?;
    let vc = cfg.get("vision_config").ok_or_else(|| {
        LoadError::Config(
            "config.json has no vision_config; this is not a Qwen2.5-VL checkpoint".into(),
        )
    })?;
    let need = |k: &str| -> Result<u64> {
        vc.get(k)
            .and_then(Value::as_u64)
            .ok_or_else(|| LoadError::Config(format!("config.json: vision_config.{k} is missing")))
    };
    let (e, depth) = (need("hidden_size")?, need("depth")?);
    let full: Vec<u64> = vc
        .get("fullatt_block_indexes")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    // llama.cpp states the full-attention blocks as a period.
    let period = full.first().map_or(0, |f| f + 1);
    if full
        .iter()
        .enumerate()
        .any(|(i, &b)| b != period * (i as u64 + 1) - 1)
    {
        return Err(LoadError::Config(format!(
            "vision_config.fullatt_block_indexes {full:?} are not every n-th block, which the GGUF form (clip.vision.n_wa_pattern) cannot state"
        )));
    }
    let (mean, std, min_px, max_px) = processor(dir)?;
    w.kv(keys::HAS_VISION, true)
        .kv(keys::PROJECTOR, PROJECTOR_QWEN25VL)
        .kv(keys::PROJECTION_DIM, need("out_hidden_size")? as u32)
        .kv(keys::IMAGE_SIZE, 560u32)
        .kv(keys::PATCH_SIZE, need("patch_size")? as u32)
        .kv(keys::EMBEDDING_LENGTH, e as u32)
        .kv(keys::FEED_FORWARD_LENGTH, need("intermediate_size")? as u32)
        .kv(keys::BLOCK_COUNT, depth as u32)
        .kv(keys::HEAD_COUNT, need("num_heads")? as u32)
        .kv(keys::EPS, 1e-6f32)
        .kv(keys::IMAGE_MEAN, mean.to_vec())
        .kv(keys::IMAGE_STD, std.to_vec())
        .kv(keys::N_WA_PATTERN, period as u32)
        .kv(keys::WINDOW_SIZE, need("window_size")? as u32)
        .kv(keys::MIN_PIXELS, min_px as u32)
        .kv(keys::MAX_PIXELS, max_px as u32)
        .kv(keys::USE_SILU, true);
    let shape_of =
        |name: &str| -> Result<Vec<usize>> { Ok(hf.weights.tensor(name)?.0.shape.clone()) };
    // Each tensor is f32, made from checkpoint tensor `from` by `f` (its
    // shape and values to this tensor's values).
    let mut put = |to: String, shape: Vec<usize>, from: String, f: Part| {
        tensors.push(Pending {
            spec: spec(&to, &shape, GgmlType::F32),
            make: Box::new(move |hf, out| {
                let (s, v) = hf.weights.tensor_f32(&from)?;
                out.put(&f32_bytes(&f(&s, v)))?;
                hf.weights.release(hf.weights.tensor(&from)?.1);
                Ok(())
            }),
        })
    };
    // The Conv3d (e, 3, 2, p, p) as two Conv2D frames (e, 3, p, p).
    let patch = "visual.patch_embed.proj.weight";
    let shape = shape_of(patch)?;
    if shape.len() != 5 || shape[2] != 2 {
        return Err(LoadError::Config(format!(
            "{patch} has shape {shape:?}; a temporal patch of 2 is expected"
        )));
    }
    for t in 0..2 {
        let name = if t == 0 {
            "v.patch_embd.weight"
        } else {
            "v.patch_embd.weight.1"
        };
        let frame: Part = Box::new(move |s, v| {
            let plane = s[3] * s[4];
            (0..s[0] * 3)
                .flat_map(|oc| v[(oc * 2 + t) * plane..][..plane].iter().copied())
                .collect()
        });
        put(
            name.into(),
            vec![shape[0], 3, shape[3], shape[4]],
            patch.into(),
            frame,
        );
    }
    for i in 0..depth {
        let hf = |s: &str| format!("visual.blocks.{i}.{s}");
        let gg = |s: &str| format!("v.blk.{i}.{s}");
        for suffix in ["weight", "bias"] {
            let qkv = hf(&format!("attn.qkv.{suffix}"));
            let mut s = shape_of(&qkv)?;
            if s.is_empty() || s[0] % 3 != 0 {
                return Err(LoadError::Config(format!(
                    "{qkv} has shape {s:?}; its first dimension is q, k and v stacked"
                )));
            }
            s[0] /= 3;
            for (j, part) in ["attn_q", "attn_k", "attn_v"].iter().enumerate() {
                let third: Part = Box::new(move |_, v| {
                    let n = v.len() / 3;
                    v[j * n..(j + 1) * n].to_vec()
                });
                put(
                    gg(&format!("{part}.{suffix}")),
                    s.clone(),
                    qkv.clone(),
                    third,
                );
            }
        }
        for (from, to) in [
            ("norm1.weight", "ln1.weight"),
            ("norm2.weight", "ln2.weight"),
            ("attn.proj.weight", "attn_out.weight"),
            ("attn.proj.bias", "attn_out.bias"),
            ("mlp.gate_proj.weight", "ffn_gate.weight"),
            ("mlp.gate_proj.bias", "ffn_gate.bias"),
            ("mlp.up_proj.weight", "ffn_up.weight"),
            ("mlp.up_proj.bias", "ffn_up.bias"),
            ("mlp.down_proj.weight", "ffn_down.weight"),
            ("mlp.down_proj.bias", "ffn_down.bias"),
        ] {
            put(gg(to), shape_of(&hf(from))?, hf(from), Box::new(|_, v| v));
        }
    }
    for (from, to) in [
        ("visual.merger.ln_q.weight", "v.post_ln.weight"),
        ("visual.merger.mlp.0.weight", "mm.0.weight"),
        ("visual.merger.mlp.0.bias", "mm.0.bias"),
        ("visual.merger.mlp.2.weight", "mm.2.weight"),
        ("visual.merger.mlp.2.bias", "mm.2.bias"),
    ] {
        put(to.into(), shape_of(from)?, from.into(), Box::new(|_, v| v));
    }
    Ok(())
}
