//! AVX2 + FMA RMSNorm / LayerNorm: the rows of `body.rs` at 8 lanes.

use crate::simd::avx2::Avx2;

super::body::norm_rows! { isa: Avx2, feature: "avx2,fma", needs: "AVX2 + FMA" }
