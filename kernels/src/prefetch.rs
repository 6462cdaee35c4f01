//! Software prefetch shared by the streaming families: the I8 GEMV, the
//! per-row quantized GEMV and the LM head (byte distances), and the
//! quantized GEMM (which variants read its block distance).
//!
//! A decode GEMV reads its weights once from DRAM, and one core's hardware
//! prefetcher keeps too few lines in flight for it on the machines measured
//! (docs/PERF.md, fifth run). So the x86 variants request lines a tuned
//! distance ahead. NEON does not prefetch: there is no ARM machine here to
//! tune a distance on, so its variants ignore the parameter.

use crate::{Isa, KernelError, Result};

/// The byte distances the streaming families tune their `pf` over
/// (0: no software prefetch).
pub(crate) const BYTE_DISTANCES: [usize; 4] = [0, 4096, 8192, 16384];

/// The analytic default where a variant prefetches: 8 KiB, the best of
/// the distances for one linear stream here (I8 GEMV, 1×14336×4096).
const DEFAULT_BYTES: usize = 8192;

/// Whether `isa`'s variants read a prefetch distance (the x86 ones).
pub(crate) fn reads(isa: Isa) -> bool {
    matches!(
        isa,
        Isa::Avx2 | Isa::AvxVnni | Isa::Avx512 | Isa::Avx512Vnni
    )
}

/// The default byte distance for a family whose best variant is `isa`.
pub(crate) fn default_bytes(isa: Isa) -> usize {
    if reads(isa) { DEFAULT_BYTES } else { 0 }
}

/// The byte distances worth timing for a family whose best variant is
/// `isa` (only 0 where it ignores them).
pub(crate) fn byte_candidates(isa: Isa) -> &'static [usize] {
    if reads(isa) { &BYTE_DISTANCES } else { &[0] }
}

/// Checks a tuned byte distance.
pub(crate) fn check_bytes(op: &'static str, pf: usize) -> Result<()> {
    if BYTE_DISTANCES.contains(&pf) {
        Ok(())
    } else {
        Err(KernelError::InvalidParams {
            op,
            reason: format!("pf {pf} must be one of 0, 4096, 8192, 16384"),
        })
    }
}

/// Requests (x86) the 64-byte line holding `p`. A prefetch is a hint and
/// never faults, so `p` may point past its buffer.
#[inline]
pub(crate) fn line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Requests (x86) every 64-byte line of bytes `from .. to` after `base`.
/// Callers that request consecutive ranges request each line once.
#[inline]
pub(crate) fn lines(base: *const u8, from: usize, to: usize) {
    let mut off = from & !63;
    while off < to {
        line(base.wrapping_add(off));
        off += 64;
    }
}
