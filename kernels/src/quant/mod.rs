//! Quantized block formats, bit-compatible with GGUF.
//!
//! [`blocks`] holds the `#[repr(C)]` layouts (sizes asserted at compile
//! time); [`legacy`], [`kquants`] and [`mxfp4`] hold per-block quantizers
//! (ports of ggml's reference quantizers, so the bytes equal what
//! `llama-quantize` writes without an imatrix) and dequantizers. This module
//! adds [`QuantFormat`], the formats with kernels (a subset of
//! [`GgmlType`], whose ids and names it takes), and the
//! generic row-level [`quantize`] / [`dequantize`].
//!
//! Compatibility is proven, not assumed: `kernels/tests/quant_vectors.rs`
//! reproduces vectors made by the `gguf` Python package
//! (`kernels/tests/vectors/gen_quant_vectors.py`).

pub mod blocks;
pub mod kquants;
pub mod legacy;
pub mod mxfp4;

pub use blocks::{
    BlockMxfp4, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K,
    BlockQ8_0, BlockQ8_1, BlockQ8K, F16Le, KSubBlock, QK, QK_K, RawBlock, blocks_as_bytes,
    cast_blocks, cast_blocks_mut,
};

use crate::dtype::GgmlType;
use crate::{KernelError, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A quantized block format (ggml's `ggml_type`, quantized members only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum QuantFormat {
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    /// Activation format paired with Q4_1 / Q5_1.
    Q8_1,
    Q4K,
    Q5K,
    Q6K,
    /// Activation format paired with the K-quants.
    Q8K,
    Mxfp4,
}

impl QuantFormat {
    /// Every format, weight formats first.
    pub const ALL: [QuantFormat; 11] = [
        QuantFormat::Q4_0,
        QuantFormat::Q4_1,
        QuantFormat::Q5_0,
        QuantFormat::Q5_1,
        QuantFormat::Q8_0,
        QuantFormat::Q4K,
        QuantFormat::Q5K,
        QuantFormat::Q6K,
        QuantFormat::Mxfp4,
        QuantFormat::Q8_1,
        QuantFormat::Q8K,
    ];

    /// The element type this format is.
    pub fn ggml(self) -> GgmlType {
        match self {
            QuantFormat::Q4_0 => GgmlType::Q4_0,
            QuantFormat::Q4_1 => GgmlType::Q4_1,
            QuantFormat::Q5_0 => GgmlType::Q5_0,
            QuantFormat::Q5_1 => GgmlType::Q5_1,
            QuantFormat::Q8_0 => GgmlType::Q8_0,
            QuantFormat::Q8_1 => GgmlType::Q8_1,
            QuantFormat::Q4K => GgmlType::Q4_K,
            QuantFormat::Q5K => GgmlType::Q5_K,
            QuantFormat::Q6K => GgmlType::Q6_K,
            QuantFormat::Q8K => GgmlType::Q8_K,
            QuantFormat::Mxfp4 => GgmlType::MXFP4,
        }
    }

    /// The format of an element type, if tiletune has kernels for it.
    pub fn of(t: GgmlType) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.ggml() == t)
    }

    /// The name ggml and GGUF use (`q4_0`, `q4_K`, `mxfp4`, …).
    pub fn name(self) -> &'static str {
        self.ggml().name()
    }

    /// Values per block.
    pub fn block_size(self) -> usize {
        match self {
            QuantFormat::Q4K | QuantFormat::Q5K | QuantFormat::Q6K | QuantFormat::Q8K => QK_K,
            _ => QK,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            QuantFormat::Q4_0 => BlockQ4_0::BYTES,
            QuantFormat::Q4_1 => BlockQ4_1::BYTES,
            QuantFormat::Q5_0 => BlockQ5_0::BYTES,
            QuantFormat::Q5_1 => BlockQ5_1::BYTES,
            QuantFormat::Q8_0 => BlockQ8_0::BYTES,
            QuantFormat::Q8_1 => BlockQ8_1::BYTES,
            QuantFormat::Q4K => BlockQ4K::BYTES,
            QuantFormat::Q5K => BlockQ5K::BYTES,
            QuantFormat::Q6K => BlockQ6K::BYTES,
            QuantFormat::Q8K => BlockQ8K::BYTES,
            QuantFormat::Mxfp4 => BlockMxfp4::BYTES,
        }
    }

    /// Bytes of a row of `k` values (`ggml_row_size`); `k` must be a
    /// multiple of [`block_size`](Self::block_size).
    pub fn row_bytes(self, k: usize) -> usize {
        k / self.block_size() * self.block_bytes()
    }

    /// Checks that `k` is a whole number of blocks.
    pub fn check_k(self, op: &'static str, k: usize) -> Result<()> {
        if k.is_multiple_of(self.block_size()) {
            Ok(())
        } else {
            Err(KernelError::InvalidShape {
                op,
                reason: format!(
                    "{k} values is not a multiple of the {} block size {}; pad the row to a whole number of blocks",
                    self.name(),
                    self.block_size()
                ),
            })
        }
    }
}

impl fmt::Display for QuantFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error returned when parsing an unknown format name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown quantized format `{0}`; expected one of q4_0, q4_1, q5_0, q5_1, q8_0, q8_1, q4_K, q5_K, q6_K, q8_K, mxfp4"
)]
pub struct ParseQuantFormatError(pub String);

impl FromStr for QuantFormat {
    type Err = ParseQuantFormatError;
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        GgmlType::parse(s)
            .and_then(Self::of)
            .ok_or_else(|| ParseQuantFormatError(s.to_string()))
    }
}

/// Quantizes `src` (a whole number of blocks) into a new GGUF byte buffer.
pub fn quantize(format: QuantFormat, src: &[f32]) -> Result<Vec<u8>> {
    format.check_k("quantize", src.len())?;
    let mut out = vec![0u8; format.row_bytes(src.len())];
    quantize_into(format, src, &mut out)?;
    Ok(out)
}

#[inline(always)]
fn each_block<B: RawBlock, const N: usize>(
    src: &[f32],
    dst: &mut [u8],
    f: impl Fn(&[f32; N]) -> B,
) {
    let blocks = cast_blocks_mut::<B>(dst).expect("length checked by the caller");
    for (b, x) in blocks.iter_mut().zip(src.chunks_exact(N)) {
        *b = f(x.try_into().expect("chunks_exact yields N values"));
    }
}

/// The K-quants' rows: [`each_block`] built for AVX-512 where the CPU has
/// it. Their sub-block searches run as SIMD lanes, and Q6_K's 16 sub-blocks
/// fill one AVX-512 register where the baseline build takes four SSE ones.
/// The bytes are the same either way (no fused multiply-adds on either
/// path). The quantizer is called from a closure written inside the
/// AVX-512 function, which inherits its features (a function item passed
/// in would run through a baseline-built call shim).
macro_rules! k_rows {
    ($name:ident, $f:path) => {
        fn $name(src: &[f32], dst: &mut [u8]) {
            #[cfg(target_arch = "x86_64")]
            if crate::Isa::Avx512.is_available() {
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq")]
                fn avx512(src: &[f32], dst: &mut [u8]) {
                    each_block(src, dst, |x| $f(x))
                }
                // SAFETY: the CPU has the features `avx512` is built for.
                return unsafe { avx512(src, dst) };
            }
            each_block(src, dst, $f)
        }
    };
}

k_rows!(q4_k_rows, kquants::quantize_q4_k);
k_rows!(q5_k_rows, kquants::quantize_q5_k);
k_rows!(q6_k_rows, kquants::quantize_q6_k);

fn each_block_out<B: RawBlock, const N: usize>(
    src: &[u8],
    dst: &mut [f32],
    f: impl Fn(&B, &mut [f32; N]),
) {
    let blocks = cast_blocks::<B>(src).expect("length checked by the caller");
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(N)) {
        f(b, y.try_into().expect("chunks_exact yields N values"));
    }
}

/// Quantizes `src` into `dst`, which must hold exactly
/// `format.row_bytes(src.len())` bytes.
pub fn quantize_into(format: QuantFormat, src: &[f32], dst: &mut [u8]) -> Result<()> {
    format.check_k("quantize", src.len())?;
    crate::error::check_len("quantize", "dst", dst.len(), format.row_bytes(src.len()))?;
    match format {
        QuantFormat::Q4_0 => each_block(src, dst, legacy::quantize_q4_0),
        QuantFormat::Q4_1 => each_block(src, dst, legacy::quantize_q4_1),
        QuantFormat::Q5_0 => each_block(src, dst, legacy::quantize_q5_0),
        QuantFormat::Q5_1 => each_block(src, dst, legacy::quantize_q5_1),
        QuantFormat::Q8_0 => each_block(src, dst, legacy::quantize_q8_0),
        QuantFormat::Q8_1 => each_block(src, dst, legacy::quantize_q8_1),
        QuantFormat::Q4K => q4_k_rows(src, dst),
        QuantFormat::Q5K => q5_k_rows(src, dst),
        QuantFormat::Q6K => q6_k_rows(src, dst),
        QuantFormat::Q8K => each_block(src, dst, kquants::quantize_q8_k),
        QuantFormat::Mxfp4 => each_block(src, dst, mxfp4::quantize_mxfp4),
    }
    Ok(())
}

/// Dequantizes the GGUF bytes `src` into `dst`; `src` must be a whole number
/// of blocks and `dst` must hold their values.
pub fn dequantize(format: QuantFormat, src: &[u8], dst: &mut [f32]) -> Result<()> {
    if !src.len().is_multiple_of(format.block_bytes()) {
        return Err(KernelError::InvalidShape {
            op: "dequantize",
            reason: format!(
                "{} bytes is not a whole number of {}-byte {} blocks; pass complete blocks",
                src.len(),
                format.block_bytes(),
                format.name()
            ),
        });
    }
    let n = src.len() / format.block_bytes() * format.block_size();
    crate::error::check_len("dequantize", "dst", dst.len(), n)?;
    match format {
        QuantFormat::Q4_0 => each_block_out(src, dst, legacy::dequantize_q4_0),
        QuantFormat::Q4_1 => each_block_out(src, dst, legacy::dequantize_q4_1),
        QuantFormat::Q5_0 => each_block_out(src, dst, legacy::dequantize_q5_0),
        QuantFormat::Q5_1 => each_block_out(src, dst, legacy::dequantize_q5_1),
        QuantFormat::Q8_0 => each_block_out(src, dst, legacy::dequantize_q8_0),
        QuantFormat::Q8_1 => each_block_out(src, dst, legacy::dequantize_q8_1),
        QuantFormat::Q4K => each_block_out(src, dst, kquants::dequantize_q4_k),
        QuantFormat::Q5K => each_block_out(src, dst, kquants::dequantize_q5_k),
        QuantFormat::Q6K => each_block_out(src, dst, kquants::dequantize_q6_k),
        QuantFormat::Q8K => each_block_out(src, dst, kquants::dequantize_q8_k),
        QuantFormat::Mxfp4 => each_block_out(src, dst, mxfp4::dequantize_mxfp4),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Rng;

    #[test]
    fn names_and_types_round_trip() {
        for f in QuantFormat::ALL {
            assert_eq!(f.name().parse::<QuantFormat>().unwrap(), f);
            assert_eq!(QuantFormat::of(f.ggml()), Some(f));
            assert_eq!(f.row_bytes(f.block_size() * 3), 3 * f.block_bytes());
            // The block layouts are the ggml type's.
            assert_eq!(f.block_size() as u64, f.ggml().block_size());
            assert_eq!(f.block_bytes() as u64, f.ggml().type_size());
        }
        assert!("q3_K".parse::<QuantFormat>().is_err());
        assert_eq!(QuantFormat::of(GgmlType::F32), None);
    }

    #[test]
    fn wrong_lengths_are_errors() {
        for f in QuantFormat::ALL {
            let bs = f.block_size();
            assert!(matches!(
                quantize(f, &vec![0.0; bs + 1]),
                Err(KernelError::InvalidShape { .. })
            ));
            let mut small = vec![0u8; f.block_bytes()];
            assert!(matches!(
                quantize_into(f, &vec![0.0; 2 * bs], &mut small),
                Err(KernelError::ShapeMismatch { .. })
            ));
            let mut y = vec![0.0; bs];
            assert!(dequantize(f, &vec![0u8; f.block_bytes() + 1], &mut y).is_err());
            assert!(matches!(
                dequantize(f, &vec![0u8; 2 * f.block_bytes()], &mut y),
                Err(KernelError::ShapeMismatch { .. })
            ));
            assert_eq!(quantize(f, &[]).unwrap(), Vec::<u8>::new());
        }
    }

    #[test]
    fn zeros_round_trip_to_zeros() {
        for f in QuantFormat::ALL {
            let x = vec![0.0; 2 * f.block_size()];
            let q = quantize(f, &x).unwrap();
            let mut y = vec![1.0; x.len()];
            dequantize(f, &q, &mut y).unwrap();
            assert!(y.iter().all(|&v| v == 0.0), "{f}");
        }
    }

    #[test]
    fn q8_k_bsums_are_block_sums() {
        let mut rng = Rng::new(5);
        let x: [f32; QK_K] = rng.vec_f32(QK_K).try_into().unwrap();
        let b = kquants::quantize_q8_k(&x);
        for j in 0..16 {
            let s: i32 = b.qs[16 * j..16 * j + 16].iter().map(|&q| q as i32).sum();
            assert_eq!(b.bsum(j) as i32, s);
        }
    }

    #[test]
    fn q8_1_sum_matches_quants() {
        let mut rng = Rng::new(6);
        let x: [f32; QK] = rng.vec_f32(QK).try_into().unwrap();
        let b = legacy::quantize_q8_1(&x);
        let s: i32 = b.qs.iter().map(|&q| q as i32).sum();
        assert_eq!(b.s, F16Le::from_f32(s as f32 * b.d.to_f32()));
    }

    #[test]
    fn e8m0_half_matches_powers_of_two() {
        for e in 2u8..=254 {
            assert_eq!(blocks::e8m0_to_f32_half(e), 2f32.powi(e as i32 - 128));
        }
        assert_eq!(blocks::e8m0_to_f32_half(1), 2f32.powi(-127));
        assert_eq!(blocks::e8m0_to_f32_half(0), 2f32.powi(-128));
    }
}
