//! Named event sets: what each counter is called, which `perf_event_open`
//! encoding it has, and which other events it should share a group with.
//!
//! ARMv8 PMUv3 event numbers are the architectural "common event" numbers of
//! the Arm ARM (DDI 0487, chapter D11 "PMU events and event numbers"), the
//! same values Linux names `ARMV8_PMUV3_PERFCTR_*` in
//! `include/linux/perf/arm_pmuv3.h`. They are opened as raw events, with the
//! PMU type of the cluster the run is pinned to (see [`crate::sysfs`]).
//! x86 uses the kernel's generic hardware and cache events, which every x86
//! PMU driver maps to its own encodings. Software events are counted by the
//! kernel and need no PMU at all.

use serde::{Deserialize, Serialize};

/// Which family of events a [`crate::CounterSet`] should count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventSetKind {
    /// ARMv8 PMUv3 architectural events (raw event numbers).
    Armv8,
    /// Generic hardware and cache events on x86.
    X86,
    /// Kernel software events only (task-clock, page faults, context switches).
    Software,
    /// The hardware set for the architecture this binary runs on, else software.
    Auto,
}

impl EventSetKind {
    /// The concrete set `Auto` stands for on this build target.
    pub fn resolve(self) -> EventSetKind {
        match self {
            EventSetKind::Auto if cfg!(target_arch = "aarch64") => EventSetKind::Armv8,
            EventSetKind::Auto if cfg!(target_arch = "x86_64") => EventSetKind::X86,
            EventSetKind::Auto => EventSetKind::Software,
            k => k,
        }
    }

    /// Parses the CLI spelling (`armv8|x86|software|auto`).
    pub fn parse(s: &str) -> Option<EventSetKind> {
        match s.to_ascii_lowercase().as_str() {
            "armv8" | "arm" => Some(EventSetKind::Armv8),
            "x86" | "x86_64" => Some(EventSetKind::X86),
            "software" | "sw" => Some(EventSetKind::Software),
            "auto" => Some(EventSetKind::Auto),
            _ => None,
        }
    }
}

impl std::fmt::Display for EventSetKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EventSetKind::Armv8 => "armv8",
            EventSetKind::X86 => "x86",
            EventSetKind::Software => "software",
            EventSetKind::Auto => "auto",
        })
    }
}

/// Generic hardware events (`PERF_TYPE_HARDWARE`) and the two L1D cache events
/// (`PERF_TYPE_HW_CACHE`) used on x86.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HardwareEvent {
    Cycles,
    Instructions,
    CacheReferences,
    CacheMisses,
    BranchInstructions,
    BranchMisses,
    L1dReadAccess,
    L1dReadMiss,
}

/// Kernel software events (`PERF_TYPE_SOFTWARE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SoftwareEvent {
    TaskClock,
    PageFaults,
    ContextSwitches,
    CpuMigrations,
}

/// How an event is encoded for `perf_event_open`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventCode {
    /// An ARMv8 PMUv3 event number, opened as a raw event on the cluster's PMU.
    ArmRaw(u16),
    Hardware(HardwareEvent),
    Software(SoftwareEvent),
}

impl EventCode {
    /// Whether the event occupies a hardware counter.
    pub fn is_hardware(self) -> bool {
        !matches!(self, EventCode::Software(_))
    }
}

/// One named event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EventDef {
    /// Stable name used as the key in [`crate::Counts`] (Arm ARM spelling on
    /// ARM, `perf list` spelling elsewhere).
    pub name: &'static str,
    pub code: EventCode,
    /// Events with the same affinity are ratios of each other (access/refill,
    /// spec/retired) and are kept in one group so the ratio is taken over the
    /// same time window even when groups are multiplexed.
    pub affinity: &'static str,
    /// Present on every PMUv3 implementation; optional events are only opened
    /// when the PMU lists them in sysfs.
    pub required: bool,
}

const fn arm(name: &'static str, id: u16, affinity: &'static str, required: bool) -> EventDef {
    EventDef {
        name,
        code: EventCode::ArmRaw(id),
        affinity,
        required,
    }
}

const fn hw(name: &'static str, e: HardwareEvent, affinity: &'static str) -> EventDef {
    EventDef {
        name,
        code: EventCode::Hardware(e),
        affinity,
        required: true,
    }
}

const fn sw(name: &'static str, e: SoftwareEvent) -> EventDef {
    EventDef {
        name,
        code: EventCode::Software(e),
        affinity: "software",
        required: true,
    }
}

/// The cycle reference of the ARMv8 set; every planned group carries it.
pub const ARM_CPU_CYCLES: EventDef = arm("CPU_CYCLES", 0x11, "cycles", true);
/// The cycle reference of the x86 set.
pub const X86_CYCLES: EventDef = hw("cycles", HardwareEvent::Cycles, "cycles");

/// ARMv8 PMUv3 common events. `required` marks the events PMUv3 mandates or
/// that every Cortex-A core since the A53 implements; the rest (the
/// STALL_SLOT* / OP_* events of FEAT_PMUv3p4-era cores, used for top-down)
/// are opened only when the PMU's sysfs `events/` directory lists them.
pub const ARMV8_EVENTS: &[EventDef] = &[
    ARM_CPU_CYCLES,
    arm("INST_RETIRED", 0x08, "core", true),
    arm("BR_MIS_PRED", 0x10, "core", true),
    arm("L1D_CACHE", 0x04, "l1d", true),
    arm("L1D_CACHE_REFILL", 0x03, "l1d", true),
    arm("L2D_CACHE", 0x16, "l2d", true),
    arm("L2D_CACHE_REFILL", 0x17, "l2d", true),
    arm("STALL_FRONTEND", 0x23, "stall", false),
    arm("STALL_BACKEND", 0x24, "stall", false),
    arm("INST_SPEC", 0x1B, "simd", false),
    arm("ASE_SPEC", 0x74, "simd", false),
    arm("STALL_SLOT", 0x3F, "topdown", false),
    arm("STALL_SLOT_FRONTEND", 0x3E, "topdown", false),
    arm("STALL_SLOT_BACKEND", 0x3D, "topdown", false),
    arm("OP_SPEC", 0x3B, "topdown", false),
    arm("OP_RETIRED", 0x3A, "topdown", false),
];

/// Generic x86 events. `stalled-cycles-*` are left out on purpose: neither
/// Intel nor AMD Zen kernels map them any more.
pub const X86_EVENTS: &[EventDef] = &[
    X86_CYCLES,
    hw("instructions", HardwareEvent::Instructions, "core"),
    hw("branches", HardwareEvent::BranchInstructions, "branch"),
    hw("branch-misses", HardwareEvent::BranchMisses, "branch"),
    hw("L1-dcache-loads", HardwareEvent::L1dReadAccess, "l1d"),
    hw("L1-dcache-load-misses", HardwareEvent::L1dReadMiss, "l1d"),
    hw("cache-references", HardwareEvent::CacheReferences, "llc"),
    hw("cache-misses", HardwareEvent::CacheMisses, "llc"),
];

/// Kernel software events; these need no PMU and are what the fallback counts.
pub const SOFTWARE_EVENTS: &[EventDef] = &[
    sw("task-clock", SoftwareEvent::TaskClock),
    sw("page-faults", SoftwareEvent::PageFaults),
    sw("context-switches", SoftwareEvent::ContextSwitches),
    sw("cpu-migrations", SoftwareEvent::CpuMigrations),
];

/// The event table for a concrete kind (`Auto` is resolved first).
pub fn event_set(kind: EventSetKind) -> &'static [EventDef] {
    match kind.resolve() {
        EventSetKind::Armv8 => ARMV8_EVENTS,
        EventSetKind::X86 => X86_EVENTS,
        _ => SOFTWARE_EVENTS,
    }
}

/// Looks an event up by its name in every table.
pub fn find_event(name: &str) -> Option<&'static EventDef> {
    ARMV8_EVENTS
        .iter()
        .chain(X86_EVENTS)
        .chain(SOFTWARE_EVENTS)
        .find(|e| e.name == name)
}

/// The sysfs file name under `<pmu>/events/` that announces an ARMv8 event
/// (Linux lowercases the architectural name, e.g. `stall_slot_frontend`).
pub fn sysfs_event_name(def: &EventDef) -> String {
    def.name.to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn armv8_numbers_match_the_arm_arm() {
        // Values from DDI 0487 D11 / linux arm_pmuv3.h, checked one by one.
        let want: &[(&str, u16)] = &[
            ("CPU_CYCLES", 0x11),
            ("INST_RETIRED", 0x08),
            ("L1D_CACHE", 0x04),
            ("L1D_CACHE_REFILL", 0x03),
            ("L2D_CACHE", 0x16),
            ("L2D_CACHE_REFILL", 0x17),
            ("BR_MIS_PRED", 0x10),
            ("STALL_FRONTEND", 0x23),
            ("STALL_BACKEND", 0x24),
            ("ASE_SPEC", 0x74),
            ("INST_SPEC", 0x1B),
            ("STALL_SLOT", 0x3F),
            ("STALL_SLOT_FRONTEND", 0x3E),
            ("STALL_SLOT_BACKEND", 0x3D),
            ("OP_SPEC", 0x3B),
            ("OP_RETIRED", 0x3A),
        ];
        assert_eq!(ARMV8_EVENTS.len(), want.len());
        for (name, id) in want {
            let e = find_event(name).unwrap_or_else(|| panic!("{name} missing"));
            assert_eq!(e.code, EventCode::ArmRaw(*id), "{name}");
        }
    }

    #[test]
    fn names_and_codes_are_unique() {
        for table in [ARMV8_EVENTS, X86_EVENTS, SOFTWARE_EVENTS] {
            let names: HashSet<_> = table.iter().map(|e| e.name).collect();
            let codes: HashSet<_> = table.iter().map(|e| e.code).collect();
            assert_eq!(names.len(), table.len());
            assert_eq!(codes.len(), table.len());
        }
    }

    #[test]
    fn software_events_use_no_hardware_counter() {
        assert!(SOFTWARE_EVENTS.iter().all(|e| !e.code.is_hardware()));
        assert!(ARMV8_EVENTS.iter().all(|e| e.code.is_hardware()));
        assert!(X86_EVENTS.iter().all(|e| e.code.is_hardware()));
    }

    #[test]
    fn kinds_resolve_and_parse() {
        assert_ne!(EventSetKind::Auto.resolve(), EventSetKind::Auto);
        for k in [
            EventSetKind::Armv8,
            EventSetKind::X86,
            EventSetKind::Software,
            EventSetKind::Auto,
        ] {
            assert_eq!(EventSetKind::parse(&k.to_string()), Some(k));
        }
        assert_eq!(EventSetKind::parse("nonsense"), None);
        assert_eq!(event_set(EventSetKind::Software), SOFTWARE_EVENTS);
        assert_eq!(sysfs_event_name(&ARMV8_EVENTS[11]), "stall_slot");
    }
}
