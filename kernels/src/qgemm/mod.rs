//! Quantized GEMM, W·A8: `C (m×n) = A (m×k) · Wᵀ` with `W (n×k)` in a GGUF
//! block format and `A` f32, quantized once per call to Q8_1 blocks, then
//! integer dot products.
//!
//! This is the prefill path (the GEMV reads every weight byte once per
//! activation row, the GEMM once per tile of `mr` rows) and, with `mr = 1`,
//! also decode: the interleaved rows need no horizontal sums. Weights are
//! repacked at load ([`repack`], layout in [`pack`]) into groups of `nr`
//! interleaved rows, so the i32 lanes of one dot product instruction are
//! `nr` columns of C; an `mr × nr` register tile reuses each loaded (and,
//! for 4-bit formats, unpacked) weight chunk for `mr` activation rows.
//! Threads split the weight groups (`crate::pool`).
//!
//! Formats ([`FORMATS`]): every quantized GGUF weight format tiletune reads —
//! Q4_0, Q4_1, Q4_K (4-bit nibbles kept), Q5_0, Q5_1 (nibbles plus a
//! fifth-bit plane, merged in registers), MXFP4 (its E2M1 codes as nibbles,
//! mapped in registers by a 16-entry table), Q6_K (nibbles plus two bit
//! planes, one sum per half-block), Q8_0 (int8 values); the
//! kinds, what each block adds and their bits per value are tabled in
//! [`pack`].
//! Activations are always Q8_1 blocks (one f32 scale per 32 values), also
//! for the K-quants, whose per-row GEMV uses Q8_K (one per 256).
//!
//! | variant | interleave `nr` | dot product |
//! |---|---|---|
//! | scalar | 4, 8, 16 | plain Rust (the reference layout walk) |
//! | avx2 | 8, 16 | `vpmaddubsw`+`vpmaddwd` (one or two ymm per chunk; for Q4_0 also a 16-column panel tile, [`QGemmParams::panel`]) |
//! | avx_vnni | 8 | `vpdpbusd` (ymm) |
//! | avx512 / avx512_vnni | 16 | `vpmaddubsw`+`vpmaddwd` / `vpdpbusd` (zmm; avx512_vnni also a panel tile, every format) |
//! | amx | 16 | `tdpbssd` on a panel (up to 16 rows per tile), every format but Q6_K; its register tiles are avx512_vnni's |
//! | neon | 4, 8 | `smull`+`sadalp` |
//! | neon_dotprod | 4, 8 | `sdot` on broadcast activation bytes (`asm!`) |
//! | neon_i8mm | 4, 8 | `smmla` on activation row pairs (`asm!`; 1-row tiles use `sdot`) |
//!
//! **Exactness.** Every variant computes, per (row, column), the same i32
//! block sums (for Q6_K: half-block sums) and accumulates
//! `acc += (d_w·d_x)·Σ` (plus `m_w·s_x` for the kinds with a min; Q6_K adds
//! its two halves one after the other) block by block with separately
//! rounded multiplies and adds, in block order (also when the NEON tiles
//! form two blocks' integer sums first, [`QGemmParams::ku`]), so all
//! variants are
//! bit-identical to the scalar micro-kernel on every ISA. (Scales are kept
//! as GGUF codes — f16, E8M0, K-quant sub-block codes and f16 super-scales —
//! and decoded exactly in registers, so the products see the f32 values
//! ggml computes.) For the formats
//! whose GEMV uses the same activations (all but Q4_K and Q6_K) this is
//! also bit-identical to the scalar W·A8 GEMV (`qgemv::scalar`) on each row,
//! ggml's `vec_dot` order. [`scalar::definition`] is what the tests and the
//! tuner compare against.

/// `$f::<MR, params…>(args…)` with `MR` the compiled tile height for
/// `mr` (8, 4, 2, else 1): the ISA tiles' dispatch, one arm per height.
macro_rules! by_mr {
    ($mr:expr, $f:ident::<$($p:tt),*>($($a:expr),*)) => {
        match $mr {
            8 => $f::<8, $($p),*>($($a),*),
            4 => $f::<4, $($p),*>($($a),*),
            2 => $f::<2, $($p),*>($($a),*),
            _ => $f::<1, $($p),*>($($a),*),
        }
    };
}

/// `sums(b)` then `scale(b, sums)` for every block `b < nb` in order
/// (the NEON tiles' block loop). With `ku` 2 ([`QGemmParams::ku`]) the
/// sums of two consecutive blocks are formed before either is scaled: two
/// independent dependency chains for in-order cores; the float scaling
/// stays block by block in order, so no result changes. An odd last block
/// runs alone.
#[cfg(target_arch = "aarch64")]
macro_rules! unroll {
    ($ku:expr, $nb:expr, $sums:expr, $scale:expr) => {{
        let (nb, sums, mut scale) = ($nb, $sums, $scale);
        let mut b = 0;
        if $ku == 2 {
            while b + 2 <= nb {
                let (t0, t1) = (sums(b), sums(b + 1));
                scale(b, t0);
                scale(b + 1, t1);
                b += 2;
            }
        }
        while b < nb {
            let t = sums(b);
            scale(b, t);
            b += 1;
        }
    }};
}

/// The NEON tiles' dispatch: [`by_mr!`] with the vectors per chunk `V`
/// (interleave `job.nr` 4 or 8: 1 or 2) right after `MR` and the k-unroll
/// `job.ku` (1 or 2) as the last const parameter.
#[cfg(target_arch = "aarch64")]
macro_rules! by_v_mr_ku {
    ($job:expr, $mr:expr, $f:ident::<$($p:tt),*>($($a:expr),*)) => {
        match ($job.nr, $job.ku) {
            (4, 2) => by_mr!($mr, $f::<1, $($p,)* 2>($($a),*)),
            (4, _) => by_mr!($mr, $f::<1, $($p,)* 1>($($a),*)),
            (_, 2) => by_mr!($mr, $f::<2, $($p,)* 2>($($a),*)),
            (_, _) => by_mr!($mr, $f::<2, $($p,)* 1>($($a),*)),
        }
    };
}

pub mod act;
#[cfg(target_arch = "x86_64")]
mod amx;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "aarch64")]
mod dotprod;
#[cfg(target_arch = "aarch64")]
mod i8mm;
#[cfg(target_arch = "aarch64")]
mod neon;
pub mod pack;
pub mod scalar;

pub use act::{
    ActBlock, act_bytes, quantize_activations, quantize_activations_into, quantize_activations_on,
};
pub use pack::{INTERLEAVES, PackedQ, repack, repack_on, repack_stacked_on};

use crate::error::check_len;
use crate::pool::{check_threads, parallel_ranges};
use crate::quant::QuantFormat;
use crate::quant::blocks::{QK, cast_blocks};
use crate::{CpuCaps, Isa, KernelError, Result, Tunable, prefetch};
use pack::Kind;
use serde::{Deserialize, Serialize};

const OP: &str = "qgemm";

/// Weight formats with a GEMM: every weight format (the activation-only
/// Q8_1 and Q8_K have none).
pub const FORMATS: [QuantFormat; 9] = [
    QuantFormat::Q4_0,
    QuantFormat::Q4_1,
    QuantFormat::Q5_0,
    QuantFormat::Q5_1,
    QuantFormat::Q8_0,
    QuantFormat::Q4K,
    QuantFormat::Q5K,
    QuantFormat::Q6K,
    QuantFormat::Mxfp4,
];

/// Whether `format` has a quantized GEMM.
pub fn supports(format: QuantFormat) -> bool {
    FORMATS.contains(&format)
}

/// The ISA variants for `format` (scalar first; empty without a GEMM).
/// AMX only where it has a panel tile ([`panels`]): elsewhere it would run
/// avx512_vnni's tiles under another name.
pub fn variants(format: QuantFormat) -> &'static [Isa] {
    const ALL: [Isa; 9] = [
        Isa::Scalar,
        Isa::Avx2,
        Isa::AvxVnni,
        Isa::Avx512,
        Isa::Avx512Vnni,
        Isa::Amx,
        Isa::Neon,
        Isa::NeonDotprod,
        Isa::NeonI8mm,
    ];
    const NO_AMX: [Isa; 8] = [
        Isa::Scalar,
        Isa::Avx2,
        Isa::AvxVnni,
        Isa::Avx512,
        Isa::Avx512Vnni,
        Isa::Neon,
        Isa::NeonDotprod,
        Isa::NeonI8mm,
    ];
    if !supports(format) {
        &[]
    } else if panels(Isa::Amx, format) {
        &ALL
    } else {
        &NO_AMX
    }
}

/// The interleave widths a variant reads.
pub fn interleaves(isa: Isa) -> &'static [usize] {
    match isa {
        Isa::Scalar => &INTERLEAVES,
        // Interleave 16 is two ymm per chunk sharing each activation
        // broadcast. The AVX-VNNI tiles are the same code, but no machine
        // here runs them (nor does QEMU 7.2), so they claim only the
        // interleave they were tested at.
        Isa::Avx2 => &[8, 16],
        Isa::AvxVnni => &[8],
        Isa::Avx512 | Isa::Avx512Vnni | Isa::Amx => &[16],
        Isa::Neon | Isa::NeonDotprod | Isa::NeonI8mm => &[4, 8],
        // No SME variant: nothing it could read.
        Isa::Sme => &[],
    }
}

/// Activation rows per register tile that have a compiled micro-kernel.
pub const MRS: [usize; 4] = [1, 2, 4, 8];

/// The AMX panel tile's own height beside [`MRS`]: a tile register's 16
/// rows (its sums' accumulators fit in the 32 zmm registers).
pub const AMX_MR: usize = 16;

/// Rows from which AMX's panel tile is the default for `format`: two
/// whole tiles, four for the kinds with a min, whose register tiles need
/// no offset correction while the panel tile's scaling (its bound) has
/// the min's multiply and add to do.
fn amx_from(format: QuantFormat) -> usize {
    match Kind::of(format) {
        Some(k) if k.has_m() => 4 * AMX_MR,
        _ => 2 * AMX_MR,
    }
}

/// Rows from which AVX-512 VNNI's panel tile is the default for `format`
/// (none: never). It saves only the register tile's unpacking, and the
/// tile's 8 rows keep their sums in registers whatever the panel's size,
/// so it measured faster (Zen 4, docs/PERF.md, "the panel on AVX-512",
/// "a panel for every format on AVX-512"):
/// - Q4_0 1.5–4% from 128 rows at every k of Qwen2.5-0.5B's projections;
/// - where the register tile does more than split nibbles (the 5-bit
///   kinds' planes, MXFP4's table, Q6_K's bit pairs, the K-quants'
///   sub-block scales) from 64 rows: at 64–512 rows Q5_0 1.11–1.19×,
///   Q6_K 1.11–1.19×, MXFP4 1.08–1.15×, Q5_1 1.06–1.13×, Q5_K
///   1.06–1.13×, Q4_K 1.01–1.07× (below 64 rows the fill is not paid
///   back: Q6_K at 16 rows 0.98×).
///
/// Not for Q4_1 and Q8_0, whose register tiles unpack no more than a
/// mask or a sign flip a chunk: their panels timed 0.89–1.01× and
/// 0.96–1.01× (their panel blocks are 640 and 576 bytes, their packed
/// blocks 320 and 544).
fn vnni_panel_from(format: QuantFormat) -> Option<usize> {
    match format {
        QuantFormat::Q4_0 => Some(128),
        QuantFormat::Q4_1 | QuantFormat::Q8_0 => None,
        _ => Some(64),
    }
}

/// The tile heights `isa` reads with or without a panel.
pub fn heights(isa: Isa, panel: bool) -> &'static [usize] {
    const AMX: [usize; 5] = [1, 2, 4, 8, AMX_MR];
    if isa == Isa::Amx && panel { &AMX } else { &MRS }
}

/// Tile parameters of the quantized GEMM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QGemmParams {
    /// Activation rows per register tile (each weight chunk loaded once is
    /// used `mr` times): one of [`MRS`], or for the AMX panel tile also
    /// [`AMX_MR`] ([`heights`]).
    pub mr: usize,
    /// Weight rows interleaved per group (the repack layout): one of
    /// [`INTERLEAVES`], and one the variant reads ([`interleaves`]).
    pub nr: usize,
    /// How many blocks ahead the x86 micro-kernels prefetch the quants and
    /// scales (0: none), one of [`PREFETCHES`]. At m = 1 (decode) the tile
    /// is a pure stream from DRAM and one core's hardware prefetcher keeps
    /// too few lines in flight: 16 blocks (4 KiB of Q4 at nr 16) raised
    /// SmolLM2 decode on one thread by ~20% here; the best distance depends
    /// on the memory system, so it is tuned. The NEON variants prefetch the
    /// same way (`prfm pldl1keep`; untimed here, where no ARM core runs);
    /// the scalar tile ignores it. Tables from before it existed read as
    /// 16, what the x86 kernels did.
    #[serde(default = "default_pf")]
    pub pf: usize,
    /// Blocks whose integer sums the NEON tiles form before scaling
    /// either (k-unroll), one of [`UNROLLS`]. With 2, two blocks' chunk
    /// steps are independent dependency chains, which an in-order core
    /// (Cortex-A53/A55) cannot overlap by itself; the float scaling stays
    /// block by block in order, so no result changes (an odd last block
    /// runs alone). It costs registers (twice the live i32 sums), so it is
    /// tuned. The x86 and scalar tiles read 1 only: on x86 a k-unroll
    /// measured slower at every tile (docs/PERF.md, fifth run, item 5): an
    /// out-of-order core overlaps consecutive blocks by itself. Nor do
    /// the i8mm tiles of 2+ rows: each `smmla` already feeds `MR/2 · 2V`
    /// independent sums, and an unrolled Q6_K tile of 8 rows would spill
    /// (its low-half sums stay live; 155 stack accesses against 109,
    /// counted in the compiled code). Tables from before it existed read
    /// as 1, what the kernels then did.
    #[serde(default = "default_ku")]
    pub ku: usize,
    /// Unpack each weight group once into a panel that every activation
    /// row reads ([`panels`]: AVX2 for Q4_0, AVX-512 VNNI for all, AMX for
    /// all but Q6_K), instead of in every register tile. On AVX2 the panel
    /// holds the values as signed bytes and each column's block offset,
    /// and the activations are biased to unsigned once per call, so a tile
    /// does no unpacking and one vector subtraction per row and block for
    /// the offset (docs/PERF.md, "the panel tile"); AVX-512 VNNI and AMX
    /// share one layout (`avx512::fill_panel`): values in the tile
    /// instruction's order with the f32 scales and mins, unsigned for
    /// `vpdpbusd` (whose sums start at the offset, "the panel on
    /// AVX-512"), signed for `tdpbssd` (`amx.rs`).
    /// Same packing, same sums: the results do not change. Tables from
    /// before it existed read as false, what the kernels then did.
    #[serde(default)]
    pub panel: bool,
}

/// The k-unroll factors ([`QGemmParams::ku`]).
pub const UNROLLS: [usize; 2] = [1, 2];

fn default_ku() -> usize {
    1
}

/// The k-unrolls a variant reads at tile height `mr`: both in the NEON
/// and dot product tiles (the i8mm variant's 1-row tiles are those), 1
/// elsewhere.
pub fn unrolls(isa: Isa, mr: usize) -> &'static [usize] {
    match isa {
        Isa::Neon | Isa::NeonDotprod => &UNROLLS,
        Isa::NeonI8mm if mr == 1 => &UNROLLS,
        _ => &[1],
    }
}

/// Whether `isa` has a panel tile ([`QGemmParams::panel`]) for `format`:
/// AVX2 for Q4_0, AVX-512 VNNI for every format, AMX for every format with
/// one scale per 32-value block (all but Q6_K, whose halves have a scale
/// each: `tdpbssd` sums a whole block).
pub fn panels(isa: Isa, format: QuantFormat) -> bool {
    match isa {
        Isa::Avx2 => format == QuantFormat::Q4_0,
        Isa::Avx512Vnni => supports(format),
        Isa::Amx => supports(format) && format != QuantFormat::Q6K,
        _ => false,
    }
}

/// Bytes of one block of the AVX2 panel ([`QGemmParams::panel`]): 16
/// columns' values (512), offsets (64) and scales (64).
const PANEL_BLOCK: usize = 640;

/// Bytes of one block of the AVX-512 VNNI and AMX panels: 16 columns'
/// values (512), scales (64) and, with `seconds`, second values (64: the
/// mins, or Q6_K's upper-half scales).
/// Without them the block stays 576 bytes: at 640 the Q4_0 panel tile
/// timed ~2% slower (a panel of k = 896 is 16.1 KiB, beside 8 KiB of a
/// tile's activations in a 32 KiB L1).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const fn zmm_panel_block(seconds: bool) -> usize {
    if seconds { 640 } else { 576 }
}

/// Bytes of one block of `isa`'s panel.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn panel_block(isa: Isa) -> usize {
    match isa {
        Isa::Avx2 => PANEL_BLOCK,
        _ => zmm_panel_block(true),
    }
}

/// Columns per panel: two ymm per chunk, so each activation broadcast
/// serves two `vpmaddubsw` whatever the packing's interleave.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const PANEL_COLS: usize = 16;

/// The prefetch distances (blocks ahead) the SIMD variants are tuned over.
pub const PREFETCHES: [usize; 4] = [0, 8, 16, 32];

fn default_pf() -> usize {
    16
}

/// What [`QGemmParams`] are chosen for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QGemmShape {
    pub format: QuantFormat,
    pub m: usize,
    pub n: usize,
    pub k: usize,
}

impl QGemmParams {
    /// The analytic default for a forced variant. `nr` is the variant's
    /// natural vector: 8 i32 lanes (ymm), 16 (zmm), 8 on NEON (two
    /// vectors share each activation broadcast). `mr` is bounded by the
    /// register file: the tile keeps `mr·nr/lanes` f32 accumulators and as
    /// many i32 block sums live, plus the weight chunk and a broadcast,
    /// within half the registers (AVX2: 16 → mr 4; AVX-512: 32 zmm → 8;
    /// NEON: 32 with two vectors per row → 4), and by m (no wasted rows).
    /// AVX2 also reads interleave 16 (two ymm per chunk share each
    /// activation broadcast), which the tuner times; it is not the default
    /// because a weight holds one layout and, on Zen 3, interleave 16 sped
    /// up prefill (7–9% on Qwen2.5-0.5B Q4_0) but slowed decode (2–4%),
    /// which is what a user waits on most; the tuner's joint layout
    /// choice weighs the two for a workload (docs/PERF.md, "two ymm per
    /// chunk").
    pub fn default_for_isa(shape: &QGemmShape, _cpu: &CpuCaps, isa: Isa) -> Self {
        // The prefetch default is the distance measured best on x86; on
        // NEON none, what its tiles did before they could (no ARM core
        // here to choose one; the tuner times them all).
        let (nr, cap, pf) = match isa {
            Isa::Avx2 | Isa::AvxVnni => (8, 4, default_pf()),
            Isa::Avx512 | Isa::Avx512Vnni | Isa::Amx => (16, 8, default_pf()),
            Isa::Neon | Isa::NeonDotprod | Isa::NeonI8mm => (8, 4, 0),
            // Scalar ignores the tile; SME has no variant to run it.
            Isa::Scalar | Isa::Sme => (8, 4, 0),
        };
        // A Q8_0 GEMV (decode, m = 1) on AVX-512 streams its blocks in
        // address order, which the hardware prefetchers follow: software
        // prefetch only took issue slots (Zen 4, the tied LM heads of
        // SmolLM2 and Qwen2.5-0.5B, 1.03–1.26× faster without; docs/PERF.md,
        // "One call for q, k and v").
        let pf = if matches!(isa, Isa::Avx512 | Isa::Avx512Vnni | Isa::Amx)
            && shape.format == QuantFormat::Q8_0
            && shape.m == 1
        {
            0
        } else {
            pf
        };
        debug_assert!(pf == 0 || prefetch::measured(isa));
        let mr = MRS
            .iter()
            .copied()
            .filter(|&r| r <= cap && r <= shape.m.max(1))
            .max()
            .unwrap_or(1);
        // The panel tile where it measured faster (docs/PERF.md, "the
        // panel tile"): from 64 rows, where filling the panel is paid
        // back, while the panel stays in a 32 KiB L1 (k ≤ 1632; at k =
        // 4864 it was slower than the register tile). Two rows keep its
        // 16 columns' sums and accumulators in registers.
        if isa == Isa::Avx2
            && panels(isa, shape.format)
            && shape.m >= 64
            && shape.k.div_ceil(QK) * panel_block(isa) <= 32 << 10
        {
            return QGemmParams {
                mr: 2,
                nr,
                pf,
                ku: default_ku(),
                panel: true,
            };
        }
        // AMX's panel tile from [`amx_from`] rows: on Qwen2.5-0.5B's Q4_0
        // prefill it measured 1.14× (one thread) and 1.02× (two) the VNNI
        // panel, on its Q4_K_M (Q5_0, Q8_0, Q4_K) prefill 1.16× and 1.10×
        // the register tiles; below, the register tiles timed as fast or
        // faster (docs/PERF.md, "An AMX panel tile for Q4_0", "AMX for
        // every format").
        if isa == Isa::Amx && panels(isa, shape.format) && shape.m >= amx_from(shape.format) {
            return QGemmParams {
                mr: AMX_MR,
                nr,
                pf,
                ku: default_ku(),
                panel: true,
            };
        }
        // On AVX-512 VNNI the panel tile from [`vnni_panel_from`] rows.
        if isa == Isa::Avx512Vnni
            && panels(isa, shape.format)
            && vnni_panel_from(shape.format).is_some_and(|from| shape.m >= from)
        {
            return QGemmParams {
                mr,
                nr,
                pf,
                ku: default_ku(),
                panel: true,
            };
        }
        QGemmParams {
            mr,
            nr,
            pf,
            ku: default_ku(),
            panel: false,
        }
    }

    /// The search space of one variant: every `mr` × the variant's `nr`
    /// × the prefetch distances and k-unrolls it reads, and where it has a
    /// panel tile for the format ([`panels`]), that tile at every `mr` ×
    /// `nr` with the default prefetch (it prefetches only while filling the
    /// panel).
    pub fn candidates_for_isa(shape: &QGemmShape, cpu: &CpuCaps, isa: Isa) -> Vec<Self> {
        let mut v = Vec::new();
        // AMX's register tiles are avx512_vnni's, timed there: only its
        // panel tile is its own.
        if isa == Isa::Amx {
            for &mr in heights(isa, true).iter().filter(|&&r| r <= shape.m.max(1)) {
                v.push(QGemmParams {
                    mr,
                    nr: 16,
                    pf: default_pf(),
                    ku: 1,
                    panel: true,
                });
            }
        }
        let pfs: &[usize] = if prefetch::reads(isa) {
            &PREFETCHES
        } else {
            &[0]
        };
        for &nr in interleaves(isa).iter().filter(|_| isa != Isa::Amx) {
            for &mr in &MRS {
                for &pf in pfs {
                    for &ku in unrolls(isa, mr) {
                        if mr <= shape.m.max(1) {
                            v.push(QGemmParams {
                                mr,
                                nr,
                                pf,
                                ku,
                                panel: false,
                            });
                        }
                    }
                }
                if panels(isa, shape.format) && mr <= shape.m.max(1) {
                    v.push(QGemmParams {
                        mr,
                        nr,
                        pf: default_pf(),
                        ku: 1,
                        panel: true,
                    });
                }
            }
        }
        let d = Self::default_for_isa(shape, cpu, isa);
        if !v.contains(&d) {
            v.push(d);
        }
        v
    }
}

impl Tunable for QGemmParams {
    type Shape = QGemmShape;

    /// The default of the best variant this CPU runs for the format.
    fn default_for(shape: &QGemmShape, cpu: &CpuCaps) -> Self {
        Self::default_for_isa(shape, cpu, Isa::best_of(variants(shape.format)))
    }

    /// Every `mr` × interleave × prefetch distance × k-unroll, each with
    /// and without the panel at k-unroll 1 (variants accept a subset; the
    /// tuner uses
    /// [`candidates_for_isa`](Self::candidates_for_isa)).
    fn candidates(shape: &QGemmShape, cpu: &CpuCaps) -> Vec<Self> {
        let mut v = Vec::new();
        for &nr in &INTERLEAVES {
            for &mr in &MRS {
                for &pf in &PREFETCHES {
                    for &ku in &UNROLLS {
                        for panel in [false, true] {
                            if ku == 1 || !panel {
                                v.push(QGemmParams {
                                    mr,
                                    nr,
                                    pf,
                                    ku,
                                    panel,
                                });
                            }
                        }
                    }
                }
            }
        }
        let d = Self::default_for(shape, cpu);
        if !v.contains(&d) {
            v.push(d);
        }
        v
    }

    fn validate(&self) -> Result<()> {
        if !MRS.contains(&self.mr) && self.mr != AMX_MR {
            return Err(KernelError::InvalidParams {
                op: OP,
                reason: format!("mr {} must be one of 1, 2, 4, 8 (16: AMX panel)", self.mr),
            });
        }
        if !INTERLEAVES.contains(&self.nr) {
            return Err(KernelError::InvalidParams {
                op: OP,
                reason: format!("nr {} must be one of 4, 8, 16", self.nr),
            });
        }
        if !PREFETCHES.contains(&self.pf) {
            return Err(KernelError::InvalidParams {
                op: OP,
                reason: format!("pf {} must be one of 0, 8, 16, 32", self.pf),
            });
        }
        if !UNROLLS.contains(&self.ku) {
            return Err(KernelError::InvalidParams {
                op: OP,
                reason: format!("ku {} must be 1 or 2", self.ku),
            });
        }
        Ok(())
    }
}

impl Default for QGemmParams {
    fn default() -> Self {
        QGemmParams {
            mr: 4,
            nr: 8,
            pf: default_pf(),
            ku: default_ku(),
            panel: false,
        }
    }
}

/// What a micro-kernel reads: the packed weights and the activations.
pub(crate) struct Job<'a> {
    pub kind: Kind,
    pub nr: usize,
    /// Blocks per row.
    pub nb: usize,
    /// Prefetch distance in blocks (0: none), [`QGemmParams::pf`]; read by
    /// the SIMD tiles.
    pub pf: usize,
    /// Blocks per k-unrolled step, [`QGemmParams::ku`]; read by the NEON
    /// tiles only.
    #[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
    pub ku: usize,
    /// The scale streams; `sc.mode` is the ISA tiles' `SC` parameter.
    pub sc: pack::Scales<'a>,
    pub qs: &'a [u8],
    /// `rows × nb` activation blocks.
    pub acts: &'a [ActBlock],
}

impl Job<'_> {
    /// Scale of row `r` of group `g`, block `b`.
    #[inline]
    pub fn d_at(&self, g: usize, b: usize, r: usize) -> f32 {
        self.sc.d(g * self.nb + b, r)
    }

    /// Second value of row `r` of group `g`, block `b`: the min (Q4_1,
    /// Q5_1 kinds) or upper-half scale (Q6_K).
    #[inline]
    pub fn m_at(&self, g: usize, b: usize, r: usize) -> f32 {
        self.sc.m(g * self.nb + b, r)
    }

    /// Group `g`, block `b` split into its bit planes (empty for the kinds
    /// without) and its nibble or int8 bytes.
    #[inline]
    fn block_at(&self, g: usize, b: usize) -> (&[u8], &[u8]) {
        let len = self.nr * self.kind.row_bytes();
        let at = (g * self.nb + b) * len;
        self.qs[at..at + len].split_at(self.nr * self.kind.planes())
    }

    /// Quants of group `g`, block `b`: the nibble or int8 bytes (for the
    /// kinds with bit planes, the bytes after the planes).
    #[inline]
    pub fn qs_at(&self, g: usize, b: usize) -> &[u8] {
        self.block_at(g, b).1
    }

    /// The bit planes of group `g`, block `b` (kinds with a fifth-bit
    /// plane; `4·nr` bytes, Q6_K `8·nr`), read by `pack::high_bits`.
    #[inline]
    pub fn qh_at(&self, g: usize, b: usize) -> &[u8] {
        debug_assert!(self.kind.five());
        self.block_at(g, b).0
    }

    /// Activation block `b` of row `i`.
    #[inline]
    pub fn act(&self, i: usize, b: usize) -> &ActBlock {
        &self.acts[i * self.nb + b]
    }
}

/// Prefetches the line holding element `at` of `s` if `at` starts a
/// 64-byte line (so each line is prefetched once).
#[inline]
fn prefetch_line<T>(s: &[T], at: usize) {
    if (at * size_of::<T>()).is_multiple_of(64) {
        prefetch::line(s.as_ptr().wrapping_add(at).cast());
    }
}

/// Prefetches the scale streams of the block `job.pf` blocks after group
/// block `gb` (interleave `NR`), as the SIMD tiles do the quants, once per
/// 64-byte line of each stream: f16 scales (and with `min` mins), E8M0
/// bytes, or the K-quants' two code streams and, per super-block, their
/// super-scales. A prefetch per block measured slower at m = 1 than none
/// at all, one per line no slower (AVX2, AVX-512).
#[inline]
fn prefetch_scales<const SC: u8, const NR: usize>(job: &Job<'_>, gb: usize, min: bool) {
    if job.pf == 0 {
        return;
    }
    let ahead = gb + job.pf;
    let sc = &job.sc;
    match SC {
        pack::SC_F16 => {
            prefetch_line(sc.dh, ahead * NR);
            if min {
                prefetch_line(sc.mh, ahead * NR);
            }
        }
        pack::SC_E8M0 => prefetch_line(sc.dc, ahead * NR),
        _ => {
            prefetch_line(sc.dc, ahead * NR);
            prefetch_line(sc.mc, ahead * NR);
            if ahead.is_multiple_of(8) {
                prefetch_line(sc.sd, ahead / 8 * NR);
                // Q6_K reads `sd` for both codes.
                if !std::ptr::eq(sc.sm, sc.sd) {
                    prefetch_line(sc.sm, ahead / 8 * NR);
                }
            }
        }
    }
}

/// A micro-kernel: rows `i0 .. i0 + mr` × the `nr` columns of group `g`,
/// written to `out[i · nr + r]`.
pub(crate) type TileFn = unsafe fn(&Job<'_>, usize, usize, usize, &mut [f32]);

/// The widest micro-tile (the AMX panel tile's 16 rows × 16 columns).
const MAX_TILE: usize = AMX_MR * 16;

/// Rows of the next tile: `mr` while that many remain, then the largest
/// compiled size that fits.
fn tile_rows(rem: usize, mr: usize) -> usize {
    if rem >= mr {
        mr
    } else {
        MRS.iter().copied().filter(|&r| r <= rem).max().unwrap_or(1)
    }
}

/// Most parts [`QGemm::run_prequantized_parts`] splits C's columns into.
pub const MAX_PARTS: usize = 4;

/// Where the drivers put a tile's results. C is shared by workers that
/// write disjoint columns (one range of weight groups each), and the scope
/// ends before C's borrow does.
trait Out: Copy + Send + Sync {
    /// Copies a tile's `rows` × `cols` results (row stride `w` in `buf`)
    /// into C at row `i0`, column `c0`.
    ///
    /// # Safety
    /// `buf` holds `rows` rows of `w ≥ cols` values; rows `i0 .. i0 +
    /// rows` and columns `c0 .. c0 + cols` are inside C, and no other
    /// thread writes them meanwhile.
    unsafe fn put(self, buf: &[f32], w: usize, rows: (usize, usize), cols: (usize, usize));
}

/// C as one row-major matrix: its base and row stride `n`.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32, usize);
// SAFETY: see `Out`.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

impl Out for OutPtr {
    #[inline(always)]
    unsafe fn put(self, buf: &[f32], w: usize, rows: (usize, usize), (c0, cols): (usize, usize)) {
        // SAFETY: forwarded.
        unsafe { copy_tile(buf, w, rows, cols, self.0.add(c0), self.1) }
    }
}

/// C in up to [`MAX_PARTS`] row-major parts side by side, `(base, width)`
/// each, the first holding columns `0 .. width₀`, the next the following
/// ones. A type of its own, not a one-part case of it, so that a call of
/// one matrix pays no part lookup: finding the part in every tile's copy
/// made those calls 1–3% slower (docs/PERF.md, "One call for q, k and v").
#[derive(Clone, Copy)]
struct OutParts {
    parts: [(*mut f32, usize); MAX_PARTS],
    len: usize,
}
// SAFETY: see `Out`.
unsafe impl Send for OutParts {}
// SAFETY: as above.
unsafe impl Sync for OutParts {}

impl OutParts {
    /// `c[i]` holds `widths[i]` columns; at most [`MAX_PARTS`] parts.
    fn new(c: &mut [&mut [f32]], widths: &[usize]) -> Self {
        assert!(c.len() == widths.len() && c.len() <= MAX_PARTS);
        let mut parts = [(std::ptr::null_mut(), 0); MAX_PARTS];
        for ((p, c), &w) in parts.iter_mut().zip(c.iter_mut()).zip(widths) {
            *p = (c.as_mut_ptr(), w);
        }
        OutParts {
            parts,
            len: c.len(),
        }
    }
}

impl Out for OutParts {
    /// A tile inside one part is one copy; one across a boundary (parts
    /// whose widths are not multiples of the tile's) is copied part by
    /// part.
    #[inline(always)]
    unsafe fn put(
        self,
        buf: &[f32],
        w: usize,
        (i0, rows): (usize, usize),
        (c0, cols): (usize, usize),
    ) {
        let (mut p, mut start) = (0, 0);
        while p + 1 < self.len && c0 >= start + self.parts[p].1 {
            start += self.parts[p].1;
            p += 1;
        }
        let mut done = 0;
        while done < cols {
            let (base, n) = self.parts[p];
            let c = c0 + done - start;
            let take = (n - c).min(cols - done);
            // SAFETY: forwarded; columns c .. c + take of part p, which
            // C's column range includes, from column `done` of buf's rows.
            unsafe { copy_tile(&buf[done..], w, (i0, rows), take, base.add(c), n) };
            done += take;
            start += n;
            p += 1;
        }
    }
}

/// Copies `rows` rows of `cols` values (row stride `w` in `buf`) to rows
/// `i0 ..` of a matrix of row stride `n` whose column 0 is at `dst`. A
/// whole row of an 8- or 16-column tile is one fixed-size copy: element by
/// element, with the pointer reloaded for each (it may alias), the copy
/// cost a prefill 7% (docs/PERF.md, "the tile's results into C").
///
/// # Safety
/// `buf` holds the rows' values; the destination rows and columns are
/// inside the matrix, and no other thread writes them meanwhile.
#[inline(always)]
unsafe fn copy_tile(
    buf: &[f32],
    w: usize,
    (i0, rows): (usize, usize),
    cols: usize,
    dst: *mut f32,
    n: usize,
) {
    assert!(cols <= w && (rows == 0 || (rows - 1) * w + cols <= buf.len()));
    for i in 0..rows {
        let src = buf[i * w..].as_ptr();
        // SAFETY: forwarded from the caller; the source is row i of buf.
        unsafe {
            let dst = dst.add((i0 + i) * n);
            match cols {
                16 => dst
                    .cast::<[f32; 16]>()
                    .write_unaligned(src.cast::<[f32; 16]>().read()),
                8 => dst
                    .cast::<[f32; 8]>()
                    .write_unaligned(src.cast::<[f32; 8]>().read()),
                _ => std::ptr::copy_nonoverlapping(src, dst, cols),
            }
        }
    }
}

/// The column widths of C's parts for [`QGemm::run_prequantized_parts`]:
/// each part holds `m` whole rows, and the parts `n` columns in all.
fn split_widths(c: &[&mut [f32]], m: usize, n: usize) -> Result<[usize; MAX_PARTS]> {
    if c.is_empty() || c.len() > MAX_PARTS {
        return Err(KernelError::InvalidParams {
            op: OP,
            reason: format!("C in {} parts; give 1 to {MAX_PARTS}", c.len()),
        });
    }
    let mut widths = [0; MAX_PARTS];
    if m == 0 {
        for c in c {
            check_len(OP, "c", c.len(), 0)?;
        }
        return Ok(widths);
    }
    for (w, c) in widths.iter_mut().zip(c) {
        if !c.len().is_multiple_of(m) {
            return Err(KernelError::InvalidParams {
                op: OP,
                reason: format!("a part of C holds {} values, not {m} whole rows", c.len()),
            });
        }
        *w = c.len() / m;
    }
    let total: usize = widths.iter().sum();
    if total != n {
        return Err(KernelError::InvalidParams {
            op: OP,
            reason: format!("C's parts hold {total} columns, the weights have {n}"),
        });
    }
    Ok(widths)
}

/// A configured quantized GEMM (builder style).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QGemm {
    pub format: QuantFormat,
    pub isa: Isa,
    pub params: QGemmParams,
    pub threads: usize,
}

impl QGemm {
    /// The best variant this CPU runs for `format`, its default parameters
    /// for an `m`-row problem, one thread.
    pub fn new(format: QuantFormat) -> Self {
        let isa = Isa::best_of(variants(format));
        let shape = QGemmShape {
            format,
            m: 64,
            n: 0,
            k: 0,
        };
        QGemm {
            format,
            isa,
            params: QGemmParams::default_for_isa(&shape, &CpuCaps::default(), isa),
            threads: 1,
        }
    }

    crate::tune::config_setters!(QGemmParams);

    /// Checks format, variant, CPU, parameters and threads.
    pub fn check_config(&self) -> Result<()> {
        if !variants(self.format).contains(&self.isa) {
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
        if !interleaves(self.isa).contains(&self.params.nr) {
            return Err(KernelError::InvalidParams {
                op: OP,
                reason: format!(
                    "the {} variant reads interleave {:?}, not {}; repack with one of those",
                    self.isa,
                    interleaves(self.isa),
                    self.params.nr
                ),
            });
        }
        let kus = unrolls(self.isa, self.params.mr);
        if !kus.contains(&self.params.ku) {
            return Err(KernelError::InvalidParams {
                op: OP,
                reason: format!(
                    "the {} variant has no k-unroll {} at mr {} (it reads {kus:?}); use ku 1",
                    self.isa, self.params.ku, self.params.mr
                ),
            });
        }
        if self.params.panel && !panels(self.isa, self.format) {
            return Err(KernelError::InvalidParams {
                op: OP,
                reason: format!(
                    "the {} variant has no panel tile for {}; use panel false",
                    self.isa, self.format
                ),
            });
        }
        if !heights(self.isa, self.params.panel).contains(&self.params.mr) {
            return Err(KernelError::InvalidParams {
                op: OP,
                reason: format!(
                    "mr {} is the AMX panel tile's alone; use one of 1, 2, 4, 8",
                    self.params.mr
                ),
            });
        }
        if self.params.panel && self.params.ku != 1 {
            return Err(KernelError::InvalidParams {
                op: OP,
                reason: "the panel tile has no k-unroll; use ku 1".into(),
            });
        }
        check_threads(OP, self.threads)
    }

    /// Repacks GGUF weights (`n` rows of `k`) for this configuration's `nr`
    /// on its threads.
    pub fn pack(&self, w: &[u8], n: usize, k: usize) -> Result<PackedQ> {
        repack_on(self.format, w, n, k, self.params.nr, self.threads)
    }

    /// `C = A · Wᵀ`: `a` holds `m` rows of `w.k()` values, `c` gets `m`
    /// rows of `w.n()`; `scratch` holds the quantized activations (grown
    /// as needed, reused across calls).
    pub fn run(
        &self,
        w: &PackedQ,
        a: &[f32],
        m: usize,
        c: &mut [f32],
        scratch: &mut Vec<u8>,
    ) -> Result<()> {
        self.check_operands(w, m, c)?;
        let k = w.k();
        check_len(OP, "a", a.len(), m * k)?;
        let bytes = act_bytes(m, k);
        if scratch.len() < bytes {
            scratch.resize(bytes, 0);
        }
        quantize_activations_on(a, m, k, &mut scratch[..bytes], self.threads)?;
        self.run_prequantized(w, &scratch[..bytes], m, c)
    }

    /// As [`run`](Self::run) with activations already quantized by
    /// [`quantize_activations`].
    pub fn run_prequantized(&self, w: &PackedQ, aq: &[u8], m: usize, c: &mut [f32]) -> Result<()> {
        self.run_prequantized_parts(w, aq, m, &mut [c])
    }

    /// As [`run_prequantized`](Self::run_prequantized) with C's columns
    /// in up to [`MAX_PARTS`] parts side by side: `c[i]` gets the `m` rows
    /// (row stride `c[i].len() / m`) of the columns after `c[..i]`'s. So
    /// weights stacked by rows that read the same activations (a layer's
    /// q, k and v) run as one call, and each one's results land in its
    /// own buffer with no copy.
    pub fn run_prequantized_parts(
        &self,
        w: &PackedQ,
        aq: &[u8],
        m: usize,
        c: &mut [&mut [f32]],
    ) -> Result<()> {
        self.check_weights(w)?;
        check_len(OP, "aq", aq.len(), act_bytes(m, w.k()))?;
        let widths = split_widths(c, m, w.n())?;
        if w.k() < QK {
            c.iter_mut().for_each(|c| c.fill(0.0));
        }
        match c {
            [c] => self.run_unchecked(w, aq, m, OutPtr(c.as_mut_ptr(), w.n())),
            _ => self.run_unchecked(w, aq, m, OutParts::new(c, &widths[..c.len()])),
        }
        Ok(())
    }

    fn check_operands(&self, w: &PackedQ, m: usize, c: &[f32]) -> Result<()> {
        self.check_weights(w)?;
        check_len(OP, "c", c.len(), m * w.n())
    }

    fn check_weights(&self, w: &PackedQ) -> Result<()> {
        self.check_config()?;
        if w.format() != self.format || w.nr() != self.params.nr {
            return Err(KernelError::InvalidParams {
                op: OP,
                reason: format!(
                    "weights are {} packed with interleave {}, the kernel expects {} with {}; repack with QGemm::pack",
                    w.format(),
                    w.nr(),
                    self.format,
                    self.params.nr
                ),
            });
        }
        Ok(())
    }

    fn tile_fn(&self) -> TileFn {
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => avx2::tile,
            #[cfg(target_arch = "x86_64")]
            Isa::AvxVnni => avx2::tile_vnni,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => avx512::tile,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni | Isa::Amx => avx512::tile_vnni,
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => neon::tile,
            #[cfg(target_arch = "aarch64")]
            Isa::NeonDotprod => dotprod::tile,
            #[cfg(target_arch = "aarch64")]
            Isa::NeonI8mm => i8mm::tile,
            _ => scalar::tile,
        }
    }

    /// The driver; operands checked by the caller, C zeroed by it when
    /// `k` holds no block.
    fn run_unchecked(&self, w: &PackedQ, aq: &[u8], m: usize, out: impl Out) {
        let (n, nr) = (w.n(), w.nr());
        let nb = w.k() / QK;
        if m == 0 || n == 0 || nb == 0 {
            return;
        }
        let job = Job {
            kind: w.kind(),
            nr,
            nb,
            pf: self.params.pf,
            ku: self.params.ku,
            sc: w.scales(),
            qs: &w.qs,
            acts: cast_blocks(aq).expect("length checked by the caller"),
        };
        #[cfg(target_arch = "x86_64")]
        if self.params.panel {
            self.run_panels(&job, n, m, out);
            return;
        }
        let tile = self.tile_fn();
        let mr = self.params.mr;
        parallel_ranges(w.groups(), self.threads, 1, |groups| {
            let mut buf = [0.0f32; MAX_TILE];
            for g in groups {
                let cols = nr.min(n - g * nr);
                let mut i0 = 0;
                while i0 < m {
                    let rows = tile_rows(m - i0, mr);
                    // SAFETY: check_config verified the CPU runs this
                    // variant and that it reads this interleave; g is a
                    // group of w, i0 + rows <= m, buf holds rows × nr.
                    unsafe { tile(&job, g, i0, rows, &mut buf) };
                    // SAFETY: rows i0 .. i0 + rows < m and columns
                    // g·nr .. g·nr + cols <= n are inside C (m × n); this
                    // worker alone writes the columns of its groups.
                    unsafe { out.put(&buf, nr, (i0, rows), (g * nr, cols)) };
                    i0 += rows;
                }
            }
        });
    }
}

/// One 64-byte aligned line of the panel tile's buffers.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// The calling thread's biased activations ([`QGemmParams::panel`]),
    /// kept between calls (the largest call's size) so a prefill neither
    /// faults in nor zeroes fresh pages for every weight.
    static BIASED: std::cell::Cell<Vec<Line>> = const { std::cell::Cell::new(Vec::new()) };
}

#[cfg(target_arch = "x86_64")]
impl QGemm {
    /// The panel driver ([`QGemmParams::panel`]): the activations biased
    /// to unsigned once, then per weight group its panel filled once and
    /// read by every row tile.
    fn run_panels(&self, job: &Job<'_>, n: usize, m: usize, out: impl Out) {
        let (nr, nb, isa) = (job.nr, job.nb, self.isa);
        let lines = |bytes: usize| bytes.div_ceil(size_of::<Line>());
        // Only AVX2's tile reads biased activations: AVX-512 VNNI takes
        // the signed ones as the broadcast operand. Grown, never cleared:
        // the pass below writes every byte the tiles read.
        let mut biased = BIASED.take();
        let need = if isa == Isa::Avx2 { 32 * m * nb } else { 0 };
        if biased.len() < lines(need) {
            biased.resize(lines(need), Line([0; 64]));
        }
        // SAFETY: Line is 64 plain bytes, so the lines are their bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(biased.as_mut_ptr().cast::<u8>(), biased.len() * 64)
        };
        let xb = crate::pool::Disjoint::new(bytes);
        if need > 0 {
            // `x + 128` as bytes: the sign bit flipped. Rows split across
            // the workers: serial, this pass is a tenth of the small-n
            // projections.
            parallel_ranges(m, self.threads, 1, |rows| {
                for i in rows {
                    // SAFETY: the buffer holds 32·m·nb bytes and this
                    // worker alone writes row i's.
                    let dst = unsafe { xb.part(32 * i * nb..32 * (i + 1) * nb) };
                    for (d, a) in dst
                        .chunks_exact_mut(QK)
                        .zip(&job.acts[i * nb..(i + 1) * nb])
                    {
                        for (d, &q) in d.iter_mut().zip(&a.qs) {
                            *d = (q as u8) ^ 0x80;
                        }
                    }
                }
            });
        }
        let mr = self.params.mr;
        // AMX's last rows, when fewer than its tile's, as a whole tile
        // (zero blocks below them).
        let mut tail = Vec::new();
        if isa == Isa::Amx && !m.is_multiple_of(mr) {
            tail = vec![ActBlock::default(); mr * nb];
            let first = (m - m % mr) * nb;
            tail[..m % mr * nb].copy_from_slice(&job.acts[first..m * nb]);
        }
        let (groups, w) = (n.div_ceil(nr), PANEL_COLS);
        parallel_ranges(n.div_ceil(w), self.threads, 1, |units| {
            let mut buf = [0.0f32; MAX_TILE];
            let mut panel = vec![Line([0; 64]); lines(nb * panel_block(isa))];
            // SAFETY: check_config verified the CPU runs AMX and that mr
            // is one of its heights (≤ 16). Released when the worker's
            // units are done.
            let _tiles = (isa == Isa::Amx).then(|| unsafe { amx::Tiles::new(mr) });
            for u in units {
                let p = panel.as_mut_ptr().cast();
                // SAFETY: panels(isa, format) was checked with the
                // configuration (the job is of a format the variant's
                // panel reads, at an interleave it reads: 8 or 16 on
                // AVX2, 16 on AVX-512 and AMX, so u is a group there),
                // u < ⌈n / 16⌉ and the panel holds nb blocks, aligned.
                unsafe {
                    match isa {
                        Isa::Avx2 => avx2::fill_panel(job, groups, u, p),
                        Isa::Amx => amx::fill_panel(job, u, p),
                        _ => avx512::fill_panel::<true>(job, u, p),
                    }
                };
                let cols = w.min(n - u * w);
                let mut i0 = 0;
                while i0 < m {
                    // The AMX tile takes the last rows at once, from
                    // their copy in a tile of its height.
                    let rows = match isa {
                        Isa::Amx => mr.min(m - i0),
                        _ => tile_rows(m - i0, mr),
                    };
                    // SAFETY: the panel of columns 16u.. is filled, xb
                    // holds every row's biased blocks, i0 + rows <= m;
                    // AMX's tiles are configured for mr, and its tiles
                    // read mr whole rows: of the job's activations, or
                    // of the tail's copy.
                    unsafe {
                        let p = panel.as_ptr().cast();
                        match isa {
                            Isa::Avx2 => avx2::panel_tile(job, p, xb.ptr(), i0, rows, &mut buf),
                            Isa::Amx if rows < mr => {
                                amx::panel_tile(job, &tail, p, 0, mr, &mut buf)
                            }
                            Isa::Amx => amx::panel_tile(job, job.acts, p, i0, mr, &mut buf),
                            // Avx512Vnni, the other variant with a panel.
                            _ => avx512::panel_tile(job, p, i0, rows, &mut buf),
                        }
                    };
                    // SAFETY: rows i0 .. i0 + rows < m and columns
                    // u·16 .. u·16 + cols <= n are inside C; this worker
                    // alone writes the columns of its units.
                    unsafe { out.put(&buf, w, (i0, rows), (u * w, cols)) };
                    i0 += rows;
                }
            }
        });
        BIASED.set(biased);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tile_rows_decomposes() {
        assert_eq!(tile_rows(17, 8), 8);
        assert_eq!(tile_rows(7, 8), 4);
        assert_eq!(tile_rows(3, 4), 2);
        assert_eq!(tile_rows(1, 4), 1);
    }

    #[test]
    fn params_validate_and_defaults_fit_their_variant() {
        let cpu = CpuCaps::default();
        for (format, &isa) in FORMATS
            .iter()
            .flat_map(|&f| variants(f).iter().map(move |i| (f, i)))
        {
            for m in [1, 2, 3, 15, 16, 31, 32, 63, 64] {
                let s = QGemmShape {
                    format,
                    m,
                    n: 64,
                    k: 256,
                };
                let d = QGemmParams::default_for_isa(&s, &cpu, isa);
                assert!(d.validate().is_ok());
                assert!(d.mr <= m);
                assert!(interleaves(isa).contains(&d.nr), "{isa}");
                let c = QGemmParams::candidates_for_isa(&s, &cpu, isa);
                assert!(c.contains(&d));
                assert!(c.iter().all(|p| interleaves(isa).contains(&p.nr)));
                if isa == Isa::Amx {
                    // Its register tiles are avx512_vnni's, timed there:
                    // only its panel tile at every height, and the default.
                    assert!(c.iter().all(|p| p.panel || *p == d), "{c:?}");
                    for &mr in heights(isa, true) {
                        let timed = c.iter().any(|p| p.panel && p.mr == mr);
                        assert_eq!(timed, mr <= m, "amx mr={mr} m={m}");
                    }
                    assert_eq!(
                        d.panel,
                        m >= amx_from(format),
                        "amx default at m={m}, {format}"
                    );
                    continue;
                }
                // Every SIMD variant prefetches, so its distances are timed.
                for &pf in &PREFETCHES {
                    let timed = c.iter().any(|p| p.pf == pf);
                    assert_eq!(timed, pf == 0 || isa != Isa::Scalar, "{isa} pf={pf}");
                }
                // Every k-unroll the variant reads is timed, no other.
                for &mr in MRS.iter().filter(|&&r| r <= m) {
                    for &ku in &UNROLLS {
                        assert_eq!(
                            c.iter().any(|p| p.mr == mr && p.ku == ku),
                            unrolls(isa, mr).contains(&ku),
                            "{isa} mr={mr} ku={ku}"
                        );
                    }
                }
            }
        }
        let ok = QGemmParams::default();
        assert!(ok.validate().is_ok());
        assert!(QGemmParams { mr: 3, ..ok }.validate().is_err());
        assert!(QGemmParams { nr: 12, ..ok }.validate().is_err());
        assert!(QGemmParams { pf: 4, ..ok }.validate().is_err());
        assert!(QGemmParams { ku: 0, ..ok }.validate().is_err());
        assert!(QGemmParams { ku: 3, ..ok }.validate().is_err());
        // Tables from before `pf` and `ku` existed read as what the
        // kernels then did.
        let old: QGemmParams = serde_json::from_str(r#"{"mr":1,"nr":16}"#).unwrap();
        assert_eq!((old.pf, old.ku, old.panel), (16, 1, false));
    }

    #[test]
    fn a_k_unroll_the_variant_does_not_read_is_refused() {
        let runs = variants(QuantFormat::Q4_0).iter().copied();
        for isa in runs.filter(|i| i.is_available()) {
            for mr in MRS {
                let nr = interleaves(isa)[0];
                let q = QGemm::new(QuantFormat::Q4_0).isa(isa).params(QGemmParams {
                    mr,
                    nr,
                    pf: 0,
                    ku: 2,
                    panel: false,
                });
                let err = q.check_config().err();
                let reads = unrolls(isa, mr).contains(&2);
                assert_eq!(err.is_none(), reads, "{isa} mr={mr}: {err:?}");
                if let Some(e) = err {
                    assert!(e.to_string().contains("use ku 1"), "{e}");
                }
            }
        }
        // The NEON tiles read both at every height.
        assert!(MRS.iter().all(|&mr| unrolls(Isa::Neon, mr) == UNROLLS));
    }
}
