//! Software prefetch shared by the streaming families: the I8 GEMV, the
//! per-row quantized GEMV and the LM head (byte distances), and the
//! quantized GEMM (its own block distance; which variants read it). The
//! roofline's read ceiling requests its lines with [`line`] too.
//!
//! A decode GEMV reads its weights once from DRAM, and one core's hardware
//! prefetcher keeps too few lines in flight for it on the machines measured
//! (docs/PERF.md, fifth run). So the SIMD variants of every streaming
//! family request lines a tuned distance ahead: `prefetcht0` on x86,
//! `prfm pldl1keep` on aarch64. ARM targets are often in-order cores
//! (Cortex-A53/A55) with weak hardware prefetchers, and no ARM machine was
//! measured here, so the NEON variants default to no prefetch and the tuner
//! times every distance on the real hardware.

use crate::{Isa, KernelError, Result};

/// The byte distances the streaming families tune their `pf` over
/// (0: no software prefetch).
pub(crate) const BYTE_DISTANCES: [usize; 4] = [0, 4096, 8192, 16384];

/// The analytic default where a variant prefetches: 8 KiB, the best of
/// the distances for one linear stream here (I8 GEMV, 1×14336×4096).
const DEFAULT_BYTES: usize = 8192;

/// Whether `isa`'s variants read a prefetch distance: every SIMD one, x86
/// and NEON (the scalar references do not prefetch, nor do the SME tiles,
/// which stream panels packed just before them).
pub(crate) fn reads(isa: Isa) -> bool {
    !matches!(isa, Isa::Scalar | Isa::Sme)
}

/// Whether a default distance was measured for `isa` (the x86 ones).
pub(crate) fn measured(isa: Isa) -> bool {
    matches!(
        isa,
        Isa::Avx2 | Isa::AvxVnni | Isa::Avx512 | Isa::Avx512Vnni | Isa::Amx
    )
}

/// The default byte distance for a family whose best variant is `isa`:
/// 8 KiB where it was measured (x86); 0 on NEON, where no distance has been
/// measured, so the untuned kernels stream as they always did and the
/// tuner decides on the hardware.
pub(crate) fn default_bytes(isa: Isa) -> usize {
    if measured(isa) { DEFAULT_BYTES } else { 0 }
}

/// The byte distances worth timing for a family whose best variant is
/// `isa` (only 0 where it ignores them: scalar).
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

/// Requests the 64-byte line holding `p` into L1 (x86 `prefetcht0`,
/// aarch64 `prfm pldl1keep`; nothing elsewhere). A prefetch is a hint and
/// never faults, so `p` may point past its buffer.
#[inline]
pub fn line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    // The `_prefetch` intrinsic is unstable in Rust 1.95, hence `asm!`.
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `prfm` never faults, whatever the address (a translation
    // fault drops the hint), and writes no register, flag or memory.
    unsafe {
        std::arch::asm!(
            "prfm pldl1keep, [{p}]",
            p = in(reg) p,
            options(nostack, preserves_flags, readonly)
        )
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = p;
}

/// Requests the 64-byte line holding `p` into L2 only (x86 `prefetcht1`,
/// aarch64 `prfm pldl2keep`; nothing elsewhere), as [`line`] otherwise.
#[inline]
pub(crate) fn line_l2(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(p.cast())
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as in `line`.
    unsafe {
        std::arch::asm!(
            "prfm pldl2keep, [{p}]",
            p = in(reg) p,
            options(nostack, preserves_flags, readonly)
        )
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = p;
}

/// Requests every 64-byte line of bytes `from .. to` after `base` (a core
/// with 128-byte lines gets each request twice, which costs an issue slot
/// and nothing else). Callers that request consecutive ranges request each
/// line once.
#[inline]
pub(crate) fn lines(base: *const u8, from: usize, to: usize) {
    each_line(base, from, to, line);
}

/// `request` on every 64-byte line of bytes `from .. to` after `base`.
#[inline(always)]
fn each_line(base: *const u8, from: usize, to: usize, request: impl Fn(*const u8)) {
    let mut off = from & !63;
    while off < to {
        request(base.wrapping_add(off));
        off += 64;
    }
}

/// A buffer requested a few lines per turn of a kernel's loop, so that its
/// requests are spread over the whole of the work that runs before it is
/// read: a core tracks a few dozen misses, and requests issued faster than
/// they complete hold up the loads behind them (and the arithmetic with
/// them) until the memory catches up. The lines are requested into L2
/// ([`line_l2`]): the attention kernels that stream K/V pages this way
/// work on a page, its scores and the group's accumulators from L1, which
/// the next page requested into L1 would compete with (measured in
/// docs/PERF.md, "K/V pages requested into L2").
pub(crate) struct Stream {
    base: *const u8,
    off: usize,
    end: usize,
    step: usize,
}

impl Stream {
    /// `buf` spread over about `turns` calls of [`Stream::turn`] (more
    /// calls request nothing more; fewer leave the rest to [`Stream::rest`]).
    pub(crate) fn new<T>(buf: &[T], turns: usize) -> Self {
        let end = size_of_val(buf);
        Stream {
            base: buf.as_ptr().cast(),
            off: 0,
            end,
            step: end.div_ceil(turns.max(1)).next_multiple_of(64),
        }
    }

    /// Requests the next step's lines; returns their byte range.
    #[inline(always)]
    pub(crate) fn turn(&mut self) -> std::ops::Range<usize> {
        let from = self.off;
        if from < self.end {
            self.off = (from + self.step).min(self.end);
            each_line(self.base, from, self.off, line_l2);
        }
        from..self.off
    }

    /// Requests whatever is left; returns its byte range.
    #[inline]
    pub(crate) fn rest(&mut self) -> std::ops::Range<usize> {
        let from = self.off;
        each_line(self.base, from, self.end, line_l2);
        self.off = self.end;
        from..self.end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream's turns request consecutive, line-aligned ranges of at most
    /// one step each, and have requested the whole buffer once the turns it
    /// was built for are over; turns past that and `rest` request nothing,
    /// and `rest` requests what fewer turns left.
    #[test]
    fn stream_spreads_the_buffer_over_its_turns() {
        for (len, turns) in [
            (0, 4),
            (1, 1),
            (100, 3),
            (8192, 128),
            (8192, 7),
            (4096, 1000),
            (136, 64),
        ] {
            let buf = vec![0u8; len];
            let mut s = Stream::new(&buf, turns);
            let mut at = 0;
            for _ in 0..turns {
                let r = s.turn();
                assert_eq!(r.start, at, "len {len} turns {turns}");
                assert!(r.len() <= len.div_ceil(turns).next_multiple_of(64));
                assert!(r.is_empty() || r.start.is_multiple_of(64));
                at = r.end;
            }
            assert_eq!(at, len, "len {len} turns {turns}");
            assert!(s.turn().is_empty() && s.rest().is_empty());
            let mut s = Stream::new(&buf, turns);
            let half = s.turn().end;
            assert_eq!(s.rest(), half..len);
        }
    }

    /// A prefetch must never fault: null, an address past any buffer, one
    /// in the kernel half and the top of the address space (under qemu the
    /// aarch64 `prfm` is decoded and run, so a wrong encoding or a load in
    /// its place would trap here).
    #[test]
    fn line_never_faults() {
        let buf = [7u8; 256];
        for p in [
            std::ptr::null(),
            buf.as_ptr(),
            buf.as_ptr().wrapping_add(1 << 20),
            1usize.wrapping_shl(63) as *const u8,
            usize::MAX as *const u8,
        ] {
            line(p);
        }
        lines(buf.as_ptr(), 0, 1 << 16);
        lines(std::ptr::null(), 0, 4096);
        assert_eq!(buf, [7u8; 256]);
    }

    /// Every SIMD variant reads a distance; only the x86 ones, where it was
    /// measured, default to 8 KiB.
    #[test]
    fn which_isas_read_which_distance() {
        for isa in Isa::ALL {
            let x86 = matches!(
                isa,
                Isa::Avx2 | Isa::AvxVnni | Isa::Avx512 | Isa::Avx512Vnni | Isa::Amx
            );
            let neon = matches!(isa, Isa::Neon | Isa::NeonDotprod | Isa::NeonI8mm);
            assert_eq!(reads(isa), x86 || neon, "{isa}");
            assert_eq!(measured(isa), x86, "{isa}");
            let want: &[usize] = if x86 || neon { &BYTE_DISTANCES } else { &[0] };
            assert_eq!(byte_candidates(isa), want, "{isa}");
            assert_eq!(default_bytes(isa), if x86 { DEFAULT_BYTES } else { 0 });
            assert!(check_bytes("t", default_bytes(isa)).is_ok());
        }
        assert!(check_bytes("t", 100).is_err());
    }
}
