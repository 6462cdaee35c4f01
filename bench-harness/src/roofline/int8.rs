//! Register-resident int8 dot-product loops that measure the integer peak
//! of each int8 ISA lane: `vpdpbusd` (AVX-512 VNNI on zmm, AVX-VNNI on ymm),
//! `vpmaddubsw` summed by `vpaddw` (AVX2 without VNNI: the sequence its
//! quantized tiles use, i16 sums), `tdpbssd` (AMX-INT8 tiles), `sdot`
//! (FEAT_DotProd) and `smmla` (FEAT_I8MM). Each loop keeps
//! `accumulators` independent i32 chains `acc += dot(a, b)` in registers,
//! as the FMA loops do (`fma.rs`), so the loop is throughput-bound; no
//! memory is touched inside it.
//!
//! Work is counted the way the tuner's work model counts int8 kernels
//! (`tables::Work::flops`: an integer multiply-add is two operations), so a
//! kernel's GOP/s over this peak is a fraction of the same unit: one
//! `vpdpbusd zmm` is 16 lanes × 4 multiply-adds = 128 operations, one
//! `vpmaddubsw ymm` 16 i16 lanes × 2 = 64, one `tdpbssd` (a 16×64 by
//! 64×16 product into a 16×16 tile) 16 × 16 × 64 × 2 = 32768, one `sdot`
//! 4 × 4 × 2 = 32, one `smmla` (a 2×8 by 8×2 product) 2 × 2 × 8 × 2 = 64.
//! For AMX the "registers" are tiles: the operands one 16 × 64-byte tile
//! each, an accumulator a 16 × 16 tile of i32.

use crate::error::BenchError;
use serde::{Deserialize, Serialize};

/// An int8 dot-product lane. The names are the kernels' ISA names, which
/// is how a kernel variant finds its roof.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Int8Isa {
    /// `vpmaddubsw` then `vpaddw` on 256-bit registers (AVX2 without
    /// VNNI): u8 × s8 pairs summed, saturating, into i16 lanes.
    Avx2,
    /// `vpdpbusd` on 256-bit registers (AVX-VNNI, without AVX-512).
    AvxVnni,
    /// `vpdpbusd` on 512-bit registers (AVX512_VNNI).
    Avx512Vnni,
    /// `tdpbssd` on AMX tiles: signed × signed bytes, 16 × 16 i32 sums of
    /// 64 products each.
    Amx,
    /// `sdot v.4s, v.16b, v.16b`.
    NeonDotprod,
    /// `smmla v.4s, v.16b, v.16b`.
    NeonI8mm,
}

impl Int8Isa {
    pub const ALL: [Int8Isa; 6] = [
        Int8Isa::Avx2,
        Int8Isa::AvxVnni,
        Int8Isa::Avx512Vnni,
        Int8Isa::Amx,
        Int8Isa::NeonDotprod,
        Int8Isa::NeonI8mm,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Int8Isa::Avx2 => "avx2",
            Int8Isa::AvxVnni => "avx_vnni",
            Int8Isa::Avx512Vnni => "avx512_vnni",
            Int8Isa::Amx => "amx",
            Int8Isa::NeonDotprod => "neon_dotprod",
            Int8Isa::NeonI8mm => "neon_i8mm",
        }
    }

    /// The lane of a kernel ISA name (`avx512_vnni`, ...); `None` for an ISA
    /// without a measured int8 lane.
    pub fn from_name(s: &str) -> Option<Int8Isa> {
        Int8Isa::ALL.into_iter().find(|i| i.name() == s)
    }

    /// Whether every kernel on this ISA does integer work: the dot-product
    /// ISAs exist only in the integer families, while AVX2 also names the
    /// f32 kernels.
    pub fn integer_only(self) -> bool {
        self != Int8Isa::Avx2
    }

    /// Bytes per operand register (AMX: per operand tile, 16 rows of 64).
    pub fn bytes(self) -> usize {
        match self {
            Int8Isa::Avx2 | Int8Isa::AvxVnni => 32,
            Int8Isa::Avx512Vnni => 64,
            Int8Isa::Amx => AMX_TILE,
            Int8Isa::NeonDotprod | Int8Isa::NeonI8mm => 16,
        }
    }

    /// Accumulator lanes per register: i16 for AVX2's sums, else i32 (AMX:
    /// a 16 × 16 tile).
    pub fn lanes(self) -> usize {
        match self {
            Int8Isa::Avx2 => self.bytes() / 2,
            Int8Isa::Amx => 16 * 16,
            i => i.bytes() / 4,
        }
    }

    /// An accumulator lane's value as the register holds it: AVX2's i16
    /// lanes wrap at 16 bits (read back sign-extended), the others at 32.
    pub fn wrap(self, v: i32) -> i32 {
        match self {
            Int8Isa::Avx2 => v as i16 as i32,
            _ => v,
        }
    }

    /// Independent chains kept in registers: the FMA loops' counts, since
    /// the dot-product instructions' latency and pipe counts are of the
    /// same order as FMA's on the same cores.
    pub fn accumulators(self) -> usize {
        match self {
            Int8Isa::Avx2 | Int8Isa::AvxVnni | Int8Isa::Avx512Vnni => X86_ACC,
            Int8Isa::Amx => AMX_ACC,
            Int8Isa::NeonDotprod | Int8Isa::NeonI8mm => NEON_ACC,
        }
    }

    /// Multiply-adds of one instruction: 4 per i32 lane for a dot product,
    /// 2 per i16 lane for `vpmaddubsw`, 8 per output of the 2×2 `smmla` tile,
    /// 64 per output of the AMX tile.
    pub fn macs_per_instruction(self) -> usize {
        match self {
            Int8Isa::Avx2 => 2 * self.lanes(),
            Int8Isa::Amx => 64 * self.lanes(),
            Int8Isa::NeonI8mm => 4 * 8,
            i => 4 * i.lanes(),
        }
    }

    /// Whether this CPU runs the lane.
    pub fn is_available(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Int8Isa::Avx2 => is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Int8Isa::AvxVnni => {
                is_x86_feature_detected!("avx2") && is_x86_feature_detected!("avxvnni")
            }
            #[cfg(target_arch = "x86_64")]
            Int8Isa::Avx512Vnni => {
                is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vnni")
            }
            // Detection there also asks Linux for the tile state.
            Int8Isa::Amx => tiletune_kernels::Isa::Amx.is_available(),
            #[cfg(target_arch = "aarch64")]
            Int8Isa::NeonDotprod => std::arch::is_aarch64_feature_detected!("dotprod"),
            #[cfg(target_arch = "aarch64")]
            Int8Isa::NeonI8mm => std::arch::is_aarch64_feature_detected!("i8mm"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The lanes this CPU runs.
    pub fn available() -> Vec<Int8Isa> {
        Int8Isa::ALL
            .into_iter()
            .filter(|i| i.is_available())
            .collect()
    }

    /// Integer operations of `iters` iterations (2 per multiply-add).
    pub fn ops(self, iters: usize) -> u64 {
        2 * (self.macs_per_instruction() * self.accumulators()) as u64 * iters as u64
    }

    /// What one instruction adds to each lane of an accumulator, by the
    /// instruction's definition: `vpdpbusd` reads `a` as unsigned and `b` as
    /// signed bytes, four per lane; `vpmaddubsw` likewise two per i16 lane,
    /// the pair's sum saturated to i16; `sdot` both signed; `smmla` takes `a`
    /// and `b` as 2×8 row-major matrices and adds `a · bᵀ` in the lane order
    /// `[a0·b0, a0·b1, a1·b0, a1·b1]`; `tdpbssd` takes `a` as 16 rows of 64
    /// signed bytes and `b` as 16 rows of 16 groups of 4 (row `r`, group `n`:
    /// values `4r .. 4r + 4` of column `n`), and adds to lane `16m + n`
    /// `Σ_k a[m][k] · b[k / 4][4n + k % 4]`.
    pub fn step(self, a: &[i8], b: &[i8]) -> Vec<i32> {
        let dot = |x: &[i8], y: &[i8], unsigned_x: bool| -> i32 {
            x.iter()
                .zip(y)
                .map(|(&p, &q)| {
                    let p = if unsigned_x { p as u8 as i32 } else { p as i32 };
                    p * q as i32
                })
                .sum()
        };
        match self {
            Int8Isa::Avx2 => (0..self.lanes())
                .map(|l| {
                    dot(&a[2 * l..2 * l + 2], &b[2 * l..2 * l + 2], true)
                        .clamp(i16::MIN as i32, i16::MAX as i32)
                })
                .collect(),
            Int8Isa::AvxVnni | Int8Isa::Avx512Vnni => (0..self.lanes())
                .map(|l| dot(&a[4 * l..4 * l + 4], &b[4 * l..4 * l + 4], true))
                .collect(),
            Int8Isa::NeonDotprod => (0..self.lanes())
                .map(|l| dot(&a[4 * l..4 * l + 4], &b[4 * l..4 * l + 4], false))
                .collect(),
            Int8Isa::NeonI8mm => [(0, 0), (0, 1), (1, 0), (1, 1)]
                .map(|(i, j)| dot(&a[8 * i..8 * i + 8], &b[8 * j..8 * j + 8], false))
                .to_vec(),
            Int8Isa::Amx => (0..self.lanes())
                .map(|l| {
                    let (m, n) = (l / 16, l % 16);
                    (0..64)
                        .map(|k| a[64 * m + k] as i32 * b[64 * (k / 4) + 4 * n + k % 4] as i32)
                        .sum()
                })
                .collect(),
        }
    }
}

/// 12 of 16 (AVX2, AVX-VNNI) / 32 (AVX-512) registers, as the x86 FMA loops.
const X86_ACC: usize = 12;
/// 16 of 32 NEON registers, as the NEON FMA loop.
const NEON_ACC: usize = 16;
/// Four accumulator tiles of the eight, as the 2 × 2 blocking of a GEMM
/// keeps them; the other two hold the operands.
const AMX_ACC: usize = 4;
/// Bytes of one AMX operand tile: 16 rows of 64.
const AMX_TILE: usize = 16 * 64;

/// Runs `iters` iterations of the lane's loop on the operand registers `a`
/// and `b` (`bytes()` each). Accumulator `k` starts at `init[k]` in every
/// lane (truncated to i16 on AVX2); `out` receives the final registers
/// (`accumulators × lanes` values, accumulator-major, sign-extended),
/// wrapping on overflow as the instructions do.
/// Returns the operations done.
pub fn int8_loop(
    isa: Int8Isa,
    iters: usize,
    a: &[i8],
    b: &[i8],
    init: &[i32],
    out: &mut [i32],
) -> Result<u64, BenchError> {
    let (acc, lanes, bytes) = (isa.accumulators(), isa.lanes(), isa.bytes());
    if a.len() != bytes || b.len() != bytes || init.len() != acc || out.len() != acc * lanes {
        return Err(BenchError::InvalidConfig {
            reason: format!(
                "int8 loop {}: a and b need {bytes} bytes, init {acc} values and out {} (got {}, {}, {} and {})",
                isa.name(),
                acc * lanes,
                a.len(),
                b.len(),
                init.len(),
                out.len()
            ),
        });
    }
    if !isa.is_available() {
        return Err(BenchError::InvalidConfig {
            reason: format!("int8 lane {} is not available on this CPU", isa.name()),
        });
    }
    match isa {
        // SAFETY (all six): availability and the buffer sizes were checked just above.
        #[cfg(target_arch = "x86_64")]
        Int8Isa::Avx2 => unsafe { super::int8_x86::avx2::<X86_ACC>(iters, a, b, init, out) },
        #[cfg(target_arch = "x86_64")]
        Int8Isa::AvxVnni => unsafe { super::int8_x86::avx_vnni::<X86_ACC>(iters, a, b, init, out) },
        #[cfg(target_arch = "x86_64")]
        Int8Isa::Avx512Vnni => unsafe {
            super::int8_x86::avx512_vnni::<X86_ACC>(iters, a, b, init, out)
        },
        #[cfg(target_arch = "x86_64")]
        Int8Isa::Amx => unsafe { super::int8_x86::amx(iters, a, b, init, out) },
        #[cfg(target_arch = "aarch64")]
        Int8Isa::NeonDotprod => unsafe {
            super::int8_neon::dotprod::<NEON_ACC>(iters, a, b, init, out)
        },
        #[cfg(target_arch = "aarch64")]
        Int8Isa::NeonI8mm => unsafe { super::int8_neon::i8mm::<NEON_ACC>(iters, a, b, init, out) },
        #[allow(unreachable_patterns)]
        _ => unreachable!("availability checked"),
    }
    Ok(isa.ops(iters))
}

/// Operand registers for the peak runs: small values of both signs, so
/// the chains neither stay at zero nor depend on overflow.
pub fn operands(isa: Int8Isa) -> (Vec<i8>, Vec<i8>) {
    let n = isa.bytes();
    let a = (0..n).map(|i| (i % 7) as i8 - 3).collect();
    let b = (0..n).map(|i| (i % 5) as i8 - 2).collect();
    (a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_available_lane_adds_its_dot_products() {
        for isa in Int8Isa::available() {
            let n = isa.bytes();
            // Both signs and the extremes: vpdpbusd must read `a` unsigned.
            let a: Vec<i8> = (0..n).map(|i| (i as i32 * 37 - 128) as i8).collect();
            let b: Vec<i8> = (0..n).map(|i| (i as i32 * 53 + 11) as i8).collect();
            let step = isa.step(&a, &b);
            for iters in [0usize, 1, 7, 64, 1001] {
                let init: Vec<i32> = (0..isa.accumulators())
                    .map(|k| k as i32 * 1_000_003 - 5)
                    .collect();
                let mut out = vec![i32::MIN; isa.accumulators() * isa.lanes()];
                let ops = int8_loop(isa, iters, &a, &b, &init, &mut out).unwrap();
                assert_eq!(ops, isa.ops(iters));
                for (k, x0) in init.iter().enumerate() {
                    for (l, s) in step.iter().enumerate() {
                        let want = isa.wrap(x0.wrapping_add((iters as i32).wrapping_mul(*s)));
                        assert_eq!(
                            out[k * isa.lanes() + l],
                            want,
                            "{isa:?} iters={iters} acc={k} lane={l}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_reference_steps_follow_the_instruction_definitions() {
        // vpdpbusd: byte 0xff is 255 in `a`, -1 in `b`.
        let mut a = vec![0i8; 64];
        let mut b = vec![0i8; 64];
        a[..4].copy_from_slice(&[-1, 2, 0, 0]);
        b[..4].copy_from_slice(&[-1, 3, 0, 0]);
        assert_eq!(Int8Isa::Avx512Vnni.step(&a, &b)[0], -255 + 6);
        assert_eq!(Int8Isa::NeonDotprod.step(&a[..16], &b[..16])[0], 1 + 6);
        assert_eq!(Int8Isa::Avx2.step(&a[..32], &b[..32])[0], -255 + 6);
        // vpmaddubsw saturates the pair's sum: 2 · 255 · 127 > i16::MAX.
        let (a, b) = (vec![-1i8; 32], vec![127i8; 32]);
        assert_eq!(Int8Isa::Avx2.step(&a, &b)[15], i16::MAX as i32);
        assert_eq!(Int8Isa::Avx2.step(&a, &[-128i8; 32])[0], i16::MIN as i32);
        // smmla: lane 1 is row 0 of a with row 1 of b.
        let mut a = vec![0i8; 16];
        let mut b = vec![0i8; 16];
        a[0] = 2;
        b[8] = 5;
        assert_eq!(Int8Isa::NeonI8mm.step(&a, &b), vec![0, 10, 0, 0]);
        // tdpbssd: lane 16m + n takes row m of a and column n of b, whose
        // value k is byte 4n + k % 4 of b's row k / 4; both signed.
        let mut a = vec![0i8; 1024];
        let mut b = vec![0i8; 1024];
        a[64 + 5] = -2;
        b[64 + 4 * 3 + 1] = 7;
        let step = Int8Isa::Amx.step(&a, &b);
        assert_eq!(step[16 + 3], -14);
        assert_eq!(step.iter().filter(|&&x| x != 0).count(), 1);
        assert_eq!(Int8Isa::Amx.ops(1), 2 * 16 * 16 * 64 * 4);
        assert_eq!(Int8Isa::Avx512Vnni.ops(1), 2 * 64 * 12);
        assert_eq!(Int8Isa::NeonDotprod.ops(1), 2 * 16 * 16);
        assert_eq!(Int8Isa::NeonI8mm.ops(1), 2 * 32 * 16);
        assert_eq!(Int8Isa::AvxVnni.ops(3), 2 * 32 * 12 * 3);
        assert_eq!(Int8Isa::Avx2.ops(3), 2 * 32 * 12 * 3);
        assert_eq!(Int8Isa::Avx2.wrap(40_000), 40_000 - 65_536);
    }

    #[test]
    fn unavailable_lanes_and_bad_buffers_are_errors() {
        for isa in Int8Isa::ALL {
            assert_eq!(Int8Isa::from_name(isa.name()), Some(isa));
            let (a, b) = operands(isa);
            let init = vec![0; isa.accumulators()];
            let mut out = vec![0; isa.accumulators() * isa.lanes()];
            let r = int8_loop(isa, 1, &a, &b, &init, &mut out);
            assert_eq!(r.is_ok(), isa.is_available(), "{isa:?}");
            assert!(int8_loop(isa, 1, &a[1..], &b, &init, &mut out).is_err());
            assert!(int8_loop(isa, 1, &a, &b, &init[1..], &mut out).is_err());
        }
        assert_eq!(Int8Isa::from_name("avx512"), None);
        assert!(!Int8Isa::Avx2.integer_only() && Int8Isa::AvxVnni.integer_only());
        if cfg!(target_arch = "x86_64") {
            assert!(!Int8Isa::NeonDotprod.is_available());
        }
    }
}
