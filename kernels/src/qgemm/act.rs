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
//! The row quantizer runs per ISA (`quantize_act_row` in `avx2.rs`,
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
    let (quantize, nb) = (act_row_fn(), k / QK);
    let dst = Disjoint::new(blocks);
    parallel_ranges(m, threads, 1, |rows| {
        // SAFETY: `blocks` holds m · nb blocks and this worker alone
        // writes those of its rows.
        let o = unsafe { dst.part(rows.start * nb..rows.end * nb) };
        quantize(&a[rows.start * k..rows.end * k], o);
    });
    Ok(())
}

/// Quantizes `x` (32 values per block) into `out`, block by block.
type ActRowFn = fn(&[f32], &mut [ActBlock]);

impl ActBlock {
    /// The block of quants `qs` (`Σq` of values 0..16 `sum_lo`, of all
    /// `sum`) whose `d` and `s = d·Σq` were rounded to f16 and widened
    /// back (`d16`, `s16`), as Q8_1 stores them.
    #[inline(always)]
    pub(super) fn new(d16: f32, s16: f32, sum_lo: i32, sum: i32, qs: [i8; QK]) -> Self {
        ActBlock {
            d: d16.to_le_bytes(),
            s: s16.to_le_bytes(),
            sum: sum.to_le_bytes(),
            sum_lo: sum_lo.to_le_bytes(),
            qs,
        }
    }

    /// As [`ActBlock::new`] from the unrounded `d` (`s = Σq · d`), with the
    /// f16 rounding `legacy::quantize_q8_1` uses.
    #[inline(always)]
    pub(super) fn from_f32_scale(d: f32, sum_lo: i32, sum: i32, qs: [i8; QK]) -> Self {
        let (d16, s16) = (F16Le::from_f32(d), F16Le::from_f32(sum as f32 * d));
        ActBlock::new(d16.to_f32(), s16.to_f32(), sum_lo, sum, qs)
    }
}

/// The scalar row quantizer: `legacy::quantize_q8_1` and its sums.
fn act_row_scalar(x: &[f32], out: &mut [ActBlock]) {
    for (o, x) in out.iter_mut().zip(x.chunks_exact(QK)) {
        let q = legacy::quantize_q8_1(x.try_into().expect("chunks of 32"));
        let amax = x.iter().fold(0.0f32, |a, &v| a.max(v.abs()));
        let sum_lo: i32 = q.qs[..QK / 2].iter().map(|&v| v as i32).sum();
        let sum = sum_lo + q.qs[QK / 2..].iter().map(|&v| v as i32).sum::<i32>();
        *o = ActBlock::from_f32_scale(amax / 127.0, sum_lo, sum, q.qs);
    }
}

/// The row quantizers this CPU runs, best first, each bit for bit the
/// scalar one (see `qgemm::avx512::quant16` for the rounding); scalar last.
fn act_row_fns() -> Vec<ActRowFn> {
    let mut v: Vec<ActRowFn> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if crate::Isa::Avx512.is_available() {
            // SAFETY: AVX-512 is available (checked above).
            v.push(|x, out| unsafe { super::avx512::quantize_act_row(x, out) });
        }
        if crate::Isa::Avx2.is_available() {
            // SAFETY: AVX2, FMA and F16C are available (`Isa::Avx2`, checked above).
            v.push(|x, out| unsafe { super::avx2::quantize_act_row(x, out) });
        }
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: NEON is baseline on aarch64.
    v.push(|x, out| unsafe { super::neon::quantize_act_row(x, out) });
    v.push(act_row_scalar);
    v
}

/// The best row quantizer this CPU runs (chosen once).
fn act_row_fn() -> ActRowFn {
    static BEST: std::sync::OnceLock<ActRowFn> = std::sync::OnceLock::new();
    *BEST.get_or_init(|| act_row_fns()[0])
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

    /// The scalar row quantizer stores `legacy::quantize_q8_1`'s block
    /// (its f16 `d` and `s` widened) and the sums of its quants; every row
    /// quantizer this CPU runs equals it bit for bit, over a whole row and
    /// over a row of one block: random blocks at several scales (up to f16
    /// overflow and underflow), blocks whose scaled values are exact ties
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
        let row: Vec<f32> = blocks.iter().flatten().copied().collect();
        let mut want = vec![ActBlock::default(); blocks.len()];
        act_row_scalar(&row, &mut want);
        for (i, (w, x)) in want.iter().zip(&blocks).enumerate() {
            let q = legacy::quantize_q8_1(x);
            let (d, s) = (q.d.to_f32(), q.s.to_f32());
            assert_eq!(w.qs, q.qs, "block {i}: quants vs legacy");
            assert_eq!(
                (w.d().to_bits(), w.s().to_bits()),
                (d.to_bits(), s.to_bits()),
                "block {i}"
            );
            let sum: i32 = q.qs.iter().map(|&v| v as i32).sum();
            let lo: i32 = q.qs[..QK / 2].iter().map(|&v| v as i32).sum();
            assert_eq!((w.sum(), w.sum_lo()), (sum, lo), "block {i}");
        }
        let fns = act_row_fns();
        assert!(fns.len() >= 2 || cfg!(not(any(target_arch = "x86_64", target_arch = "aarch64"))));
        for (f, fast) in fns.iter().enumerate() {
            // The whole row, and a row of one block (no neighbours).
            let mut got = vec![ActBlock::default(); blocks.len()];
            fast(&row, &mut got);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g, w, "quantizer {f}, block {i}: {:?}", blocks[i]);
            }
            let mut one = [ActBlock::default()];
            fast(&blocks[300], &mut one);
            assert_eq!(one[0], want[300], "quantizer {f}, a row of one block");
            // Ties went away from zero: 0.5 → 1, −0.5 → −1 (values j = 16, 15).
            let qs = got[300].qs;
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
            let mut want = vec![ActBlock::default(); m * (k / QK)];
            act_row_scalar(&a, &mut want);
            let blocks: &[ActBlock] = crate::quant::blocks::cast_blocks(&one).unwrap();
            assert!(blocks == want.as_slice(), "m={m} k={k}");
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
