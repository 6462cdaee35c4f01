//! I8 GEMM / GEMV: `C[m, n] = A[m, k] · W[n, k]ᵀ` with int8 weights and
//! int8 activations, exact i32 accumulation, f32 output.
//!
//! - Weights: symmetric per output channel, `w_real[j, t] = sw[j] · w_q[j, t]`,
//!   `w_q ∈ [−127, 127]` ([`quantize_weights`]).
//! - Activations: per row, symmetric (`a_real = sa[i] · a_q`, `a_q ∈ [−127, 127]`)
//!   or asymmetric with a zero point (`a_real = sa[i] · (a_q − zp[i])`,
//!   `a_q ∈ [−128, 127]`) ([`quantize_activations`]).
//! - Output: `C[i, j] = sa[i] · sw[j] · (acc[i, j] − zp[i] · Σ_t w_q[j, t]) + bias[j]`
//!   with `acc[i, j] = Σ_t a_q[i, t] · w_q[j, t]` in i32.
//!
//! The ISA micro-tiles ([`variants`]) only compute the i32 accumulators of an
//! `mr × nr` tile (activation rows × weight rows); the f32 epilogue above is
//! one shared function, so every variant's f32 output equals the scalar
//! reference bit for bit. [`I8Gemm::run_i32`] exposes the raw accumulators.
//! GEMV (m = 1) runs the `mr = 1` tiles — a dedicated one-activation-row
//! kernel per ISA, where the i8mm variant falls back to `sdot`.
//!
//! Loop order: weight rows are split over `threads` workers; each worker
//! walks its weight rows `nr` at a time and, for each such weight tile
//! (`nr · k` bytes, L1-resident), sweeps all activation rows `mr` at a time.
//! A GEMV streams the weights from DRAM once, so its tile is made for the
//! stream: `nr` 1 (one linear stream, which the hardware prefetcher follows
//! best), the k loop split over up to four independent accumulators on x86
//! (one `vpdpbusd` chain per 64 bytes held ~44 GB/s even from L2), and
//! software prefetch [`I8GemmParams::pf`] bytes ahead (x86 and NEON).
//! Integer sums are exact in any order, so neither changes a result.
//!
//! Accumulators are exact while `k · 128 · 255 < 2³¹` (the VNNI offset
//! trick's worst case), so `k` is limited to [`MAX_K`].

/// Runs `step(u, t)` for `t = 0, width, 2·width, … < end`: rounds of `U`
/// steps (`u = 0..U`, each on its own accumulator set, so the x86 tiles
/// keep `U` independent dependency chains), then the steps left on set 0.
/// A macro, not a function taking the closure: the closure has the tile's
/// target features, which LLVM does not inline into a featureless helper,
/// and whether it inlined once the helper itself had changed from build
/// to build (the AVX2 tiles once compiled to a call per step).
#[cfg(target_arch = "x86_64")]
macro_rules! unrolled {
    ($u:expr, $end:expr, $width:expr, $step:expr) => {{
        let (end, width, mut step) = ($end, $width, $step);
        let mut t = 0;
        while t + width * $u <= end {
            for u in 0..$u {
                step(u, t + width * u);
            }
            t += width * $u;
        }
        while t < end {
            step(0, t);
            t += width;
        }
    }};
}

/// Runs `step(t)` for `t = 0, W, 2·W, … < end` (`W` divides 64, `end ≤ k`),
/// and `ahead(t)` before the steps of each 64 bytes `t` of a `k`-byte row,
/// then for the lines that only the tile's scalar tail reads: the NEON
/// tiles' loop, which requests each line of their rows once. A macro with
/// one call site of `step`, for the reason `unrolled!` is a macro: a step
/// closure that is not inlined keeps the accumulators in memory.
#[cfg(any(target_arch = "aarch64", test))]
macro_rules! by_lines {
    ($w:expr, $k:expr, $end:expr, $ahead:expr, $step:expr) => {{
        // The closures are FnMut in the tiles, Fn in some tests.
        #[allow(unused_mut)]
        let (k, end, mut ahead, mut step) = ($k, $end, $ahead, $step);
        debug_assert!(64 % $w == 0 && end <= k);
        let mut t = 0;
        while t < end {
            ahead(t);
            let stop = (t + 64).min(end);
            while t < stop {
                step(t);
                t += $w;
            }
        }
        let mut line = end.next_multiple_of(64);
        while line < k {
            ahead(line);
            line += 64;
        }
    }};
}

/// Stamps an ISA file's tile entry (the [`TileFn`] signature) that runs
/// `$f::<MR, NR>` for the shape `(mr, nr)`, `mr ∈ {1, 2}`, `nr ∈ {1, 2, 4}`
/// (other shapes run 2 × 4), with `U = unroll(MR, NR)` accumulator sets as
/// a third const parameter for the tiles that take one. The entry's
/// parameters are named at the call, so each tile takes the ones it needs. A
/// macro because the const parameters are the whole point: one call per
/// shape, each a separately compiled tile.
macro_rules! tile_entry {
    (
        $(#[$m:meta])*
        $name:ident($a:ident, $w:ident, $ws:ident, $k:ident, $pf:ident, $acc:ident)
            => $f:ident($($arg:ident),*) $(, unrolled by $u:path)?
    ) => {
        $(#[$m])*
        pub unsafe fn $name(
            $a: &[i8],
            $w: &[i8],
            $ws: &[i32],
            $k: usize,
            (mr, nr): (usize, usize),
            $pf: usize,
            $acc: &mut [i32; 8],
        ) {
            // SAFETY (all arms): forwarded from the caller.
            unsafe {
                match (mr, nr) {
                    (1, 1) => $f::<1, 1 $(, { $u(1, 1) })?>($($arg),*),
                    (1, 2) => $f::<1, 2 $(, { $u(1, 2) })?>($($arg),*),
                    (1, 4) => $f::<1, 4 $(, { $u(1, 4) })?>($($arg),*),
                    (2, 1) => $f::<2, 1 $(, { $u(2, 1) })?>($($arg),*),
                    (2, 2) => $f::<2, 2 $(, { $u(2, 2) })?>($($arg),*),
                    _ => $f::<2, 4 $(, { $u(2, 4) })?>($($arg),*),
                }
            }
        }
    };
}

/// Accumulator sets of the x86 tiles: 4 independent chains in all for the
/// small tiles (1 × 1: 4 sets, 1 × 2 and 2 × 1: 2), one set from 4
/// accumulators up.
#[cfg(target_arch = "x86_64")]
pub(crate) const fn unroll(mr: usize, nr: usize) -> usize {
    match mr * nr {
        1 => 4,
        2 => 2,
        _ => 1,
    }
}

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
pub mod scalar;

use crate::error::check_len;
use crate::pool::{check_threads, pool, split_range};
use crate::{CpuCaps, Isa, KernelError, Result, Tunable, prefetch};
use serde::{Deserialize, Serialize};

const OP: &str = "i8gemm";

/// Largest supported `k`: keeps every variant's i32 accumulators exact.
pub const MAX_K: usize = 65536;

/// Int8 weights `[n, k]` with one f32 scale per output channel and the
/// per-channel sum of the quantized values (used by the zero-point
/// correction and the VNNI +128 offset trick).
#[derive(Debug, Clone, PartialEq)]
pub struct QWeights {
    pub n: usize,
    pub k: usize,
    pub q: Vec<i8>,
    pub scales: Vec<f32>,
    pub sums: Vec<i32>,
}

impl QWeights {
    /// Wraps already-quantized weights, computing the row sums.
    pub fn from_quantized(q: Vec<i8>, scales: Vec<f32>, n: usize, k: usize) -> Result<Self> {
        check_k(k)?;
        check_len(OP, "weights", q.len(), n * k)?;
        check_len(OP, "weight scales", scales.len(), n)?;
        let sums = (0..n)
            .map(|j| q[j * k..(j + 1) * k].iter().map(|&v| v as i32).sum())
            .collect();
        Ok(QWeights {
            n,
            k,
            q,
            scales,
            sums,
        })
    }
}

/// Int8 activations `[m, k]` with a per-row scale and optional zero point.
#[derive(Debug, Clone, PartialEq)]
pub struct QActivations {
    pub m: usize,
    pub k: usize,
    pub q: Vec<i8>,
    pub scales: Vec<f32>,
    /// Per-row zero points (`None`: symmetric).
    pub zeros: Option<Vec<i32>>,
}

fn check_k(k: usize) -> Result<()> {
    if k > MAX_K {
        Err(KernelError::InvalidShape {
            op: OP,
            reason: format!(
                "k = {k} exceeds {MAX_K}; split the reduction into chunks of at most {MAX_K}"
            ),
        })
    } else {
        Ok(())
    }
}

/// Round-to-nearest symmetric quantization of one row to `[−127, 127]`.
fn quantize_sym(row: &[f32], out: &mut [i8]) -> f32 {
    let amax = row.iter().fold(0.0f32, |m, &v| m.max(v.abs()));
    let scale = amax / 127.0;
    let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
    for (o, &v) in out.iter_mut().zip(row) {
        *o = (v * inv).round().clamp(-127.0, 127.0) as i8;
    }
    scale
}

/// Quantizes f32 weights `[n, k]` symmetrically per output channel
/// (round-to-nearest, `scale = max|w| / 127`).
pub fn quantize_weights(w: &[f32], n: usize, k: usize) -> Result<QWeights> {
    check_k(k)?;
    check_len(OP, "weights", w.len(), n * k)?;
    let mut q = vec![0i8; n * k];
    let mut scales = vec![0.0f32; n];
    for j in 0..n {
        scales[j] = quantize_sym(&w[j * k..(j + 1) * k], &mut q[j * k..(j + 1) * k]);
    }
    QWeights::from_quantized(q, scales, n, k)
}

/// Quantizes f32 activations `[m, k]` per row, round-to-nearest.
/// Symmetric: `scale = max|a| / 127`. Asymmetric: the range
/// `[min(a, 0), max(a, 0)]` maps onto `[−128, 127]` (`scale = range / 255`,
/// `zp = round(−128 − min / scale)`), so 0 is represented exactly.
pub fn quantize_activations(
    a: &[f32],
    m: usize,
    k: usize,
    asymmetric: bool,
) -> Result<QActivations> {
    check_k(k)?;
    check_len(OP, "activations", a.len(), m * k)?;
    let mut q = vec![0i8; m * k];
    let mut scales = vec![0.0f32; m];
    if !asymmetric {
        for i in 0..m {
            scales[i] = quantize_sym(&a[i * k..(i + 1) * k], &mut q[i * k..(i + 1) * k]);
        }
        return Ok(QActivations {
            m,
            k,
            q,
            scales,
            zeros: None,
        });
    }
    let mut zeros = vec![0i32; m];
    for i in 0..m {
        let row = &a[i * k..(i + 1) * k];
        let lo = row.iter().fold(0.0f32, |x, &v| x.min(v));
        let hi = row.iter().fold(0.0f32, |x, &v| x.max(v));
        let scale = (hi - lo) / 255.0;
        if scale > 0.0 {
            let zp = (-128.0 - lo / scale).round().clamp(-128.0, 127.0);
            for (o, &v) in q[i * k..(i + 1) * k].iter_mut().zip(row) {
                *o = ((v / scale).round() + zp).clamp(-128.0, 127.0) as i8;
            }
            zeros[i] = zp as i32;
        }
        scales[i] = scale;
    }
    Ok(QActivations {
        m,
        k,
        q,
        scales,
        zeros: Some(zeros),
    })
}

/// The ISA variants implemented (scalar first).
pub fn variants() -> &'static [Isa] {
    &[
        Isa::Scalar,
        Isa::Avx2,
        Isa::AvxVnni,
        Isa::Avx512,
        Isa::Avx512Vnni,
        Isa::Neon,
        Isa::NeonDotprod,
        Isa::NeonI8mm,
    ]
}

/// Micro-tile shape of the I8 GEMM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct I8GemmParams {
    /// Activation rows per tile: 1 or 2.
    pub mr: usize,
    /// Weight rows (output channels) per tile: 1, 2 or 4.
    pub nr: usize,
    /// How many bytes ahead in each weight row the x86 and NEON tiles
    /// prefetch (0: none), one of [`PREFETCHES`]. A GEMV streams its
    /// weights from DRAM once, and one core's hardware prefetcher keeps too
    /// few lines in flight for the `nr` row streams: on x86 at 1×14336×4096,
    /// one thread, `nr` 1 went from ~10 to ~40 GB/s with 8 KiB. The best
    /// distance depends on `nr`, `k` and the memory system (on ARM it is
    /// unmeasured), so it is tuned. Scalar ignores it. Tables from before
    /// it existed read as 0, what those kernels did.
    #[serde(default)]
    pub pf: usize,
}

/// The prefetch distances (bytes ahead in a weight row) the x86 and NEON
/// tiles are tuned over.
pub const PREFETCHES: [usize; 4] = prefetch::BYTE_DISTANCES;

/// What [`I8GemmParams`] are chosen for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct I8GemmShape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
}

impl Tunable for I8GemmParams {
    type Shape = I8GemmShape;

    /// `mr · nr` i32 vector accumulators plus `mr + nr` operand registers
    /// must fit the smallest register file (16 ymm on AVX2): 2 × 4 uses 14.
    /// A 2-row tile halves weight loads per activation row, and `smmla`
    /// needs two activation rows, so `mr = 2` whenever m ≥ 2. The `nr`
    /// weight rows (`nr · k` bytes) are re-read for every activation tile,
    /// so `nr` drops to 2 when four rows would not fit in half of L1D.
    /// A GEMV (m = 1) reuses nothing: it reads one row at a time (`nr` 1,
    /// with four accumulators), a single linear stream the prefetcher
    /// follows best, prefetched 8 KiB ahead on x86 (NEON starts at no
    /// prefetch: no distance was measured on ARM; the tuner times them).
    fn default_for(shape: &I8GemmShape, cpu: &CpuCaps) -> Self {
        let pf = prefetch::default_bytes(Isa::best_of(variants()));
        if shape.m <= 1 {
            return I8GemmParams { mr: 1, nr: 1, pf };
        }
        let nr = if shape.n < 2 {
            1
        } else if shape.n < 4 || 4 * shape.k > cpu.l1d / 2 {
            2
        } else {
            4
        };
        I8GemmParams { mr: 2, nr, pf }
    }

    /// Every tile that uses its rows (no `mr` 2 for a GEMV) × the prefetch
    /// distances, where the best variant reads them.
    fn candidates(shape: &I8GemmShape, cpu: &CpuCaps) -> Vec<Self> {
        let pfs = prefetch::byte_candidates(Isa::best_of(variants()));
        let mut v = Vec::new();
        for mr in MR_VALUES.into_iter().filter(|&r| r <= shape.m.max(1)) {
            for nr in NR_VALUES {
                for &pf in pfs {
                    v.push(I8GemmParams { mr, nr, pf });
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
        prefetch::check_bytes(OP, self.pf)?;
        if MR_VALUES.contains(&self.mr) && NR_VALUES.contains(&self.nr) {
            Ok(())
        } else {
            Err(KernelError::InvalidParams {
                op: OP,
                reason: format!(
                    "tile {}x{} not supported; mr must be 1 or 2 and nr 1, 2 or 4",
                    self.mr, self.nr
                ),
            })
        }
    }
}

/// Allowed `mr` values.
pub const MR_VALUES: [usize; 2] = [1, 2];
/// Allowed `nr` values.
pub const NR_VALUES: [usize; 3] = [1, 2, 4];

impl Default for I8GemmParams {
    fn default() -> Self {
        I8GemmParams {
            mr: 2,
            nr: 4,
            pf: 0,
        }
    }
}

/// A micro-tile: `acc[r·nr + c] = Σ_t a[r·k + t] · w[c·k + t]`.
/// Arguments: activation rows, weight rows, weight-row sums, k, `(mr, nr)`,
/// the prefetch distance in bytes
/// ([`I8GemmParams::pf`]), read by the x86 and NEON tiles.
type TileFn = unsafe fn(&[i8], &[i8], &[i32], usize, (usize, usize), usize, &mut [i32; 8]);

/// A raw pointer shared by workers that write disjoint elements.
#[derive(Clone, Copy)]
struct SharedOut<T>(*mut T);
// SAFETY: workers write disjoint columns of the output (disjoint weight-row ranges).
unsafe impl<T> Send for SharedOut<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SharedOut<T> {}

impl<T> SharedOut<T> {
    /// Through a method, so closures capture the whole (Sync) wrapper
    /// rather than the raw-pointer field.
    fn at(&self, i: usize) -> *mut T {
        self.0.wrapping_add(i)
    }
}

/// A configured I8 GEMM (builder style).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct I8Gemm {
    pub isa: Isa,
    pub params: I8GemmParams,
    pub threads: usize,
}

impl Default for I8Gemm {
    fn default() -> Self {
        Self::new()
    }
}

impl I8Gemm {
    /// The best variant this CPU runs, default parameters, one thread.
    pub fn new() -> Self {
        I8Gemm {
            isa: Isa::best_of(variants()),
            params: I8GemmParams::default(),
            threads: 1,
        }
    }

    crate::tune::config_setters!(I8GemmParams);

    fn check(&self, a: &QActivations, w: &QWeights) -> Result<()> {
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
        check_k(w.k)?;
        if a.k != w.k {
            return Err(KernelError::InvalidShape {
                op: OP,
                reason: format!(
                    "activations have k = {} but weights k = {}; quantize both with the same k",
                    a.k, w.k
                ),
            });
        }
        check_len(OP, "activations", a.q.len(), a.m * a.k)?;
        check_len(OP, "activation scales", a.scales.len(), a.m)?;
        if let Some(z) = &a.zeros {
            check_len(OP, "activation zero points", z.len(), a.m)?;
        }
        check_len(OP, "weights", w.q.len(), w.n * w.k)?;
        check_len(OP, "weight scales", w.scales.len(), w.n)?;
        check_len(OP, "weight sums", w.sums.len(), w.n)
    }

    fn tile_fn(&self) -> TileFn {
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => avx2::tile,
            #[cfg(target_arch = "x86_64")]
            Isa::AvxVnni => avx2::tile_avxvnni,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => avx512::tile,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => avx512::tile_vnni512,
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => |a, w, s, k, (mr, nr), pf, acc| {
                // SAFETY: forwarded; `check` verified the ISA.
                unsafe { neon::tile(a, w, s, k, (mr, nr), pf, acc) }
            },
            #[cfg(target_arch = "aarch64")]
            Isa::NeonDotprod => |a, w, s, k, (mr, nr), pf, acc| {
                // SAFETY: forwarded; `check` verified the ISA.
                unsafe { dotprod::tile(a, w, s, k, (mr, nr), pf, acc) }
            },
            #[cfg(target_arch = "aarch64")]
            Isa::NeonI8mm => |a, w, s, k, (mr, nr), pf, acc| {
                // SAFETY: forwarded; `check` verified the ISA.
                unsafe { i8mm::tile(a, w, s, k, (mr, nr), pf, acc) }
            },
            _ => |a, w, s, k, (mr, nr), _pf, acc| scalar::tile(a, w, s, k, mr, nr, acc),
        }
    }

    /// Raw accumulators: `acc[i·n + j] = Σ_t a_q[i, t] · w_q[j, t]` (exact i32).
    pub fn run_i32(&self, a: &QActivations, w: &QWeights, acc: &mut [i32]) -> Result<()> {
        self.check(a, w)?;
        check_len(OP, "acc", acc.len(), a.m * w.n)?;
        let out = SharedOut(acc.as_mut_ptr());
        let n = w.n;
        self.drive(a, w, &|i, j, v| {
            // SAFETY: i < m, j < n; each (i, j) is written by exactly one worker.
            unsafe { *out.at(i * n + j) = v };
        });
        Ok(())
    }

    /// `c[i·n + j] = sa[i] · sw[j] · (acc[i, j] − zp[i] · Σ w_q[j, ·]) + bias[j]`.
    pub fn run(
        &self,
        a: &QActivations,
        w: &QWeights,
        bias: Option<&[f32]>,
        c: &mut [f32],
    ) -> Result<()> {
        self.check(a, w)?;
        check_len(OP, "c", c.len(), a.m * w.n)?;
        if let Some(b) = bias {
            check_len(OP, "bias", b.len(), w.n)?;
        }
        let out = SharedOut(c.as_mut_ptr());
        let n = w.n;
        self.drive(a, w, &|i, j, v| {
            let zp = a.zeros.as_ref().map_or(0, |z| z[i]) as i64;
            let v = epilogue(
                v,
                zp,
                w.sums[j],
                a.scales[i],
                w.scales[j],
                bias.map_or(0.0, |b| b[j]),
            );
            // SAFETY: i < m, j < n; each (i, j) is written by exactly one worker.
            unsafe { *out.at(i * n + j) = v };
        });
        Ok(())
    }

    /// Splits weight rows over the workers and runs the tiles; `store(i, j, acc)`.
    fn drive(&self, a: &QActivations, w: &QWeights, store: &(dyn Fn(usize, usize, i32) + Sync)) {
        let (m, n, k) = (a.m, w.n, w.k);
        let tile = self.tile_fn();
        let p = self.params;
        let work = |r: std::ops::Range<usize>| {
            let mut acc = [0i32; 8];
            let mut j = r.start;
            while j < r.end {
                let nr = NR_VALUES
                    .iter()
                    .rev()
                    .copied()
                    .find(|&x| x <= p.nr && j + x <= r.end)
                    .unwrap_or(1);
                let ws = &w.q[j * k..(j + nr) * k];
                let sums = &w.sums[j..j + nr];
                let mut i = 0;
                while i < m {
                    let mr = if p.mr == 2 && i + 2 <= m { 2 } else { 1 };
                    // SAFETY: the entry point verified the ISA; the slices hold mr and nr rows of k.
                    unsafe {
                        tile(
                            &a.q[i * k..(i + mr) * k],
                            ws,
                            sums,
                            k,
                            (mr, nr),
                            p.pf,
                            &mut acc,
                        )
                    };
                    for rr in 0..mr {
                        for cc in 0..nr {
                            store(i + rr, j + cc, acc[rr * nr + cc]);
                        }
                    }
                    i += mr;
                }
                j += nr;
            }
        };
        if self.threads <= 1 || n <= p.nr {
            work(0..n);
            return;
        }
        let ranges = split_range(n, self.threads, p.nr);
        pool(self.threads).scope(|s| {
            for r in ranges {
                let work = &work;
                s.spawn(move |_| work(r));
            }
        });
    }
}

/// Requests byte `at + pf` of each of the `NR` weight rows of `k` bytes
/// (`pf` = 0: nothing); the SIMD tiles call it once per 64 bytes.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[inline]
fn prefetch_rows<const NR: usize>(w: &[i8], k: usize, at: usize, pf: usize) {
    if pf > 0 {
        for c in 0..NR {
            prefetch::line(w.as_ptr().wrapping_add(c * k + at + pf).cast());
        }
    }
}

/// The shared f32 epilogue (one rounding order for every variant).
#[inline]
fn epilogue(acc: i32, zp: i64, wsum: i32, sa: f32, sw: f32, bias: f32) -> f32 {
    let v = acc as i64 - zp * wsum as i64;
    (sa * sw) * v as f32 + bias
}

/// The plain f32 reference on dequantized values: `Σ_t a_real · w_real + bias`.
pub fn reference_f32(a: &QActivations, w: &QWeights, bias: Option<&[f32]>) -> Vec<f32> {
    let (m, n, k) = (a.m, w.n, w.k);
    let mut c = vec![0.0f32; m * n];
    for i in 0..m {
        let zp = a.zeros.as_ref().map_or(0, |z| z[i]) as f64;
        for j in 0..n {
            let mut s = 0.0f64;
            for t in 0..k {
                let av = a.scales[i] as f64 * (a.q[i * k + t] as f64 - zp);
                let wv = w.scales[j] as f64 * w.q[j * k + t] as f64;
                s += av * wv;
            }
            c[i * n + j] = (s + bias.map_or(0.0, |b| b[j] as f64)) as f32;
        }
    }
    c
}

#[cfg(test)]
mod tests;
