//! AVX-512 (F + BW + VL) row-block kernels: the body of `body.rs` at 16
//! lanes, f16 weights widened with `vcvtph2ps zmm`, the k tail masked.

use crate::simd::avx512::Avx512;

super::body::gemv_kernels! { isa: Avx512, feature: "avx512f,avx512bw,avx512vl,fma,f16c", needs: "AVX-512 F, BW and VL" }
