//! A campaign: for each problem, enumerate candidates, validate each against
//! the scalar reference before timing it, search, and record the winner.
//!
//! The campaign talks to the kernels through [`KernelProblem`], to the clock
//! through [`Measure`] and to the database through [`Store`], so the
//! orchestration (resume, validation, budget, selection) is tested here with
//! fakes, including a deliberately wrong and deliberately fast candidate.

use crate::TunerError;
use crate::strategy::{self, Coords, Evaluator, FULL_FIDELITY, Score, Strategy};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tiletune_bench::stats::median;
use tiletune_tables::{Candidate, Placement, Problem};

/// Coordinates of a candidate for neighbourhood search: variant, each
/// param, and its thread placement (`t2`, or `t2@cluster1` when pinned), so
/// moving along `threads` also moves between clusters.
pub fn coords(c: &Candidate) -> Coords {
    let mut v = vec![("variant".to_string(), c.variant().to_string())];
    if let serde_json::Value::Object(m) = c.params() {
        for (k, val) in m {
            v.push((k.clone(), val.to_string()));
        }
    } else {
        v.push(("params".into(), c.params().to_string()));
    }
    v.push(("threads".into(), c.placement().name()));
    v
}

/// A kernel problem instantiated with concrete inputs, ready to be validated
/// and timed. One implementation per kernel family lives in `families/`.
pub trait KernelProblem: Send {
    fn spec(&self) -> &Problem;
    /// The search space; entry [`KernelProblem::default_index`] is the
    /// analytic default.
    fn candidates(&self) -> &[Candidate];
    fn default_index(&self) -> usize;
    /// Runs candidate `i` once on the problem's inputs and returns its error
    /// against the scalar reference (max scale-aware relative error), or an
    /// error message if the kernel refused the candidate.
    fn validate(&mut self, i: usize) -> Result<f32, String>;
    /// The dtype's tolerance for [`KernelProblem::validate`].
    fn tolerance(&self) -> f32;
    /// One run of candidate `i`: what gets timed.
    fn run(&mut self, i: usize);
    /// Bytes moved and flops done by one run, for GB/s and GFLOP/s.
    fn work(&self) -> Work;
    /// Makes what validating and timing read, where a family makes it
    /// lazily (operands, references, weight copies); the campaign calls it
    /// before the problem's search and does not count it against the
    /// budget (making operands is not what is being timed). An error here
    /// is reported by the first validation.
    fn prepare(&mut self) {}
    /// Frees what only validating and timing needed; the campaign calls it
    /// when it is done with the problem, so it holds one problem's operands
    /// at a time. A later use makes them again.
    fn release(&mut self) {}
}

pub use tiletune_tables::Work;

/// Statistics of one measurement, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub median_s: f64,
    pub mad_s: f64,
    pub samples: usize,
    /// Counters and derived metrics read around the timed region (or the
    /// software fallback), as JSON.
    pub counters: serde_json::Value,
}

/// Times a closure. `fidelity` scales the measurement effort.
pub trait Measure {
    fn measure(&mut self, fidelity: u32, run: &mut (dyn FnMut() + Send)) -> Stats;

    /// The problem measured next has this thread budget (its candidates'
    /// most threads): the runtime runs it inside a pool that large.
    fn use_budget(&mut self, _threads: usize) {}

    /// The candidate measured next runs on `threads` threads: a harness
    /// counts that pool's workers with the caller.
    fn use_threads(&mut self, _threads: usize) {}

    /// The candidate measured next runs on `placement`: a harness counts
    /// that pool's workers and, when the placement is pinned, pins the
    /// caller to its CPUs and each worker to one of them for the
    /// measurement (restoring them afterwards). The default knows only the
    /// thread count.
    fn use_placement(&mut self, placement: &Placement) {
        self.use_threads(placement.threads());
    }
}

/// A measurement as the store records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasurementRecord {
    pub problem: Problem,
    pub candidate: Candidate,
    pub fidelity: u32,
    pub outcome: Outcome,
    /// The problem's work model, stored with the measurement for reports.
    pub work: Work,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Outcome {
    Valid(Stats),
    Invalid { reason: String },
}

/// The winner of one problem.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Selection {
    pub problem: Problem,
    pub winner: Candidate,
    pub median_s: f64,
    pub default: Candidate,
    pub default_s: f64,
    /// Budget of threads the selection is for (the largest count searched).
    pub thread_budget: usize,
}

impl Selection {
    pub fn speedup(&self) -> f64 {
        self.default_s / self.median_s
    }
}

/// Where measurements and selections go. Implemented over the SQLite table by
/// the binary; the tests use an in-memory fake.
pub trait Store {
    /// A measurement already taken for this problem and candidate at this
    /// fidelity or higher (so a resumed campaign skips it).
    fn existing(
        &mut self,
        problem: &Problem,
        candidate: &Candidate,
        fidelity: u32,
    ) -> Option<Outcome>;
    /// Commits one measurement at once: a killed campaign loses at most the
    /// measurement in flight.
    fn record(&mut self, m: &MeasurementRecord) -> Result<(), TunerError>;
    fn select(&mut self, s: &Selection) -> Result<(), TunerError>;
}

/// Settings of one campaign.
#[derive(Debug, Clone)]
pub struct CampaignConfig {
    pub strategy: Strategy,
    /// Wall-clock budget for measuring (each problem's `prepare` is not
    /// counted); the best so far is kept.
    pub budget: Option<Duration>,
    /// Raised from another thread to stop the campaign at the next
    /// candidate: what was measured is stored, no selection is made for
    /// the problem in flight and the rest are not started.
    pub stop: Option<Arc<AtomicBool>>,
    /// Each problem's weight in dividing the budget, in the order the
    /// problems are given ([`workload_order`]); empty (or short), the
    /// problems left out weigh 1.
    pub shares: Vec<f64>,
}

impl CampaignConfig {
    /// Whether [`CampaignConfig::stop`] was raised.
    pub fn stopped(&self) -> bool {
        self.stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
    }
}

/// What happened to one problem.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProblemReport {
    pub problem: Problem,
    pub selection: Option<Selection>,
    pub evaluations: usize,
    pub invalid: usize,
    pub stopped_by_budget: bool,
    /// Why no selection was made, if none was.
    pub note: Option<String>,
}

/// Observes progress (the binary draws a progress bar).
pub trait Progress {
    fn problem_started(
        &mut self,
        _index: usize,
        _total: usize,
        _problem: &Problem,
        _candidates: usize,
    ) {
    }
    fn evaluated(&mut self, _candidate: &Candidate, _best_s: Option<f64>) {}
    fn problem_done(&mut self, _report: &ProblemReport) {}
}

impl Progress for () {}

/// A decode GEMV reads its weight once for one row, at the memory roof; it
/// takes about as long as this many rows of the prefill GEMM on the same
/// weight (Qwen2.5-0.5B Q4_K_M on two threads, `tiletune compare` in
/// docs/PERF.md: tg64 60.0 t/s, 16.7 ms a token; pp512 561.1 t/s, 1.8 ms a
/// prompt row).
pub const GEMV_ROWS: f64 = 8.0;

/// The share of the budget a problem the workload does not run gets,
/// against 1 for each problem it runs: enough to screen its candidates and
/// time the default, so a selection is made where one clearly wins.
pub const UNRUN_SHARE: f64 = 0.25;

/// Orders a model's problems for a campaign, by their estimated share of
/// the workload's time, largest first, with the share of the budget each
/// gets. `calls` is how many times one workload run calls a problem's
/// kernel (on every matrix it runs on); a call's time is estimated as its
/// rows (m, or [`GEMV_ROWS`] for a GEMV) × n × k. The problems the
/// workload never runs (other prompt-length buckets, the GEMMs only
/// perplexity runs) come last, in the order given, with [`UNRUN_SHARE`]
/// each. A problem's share is not its weight: a search needs about as many
/// evaluations on a light problem as on a heavy one, and an evaluation
/// takes the harness's minimum time on most. Returns `(index into
/// problems, share)` in campaign order.
pub fn workload_order(problems: &[Problem], calls: impl Fn(&Problem) -> f64) -> Vec<(usize, f64)> {
    let time = |p: &Problem| {
        let rows = p.dim("m").map_or(GEMV_ROWS, |m| m as f64);
        let n = p.dim("n").unwrap_or(1) as f64;
        let k = p.dim("k").unwrap_or(1) as f64;
        let t = calls(p) * rows * n * k;
        if t.is_finite() && t > 0.0 { t } else { 0.0 }
    };
    let mut order: Vec<(usize, f64)> = problems.iter().map(time).enumerate().collect();
    if order.iter().all(|&(_, t)| t == 0.0) {
        // The workload runs none of them: equal shares, as given.
        return order.into_iter().map(|(i, _)| (i, 1.0)).collect();
    }
    order.sort_by(|a, b| b.1.total_cmp(&a.1));
    order
        .into_iter()
        .map(|(i, t)| (i, if t > 0.0 { 1.0 } else { UNRUN_SHARE }))
        .collect()
}

/// Why a problem the budget left no time for has no selection.
const BUDGET_RAN_OUT: &str =
    "not timed: the budget ran out; run the same command again to continue";

/// Runs a campaign over already-instantiated problems.
pub fn run_campaign(
    problems: &mut [Box<dyn KernelProblem + '_>],
    cfg: &CampaignConfig,
    measure: &mut dyn Measure,
    store: &mut dyn Store,
    progress: &mut dyn Progress,
) -> Vec<ProblemReport> {
    let mut deadline = cfg.budget.map(|b| Instant::now() + b);
    let total = problems.len();
    let mut reports = Vec::new();
    for (pi, problem) in problems.iter_mut().enumerate() {
        if cfg.stopped() {
            break;
        }
        let spec = problem.spec().clone();
        let coords: Vec<Coords> = problem.candidates().iter().map(coords).collect();
        progress.problem_started(pi, total, &spec, coords.len());
        if deadline.is_some_and(|d| Instant::now() >= d) {
            // Nothing of it can be timed: its search would stop before the
            // first evaluation, and no selection is made without one. Its
            // operands are not made nor its default timed (seconds each on
            // an LM head, for a row of dashes in the report).
            let report = ProblemReport {
                problem: spec,
                selection: None,
                evaluations: 0,
                invalid: 0,
                stopped_by_budget: true,
                note: Some(BUDGET_RAN_OUT.into()),
            };
            progress.problem_done(&report);
            reports.push(report);
            continue;
        }
        let made = Instant::now();
        problem.prepare();
        deadline = deadline.map(|d| d + made.elapsed());
        measure.use_budget(
            problem
                .candidates()
                .iter()
                .map(|c| c.threads())
                .max()
                .unwrap_or(1),
        );
        let default = problem.default_index();
        // Each problem gets its share of the budget still left, and what
        // one leaves unused carries over to the rest: a budget used up by
        // the first (largest) problems would leave the last ones with no
        // selection at all (e.g. a model's m = 256 prefill buckets).
        let weight = |i: usize| cfg.shares.get(i).copied().unwrap_or(1.0);
        let fraction = match weight(pi) / (pi..total).map(weight).sum::<f64>() {
            f if f.is_finite() && f > 0.0 => f.min(1.0),
            // Shares that are not positive numbers: equal ones.
            _ => 1.0 / (total - pi) as f64,
        };
        let share = deadline.map(|d| {
            let now = Instant::now();
            now + d.saturating_duration_since(now).mul_f64(fraction)
        });
        let mut ev = CampaignEvaluator {
            problem: problem.as_mut(),
            measure: &mut *measure,
            store: &mut *store,
            deadline: share,
            stop: cfg.stop.as_deref(),
            progress: &mut *progress,
            best: None,
            invalid: 0,
            store_error: None,
        };
        let result = strategy::search(cfg.strategy, &coords, default, &mut ev);
        if cfg.stopped() {
            // What was measured is stored: the same campaign resumes there.
            let report = ProblemReport {
                problem: spec,
                selection: None,
                evaluations: result.evaluations.len(),
                invalid: ev.invalid,
                stopped_by_budget: false,
                note: Some("stopped before a selection".into()),
            };
            problem.release();
            progress.problem_done(&report);
            reports.push(report);
            break;
        }
        // The default is always measured at full fidelity, even past the
        // budget, so every selection carries an honest speedup.
        let default_score = ev.eval_scored(default, FULL_FIDELITY);
        let best_score = result.best.and_then(|b| ev.eval_scored(b, FULL_FIDELITY));
        let default_s = default_score.map(|s| s.seconds);
        let best_s = best_score.map(|s| s.seconds);
        let invalid = ev.invalid;
        let mut note = ev.store_error.take();
        let selection = match (result.best, best_s, default_s) {
            (Some(b), Some(bs), Some(ds)) => {
                let thread_budget = (ev.problem.candidates().iter())
                    .map(|c| c.threads())
                    .max()
                    .unwrap_or(1);
                // The default is a valid candidate too: never select something
                // slower than it, nor something whose lead is within the
                // noise (the two medians' confidence intervals overlap): a
                // "1.01×" winner on a noisy machine is as likely slower.
                let clearly_faster = match (best_score, default_score) {
                    (Some(b), Some(d)) => b.seconds + b.half_width < d.seconds - d.half_width,
                    _ => bs < ds,
                };
                // The two were timed at different moments of the search:
                // a lead that holds is kept only if it also holds back to
                // back (`head_to_head`), and is then reported as timed there.
                let confirmed = match clearly_faster && b != default {
                    true => ev.head_to_head(default, b),
                    false => None,
                };
                let (winner, median_s, default_s) = match confirmed {
                    Some((d, w)) => (b, w, d),
                    None if b == default => (b, bs, ds),
                    None => {
                        if clearly_faster {
                            let key = ev.problem.candidates()[b].key();
                            note.get_or_insert_with(|| {
                                format!(
                                    "{key} led {:.2}x timed apart, not back to back; the default kept",
                                    ds / bs
                                )
                            });
                        }
                        (default, ds, ds)
                    }
                };
                let cands = ev.problem.candidates();
                Some(Selection {
                    problem: spec.clone(),
                    winner: cands[winner].clone(),
                    median_s,
                    default: cands[default].clone(),
                    default_s,
                    thread_budget,
                })
            }
            (None, _, _) if result.evaluations.is_empty() && result.stopped_by_budget => {
                note.get_or_insert_with(|| BUDGET_RAN_OUT.into());
                None
            }
            (None, _, _) => {
                note.get_or_insert_with(|| "no valid candidate".into());
                None
            }
            _ => {
                note.get_or_insert_with(|| {
                    "the default candidate is invalid on this problem".into()
                });
                None
            }
        };
        if let Some(s) = &selection
            && let Err(e) = store.select(s)
        {
            note = Some(format!("could not store the selection: {e}"));
        }
        problem.release();
        let report = ProblemReport {
            problem: spec,
            selection,
            evaluations: result.evaluations.len(),
            invalid,
            stopped_by_budget: result.stopped_by_budget,
            note,
        };
        progress.problem_done(&report);
        reports.push(report);
    }
    reports
}

struct CampaignEvaluator<'a> {
    problem: &'a mut dyn KernelProblem,
    measure: &'a mut dyn Measure,
    store: &'a mut dyn Store,
    deadline: Option<Instant>,
    stop: Option<&'a AtomicBool>,
    progress: &'a mut dyn Progress,
    best: Option<f64>,
    invalid: usize,
    store_error: Option<String>,
}

/// Half-width of an approximate 68% confidence interval of a median from its
/// MAD: σ ≈ 1.4826·MAD for normal noise, and the median's standard error is
/// ≈ 1.2533·σ/√n (its asymptotic efficiency).
pub fn median_half_width(mad_s: f64, samples: usize) -> f64 {
    if samples == 0 {
        return 0.0;
    }
    1.4826 * 1.2533 * mad_s / (samples as f64).sqrt()
}

/// Back-to-back pairs of the default and the search's best in
/// [`CampaignEvaluator::head_to_head`], in ABBA order (which cancels a
/// steady drift), at a third of full fidelity each.
const CONFIRM_PAIRS: usize = 4;
const CONFIRM_FIDELITY: u32 = FULL_FIDELITY / 3;

impl CampaignEvaluator<'_> {
    /// Candidate `i` timed now, neither looked up nor recorded: the
    /// store's measurement of it was taken at another moment.
    fn time_now(&mut self, i: usize) -> f64 {
        let placement = self.problem.candidates()[i].placement().clone();
        self.measure.use_placement(&placement);
        let problem = &mut *self.problem;
        let s = self
            .measure
            .measure(CONFIRM_FIDELITY, &mut || problem.run(i));
        match s.median_s {
            t if t.is_finite() && t > 0.0 => t,
            _ => f64::NAN,
        }
    }

    /// The default `d` and a challenger `w` timed in [`CONFIRM_PAIRS`]
    /// alternated pairs; their medians (default, challenger) if the
    /// challenger was faster in every pair, else `None`. A search times
    /// each candidate once, and on a VM the bandwidth a memory-bound kernel
    /// gets moves by 1.5× within a minute, so two medians taken minutes
    /// apart can differ by more than the two kernels do (docs/PERF.md,
    /// twelfth sitting).
    fn head_to_head(&mut self, d: usize, w: usize) -> Option<(f64, f64)> {
        let (mut ds, mut ws) = (Vec::new(), Vec::new());
        for pair in 0..CONFIRM_PAIRS {
            let (td, tw) = if pair % 2 == 0 {
                let td = self.time_now(d);
                (td, self.time_now(w))
            } else {
                let tw = self.time_now(w);
                (self.time_now(d), tw)
            };
            // NaN (unmeasurable) is not Less: no win.
            if tw.partial_cmp(&td) != Some(std::cmp::Ordering::Less) {
                return None;
            }
            ds.push(td);
            ws.push(tw);
        }
        Some((median(&ds), median(&ws)))
    }
}

impl Evaluator for CampaignEvaluator<'_> {
    fn eval(&mut self, i: usize, fidelity: u32) -> Option<f64> {
        self.eval_scored(i, fidelity).map(|s| s.seconds)
    }

    fn eval_scored(&mut self, i: usize, fidelity: u32) -> Option<Score> {
        let spec = self.problem.spec().clone();
        let cand = self.problem.candidates()[i].clone();
        let outcome = match self.store.existing(&spec, &cand, fidelity) {
            Some(o) => o,
            None => {
                // Validate before timing: a candidate that disagrees with the
                // reference is recorded as invalid and never timed.
                let tol = self.problem.tolerance();
                let outcome = match self.problem.validate(i) {
                    Err(reason) => Outcome::Invalid { reason },
                    // NaN error counts as a mismatch.
                    Ok(err) if err.is_nan() || err > tol => Outcome::Invalid {
                        reason: format!("max relative error {err:.3e} exceeds tolerance {tol:.1e}"),
                    },
                    Ok(_) => {
                        self.measure.use_placement(cand.placement());
                        let problem = &mut *self.problem;
                        let stats = self.measure.measure(fidelity, &mut || problem.run(i));
                        if stats.median_s.is_finite() && stats.median_s > 0.0 {
                            Outcome::Valid(stats)
                        } else {
                            Outcome::Invalid {
                                reason: format!("could not be measured: {}", stats.counters),
                            }
                        }
                    }
                };
                let rec = MeasurementRecord {
                    problem: spec,
                    candidate: cand.clone(),
                    fidelity,
                    outcome: outcome.clone(),
                    work: self.problem.work(),
                };
                if let Err(e) = self.store.record(&rec) {
                    self.store_error
                        .get_or_insert(format!("could not store a measurement: {e}"));
                }
                outcome
            }
        };
        let score = match outcome {
            Outcome::Valid(s) => Some(Score {
                seconds: s.median_s,
                half_width: median_half_width(s.mad_s, s.samples),
            }),
            Outcome::Invalid { .. } => {
                self.invalid += 1;
                None
            }
        };
        if let Some(s) = score {
            self.best = Some(self.best.map_or(s.seconds, |b: f64| b.min(s.seconds)));
        }
        self.progress.evaluated(&cand, self.best);
        score
    }

    fn budget_left(&self) -> bool {
        self.deadline.is_none_or(|d| Instant::now() < d)
            && !self.stop.is_some_and(|s| s.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A fake problem: candidate times are fixed; candidate "wrong" is the
    /// fastest but its output is wrong.
    struct Fake {
        spec: Problem,
        cands: Vec<Candidate>,
        times: Vec<f64>,
        wrong: Vec<bool>,
        last: usize,
        runs: usize,
    }

    fn fake(n: usize) -> Fake {
        let mut cands = Vec::new();
        let mut times = Vec::new();
        let mut wrong = Vec::new();
        for i in 0..n {
            cands.push(Candidate::new("scalar", serde_json::json!({ "rows": i }), 1).unwrap());
            times.push(10.0 - i as f64 * 0.5);
            wrong.push(false);
        }
        cands.push(Candidate::new("wrong_fast", serde_json::json!({ "rows": 0 }), 1).unwrap());
        times.push(0.001);
        wrong.push(true);
        Fake {
            spec: Problem::new("gemv", "f32", [("n", 8), ("k", 8)]).unwrap(),
            cands,
            times,
            wrong,
            last: 0,
            runs: 0,
        }
    }

    impl KernelProblem for Fake {
        fn spec(&self) -> &Problem {
            &self.spec
        }
        fn candidates(&self) -> &[Candidate] {
            &self.cands
        }
        fn default_index(&self) -> usize {
            0
        }
        fn validate(&mut self, i: usize) -> Result<f32, String> {
            Ok(if self.wrong[i] { 0.5 } else { 0.0 })
        }
        fn tolerance(&self) -> f32 {
            1e-5
        }
        fn run(&mut self, i: usize) {
            self.last = i;
            self.runs += 1;
        }
        fn work(&self) -> Work {
            Work::default()
        }
    }

    /// Reports the fake's scripted time for whichever candidate ran.
    struct FakeMeasure<'a>(
        &'a std::cell::RefCell<Vec<f64>>,
        std::sync::Arc<std::sync::atomic::AtomicUsize>,
    );
    impl Measure for FakeMeasure<'_> {
        fn measure(&mut self, _f: u32, run: &mut (dyn FnMut() + Send)) -> Stats {
            run();
            Stats {
                median_s: self.0.borrow()[self.1.load(std::sync::atomic::Ordering::Relaxed)],
                mad_s: 0.0,
                samples: 1,
                counters: serde_json::Value::Null,
            }
        }
    }

    #[derive(Default)]
    struct MemStore {
        m: HashMap<(String, String), (u32, Outcome)>,
        records: usize,
        selections: Vec<Selection>,
    }
    impl Store for MemStore {
        fn existing(&mut self, p: &Problem, c: &Candidate, f: u32) -> Option<Outcome> {
            self.m
                .get(&(p.to_string(), c.key()))
                .filter(|(fid, o)| *fid >= f || matches!(o, Outcome::Invalid { .. }))
                .map(|(_, o)| o.clone())
        }
        fn record(&mut self, r: &MeasurementRecord) -> Result<(), TunerError> {
            self.records += 1;
            self.m.insert(
                (r.problem.to_string(), r.candidate.key()),
                (r.fidelity, r.outcome.clone()),
            );
            Ok(())
        }
        fn select(&mut self, s: &Selection) -> Result<(), TunerError> {
            self.selections.push(s.clone());
            Ok(())
        }
    }

    /// Wraps a Fake so the measure sees which candidate ran.
    struct Tracked {
        inner: Fake,
        current: std::sync::Arc<std::sync::atomic::AtomicUsize>,
        calls: std::sync::Arc<Calls>,
    }

    /// What the campaign asked of a problem besides runs.
    #[derive(Default)]
    struct Calls {
        prepares: std::sync::atomic::AtomicUsize,
        releases: std::sync::atomic::AtomicUsize,
        /// Validations and runs before the first prepare or after a release.
        outside: std::sync::atomic::AtomicUsize,
    }

    impl Calls {
        fn inside(&self) {
            use std::sync::atomic::Ordering::Relaxed;
            if self.prepares.load(Relaxed) == 0 || self.releases.load(Relaxed) > 0 {
                self.outside.fetch_add(1, Relaxed);
            }
        }
    }
    impl KernelProblem for Tracked {
        fn spec(&self) -> &Problem {
            self.inner.spec()
        }
        fn candidates(&self) -> &[Candidate] {
            self.inner.candidates()
        }
        fn default_index(&self) -> usize {
            0
        }
        fn validate(&mut self, i: usize) -> Result<f32, String> {
            self.calls.inside();
            self.inner.validate(i)
        }
        fn tolerance(&self) -> f32 {
            self.inner.tolerance()
        }
        fn run(&mut self, i: usize) {
            self.calls.inside();
            self.current.store(i, std::sync::atomic::Ordering::Relaxed);
            self.inner.run(i)
        }
        fn work(&self) -> Work {
            Work::default()
        }
        fn prepare(&mut self) {
            self.calls
                .prepares
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        fn release(&mut self) {
            self.calls
                .releases
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn run(strategy: Strategy, store: &mut MemStore) -> (Vec<ProblemReport>, usize) {
        let f = fake(6);
        let times = std::cell::RefCell::new(f.times.clone());
        let cur = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let calls = std::sync::Arc::<Calls>::default();
        let mut problems: Vec<Box<dyn KernelProblem>> = vec![Box::new(Tracked {
            inner: f,
            current: cur.clone(),
            calls: std::sync::Arc::clone(&calls),
        })];
        let mut m = FakeMeasure(&times, cur);
        let cfg = CampaignConfig {
            strategy,
            budget: None,
            stop: None,
            shares: Vec::new(),
        };
        let r = run_campaign(&mut problems, &cfg, &mut m, store, &mut ());
        // The campaign makes each problem's operands once, before its first
        // validation, and frees them once, after its last run.
        use std::sync::atomic::Ordering::Relaxed;
        assert_eq!(calls.prepares.load(Relaxed), 1, "{strategy:?}");
        assert_eq!(calls.releases.load(Relaxed), 1, "{strategy:?}");
        assert_eq!(calls.outside.load(Relaxed), 0, "{strategy:?}");
        (r, store.records)
    }

    #[test]
    fn wrong_fast_candidate_is_never_selected_nor_timed() {
        for s in [
            Strategy::Exhaustive,
            Strategy::Halving { eta: 2 },
            Strategy::Descent,
            Strategy::ADAPTIVE,
        ] {
            let mut store = MemStore::default();
            let (r, _) = run(s, &mut store);
            let sel = r[0].selection.as_ref().expect("a selection");
            assert_ne!(sel.winner.variant(), "wrong_fast", "{s:?}");
            let wrong = store
                .m
                .iter()
                .find(|((_, k), _)| k.starts_with("wrong_fast/"))
                .map(|(_, (_, o))| o.clone());
            if let Some(o) = wrong {
                assert!(matches!(o, Outcome::Invalid { .. }), "{s:?}: {o:?}");
            }
        }
        let mut store = MemStore::default();
        let (r, _) = run(Strategy::Exhaustive, &mut store);
        assert_eq!(r[0].invalid, 1);
        let sel = r[0].selection.as_ref().unwrap();
        assert_eq!(sel.winner.params()["rows"], 5);
        assert!((sel.speedup() - 10.0 / 7.5).abs() < 1e-9);
    }

    #[test]
    fn resumed_campaign_measures_nothing_twice() {
        let mut store = MemStore::default();
        let (_, first) = run(Strategy::Exhaustive, &mut store);
        assert!(first > 0);
        let (r, total) = run(Strategy::Exhaustive, &mut store);
        assert_eq!(total, first, "a rerun must take no new measurements");
        assert!(r[0].selection.is_some());
        assert_eq!(store.selections.len(), 2);
        assert_eq!(store.selections[0], store.selections[1]);
    }

    /// A stop raised during the first of two problems ends the campaign at
    /// the next candidate: what was measured is stored, no selection is
    /// made and the second problem is not started; run again with the flag
    /// lowered, the same store resumes where it stopped and completes.
    #[test]
    fn a_stop_ends_the_campaign_and_a_rerun_resumes() {
        /// Raises the flag after `after` evaluations.
        struct StopAfter(Arc<AtomicBool>, usize, Vec<String>);
        impl Progress for StopAfter {
            fn problem_started(&mut self, _: usize, _: usize, p: &Problem, _: usize) {
                self.2.push(p.to_string());
            }
            fn evaluated(&mut self, _: &Candidate, _: Option<f64>) {
                self.1 = self.1.saturating_sub(1);
                if self.1 == 0 {
                    self.0.store(true, Ordering::Relaxed);
                }
            }
        }
        let two = |cur: &Arc<std::sync::atomic::AtomicUsize>| -> Vec<Box<dyn KernelProblem>> {
            (0..2)
                .map(|k| {
                    let mut inner = fake(6);
                    inner.spec = Problem::new("gemv", "f32", [("n", 8 + k), ("k", 8)]).unwrap();
                    Box::new(Tracked {
                        inner,
                        current: cur.clone(),
                        calls: Arc::default(),
                    }) as Box<dyn KernelProblem>
                })
                .collect()
        };
        let stop = Arc::new(AtomicBool::new(false));
        let cfg = CampaignConfig {
            strategy: Strategy::Exhaustive,
            budget: None,
            stop: Some(Arc::clone(&stop)),
            shares: Vec::new(),
        };
        let times = std::cell::RefCell::new(fake(6).times);
        let cur = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut store = MemStore::default();
        let mut seen = StopAfter(Arc::clone(&stop), 3, Vec::new());
        let mut m = FakeMeasure(&times, cur.clone());
        let r = run_campaign(&mut two(&cur), &cfg, &mut m, &mut store, &mut seen);
        assert_eq!(seen.2.len(), 1, "the second problem started: {:?}", seen.2);
        assert_eq!(r.len(), 1);
        assert!(r[0].selection.is_none() && !r[0].stopped_by_budget);
        assert_eq!(r[0].note.as_deref(), Some("stopped before a selection"));
        assert_eq!(r[0].evaluations, 3);
        assert_eq!(store.records, 3);
        assert!(store.selections.is_empty());

        stop.store(false, Ordering::Relaxed);
        let mut seen = StopAfter(Arc::new(AtomicBool::new(false)), usize::MAX, Vec::new());
        let r = run_campaign(&mut two(&cur), &cfg, &mut m, &mut store, &mut seen);
        assert_eq!(r.len(), 2);
        assert!(r.iter().all(|p| p.selection.is_some()), "{r:?}");
        // Seven candidates per problem, the three stopped ones not again.
        assert_eq!(store.records, 14);
    }

    /// A lead within the noise does not replace the default: candidate i
    /// takes 10 − 0.01·i s ± a MAD of 0.5 s, so the best (0.5% faster) is
    /// inside the default's interval; with no noise the same lead wins.
    #[test]
    fn a_lead_within_the_noise_keeps_the_default() {
        struct Noisy(std::sync::Arc<std::sync::atomic::AtomicUsize>, f64);
        impl Measure for Noisy {
            fn measure(&mut self, _f: u32, run: &mut (dyn FnMut() + Send)) -> Stats {
                run();
                let i = self.0.load(std::sync::atomic::Ordering::Relaxed);
                Stats {
                    median_s: 10.0 - 0.01 * i as f64,
                    mad_s: self.1,
                    samples: 9,
                    counters: serde_json::Value::Null,
                }
            }
        }
        for (mad, expect_default) in [(0.5, true), (0.0, false)] {
            let cur = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let mut problems: Vec<Box<dyn KernelProblem>> = vec![Box::new(Tracked {
                inner: fake(6),
                current: cur.clone(),
                calls: std::sync::Arc::default(),
            })];
            let cfg = CampaignConfig {
                strategy: Strategy::Exhaustive,
                budget: None,
                stop: None,
                shares: Vec::new(),
            };
            let mut store = MemStore::default();
            let r = run_campaign(
                &mut problems,
                &cfg,
                &mut Noisy(cur, mad),
                &mut store,
                &mut (),
            );
            let sel = r[0].selection.as_ref().expect("a selection");
            assert_eq!(
                sel.winner == sel.default,
                expect_default,
                "mad {mad}: {sel:?}"
            );
            if !expect_default {
                assert_eq!(sel.winner.params()["rows"], 5);
            }
        }
    }

    /// A lead measured in a slow moment of the default's is not kept: the
    /// first measurement (the default's, in an exhaustive search) runs
    /// 1.5× slow, as on a VM whose bandwidth drops for a minute. With every
    /// candidate as fast as the default the default stays, with a note;
    /// with one truly 10% faster it wins, with the speedup timed back to
    /// back (10/9, not 15/9).
    #[test]
    fn a_lead_that_does_not_hold_back_to_back_keeps_the_default() {
        struct SlowFirst(Arc<std::sync::atomic::AtomicUsize>, Vec<f64>, usize);
        impl Measure for SlowFirst {
            fn measure(&mut self, _f: u32, run: &mut (dyn FnMut() + Send)) -> Stats {
                run();
                self.2 += 1;
                let t = self.1[self.0.load(Ordering::Relaxed)];
                Stats {
                    median_s: if self.2 == 1 { 1.5 * t } else { t },
                    mad_s: 0.0,
                    samples: 9,
                    counters: serde_json::Value::Null,
                }
            }
        }
        for (fast, expect) in [(10.0, None), (9.0, Some(10.0 / 9.0))] {
            let cur = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let mut times = vec![10.0; 6];
            times[3] = fast;
            // The wrong candidate is never timed.
            times.push(0.001);
            let mut problems: Vec<Box<dyn KernelProblem>> = vec![Box::new(Tracked {
                inner: fake(6),
                current: cur.clone(),
                calls: Arc::default(),
            })];
            let cfg = CampaignConfig {
                strategy: Strategy::Exhaustive,
                budget: None,
                stop: None,
                shares: Vec::new(),
            };
            let mut m = SlowFirst(cur, times, 0);
            let mut store = MemStore::default();
            let r = run_campaign(&mut problems, &cfg, &mut m, &mut store, &mut ());
            let sel = r[0].selection.as_ref().expect("a selection");
            match expect {
                None => {
                    assert_eq!(sel.winner, sel.default, "{sel:?}");
                    assert_eq!(sel.speedup(), 1.0);
                    let note = r[0].note.as_deref().unwrap_or_default();
                    assert!(note.contains("led 1.50x timed apart, not back"), "{note}");
                }
                Some(speedup) => {
                    assert_eq!(sel.winner.params()["rows"], 3, "{sel:?}");
                    assert!((sel.speedup() - speedup).abs() < 1e-9, "{sel:?}");
                    assert_eq!(r[0].note, None);
                }
            }
            // Six valid candidates recorded once; the pairs are not records.
            assert_eq!(store.records, 7);
        }
    }

    /// Takes real time per measurement, so a budget runs out.
    struct SlowMeasure(Duration);
    impl Measure for SlowMeasure {
        fn measure(&mut self, _f: u32, run: &mut (dyn FnMut() + Send)) -> Stats {
            run();
            std::thread::sleep(self.0);
            Stats {
                median_s: 1.0,
                mad_s: 0.0,
                samples: 1,
                counters: serde_json::Value::Null,
            }
        }
    }

    /// Runs `problems` exhaustively within `budget_ms`, shared by `shares`,
    /// each measurement taking `measure_ms` of real time.
    fn budgeted(
        problems: &mut [Box<dyn KernelProblem>],
        budget_ms: u64,
        shares: Vec<f64>,
        measure_ms: u64,
    ) -> (Vec<ProblemReport>, MemStore) {
        let cfg = CampaignConfig {
            strategy: Strategy::Exhaustive,
            budget: Some(Duration::from_millis(budget_ms)),
            stop: None,
            shares,
        };
        let mut store = MemStore::default();
        let r = run_campaign(
            problems,
            &cfg,
            &mut SlowMeasure(Duration::from_millis(measure_ms)),
            &mut store,
            &mut (),
        );
        (r, store)
    }

    /// A budget smaller than the first problem's search still reaches every
    /// problem: each gets its share of what is left.
    #[test]
    fn a_budget_is_shared_by_every_problem() {
        let mut problems: Vec<Box<dyn KernelProblem>> = (0..3)
            .map(|i| {
                let mut f = fake(40);
                f.spec = Problem::new("gemv", "f32", [("n", 8 + i), ("k", 8)]).unwrap();
                Box::new(f) as Box<dyn KernelProblem>
            })
            .collect();
        let (r, _) = budgeted(&mut problems, 300, Vec::new(), 10);
        // 3 × 41 candidates at 10 ms would take 1.2 s: without shares the
        // first problem alone used the whole 300 ms.
        for p in &r {
            assert!(p.stopped_by_budget, "{}", p.problem);
            assert!(p.selection.is_some(), "{}: {:?}", p.problem, p.note);
            assert!(p.evaluations >= 2, "{}: {}", p.problem, p.evaluations);
        }
    }

    /// A problem reached after the budget is spent is reported as not
    /// timed without its operands made or its default timed: making an LM
    /// head's operands takes seconds, and nothing could be selected.
    #[test]
    fn a_problem_past_the_budget_is_not_prepared() {
        let calls: Vec<std::sync::Arc<Calls>> = (0..2).map(|_| Default::default()).collect();
        let mut problems: Vec<Box<dyn KernelProblem>> = calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut inner = fake(40);
                inner.spec = Problem::new("gemv", "f32", [("n", 8 + i), ("k", 8)]).unwrap();
                Box::new(Tracked {
                    inner,
                    current: Default::default(),
                    calls: std::sync::Arc::clone(c),
                }) as Box<dyn KernelProblem>
            })
            .collect();
        // The first takes the whole budget (and its default and best are
        // timed past it).
        let (r, store) = budgeted(&mut problems, 50, vec![1.0, 0.0], 10);
        use std::sync::atomic::Ordering::Relaxed;
        assert!(r[0].selection.is_some(), "{:?}", r[0].note);
        assert_eq!(calls[0].prepares.load(Relaxed), 1);
        assert_eq!((r[1].evaluations, r[1].stopped_by_budget), (0, true));
        assert!(r[1].selection.is_none());
        assert_eq!(r[1].note.as_deref(), Some(BUDGET_RAN_OUT));
        assert_eq!(calls[1].prepares.load(Relaxed), 0);
        assert_eq!(calls[1].outside.load(Relaxed), 0, "validated or run");
        // Nothing of the second was recorded.
        assert!(store.m.keys().all(|(p, _)| p == &r[0].problem.to_string()));
    }

    /// A problem with four times the weight gets about four times the
    /// evaluations of the same budget.
    #[test]
    fn the_budget_is_shared_by_weight() {
        let mut problems: Vec<Box<dyn KernelProblem>> = (0..2)
            .map(|i| {
                let mut f = fake(200);
                f.spec = Problem::new("gemv", "f32", [("n", 8 + i), ("k", 8)]).unwrap();
                Box::new(f) as Box<dyn KernelProblem>
            })
            .collect();
        let (r, _) = budgeted(&mut problems, 500, vec![4.0, 1.0], 5);
        let (a, b) = (r[0].evaluations as f64, r[1].evaluations as f64);
        assert!(r.iter().all(|p| p.stopped_by_budget));
        assert!(a > 2.5 * b && a < 6.0 * b, "{a} and {b} evaluations");
    }

    #[test]
    fn problems_are_ordered_by_their_share_of_the_workload() {
        let gemv = |n| Problem::new("gemv", "q4_0", [("n", n), ("k", 64)]).unwrap();
        let gemm = |m, n| Problem::new("gemm", "q4_0", [("m", m), ("n", n), ("k", 64)]).unwrap();
        let problems = [
            gemv(64),
            gemv(1024),
            gemm(16, 64),
            gemm(256, 64),
            gemm(256, 1024),
        ];
        // tg128 on 2 matrices of each shape, pp512 on the m = 256 bucket,
        // but the 1024-row weight is the LM head: prefill runs no GEMM of it.
        let calls = |p: &Problem| match (p.op(), p.dim("m"), p.dim("n")) {
            ("gemv", _, Some(1024)) => 128.0,
            ("gemv", _, _) => 256.0,
            ("gemm", Some(256), Some(64)) => 4.0,
            _ => 0.0,
        };
        let order = workload_order(&problems, calls);
        let idx: Vec<usize> = order.iter().map(|&(i, _)| i).collect();
        // Per k: 128 × 8 × 1024, 256 × 8 × 64 and 4 × 256 × 64, then the
        // two problems the workload does not run.
        assert_eq!(idx, [1, 0, 3, 2, 4]);
        let shares: Vec<f64> = order.iter().map(|&(_, s)| s).collect();
        assert_eq!(shares, [1.0, 1.0, 1.0, UNRUN_SHARE, UNRUN_SHARE]);
        // A workload that runs none: equal shares, in the order given.
        let none = workload_order(&problems, |_| 0.0);
        assert_eq!(none, [(0, 1.0), (1, 1.0), (2, 1.0), (3, 1.0), (4, 1.0)]);
    }

    #[test]
    fn candidate_coords_cover_every_param() {
        let c = Candidate::new("avx512", serde_json::json!({"rows": 4, "kc": 256}), 2).unwrap();
        assert_eq!(c.key(), r#"avx512/t2/{"kc":256,"rows":4}"#);
        assert_eq!(coords(&c).len(), 4);
    }
}
