//! The boundary itself: status codes, the thread-local error message, the
//! guard every entry point runs its body in (no panic crosses into C), the
//! checks every pointer argument goes through, and the buffers the ABI
//! hands out with the one free function for each kind.

#[cfg(test)]
use std::cell::Cell;
use std::cell::RefCell;
use std::ffi::{CStr, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, MutexGuard, TryLockError};
use tiletune_flow::FlowError;
use tiletune_runtime::LoadError;
use tiletune_tables::TableError;

/// What a call returned: `TT_OK`, or an error whose message
/// `tt_last_error` gives on the same thread.
pub type TtStatus = i32;
/// The call succeeded.
pub const TT_OK: TtStatus = 0;
/// A required pointer argument was NULL.
pub const TT_ERR_NULL: TtStatus = 1;
/// An argument was out of range, or a string not UTF-8.
pub const TT_ERR_ARGUMENT: TtStatus = 2;
/// The model could not be loaded or run (file, tokenizer, context, sampler).
pub const TT_ERR_MODEL: TtStatus = 3;
/// The selector table could not be opened or read.
pub const TT_ERR_TABLE: TtStatus = 4;
/// The tuning campaign failed.
pub const TT_ERR_TUNE: TtStatus = 5;
/// The handle is in use by another thread (a session or sampler serves one
/// thread at a time).
pub const TT_ERR_BUSY: TtStatus = 6;
/// An internal error (a panic) was caught; the message says where. The
/// handle it happened on may be unusable: free it.
pub const TT_ERR_PANIC: TtStatus = 7;
/// `tt_campaign_stop` stopped the campaign; its measurements are kept and
/// running it again continues from them.
pub const TT_ERR_STOPPED: TtStatus = 8;

/// What went wrong in a call, with the message `tt_last_error` returns.
#[derive(Debug, thiserror::Error)]
pub enum CapiError {
    #[error("`{0}` is NULL; pass a valid pointer")]
    Null(&'static str),
    #[error("`{what}` {why}")]
    Argument { what: &'static str, why: String },
    #[error(transparent)]
    Model(#[from] LoadError),
    #[error(transparent)]
    Table(#[from] TableError),
    #[error(transparent)]
    Tune(#[from] FlowError),
    #[error(
        "the {0} is in use by another thread; a {0} serves one thread at a time (make one per thread)"
    )]
    Busy(&'static str),
    #[error(
        "the {0} was left inconsistent by an earlier internal error; free it and make a new one"
    )]
    Poisoned(&'static str),
    #[error("internal error: {0}; this is a bug in tiletune, please report it")]
    Panic(String),
}

impl CapiError {
    /// An argument error: `what` is the parameter, `why` says what to pass.
    pub fn arg(what: &'static str, why: impl Into<String>) -> Self {
        CapiError::Argument {
            what,
            why: why.into(),
        }
    }

    fn status(&self) -> TtStatus {
        match self {
            CapiError::Null(_) => TT_ERR_NULL,
            CapiError::Argument { .. } => TT_ERR_ARGUMENT,
            CapiError::Model(_) | CapiError::Poisoned(_) => TT_ERR_MODEL,
            CapiError::Table(_) => TT_ERR_TABLE,
            CapiError::Tune(FlowError::Table(_)) => TT_ERR_TABLE,
            CapiError::Tune(FlowError::Model(_)) => TT_ERR_MODEL,
            CapiError::Tune(FlowError::Stopped) => TT_ERR_STOPPED,
            CapiError::Tune(_) => TT_ERR_TUNE,
            CapiError::Busy(_) => TT_ERR_BUSY,
            CapiError::Panic(_) => TT_ERR_PANIC,
        }
    }

    /// The message with its causes, `a: b: c`, as the CLI prints errors.
    fn message(&self) -> String {
        let mut msg = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(c) = cause {
            msg.push_str(": ");
            msg.push_str(&c.to_string());
            cause = c.source();
        }
        msg
    }
}

pub type Result<T, E = CapiError> = std::result::Result<T, E>;

thread_local! {
    /// The last failed call's message on this thread, NUL-terminated.
    static LAST_ERROR: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// Tests set this to make the next guarded body panic, so the
    /// catching is tested through real entry points.
    #[cfg(test)]
    pub(crate) static PANIC_NEXT: Cell<bool> = const { Cell::new(false) };
}

fn set_error(msg: &str) {
    // An interior NUL would cut the C string short: show it escaped.
    let mut bytes = msg.replace('\0', "\\0").into_bytes();
    bytes.push(0);
    LAST_ERROR.with(|e| *e.borrow_mut() = bytes);
}

fn clear_error() {
    LAST_ERROR.with(|e| e.borrow_mut().clear());
}

/// The text of a caught panic's payload.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with no message".into())
}

/// Runs an entry point's body: its error, or a panic, becomes a status code
/// and this thread's error message; nothing unwinds into the caller.
pub fn guard(body: impl FnOnce() -> Result<()>) -> TtStatus {
    clear_error();
    let caught = catch_unwind(AssertUnwindSafe(|| {
        #[cfg(test)]
        if PANIC_NEXT.with(Cell::take) {
            panic!("forced by a test");
        }
        body()
    }));
    let err = match caught {
        Ok(Ok(())) => return TT_OK,
        Ok(Err(e)) => e,
        Err(p) => CapiError::Panic(panic_text(p.as_ref())),
    };
    set_error(&err.message());
    err.status()
}

/// [`guard`] for the functions that return nothing (the free functions):
/// a panic is caught and kept as this thread's error message.
pub fn guard_void(body: impl FnOnce()) {
    let _ = guard(|| {
        body();
        Ok(())
    });
}

/// The message of the last call on this thread that failed, NUL-terminated
/// UTF-8, or NULL when the last call succeeded.
///
/// Ownership: the string belongs to the library and stays valid until the
/// next `tt_` call on this thread; copy it to keep it.
/// Thread safety: any thread; each thread has its own message.
#[unsafe(no_mangle)]
pub extern "C" fn tt_last_error() -> *const c_char {
    LAST_ERROR.with(|e| {
        let e = e.borrow();
        if e.is_empty() {
            std::ptr::null()
        } else {
            e.as_ptr().cast()
        }
    })
}

/// The library's version, e.g. "0.1.0" (a static string; do not free).
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn tt_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// `p` as a shared reference, or an error naming the argument.
///
/// # Safety
/// `p` is NULL or points to a live, properly aligned `T`.
pub unsafe fn arg_ref<'a, T>(p: *const T, name: &'static str) -> Result<&'a T> {
    // SAFETY: the caller promises `p` is NULL or valid; NULL is refused.
    unsafe { p.as_ref() }.ok_or(CapiError::Null(name))
}

/// An out-parameter, or an error naming it.
///
/// # Safety
/// `p` is NULL or points to writable memory for a `T`.
pub unsafe fn arg_out<'a, T>(p: *mut T, name: &'static str) -> Result<&'a mut T> {
    // SAFETY: as above, for writing.
    unsafe { p.as_mut() }.ok_or(CapiError::Null(name))
}

/// A NUL-terminated UTF-8 string argument.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
pub unsafe fn arg_str<'a>(p: *const c_char, name: &'static str) -> Result<&'a str> {
    if p.is_null() {
        return Err(CapiError::Null(name));
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's promise.
    unsafe { CStr::from_ptr(p) }.to_str().map_err(|e| {
        CapiError::arg(
            name,
            format!(
                "is not UTF-8 (invalid byte at offset {}); pass UTF-8 text",
                e.valid_up_to()
            ),
        )
    })
}

/// An optional string argument: NULL is `None`.
///
/// # Safety
/// As [`arg_str`].
pub unsafe fn arg_opt_str<'a>(p: *const c_char, name: &'static str) -> Result<Option<&'a str>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded.
    unsafe { arg_str(p, name) }.map(Some)
}

/// An array argument of `n` elements; NULL is allowed only when `n` is 0.
///
/// # Safety
/// `p` is NULL or points to `n` initialized elements.
pub unsafe fn arg_slice<'a, T>(p: *const T, n: usize, name: &'static str) -> Result<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(CapiError::Null(name));
    }
    if n.checked_mul(size_of::<T>())
        .is_none_or(|b| b > isize::MAX as usize)
    {
        return Err(CapiError::arg(name, format!("cannot hold {n} elements")));
    }
    // SAFETY: non-NULL, `n` elements by the caller's promise, size checked.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// Locks a handle's state for one thread: another thread holding it is
/// `TT_ERR_BUSY` (a handle serves one thread at a time; waiting could
/// deadlock a caller's callback), a panic while it was held `Poisoned`.
pub fn try_lock<'a, T>(m: &'a Mutex<T>, what: &'static str) -> Result<MutexGuard<'a, T>> {
    m.try_lock().map_err(|e| match e {
        TryLockError::WouldBlock => CapiError::Busy(what),
        TryLockError::Poisoned(_) => CapiError::Poisoned(what),
    })
}

/// Hands `v` to the caller as a pointer and a length; the caller frees it
/// with the free function of its kind (which rebuilds the box).
pub fn give<T>(v: Vec<T>, out: &mut *mut T, len: &mut usize) {
    let b = v.into_boxed_slice();
    *len = b.len();
    *out = Box::into_raw(b).cast();
}

/// Takes back what [`give`] handed out.
///
/// # Safety
/// `p` and `n` come from one [`give`] of a `Vec<T>`, not freed since.
unsafe fn take_back<T>(p: *mut T, n: usize) {
    if !p.is_null() {
        // SAFETY: a box of `n` elements made by `give`.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n)) });
    }
}

/// Hands a string to the caller, NUL-terminated; freed with
/// `tt_string_free`.
pub fn give_string(s: String) -> *mut c_char {
    let mut bytes = s.replace('\0', "\\0").into_bytes();
    bytes.push(0);
    Box::into_raw(bytes.into_boxed_slice()).cast()
}

/// Frees a string the library returned (NULL is ignored).
///
/// Thread safety: any thread, once per string.
///
/// # Safety
/// `s` was returned by this library as an owned string and is not freed yet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_string_free(s: *mut c_char) {
    if s.is_null() {
        return;
    }
    guard_void(|| {
        // SAFETY: `give_string` made a boxed byte slice ending at the first
        // NUL (interior NULs were escaped), so its length is strlen + 1.
        unsafe {
            let n = CStr::from_ptr(s).to_bytes_with_nul().len();
            take_back(s.cast::<u8>(), n);
        }
    });
}

/// Frees a token array the library returned (NULL is ignored).
///
/// Thread safety: any thread, once per array.
///
/// # Safety
/// `ids` and `n` are exactly what the library returned, not freed yet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_tokens_free(ids: *mut u32, n: usize) {
    // SAFETY: forwarded.
    guard_void(|| unsafe { take_back(ids, n) });
}

/// Frees a float array the library returned (NULL is ignored).
///
/// Thread safety: any thread, once per array.
///
/// # Safety
/// `data` and `n` are exactly what the library returned, not freed yet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_floats_free(data: *mut f32, n: usize) {
    // SAFETY: forwarded.
    guard_void(|| unsafe { take_back(data, n) });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last_error() -> Option<String> {
        let p = tt_last_error();
        (!p.is_null()).then(|| {
            // SAFETY: the library's own NUL-terminated message.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        })
    }

    #[test]
    fn errors_and_panics_become_codes_and_messages() {
        assert_eq!(guard(|| Ok(())), TT_OK);
        assert_eq!(last_error(), None);
        assert_eq!(guard(|| Err(CapiError::Null("model"))), TT_ERR_NULL);
        assert_eq!(
            last_error().unwrap(),
            "`model` is NULL; pass a valid pointer"
        );
        assert_eq!(guard(|| panic!("boom {}", 7)), TT_ERR_PANIC);
        let msg = last_error().unwrap();
        assert!(msg.contains("internal error: boom 7"), "{msg}");
        // The next call starts clean, on this thread only.
        assert_eq!(guard(|| Ok(())), TT_OK);
        assert_eq!(last_error(), None);
        assert_eq!(guard(|| Err(CapiError::Busy("session"))), TT_ERR_BUSY);
        std::thread::spawn(|| assert_eq!(last_error(), None))
            .join()
            .unwrap();
        assert!(last_error().unwrap().contains("one thread at a time"));
    }

    #[test]
    fn arguments_are_checked() {
        // SAFETY: NULL and valid pointers only.
        unsafe {
            assert!(matches!(
                arg_str(std::ptr::null(), "path"),
                Err(CapiError::Null("path"))
            ));
            let bad = c"\xff\xfe".as_ptr();
            let e = arg_str(bad, "text").unwrap_err().to_string();
            assert!(e.contains("not UTF-8"), "{e}");
            assert_eq!(arg_opt_str(std::ptr::null(), "x").unwrap(), None);
            assert!(
                arg_slice::<u32>(std::ptr::null(), 0, "ids")
                    .unwrap()
                    .is_empty()
            );
            assert!(arg_slice::<u32>(std::ptr::null(), 3, "ids").is_err());
            let big = arg_slice::<u32>(std::ptr::dangling(), usize::MAX / 2, "ids");
            assert!(big.is_err());
        }
    }

    #[test]
    fn buffers_round_trip_through_their_free_functions() {
        let (mut p, mut n) = (std::ptr::null_mut(), 0);
        give(vec![1u32, 2, 3], &mut p, &mut n);
        assert_eq!(n, 3);
        // SAFETY: what `give` returned, freed once.
        unsafe { tt_tokens_free(p, n) };
        let s = give_string("a\0b".into());
        // SAFETY: an owned string from `give_string`.
        unsafe {
            assert_eq!(CStr::from_ptr(s).to_str().unwrap(), "a\\0b");
            tt_string_free(s);
            tt_string_free(std::ptr::null_mut());
            tt_floats_free(std::ptr::null_mut(), 5);
        }
    }
}
