//! One tuning campaign from start to verdict, as `tiletune tune` runs it
//! and the C ABI's campaign handle runs it: the problems (a built-in suite,
//! one problem, or every kernel problem of a GGUF model), their candidates
//! over this SoC's thread placements, the campaign (resumed when an
//! interrupted one of the same kind is in the table), and for a model the
//! joint layout choice and the model-level check whose verdicts are stored.
//! Progress is reported as [`TuneEvent`]s; nothing here prints.

use crate::accept::{CheckOptions, OpenModel, check_model};
use crate::event::TuneEvent;
use crate::{FlowError, Result};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tiletune_bench::Environment;
use tiletune_kernels::KERNEL_ABI;
use tiletune_runtime::plan::{ExecutionPlan, PlanOptions, VerdictCheck};
use tiletune_runtime::problems;
use tiletune_tables::{Campaign, Phase, Problem, SelectorDb, Verdict, now_unix};
use tiletune_tuner::adapters::{DbStore, HarnessMeasure};
use tiletune_tuner::campaign::{
    CampaignConfig, ProblemReport, Progress, run_campaign, workload_order,
};
use tiletune_tuner::families::{self, Machine};
use tiletune_tuner::joint::{self, WeightReport, Workload};
use tiletune_tuner::{Candidate, KernelProblem, Strategy, TunerError, placement, suite};

/// What a campaign tunes.
#[derive(Debug, Clone)]
pub enum Target {
    /// A built-in suite (`llm-decode`, `llm-prefill`) for these weight dtypes.
    Suite { name: String, dtypes: Vec<String> },
    /// One problem: an op, its weight dtype and its shape (`4864x896`).
    Problem {
        op: String,
        dtype: String,
        shape: String,
    },
    /// Every kernel problem of this GGUF model, then the joint layout
    /// choice and the model-level check.
    Model(PathBuf),
}

/// A campaign's settings; [`TuneOptions::new`] gives `tiletune tune`'s
/// defaults.
#[derive(Debug, Clone)]
pub struct TuneOptions {
    pub target: Target,
    /// The selector table the winners and verdicts go to (created if
    /// missing).
    pub db: PathBuf,
    pub strategy: Strategy,
    /// Wall-clock budget for measuring, shared by the problems.
    pub budget: Option<Duration>,
    /// Most threads to search, and the thread budget the winners are
    /// stored for (`None`: every online core).
    pub threads: Option<usize>,
    /// Seed of the random inputs.
    pub seed: u64,
    /// With a model: what the joint layout choice minimises.
    pub workload: Workload,
    /// With a model: alternated rounds of the model-level check (3 or more).
    pub rounds: usize,
    /// With a model: llama.cpp's `mmproj` GGUF of a vision model, whose
    /// tower's GEMMs are tuned too (a GGUF that holds its tower needs none).
    pub mmproj: Option<PathBuf>,
    /// Raised from another thread to stop the campaign: at the next
    /// candidate while measuring, before the model-level check, at its
    /// next round, or after it. [`tune`] then returns
    /// [`FlowError::Stopped`] and the campaign stays open, so running it
    /// again resumes it.
    pub stop: Option<Arc<AtomicBool>>,
}

impl TuneOptions {
    /// `tiletune tune`'s defaults: the adaptive strategy, no budget, every
    /// core, seed 0x7ee1, workload pp512,tg128, 3 rounds.
    pub fn new(target: Target, db: PathBuf) -> Self {
        TuneOptions {
            target,
            db,
            strategy: Strategy::ADAPTIVE,
            budget: None,
            threads: None,
            seed: 0x7ee1,
            workload: Workload::default(),
            rounds: 3,
            mmproj: None,
            stop: None,
        }
    }
}

/// What a model's campaign ends with.
#[derive(Debug)]
pub struct ModelOutcome {
    pub weights: Vec<WeightReport>,
    /// The stored verdict of each phase the check timed.
    pub verdicts: Vec<Verdict>,
    /// The phases it did not time: the tuned plan runs the default plan's
    /// choices in them.
    pub as_default: Vec<Phase>,
    /// What the runtime makes of the verdicts at load, as `tiletune plan`
    /// shows it.
    pub plan_verdicts: Vec<VerdictCheck>,
}

/// What a campaign did.
#[derive(Debug)]
pub struct TuneReport {
    pub campaign: String,
    pub soc_name: String,
    pub db: PathBuf,
    pub problems: Vec<ProblemReport>,
    /// The budget ran out before every problem was searched in full.
    pub out_of_budget: bool,
    pub elapsed: Duration,
    /// With a model target.
    pub model: Option<ModelOutcome>,
}

impl TuneReport {
    /// The report as one JSON document: the problems' reports, and for a
    /// model the weights the joint choice moved, the verdicts and what the
    /// runtime makes of them.
    pub fn to_json(&self) -> serde_json::Value {
        let model = self.model.as_ref().map(|m| {
            let weights: Vec<serde_json::Value> = m
                .weights
                .iter()
                .map(|w| {
                    serde_json::json!({
                        "weight": w.weight,
                        "layout": w.choice.layout.to_string(),
                        "cost_ns": w.choice.cost_ns,
                        "moved": w.changed.iter().map(|(p, _)| p.to_string()).collect::<Vec<_>>(),
                    })
                })
                .collect();
            let plan: Vec<String> = m.plan_verdicts.iter().map(|v| v.to_string()).collect();
            serde_json::json!({
                "weights": weights,
                "verdicts": m.verdicts,
                "as_default": m.as_default,
                "plan_verdicts": plan,
            })
        });
        serde_json::json!({
            "campaign": self.campaign,
            "soc": self.soc_name,
            "db": self.db.display().to_string(),
            "problems": self.problems,
            "out_of_budget": self.out_of_budget,
            "seconds": self.elapsed.as_secs_f64(),
            "model": model,
        })
    }
}

/// The tuner's progress, forwarded as events.
struct Forward<'f>(&'f mut dyn FnMut(TuneEvent<'_>));

impl Progress for Forward<'_> {
    fn problem_started(
        &mut self,
        index: usize,
        total: usize,
        problem: &Problem,
        candidates: usize,
    ) {
        (self.0)(TuneEvent::ProblemStarted {
            index,
            total,
            problem,
            candidates,
        });
    }
    fn evaluated(&mut self, candidate: &Candidate, best_s: Option<f64>) {
        (self.0)(TuneEvent::Evaluated { candidate, best_s });
    }
    fn problem_done(&mut self, report: &ProblemReport) {
        (self.0)(TuneEvent::ProblemDone(report));
    }
}

/// Whether [`TuneOptions::stop`] was raised.
fn stopped(o: &TuneOptions) -> bool {
    o.stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed))
}

/// Calls of problem `p`'s kernel per run of `workload` on `model`: per
/// matrix as the workload's tests call it, on every matrix that runs it.
fn calls(model: &OpenModel, workload: &Workload, p: &Problem) -> f64 {
    workload.calls(p, problems::prefill_bucket) * problems::matrices(&model.weights, p) as f64
}

/// Runs the campaign `o` describes, telling `on_event` what it does.
pub fn tune(o: &TuneOptions, on_event: &mut dyn FnMut(TuneEvent<'_>)) -> Result<TuneReport> {
    let model = match &o.target {
        Target::Model(path) => Some(OpenModel::open(path, o.mmproj.as_deref())?),
        _ => None,
    };
    // A model's problems go in order of their share of the workload's
    // time, each with its share of the budget: the GEMMs pp512 runs come
    // before the buckets and the LM head's GEMMs it does not.
    let (problems, shares): (Vec<Problem>, Vec<f64>) = match (&o.target, &model) {
        (_, Some(m)) => workload_order(&m.problems, |p| calls(m, &o.workload, p))
            .into_iter()
            .map(|(i, share)| (m.problems[i].clone(), share))
            .unzip(),
        (Target::Suite { name, dtypes }, None) => {
            let dts: Vec<&str> = dtypes.iter().map(String::as_str).collect();
            (suite::suite(name, &dts)?, Vec::new())
        }
        (Target::Problem { op, dtype, shape }, None) => (
            vec![families::parse_tune_problem(op, dtype, shape)?],
            Vec::new(),
        ),
        (Target::Model(_), None) => unreachable!("a model target was opened above"),
    };

    let soc = tiletune_soc::probe().map_err(FlowError::Probe)?;
    let caps = soc.cpu_caps();
    let max_threads = o.threads.unwrap_or(caps.cores).max(1);
    on_event(TuneEvent::Threads(max_threads));
    let machine = Machine {
        caps,
        max_threads,
        seed: o.seed,
        memory: tiletune_soc::mem_available(),
        // A model's decode problems are timed as cold as the model leaves
        // its weights, no colder (`Machine::cold_bytes`).
        streamed: match &model {
            Some(m) => Some(problems::decode_weight_bytes(&m.gguf)?),
            None => None,
        },
    };

    let mut db = crate::open_for_writing(&o.db, &soc)?;
    // Continue an interrupted campaign of the same kind: its measurements are
    // found again by key, so nothing is measured twice. One another tuner is
    // running is its own; this one then starts a campaign of its own.
    let mut fresh = Campaign::new(
        &soc.fingerprint,
        env!("CARGO_PKG_VERSION"),
        KERNEL_ABI,
        o.strategy.name(),
    );
    fresh.budget_s = o.budget.map(|b| b.as_secs_f64());
    fresh.commit = option_env!("TILETUNE_GIT_COMMIT").map(str::to_string);
    let (campaign, _claim, resumed) = db.resume_or_start_campaign(fresh)?;
    if resumed {
        on_event(TuneEvent::Resumed {
            campaign: &campaign,
        });
    }

    let mut instances: Vec<Box<dyn KernelProblem>> = Vec::new();
    let mut instance_shares: Vec<f64> = Vec::new();
    let mut skipped: Vec<(Problem, String)> = Vec::new();
    let (places, left_out) = placement::runnable(
        placement::placements(&soc, max_threads),
        &tiletune_kernels::pool::allowed_cpus(),
    );
    if !left_out.is_empty() {
        on_event(TuneEvent::PlacementsLeftOut(&left_out));
    }
    for (pi, p) in problems.iter().enumerate() {
        match families::instantiate(p, &machine) {
            Ok(i) => {
                instances.push(placement::with_placements(i, &places)?);
                instance_shares.extend(shares.get(pi));
            }
            // A model may hold weights no family tunes yet: say so, go on.
            Err(e @ TunerError::UnsupportedDtype { .. }) if model.is_some() => {
                skipped.push((p.clone(), e.to_string()))
            }
            Err(e) => return Err(e.into()),
        }
    }
    if !skipped.is_empty() {
        on_event(TuneEvent::Skipped(&skipped));
    }
    if instances.is_empty() {
        return Err(FlowError::NothingToTune(problems.len()));
    }

    // Busy CPUs or a power-saving governor make every timing noisy; say so
    // before the run (not after it: the tuner's own threads load the
    // machine) and keep it with the campaign.
    let env = Environment::capture(&soc.fingerprint, env!("CARGO_PKG_VERSION"), None);
    let drift = env.warnings();
    if !drift.is_empty() {
        on_event(TuneEvent::Noisy(&drift));
    }
    let started = Instant::now();
    on_event(TuneEvent::CampaignStarted {
        candidates: instances.iter().map(|p| p.candidates().len() as u64).sum(),
    });
    let reports = {
        let mut store = DbStore {
            db: &mut db,
            soc: soc.fingerprint.clone(),
            kernel_abi: KERNEL_ABI,
            campaign: campaign.id.clone(),
        };
        let cfg = CampaignConfig {
            strategy: o.strategy,
            budget: o.budget,
            stop: o.stop.clone(),
            shares: instance_shares,
        };
        run_campaign(
            &mut instances,
            &cfg,
            &mut HarnessMeasure::for_tuning(),
            &mut store,
            &mut Forward(on_event),
        )
    };
    if stopped(o) {
        return Err(FlowError::Stopped);
    }
    let out_of_budget = reports.iter().any(|r| r.stopped_by_budget);
    // A model's campaign ends with its check: one stopped (or killed)
    // between its search and its verdicts stays open, and the same command
    // run again resumes it and times the check it did not finish.
    let finish = |db: &mut SelectorDb| -> Result<()> {
        if !out_of_budget {
            db.finish_campaign(&campaign.id, now_unix(), &serde_json::json!(drift))?;
        }
        Ok(())
    };
    if model.is_none() {
        finish(&mut db)?;
    }
    let elapsed = started.elapsed();
    on_event(TuneEvent::CampaignDone {
        reports: &reports,
        soc_name: &soc.name,
        elapsed,
        out_of_budget,
    });
    let mut report = TuneReport {
        campaign: campaign.id.clone(),
        soc_name: soc.name.clone(),
        db: o.db.clone(),
        problems: reports,
        out_of_budget,
        elapsed,
        model: None,
    };
    let Some(model) = &model else {
        return Ok(report);
    };
    // A weight's layout is one decision: store the joint choice.
    let defaults: Vec<(Problem, Candidate)> = instances
        .iter()
        .map(|i| (i.spec().clone(), i.candidates()[i.default_index()].clone()))
        .collect();
    // The problems share their random weights while any exists: free them
    // before the check loads the model twice.
    drop(instances);
    let weights = joint::store_joint(
        &mut db,
        &soc.fingerprint,
        KERNEL_ABI,
        max_threads,
        &defaults,
        |p| calls(model, &o.workload, p),
        Some(&campaign.id),
    )?;
    on_event(TuneEvent::JointStored {
        weights: &weights,
        workload: &o.workload,
    });
    if stopped(o) {
        return Err(FlowError::Stopped);
    }
    // The model decides: time the tuned plan against the default plan.
    let check = CheckOptions {
        db: &o.db,
        soc: &soc,
        threads: max_threads,
        workload: &o.workload,
        rounds: o.rounds,
        stop: o.stop.as_deref(),
    };
    let checked = check_model(model, &check, on_event)?;
    if stopped(o) {
        return Err(FlowError::Stopped);
    }
    let mut verdicts = checked.verdicts;
    for v in &mut verdicts {
        v.campaign = Some(campaign.id.clone());
        db.put_verdict(v)?;
    }
    for &phase in &checked.as_default {
        db.delete_verdict(
            &soc.fingerprint,
            KERNEL_ABI,
            &checked.model,
            phase,
            max_threads,
        )?;
    }
    finish(&mut db)?;
    // What the runtime makes of the verdicts, as `plan` and `run` will.
    let opts = PlanOptions {
        db: Some(o.db.clone()),
        threads: max_threads,
        qmode: None,
    };
    let plan = ExecutionPlan::build(&model.problems, &soc.fingerprint, &soc.cpu_caps(), &opts);
    report.model = Some(ModelOutcome {
        weights,
        verdicts,
        as_default: checked.as_default,
        plan_verdicts: plan.verdicts,
    });
    Ok(report)
}
