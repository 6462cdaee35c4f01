//! Quantized GEMV: `y[n] = Σ_k W[n, k] · x[k]` with `W` in a GGUF block
//! format (row-major: each row is `k / block_size` consecutive blocks, as in
//! a GGUF tensor) and two activation modes:
//!
//! - **W·A32** ([`QMode::A32`]): `x` stays f32; weights are dequantized in
//!   registers and multiplied in f32.
//! - **W·A8** ([`QMode::A8`]): `x` is first quantized to the format's Q8
//!   activation blocks ([`activation_format`]: Q8_0, Q8_1 or Q8_K), then each
//!   block pair is an integer dot product (`maddubs`/`dpbusd` on x86,
//!   `smull`/`sdot` on aarch64) scaled once per block.
//!
//! [`QGemv`] is the safe entry point: it checks shapes once, picks (or
//! checks) the ISA variant, splits rows over `threads` workers
//! (`crate::pool`), and runs the variant over groups of
//! [`QGemvParams::rows_per_block`] rows that share each load of `x`.
//! `scalar.rs` is the reference every variant is tested against.
//!
//! Variants ([`variants`] is the source of truth; [`QGemv::new`] picks the
//! best one the CPU runs):
//!
//! | weights | W·A32 | W·A8 (activations) |
//! |---|---|---|
//! | Q4_0, Q8_0, MXFP4 | scalar, avx2, avx512, neon | scalar, avx2, avx_vnni, avx512, avx512_vnni, neon, neon_dotprod (Q8_0) |
//! | Q4_1 | scalar, avx2, avx512, neon | same (Q8_1) |
//! | Q5_0, Q5_1 | scalar, avx2, neon | scalar, avx2, avx_vnni, neon, neon_dotprod (Q8_0 / Q8_1) |
//! | Q4_K, Q5_K, Q6_K | scalar, avx2, neon | scalar, avx2, neon, neon_dotprod (Q8_K) |
//!
//! An AVX-512 machine runs the avx2 kernels where no avx512 one exists.
//! Weights interleaved across rows (one vector lane per row, no horizontal
//! reduction) are the quantized GEMM's layout (`crate::qgemm`), which the
//! runtime also runs for decode at m = 1.
//! `neon_i8mm` is not offered: `smmla` computes a 2×2 tile, so with one
//! activation column half of its products would be wasted; it pays off in
//! GEMM, not GEMV.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "aarch64")]
mod dotprod;
#[cfg(target_arch = "aarch64")]
mod neon;
pub mod scalar;

use crate::error::check_len;
use crate::pool::{check_threads, pool, split_range};
use crate::quant::blocks::{
    BlockMxfp4, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K,
    BlockQ8_0, BlockQ8_1, BlockQ8K, RawBlock, cast_blocks,
};
use crate::quant::{self, QuantFormat};
use crate::{CpuCaps, Isa, KernelError, Result, Tunable, prefetch};
use serde::{Deserialize, Serialize};

const OP: &str = "qgemv";

/// Activation mode: f32 activations, or activations quantized to Q8 blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QMode {
    /// Weights dequantized in registers, f32 activations.
    A32,
    /// Activations quantized to Q8 blocks, integer dot products.
    A8,
}

impl QMode {
    /// Stable name for selector-table keys.
    pub fn name(self) -> &'static str {
        match self {
            QMode::A32 => "a32",
            QMode::A8 => "a8",
        }
    }
}

/// The Q8 activation format W·A8 pairs with a weight format (as ggml's
/// `vec_dot_type`): Q8_1 for the offset formats, Q8_K for the K-quants,
/// Q8_0 otherwise.
pub fn activation_format(format: QuantFormat) -> QuantFormat {
    match format {
        QuantFormat::Q4_1 | QuantFormat::Q5_1 => QuantFormat::Q8_1,
        QuantFormat::Q4K | QuantFormat::Q5K | QuantFormat::Q6K | QuantFormat::Q8K => {
            QuantFormat::Q8K
        }
        _ => QuantFormat::Q8_0,
    }
}

/// Quantizes activations `x` for W·A8 with weights in `format`.
pub fn quantize_activations(format: QuantFormat, x: &[f32]) -> Result<Vec<u8>> {
    quant::quantize(activation_format(format), x)
}

/// The ISA variants implemented for `format` in `mode` (scalar first).
/// Activation-only formats (Q8_1, Q8_K) have none.
pub fn variants(format: QuantFormat, mode: QMode) -> &'static [Isa] {
    use QuantFormat as F;
    match (format, mode) {
        (F::Q8_1 | F::Q8K, _) => &[],
        (F::Q4_0 | F::Q4_1 | F::Q8_0 | F::Mxfp4, QMode::A32) => {
            &[Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon]
        }
        (F::Q5_0 | F::Q5_1 | F::Q4K | F::Q5K | F::Q6K, QMode::A32) => {
            &[Isa::Scalar, Isa::Avx2, Isa::Neon]
        }
        (F::Q4_0 | F::Q8_0 | F::Mxfp4 | F::Q4_1, QMode::A8) => &[
            Isa::Scalar,
            Isa::Avx2,
            Isa::AvxVnni,
            Isa::Avx512,
            Isa::Avx512Vnni,
            Isa::Neon,
            Isa::NeonDotprod,
        ],
        (F::Q5_0 | F::Q5_1, QMode::A8) => &[
            Isa::Scalar,
            Isa::Avx2,
            Isa::AvxVnni,
            Isa::Neon,
            Isa::NeonDotprod,
        ],
        (F::Q4K | F::Q5K | F::Q6K, QMode::A8) => {
            &[Isa::Scalar, Isa::Avx2, Isa::Neon, Isa::NeonDotprod]
        }
    }
}

/// Tile parameters of the quantized GEMV.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QGemvParams {
    /// Rows computed together, sharing each load (and, for W·A32, each
    /// conversion) of an activation block: 1, 2 or 4.
    pub rows_per_block: usize,
    /// How many bytes ahead of each row group the x86 and NEON variants
    /// prefetch the weights (0: none), one of [`PREFETCHES`]. A GGUF
    /// tensor's rows are contiguous, so the weights are one linear stream;
    /// before each group of rows the next group's bytes `pf` further on are
    /// requested, which keeps more lines in flight than one core's
    /// hardware prefetcher does (see the driver, `drive`; the best distance is
    /// unmeasured on ARM, so it is tuned). Scalar ignores it. Tables from
    /// before it existed read as 0, what those kernels did.
    #[serde(default)]
    pub pf: usize,
}

/// The allowed `rows_per_block` values (each has a compiled micro-kernel).
pub const ROWS_PER_BLOCK: [usize; 3] = [1, 2, 4];

/// The prefetch distances (bytes) the x86 and NEON variants are tuned over
/// (the prefetch is issued by the shared driver, which they all run).
pub const PREFETCHES: [usize; 4] = prefetch::BYTE_DISTANCES;

/// What [`QGemvParams`] are chosen for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QGemvShape {
    pub format: QuantFormat,
    pub mode: QMode,
    pub n: usize,
    pub k: usize,
}

impl Tunable for QGemvParams {
    type Shape = QGemvShape;

    /// GEMV streams W once, so the only reuse is of `x`: a group of R rows
    /// reads (and for W·A32 converts) each activation block once instead of
    /// R times, and keeps R independent accumulator chains in flight to
    /// hide FMA latency. R = 4 fits every ISA's register file (4
    /// accumulators + one activation block + temporaries ≤ 16 registers on
    /// AVX2, the smallest). The R weight streams plus `x` must stay in L1D
    /// between blocks; when `x` alone exceeds half of L1D the extra streams
    /// start evicting it, and R = 2 is the safer start. On x86 the stream
    /// is prefetched 8 KiB ahead (NEON starts at no prefetch: no distance
    /// was measured on ARM; the tuner times them).
    fn default_for(shape: &QGemvShape, cpu: &CpuCaps) -> Self {
        let x_bytes = match shape.mode {
            QMode::A32 => 4 * shape.k,
            QMode::A8 => activation_format(shape.format).row_bytes(shape.k),
        };
        let rows_per_block = if shape.n < 2 {
            1
        } else if shape.n < 4 || x_bytes > cpu.l1d / 2 {
            2
        } else {
            4
        };
        let pf = prefetch::default_bytes(Isa::best_of(variants(shape.format, shape.mode)));
        QGemvParams { rows_per_block, pf }
    }

    /// Every row group × the prefetch distances, where the best variant
    /// reads them.
    fn candidates(shape: &QGemvShape, cpu: &CpuCaps) -> Vec<Self> {
        let pfs = prefetch::byte_candidates(Isa::best_of(variants(shape.format, shape.mode)));
        let mut v: Vec<Self> = ROWS_PER_BLOCK
            .iter()
            .flat_map(|&rows_per_block| {
                pfs.iter()
                    .map(move |&pf| QGemvParams { rows_per_block, pf })
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

impl Default for QGemvParams {
    fn default() -> Self {
        QGemvParams {
            rows_per_block: 4,
            pf: 0,
        }
    }
}

/// Weight rows viewed as typed blocks (rows are contiguous).
#[derive(Clone, Copy)]
pub enum Rows<'a> {
    Q4_0(&'a [BlockQ4_0]),
    Q4_1(&'a [BlockQ4_1]),
    Q5_0(&'a [BlockQ5_0]),
    Q5_1(&'a [BlockQ5_1]),
    Q8_0(&'a [BlockQ8_0]),
    Q4K(&'a [BlockQ4K]),
    Q5K(&'a [BlockQ5K]),
    Q6K(&'a [BlockQ6K]),
    Mxfp4(&'a [BlockMxfp4]),
}

/// Weight rows with their matching quantized activations.
#[derive(Clone, Copy)]
pub enum A8Rows<'a> {
    Q4_0(&'a [BlockQ4_0], &'a [BlockQ8_0]),
    Q5_0(&'a [BlockQ5_0], &'a [BlockQ8_0]),
    Q8_0(&'a [BlockQ8_0], &'a [BlockQ8_0]),
    Mxfp4(&'a [BlockMxfp4], &'a [BlockQ8_0]),
    Q4_1(&'a [BlockQ4_1], &'a [BlockQ8_1]),
    Q5_1(&'a [BlockQ5_1], &'a [BlockQ8_1]),
    Q4K(&'a [BlockQ4K], &'a [BlockQ8K]),
    Q5K(&'a [BlockQ5K], &'a [BlockQ8K]),
    Q6K(&'a [BlockQ6K], &'a [BlockQ8K]),
}

fn cast<B: RawBlock>(bytes: &[u8]) -> &[B] {
    cast_blocks(bytes).expect("lengths checked by the entry point")
}

fn sub<'a, B>(w: &'a [B], nb: usize, r: &std::ops::Range<usize>) -> &'a [B] {
    &w[r.start * nb..r.end * nb]
}

impl<'a> Rows<'a> {
    fn new(format: QuantFormat, w: &'a [u8]) -> Self {
        match format {
            QuantFormat::Q4_0 => Rows::Q4_0(cast(w)),
            QuantFormat::Q4_1 => Rows::Q4_1(cast(w)),
            QuantFormat::Q5_0 => Rows::Q5_0(cast(w)),
            QuantFormat::Q5_1 => Rows::Q5_1(cast(w)),
            QuantFormat::Q8_0 => Rows::Q8_0(cast(w)),
            QuantFormat::Q4K => Rows::Q4K(cast(w)),
            QuantFormat::Q5K => Rows::Q5K(cast(w)),
            QuantFormat::Q6K => Rows::Q6K(cast(w)),
            QuantFormat::Mxfp4 => Rows::Mxfp4(cast(w)),
            QuantFormat::Q8_1 | QuantFormat::Q8K => unreachable!("rejected by variants()"),
        }
    }

    fn rows(self, nb: usize, r: &std::ops::Range<usize>) -> Self {
        match self {
            Rows::Q4_0(w) => Rows::Q4_0(sub(w, nb, r)),
            Rows::Q4_1(w) => Rows::Q4_1(sub(w, nb, r)),
            Rows::Q5_0(w) => Rows::Q5_0(sub(w, nb, r)),
            Rows::Q5_1(w) => Rows::Q5_1(sub(w, nb, r)),
            Rows::Q8_0(w) => Rows::Q8_0(sub(w, nb, r)),
            Rows::Q4K(w) => Rows::Q4K(sub(w, nb, r)),
            Rows::Q5K(w) => Rows::Q5K(sub(w, nb, r)),
            Rows::Q6K(w) => Rows::Q6K(sub(w, nb, r)),
            Rows::Mxfp4(w) => Rows::Mxfp4(sub(w, nb, r)),
        }
    }
}

impl<'a> A8Rows<'a> {
    fn new(format: QuantFormat, w: &'a [u8], xq: &'a [u8]) -> Self {
        match format {
            QuantFormat::Q4_0 => A8Rows::Q4_0(cast(w), cast(xq)),
            QuantFormat::Q5_0 => A8Rows::Q5_0(cast(w), cast(xq)),
            QuantFormat::Q8_0 => A8Rows::Q8_0(cast(w), cast(xq)),
            QuantFormat::Mxfp4 => A8Rows::Mxfp4(cast(w), cast(xq)),
            QuantFormat::Q4_1 => A8Rows::Q4_1(cast(w), cast(xq)),
            QuantFormat::Q5_1 => A8Rows::Q5_1(cast(w), cast(xq)),
            QuantFormat::Q4K => A8Rows::Q4K(cast(w), cast(xq)),
            QuantFormat::Q5K => A8Rows::Q5K(cast(w), cast(xq)),
            QuantFormat::Q6K => A8Rows::Q6K(cast(w), cast(xq)),
            QuantFormat::Q8_1 | QuantFormat::Q8K => unreachable!("rejected by variants()"),
        }
    }

    fn rows(self, nb: usize, r: &std::ops::Range<usize>) -> Self {
        match self {
            A8Rows::Q4_0(w, x) => A8Rows::Q4_0(sub(w, nb, r), x),
            A8Rows::Q5_0(w, x) => A8Rows::Q5_0(sub(w, nb, r), x),
            A8Rows::Q8_0(w, x) => A8Rows::Q8_0(sub(w, nb, r), x),
            A8Rows::Mxfp4(w, x) => A8Rows::Mxfp4(sub(w, nb, r), x),
            A8Rows::Q4_1(w, x) => A8Rows::Q4_1(sub(w, nb, r), x),
            A8Rows::Q5_1(w, x) => A8Rows::Q5_1(sub(w, nb, r), x),
            A8Rows::Q4K(w, x) => A8Rows::Q4K(sub(w, nb, r), x),
            A8Rows::Q5K(w, x) => A8Rows::Q5K(sub(w, nb, r), x),
            A8Rows::Q6K(w, x) => A8Rows::Q6K(sub(w, nb, r), x),
        }
    }
}

/// A micro-kernel over a group of R rows: `w` holds `R · nb` blocks (R
/// consecutive rows), `x` the activations, `y` the R outputs.
pub(crate) type RowKernel<B, X> = unsafe fn(&[B], &[X], &mut [f32]);

/// Runs row-group kernels over all rows of `y`: groups of `rows_per_block`
/// rows, then single rows for the remainder. `k[0]`, `k[1]`, `k[2]` are the
/// R = 1, 2, 4 instantiations.
///
/// # Safety
/// The kernels must be runnable on this CPU.
pub(crate) unsafe fn drive<B, X>(
    w: &[B],
    x: &[X],
    nb: usize,
    y: &mut [f32],
    p: QGemvParams,
    k: [RowKernel<B, X>; 3],
) {
    let n = y.len();
    debug_assert_eq!(w.len(), n * nb);
    let (kr, r) = match p.rows_per_block {
        4 => (k[2], 4),
        2 => (k[1], 2),
        _ => (k[0], 1),
    };
    let row_bytes = nb * size_of::<B>();
    let mut i = 0;
    while i + r <= n {
        ahead(w, i * row_bytes, r * row_bytes, p.pf);
        // SAFETY: the caller guarantees the ISA; slices have R rows.
        unsafe { kr(&w[i * nb..(i + r) * nb], x, &mut y[i..i + r]) };
        i += r;
    }
    while i < n {
        ahead(w, i * row_bytes, row_bytes, p.pf);
        // SAFETY: as above, one row.
        unsafe { k[0](&w[i * nb..(i + 1) * nb], x, &mut y[i..i + 1]) };
        i += 1;
    }
}

/// The body of an ISA file's W·A32 entry: each listed [`Rows`] variant
/// runs that file's micro-kernels `$k::<1>`, `<2>`, `<4>` through [`drive`]
/// (`nb` blocks of the weight format per row); a format the file has no
/// kernel for runs the scalar reference (`variants` does not offer it).
/// A macro because each variant's kernels have their own block type.
macro_rules! a32_entry {
    ($w:expr, $x:expr, $y:expr, $rpb:expr, [$($f:ident => $k:ident $(<$t:ty>)?),+ $(,)?]) => {
        match $w {
            $($crate::qgemv::Rows::$f(w) => $crate::qgemv::drive(
                w,
                $x,
                $crate::qgemv::blocks_in(w, $x.len()),
                $y,
                $rpb,
                [$k::<$($t,)? 1>, $k::<$($t,)? 2>, $k::<$($t,)? 4>],
            ),)+
            #[allow(unreachable_patterns)]
            other => $crate::qgemv::scalar::gemv_a32(other, $x, $y),
        }
    };
}
pub(crate) use a32_entry;

/// The body of an ISA file's W·A8 entry, as [`a32_entry`] over [`A8Rows`]
/// (one activation block per weight block of a row).
macro_rules! a8_entry {
    ($w:expr, $y:expr, $rpb:expr, [$($f:ident => $k:ident $(<$t:ty>)?),+ $(,)?]) => {
        match $w {
            $($crate::qgemv::A8Rows::$f(w, x) => $crate::qgemv::drive(
                w,
                x,
                x.len(),
                $y,
                $rpb,
                [$k::<$($t,)? 1>, $k::<$($t,)? 2>, $k::<$($t,)? 4>],
            ),)+
            #[allow(unreachable_patterns)]
            other => $crate::qgemv::scalar::gemv_a8(other, $y),
        }
    };
}
pub(crate) use a8_entry;

/// Blocks of `B` in a row of `k` values.
pub(crate) fn blocks_in<B: RawBlock>(_: &[B], k: usize) -> usize {
    k / B::QK
}

/// Requests bytes `at .. at + len` of `w` `pf` bytes further on
/// (`pf` = 0: nothing): consecutive row groups request consecutive
/// ranges, so the tensor is requested once, `pf` bytes ahead of the rows
/// being read.
#[inline]
fn ahead<B>(w: &[B], at: usize, len: usize, pf: usize) {
    if pf > 0 {
        prefetch::lines(w.as_ptr().cast(), at + pf, at + pf + len);
    }
}

/// A configured quantized GEMV (builder style): format, mode, variant,
/// parameters, threads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QGemv {
    pub format: QuantFormat,
    pub mode: QMode,
    pub isa: Isa,
    pub params: QGemvParams,
    pub threads: usize,
}

impl QGemv {
    /// The best variant this CPU runs for `format`/`mode`, default
    /// parameters, one thread.
    pub fn new(format: QuantFormat, mode: QMode) -> Self {
        QGemv {
            format,
            mode,
            isa: Isa::best_of(variants(format, mode)),
            params: QGemvParams::default(),
            threads: 1,
        }
    }

    crate::tune::config_setters!(QGemvParams);

    fn check_config(&self) -> Result<()> {
        if !variants(self.format, self.mode).contains(&self.isa) {
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
        check_threads(OP, self.threads)
    }

    fn check_weights(&self, w: &[u8], n: usize, k: usize) -> Result<()> {
        self.format.check_k(OP, k)?;
        check_len(OP, "w", w.len(), n * self.format.row_bytes(k))
    }

    /// Computes `y = W · x` with `n = y.len()`, `k = x.len()`; `w` holds
    /// `n` rows of `format.row_bytes(k)` bytes. In W·A8 mode `x` is
    /// quantized first (one allocation per call; use
    /// [`run_prequantized`](Self::run_prequantized) to reuse a buffer).
    pub fn run(&self, w: &[u8], x: &[f32], y: &mut [f32]) -> Result<()> {
        self.check_config()?;
        self.check_weights(w, y.len(), x.len())?;
        match self.mode {
            QMode::A32 => {
                self.run_a32(w, x, y);
                Ok(())
            }
            QMode::A8 => {
                let xq = quantize_activations(self.format, x)?;
                self.run_a8(w, &xq, x.len(), y);
                Ok(())
            }
        }
    }

    /// W·A8 with activations already quantized by [`quantize_activations`]
    /// (`xq` holds `k` values in [`activation_format`]`(format)`).
    pub fn run_prequantized(&self, w: &[u8], xq: &[u8], k: usize, y: &mut [f32]) -> Result<()> {
        if self.mode != QMode::A8 {
            return Err(KernelError::InvalidParams {
                op: OP,
                reason: "prequantized activations need mode a8; use run() for a32".into(),
            });
        }
        self.check_config()?;
        self.check_weights(w, y.len(), k)?;
        check_len(
            OP,
            "xq",
            xq.len(),
            activation_format(self.format).row_bytes(k),
        )?;
        self.run_a8(w, xq, k, y);
        Ok(())
    }

    /// Splits rows over the workers (aligned to the row group) and runs `f`
    /// on each piece of `y` with its row range.
    fn split<F>(&self, y: &mut [f32], f: F)
    where
        F: Fn(std::ops::Range<usize>, &mut [f32]) + Sync,
    {
        let n = y.len();
        if self.threads <= 1 || n <= self.params.rows_per_block {
            f(0..n, y);
            return;
        }
        let ranges = split_range(n, self.threads, self.params.rows_per_block);
        pool(self.threads).scope(|s| {
            let mut rest = y;
            for r in ranges {
                let (mine, tail) = rest.split_at_mut(r.len());
                rest = tail;
                let f = &f;
                s.spawn(move |_| f(r, mine));
            }
        });
    }

    fn run_a32(&self, w: &[u8], x: &[f32], y: &mut [f32]) {
        let nb = x.len() / self.format.block_size();
        let rows = Rows::new(self.format, w);
        let (isa, rpb) = (self.isa, self.params);
        self.split(y, |r, yr| {
            let w = rows.rows(nb, &r);
            match isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: check_config verified the CPU has AVX2.
                Isa::Avx2 => unsafe { avx2::gemv_a32(w, x, yr, rpb) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: check_config verified the CPU has AVX-512.
                Isa::Avx512 => unsafe { avx512::gemv_a32(w, x, yr, rpb) },
                #[cfg(target_arch = "aarch64")]
                // SAFETY: NEON is baseline on aarch64 and was checked.
                Isa::Neon => unsafe { neon::gemv_a32(w, x, yr, rpb) },
                _ => scalar::gemv_a32(w, x, yr),
            }
        });
    }

    fn run_a8(&self, w: &[u8], xq: &[u8], k: usize, y: &mut [f32]) {
        let nb = k / self.format.block_size();
        let rows = A8Rows::new(self.format, w, xq);
        let (isa, rpb) = (self.isa, self.params);
        self.split(y, |r, yr| {
            let w = rows.rows(nb, &r);
            match isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY (all x86 arms): check_config verified the CPU features.
                Isa::Avx2 => unsafe { avx2::gemv_a8(w, yr, rpb) },
                #[cfg(target_arch = "x86_64")]
                Isa::AvxVnni => unsafe { avx2::gemv_a8_vnni(w, yr, rpb) },
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => unsafe { avx512::gemv_a8(w, yr, rpb) },
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512Vnni => unsafe { avx512::gemv_a8_vnni(w, yr, rpb) },
                #[cfg(target_arch = "aarch64")]
                // SAFETY (aarch64 arms): check_config verified the CPU features.
                Isa::Neon => unsafe { neon::gemv_a8(w, yr, rpb) },
                #[cfg(target_arch = "aarch64")]
                Isa::NeonDotprod => unsafe { dotprod::gemv_a8(w, yr, rpb) },
                _ => scalar::gemv_a8(w, yr),
            }
        });
    }
}
