//! AVX-512F GEMM micro-kernels: 16 f32 lanes, 32 zmm registers
//! (`mr · nr/16` accumulators + `nr/16` W vectors + one broadcast ≤ 31),
//! ragged edges masked. Packing and f16 widening reuse the AVX2 code.

use crate::simd::avx512::Avx512;

// Wide tiles first: per FMA they need fewer A broadcasts (loads), which
// quick runs on Zen 5 favoured (6x64 ≈ 1.5× 14x32 at 1024³); the tuner
// decides per shape.
super::body::gemm_kernels! {
    isa: Avx512, feature: "avx512f", needs: "AVX-512F",
    packed: [(k6x64, 6, 4), (k8x48, 8, 3), (k4x64, 4, 4), (k8x32, 8, 2), (k14x32, 14, 2),
             (k12x32, 12, 2)],
    direct: [(d1x8_f32, d1x8_f16, 1, 8), (d2x8_f32, d2x8_f16, 2, 8),
             (d4x4_f32, d4x4_f16, 4, 4), (d3x6_f32, d3x6_f16, 3, 6)],
}
