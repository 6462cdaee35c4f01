//! [`CounterSet`]: opens the planned groups, starts and stops them around a
//! region, and reads scaled values. Construction never fails: when hardware
//! counters cannot be opened it falls back to kernel software events, and when
//! `perf_event_open` itself is missing (qemu-user, seccomp: `ENOSYS`) to
//! `getrusage(RUSAGE_THREAD)` and the thread CPU clock, and returns a
//! [`FallbackNote`] that says why.
//!
//! Counters observe the calling thread plus the threads named in
//! [`CounterOptions::threads`], and report their sum. Why not `inherit`: it
//! only follows threads created *after* the counter is opened, and a kernel's
//! pool workers are persistent threads created long before (and a group
//! cannot be read with `inherit` on older kernels). So the caller names the
//! workers' TIDs and each gets its own groups (`perf_event_open(pid = tid)`);
//! the getrusage fallback reads each worker's CPU clock and `/proc` counters.

use crate::counts::{Backend, CounterValue, Counts};
use crate::error::PmuError;
use crate::events::{
    ARM_CPU_CYCLES, EventCode, EventDef, EventSetKind, HardwareEvent, SOFTWARE_EVENTS,
    SoftwareEvent, X86_CYCLES, event_set, sysfs_event_name,
};
use crate::plan::{GroupPlan, PlanConfig, plan_groups};
use crate::sysfs::{self, PmuDevice};
use perf_event::events::{Cache, CacheId, CacheOp, CacheResult, Hardware, Raw, Software};
use perf_event::{Builder, Counter, Group};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// How to build a [`CounterSet`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterOptions {
    pub kind: EventSetKind,
    /// Programmable counters per group; `None` = the kind's default.
    pub counters: Option<usize>,
    /// CPUs the measured thread is pinned to; `None` = its current affinity.
    /// On big.LITTLE this selects the cluster's PMU.
    pub cpus: Option<Vec<usize>>,
    /// Root of the event-source devices (fixtures in tests).
    pub sysfs_root: PathBuf,
    /// Other threads (Linux TIDs, e.g. a pool's workers) counted along with
    /// the calling thread; their counts are added to the caller's.
    pub threads: Vec<i32>,
}

impl CounterOptions {
    /// Defaults for `kind` on the real sysfs.
    pub fn new(kind: EventSetKind) -> CounterOptions {
        CounterOptions {
            kind,
            counters: None,
            cpus: None,
            sysfs_root: PathBuf::from(sysfs::SYSFS_EVENT_SOURCES),
            threads: Vec::new(),
        }
    }

    /// Also counts these threads (TIDs); duplicates and the caller are ignored.
    pub fn threads(mut self, tids: Vec<i32>) -> Self {
        let me = current_tid();
        let mut tids: Vec<i32> = tids.into_iter().filter(|&t| t != me).collect();
        tids.sort_unstable();
        tids.dedup();
        self.threads = tids;
        self
    }

    pub fn counters(mut self, n: usize) -> Self {
        self.counters = Some(n);
        self
    }

    pub fn cpus(mut self, cpus: Vec<usize>) -> Self {
        self.cpus = Some(cpus);
        self
    }

    pub fn sysfs_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.sysfs_root = root.into();
        self
    }
}

/// Why the requested counters could not be used and what is counted instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FallbackNote {
    pub requested: EventSetKind,
    pub backend: Backend,
    /// `errno` of the failed `perf_event_open`, if one failed.
    pub errno: Option<i32>,
    pub reason: String,
}

static FALLBACK_SAID: AtomicBool = AtomicBool::new(false);

impl FallbackNote {
    /// Prints the note to stderr the first time it is called in a process;
    /// later calls do nothing, so a sweep of thousands of measurements says it
    /// once. Returns whether it printed.
    pub fn emit_once(&self) -> bool {
        if FALLBACK_SAID.swap(true, Ordering::Relaxed) {
            return false;
        }
        eprintln!("note: {self}");
        true
    }
}

impl std::fmt::Display for FallbackNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} counters unavailable: {}; counting with {} instead",
            self.requested, self.reason, self.backend
        )
    }
}

/// Explains a failed `perf_event_open` in words a user can act on.
pub fn explain_open_failure(
    errno: Option<i32>,
    paranoid: Option<i32>,
    has_cpu_pmu: bool,
) -> String {
    let para = paranoid.map_or("unknown".to_string(), |p| p.to_string());
    match errno {
        Some(libc::ENOSYS) => {
            "perf_event_open is not implemented here (ENOSYS: qemu-user, a seccomp \
             filter or a kernel without CONFIG_PERF_EVENTS)"
                .to_string()
        }
        Some(e @ (libc::EACCES | libc::EPERM)) => format!(
            "perf_event_open was denied ({}, kernel.perf_event_paranoid = {para}); run \
             `sudo sysctl kernel.perf_event_paranoid=1` or grant CAP_PERFMON to count hardware events",
            errno_name(e)
        ),
        Some(e) if !has_cpu_pmu => format!(
            "no hardware PMU is exposed ({}; {} has no cpu or armv8_* device, as in a VM without a \
             virtual PMU; kernel.perf_event_paranoid = {para})",
            errno_name(e),
            sysfs::SYSFS_EVENT_SOURCES
        ),
        Some(e) => format!(
            "the kernel rejected the hardware events ({}: {})",
            errno_name(e),
            std::io::Error::from_raw_os_error(e)
        ),
        None => "no hardware event set exists for this architecture".to_string(),
    }
}

fn errno_name(e: i32) -> String {
    let name = match e {
        libc::ENOENT => "ENOENT",
        libc::ENODEV => "ENODEV",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EINVAL => "EINVAL",
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::ENOSYS => "ENOSYS",
        libc::EBUSY => "EBUSY",
        _ => return format!("errno {e}"),
    };
    name.to_string()
}

/// Picks the PMU for a run allowed on `cpus`. Returns the PMU and, when the
/// CPUs span several PMUs (an unpinned run on big.LITTLE), a warning: the
/// counters then only count while the thread is on the chosen cluster.
pub fn choose_pmu(
    pmus: &[PmuDevice],
    cpus: &[usize],
    current: Option<usize>,
) -> (Option<PmuDevice>, Option<String>) {
    let covering: Vec<&PmuDevice> = pmus
        .iter()
        .filter(|p| cpus.is_empty() || cpus.iter().any(|&c| p.covers(c)))
        .collect();
    match covering.len() {
        0 => (None, None),
        1 => (Some(covering[0].clone()), None),
        _ => {
            let chosen = current
                .and_then(|c| covering.iter().find(|p| p.covers(c)))
                .unwrap_or(&covering[0]);
            let names: Vec<&str> = covering.iter().map(|p| p.name.as_str()).collect();
            let warn = format!(
                "the run may migrate across PMUs {names:?}; counting on {} only — pin to one cluster",
                chosen.name
            );
            (Some((*chosen).clone()), Some(warn))
        }
    }
}

/// The calling thread's allowed CPUs.
pub fn current_affinity() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// The calling thread's Linux thread id.
pub fn current_tid() -> i32 {
    // SAFETY: no arguments; gettid cannot fail.
    unsafe { libc::gettid() }
}

fn current_cpu() -> Option<usize> {
    // SAFETY: no arguments; returns -1 on error.
    let c = unsafe { libc::sched_getcpu() };
    usize::try_from(c).ok()
}

struct OpenGroup {
    /// Index of the observed thread (0 = the caller).
    thread: usize,
    group: Group,
    members: Vec<(String, Counter)>,
}

enum Engine {
    Perf(Vec<OpenGroup>),
    /// The observed threads (`None` = the caller) and their snapshots
    /// (`None` for a thread that could not be read).
    Rusage(Vec<Option<i32>>, Option<Vec<Option<RusageSnap>>>),
}

#[derive(Debug, Clone, Copy)]
struct RusageSnap {
    cpu_ns: u64,
    faults: u64,
    switches: u64,
}

/// The CPU-time clock of thread `tid` of this process: Linux encodes a
/// thread clock id as `(~tid << 3) | CPUCLOCK_PERTHREAD (4) | CPUCLOCK_SCHED
/// (2)` (`MAKE_THREAD_CPUCLOCK` in the kernel's posix-timers.h), the value
/// `pthread_getcpuclockid` returns.
fn thread_clock(tid: i32) -> libc::clockid_t {
    ((!tid) << 3) | 6
}

/// Minor + major faults and context switches of thread `tid`, from
/// `/proc/self/task/<tid>/{stat,status}`.
fn proc_thread_counts(tid: i32) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // Fields after the parenthesised command: state is field 3, minflt 10, majflt 12.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let faults = f.get(7)?.parse::<u64>().ok()? + f.get(9)?.parse::<u64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).ok()?;
    let switches = status
        .lines()
        .filter(|l| {
            l.starts_with("voluntary_ctxt_switches") || l.starts_with("nonvoluntary_ctxt_switches")
        })
        .filter_map(|l| l.split(':').nth(1)?.trim().parse::<u64>().ok())
        .sum();
    Some((faults, switches))
}

impl RusageSnap {
    /// Thread `tid` (`None`: the caller); `None` when the thread is gone.
    fn of(tid: Option<i32>) -> Option<RusageSnap> {
        let Some(tid) = tid else {
            return Some(RusageSnap::now());
        };
        // SAFETY: plain-data out-parameter; the clock of a thread that has
        // exited is an invalid clock id (EINVAL).
        let cpu_ns = unsafe {
            let mut ts: libc::timespec = std::mem::zeroed();
            if libc::clock_gettime(thread_clock(tid), &mut ts) != 0 {
                return None;
            }
            ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
        };
        let (faults, switches) = proc_thread_counts(tid).unwrap_or((0, 0));
        Some(RusageSnap {
            cpu_ns,
            faults,
            switches,
        })
    }

    fn now() -> RusageSnap {
        // SAFETY: plain-data out-parameters of the right types.
        unsafe {
            let mut ts: libc::timespec = std::mem::zeroed();
            libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
            let mut ru: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
            RusageSnap {
                cpu_ns: ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64,
                faults: (ru.ru_minflt + ru.ru_majflt) as u64,
                switches: (ru.ru_nvcsw + ru.ru_nivcsw) as u64,
            }
        }
    }
}

/// Counters around a region: `start()`, run, `stop() -> Counts`.
pub struct CounterSet {
    engine: Engine,
    backend: Backend,
    slots: Option<u32>,
    plan: GroupPlan,
    started: bool,
    /// Optional events the PMU refused and that were left out.
    pub dropped: Vec<String>,
    /// A warning about the PMU choice (unpinned run on big.LITTLE).
    pub warning: Option<String>,
}

impl std::fmt::Debug for CounterSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CounterSet")
            .field("backend", &self.backend)
            .field("slots", &self.slots)
            .field("events", &self.events())
            .field("dropped", &self.dropped)
            .finish()
    }
}

fn perf_event_for(code: EventCode) -> Builder<'static> {
    let cache = |result| Cache {
        which: CacheId::L1D,
        operation: CacheOp::READ,
        result,
    };
    match code {
        EventCode::ArmRaw(id) => Builder::new(Raw::new(u64::from(id))),
        EventCode::Hardware(h) => match h {
            HardwareEvent::Cycles => Builder::new(Hardware::CPU_CYCLES),
            HardwareEvent::Instructions => Builder::new(Hardware::INSTRUCTIONS),
            HardwareEvent::CacheReferences => Builder::new(Hardware::CACHE_REFERENCES),
            HardwareEvent::CacheMisses => Builder::new(Hardware::CACHE_MISSES),
            HardwareEvent::BranchInstructions => Builder::new(Hardware::BRANCH_INSTRUCTIONS),
            HardwareEvent::BranchMisses => Builder::new(Hardware::BRANCH_MISSES),
            HardwareEvent::L1dReadAccess => Builder::new(cache(CacheResult::ACCESS)),
            HardwareEvent::L1dReadMiss => Builder::new(cache(CacheResult::MISS)),
        },
        EventCode::Software(s) => Builder::new(match s {
            SoftwareEvent::TaskClock => Software::TASK_CLOCK,
            SoftwareEvent::PageFaults => Software::PAGE_FAULTS,
            SoftwareEvent::ContextSwitches => Software::CONTEXT_SWITCHES,
            SoftwareEvent::CpuMigrations => Software::CPU_MIGRATIONS,
        }),
    }
}

/// Opens every group of `plan`. Optional events that fail are dropped;
/// any other failure aborts with the error.
fn open_plan(
    plan: &GroupPlan,
    pmu_type: Option<u32>,
    threads: &[i32],
    dropped: &mut Vec<String>,
) -> Result<Vec<OpenGroup>, PmuError> {
    let mut out = Vec::new();
    let targets = std::iter::once(None).chain(threads.iter().copied().map(Some));
    for (thread, target) in targets.enumerate() {
        out.extend(open_plan_for(plan, pmu_type, thread, target, dropped)?);
    }
    dropped.sort_unstable();
    dropped.dedup();
    Ok(out)
}

/// The groups of `plan` observing one thread (`None`: the caller).
fn open_plan_for(
    plan: &GroupPlan,
    pmu_type: Option<u32>,
    thread: usize,
    target: Option<i32>,
    dropped: &mut Vec<String>,
) -> Result<Vec<OpenGroup>, PmuError> {
    let mut out = Vec::new();
    for events in &plan.groups {
        let mut leader = Group::builder();
        if let Some(tid) = target {
            leader.observe_pid(tid);
        }
        let mut group = leader.build_group().map_err(|source| PmuError::Open {
            event: "group leader".into(),
            source,
        })?;
        let mut members = Vec::new();
        for def in events {
            let mut b = perf_event_for(def.code);
            if let Some(tid) = target {
                b.observe_pid(tid);
            }
            if let (EventCode::ArmRaw(_), Some(t)) = (def.code, pmu_type) {
                // Route the raw event to this cluster's PMU (big.LITTLE).
                b.attrs_mut().type_ = t;
            }
            match group.add(&b) {
                Ok(c) => members.push((def.name.to_string(), c)),
                Err(_) if !def.required => dropped.push(def.name.to_string()),
                Err(source) => {
                    return Err(PmuError::Open {
                        event: def.name.to_string(),
                        source,
                    });
                }
            }
        }
        if !members.is_empty() {
            out.push(OpenGroup {
                thread,
                group,
                members,
            });
        }
    }
    Ok(out)
}

fn errno_of(e: &PmuError) -> Option<i32> {
    match e {
        PmuError::Open { source, .. } | PmuError::Control { source, .. } => source.raw_os_error(),
        _ => None,
    }
}

impl CounterSet {
    /// Counters of `kind` on the real sysfs; see [`CounterSet::with_options`].
    pub fn new(kind: EventSetKind) -> (CounterSet, Option<FallbackNote>) {
        CounterSet::with_options(&CounterOptions::new(kind))
    }

    /// Opens the requested counters, or falls back (software events, then
    /// getrusage) and says why in the returned note. Never fails. Threads of
    /// [`CounterOptions::threads`] that no longer exist are left out (a
    /// `perf_event_open` on them would fail the whole set) and named in the
    /// counts' notes.
    pub fn with_options(opts: &CounterOptions) -> (CounterSet, Option<FallbackNote>) {
        let (live, gone): (Vec<i32>, Vec<i32>) = opts
            .threads
            .iter()
            .partition(|&&t| Path::new(&format!("/proc/self/task/{t}")).exists());
        let mut live_opts = opts.clone();
        live_opts.threads = live;
        let (mut set, note) = CounterSet::with_live_threads(&live_opts);
        if !gone.is_empty() {
            let gone = format!("threads {gone:?} no longer exist and are not counted");
            set.warning = Some(match set.warning.take() {
                Some(w) => format!("{w}; {gone}"),
                None => gone,
            });
        }
        (set, note)
    }

    fn with_live_threads(opts: &CounterOptions) -> (CounterSet, Option<FallbackNote>) {
        let kind = opts.kind.resolve();
        let pmus = sysfs::discover_cpu_pmus(&opts.sysfs_root);
        let paranoid = sysfs::perf_event_paranoid();
        let mut first_errno = None;
        let mut reason = None;

        if kind != EventSetKind::Software {
            match CounterSet::open_hardware(kind, opts, &pmus) {
                Ok(set) => return (set, None),
                Err(HwFail::Errno(e)) => {
                    first_errno = e;
                    reason = Some(explain_open_failure(e, paranoid, !pmus.is_empty()));
                }
                Err(HwFail::Reason(r)) => reason = Some(r),
            }
        }

        let plan = plan_groups(
            SOFTWARE_EVENTS,
            None,
            PlanConfig::for_kind(EventSetKind::Software),
        );
        let mut dropped = Vec::new();
        match open_plan(&plan, None, &opts.threads, &mut dropped) {
            Ok(groups) => {
                let set = CounterSet {
                    engine: Engine::Perf(groups),
                    backend: Backend::PerfSoftware,
                    slots: None,
                    plan,
                    started: false,
                    dropped,
                    warning: None,
                };
                let note = reason.map(|reason| FallbackNote {
                    requested: opts.kind,
                    backend: Backend::PerfSoftware,
                    errno: first_errno,
                    reason,
                });
                (set, note)
            }
            Err(e) => {
                let errno = errno_of(&e).or(first_errno);
                let sw_reason = explain_open_failure(errno_of(&e), paranoid, !pmus.is_empty());
                let reason = match reason {
                    Some(r) if r != sw_reason => format!("{r}; software events: {sw_reason}"),
                    _ => sw_reason,
                };
                let targets = std::iter::once(None)
                    .chain(opts.threads.iter().copied().map(Some))
                    .collect();
                let set = CounterSet {
                    engine: Engine::Rusage(targets, None),
                    backend: Backend::Rusage,
                    slots: None,
                    plan,
                    started: false,
                    dropped: Vec::new(),
                    warning: None,
                };
                let note = FallbackNote {
                    requested: opts.kind,
                    backend: Backend::Rusage,
                    errno,
                    reason,
                };
                (set, Some(note))
            }
        }
    }

    fn open_hardware(
        kind: EventSetKind,
        opts: &CounterOptions,
        pmus: &[PmuDevice],
    ) -> Result<CounterSet, HwFail> {
        let native = match kind {
            EventSetKind::Armv8 => cfg!(target_arch = "aarch64"),
            EventSetKind::X86 => cfg!(target_arch = "x86_64"),
            _ => false,
        };
        if !native {
            return Err(HwFail::Reason(format!(
                "{kind} events cannot be counted on a {} CPU",
                std::env::consts::ARCH
            )));
        }
        let cpus = opts.cpus.clone().unwrap_or_else(current_affinity);
        let (pmu, warning) = choose_pmu(pmus, &cpus, current_cpu());
        let (events, reference) = hardware_events(kind, pmu.as_ref());
        let mut cfg = PlanConfig::for_kind(kind);
        if let Some(n) = opts.counters {
            cfg.counters = n;
        }
        let plan = plan_groups(&events, Some(reference), cfg);
        let pmu_type = match kind {
            EventSetKind::Armv8 => pmu.as_ref().map(|p| p.type_id),
            _ => None,
        };
        let mut dropped = Vec::new();
        let groups = open_plan(&plan, pmu_type, &opts.threads, &mut dropped)
            .map_err(|e| HwFail::Errno(errno_of(&e)))?;
        let pmu_name = pmu.as_ref().map_or_else(
            || {
                if kind == EventSetKind::X86 {
                    "cpu"
                } else {
                    "raw"
                }
                .to_string()
            },
            |p| p.name.clone(),
        );
        Ok(CounterSet {
            engine: Engine::Perf(groups),
            backend: Backend::Hardware { pmu: pmu_name },
            slots: pmu.as_ref().and_then(|p| p.slots),
            plan,
            started: false,
            dropped,
            warning,
        })
    }

    /// Which mechanism counts.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// The planned groups.
    pub fn plan(&self) -> &GroupPlan {
        &self.plan
    }

    /// Names of the events that will be reported.
    pub fn events(&self) -> Vec<String> {
        match &self.engine {
            Engine::Perf(groups) => groups
                .iter()
                .flat_map(|g| g.members.iter().map(|(n, _)| n.clone()))
                .collect(),
            Engine::Rusage(..) => vec![
                "task-clock".to_string(),
                "page-faults".to_string(),
                "context-switches".to_string(),
            ],
        }
    }

    /// Resets and enables every group.
    pub fn start(&mut self) -> Result<(), PmuError> {
        match &mut self.engine {
            Engine::Perf(groups) => {
                for g in groups.iter_mut() {
                    g.group.reset().map_err(|source| PmuError::Control {
                        op: "reset",
                        source,
                    })?;
                }
                for g in groups.iter_mut() {
                    g.group.enable().map_err(|source| PmuError::Control {
                        op: "enable",
                        source,
                    })?;
                }
            }
            Engine::Rusage(targets, snap) => {
                *snap = Some(targets.iter().map(|&t| RusageSnap::of(t)).collect())
            }
        }
        self.started = true;
        Ok(())
    }

    /// Disables every group and reads the window's counts.
    pub fn stop(&mut self) -> Result<Counts, PmuError> {
        if !self.started {
            return Err(PmuError::NotStarted);
        }
        self.started = false;
        let mut counts = Counts::empty(self.backend.clone());
        counts.slots = self.slots;
        if !self.dropped.is_empty() {
            counts.notes.push(format!(
                "events refused by the PMU and not counted: {}",
                self.dropped.join(", ")
            ));
        }
        counts.notes.extend(self.warning.clone());
        match &mut self.engine {
            Engine::Perf(groups) => {
                for g in groups.iter_mut() {
                    g.group.disable().map_err(|source| PmuError::Control {
                        op: "disable",
                        source,
                    })?;
                }
                // Per thread, an event in several groups (the cycle
                // reference) keeps one value; threads are then summed.
                let threads = groups.iter().map(|g| g.thread + 1).max().unwrap_or(1);
                let mut per_thread = vec![std::collections::BTreeMap::new(); threads];
                for g in groups.iter_mut() {
                    let data = g
                        .group
                        .read()
                        .map_err(|source| PmuError::Control { op: "read", source })?;
                    let enabled = data.time_enabled().map_or(0, |d| d.as_nanos() as u64);
                    let running = data.time_running().map_or(0, |d| d.as_nanos() as u64);
                    for (name, c) in &g.members {
                        let raw = data.get(c).map(|e| e.value());
                        match raw.and_then(|r| CounterValue::scaled_from(r, enabled, running)) {
                            Some(v) => {
                                per_thread[g.thread].insert(name.clone(), v);
                            }
                            None => counts.missing.push(name.clone()),
                        }
                    }
                }
                for values in per_thread {
                    for (name, v) in values {
                        counts.accumulate(&name, v);
                    }
                }
                counts.missing.sort_unstable();
                counts.missing.dedup();
                counts.missing.retain(|m| !counts.values.contains_key(m));
                counts.threads = threads;
            }
            Engine::Rusage(targets, snap) => {
                let start = snap.take().ok_or(PmuError::NotStarted)?;
                let mut gone = Vec::new();
                for (&t, s) in targets.iter().zip(&start) {
                    let (Some(s), Some(e)) = (s, RusageSnap::of(t)) else {
                        gone.extend(t);
                        continue;
                    };
                    counts.accumulate(
                        "task-clock",
                        CounterValue::exact(e.cpu_ns.saturating_sub(s.cpu_ns)),
                    );
                    counts.accumulate(
                        "page-faults",
                        CounterValue::exact(e.faults.saturating_sub(s.faults)),
                    );
                    counts.accumulate(
                        "context-switches",
                        CounterValue::exact(e.switches.saturating_sub(s.switches)),
                    );
                }
                counts.threads = targets.len() - gone.len();
                if !gone.is_empty() {
                    counts.notes.push(format!(
                        "threads {gone:?} could not be read (exited?) and are not counted"
                    ));
                }
            }
        }
        Ok(counts)
    }

    /// Counts one call of `f`.
    pub fn measure<R>(&mut self, f: impl FnOnce() -> R) -> Result<(R, Counts), PmuError> {
        self.start()?;
        let r = f();
        Ok((r, self.stop()?))
    }
}

/// The events of a hardware `kind` to open on `pmu`, and the cycle reference.
/// ARMv8 optional events (top-down, SIMD share) are kept only when the PMU's
/// sysfs `events/` lists them; required ones always.
pub fn hardware_events(kind: EventSetKind, pmu: Option<&PmuDevice>) -> (Vec<EventDef>, EventDef) {
    match kind.resolve() {
        EventSetKind::Armv8 => {
            let evs = event_set(EventSetKind::Armv8)
                .iter()
                .filter(|e| e.required || pmu.is_some_and(|p| p.has_event(&sysfs_event_name(e))))
                .copied()
                .collect();
            (evs, ARM_CPU_CYCLES)
        }
        k => (event_set(k).to_vec(), X86_CYCLES),
    }
}

enum HwFail {
    Errno(Option<i32>),
    Reason(String),
}

/// Convenience for tests and the CLI: the PMU that would be used for `cpus`
/// under `root`.
pub fn pmu_for_cpus(root: &Path, cpus: &[usize]) -> Option<PmuDevice> {
    choose_pmu(&sysfs::discover_cpu_pmus(root), cpus, None).0
}
