//! AMX-INT8 panel tile at interleave 16: one `tdpbssd` forms a block's
//! i32 sums for up to 16 activation rows × 16 columns, which AVX-512 then
//! scales. Every format with one scale per 32-value block: Q4_0, Q4_1 and
//! Q4_K, Q5_0, Q5_1 and Q5_K, Q8_0, MXFP4 (not Q6_K, whose half-blocks
//! have a scale each).
//!
//! As on AVX-512 VNNI, each weight group (16 columns) is unpacked once per
//! call into a panel that every row tile reads ([`fill_panel`]), here as
//! signed values in the tile instruction's layout: block `b` is 8 rows of
//! 64 bytes, row `r` holding values `4r .. 4r + 4` of the block for each
//! of the 16 columns (4 bytes per column), then the 16 scales as f32, then
//! (Q4_1, Q5_1 and their K-quants) the 16 mins. The values are the
//! formats' codes less their offsets (Q4_0 `q − 8`, Q5_0 `q − 16`, MXFP4
//! its doubled E2M1 value), or the codes themselves for the kinds with a
//! min and for Q8_0. The activations' 32 quant bytes are then the other
//! operand where they lie: one tile row per activation row, strided by
//! the row's blocks. The sums are exactly the block sums every variant
//! forms (the register tiles subtract the offset times the activation sum
//! afterwards, in i32), and the scaling is the register tiles' (separately
//! rounded multiplies and adds, block by block in order), so the results
//! are bit-identical to the scalar micro-kernel.
//!
//! The block is 32 values, so each tile instruction does half the work its
//! 64-byte rows allow: the per-block scales need each block's sums apart.
//! The scaling, not the tile instruction, is what bounds this tile.
//!
//! Tile registers ([`Tiles`]): four sets of sums (tmm0, tmm3, tmm4,
//! tmm5), with two of activations and weights (tmm1/tmm2, tmm7/tmm6),
//! used by consecutive blocks in turn: while block `b`'s sums are scaled
//! from memory, block `b + 1`'s are stored from their tile and block
//! `b + 1 + AHEAD`'s product issued ([`AHEAD`]), so no store waits on the
//! product issued just before it. A call's last rows, when fewer than a
//! tile's, are copied by the driver into a whole tile with zero blocks
//! below them, so one configuration serves a whole call (`ldtilecfg` is
//! not cheap) and no tile reads past the activations.

use super::{ActBlock, Job, zmm_panel_block};
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

/// Blocks whose products are issued beyond the one being stored while a
/// block is scaled. One: two measured no faster (docs/PERF.md, "The AMX
/// tile's scaling in registers").
const AHEAD: usize = 1;

/// One block's sums: the activation bytes at `a` (32 per row, rows
/// `stride` apart) times the panel block at `w`, into tile set `SET`'s
/// sums tile ([`Tiles`]; block `b` in set `b % 4`). Stored by [`store`]
/// a block later, so the store does not wait on this product.
///
/// # Safety
/// Tiles configured ([`Tiles::new`]); `a` holds the tile's rows, `w` a
/// panel block.
#[inline(always)]
unsafe fn sums<const SET: u8>(a: *const u8, stride: usize, w: *const u8) {
    macro_rules! block {
        ($c:literal, $a:literal, $w:literal) => {
            asm!(
                concat!("tilezero ", $c),
                concat!("tileloadd ", $a, ", [{a} + {s}*1]"),
                concat!("tileloadd ", $w, ", [{w} + {l}*1]"),
                concat!("tdpbssd ", $c, ", ", $a, ", ", $w),
                a = in(reg) a, s = in(reg) stride, w = in(reg) w, l = in(reg) 64usize,
                options(nostack, readonly),
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

/// Set `SET`'s sums tile ([`sums`]) as rows of 16 i32 at `c`, 64 bytes
/// apart.
///
/// # Safety
/// Tiles configured ([`Tiles::new`]); `c` holds the tile's rows.
#[inline(always)]
unsafe fn store<const SET: u8>(c: *mut u8) {
    macro_rules! block {
        ($c:literal) => {
            asm!(
                concat!("tilestored [{c} + {l}*1], ", $c),
                c = in(reg) c, l = in(reg) 64usize, options(nostack),
            )
        };
    }
    // SAFETY: forwarded from the caller.
    unsafe {
        match SET {
            0 => block!("tmm0"),
            1 => block!("tmm3"),
            2 => block!("tmm4"),
            _ => block!("tmm5"),
        }
    }
}

/// The 16-column sums of one block, 16 i32 per row, 64-byte aligned.
#[repr(C, align(64))]
struct Sums([i32; 16 * 16]);

/// `acc[i] += (d_w · d_x[i]) · Σ[i]` for block `b` of activation rows
/// `ab + i·nb`, plus `m_w · s_x[i]` before the add with a min (`MIN`):
/// the register tiles' scaling.
///
/// # Safety
/// Needs AVX-512 F; block `b` of `MR` rows at `ab`, `nb` blocks apart;
/// rows `0 .. MR` of the sums at `s` stored.
#[inline(always)]
unsafe fn scale<const MR: usize, const MIN: bool>(
    acc: &mut [__m512; MR],
    (dw, mw): (__m512, __m512),
    s: *const Sums,
    (ab, nb, b): (*const ActBlock, usize, usize),
) {
    // Unrolled by hand: as a loop, the compiler keeps the accumulators of
    // the tile with mins on the stack, a load and a store per row and
    // block beside the tile stores.
    macro_rules! rows {
        ($($i:literal)*) => {$(
            if $i < MR {
                // SAFETY: forwarded from the caller; row $i < MR of the
                // sums, aligned.
                unsafe {
                    let x = &*ab.add($i * nb + b);
                    let row = (&raw const (*s).0).cast::<i32>().add(16 * $i);
                    let si = _mm512_cvtepi32_ps(_mm512_load_si512(row.cast()));
                    let dd = _mm512_mul_ps(dw, _mm512_set1_ps(x.d()));
                    let mut t = _mm512_mul_ps(dd, si);
                    if MIN {
                        t = _mm512_add_ps(t, _mm512_mul_ps(mw, _mm512_set1_ps(x.s())));
                    }
                    acc[$i] = _mm512_add_ps(acc[$i], t);
                }
            }
        )*};
    }
    rows!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);
}

/// Rows `i0 .. i0 + MR` of `acts` × the panel's 16 columns into `out` (row
/// `i` at `16·i`), [`AHEAD`] blocks in flight; `MIN`: the panel has mins.
///
/// # Safety
/// Needs AVX-512 F/BW and AMX with the tiles configured for `MR`-row
/// tiles; the panel filled for `nb` blocks; rows `i0 .. i0 + MR` inside
/// `acts` (`nb` blocks each); `out` ≥ `MR · 16`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn panel<const MR: usize, const MIN: bool>(
    acts: &[ActBlock],
    nb: usize,
    panel: *const u8,
    i0: usize,
    out: &mut [f32],
) {
    debug_assert!(out.len() >= MR * 16 && acts.len() >= (i0 + MR) * nb);
    // Not zeroed: each set's rows 0 .. MR are stored by its tile before
    // they are scaled, and its other rows are never read. Zeroing 4 KiB
    // a call costs about 5% of this tile's time at k = 1536.
    let mut s = [const { std::mem::MaybeUninit::<Sums>::uninit() }; 4];
    // The tile stores write through this pointer, the scaling reads
    // through it: the asm and the loads are ordered by program order.
    let sp = s.as_mut_ptr().cast::<Sums>();
    let mut acc = [_mm512_setzero_ps(); MR];
    let stride = nb * size_of::<ActBlock>();
    // SAFETY: rows i0 + i < i0 + MR each hold nb blocks.
    let ab = unsafe { acts.as_ptr().add(i0 * nb) };
    // Block b's sums into set b % 4. SAFETY: b < nb, so block b of the
    // panel and of rows i0.. (their quants at QS_AT, the rows `stride`
    // apart); the sets are configured for MR rows.
    let issue = |b: usize| unsafe {
        let (a, w) = (
            ab.add(b).cast::<u8>().add(QS_AT),
            panel.add(b * zmm_panel_block(MIN)),
        );
        match b % 4 {
            0 => sums::<0>(a, stride, w),
            1 => sums::<1>(a, stride, w),
            2 => sums::<2>(a, stride, w),
            _ => sums::<3>(a, stride, w),
        }
    };
    // Set b % 4's tile into its Sums. SAFETY: each Sums holds 16 rows.
    let put = |b: usize| unsafe {
        let c = sp.add(b % 4).cast();
        match b % 4 {
            0 => store::<0>(c),
            1 => store::<1>(c),
            2 => store::<2>(c),
            _ => store::<3>(c),
        }
    };
    (0..nb.min(AHEAD + 1)).for_each(issue);
    put(0);
    for b in 0..nb {
        if b + 1 + AHEAD < nb {
            issue(b + 1 + AHEAD);
        }
        if b + 1 < nb {
            put(b + 1);
        }
        // SAFETY: the panel's scales (and mins) of block b (aligned);
        // block b of rows i0.. .
        unsafe {
            let pb = panel.add(b * zmm_panel_block(MIN));
            let dw = _mm512_load_ps(pb.add(512).cast());
            let mw = if MIN {
                _mm512_load_ps(pb.add(576).cast())
            } else {
                _mm512_setzero_ps()
            };
            scale::<MR, MIN>(&mut acc, (dw, mw), sp.add(b % 4), (ab, nb, b));
        }
    }
    for (i, a) in acc.iter().enumerate() {
        // SAFETY: out holds MR · 16 floats.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(16 * i), *a) };
    }
}

/// Rows `i0 .. i0 + mr` of `acts` (`job.nb` blocks each: the job's
/// activations or the driver's copy of its last rows) × the panel's 16
/// columns (mr ∈ 1, 2, 4, 8, 16).
///
/// # Safety
/// As for [`panel`], the panel filled from `job` ([`fill_panel`]) and the
/// tiles configured for `mr`.
pub(super) unsafe fn panel_tile(
    job: &Job<'_>,
    acts: &[ActBlock],
    panel: *const u8,
    i0: usize,
    mr: usize,
    out: &mut [f32],
) {
    let nb = job.nb;
    macro_rules! by_mr {
        ($min:literal) => {
            match mr {
                16 => self::panel::<16, $min>(acts, nb, panel, i0, out),
                8 => self::panel::<8, $min>(acts, nb, panel, i0, out),
                4 => self::panel::<4, $min>(acts, nb, panel, i0, out),
                2 => self::panel::<2, $min>(acts, nb, panel, i0, out),
                _ => self::panel::<1, $min>(acts, nb, panel, i0, out),
            }
        };
    }
    // SAFETY (all arms): forwarded from the caller.
    unsafe {
        // The kinds with a min (Q6_K, the other kind with a second
        // value, has no panel).
        if job.kind.has_m() {
            by_mr!(true)
        } else {
            by_mr!(false)
        }
    }
}

/// Unpacks group `g` of `job` into `panel`: the AVX-512 VNNI panel's
/// layout (`avx512::fill_panel`) with signed values, the codes less
/// their offsets.
///
/// # Safety
/// Needs AVX-512 F/BW; `job` at interleave 16 of a format AMX has a panel
/// for (`super::panels`), `g` one of its groups; `panel` holds `nb`
/// blocks, 64-byte aligned.
pub(super) unsafe fn fill_panel(job: &Job<'_>, g: usize, panel: *mut u8) {
    // SAFETY: forwarded from the caller.
    unsafe { super::avx512::fill_panel::<false>(job, g, panel) }
}
