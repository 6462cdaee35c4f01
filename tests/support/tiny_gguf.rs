//! A tiny synthetic GGUF model the CLI tests build in their temporary
//! directories: a 2-layer llama with random f32 weights and a small BPE
//! vocabulary, whole or with its meaning broken in one chosen way.

#![allow(dead_code)] // each test file uses the parts it needs

use std::path::{Path, PathBuf};
use tiletune_runtime::gguf::write::GgufWriter;

/// A 2-layer llama model (hidden 32, 4 heads, 2 KV heads, head_dim 8,
/// vocab 31) with random f32 weights and a small BPE vocabulary.
pub fn tiny_model(dir: &Path) -> PathBuf {
    tiny_model_as(dir, "tiny.gguf", Broken::None)
}

/// How [`tiny_model_as`] breaks the file's meaning.
#[derive(Clone, Copy, PartialEq)]
pub enum Broken {
    None,
    /// Metadata says this many layers; the tensors are for 2.
    Layers(u32),
    /// This many KV heads for 4 attention heads.
    KvHeads(u32),
    /// No `token_embd.weight`.
    NoEmbedding,
}

pub fn tiny_model_as(dir: &Path, file: &str, broken: Broken) -> PathBuf {
    let (d, f, nh, nkv, hd, layers) = (32usize, 64usize, 4usize, 2usize, 8usize, 2usize);
    let meta_layers = match broken {
        Broken::Layers(n) => n,
        _ => layers as u32,
    };
    let meta_kv = match broken {
        Broken::KvHeads(n) => n,
        _ => nkv as u32,
    };
    let mut tokens: Vec<String> = (b'a'..=b'z').map(|b| (b as char).to_string()).collect();
    tokens.extend(["Ġ", "ab", "abc", "<s>", "</s>"].map(String::from));
    let vocab = tokens.len();
    let types: Vec<i32> = tokens
        .iter()
        .map(|t| if t.starts_with('<') { 3 } else { 1 })
        .collect();
    let mut w = GgufWriter::new();
    w.kv("general.architecture", "llama")
        .kv("general.file_type", 0u32)
        .kv("llama.vocab_size", vocab as u32)
        .kv("llama.embedding_length", d as u32)
        .kv("llama.feed_forward_length", f as u32)
        .kv("llama.block_count", meta_layers)
        .kv("llama.attention.head_count", nh as u32)
        .kv("llama.attention.head_count_kv", meta_kv)
        .kv("llama.rope.freq_base", 10000f32)
        .kv("llama.attention.layer_norm_rms_epsilon", 1e-5f32)
        .kv("llama.context_length", 128u32)
        .kv("tokenizer.ggml.model", "gpt2")
        .kv("tokenizer.ggml.pre", "gpt2")
        .kv("tokenizer.ggml.tokens", tokens)
        .kv("tokenizer.ggml.token_type", types)
        .kv(
            "tokenizer.ggml.merges",
            vec!["a b".to_string(), "ab c".to_string()],
        )
        .kv("tokenizer.ggml.bos_token_id", 29u32)
        .kv("tokenizer.ggml.eos_token_id", 30u32)
        .kv("tokenizer.ggml.add_bos_token", true);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut add = |w: &mut GgufWriter, name: &str, shape: &[usize], norm: bool| {
        let n: usize = shape.iter().product();
        let vals: Vec<f32> = (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let r = ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.4;
                if norm { 1.0 + r } else { r }
            })
            .collect();
        let dims: Vec<u64> = shape.iter().rev().map(|&x| x as u64).collect();
        w.tensor_f32(name, &dims, &vals).unwrap();
    };
    if broken != Broken::NoEmbedding {
        add(&mut w, "token_embd.weight", &[vocab, d], false);
    }
    add(&mut w, "output_norm.weight", &[d], true);
    add(&mut w, "output.weight", &[vocab, d], false);
    for l in 0..layers {
        let b = format!("blk.{l}");
        add(&mut w, &format!("{b}.attn_norm.weight"), &[d], true);
        add(&mut w, &format!("{b}.attn_q.weight"), &[nh * hd, d], false);
        add(&mut w, &format!("{b}.attn_k.weight"), &[nkv * hd, d], false);
        add(&mut w, &format!("{b}.attn_v.weight"), &[nkv * hd, d], false);
        add(
            &mut w,
            &format!("{b}.attn_output.weight"),
            &[d, nh * hd],
            false,
        );
        add(&mut w, &format!("{b}.ffn_norm.weight"), &[d], true);
        add(&mut w, &format!("{b}.ffn_gate.weight"), &[f, d], false);
        add(&mut w, &format!("{b}.ffn_up.weight"), &[f, d], false);
        add(&mut w, &format!("{b}.ffn_down.weight"), &[d, f], false);
    }
    let path = dir.join(file);
    w.write(&path).unwrap();
    path
}
