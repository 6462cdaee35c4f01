//! The SoC fingerprint (a stable hash keying every tuning-table row) and the
//! readable name that goes with it.
//!
//! The fields that enter, and those deliberately left out, are documented on
//! [`SocInfo::fingerprint_input`].

use crate::{Cluster, SocInfo, X86Id};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;

/// The Zen generation of an AMD family/model, if known. Intel parts keep
/// their `model name` (their codenames do not follow from family/model in a
/// way worth a table here).
pub(crate) fn x86_uarch(id: &X86Id) -> Option<&'static str> {
    if id.vendor_id != "AuthenticAMD" {
        return None;
    }
    Some(match (id.family, id.model) {
        (0x17, 0x00..=0x2f) => "Zen",
        (0x17, _) => "Zen 2",
        (0x19, 0x10..=0x1f | 0x60..=0x7f | 0xa0..=0xaf) => "Zen 4",
        (0x19, _) => "Zen 3",
        (0x1a, _) => "Zen 5",
        _ => return None,
    })
}

/// Clusters ordered biggest first: highest max frequency, then larger L2,
/// then the higher MIDR part number (Arm numbers newer cores higher, e.g.
/// A715 0xd4d after A710 0xd47 in one SM8550 frequency domain), then later
/// CPUs (big cores are numbered last on Android).
pub(crate) fn biggest_first(clusters: &[Cluster]) -> Vec<&Cluster> {
    let mut v: Vec<&Cluster> = clusters.iter().collect();
    v.sort_by_key(|c| {
        std::cmp::Reverse((
            c.max_freq_khz.unwrap_or(0),
            c.data_cache_bytes(2).unwrap_or(0),
            c.midr.map_or(0, |m| m.part),
            c.cpus.first().copied().unwrap_or(0),
        ))
    });
    v
}

/// One core-type group of the fingerprint.
struct Group<'a> {
    key: String,
    cpus: usize,
    first: &'a Cluster,
}

fn groups(info: &SocInfo) -> Vec<Group<'_>> {
    let mut out: Vec<Group<'_>> = Vec::new();
    for c in &info.clusters {
        let key = match c.midr {
            Some(m) => format!("{:02x}:{:03x}:{:x}", m.implementer, m.part, m.variant),
            None => c.core_name.clone(),
        };
        match out.iter_mut().find(|g| g.key == key) {
            Some(g) => g.cpus += c.cpus.len(),
            None => out.push(Group {
                key,
                cpus: c.cpus.len(),
                first: c,
            }),
        }
    }
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out
}

impl SocInfo {
    /// The canonical text the fingerprint hashes.
    ///
    /// # What enters the fingerprint
    ///
    /// Only what changes which kernel variant and tile sizes win:
    /// - the architecture (`x86_64`, `aarch64`);
    /// - on x86: `vendor_id`, family, model and stepping;
    /// - per **core-type group** (all CPUs with the same MIDR implementer, part
    ///   and variant on arm, the same core name on x86): that id, the number of
    ///   CPUs, and the size of each cache level/kind of the group (`L1d`, `L1i`,
    ///   `L2`, `L3`; `?` when unknown);
    /// - the sorted feature list.
    ///
    /// # What is deliberately left out
    ///
    /// - **Maximum frequency.** It differs between bins of one chip (SM8550-AB at
    ///   3.19 GHz vs the 3.36 GHz "for Galaxy" part) and between kernels, and it
    ///   is missing altogether in VMs and containers; tile sizes depend on the
    ///   microarchitecture and caches, not on the clock. For the same reason the
    ///   fingerprint groups cores by type, not by frequency cluster, so a chip
    ///   hashes the same whether or not `cpufreq` is visible.
    /// - The MIDR revision (`pM`: errata fixes), memory size (a SKU choice, not a
    ///   kernel property), cache line size and associativity (fixed per core
    ///   type), `shared_cpu_list`, CPU numbering, and all names/labels.
    ///
    /// This text is versioned;
    /// the fingerprint is the first 16 hex digits of its SHA-256. Changing the
    /// text format changes every fingerprint, so bump `v1` when you do.
    pub fn fingerprint_input(&self) -> String {
        let mut s = String::from("tiletune-soc-fingerprint v1\n");
        let _ = writeln!(s, "arch={}", self.arch);
        if let Some(x) = &self.x86 {
            let _ = writeln!(
                s,
                "x86={}/{}/{}/{}",
                x.vendor_id, x.family, x.model, x.stepping
            );
        }
        for g in groups(self) {
            let _ = write!(s, "group={} cores={}", g.key, g.cpus);
            for c in &g.first.caches {
                let size = c
                    .size_bytes
                    .map_or_else(|| "?".to_string(), |b| b.to_string());
                let _ = write!(s, " {}={}", c.label(), size);
            }
            s.push('\n');
        }
        let _ = writeln!(s, "features={}", self.features.join(","));
        s
    }

    /// First 16 hex digits of the SHA-256 of [`SocInfo::fingerprint_input`].
    pub fn compute_fingerprint(&self) -> String {
        let digest = Sha256::digest(self.fingerprint_input().as_bytes());
        digest.iter().take(8).fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
    }
}

/// `Snapdragon SM8550 (1x Cortex-X3 + 2x Cortex-A715 + 2x Cortex-A710 + 3x
/// Cortex-A510)` on arm; `AMD EPYC (Zen 5) x2` on x86.
pub(crate) fn readable_name(info: &SocInfo) -> String {
    if let Some(x) = &info.x86 {
        let n = info.cores.len();
        return match x86_uarch(x) {
            Some(u) if !info.model_name.contains(u) => format!("{} ({u}) x{n}", info.model_name),
            _ => format!("{} x{n}", info.model_name),
        };
    }
    // Merge clusters of the same core type (e.g. two A720 frequency domains).
    let mut parts: Vec<(String, usize)> = Vec::new();
    for c in biggest_first(&info.clusters) {
        match parts.iter_mut().find(|(n, _)| *n == c.core_name) {
            Some((_, k)) => *k += c.cpus.len(),
            None => parts.push((c.core_name.clone(), c.cpus.len())),
        }
    }
    let cores = parts
        .iter()
        .map(|(n, k)| format!("{k}x {n}"))
        .collect::<Vec<_>>()
        .join(" + ");
    let label = info
        .soc_label
        .clone()
        .unwrap_or_else(|| format!("{} {}", info.vendor, info.arch));
    if cores.is_empty() {
        label
    } else {
        format!("{label} ({cores})")
    }
}
