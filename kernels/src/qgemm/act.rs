//! The activation operand of the quantized GEMM: each row of A is quantized
//! with ggml's Q8_1 quantizer (its `d` and quants are exactly Q8_0's) into
//! [`ActBlock`]s, stored with its scale widened to f32, Q8_1's `s` widened
//! to f32, and the integer sums of its quants and of its first 16 quants
//! (for the kinds with an offset; the half sum for Q6_K's two half-block
//! scales): 48 bytes per 32 values. For the legacy formats and MXFP4 these
//! are the blocks the W·A8 GEMV uses. The K-quant GEMV quantizes
//! activations to Q8_K (one scale per 256 values); the GEMM keeps Q8_1 (one
//! per 32, slightly more accurate), so for Q4_K and Q6_K the two agree
//! within the activation quantization difference, not bit for bit.
//!
//! The block quantizer runs per ISA (`quantize_act_block` in `avx2.rs`,
//! `avx512.rs`, `neon.rs`), each bit for bit the scalar one; the best the CPU
//! runs is chosen once.

use crate::Result;
use crate::error::check_len;
use crate::pool::{Disjoint, check_threads, parallel_ranges};
use crate::quant::blocks::{F16Le, QK, RawBlock, cast_blocks_mut};
use crate::quant::{QuantFormat, legacy};

/// One quantized activation block as the GEMM reads it. Fields are byte
/// arrays (alignment 1) so a scratch `Vec<u8>` can hold them.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ActBlock {
    /// Scale, f32 little-endian (the Q8_0/Q8_1 f16 scale, widened).
    pub d: [u8; 4],
    /// Q8_1's `s = d·Σq` as stored in f16, widened to f32 (little-endian).
    pub s: [u8; 4],
    /// `Σq`, i32 little-endian.
    pub sum: [u8; 4],
    /// `Σq` of values 0..16 (the low half), i32 little-endian: Q6_K's two
    /// half-block scales need the offset `−32·Σx` per half.
    pub sum_lo: [u8; 4],
    pub qs: [i8; QK],
}

const _: () = assert!(size_of::<ActBlock>() == 48 && align_of::<ActBlock>() == 1);

// SAFETY: repr(C), alignment 1 (asserted above), only u8/i8 arrays, no padding.
unsafe impl RawBlock for ActBlock {
    const QK: usize = QK;
}

impl ActBlock {
    #[inline]
    pub fn d(&self) -> f32 {
        f32::from_le_bytes(self.d)
    }

    #[inline]
    pub fn s(&self) -> f32 {
        f32::from_le_bytes(self.s)
    }

    #[inline]
    pub fn sum(&self) -> i32 {
        i32::from_le_bytes(self.sum)
    }

    /// `Σq` of values 0..16.
    #[inline]
    pub fn sum_lo(&self) -> i32 {
        i32::from_le_bytes(self.sum_lo)
    }

    /// `Σq` of values 16..32.
    #[inline]
    pub fn sum_hi(&self) -> i32 {
        self.sum() - self.sum_lo()
    }
}

/// Bytes of the quantized activations of `m` rows of `k` values.
pub fn act_bytes(m: usize, k: usize) -> usize {
    m * (k / QK) * ActBlock::BYTES
}

/// Quantizes `a` (`m` rows of `k` values) into `out` (exactly
/// [`act_bytes`]`(m, k)` bytes) with ggml's Q8_1 quantizer: its `d` and
/// quants are also exactly Q8_0's, so every format's GEMM sees the
/// activations its W·A8 GEMV would.
pub fn quantize_activations_into(a: &[f32], m: usize, k: usize, out: &mut [u8]) -> Result<()> {
    quantize_activations_on(a, m, k, out, 1)
}

/// As [`quantize_activations_into`], the rows split across `threads`
/// workers: the same bytes (each block is quantized on its own). A
/// prefill's GEMMs run on every thread, and a serial pass before each
/// would leave the others idle for it (docs/PERF.md, "the activations on
/// every thread").
pub fn quantize_activations_on(
    a: &[f32],
    m: usize,
    k: usize,
    out: &mut [u8],
    threads: usize,
) -> Result<()> {
    QuantFormat::Q8_0.check_k("qgemm_quantize", k)?;
    check_len("qgemm_quantize", "a", a.len(), m * k)?;
    check_len("qgemm_quantize", "out", out.len(), act_bytes(m, k))?;
    check_threads("qgemm_quantize", threads)?;
    let blocks: &mut [ActBlock] = cast_blocks_mut(out).expect("length checked above");
    let (block, nb) = (act_block_fn(), k / QK);
    let dst = Disjoint::new(blocks);
    parallel_ranges(m, threads, 1, |rows| {
        // SAFETY: `blocks` holds m · nb blocks and this worker alone
        // writes those of its rows.
        let o = unsafe { dst.part(rows.start * nb..rows.end * nb) };
        for (o, x) in o
            .iter_mut()
            .zip(a[rows.start * k..rows.end * k].chunks_exact(QK))
        {
            let (d, qs, sum_lo, sum) = block(x.try_into().expect("chunks of 32"));
            // As `legacy::quantize_q8_1` stores them (f16), widened.
            let (d16, s16) = (F16Le::from_f32(d), F16Le::from_f32(sum as f32 * d));
            *o = ActBlock {
                d: d16.to_f32().to_le_bytes(),
                s: s16.to_f32().to_le_bytes(),
                sum: sum.to_le_bytes(),
                sum_lo: sum_lo.to_le_bytes(),
                qs,
            };
        }
    });
    Ok(())
}

/// `(d, quants, Σ quants 0..16, Σ quants)` of one block.
type ActBlockFn = fn(&[f32; QK]) -> (f32, [i8; QK], i32, i32);

/// The scalar block quantizer: `legacy::quantize_q8_1` and its sums.
fn act_block_scalar(x: &[f32; QK]) -> (f32, [i8; QK], i32, i32) {
    let q = legacy::quantize_q8_1(x);
    let amax = x.iter().fold(0.0f32, |a, &v| a.max(v.abs()));
    let sum_lo: i32 = q.qs[..QK / 2].iter().map(|&v| v as i32).sum();
    let sum = sum_lo + q.qs[QK / 2..].iter().map(|&v| v as i32).sum::<i32>();
    (amax / 127.0, q.qs, sum_lo, sum)
}

/// The block quantizers this CPU runs, best first, each bit for bit the
/// scalar one (see `qgemm::avx512::quantize_act_block`); scalar last.
fn act_block_fns() -> Vec<ActBlockFn> {
    let mut v: Vec<ActBlockFn> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if crate::Isa::Avx512.is_available() {
            // SAFETY: AVX-512 is available (checked above).
            v.push(|x| unsafe { super::avx512::quantize_act_block(x) });
        }
        if crate::Isa::Avx2.is_available() {
            // SAFETY: AVX2 + FMA are available (checked above).
            v.push(|x| unsafe { super::avx2::quantize_act_block(x) });
        }
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: NEON is baseline on aarch64.
    v.push(|x| unsafe { super::neon::quantize_act_block(x) });
    v.push(act_block_scalar);
    v
}

/// The best block quantizer this CPU runs (chosen once).
fn act_block_fn() -> ActBlockFn {
    static BEST: std::sync::OnceLock<ActBlockFn> = std::sync::OnceLock::new();
    *BEST.get_or_init(|| act_block_fns()[0])
}

/// [`quantize_activations_into`] into a new buffer.
pub fn quantize_activations(a: &[f32], m: usize, k: usize) -> Result<Vec<u8>> {
    let mut out = vec![0u8; act_bytes(m, k)];
    quantize_activations_into(a, m, k, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Rng;

    /// The block quantizer this CPU runs equals `legacy::quantize_q8_1`
    /// (and the sums over its quants) bit for bit: random blocks at
    /// several scales, and blocks whose scaled values are exact ties
    /// (k + 0.5, both signs: half away from zero, not to even), zeros,
    /// subnormals and a lone extreme.
    #[test]
    fn activation_blocks_match_the_scalar_quantizer_bit_for_bit() {
        let mut rng = Rng::new(21);
        let mut blocks: Vec<[f32; QK]> = Vec::new();
        for scale in [1e-30f32, 1e-3, 1.0, 7.5, 1e4, 1e30] {
            for _ in 0..50 {
                blocks.push(std::array::from_fn(|_| rng.uniform(-1.0, 1.0) * scale));
            }
        }
        // amax 127: d = 1, so every value below is its own scaled value.
        blocks.push(std::array::from_fn(|j| match j {
            0 => 127.0,
            _ => (j as f32 - 16.0) + 0.5,
        }));
        blocks.push(std::array::from_fn(|j| match j {
            0 => -127.0,
            _ => -(j as f32) * 0.25,
        }));
        blocks.push([0.0; QK]);
        blocks.push(std::array::from_fn(|j| if j == 7 { -3.0 } else { 0.0 }));
        blocks.push(std::array::from_fn(|j| f32::from_bits(1 + j as u32)));
        let fns = act_block_fns();
        assert!(fns.len() >= 2 || cfg!(not(any(target_arch = "x86_64", target_arch = "aarch64"))));
        for (f, fast) in fns.iter().enumerate() {
            for (i, x) in blocks.iter().enumerate() {
                let (d, qs, lo, sum) = fast(x);
                let (wd, wqs, wlo, wsum) = act_block_scalar(x);
                assert_eq!(d.to_bits(), wd.to_bits(), "quantizer {f}, block {i}: d");
                assert_eq!(
                    (qs, lo, sum),
                    (wqs, wlo, wsum),
                    "quantizer {f}, block {i}: {x:?}"
                );
                let q = legacy::quantize_q8_1(x);
                assert_eq!(q.qs, qs, "quantizer {f}, block {i}: quants vs legacy");
            }
            // Ties went away from zero: 0.5 → 1, −0.5 → −1 (values j = 16, 15).
            let (_, qs, _, _) = fast(&blocks[300]);
            assert_eq!((qs[16], qs[15], qs[17]), (1, -1, 2), "quantizer {f}");
        }
    }

    /// Rows split across workers (more workers than rows too) give the
    /// bytes one thread gives, block by block from the block quantizer;
    /// zero threads and short buffers are refused.
    #[test]
    fn activations_on_many_threads_are_the_one_thread_bytes() {
        let mut rng = Rng::new(23);
        for (m, k) in [(1, 32), (3, 96), (17, 64), (64, 896)] {
            let a: Vec<f32> = (0..m * k).map(|_| rng.uniform(-2.0, 2.0)).collect();
            let mut one = vec![0u8; act_bytes(m, k)];
            quantize_activations_into(&a, m, k, &mut one).unwrap();
            let block = act_block_fn();
            let blocks: &[ActBlock] = crate::quant::blocks::cast_blocks(&one).unwrap();
            for (b, x) in blocks.iter().zip(a.chunks_exact(QK)) {
                let (_, qs, lo, sum) = block(x.try_into().unwrap());
                assert_eq!((b.qs, b.sum_lo(), b.sum()), (qs, lo, sum), "m={m} k={k}");
            }
            for threads in [2, 3, 5] {
                let mut many = vec![0xAAu8; act_bytes(m, k)];
                quantize_activations_on(&a, m, k, &mut many, threads).unwrap();
                assert!(many == one, "m={m} k={k} threads={threads}");
            }
        }
        let mut out = vec![0u8; act_bytes(2, 32)];
        assert!(quantize_activations_on(&[0.0; 64], 2, 32, &mut out, 0).is_err());
        assert!(quantize_activations_on(&[0.0; 64], 2, 32, &mut out[1..], 2).is_err());
    }
}
