//! Q4_0 weights repacked at load time into 4-row interleaved blocks, and
//! the W·A8 GEMV over them.
//!
//! In the GGUF layout each row's blocks are contiguous, so an integer dot
//! product leaves one row's partial sums spread over the lanes of a vector
//! and needs a horizontal reduction per row. Interleaving four rows in
//! 4-byte groups (llama.cpp's `block_q4_0x4` idea with
//! `blck_size_interleave = 4`) puts row r's partial sum in lane r instead:
//! one `sdot`/`vpmaddubsw` covers the same 4 activation bytes (broadcast) for
//! 4 rows, the four scales multiply a whole vector, and the result is
//! stored directly.
//!
//! Layout of [`BlockQ4_0x4`] (rows 4g..4g+4, block b): the four `d`, then
//! `qs[16c + 4r + t] = row_r.qs[4c + t]` for c, t in 0..4 (nibbles unchanged:
//! low = value 4c + t, high = value 16 + 4c + t). Groups are stored
//! group-major (all blocks of rows 0..4, then rows 4..8, …); the `n % 4`
//! remaining rows follow in plain Q4_0 layout.

use super::{A8Rows, scalar};
use crate::error::check_len;
use crate::pool::{check_threads, pool, split_range};
use crate::quant::blocks::{BlockQ4_0, BlockQ8_0, F16Le, QK, cast_blocks};
use crate::quant::{QuantFormat, blocks_as_bytes};
use crate::{Isa, KernelError, Result};

const OP: &str = "qgemv_q4_0x4";

/// Four Q4_0 blocks (same block index, four consecutive rows) interleaved.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ4_0x4 {
    pub d: [F16Le; 4],
    pub qs: [u8; 64],
}

const _: () = assert!(size_of::<BlockQ4_0x4>() == 72 && align_of::<BlockQ4_0x4>() == 1);

/// Q4_0 weights in the 4-row interleaved layout.
#[derive(Debug, Clone, PartialEq)]
pub struct RepackedQ4_0x4 {
    groups: Vec<BlockQ4_0x4>,
    tail: Vec<BlockQ4_0>,
    n: usize,
    k: usize,
}

impl RepackedQ4_0x4 {
    /// Repacks `n` GGUF Q4_0 rows of `k` values.
    pub fn new(w: &[u8], n: usize, k: usize) -> Result<Self> {
        QuantFormat::Q4_0.check_k(OP, k)?;
        check_len(OP, "w", w.len(), n * QuantFormat::Q4_0.row_bytes(k))?;
        let blocks: &[BlockQ4_0] = cast_blocks(w).expect("length checked above");
        let nb = k / QK;
        let ng = n / 4;
        let mut groups = Vec::with_capacity(ng * nb);
        for g in 0..ng {
            for b in 0..nb {
                let rows: [&BlockQ4_0; 4] = std::array::from_fn(|r| &blocks[(4 * g + r) * nb + b]);
                let mut out = BlockQ4_0x4 {
                    d: std::array::from_fn(|r| rows[r].d),
                    qs: [0; 64],
                };
                for c in 0..4 {
                    for (r, row) in rows.iter().enumerate() {
                        out.qs[16 * c + 4 * r..16 * c + 4 * r + 4]
                            .copy_from_slice(&row.qs[4 * c..4 * c + 4]);
                    }
                }
                groups.push(out);
            }
        }
        let tail = blocks[4 * ng * nb..].to_vec();
        Ok(RepackedQ4_0x4 { groups, tail, n, k })
    }

    /// The GGUF Q4_0 bytes this was made from (the inverse of [`new`](Self::new)).
    pub fn unpack(&self) -> Vec<u8> {
        let nb = self.k / QK;
        let mut rows = vec![BlockQ4_0::default(); self.n * nb];
        for (i, gb) in self.groups.iter().enumerate() {
            let (g, b) = (i / nb.max(1), i % nb.max(1));
            for r in 0..4 {
                let row = &mut rows[(4 * g + r) * nb + b];
                row.d = gb.d[r];
                for c in 0..4 {
                    row.qs[4 * c..4 * c + 4]
                        .copy_from_slice(&gb.qs[16 * c + 4 * r..16 * c + 4 * r + 4]);
                }
            }
        }
        let start = self.n / 4 * 4 * nb;
        rows[start..].copy_from_slice(&self.tail);
        blocks_as_bytes(&rows).to_vec()
    }

    pub fn n(&self) -> usize {
        self.n
    }

    pub fn k(&self) -> usize {
        self.k
    }

    /// The ISA variants of [`gemv_a8`](Self::gemv_a8), scalar first.
    pub fn variants() -> &'static [Isa] {
        &[Isa::Scalar, Isa::Avx2, Isa::NeonDotprod]
    }

    /// `y = W · x` with activations `xq` already quantized to Q8_0
    /// (`quantize_activations(Q4_0, x)`), rows split over `threads`.
    pub fn gemv_a8(&self, isa: Isa, threads: usize, xq: &[u8], y: &mut [f32]) -> Result<()> {
        if !Self::variants().contains(&isa) {
            return Err(KernelError::NoVariant { op: OP, isa });
        }
        if !isa.is_available() {
            return Err(KernelError::IsaUnavailable { op: OP, isa });
        }
        check_threads(OP, threads)?;
        check_len(OP, "y", y.len(), self.n)?;
        check_len(OP, "xq", xq.len(), QuantFormat::Q8_0.row_bytes(self.k))?;
        let x: &[BlockQ8_0] = cast_blocks(xq).expect("length checked above");
        let nb = self.k / QK;
        let ng = self.n / 4;
        let (yg, yt) = y.split_at_mut(4 * ng);
        let run = |gr: std::ops::Range<usize>, yr: &mut [f32]| {
            let w = &self.groups[gr.start * nb..gr.end * nb];
            match isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: availability checked above.
                Isa::Avx2 => unsafe { super::avx2::gemv_a8_q4_0x4(w, x, yr) },
                #[cfg(target_arch = "aarch64")]
                // SAFETY: availability checked above.
                Isa::NeonDotprod => unsafe { super::dotprod::gemv_a8_q4_0x4(w, x, yr) },
                _ => gemv_a8_q4_0x4_scalar(w, x, yr),
            }
        };
        if threads <= 1 || ng <= 1 {
            run(0..ng, yg);
        } else {
            let ranges = split_range(ng, threads, 1);
            pool(threads).scope(|s| {
                let mut rest = yg;
                for r in ranges {
                    let (mine, tail) = rest.split_at_mut(4 * r.len());
                    rest = tail;
                    let run = &run;
                    s.spawn(move |_| run(r, mine));
                }
            });
        }
        // The n % 4 leftover rows use the plain kernels of the same level.
        let tail_rows = A8Rows::Q4_0(&self.tail, x);
        let one = super::QGemvParams {
            rows_per_block: 1,
            pf: 0,
        };
        match isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: availability checked above.
            Isa::Avx2 => unsafe { super::avx2::gemv_a8(tail_rows, yt, one) },
            #[cfg(target_arch = "aarch64")]
            // SAFETY: availability checked above.
            Isa::NeonDotprod => unsafe { super::dotprod::gemv_a8(tail_rows, yt, one) },
            _ => scalar::gemv_a8(tail_rows, yt),
        }
        Ok(())
    }
}

/// Reference over interleaved groups: the same arithmetic, in the same
/// order, as `scalar::gemv_a8` on the unpacked rows (so it is bit-equal).
pub fn gemv_a8_q4_0x4_scalar(w: &[BlockQ4_0x4], x: &[BlockQ8_0], y: &mut [f32]) {
    let nb = x.len();
    for (g, yg) in y.chunks_exact_mut(4).enumerate() {
        let mut acc = [0.0f32; 4];
        for (b, xb) in x.iter().enumerate() {
            let gb = &w[g * nb + b];
            for (r, a) in acc.iter_mut().enumerate() {
                let mut sumi = 0i32;
                for c in 0..4 {
                    for t in 0..4 {
                        let q = gb.qs[16 * c + 4 * r + t];
                        sumi += ((q & 0x0F) as i32 - 8) * xb.qs[4 * c + t] as i32;
                        sumi += ((q >> 4) as i32 - 8) * xb.qs[16 + 4 * c + t] as i32;
                    }
                }
                *a += (gb.d[r].to_f32() * xb.d.to_f32()) * sumi as f32;
            }
        }
        yg.copy_from_slice(&acc);
    }
}
