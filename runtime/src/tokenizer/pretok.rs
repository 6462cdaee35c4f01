//! Pre-tokenization: the regexes that cut text into words before BPE runs on
//! each word. The patterns are the ones llama.cpp's `llama-vocab.cpp` uses for
//! each `tokenizer.ggml.pre` name (equal to the Hugging Face `tokenizer.json`
//! pre-tokenizers of those models). Several regexes apply in sequence: each
//! one splits every fragment the previous ones produced, keeping both the
//! matches and the text between them, as llama.cpp's `unicode_regex_split`
//! and HF's `Split(behavior = Isolated)` do.

use crate::error::{LoadError, Result};
use fancy_regex::Regex;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// GPT-2's pattern (HF `ByteLevel(use_regex = true)`).
pub const GPT2: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
/// Llama 3 (`llama-bpe`): case-insensitive contractions, digits in threes.
pub const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2 / Qwen2.5 / Qwen3: like Llama 3 but one digit at a time.
pub const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// HF `Digits(individual_digits = true)`.
pub const DIGITS_INDIVIDUAL: &str = r"\p{N}";
/// HF `Digits(individual_digits = false)`.
pub const DIGITS: &str = r"\p{N}+";

/// A chain of splitting regexes.
#[derive(Clone, Debug)]
pub struct PreTokenizer {
    name: String,
    patterns: Vec<String>,
    regexes: Vec<Regex>,
}

impl PreTokenizer {
    /// The pre-tokenizer for a `tokenizer.ggml.pre` name. Compiled regexes
    /// are cached per name: compiling the Unicode classes costs about a
    /// millisecond, and regexes clone cheaply.
    pub fn from_gguf_name(name: &str) -> Result<Self> {
        static CACHE: OnceLock<Mutex<HashMap<String, PreTokenizer>>> = OnceLock::new();
        let cache = CACHE.get_or_init(Default::default);
        if let Some(p) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(name) {
            return Ok(p.clone());
        }
        let p = Self::compile_named(name)?;
        cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), p.clone());
        Ok(p)
    }

    fn compile_named(name: &str) -> Result<Self> {
        let patterns: &[&str] = match name {
            "default" | "gpt2" | "gpt-2" => &[GPT2],
            // SmolLM, StarCoder and friends: digits split one by one first.
            "smollm" | "starcoder" | "refact" | "codeshell" => &[DIGITS_INDIVIDUAL, GPT2],
            "llama-bpe" | "llama3" | "llama-v3" | "dbrx" | "smaug-bpe" => &[LLAMA3],
            "qwen2" | "qwen35" | "deepseek-r1-qwen" => &[QWEN2],
            other => {
                return Err(LoadError::Tokenizer(format!(
                    "pre-tokenizer `{other}` is not supported (known: gpt2, smollm, llama-bpe, qwen2); \
                     convert the model with one of these"
                )));
            }
        };
        Self::from_patterns(name, patterns.iter().map(|p| p.to_string()).collect())
    }

    /// The `tokenizer.ggml.pre` name llama.cpp gives these patterns (the
    /// inverse of [`PreTokenizer::from_gguf_name`]), or `None` when no named
    /// pre-tokenizer splits text this way. llama.cpp's converter names a
    /// tokenizer by hashing its output on a test text; equal regex chains
    /// split every text alike, so they get the same name.
    pub fn gguf_name(&self) -> Option<&'static str> {
        let p: Vec<&str> = self.patterns.iter().map(String::as_str).collect();
        match p.as_slice() {
            [GPT2] => Some("gpt2"),
            [DIGITS_INDIVIDUAL, GPT2] => Some("smollm"),
            [LLAMA3] => Some("llama-bpe"),
            [QWEN2] => Some("qwen2"),
            _ => None,
        }
    }

    /// A chain of custom patterns (from `tokenizer.json`).
    pub fn from_patterns(name: &str, patterns: Vec<String>) -> Result<Self> {
        let regexes = patterns
            .iter()
            .map(|p| {
                Regex::new(p).map_err(|e| {
                    LoadError::Tokenizer(format!("pre-tokenizer regex `{p}` does not compile: {e}"))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(PreTokenizer {
            name: name.to_string(),
            patterns,
            regexes,
        })
    }

    /// The name it was built from.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The regex patterns applied in order.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// Cuts `text` into words (byte ranges of `text`, in order, covering it).
    pub fn split(&self, text: &str) -> Vec<std::ops::Range<usize>> {
        let mut pieces = Vec::with_capacity(16);
        pieces.push(0..text.len());
        for re in &self.regexes {
            let mut next = Vec::with_capacity(pieces.len() * 2);
            for piece in pieces {
                let frag = &text[piece.clone()];
                let mut last = 0;
                for m in re.find_iter(frag) {
                    // A regex runtime error (backtrack limit on pathological
                    // input) ends matching for this fragment; the rest stays
                    // one piece, which BPE still encodes correctly.
                    let Ok(m) = m else { break };
                    if m.start() > last {
                        next.push(piece.start + last..piece.start + m.start());
                    }
                    if m.end() > m.start() {
                        next.push(piece.start + m.start()..piece.start + m.end());
                    }
                    last = m.end();
                }
                if last < frag.len() {
                    next.push(piece.start + last..piece.end);
                }
            }
            pieces = next;
        }
        pieces
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(p: &PreTokenizer, s: &str) -> Vec<String> {
        p.split(s).into_iter().map(|r| s[r].to_string()).collect()
    }

    #[test]
    fn gpt2_splits_words_spaces_and_contractions() {
        let p = PreTokenizer::from_gguf_name("gpt2").unwrap();
        assert_eq!(
            words(&p, "Hello world's  end 123!"),
            ["Hello", " world", "'s", " ", " end", " 123", "!"]
        );
    }

    #[test]
    fn smollm_splits_digits_individually() {
        let p = PreTokenizer::from_gguf_name("smollm").unwrap();
        assert_eq!(words(&p, "a 123"), ["a", " ", "1", "2", "3"]);
    }

    #[test]
    fn qwen2_and_llama3_differ_on_digits() {
        let q = PreTokenizer::from_gguf_name("qwen2").unwrap();
        let l = PreTokenizer::from_gguf_name("llama-bpe").unwrap();
        assert_eq!(words(&q, "x 12345"), ["x", " ", "1", "2", "3", "4", "5"]);
        assert_eq!(words(&l, "x 12345"), ["x", " ", "123", "45"]);
        assert_eq!(words(&l, "I'M here\n\n"), ["I", "'M", " here", "\n\n"]);
    }

    #[test]
    fn unknown_name_is_an_error() {
        assert!(PreTokenizer::from_gguf_name("nope").is_err());
    }

    #[test]
    fn pieces_cover_the_text() {
        let p = PreTokenizer::from_gguf_name("qwen2").unwrap();
        let s = "  mixed\tinput — with ümlauts, 42 numbers\r\n and   spaces ";
        let joined: String = words(&p, s).concat();
        assert_eq!(joined, s);
    }
}
