//! Dense GEMM with f32 activations: `C[m,n] = A[m,k] · W[n,k]ᵀ (+ bias[n]) (+ C)`.
//!
//! `W` is in LLM weight layout, `[n, k]` row-major (out × in), as f32
//! ([`gemm_f32`]) or f16 ([`gemm_f16w_f32`], W16A32: weights are widened to
//! f32 while packing, or inside the direct kernels; all arithmetic is f32).
//! `A` is `[m, k]` row-major, `C` is `[m, n]` row-major, `bias` is `[n]`.
//! With `accumulate = false` C is overwritten (beta = 0), with `true` the
//! product is added to what C holds (beta = 1); the bias is added either way.
//!
//! Two code paths, chosen by [`GemmParams::pack`]:
//! - **packed** (BLIS): for each `nc`-column block and `kc`-slice of k, the
//!   `W` block is transposed once into `nr`-wide panels (zero-padded; 8×8
//!   in-register transposes on x86, 4×4 on NEON) held in a thread-local
//!   workspace; then each `mc × kc` block of A is packed into
//!   `mr`-row micro-panels (A transposed, zero-padded) and the
//!   register-blocked `mr × nr` micro-kernel broadcasts A elements against
//!   vector loads of the packed W panel, FMAing into `mr × nr/lanes`
//!   accumulators. A W panel (`kc × nr`) stays in L1 while every A
//!   micro-panel of the block streams past it from L2.
//! - **direct** (`pack = false`): no packing at all; an `mr × nr` kernel
//!   computes `mr × nr` dot products along k reading A and W rows in place
//!   (vectors along k, one horizontal sum per output). Best when m is small
//!   and packing W would cost as much as the product.
//!
//! Micro-kernels are stamped out by a macro per ISA, one per `mr × nr`; the
//! table of shapes is [`microkernels`] (packed) and [`direct_kernels`]
//! (direct), which is what the tuner enumerates. The SME variant has packed
//! kernels only, `fmopa` outer products into ZA whose shapes follow the
//! CPU's streaming vector length (`sme.rs`): its table is made at run time. The scalar variant is the
//! reference (f64 accumulation, see `scalar.rs`) and ignores the tile
//! parameters.
//!
//! Threads: a call with `threads = t` splits the columns (or, when there are
//! too few column panels, the rows) into `t` ranges and runs them on exactly
//! `t` workers of [`crate::pool`]; each worker packs its own W block.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod body;
#[cfg(target_arch = "aarch64")]
mod neon;
pub(crate) mod scalar;
#[cfg(target_arch = "aarch64")]
mod sme;
#[cfg(test)]
mod tests;

use crate::error::check_len;
use crate::pool::{check_threads, parallel_ranges};
use crate::tune::{CpuCaps, Tunable};
use crate::{Isa, KernelError, Result};
use half::f16;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::ops::Range;

/// The ISA variants this family implements (scalar is the reference).
pub const GEMM_ISAS: &[Isa] = &[Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon, Isa::Sme];

/// Problem size: `C[m,n] = A[m,k] · W[n,k]ᵀ`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GemmShape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
}

impl GemmShape {
    pub fn new(m: usize, n: usize, k: usize) -> Self {
        GemmShape { m, n, k }
    }
}

/// Tile parameters of the GEMM family.
///
/// Valid range (checked by [`Tunable::validate`] and, per ISA, at the entry
/// point): `(mr, nr)` one of [`microkernels`]`(isa)` when `pack`, one of
/// [`direct_kernels`]`(isa)` otherwise (the scalar variant ignores all of
/// these); `kc ∈ [1, 8192]`, `mc ∈ [1, 65536]`, `nc ∈ [1, 1 << 20]`. The
/// driver rounds `mc` up to a multiple of `mr` and `nc` up to a multiple of
/// `nr`. In direct mode `kc` is unused (dot products run over the whole of k).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GemmParams {
    /// Rows of A per micro-kernel call.
    pub mr: usize,
    /// Columns of C (rows of W) per micro-kernel call.
    pub nr: usize,
    /// Depth of one packed slice (L1-sized).
    pub kc: usize,
    /// Rows of A per block (L2-sized).
    pub mc: usize,
    /// Columns of C per block, the packed W block is `kc × nc` (L3-sized).
    pub nc: usize,
    /// Pack W into panels (BLIS) or read it in place with the direct kernels.
    pub pack: bool,
}

/// How to run one GEMM call: which variant, which tiles, how many threads.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GemmConfig {
    /// Force a variant; `None` picks the best this CPU supports.
    pub isa: Option<Isa>,
    pub params: GemmParams,
    /// Exactly this many workers (≥ 1).
    pub threads: usize,
}

impl GemmConfig {
    /// Best variant, analytic default tiles for `shape` on `cpu`, `threads` workers.
    pub fn new(shape: &GemmShape, cpu: &CpuCaps, threads: usize) -> Self {
        GemmConfig {
            isa: None,
            params: GemmParams::default_for(shape, cpu),
            threads,
        }
    }

    /// A forced variant with its own analytic default tiles (params chosen
    /// for another variant's kernel table are refused with `InvalidParams`).
    pub fn for_isa(shape: &GemmShape, cpu: &CpuCaps, isa: Isa, threads: usize) -> Self {
        GemmConfig {
            isa: Some(isa),
            params: GemmParams::default_for_isa(shape, cpu, isa),
            threads,
        }
    }
}

const OP: &str = "gemm";
const OP_F16: &str = "gemm_f16w_f32";

/// Packed micro-kernel shapes `(mr, nr)` available for `isa` (empty for
/// variants this family does not implement and for scalar). The SME shapes
/// are this CPU's ([`crate::sme::shapes`]), empty on a CPU without SME.
pub fn microkernels(isa: Isa) -> &'static [(usize, usize)] {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => avx2::PACKED,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => avx512::PACKED,
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => neon::PACKED,
        #[cfg(target_arch = "aarch64")]
        Isa::Sme => sme::packed_shapes(),
        _ => &[],
    }
}

/// Whether `(mr, nr)` is a kernel shape of `isa` as far as this build and
/// CPU can tell: in [`microkernels`] / [`direct_kernels`], or, for SME on a
/// CPU without it (a stored choice from another device), a packed shape at
/// any streaming vector length.
fn has_kernel(isa: Isa, (mr, nr): (usize, usize), pack: bool) -> bool {
    if isa == Isa::Sme && !isa.is_available() {
        return pack && crate::sme::is_shape_at_any_svl(mr, nr);
    }
    let table = if pack {
        microkernels(isa)
    } else {
        direct_kernels(isa)
    };
    table.contains(&(mr, nr))
}

/// Direct (unpacked) kernel shapes `(mr, nr)` available for `isa`.
pub fn direct_kernels(isa: Isa) -> &'static [(usize, usize)] {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => avx2::DIRECT,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => avx512::DIRECT,
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => neon::DIRECT,
        _ => &[],
    }
}

/// The variant a call with `requested` runs: `None` → best implemented and
/// available; a forced variant must be available and implemented.
pub fn resolve_isa(op: &'static str, requested: Option<Isa>) -> Result<Isa> {
    match requested {
        None => Ok(Isa::best_of(GEMM_ISAS)),
        Some(isa) if !isa.is_available() => Err(KernelError::IsaUnavailable { op, isa }),
        Some(isa) if !GEMM_ISAS.contains(&isa) => Err(KernelError::NoVariant { op, isa }),
        Some(isa) => Ok(isa),
    }
}

fn round_down(x: usize, to: usize) -> usize {
    x / to * to
}

fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn lcm(a: usize, b: usize) -> usize {
    a / gcd(a, b) * b
}

impl GemmParams {
    /// Analytic blocking for a given micro-kernel (BLIS model, f32 = 4 bytes):
    /// - `kc`: the packed `kc × nr` W panel is reused by every A micro-panel
    ///   of a block, so it should sit in half of L1 (the other half for the
    ///   streaming A rows and C tile); then `k` is split into equal slices so
    ///   the last one is not a sliver.
    /// - `mc`: the `mc × kc` A block is reused by every W panel, so it should
    ///   sit in half of L2.
    /// - `nc`: the packed `kc × nc` W block is reused by every A block, so it
    ///   should sit in this core's share of half of L3.
    pub fn blocking(shape: &GemmShape, cpu: &CpuCaps, mr: usize, nr: usize, pack: bool) -> Self {
        let f = 4;
        let kc0 = round_down((cpu.l1d / 2) / (nr * f), 16).clamp(64, 1024);
        let k = shape.k.max(1);
        let kc = k.div_ceil(k.div_ceil(kc0));
        // Clamped to the documented ranges (tiny k would otherwise ask for
        // blocks of millions of rows).
        let mc0 = round_down((cpu.l2 / 2) / (kc * f), mr).clamp(mr, round_down(65536, mr));
        let mc = mc0.min(round_up(shape.m.max(1), mr));
        let nc0 = round_down((cpu.l3 / (2 * cpu.cores.max(1))) / (kc * f), nr)
            .clamp(nr, round_down(1 << 20, nr));
        let nc = nc0.min(round_up(shape.n.max(1), nr));
        GemmParams {
            mr,
            nr,
            kc,
            mc,
            nc,
            pack,
        }
    }

    /// Analytic default for a given variant: direct kernels for m ≤ 16
    /// (packing a W block costs about as much as multiplying it by a
    /// handful of rows; quick runs at 16×4864×896 agree), otherwise the
    /// packed kernel whose rows waste the least of m, in table order.
    pub fn default_for_isa(shape: &GemmShape, cpu: &CpuCaps, isa: Isa) -> Self {
        let packed = microkernels(isa);
        let direct = direct_kernels(isa);
        if packed.is_empty() {
            // Scalar (or an unimplemented variant): tiles are ignored.
            return Self::blocking(shape, cpu, 4, 4, true);
        }
        let m = shape.m.max(1);
        let waste = |mr: usize| round_up(m, mr) - m;
        if m <= 16 && !direct.is_empty() {
            // No wasted rows first, then the most accumulators, then taller.
            let &(mr, nr) = direct
                .iter()
                .min_by_key(|&&(mr, nr)| (waste(mr), usize::MAX - mr * nr, usize::MAX - mr))
                .expect("non-empty");
            return Self::blocking(shape, cpu, mr, nr, false);
        }
        // Table order is the preference order; pick the first whose padding of
        // m (rows computed but discarded) is under an eighth, else the least.
        let &(mr, nr) = packed
            .iter()
            .find(|&&(mr, _)| waste(mr) * 8 <= m)
            .unwrap_or_else(|| packed.iter().min_by_key(|&&(mr, _)| waste(mr)).unwrap());
        Self::blocking(shape, cpu, mr, nr, true)
    }

    /// The search space for one variant: every packed micro-kernel with `kc`
    /// at ½×, 1× and 2× its analytic value and `mc` at 1× and ¼× (more
    /// parallel-friendly blocks), plus every direct kernel; always contains
    /// [`GemmParams::default_for_isa`]. Roughly 20–50 entries.
    pub fn candidates_for_isa(shape: &GemmShape, cpu: &CpuCaps, isa: Isa) -> Vec<Self> {
        let mut v = vec![Self::default_for_isa(shape, cpu, isa)];
        for &(mr, nr) in microkernels(isa) {
            let base = Self::blocking(shape, cpu, mr, nr, true);
            for kc in [base.kc / 2, base.kc, base.kc * 2] {
                let kc = kc.clamp(16, 8192).min(shape.k.max(1));
                for mc in [base.mc, round_up(base.mc / 4, mr)] {
                    let p = GemmParams {
                        kc,
                        mc: mc.max(mr),
                        ..base
                    };
                    if !v.contains(&p) {
                        v.push(p);
                    }
                }
            }
        }
        for &(mr, nr) in direct_kernels(isa) {
            let p = Self::blocking(shape, cpu, mr, nr, false);
            if !v.contains(&p) {
                v.push(p);
            }
        }
        v
    }

    /// Checks the parameters against the kernel tables of `isa`.
    pub fn validate_for(&self, op: &'static str, isa: Isa) -> Result<()> {
        self.validate_ranges(op)?;
        if isa == Isa::Scalar {
            return Ok(());
        }
        if has_kernel(isa, (self.mr, self.nr), self.pack) {
            Ok(())
        } else {
            let (kind, table) = if self.pack {
                ("packed", microkernels(isa))
            } else {
                ("direct", direct_kernels(isa))
            };
            let (mr, nr) = (self.mr, self.nr);
            let reason = match (table.is_empty(), crate::sme::vector_bytes()) {
                _ if isa == Isa::Sme && !isa.is_available() => format!(
                    "no {kind} {mr}x{nr} micro-kernel for `{isa}` at any streaming vector length; pick one of sme::tile_shapes(v) for v in {:?}",
                    crate::sme::SVL_WORDS
                ),
                (true, _) => format!(
                    "`{isa}` has no {kind} micro-kernels; set `pack` to {}",
                    !self.pack
                ),
                (false, Some(svl)) if isa == Isa::Sme => format!(
                    "no {kind} {mr}x{nr} micro-kernel for `{isa}` at this CPU's streaming vector length ({} bits); pick one of {table:?}",
                    8 * svl
                ),
                (false, _) => format!(
                    "no {kind} {mr}x{nr} micro-kernel for `{isa}`; pick one of {table:?} (see gemm::microkernels / gemm::direct_kernels)"
                ),
            };
            Err(KernelError::InvalidParams { op, reason })
        }
    }

    fn validate_ranges(&self, op: &'static str) -> Result<()> {
        let bad = |reason: String| Err(KernelError::InvalidParams { op, reason });
        if self.mr == 0 || self.nr == 0 || self.mr > 256 || self.nr > 256 {
            return bad(format!(
                "micro-kernel {}x{} out of range; use a shape from gemm::microkernels",
                self.mr, self.nr
            ));
        }
        if !(1..=8192).contains(&self.kc) {
            return bad(format!("kc = {} must be in 1..=8192", self.kc));
        }
        if !(1..=65536).contains(&self.mc) {
            return bad(format!("mc = {} must be in 1..=65536", self.mc));
        }
        if !(1..=1 << 20).contains(&self.nc) {
            return bad(format!("nc = {} must be in 1..=1048576", self.nc));
        }
        Ok(())
    }
}

impl Tunable for GemmParams {
    type Shape = GemmShape;

    /// Default for the best variant this CPU supports.
    fn default_for(shape: &GemmShape, cpu: &CpuCaps) -> Self {
        Self::default_for_isa(shape, cpu, Isa::best_of(GEMM_ISAS))
    }

    /// Candidates for the best variant this CPU supports; the tuner uses
    /// [`GemmParams::candidates_for_isa`] when it forces a variant.
    fn candidates(shape: &GemmShape, cpu: &CpuCaps) -> Vec<Self> {
        Self::candidates_for_isa(shape, cpu, Isa::best_of(GEMM_ISAS))
    }

    /// Range check, and that `(mr, nr)` is a kernel of some implemented variant.
    fn validate(&self) -> Result<()> {
        self.validate_ranges(OP)?;
        // SME's shapes count at every vector length: a choice stored on
        // another SME device parses, and `validate_for` names this CPU's.
        let sme_anywhere = self.pack && crate::sme::is_shape_at_any_svl(self.mr, self.nr);
        let known = sme_anywhere
            || GEMM_ISAS
                .iter()
                .any(|&isa| has_kernel(isa, (self.mr, self.nr), self.pack));
        if known {
            Ok(())
        } else {
            Err(KernelError::InvalidParams {
                op: OP,
                reason: format!(
                    "no variant has a {}x{} micro-kernel; list them with gemm::microkernels",
                    self.mr, self.nr
                ),
            })
        }
    }
}

/// `C = A · Wᵀ (+ bias) (+ C if accumulate)` with f32 weights. See the module
/// docs for layouts. Errors on any buffer whose length does not match
/// `shape`, on invalid parameters, a zero thread count, or a forced variant
/// the CPU lacks (`IsaUnavailable`) or this family lacks (`NoVariant`).
pub fn gemm_f32(
    a: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    c: &mut [f32],
    shape: GemmShape,
    accumulate: bool,
    cfg: &GemmConfig,
) -> Result<()> {
    run(OP, a, w, bias, c, shape, accumulate, cfg, None)
}

/// Same as [`gemm_f32`] with f16 weights (W16A32): weights are converted to
/// f32 exactly (F16C on x86, `fcvtl` on aarch64) and all arithmetic is f32.
pub fn gemm_f16w_f32(
    a: &[f32],
    w: &[f16],
    bias: Option<&[f32]>,
    c: &mut [f32],
    shape: GemmShape,
    accumulate: bool,
    cfg: &GemmConfig,
) -> Result<()> {
    run(OP_F16, a, w, bias, c, shape, accumulate, cfg, None)
}

/// Checks lengths once: `a = m·k`, `w = n·k`, `c = m·n`, `bias = n`.
pub(crate) fn check_shape<W>(
    op: &'static str,
    a: &[f32],
    w: &[W],
    bias: Option<&[f32]>,
    c: &[f32],
    s: GemmShape,
) -> Result<()> {
    let prod = |x: usize, y: usize, what: &str| {
        x.checked_mul(y).ok_or_else(|| KernelError::InvalidShape {
            op,
            reason: format!("{what} = {x}·{y} overflows usize; split the problem"),
        })
    };
    check_len(op, "a", a.len(), prod(s.m, s.k, "m·k")?)?;
    check_len(op, "w", w.len(), prod(s.n, s.k, "n·k")?)?;
    check_len(op, "c", c.len(), prod(s.m, s.n, "m·n")?)?;
    if let Some(b) = bias {
        check_len(op, "bias", b.len(), s.n)?;
    }
    Ok(())
}

/// Weight element types the kernels can read: f32 and f16.
pub(crate) trait WElem: Copy + Send + Sync + 'static {
    fn to_f32(self) -> f32;
    /// Widens a contiguous run of weights with `isa`'s conversion, returning
    /// `src` itself when it already is f32.
    fn widen<'a>(isa: Isa, src: &'a [Self], tmp: &'a mut [f32]) -> &'a [f32];
    /// The direct kernel `(mr, nr)` of `isa` for this weight type.
    fn direct(isa: Isa, mr: usize, nr: usize) -> Option<DirectFn<Self>>;
    /// `isa`'s SIMD routine packing `g` whole W rows into `g` panel columns,
    /// as `(g, routine)`, if it has one.
    fn pack_rows(isa: Isa) -> Option<(usize, PackRowsFn<Self>)>;
}

/// Packs `g` W rows (`ldw` apart, `kb` long) into `g` adjacent columns of a
/// packed panel whose rows are `nr` apart (`g` fixed per routine).
pub(crate) type PackRowsFn<W> =
    unsafe fn(w: *const W, ldw: usize, kb: usize, dst: *mut f32, nr: usize);

impl WElem for f32 {
    #[inline]
    fn to_f32(self) -> f32 {
        self
    }
    fn widen<'a>(_isa: Isa, src: &'a [f32], _tmp: &'a mut [f32]) -> &'a [f32] {
        src
    }
    fn direct(isa: Isa, mr: usize, nr: usize) -> Option<DirectFn<f32>> {
        let _ = (mr, nr);
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => avx2::direct_f32(mr, nr),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => avx512::direct_f32(mr, nr),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => neon::direct_f32(mr, nr),
            _ => None,
        }
    }
    fn pack_rows(isa: Isa) -> Option<(usize, PackRowsFn<f32>)> {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::Avx512 => Some((8, avx2::pack8_f32 as PackRowsFn<f32>)),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon | Isa::Sme => Some((4, neon::pack4_f32 as PackRowsFn<f32>)),
            _ => None,
        }
    }
}

impl WElem for f16 {
    #[inline]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn widen<'a>(isa: Isa, src: &'a [f16], tmp: &'a mut [f32]) -> &'a [f32] {
        let dst = &mut tmp[..src.len()];
        match isa {
            // SAFETY: the entry point checked that the CPU has this variant.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::Avx512 => unsafe { avx2::f16_to_f32(src, dst) },
            #[cfg(target_arch = "aarch64")]
            Isa::Neon | Isa::Sme => unsafe { neon::f16_to_f32(src, dst) },
            _ => {
                for (d, s) in dst.iter_mut().zip(src) {
                    *d = s.to_f32();
                }
            }
        }
        dst
    }
    fn direct(isa: Isa, mr: usize, nr: usize) -> Option<DirectFn<f16>> {
        let _ = (mr, nr);
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => avx2::direct_f16(mr, nr),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => avx512::direct_f16(mr, nr),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => neon::direct_f16(mr, nr),
            _ => None,
        }
    }
    fn pack_rows(isa: Isa) -> Option<(usize, PackRowsFn<f16>)> {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::Avx512 => Some((8, avx2::pack8_f16 as PackRowsFn<f16>)),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon | Isa::Sme => Some((4, neon::pack4_f16 as PackRowsFn<f16>)),
            _ => None,
        }
    }
}

/// Packed micro-kernel: `C[0..m_eff, 0..n_eff] += A[mr × kc] · P[kc × nr]`
/// where A is one packed micro-panel (`kc` groups of `mr` contiguous f32, A
/// transposed), P is one packed W panel (`kc` rows of `nr` contiguous f32)
/// and C rows are `ldc` apart.
pub(crate) type PackedFn = unsafe fn(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    m_eff: usize,
    n_eff: usize,
);

/// Direct kernel: `C[i, j] += Σ_p A[i, p] · W[j, p]` for `i < m_eff`,
/// `j < n_eff`, reading `m_eff` A rows (`lda` apart) and `n_eff` W rows
/// (`ldw` apart) of length `k` in place.
pub(crate) type DirectFn<W> = unsafe fn(
    k: usize,
    a: *const f32,
    lda: usize,
    w: *const W,
    ldw: usize,
    c: *mut f32,
    ldc: usize,
    m_eff: usize,
    n_eff: usize,
);

fn packed_kernel(isa: Isa, mr: usize, nr: usize) -> Option<PackedFn> {
    let _ = (mr, nr);
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => avx2::packed(mr, nr),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => avx512::packed(mr, nr),
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => neon::packed(mr, nr),
        #[cfg(target_arch = "aarch64")]
        Isa::Sme => sme::packed(mr, nr),
        _ => None,
    }
}

/// Called on each finished block of C rows: `(row index, the row's segment
/// [col0, col0 + len) of C, col0)`. Column blocks start at multiples of the
/// `col_align` given with it, so a per-head epilogue sees whole heads.
pub(crate) type Epilogue<'a> = &'a (dyn Fn(usize, &mut [f32], usize) + Sync);

/// A `*mut f32` the workers share; each writes a disjoint part of C.
#[derive(Clone, Copy)]
struct CPtr(*mut f32);
// SAFETY: workers only touch disjoint row/column ranges of C.
unsafe impl Send for CPtr {}
unsafe impl Sync for CPtr {}

/// Shape-checked entry shared by both weight types and by matmul_rope.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<W: WElem>(
    op: &'static str,
    a: &[f32],
    w: &[W],
    bias: Option<&[f32]>,
    c: &mut [f32],
    shape: GemmShape,
    accumulate: bool,
    cfg: &GemmConfig,
    epilogue: Option<(Epilogue<'_>, usize)>,
) -> Result<()> {
    check_shape(op, a, w, bias, c, shape)?;
    check_threads(op, cfg.threads)?;
    let isa = resolve_isa(op, cfg.isa)?;
    let p = cfg.params;
    p.validate_for(op, isa)?;
    let GemmShape { m, n, k } = shape;
    if m == 0 || n == 0 {
        return Ok(());
    }
    let threads = cfg.threads;
    if isa == Isa::Scalar {
        // The reference, split over rows so `threads` is honoured.
        let rows_per = m.div_ceil(threads);
        let run_rows = |r: Range<usize>, c: &mut [f32]| {
            scalar::gemm_ref(
                &a[r.start * k..r.end * k],
                w,
                bias,
                c,
                r.len(),
                n,
                k,
                accumulate,
            );
            if let Some((epi, _)) = epilogue {
                for (i, row) in c.chunks_exact_mut(n).enumerate() {
                    epi(r.start + i, row, 0);
                }
            }
        };
        if threads == 1 {
            run_rows(0..m, c);
        } else {
            crate::pool::pool(threads).scope(|s| {
                for (t, chunk) in c.chunks_mut(rows_per * n).enumerate() {
                    let r = t * rows_per..(t * rows_per + chunk.len() / n);
                    let run_rows = &run_rows;
                    s.spawn(move |_| run_rows(r, chunk));
                }
            });
        }
        return Ok(());
    }
    let micro = if p.pack {
        Micro::Packed(packed_kernel(isa, p.mr, p.nr).expect("validated against the table"))
    } else {
        Micro::Direct(W::direct(isa, p.mr, p.nr).expect("validated against the table"))
    };
    let col_align = epilogue.map_or(1, |(_, al)| al.max(1));
    let job = Job {
        isa,
        a,
        w,
        bias,
        c: CPtr(c.as_mut_ptr()),
        m,
        n,
        k,
        accumulate,
        p,
        micro,
        nc: round_up(p.nc, lcm(p.nr, col_align)),
        epilogue: epilogue.map(|(e, _)| e),
    };
    // Split columns when there are enough aligned panels for every worker,
    // else rows (each worker then packs all of W, which only happens for
    // narrow problems).
    let col_unit = lcm(p.nr, col_align);
    if threads == 1 {
        job.work(0..m, 0..n);
    } else if n.div_ceil(col_unit) >= threads || m < 2 * threads {
        parallel_ranges(n, threads, col_unit, |cols| job.work(0..m, cols));
    } else {
        parallel_ranges(m, threads, p.mr, |rows| job.work(rows, 0..n));
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Micro<W> {
    Packed(PackedFn),
    Direct(DirectFn<W>),
}

struct Job<'a, W> {
    isa: Isa,
    a: &'a [f32],
    w: &'a [W],
    bias: Option<&'a [f32]>,
    c: CPtr,
    m: usize,
    n: usize,
    k: usize,
    accumulate: bool,
    p: GemmParams,
    micro: Micro<W>,
    /// `p.nc` rounded up to whole panels and whole epilogue units.
    nc: usize,
    epilogue: Option<Epilogue<'a>>,
}

// SAFETY: the raw C pointer is only used for disjoint ranges (see `CPtr`).
unsafe impl<W: Sync> Sync for Job<'_, W> {}

thread_local! {
    /// Per-thread packing workspace; grows to the largest block seen and is
    /// reused by every later call on this thread.
    static WORKSPACE: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

impl<W: WElem> Job<'_, W> {
    /// Row `i`'s segment `cols` of C.
    ///
    /// # Safety
    /// The caller owns rows × cols of C exclusively (disjoint worker ranges)
    /// and holds no other reference into that segment.
    #[allow(clippy::mut_from_ref)]
    unsafe fn c_row(&self, i: usize, cols: Range<usize>) -> &mut [f32] {
        debug_assert!(i < self.m && cols.end <= self.n);
        // SAFETY: in bounds (m·n checked at entry), disjoint per the contract.
        unsafe { std::slice::from_raw_parts_mut(self.c.0.add(i * self.n + cols.start), cols.len()) }
    }

    /// Computes C[rows, cols] entirely (prologue, product, epilogue).
    fn work(&self, rows: Range<usize>, cols: Range<usize>) {
        if rows.is_empty() || cols.is_empty() {
            return;
        }
        // Prologue: C = bias | 0, or C += bias; every kernel then accumulates.
        for i in rows.clone() {
            // SAFETY: this worker owns rows × cols.
            let row = unsafe { self.c_row(i, cols.clone()) };
            match (self.accumulate, self.bias) {
                (false, Some(b)) => row.copy_from_slice(&b[cols.clone()]),
                (false, None) => row.fill(0.0),
                (true, Some(b)) => row
                    .iter_mut()
                    .zip(&b[cols.clone()])
                    .for_each(|(c, b)| *c += b),
                (true, None) => {}
            }
        }
        match self.micro {
            Micro::Packed(f) => WORKSPACE.with(|cell| {
                // Taken out of the cell so no borrow is held while kernels run.
                let mut ws = cell.take();
                self.packed(f, rows, cols, &mut ws);
                cell.replace(ws);
            }),
            Micro::Direct(f) => self.direct(f, rows, cols),
        }
    }

    fn finish_block(&self, rows: Range<usize>, cols: Range<usize>) {
        if let Some(epi) = self.epilogue {
            for i in rows {
                // SAFETY: this worker owns rows × cols.
                epi(i, unsafe { self.c_row(i, cols.clone()) }, cols.start);
            }
        }
    }

    fn direct(&self, f: DirectFn<W>, rows: Range<usize>, cols: Range<usize>) {
        let (k, n) = (self.k, self.n);
        let GemmParams { mr, nr, mc, .. } = self.p;
        let mc = round_up(mc, mr);
        for jc in cols.clone().step_by(self.nc) {
            let je = (jc + self.nc).min(cols.end);
            for ic in rows.clone().step_by(mc) {
                let ie = (ic + mc).min(rows.end);
                if k > 0 {
                    for jr in (jc..je).step_by(nr) {
                        let ne = nr.min(je - jr);
                        for ir in (ic..ie).step_by(mr) {
                            let me = mr.min(ie - ir);
                            // SAFETY: rows ir..ir+me of A, jr..jr+ne of W and
                            // the C tile are in bounds (lengths checked at
                            // entry); the tile belongs to this worker.
                            unsafe {
                                f(
                                    k,
                                    self.a.as_ptr().add(ir * k),
                                    k,
                                    self.w.as_ptr().add(jr * k),
                                    k,
                                    self.c.0.add(ir * n + jr),
                                    n,
                                    me,
                                    ne,
                                )
                            };
                        }
                    }
                }
                self.finish_block(ic..ie, jc..je);
            }
        }
    }

    fn packed(&self, f: PackedFn, rows: Range<usize>, cols: Range<usize>, ws: &mut Vec<f32>) {
        let (k, n) = (self.k, self.n);
        let GemmParams { mr, nr, kc, mc, .. } = self.p;
        let mc = round_up(mc, mr);
        let kc = kc.min(k.max(1));
        let nc = self.nc.min(round_up(cols.len(), nr));
        // Workspace: packed W block (nc × kc), packed A block (mc × kc), a
        // widened W row (kc). Grown once per call, outside the loops.
        let mcr = round_up(mc.min(rows.len()), mr);
        let need = nc * kc + mcr * kc + kc;
        if ws.len() < need {
            ws.resize(need, 0.0);
        }
        let (bp, rest) = ws.split_at_mut(nc * kc);
        let (ap, row_tmp) = rest.split_at_mut(mcr * kc);
        for jc in cols.clone().step_by(nc) {
            let je = (jc + nc).min(cols.end);
            let nb = je - jc;
            let n_panels = nb.div_ceil(nr);
            if k == 0 {
                self.finish_block(rows.clone(), jc..je);
                continue;
            }
            for pc in (0..k).step_by(kc) {
                let kb = kc.min(k - pc);
                self.pack_w(jc, nb, pc, kb, nr, &mut bp[..n_panels * nr * kb], row_tmp);
                for ic in rows.clone().step_by(mc) {
                    let ie = (ic + mc).min(rows.end);
                    let a_panels = &mut ap[..round_up(ie - ic, mr) * kb];
                    self.pack_a(ic, ie, pc, kb, mr, a_panels);
                    for (panel, jr) in (jc..je).step_by(nr).enumerate() {
                        let ne = nr.min(je - jr);
                        let b = bp[panel * nr * kb..].as_ptr();
                        for (a_panel, ir) in (ic..ie).step_by(mr).enumerate() {
                            let me = mr.min(ie - ir);
                            let a = a_panels[a_panel * mr * kb..].as_ptr();
                            // SAFETY: a: a full kb × mr packed panel; b: a
                            // full kb × nr panel; C tile me × ne in bounds
                            // and owned by this worker.
                            unsafe { f(kb, a, b, self.c.0.add(ir * n + jr), n, me, ne) };
                        }
                    }
                    if pc + kb == k {
                        self.finish_block(ic..ie, jc..je);
                    }
                }
            }
        }
    }

    /// Packs A[i0..i1, p0..p0+kb] into micro-panels of `mr` rows, each `kb`
    /// groups of `mr` values (A transposed), zero-padding rows past `i1`.
    /// Packing makes the kernel's A stream contiguous: rows of A read in
    /// place are `k` apart, which for power-of-two k maps all `mr` rows to
    /// the same L1 set.
    fn pack_a(&self, i0: usize, i1: usize, p0: usize, kb: usize, mr: usize, dst: &mut [f32]) {
        let k = self.k;
        for (panel, chunk) in dst.chunks_exact_mut(mr * kb).enumerate() {
            for ii in 0..mr {
                let i = i0 + panel * mr + ii;
                let lane = chunk[ii..].iter_mut().step_by(mr);
                if i < i1 {
                    let src = &self.a[i * k + p0..][..kb];
                    lane.zip(src).for_each(|(d, s)| *d = *s);
                } else {
                    lane.for_each(|d| *d = 0.0);
                }
            }
        }
    }

    /// Packs W[j0..j0+nb, p0..p0+kb] into `nb/nr` panels, panel-major, each
    /// `kb` rows of `nr` values (row p holds W[j, p0+p] for the panel's j),
    /// zero-padding the columns past `nb`. Reads each W row contiguously and
    /// writes with stride `nr` into the panel, which sits in L1.
    #[allow(clippy::too_many_arguments)]
    fn pack_w(
        &self,
        j0: usize,
        nb: usize,
        p0: usize,
        kb: usize,
        nr: usize,
        dst: &mut [f32],
        row_tmp: &mut [f32],
    ) {
        let k = self.k;
        let simd = W::pack_rows(self.isa).filter(|&(g, _)| nr.is_multiple_of(g));
        for (panel, chunk) in dst.chunks_exact_mut(nr * kb).enumerate() {
            let mut jj = 0;
            if let Some((g, pack)) = simd {
                // Whole groups of g valid rows go through the SIMD transpose.
                while jj + g <= nr && panel * nr + jj + g <= nb {
                    let src = &self.w[(j0 + panel * nr + jj) * k + p0..];
                    debug_assert!(src.len() >= (g - 1) * k + kb);
                    // SAFETY: rows j0+j..j0+j+g < n hold kb values from p0;
                    // the panel chunk holds kb rows of nr ≥ jj + g values;
                    // the variant was checked to be available.
                    unsafe { pack(src.as_ptr(), k, kb, chunk[jj..].as_mut_ptr(), nr) };
                    jj += g;
                }
            }
            for jj in jj..nr {
                let j = panel * nr + jj;
                let lane = chunk[jj..].iter_mut().step_by(nr);
                if j < nb {
                    let src = &self.w[(j0 + j) * k + p0..][..kb];
                    let row = W::widen(self.isa, src, row_tmp);
                    lane.zip(row).for_each(|(d, s)| *d = *s);
                } else {
                    lane.for_each(|d| *d = 0.0);
                }
            }
        }
    }
}
