//! NEON page kernels: the bodies of `body.rs` at 4 lanes, four heads at a
//! time, f16 rows widened with `fcvtl` (base ARMv8 floating point), Q8_0
//! rows `i8 → i16 → i32 → f32`.

super::body::page_kernels! { isa: crate::simd::neon::Neon, heads: 4, vecs: 4, feature: "neon", needs: "NEON" }
