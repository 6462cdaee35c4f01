//! AMX-INT8 panel tile for Q4_0 at interleave 16: one `tdpbssd` forms a
//! block's i32 sums for up to 16 activation rows × 16 columns, which
//! AVX-512 then scales.
//!
//! As on AVX-512 VNNI, each weight group (16 columns) is unpacked once per
//! call into a panel that every row tile reads (`avx512::fill_panel` with
//! `AMX` true), here as signed values
//! `q − 8` in the tile instruction's layout: block `b` is 8 rows of 64
//! bytes, row `r` holding values `4r .. 4r + 4` of the block for each of
//! the 16 columns (4 bytes per column), then the 16 scales as f32. The
//! activations' 32 quant bytes are then the other operand where they lie:
//! one tile row per activation row, strided by the row's blocks. The sums
//! are exactly the block sums every variant forms, and the scaling is the
//! VNNI panel tile's (separately rounded multiplies and adds, block by
//! block in order), so the results are bit-identical to the scalar
//! micro-kernel.
//!
//! The block is 32 values, so each tile instruction does half the work its
//! 64-byte rows allow: Q4_0's per-block scales need each block's sums
//! apart. The scaling, not the tile instruction, is what bounds this tile.
//!
//! Tile registers ([`Tiles`]): four sets of sums (tmm0, tmm3, tmm4,
//! tmm5), with two of activations and weights (tmm1/tmm2, tmm7/tmm6),
//! used by consecutive blocks in turn, so that the tile instructions of
//! the next [`AHEAD`] blocks run while one block's sums are scaled. A
//! call's last rows, when fewer than a tile's, are copied by the driver
//! into a whole tile with zero blocks below them, so one configuration serves a whole call
//! (`ldtilecfg` is not cheap) and no tile reads past the activations.

use super::{ActBlock, PANEL_BLOCK_ZMM as PANEL_BLOCK};
use std::arch::asm;
use std::arch::x86_64::*;

/// Bytes of one activation block's header before its quants.
const QS_AT: usize = std::mem::offset_of!(ActBlock, qs);

/// The tile configuration of one worker for one call, released on drop.
pub(super) struct Tiles(());

/// `ldtilecfg`'s 64-byte operand (palette 1).
#[repr(C, align(64))]
struct Config([u8; 64]);

impl Config {
    /// Tile `t` as `rows` rows of `bytes` bytes.
    fn set(&mut self, t: usize, rows: usize, bytes: usize) {
        debug_assert!((1..=16).contains(&rows) && bytes <= 64);
        self.0[16 + 2 * t..18 + 2 * t].copy_from_slice(&(bytes as u16).to_le_bytes());
        self.0[48 + t] = rows as u8;
    }
}

impl Tiles {
    /// Configures this thread's tiles for tiles of `mr` rows.
    ///
    /// # Safety
    /// The CPU runs [`crate::Isa::Amx`] (detection has been granted the
    /// tile state); `1 <= mr <= 16`.
    pub(super) unsafe fn new(mr: usize) -> Self {
        let mut c = Config([0; 64]);
        c.0[0] = 1;
        for t in [0, 3, 4, 5] {
            c.set(t, mr, 64);
        }
        for t in [1, 7] {
            c.set(t, mr, 32);
        }
        for t in [2, 6] {
            c.set(t, 8, 64);
        }
        // SAFETY: a valid palette-1 configuration on a CPU with AMX.
        unsafe { asm!("ldtilecfg [{}]", in(reg) c.0.as_ptr(), options(nostack, readonly)) };
        Tiles(())
    }
}

impl Drop for Tiles {
    fn drop(&mut self) {
        // SAFETY: the tiles were configured by `new`, so the CPU has AMX;
        // releasing returns the thread to the init state the kernel saves
        // cheaply.
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
    }
}

/// Blocks whose sums are formed ahead of the one being scaled. One: two
/// and three ahead measured no faster (docs/PERF.md, "An AMX panel tile
/// for Q4_0"); the tile work and the scaling overlap little either way.
const AHEAD: usize = 1;

/// One block's sums: the activation bytes at `a` (32 per row, rows
/// `stride` apart) times the panel block at `w`, stored as rows of 16 i32
/// at `c` (64 bytes apart), in tile set `SET` ([`Tiles`]; block `b` in set
/// `b % 4`).
///
/// # Safety
/// Tiles configured ([`Tiles::new`]); `a` holds the tile's rows, `w` a
/// panel block, `c` the sums' rows.
#[inline(always)]
unsafe fn sums<const SET: u8>(a: *const u8, stride: usize, w: *const u8, c: *mut u8) {
    macro_rules! block {
        ($c:literal, $a:literal, $w:literal) => {
            asm!(
                concat!("tilezero ", $c),
                concat!("tileloadd ", $a, ", [{a} + {s}*1]"),
                concat!("tileloadd ", $w, ", [{w} + {l}*1]"),
                concat!("tdpbssd ", $c, ", ", $a, ", ", $w),
                concat!("tilestored [{c} + {l}*1], ", $c),
                a = in(reg) a, s = in(reg) stride, w = in(reg) w, l = in(reg) 64usize,
                c = in(reg) c, options(nostack),
            )
        };
    }
    // SAFETY: forwarded from the caller.
    unsafe {
        match SET {
            0 => block!("tmm0", "tmm1", "tmm2"),
            1 => block!("tmm3", "tmm7", "tmm6"),
            2 => block!("tmm4", "tmm1", "tmm2"),
            _ => block!("tmm5", "tmm7", "tmm6"),
        }
    }
}

/// The 16-column sums of one block, 16 i32 per row, 64-byte aligned.
#[repr(C, align(64))]
struct Sums([i32; 16 * 16]);

/// `acc[i] += (d_w · d_x[i]) · Σ[i]` for block `b` of activation rows
/// `ab + i·nb` (the VNNI panel tile's scaling).
///
/// # Safety
/// Needs AVX-512 F; block `b` of `MR` rows at `ab`, `nb` blocks apart.
#[inline(always)]
unsafe fn scale<const MR: usize>(
    acc: &mut [__m512; MR],
    dw: __m512,
    s: &Sums,
    (ab, nb, b): (*const ActBlock, usize, usize),
) {
    for (i, a) in acc.iter_mut().enumerate() {
        // SAFETY: forwarded from the caller; row i < 16 of the sums,
        // aligned.
        unsafe {
            let dx = (*ab.add(i * nb + b)).d();
            let si = _mm512_cvtepi32_ps(_mm512_load_si512(s.0.as_ptr().add(16 * i).cast()));
            let dd = _mm512_mul_ps(dw, _mm512_set1_ps(dx));
            *a = _mm512_add_ps(*a, _mm512_mul_ps(dd, si));
        }
    }
}

/// Rows `i0 .. i0 + MR` of `acts` × the panel's 16 columns into `out` (row
/// `i` at `16·i`), [`AHEAD`] blocks in flight.
///
/// # Safety
/// Needs AVX-512 F/BW and AMX with the tiles configured for `MR`-row
/// tiles; the panel filled for `nb` blocks; rows `i0 .. i0 + MR` inside
/// `acts` (`nb` blocks each); `out` ≥ `MR · 16`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn panel_q4_0<const MR: usize>(
    acts: &[ActBlock],
    nb: usize,
    panel: *const u8,
    i0: usize,
    out: &mut [f32],
) {
    debug_assert!(out.len() >= MR * 16 && acts.len() >= (i0 + MR) * nb);
    let mut s = [const { Sums([0; 256]) }; 4];
    // The tile stores write through this pointer, the scaling reads
    // through it: the asm and the loads are ordered by program order.
    let sp = s.as_mut_ptr();
    let mut acc = [_mm512_setzero_ps(); MR];
    let stride = nb * size_of::<ActBlock>();
    // SAFETY: rows i0 + i < i0 + MR each hold nb blocks.
    let ab = unsafe { acts.as_ptr().add(i0 * nb) };
    // Block b's sums into set b % 4. SAFETY: b < nb, so block b of the
    // panel and of rows i0.. (their quants at QS_AT, the rows `stride`
    // apart); the sets are configured for MR rows; each Sums holds 16.
    let issue = |b: usize| unsafe {
        let (a, w) = (
            ab.add(b).cast::<u8>().add(QS_AT),
            panel.add(b * PANEL_BLOCK),
        );
        let c = (*sp.add(b % 4)).0.as_mut_ptr().cast();
        match b % 4 {
            0 => sums::<0>(a, stride, w, c),
            1 => sums::<1>(a, stride, w, c),
            2 => sums::<2>(a, stride, w, c),
            _ => sums::<3>(a, stride, w, c),
        }
    };
    (0..nb.min(AHEAD)).for_each(issue);
    for b in 0..nb {
        if b + AHEAD < nb {
            issue(b + AHEAD);
        }
        // SAFETY: the panel's scales of block b (aligned); block b of
        // rows i0.. .
        unsafe {
            let dw = _mm512_load_ps(panel.add(b * PANEL_BLOCK + 512).cast());
            scale(&mut acc, dw, &*sp.add(b % 4), (ab, nb, b));
        }
    }
    for (i, a) in acc.iter().enumerate() {
        // SAFETY: out holds MR · 16 floats.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(16 * i), *a) };
    }
}

/// Rows `i0 .. i0 + mr` of `acts` (`nb` blocks each) × the panel's 16
/// columns (mr ∈ 1, 2, 4, 8, 16).
///
/// # Safety
/// As for [`panel_q4_0`], with the tiles configured for `mr`.
pub(super) unsafe fn panel_tile(
    acts: &[ActBlock],
    nb: usize,
    panel: *const u8,
    i0: usize,
    mr: usize,
    out: &mut [f32],
) {
    // SAFETY (all arms): forwarded from the caller.
    unsafe {
        match mr {
            16 => panel_q4_0::<16>(acts, nb, panel, i0, out),
            8 => panel_q4_0::<8>(acts, nb, panel, i0, out),
            4 => panel_q4_0::<4>(acts, nb, panel, i0, out),
            2 => panel_q4_0::<2>(acts, nb, panel, i0, out),
            _ => panel_q4_0::<1>(acts, nb, panel, i0, out),
        }
    }
}
