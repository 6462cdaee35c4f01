//! Byte-level BPE tokenizer built from GGUF metadata (`tokenizer.ggml.model =
//! gpt2`: tokens, merges, token types, the pre-tokenizer named by
//! `tokenizer.ggml.pre`) or from a Hugging Face `tokenizer.json`.
//!
//! One implementation serves both sources so that a GGUF file and the
//! `tokenizer.json` it was converted from give the same ids. Special tokens
//! (control and user-defined) are cut out of the text before pre-tokenization,
//! as llama.cpp's `tokenizer_st_partition` and HF's added-token matching do.
//! Not supported: SentencePiece (`llama` model) vocabularies, HF normalizers
//! other than none/NFC (NFC is assumed to be a no-op: input is used as given).

mod bpe;
mod json;
mod pretok;
mod stream;

pub use pretok::PreTokenizer;
pub use stream::StreamDecoder;

use crate::error::{LoadError, Result};
use crate::gguf::GgufFile;
use std::collections::HashMap;

/// What a vocabulary entry is (GGUF `tokenizer.ggml.token_type` values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    Normal,
    Unknown,
    /// Special tokens such as `<|im_start|>`: matched in text only when
    /// special-token parsing is on, skipped when decoding with `skip_special`.
    Control,
    /// Added tokens that are always matched in text and decoded verbatim.
    UserDefined,
    Unused,
    Byte,
}

impl TokenKind {
    /// The GGUF token type id.
    pub fn gguf_id(self) -> i32 {
        match self {
            TokenKind::Normal => 1,
            TokenKind::Unknown => 2,
            TokenKind::Control => 3,
            TokenKind::UserDefined => 4,
            TokenKind::Unused => 5,
            TokenKind::Byte => 6,
        }
    }

    /// From the GGUF token type id (1 normal, 2 unknown, 3 control,
    /// 4 user-defined, 5 unused, 6 byte; 0 is treated as normal).
    pub fn from_gguf(id: i64) -> Self {
        match id {
            2 => TokenKind::Unknown,
            3 => TokenKind::Control,
            4 => TokenKind::UserDefined,
            5 => TokenKind::Unused,
            6 => TokenKind::Byte,
            _ => TokenKind::Normal,
        }
    }
}

/// Everything needed to build a [`Tokenizer`]; tests build synthetic ones.
#[derive(Clone, Debug)]
pub struct BpeParts {
    /// Vocabulary in id order, in byte-level form (`Ġhello` for " hello").
    pub tokens: Vec<String>,
    /// Kind of each token (same length as `tokens`).
    pub kinds: Vec<TokenKind>,
    /// Merges in rank order, as pairs of token strings.
    pub merges: Vec<(String, String)>,
    pub pre: PreTokenizer,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    /// Extra end-of-generation ids (`<|im_end|>`, `<|eot_id|>`).
    pub eog: Vec<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
    /// Take a word directly when it is in the vocabulary (Llama 3).
    pub ignore_merges: bool,
    /// Prepend a space to the text (HF `add_prefix_space`).
    pub add_prefix_space: bool,
}

impl BpeParts {
    /// Gives the vocabulary `n` entries, as llama.cpp's converter does for a
    /// model whose embedding has more rows than its tokenizer has tokens
    /// (Qwen2.5: 151 936 rows, 151 665 tokens): each id the tokenizer does
    /// not name becomes `[PAD<id>]`, unused. llama.cpp sizes the embedding
    /// by the token list, so a GGUF without them does not load there.
    /// A vocabulary of `n` or more entries is left as it is.
    pub fn pad_to(&mut self, n: usize) {
        for id in self.tokens.len()..n {
            self.tokens.push(format!("[PAD{id}]"));
            self.kinds.push(TokenKind::Unused);
        }
    }

    /// Writes the vocabulary as llama.cpp's converter does (`tokenizer.ggml.
    /// model` gpt2, `pre`, `tokens`, `token_type`, `merges`, the add-token
    /// flags); the special ids are the caller's, as a converter may take them
    /// from config.json first.
    pub fn write_gguf(&self, w: &mut crate::gguf::write::GgufWriter, pre: &str) {
        w.kv("tokenizer.ggml.model", "gpt2")
            .kv("tokenizer.ggml.pre", pre)
            .kv("tokenizer.ggml.tokens", self.tokens.clone())
            .kv(
                "tokenizer.ggml.token_type",
                self.kinds.iter().map(|k| k.gguf_id()).collect::<Vec<i32>>(),
            )
            .kv(
                "tokenizer.ggml.merges",
                self.merges
                    .iter()
                    .map(|(a, b)| format!("{a} {b}"))
                    .collect::<Vec<String>>(),
            )
            .kv("tokenizer.ggml.add_bos_token", self.add_bos)
            .kv("tokenizer.ggml.add_eos_token", self.add_eos);
        if self.add_prefix_space {
            w.kv("tokenizer.ggml.add_space_prefix", true);
        }
    }
}

/// A byte-level BPE tokenizer.
#[derive(Clone, Debug)]
pub struct Tokenizer {
    tokens: Vec<String>,
    kinds: Vec<TokenKind>,
    vocab: HashMap<String, u32>,
    merges: bpe::Merges,
    /// Decoded bytes of each token.
    token_bytes: Vec<Vec<u8>>,
    byte_ids: [Option<u32>; 256],
    b2u: [char; 256],
    /// Control and user-defined tokens, longest first for leftmost-longest matching.
    specials: Vec<(String, u32, TokenKind)>,
    pre: PreTokenizer,
    bos: Option<u32>,
    eos: Option<u32>,
    eog: Vec<u32>,
    unk: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    ignore_merges: bool,
    add_prefix_space: bool,
}

impl Tokenizer {
    /// Builds a tokenizer and checks the parts against each other.
    pub fn from_parts(p: BpeParts) -> Result<Self> {
        let n = p.tokens.len();
        if n == 0 || n > u32::MAX as usize {
            return Err(LoadError::Tokenizer(format!("vocabulary has {n} tokens")));
        }
        if p.kinds.len() != n {
            return Err(LoadError::Tokenizer(format!(
                "{} token types for {n} tokens; the vocabulary arrays must have equal lengths",
                p.kinds.len()
            )));
        }
        for (what, id) in [("bos", p.bos), ("eos", p.eos)] {
            if let Some(id) = id.filter(|&id| id as usize >= n) {
                return Err(LoadError::Tokenizer(format!(
                    "{what} id {id} is outside the {n}-token vocabulary"
                )));
            }
        }
        if let Some(&id) = p.eog.iter().find(|&&id| id as usize >= n) {
            return Err(LoadError::Tokenizer(format!(
                "end-of-generation id {id} is outside the vocabulary"
            )));
        }
        let mut vocab = HashMap::with_capacity(n);
        for (i, t) in p.tokens.iter().enumerate() {
            // Duplicates exist in some converted vocabularies; the first id wins, as in HF.
            vocab.entry(t.clone()).or_insert(i as u32);
        }
        let mut merges = bpe::Merges::with_capacity(p.merges.len());
        for (rank, (a, b)) in p.merges.iter().enumerate() {
            let (Some(&ia), Some(&ib)) = (vocab.get(a), vocab.get(b)) else {
                return Err(LoadError::Tokenizer(format!(
                    "merge {rank} `{a} {b}` names a token that is not in the vocabulary"
                )));
            };
            let Some(&im) = vocab.get(&format!("{a}{b}")) else {
                return Err(LoadError::Tokenizer(format!(
                    "merge {rank} `{a} {b}` produces `{a}{b}`, which is not in the vocabulary"
                )));
            };
            merges.entry((ia, ib)).or_insert((rank as u32, im));
        }

        let b2u = bpe::byte_to_unicode();
        let mut u2b = HashMap::with_capacity(256);
        for (b, c) in b2u.iter().enumerate() {
            u2b.insert(*c, b as u8);
        }
        let mut byte_ids = [None; 256];
        for (b, c) in b2u.iter().enumerate() {
            byte_ids[b] = vocab.get(&c.to_string()).copied();
        }
        let token_bytes = p
            .tokens
            .iter()
            .zip(&p.kinds)
            .map(|(t, k)| match k {
                TokenKind::Normal | TokenKind::Unknown | TokenKind::Unused | TokenKind::Byte => {
                    let mut out = Vec::with_capacity(t.len());
                    for c in t.chars() {
                        match u2b.get(&c) {
                            Some(&b) => out.push(b),
                            // Not a byte-level character: keep it as UTF-8.
                            None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                        }
                    }
                    out
                }
                TokenKind::Control | TokenKind::UserDefined => t.as_bytes().to_vec(),
            })
            .collect();
        let mut specials: Vec<(String, u32, TokenKind)> = p
            .tokens
            .iter()
            .zip(&p.kinds)
            .enumerate()
            .filter(|(_, (t, k))| {
                matches!(k, TokenKind::Control | TokenKind::UserDefined) && !t.is_empty()
            })
            .map(|(i, (t, k))| (t.clone(), i as u32, *k))
            .collect();
        specials.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        let unk = p
            .kinds
            .iter()
            .position(|k| *k == TokenKind::Unknown)
            .map(|i| i as u32);
        Ok(Tokenizer {
            tokens: p.tokens,
            kinds: p.kinds,
            vocab,
            merges,
            token_bytes,
            byte_ids,
            b2u,
            specials,
            pre: p.pre,
            bos: p.bos,
            eos: p.eos,
            eog: p.eog,
            unk,
            add_bos: p.add_bos,
            add_eos: p.add_eos,
            ignore_merges: p.ignore_merges,
            add_prefix_space: p.add_prefix_space,
        })
    }

    /// Reads the tokenizer stored in a GGUF file's metadata.
    pub fn from_gguf(g: &GgufFile) -> Result<Self> {
        let model = g.get_str("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(LoadError::Tokenizer(format!(
                "tokenizer model `{model}` is not supported (only gpt2 byte-level bpe); \
                 use a model with a bpe vocabulary"
            )));
        }
        let tokens = match g.get_array("tokenizer.ggml.tokens")? {
            crate::gguf::Array::String(v) => v.clone(),
            a => {
                return Err(LoadError::Tokenizer(format!(
                    "tokenizer.ggml.tokens is an array of {}, expected strings",
                    a.elem_type().name()
                )));
            }
        };
        let kinds = match g.get("tokenizer.ggml.token_type") {
            None => vec![TokenKind::Normal; tokens.len()],
            Some(_) => g
                .get_array("tokenizer.ggml.token_type")?
                .to_i64_vec()
                .ok_or_else(|| {
                    LoadError::Tokenizer("tokenizer.ggml.token_type is not an integer array".into())
                })?
                .into_iter()
                .map(TokenKind::from_gguf)
                .collect(),
        };
        let merges = match g.get_array("tokenizer.ggml.merges")? {
            crate::gguf::Array::String(v) => v
                .iter()
                .enumerate()
                .map(|(i, m)| split_merge(m, i))
                .collect::<Result<Vec<_>>>()?,
            a => {
                return Err(LoadError::Tokenizer(format!(
                    "tokenizer.ggml.merges is an array of {}, expected strings",
                    a.elem_type().name()
                )));
            }
        };
        let pre_name = match g.get("tokenizer.ggml.pre") {
            Some(_) => g.get_str("tokenizer.ggml.pre")?,
            None => "default",
        };
        let pre = PreTokenizer::from_gguf_name(pre_name)?;
        let id = |key: &str| -> Result<Option<u32>> {
            match g.get(key) {
                None => Ok(None),
                Some(_) => g.get_u32(key).map(Some),
            }
        };
        let flag = |key: &str, default: bool| -> Result<bool> {
            match g.get(key) {
                None => Ok(default),
                Some(_) => g.get_bool(key),
            }
        };
        let bos = id("tokenizer.ggml.bos_token_id")?;
        let eos = id("tokenizer.ggml.eos_token_id")?;
        let mut eog = Vec::new();
        for key in ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
            eog.extend(id(key)?);
        }
        // llama.cpp also treats these well-known control tokens as end of generation.
        for (i, (t, k)) in tokens.iter().zip(&kinds).enumerate() {
            if *k == TokenKind::Control
                && matches!(
                    t.as_str(),
                    "<|im_end|>"
                        | "<|eot_id|>"
                        | "<|endoftext|>"
                        | "<|end_of_text|>"
                        | "<end_of_turn>"
                )
            {
                eog.push(i as u32);
            }
        }
        let ignore_merges = matches!(pre_name, "llama-bpe" | "llama3" | "llama-v3");
        Self::from_parts(BpeParts {
            tokens,
            kinds,
            merges,
            pre,
            bos,
            eos,
            eog,
            add_bos: flag("tokenizer.ggml.add_bos_token", false)?,
            add_eos: flag("tokenizer.ggml.add_eos_token", false)?,
            ignore_merges,
            add_prefix_space: flag("tokenizer.ggml.add_space_prefix", false)?,
        })
    }

    /// The parts of a Hugging Face `tokenizer.json` (BPE model, byte-level).
    pub fn parts_from_json_file(path: &std::path::Path) -> Result<BpeParts> {
        let text = crate::input::read_text(path, crate::input::JSON_LIMIT)?;
        json::parts_from_json(&text)
    }

    /// Reads a Hugging Face `tokenizer.json` (BPE model, byte-level).
    pub fn from_json_file(path: &std::path::Path) -> Result<Self> {
        let text = crate::input::read_text(path, crate::input::JSON_LIMIT)?;
        Self::from_json_str(&text)
    }

    /// Parses `tokenizer.json` text.
    pub fn from_json_str(text: &str) -> Result<Self> {
        Self::from_parts(json::parts_from_json(text)?)
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// Beginning-of-sequence id.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// End-of-sequence id.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// True when generation should stop at `id` (EOS, EOT, `<|im_end|>`...).
    pub fn is_eog(&self, id: u32) -> bool {
        Some(id) == self.eos || self.eog.contains(&id)
    }

    /// All end-of-generation ids.
    pub fn eog_ids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .eos
            .into_iter()
            .chain(self.eog.iter().copied())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Whether encode adds BOS when asked to add special tokens.
    pub fn adds_bos(&self) -> bool {
        self.add_bos
    }

    /// The vocabulary string of `id`.
    pub fn token_str(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// The kind of `id`.
    pub fn token_kind(&self, id: u32) -> Option<TokenKind> {
        self.kinds.get(id as usize).copied()
    }

    /// The id of a vocabulary string (e.g. `<|im_end|>`).
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.vocab.get(token).copied()
    }

    /// The pre-tokenizer in use.
    pub fn pre_tokenizer(&self) -> &PreTokenizer {
        &self.pre
    }

    /// Encodes `text`. `add_special` adds BOS/EOS as the model asks;
    /// `parse_special` lets control tokens written in the text (`<|im_start|>`)
    /// become their ids (user-defined tokens always do).
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special
            && self.add_bos
            && let Some(b) = self.bos
        {
            out.push(b);
        }
        let owned;
        let text = if self.add_prefix_space && !text.starts_with(' ') {
            owned = format!(" {text}");
            owned.as_str()
        } else {
            text
        };
        let mut pos = 0;
        while pos < text.len() {
            match self.next_special(text, pos, parse_special) {
                Some((start, len, id)) => {
                    self.encode_plain(&text[pos..start], &mut out)?;
                    out.push(id);
                    pos = start + len;
                }
                None => {
                    self.encode_plain(&text[pos..], &mut out)?;
                    pos = text.len();
                }
            }
        }
        if add_special
            && self.add_eos
            && let Some(e) = self.eos
        {
            out.push(e);
        }
        Ok(out)
    }

    /// Leftmost special token at or after `from`: (byte offset, length, id).
    fn next_special(
        &self,
        text: &str,
        from: usize,
        parse_special: bool,
    ) -> Option<(usize, usize, u32)> {
        if self.specials.is_empty() {
            return None;
        }
        let bytes = text.as_bytes();
        for start in from..text.len() {
            if !text.is_char_boundary(start) {
                continue;
            }
            // Longest first, so `<|im_start|>` wins over a shorter prefix token.
            for (s, id, kind) in &self.specials {
                if (parse_special || *kind == TokenKind::UserDefined)
                    && bytes[start..].starts_with(s.as_bytes())
                {
                    return Some((start, s.len(), *id));
                }
            }
        }
        None
    }

    /// Encodes text that holds no special tokens.
    fn encode_plain(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        let mut ids = Vec::new();
        for range in self.pre.split(text) {
            let word = &text[range];
            if self.ignore_merges {
                let mapped: String = word.bytes().map(|b| self.b2u[b as usize]).collect();
                if let Some(&id) = self.vocab.get(&mapped) {
                    out.push(id);
                    continue;
                }
            }
            ids.clear();
            for b in word.bytes() {
                match self.byte_ids[b as usize].or(self.unk) {
                    Some(id) => ids.push(id),
                    None => {
                        return Err(LoadError::Tokenizer(format!(
                            "byte 0x{b:02x} has no token and the vocabulary has no unknown token"
                        )));
                    }
                }
            }
            bpe::merge(&ids, &self.merges, out);
        }
        Ok(())
    }

    /// The bytes a token stands for (control tokens: their text).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.token_bytes.get(id as usize).map_or(&[], Vec::as_slice)
    }

    /// Decodes ids to text; with `skip_special`, control tokens are left out.
    /// Ids outside the vocabulary decode to nothing.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            if skip_special && self.token_kind(id) == Some(TokenKind::Control) {
                continue;
            }
            bytes.extend_from_slice(self.token_bytes(id));
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Streaming decode of one token: returns the text that is complete.
    pub fn decode_stream(&self, dec: &mut StreamDecoder, id: u32, skip_special: bool) -> String {
        if skip_special && self.token_kind(id) == Some(TokenKind::Control) {
            return String::new();
        }
        dec.push_bytes(self.token_bytes(id))
    }
}

fn split_merge(m: &str, i: usize) -> Result<(String, String)> {
    // Tokens never hold a literal space (byte-level maps it to `Ġ`), so the
    // first space separates the pair.
    match m.split_once(' ') {
        Some((a, b)) if !a.is_empty() && !b.is_empty() => Ok((a.to_string(), b.to_string())),
        _ => Err(LoadError::Tokenizer(format!(
            "merge {i} `{m}` is not two tokens separated by a space"
        ))),
    }
}

#[cfg(test)]
mod tests;
