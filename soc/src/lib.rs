//! What the SoC is: cores and their types, big.LITTLE clusters with their
//! caches, ISA features, memory size, and a stable fingerprint that keys the
//! tuning tables.
//!
//! Parsing is a pure function of a directory tree: [`probe_root`] reads
//! `proc/cpuinfo`, `proc/meminfo` and `sys/devices/system/cpu/...` under any
//! root, so a dump pulled from a phone (see `soc/README.md`) or a test
//! fixture describes its machine exactly as the live files would. [`probe`]
//! is `probe_root("/")` plus run-time feature detection of the running
//! process, which is the truth for what this binary may execute (it differs
//! from cpuinfo under qemu-user, where `/proc` and `/sys` are the host's).
//!
//! Nothing here panics on missing files: what cannot be read is left empty
//! and explained in [`SocInfo::notes`].
//!
//! [`live_root`] is where the running machine's files are: `/`, or the
//! directory named by `TILETUNE_SOC_ROOT`. That variable is an offline and
//! test hook: a fake device (a binary run under qemu-user with a dump as its
//! `/proc` and `/sys`) describes the dump's SoC while features still come
//! from run-time detection. Nothing sets it on a real device.

mod cpuinfo;
mod error;
pub mod features;
mod fingerprint;
pub mod midr;
mod report;
pub mod sysfs;
pub mod thermal;

pub use cpuinfo::{Cpuinfo, CpuinfoLayout, ProcEntry};
pub use error::{Result, SocError};
pub use features::FeatureSource;
pub use midr::Midr;
pub use report::human_bytes;
pub use sysfs::{Cache, CacheKind};
pub use thermal::ThermalZone;

/// The environment variable that moves [`live_root`] (see the crate docs).
pub const ROOT_ENV: &str = "TILETUNE_SOC_ROOT";

/// The root of the running machine's `proc/` and `sys/` trees: `/`, or
/// `$TILETUNE_SOC_ROOT` when it is set and not empty.
pub fn live_root() -> std::path::PathBuf {
    match std::env::var_os(ROOT_ENV) {
        Some(dir) if !dir.is_empty() => dir.into(),
        _ => "/".into(),
    }
}

use serde::{Deserialize, Serialize};
use std::path::Path;

/// x86 identification from CPUID as `/proc/cpuinfo` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct X86Id {
    /// `vendor_id`: `AuthenticAMD`, `GenuineIntel`, ...
    pub vendor_id: String,
    pub family: u32,
    pub model: u32,
    pub stepping: u32,
}

/// One logical CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Core {
    pub cpu: usize,
    pub online: bool,
    /// MIDR fields (aarch64 only).
    pub midr: Option<Midr>,
    /// Decoded core type: `Cortex-A76`, `Zen 5`, `P-core`, or `unknown`.
    pub core_name: String,
    pub max_freq_khz: Option<u64>,
}

/// CPUs of one core type and one maximum frequency, with their caches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cluster {
    pub core_name: String,
    /// MIDR of the cluster's first CPU (aarch64 only).
    pub midr: Option<Midr>,
    pub cpus: Vec<usize>,
    /// `cpus` as a kernel CPU list, e.g. `0-2`.
    pub cpu_list: String,
    pub max_freq_khz: Option<u64>,
    /// The caches of the cluster's first CPU that has a `cache` directory.
    pub caches: Vec<Cache>,
}

impl Cluster {
    /// The size of the level-`level` data or unified cache, if known.
    pub fn data_cache_bytes(&self, level: u8) -> Option<u64> {
        self.caches
            .iter()
            .find(|c| c.level == level && c.kind != CacheKind::Instruction)
            .and_then(|c| c.size_bytes)
    }
}

/// Everything `tiletune probe` reports about the SoC (the PMU aside).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocInfo {
    /// `x86_64`, `aarch64` or `unknown`.
    pub arch: String,
    /// `AMD`, `Intel`, or the Arm implementer(s): `ARM`, `Qualcomm`, ...
    pub vendor: String,
    /// x86 `model name`; on arm the core types, biggest first.
    pub model_name: String,
    /// The SoC's own name if the system publishes one (`soc0/machine`,
    /// device-tree model, cpuinfo `Hardware`).
    pub soc_label: Option<String>,
    pub x86: Option<X86Id>,
    pub cores: Vec<Core>,
    pub clusters: Vec<Cluster>,
    /// Sorted Rust `target_feature` names (see [`features`]).
    pub features: Vec<String>,
    pub feature_source: FeatureSource,
    pub mem_total_bytes: Option<u64>,
    /// Readable name, e.g. `Snapdragon SM8550 (1x Cortex-X3 + 2x Cortex-A715 + ...)`.
    pub name: String,
    /// See [`SocInfo::compute_fingerprint`].
    pub fingerprint: String,
    /// What could not be read, or where the data is not this machine's own.
    pub notes: Vec<String>,
}

/// The memory this machine can give a new allocation now without
/// swapping (`MemAvailable`), in bytes; `None` where `/proc/meminfo` does
/// not say.
pub fn mem_available() -> Option<u64> {
    sysfs::mem_available_bytes(Path::new("/"))
}

/// Probes the running machine: [`probe_root`] of [`live_root`] plus run-time feature
/// detection of this process (and, on aarch64 when `/proc/cpuinfo` is not an
/// arm one — qemu-user on an x86 host — the core type from `MIDR_EL1`).
pub fn probe() -> Result<SocInfo> {
    let root = live_root();
    let mut info = probe_root(&root)?;
    if root != Path::new("/") {
        info.notes.push(format!(
            "proc/ and sys/ read under {} (${ROOT_ENV}), not /",
            root.display()
        ));
    }
    let running = std::env::consts::ARCH;
    if info.arch != running {
        info.notes.push(format!(
            "/proc/cpuinfo describes a {} machine but this process runs as {running} \
             (emulated, e.g. qemu-user): cores, caches and frequencies are the host's, \
             features come from run-time detection",
            info.arch
        ));
        info.arch = running.to_string();
        info.x86 = None;
        adopt_emulated_core(&mut info);
    }
    match features::detect() {
        Some(f) => {
            info.features = f;
            info.feature_source = FeatureSource::RunTime;
        }
        None => info.notes.push(format!(
            "no run-time feature detection on {running}; features are cpuinfo's"
        )),
    }
    info.refresh_identity();
    Ok(info)
}

#[cfg(target_arch = "aarch64")]
fn adopt_emulated_core(info: &mut SocInfo) {
    let Some(reg) = features::read_midr_el1() else {
        return;
    };
    let midr = Midr::from_register(reg);
    for core in &mut info.cores {
        core.midr = Some(midr);
        core.core_name = midr.core_name();
    }
    info.vendor = midr::vendor_name(midr.implementer).to_string();
    let caches = info
        .clusters
        .iter()
        .flat_map(|c| c.cpus.iter().map(move |&cpu| (cpu, c.caches.clone())))
        .collect::<Vec<_>>();
    info.clusters = group_clusters(&info.cores, |cpu| {
        caches
            .iter()
            .find(|(c, _)| *c == cpu)
            .map(|(_, k)| k.clone())
    });
    info.model_name = arm_model_name(&info.clusters);
    info.notes.push(format!(
        "core type {} read from MIDR_EL1 of this process ({:#010x})",
        midr.core_name(),
        reg
    ));
}

#[cfg(not(target_arch = "aarch64"))]
fn adopt_emulated_core(_info: &mut SocInfo) {}

/// Probes the machine whose `proc/` and `sys/` trees are under `root`.
/// Features come from the cpuinfo `flags`/`Features` line.
pub fn probe_root(root: &Path) -> Result<SocInfo> {
    if !root.is_dir() {
        return Err(SocError::RootNotADirectory {
            path: root.to_path_buf(),
        });
    }
    let mut notes = Vec::new();
    let text = std::fs::read_to_string(root.join("proc/cpuinfo")).unwrap_or_else(|_| {
        notes.push("proc/cpuinfo missing or unreadable: no core types or features".to_string());
        String::new()
    });
    let cpuinfo = Cpuinfo::parse(&text);
    let layout = cpuinfo.layout();
    let arch = match layout {
        CpuinfoLayout::X86 => "x86_64",
        CpuinfoLayout::Arm => "aarch64",
        CpuinfoLayout::Unknown => "unknown",
    };

    let cpus = sysfs::read_cpu_list(root, "possible")
        .or_else(|| sysfs::read_cpu_list(root, "present"))
        .filter(|l| !l.is_empty())
        .or_else(|| Some(sysfs::cpu_dirs(root)).filter(|l| !l.is_empty()))
        .unwrap_or_else(|| {
            notes.push(
                "sys/devices/system/cpu lists no CPUs: using cpuinfo's processor entries"
                    .to_string(),
            );
            cpuinfo.entries.iter().map(|e| e.cpu).collect()
        });
    let online = sysfs::read_cpu_list(root, "online");

    let x86 = (layout == CpuinfoLayout::X86)
        .then(|| cpuinfo.entries.first())
        .flatten()
        .map(|e| X86Id {
            vendor_id: e.get("vendor_id").unwrap_or("unknown").to_string(),
            family: e.get_int("cpu family").unwrap_or(0) as u32,
            model: e.get_int("model").unwrap_or(0) as u32,
            stepping: e.get_int("stepping").unwrap_or(0) as u32,
        });
    let x86_core = x86.as_ref().map(|id| {
        fingerprint::x86_uarch(id)
            .map(str::to_string)
            .unwrap_or_else(|| {
                cpuinfo
                    .entries
                    .first()
                    .and_then(|e| e.get("model name"))
                    .unwrap_or("x86-64 core")
                    .to_string()
            })
    });

    let mut cores = Vec::with_capacity(cpus.len());
    let mut offline_unknown = Vec::new();
    for &cpu in &cpus {
        let entry = cpuinfo.entry(cpu);
        let is_online = match &online {
            Some(list) => list.contains(&cpu),
            None => entry.is_some() || cpuinfo.entries.is_empty(),
        };
        let midr = entry.and_then(|e| {
            Some(Midr {
                implementer: e.get_int("CPU implementer")? as u8,
                part: e.get_int("CPU part")? as u16,
                variant: e.get_int("CPU variant").unwrap_or(0) as u8,
                revision: e.get_int("CPU revision").unwrap_or(0) as u8,
            })
        });
        let core_name = match (&midr, &x86_core) {
            (Some(m), _) => m.core_name(),
            (None, Some(name)) => match sysfs::x86_hybrid_kind(root, cpu) {
                Some(kind) => format!("{name} {kind}"),
                None => name.clone(),
            },
            (None, None) => {
                if !is_online {
                    offline_unknown.push(cpu);
                }
                "unknown".to_string()
            }
        };
        cores.push(Core {
            cpu,
            online: is_online,
            midr,
            core_name,
            max_freq_khz: sysfs::max_freq_khz(root, cpu),
        });
    }
    if !offline_unknown.is_empty() {
        notes.push(format!(
            "cpus {} are offline, so cpuinfo does not describe them: bring them online \
             (echo 1 > /sys/devices/system/cpu/cpuN/online) before probing",
            sysfs::format_cpu_list(&offline_unknown)
        ));
    }
    if !cores.is_empty() && cores.iter().all(|c| c.max_freq_khz.is_none()) {
        notes.push(
            "no cpufreq/cpuinfo_max_freq (typical in VMs and containers): clusters are \
             grouped by core type only"
                .to_string(),
        );
    }

    let mut missing_cache = Vec::new();
    let clusters = group_clusters(&cores, |cpu| {
        let c = sysfs::caches(root, cpu);
        if c.is_none() {
            missing_cache.push(cpu);
        }
        c
    });
    if !missing_cache.is_empty() {
        notes.push(format!(
            "no cache directory for cpus {}: cache sizes unknown there",
            sysfs::format_cpu_list(&missing_cache)
        ));
    }
    if clusters
        .iter()
        .flat_map(|c| &c.caches)
        .any(|c| c.size_bytes.is_none())
    {
        notes.push(
            "some caches have no size in sysfs (the kernel did not get it from the device \
             tree or ACPI): their sizes are unknown"
                .to_string(),
        );
    }

    let flags = cpuinfo.common_flags();
    let features = features::from_cpuinfo_flags(&flags, layout == CpuinfoLayout::X86);
    let feature_source = if flags.is_empty() {
        FeatureSource::Unknown
    } else {
        FeatureSource::Cpuinfo
    };

    let mem_total_bytes = sysfs::mem_total_bytes(root);
    if mem_total_bytes.is_none() {
        notes.push("proc/meminfo missing or without MemTotal: memory size unknown".to_string());
    }

    let vendor = match &x86 {
        Some(id) => match id.vendor_id.as_str() {
            "AuthenticAMD" => "AMD".to_string(),
            "GenuineIntel" => "Intel".to_string(),
            other => other.to_string(),
        },
        None => {
            let mut v: Vec<&str> = cores
                .iter()
                .filter_map(|c| c.midr.map(|m| midr::vendor_name(m.implementer)))
                .collect();
            v.dedup();
            v.sort_unstable();
            v.dedup();
            if v.is_empty() {
                "unknown".to_string()
            } else {
                v.join("/")
            }
        }
    };
    let model_name = match &x86 {
        Some(_) => cpuinfo
            .entries
            .first()
            .and_then(|e| e.get("model name"))
            .unwrap_or("unknown")
            .to_string(),
        None => arm_model_name(&clusters),
    };
    let soc_label = sysfs::soc_label(root).or_else(|| {
        ["Hardware", "Model"]
            .iter()
            .find_map(|k| cpuinfo.global.get(*k).cloned())
    });

    let mut info = SocInfo {
        arch: arch.to_string(),
        vendor,
        model_name,
        soc_label,
        x86,
        cores,
        clusters,
        features,
        feature_source,
        mem_total_bytes,
        name: String::new(),
        fingerprint: String::new(),
        notes,
    };
    info.refresh_identity();
    Ok(info)
}

/// Groups cores into clusters by (core type, max frequency), in order of
/// their first CPU. `caches_of` is asked for each cluster's CPUs in turn
/// until one has a cache directory.
fn group_clusters(
    cores: &[Core],
    mut caches_of: impl FnMut(usize) -> Option<Vec<Cache>>,
) -> Vec<Cluster> {
    let mut clusters: Vec<Cluster> = Vec::new();
    for core in cores {
        let key = |c: &Cluster| {
            c.core_name == core.core_name
                && c.max_freq_khz == core.max_freq_khz
                && c.midr.map(|m| (m.implementer, m.part))
                    == core.midr.map(|m| (m.implementer, m.part))
        };
        match clusters.iter_mut().find(|c| key(c)) {
            Some(c) => c.cpus.push(core.cpu),
            None => clusters.push(Cluster {
                core_name: core.core_name.clone(),
                midr: core.midr,
                cpus: vec![core.cpu],
                cpu_list: String::new(),
                max_freq_khz: core.max_freq_khz,
                caches: Vec::new(),
            }),
        }
    }
    for c in &mut clusters {
        c.cpu_list = sysfs::format_cpu_list(&c.cpus);
        c.caches = c
            .cpus
            .iter()
            .find_map(|&cpu| caches_of(cpu))
            .unwrap_or_default();
    }
    clusters
}

/// Distinct core types, biggest first: `Cortex-X3 + Cortex-A715 + ...`.
fn arm_model_name(clusters: &[Cluster]) -> String {
    let mut names: Vec<String> = Vec::new();
    for c in fingerprint::biggest_first(clusters) {
        if !names.contains(&c.core_name) {
            names.push(c.core_name.clone());
        }
    }
    if names.is_empty() {
        "unknown".to_string()
    } else {
        names.join(" + ")
    }
}

impl SocInfo {
    /// Recomputes [`SocInfo::name`] and [`SocInfo::fingerprint`] after a
    /// field changed.
    pub fn refresh_identity(&mut self) {
        self.name = fingerprint::readable_name(self);
        self.fingerprint = self.compute_fingerprint();
    }

    /// The cluster a latency-bound kernel should be tuned for: the highest
    /// maximum frequency, ties broken by the larger L2, the newer core (higher
    /// MIDR part) and then the later CPUs (Android numbers big cores last).
    pub fn biggest_cluster(&self) -> Option<&Cluster> {
        fingerprint::biggest_first(&self.clusters)
            .into_iter()
            .next()
    }

    /// Number of online CPUs.
    pub fn online_cpus(&self) -> usize {
        self.cores.iter().filter(|c| c.online).count()
    }

    /// The cache model input for `tiletune-kernels`: L1d, L2 and L3 of the
    /// biggest cluster and the online CPU count. Sizes the probe could not
    /// read fall back to [`tiletune_kernels::CpuCaps::default`]'s.
    pub fn cpu_caps(&self) -> tiletune_kernels::CpuCaps {
        let d = tiletune_kernels::CpuCaps::default();
        let big = self.biggest_cluster();
        let size = |level: u8, fallback: usize| {
            big.and_then(|c| c.data_cache_bytes(level))
                .and_then(|b| usize::try_from(b).ok())
                .unwrap_or(fallback)
        };
        tiletune_kernels::CpuCaps {
            l1d: size(1, d.l1d),
            l2: size(2, d.l2),
            l3: size(3, d.l3),
            cores: match self.online_cpus() {
                0 => d.cores,
                n => n,
            },
        }
    }
}
