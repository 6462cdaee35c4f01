//! AVX-512F RMSNorm / LayerNorm: the rows of `body.rs` at 16 lanes, tails masked.

use crate::simd::avx512::Avx512;

super::body::norm_rows! { isa: Avx512, feature: "avx512f", needs: "AVX-512F" }
