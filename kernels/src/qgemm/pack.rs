//! The weight layout of the quantized GEMM: weights repacked once (at model
//! load) into NR-row interleaved groups (the activations' layout is in
//! `act.rs`).
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
//! chunk-major: byte `4·NR·c + 4·r + t` is byte `4c + t` of row r's quants
//! (after the block's bit planes, for the kinds with planes).
//! No scale is stored as f32: each is kept as GGUF stores it and decoded
//! exactly in registers, so the packs are GGUF-sized (or nearly) and the
//! decoded f32 values are the ones ggml computes. The tiles take the scale
//! mode as a const parameter (`SC`), so the hot loop has no branch:
//!
//! - `SC_F16` (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): the f16 bits per (row,
//!   block), widened by `vcvtph2ps` / `fcvtl`.
//! - `SC_E8M0` (MXFP4): the E8M0 byte e per (row, block), widened to i32
//!   and turned into `GGML_E8M0_TO_FP32_HALF(e)` = 2^(e−128) by building
//!   its f32 bits: `(e − 1) << 23`, or `0x0020_0000 << e` for the two
//!   subnormal codes 0 and 1, blended on `e < 2`.
//! - `SC_KSUB` (Q4_K, Q5_K, Q6_K): per (row, block) the sub-block codes as bytes
//!   (Q4_K, Q5_K: the 6-bit scale and min, unpacked from GGUF's 12-byte packing;
//!   Q6_K: the i8 scales of its two 16-value halves), sign-extended and
//!   converted to f32; per (row, 256-value super-block) the f16
//!   super-scales (Q4_K, Q5_K: `d` and `−dmin`, f16 negation being exact; Q6_K:
//!   `d`), widened once per super-block. `code · super` has at most 19
//!   significant bits, so it is exact in f32 and equal to ggml's `d·sc`
//!   (and `−(dmin·m) = m·(−dmin)`). Codes sit at `(group·nb + b)·NR + r`
//!   like the f16 scales, super-scales at `(group·nb/8 + b/8)·NR + r`.
//!
//! | kind | formats | quants per block | `d` | `m` | a block adds | bits/value (GGUF) |
//! |---|---|---|---|---|---|---|
//! | Q4_0 | Q4_0 | 16 nibble bytes | scale, f16 | – | `d·dx·(Σqx − 8Σx)` | 4.5 (4.5) |
//! | Q4_1 | Q4_1; Q4_K | 16 nibble bytes | scale, f16; Q4_K `sc·d` | min, f16; Q4_K `m·(−dmin)` | `d·dx·Σqx + m·s_x` | 5 (5); Q4_K 4.625 (4.5) |
//! | Q5_0 | Q5_0 | 4 fifth-bit bytes + 16 nibble bytes | scale, f16 | – | `d·dx·(Σqx − 16Σx)` | 5.5 (5.5) |
//! | Q5_1 | Q5_1; Q5_K | 4 fifth-bit bytes + 16 nibble bytes | scale, f16; Q5_K `sc·d` | min, f16; Q5_K `m·(−dmin)` | `d·dx·Σqx + m·s_x` | 6 (6); Q5_K 5.625 (5.5) |
//! | Mxfp4 | MXFP4 | 16 nibble bytes (E2M1 codes) | `2^(e−128)`, E8M0 byte | – | `d·dx·(Σux − 12Σx)` | 4.25 (4.25) |
//! | Q6K | Q6_K | 8 bytes of bit pairs + 16 nibble bytes | scale of values 0..15, `sc₀·d` | scale of 16..31, `sc₁·d` | `d·dx·(Σ₀..₁₅ux − 32Σ₀..₁₅x)`, then `m·dx·(Σ₁₆..₃₁ux − 32Σ₁₆..₃₁x)` | 6.5625 (6.5625) |
//! | I8 | Q8_0 | 32 int8 | scale, f16 | – | `d·dx·Σqx` | 8.5 (8.5) |
//!
//! (bits/value per padded row: scales, codes and super-scales included.)
//!
//! - Nibble kinds keep 4 bits (chunk c ∈ 0..4 of nibble bytes; the low
//!   nibbles are values `4c + t`, the high ones values `16 + 4c + t`, both
//!   unsigned 0..15). Q4_0's `−8` is applied through the activation block
//!   sum: `Σ(q−8)x = Σqx − 8Σx`. Q4_K's sub-block j (value `d·sc_j·q −
//!   dmin·m_j`) becomes a Q4_1 block with `d = sc_j·d`, `m = m_j·(−dmin)`,
//!   its nibbles moved from Q4_K's layout (64 values per 32 bytes: low
//!   nibbles sub-block 2i, high 2i+1) to Q4_1's. Q5_K's sub-blocks
//!   become Q5_1 blocks the same way, each value's fifth bit (bit j of
//!   Q5_K's `qh` byte l for value `32j + l`) moving to the fifth-bit plane.
//! - Five-bit kinds (Q5_0, Q5_1) are the nibble kinds with values 0..31:
//!   the 16·NR nibble bytes of a block are preceded by a fifth-bit plane of
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
//!   The planes come first because the tiles read them before a block's
//!   first nibble chunk: so each block is read in address order, the order
//!   the hardware prefetchers follow (read out of order, a GEMV from DRAM
//!   streamed far below the nibble kinds; docs/PERF.md, "Q6_K's bit pairs").
//! - Q6_K keeps GGUF's 6-bit values `u = q + 32` (0..63): two planes of
//!   4·NR bytes that hold each value's top two bits side by side, as
//!   GGUF's `qh` does, then the nibbles: byte `4·r + t` of plane h holds in
//!   bits `2c` and `2c + 1` bits 4 and 5 of the value in nibble byte
//!   `4·NR·c + 4·r + t`, half h. So a block is 16·NR + 8·NR bytes, GGUF's
//!   6 bits per value, and a chunk's pairs are one shift from bits 4 and 5
//!   (left by `4 − 2c`; right by 2 for c = 3) and one merge from their
//!   nibbles: a fifth- and a sixth-bit plane sliced like Q5's would cost two
//!   shifts and two merges per half and chunk, and that work, not the
//!   reads, bounds a Q6_K GEMV from cache. Masked once per block into the
//!   even pairs (c = 0, 2) and the odd ones, a shifted pair brings no
//!   neighbour's bits into bits 6 and 7, so the merge can be a bit select
//!   (one `vpternlogd` with the nibble mask, or `bsl`). A nibble byte's low
//!   nibble is value `4c + t` (first half-scale), its high one `16 + 4c +
//!   t` (second), so the tiles keep one i32 sum per half and subtract
//!   `32·Σx` per half through the activation half sums (`ActBlock`'s
//!   `sum_lo`, and `sum − sum_lo`): `Σ(u−32)x = Σux − 32Σx`, the i32 sums
//!   of GGUF's signed q. Precomputing the half sums once per activation
//!   block costs 4 bytes per 32 activations; the alternatives (signed
//!   weights `u − 32` through the sign trick, or summing the activations
//!   per half in the tile) cost work per weight chunk and activation row.
//!   Products of u ≤ 63 and |x| ≤ 127 fit i16 over one chunk (4 · 63 ·
//!   127), not two, so the non-VNNI x86 tiles widen each chunk's sums to
//!   i32.
//! - MXFP4 keeps its 4-bit E2M1 codes as nibbles (`d` =
//!   `GGML_E8M0_TO_FP32_HALF(e)`); the kernels map them in registers with
//!   one 16-entry table lookup (`vpshufb` / `tbl`) to `u = v + 12`, where v
//!   is ggml's doubled value (`kvalues_mxfp4`, −12..12), so u is unsigned
//!   (0..24) like a nibble and the `−12` goes through the activation block
//!   sum: `Σvx = Σux − 12Σx`, the same i32 sum as the int8 values.
//! - Int8 kinds (Q8_0): chunk c ∈ 0..8 holds values `4c + t`.
//!
//! Each packed block dequantizes to exactly the value ggml's
//! `dequantize_row_*` computes (the same f32 products; Q4_K's `d1·q − m1`
//! equals `q·d1 + (−m1)` in IEEE arithmetic), see
//! [`PackedQ::dequantize_row`], and [`PackedQ::unpack`] gives the GGUF
//! bytes back for every format. The legacy formats, MXFP4 and Q6_K pack at
//! exactly GGUF's size (the quants rearranged, not padded); Q4_K and Q5_K
//! pay 0.125 bits per value for their 6-bit codes as whole bytes (4.625 vs
//! 4.5, 5.625 vs 5.5).
//!
//! The last group is padded with zero rows (scale 0, quants 0) when NR does
//! not divide n; the driver writes only the real columns.
//!

use crate::error::check_len;
use crate::mem::HugeBuf;
use crate::quant::blocks::{
    BlockMxfp4, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K,
    BlockQ8_0, F16Le, KSubBlock, KVALUES_MXFP4, QK, QK_K, cast_blocks, cast_blocks_mut,
    e8m0_to_f32_half,
};
use crate::quant::{QuantFormat, kquants, legacy};
use crate::{KernelError, Result};
use std::ops::Range;

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
    /// Nibbles plus a fifth-bit plane (0..31) with a min (Q5_1, Q5_K).
    Q5_1,
    /// Nibble E2M1 codes, mapped by [`MXFP4_LUT`] to values 0..24 with
    /// offset 12 (MXFP4).
    Mxfp4,
    /// Signed int8 values (Q8_0).
    I8,
    /// Nibbles plus two planes of each value's bits 4 and 5 (0..63) with
    /// offset 32 and one scale per 16 values (Q6_K): `d` scales the low nibbles
    /// (values 0..16 of a block), `m` the high ones (16..32).
    Q6K,
}

/// The nibble micro-kernels' `X` parameter: plain nibbles (Q4_0, Q4_1).
pub(crate) const NIB: u8 = 0;
/// Nibbles plus the fifth-bit plane (Q5_0, Q5_1).
pub(crate) const NIB_FIVE: u8 = 1;
/// Nibble codes through [`MXFP4_LUT`] (MXFP4).
pub(crate) const NIB_LUT: u8 = 2;
/// Nibbles plus the planes of bits 4 and 5, two half-block sums and scales
/// (Q6_K).
pub(crate) const NIB_SIX: u8 = 3;

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
            QuantFormat::Q5_1 | QuantFormat::Q5K => Some(Kind::Q5_1),
            QuantFormat::Mxfp4 => Some(Kind::Mxfp4),
            QuantFormat::Q8_0 => Some(Kind::I8),
            QuantFormat::Q6K => Some(Kind::Q6K),
            QuantFormat::Q8_1 | QuantFormat::Q8K => None,
        }
    }

    /// Quant bytes per row and block (for the five- and six-bit kinds:
    /// nibbles and the bit planes).
    pub(crate) fn row_bytes(self) -> usize {
        match self {
            Kind::Q4_0 | Kind::Q4_1 | Kind::Mxfp4 => QK / 2,
            Kind::Q5_0 | Kind::Q5_1 | Kind::Q6K => QK / 2 + self.planes(),
            Kind::I8 => QK,
        }
    }

    /// Bytes per row and block of bit planes, which come first in a
    /// block: 4 (Q5_0, Q5_1), 8 (Q6_K), else 0.
    pub(crate) fn planes(self) -> usize {
        match self {
            Kind::Q5_0 | Kind::Q5_1 => QK / 8,
            Kind::Q6K => 2 * QK / 8,
            _ => 0,
        }
    }

    /// Whether the quants are nibble bytes (with or without bit planes
    /// before them).
    pub(crate) fn nibbles(self) -> bool {
        self != Kind::I8
    }

    /// What the nibble kinds subtract per activation sum: the value offset
    /// (Q4_0 8, Q5_0 16, MXFP4's table 12, Q6_K 32 per half; 0 for the
    /// kinds with a min).
    pub(crate) fn offset(self) -> i32 {
        match self {
            Kind::Q4_0 => 8,
            Kind::Q5_0 => 16,
            Kind::Mxfp4 => 12,
            Kind::Q6K => 32,
            _ => 0,
        }
    }

    /// Whether bit planes open each block, before its nibble bytes (the
    /// fifth bits; Q6_K's bits 4 and 5).
    pub(crate) fn five(self) -> bool {
        matches!(self, Kind::Q5_0 | Kind::Q5_1 | Kind::Q6K)
    }

    /// Whether the planes are Q6_K's two planes of bit pairs.
    pub(crate) fn six(self) -> bool {
        self == Kind::Q6K
    }

    /// Whether the kind has the second per-(row, block) value `m`.
    pub(crate) fn has_m(self) -> bool {
        matches!(self, Kind::Q4_1 | Kind::Q5_1 | Kind::Q6K)
    }
}

/// How a pack stores its scales (the ISA tiles' `SC` parameter, so the hot
/// loop has no branch): per (row, 32-value block) f16 bits `dh` (and mins
/// `mh`), as the legacy formats' GGUF blocks hold them.
pub(crate) const SC_F16: u8 = 0;
/// MXFP4: the E8M0 byte per (row, block) in `dc`, decoded in registers to
/// exactly `e8m0_to_f32_half(e)`.
pub(crate) const SC_E8M0: u8 = 1;
/// The K-quants: integer sub-block codes per (row, block) in `dc` and `mc`
/// (Q4_K, Q5_K: the 6-bit scale and min; Q6_K: the i8 scales of its two 16-value
/// halves), and f16 super-block scales per (row, 256 values) in `sd` and
/// `sm` (Q4_K, Q5_K: `d` and `−dmin`; Q6_K: `d`, read for both codes). The code,
/// widened to f32, times the widened super-scale is exact (an f16 times an
/// integer of at most 8 bits has at most 19 significant bits), so it is
/// the f32 product ggml computes (`d·sc`; `−(dmin·m) = m·(−dmin)`).
pub(crate) const SC_KSUB: u8 = 2;

/// The scale storage of `format`'s pack.
pub(crate) fn scale_mode(format: QuantFormat) -> u8 {
    match format {
        QuantFormat::Mxfp4 => SC_E8M0,
        QuantFormat::Q4K | QuantFormat::Q5K | QuantFormat::Q6K => SC_KSUB,
        _ => SC_F16,
    }
}

/// The exact f32 value of IEEE half bits (as `F16Le::to_f32`).
#[inline]
pub(crate) fn f16_to_f32(bits: u16) -> f32 {
    half::f16::from_bits(bits).to_f32()
}

/// The scale streams of a pack, borrowed (what the micro-kernels read).
/// Scales and codes of block `gb = group·nb + b` are at `gb·nr + row`,
/// super-scales at `(gb / 8)·nr + row` (nb is a multiple of 8 for the
/// K-quants, so that is `(group·nsb + b / 8)·nr + row`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scales<'a> {
    /// [`SC_F16`], [`SC_E8M0`] or [`SC_KSUB`].
    pub mode: u8,
    pub nr: usize,
    pub dh: &'a [u16],
    pub mh: &'a [u16],
    pub dc: &'a [u8],
    pub mc: &'a [u8],
    pub sd: &'a [u16],
    /// Super-scales of the `mc` codes (Q6_K: `sd` again).
    pub sm: &'a [u16],
}

impl Scales<'_> {
    /// Scale of row `r` in group block `gb`, as f32.
    #[inline]
    pub fn d(&self, gb: usize, r: usize) -> f32 {
        let at = gb * self.nr + r;
        match self.mode {
            SC_F16 => f16_to_f32(self.dh[at]),
            SC_E8M0 => e8m0_to_f32_half(self.dc[at]),
            _ => self.dc[at] as i8 as f32 * f16_to_f32(self.sd[gb / 8 * self.nr + r]),
        }
    }

    /// Second value (min, or Q6_K's upper-half scale) of row `r` in group
    /// block `gb`, as f32 (kinds with one).
    #[inline]
    pub fn m(&self, gb: usize, r: usize) -> f32 {
        let at = gb * self.nr + r;
        match self.mode {
            SC_F16 => f16_to_f32(self.mh[at]),
            _ => self.mc[at] as i8 as f32 * f16_to_f32(self.sm[gb / 8 * self.nr + r]),
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
    /// Scales as f16 bits ([`SC_F16`]; empty otherwise).
    pub(crate) dh: HugeBuf<u16>,
    /// Mins (Q4_1, Q5_1) as f16 bits; empty otherwise.
    pub(crate) mh: HugeBuf<u16>,
    /// Per (row, block) codes: MXFP4's E8M0 byte, Q4_K's and Q5_K's 6-bit scale,
    /// Q6_K's first-half i8 scale; empty otherwise.
    pub(crate) dc: HugeBuf<u8>,
    /// Per (row, block) second codes: Q4_K's and Q5_K's 6-bit min, Q6_K's second-half
    /// i8 scale; empty otherwise.
    pub(crate) mc: HugeBuf<u8>,
    /// Per (row, super-block) f16 bits: the K-quants' `d`; empty otherwise.
    pub(crate) sd: HugeBuf<u16>,
    /// Per (row, super-block) f16 bits of Q4_K's and Q5_K's `−dmin`; empty otherwise.
    pub(crate) sm: HugeBuf<u16>,
    pub(crate) qs: HugeBuf<u8>,
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

    /// Bytes held (scales, codes, super-scales and quants).
    pub fn bytes(&self) -> usize {
        2 * (self.dh.len() + self.mh.len() + self.sd.len() + self.sm.len())
            + self.dc.len()
            + self.mc.len()
            + self.qs.len()
    }

    /// The scale streams as the micro-kernels read them.
    pub(crate) fn scales(&self) -> Scales<'_> {
        Scales {
            mode: scale_mode(self.format),
            nr: self.nr,
            dh: &self.dh,
            mh: &self.mh,
            dc: &self.dc,
            mc: &self.mc,
            sd: &self.sd,
            sm: if self.format == QuantFormat::Q6K {
                &self.sd
            } else {
                &self.sm
            },
        }
    }

    pub(crate) fn kind(&self) -> Kind {
        Kind::of(self.format).expect("checked by repack")
    }

    /// Quant byte `j` of row `r` in group block `gb` (nibble kinds: j < 16,
    /// the nibble bytes).
    #[inline]
    fn byte(&self, gb: usize, r: usize, j: usize) -> u8 {
        let (nr, kind) = (self.nr, self.kind());
        self.qs[gb * nr * kind.row_bytes() + nr * kind.planes() + 4 * nr * (j / 4) + 4 * r + j % 4]
    }

    /// Value `j` (0..32) of row `r` in group block `gb` of a kind with bit
    /// planes: its nibble and its high bits from the planes (0..31, or
    /// 0..63).
    #[inline]
    fn value5(&self, gb: usize, r: usize, j: usize) -> u8 {
        let (nr, kind) = (self.nr, self.kind());
        let (h, c, t) = (j / 16, (j % 16) / 4, j % 4);
        let nib = self.byte(gb, r, j % 16);
        let nib = if h == 0 { nib & 0x0F } else { nib >> 4 };
        let at = gb * nr * kind.row_bytes();
        let planes = &self.qs[at..at + kind.planes() * nr];
        nib | high_bits(kind, planes, nr, r, t, c, h)
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
        let sc = self.scales();
        let (g, r) = (row / nr, row % nr);
        for (b, o) in out.chunks_exact_mut(QK).enumerate() {
            let gb = g * nb + b;
            let byte = |j: usize| self.byte(gb, r, j);
            let d = sc.d(gb, r);
            let m = if kind.has_m() { sc.m(gb, r) } else { 0.0 };
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
                Kind::Q6K => {
                    for (j, v) in o.iter_mut().enumerate() {
                        let q = self.value5(gb, r, j) as i32 - 32;
                        *v = q as f32 * if j < QK / 2 { d } else { m };
                    }
                }
            }
        }
        Ok(())
    }

    /// Stored value `j` (0..32) of row `r` in group block `gb`: a nibble
    /// (4-bit kinds), the 5- or 6-bit value (kinds with bit planes) or the
    /// int8 byte.
    #[inline]
    fn value(&self, gb: usize, r: usize, j: usize) -> u8 {
        let kind = self.kind();
        if kind.five() {
            self.value5(gb, r, j)
        } else if kind.nibbles() {
            let q = self.byte(gb, r, j % 16);
            if j < 16 { q & 0x0F } else { q >> 4 }
        } else {
            self.byte(gb, r, j)
        }
    }

    /// Super-block `sb` of row `r` in group `g` of a Q4_K / Q5_K pack, as
    /// GGUF stores it: `d`, `dmin`, the 12 code bytes and the 256 values.
    fn k_sub_parts(
        &self,
        g: usize,
        r: usize,
        sb: usize,
        vals: &dyn Fn(usize) -> [u8; QK],
    ) -> (F16Le, F16Le, [u8; 12], [u8; QK_K]) {
        let (nr, nb) = (self.nr, self.k / QK);
        let h = |v: u16| F16Le(v.to_le_bytes());
        let sat = (g * nb / 8 + sb) * nr + r;
        let mut codes = [(0u8, 0u8); 8];
        let mut v = [0u8; QK_K];
        for (j, code) in codes.iter_mut().enumerate() {
            let at = (g * nb + 8 * sb + j) * nr + r;
            *code = (self.dc[at], self.mc[at]);
            v[QK * j..QK * (j + 1)].copy_from_slice(&vals(8 * sb + j));
        }
        // −dmin was stored: f16 negation is the sign bit.
        (
            h(self.sd[sat]),
            h(self.sm[sat] ^ 0x8000),
            scale_min_k4_bytes(&codes),
            v,
        )
    }

    /// The GGUF bytes this was made from (the inverse of [`repack`]), for
    /// every format: the legacy formats' f16 scales, MXFP4's E8M0 bytes and
    /// the K-quants' super-scales and sub-block codes are kept as GGUF
    /// stores them, and the quants are only rearranged.
    pub fn unpack(&self) -> Vec<u8> {
        let (n, nr) = (self.n, self.nr);
        let nb = self.k / QK;
        let bb = self.format.block_bytes();
        let rowb = self.format.row_bytes(self.k);
        let h = |v: u16| F16Le(v.to_le_bytes());
        let mut out = vec![0u8; n * rowb];
        for (row, dst) in out.chunks_exact_mut(rowb.max(1)).take(n).enumerate() {
            let (g, r) = (row / nr, row % nr);
            let vals =
                |b: usize| -> [u8; QK] { std::array::from_fn(|j| self.value(g * nb + b, r, j)) };
            match self.format {
                QuantFormat::Q4K => {
                    let blocks: &mut [BlockQ4K] = cast_blocks_mut(dst).expect(WHOLE);
                    for (sb, blk) in blocks.iter_mut().enumerate() {
                        let (d, dmin, scales, v) = self.k_sub_parts(g, r, sb, &vals);
                        *blk = BlockQ4K {
                            d,
                            dmin,
                            scales,
                            qs: kquants::k_nibbles(&v),
                        };
                    }
                }
                QuantFormat::Q5K => {
                    let blocks: &mut [BlockQ5K] = cast_blocks_mut(dst).expect(WHOLE);
                    for (sb, blk) in blocks.iter_mut().enumerate() {
                        let (d, dmin, scales, v) = self.k_sub_parts(g, r, sb, &vals);
                        *blk = BlockQ5K {
                            d,
                            dmin,
                            scales,
                            qh: kquants::k_fifth_bits(&v),
                            qs: kquants::k_nibbles(&v),
                        };
                    }
                }
                QuantFormat::Q6K => {
                    let blocks: &mut [BlockQ6K] = cast_blocks_mut(dst).expect(WHOLE);
                    for (sb, blk) in blocks.iter_mut().enumerate() {
                        blk.d = h(self.sd[(g * nb / 8 + sb) * nr + r]);
                        let mut u = [0u8; QK_K];
                        for j in 0..8 {
                            let at = (g * nb + 8 * sb + j) * nr + r;
                            blk.scales[2 * j] = self.dc[at] as i8;
                            blk.scales[2 * j + 1] = self.mc[at] as i8;
                            u[QK * j..][..QK].copy_from_slice(&vals(8 * sb + j));
                        }
                        (blk.ql, blk.qh) = kquants::q6_k_planes(&u);
                    }
                }
                _ => {
                    for b in 0..nb {
                        let gb = g * nb + b;
                        let q = vals(b);
                        let at = gb * nr + r;
                        let blk = &mut dst[b * bb..(b + 1) * bb];
                        // Nibble bytes: value j low, value j + 16 high (the
                        // five-bit kinds' fifth bits go to `qh`).
                        let nib: [u8; QK / 2] =
                            std::array::from_fn(|j| (q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
                        match self.format {
                            QuantFormat::Q4_0 => {
                                let blk: &mut [BlockQ4_0] = cast_blocks_mut(blk).expect(WHOLE);
                                blk[0].d = h(self.dh[at]);
                                blk[0].qs = nib;
                            }
                            QuantFormat::Q4_1 => {
                                let blk: &mut [BlockQ4_1] = cast_blocks_mut(blk).expect(WHOLE);
                                blk[0].d = h(self.dh[at]);
                                blk[0].m = h(self.mh[at]);
                                blk[0].qs = nib;
                            }
                            QuantFormat::Q8_0 => {
                                let blk: &mut [BlockQ8_0] = cast_blocks_mut(blk).expect(WHOLE);
                                blk[0].d = h(self.dh[at]);
                                blk[0].qs = q.map(|v| v as i8);
                            }
                            QuantFormat::Mxfp4 => {
                                let blk: &mut [BlockMxfp4] = cast_blocks_mut(blk).expect(WHOLE);
                                blk[0].e = self.dc[at];
                                blk[0].qs = nib;
                            }
                            QuantFormat::Q5_0 => {
                                let blk: &mut [BlockQ5_0] = cast_blocks_mut(blk).expect(WHOLE);
                                blk[0].d = h(self.dh[at]);
                                blk[0].qs = nib;
                                blk[0].qh = fifth_bits(&q).to_le_bytes();
                            }
                            _ => {
                                // Q5_1 (the formats are those of `repack`).
                                let blk: &mut [BlockQ5_1] = cast_blocks_mut(blk).expect(WHOLE);
                                blk[0].d = h(self.dh[at]);
                                blk[0].m = h(self.mh[at]);
                                blk[0].qs = nib;
                                blk[0].qh = fifth_bits(&q).to_le_bytes();
                            }
                        }
                    }
                }
            }
        }
        out
    }
}

/// Q5's `qh`: bit j is the fifth bit of value j.
fn fifth_bits(q: &[u8; QK]) -> u32 {
    q.iter()
        .enumerate()
        .fold(0, |qh, (j, &u)| qh | (((u >> 4) & 1) as u32) << j)
}

/// The 12 scale bytes of a Q4_K block from its 8 (scale, min) 6-bit codes:
/// the inverse of `kquants::get_scale_min_k4` (ggml's packing: codes 0..4
/// in the low 6 bits of bytes 0..4 and 4..8, codes 4..8 as nibbles of
/// bytes 8..12 plus their top 2 bits in the top bits of bytes 0..8; all 96
/// bits are used, so every byte string round-trips).
fn scale_min_k4_bytes(codes: &[(u8, u8); 8]) -> [u8; 12] {
    let mut q = [0u8; 12];
    for (j, &(sc, m)) in codes.iter().enumerate() {
        if j < 4 {
            q[j] |= sc & 63;
            q[j + 4] |= m & 63;
        } else {
            q[j + 4] = (sc & 0x0F) | ((m & 0x0F) << 4);
            q[j - 4] |= (sc >> 4) << 6;
            q[j] |= (m >> 4) << 6;
        }
    }
    q
}

/// Bits 4 and up (in place) of the value in nibble byte `4·nr·c + 4r + t`,
/// half `h`, from a block's bit `planes` (kinds with planes): Q5_0 and Q5_1
/// keep bit 4 in bit `4h + c` of byte `4r + t`; Q6_K keeps bits 4 and 5 in
/// bits `2c`, `2c + 1` of byte `4r + t` of plane h (`4·nr` bytes each).
#[inline]
pub(crate) fn high_bits(
    kind: Kind,
    planes: &[u8],
    nr: usize,
    r: usize,
    t: usize,
    c: usize,
    h: usize,
) -> u8 {
    if kind.six() {
        ((planes[4 * nr * h + 4 * r + t] >> (2 * c)) & 3) << 4
    } else {
        ((planes[4 * r + t] >> (4 * h + c)) & 1) << 4
    }
}

/// The output slices of a range of groups (each vector's share, which is
/// empty for the vectors a format does not use).
struct Parts<'a> {
    dh: &'a mut [u16],
    mh: &'a mut [u16],
    dc: &'a mut [u8],
    mc: &'a mut [u8],
    sd: &'a mut [u16],
    sm: &'a mut [u16],
    qs: &'a mut [u8],
}

/// Splits `v` (the same length per group, for `groups` groups) into the
/// shares of the contiguous `ranges`, which cover `0..groups` in order
/// (none for no groups).
fn shares<'a, T>(v: &'a mut [T], ranges: &[Range<usize>], groups: usize) -> Vec<&'a mut [T]> {
    let per = v.len().checked_div(groups).unwrap_or(0);
    let mut rest = v;
    ranges
        .iter()
        .map(|r| {
            let (a, b) = std::mem::take(&mut rest).split_at_mut(r.len() * per);
            rest = b;
            a
        })
        .collect()
}

/// The rows of matrices stacked by rows, read where they lie.
struct Rows<'a> {
    parts: &'a [&'a [u8]],
    row_bytes: usize,
}

impl<'a> Rows<'a> {
    /// `n` rows of `row_bytes` in `parts`, each of whole rows.
    fn new(parts: &'a [&'a [u8]], n: usize, row_bytes: usize) -> Result<Self> {
        if let Some((i, p)) = parts
            .iter()
            .enumerate()
            .find(|(_, p)| p.len().checked_rem(row_bytes).is_some_and(|r| r != 0))
        {
            return Err(KernelError::InvalidShape {
                op: OP,
                reason: format!(
                    "part {i} of the stacked weights holds {} bytes, not whole rows of {row_bytes}",
                    p.len()
                ),
            });
        }
        check_len(OP, "w", parts.iter().map(|p| p.len()).sum(), n * row_bytes)?;
        Ok(Rows { parts, row_bytes })
    }

    /// Row `row` of the stack (a scan of at most a few parts: a row's
    /// repack costs far more).
    fn row(&self, mut row: usize) -> &'a [u8] {
        if self.row_bytes == 0 {
            return &[];
        }
        for p in self.parts {
            let rows = p.len() / self.row_bytes;
            if row < rows {
                return &p[row * self.row_bytes..(row + 1) * self.row_bytes];
            }
            row -= rows;
        }
        unreachable!("row beyond the stack's checked rows")
    }
}

/// Repacks the rows of `groups` (of `n` rows of `nb` blocks in `format`)
/// into `p`, their groups' shares of the outputs; shapes checked by
/// [`repack_stacked_on`].
#[allow(clippy::too_many_arguments)]
fn fill(
    format: QuantFormat,
    kind: Kind,
    w: &Rows<'_>,
    n: usize,
    k: usize,
    nr: usize,
    groups: Range<usize>,
    p: Parts<'_>,
) {
    let nb = k / QK;
    let rb = kind.row_bytes();
    let Parts {
        dh,
        mh,
        dc,
        mc,
        sd,
        sm,
        qs,
    } = p;
    for row in groups.start * nr..(groups.end * nr).min(n) {
        // g counts from the range's first group: the slices start there.
        let (g, r) = (row / nr - groups.start, row % nr);
        let src = w.row(row);
        // Stores block b of this row: scale, second value, quant bytes
        // (five-bit kinds: `q` holds the 32 values 0..31, split here into
        // nibble bytes and the fifth-bit plane).
        let mut put = |b: usize, dv: Scale, mv: Scale, q: &[u8; QK]| {
            let gb = g * nb + b;
            let at = gb * nr + r;
            match dv {
                Scale::Code(v) => dc[at] = v,
                Scale::F16(v) => dh[at] = v,
            }
            if kind.has_m() {
                match mv {
                    Scale::Code(v) => mc[at] = v,
                    Scale::F16(v) => mh[at] = v,
                }
            }
            let base = gb * nr * rb;
            // Byte j of a row's block goes to 4·nr·(j / 4) + 4r + j % 4,
            // so each 4-byte chunk is one copy: a model's load runs this
            // for every weight byte.
            let mut chunks = |bytes: &[u8]| {
                for (c, four) in bytes.chunks_exact(4).enumerate() {
                    let at = base + kind.planes() * nr + 4 * nr * c + 4 * r;
                    qs[at..at + 4].copy_from_slice(four);
                }
            };
            if kind.five() {
                let nib: [u8; QK / 2] =
                    std::array::from_fn(|j| (q[j] & 0x0F) | ((q[j + QK / 2] & 0x0F) << 4));
                chunks(&nib);
                // Byte t of a plane gathers the high bits of values
                // 16h + 4c + t over c: four values are one u32 (byte t is
                // value t), so each c is a shift and a mask of all four.
                let four = |h: usize, c: usize| {
                    let v = u32::from_le_bytes(q[16 * h + 4 * c..][..4].try_into().expect("4"));
                    v >> 4
                };
                if kind.six() {
                    // Plane h: the pairs of bits 4 and 5 of half h.
                    for h in 0..2 {
                        let p = (0..4).fold(0, |p, c| p | ((four(h, c) & 0x0303_0303) << (2 * c)));
                        let at = base + 4 * h * nr + 4 * r;
                        qs[at..at + 4].copy_from_slice(&u32::to_le_bytes(p));
                    }
                } else {
                    let p =
                        (0..8).fold(0, |p, hc| p | ((four(hc / 4, hc % 4) & 0x0101_0101) << hc));
                    let at = base + 4 * r;
                    qs[at..at + 4].copy_from_slice(&u32::to_le_bytes(p));
                }
            } else {
                chunks(&q[..rb]);
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
                    put(b, Scale::Code(blk.e), NONE, &q);
                }
            }
            QuantFormat::Q4K => {
                let blocks = cast_blocks::<BlockQ4K>(src).expect(WHOLE);
                put_k_sub(blocks, g * nb / 8, nr, r, sd, sm, &mut put);
            }
            QuantFormat::Q5K => {
                let blocks = cast_blocks::<BlockQ5K>(src).expect(WHOLE);
                put_k_sub(blocks, g * nb / 8, nr, r, sd, sm, &mut put);
            }
            QuantFormat::Q6K => {
                for (sb, blk) in cast_blocks::<BlockQ6K>(src)
                    .expect(WHOLE)
                    .iter()
                    .enumerate()
                {
                    // ggml: y = d·sc·q, sc per 16 values.
                    sd[(g * nb / 8 + sb) * nr + r] = u16::from_le_bytes(blk.d.0);
                    for j in 0..8 {
                        // GGUF's stored 6-bit values u = q + 32 (0..63).
                        let q = kquants::q6_k_sub_values(blk, j);
                        let (s0, s1) = (blk.scales[2 * j], blk.scales[2 * j + 1]);
                        put(8 * sb + j, Scale::Code(s0 as u8), Scale::Code(s1 as u8), &q);
                    }
                }
            }
            QuantFormat::Q8_1 | QuantFormat::Q8K => unreachable!("refused above"),
        }
    }
}

/// Repacks `n` GGUF rows of `k` values in `format` (one of
/// [`FORMATS`](super::FORMATS): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K,
/// MXFP4) into groups of `nr` ∈ [`INTERLEAVES`] interleaved rows.
pub fn repack(format: QuantFormat, w: &[u8], n: usize, k: usize, nr: usize) -> Result<PackedQ> {
    repack_on(format, w, n, k, nr, 1)
}

/// [`repack`] on `threads` workers of the kernels' pool, each filling one
/// contiguous range of groups; the result is the same. A model's load
/// repacks every weight, and the new pages are faulted in and zeroed by the
/// thread that first writes them, so each worker's own share spreads that
/// work too.
pub fn repack_on(
    format: QuantFormat,
    w: &[u8],
    n: usize,
    k: usize,
    nr: usize,
    threads: usize,
) -> Result<PackedQ> {
    repack_stacked_on(format, &[w], n, k, nr, threads)
}

/// [`repack_on`] of matrices stacked by rows, each read where it lies: the
/// result is that of repacking their bytes joined, with no joined copy (a
/// model's q, k and v are stacked at load, and most of its weight bytes are
/// in such stacks). The parts hold `n` rows of `k` values, each part whole
/// rows.
pub fn repack_stacked_on(
    format: QuantFormat,
    ws: &[&[u8]],
    n: usize,
    k: usize,
    nr: usize,
    threads: usize,
) -> Result<PackedQ> {
    let kind = Kind::of(format).ok_or(KernelError::InvalidShape {
        op: OP,
        reason: format!(
            "{format} is an activation format with no quantized GEMM layout; weights in q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K, q6_K and mxfp4 repack"
        ),
    })?;
    if !INTERLEAVES.contains(&nr) {
        return Err(KernelError::InvalidParams {
            op: OP,
            reason: format!("interleave {nr} must be one of 4, 8, 16"),
        });
    }
    format.check_k(OP, k)?;
    let w = &Rows::new(ws, n, format.row_bytes(k))?;
    let nb = k / QK;
    let groups = n.div_ceil(nr);
    let rb = kind.row_bytes();
    let mode = scale_mode(format);
    let slots = groups * nb * nr;
    let sized = |on: bool| if on { slots } else { 0 };
    let mut dh = HugeBuf::<u16>::zeroed(sized(mode == SC_F16));
    let mut mh = HugeBuf::<u16>::zeroed(sized(mode == SC_F16 && kind.has_m()));
    let mut dc = HugeBuf::<u8>::zeroed(sized(mode != SC_F16));
    let mut mc = HugeBuf::<u8>::zeroed(sized(mode == SC_KSUB));
    // Super-blocks: nb / 8 per row of a K-quant.
    let supers = if mode == SC_KSUB { slots / 8 } else { 0 };
    let mut sd = HugeBuf::<u16>::zeroed(supers);
    let mut sm = HugeBuf::<u16>::zeroed(if matches!(format, QuantFormat::Q4K | QuantFormat::Q5K) {
        supers
    } else {
        0
    });
    let mut qs = HugeBuf::<u8>::zeroed(groups * nb * nr * rb);
    let ranges = crate::pool::split_range(groups, threads.max(1), 1);
    let parts: Vec<Parts<'_>> = {
        let mut dh = shares(&mut dh, &ranges, groups).into_iter();
        let mut mh = shares(&mut mh, &ranges, groups).into_iter();
        let mut dc = shares(&mut dc, &ranges, groups).into_iter();
        let mut mc = shares(&mut mc, &ranges, groups).into_iter();
        let mut sd = shares(&mut sd, &ranges, groups).into_iter();
        let mut sm = shares(&mut sm, &ranges, groups).into_iter();
        let mut qs = shares(&mut qs, &ranges, groups).into_iter();
        let mut next = || {
            Some(Parts {
                dh: dh.next()?,
                mh: mh.next()?,
                dc: dc.next()?,
                mc: mc.next()?,
                sd: sd.next()?,
                sm: sm.next()?,
                qs: qs.next()?,
            })
        };
        std::iter::from_fn(&mut next).collect()
    };
    if parts.len() <= 1 {
        for (r, p) in ranges.into_iter().zip(parts) {
            fill(format, kind, w, n, k, nr, r, p);
        }
    } else {
        crate::pool::pool(parts.len()).scope(|s| {
            for (r, p) in ranges.into_iter().zip(parts) {
                s.spawn(move |_| fill(format, kind, w, n, k, nr, r, p));
            }
        });
    }
    Ok(PackedQ {
        format,
        n,
        k,
        nr,
        dh,
        mh,
        dc,
        mc,
        sd,
        sm,
        qs,
    })
}

/// Stores the super-blocks of one Q4_K / Q5_K row (row `r` of its group,
/// whose first super-block slot is `sg`): the super-scales `d` and `−dmin`
/// once per super-block, and each sub-block j as a Q4_1 / Q5_1 block with
/// its 6-bit codes. ggml computes `d1 = d·sc`, `m1 = dmin·m`, `y = d1·q −
/// m1`; the kernels add `q·(sc·d) + m·(−dmin)`, the same f32 values.
fn put_k_sub<B: KSubBlock>(
    blocks: &[B],
    sg: usize,
    nr: usize,
    r: usize,
    sd: &mut [u16],
    sm: &mut [u16],
    put: &mut impl FnMut(usize, Scale, Scale, &[u8; QK]),
) {
    for (sb, blk) in blocks.iter().enumerate() {
        let sat = (sg + sb) * nr + r;
        sd[sat] = u16::from_le_bytes(blk.d().0);
        sm[sat] = u16::from_le_bytes(blk.dmin().0) ^ 0x8000;
        for j in 0..8 {
            let (sc, mn) = kquants::get_scale_min_k4(j, blk.scales());
            let v = kquants::k_sub_values(blk, j);
            // `put` takes the five-bit kinds' values, the others' nibble bytes.
            let q = if B::FIVE {
                v
            } else {
                let mut q = [0u8; QK];
                for t in 0..QK / 2 {
                    q[t] = v[t] | (v[t + QK / 2] << 4);
                }
                q
            };
            put(8 * sb + j, Scale::Code(sc), Scale::Code(mn), &q);
        }
    }
}

/// A per-block scale or second value as [`repack`] stores it: f16 bits
/// ([`SC_F16`]) or a byte code ([`SC_E8M0`], [`SC_KSUB`]).
#[derive(Clone, Copy)]
enum Scale {
    F16(u16),
    Code(u8),
}

/// No second value (the kinds without one ignore it).
const NONE: Scale = Scale::F16(0);

/// GGUF's f16 as stored (the bits, not a conversion).
fn h(x: F16Le) -> Scale {
    Scale::F16(u16::from_le_bytes(x.0))
}
