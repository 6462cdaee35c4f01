//! Group-quantized embedding table at 1–7 bits per value (U1–U7), usable
//! both for token lookup and as the tied LM head, so a tied-embedding model
//! stores the matrix once.
//!
//! Format ([`PackedEmbedding`]): weights `[vocab, dim]`, each row split into
//! groups of `group` ∈ {32, 64, 128} values with an f32 `scale` and f32
//! `zero` per group; `w = scale · (q − zero)`, `q ∈ [0, 2^bits − 1]`.
//! Quantization is min/max per group with round-to-nearest:
//! `scale = (max − min) / (2^bits − 1)`, `zero = −min / scale` (unrounded,
//! so the group minimum is reproduced exactly; a constant group gets
//! `scale = 1`).
//!
//! Bit packing: each row is a little-endian bit stream of `dim · bits / 8`
//! bytes — value `i` occupies bits `i·bits .. (i+1)·bits`, bit `j` of the
//! stream being bit `j % 8` of byte `j / 8`. Rows are stored back to back.
//! Because groups hold a multiple of 8 values, every group (and every run of
//! 8 values) starts on a byte boundary: 8 values are exactly `bits` bytes,
//! which the SIMD kernels exploit.
//!
//! Kernels: [`PackedEmbedding::lookup`] (ids → f32 rows; scalar — it is a
//! memory copy with a shift per value, dominated by writing the output) and
//! the LM head [`LmHead`] (`logits[v] = Σ_d W[v, d] · x[d]`, unpacked in
//! registers; scalar, avx2, avx512, neon; threads over vocab rows). The LM
//! head factors the zero point out of each group:
//! `Σ_g scale_g · (Σ q·x − zero_g · Σ_{i∈g} x_i)`, with `Σ_{i∈g} x_i`
//! computed once per call.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod body;
#[cfg(target_arch = "aarch64")]
mod neon;
pub mod scalar;

use crate::error::check_len;
use crate::pool::{check_threads, pool, split_range};
use crate::{CpuCaps, Isa, KernelError, Result, Tunable, prefetch};
use serde::{Deserialize, Serialize};

const OP: &str = "embed";

/// Allowed group sizes.
pub const GROUPS: [usize; 3] = [32, 64, 128];

/// A bit-packed, group-quantized `[vocab, dim]` table (layout in the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct PackedEmbedding {
    pub bits: usize,
    pub group: usize,
    pub vocab: usize,
    pub dim: usize,
    /// `vocab` rows of [`row_bytes`](Self::row_bytes) bytes.
    pub data: Vec<u8>,
    /// `vocab · dim / group` scales, row-major.
    pub scales: Vec<f32>,
    /// `vocab · dim / group` zero points, row-major.
    pub zeros: Vec<f32>,
}

fn check_format(bits: usize, group: usize, dim: usize) -> Result<()> {
    if !(1..=7).contains(&bits) {
        return Err(KernelError::InvalidShape {
            op: OP,
            reason: format!(
                "bits = {bits} is not supported; use 1 to 7 (8-bit tables belong in i8gemm)"
            ),
        });
    }
    if !GROUPS.contains(&group) {
        return Err(KernelError::InvalidShape {
            op: OP,
            reason: format!("group size {group} is not supported; use 32, 64 or 128"),
        });
    }
    if !dim.is_multiple_of(group) {
        return Err(KernelError::InvalidShape {
            op: OP,
            reason: format!(
                "dim = {dim} is not a multiple of the group size {group}; pick a group that divides dim"
            ),
        });
    }
    Ok(())
}

impl PackedEmbedding {
    /// Bytes per packed row.
    pub fn row_bytes(&self) -> usize {
        self.dim * self.bits / 8
    }

    /// Groups per row.
    pub fn groups_per_row(&self) -> usize {
        self.dim / self.group
    }

    /// Quantizes an f32 table `[vocab, dim]` (min/max per group, round-to-nearest).
    pub fn quantize(
        w: &[f32],
        vocab: usize,
        dim: usize,
        bits: usize,
        group: usize,
    ) -> Result<Self> {
        check_format(bits, group, dim)?;
        check_len(OP, "weights", w.len(), vocab * dim)?;
        let qmax = ((1u32 << bits) - 1) as f32;
        let gpr = dim / group;
        let rb = dim * bits / 8;
        let mut data = vec![0u8; vocab * rb];
        let mut scales = vec![0.0f32; vocab * gpr];
        let mut zeros = vec![0.0f32; vocab * gpr];
        for r in 0..vocab {
            let row = &mut data[r * rb..(r + 1) * rb];
            for g in 0..gpr {
                let vals = &w[r * dim + g * group..r * dim + (g + 1) * group];
                let lo = vals.iter().fold(f32::INFINITY, |a, &v| a.min(v));
                let hi = vals.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
                let scale = if hi > lo { (hi - lo) / qmax } else { 1.0 };
                scales[r * gpr + g] = scale;
                zeros[r * gpr + g] = -lo / scale;
                for (j, &v) in vals.iter().enumerate() {
                    let q = ((v - lo) / scale).round().clamp(0.0, qmax) as u32;
                    let bit = (g * group + j) * bits;
                    // A value spans at most two bytes.
                    let word = q << (bit % 8);
                    row[bit / 8] |= word as u8;
                    if word >> 8 != 0 {
                        row[bit / 8 + 1] |= (word >> 8) as u8;
                    }
                }
            }
        }
        Ok(PackedEmbedding {
            bits,
            group,
            vocab,
            dim,
            data,
            scales,
            zeros,
        })
    }

    /// Checks the table's own consistency (for tables built by hand).
    pub fn validate(&self) -> Result<()> {
        check_format(self.bits, self.group, self.dim)?;
        check_len(OP, "data", self.data.len(), self.vocab * self.row_bytes())?;
        let ng = self.vocab * self.groups_per_row();
        check_len(OP, "scales", self.scales.len(), ng)?;
        check_len(OP, "zeros", self.zeros.len(), ng)
    }

    fn check_id(&self, id: u32) -> Result<usize> {
        let i = id as usize;
        if i < self.vocab {
            Ok(i)
        } else {
            Err(KernelError::InvalidShape {
                op: OP,
                reason: format!(
                    "token id {id} is out of range for vocab size {}; check the tokenizer matches the model",
                    self.vocab
                ),
            })
        }
    }

    fn dequant_unchecked(&self, i: usize, out: &mut [f32]) {
        let (rb, gpr) = (self.row_bytes(), self.groups_per_row());
        scalar::dequantize_row(
            &self.data[i * rb..(i + 1) * rb],
            self.bits,
            self.group,
            &self.scales[i * gpr..(i + 1) * gpr],
            &self.zeros[i * gpr..(i + 1) * gpr],
            out,
        );
    }

    /// Dequantizes row `id` into `out[dim]`.
    pub fn dequantize_row(&self, id: u32, out: &mut [f32]) -> Result<()> {
        self.validate()?;
        let i = self.check_id(id)?;
        check_len(OP, "out", out.len(), self.dim)?;
        self.dequant_unchecked(i, out);
        Ok(())
    }

    /// Embedding lookup: `out[t·dim..(t+1)·dim]` = row `ids[t]`. Every id is
    /// checked before anything is written.
    pub fn lookup(&self, ids: &[u32], out: &mut [f32]) -> Result<()> {
        self.validate()?;
        check_len(OP, "out", out.len(), ids.len() * self.dim)?;
        for &id in ids {
            self.check_id(id)?;
        }
        if self.dim == 0 {
            return Ok(());
        }
        for (&id, o) in ids.iter().zip(out.chunks_exact_mut(self.dim)) {
            self.dequant_unchecked(id as usize, o);
        }
        Ok(())
    }
}

/// The ISA variants of the LM head (scalar first).
pub fn variants() -> &'static [Isa] {
    &[Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon]
}

/// Tile parameters of the LM-head GEMV.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LmHeadParams {
    /// Vocab rows computed together, sharing each load of `x`: 1, 2 or 4.
    pub rows_per_block: usize,
    /// How many bytes ahead of each row block the x86 and NEON kernels
    /// prefetch the packed table (and its scales and zeros as many rows
    /// ahead), one of [`PREFETCHES`] (0: none). The table is three streams
    /// read once from DRAM; without it the hardware prefetcher left the 5-
    /// and 7-bit heads at a quarter of their in-cache speed on x86
    /// (151936×896, one thread: 4–6 vs 18–22 GB/s with 8 KiB; on ARM it is
    /// unmeasured, so it is tuned). Scalar ignores it. Tables from before
    /// it existed read as 0, what those kernels did.
    #[serde(default)]
    pub pf: usize,
}

/// Allowed `rows_per_block` values.
pub const ROWS_PER_BLOCK: [usize; 3] = [1, 2, 4];

/// The prefetch distances (bytes) the x86 and NEON kernels are tuned over.
pub const PREFETCHES: [usize; 4] = prefetch::BYTE_DISTANCES;

/// What [`LmHeadParams`] are chosen for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LmHeadShape {
    pub vocab: usize,
    pub dim: usize,
    pub bits: usize,
}

impl Tunable for LmHeadParams {
    type Shape = LmHeadShape;

    /// The table is streamed once; the reuse is of `x` (4·dim bytes) across
    /// the rows of a block. R rows keep R accumulator chains plus R group
    /// sums live (2R + 1 vector registers), cheap up to R = 4; while `x`
    /// fits in half of L1D the extra row streams do not evict it. On x86
    /// the streams are prefetched 8 KiB ahead (NEON starts at no prefetch:
    /// no distance was measured on ARM; the tuner times them).
    fn default_for(shape: &LmHeadShape, cpu: &CpuCaps) -> Self {
        let rows_per_block = if shape.vocab < 2 {
            1
        } else if shape.vocab < 4 || 4 * shape.dim > cpu.l1d / 2 {
            2
        } else {
            4
        };
        let pf = prefetch::default_bytes(Isa::best_of(variants()));
        LmHeadParams { rows_per_block, pf }
    }

    /// Every row block × the prefetch distances, where the best variant
    /// reads them.
    fn candidates(shape: &LmHeadShape, cpu: &CpuCaps) -> Vec<Self> {
        let pfs = prefetch::byte_candidates(Isa::best_of(variants()));
        let mut v: Vec<Self> = ROWS_PER_BLOCK
            .iter()
            .flat_map(|&rows_per_block| {
                pfs.iter()
                    .map(move |&pf| LmHeadParams { rows_per_block, pf })
            })
            .collect();
        let d = Self::default_for(shape, cpu);
        if !v.contains(&d) {
            v.push(d);
        }
        v
    }

    fn validate(&self) -> Result<()> {
        prefetch::check_bytes(OP, self.pf)?;
        if ROWS_PER_BLOCK.contains(&self.rows_per_block) {
            Ok(())
        } else {
            Err(KernelError::InvalidParams {
                op: OP,
                reason: format!(
                    "rows_per_block {} must be one of 1, 2, 4",
                    self.rows_per_block
                ),
            })
        }
    }
}

impl Default for LmHeadParams {
    fn default() -> Self {
        LmHeadParams {
            rows_per_block: 4,
            pf: 0,
        }
    }
}

/// A contiguous run of packed rows plus the activations, as the ISA kernels see it.
pub(crate) struct Rows<'a> {
    pub bits: usize,
    pub group: usize,
    pub data: &'a [u8],
    pub scales: &'a [f32],
    pub zeros: &'a [f32],
    pub x: &'a [f32],
    /// Per-group sums of `x`.
    pub xs: &'a [f32],
    /// [`LmHeadParams::pf`] (read by the x86 and NEON kernels).
    #[cfg_attr(
        not(any(target_arch = "x86_64", target_arch = "aarch64")),
        allow(dead_code)
    )]
    pub pf: usize,
}

impl Rows<'_> {
    /// Prefetches what rows `r .. r + n` are `pf` bytes ahead of:
    /// the packed bytes `pf` further on and the scales and zeros of as
    /// many rows further on. Consecutive row blocks request consecutive
    /// ranges, so each stream is requested once, ahead of its reads. A
    /// prefetch never faults, so the ranges may run past the slices.
    #[cfg_attr(
        not(any(target_arch = "x86_64", target_arch = "aarch64")),
        allow(dead_code)
    )]
    #[inline]
    pub(crate) fn prefetch(&self, r: usize, n: usize, rb: usize) {
        if self.pf > 0 {
            prefetch::lines(self.data.as_ptr(), r * rb + self.pf, (r + n) * rb + self.pf);
            let ahead = self.pf / rb.max(1);
            let gb = 4 * self.xs.len();
            let (from, to) = ((r + ahead) * gb, (r + n + ahead) * gb);
            prefetch::lines(self.scales.as_ptr().cast(), from, to);
            prefetch::lines(self.zeros.as_ptr().cast(), from, to);
        }
    }
}

/// The `vpshufb` byte selectors and right shifts that unpack 16 B-bit
/// values (`x86` kernels; the AVX2 one uses the first 8 lanes): i32 lane j
/// takes bytes `⌊jB/8⌋` and `⌊jB/8⌋ + 1` (B ≤ 7, so a value never spans
/// three bytes; the other two bytes are zeroed by −128) and shifts right
/// by `jB mod 8`.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn unpack_tables<const B: usize>() -> ([i8; 64], [i32; 16]) {
    let mut ctrl = [-128i8; 64];
    let mut sh = [0i32; 16];
    for j in 0..16 {
        let bit = j * B;
        ctrl[4 * j] = (bit / 8) as i8;
        ctrl[4 * j + 1] = (bit / 8 + 1) as i8;
        sh[j] = (bit % 8) as i32;
    }
    (ctrl, sh)
}

/// The 8 B-bit values at byte `o` of `data` (B bytes) as a little-endian
/// u64 for the AVX2 and NEON kernels: one 8-byte load wherever `data` has
/// 8 bytes left (the bytes past B are the next values, and the kernels use
/// only bits `0 .. 8·B`), the B-byte copy only at the very end.
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]
#[inline(always)]
fn load8<const B: usize>(data: &[u8], o: usize) -> u64 {
    match data.get(o..o + 8) {
        Some(b) => u64::from_le_bytes(b.try_into().expect("8 bytes")),
        None => {
            let mut b = [0u8; 8];
            b[..B].copy_from_slice(&data[o..o + B]);
            u64::from_le_bytes(b)
        }
    }
}

/// The tied LM head: `logits = W · x` over a [`PackedEmbedding`] (builder style).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LmHead {
    pub isa: Isa,
    pub params: LmHeadParams,
    pub threads: usize,
}

impl Default for LmHead {
    fn default() -> Self {
        Self::new()
    }
}

impl LmHead {
    /// The best variant this CPU runs, default parameters, one thread.
    pub fn new() -> Self {
        LmHead {
            isa: Isa::best_of(variants()),
            params: LmHeadParams::default(),
            threads: 1,
        }
    }

    crate::tune::config_setters!(LmHeadParams);

    /// `logits[v] = Σ_d W[v, d] · x[d]` with `x.len() = dim`, `logits.len() = vocab`.
    pub fn run(&self, emb: &PackedEmbedding, x: &[f32], logits: &mut [f32]) -> Result<()> {
        if !variants().contains(&self.isa) {
            return Err(KernelError::NoVariant {
                op: OP,
                isa: self.isa,
            });
        }
        if !self.isa.is_available() {
            return Err(KernelError::IsaUnavailable {
                op: OP,
                isa: self.isa,
            });
        }
        self.params.validate()?;
        check_threads(OP, self.threads)?;
        emb.validate()?;
        check_len(OP, "x", x.len(), emb.dim)?;
        check_len(OP, "logits", logits.len(), emb.vocab)?;
        // One small allocation per call (dim / group floats), outside the hot loop.
        let xs: Vec<f32> = x.chunks_exact(emb.group).map(|c| c.iter().sum()).collect();
        let (rb, gpr) = (emb.row_bytes(), emb.groups_per_row());
        let (isa, rpb) = (self.isa, self.params.rows_per_block);
        let work = |r: std::ops::Range<usize>, y: &mut [f32]| {
            let p = Rows {
                bits: emb.bits,
                group: emb.group,
                data: &emb.data[r.start * rb..r.end * rb],
                scales: &emb.scales[r.start * gpr..r.end * gpr],
                zeros: &emb.zeros[r.start * gpr..r.end * gpr],
                x,
                xs: &xs,
                pf: self.params.pf,
            };
            match isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: availability checked above; shapes validated.
                Isa::Avx2 => unsafe { avx2::lm_head(&p, y, rpb) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: as above.
                Isa::Avx512 => unsafe { avx512::lm_head(&p, y, rpb) },
                #[cfg(target_arch = "aarch64")]
                // SAFETY: as above.
                Isa::Neon => unsafe { neon::lm_head(&p, y, rpb) },
                _ => scalar::lm_head(p.data, rb, p.bits, p.group, p.scales, p.zeros, x, &xs, y),
            }
        };
        let n = logits.len();
        if self.threads <= 1 || n <= rpb {
            work(0..n, logits);
            return Ok(());
        }
        let ranges = split_range(n, self.threads, rpb);
        pool(self.threads).scope(|s| {
            let mut rest = logits;
            for r in ranges {
                let (mine, tail) = rest.split_at_mut(r.len());
                rest = tail;
                let work = &work;
                s.spawn(move |_| work(r, mine));
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests;
