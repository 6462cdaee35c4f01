//! The model handle: loading (a GGUF file or a Hugging Face folder, with or
//! without a selector table), what was loaded and its plan, the tokenizer
//! and chat template, logits of a token sequence, perplexity, and the SoC
//! probe. A model is immutable once loaded, so every function here may be
//! called from any number of threads at once.

use crate::ffi::{
    CapiError, Result, TtStatus, arg_opt_str, arg_out, arg_ref, arg_slice, arg_str, give,
    give_string, guard, guard_void,
};
use crate::tune::TtTable;
use std::ffi::c_char;
use std::path::PathBuf;
use std::sync::Arc;
use tiletune_kernels::attention::KvDtype;
use tiletune_kernels::qgemv::QMode;
use tiletune_runtime::chat::Message;
use tiletune_runtime::engine::{Engine, LoadOptions};
use tiletune_runtime::perplexity::{perplexity, tokens_of};
use tiletune_runtime::quantize::FileType;

/// A loaded model (opaque). Made by `tt_model_load`, freed by
/// `tt_model_free`; sessions made from it keep it alive after that.
pub struct TtModel {
    pub(crate) engine: Arc<Engine>,
}

// Sessions on other threads share the engine.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<Engine>();
};

/// KV cache pages of f32 (the default: the accurate one).
pub const TT_KV_F32: u32 = 0;
/// KV cache pages of f16 (half the memory; llama.cpp's default).
pub const TT_KV_F16: u32 = 1;
/// KV cache pages of Q8_0 (a quarter; head_dim must be a multiple of 32).
pub const TT_KV_Q8_0: u32 = 2;

/// Quantized weights run in the mode the plan chose.
pub const TT_QMODE_AUTO: u32 = 0;
/// Quantized weights with 8-bit activations (integer dot products).
pub const TT_QMODE_A8: u32 = 1;
/// Quantized weights with f32 activations.
pub const TT_QMODE_A32: u32 = 2;

/// How to load a model; `tt_model_options_default` fills the defaults.
#[repr(C)]
pub struct TtModelOptions {
    /// A GGUF file, or a Hugging Face folder (converted once to a cached
    /// GGUF image under $XDG_CACHE_HOME/tiletune/converted). Required.
    pub path: *const c_char,
    /// The selector table to plan with; NULL uses the user's table
    /// ($TILETUNE_DB, else the XDG data directory). A missing, corrupt or
    /// foreign table never stops the load: the defaults run, and the notes
    /// say why.
    pub table: *const TtTable,
    /// The selector table by path, when `table` is NULL (NULL: the user's
    /// table). A missing file is noted and the defaults run, as
    /// `tiletune run --db` does.
    pub table_path: *const c_char,
    /// Worker threads, also the table's thread budget; 0: every core.
    pub threads: u32,
    /// KV cache positions; 0: 4096. More than the model's trained context
    /// is clamped to it.
    pub ctx: u32,
    /// `TT_KV_F32`, `TT_KV_F16` or `TT_KV_Q8_0`.
    pub kv_type: u32,
    /// `TT_QMODE_AUTO`, `TT_QMODE_A8` or `TT_QMODE_A32`.
    pub qmode: u32,
    /// The file type a Hugging Face folder is converted to ("Q8_0",
    /// "Q4_K_M", ... as `tiletune quantize` takes them); NULL keeps the
    /// checkpoint's. Ignored for GGUF files.
    pub quant: *const c_char,
}

/// Fills `opts` with the defaults (path NULL: set it).
///
/// Thread safety: any thread.
///
/// # Safety
/// `opts` is NULL or points to writable memory for a `TtModelOptions`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_model_options_default(opts: *mut TtModelOptions) -> TtStatus {
    guard(|| {
        // SAFETY: checked by `arg_out`.
        *unsafe { arg_out(opts, "opts") }? = TtModelOptions {
            path: std::ptr::null(),
            table: std::ptr::null(),
            table_path: std::ptr::null(),
            threads: 0,
            ctx: 0,
            kv_type: TT_KV_F32,
            qmode: TT_QMODE_AUTO,
            quant: std::ptr::null(),
        };
        Ok(())
    })
}

/// The runtime's load options for `o`.
///
/// # Safety
/// `o`'s pointers are NULL or valid, as `tt_model_load` requires.
unsafe fn load_options(o: &TtModelOptions) -> Result<LoadOptions> {
    // SAFETY: forwarded from the caller.
    let (path, quant, table, table_path) = unsafe {
        (
            arg_str(o.path, "opts.path")?,
            arg_opt_str(o.quant, "opts.quant")?,
            o.table.as_ref(),
            arg_opt_str(o.table_path, "opts.table_path")?,
        )
    };
    let kv_type = match o.kv_type {
        TT_KV_F32 => KvDtype::F32,
        TT_KV_F16 => KvDtype::F16,
        TT_KV_Q8_0 => KvDtype::Q8_0,
        k => {
            return Err(CapiError::arg(
                "opts.kv_type",
                format!("{k} is not a KV type; use TT_KV_F32, TT_KV_F16 or TT_KV_Q8_0"),
            ));
        }
    };
    let qmode = match o.qmode {
        TT_QMODE_AUTO => None,
        TT_QMODE_A8 => Some(QMode::A8),
        TT_QMODE_A32 => Some(QMode::A32),
        q => {
            return Err(CapiError::arg(
                "opts.qmode",
                format!("{q} is not a mode; use TT_QMODE_AUTO, TT_QMODE_A8 or TT_QMODE_A32"),
            ));
        }
    };
    let quant = quant
        .map(FileType::parse)
        .transpose()
        .map_err(|e| CapiError::arg("opts.quant", e))?;
    Ok(LoadOptions {
        quant,
        db: table
            .map(|t| t.path.clone())
            .or(table_path.map(PathBuf::from)),
        threads: (o.threads > 0).then_some(o.threads as usize),
        qmode,
        kv_type,
        ctx: if o.ctx == 0 { 4096 } else { o.ctx as usize },
        ..LoadOptions::new(path)
    })
}

/// Loads a model: the file or folder, its tokenizer, the execution plan
/// from the selector table (its thread placement applied), the decoder.
/// On success `*out` is a new model; on failure it is NULL.
///
/// Ownership: the caller owns `*out` and frees it with `tt_model_free`.
/// Thread safety: any thread; loads may run concurrently.
///
/// # Safety
/// `opts` points to a valid `TtModelOptions` whose pointers are NULL or
/// valid; `out` points to writable memory for a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_model_load(
    opts: *const TtModelOptions,
    out: *mut *mut TtModel,
) -> TtStatus {
    guard(|| {
        // SAFETY: checked by the helpers.
        let out = unsafe { arg_out(out, "out") }?;
        *out = std::ptr::null_mut();
        // SAFETY: as documented.
        let opts = unsafe { load_options(arg_ref(opts, "opts")?) }?;
        let engine = Engine::load(&opts)?;
        *out = Box::into_raw(Box::new(TtModel {
            engine: Arc::new(engine),
        }));
        Ok(())
    })
}

/// Frees a model (NULL is ignored). Sessions made from it stay valid and
/// keep its weights until they are freed too.
///
/// Thread safety: any thread, once no other call on this handle is running.
///
/// # Safety
/// `model` came from `tt_model_load` and is not freed yet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_model_free(model: *mut TtModel) {
    if !model.is_null() {
        // SAFETY: a box made by `tt_model_load`, freed once.
        guard_void(|| drop(unsafe { Box::from_raw(model) }));
    }
}

/// The model as a shared reference.
///
/// # Safety
/// `m` is NULL or a live model.
pub(crate) unsafe fn model_arg<'a>(m: *const TtModel) -> Result<&'a TtModel> {
    // SAFETY: forwarded.
    unsafe { arg_ref(m, "model") }
}

/// Runs `f` on a live model in the guard and hands its string to the
/// caller in `*out`.
///
/// # Safety
/// As the public functions that call it document.
unsafe fn guard_model_string(
    m: *const TtModel,
    out: *mut *mut c_char,
    f: impl FnOnce(&Engine) -> Result<String>,
) -> TtStatus {
    guard(|| {
        // SAFETY: forwarded.
        let out = unsafe { arg_out(out, "out") }?;
        *out = std::ptr::null_mut();
        // SAFETY: forwarded.
        let e = &unsafe { model_arg(m) }?.engine;
        *out = give_string(f(e)?);
        Ok(())
    })
}

/// Runs `f` on a live model in the guard and hands its token ids to the
/// caller in `*ids` and `*n_ids`.
///
/// # Safety
/// As the public functions that call it document.
unsafe fn guard_model_ids(
    m: *const TtModel,
    ids: *mut *mut u32,
    n_ids: *mut usize,
    f: impl FnOnce(&Engine) -> Result<Vec<u32>>,
) -> TtStatus {
    guard(|| {
        // SAFETY: forwarded.
        let (ids, n_ids) = unsafe { (arg_out(ids, "ids")?, arg_out(n_ids, "n_ids")?) };
        (*ids, *n_ids) = (std::ptr::null_mut(), 0);
        // SAFETY: forwarded.
        let e = &unsafe { model_arg(m) }?.engine;
        give(f(e)?, ids, n_ids);
        Ok(())
    })
}

/// What was loaded, as JSON: architecture, sizes, vocabulary, special ids,
/// context, threads, load time, whether it has a tokenizer, and the load's
/// notes (an unusable table, a placement not applied).
///
/// Ownership: `*out` is the caller's; free it with `tt_string_free`.
/// Thread safety: any thread, concurrently.
///
/// # Safety
/// `model` is a live model; `out` points to writable memory for a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_model_info_json(
    model: *const TtModel,
    out: *mut *mut c_char,
) -> TtStatus {
    // SAFETY: forwarded.
    unsafe {
        guard_model_string(model, out, |e| {
            let c = &e.cfg;
            let tok = e.tokenizer().ok();
            Ok(serde_json::json!({
                "arch": c.arch.gguf_name(),
                "vocab": c.vocab,
                "hidden": c.hidden,
                "layers": c.n_layers,
                "heads": c.n_heads,
                "kv_heads": c.n_kv_heads,
                "head_dim": c.head_dim,
                "max_ctx": e.model.max_ctx(),
                "kv_type": e.model.kv_dtype().name(),
                "threads": e.plan.threads,
                "bos": tok.and_then(|t| t.bos()).or(c.bos_id),
                "eog": tok.map_or_else(|| c.eos_ids.clone(), |t| t.eog_ids()),
                "has_tokenizer": tok.is_some(),
                "load_seconds": e.load_time.as_secs_f64(),
                "notes": e.notes,
            })
            .to_string())
        })
    }
}

/// The execution plan as `tiletune plan` prints it: `json` true gives
/// `tiletune --json plan`'s document, false its text.
///
/// Ownership: `*out` is the caller's; free it with `tt_string_free`.
/// Thread safety: any thread, concurrently.
///
/// # Safety
/// `model` is a live model; `out` points to writable memory for a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_model_plan(
    model: *const TtModel,
    json: bool,
    out: *mut *mut c_char,
) -> TtStatus {
    // SAFETY: forwarded.
    unsafe {
        guard_model_string(model, out, |e| {
            Ok(match json {
                true => e.plan.to_json().to_string(),
                false => e.plan.to_string(),
            })
        })
    }
}

/// Tokenize with BOS (and the other special tokens the model adds).
pub const TT_TOKENIZE_ADD_SPECIAL: u32 = 1;
/// Read special-token text (`<|im_start|>`) in the input as those tokens.
pub const TT_TOKENIZE_PARSE_SPECIAL: u32 = 2;

/// Tokenizes UTF-8 `text` with `flags` (`TT_TOKENIZE_*`; `tiletune run`
/// encodes a prompt with both). On success `*ids` holds `*n_ids` ids.
///
/// Ownership: `*ids` is the caller's; free it with `tt_tokens_free(ids, n)`.
/// Thread safety: any thread, concurrently.
///
/// # Safety
/// `model` is a live model, `text` a NUL-terminated string, `ids` and
/// `n_ids` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_tokenize(
    model: *const TtModel,
    text: *const c_char,
    flags: u32,
    ids: *mut *mut u32,
    n_ids: *mut usize,
) -> TtStatus {
    // SAFETY: forwarded.
    unsafe {
        guard_model_ids(model, ids, n_ids, |e| {
            let text = arg_str(text, "text")?;
            if flags & !(TT_TOKENIZE_ADD_SPECIAL | TT_TOKENIZE_PARSE_SPECIAL) != 0 {
                return Err(CapiError::arg(
                    "flags",
                    format!("{flags:#x} has unknown bits; use TT_TOKENIZE_* flags"),
                ));
            }
            Ok(e.tokenizer()?.encode(
                text,
                flags & TT_TOKENIZE_ADD_SPECIAL != 0,
                flags & TT_TOKENIZE_PARSE_SPECIAL != 0,
            )?)
        })
    }
}

/// The text of `n` token ids (`skip_special`: control tokens leave no
/// text). Invalid UTF-8 becomes U+FFFD.
///
/// Ownership: `*out` is the caller's; free it with `tt_string_free`.
/// Thread safety: any thread, concurrently.
///
/// # Safety
/// `model` is a live model, `ids` points to `n` ids (or `n` is 0), `out`
/// is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_detokenize(
    model: *const TtModel,
    ids: *const u32,
    n: usize,
    skip_special: bool,
    out: *mut *mut c_char,
) -> TtStatus {
    // SAFETY: forwarded.
    unsafe {
        guard_model_string(model, out, |e| {
            let ids = arg_slice(ids, n, "ids")?;
            let tok = e.tokenizer()?;
            if let Some(&bad) = ids.iter().find(|&&t| t as usize >= tok.vocab_size()) {
                return Err(CapiError::arg(
                    "ids",
                    format!(
                        "holds {bad}, outside the {}-token vocabulary",
                        tok.vocab_size()
                    ),
                ));
            }
            Ok(tok.decode(ids, skip_special))
        })
    }
}

/// One chat turn: its role ("system", "user", "assistant") and content.
#[repr(C)]
pub struct TtChatMessage {
    pub role: *const c_char,
    pub content: *const c_char,
}

/// The messages of a chat call.
///
/// # Safety
/// `msgs` points to `n` messages whose strings are valid (or `n` is 0).
unsafe fn messages(msgs: *const TtChatMessage, n: usize) -> Result<Vec<Message>> {
    // SAFETY: forwarded.
    let msgs = unsafe { arg_slice(msgs, n, "messages") }?;
    msgs.iter()
        .map(|m| {
            // SAFETY: forwarded.
            let (role, content) = unsafe {
                (
                    arg_str(m.role, "messages[i].role")?,
                    arg_str(m.content, "messages[i].content")?,
                )
            };
            Ok(Message::new(role, content))
        })
        .collect()
}

/// The model's chat template (ChatML when the file has none) applied to
/// `n` messages; `add_generation_prompt` opens the assistant's turn.
///
/// Ownership: `*out` is the caller's; free it with `tt_string_free`.
/// Thread safety: any thread, concurrently.
///
/// # Safety
/// `model` is live, `msgs` points to `n` valid messages, `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_chat_apply_template(
    model: *const TtModel,
    msgs: *const TtChatMessage,
    n: usize,
    add_generation_prompt: bool,
    out: *mut *mut c_char,
) -> TtStatus {
    // SAFETY: forwarded.
    unsafe {
        guard_model_string(model, out, |e| {
            let msgs = messages(msgs, n)?;
            Ok(e.chat_template()?.render(&msgs, add_generation_prompt)?)
        })
    }
}

/// The prompt ids of a chat: the template applied with the assistant's
/// turn opened, encoded as `tiletune chat` encodes it (special tokens
/// parsed, BOS only if the template did not write it).
///
/// Ownership: `*ids` is the caller's; free it with `tt_tokens_free(ids, n)`.
/// Thread safety: any thread, concurrently.
///
/// # Safety
/// `model` is live, `msgs` points to `n` valid messages, `ids` and `n_ids`
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_chat_tokenize(
    model: *const TtModel,
    msgs: *const TtChatMessage,
    n: usize,
    ids: *mut *mut u32,
    n_ids: *mut usize,
) -> TtStatus {
    // SAFETY: forwarded.
    unsafe {
        guard_model_ids(model, ids, n_ids, |e| {
            let text = e.chat_template()?.render(&messages(msgs, n)?, true)?;
            Ok(e.encode_chat(&text)?)
        })
    }
}

/// The logits of every position of `ids` run from an empty context, as
/// `tiletune run --dump-logits` writes its `prompt_logits`: `n × vocab`
/// floats, row by row, in `*logits` (`*n_logits` of them).
///
/// Ownership: `*logits` is the caller's; free it with
/// `tt_floats_free(logits, n_logits)`. The buffer is the one the forward
/// pass wrote: no copy is made.
/// Thread safety: any thread, concurrently (each call has its own cache).
///
/// # Safety
/// `model` is live, `ids` points to `n` ids, `logits` and `n_logits`
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_model_logits(
    model: *const TtModel,
    ids: *const u32,
    n: usize,
    logits: *mut *mut f32,
    n_logits: *mut usize,
) -> TtStatus {
    guard(|| {
        // SAFETY: checked by the helpers.
        let (logits, n_logits) =
            unsafe { (arg_out(logits, "logits")?, arg_out(n_logits, "n_logits")?) };
        (*logits, *n_logits) = (std::ptr::null_mut(), 0);
        // SAFETY: as documented.
        let (e, ids) = unsafe { (&model_arg(model)?.engine, arg_slice(ids, n, "ids")?) };
        let mut st = e.model.new_state();
        e.model.forward(ids, &mut st, true)?;
        give(st.take_logits(), logits, n_logits);
        Ok(())
    })
}

/// A perplexity score (see `tt_model_perplexity`).
#[repr(C)]
pub struct TtPerplexity {
    /// exp of the mean negative log-likelihood of the scored tokens.
    pub ppl: f64,
    /// Chunks run.
    pub chunks: usize,
    /// Tokens per chunk.
    pub ctx: usize,
    /// Predictions scored (the second half of each chunk).
    pub scored: usize,
}

/// The perplexity of UTF-8 `text` as `tiletune ppl` (and llama-perplexity)
/// computes it: chunks of `ctx` tokens (0: 512; at most the model's
/// context), at most `max_chunks` of them (0: all).
///
/// Thread safety: any thread, concurrently (each call has its own cache).
///
/// # Safety
/// `model` is live, `text` NUL-terminated, `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_model_perplexity(
    model: *const TtModel,
    text: *const c_char,
    ctx: u32,
    max_chunks: u32,
    out: *mut TtPerplexity,
) -> TtStatus {
    guard(|| {
        // SAFETY: as documented.
        let (e, text, out) = unsafe {
            (
                &model_arg(model)?.engine,
                arg_str(text, "text")?,
                arg_out(out, "out")?,
            )
        };
        let (tokens, bos) = tokens_of(e.tokenizer()?, text)?;
        let ctx = if ctx == 0 { 512 } else { ctx as usize };
        let mut st = e.model.new_state();
        let chunks = (max_chunks > 0).then_some(max_chunks as usize);
        let n_ctx = ctx.min(e.model.max_ctx());
        let p = perplexity(&e.model, &mut st, &tokens, bos, n_ctx, chunks, |_, _| {})?;
        *out = TtPerplexity {
            ppl: p.ppl,
            chunks: p.chunks,
            ctx: p.ctx,
            scored: p.scored,
        };
        Ok(())
    })
}

/// This SoC as `tiletune probe` describes it (the `soc` object of
/// `tiletune --json probe`): cores, clusters, caches, ISA features,
/// fingerprint.
///
/// Ownership: `*out` is the caller's; free it with `tt_string_free`.
/// Thread safety: any thread, concurrently.
///
/// # Safety
/// `out` points to writable memory for a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_probe_json(out: *mut *mut c_char) -> TtStatus {
    guard(|| {
        // SAFETY: checked by the helper.
        let out = unsafe { arg_out(out, "out") }?;
        *out = std::ptr::null_mut();
        let soc = tiletune_soc::probe().map_err(tiletune_flow::FlowError::Probe)?;
        let json = serde_json::to_string(&soc).map_err(tiletune_flow::FlowError::Json)?;
        *out = give_string(json);
        Ok(())
    })
}
