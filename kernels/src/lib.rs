//! The kernel zoo: every compute kernel tiletune can tune or run.
//!
//! Each family lives in its own folder: `mod.rs` is the safe entry point (it
//! checks shapes once, then dispatches), `scalar.rs` is the plain-Rust
//! reference every other variant is tested against, and one file per ISA
//! (`avx2.rs`, `avx512.rs`, `neon.rs`, ...) holds the `#[target_feature]`
//! code. Dispatch happens at run time through [`Isa`], so one binary can run,
//! compare and record every variant the CPU supports.
//!
//! This crate does no I/O, times nothing and knows nothing about SQLite: it is
//! the thing that gets measured, not the thing that measures.

pub mod attention;
pub mod choice;
pub mod dtype;
pub mod eltwise;
pub mod embed;
pub mod error;
pub mod gemm;
pub mod gemv;
pub mod i8gemm;
pub mod isa;
pub mod matmul_rope;
pub mod mem;
pub mod norm;
pub mod pool;
pub mod prefetch;
pub mod qgemm;
pub mod qgemv;
mod qsimd;
pub mod quant;
pub mod rope;
mod simd;
pub mod sme;
pub mod softmax;
#[doc(hidden)]
pub mod testing;
pub mod tune;

pub use error::KernelError;
pub use isa::Isa;
pub use tune::{CpuCaps, Tunable};

/// Version of the kernels' numerical and parameter contract. Selector-table
/// rows carry it, so a table tuned with kernels whose parameters meant
/// something else is never applied. Bump it when a family's params struct
/// changes meaning, a variant's output changes, or what a stored timing
/// means changes (2: multi-threaded candidates are timed from inside their
/// pool, as the runtime calls them; version-1 timings paid a cold dispatch
/// the runtime does not, and their winners are not reused; 3: the quantized
/// GEMM's packs store MXFP4's and the K-quants' scales as GGUF codes).
pub const KERNEL_ABI: u32 = 3;

/// Result type of every fallible kernel entry point.
pub type Result<T> = std::result::Result<T, KernelError>;
