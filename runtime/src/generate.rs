//! The generation loop: prefill the prompt, then sample one token at a time
//! until a stop criterion fires, streaming whole UTF-8 text as it goes. This
//! is what `tiletune run` and `chat` drive; it is written against the
//! reference [`Model`] and times prefill and decode separately.

use crate::error::Result;
use crate::models::{KvCache, Model};
use crate::sampling::{Sampler, StopCriteria, StopReason};
use crate::tokenizer::{StreamDecoder, Tokenizer};
use std::time::{Duration, Instant};

/// What a generation produced.
#[derive(Clone, Debug)]
pub struct Generation {
    /// Sampled ids, including a final end-of-generation id if one was sampled.
    pub tokens: Vec<u32>,
    /// The text shown (control tokens and stop strings left out).
    pub text: String,
    pub stop: StopReason,
    pub prefill_time: Duration,
    pub decode_time: Duration,
}

/// Runs `prompt` after whatever `cache` already holds (so a chat keeps its
/// history), then samples until `stop` says so. `on_text` receives text as
/// soon as it is complete and safe to show.
pub fn generate(
    model: &Model,
    tok: &Tokenizer,
    cache: &mut KvCache,
    prompt: &[u32],
    sampler: &mut Sampler,
    stop: &mut StopCriteria,
    mut on_text: impl FnMut(&str),
) -> Result<Generation> {
    let vocab = model.config().vocab;
    let t0 = Instant::now();
    let logits = model.forward(prompt, cache)?;
    let prefill_time = t0.elapsed();
    let mut last = logits[logits.len().saturating_sub(vocab)..].to_vec();
    let mut history = prompt.to_vec();
    let mut tokens = Vec::new();
    let mut text = String::new();
    let mut dec = StreamDecoder::new();
    let t1 = Instant::now();
    let reason = loop {
        let id = sampler.sample(&last, &history)?;
        tokens.push(id);
        history.push(id);
        let piece = tok.decode_stream(&mut dec, id, true);
        let step = stop.push(id, &piece);
        if !step.text.is_empty() {
            on_text(&step.text);
            text.push_str(&step.text);
        }
        if let Some(r) = step.stop {
            break r;
        }
        last = model.forward(&[id], cache)?;
    };
    let rest = dec.flush() + &stop.finish();
    if !rest.is_empty() && reason != StopReason::StopString {
        on_text(&rest);
        text.push_str(&rest);
    }
    Ok(Generation {
        tokens,
        text,
        stop: reason,
        prefill_time,
        decode_time: t1.elapsed(),
    })
}
