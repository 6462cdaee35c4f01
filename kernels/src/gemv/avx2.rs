//! AVX2 + FMA + F16C row-block kernels: the body of `body.rs` at 8 lanes,
//! f16 weights widened with `vcvtph2ps`.

use crate::simd::avx2::Avx2;

super::body::gemv_kernels! { isa: Avx2, feature: "avx2,fma,f16c", needs: "AVX2, FMA and F16C" }
