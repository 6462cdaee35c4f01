//! What the C ABI's tests share: a tiny Llama GGUF with a tokenizer (built
//! here, random weights, 128 positions), and safe wrappers that turn the
//! ABI's out-parameters and strings into Rust values.

#![allow(dead_code)] // each test file uses a subset

use std::ffi::{CStr, CString, c_char};
use std::path::{Path, PathBuf};
use tiletune_capi::*;
use tiletune_runtime::gguf::write::GgufWriter;

/// The tiny model's vocabulary: a..z, `Ġ`, two merges, `<s>`, `</s>`.
pub const BOS: u32 = 29;
pub const EOS: u32 = 30;

/// Writes the tiny model to `dir/tiny.gguf`.
pub fn tiny_model(dir: &Path) -> PathBuf {
    let (d, f, nh, nkv, layers) = (32usize, 64usize, 4u32, 2u32, 2usize);
    let mut tokens: Vec<String> = (b'a'..=b'z').map(|b| (b as char).to_string()).collect();
    tokens.extend(["Ġ", "ab", "abc", "<s>", "</s>"].map(String::from));
    let vocab = tokens.len();
    let types: Vec<i32> = tokens
        .iter()
        .map(|t| if t.starts_with('<') { 3 } else { 1 })
        .collect();
    let mut w = GgufWriter::new();
    w.kv("general.architecture", "llama")
        .kv("llama.vocab_size", vocab as u32)
        .kv("llama.embedding_length", d as u32)
        .kv("llama.feed_forward_length", f as u32)
        .kv("llama.block_count", layers as u32)
        .kv("llama.attention.head_count", nh)
        .kv("llama.attention.head_count_kv", nkv)
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
        .kv("tokenizer.ggml.bos_token_id", BOS)
        .kv("tokenizer.ggml.eos_token_id", EOS)
        .kv("tokenizer.ggml.add_bos_token", true);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut add = |w: &mut GgufWriter, name: &str, shape: &[usize], norm: bool| {
        let vals: Vec<f32> = (0..shape.iter().product::<usize>())
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let r = ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.6;
                if norm { 1.0 + r } else { r }
            })
            .collect();
        let dims: Vec<u64> = shape.iter().rev().map(|&x| x as u64).collect();
        w.tensor_f32(name, &dims, &vals).unwrap();
    };
    let kvd = d / nh as usize * nkv as usize;
    add(&mut w, "token_embd.weight", &[vocab, d], false);
    add(&mut w, "output_norm.weight", &[d], true);
    add(&mut w, "output.weight", &[vocab, d], false);
    for l in 0..layers {
        let p = |n: &str| format!("blk.{l}.{n}.weight");
        add(&mut w, &p("attn_norm"), &[d], true);
        add(&mut w, &p("attn_q"), &[d, d], false);
        add(&mut w, &p("attn_k"), &[kvd, d], false);
        add(&mut w, &p("attn_v"), &[kvd, d], false);
        add(&mut w, &p("attn_output"), &[d, d], false);
        add(&mut w, &p("ffn_norm"), &[d], true);
        add(&mut w, &p("ffn_gate"), &[f, d], false);
        add(&mut w, &p("ffn_up"), &[f, d], false);
        add(&mut w, &p("ffn_down"), &[d, f], false);
    }
    let path = dir.join("tiny.gguf");
    w.write(&path).unwrap();
    path
}

/// This thread's last error message.
pub fn last_error() -> String {
    let p = tt_last_error();
    assert!(!p.is_null(), "a failed call leaves a message");
    // SAFETY: the library's NUL-terminated message, read at once.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Takes an owned string the library returned.
pub fn take_string(p: *mut c_char) -> String {
    assert!(!p.is_null());
    // SAFETY: an owned string from the library, freed once here.
    unsafe {
        let s = CStr::from_ptr(p).to_str().unwrap().to_string();
        tt_string_free(p);
        s
    }
}

/// Loads `path` with `threads` workers and the table at `db` (a path that
/// need not exist: the defaults run then).
pub fn load(path: &Path, threads: u32, table: *const TtTable) -> *mut TtModel {
    let c = CString::new(path.to_str().unwrap()).unwrap();
    let mut o = std::mem::MaybeUninit::<TtModelOptions>::uninit();
    let mut m = std::ptr::null_mut();
    // SAFETY: valid pointers to locals.
    unsafe {
        assert_eq!(tt_model_options_default(o.as_mut_ptr()), TT_OK);
        let mut o = o.assume_init();
        o.path = c.as_ptr();
        o.threads = threads;
        o.table = table;
        let st = tt_model_load(&o, &mut m);
        assert_eq!(st, TT_OK, "{}", last_error());
    }
    m
}

/// A table at a path in `dir` that does not exist (so every test plans
/// with the defaults, whatever the user's table holds).
pub fn no_table(dir: &Path) -> *mut TtTable {
    let c = CString::new(dir.join("none.db").to_str().unwrap()).unwrap();
    let mut t = std::ptr::null_mut();
    // SAFETY: valid pointers; `create` makes the file so the open succeeds.
    assert_eq!(unsafe { tt_table_open(c.as_ptr(), true, &mut t) }, TT_OK);
    t
}

/// Greedy options for `n` tokens.
pub fn greedy(n: u32) -> TtGenerateOptions {
    let mut o = std::mem::MaybeUninit::<TtGenerateOptions>::uninit();
    // SAFETY: a valid pointer to a local.
    unsafe {
        assert_eq!(tt_generate_options_default(o.as_mut_ptr()), TT_OK);
        let mut o = o.assume_init();
        o.sampler.temperature = 0.0;
        o.max_tokens = n;
        o
    }
}

/// Tokenizes `text` as `tiletune run` does a prompt.
pub fn tokenize(m: *const TtModel, text: &str) -> Vec<u32> {
    let c = CString::new(text).unwrap();
    let (mut ids, mut n) = (std::ptr::null_mut(), 0);
    let flags = TT_TOKENIZE_ADD_SPECIAL | TT_TOKENIZE_PARSE_SPECIAL;
    // SAFETY: valid pointers; the array is copied and freed once.
    unsafe {
        assert_eq!(tt_tokenize(m, c.as_ptr(), flags, &mut ids, &mut n), TT_OK);
        let v = std::slice::from_raw_parts(ids, n).to_vec();
        tt_tokens_free(ids, n);
        v
    }
}

/// Pulls a whole generation on a new session of `m`: its ids, its text
/// and how it stopped.
pub fn pull(m: *const TtModel, prompt: &[u32], o: &TtGenerateOptions) -> (Vec<u32>, String, i32) {
    let (mut s, mut g) = (std::ptr::null_mut(), std::ptr::null_mut());
    let (mut ids, mut text) = (Vec::new(), Vec::new());
    // SAFETY: valid pointers; every handle made here is freed here.
    unsafe {
        assert_eq!(tt_session_new(m, &mut s), TT_OK);
        let st = tt_generation_start(s, prompt.as_ptr(), prompt.len(), o, &mut g);
        assert_eq!(st, TT_OK, "{}", last_error());
        let mut step = std::mem::zeroed::<TtStep>();
        let stop = loop {
            assert_eq!(tt_generation_next(g, &mut step), TT_OK, "{}", last_error());
            if step.has_token {
                ids.push(step.token);
            }
            text.extend_from_slice(std::slice::from_raw_parts(
                step.text.cast::<u8>(),
                step.text_len,
            ));
            if step.stop != TT_STOP_NONE {
                break step.stop;
            }
        };
        tt_generation_free(g);
        tt_session_free(s);
        (ids, String::from_utf8(text).unwrap(), stop)
    }
}

/// Positions held in a session's cache.
pub fn session_len(s: *const TtSession) -> usize {
    let mut n = usize::MAX;
    // SAFETY: a live session and a local.
    assert_eq!(
        unsafe { tt_session_len(s, &mut n) },
        TT_OK,
        "{}",
        last_error()
    );
    n
}
