//! Instruction-set variants and their run-time detection.
//!
//! Detection runs once and is cached in a `OnceLock`, as the `gemm` crate
//! does, rather than fixed at compile time with `-C target-cpu=native` as
//! candle does: tiletune must be able to run and time every variant the CPU
//! supports from one binary, and a tuner may force any of them.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

/// One instruction-set level a kernel variant can be written for.
///
/// The levels are cumulative within an architecture: `Amx` implies
/// `Avx512Vnni` implies `Avx512` implies `Avx2` (with FMA and F16C); `NeonI8mm` implies
/// `NeonDotprod` implies `Neon`. `Sme` stands beside the NEON levels: it
/// implies `Neon` only (its kernels pack with NEON outside streaming mode),
/// and it is never what [`Isa::best`] or [`Isa::best_of`] pick (see
/// [`Isa::runs_untuned`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isa {
    /// Plain Rust, the reference; always available.
    Scalar,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2,
    /// x86-64 AVX2 + AVX-VNNI (`vpdpbusd` on 256-bit registers).
    AvxVnni,
    /// x86-64 AVX-512 F/BW/VL/DQ (+ the AVX2 level).
    Avx512,
    /// x86-64 AVX-512 + AVX512_VNNI.
    Avx512Vnni,
    /// x86-64 AMX-INT8 tiles (`tdpbssd`, Sapphire Rapids and later) with
    /// the AVX-512 VNNI level. Usable only once Linux has granted the
    /// process the tile data state, which detection requests
    /// (`arch_prctl(ARCH_REQ_XCOMP_PERM)`): without it the first tile
    /// instruction faults.
    Amx,
    /// aarch64 Advanced SIMD (always present on aarch64).
    Neon,
    /// aarch64 NEON + dot product (`sdot`/`udot`).
    NeonDotprod,
    /// aarch64 NEON + dotprod + int8 matrix multiply (`smmla`).
    NeonI8mm,
    /// aarch64 Scalable Matrix Extension (Armv9 FEAT_SME): outer products
    /// (`fmopa`, `smopa`) into the ZA tiles, run in streaming mode at the
    /// CPU's streaming vector length ([`crate::sme`]).
    Sme,
}

impl Isa {
    /// Every variant tiletune knows, in order of increasing capability per
    /// architecture.
    pub const ALL: [Isa; 10] = [
        Isa::Scalar,
        Isa::Avx2,
        Isa::AvxVnni,
        Isa::Avx512,
        Isa::Avx512Vnni,
        Isa::Amx,
        Isa::Neon,
        Isa::NeonDotprod,
        Isa::NeonI8mm,
        Isa::Sme,
    ];

    /// The stable name used in selector-table keys and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::AvxVnni => "avx_vnni",
            Isa::Avx512 => "avx512",
            Isa::Avx512Vnni => "avx512_vnni",
            Isa::Amx => "amx",
            Isa::Neon => "neon",
            Isa::NeonDotprod => "neon_dotprod",
            Isa::NeonI8mm => "neon_i8mm",
            Isa::Sme => "sme",
        }
    }

    /// Whether this build has code for this level's architecture (scalar
    /// everywhere, the x86 levels on x86-64, the NEON ones on aarch64): what
    /// a family implements for a level of another architecture is not
    /// known to this build.
    pub fn is_native_arch(self) -> bool {
        match self {
            Isa::Scalar => true,
            Isa::Avx2 | Isa::AvxVnni | Isa::Avx512 | Isa::Avx512Vnni | Isa::Amx => {
                cfg!(target_arch = "x86_64")
            }
            Isa::Neon | Isa::NeonDotprod | Isa::NeonI8mm | Isa::Sme => {
                cfg!(target_arch = "aarch64")
            }
        }
    }

    /// Whether the running CPU can execute code written for this level.
    pub fn is_available(self) -> bool {
        detected().contains(&self)
    }

    /// The levels the running CPU supports, scalar first.
    pub fn detected() -> &'static [Isa] {
        detected()
    }

    /// Whether this level may run where nothing was tuned, that is, be
    /// picked by [`Isa::best`] and [`Isa::best_of`]. Every level but `Sme`
    /// may. An SME kernel enters and leaves streaming mode on every call,
    /// wastes rows and columns of its large tiles on small shapes, and on
    /// the first SME cores (Apple M4) one SME unit serves a whole cluster,
    /// so whether it beats NEON depends on the chip, the shape and the
    /// thread count, and nothing has measured it yet: it runs where it is
    /// forced or where the tuner timed it faster.
    pub fn runs_untuned(self) -> bool {
        self != Isa::Sme
    }

    /// The most capable level the running CPU supports that may run
    /// untuned ([`Isa::runs_untuned`]).
    pub fn best() -> Isa {
        Isa::best_of(&Isa::ALL)
    }

    /// The most capable level among `candidates` that the CPU supports and
    /// that may run untuned (scalar if none is); families use it to pick
    /// the variant they run by default.
    pub fn best_of(candidates: &[Isa]) -> Isa {
        detected()
            .iter()
            .rev()
            .copied()
            .find(|&i| i.runs_untuned() && candidates.contains(&i))
            .unwrap_or(Isa::Scalar)
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error returned when parsing an unknown ISA name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown ISA `{0}`; expected one of scalar, avx2, avx_vnni, avx512, avx512_vnni, amx, neon, neon_dotprod, neon_i8mm, sme"
)]
pub struct ParseIsaError(pub String);

impl FromStr for Isa {
    type Err = ParseIsaError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Isa::ALL
            .iter()
            .copied()
            .find(|i| i.name() == s)
            .ok_or_else(|| ParseIsaError(s.to_string()))
    }
}

fn detected() -> &'static [Isa] {
    static DETECTED: OnceLock<Vec<Isa>> = OnceLock::new();
    DETECTED.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Vec<Isa> {
    let mut v = vec![Isa::Scalar];
    let avx2 = is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c");
    if avx2 {
        v.push(Isa::Avx2);
        if is_x86_feature_detected!("avxvnni") {
            v.push(Isa::AvxVnni);
        }
        let avx512 = is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512dq");
        if avx512 {
            v.push(Isa::Avx512);
            if is_x86_feature_detected!("avx512vnni") {
                v.push(Isa::Avx512Vnni);
                if amx_granted() {
                    v.push(Isa::Amx);
                }
            }
        }
    }
    v
}

/// Whether the CPU has the AMX tile and int8 units (CPUID leaf 7: EDX bits
/// 24 and 25) and Linux grants this process the tile data state (XFEATURE
/// 18), which it hands out only on request; the grant holds for every
/// thread of the process.
#[cfg(target_arch = "x86_64")]
fn amx_granted() -> bool {
    let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
    if edx & (0b11 << 24) != 0b11 << 24 {
        return false;
    }
    #[cfg(target_os = "linux")]
    {
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: arch_prctl with an integer argument reads no memory; a
        // kernel without AMX support refuses it.
        unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            ) == 0
        }
    }
    #[cfg(not(target_os = "linux"))]
    false
}

#[cfg(target_arch = "aarch64")]
fn detect() -> Vec<Isa> {
    let mut v = vec![Isa::Scalar, Isa::Neon];
    if std::arch::is_aarch64_feature_detected!("dotprod") {
        v.push(Isa::NeonDotprod);
        if std::arch::is_aarch64_feature_detected!("i8mm") {
            v.push(Isa::NeonI8mm);
        }
    }
    if crate::sme::detected() {
        v.push(Isa::Sme);
    }
    v
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn detect() -> Vec<Isa> {
    vec![Isa::Scalar]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for isa in Isa::ALL {
            assert_eq!(isa.name().parse::<Isa>().unwrap(), isa);
        }
        assert!("avx1024".parse::<Isa>().is_err());
    }

    #[test]
    fn scalar_always_detected_and_levels_are_cumulative() {
        let d = Isa::detected();
        assert_eq!(d[0], Isa::Scalar);
        if d.contains(&Isa::Avx512) {
            assert!(d.contains(&Isa::Avx2));
        }
        if d.contains(&Isa::Amx) {
            assert!(d.contains(&Isa::Avx512Vnni));
        }
        if d.contains(&Isa::NeonI8mm) {
            assert!(d.contains(&Isa::NeonDotprod));
        }
        if d.contains(&Isa::Sme) {
            assert!(d.contains(&Isa::Neon));
        }
        #[cfg(target_arch = "aarch64")]
        assert!(d.contains(&Isa::Neon));
    }

    #[test]
    fn best_of_falls_back_to_scalar() {
        assert_eq!(Isa::best_of(&[]), Isa::Scalar);
        assert!(Isa::best_of(&[Isa::Avx2, Isa::Neon]).is_available());
    }

    /// SME runs where forced or tuned, never by default, even on a CPU
    /// that has it (qemu's `max`).
    #[test]
    fn sme_is_never_the_untuned_pick() {
        assert_eq!(Isa::best_of(&[Isa::Sme]), Isa::Scalar);
        assert_ne!(Isa::best(), Isa::Sme);
        assert!(
            Isa::ALL
                .iter()
                .all(|&i| i.runs_untuned() == (i != Isa::Sme))
        );
        #[cfg(target_arch = "aarch64")]
        assert_eq!(Isa::Sme.is_available(), crate::sme::detected());
        #[cfg(not(target_arch = "aarch64"))]
        assert!(!Isa::Sme.is_available());
    }
}
