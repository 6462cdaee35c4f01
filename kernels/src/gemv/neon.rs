//! NEON row-block kernels: the body of `body.rs` at 4 lanes, f16 weights
//! widened with `fcvtl` (base ARMv8 floating point, so every aarch64 core
//! has it).

use crate::simd::neon::Neon;

super::body::gemv_kernels! { isa: Neon, feature: "neon", needs: "NEON" }
