//! AVX-512 (F + BW + VL) page kernels: the bodies of `body.rs` at 16
//! lanes, four heads at a time, with masked head-dim tails (f16 rows
//! widened with `vcvtph2ps zmm`, Q8_0 rows `i8 → i32 → f32`).

super::body::page_kernels! { isa: crate::simd::avx512::Avx512, heads: 4, vecs: 4, feature: "avx512f,avx512bw,avx512vl,fma,f16c", needs: "AVX-512 F/BW/VL + FMA + F16C" }
