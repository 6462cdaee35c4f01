//! `probe_root` on the fixture trees in `tests/fixtures/` (see its README for
//! where each comes from): right clusters, core names, caches, features,
//! fingerprints, and partial output when files are missing.

use std::path::{Path, PathBuf};
use tiletune_soc::{CacheKind, FeatureSource, Midr, SocError, SocInfo, probe_root};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn load(name: &str) -> SocInfo {
    probe_root(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// (label, size, ways, shared_cpu_list) of a cluster's caches.
fn caches(info: &SocInfo, cluster: usize) -> Vec<(String, Option<u64>, Option<u32>, String)> {
    info.clusters[cluster]
        .caches
        .iter()
        .map(|c| {
            (
                c.label(),
                c.size_bytes,
                c.ways,
                c.shared_cpu_list.clone().unwrap_or_default(),
            )
        })
        .collect()
}

fn has(info: &SocInfo, f: &str) -> bool {
    info.features.iter().any(|x| x == f)
}

const K: u64 = 1024;

#[test]
fn x86_epyc_zen5_this_machine() {
    let info = load("x86-epyc-zen5");
    assert_eq!(info.arch, "x86_64");
    assert_eq!(info.vendor, "AMD");
    assert_eq!(info.model_name, "AMD EPYC");
    let id = info.x86.as_ref().unwrap();
    assert_eq!(
        (id.vendor_id.as_str(), id.family, id.model, id.stepping),
        ("AuthenticAMD", 26, 2, 1)
    );
    assert_eq!(info.name, "AMD EPYC (Zen 5) x2");
    assert_eq!(info.clusters.len(), 1);
    let c = &info.clusters[0];
    assert_eq!(
        (c.core_name.as_str(), c.cpu_list.as_str()),
        ("Zen 5", "0-1")
    );
    assert_eq!(c.max_freq_khz, None);
    assert_eq!(
        caches(&info, 0),
        vec![
            ("L1d".into(), Some(48 * K), Some(12), "0".into()),
            ("L1i".into(), Some(32 * K), Some(8), "0".into()),
            ("L2".into(), Some(1024 * K), Some(16), "0".into()),
            ("L3".into(), Some(32 * K * K), Some(16), "0-1".into()),
        ]
    );
    assert_eq!(info.feature_source, FeatureSource::Cpuinfo);
    for f in [
        "sse4.2", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
    ] {
        assert!(has(&info, f), "{f}");
    }
    for f in ["avx512vnni", "avx512bf16", "avxvnni"] {
        assert!(has(&info, f), "{f}");
    }
    // Zen 5 has neither AVX512-FP16 nor AMX: reported truthfully.
    assert!(!has(&info, "avx512fp16"));
    assert!(!info.features.iter().any(|f| f.starts_with("amx")));
    assert!(info.mem_total_bytes.unwrap() > 1 << 30);
    assert!(
        info.notes.iter().any(|n| n.contains("cpufreq")),
        "{:?}",
        info.notes
    );
    let caps = info.cpu_caps();
    assert_eq!(
        (caps.l1d, caps.l2, caps.l3, caps.cores),
        (48 << 10, 1 << 20, 32 << 20, 2)
    );
}

#[test]
fn snapdragon_8_gen_2_has_four_core_types_in_three_frequency_domains() {
    let info = load("arm-sm8550");
    assert_eq!(info.arch, "aarch64");
    assert_eq!(info.vendor, "ARM");
    assert!(info.x86.is_none());
    assert_eq!(
        info.name,
        "Snapdragon SM8550 (1x Cortex-X3 + 2x Cortex-A715 + 2x Cortex-A710 + 3x Cortex-A510)"
    );
    assert_eq!(
        info.model_name,
        "Cortex-X3 + Cortex-A715 + Cortex-A710 + Cortex-A510"
    );
    let got: Vec<(&str, &str, Option<u64>)> = info
        .clusters
        .iter()
        .map(|c| (c.core_name.as_str(), c.cpu_list.as_str(), c.max_freq_khz))
        .collect();
    assert_eq!(
        got,
        vec![
            ("Cortex-A510", "0-2", Some(2_016_000)),
            ("Cortex-A715", "3-4", Some(2_803_200)),
            ("Cortex-A710", "5-6", Some(2_803_200)),
            ("Cortex-X3", "7", Some(3_187_200)),
        ]
    );
    let mut freqs: Vec<_> = info.clusters.iter().map(|c| c.max_freq_khz).collect();
    freqs.dedup();
    assert_eq!(freqs.len(), 3, "three frequency domains");
    let midr = |i: usize| info.clusters[i].midr.unwrap();
    assert_eq!(
        midr(0),
        Midr {
            implementer: 0x41,
            part: 0xd46,
            variant: 1,
            revision: 1
        }
    );
    assert_eq!(midr(2).stepping(), "r2p0");
    assert_eq!(midr(3).part, 0xd4e);
    assert_eq!(
        caches(&info, 0),
        vec![
            ("L1d".into(), Some(32 * K), Some(4), "0".into()),
            ("L1i".into(), Some(32 * K), Some(4), "0".into()),
            ("L2".into(), Some(256 * K), Some(8), "0".into()),
            ("L3".into(), Some(8 * K * K), Some(16), "0-7".into()),
        ]
    );
    assert_eq!(caches(&info, 1)[2].1, Some(512 * K));
    assert_eq!(caches(&info, 3)[0].1, Some(64 * K));
    assert_eq!(
        caches(&info, 3)[2],
        ("L2".into(), Some(1024 * K), Some(8), "7".into())
    );
    assert_eq!(info.biggest_cluster().unwrap().core_name, "Cortex-X3");
    let caps = info.cpu_caps();
    assert_eq!(
        (caps.l1d, caps.l2, caps.l3, caps.cores),
        (64 << 10, 1 << 20, 8 << 20, 8)
    );
    for f in ["neon", "fp16", "dotprod", "i8mm"] {
        assert!(has(&info, f), "{f}");
    }
    assert!(!has(&info, "sve"), "the SM8550 kernel does not expose SVE");
    assert!(info.notes.is_empty(), "{:?}", info.notes);
}

#[test]
fn raspberry_pi_5_is_four_a76_with_private_l2_and_shared_l3() {
    let info = load("arm-rpi5");
    assert_eq!(info.name, "Raspberry Pi 5 Model B Rev 1.0 (4x Cortex-A76)");
    assert_eq!(info.clusters.len(), 1);
    let c = &info.clusters[0];
    assert_eq!(
        (c.core_name.as_str(), c.cpu_list.as_str(), c.max_freq_khz),
        ("Cortex-A76", "0-3", Some(2_400_000))
    );
    assert_eq!(c.midr.unwrap().stepping(), "r4p1");
    assert_eq!(
        caches(&info, 0),
        vec![
            ("L1d".into(), Some(64 * K), Some(4), "0".into()),
            ("L1i".into(), Some(64 * K), Some(4), "0".into()),
            ("L2".into(), Some(512 * K), Some(8), "0".into()),
            ("L3".into(), Some(2 * K * K), Some(16), "0-3".into()),
        ]
    );
    assert_eq!(
        info.features,
        vec!["dotprod", "fp16", "neon"],
        "A76: dotprod but no i8mm/bf16/sve"
    );
    let caps = info.cpu_caps();
    assert_eq!(
        (caps.l1d, caps.l2, caps.l3, caps.cores),
        (64 << 10, 512 << 10, 2 << 20, 4)
    );
    assert!(info.notes.is_empty(), "{:?}", info.notes);
}

#[test]
fn graviton3_is_neoverse_v1_with_sve_and_no_cpufreq() {
    let info = load("arm-graviton3");
    assert_eq!(info.name, "ARM aarch64 (8x Neoverse-V1)");
    assert_eq!(info.clusters.len(), 1);
    let c = &info.clusters[0];
    assert_eq!(
        (c.core_name.as_str(), c.cpu_list.as_str()),
        ("Neoverse-V1", "0-7")
    );
    assert_eq!(c.max_freq_khz, None);
    assert_eq!(c.midr.unwrap().stepping(), "r1p1");
    assert_eq!(
        caches(&info, 0),
        vec![
            ("L1d".into(), Some(64 * K), Some(4), "0".into()),
            ("L1i".into(), Some(64 * K), Some(4), "0".into()),
            ("L2".into(), Some(1024 * K), Some(8), "0".into()),
            ("L3".into(), Some(32 * K * K), None, "0-7".into()),
        ]
    );
    for f in ["neon", "fp16", "dotprod", "i8mm", "bf16", "sve"] {
        assert!(has(&info, f), "{f}");
    }
    assert!(!has(&info, "sve2"), "SVE2 arrived with Neoverse V2");
    assert!(
        info.notes.iter().any(|n| n.contains("cpufreq")),
        "{:?}",
        info.notes
    );
}

// ---------------------------------------------------------------- fingerprint

/// Pinned so an accidental change of the fingerprint input (which would
/// orphan every stored tuning table) fails here. Change it only together
/// with the `v1` tag in fingerprint.rs.
const SM8550_FINGERPRINT: &str = "9fbfe685fc66b578";

#[test]
fn fingerprint_is_stable_and_pinned() {
    let a = load("arm-sm8550");
    let b = load("arm-sm8550");
    assert_eq!(a.fingerprint, b.fingerprint);
    assert_eq!(a.fingerprint, a.compute_fingerprint());
    assert_eq!(a.fingerprint.len(), 16);
    assert!(a.fingerprint.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(
        a.fingerprint,
        SM8550_FINGERPRINT,
        "{}",
        a.fingerprint_input()
    );
}

#[test]
fn fixtures_have_distinct_fingerprints() {
    let names = ["x86-epyc-zen5", "arm-sm8550", "arm-rpi5", "arm-graviton3"];
    let mut fps: Vec<String> = names.iter().map(|n| load(n).fingerprint).collect();
    fps.sort();
    fps.dedup();
    assert_eq!(fps.len(), names.len());
}

fn id(s: &mut SocInfo) -> &mut tiletune_soc::X86Id {
    s.x86.as_mut().unwrap()
}

/// Applies `edit`, recomputes, and reports whether the fingerprint moved.
fn moves(base: &SocInfo, edit: impl FnOnce(&mut SocInfo)) -> bool {
    let mut x = base.clone();
    edit(&mut x);
    x.refresh_identity();
    x.fingerprint != base.fingerprint
}

#[test]
fn fingerprint_changes_with_every_field_that_enters() {
    let arm = load("arm-sm8550");
    assert!(moves(&arm, |s| s.arch = "riscv64".into()));
    assert!(moves(&arm, |s| s.clusters[3]
        .midr
        .as_mut()
        .unwrap()
        .variant = 2));
    assert!(moves(&arm, |s| s.clusters[3].midr.as_mut().unwrap().part = 0xd82));
    assert!(moves(&arm, |s| s.clusters[0]
        .midr
        .as_mut()
        .unwrap()
        .implementer = 0x51));
    assert!(moves(&arm, |s| s.clusters[1].caches[2].size_bytes = Some(1 << 20)));
    assert!(moves(&arm, |s| s.clusters[0].caches[0].size_bytes = None));
    assert!(moves(&arm, |s| s.clusters[3].caches[3].size_bytes =
        Some(12 << 20)));
    assert!(moves(&arm, |s| {
        s.clusters[0].cpus.pop();
    }));
    assert!(moves(&arm, |s| s.features.retain(|f| f != "i8mm")));
    assert!(moves(&arm, |s| s.features.push("sve".into())));

    let x86 = load("x86-epyc-zen5");
    assert!(moves(&x86, |s| id(s).vendor_id = "GenuineIntel".into()));
    assert!(moves(&x86, |s| id(s).family = 25));
    assert!(moves(&x86, |s| id(s).model = 0x44));
    assert!(moves(&x86, |s| id(s).stepping = 0));
    assert!(moves(&x86, |s| s.features.retain(|f| f != "avx512f")));
}

#[test]
fn fingerprint_ignores_documented_non_inputs() {
    let arm = load("arm-sm8550");
    assert!(!moves(&arm, |s| s.clusters[3].max_freq_khz = Some(3_360_000)));
    assert!(!moves(&arm, |s| s.clusters[3]
        .midr
        .as_mut()
        .unwrap()
        .revision = 2));
    assert!(!moves(&arm, |s| s.mem_total_bytes = Some(16 << 30)));
    assert!(!moves(&arm, |s| s.soc_label = None));
    assert!(!moves(&arm, |s| s.clusters[0].caches[0].ways = Some(8)));
    assert!(!moves(&arm, |s| s.notes.push("x".into())));
    // Splitting one core type into two frequency domains is not a new chip.
    assert!(!moves(&arm, |s| {
        let mut extra = s.clusters[0].clone();
        extra.cpus = vec![s.clusters[0].cpus.pop().unwrap()];
        extra.max_freq_khz = Some(1_800_000);
        s.clusters.push(extra);
    }));
}

// ------------------------------------------------------------- partial trees

/// A scratch copy of a fixture that a test may damage.
struct Scratch(PathBuf);

impl Scratch {
    fn of(fixture_name: &str, tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("tiletune-soc-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        copy_dir(&fixture(fixture_name), &dir);
        Scratch(dir)
    }

    fn empty(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("tiletune-soc-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

#[test]
fn missing_root_is_an_error_that_says_what_to_pass() {
    let err = probe_root(Path::new("/nonexistent/tiletune-soc")).unwrap_err();
    assert!(matches!(err, SocError::RootNotADirectory { .. }));
    assert!(err.to_string().contains("proc/ and sys/"));
}

#[test]
fn empty_root_gives_partial_output_with_notes() {
    let s = Scratch::empty("empty");
    let info = probe_root(&s.0).unwrap();
    assert_eq!(info.arch, "unknown");
    assert!(info.clusters.is_empty());
    assert_eq!(info.feature_source, FeatureSource::Unknown);
    assert!(info.notes.iter().any(|n| n.contains("proc/cpuinfo")));
    assert!(info.notes.iter().any(|n| n.contains("meminfo")));
    assert_eq!(info.fingerprint.len(), 16);
    // The report renders without panicking.
    assert!(info.to_string().contains("notes"));
}

#[test]
fn container_with_cpuinfo_only_still_names_cores() {
    let s = Scratch::of("arm-rpi5", "container");
    std::fs::remove_dir_all(s.path("sys")).unwrap();
    let info = probe_root(&s.0).unwrap();
    assert_eq!(info.clusters.len(), 1);
    assert_eq!(info.clusters[0].core_name, "Cortex-A76");
    assert_eq!(info.clusters[0].cpus, vec![0, 1, 2, 3]);
    assert!(info.clusters[0].caches.is_empty());
    assert!(
        info.notes
            .iter()
            .any(|n| n.contains("cpuinfo's processor entries"))
    );
    assert!(info.notes.iter().any(|n| n.contains("no cache directory")));
    assert!(info.notes.iter().any(|n| n.contains("cpufreq")));
    let caps = info.cpu_caps();
    assert_eq!(
        caps,
        tiletune_kernels::CpuCaps {
            cores: 4,
            ..Default::default()
        }
    );
}

#[test]
fn offline_core_and_missing_cache_sizes_are_noted() {
    let s = Scratch::of("arm-sm8550", "offline");
    // Android hot-unplugs cores: cpu7 is absent from cpuinfo and online.
    let text = std::fs::read_to_string(s.path("proc/cpuinfo")).unwrap();
    let cut = text.find("processor\t: 7").unwrap();
    std::fs::write(s.path("proc/cpuinfo"), &text[..cut]).unwrap();
    std::fs::write(s.path("sys/devices/system/cpu/online"), "0-6\n").unwrap();
    // A kernel that knows cache levels but not sizes.
    std::fs::remove_file(s.path("sys/devices/system/cpu/cpu0/cache/index2/size")).unwrap();
    let info = probe_root(&s.0).unwrap();
    let core7 = &info.cores[7];
    assert!(!core7.online);
    assert_eq!(core7.core_name, "unknown");
    assert!(
        info.notes.iter().any(|n| n.contains("offline")),
        "{:?}",
        info.notes
    );
    assert!(
        info.notes.iter().any(|n| n.contains("no size")),
        "{:?}",
        info.notes
    );
    let l2 = &info.clusters[0].caches[2];
    assert_eq!(
        (l2.level, l2.kind, l2.size_bytes),
        (2, CacheKind::Unified, None)
    );
    assert_eq!(info.online_cpus(), 7);
}

#[test]
fn json_round_trips() {
    let info = load("arm-sm8550");
    let text = serde_json::to_string(&info).unwrap();
    let back: SocInfo = serde_json::from_str(&text).unwrap();
    assert_eq!(back, info);
    assert!(text.contains("\"fingerprint\""));
}

#[test]
fn report_shows_clusters_caches_and_midr() {
    let text = load("arm-sm8550").to_string();
    for want in [
        "SoC          Snapdragon SM8550 (1x Cortex-X3",
        "cpus 0-2",
        "3x Cortex-A510 r1p1, 2016 MHz",
        "1x Cortex-X3 r1p0, 3187 MHz",
        "L2   1 MiB, 8-way, 64 B line, shared by cpus 7",
        "L3   8 MiB, 16-way, 64 B line, shared by cpus 0-7",
        "cpu7   implementer 0x41 part 0xd4e variant 0x1 revision 0  Cortex-X3",
        "features     dotprod fp16 i8mm neon  (from cpuinfo)",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
}
