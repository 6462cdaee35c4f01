//! Tokenizer tests on synthetic vocabularies built here (hermetic).

use super::*;
use crate::gguf::write::GgufWriter;
use crate::gguf::{Array, GgufFile};

/// A small byte-level vocabulary: the 256 byte tokens (in byte order, so id
/// = byte for single bytes), merged tokens, two control tokens and one
/// user-defined token.
pub(crate) fn synthetic_parts(pre: &str) -> BpeParts {
    let b2u = bpe::byte_to_unicode();
    let mut tokens: Vec<String> = b2u.iter().map(|c| c.to_string()).collect();
    let merges: Vec<(&str, &str)> = vec![
        ("h", "e"),
        ("l", "l"),
        ("he", "ll"),
        ("hell", "o"),
        ("Ġ", "w"),
        ("o", "r"),
        ("Ġw", "or"),
        ("Ġwor", "l"),
        ("Ġworl", "d"),
        ("Ġ", "Ġ"),
        ("1", "2"),
    ];
    for (a, b) in &merges {
        tokens.push(format!("{a}{b}"));
    }
    let mut kinds = vec![TokenKind::Normal; tokens.len()];
    for (t, k) in [
        ("<|im_start|>", TokenKind::Control),
        ("<|im_end|>", TokenKind::Control),
        ("<tool>", TokenKind::UserDefined),
    ] {
        tokens.push(t.to_string());
        kinds.push(k);
    }
    let im_end = tokens.len() as u32 - 2;
    BpeParts {
        tokens,
        kinds,
        merges: merges
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect(),
        pre: PreTokenizer::from_gguf_name(pre).unwrap(),
        bos: Some(im_end - 1),
        eos: Some(im_end),
        eog: vec![],
        add_bos: false,
        add_eos: false,
        ignore_merges: false,
        add_prefix_space: false,
    }
}

fn tok(pre: &str) -> Tokenizer {
    Tokenizer::from_parts(synthetic_parts(pre)).unwrap()
}

#[test]
fn merges_build_words() {
    let t = tok("gpt2");
    let ids = t.encode("hello world", false, false).unwrap();
    assert_eq!(
        ids,
        [t.token_id("hello").unwrap(), t.token_id("Ġworld").unwrap()]
    );
    // Unmerged bytes stay byte tokens (id = byte value in this vocabulary).
    assert_eq!(
        t.encode("zq", false, false).unwrap(),
        [b'z' as u32, b'q' as u32]
    );
    assert_eq!(t.encode("", true, true).unwrap(), Vec::<u32>::new());
}

#[test]
fn pre_tokenizer_changes_digit_merges() {
    // gpt2 keeps "12" in one word so the merge applies; smollm splits digits first.
    let g = tok("gpt2").encode("12", false, false).unwrap();
    let s = tok("smollm").encode("12", false, false).unwrap();
    assert_eq!(g.len(), 1);
    assert_eq!(s, [b'1' as u32, b'2' as u32]);
}

#[test]
fn special_tokens_parse_only_when_asked() {
    let t = tok("gpt2");
    let start = t.token_id("<|im_start|>").unwrap();
    let tool = t.token_id("<tool>").unwrap();
    let with = t.encode("<|im_start|>hello<tool>", false, true).unwrap();
    assert_eq!(with, [start, t.token_id("hello").unwrap(), tool]);
    let without = t.encode("<|im_start|>hello<tool>", false, false).unwrap();
    assert!(!without.contains(&start));
    // User-defined tokens are matched either way.
    assert_eq!(*without.last().unwrap(), tool);
    assert_eq!(t.decode(&without, false), "<|im_start|>hello<tool>");
}

#[test]
fn bos_eos_are_added_as_configured() {
    let mut p = synthetic_parts("gpt2");
    p.add_bos = true;
    p.add_eos = true;
    let t = Tokenizer::from_parts(p).unwrap();
    let ids = t.encode("hello", true, false).unwrap();
    assert_eq!(ids.first(), t.bos().as_ref());
    assert_eq!(ids.last(), t.eos().as_ref());
    assert_eq!(t.encode("hello", false, false).unwrap().len(), 1);
    assert!(t.is_eog(t.eos().unwrap()));
    assert_eq!(t.decode(&ids, true), "hello");
}

#[test]
fn decode_inverts_encode_on_random_text() {
    let t = tok("qwen2");
    let alphabet: Vec<char> = "hello wrd12 \n\t'sé€😀<|>".chars().collect();
    let mut state = 0x9E3779B97F4A7C15u64;
    for _ in 0..300 {
        let len = (state % 40) as usize;
        let s: String = (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                alphabet[(state % alphabet.len() as u64) as usize]
            })
            .collect();
        let ids = t.encode(&s, false, true).unwrap();
        assert_eq!(t.decode(&ids, false), s, "ids {ids:?}");
    }
}

#[test]
fn ignore_merges_takes_whole_words() {
    let mut p = synthetic_parts("llama-bpe");
    // "hell" is in the vocabulary; with ignore_merges "hell" is one token even
    // if merges would get there differently.
    p.ignore_merges = true;
    let t = Tokenizer::from_parts(p).unwrap();
    assert_eq!(
        t.encode("hell", false, false).unwrap(),
        [t.token_id("hell").unwrap()]
    );
}

#[test]
fn bad_parts_are_errors() {
    let mut p = synthetic_parts("gpt2");
    p.merges.push(("zz".into(), "q".into()));
    assert!(Tokenizer::from_parts(p).is_err());
    let mut p = synthetic_parts("gpt2");
    p.kinds.pop();
    assert!(Tokenizer::from_parts(p).is_err());
    let mut p = synthetic_parts("gpt2");
    p.eos = Some(1_000_000);
    assert!(Tokenizer::from_parts(p).is_err());
}

#[test]
fn streaming_decode_never_splits_characters() {
    let t = tok("gpt2");
    let text = "é😀 hello";
    let ids = t.encode(text, false, false).unwrap();
    let mut d = StreamDecoder::new();
    let mut out = String::new();
    for &id in &ids {
        let piece = t.decode_stream(&mut d, id, false);
        assert!(!piece.contains('\u{FFFD}'));
        out.push_str(&piece);
    }
    out.push_str(&d.flush());
    assert_eq!(out, text);
}

pub(crate) fn write_tokenizer_kvs(w: &mut GgufWriter, p: &BpeParts, pre: &str) {
    p.write_gguf(w, pre);
    if let Some(b) = p.bos {
        w.kv("tokenizer.ggml.bos_token_id", b);
    }
    if let Some(e) = p.eos {
        w.kv("tokenizer.ggml.eos_token_id", e);
    }
}

#[test]
fn gguf_and_json_sources_agree() {
    let parts = synthetic_parts("qwen2");
    let mut w = GgufWriter::new();
    write_tokenizer_kvs(&mut w, &parts, "qwen2");
    let g = GgufFile::from_vec(w.to_bytes()).unwrap();
    assert!(matches!(
        g.get_array("tokenizer.ggml.tokens").unwrap(),
        Array::String(_)
    ));
    let from_gguf = Tokenizer::from_gguf(&g).unwrap();

    let vocab: serde_json::Map<String, serde_json::Value> = parts
        .tokens
        .iter()
        .zip(&parts.kinds)
        .enumerate()
        .filter(|(_, (_, k))| **k == TokenKind::Normal)
        .map(|(i, (t, _))| (t.clone(), serde_json::json!(i)))
        .collect();
    let added: Vec<serde_json::Value> = parts
        .tokens
        .iter()
        .zip(&parts.kinds)
        .enumerate()
        .filter(|(_, (_, k))| **k != TokenKind::Normal)
        .map(|(i, (t, k))| serde_json::json!({"id": i, "content": t, "special": *k == TokenKind::Control}))
        .collect();
    let merges: Vec<serde_json::Value> = parts
        .merges
        .iter()
        .map(|(a, b)| serde_json::json!([a, b]))
        .collect();
    let json = serde_json::json!({
        "added_tokens": added,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pretok::QWEN2}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}
        ]},
        "model": {"type": "BPE", "vocab": vocab, "merges": merges}
    });
    let from_json = Tokenizer::from_json_str(&json.to_string()).unwrap();
    for s in [
        "hello world",
        "<|im_start|>user\nhello 12 world<|im_end|>",
        "  héllo\n\n12",
    ] {
        assert_eq!(
            from_gguf.encode(s, true, true).unwrap(),
            from_json.encode(s, true, true).unwrap(),
            "{s:?}"
        );
    }
}

#[test]
fn missing_or_wrong_tokenizer_metadata_is_an_error() {
    let g = GgufFile::from_vec(GgufWriter::new().to_bytes()).unwrap();
    assert!(Tokenizer::from_gguf(&g).is_err());
    let mut w = GgufWriter::new();
    w.kv("tokenizer.ggml.model", "llama");
    let g = GgufFile::from_vec(w.to_bytes()).unwrap();
    let e = Tokenizer::from_gguf(&g).unwrap_err().to_string();
    assert!(e.contains("not supported"), "{e}");
}
