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
//! scales multiply a whole vector, and the lanes are C's columns. Every
//! format is cut into 32-value blocks (a K-quant super-block of 256 gives 8).
//! Per (group of NR rows, block b) a [`PackedQ`] holds NR scales `d`, NR
//! second values `m` for the kinds that have one, and the quants,
//! chunk-major: byte `4·NR·c + 4·r + t` is byte `4c + t` of row r's quants.
//! Scales and mins are stored as GGUF stores them where that is f16 (Q4_0,
//! Q4_1, Q5_0, Q5_1, Q8_0: the f16 bits, widened to f32 in registers by
//! `vcvtph2ps` / `fcvtl`, exactly), and as f32 where GGUF's are not f16
//! values: Q4_K's and Q6_K's products of the f16 super-block scale and a
//! 6/8-bit sub-block scale (at most 19 significant bits, exact in f32) and
//! MXFP4's E8M0 powers of two (outside f16's range). The tiles take the
//! choice as a const parameter (`F16`), so the hot loop has no branch.
//!
//! | kind | formats | quants per block | `d` | `m` | a block adds | bits/value (GGUF) |
//! |---|---|---|---|---|---|---|
//! | Q4_0 | Q4_0 | 16 nibble bytes | scale, f16 | – | `d·dx·(Σqx − 8Σx)` | 4.5 (4.5) |
//! | Q4_1 | Q4_1; Q4_K | 16 nibble bytes | scale, f16; Q4_K f32 | min, as `d` | `d·dx·Σqx + m·s_x` | 5 (5); Q4_K 6 (4.5) |
//! | Q5_0 | Q5_0 | 16 nibble bytes + 4 fifth-bit bytes | scale, f16 | – | `d·dx·(Σqx − 16Σx)` | 5.5 (5.5) |
//! | Q5_1 | Q5_1 | 16 nibble bytes + 4 fifth-bit bytes | scale, f16 | min, f16 | `d·dx·Σqx + m·s_x` | 6 (6) |
//! | Mxfp4 | MXFP4 | 16 nibble bytes (E2M1 codes) | `2^(e−128)`, f32 | – | `d·dx·(Σux − 12Σx)` | 5 (4.25) |
//! | I8 | Q8_0 | 32 int8 | scale, f16 | – | `d·dx·Σqx` | 8.5 (8.5) |
//! | I8x16 | Q6_K | 32 int8 (−32..31) | scale of values 0..15, f32 | scale of 16..31, f32 | `d·dx·Σ₀..₁₅qx`, then `m·dx·Σ₁₆..₃₁qx` | 10 (6.56) |
//!
//! - Nibble kinds keep 4 bits (chunk c ∈ 0..4 of nibble bytes; the low
//!   nibbles are values `4c + t`, the high ones values `16 + 4c + t`, both
//!   unsigned 0..15). Q4_0's `−8` is applied through the activation block
//!   sum: `Σ(q−8)x = Σqx − 8Σx`. Q4_K's sub-block j (value `d·sc_j·q −
//!   dmin·m_j`) becomes a Q4_1 block with `d = d·sc_j`, `m = −(dmin·m_j)`,
//!   its nibbles moved from Q4_K's layout (64 values per 32 bytes: low
//!   nibbles sub-block 2i, high 2i+1) to Q4_1's.
//! - Five-bit kinds (Q5_0, Q5_1) are the nibble kinds with values 0..31:
//!   the 16·NR nibble bytes of a block are followed by a fifth-bit plane of
//!   4·NR bytes, bit-sliced so one byte-lane shift lines it up with a
//!   nibble chunk: plane byte `4·r + t` holds in bit `4h + c` the fifth bit
//!   of the value in nibble byte `4·NR·c + 4·r + t` (half h: 0 the low
//!   nibble, value `4c + t`; 1 the high one, `16 + 4c + t`). So the plane is
//!   a vector shaped like a nibble chunk, and chunk c's fifth bits are its
//!   bit c (low nibbles) and bit `4 + c` (high) moved to bit 4 and merged:
//!   a shift per half plus an AND and an OR (AVX2), one `vpternlogd`
//!   (AVX-512) or one `bsl` (NEON). Q5_0's `−16` goes
//!   through the activation block sum as Q4_0's `−8` does; Q5_1 is Q4_1.
//!   Both give the same i32 block sums as the int8 values `q − 16` / `q`.
//! - MXFP4 keeps its 4-bit E2M1 codes as nibbles (`d` =
//!   `GGML_E8M0_TO_FP32_HALF(e)`); the kernels map them in registers with
//!   one 16-entry table lookup (`vpshufb` / `tbl`) to `u = v + 12`, where v
//!   is ggml's doubled value (`kvalues_mxfp4`, −12..12), so u is unsigned
//!   (0..24) like a nibble and the `−12` goes through the activation block
//!   sum: `Σvx = Σux − 12Σx`, the same i32 sum as the int8 values.
//! - Int8 kinds: chunk c ∈ 0..8 holds values `4c + t`. Q6_K stores `q − 32`
//!   with one scale `d·sc` per 16 values (two per block: chunks 0..4 and
//!   4..8).
//!
//! Each packed block dequantizes to exactly the value ggml's
//! `dequantize_row_*` computes (the same f32 products; Q4_K's `d1·q − m1`
//! equals `q·d1 + (−m1)` in IEEE arithmetic), see
//! [`PackedQ::dequantize_row`]. The legacy formats pack at exactly GGUF's
//! size (their f16 scales kept as f16, the quants rearranged, not padded).
//! The others pay for f32 scales per 32 values: Q4_K takes 6 bits per value
//! (GGUF: 4.5), Q6_K 10 (6.56), MXFP4 5 (4.25) — the price of one kernel
//! per kind that needs no scale decoding in the hot loop beyond one
//! widening.
//!
//! The last group is padded with zero rows (scale 0, quants 0) when NR does
//! not divide n; the driver writes only the real columns.
//!
//! **Activations.** Each row of A is quantized with ggml's Q8_1 quantizer
//! (its `d` and quants are exactly Q8_0's), stored with its scale widened to
//! f32, Q8_1's `s` widened to f32, and the integer sum of its quants (for
//! the kinds with an offset). For the legacy formats and MXFP4 these are
//! the blocks the W·A8 GEMV uses. The K-quant GEMV quantizes activations to
//! Q8_K (one scale per 256 values); the GEMM keeps Q8_1 (one per 32,
//! slightly more accurate), so for Q4_K and Q6_K the two agree within the
//! activation quantization difference, not bit for bit.

use crate::error::check_len;
use crate::quant::blocks::{
    BlockMxfp4, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8_0, F16Le,
    KVALUES_MXFP4, QK, RawBlock, cast_blocks, cast_blocks_mut, e8m0_to_f32_half,
};
use crate::quant::{QuantFormat, kquants, legacy};
use crate::{KernelError, Result};

const OP: &str = "qgemm_repack";

/// `cast_blocks` of a row whose length `check_len` verified.
const WHOLE: &str = "whole blocks checked above";

/// The interleave widths (rows per group) any kernel reads.
pub const INTERLEAVES: [usize; 3] = [4, 8, 16];

/// How the packed quants are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Unsigned nibbles with offset 8, Q8 activation sums (Q4_0).
    Q4_0,
    /// Unsigned nibbles with a min, Q8_1 activation `s` (Q4_1, Q4_K).
    Q4_1,
    /// Nibbles plus a fifth-bit plane (0..31) with offset 16 (Q5_0).
    Q5_0,
    /// Nibbles plus a fifth-bit plane (0..31) with a min (Q5_1).
    Q5_1,
    /// Nibble E2M1 codes, mapped by [`MXFP4_LUT`] to values 0..24 with
    /// offset 12 (MXFP4).
    Mxfp4,
    /// Signed int8 values (Q8_0).
    I8,
    /// Signed int8 values with one scale per 16 (Q6_K): `d` scales values
    /// 0..16 of a block, `m` values 16..32.
    I8x16,
}

/// The int8 micro-kernels' `MODE` parameter: plain int8 (Q8_0).
pub(crate) const I8: u8 = 0;
/// Int8 with two half-block scales (Q6_K).
pub(crate) const I8_X16: u8 = 1;

/// The nibble micro-kernels' `X` parameter: plain nibbles (Q4_0, Q4_1).
pub(crate) const NIB: u8 = 0;
/// Nibbles plus the fifth-bit plane (Q5_0, Q5_1).
pub(crate) const NIB_FIVE: u8 = 1;
/// Nibble codes through [`MXFP4_LUT`] (MXFP4).
pub(crate) const NIB_LUT: u8 = 2;

/// MXFP4 code → ggml's doubled E2M1 value + 12 (0..24, unsigned).
pub(crate) const MXFP4_LUT: [u8; 16] = {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (KVALUES_MXFP4[i] + 12) as u8;
        i += 1;
    }
    t
};

impl Kind {
    pub(crate) fn of(format: QuantFormat) -> Option<Kind> {
        match format {
            QuantFormat::Q4_0 => Some(Kind::Q4_0),
            QuantFormat::Q4_1 | QuantFormat::Q4K => Some(Kind::Q4_1),
            QuantFormat::Q5_0 => Some(Kind::Q5_0),
            QuantFormat::Q5_1 => Some(Kind::Q5_1),
            QuantFormat::Mxfp4 => Some(Kind::Mxfp4),
            QuantFormat::Q8_0 => Some(Kind::I8),
            QuantFormat::Q6K => Some(Kind::I8x16),
            QuantFormat::Q8_1 | QuantFormat::Q8K => None,
        }
    }

    /// Quant bytes per row and block (for the five-bit kinds: nibbles and
    /// the fifth-bit plane).
    pub(crate) fn row_bytes(self) -> usize {
        match self {
            Kind::Q4_0 | Kind::Q4_1 | Kind::Mxfp4 => QK / 2,
            Kind::Q5_0 | Kind::Q5_1 => QK / 2 + QK / 8,
            Kind::I8 | Kind::I8x16 => QK,
        }
    }

    /// Whether the quants are nibble bytes (with or without a fifth-bit
    /// plane after them).
    pub(crate) fn nibbles(self) -> bool {
        matches!(
            self,
            Kind::Q4_0 | Kind::Q4_1 | Kind::Q5_0 | Kind::Q5_1 | Kind::Mxfp4
        )
    }

    /// What the nibble kinds subtract per activation sum: the value offset
    /// (Q4_0 8, Q5_0 16, MXFP4's table 12; 0 for the kinds with a min).
    pub(crate) fn offset(self) -> i32 {
        match self {
            Kind::Q4_0 => 8,
            Kind::Q5_0 => 16,
            Kind::Mxfp4 => 12,
            _ => 0,
        }
    }

    /// Whether a fifth-bit plane follows the nibble bytes of each block.
    pub(crate) fn five(self) -> bool {
        matches!(self, Kind::Q5_0 | Kind::Q5_1)
    }

    /// Whether the kind has the second per-(row, block) value `m`.
    pub(crate) fn has_m(self) -> bool {
        matches!(self, Kind::Q4_1 | Kind::Q5_1 | Kind::I8x16)
    }
}

/// Whether a format's packed scales (and mins) are stored as f16 bits: the
/// legacy formats, whose scales are GGUF f16 values (so f16 loses nothing).
/// Q4_K and Q6_K (products `d·sc`) and MXFP4 (powers of two outside f16's
/// range) keep f32.
pub(crate) fn f16_scales(format: QuantFormat) -> bool {
    matches!(
        format,
        QuantFormat::Q4_0
            | QuantFormat::Q4_1
            | QuantFormat::Q5_0
            | QuantFormat::Q5_1
            | QuantFormat::Q8_0
    )
}

/// The exact f32 value of IEEE half bits (as `F16Le::to_f32`).
#[inline]
pub(crate) fn f16_to_f32(bits: u16) -> f32 {
    half::f16::from_bits(bits).to_f32()
}

/// Quantized weights `(n, k)` repacked into groups of `nr` interleaved rows.
#[derive(Debug, Clone, PartialEq)]
pub struct PackedQ {
    format: QuantFormat,
    n: usize,
    k: usize,
    nr: usize,
    /// Scales as f32 (formats without [`f16_scales`]; empty otherwise).
    pub(crate) d: Vec<f32>,
    /// Mins (Q4_K) or upper-half scales (Q6_K) as f32; empty otherwise.
    pub(crate) m: Vec<f32>,
    /// Scales as f16 bits (formats with [`f16_scales`]; empty otherwise).
    pub(crate) dh: Vec<u16>,
    /// Mins (Q4_1, Q5_1) as f16 bits; empty otherwise.
    pub(crate) mh: Vec<u16>,
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
        4 * (self.d.len() + self.m.len()) + 2 * (self.dh.len() + self.mh.len()) + self.qs.len()
    }

    /// Whether the scales (and mins) are stored as f16 bits.
    pub(crate) fn f16(&self) -> bool {
        f16_scales(self.format)
    }

    /// Scale number `at` (`(group · nb + block) · nr + row`) as f32.
    #[inline]
    fn scale(&self, at: usize) -> f32 {
        if self.f16() {
            f16_to_f32(self.dh[at])
        } else {
            self.d[at]
        }
    }

    /// Second value number `at` as f32 (kinds with one).
    #[inline]
    fn second(&self, at: usize) -> f32 {
        if self.f16() {
            f16_to_f32(self.mh[at])
        } else {
            self.m[at]
        }
    }

    pub(crate) fn kind(&self) -> Kind {
        Kind::of(self.format).expect("checked by repack")
    }

    /// Quant byte `j` of row `r` in group block `gb` (nibble kinds: j < 16,
    /// the nibble bytes).
    #[inline]
    fn byte(&self, gb: usize, r: usize, j: usize) -> u8 {
        let (nr, rb) = (self.nr, self.kind().row_bytes());
        self.qs[gb * nr * rb + 4 * nr * (j / 4) + 4 * r + j % 4]
    }

    /// Value `j` (0..32, unsigned 0..31) of row `r` in group block `gb` of a
    /// five-bit kind: its nibble and its bit in the fifth-bit plane.
    #[inline]
    fn value5(&self, gb: usize, r: usize, j: usize) -> u8 {
        let nr = self.nr;
        let (h, c, t) = (j / 16, (j % 16) / 4, j % 4);
        let nib = self.byte(gb, r, j % 16);
        let nib = if h == 0 { nib & 0x0F } else { nib >> 4 };
        let plane = self.qs[gb * nr * (QK / 2 + QK / 8) + 16 * nr + 4 * r + t];
        nib | (((plane >> (4 * h + c)) & 1) << 4)
    }

    /// Row `row` of the weights dequantized into `out` (`k` values),
    /// bit-identical to `quant::dequantize` of the GGUF row this was packed
    /// from, for every format. Lets a caller that keeps only the packed copy
    /// (the runtime's tied embedding) still look rows up.
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
        let (g, r) = (row / nr, row % nr);
        for (b, o) in out.chunks_exact_mut(QK).enumerate() {
            let gb = g * nb + b;
            let byte = |j: usize| self.byte(gb, r, j);
            let d = self.scale(gb * nr + r);
            let m = if kind.has_m() {
                self.second(gb * nr + r)
            } else {
                0.0
            };
            match kind {
                Kind::Q4_0 => {
                    for j in 0..QK / 2 {
                        let q = byte(j);
                        o[j] = ((q & 0x0F) as i32 - 8) as f32 * d;
                        o[j + QK / 2] = ((q >> 4) as i32 - 8) as f32 * d;
                    }
                }
                Kind::Q4_1 => {
                    for j in 0..QK / 2 {
                        let q = byte(j);
                        o[j] = (q & 0x0F) as f32 * d + m;
                        o[j + QK / 2] = (q >> 4) as f32 * d + m;
                    }
                }
                Kind::Mxfp4 => {
                    for j in 0..QK / 2 {
                        let q = byte(j);
                        o[j] = KVALUES_MXFP4[(q & 0x0F) as usize] as f32 * d;
                        o[j + QK / 2] = KVALUES_MXFP4[(q >> 4) as usize] as f32 * d;
                    }
                }
                Kind::Q5_0 => {
                    for (j, v) in o.iter_mut().enumerate() {
                        *v = (self.value5(gb, r, j) as i32 - 16) as f32 * d;
                    }
                }
                Kind::Q5_1 => {
                    for (j, v) in o.iter_mut().enumerate() {
                        *v = self.value5(gb, r, j) as f32 * d + m;
                    }
                }
                Kind::I8 => {
                    for (j, v) in o.iter_mut().enumerate() {
                        *v = byte(j) as i8 as f32 * d;
                    }
                }
                Kind::I8x16 => {
                    for (j, v) in o.iter_mut().enumerate() {
                        *v = byte(j) as i8 as f32 * if j < QK / 2 { d } else { m };
                    }
                }
            }
        }
        Ok(())
    }

    /// The GGUF bytes this was made from (the inverse of [`repack`]), or
    /// `None` where the packed form does not determine them: Q4_K and Q6_K
    /// (the pack keeps each sub-block's product `d·sc`, not the super-block
    /// scale and the 6/8-bit factor). The values always survive: see
    /// [`dequantize_row`](Self::dequantize_row).
    pub fn unpack(&self) -> Option<Vec<u8>> {
        if matches!(self.format, QuantFormat::Q4K | QuantFormat::Q6K) {
            return None;
        }
        let (n, nr) = (self.n, self.nr);
        let nb = self.k / QK;
        let kind = self.kind();
        let bb = self.format.block_bytes();
        let mut out = vec![0u8; n * self.format.row_bytes(self.k)];
        for row in 0..n {
            let (g, r) = (row / nr, row % nr);
            for b in 0..nb {
                let gb = g * nb + b;
                // Quant bytes as packed; for the five-bit kinds the values.
                let q: [u8; QK] = if kind.five() {
                    std::array::from_fn(|j| self.value5(gb, r, j))
                } else {
                    std::array::from_fn(|j| {
                        if j < kind.row_bytes() {
                            self.byte(gb, r, j)
                        } else {
                            0
                        }
                    })
                };
                // The f16 formats keep GGUF's bits; MXFP4's f32 scale is
                // mapped back to its E8M0 code below.
                let si = gb * nr + r;
                let (d, m) = if self.f16() {
                    let m = if kind.has_m() { self.mh[si] } else { 0 };
                    (F16Le(self.dh[si].to_le_bytes()), F16Le(m.to_le_bytes()))
                } else {
                    (F16Le([0; 2]), F16Le([0; 2]))
                };
                let at = (row * nb + b) * bb;
                let dst = &mut out[at..at + bb];
                match self.format {
                    QuantFormat::Q4_0 => {
                        let blk: &mut [BlockQ4_0] = cast_blocks_mut(dst).expect("one block");
                        blk[0].d = d;
                        blk[0].qs.copy_from_slice(&q[..QK / 2]);
                    }
                    QuantFormat::Q4_1 => {
                        let blk: &mut [BlockQ4_1] = cast_blocks_mut(dst).expect("one block");
                        blk[0].d = d;
                        blk[0].m = m;
                        blk[0].qs.copy_from_slice(&q[..QK / 2]);
                    }
                    QuantFormat::Q8_0 => {
                        let blk: &mut [BlockQ8_0] = cast_blocks_mut(dst).expect("one block");
                        blk[0].d = d;
                        for (o, &v) in blk[0].qs.iter_mut().zip(&q) {
                            *o = v as i8;
                        }
                    }
                    QuantFormat::Q5_0 | QuantFormat::Q5_1 => {
                        // q = 5 bits: low nibble | fifth bit in qh.
                        let mut qh = 0u32;
                        let mut qs = [0u8; QK / 2];
                        for (j, &u) in q.iter().enumerate() {
                            qh |= ((u >> 4) as u32 & 1) << j;
                            if j < QK / 2 {
                                qs[j] |= u & 0x0F;
                            } else {
                                qs[j - QK / 2] |= (u & 0x0F) << 4;
                            }
                        }
                        if self.format == QuantFormat::Q5_0 {
                            let blk: &mut [BlockQ5_0] = cast_blocks_mut(dst).expect("one block");
                            blk[0].d = d;
                            blk[0].qs = qs;
                            blk[0].qh = qh.to_le_bytes();
                        } else {
                            let blk: &mut [BlockQ5_1] = cast_blocks_mut(dst).expect("one block");
                            blk[0].d = d;
                            blk[0].m = m;
                            blk[0].qs = qs;
                            blk[0].qh = qh.to_le_bytes();
                        }
                    }
                    _ => {
                        // MXFP4 (the K-quants returned above).
                        let blk: &mut [BlockMxfp4] = cast_blocks_mut(dst).expect("one block");
                        blk[0].e = e8m0_from_f32_half(self.d[si]);
                        blk[0].qs.copy_from_slice(&q[..QK / 2]);
                    }
                }
            }
        }
        Some(out)
    }
}

/// The E8M0 code of `GGML_E8M0_TO_FP32_HALF`'s value `d` (its inverse).
fn e8m0_from_f32_half(d: f32) -> u8 {
    let bits = d.to_bits();
    match bits {
        0x0020_0000 => 0,
        0x0040_0000 => 1,
        _ => ((bits >> 23) + 1) as u8,
    }
}

/// Repacks `n` GGUF rows of `k` values in `format` (one of
/// [`FORMATS`](super::FORMATS): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K,
/// MXFP4) into groups of `nr` ∈ [`INTERLEAVES`] interleaved rows.
pub fn repack(format: QuantFormat, w: &[u8], n: usize, k: usize, nr: usize) -> Result<PackedQ> {
    let kind = Kind::of(format).ok_or(KernelError::InvalidShape {
        op: OP,
        reason: format!(
            "{format} is an activation format with no quantized GEMM layout; weights in q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q6_K and mxfp4 repack"
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
    let f16 = f16_scales(format);
    let slots = groups * nb * nr;
    let sized = |on: bool| if on { slots } else { 0 };
    let mut d = vec![0.0f32; sized(!f16)];
    let mut m = vec![0.0f32; sized(!f16 && kind.has_m())];
    let mut dh = vec![0u16; sized(f16)];
    let mut mh = vec![0u16; sized(f16 && kind.has_m())];
    let mut qs = vec![0u8; groups * nb * nr * rb];
    let row_bytes = format.row_bytes(k);
    for row in 0..n {
        let (g, r) = (row / nr, row % nr);
        let src = &w[row * row_bytes..(row + 1) * row_bytes];
        // Stores block b of this row: scale, second value, quant bytes
        // (five-bit kinds: `q` holds the 32 values 0..31, split here into
        // nibble bytes and the fifth-bit plane).
        let mut put = |b: usize, dv: Scale, mv: Scale, q: &[u8; QK]| {
            let gb = g * nb + b;
            let at = gb * nr + r;
            match dv {
                Scale::F32(v) => d[at] = v,
                Scale::F16(v) => dh[at] = v,
            }
            if kind.has_m() {
                match mv {
                    Scale::F32(v) => m[at] = v,
                    Scale::F16(v) => mh[at] = v,
                }
            }
            let base = gb * nr * rb;
            if kind.five() {
                for j in 0..QK / 2 {
                    let v = (q[j] & 0x0F) | ((q[j + QK / 2] & 0x0F) << 4);
                    qs[base + 4 * nr * (j / 4) + 4 * r + j % 4] = v;
                }
                for t in 0..4 {
                    let mut p = 0u8;
                    for h in 0..2 {
                        for c in 0..4 {
                            p |= ((q[16 * h + 4 * c + t] >> 4) & 1) << (4 * h + c);
                        }
                    }
                    qs[base + 16 * nr + 4 * r + t] = p;
                }
            } else {
                for (j, &v) in q.iter().enumerate().take(rb) {
                    qs[base + 4 * nr * (j / 4) + 4 * r + j % 4] = v;
                }
            }
        };
        match format {
            QuantFormat::Q4_0 => {
                for (b, blk) in cast_blocks::<BlockQ4_0>(src)
                    .expect(WHOLE)
                    .iter()
                    .enumerate()
                {
                    let mut q = [0u8; QK];
                    q[..QK / 2].copy_from_slice(&blk.qs);
                    put(b, h(blk.d), NONE, &q);
                }
            }
            QuantFormat::Q4_1 => {
                for (b, blk) in cast_blocks::<BlockQ4_1>(src)
                    .expect(WHOLE)
                    .iter()
                    .enumerate()
                {
                    let mut q = [0u8; QK];
                    q[..QK / 2].copy_from_slice(&blk.qs);
                    put(b, h(blk.d), h(blk.m), &q);
                }
            }
            QuantFormat::Q8_0 => {
                for (b, blk) in cast_blocks::<BlockQ8_0>(src)
                    .expect(WHOLE)
                    .iter()
                    .enumerate()
                {
                    let q: [u8; QK] = std::array::from_fn(|j| blk.qs[j] as u8);
                    put(b, h(blk.d), NONE, &q);
                }
            }
            QuantFormat::Q5_0 => {
                for (b, blk) in cast_blocks::<BlockQ5_0>(src)
                    .expect(WHOLE)
                    .iter()
                    .enumerate()
                {
                    let qh = u32::from_le_bytes(blk.qh);
                    let q: [u8; QK] = std::array::from_fn(|j| legacy::q5_value(&blk.qs, qh, j));
                    put(b, h(blk.d), NONE, &q);
                }
            }
            QuantFormat::Q5_1 => {
                for (b, blk) in cast_blocks::<BlockQ5_1>(src)
                    .expect(WHOLE)
                    .iter()
                    .enumerate()
                {
                    let qh = u32::from_le_bytes(blk.qh);
                    let q: [u8; QK] = std::array::from_fn(|j| legacy::q5_value(&blk.qs, qh, j));
                    put(b, h(blk.d), h(blk.m), &q);
                }
            }
            QuantFormat::Mxfp4 => {
                for (b, blk) in cast_blocks::<BlockMxfp4>(src)
                    .expect(WHOLE)
                    .iter()
                    .enumerate()
                {
                    let mut q = [0u8; QK];
                    q[..QK / 2].copy_from_slice(&blk.qs);
                    put(b, Scale::F32(e8m0_to_f32_half(blk.e)), NONE, &q);
                }
            }
            QuantFormat::Q4K => {
                for (sb, blk) in cast_blocks::<BlockQ4K>(src)
                    .expect(WHOLE)
                    .iter()
                    .enumerate()
                {
                    let (dd, dmin) = (blk.d.to_f32(), blk.dmin.to_f32());
                    for j in 0..8 {
                        let (sc, mn) = kquants::get_scale_min_k4(j, &blk.scales);
                        // Sub-block j: nibble (j mod 2) of bytes 32·(j/2) ..+32.
                        let src = &blk.qs[32 * (j / 2)..32 * (j / 2) + 32];
                        let nib = |l: usize| {
                            if j % 2 == 0 {
                                src[l] & 0x0F
                            } else {
                                src[l] >> 4
                            }
                        };
                        let mut q = [0u8; QK];
                        for (t, v) in q.iter_mut().enumerate().take(QK / 2) {
                            *v = nib(t) | (nib(t + QK / 2) << 4);
                        }
                        // ggml: d1 = d·sc, m1 = min·m, y = d1·q − m1.
                        put(
                            8 * sb + j,
                            Scale::F32(dd * sc as f32),
                            Scale::F32(-(dmin * mn as f32)),
                            &q,
                        );
                    }
                }
            }
            QuantFormat::Q6K => {
                for (sb, blk) in cast_blocks::<BlockQ6K>(src)
                    .expect(WHOLE)
                    .iter()
                    .enumerate()
                {
                    let dd = blk.d.to_f32();
                    for j in 0..8 {
                        let q: [u8; QK] =
                            std::array::from_fn(|l| kquants::q6_k_value(blk, QK * j + l) as u8);
                        // ggml: y = d·sc·q, sc per 16 values.
                        let (s0, s1) = (blk.scales[2 * j], blk.scales[2 * j + 1]);
                        put(
                            8 * sb + j,
                            Scale::F32(dd * s0 as f32),
                            Scale::F32(dd * s1 as f32),
                            &q,
                        );
                    }
                }
            }
            QuantFormat::Q8_1 | QuantFormat::Q8K => unreachable!("refused above"),
        }
    }
    Ok(PackedQ {
        format,
        n,
        k,
        nr,
        d,
        m,
        dh,
        mh,
        qs,
    })
}

/// A scale or min as [`repack`] stores it: f16 bits for the formats with
/// [`f16_scales`], f32 for the others.
#[derive(Clone, Copy)]
enum Scale {
    F32(f32),
    F16(u16),
}

/// No second value (the kinds without one ignore it).
const NONE: Scale = Scale::F16(0);

/// GGUF's f16 as stored (the bits, not a conversion).
fn h(x: F16Le) -> Scale {
    Scale::F16(u16::from_le_bytes(x.0))
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
