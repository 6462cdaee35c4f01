//! Readers for the sysfs and procfs files under a root directory: CPU lists,
//! `cpufreq/cpuinfo_max_freq`, `cache/index*`, `/proc/meminfo`, and the few
//! files that name the SoC. Every reader returns `None`/empty on a missing or
//! malformed file; the caller turns that into a note.

use serde::{Deserialize, Serialize};
use std::fs;
use std::path::{Path, PathBuf};

/// The sysfs CPU directory under `root`.
pub fn cpu_dir(root: &Path) -> PathBuf {
    root.join("sys/devices/system/cpu")
}

/// Reads a file as trimmed text.
pub fn read_trimmed(path: &Path) -> Option<String> {
    fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Parses a kernel CPU list such as `0-3,6,8-9`. Returns `None` on malformed
/// input (and on absurdly large ranges, which only a corrupt file has).
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.trim().parse().ok()?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// Formats CPUs as a kernel CPU list (`0-3,6`).
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

/// A CPU list file (`possible`, `online`, `present`) under the CPU dir.
pub fn read_cpu_list(root: &Path, name: &str) -> Option<Vec<usize>> {
    read_trimmed(&cpu_dir(root).join(name)).and_then(|s| parse_cpu_list(&s))
}

/// The `cpuN` directories that exist, as numbers.
pub fn cpu_dirs(root: &Path) -> Vec<usize> {
    let Ok(rd) = fs::read_dir(cpu_dir(root)) else {
        return Vec::new();
    };
    let mut out: Vec<usize> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("cpu"))
                .and_then(|n| n.parse().ok())
        })
        .collect();
    out.sort_unstable();
    out
}

/// `cpuN/cpufreq/cpuinfo_max_freq` in kHz.
pub fn max_freq_khz(root: &Path, cpu: usize) -> Option<u64> {
    read_trimmed(&cpu_dir(root).join(format!("cpu{cpu}/cpufreq/cpuinfo_max_freq")))
        .and_then(|s| s.parse().ok())
}

/// Kind of a cache, from sysfs `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheKind {
    Data,
    Instruction,
    Unified,
}

impl CacheKind {
    fn parse(s: &str) -> Option<CacheKind> {
        match s {
            "Data" => Some(CacheKind::Data),
            "Instruction" => Some(CacheKind::Instruction),
            "Unified" => Some(CacheKind::Unified),
            _ => None,
        }
    }

    /// `d`, `i` or empty, as in `L1d`, `L1i`, `L2`.
    pub fn suffix(self) -> &'static str {
        match self {
            CacheKind::Data => "d",
            CacheKind::Instruction => "i",
            CacheKind::Unified => "",
        }
    }
}

/// One `cache/indexN` directory of a CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cache {
    pub level: u8,
    pub kind: CacheKind,
    /// `size`, in bytes; `None` when the kernel does not know it (recent
    /// arm64 kernels without cache sizes in the device tree or ACPI PPTT).
    pub size_bytes: Option<u64>,
    /// `coherency_line_size`.
    pub line_bytes: Option<u32>,
    /// `ways_of_associativity`.
    pub ways: Option<u32>,
    /// `shared_cpu_list`: the CPUs that share this cache instance.
    pub shared_cpu_list: Option<String>,
}

impl Cache {
    /// `L1d`, `L2`, ...
    pub fn label(&self) -> String {
        format!("L{}{}", self.level, self.kind.suffix())
    }
}

/// Parses sysfs cache sizes: `48K`, `1024K`, `2M`, or plain bytes.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1u64 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mult)
}

/// The caches of `cpu`, sorted by (level, kind); `None` when the CPU has no
/// `cache` directory at all.
pub fn caches(root: &Path, cpu: usize) -> Option<Vec<Cache>> {
    let dir = cpu_dir(root).join(format!("cpu{cpu}/cache"));
    let rd = fs::read_dir(&dir).ok()?;
    let mut out = Vec::new();
    for entry in rd.filter_map(|e| e.ok()) {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with("index") {
            continue;
        }
        let p = entry.path();
        let read = |f: &str| read_trimmed(&p.join(f));
        let (Some(level), Some(kind)) = (
            read("level").and_then(|s| s.parse().ok()),
            read("type").and_then(|s| CacheKind::parse(&s)),
        ) else {
            continue;
        };
        out.push(Cache {
            level,
            kind,
            size_bytes: read("size").and_then(|s| parse_size(&s)),
            line_bytes: read("coherency_line_size").and_then(|s| s.parse().ok()),
            ways: read("ways_of_associativity").and_then(|s| s.parse().ok()),
            shared_cpu_list: read("shared_cpu_list"),
        });
    }
    out.sort_by_key(|c| (c.level, c.kind));
    Some(out)
}

/// `MemTotal` of `proc/meminfo`, in bytes.
pub fn mem_total_bytes(root: &Path) -> Option<u64> {
    meminfo_bytes(root, "MemTotal:")
}

/// `MemAvailable` of `proc/meminfo`, in bytes: what the kernel estimates
/// can be allocated without swapping, the figure a size check compares
/// with (`MemFree` leaves out the reclaimable page cache).
pub fn mem_available_bytes(root: &Path) -> Option<u64> {
    meminfo_bytes(root, "MemAvailable:")
}

/// One `KEY: N kB` line of `proc/meminfo`, in bytes.
fn meminfo_bytes(root: &Path, key: &str) -> Option<u64> {
    let text = fs::read_to_string(root.join("proc/meminfo")).ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line[key.len()..].split_whitespace().next()?.parse().ok()?;
    kb.checked_mul(1024)
}

/// The SoC's own name where the system publishes one: Qualcomm's
/// `soc0/family` + `soc0/machine` (`Snapdragon SM8550`), else the device-tree
/// model (`Raspberry Pi 5 Model B Rev 1.0`).
pub fn soc_label(root: &Path) -> Option<String> {
    let soc0 = root.join("sys/devices/soc0");
    if let Some(machine) = read_trimmed(&soc0.join("machine")) {
        return Some(match read_trimmed(&soc0.join("family")) {
            Some(family) if !machine.contains(&family) => format!("{family} {machine}"),
            _ => machine,
        });
    }
    for p in [
        "proc/device-tree/model",
        "sys/firmware/devicetree/base/model",
    ] {
        if let Some(model) = read_trimmed(&root.join(p)) {
            // Device-tree strings end with a NUL.
            return Some(model.trim_end_matches('\0').to_string());
        }
    }
    None
}

/// Intel hybrid parts list their core kinds in `sys/devices/cpu_core/cpus`
/// and `sys/devices/cpu_atom/cpus`; returns the kind name of `cpu` if so.
pub fn x86_hybrid_kind(root: &Path, cpu: usize) -> Option<&'static str> {
    for (dir, name) in [("cpu_core", "P-core"), ("cpu_atom", "E-core")] {
        let list = read_trimmed(&root.join(format!("sys/devices/{dir}/cpus")))
            .and_then(|s| parse_cpu_list(&s));
        if list.is_some_and(|l| l.contains(&cpu)) {
            return Some(name);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_lines_are_read_by_key_in_bytes() {
        let root = std::env::temp_dir().join(format!("tiletune-meminfo-{}", std::process::id()));
        fs::create_dir_all(root.join("proc")).unwrap();
        fs::write(
            root.join("proc/meminfo"),
            "MemTotal:       16000 kB\nMemFree:  100 kB\nMemAvailable:    8000 kB\n",
        )
        .unwrap();
        assert_eq!(mem_total_bytes(&root), Some(16000 * 1024));
        assert_eq!(mem_available_bytes(&root), Some(8000 * 1024));
        fs::write(root.join("proc/meminfo"), "MemTotal: 16000 kB\n").unwrap();
        assert_eq!(mem_available_bytes(&root), None);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn cpu_lists_round_trip() {
        assert_eq!(parse_cpu_list("0-3,6,8-9"), Some(vec![0, 1, 2, 3, 6, 8, 9]));
        assert_eq!(format_cpu_list(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("a-b"), None);
        assert_eq!(parse_cpu_list("0-99999999"), None);
        assert_eq!(format_cpu_list(&[]), "");
    }

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("48K"), Some(48 << 10));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("K"), None);
        assert_eq!(parse_size(""), None);
    }

    #[test]
    fn missing_root_gives_nothing_not_a_panic() {
        let root = Path::new("/nonexistent/tiletune-soc-test");
        assert_eq!(cpu_dirs(root), Vec::<usize>::new());
        assert_eq!(caches(root, 0), None);
        assert_eq!(max_freq_khz(root, 0), None);
        assert_eq!(mem_total_bytes(root), None);
        assert_eq!(soc_label(root), None);
    }
}
