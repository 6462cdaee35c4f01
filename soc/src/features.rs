//! ISA features that matter to tiletune's kernels, named as Rust's
//! `target_feature` names (`avx512vnni`, `dotprod`, `amx-tile`, ...).
//!
//! Two sources give the same names: run-time detection of the running
//! process ([`detect`], the truth for what this binary may execute), and the
//! `flags`/`Features` line of a `/proc/cpuinfo` text ([`from_cpuinfo_flags`],
//! for dumps pulled from another machine).

use serde::{Deserialize, Serialize};

/// Where a [`crate::SocInfo`]'s feature list came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FeatureSource {
    /// `is_*_feature_detected!`/CPUID/HWCAP of the running process.
    RunTime,
    /// The `flags` (x86) or `Features` (arm) line of `/proc/cpuinfo`.
    Cpuinfo,
    /// Neither was available.
    Unknown,
}

/// (cpuinfo flag, feature name) for x86-64. Linux spells a few flags with an
/// underscore where Rust does not (`avx512_vnni` vs `avx512vnni`).
const X86_FLAGS: &[(&str, &str)] = &[
    ("sse4_2", "sse4.2"),
    ("avx", "avx"),
    ("avx2", "avx2"),
    ("fma", "fma"),
    ("f16c", "f16c"),
    ("avx512f", "avx512f"),
    ("avx512bw", "avx512bw"),
    ("avx512vl", "avx512vl"),
    ("avx512_vnni", "avx512vnni"),
    ("avx512_bf16", "avx512bf16"),
    ("avx512_fp16", "avx512fp16"),
    ("avx_vnni", "avxvnni"),
    ("amx_tile", "amx-tile"),
    ("amx_int8", "amx-int8"),
    ("amx_bf16", "amx-bf16"),
];

/// (cpuinfo word, feature name) for aarch64 (`Features` uses the HWCAP names
/// of `arch/arm64/kernel/cpuinfo.c`).
const ARM_FLAGS: &[(&str, &str)] = &[
    ("asimd", "neon"),
    ("asimdhp", "fp16"),
    ("asimddp", "dotprod"),
    ("i8mm", "i8mm"),
    ("bf16", "bf16"),
    ("sve", "sve"),
    ("sve2", "sve2"),
    ("sme", "sme"),
    ("sme2", "sme2"),
];

/// Every feature name tiletune reports on x86-64, in report order.
pub fn x86_names() -> impl Iterator<Item = &'static str> {
    X86_FLAGS.iter().map(|&(_, n)| n)
}

/// Every feature name tiletune reports on aarch64, in report order.
pub fn arm_names() -> impl Iterator<Item = &'static str> {
    ARM_FLAGS.iter().map(|&(_, n)| n)
}

/// Maps cpuinfo words to feature names, for the given layout. The result is
/// sorted and deduplicated.
pub fn from_cpuinfo_flags(flags: &[String], x86: bool) -> Vec<String> {
    let table = if x86 { X86_FLAGS } else { ARM_FLAGS };
    let mut out: Vec<String> = table
        .iter()
        .filter(|(flag, _)| flags.iter().any(|f| f == flag))
        .map(|&(_, name)| name.to_string())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Features the running process can execute, sorted; `None` on an
/// architecture tiletune has no kernels for.
pub fn detect() -> Option<Vec<String>> {
    let mut out = detect_arch()?;
    out.sort();
    Some(out)
}

#[cfg(target_arch = "x86_64")]
fn detect_arch() -> Option<Vec<String>> {
    use std::arch::is_x86_feature_detected as has;
    let mut out = Vec::new();
    let mut push = |cond: bool, name: &str| {
        if cond {
            out.push(name.to_string());
        }
    };
    push(has!("sse4.2"), "sse4.2");
    push(has!("avx"), "avx");
    push(has!("avx2"), "avx2");
    push(has!("fma"), "fma");
    push(has!("f16c"), "f16c");
    push(has!("avx512f"), "avx512f");
    push(has!("avx512bw"), "avx512bw");
    push(has!("avx512vl"), "avx512vl");
    push(has!("avx512vnni"), "avx512vnni");
    push(has!("avx512bf16"), "avx512bf16");
    push(has!("avx512fp16"), "avx512fp16");
    push(has!("avxvnni"), "avxvnni");
    let amx = amx::detect();
    push(amx.tile, "amx-tile");
    push(amx.int8, "amx-int8");
    push(amx.bf16, "amx-bf16");
    Some(out)
}

/// AMX detection by hand: `is_x86_feature_detected!("amx-tile")` is still
/// unstable in Rust 1.95.
#[cfg(target_arch = "x86_64")]
mod amx {
    pub struct Amx {
        pub tile: bool,
        pub int8: bool,
        pub bf16: bool,
    }

    pub fn detect() -> Amx {
        use std::arch::x86_64::__cpuid_count;
        let none = Amx {
            tile: false,
            int8: false,
            bf16: false,
        };
        if __cpuid_count(0, 0).eax < 7 {
            return none;
        }
        // CPUID.(EAX=7,ECX=0):EDX bit 22 AMX-BF16, bit 24 AMX-TILE, bit 25 AMX-INT8.
        let edx = __cpuid_count(7, 0).edx;
        // The OS must also enable the tile state: XCR0 bits 17 (XTILECFG) and
        // 18 (XTILEDATA), readable only when CPUID.1:ECX.OSXSAVE (bit 27) is set.
        let osxsave = __cpuid_count(1, 0).ecx & (1 << 27) != 0;
        // SAFETY: OSXSAVE set means XGETBV is enabled and executable at CPL 3.
        let os_tiles = osxsave && unsafe { xcr0() } & (0b11 << 17) == (0b11 << 17);
        Amx {
            tile: os_tiles && edx & (1 << 24) != 0,
            int8: os_tiles && edx & (1 << 25) != 0,
            bf16: os_tiles && edx & (1 << 22) != 0,
        }
    }

    /// Reads XCR0.
    ///
    /// # Safety
    /// The caller must have checked CPUID.1:ECX.OSXSAVE.
    #[target_feature(enable = "xsave")]
    unsafe fn xcr0() -> u64 {
        // SAFETY: forwarded from the caller's contract.
        unsafe { std::arch::x86_64::_xgetbv(0) }
    }
}

#[cfg(target_arch = "aarch64")]
fn detect_arch() -> Option<Vec<String>> {
    use std::arch::is_aarch64_feature_detected as has;
    let mut out = Vec::new();
    let mut push = |cond: bool, name: &str| {
        if cond {
            out.push(name.to_string());
        }
    };
    push(has!("neon"), "neon");
    push(has!("fp16"), "fp16");
    push(has!("dotprod"), "dotprod");
    push(has!("i8mm"), "i8mm");
    push(has!("bf16"), "bf16");
    push(has!("sve"), "sve");
    push(has!("sve2"), "sve2");
    // `is_aarch64_feature_detected!("sme")` is unstable in Rust 1.95, so read
    // the kernel's HWCAP2 bits directly (arch/arm64/include/uapi/asm/hwcap.h).
    const HWCAP2_SME: u64 = 1 << 23;
    const HWCAP2_SME2: u64 = 1 << 37;
    // SAFETY: getauxval only reads the process's auxiliary vector.
    let hwcap2 = unsafe { libc::getauxval(libc::AT_HWCAP2) };
    push(hwcap2 & HWCAP2_SME != 0, "sme");
    push(hwcap2 & HWCAP2_SME2 != 0, "sme2");
    Some(out)
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn detect_arch() -> Option<Vec<String>> {
    None
}

/// The raw `MIDR_EL1` of the core this thread runs on, read with `mrs`.
/// Linux (and qemu-user) trap and emulate the read when `HWCAP_CPUID` is
/// advertised, which is how a process under qemu learns the emulated core.
#[cfg(target_arch = "aarch64")]
pub fn read_midr_el1() -> Option<u32> {
    const HWCAP_CPUID: u64 = 1 << 11;
    // SAFETY: getauxval only reads the process's auxiliary vector.
    let hwcap = unsafe { libc::getauxval(libc::AT_HWCAP) };
    if hwcap & HWCAP_CPUID == 0 {
        return None;
    }
    let midr: u64;
    // SAFETY: with HWCAP_CPUID the kernel emulates EL0 reads of MIDR_EL1.
    unsafe {
        std::arch::asm!("mrs {0}, MIDR_EL1", out(reg) midr, options(nomem, nostack, preserves_flags));
    }
    Some(midr as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn maps_x86_flags_to_rust_names() {
        let f = from_cpuinfo_flags(
            &words("fpu sse4_2 avx avx2 fma avx512f avx512_vnni avx_vnni amx_tile"),
            true,
        );
        assert_eq!(
            f,
            vec![
                "amx-tile",
                "avx",
                "avx2",
                "avx512f",
                "avx512vnni",
                "avxvnni",
                "fma",
                "sse4.2"
            ]
        );
    }

    #[test]
    fn maps_arm_features_to_rust_names() {
        let f = from_cpuinfo_flags(&words("fp asimd asimdhp asimddp i8mm sve svei8mm"), false);
        assert_eq!(f, vec!["dotprod", "fp16", "i8mm", "neon", "sve"]);
    }

    #[test]
    fn run_time_detection_is_sorted_and_consistent_with_std() {
        let Some(found) = detect() else { return };
        let mut sorted = found.clone();
        sorted.sort();
        assert_eq!(found, sorted);
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            found.iter().any(|f| f == "avx2"),
            std::arch::is_x86_feature_detected!("avx2")
        );
        #[cfg(target_arch = "aarch64")]
        assert_eq!(
            found.iter().any(|f| f == "dotprod"),
            std::arch::is_aarch64_feature_detected!("dotprod")
        );
    }
}
