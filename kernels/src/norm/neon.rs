//! NEON RMSNorm / LayerNorm: the rows of `body.rs` at 4 lanes.

use crate::simd::neon::Neon;

super::body::norm_rows! { isa: Neon, feature: "neon", needs: "NEON" }
