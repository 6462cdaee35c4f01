//! The two operand layouts of the quantized GEMM: weights repacked once (at
//! model load) into NR-row interleaved groups, and activations quantized
//! once per call into [`ActBlock`]s.
//!
//! **Weights.** In GGUF each row's blocks are contiguous, so an integer dot
//! product leaves a row's partial sums spread over the lanes of a vector and
//! needs a horizontal reduction per row and block. Interleaving NR rows in
//! 4-byte groups (the idea of llama.cpp's `block_q4_0x8`) puts weight row r
//! in i32 lane r instead: one `vpmaddubsw`/`vpdpbusd`/`sdot` multiplies the
//! same 4 activation bytes (broadcast) by 4 bytes of each of NR rows, the NR
//! scales multiply a whole vector, and the lanes are C's columns. Per
//! (group of NR rows, block b) a [`PackedQ`] holds NR scales `d` as f32 (the
//! exact widening of the f16 in GGUF, so no conversion runs in the hot loop),
//! NR mins `m` for Q4_1, and the quants, chunk-major: byte
//! `4·NR·c + 4·r + t` is byte `4c + t` of row r's quants.
//!
//! - Q4_0, Q4_1 keep their nibbles (the layout is as small as GGUF's): chunk
//!   c ∈ 0..4 of nibble bytes; the low nibbles are values `4c + t`, the high
//!   ones values `16 + 4c + t`, both unsigned 0..15 (Q4_0's `-8` is applied
//!   through the activation block sum: `Σ(q−8)x = Σqx − 8Σx`).
//! - Q8_0 and Q5_0 become signed int8 values (Q5_0's `q − 16`, so the two
//!   share one kernel): chunk c ∈ 0..8 holds values `4c + t`.
//!
//! The last group is padded with zero rows (scale 0, quants 0) when NR does
//! not divide n; the driver writes only the real columns.
//!
//! **Activations.** Each row of A is quantized with ggml's Q8_0/Q8_1
//! quantizer, the exact blocks the W·A8 GEMV uses, and stored with its scale
//! widened to f32, Q8_1's `s` widened to f32, and the integer sum of its
//! quants (for Q4_0).

use crate::error::check_len;
use crate::quant::blocks::{
    BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ8_0, F16Le, QK, RawBlock, cast_blocks, cast_blocks_mut,
};
use crate::quant::{QuantFormat, legacy};
use crate::{KernelError, Result};

const OP: &str = "qgemm_repack";

/// The interleave widths (rows per group) any kernel reads.
pub const INTERLEAVES: [usize; 3] = [4, 8, 16];

/// How the packed quants are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Unsigned nibbles with offset 8, Q8 activation sums.
    Q4_0,
    /// Unsigned nibbles with a min, Q8_1 activation `s`.
    Q4_1,
    /// Signed int8 values (Q8_0, Q5_0).
    I8,
}

impl Kind {
    pub(crate) fn of(format: QuantFormat) -> Option<Kind> {
        match format {
            QuantFormat::Q4_0 => Some(Kind::Q4_0),
            QuantFormat::Q4_1 => Some(Kind::Q4_1),
            QuantFormat::Q8_0 | QuantFormat::Q5_0 => Some(Kind::I8),
            _ => None,
        }
    }

    /// Quant bytes per row and block.
    pub(crate) fn row_bytes(self) -> usize {
        match self {
            Kind::Q4_0 | Kind::Q4_1 => QK / 2,
            Kind::I8 => QK,
        }
    }
}

/// Quantized weights `(n, k)` repacked into groups of `nr` interleaved rows.
#[derive(Debug, Clone, PartialEq)]
pub struct PackedQ {
    format: QuantFormat,
    n: usize,
    k: usize,
    nr: usize,
    pub(crate) d: Vec<f32>,
    pub(crate) m: Vec<f32>,
    pub(crate) qs: Vec<u8>,
}

impl PackedQ {
    pub fn format(&self) -> QuantFormat {
        self.format
    }

    pub fn n(&self) -> usize {
        self.n
    }

    pub fn k(&self) -> usize {
        self.k
    }

    /// Rows per interleaved group.
    pub fn nr(&self) -> usize {
        self.nr
    }

    /// Groups of `nr` rows (the last one padded).
    pub fn groups(&self) -> usize {
        self.n.div_ceil(self.nr)
    }

    /// Bytes held (scales, mins and quants).
    pub fn bytes(&self) -> usize {
        4 * (self.d.len() + self.m.len()) + self.qs.len()
    }

    pub(crate) fn kind(&self) -> Kind {
        Kind::of(self.format).expect("checked by repack")
    }

    /// Row `row` of the weights dequantized into `out` (`k` values), equal
    /// to `quant::dequantize` of the GGUF row this was packed from. Lets a
    /// caller that keeps only the packed copy (the runtime's tied embedding)
    /// still look rows up.
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) -> Result<()> {
        if row >= self.n {
            return Err(KernelError::InvalidShape {
                op: OP,
                reason: format!("row {row} is outside the {} rows", self.n),
            });
        }
        check_len(OP, "out", out.len(), self.k)?;
        let (nr, nb) = (self.nr, self.k / QK);
        let kind = self.kind();
        let rb = kind.row_bytes();
        let (g, r) = (row / nr, row % nr);
        for (b, o) in out.chunks_exact_mut(QK).enumerate() {
            let gb = g * nb + b;
            let base = gb * nr * rb;
            let byte = |j: usize| self.qs[base + 4 * nr * (j / 4) + 4 * r + j % 4];
            let d = self.d[gb * nr + r];
            match kind {
                Kind::Q4_0 => {
                    for j in 0..QK / 2 {
                        let q = byte(j);
                        o[j] = ((q & 0x0F) as i32 - 8) as f32 * d;
                        o[j + QK / 2] = ((q >> 4) as i32 - 8) as f32 * d;
                    }
                }
                Kind::Q4_1 => {
                    let m = self.m[gb * nr + r];
                    for j in 0..QK / 2 {
                        let q = byte(j);
                        o[j] = (q & 0x0F) as f32 * d + m;
                        o[j + QK / 2] = (q >> 4) as f32 * d + m;
                    }
                }
                Kind::I8 => {
                    for (j, v) in o.iter_mut().enumerate() {
                        *v = byte(j) as i8 as f32 * d;
                    }
                }
            }
        }
        Ok(())
    }

    /// The GGUF bytes this was made from (the inverse of [`repack`]).
    pub fn unpack(&self) -> Vec<u8> {
        let (n, nr) = (self.n, self.nr);
        let nb = self.k / QK;
        let kind = self.kind();
        let rb = kind.row_bytes();
        let mut out = vec![0u8; n * self.format.row_bytes(self.k)];
        for row in 0..n {
            let (g, r) = (row / nr, row % nr);
            for b in 0..nb {
                let gb = g * nb + b;
                let base = gb * nr * rb;
                let mut q = [0u8; QK];
                for (j, v) in q.iter_mut().enumerate().take(rb) {
                    *v = self.qs[base + 4 * nr * (j / 4) + 4 * r + j % 4];
                }
                let d = F16Le::from_f32(self.d[gb * nr + r]);
                let at = (row * nb + b) * self.format.block_bytes();
                let dst = &mut out[at..at + self.format.block_bytes()];
                match self.format {
                    QuantFormat::Q4_0 => {
                        let blk: &mut [BlockQ4_0] = cast_blocks_mut(dst).expect("one block");
                        blk[0].d = d;
                        blk[0].qs.copy_from_slice(&q[..QK / 2]);
                    }
                    QuantFormat::Q4_1 => {
                        let blk: &mut [BlockQ4_1] = cast_blocks_mut(dst).expect("one block");
                        blk[0].d = d;
                        blk[0].m = F16Le::from_f32(self.m[gb * nr + r]);
                        blk[0].qs.copy_from_slice(&q[..QK / 2]);
                    }
                    QuantFormat::Q8_0 => {
                        let blk: &mut [BlockQ8_0] = cast_blocks_mut(dst).expect("one block");
                        blk[0].d = d;
                        for (o, &v) in blk[0].qs.iter_mut().zip(&q) {
                            *o = v as i8;
                        }
                    }
                    _ => {
                        // Q5_0: value v = q - 16, q = 5 bits (low nibble | fifth bit).
                        let blk: &mut [BlockQ5_0] = cast_blocks_mut(dst).expect("one block");
                        blk[0].d = d;
                        let mut qh = 0u32;
                        let mut qs = [0u8; QK / 2];
                        for (j, &v) in q.iter().enumerate() {
                            let u = (v as i8 as i32 + 16) as u8;
                            qh |= ((u >> 4) as u32 & 1) << j;
                            if j < QK / 2 {
                                qs[j] |= u & 0x0F;
                            } else {
                                qs[j - QK / 2] |= (u & 0x0F) << 4;
                            }
                        }
                        blk[0].qs = qs;
                        blk[0].qh = qh.to_le_bytes();
                    }
                }
            }
        }
        out
    }
}

/// Repacks `n` GGUF rows of `k` values in `format` (Q4_0, Q4_1, Q5_0 or
/// Q8_0) into groups of `nr` ∈ [`INTERLEAVES`] interleaved rows.
pub fn repack(format: QuantFormat, w: &[u8], n: usize, k: usize, nr: usize) -> Result<PackedQ> {
    let kind = Kind::of(format).ok_or(KernelError::InvalidShape {
        op: OP,
        reason: format!(
            "{format} has no quantized GEMM layout; use the per-row quantized GEMV (q4_0, q4_1, q5_0 and q8_0 repack)"
        ),
    })?;
    if !INTERLEAVES.contains(&nr) {
        return Err(KernelError::InvalidParams {
            op: OP,
            reason: format!("interleave {nr} must be one of 4, 8, 16"),
        });
    }
    format.check_k(OP, k)?;
    check_len(OP, "w", w.len(), n * format.row_bytes(k))?;
    let nb = k / QK;
    let groups = n.div_ceil(nr);
    let rb = kind.row_bytes();
    let mut d = vec![0.0f32; groups * nb * nr];
    let mut m = if kind == Kind::Q4_1 {
        vec![0.0f32; groups * nb * nr]
    } else {
        Vec::new()
    };
    let mut qs = vec![0u8; groups * nb * nr * rb];
    let bb = format.block_bytes();
    for row in 0..n {
        let (g, r) = (row / nr, row % nr);
        for b in 0..nb {
            let gb = g * nb + b;
            let src = &w[(row * nb + b) * bb..(row * nb + b + 1) * bb];
            let mut q = [0u8; QK];
            match format {
                QuantFormat::Q4_0 => {
                    let blk = &cast_blocks::<BlockQ4_0>(src).expect("one block")[0];
                    d[gb * nr + r] = blk.d.to_f32();
                    q[..QK / 2].copy_from_slice(&blk.qs);
                }
                QuantFormat::Q4_1 => {
                    let blk = &cast_blocks::<BlockQ4_1>(src).expect("one block")[0];
                    d[gb * nr + r] = blk.d.to_f32();
                    m[gb * nr + r] = blk.m.to_f32();
                    q[..QK / 2].copy_from_slice(&blk.qs);
                }
                QuantFormat::Q8_0 => {
                    let blk = &cast_blocks::<BlockQ8_0>(src).expect("one block")[0];
                    d[gb * nr + r] = blk.d.to_f32();
                    for (o, &v) in q.iter_mut().zip(&blk.qs) {
                        *o = v as u8;
                    }
                }
                _ => {
                    let blk = &cast_blocks::<BlockQ5_0>(src).expect("one block")[0];
                    d[gb * nr + r] = blk.d.to_f32();
                    let qh = u32::from_le_bytes(blk.qh);
                    for (j, o) in q.iter_mut().enumerate() {
                        *o = (legacy::q5_value(&blk.qs, qh, j) as i8 - 16) as u8;
                    }
                }
            }
            let base = gb * nr * rb;
            for (j, &v) in q.iter().enumerate().take(rb) {
                qs[base + 4 * nr * (j / 4) + 4 * r + j % 4] = v;
            }
        }
    }
    Ok(PackedQ {
        format,
        n,
        k,
        nr,
        d,
        m,
        qs,
    })
}

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
    pub qs: [i8; QK],
}

const _: () = assert!(size_of::<ActBlock>() == 44 && align_of::<ActBlock>() == 1);

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
    QuantFormat::Q8_0.check_k("qgemm_quantize", k)?;
    check_len("qgemm_quantize", "a", a.len(), m * k)?;
    check_len("qgemm_quantize", "out", out.len(), act_bytes(m, k))?;
    let blocks: &mut [ActBlock] = cast_blocks_mut(out).expect("length checked above");
    for (o, x) in blocks.iter_mut().zip(a.chunks_exact(QK)) {
        let q = legacy::quantize_q8_1(x.try_into().expect("chunks of 32"));
        let sum: i32 = q.qs.iter().map(|&v| v as i32).sum();
        *o = ActBlock {
            d: q.d.to_f32().to_le_bytes(),
            s: q.s.to_f32().to_le_bytes(),
            sum: sum.to_le_bytes(),
            qs: q.qs,
        };
    }
    Ok(())
}

/// [`quantize_activations_into`] into a new buffer.
pub fn quantize_activations(a: &[f32], m: usize, k: usize) -> Result<Vec<u8>> {
    let mut out = vec![0u8; act_bytes(m, k)];
    quantize_activations_into(a, m, k, &mut out)?;
    Ok(out)
}
