//! The weight dtypes of the matrix families (`gemv`, `gemm` and their
//! quantized kernels), in the runtime's names, and the kernel crate's
//! format for each quantized one.

use tiletune_kernels::quant::QuantFormat;

/// Every weight dtype `gemv` and `gemm` take: f32, f16, then the GGUF
/// block formats.
pub const WEIGHT_DTYPES: &[&str] = &[
    "f32", "f16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q5_k", "q6_k", "mxfp4",
];

/// The quantized weight dtypes (the GGUF block formats of
/// [`WEIGHT_DTYPES`]).
pub const DTYPES: &[&str] = WEIGHT_DTYPES.split_at(2).1;

/// The kernel crate's format for a runtime dtype name (`q4_k` ↔ `Q4_K`).
pub fn format_of(dtype: &str) -> Option<QuantFormat> {
    DTYPES
        .contains(&dtype)
        .then(|| dtype.parse().ok())
        .flatten()
}
