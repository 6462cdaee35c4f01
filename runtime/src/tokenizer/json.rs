//! Reading a Hugging Face `tokenizer.json` into [`BpeParts`]: the BPE model's
//! vocab and merges (as `"a b"` strings or `["a", "b"]` pairs), the added
//! tokens, the pre-tokenizer chain (`ByteLevel`, `Split`, `Digits`,
//! `Sequence`) and the BOS/EOS a `TemplateProcessing` post-processor adds.

use super::{BpeParts, PreTokenizer, TokenKind, pretok};
use crate::error::{LoadError, Result};
use serde_json::Value;

fn err(what: impl Into<String>) -> LoadError {
    LoadError::Tokenizer(format!("tokenizer.json: {}", what.into()))
}

pub(super) fn parts_from_json(text: &str) -> Result<BpeParts> {
    let root: Value = serde_json::from_str(text).map_err(|e| err(format!("invalid json: {e}")))?;
    let model = root.get("model").ok_or_else(|| err("no `model`"))?;
    let mtype = model.get("type").and_then(Value::as_str).unwrap_or("BPE");
    if mtype != "BPE" {
        return Err(err(format!(
            "model type `{mtype}` is not supported (only BPE)"
        )));
    }
    if model.get("byte_fallback").and_then(Value::as_bool) == Some(true) {
        return Err(err(
            "byte_fallback BPE (sentencepiece-style) is not supported",
        ));
    }
    let vocab = model
        .get("vocab")
        .and_then(Value::as_object)
        .ok_or_else(|| err("model.vocab is not an object"))?;
    let mut entries: Vec<(u32, &str, TokenKind)> = Vec::with_capacity(vocab.len());
    for (tok, id) in vocab {
        let id = id
            .as_u64()
            .and_then(|i| u32::try_from(i).ok())
            .ok_or_else(|| err(format!("vocab id of `{tok}` is not a u32")))?;
        entries.push((id, tok, TokenKind::Normal));
    }
    if let Some(added) = root.get("added_tokens").and_then(Value::as_array) {
        for a in added {
            let id = a
                .get("id")
                .and_then(Value::as_u64)
                .and_then(|i| u32::try_from(i).ok())
                .ok_or_else(|| err("added token without a u32 id"))?;
            let content = a
                .get("content")
                .and_then(Value::as_str)
                .ok_or_else(|| err("added token without content"))?;
            let special = a.get("special").and_then(Value::as_bool).unwrap_or(false);
            let kind = if special {
                TokenKind::Control
            } else {
                TokenKind::UserDefined
            };
            entries.retain(|e| e.0 != id);
            entries.push((id, content, kind));
        }
    }
    let n = entries.iter().map(|e| e.0 as usize + 1).max().unwrap_or(0);
    // Ids must be dense; a vocabulary with gaps has no GGUF equivalent.
    if n != entries.len() || n > (1 << 24) {
        return Err(err(format!(
            "token ids are not dense 0..{} ({} entries)",
            n,
            entries.len()
        )));
    }
    let mut tokens = vec![String::new(); n];
    let mut kinds = vec![TokenKind::Normal; n];
    for (id, t, k) in entries {
        tokens[id as usize] = t.to_string();
        kinds[id as usize] = k;
    }

    let merges = match model.get("merges").and_then(Value::as_array) {
        None => Vec::new(),
        Some(ms) => ms
            .iter()
            .enumerate()
            .map(|(i, m)| match m {
                Value::String(s) => super::split_merge(s, i),
                Value::Array(pair) => match (
                    pair.first().and_then(Value::as_str),
                    pair.get(1).and_then(Value::as_str),
                ) {
                    (Some(a), Some(b)) if pair.len() == 2 => Ok((a.to_string(), b.to_string())),
                    _ => Err(err(format!("merge {i} is not a pair of strings"))),
                },
                _ => Err(err(format!("merge {i} is neither a string nor a pair"))),
            })
            .collect::<Result<Vec<_>>>()?,
    };

    let mut patterns = Vec::new();
    let mut add_prefix_space = false;
    if let Some(pt) = root.get("pre_tokenizer").filter(|v| !v.is_null()) {
        collect_pre(pt, &mut patterns, &mut add_prefix_space)?;
    }
    let pre = PreTokenizer::from_patterns("tokenizer.json", patterns)?;

    let (mut add_bos, mut add_eos, mut bos, mut eos) = (false, false, None, None);
    let token_id = |name: &str| tokens.iter().position(|t| t == name).map(|i| i as u32);
    if let Some(pp) = root.get("post_processor").filter(|v| !v.is_null()) {
        let mut singles = Vec::new();
        collect_template(pp, &mut singles);
        if let Some(first) = singles
            .first()
            .and_then(|(is_special, name)| is_special.then_some(name))
        {
            add_bos = true;
            bos = token_id(first);
        }
        if singles.len() > 1
            && let Some((true, name)) = singles.last()
        {
            add_eos = true;
            eos = token_id(name);
        }
    }
    // The usual names; generation_config.json may name others, which the
    // model loader passes on as extra end-of-generation ids.
    for name in ["<|endoftext|>", "<|end_of_text|>", "</s>"] {
        if eos.is_none() {
            eos = token_id(name);
        }
    }
    for name in ["<|begin_of_text|>", "<s>"] {
        if bos.is_none() {
            bos = token_id(name);
        }
    }
    let eog = ["<|im_end|>", "<|eot_id|>", "<|endoftext|>"]
        .iter()
        .filter_map(|n| token_id(n))
        .collect();
    Ok(BpeParts {
        tokens,
        kinds,
        merges,
        pre,
        bos,
        eos,
        eog,
        add_bos,
        add_eos,
        ignore_merges: model
            .get("ignore_merges")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        add_prefix_space,
    })
}

fn collect_pre(pt: &Value, patterns: &mut Vec<String>, add_prefix_space: &mut bool) -> Result<()> {
    let ty = pt.get("type").and_then(Value::as_str).unwrap_or("");
    match ty {
        "Sequence" => {
            for p in pt
                .get("pretokenizers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                collect_pre(p, patterns, add_prefix_space)?;
            }
        }
        "ByteLevel" => {
            if pt.get("add_prefix_space").and_then(Value::as_bool) == Some(true) {
                *add_prefix_space = true;
            }
            if pt.get("use_regex").and_then(Value::as_bool).unwrap_or(true) {
                patterns.push(pretok::GPT2.to_string());
            }
        }
        "Digits" => {
            let individual = pt
                .get("individual_digits")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            patterns.push(
                if individual {
                    pretok::DIGITS_INDIVIDUAL
                } else {
                    pretok::DIGITS
                }
                .to_string(),
            );
        }
        "Split" => {
            let behavior = pt
                .get("behavior")
                .and_then(Value::as_str)
                .unwrap_or("Isolated");
            if behavior != "Isolated" || pt.get("invert").and_then(Value::as_bool) == Some(true) {
                return Err(err(format!(
                    "Split with behavior `{behavior}` is not supported (only Isolated)"
                )));
            }
            let pat = pt
                .get("pattern")
                .ok_or_else(|| err("Split without a pattern"))?;
            if let Some(re) = pat.get("Regex").and_then(Value::as_str) {
                patterns.push(re.to_string());
            } else if let Some(s) = pat.get("String").and_then(Value::as_str) {
                patterns.push(fancy_regex::escape(s).into_owned());
            } else {
                return Err(err("Split pattern is neither Regex nor String"));
            }
        }
        other => return Err(err(format!("pre-tokenizer `{other}` is not supported"))),
    }
    Ok(())
}

/// The `single` template of a TemplateProcessing post-processor, as
/// (is special token, id-or-sequence name) items.
fn collect_template(pp: &Value, out: &mut Vec<(bool, String)>) {
    match pp.get("type").and_then(Value::as_str) {
        Some("Sequence") => {
            for p in pp
                .get("processors")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                collect_template(p, out);
            }
        }
        Some("TemplateProcessing") => {
            for item in pp
                .get("single")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(s) = item.get("SpecialToken") {
                    out.push((
                        true,
                        s.get("id")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                    ));
                } else if item.get("Sequence").is_some() {
                    out.push((false, String::new()));
                }
            }
        }
        _ => {}
    }
}
