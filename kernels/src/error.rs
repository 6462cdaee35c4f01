//! The one error type of the kernel crate. Errors are raised only by the safe
//! entry points, before any hot loop runs.

use crate::Isa;

/// What can go wrong when calling a kernel entry point.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum KernelError {
    /// A buffer's length does not match the shape it was called with.
    #[error("{op}: {what} has length {got}, expected {expected} for the given shape")]
    ShapeMismatch {
        op: &'static str,
        what: &'static str,
        expected: usize,
        got: usize,
    },
    /// The shape itself is not acceptable (e.g. a dimension that must be even).
    #[error("{op}: invalid shape: {reason}")]
    InvalidShape { op: &'static str, reason: String },
    /// The caller asked for a variant this CPU cannot run.
    #[error(
        "{op}: ISA variant `{isa}` is not available on this CPU; run `tiletune probe` to list the features it has"
    )]
    IsaUnavailable { op: &'static str, isa: Isa },
    /// The family has no implementation for this ISA (even though the CPU has it).
    #[error("{op}: no `{isa}` variant exists for this kernel family")]
    NoVariant { op: &'static str, isa: Isa },
    /// Tunable parameters outside their documented range.
    #[error("{op}: invalid parameters: {reason}")]
    InvalidParams { op: &'static str, reason: String },
    /// A thread count of zero or one that cannot be honoured.
    #[error("{op}: invalid thread count {threads}: must be at least 1")]
    InvalidThreads { op: &'static str, threads: usize },
}

/// Checks a buffer length against the length a shape implies.
pub fn check_len(
    op: &'static str,
    what: &'static str,
    got: usize,
    expected: usize,
) -> crate::Result<()> {
    if got == expected {
        Ok(())
    } else {
        Err(KernelError::ShapeMismatch {
            op,
            what,
            expected,
            got,
        })
    }
}
