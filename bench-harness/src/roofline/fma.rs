//! Register-resident multiply-add loops that measure the arithmetic peak of
//! each ISA lane. Each loop keeps `accumulators` independent chains
//! `acc = acc * m + c` in registers, enough to cover FMA latency × FMA pipes
//! of current cores (4 cycles × 2 pipes on Zen 4/5, Cortex-A76/X1; 4 × 4 on
//! Neoverse V1/V2), so the loop is throughput-bound, never latency-bound.
//! No memory is touched inside the loop.
//!
//! `scalar` is *not* fused: it is plain `a * m + c`, which is what scalar
//! reference code compiles to without `-C target-feature=+fma`, so it is the
//! ceiling that code can reach. The SIMD lanes use real FMA instructions.

use crate::error::BenchError;
use serde::{Deserialize, Serialize};

/// An ISA lane of the FMA peak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FmaIsa {
    Scalar,
    Avx2Fma,
    Avx512,
    Neon,
}

impl FmaIsa {
    pub const ALL: [FmaIsa; 4] = [
        FmaIsa::Scalar,
        FmaIsa::Avx2Fma,
        FmaIsa::Avx512,
        FmaIsa::Neon,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FmaIsa::Scalar => "scalar",
            FmaIsa::Avx2Fma => "avx2+fma",
            FmaIsa::Avx512 => "avx512",
            FmaIsa::Neon => "neon",
        }
    }

    /// f32 lanes per register.
    pub fn lanes(self) -> usize {
        match self {
            FmaIsa::Scalar => 1,
            FmaIsa::Avx2Fma => 8,
            FmaIsa::Avx512 => 16,
            FmaIsa::Neon => 4,
        }
    }

    /// Independent chains kept in registers.
    pub fn accumulators(self) -> usize {
        match self {
            FmaIsa::Scalar => SCALAR_ACC,
            FmaIsa::Avx2Fma | FmaIsa::Avx512 => X86_ACC,
            FmaIsa::Neon => NEON_ACC,
        }
    }

    /// Whether this CPU runs the lane.
    pub fn is_available(self) -> bool {
        match self {
            FmaIsa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            FmaIsa::Avx2Fma => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
            #[cfg(target_arch = "x86_64")]
            FmaIsa::Avx512 => is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "aarch64")]
            FmaIsa::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The lanes this CPU runs, scalar first.
    pub fn available() -> Vec<FmaIsa> {
        FmaIsa::ALL
            .into_iter()
            .filter(|i| i.is_available())
            .collect()
    }

    /// Floating-point operations of `iters` iterations (2 per multiply-add).
    pub fn flops(self, iters: usize) -> u64 {
        2 * (self.lanes() * self.accumulators()) as u64 * iters as u64
    }
}

const SCALAR_ACC: usize = 8;
/// 12 of 16 (AVX2) / 32 (AVX-512) registers; ≥ latency 4 × 2 pipes + margin.
const X86_ACC: usize = 12;
/// 16 of 32 NEON registers; covers 4 × 4 pipes on Neoverse V-class.
const NEON_ACC: usize = 16;

/// Runs `iters` iterations of the lane's loop. Accumulator `k` starts at
/// `init[k]` in every lane; `out` receives the final registers
/// (`accumulators × lanes` values, accumulator-major). Returns the flops done.
pub fn fma_loop(
    isa: FmaIsa,
    iters: usize,
    m: f32,
    c: f32,
    init: &[f32],
    out: &mut [f32],
) -> Result<u64, BenchError> {
    let (acc, lanes) = (isa.accumulators(), isa.lanes());
    if init.len() != acc || out.len() != acc * lanes {
        return Err(BenchError::InvalidConfig {
            reason: format!(
                "fma loop {}: init needs {acc} values and out {} (got {} and {})",
                isa.name(),
                acc * lanes,
                init.len(),
                out.len()
            ),
        });
    }
    if !isa.is_available() {
        return Err(BenchError::InvalidConfig {
            reason: format!("fma lane {} is not available on this CPU", isa.name()),
        });
    }
    match isa {
        FmaIsa::Scalar => scalar(iters, m, c, init, out),
        // SAFETY (all three): availability was checked just above.
        #[cfg(target_arch = "x86_64")]
        FmaIsa::Avx2Fma => unsafe { super::fma_x86::avx2::<X86_ACC>(iters, m, c, init, out) },
        #[cfg(target_arch = "x86_64")]
        FmaIsa::Avx512 => unsafe { super::fma_x86::avx512::<X86_ACC>(iters, m, c, init, out) },
        #[cfg(target_arch = "aarch64")]
        FmaIsa::Neon => unsafe { super::fma_neon::neon::<NEON_ACC>(iters, m, c, init, out) },
        #[allow(unreachable_patterns)]
        _ => unreachable!("availability checked"),
    }
    Ok(isa.flops(iters))
}

fn scalar(iters: usize, m: f32, c: f32, init: &[f32], out: &mut [f32]) {
    let mut acc = [0.0f32; SCALAR_ACC];
    acc.copy_from_slice(init);
    // black_box keeps m and c opaque so the chains are not folded.
    let (m, c) = (std::hint::black_box(m), std::hint::black_box(c));
    for _ in 0..iters {
        for a in &mut acc {
            *a = *a * m + c;
        }
    }
    out.copy_from_slice(&acc);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One chain by the definition: fused for SIMD lanes, unfused for scalar.
    fn reference(isa: FmaIsa, iters: usize, m: f32, c: f32, x0: f32) -> f32 {
        (0..iters).fold(x0, |x, _| match isa {
            FmaIsa::Scalar => x * m + c,
            _ => x.mul_add(m, c),
        })
    }

    #[test]
    fn every_available_lane_matches_its_reference_bit_for_bit() {
        let (m, c) = (0.999_7_f32, 0.031_f32);
        for isa in FmaIsa::available() {
            for iters in [0usize, 1, 7, 64, 1001] {
                let init: Vec<f32> = (0..isa.accumulators())
                    .map(|k| 0.1 + k as f32 * 0.37)
                    .collect();
                let mut out = vec![f32::NAN; isa.accumulators() * isa.lanes()];
                let flops = fma_loop(isa, iters, m, c, &init, &mut out).unwrap();
                assert_eq!(flops, isa.flops(iters));
                for (k, x0) in init.iter().enumerate() {
                    let want = reference(isa, iters, m, c, *x0);
                    for l in 0..isa.lanes() {
                        let got = out[k * isa.lanes() + l];
                        assert_eq!(
                            got.to_bits(),
                            want.to_bits(),
                            "{isa:?} iters={iters} acc={k} lane={l}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_native_simd_lane_is_found_and_bad_buffers_are_errors() {
        let avail = FmaIsa::available();
        assert_eq!(avail[0], FmaIsa::Scalar);
        if cfg!(target_arch = "aarch64") {
            assert!(avail.contains(&FmaIsa::Neon));
        }
        let isa = FmaIsa::Scalar;
        let mut out = vec![0.0; 3];
        assert!(fma_loop(isa, 1, 1.0, 1.0, &[0.0; 2], &mut out).is_err());
        assert_eq!(FmaIsa::Avx512.flops(10), 2 * 16 * 12 * 10);
        for isa in FmaIsa::ALL.into_iter().filter(|i| !i.is_available()) {
            let init = vec![0.0; isa.accumulators()];
            let mut out = vec![0.0; isa.accumulators() * isa.lanes()];
            assert!(fma_loop(isa, 1, 1.0, 1.0, &init, &mut out).is_err());
        }
    }
}
