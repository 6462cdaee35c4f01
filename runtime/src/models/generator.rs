//! Generation on the fast decoder one token at a time: [`Generator`] holds
//! what a generation carries between tokens (the sampler, the stop
//! criteria, the streaming detokenizer, the history), and each
//! [`Generator::next_token`] runs what the previous token left to run,
//! samples and says what text is now safe to show. [`generate`] is the loop
//! over it that `tiletune run` and `chat` drive; the C ABI and the Python
//! package step it themselves, so a caller pulls tokens instead of being
//! called back.

use super::fast::{Extra, FastModel, NEVER, RunState};
use crate::error::{LoadError, Result};
use crate::generate::Generation;
use crate::sampling::{Sampler, StopCriteria, StopReason};
use crate::tokenizer::{StreamDecoder, Tokenizer};
use std::time::{Duration, Instant};

/// One step of a generation.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenStep {
    /// The sampled id; `None` only when the prompt's prefill was
    /// interrupted before any token.
    pub token: Option<u32>,
    /// Text now complete and safe to show (may be empty: part of a UTF-8
    /// character, a control token, the start of a possible stop string).
    pub text: String,
    /// Set on the generation's last step.
    pub stop: Option<StopReason>,
}

/// Where a generation is.
#[derive(Clone, Debug)]
enum Phase {
    /// The prompt is not run yet.
    Prompt(Vec<u32>),
    /// This sampled token is still to be run through the model.
    Pending(u32),
    Done(StopReason),
}

/// A generation advanced one token per [`Generator::next_token`] call,
/// always with the same model, tokenizer and state.
#[derive(Clone, Debug)]
pub struct Generator {
    sampler: Sampler,
    stop: StopCriteria,
    dec: StreamDecoder,
    phase: Phase,
    /// Prompt and sampled ids: what the repetition penalty looks at.
    history: Vec<u32>,
    tokens: Vec<u32>,
    text: String,
    /// The logits the next token is sampled from.
    last: Vec<f32>,
    prefill_time: Duration,
    decode_time: Duration,
}

impl Generator {
    /// A generation that runs `prompt` after whatever the state holds (a
    /// chat keeps its history), then samples until `stop` says so.
    pub fn new(prompt: &[u32], sampler: Sampler, stop: StopCriteria) -> Result<Self> {
        if prompt.is_empty() {
            return Err(LoadError::Config(
                "a generation needs a prompt of at least one token".into(),
            ));
        }
        Ok(Generator {
            sampler,
            stop,
            dec: StreamDecoder::new(),
            phase: Phase::Prompt(prompt.to_vec()),
            history: prompt.to_vec(),
            tokens: Vec::new(),
            text: String::new(),
            last: Vec::new(),
            prefill_time: Duration::ZERO,
            decode_time: Duration::ZERO,
        })
    }

    /// Why the generation ended, once it has.
    pub fn stopped(&self) -> Option<StopReason> {
        match self.phase {
            Phase::Done(r) => Some(r),
            _ => None,
        }
    }

    /// The ids sampled so far.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Runs what is left to run (the prompt, or the last sampled token),
    /// samples the next token and returns it with the text it completes;
    /// `None` once the generation has ended. `on_logits` sees the logits
    /// each token is sampled from. Without a tokenizer no text is made and
    /// only `stop`'s ids, budget and interrupt end the generation. The last
    /// sampled token is not run through the model, so `st` then holds the
    /// prompt and all but that token.
    pub fn next_token(
        &mut self,
        model: &FastModel,
        tok: Option<&Tokenizer>,
        st: &mut RunState,
        on_logits: impl FnMut(&[f32]),
    ) -> Result<Option<TokenStep>> {
        self.next_token_extra(model, tok, st, Extra::default(), on_logits)
    }

    /// [`Generator::next_token`] with a multimodal prompt: `extra` (the
    /// prompt's image rows and M-RoPE positions,
    /// [`FastModel::forward_extra`]) is read only by the step that runs the
    /// prompt.
    pub fn next_token_extra(
        &mut self,
        model: &FastModel,
        tok: Option<&Tokenizer>,
        st: &mut RunState,
        extra: Extra<'_>,
        mut on_logits: impl FnMut(&[f32]),
    ) -> Result<Option<TokenStep>> {
        let t0 = Instant::now();
        let prefilled = matches!(self.phase, Phase::Prompt(_));
        match std::mem::replace(&mut self.phase, Phase::Done(StopReason::Interrupted)) {
            Phase::Done(r) => {
                self.phase = Phase::Done(r);
                return Ok(None);
            }
            Phase::Prompt(prompt) => {
                let flag = self.stop.interrupt_flag().unwrap_or(&NEVER);
                let ran = model.forward_extra(&prompt, extra, st, false, flag);
                self.prefill_time = t0.elapsed();
                match ran {
                    Ok(Some(first)) => self.last = first.to_vec(),
                    Ok(None) => {
                        return Ok(Some(TokenStep {
                            token: None,
                            text: String::new(),
                            stop: Some(StopReason::Interrupted),
                        }));
                    }
                    Err(e) => {
                        // A failed prefill leaves nothing to continue.
                        self.phase = Phase::Done(StopReason::Interrupted);
                        return Err(e);
                    }
                }
            }
            Phase::Pending(id) => match model.forward(&[id], st, false) {
                Ok(l) => self.last.copy_from_slice(l),
                Err(e) => {
                    self.phase = Phase::Pending(id);
                    return Err(e);
                }
            },
        }
        let t1 = Instant::now();
        on_logits(&self.last);
        let id = match self.sampler.sample(&self.last, &self.history) {
            Ok(id) => id,
            Err(e) => {
                self.phase = Phase::Done(StopReason::Interrupted);
                return Err(e);
            }
        };
        self.tokens.push(id);
        self.history.push(id);
        let piece = tok.map_or_else(String::new, |t| t.decode_stream(&mut self.dec, id, true));
        let step = self.stop.push(id, &piece);
        let mut text = step.text;
        let stop = step
            .stop
            .or((st.len() >= st.capacity()).then_some(StopReason::ContextFull));
        match stop {
            Some(reason) => {
                // What the decoder and the stop criteria still hold is shown,
                // unless it is (part of) the stop string that ended it.
                let rest = self.dec.flush() + &self.stop.finish();
                if reason != StopReason::StopString {
                    text.push_str(&rest);
                }
                self.phase = Phase::Done(reason);
            }
            None => self.phase = Phase::Pending(id),
        }
        self.text.push_str(&text);
        // Decode time counts from the first sampling on: everything but the
        // prompt's pass.
        self.decode_time += if prefilled { t1 } else { t0 }.elapsed();
        Ok(Some(TokenStep {
            token: Some(id),
            text,
            stop,
        }))
    }

    /// What the generation produced (its stop reason is
    /// [`StopReason::Interrupted`] when it was left before it ended).
    pub fn finish(self) -> Generation {
        let stop = self.stopped().unwrap_or(StopReason::Interrupted);
        Generation {
            tokens: self.tokens,
            text: self.text,
            stop,
            prefill_time: self.prefill_time,
            decode_time: self.decode_time,
        }
    }
}

/// [`crate::generate::generate`] on the fast model: runs `prompt` after
/// whatever `st` holds (a chat keeps its history), then samples until `stop`
/// says so, streaming text through `on_text`. The last sampled token is not
/// run through the model, so `st` then holds prompt + all but that token;
/// `on_logits` sees the logits of every sampling step.
#[allow(clippy::too_many_arguments)]
pub fn generate(
    model: &FastModel,
    tok: Option<&Tokenizer>,
    st: &mut RunState,
    prompt: &[u32],
    sampler: &mut Sampler,
    stop: &mut StopCriteria,
    on_text: impl FnMut(&str),
    on_logits: impl FnMut(&[f32]),
) -> Result<Generation> {
    generate_extra(
        model,
        tok,
        st,
        prompt,
        Extra::default(),
        sampler,
        stop,
        on_text,
        on_logits,
    )
}

/// [`generate`] with a multimodal prompt: `extra` gives the prompt's image
/// rows and M-RoPE positions ([`FastModel::forward_extra`]).
#[allow(clippy::too_many_arguments)]
pub fn generate_extra(
    model: &FastModel,
    tok: Option<&Tokenizer>,
    st: &mut RunState,
    prompt: &[u32],
    extra: Extra<'_>,
    sampler: &mut Sampler,
    stop: &mut StopCriteria,
    mut on_text: impl FnMut(&str),
    mut on_logits: impl FnMut(&[f32]),
) -> Result<Generation> {
    let mut g = Generator::new(prompt, sampler.clone(), stop.clone())?;
    let mut extra = Some(extra);
    loop {
        let e = extra.take().unwrap_or_default();
        let Some(step) = g.next_token_extra(model, tok, st, e, &mut on_logits)? else {
            break;
        };
        if !step.text.is_empty() {
            on_text(&step.text);
        }
    }
    *sampler = g.sampler.clone();
    *stop = g.stop.clone();
    Ok(g.finish())
}
