//! Helpers shared by the runtime's integration tests that build small random
//! GGUF models: the metadata header `ModelConfig::from_gguf` reads back, and
//! the relative error the tests bound.

#![allow(dead_code)] // each test file uses a subset

use tiletune_runtime::config::ModelConfig;
use tiletune_runtime::gguf::write::GgufWriter;

/// A GGUF writer holding the llama.cpp metadata keys of `cfg`.
pub fn header(cfg: &ModelConfig) -> GgufWriter {
    let a = cfg.arch.gguf_name();
    let mut g = GgufWriter::new();
    g.kv("general.architecture", a)
        .kv(&format!("{a}.vocab_size"), cfg.vocab as u32)
        .kv(&format!("{a}.embedding_length"), cfg.hidden as u32)
        .kv(&format!("{a}.feed_forward_length"), cfg.intermediate as u32)
        .kv(&format!("{a}.block_count"), cfg.n_layers as u32)
        .kv(&format!("{a}.attention.head_count"), cfg.n_heads as u32)
        .kv(
            &format!("{a}.attention.head_count_kv"),
            cfg.n_kv_heads as u32,
        )
        .kv(&format!("{a}.attention.key_length"), cfg.head_dim as u32)
        .kv(&format!("{a}.rope.freq_base"), cfg.rope_theta)
        .kv(
            &format!("{a}.attention.layer_norm_rms_epsilon"),
            cfg.rms_eps,
        )
        .kv(&format!("{a}.context_length"), cfg.max_pos as u32);
    g
}

/// Largest absolute difference, relative to the largest |b|.
pub fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0.0f32, |m, x| m.max(x.abs())).max(1e-6);
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
        / scale
}
