//! tiletune's C ABI: one interface for every language an app ships in (C,
//! C++, Swift, Kotlin/Java through JNI, Python through `python/`), over the
//! same runtime and tune flow the `tiletune` binary drives. The header is
//! `capi/include/tiletune.h`, generated from these files by cbindgen.
//!
//! The rules every function follows:
//! - **Handles** are opaque pointers: `TtModel` (a loaded model),
//!   `TtSession` (one sequence's KV cache), `TtGeneration` (a generation
//!   pulled token by token), `TtSampler`, `TtTable` (a selector table) and
//!   `TtCampaign` (a tuning campaign). Each has a `_free` function that
//!   takes NULL. A session keeps its model alive and a generation its
//!   session, so they may be freed in any order.
//! - **Errors** are status codes (`TT_OK`, `TT_ERR_*`); the message of the
//!   last failed call is `tt_last_error()`, per thread. Every pointer
//!   argument is checked (NULL is `TT_ERR_NULL` naming it), strings must be
//!   UTF-8, and out-parameters are set to NULL/0 before anything can fail.
//! - **No panic crosses the boundary**: every entry point runs its body in
//!   [`ffi::guard`], which turns a panic into `TT_ERR_PANIC` with its
//!   message.
//! - **Ownership** is stated per function: a returned string is freed with
//!   `tt_string_free`, token ids with `tt_tokens_free`, floats with
//!   `tt_floats_free`; a "borrowed" result lives until the next call on its
//!   handle.
//! - **Threads**: a model is immutable and shared by any number of threads;
//!   a session, generation, sampler or campaign serves one thread at a time
//!   (`TT_ERR_BUSY` instead of waiting), so two sessions of one model run
//!   on two threads at once.
//!
//! **Architecture invariant:** this crate holds no logic the runtime or the
//! tuner own: each function checks its arguments, calls
//! `tiletune_runtime` or `tiletune_flow`, and hands the result over.

pub mod ffi;
pub mod model;
pub mod session;
pub mod tune;

pub use ffi::*;
pub use model::*;
pub use session::*;
pub use tune::*;

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::{CStr, c_char};
    use std::ptr::{null, null_mut};

    /// A panic inside an entry point's body is caught there: the call
    /// returns `TT_ERR_PANIC` with the panic's message, its out-parameter
    /// stays NULL, and the next call on the thread works.
    #[test]
    fn a_panic_in_an_entry_point_is_a_code() {
        let message = || {
            // SAFETY: the library's NUL-terminated message.
            unsafe { CStr::from_ptr(tt_last_error()) }
                .to_string_lossy()
                .into_owned()
        };
        let force = || ffi::PANIC_NEXT.with(|p| p.set(true));
        let mut s: *mut c_char = null_mut();
        force();
        // SAFETY: a valid out-pointer.
        assert_eq!(unsafe { tt_probe_json(&mut s) }, TT_ERR_PANIC);
        assert!(s.is_null());
        assert!(
            message().contains("internal error: forced by a test"),
            "{}",
            message()
        );
        let mut m = null_mut();
        force();
        // SAFETY: NULL options are checked after the (forced) panic point.
        assert_eq!(unsafe { tt_model_load(null(), &mut m) }, TT_ERR_PANIC);
        force();
        // SAFETY: as above.
        assert_eq!(
            unsafe { tt_table_open(null(), false, &mut null_mut()) },
            TT_ERR_PANIC
        );
        force();
        // A free function catches it too, and returns.
        // SAFETY: NULL is ignored.
        unsafe { tt_string_free(c"x".as_ptr().cast_mut()) };
        assert!(message().contains("forced by a test"));
        // SAFETY: a valid out-pointer.
        assert_eq!(unsafe { tt_probe_json(&mut s) }, TT_OK);
        assert!(tt_last_error().is_null());
        // SAFETY: the string just returned.
        unsafe { tt_string_free(s) };
    }

    /// Every exported function runs its body in the guard (the two that
    /// only return a static or thread-local pointer cannot panic).
    #[test]
    fn every_entry_point_is_guarded() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut seen = 0;
        for f in std::fs::read_dir(dir).unwrap() {
            let text = std::fs::read_to_string(f.unwrap().path()).unwrap();
            for item in text.split("#[unsafe(no_mangle)]").skip(1) {
                let name = item
                    .split("fn ")
                    .nth(1)
                    .and_then(|s| s.split('(').next())
                    .unwrap();
                seen += 1;
                if ["tt_last_error", "tt_version"].contains(&name) {
                    continue;
                }
                assert!(item.contains("guard"), "{name} does not run in the guard");
            }
        }
        assert!(seen > 30, "found only {seen} entry points");
    }
}
