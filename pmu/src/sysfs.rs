//! Discovery of the CPU PMUs the kernel exposes under
//! `/sys/bus/event_source/devices/`.
//!
//! On a big.LITTLE (DynamIQ) SoC each cluster has its own PMU device, e.g.
//! `armv8_cortex_a55` and `armv8_cortex_a76`, each with a `type` file (the
//! value for `perf_event_attr.type`), a `cpus` file (the CPUs it covers, as a
//! cpulist like `0-3`), an `events/` directory listing the common events that
//! core implements, and, on PMUv3p4+ cores, `caps/slots` (the pipeline width
//! used by top-down). A counter opened with one cluster's type only counts
//! while the thread runs on that cluster, so a pinned run must use the PMU of
//! the cluster it is pinned to. Every function takes the sysfs root as a
//! parameter so it can be tested on fixture trees.

use crate::error::PmuError;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The real location of the event-source devices.
pub const SYSFS_EVENT_SOURCES: &str = "/sys/bus/event_source/devices";

/// One CPU PMU as described by sysfs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PmuDevice {
    /// Directory name, e.g. `armv8_cortex_a76` or `cpu`.
    pub name: String,
    /// Value for `perf_event_attr.type`.
    pub type_id: u32,
    /// CPUs this PMU counts on; empty means "all" (x86 `cpu` has no cpus file).
    pub cpus: Vec<usize>,
    /// Pipeline slots per cycle from `caps/slots`, if exposed and non-zero.
    pub slots: Option<u32>,
    /// Names (lowercase) from the `events/` directory.
    pub events: Vec<String>,
    #[serde(skip)]
    pub path: PathBuf,
}

impl PmuDevice {
    /// Whether the PMU counts on `cpu`.
    pub fn covers(&self, cpu: usize) -> bool {
        self.cpus.is_empty() || self.cpus.contains(&cpu)
    }

    /// Whether sysfs announces the event (lowercase architectural name).
    pub fn has_event(&self, sysfs_name: &str) -> bool {
        self.events.iter().any(|e| e == sysfs_name)
    }
}

/// Parses a kernel cpulist (`0-3,6,8-9`) into CPU numbers.
pub fn parse_cpulist(s: &str) -> Result<Vec<usize>, PmuError> {
    let mut out = Vec::new();
    let bad = || PmuError::Parse {
        what: "cpulist",
        text: s.trim().to_string(),
    };
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let a: usize = a.trim().parse().map_err(|_| bad())?;
                let b: usize = b.trim().parse().map_err(|_| bad())?;
                if b < a {
                    return Err(bad());
                }
                out.extend(a..=b);
            }
            None => out.push(part.trim().parse().map_err(|_| bad())?),
        }
    }
    Ok(out)
}

/// Whether a device name is a CPU PMU (as opposed to `software`, uncore, ...).
fn is_cpu_pmu(name: &str) -> bool {
    name == "cpu"
        || name == "cpu_core"
        || name == "cpu_atom"
        || name.starts_with("armv8_")
        || name.starts_with("armv9_")
}

/// Reads one PMU device directory.
pub fn read_device(dir: &Path) -> Result<PmuDevice, PmuError> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let read = |rel: &str| -> Result<String, PmuError> {
        let p = dir.join(rel);
        std::fs::read_to_string(&p).map_err(|source| PmuError::Sysfs { path: p, source })
    };
    let type_text = read("type")?;
    let type_id = type_text.trim().parse().map_err(|_| PmuError::Parse {
        what: "pmu type",
        text: type_text.trim().to_string(),
    })?;
    let cpus = match read("cpus") {
        Ok(s) => parse_cpulist(&s)?,
        Err(_) => Vec::new(),
    };
    let slots = read("caps/slots")
        .ok()
        .and_then(|s| parse_slots(&s))
        .filter(|&s| s > 0);
    let mut events: Vec<String> = std::fs::read_dir(dir.join("events"))
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    events.sort();
    Ok(PmuDevice {
        name,
        type_id,
        cpus,
        slots,
        events,
        path: dir.to_path_buf(),
    })
}

/// `caps/slots` is printed as hex (`0x00000008`) by current kernels and as
/// decimal by some vendor kernels; accept both.
fn parse_slots(s: &str) -> Option<u32> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Lists the CPU PMUs under `root`, sorted by name. A missing root is an
/// empty list (no PMU), not an error; unreadable devices are skipped.
pub fn discover_cpu_pmus(root: &Path) -> Vec<PmuDevice> {
    let Ok(rd) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut out: Vec<PmuDevice> = rd
        .filter_map(Result::ok)
        .filter(|e| is_cpu_pmu(&e.file_name().to_string_lossy()))
        .filter_map(|e| read_device(&e.path()).ok())
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The PMU that counts on `cpu`, if any. With `cpu = None` (unpinned run) the
/// single CPU PMU is returned, or the first one when there are several (the
/// caller should pin; see the crate docs).
pub fn pmu_for_cpu(root: &Path, cpu: Option<usize>) -> Option<PmuDevice> {
    let pmus = discover_cpu_pmus(root);
    match cpu {
        Some(c) => pmus.into_iter().find(|p| p.covers(c)),
        None => pmus.into_iter().next(),
    }
}

/// `/proc/sys/kernel/perf_event_paranoid`, if readable.
pub fn perf_event_paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists_parse() {
        assert_eq!(parse_cpulist("0-3\n").unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(parse_cpulist("0,2-3,7").unwrap(), vec![0, 2, 3, 7]);
        assert_eq!(parse_cpulist("").unwrap(), Vec::<usize>::new());
        assert!(parse_cpulist("3-1").is_err());
        assert!(parse_cpulist("a-b").is_err());
    }

    #[test]
    fn slots_parse_hex_and_decimal() {
        assert_eq!(parse_slots("0x00000008\n"), Some(8));
        assert_eq!(parse_slots("5"), Some(5));
        assert_eq!(parse_slots("zz"), None);
    }
}
