//! Arm `MIDR_EL1` fields and their decoding to core names.
//!
//! The ids come from the Linux kernel's `arch/arm64/include/asm/cputype.h`
//! and util-linux `sys-utils/lscpu-arm.c`; only ids those sources agree on
//! are listed, anything else is shown as `<vendor> part 0x...`.

use serde::{Deserialize, Serialize};

/// The fields of `MIDR_EL1` that `/proc/cpuinfo` prints per core.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Midr {
    /// `CPU implementer` (0x41 = Arm, 0x51 = Qualcomm, 0x61 = Apple, ...).
    pub implementer: u8,
    /// `CPU part`, 12 bits.
    pub part: u16,
    /// `CPU variant`: the major revision (the `r` of `rNpM`).
    pub variant: u8,
    /// `CPU revision`: the minor revision (the `p` of `rNpM`).
    pub revision: u8,
}

impl Midr {
    /// Packs the fields into the register layout (architecture field = 0xf).
    pub fn to_register(self) -> u32 {
        (u32::from(self.implementer) << 24)
            | (u32::from(self.variant & 0xf) << 20)
            | (0xf << 16)
            | (u32::from(self.part & 0xfff) << 4)
            | u32::from(self.revision & 0xf)
    }

    /// Unpacks a raw `MIDR_EL1` value.
    pub fn from_register(reg: u32) -> Midr {
        Midr {
            implementer: (reg >> 24) as u8,
            variant: ((reg >> 20) & 0xf) as u8,
            part: ((reg >> 4) & 0xfff) as u16,
            revision: (reg & 0xf) as u8,
        }
    }

    /// The core's marketing name, e.g. `Cortex-A76`, or a fallback naming the
    /// vendor and the raw part number.
    pub fn core_name(self) -> String {
        match core_name(self.implementer, self.part) {
            Some(name) => name.to_string(),
            None => format!("{} part {:#05x}", vendor_name(self.implementer), self.part),
        }
    }

    /// `r1p0`-style stepping.
    pub fn stepping(self) -> String {
        format!("r{}p{}", self.variant, self.revision)
    }
}

/// The implementer byte's company name.
pub fn vendor_name(implementer: u8) -> &'static str {
    match implementer {
        // Reserved for software use; qemu's `max` CPU reports it.
        0x00 => "software",
        0x41 => "ARM",
        0x42 => "Broadcom",
        0x43 => "Cavium",
        0x46 => "Fujitsu",
        0x48 => "HiSilicon",
        0x4e => "NVIDIA",
        0x50 => "APM",
        0x51 => "Qualcomm",
        0x53 => "Samsung",
        0x61 => "Apple",
        0x6d => "Microsoft",
        0xc0 => "Ampere",
        _ => "unknown implementer",
    }
}

/// The core name for an (implementer, part) pair, if known.
pub fn core_name(implementer: u8, part: u16) -> Option<&'static str> {
    let name = match (implementer, part) {
        // qemu's `max` CPU: implementer 0 (software), part 0x051 ('Q').
        (0x00, 0x051) => "QEMU-max",
        // Arm Ltd.
        (0x41, 0xd01) => "Cortex-A32",
        (0x41, 0xd02) => "Cortex-A34",
        (0x41, 0xd03) => "Cortex-A53",
        (0x41, 0xd04) => "Cortex-A35",
        (0x41, 0xd05) => "Cortex-A55",
        (0x41, 0xd06) => "Cortex-A65",
        (0x41, 0xd07) => "Cortex-A57",
        (0x41, 0xd08) => "Cortex-A72",
        (0x41, 0xd09) => "Cortex-A73",
        (0x41, 0xd0a) => "Cortex-A75",
        (0x41, 0xd0b) => "Cortex-A76",
        (0x41, 0xd0c) => "Neoverse-N1",
        (0x41, 0xd0d) => "Cortex-A77",
        (0x41, 0xd0e) => "Cortex-A76AE",
        (0x41, 0xd40) => "Neoverse-V1",
        (0x41, 0xd41) => "Cortex-A78",
        (0x41, 0xd42) => "Cortex-A78AE",
        (0x41, 0xd43) => "Cortex-A65AE",
        (0x41, 0xd44) => "Cortex-X1",
        (0x41, 0xd46) => "Cortex-A510",
        (0x41, 0xd47) => "Cortex-A710",
        (0x41, 0xd48) => "Cortex-X2",
        (0x41, 0xd49) => "Neoverse-N2",
        (0x41, 0xd4a) => "Neoverse-E1",
        (0x41, 0xd4b) => "Cortex-A78C",
        (0x41, 0xd4c) => "Cortex-X1C",
        (0x41, 0xd4d) => "Cortex-A715",
        (0x41, 0xd4e) => "Cortex-X3",
        (0x41, 0xd4f) => "Neoverse-V2",
        (0x41, 0xd80) => "Cortex-A520",
        (0x41, 0xd81) => "Cortex-A720",
        (0x41, 0xd82) => "Cortex-X4",
        (0x41, 0xd83) => "Neoverse-V3AE",
        (0x41, 0xd84) => "Neoverse-V3",
        (0x41, 0xd85) => "Cortex-X925",
        (0x41, 0xd87) => "Cortex-A725",
        (0x41, 0xd8e) => "Neoverse-N3",
        // Broadcom / Cavium
        (0x42, 0x00f) => "Brahma-B15",
        (0x42, 0x100) => "Brahma-B53",
        (0x42, 0x516) => "ThunderX2",
        (0x43, 0x0a1) => "ThunderX",
        (0x43, 0x0a2) => "ThunderX-81XX",
        (0x43, 0x0a3) => "ThunderX-83XX",
        (0x43, 0x0af) => "ThunderX2",
        // Fujitsu, HiSilicon, NVIDIA, APM
        (0x46, 0x001) => "A64FX",
        (0x48, 0xd01) => "TaiShan-v110",
        (0x48, 0xd02) => "TaiShan-v120",
        (0x4e, 0x000) => "Denver",
        (0x4e, 0x003) => "Denver 2",
        (0x4e, 0x004) => "Carmel",
        (0x50, 0x000) => "X-Gene",
        // Qualcomm
        (0x51, 0x001) => "Oryon",
        (0x51, 0x200) => "Kryo",
        (0x51, 0x800) => "Kryo-2XX-Gold",
        (0x51, 0x801) => "Kryo-2XX-Silver",
        (0x51, 0x802) => "Kryo-3XX-Gold",
        (0x51, 0x803) => "Kryo-3XX-Silver",
        (0x51, 0x804) => "Kryo-4XX-Gold",
        (0x51, 0x805) => "Kryo-4XX-Silver",
        (0x51, 0xc00) => "Falkor",
        (0x51, 0xc01) => "Saphira",
        // Samsung
        (0x53, 0x001) => "Exynos-M1",
        (0x53, 0x002) => "Exynos-M3",
        (0x53, 0x003) => "Exynos-M4",
        (0x53, 0x004) => "Exynos-M5",
        // Apple
        (0x61, 0x022) => "M1-Icestorm",
        (0x61, 0x023) => "M1-Firestorm",
        (0x61, 0x024) => "M1-Pro-Icestorm",
        (0x61, 0x025) => "M1-Pro-Firestorm",
        (0x61, 0x028) => "M1-Max-Icestorm",
        (0x61, 0x029) => "M1-Max-Firestorm",
        (0x61, 0x032) => "M2-Blizzard",
        (0x61, 0x033) => "M2-Avalanche",
        // Microsoft, Ampere
        (0x6d, 0xd49) => "Azure-Cobalt-100",
        (0xc0, 0xac3) => "AmpereOne",
        (0xc0, 0xac4) => "AmpereOne-AC04",
        _ => return None,
    };
    Some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_round_trip_matches_known_value() {
        // Raspberry Pi 5 boot log: "Booting Linux on physical CPU ... [0x414fd0b1]".
        let m = Midr::from_register(0x414f_d0b1);
        assert_eq!(
            m,
            Midr {
                implementer: 0x41,
                part: 0xd0b,
                variant: 4,
                revision: 1
            }
        );
        assert_eq!(m.to_register(), 0x414f_d0b1);
        assert_eq!(m.core_name(), "Cortex-A76");
        assert_eq!(m.stepping(), "r4p1");
    }

    #[test]
    fn names_required_cores() {
        let arm = |p| core_name(0x41, p).unwrap();
        let want = [
            (0xd03, "Cortex-A53"),
            (0xd05, "Cortex-A55"),
            (0xd07, "Cortex-A57"),
            (0xd08, "Cortex-A72"),
            (0xd09, "Cortex-A73"),
            (0xd0a, "Cortex-A75"),
            (0xd0b, "Cortex-A76"),
            (0xd0d, "Cortex-A77"),
            (0xd41, "Cortex-A78"),
            (0xd46, "Cortex-A510"),
            (0xd80, "Cortex-A520"),
            (0xd47, "Cortex-A710"),
            (0xd4d, "Cortex-A715"),
            (0xd81, "Cortex-A720"),
            (0xd44, "Cortex-X1"),
            (0xd48, "Cortex-X2"),
            (0xd4e, "Cortex-X3"),
            (0xd82, "Cortex-X4"),
            (0xd85, "Cortex-X925"),
            (0xd0c, "Neoverse-N1"),
            (0xd49, "Neoverse-N2"),
            (0xd40, "Neoverse-V1"),
            (0xd4f, "Neoverse-V2"),
            (0xd84, "Neoverse-V3"),
        ];
        for (part, name) in want {
            assert_eq!(arm(part), name, "part {part:#x}");
        }
    }

    #[test]
    fn unknown_part_names_vendor_and_number() {
        let m = Midr {
            implementer: 0x51,
            part: 0x0ff,
            variant: 0,
            revision: 0,
        };
        assert_eq!(m.core_name(), "Qualcomm part 0x0ff");
    }
}
