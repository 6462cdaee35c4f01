//! `tiletune tune`: sweep kernel candidates on this SoC and store the winners
//! in the selector table. Wiring only: problems come from `tiletune-tuner`,
//! timing from `tiletune-bench`, storage from `tiletune-tables`. The thread
//! dimension of every candidate is a placement of this SoC
//! (`tiletune_tuner::placement`): unpinned counts on one cluster, plus
//! per-cluster pinned placements on big.LITTLE.

mod print;

use super::Global;
use anyhow::{Context, bail};
use print::{Bar, print_joint, print_summary};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tiletune_bench::Environment;
use tiletune_kernels::KERNEL_ABI;
use tiletune_runtime::plan::{ExecutionPlan, PlanOptions};
use tiletune_tables::{Campaign, Problem, now_unix};
use tiletune_tuner::adapters::{DbStore, HarnessMeasure};
use tiletune_tuner::budget::parse_budget;
use tiletune_tuner::campaign::{CampaignConfig, run_campaign};
use tiletune_tuner::families::{self, Machine};
use tiletune_tuner::joint::{self, Workload};
use tiletune_tuner::placement;
use tiletune_tuner::{Candidate, KernelProblem, Strategy, suite};

/// A dtype flag's help, listing the weight dtypes the tuner searches.
fn dtypes_help(what: &str) -> String {
    format!(
        "{what}: {}",
        tiletune_tuner::families::quant::WEIGHT_DTYPES.join(", ")
    )
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A built-in suite of small-LLM shapes: llm-decode (GEMV) or llm-prefill (GEMM).
    #[arg(long, conflicts_with_all = ["op", "shape", "model"])]
    pub suite: Option<String>,
    /// Every kernel problem this GGUF model runs (decode GEMV and prefill
    /// GEMM buckets); problems whose weight dtype has no tunable kernel yet
    /// are listed and skipped.
    #[arg(long, short = 'm', value_name = "GGUF", conflicts_with_all = ["op", "shape"])]
    pub model: Option<PathBuf>,
    #[arg(long, default_value = "f32", value_delimiter = ',', help = dtypes_help("Weight dtypes the suite is tuned for, comma-separated"))]
    pub dtypes: Vec<String>,
    /// One problem: the op (gemv or gemm) ...
    #[arg(long, requires_all = ["dtype", "shape"])]
    pub op: Option<String>,
    #[arg(long, help = dtypes_help("... its weight dtype"))]
    pub dtype: Option<String>,
    /// ... and its shape: NxK for gemv, MxNxK for gemm (e.g. 4864x896).
    #[arg(long)]
    pub shape: Option<String>,
    /// Search strategy: adaptive (short screen, descent from the best few,
    /// top 4 re-measured in full), descent (coordinate descent from the
    /// analytic default), halving (successive halving), random, exhaustive.
    #[arg(long, default_value = "adaptive")]
    pub strategy: Strategy,
    /// Wall-clock budget for measuring, e.g. 90s, 5m, 1h, shared by the
    /// problems (what one leaves unused goes to the rest). Making each
    /// problem's inputs and scalar reference is not counted: for a large
    /// prefill problem (an LM head at m = 256) that takes seconds. The best
    /// candidate found so far is kept when it runs out.
    #[arg(long, value_parser = parse_budget)]
    pub budget: Option<Duration>,
    /// Most threads to search (default: every online core); also the
    /// thread budget the winners are stored for. The thread dimension is a
    /// list of placements: on a single-cluster CPU the counts 1..=N,
    /// unpinned (`t1`, `t2`, ...); on big.LITTLE each cluster's counts with
    /// the workers pinned to it (`t2@cluster1`: 2 workers on cluster 1 as
    /// `tiletune probe` numbers them), clusters of one frequency domain
    /// together (`t3@cluster1+2`), and the larger counts unpinned. The
    /// winner's placement is stored with it and shown by `tiletune table
    /// show`; the runtime pins its workers the same way.
    #[arg(long, short = 't', value_parser = super::parse_threads)]
    pub threads: Option<usize>,
    /// Selector table file [default: $TILETUNE_DB, else the XDG data directory].
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// Short measurements: a smoke test of the whole loop, not a tuning.
    #[arg(long)]
    pub quick: bool,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0x7ee1)]
    pub seed: u64,
    /// With --model: what the tuned plan is chosen for, llama-bench's tests
    /// each weighted by its time: e.g. `pp512,tg128` (the default, as
    /// llama-bench runs), `decode` (tg128), `prefill` (pp512) or
    /// `pp2048,tg256`. Every kernel problem that reads one weight (decode
    /// and each prefill bucket) shares one layout in memory; the layout
    /// that costs this workload least is chosen for all of them.
    #[arg(long, default_value = "pp512,tg128", value_name = "TESTS")]
    pub workload: Workload,
    /// With --model: alternated rounds of the model-level check that ends
    /// the tuning (tuned plan against default plan, each phase timed as
    /// `bench model` times it). A phase's tuned choices run only where
    /// every tuned round beat every default round.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(3..=50))]
    pub rounds: u64,
}

pub fn run(g: &Global, mut args: Args) -> anyhow::Result<ExitCode> {
    if let Some(m) = &args.model {
        args.model = Some(super::pull::model_path(m)?);
    }
    let model = args
        .model
        .as_deref()
        .map(super::accept::OpenModel::open)
        .transpose()?;
    let problems: Vec<Problem> = match (&args.suite, &args.op) {
        _ if model.is_some() => model.as_ref().expect("checked").problems.clone(),
        (Some(name), _) => {
            let dts: Vec<&str> = args.dtypes.iter().map(String::as_str).collect();
            suite::suite(name, &dts)?
        }
        (None, Some(op)) => vec![suite::parse_problem(
            op,
            args.dtype.as_deref().unwrap_or_default(),
            args.shape.as_deref().unwrap_or_default(),
        )?],
        (None, None) => {
            bail!("say what to tune: --suite llm-decode, or --op gemv --dtype f32 --shape 4864x896")
        }
    };

    let soc = tiletune_soc::probe().context("probing this SoC")?;
    let caps = soc.cpu_caps();
    let max_threads = args.threads.unwrap_or(caps.cores).max(1);
    super::warn_oversubscribed(max_threads);
    let machine = Machine {
        caps,
        max_threads,
        seed: args.seed,
        memory: tiletune_soc::mem_available(),
    };

    let db_path = args
        .db
        .clone()
        .unwrap_or_else(tiletune_tables::default_db_path);
    let mut db = super::open_for_writing(&db_path, &soc)?;
    // Continue an interrupted campaign of the same kind: its measurements are
    // found again by key, so nothing is measured twice. One another tuner is
    // running is its own; this one then starts a campaign of its own.
    let mut fresh = Campaign::new(
        &soc.fingerprint,
        env!("CARGO_PKG_VERSION"),
        KERNEL_ABI,
        args.strategy.name(),
    );
    fresh.budget_s = args.budget.map(|b| b.as_secs_f64());
    fresh.commit = option_env!("TILETUNE_GIT_COMMIT").map(str::to_string);
    let (campaign, _claim, resumed) = db.resume_or_start_campaign(fresh)?;
    if resumed {
        eprintln!(
            "resuming campaign {} (started {})",
            campaign.id, campaign.started_at
        );
    }

    let mut instances: Vec<Box<dyn KernelProblem>> = Vec::new();
    let mut skipped: Vec<(Problem, String)> = Vec::new();
    let (places, left_out) = placement::runnable(
        placement::placements(&soc, max_threads),
        &tiletune_kernels::pool::allowed_cpus(),
    );
    for note in &left_out {
        eprintln!("note: placements {note}");
    }
    for p in &problems {
        match families::instantiate(p, &machine) {
            Ok(i) => instances.push(placement::with_placements(i, &places)?),
            // A model may hold weights no family tunes yet: say so, go on.
            Err(e @ tiletune_tuner::TunerError::UnsupportedDtype { .. })
                if args.model.is_some() =>
            {
                skipped.push((p.clone(), e.to_string()))
            }
            Err(e) => return Err(e.into()),
        }
    }
    if !skipped.is_empty() {
        eprintln!(
            "skipping {} problem(s) with no tunable kernel yet:",
            skipped.len()
        );
        for (p, why) in &skipped {
            eprintln!("  {p}: {why}");
        }
    }
    if instances.is_empty() {
        bail!(
            "nothing to tune: none of the {} problem(s) has a tunable kernel yet",
            problems.len()
        );
    }

    // Busy CPUs or a power-saving governor make every timing noisy; say so
    // before the run (not after it: the tuner's own threads load the
    // machine) and keep it with the campaign.
    let env = Environment::capture(&soc.fingerprint, env!("CARGO_PKG_VERSION"), None);
    let drift = env.warnings();
    for w in &drift {
        eprintln!("warning: {w}; the picks may be noise (tune again when the machine is quiet)");
    }
    let started = Instant::now();
    let mut progress = Bar::new(
        g.json,
        instances.iter().map(|p| p.candidates().len() as u64).sum(),
    );
    let reports = {
        let mut store = DbStore {
            db: &mut db,
            soc: soc.fingerprint.clone(),
            kernel_abi: KERNEL_ABI,
            campaign: campaign.id.clone(),
        };
        let cfg = CampaignConfig {
            strategy: args.strategy,
            budget: args.budget,
        };
        run_campaign(
            &mut instances,
            &cfg,
            &mut HarnessMeasure::for_tuning(),
            &mut store,
            &mut progress,
        )
    };
    progress.bar.finish_and_clear();
    let out_of_budget = reports.iter().any(|r| r.stopped_by_budget);
    if !out_of_budget {
        db.finish_campaign(&campaign.id, now_unix(), &serde_json::json!(drift))?;
    }

    if g.json && args.model.is_none() {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else if !g.json {
        print_summary(
            &reports,
            &soc.name,
            &db_path,
            started.elapsed(),
            out_of_budget,
        );
    }
    let Some(model) = &model else {
        return Ok(ExitCode::SUCCESS);
    };
    // A weight's layout is one decision: store the joint choice.
    let defaults: Vec<(Problem, Candidate)> = instances
        .iter()
        .map(|i| (i.spec().clone(), i.candidates()[i.default_index()].clone()))
        .collect();
    let weights = joint::store_joint(
        &mut db,
        &soc.fingerprint,
        KERNEL_ABI,
        max_threads,
        &defaults,
        &args.workload,
        tiletune_runtime::problems::prefill_bucket,
        Some(&campaign.id),
    )?;
    if !g.json {
        print_joint(&weights, &args.workload);
    }
    // The model decides: time the tuned plan against the default plan.
    let mut verdicts = super::accept::check_model(
        model,
        &db_path,
        &soc,
        max_threads,
        &args.workload,
        args.rounds as usize,
        g.json,
    )?;
    for v in &mut verdicts {
        v.campaign = Some(campaign.id.clone());
        db.put_verdict(v)?;
    }
    if !g.json {
        // What the runtime makes of the verdicts, as `plan` and `run` will.
        let opts = PlanOptions {
            db: Some(db_path.clone()),
            threads: max_threads,
            qmode: None,
        };
        let plan = ExecutionPlan::build(&model.problems, &soc.fingerprint, &soc.cpu_caps(), &opts);
        for v in &plan.verdicts {
            println!("verdict {v}");
        }
    }
    if g.json {
        // One document: the campaign's reports and the verdicts.
        let out = serde_json::json!({ "problems": reports, "verdicts": verdicts });
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_documents_placements() {
        use clap::Args as _;
        let help = Args::augment_args(clap::Command::new("tune"))
            .render_long_help()
            .to_string();
        assert!(help.contains("t2@cluster1"), "{help}");
        assert!(help.contains("placement"), "{help}");
    }
}
