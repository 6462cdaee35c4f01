//! What the C ABI's tests share: the CLI tests' tiny Llama GGUF (random
//! weights, 128 positions), and safe wrappers that turn the
//! ABI's out-parameters and strings into Rust values.

#![allow(dead_code)] // each test file uses a subset

use std::ffi::{CStr, CString, c_char};
use std::path::Path;
use tiletune_capi::*;

/// The tiny model's vocabulary: a..z, `Ġ`, two merges, `<s>`, `</s>`.
pub const BOS: u32 = 29;
pub const EOS: u32 = 30;

/// The CLI tests' tiny model (`tests/support/tiny_gguf.rs`), so the C ABI
/// and the CLI are tested on the same file.
#[path = "../../../tests/support/tiny_gguf.rs"]
mod tiny_gguf;
pub use tiny_gguf::tiny_model;

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
