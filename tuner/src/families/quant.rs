//! The weight dtypes of the matrix families (`gemv`, `gemm` and their
//! quantized kernels), as kernel problems key them ([`GgmlType::key`]), and
//! the kernel crate's format for each quantized one.

use tiletune_kernels::dtype::GgmlType;
use tiletune_kernels::quant::QuantFormat;

/// Every weight dtype `gemv` and `gemm` take ([`GgmlType::MATRIX`]): f32,
/// f16, then the GGUF block formats.
pub const WEIGHT_DTYPES: &[&str] = &{
    let mut keys = [""; GgmlType::MATRIX.len()];
    let mut i = 0;
    while i < keys.len() {
        keys[i] = GgmlType::MATRIX[i].key();
        i += 1;
    }
    keys
};

/// The quantized weight dtypes (the GGUF block formats of
/// [`WEIGHT_DTYPES`]).
pub const DTYPES: &[&str] = WEIGHT_DTYPES.split_at(2).1;

/// The kernel crate's format for a quantized weight dtype (`q4_k` ↔ `Q4_K`).
pub fn format_of(dtype: &str) -> Option<QuantFormat> {
    GgmlType::parse(dtype)
        .filter(|t| GgmlType::MATRIX.contains(t))
        .and_then(QuantFormat::of)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quantized_dtypes_are_the_formats_with_kernels() {
        assert_eq!(
            WEIGHT_DTYPES,
            [
                "f32", "f16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q5_k", "q6_k",
                "mxfp4"
            ]
        );
        for d in DTYPES {
            assert_eq!(format_of(d).map(|f| f.ggml().key()), Some(*d));
        }
        for d in ["f32", "f16", "q8_1", "q8_k", "q2_k", "u4"] {
            assert_eq!(format_of(d), None, "{d}");
        }
    }
}
