//! AVX2 + FMA + F16C page kernels: the bodies of `body.rs` at 8 lanes, four
//! heads at a time two vectors wide (16 registers hold no more accumulators
//! beside the rows), f16 rows widened with `vcvtph2ps`, Q8_0 rows
//! `i8 → i32 → f32`.

super::body::page_kernels! { isa: crate::simd::avx2::Avx2, heads: 4, vecs: 2, feature: "avx2,fma,f16c", needs: "AVX2 + FMA + F16C" }
