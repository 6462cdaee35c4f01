//! The execution plan: which kernel variant, parameters and thread count run
//! each of a model's kernel problems on this SoC.
//!
//! At load the runtime lists the model's problems ([`crate::problems`]), asks
//! the selector table once ([`SelectorDb::lookup_many`]) and maps each answer
//! to a concrete kernel configuration: an exact tuned winner ("tuned"), the
//! winner of the nearest tuned shape ("nearest"), or the kernel crate's
//! analytic default ("default") when nothing usable is stored. A missing,
//! corrupt or foreign table never stops inference: the reason is kept in
//! [`ExecutionPlan::db_status`] and every problem gets its default.
//!
//! Placement. A stored winner may be pinned (`t2@cluster1`: its workers
//! were timed on cluster 1's CPUs). The entry keeps that placement
//! ([`PlanEntry::placement`]); a placement naming CPUs this process cannot
//! run on rejects the winner like any other inapplicable choice (default,
//! with a note). The runtime pins once per plan, not per call, and only
//! when the whole plan fits one CPU set: every pinned entry names the same
//! set S, and no entry (nor the plan's own thread count, which runs the
//! forward pass and attention) needs more workers than S has CPUs. Then
//! [`ExecutionPlan::pinned_cpus`] is S and [`ExecutionPlan::apply_placement`]
//! pins the calling thread to S and every pool the plan uses one worker per
//! CPU of S — the layout the tuner measured (`tiletune_bench::pin`), with no
//! system call on the kernel path, whichever thread runs the model. A plan
//! that does not fit one set would need a re-pin around calls, so then
//! nothing is pinned and the pinned entries say why (e.g. tuned with
//! `--threads 4` but run with `-t 8`). On a single-cluster machine nothing
//! is ever pinned.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tiletune_kernels::dtype::GgmlType;
use tiletune_kernels::qgemv::QMode;
use tiletune_kernels::{CpuCaps, KERNEL_ABI};
use tiletune_tables::{Lookup, OpenOptions, Phase, Placement, Problem, SelectorDb, Verdict};

mod verdict;
pub use verdict::{Mix, VerdictCheck, VerdictState};

pub use tiletune_kernels::choice::{KernelChoice, Layout, Op, QGEMV_FORMATS, WeightKind};

/// Where a plan entry's choice came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// Tuned on this SoC for exactly this problem.
    Tuned,
    /// Tuned on this SoC for the nearest shape of the same op and dtype.
    Nearest,
    /// The kernel crate's analytic default.
    Default,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Tuned => "tuned",
            Source::Nearest => "nearest",
            Source::Default => "default",
        }
    }
}

/// One problem's choice.
#[derive(Debug, Clone)]
pub struct PlanEntry {
    pub problem: Problem,
    pub kernel: KernelChoice,
    pub source: Source,
    /// Why a stored selection was not used, or what it was borrowed from.
    pub note: Option<String>,
    /// The pinned placement the workers run on (the stored winner's), or
    /// `None` when they are not pinned.
    pub placement: Option<Placement>,
}

/// What the plan is built for.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    /// The selector table; `None` uses [`tiletune_tables::default_db_path`].
    pub db: Option<PathBuf>,
    /// Thread budget (the table key) and the default worker count.
    pub threads: usize,
    /// Forces the activation mode of quantized defaults (and rejects tuned
    /// choices of the other mode); `None` takes the tuned mode or W·A8.
    pub qmode: Option<QMode>,
}

/// The per-problem choices for one model on one SoC.
#[derive(Debug, Clone)]
pub struct ExecutionPlan {
    pub soc: String,
    pub caps: CpuCaps,
    pub threads: usize,
    pub db_path: PathBuf,
    /// `ok`, or why the table could not be used (then every entry is a default).
    pub db_status: String,
    /// Whether the table was read, missing, or there but unusable.
    pub table: TableState,
    pub entries: Vec<PlanEntry>,
    /// Opening the table and the one `lookup_many` call.
    pub lookup_time: Duration,
    /// Mapping the answers to kernel configurations.
    pub plan_time: Duration,
    /// The CPUs [`ExecutionPlan::apply_placement`] pins to: the one set all
    /// pinned entries agree on (empty: nothing is pinned).
    pub pinned_cpus: Vec<usize>,
    /// The model's key in the table's verdicts ([`model_key`]).
    pub model: String,
    /// The model-level check of each phase and what it decided (empty for
    /// a plan built without verdicts).
    pub verdicts: Vec<VerdictCheck>,
    /// Entries whose kernel or placement is not the analytic default's: a
    /// table choice that is its default (the campaign kept it) counts as
    /// `tuned` but changes nothing.
    pub differ: usize,
    index: HashMap<String, usize>,
}

/// Which plan [`ExecutionPlan::build_with`] builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Build {
    /// The table's choices with the model-level verdicts applied: what runs.
    Verified,
    /// The table's choices in the phases `Mix` tunes, the defaults in the
    /// others, verdicts not applied: what `tune --model` times.
    Mix(Mix),
    /// The analytic defaults; the table is not opened.
    Default,
}

/// What became of the selector table a plan was built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableState {
    /// Opened and asked (it may still hold nothing for this SoC).
    Read,
    /// No file at the path: a fresh machine, or a plan built without one.
    Missing,
    /// A file that could not be used (corrupt, foreign, newer, a failed
    /// lookup): every entry is a default, and commands say so on stderr.
    Unusable,
}

/// The phase a problem runs in: the GEMV at one row is decode, the GEMM
/// buckets are prefill.
pub fn phase_of(p: &Problem) -> Phase {
    if op_of(p) == Op::Gemv {
        Phase::Decode
    } else {
        Phase::Prefill
    }
}

/// A model's key for the table's verdicts: a digest of its kernel problem
/// list, so every file with the same weights' shapes and dtypes (a
/// fine-tune, a copy elsewhere) shares the check, and no other does.
pub fn model_key(problems: &[Problem]) -> String {
    let text: Vec<String> = problems.iter().map(Problem::key).collect();
    format!("{:016x}", fnv1a(text.join("\n").as_bytes()))
}

/// The digest of the choices of `phase`: problem, kernel choice and
/// placement of every entry of the phase.
fn phase_digest(entries: &[PlanEntry], phase: Phase) -> String {
    let text: Vec<String> = entries
        .iter()
        .filter(|e| phase_of(&e.problem) == phase)
        .map(|e| {
            format!(
                "{} {} {}",
                e.problem.key(),
                e.kernel,
                e.placement
                    .as_ref()
                    .map_or("-".to_string(), Placement::name)
            )
        })
        .collect();
    format!("{:016x}", fnv1a(text.join("\n").as_bytes()))
}

/// FNV-1a, 64 bits: a stable digest (std's hasher may change between
/// releases; the digests are stored).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// What a problem's default is computed from.
pub(crate) struct Defaults<'a> {
    pub caps: &'a CpuCaps,
    pub threads: usize,
    pub qmode: Option<QMode>,
}

/// Gives every table-chosen entry of `phase` its default back, saying why.
fn to_defaults(entries: &mut [PlanEntry], phase: Phase, d: &Defaults<'_>) {
    for e in entries
        .iter_mut()
        .filter(|e| phase_of(&e.problem) == phase && e.source != Source::Default)
    {
        let default = default_choice(&e.problem, d.caps, d.threads, d.qmode);
        // A table entry that is the default (a campaign kept it: no lead
        // held) is not a choice the verdict turned down.
        let why = (e.kernel != default || e.placement.is_some()).then(|| {
            format!(
                "{} `{}` {} not used: see the {phase} verdict",
                e.source.name(),
                e.kernel.variant(),
                e.kernel.params_json()
            )
        });
        e.kernel = default;
        e.source = Source::Default;
        e.placement = None;
        if why.is_some() {
            e.note = why;
        }
    }
}

/// The SoC fingerprint and cache model of this machine; a probe failure
/// gives `unknown` and default caches (nothing is tuned for `unknown`).
pub fn this_soc() -> (String, CpuCaps) {
    match tiletune_soc::probe() {
        Ok(info) => (info.fingerprint.clone(), info.cpu_caps()),
        Err(_) => (
            "unknown".to_string(),
            CpuCaps {
                cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
                ..CpuCaps::default()
            },
        ),
    }
}

impl ExecutionPlan {
    /// Looks `problems` up once in the table at `opts.db` for `soc` and builds
    /// the plan. Never fails: table problems become [`Self::db_status`].
    pub fn build(problems: &[Problem], soc: &str, caps: &CpuCaps, opts: &PlanOptions) -> Self {
        let cpus = tiletune_kernels::pool::allowed_cpus();
        Self::build_on(problems, soc, caps, opts, &cpus)
    }

    /// [`ExecutionPlan::build`] for a process that may run on `cpus`: a
    /// stored placement pinning to any other CPU is rejected.
    pub fn build_on(
        problems: &[Problem],
        soc: &str,
        caps: &CpuCaps,
        opts: &PlanOptions,
        cpus: &[usize],
    ) -> Self {
        Self::build_with(problems, soc, caps, opts, cpus, Build::Verified)
    }

    /// The plan the table's choices make before the model-level verdicts
    /// are applied: what `tune --model` times against the default plan.
    pub fn build_unverified(
        problems: &[Problem],
        soc: &str,
        caps: &CpuCaps,
        opts: &PlanOptions,
    ) -> Self {
        Self::build_mix(problems, soc, caps, opts, Mix::TUNED)
    }

    /// The table's choices in the phases `mix` tunes and the defaults in
    /// the others, layouts resolved, verdicts not applied: the plan the
    /// runtime would run were those the verdicts, which `tune --model`
    /// times where no verdict timed it yet.
    pub fn build_mix(
        problems: &[Problem],
        soc: &str,
        caps: &CpuCaps,
        opts: &PlanOptions,
        mix: Mix,
    ) -> Self {
        let cpus = tiletune_kernels::pool::allowed_cpus();
        Self::build_with(problems, soc, caps, opts, &cpus, Build::Mix(mix))
    }

    /// The plan of the analytic defaults alone: what runs without a table.
    pub fn build_default(
        problems: &[Problem],
        soc: &str,
        caps: &CpuCaps,
        opts: &PlanOptions,
    ) -> Self {
        let cpus = tiletune_kernels::pool::allowed_cpus();
        Self::build_with(problems, soc, caps, opts, &cpus, Build::Default)
    }

    fn build_with(
        problems: &[Problem],
        soc: &str,
        caps: &CpuCaps,
        opts: &PlanOptions,
        cpus: &[usize],
        build: Build,
    ) -> Self {
        let threads = opts.threads.max(1);
        let db_path = opts
            .db
            .clone()
            .unwrap_or_else(|| tiletune_tables::table_for_soc(soc));
        let model = model_key(problems);
        let t0 = Instant::now();
        let (lookups, db_status, stored, table) = if build == Build::Default {
            (
                vec![Lookup::Missing; problems.len()],
                "not used: the default plan".to_string(),
                Vec::new(),
                TableState::Missing,
            )
        } else {
            lookup_all(&db_path, soc, threads, problems, &model)
        };
        let lookup_time = t0.elapsed();
        let t1 = Instant::now();
        let base: Vec<PlanEntry> = problems
            .iter()
            .zip(lookups)
            .map(|(p, l)| {
                let e = entry_for(p, &l, caps, threads, opts.qmode);
                place(e, &l, cpus, caps, threads, opts.qmode)
            })
            .collect();
        let defaults = Defaults {
            caps,
            threads,
            qmode: opts.qmode,
        };
        let (mut entries, verdicts) = match build {
            Build::Verified => verdict::apply(&base, &stored, &defaults),
            Build::Mix(mix) => (verdict::mixed(&base, mix, &defaults), Vec::new()),
            Build::Default => (verdict::mixed(&base, Mix::DEFAULT, &defaults), Vec::new()),
        };
        let pinned_cpus = agree_on_cpus(&mut entries, threads);
        let differ = entries
            .iter()
            .filter(|e| {
                e.placement.is_some()
                    || e.kernel != default_choice(&e.problem, caps, threads, opts.qmode)
            })
            .count();
        let index = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.problem.key(), i))
            .collect();
        let plan_time = t1.elapsed();
        ExecutionPlan {
            soc: soc.to_string(),
            caps: *caps,
            threads,
            db_path,
            db_status,
            table,
            entries,
            lookup_time,
            plan_time,
            pinned_cpus,
            model,
            verdicts,
            differ,
            index,
        }
    }

    /// The phases of this plan (a [`Self::build_mix`] of `tuned` and `default`
    /// by phase verdicts `won`) whose choices no verdict timed: a phase
    /// runs other choices than the plan it was timed in, as a losing
    /// phase's defaults do on the layouts the other phase's tuned choices
    /// hold. `tune --model` times them.
    pub fn untimed_phases(
        &self,
        tuned: &ExecutionPlan,
        default: &ExecutionPlan,
        won: impl Fn(Phase) -> bool,
    ) -> Vec<Phase> {
        Phase::ALL
            .into_iter()
            .filter(|&p| {
                let timed = if won(p) { tuned } else { default };
                self.digest(p) != timed.digest(p)
            })
            .collect()
    }

    /// The digest of the choices this plan runs in `phase` (the verdict of
    /// `tune --model` is stored with it).
    pub fn digest(&self, phase: Phase) -> String {
        phase_digest(&self.entries, phase)
    }

    /// Pins this process the way the plan's placements were tuned (see the
    /// module docs): the calling thread to [`Self::pinned_cpus`], and worker
    /// `i` of every pool the plan uses (each entry's thread count and the
    /// plan's) to `pinned_cpus[i % len]`. With nothing to pin, those pools
    /// and every pool a previous call pinned are set back to the process's
    /// CPUs, so applying the plans of several models in turn leaves the last
    /// one's layout. Pools are set up before the caller is pinned because new
    /// threads inherit their creator's CPUs. Call it from the thread that
    /// loads and runs the model, once, after building the plan. Returns the
    /// CPUs pinned to (empty: none).
    pub fn apply_placement(&self) -> std::io::Result<Vec<usize>> {
        use tiletune_kernels::pool::{pin_caller, pin_workers};
        // What the last call pinned: `Some(pools)` when it pinned the caller
        // and these pools' workers.
        static PINNED: std::sync::Mutex<Option<Vec<usize>>> = std::sync::Mutex::new(None);
        let mut last = PINNED.lock().unwrap_or_else(|e| e.into_inner());
        if self.pinned_cpus.is_empty() && last.is_none() {
            // Nothing to pin, nothing to undo: the single-cluster case
            // touches no thread and creates no pool.
            return Ok(Vec::new());
        }
        let mut used: Vec<usize> = self.entries.iter().map(|e| e.kernel.threads()).collect();
        used.push(self.threads);
        let mut counts = used.clone();
        counts.extend(last.iter().flatten().copied());
        counts.sort_unstable();
        counts.dedup();
        // Should a step fail, the next call restores every pool touched here.
        *last = Some(counts.clone());
        let mut now = Vec::new();
        for t in counts.into_iter().filter(|&t| t > 1) {
            if used.contains(&t) && !self.pinned_cpus.is_empty() {
                pin_workers(t, &self.pinned_cpus)?;
                now.push(t);
            } else {
                pin_workers(t, &[])?;
            }
        }
        pin_caller(&self.pinned_cpus)?;
        *last = (!self.pinned_cpus.is_empty()).then_some(now);
        Ok(self.pinned_cpus.clone())
    }

    /// The plan of a GGUF model on this machine.
    pub fn for_model(g: &crate::GgufFile, opts: &PlanOptions) -> crate::Result<Self> {
        let problems = crate::problems::kernel_problems(g)?;
        let (soc, caps) = this_soc();
        Ok(Self::build(&problems, &soc, &caps, opts))
    }

    /// The entry of a problem; `None` if the model does not have it.
    pub fn get(&self, p: &Problem) -> Option<&PlanEntry> {
        self.index.get(&p.key()).map(|&i| &self.entries[i])
    }

    /// The kernel for `op` on a weight of type `dtype`, falling back to the
    /// default when the problem was not planned (a model built without it).
    pub fn kernel(&self, op: Op, dtype: GgmlType, m: usize, n: usize, k: usize) -> KernelChoice {
        let p = match op {
            Op::Gemv => Problem::new("gemv", dtype.key(), [("n", n), ("k", k)]),
            Op::Gemm => Problem::new("gemm", dtype.key(), [("m", m), ("n", n), ("k", k)]),
        };
        match p.ok().as_ref().and_then(|p| self.get(p)) {
            Some(e) => e.kernel,
            None => KernelChoice::default_for(
                op,
                WeightKind::of(dtype),
                m,
                n,
                k,
                &self.caps,
                self.threads,
                None,
            ),
        }
    }

    /// Entries per source: (tuned, nearest, default).
    pub fn counts(&self) -> (usize, usize, usize) {
        let c = |s| self.entries.iter().filter(|e| e.source == s).count();
        (c(Source::Tuned), c(Source::Nearest), c(Source::Default))
    }

    /// One line: counts per source, how many differ from the defaults,
    /// table status and timing.
    pub fn summary(&self) -> String {
        let (t, n, d) = self.counts();
        format!(
            "plan: {} problems: {t} tuned, {n} nearest, {d} default; {} differ from the default plan; table {} ({}); lookup {:.2} ms, plan {:.2} ms",
            self.entries.len(),
            self.differ,
            self.db_path.display(),
            self.db_status,
            self.lookup_time.as_secs_f64() * 1e3,
            self.plan_time.as_secs_f64() * 1e3
        )
    }

    /// The plan as JSON.
    pub fn to_json(&self) -> Value {
        let entries: Vec<Value> = self
            .entries
            .iter()
            .map(|e| {
                json!({
                    "op": e.problem.op(),
                    "dtype": e.problem.dtype(),
                    "shape": e.problem.dims_string(),
                    "variant": e.kernel.variant(),
                    "params": e.kernel.params_json(),
                    "threads": e.kernel.threads(),
                    "placement": e.placement.as_ref().map(Placement::name),
                    "source": e.source.name(),
                    "note": e.note,
                })
            })
            .collect();
        let (t, n, d) = self.counts();
        json!({
            "soc": self.soc,
            "threads": self.threads,
            "db": self.db_path.display().to_string(),
            "db_status": self.db_status,
            "lookup_ms": self.lookup_time.as_secs_f64() * 1e3,
            "plan_ms": self.plan_time.as_secs_f64() * 1e3,
            "counts": { "tuned": t, "nearest": n, "default": d, "differ": self.differ },
            "pinned_cpus": self.pinned_cpus,
            "model": self.model,
            "verdicts": self.verdicts.iter().map(|v| json!({
                "phase": v.phase.name(),
                "tuned_runs": v.tuned_runs(),
                "state": v.state.name(),
                "moved": v.moved,
                "ratio": v.state.verdict().map(|x| x.ratio),
                "text": v.to_string(),
            })).collect::<Vec<_>>(),
            "entries": entries,
        })
    }
}

impl fmt::Display for ExecutionPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "soc {}  threads {}", self.soc, self.threads)?;
        writeln!(
            f,
            "{:<5} {:<6} {:<22} {:<18} {:<48} {:>3} {:<12} source",
            "op", "dtype", "shape", "variant", "params", "thr", "placement"
        )?;
        for e in &self.entries {
            let params = e.kernel.params_json().to_string();
            write!(
                f,
                "{:<5} {:<6} {:<22} {:<18} {:<48} {:>3} {:<12} {}",
                e.problem.op(),
                e.problem.dtype(),
                e.problem.dims_string(),
                e.kernel.variant(),
                params,
                e.kernel.threads(),
                e.placement
                    .as_ref()
                    .map_or("-".to_string(), Placement::name),
                e.source.name()
            )?;
            if let Some(n) = &e.note {
                write!(f, " ({n})")?;
            }
            writeln!(f)?;
        }
        if !self.pinned_cpus.is_empty() {
            writeln!(f, "pinned to cpus {:?}", self.pinned_cpus)?;
        }
        for v in &self.verdicts {
            writeln!(f, "verdict {v}")?;
        }
        write!(f, "{}", self.summary())
    }
}

/// Opens the table read-only and asks once; any failure gives all-missing
/// and a status that says why.
fn lookup_all(
    path: &Path,
    soc: &str,
    threads: usize,
    problems: &[Problem],
    model: &str,
) -> (Vec<Lookup>, String, Vec<Verdict>, TableState) {
    let missing = || vec![Lookup::Missing; problems.len()];
    if !path.exists() {
        return (
            missing(),
            "not found; using defaults (run `tiletune tune --model` to create it)".into(),
            Vec::new(),
            TableState::Missing,
        );
    }
    let db = match SelectorDb::open_with(path, OpenOptions::read_only()) {
        Ok(db) => db,
        Err(e) => {
            return (
                missing(),
                format!("unusable ({e}); using defaults"),
                Vec::new(),
                TableState::Unusable,
            );
        }
    };
    let mut verdicts = Vec::new();
    let mut verdict_err = None;
    for phase in Phase::ALL {
        match db.verdict(soc, KERNEL_ABI, model, phase, threads) {
            Ok(v) => verdicts.extend(v),
            Err(e) => verdict_err = Some(e.to_string()),
        }
    }
    let (l, mut status, ok) = lookups_with_status(&db, soc, threads, problems);
    if let Some(e) = verdict_err {
        status += &format!("; model-level verdicts unreadable ({e})");
    }
    let state = if ok {
        TableState::Read
    } else {
        TableState::Unusable
    };
    (l, status, verdicts, state)
}

/// The one `lookup_many` call and the table's status line.
fn lookups_with_status(
    db: &SelectorDb,
    soc: &str,
    threads: usize,
    problems: &[Problem],
) -> (Vec<Lookup>, String, bool) {
    let missing = || vec![Lookup::Missing; problems.len()];
    match db.lookup_many(soc, KERNEL_ABI, threads, problems) {
        Ok(l) if l.len() == problems.len() => {
            let any = l.iter().any(|l| !matches!(l, Lookup::Missing));
            let status = if any {
                "ok".to_string()
            } else {
                // Say so when the table was tuned by a tiletune whose
                // kernels (or timings) meant something else: re-tuning,
                // not a different --db, is what helps then.
                let stale = db
                    .selections(Some(soc))
                    .map(|v| v.iter().filter(|s| s.kernel_abi != KERNEL_ABI).count())
                    .unwrap_or(0);
                if stale > 0 {
                    format!(
                        "ok, nothing tuned for soc {soc} with {threads} threads by this version; {stale} selection(s) from another kernel ABI (not {KERNEL_ABI}) are ignored: run `tiletune tune --model` again"
                    )
                } else {
                    format!("ok, nothing tuned for soc {soc} with {threads} threads")
                }
            };
            (l, status, true)
        }
        Ok(_) => (
            missing(),
            "lookup answered the wrong number of problems; using defaults".into(),
            false,
        ),
        Err(e) => (
            missing(),
            format!("lookup failed ({e}); using defaults"),
            false,
        ),
    }
}

fn entry_for(
    p: &Problem,
    l: &Lookup,
    caps: &CpuCaps,
    threads: usize,
    qmode: Option<QMode>,
) -> PlanEntry {
    let kind = WeightKind::of_dtype(p.dtype());
    let default = |note: Option<String>| PlanEntry {
        problem: p.clone(),
        kernel: default_choice(p, caps, threads, qmode),
        source: Source::Default,
        note,
        placement: None,
    };
    let (sel, source, from) = match l {
        Lookup::Exact(s) => (s, Source::Tuned, None),
        Lookup::Nearest { sel, from, .. } => (sel, Source::Nearest, Some(from)),
        Lookup::Missing => return default(None),
    };
    let w = &sel.winner;
    match KernelChoice::from_stored(
        op_of(p),
        kind,
        w.variant(),
        w.params(),
        w.threads(),
        threads,
        qmode,
    ) {
        Ok(kernel) => PlanEntry {
            problem: p.clone(),
            kernel,
            source,
            note: from.map(|f| format!("from {}", f.dims_string())),
            placement: None,
        },
        Err(why) => default(Some(format!(
            "stored winner `{}` rejected: {why}",
            w.variant()
        ))),
    }
}

/// Gives a used stored winner its pinned placement, or rejects the winner
/// (default, with a note) when the placement pins to CPUs outside `cpus`.
fn place(
    mut e: PlanEntry,
    l: &Lookup,
    cpus: &[usize],
    caps: &CpuCaps,
    threads: usize,
    qmode: Option<QMode>,
) -> PlanEntry {
    let Some(sel) = l.selection() else { return e };
    let p = sel.winner.placement();
    if e.source == Source::Default || !p.is_pinned() {
        return e;
    }
    let missing: Vec<usize> = p
        .cpus()
        .iter()
        .copied()
        .filter(|c| !cpus.contains(c))
        .collect();
    if missing.is_empty() {
        e.placement = Some(p.clone());
        return e;
    }
    e.kernel = default_choice(&e.problem, caps, threads, qmode);
    e.source = Source::Default;
    e.note = Some(format!(
        "stored winner `{}` rejected: its placement {p} pins to cpus {:?}, this process runs on cpus {:?}",
        sel.winner.variant(),
        p.cpus(),
        cpus
    ));
    e
}

/// Makes every weight's kernels agree on what the weight holds, by one
/// rule: a quantized weight holds one copy, and it is the layout of its
/// decode choice (decode reads every weight byte once per generated token:
/// most of a generation's time); a prefill choice that reads another layout
/// becomes [`KernelChoice::for_layout`] of it (the same variant with that
/// interleave where the variant reads it, else the best variant that does,
/// never the scalar GEMM while a SIMD variant reads the layout), and its
/// line says `conflict: … → …`. A table tuned jointly (`tune --model`) never
/// conflicts; older tables and hand-imported rows can.
fn resolve_layouts(entries: &mut [PlanEntry], caps: &CpuCaps) {
    let mut decode: HashMap<(String, usize, usize), Layout> = HashMap::new();
    for e in entries.iter() {
        let (m, n, k) = mnk(&e.problem);
        if op_of(&e.problem) == Op::Gemv && m == 1 {
            decode.insert((e.problem.dtype().to_string(), n, k), e.kernel.layout());
        }
    }
    for e in entries.iter_mut() {
        let (m, n, k) = mnk(&e.problem);
        let Some(&layout) = decode.get(&(e.problem.dtype().to_string(), n, k)) else {
            continue;
        };
        if e.kernel.layout() == layout {
            continue;
        }
        let Some(moved) = e.kernel.for_layout(layout, (m, n, k), caps) else {
            continue;
        };
        let why = format!(
            "conflict: `{}` reads {}, the weight holds {} (its decode choice's) → `{}` {}",
            e.kernel.variant(),
            e.kernel.layout(),
            layout,
            moved.variant(),
            moved.params_json()
        );
        e.kernel = moved;
        e.note = Some(match e.note.take() {
            Some(old) => format!("{old}; {why}"),
            None => why,
        });
    }
}

/// The CPU set the whole plan fits (see the module docs), or empty, with
/// the pinned entries unpinned and told why.
fn agree_on_cpus(entries: &mut [PlanEntry], threads: usize) -> Vec<usize> {
    let mut sets: Vec<&[usize]> = entries
        .iter()
        .filter_map(|e| e.placement.as_ref().map(Placement::cpus))
        .collect();
    sets.sort_unstable();
    sets.dedup();
    let why = match sets.as_slice() {
        [] => return Vec::new(),
        [one] => {
            let most = entries
                .iter()
                .map(|e| e.kernel.threads())
                .chain([threads])
                .max()
                .unwrap_or(threads);
            if most <= one.len() {
                return one.to_vec();
            }
            format!(
                "the plan runs {most} threads, more than the {} cpu(s) of its placement",
                one.len()
            )
        }
        more => format!(
            "the plan's entries are pinned to {} different cpu sets",
            more.len()
        ),
    };
    for e in entries.iter_mut() {
        if let Some(p) = e.placement.take() {
            let why = format!("tuned as {p}, runs unpinned: {why}");
            e.note = Some(match e.note.take() {
                Some(old) => format!("{old}; {why}"),
                None => why,
            });
        }
    }
    Vec::new()
}

/// The op of a problem the plan holds (`gemv` or `gemm`).
fn op_of(p: &Problem) -> Op {
    Op::from_name(p.op()).unwrap_or(Op::Gemm)
}

/// A problem's `(m, n, k)`; `m` is 1 for a GEMV.
fn mnk(p: &Problem) -> (usize, usize, usize) {
    (
        p.dim("m").unwrap_or(1),
        p.dim("n").unwrap_or(0),
        p.dim("k").unwrap_or(0),
    )
}

/// The analytic default for a problem ([`KernelChoice::default_for`]).
fn default_choice(
    p: &Problem,
    caps: &CpuCaps,
    threads: usize,
    qmode: Option<QMode>,
) -> KernelChoice {
    let (m, n, k) = mnk(p);
    KernelChoice::default_for(
        op_of(p),
        WeightKind::of_dtype(p.dtype()),
        m,
        n,
        k,
        caps,
        threads,
        qmode,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tiletune_kernels::gemv::GemvParams;
    use tiletune_kernels::quant::QuantFormat;

    fn problems() -> Vec<Problem> {
        vec![
            Problem::new("gemv", "f32", [("n", 64), ("k", 32)]).unwrap(),
            Problem::new("gemv", "q4_1", [("n", 64), ("k", 64)]).unwrap(),
            Problem::new("gemm", "f16", [("m", 16), ("n", 64), ("k", 32)]).unwrap(),
            Problem::new("gemv", "bf16", [("n", 8), ("k", 32)]).unwrap(),
        ]
    }

    fn opts(db: PathBuf) -> PlanOptions {
        PlanOptions {
            db: Some(db),
            threads: 2,
            qmode: None,
        }
    }

    #[test]
    fn missing_db_gives_defaults() {
        let dir = std::env::temp_dir().join(format!("tt-plan-missing-{}", std::process::id()));
        let p = ExecutionPlan::build(
            &problems(),
            "soc",
            &CpuCaps::default(),
            &opts(dir.join("no.db")),
        );
        assert_eq!(p.counts(), (0, 0, 4));
        assert!(p.db_status.contains("not found"), "{}", p.db_status);
        assert_eq!(p.table, TableState::Missing);
        assert!(matches!(p.entries[0].kernel, KernelChoice::Gemv(_)));
        assert!(matches!(p.entries[1].kernel, KernelChoice::QGemm(q) if q.params.mr == 1));
        assert!(matches!(p.entries[2].kernel, KernelChoice::Gemm(_)));
        assert!(matches!(p.entries[3].kernel, KernelChoice::Gemv(_)));
        assert!(p.to_string().contains("default"));
    }

    #[test]
    fn corrupt_db_gives_defaults() {
        let dir = std::env::temp_dir().join(format!("tt-plan-corrupt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.db");
        std::fs::write(&path, b"this is not sqlite at all, not even close......").unwrap();
        let p = ExecutionPlan::build(&problems(), "soc", &CpuCaps::default(), &opts(path));
        assert_eq!(p.counts(), (0, 0, 4));
        assert!(p.db_status.contains("using defaults"), "{}", p.db_status);
        assert_eq!(p.table, TableState::Unusable);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn dtypes_map_to_weight_kinds() {
        assert_eq!(WeightKind::of_dtype("f32"), WeightKind::F32);
        assert_eq!(
            WeightKind::of_dtype("q4_k"),
            WeightKind::Quant(QuantFormat::Q4K)
        );
        assert_eq!(WeightKind::of_dtype("q8_1"), WeightKind::Dequantized);
        assert_eq!(WeightKind::of_dtype("bf16"), WeightKind::Dequantized);
    }
    /// A table at a fresh path holding one f32 GEMV winner per
    /// `(n, placement)`, all on soc `soc` for thread budget `budget`.
    fn placed_db(
        tag: &str,
        budget: usize,
        winners: &[(usize, Placement)],
    ) -> (PathBuf, Vec<Problem>) {
        use tiletune_tables::{Candidate, Selection};
        let dir = ps_dir(tag);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sel.db");
        let mut db = SelectorDb::open(&path).unwrap();
        register_soc(&mut db, "soc");
        let gp = GemvParams {
            nr: 2,
            unroll: 1,
            prefetch: 0,
            kc: 0,
        };
        let mut problems = Vec::new();
        for (n, placement) in winners {
            let problem = Problem::new("gemv", "f32", [("n", *n), ("k", 32)]).unwrap();
            let winner = Candidate::placed(
                "scalar",
                serde_json::to_value(gp).unwrap(),
                placement.clone(),
            )
            .unwrap();
            db.put_selection(&Selection {
                soc: "soc".into(),
                kernel_abi: KERNEL_ABI,
                problem: problem.clone(),
                thread_budget: budget,
                winner,
                median_ns: 10.0,
                default_ns: None,
                speedup: None,
                campaign: None,
                selected_at: 0,
            })
            .unwrap();
            problems.push(problem);
        }
        (path, problems)
    }

    fn register_soc(db: &mut SelectorDb, fingerprint: &str) {
        db.register_soc(&tiletune_tables::SocRecord {
            fingerprint: fingerprint.into(),
            name: "test".into(),
            probe: json!({}),
            first_seen: 0,
        })
        .unwrap();
    }

    fn ps_dir(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!("tt-plan-{tag}-{}", std::process::id()))
    }

    fn pinned(threads: usize, cluster: usize, cpus: &[usize]) -> Placement {
        Placement::pinned(threads, vec![cluster], cpus.to_vec()).unwrap()
    }

    fn opts_t(db: PathBuf, threads: usize) -> PlanOptions {
        PlanOptions {
            threads,
            ..opts(db)
        }
    }

    #[test]
    fn placements_on_missing_cpus_are_rejected_and_others_kept() {
        let (path, ps) = placed_db(
            "cpus",
            2,
            &[
                (64, pinned(2, 3, &[6, 7])),
                (128, pinned(1, 1, &[1])),
                (256, Placement::unpinned(2).unwrap()),
            ],
        );
        let caps = CpuCaps::default();
        let p = ExecutionPlan::build_on(&ps, "soc", &caps, &opts(path.clone()), &[0, 1]);
        // Cluster 3's CPUs 6 and 7 do not exist here: the default runs.
        assert_eq!(p.entries[0].source, Source::Default);
        assert_eq!(p.entries[0].placement, None);
        let note = p.entries[0].note.as_deref().unwrap();
        assert!(
            note.contains("rejected") && note.contains("t2@cluster3"),
            "{note}"
        );
        assert!(note.contains("[6, 7]"), "{note}");
        assert!(p.to_string().contains("rejected"), "{p}");
        // CPU 1 exists, so the winner is used; but the plan runs 2 threads,
        // which one CPU cannot hold: nothing is pinned, and it says so.
        assert_eq!(p.entries[1].source, Source::Tuned);
        assert_eq!(p.entries[1].placement, None);
        let note = p.entries[1].note.as_deref().unwrap();
        assert!(
            note.contains("t1@cluster1, runs unpinned: the plan runs 2 threads"),
            "{note}"
        );
        assert_eq!(p.entries[2].source, Source::Tuned);
        assert!(p.pinned_cpus.is_empty());
        // With every CPU present, the two placements disagree.
        let all = ExecutionPlan::build_on(&ps, "soc", &caps, &opts(path), &[0, 1, 6, 7]);
        assert_eq!(all.counts(), (3, 0, 0));
        assert!(all.pinned_cpus.is_empty());
        assert!(
            all.entries[0]
                .note
                .as_deref()
                .unwrap()
                .contains("2 different cpu sets")
        );
        let _ = std::fs::remove_dir_all(ps_dir("cpus"));
    }

    #[test]
    fn a_plan_that_fits_one_cpu_set_is_pinned_to_it() {
        let (path, ps) = placed_db(
            "fits",
            2,
            &[
                (64, pinned(2, 0, &[0, 1])),
                (128, pinned(1, 0, &[0, 1])),
                (256, Placement::unpinned(2).unwrap()),
            ],
        );
        let p = ExecutionPlan::build_on(&ps, "soc", &CpuCaps::default(), &opts(path), &[0, 1]);
        assert_eq!(p.counts(), (3, 0, 0));
        assert_eq!(p.pinned_cpus, [0, 1]);
        assert_eq!(p.entries[0].placement, Some(pinned(2, 0, &[0, 1])));
        assert_eq!(p.entries[1].placement, Some(pinned(1, 0, &[0, 1])));
        assert_eq!(p.entries[2].placement, None);
        let j = p.to_json();
        assert_eq!(j["entries"][0]["placement"], "t2@cluster0");
        assert_eq!(j["entries"][2]["placement"], Value::Null);
        assert_eq!(j["pinned_cpus"], json!([0, 1]));
        let text = p.to_string();
        assert!(
            text.contains("t1@cluster0") && text.contains("pinned to cpus [0, 1]"),
            "{text}"
        );
        let _ = std::fs::remove_dir_all(ps_dir("fits"));
    }

    #[test]
    fn entries_pinned_to_different_clusters_run_unpinned() {
        let (path, ps) = placed_db(
            "disagree",
            2,
            &[(64, pinned(1, 0, &[0])), (128, pinned(1, 1, &[1]))],
        );
        let p = ExecutionPlan::build_on(&ps, "soc", &CpuCaps::default(), &opts(path), &[0, 1]);
        assert_eq!(p.counts(), (2, 0, 0));
        assert!(p.pinned_cpus.is_empty());
        for e in &p.entries {
            assert_eq!(e.placement, None);
            assert!(
                e.note.as_deref().unwrap().contains("runs unpinned"),
                "{e:?}"
            );
        }
        let _ = std::fs::remove_dir_all(ps_dir("disagree"));
    }

    /// Applying plans really pins (on any machine with CPUs 0 and 1): each
    /// pool the plan uses one worker per CPU, the calling thread to the set;
    /// the next plan's layout replaces it.
    #[test]
    fn applying_a_plan_pins_the_pools_and_the_caller() {
        use tiletune_kernels::pool::{allowed_cpus, caller_affinity, worker_affinity};
        let all = allowed_cpus();
        if !(all.contains(&0) && all.contains(&1)) {
            eprintln!("skipped: needs CPUs 0 and 1");
            return;
        }
        let (path2, ps2) = placed_db("apply2", 2, &[(64, pinned(2, 0, &[0, 1]))]);
        let (path1, ps1) = placed_db("apply1", 1, &[(64, pinned(1, 1, &[1]))]);
        let caps = CpuCaps::default();
        let two = ExecutionPlan::build_on(&ps2, "soc", &caps, &opts(path2), &all);
        let one = ExecutionPlan::build_on(&ps1, "soc", &caps, &opts_t(path1, 1), &all);
        let none = ExecutionPlan::build_on(&ps1, "soc", &caps, &opts(ps_dir("no.db")), &all);
        assert!(none.pinned_cpus.is_empty());
        std::thread::spawn(move || {
            assert_eq!(two.apply_placement().unwrap(), [0, 1]);
            assert_eq!(worker_affinity(2).unwrap(), [vec![0], vec![1]]);
            assert_eq!(caller_affinity().unwrap(), [0, 1]);
            assert_eq!(one.apply_placement().unwrap(), [1]);
            assert_eq!(caller_affinity().unwrap(), [1]);
            // The two-thread pool was the previous plan's: set back.
            assert!(worker_affinity(2).unwrap().iter().all(|m| m == &all));
            assert!(none.apply_placement().unwrap().is_empty());
            assert_eq!(caller_affinity().unwrap(), all);
        })
        .join()
        .unwrap();
        let _ = std::fs::remove_dir_all(ps_dir("apply1"));
        let _ = std::fs::remove_dir_all(ps_dir("apply2"));
    }

    #[test]
    fn tuned_and_nearest_selections_are_used() {
        let (path, _) = placed_db("db", 2, &[(64, Placement::unpinned(1).unwrap())]);
        let mut ps = problems();
        ps.push(Problem::new("gemv", "f32", [("n", 128), ("k", 32)]).unwrap());
        let p = ExecutionPlan::build(&ps, "soc", &CpuCaps::default(), &opts(path.clone()));
        assert_eq!(p.db_status, "ok");
        assert_eq!(p.table, TableState::Read);
        assert_eq!(p.entries[0].source, Source::Tuned);
        assert!(
            matches!(p.entries[0].kernel, KernelChoice::Gemv(c) if c.params.nr == 2 && c.threads == 1)
        );
        assert_eq!(p.entries[4].source, Source::Nearest);
        assert_eq!(p.counts(), (1, 1, 3));
        // Another SoC or thread budget sees nothing tuned.
        let other = ExecutionPlan::build(&ps, "other", &CpuCaps::default(), &opts(path.clone()));
        assert_eq!(other.counts(), (0, 0, 5));
        assert!(
            !other.db_status.contains("kernel ABI"),
            "{}",
            other.db_status
        );
        // Nor does this version on a table tuned under another kernel ABI,
        // and the status says why.
        {
            let mut db = SelectorDb::open(&path).unwrap();
            register_soc(&mut db, "soc2");
            let mut old = db.selections(Some("soc")).unwrap().remove(0);
            old.soc = "soc2".into();
            old.kernel_abi = KERNEL_ABI - 1;
            db.put_selection(&old).unwrap();
        }
        let stale = ExecutionPlan::build(&ps, "soc2", &CpuCaps::default(), &opts(path));
        assert_eq!(stale.counts(), (0, 0, 5));
        assert!(
            stale
                .db_status
                .contains("1 selection(s) from another kernel ABI"),
            "{}",
            stale.db_status
        );
        let _ = std::fs::remove_dir_all(ps_dir("db"));
    }

    /// The two problems of the verdict tests, a decode and a prefill one.
    fn phase_problems() -> Vec<Problem> {
        vec![
            Problem::new("gemv", "f32", [("n", 64), ("k", 32)]).unwrap(),
            Problem::new("gemm", "f32", [("m", 16), ("n", 64), ("k", 32)]).unwrap(),
        ]
    }

    /// Stores the default GEMM on `threads` as the selection of `p` (an
    /// f32 GEMM problem).
    fn select_default_gemm(path: &std::path::Path, p: &Problem, threads: usize) {
        let mut db = SelectorDb::open(path).unwrap();
        let mut sel = db.selections(Some("soc")).unwrap().remove(0);
        sel.problem = p.clone();
        let caps = CpuCaps::default();
        let d = |name| p.dim(name).unwrap();
        let g = KernelChoice::default_for(
            Op::Gemm,
            WeightKind::F32,
            d("m"),
            d("n"),
            d("k"),
            &caps,
            threads,
            None,
        );
        sel.winner =
            tiletune_tables::Candidate::new(g.variant(), g.params_json(), threads).unwrap();
        db.put_selection(&sel).unwrap();
    }

    /// Stores a 2-thread verdict of `model`'s `phase` on the choices
    /// `digest`, with `test` timed 3 rounds at `ratio`.
    fn put_verdict(
        path: &std::path::Path,
        model: &str,
        phase: tiletune_tables::Phase,
        digest: String,
        (test, ratio, won): (&str, f64, bool),
    ) {
        let mut db = SelectorDb::open(path).unwrap();
        let c = tiletune_tables::Campaign::new("soc", "test", KERNEL_ABI, "adaptive");
        db.start_campaign(&c).unwrap();
        db.put_verdict(&tiletune_tables::Verdict {
            soc: "soc".into(),
            kernel_abi: KERNEL_ABI,
            model: model.into(),
            model_name: "m.gguf".into(),
            phase,
            threads: 2,
            plan_digest: digest,
            test: test.into(),
            default_s: vec![1.0; 3],
            tuned_s: vec![1.0 / ratio; 3],
            ratio,
            won,
            campaign: Some(c.id.clone()),
            measured_at: 1,
        })
        .unwrap();
    }

    /// The model decides: a phase's tuned choices run only where a stored
    /// verdict for exactly those choices says they won; a lost or stale
    /// verdict gives that phase its defaults, and each moved line says why.
    #[test]
    fn verdicts_decide_per_phase_whether_tuned_choices_run() {
        use tiletune_tables::Phase;
        let (path, _) = placed_db("verdict", 2, &[(64, Placement::unpinned(1).unwrap())]);
        let ps = phase_problems();
        // A prefill winner too (1 thread: not the default's 2).
        select_default_gemm(&path, &ps[1], 1);
        let caps = CpuCaps::default();
        let unchecked = ExecutionPlan::build(&ps, "soc", &caps, &opts(path.clone()));
        assert_eq!(unchecked.counts(), (2, 0, 0), "{unchecked}");
        assert!(
            unchecked.to_string().contains("run unverified"),
            "{unchecked}"
        );
        let tuned = ExecutionPlan::build_unverified(&ps, "soc", &caps, &opts(path.clone()));
        let put = |phase: Phase, won: bool, digest: String| {
            let ratio = if won { 1.11 } else { 0.98 };
            put_verdict(&path, &tuned.model, phase, digest, ("tg128", ratio, won));
        };
        // Decode won, prefill lost: only decode runs tuned.
        put(Phase::Decode, true, tuned.digest(Phase::Decode));
        put(Phase::Prefill, false, tuned.digest(Phase::Prefill));
        let p = ExecutionPlan::build(&ps, "soc", &caps, &opts(path.clone()));
        assert_eq!(p.entries[0].source, Source::Tuned);
        assert_eq!(p.entries[1].source, Source::Default);
        let note = p.entries[1].note.as_deref().unwrap();
        assert!(note.contains("not used: see the prefill verdict"), "{note}");
        assert!(
            p.to_string().contains("verdict prefill: tuned did not win"),
            "{p}"
        );
        let text = p.to_string();
        assert!(
            text.contains("verdict decode: tuned won, tg128 1.11x"),
            "{text}"
        );
        assert_eq!(p.to_json()["verdicts"][0]["phase"], "prefill");
        assert_eq!(p.to_json()["verdicts"][0]["tuned_runs"], json!(false));
        // A verdict for other choices is stale: the defaults run.
        put(Phase::Decode, true, "0000".into());
        let p = ExecutionPlan::build(&ps, "soc", &caps, &opts(path.clone()));
        assert_eq!(p.counts(), (0, 0, 2));
        assert!(
            p.to_string()
                .contains("changed since the model-level check"),
            "{p}"
        );
        // The unverified plan ignores verdicts: it is what tune times.
        let again = ExecutionPlan::build_unverified(&ps, "soc", &caps, &opts(path.clone()));
        assert_eq!(again.counts(), (2, 0, 0));
        assert_eq!(again.digest(Phase::Decode), tuned.digest(Phase::Decode));
        let d = ExecutionPlan::build_default(&ps, "soc", &caps, &opts(path));
        assert_eq!(d.counts(), (0, 0, 2));
        let _ = std::fs::remove_dir_all(ps_dir("verdict"));
    }

    /// A lost verdict gives its phase the defaults, and says so on each
    /// entry it moved; an entry whose table choice is its default (a
    /// campaign kept the default: no lead held) was not moved and says
    /// nothing.
    #[test]
    fn a_lost_verdict_notes_only_the_choices_it_turned_down() {
        use tiletune_tables::Phase;
        let (path, _) = placed_db("turned", 2, &[(64, Placement::unpinned(1).unwrap())]);
        let mut ps = phase_problems();
        ps.push(Problem::new("gemm", "f32", [("m", 64), ("n", 64), ("k", 32)]).unwrap());
        select_default_gemm(&path, &ps[1], 1);
        select_default_gemm(&path, &ps[2], 2);
        let caps = CpuCaps::default();
        let tuned = ExecutionPlan::build_unverified(&ps, "soc", &caps, &opts(path.clone()));
        assert_eq!(tuned.counts(), (3, 0, 0), "{tuned}");
        let digest = tuned.digest(Phase::Prefill);
        put_verdict(
            &path,
            &tuned.model,
            Phase::Prefill,
            digest,
            ("pp512", 0.9, false),
        );
        let p = ExecutionPlan::build(&ps, "soc", &caps, &opts(path));
        assert_eq!(p.entries[1].source, Source::Default);
        let note = p.entries[1].note.as_deref().unwrap_or_default();
        assert!(note.contains("not used: see the prefill verdict"), "{note}");
        assert_eq!(p.entries[2].source, Source::Default);
        assert_eq!(p.entries[2].note, None, "{p}");
        let _ = std::fs::remove_dir_all(ps_dir("turned"));
    }

    /// Table choices that are the default plan's (the joint layout pass
    /// stores some as selections) run as the defaults: a phase whose
    /// verdict lost on them says the defaults run, not its tuned choices.
    #[test]
    fn choices_that_are_the_defaults_run_as_the_defaults() {
        use tiletune_tables::Phase;
        let (path, _) = placed_db("asdefault", 2, &[(64, Placement::unpinned(1).unwrap())]);
        let ps = phase_problems();
        select_default_gemm(&path, &ps[1], 2);
        let caps = CpuCaps::default();
        let tuned = ExecutionPlan::build_unverified(&ps, "soc", &caps, &opts(path.clone()));
        let default = ExecutionPlan::build_default(&ps, "soc", &caps, &opts(path.clone()));
        assert_eq!(tuned.entries[1].source, Source::Tuned);
        assert_eq!(tuned.digest(Phase::Prefill), default.digest(Phase::Prefill));
        // Both choices come from the table; only decode's is not its default.
        assert_eq!((tuned.counts().0, tuned.differ), (2, 1), "{tuned}");
        assert!(
            tuned
                .summary()
                .contains("; 1 differ from the default plan;")
        );
        assert_eq!(tuned.to_json()["counts"]["differ"], 1);
        // `tune --model` times nothing of such a phase and stores no
        // verdict for it: the plan says so, not "no check stored".
        let p = ExecutionPlan::build(&ps, "soc", &caps, &opts(path.clone()));
        let text = p.to_string();
        assert!(
            text.contains(
                "verdict prefill: 1 choice(s) from the table, each the default plan's \
                 (nothing to time); the defaults run"
            ),
            "{text}"
        );
        assert_eq!(p.to_json()["verdicts"][0]["state"], "as default");
        let digest = tuned.digest(Phase::Prefill);
        put_verdict(
            &path,
            &tuned.model,
            Phase::Prefill,
            digest,
            ("pp512", 0.91, false),
        );
        let p = ExecutionPlan::build(&ps, "soc", &caps, &opts(path));
        let text = p.to_string();
        assert!(
            text.contains("verdict prefill: tuned did not win beyond the noise")
                && text.contains("(m.gguf, 2 threads); the defaults run"),
            "{text}"
        );
        assert_eq!(p.to_json()["verdicts"][0]["tuned_runs"], json!(false));
        let _ = std::fs::remove_dir_all(ps_dir("asdefault"));
    }

    /// A quantized weight holds one layout, its decode choice's: when
    /// decode's tuned choice won and prefill's lost, prefill's defaults
    /// would run moved onto decode's layout, which neither verdict timed,
    /// so the whole model runs the default plan; a verdict timing exactly
    /// that mix lets it run when it won, and not when it lost.
    #[test]
    fn a_phase_runs_only_choices_a_verdict_timed_beside_the_other_phase() {
        use tiletune_tables::{Campaign, Candidate, Selection};
        let caps = CpuCaps::default();
        let ps = vec![
            Problem::new("gemv", "q4_0", [("n", 64), ("k", 64)]).unwrap(),
            Problem::new("gemm", "q4_0", [("m", 16), ("n", 64), ("k", 64)]).unwrap(),
        ];
        let default_nr = match default_choice(&ps[1], &caps, 2, None) {
            KernelChoice::QGemm(q) => q.params.nr,
            other => panic!("q4_0 prefill defaults to {other}"),
        };
        let nr = if default_nr == 4 { 8 } else { 4 };
        let dir = ps_dir("mix");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sel.db");
        let mut db = SelectorDb::open(&path).unwrap();
        register_soc(&mut db, "soc");
        for (p, mr) in [(&ps[0], 1), (&ps[1], 2)] {
            let params = json!({"mr": mr, "nr": nr, "pf": 0, "ku": 1});
            db.put_selection(&Selection {
                soc: "soc".into(),
                kernel_abi: KERNEL_ABI,
                problem: p.clone(),
                thread_budget: 2,
                winner: Candidate::new("scalar.qgemm", params, 1).unwrap(),
                median_ns: 1.0,
                default_ns: None,
                speedup: None,
                campaign: None,
                selected_at: 0,
            })
            .unwrap();
        }
        drop(db);
        let o = opts(path.clone());
        let tuned = ExecutionPlan::build_unverified(&ps, "soc", &caps, &o);
        let default = ExecutionPlan::build_default(&ps, "soc", &caps, &o);
        let decode_only = Mix {
            prefill: false,
            decode: true,
        };
        let mix = ExecutionPlan::build_mix(&ps, "soc", &caps, &o, decode_only);
        assert_ne!(
            mix.digest(Phase::Prefill),
            default.digest(Phase::Prefill),
            "the prefill defaults move onto decode's layout: {mix}"
        );
        let put = |phase: Phase, won: bool, digest: String| {
            let mut db = SelectorDb::open(&path).unwrap();
            let c = Campaign::new("soc", "test", KERNEL_ABI, "adaptive");
            db.start_campaign(&c).unwrap();
            db.put_verdict(&Verdict {
                soc: "soc".into(),
                kernel_abi: KERNEL_ABI,
                model: tuned.model.clone(),
                model_name: "m.gguf".into(),
                phase,
                threads: 2,
                plan_digest: digest,
                test: "pp512".into(),
                default_s: vec![1.0, 1.0, 1.0],
                tuned_s: vec![0.9, 0.9, 0.9],
                ratio: if won { 1.11 } else { 0.95 },
                won,
                campaign: Some(c.id.clone()),
                measured_at: 1,
            })
            .unwrap();
        };
        let runs = |p: &ExecutionPlan| Phase::ALL.map(|ph| p.digest(ph));
        // What `tune --model` times after a split verdict: prefill beside
        // decode's tuned choices; nothing after an agreeing one.
        let won = |p: Phase| p == Phase::Decode;
        assert_eq!(mix.untimed_phases(&tuned, &default, won), [Phase::Prefill]);
        assert!(tuned.untimed_phases(&tuned, &default, |_| true).is_empty());
        assert!(
            default
                .untimed_phases(&tuned, &default, |_| false)
                .is_empty()
        );
        put(Phase::Decode, true, tuned.digest(Phase::Decode));
        put(Phase::Prefill, false, tuned.digest(Phase::Prefill));
        let p = ExecutionPlan::build(&ps, "soc", &caps, &o);
        assert_eq!(runs(&p), runs(&default), "{p}");
        let text = p.to_string();
        assert!(
            text.contains("verdict decode: tuned won") && text.contains("no check timed them with"),
            "{text}"
        );
        // The mix timed and faster: it runs.
        put(Phase::Prefill, true, mix.digest(Phase::Prefill));
        let p = ExecutionPlan::build(&ps, "soc", &caps, &o);
        assert_eq!(runs(&p), runs(&mix), "{p}");
        let text = p.to_string();
        assert!(
            text.contains(
                "verdict prefill: timed as it runs beside the decode phase's choices, won"
            ) && text.contains("the defaults run on the layouts the decode phase's choices hold"),
            "{text}"
        );
        assert_eq!(p.to_json()["verdicts"][0]["state"], "mixed");
        // The mix timed and not faster: the default plan runs.
        put(Phase::Prefill, false, mix.digest(Phase::Prefill));
        let p = ExecutionPlan::build(&ps, "soc", &caps, &o);
        assert_eq!(runs(&p), runs(&default), "{p}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
