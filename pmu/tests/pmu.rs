//! PMU discovery on fixture sysfs trees, PMU choice for pinned runs, and the
//! fallback path for real on the machine the tests run on.

use std::hint::black_box;
use std::path::PathBuf;
use tiletune_pmu::counters::{choose_pmu, explain_open_failure, hardware_events, pmu_for_cpus};
use tiletune_pmu::plan::{PlanConfig, plan_groups};
use tiletune_pmu::sysfs::{discover_cpu_pmus, pmu_for_cpu};
use tiletune_pmu::{Backend, CounterOptions, CounterSet, EventSetKind, Metrics};

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
fn each_cluster_counts_the_events_its_pmu_lists() {
    let root = fixture("biglittle");
    let little = pmu_for_cpus(&root, &[0]).unwrap();
    let big = pmu_for_cpus(&root, &[7]).unwrap();
    let (little_events, cycles) = hardware_events(EventSetKind::Armv8, Some(&little));
    let (big_events, _) = hardware_events(EventSetKind::Armv8, Some(&big));
    let names = |v: &[tiletune_pmu::EventDef]| v.iter().map(|e| e.name).collect::<Vec<_>>();
    // The A55 lists no STALL_SLOT*/OP_* events: no top-down there.
    assert_eq!(little_events.len(), 11, "{:?}", names(&little_events));
    assert!(!names(&little_events).contains(&"OP_SPEC"));
    assert!(names(&little_events).contains(&"ASE_SPEC"));
    assert_eq!(big_events.len(), 16);
    assert_eq!(big.slots, Some(4));
    // Without sysfs information only the required events are opened.
    let (bare, _) = hardware_events(EventSetKind::Armv8, None);
    assert_eq!(
        names(&bare),
        [
            "CPU_CYCLES",
            "INST_RETIRED",
            "BR_MIS_PRED",
            "L1D_CACHE",
            "L1D_CACHE_REFILL",
            "L2D_CACHE",
            "L2D_CACHE_REFILL"
        ]
    );
    // Both plans fit the default six counters.
    for evs in [&little_events, &big_events] {
        let plan = plan_groups(evs, Some(cycles), PlanConfig::for_kind(EventSetKind::Armv8));
        assert!(plan.groups.iter().all(|g| g.len() <= 7));
        assert_eq!(
            plan.groups.iter().map(|g| g.len() - 1).sum::<usize>(),
            evs.len() - 1
        );
    }
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
            assert!(Metrics::from_counts(&counts).ipc.is_some());
        }
        Backend::PerfSoftware | Backend::Rusage => {
            let note = note.expect("a fallback must say why");
            assert!(!note.reason.is_empty());
            assert_eq!(&note.backend, set.backend());
            assert!(note.to_string().contains("counting with"));
            assert!(counts.get("task-clock").unwrap() > 0.0, "{counts:?}");
            assert!(Metrics::from_counts(&counts).task_clock_ns.is_some());
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

/// Workers created before the counters are opened (as a kernel pool's are)
/// are counted only when named. Each worker reports its own CPU time over
/// its busy phase (the thread CPU clock); the counted task-clock must cover
/// their sum, whatever the machine's load, while the sleeping caller alone
/// counts almost nothing.
#[test]
fn named_worker_threads_are_counted_with_the_caller() {
    use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
    use std::sync::{Arc, Barrier};
    fn thread_cpu_ns() -> u64 {
        // SAFETY: plain-data out-parameter.
        unsafe {
            let mut ts: libc::timespec = std::mem::zeroed();
            libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
            ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(Barrier::new(3));
    let go = Arc::new(Barrier::new(3));
    let done = Arc::new(Barrier::new(3));
    // Workers stay alive until the counters are read: the clock of an
    // exited thread cannot be read.
    let exit = Arc::new(Barrier::new(3));
    let tids: Vec<Arc<AtomicI32>> = (0..2).map(|_| Arc::new(AtomicI32::new(0))).collect();
    let workers: Vec<_> = tids
        .iter()
        .map(|tid| {
            let (stop, tid) = (stop.clone(), tid.clone());
            let (ready, go, done) = (ready.clone(), go.clone(), done.clone());
            let exit = exit.clone();
            std::thread::spawn(move || {
                tid.store(tiletune_pmu::counters::current_tid(), Ordering::SeqCst);
                let mut spent = Vec::new();
                for _ in 0..2 {
                    ready.wait();
                    go.wait();
                    let c0 = thread_cpu_ns();
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = black_box(busy(black_box(1000)).wrapping_add(x));
                    }
                    spent.push(thread_cpu_ns() - c0);
                    done.wait();
                }
                exit.wait();
                spent
            })
        })
        .collect();
    let window = std::time::Duration::from_millis(100);
    let count = |opts: CounterOptions| {
        ready.wait();
        let (mut set, _note) = CounterSet::with_options(&opts);
        stop.store(false, Ordering::SeqCst);
        set.start().unwrap();
        go.wait();
        std::thread::sleep(window);
        stop.store(true, Ordering::SeqCst);
        done.wait();
        set.stop().unwrap()
    };
    let alone = count(CounterOptions::new(EventSetKind::Software));
    // The tids are known once the workers passed `ready` the first time.
    let tids: Vec<i32> = tids.iter().map(|t| t.load(Ordering::SeqCst)).collect();
    let all = count(CounterOptions::new(EventSetKind::Software).threads(tids.clone()));
    exit.wait();
    let spent: Vec<Vec<u64>> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let busy_ns: f64 = spent.iter().map(|s| s[1] as f64).sum();
    assert_eq!(alone.threads, 1);
    assert_eq!(all.threads, 3);
    let (a, b) = (
        alone.get("task-clock").unwrap(),
        all.get("task-clock").unwrap(),
    );
    assert!(
        b >= 0.95 * busy_ns && b <= busy_ns + a.max(1e6) * 5.0 + 0.1 * busy_ns,
        "counted {b} ns, workers report {busy_ns} ns, caller alone {a} ns"
    );
    assert!(b > 5.0 * a, "workers {b} vs caller alone {a}");
    // The caller's own tid and duplicates are ignored.
    let me = tiletune_pmu::counters::current_tid();
    let opts = CounterOptions::new(EventSetKind::Software).threads(vec![me, tids[0], tids[0]]);
    assert_eq!(opts.threads, vec![tids[0]]);
}
