//! Sessions (one sequence's KV cache on a model), step by step (prefill,
//! decode, the last logits, sampling with the CLI's samplers) and whole
//! generations, pulled token by token (`tt_generation_*`) or streamed to a
//! callback that can stop them (`tt_session_generate`).
//!
//! A session holds a reference to its model, and a generation to its
//! session, so either may be freed in any order. A session serves one
//! thread at a time: a call that finds it in use on another thread fails
//! with `TT_ERR_BUSY` instead of waiting; two sessions of one model run on
//! two threads at once.

use crate::ffi::{
    CapiError, Result, TtStatus, arg_opt_str, arg_out, arg_ref, arg_slice, give, guard, guard_void,
    try_lock,
};
use crate::model::TtModel;
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tiletune_runtime::engine::Engine;
use tiletune_runtime::models::{Generator, RunState};
use tiletune_runtime::sampling::{Sampler, SamplerConfig, StopCriteria, StopReason};

/// A sequence's KV cache on a model (opaque).
pub struct TtSession {
    shared: Arc<Shared>,
}

/// What a session and its generations share.
struct Shared {
    engine: Arc<Engine>,
    state: Mutex<RunState>,
    /// Raised by `tt_session_interrupt`, lowered when a generation starts.
    interrupt: Arc<AtomicBool>,
}

impl Shared {
    fn lock(&self) -> Result<MutexGuard<'_, RunState>> {
        try_lock(&self.state, "session")
    }
}

/// # Safety
/// `s` is NULL or a live session.
unsafe fn session_arg<'a>(s: *const TtSession) -> Result<&'a Arc<Shared>> {
    // SAFETY: forwarded.
    Ok(&unsafe { arg_ref(s, "session") }?.shared)
}

/// A new, empty session on `model` with room for the model's context.
///
/// Ownership: the caller owns `*out` and frees it with `tt_session_free`;
/// the session keeps the model alive.
/// Thread safety: any thread, concurrently.
///
/// # Safety
/// `model` is live; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_session_new(
    model: *const TtModel,
    out: *mut *mut TtSession,
) -> TtStatus {
    guard(|| {
        // SAFETY: checked by the helpers.
        let (m, out) = unsafe { (crate::model::model_arg(model)?, arg_out(out, "out")?) };
        *out = std::ptr::null_mut();
        let engine = m.engine.clone();
        let state = Mutex::new(engine.model.new_state());
        *out = Box::into_raw(Box::new(TtSession {
            shared: Arc::new(Shared {
                engine,
                state,
                interrupt: Arc::new(AtomicBool::new(false)),
            }),
        }));
        Ok(())
    })
}

/// Frees a session (NULL is ignored); a generation still open on it keeps
/// its cache until it is freed.
///
/// Thread safety: any thread, once no other call on this session runs.
///
/// # Safety
/// `session` came from `tt_session_new`, is not freed yet, and no other
/// call on it is running.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_session_free(session: *mut TtSession) {
    if !session.is_null() {
        // SAFETY: a box made by `tt_session_new`, freed once.
        guard_void(|| drop(unsafe { Box::from_raw(session) }));
    }
}

/// Positions held in the session's cache, into `*len`.
///
/// Thread safety: one thread at a time per session (`TT_ERR_BUSY`).
///
/// # Safety
/// `session` is live; `len` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_session_len(session: *const TtSession, len: *mut usize) -> TtStatus {
    guard(|| {
        // SAFETY: as documented.
        let (s, len) = unsafe { (session_arg(session)?, arg_out(len, "len")?) };
        *len = s.lock()?.len();
        Ok(())
    })
}

/// Keeps the first `len` positions of the cache (0 empties it): a chat
/// rewinding a turn.
///
/// Thread safety: one thread at a time per session (`TT_ERR_BUSY`).
///
/// # Safety
/// `session` is live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_session_truncate(session: *mut TtSession, len: usize) -> TtStatus {
    // SAFETY: forwarded.
    guard(|| {
        unsafe { session_arg(session) }?.lock()?.truncate(len);
        Ok(())
    })
}

/// Runs `n` tokens after what the cache holds (a prompt, or one decoded
/// token); their last position's logits are then what
/// `tt_session_logits` returns.
///
/// Thread safety: one thread at a time per session (`TT_ERR_BUSY`
/// otherwise); sessions of one model run concurrently.
///
/// # Safety
/// `session` is live; `ids` points to `n` ids.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_session_eval(
    session: *mut TtSession,
    ids: *const u32,
    n: usize,
) -> TtStatus {
    guard(|| {
        // SAFETY: as documented.
        let (s, ids) = unsafe { (session_arg(session)?, arg_slice(ids, n, "ids")?) };
        let mut st = s.lock()?;
        s.engine.model.forward(ids, &mut st, false)?;
        Ok(())
    })
}

/// The logits (`vocab` floats) of the last position `tt_session_eval`
/// ran.
///
/// Ownership: borrowed from the session: valid until the next call that
/// runs, truncates or frees it. Copy them to keep them.
/// Thread safety: as `tt_session_eval`.
///
/// # Safety
/// `session` is live; `logits` and `n` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_session_logits(
    session: *const TtSession,
    logits: *mut *const f32,
    n: *mut usize,
) -> TtStatus {
    guard(|| {
        // SAFETY: as documented.
        let (s, logits, n) = unsafe {
            (
                session_arg(session)?,
                arg_out(logits, "logits")?,
                arg_out(n, "n")?,
            )
        };
        (*logits, *n) = (std::ptr::null(), 0);
        let st = s.lock()?;
        let last = st.last_logits();
        if last.is_empty() {
            return Err(CapiError::arg(
                "session",
                "has run nothing yet; call tt_session_eval first",
            ));
        }
        (*logits, *n) = (last.as_ptr(), last.len());
        Ok(())
    })
}

/// Raises the session's stop flag: a generation running on it (or its
/// prompt's prefill) stops within one layer, with `TT_STOP_INTERRUPTED`.
/// The flag is lowered when the next generation starts.
///
/// Thread safety: any thread, while the session is in use elsewhere.
///
/// # Safety
/// `session` is live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_session_interrupt(session: *const TtSession) -> TtStatus {
    // SAFETY: forwarded.
    guard(|| {
        unsafe { session_arg(session) }?
            .interrupt
            .store(true, Ordering::Relaxed);
        Ok(())
    })
}

/// Sampling parameters, as `tiletune run`'s flags; temperature 0 is greedy.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TtSamplerParams {
    /// 0: greedy (the other filters are then ignored).
    pub temperature: f32,
    /// 0 keeps all tokens.
    pub top_k: u32,
    /// 1 keeps all.
    pub top_p: f32,
    /// 0 keeps all.
    pub min_p: f32,
    /// 1 is off.
    pub repeat_penalty: f32,
    /// How many recent tokens the penalty looks at.
    pub repeat_last_n: u32,
    pub seed: u64,
}

impl TtSamplerParams {
    fn sampler(&self) -> Result<Sampler> {
        Ok(Sampler::new(SamplerConfig {
            temperature: self.temperature,
            top_k: self.top_k as usize,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n as usize,
            seed: self.seed,
        })?)
    }
}

/// A sampler with its random state (opaque).
pub struct TtSampler {
    sampler: Mutex<Sampler>,
}

/// A sampler for `params`; invalid parameters are `TT_ERR_MODEL` with a
/// message naming the parameter.
///
/// Ownership: the caller owns `*out` and frees it with `tt_sampler_free`.
/// Thread safety: any thread.
///
/// # Safety
/// `params` points to valid parameters; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_sampler_new(
    params: *const TtSamplerParams,
    out: *mut *mut TtSampler,
) -> TtStatus {
    guard(|| {
        // SAFETY: checked by the helpers.
        let (p, out) = unsafe { (arg_ref(params, "params")?, arg_out(out, "out")?) };
        *out = std::ptr::null_mut();
        let sampler = Mutex::new(p.sampler()?);
        *out = Box::into_raw(Box::new(TtSampler { sampler }));
        Ok(())
    })
}

/// Frees a sampler (NULL is ignored).
///
/// Thread safety: any thread, once no other call on this sampler runs.
///
/// # Safety
/// `sampler` came from `tt_sampler_new` and is not freed yet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_sampler_free(sampler: *mut TtSampler) {
    if !sampler.is_null() {
        // SAFETY: a box made by `tt_sampler_new`, freed once.
        guard_void(|| drop(unsafe { Box::from_raw(sampler) }));
    }
}

/// Samples a token id from `n` logits given the ids so far (`history`, for
/// the repetition penalty) into `*token`.
///
/// Thread safety: one thread at a time per sampler (`TT_ERR_BUSY`).
///
/// # Safety
/// `sampler` is live; `logits` points to `n` floats, `history` to
/// `n_history` ids; `token` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_sampler_sample(
    sampler: *mut TtSampler,
    logits: *const f32,
    n: usize,
    history: *const u32,
    n_history: usize,
    token: *mut u32,
) -> TtStatus {
    guard(|| {
        // SAFETY: as documented.
        let (s, logits, history, token) = unsafe {
            (
                arg_ref(sampler, "sampler")?,
                arg_slice(logits, n, "logits")?,
                arg_slice(history, n_history, "history")?,
                arg_out(token, "token")?,
            )
        };
        let mut s = try_lock(&s.sampler, "sampler")?;
        *token = s.sample(logits, history)?;
        Ok(())
    })
}

/// Why a generation ended (`TT_STOP_NONE` while it goes on).
pub type TtStopReason = i32;
pub const TT_STOP_NONE: TtStopReason = 0;
/// An end-of-generation token (EOS, EOT, `<|im_end|>`).
pub const TT_STOP_EOG: TtStopReason = 1;
/// One of the stop strings appeared (it is not part of the text).
pub const TT_STOP_STRING: TtStopReason = 2;
/// `max_tokens` were generated.
pub const TT_STOP_MAX_TOKENS: TtStopReason = 3;
/// The session's context is full.
pub const TT_STOP_CONTEXT_FULL: TtStopReason = 4;
/// `tt_session_interrupt`, or the callback asked to stop.
pub const TT_STOP_INTERRUPTED: TtStopReason = 5;

fn stop_code(r: Option<StopReason>) -> TtStopReason {
    match r {
        None => TT_STOP_NONE,
        Some(StopReason::Eog) => TT_STOP_EOG,
        Some(StopReason::StopString) => TT_STOP_STRING,
        Some(StopReason::MaxTokens) => TT_STOP_MAX_TOKENS,
        Some(StopReason::ContextFull) => TT_STOP_CONTEXT_FULL,
        Some(StopReason::Interrupted) => TT_STOP_INTERRUPTED,
    }
}

/// How to generate; `tt_generate_options_default` fills `tiletune run`'s
/// defaults.
#[repr(C)]
pub struct TtGenerateOptions {
    pub sampler: TtSamplerParams,
    /// Most tokens to generate; 0: until an end-of-generation token or a
    /// full context.
    pub max_tokens: u32,
    /// Strings that end the generation (not shown); NULL when
    /// `n_stop_strings` is 0.
    pub stop_strings: *const *const c_char,
    pub n_stop_strings: usize,
}

/// Fills `opts` with `tiletune run`'s defaults: temperature 0.8, top-k 40,
/// top-p 0.95, min-p 0.05, no repetition penalty, seed 0, 64 tokens, no
/// stop strings.
///
/// Thread safety: any thread.
///
/// # Safety
/// `opts` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_generate_options_default(opts: *mut TtGenerateOptions) -> TtStatus {
    guard(|| {
        let d = SamplerConfig::default();
        // SAFETY: checked by the helper.
        *unsafe { arg_out(opts, "opts") }? = TtGenerateOptions {
            sampler: TtSamplerParams {
                temperature: d.temperature,
                top_k: d.top_k as u32,
                top_p: d.top_p,
                min_p: d.min_p,
                repeat_penalty: d.repeat_penalty,
                repeat_last_n: d.repeat_last_n as u32,
                seed: d.seed,
            },
            max_tokens: 64,
            stop_strings: std::ptr::null(),
            n_stop_strings: 0,
        };
        Ok(())
    })
}

/// A generation pulled token by token (opaque).
pub struct TtGeneration {
    session: Arc<Shared>,
    steps: Generator,
    /// The last step's text, NUL-terminated, lent to the caller.
    text: Vec<u8>,
}

/// One step of a generation.
#[repr(C)]
pub struct TtStep {
    /// Whether `token` holds a sampled id (false once the generation has
    /// ended, or when its prompt was interrupted before any token).
    pub has_token: bool,
    pub token: u32,
    /// Text now complete and safe to show (UTF-8, `text_len` bytes, also
    /// NUL-terminated; often empty). Borrowed: valid until the next call
    /// on this generation.
    pub text: *const c_char,
    pub text_len: usize,
    /// `TT_STOP_NONE` while the generation goes on; its reason on the last
    /// step and after.
    pub stop: TtStopReason,
}

/// Starts generating after what the session holds: `prompt` (`n` ids, at
/// least one) runs at the first `tt_generation_next`. The session's stop
/// flag is lowered.
///
/// Ownership: the caller owns `*out` and frees it with
/// `tt_generation_free`; it keeps the session (and model) alive. While it
/// is open, use the session only through it.
/// Thread safety: one thread at a time per generation.
///
/// # Safety
/// `session` is live; `prompt` points to `n` ids; `opts` to valid options;
/// `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_generation_start(
    session: *mut TtSession,
    prompt: *const u32,
    n: usize,
    opts: *const TtGenerateOptions,
    out: *mut *mut TtGeneration,
) -> TtStatus {
    guard(|| {
        // SAFETY: checked by the helpers.
        let out = unsafe { arg_out(out, "out") }?;
        *out = std::ptr::null_mut();
        // SAFETY: as documented.
        let (s, prompt, o) = unsafe {
            (
                session_arg(session)?,
                arg_slice(prompt, n, "prompt")?,
                arg_ref(opts, "opts")?,
            )
        };
        // SAFETY: forwarded.
        let steps = unsafe { generator(s, prompt, o) }?;
        *out = Box::into_raw(Box::new(TtGeneration {
            session: Arc::clone(s),
            steps,
            text: vec![0],
        }));
        Ok(())
    })
}

/// The runtime's generator for `prompt` with options `o` on `s`.
///
/// # Safety
/// `o`'s stop strings are `n_stop_strings` valid strings.
unsafe fn generator(s: &Arc<Shared>, prompt: &[u32], o: &TtGenerateOptions) -> Result<Generator> {
    if prompt.is_empty() {
        return Err(CapiError::arg(
            "prompt",
            "is empty; pass at least one token",
        ));
    }
    // SAFETY: forwarded.
    let stops = unsafe { arg_slice(o.stop_strings, o.n_stop_strings, "opts.stop_strings") }?;
    let stops: Vec<String> = stops
        .iter()
        // SAFETY: forwarded.
        .map(|&p| unsafe { arg_opt_str(p, "opts.stop_strings[i]") })
        .map(|r| r.map(|s| s.unwrap_or_default().to_string()))
        .collect::<Result<_>>()?;
    let eog = match s.engine.tokenizer() {
        Ok(t) => t.eog_ids(),
        Err(_) => s.engine.cfg.eos_ids.clone(),
    };
    let max = match o.max_tokens {
        0 => usize::MAX,
        n => n as usize,
    };
    s.interrupt.store(false, Ordering::Relaxed);
    let stop = StopCriteria::new(eog, stops, max).with_interrupt(Arc::clone(&s.interrupt));
    Ok(Generator::new(prompt, o.sampler.sampler()?, stop)?)
}

/// Runs the next step: the prompt (first call) or the last token, then
/// samples one token, into `*step`.
///
/// Thread safety: one thread at a time per generation.
///
/// # Safety
/// `generation` is live; `step` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_generation_next(
    generation: *mut TtGeneration,
    step: *mut TtStep,
) -> TtStatus {
    guard(|| {
        // SAFETY: as documented.
        let (g, out) = unsafe { (arg_out(generation, "generation")?, arg_out(step, "step")?) };
        g.text = vec![0];
        *out = TtStep {
            has_token: false,
            token: 0,
            text: g.text.as_ptr().cast(),
            text_len: 0,
            stop: stop_code(g.steps.stopped()),
        };
        let s = Arc::clone(&g.session);
        let mut st = s.lock()?;
        let tok = s.engine.tokenizer().ok();
        let Some(next) = g.steps.next_token(&s.engine.model, tok, &mut st, |_| {})? else {
            return Ok(());
        };
        g.text = next.text.into_bytes();
        let text_len = g.text.len();
        g.text.push(0);
        *out = TtStep {
            has_token: next.token.is_some(),
            token: next.token.unwrap_or(0),
            text: g.text.as_ptr().cast(),
            text_len,
            stop: stop_code(next.stop),
        };
        Ok(())
    })
}

/// Frees a generation (NULL is ignored). The session keeps what ran: the
/// prompt and every sampled token but the last.
///
/// Thread safety: any thread, once no other call on this generation runs.
///
/// # Safety
/// `generation` came from `tt_generation_start` and is not freed yet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_generation_free(generation: *mut TtGeneration) {
    if !generation.is_null() {
        // SAFETY: a box made by `tt_generation_start`, freed once.
        guard_void(|| drop(unsafe { Box::from_raw(generation) }));
    }
}

/// Called with each generated token and the text it completes (UTF-8,
/// `len` bytes, NUL-terminated, valid during the call); a non-zero return
/// stops the generation after this token.
pub type TtTokenCallback = Option<
    unsafe extern "C" fn(user: *mut c_void, token: u32, text: *const c_char, len: usize) -> i32,
>;

/// What `tt_session_generate` produced.
#[repr(C)]
pub struct TtGenerateResult {
    /// Why it ended (`TT_STOP_INTERRUPTED` when the callback stopped it).
    pub stop: TtStopReason,
    pub n_tokens: usize,
    pub prefill_seconds: f64,
    pub decode_seconds: f64,
}

/// Generates after what the session holds, as `tiletune run` does: runs
/// `prompt`, then samples until a stop condition, calling `on_token` (may
/// be NULL) with each token. `*tokens` receives the generated ids and
/// `*result` how it ended (both may be NULL if not wanted).
///
/// Ownership: `*tokens` is the caller's; free it with
/// `tt_tokens_free(tokens, n_tokens)`.
/// Thread safety: one thread at a time per session; the callback runs on
/// the calling thread and must not use this session.
///
/// # Safety
/// `session` is live, `prompt` points to `n` ids, `opts` to valid options;
/// `on_token` is NULL or callable with `user`; the out-pointers are NULL or
/// writable.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn tt_session_generate(
    session: *mut TtSession,
    prompt: *const u32,
    n: usize,
    opts: *const TtGenerateOptions,
    on_token: TtTokenCallback,
    user: *mut c_void,
    tokens: *mut *mut u32,
    n_tokens: *mut usize,
    result: *mut TtGenerateResult,
) -> TtStatus {
    guard(|| {
        // SAFETY: NULL or writable, as documented.
        let (tokens, n_tokens, result) =
            unsafe { (tokens.as_mut(), n_tokens.as_mut(), result.as_mut()) };
        if tokens.is_some() != n_tokens.is_some() {
            return Err(CapiError::arg(
                "tokens",
                "and n_tokens go together: pass both or neither",
            ));
        }
        // SAFETY: as documented.
        let (s, prompt, o) = unsafe {
            (
                session_arg(session)?,
                arg_slice(prompt, n, "prompt")?,
                arg_ref(opts, "opts")?,
            )
        };
        // SAFETY: forwarded.
        let mut steps = unsafe { generator(s, prompt, o) }?;
        let mut st = s.lock()?;
        let tok = s.engine.tokenizer().ok();
        let mut called_off = false;
        while let Some(step) = steps.next_token(&s.engine.model, tok, &mut st, |_| {})? {
            if let (Some(cb), Some(id)) = (on_token, step.token) {
                let mut text = step.text.into_bytes();
                let len = text.len();
                text.push(0);
                // SAFETY: the caller's callback, with its own `user`.
                if unsafe { cb(user, id, text.as_ptr().cast(), len) } != 0 && step.stop.is_none() {
                    called_off = true;
                    break;
                }
            }
        }
        let stopped = steps.stopped();
        let g = steps.finish();
        if let Some(r) = result {
            *r = TtGenerateResult {
                stop: if called_off {
                    TT_STOP_INTERRUPTED
                } else {
                    stop_code(stopped)
                },
                n_tokens: g.tokens.len(),
                prefill_seconds: g.prefill_time.as_secs_f64(),
                decode_seconds: g.decode_time.as_secs_f64(),
            };
        }
        if let (Some(t), Some(n)) = (tokens, n_tokens) {
            give(g.tokens, t, n);
        }
        Ok(())
    })
}
