//! PMU discovery on fixture sysfs trees, PMU choice for pinned runs, and the
//! fallback path for real on the machine the tests run on.

use std::hint::black_box;
use std::path::PathBuf;
use tiletune_pmu::counters::{choose_pmu, explain_open_failure, pmu_for_cpus};
use tiletune_pmu::sysfs::{discover_cpu_pmus, pmu_for_cpu};
use tiletune_pmu::{Backend, CounterOptions, CounterSet, EventSetKind};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

#[test]
fn discovers_both_clusters_of_a_big_little_soc() {
    let pmus = discover_cpu_pmus(&fixture("biglittle"));
    let names: Vec<_> = pmus.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["armv8_cortex_a55", "armv8_cortex_a78"]);
    assert_eq!(pmus[0].type_id, 8);
    assert_eq!(pmus[0].cpus, [0, 1, 2, 3]);
    assert_eq!(pmus[0].slots, None);
    assert!(!pmus[0].has_event("stall_slot"));
    assert_eq!(pmus[1].type_id, 9);
    assert_eq!(pmus[1].cpus, [4, 5, 6, 7]);
    assert_eq!(pmus[1].slots, Some(4));
    assert!(pmus[1].has_event("stall_slot_frontend"));
}

#[test]
fn a_pinned_run_uses_its_clusters_pmu() {
    let root = fixture("biglittle");
    assert_eq!(
        pmu_for_cpu(&root, Some(2)).unwrap().name,
        "armv8_cortex_a55"
    );
    assert_eq!(
        pmu_for_cpu(&root, Some(6)).unwrap().name,
        "armv8_cortex_a78"
    );
    assert_eq!(pmu_for_cpu(&root, Some(9)), None);
    assert_eq!(pmu_for_cpus(&root, &[4, 5]).unwrap().type_id, 9);
    assert_eq!(pmu_for_cpus(&root, &[1]).unwrap().type_id, 8);

    // An unpinned run spans both clusters: the current CPU's PMU is chosen and
    // a warning says the counts cover only that cluster.
    let pmus = discover_cpu_pmus(&root);
    let (p, warn) = choose_pmu(&pmus, &[0, 1, 2, 3, 4, 5, 6, 7], Some(5));
    assert_eq!(p.unwrap().name, "armv8_cortex_a78");
    assert!(warn.unwrap().contains("pin to one cluster"));
    let (p, warn) = choose_pmu(&pmus, &[3], Some(3));
    assert_eq!(p.unwrap().name, "armv8_cortex_a55");
    assert_eq!(warn, None);
}

#[test]
fn x86_and_pmu_less_trees() {
    let x86 = discover_cpu_pmus(&fixture("x86"));
    assert_eq!(x86.len(), 1);
    assert_eq!(x86[0].name, "cpu");
    assert!(x86[0].covers(123), "no cpus file means every CPU");
    assert!(discover_cpu_pmus(&fixture("nopmu")).is_empty());
    assert!(discover_cpu_pmus(&fixture("does-not-exist")).is_empty());
}

#[test]
fn failure_explanations_say_what_to_do() {
    let denied = explain_open_failure(Some(libc::EACCES), Some(3), true);
    assert!(denied.contains("perf_event_paranoid = 3") && denied.contains("sysctl"));
    let vm = explain_open_failure(Some(libc::ENOENT), Some(2), false);
    assert!(vm.contains("no hardware PMU") && vm.contains("ENOENT"));
    let qemu = explain_open_failure(Some(libc::ENOSYS), None, false);
    assert!(qemu.contains("ENOSYS"));
}

fn busy(n: u64) -> u64 {
    let mut x = 0u64;
    for i in 0..n {
        x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
    }
    x
}

/// Whatever this machine offers, a counter set opens, counts a busy loop and
/// produces a task clock or cycles; when hardware is missing the note says why.
#[test]
fn auto_counts_or_falls_back_for_real() {
    let (mut set, note) = CounterSet::new(EventSetKind::Auto);
    let (_, counts) = set.measure(|| busy(2_000_000)).expect("counting must work");
    match set.backend() {
        Backend::Hardware { .. } => {
            assert!(note.is_none());
            let cycles = counts.get("cycles").or(counts.get("CPU_CYCLES"));
            assert!(cycles.unwrap_or(0.0) > 0.0, "{counts:?}");
            assert!(counts.derived().ipc.is_some());
        }
        Backend::PerfSoftware | Backend::Rusage => {
            let note = note.expect("a fallback must say why");
            assert!(!note.reason.is_empty());
            assert_eq!(&note.backend, set.backend());
            assert!(note.to_string().contains("counting with"));
            assert!(counts.get("task-clock").unwrap() > 0.0, "{counts:?}");
            assert!(counts.derived().task_clock_ns.is_some());
        }
    }
    // A second window works too and stop without start is an error.
    set.start().unwrap();
    busy(1000);
    set.stop().unwrap();
    assert!(set.stop().is_err());
}

/// This machine (a VM) has no CPU PMU in sysfs: the hardware request must fall
/// back and explain it. Skipped where a PMU is exposed.
#[test]
fn hardware_request_without_a_pmu_falls_back() {
    if !discover_cpu_pmus(&PathBuf::from(tiletune_pmu::sysfs::SYSFS_EVENT_SOURCES)).is_empty() {
        eprintln!("skipped: this machine exposes a CPU PMU");
        return;
    }
    let (set, note) =
        CounterSet::with_options(&CounterOptions::new(EventSetKind::Auto).counters(2));
    let note = note.expect("fallback note");
    assert_ne!(set.backend(), &Backend::Hardware { pmu: "cpu".into() });
    assert!(
        note.reason.contains("no hardware PMU") || note.reason.contains("ENOSYS"),
        "{}",
        note.reason
    );
    // Only this test emits, so the first call prints and the second is silent.
    assert!(note.emit_once(), "first note is printed");
    assert!(!note.emit_once(), "said once, then silent");
}

#[test]
fn software_kind_counts_without_a_note_unless_perf_is_missing() {
    let (mut set, note) = CounterSet::new(EventSetKind::Software);
    let (_, counts) = set.measure(|| busy(500_000)).unwrap();
    match set.backend() {
        Backend::PerfSoftware => {
            assert!(note.is_none());
            assert_eq!(set.plan().groups.len(), 1);
            assert!(counts.values.contains_key("page-faults"));
        }
        Backend::Rusage => assert!(note.unwrap().reason.contains("ENOSYS")),
        Backend::Hardware { .. } => panic!("software kind opened hardware"),
    }
    assert!(counts.get("task-clock").unwrap() > 0.0);
    assert!(!counts.multiplexed());
}

#[test]
fn a_foreign_event_set_is_refused_with_a_reason() {
    let foreign = if cfg!(target_arch = "aarch64") {
        EventSetKind::X86
    } else {
        EventSetKind::Armv8
    };
    let (set, note) = CounterSet::new(foreign);
    assert!(!matches!(set.backend(), Backend::Hardware { .. }));
    assert!(note.unwrap().reason.contains("cannot be counted on"));
}
