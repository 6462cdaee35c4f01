//! The tokenizer from both sides: the input is `tokenizer.json` text, a NUL
//! byte, then text to encode. The JSON goes through the loader; the text is
//! encoded and decoded again with the loaded tokenizer when the JSON loads,
//! else (its first 96 bytes) with a fixed byte-level BPE tokenizer (the Qwen2
//! split pattern), so the encode path runs on every input. The text's first
//! byte picks the special-token flags. The text's bytes, read as
//! little-endian u32s, are also decoded as ids (some outside the vocabulary).
//! Any panic is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use tiletune_runtime::tokenizer::{StreamDecoder, Tokenizer};

/// `fixtures/bpe-small.json`: byte-level BPE, a split pattern,
/// special tokens and a post-processor.
const FIXED: &str = include_str!("../fixtures/bpe-small.json");

/// How much of the text the fixed tokenizer encodes.
const FIXED_TEXT: usize = 96;

fn fixed() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| Tokenizer::from_json_str(FIXED).expect("the fixed tokenizer loads"))
}

fn exercise(tok: &Tokenizer, text: &str, raw: &[u8]) {
    let flags = raw.first().copied().unwrap_or(0);
    if let Ok(ids) = tok.encode(text, flags & 1 == 1, flags & 2 == 2) {
        let _ = tok.decode(&ids, flags & 4 == 4);
    }
    let ids: Vec<u32> = raw
        .chunks(4)
        .map(|c| {
            let mut b = [0u8; 4];
            b[..c.len()].copy_from_slice(c);
            u32::from_le_bytes(b) % (tok.vocab_size() as u32).saturating_add(8)
        })
        .collect();
    let _ = tok.decode(&ids, true);
    let mut dec = StreamDecoder::default();
    for &id in &ids {
        let _ = tok.decode_stream(&mut dec, id, false);
        let _ = tok.token_str(id);
        let _ = tok.token_kind(id);
    }
}

fuzz_target!(|data: &[u8]| {
    let (json, text) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let text_str = String::from_utf8_lossy(text);
    match std::str::from_utf8(json).map(Tokenizer::from_json_str) {
        Ok(Ok(tok)) => exercise(&tok, &text_str, text),
        // The Qwen2 pattern's lookahead runs fancy-regex's backtracking VM,
        // which the coverage instrumentation makes ~60% of each execution;
        // a prefix of the text keeps the target near a thousand runs a second.
        _ => {
            let mut end = text_str.len().min(FIXED_TEXT);
            while !text_str.is_char_boundary(end) {
                end -= 1;
            }
            exercise(
                fixed(),
                &text_str[..end],
                &text[..text.len().min(FIXED_TEXT)],
            );
        }
    }
});
