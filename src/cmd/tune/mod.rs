//! `tiletune tune`: sweep kernel candidates on this SoC and store the winners
//! in the selector table. Wiring only: the campaign, and for a model its
//! joint layout choice and model-level check, run in `tiletune_flow::tune`;
//! this module parses the flags and prints its events. The thread
//! dimension of every candidate is a placement of this SoC
//! (`tiletune_tuner::placement`): unpinned counts on one cluster, plus
//! per-cluster pinned placements on big.LITTLE.

mod print;

use super::Global;
use anyhow::bail;
use print::{Bar, print_as_default, print_joint, print_summary, print_verdict};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tiletune_flow::{Target, TuneEvent, TuneOptions};
use tiletune_tuner::Strategy;
use tiletune_tuner::budget::parse_budget;
use tiletune_tuner::campaign::Progress;
use tiletune_tuner::joint::Workload;

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
    /// With --model: llama.cpp's `mmproj` GGUF of a vision model, whose
    /// tower's GEMMs are tuned too (a GGUF that holds its tower, as
    /// `tiletune convert` writes a Qwen2.5-VL folder, needs none).
    #[arg(long, value_name = "FILE", requires = "model")]
    pub mmproj: Option<PathBuf>,
    #[arg(long, default_value = "f32", value_delimiter = ',', value_parser = crate::cmd::parse_dtype, help = dtypes_help("Weight dtypes the suite is tuned for, comma-separated"))]
    pub dtypes: Vec<String>,
    /// One problem: the op (gemv, gemm or i8gemm) ...
    #[arg(long, requires_all = ["dtype", "shape"])]
    pub op: Option<String>,
    #[arg(long, value_parser = crate::cmd::parse_dtype, help = dtypes_help("... its weight dtype (i8gemm: i8 or i8_zp)"))]
    pub dtype: Option<String>,
    /// ... and its shape: NxK for gemv, MxNxK for gemm and i8gemm (e.g.
    /// 4864x896).
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
    /// `bench model` times it; a phase whose tuned choices are the default
    /// plan's is not timed). A phase's tuned choices run only where every
    /// tuned round beat every default round.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(3..=50))]
    pub rounds: u64,
}

pub fn run(g: &Global, mut args: Args) -> anyhow::Result<ExitCode> {
    if let Some(m) = &args.model {
        args.model = Some(super::pull::model_path(m)?);
    }
    let target = match (&args.model, &args.suite, &args.op) {
        (Some(m), _, _) => Target::Model(m.clone()),
        (None, Some(name), _) => Target::Suite {
            name: name.clone(),
            dtypes: args.dtypes.clone(),
        },
        (None, None, Some(op)) => Target::Problem {
            op: op.clone(),
            dtype: args.dtype.clone().unwrap_or_default(),
            shape: args.shape.clone().unwrap_or_default(),
        },
        (None, None, None) => {
            bail!("say what to tune: --suite llm-decode, or --op gemv --dtype f32 --shape 4864x896")
        }
    };
    let db = args
        .db
        .clone()
        .unwrap_or_else(tiletune_tables::default_db_path);
    let opts = TuneOptions {
        strategy: args.strategy,
        budget: args.budget,
        threads: args.threads,
        seed: args.seed,
        workload: args.workload.clone(),
        rounds: args.rounds as usize,
        mmproj: args.mmproj.clone(),
        stop: Some(stop_on_ctrl_c()),
        ..TuneOptions::new(target, db.clone())
    };
    // Made when measuring starts, so its clock times the measuring.
    let mut bar: Option<Bar> = None;
    let report = tiletune_flow::tune(&opts, &mut |e| match e {
        TuneEvent::Threads(t) => super::warn_oversubscribed(t),
        TuneEvent::Resumed { campaign } => eprintln!(
            "resuming campaign {} (started {})",
            campaign.id, campaign.started_at
        ),
        TuneEvent::Skipped(skipped) => {
            eprintln!(
                "skipping {} problem(s) with no tunable kernel yet:",
                skipped.len()
            );
            for (p, why) in skipped {
                eprintln!("  {p}: {why}");
            }
        }
        TuneEvent::PlacementsLeftOut(notes) => {
            for note in notes {
                eprintln!("note: placements {note}");
            }
        }
        TuneEvent::Noisy(drift) => {
            for w in drift {
                eprintln!(
                    "warning: {w}; the picks may be noise (tune again when the machine is quiet)"
                );
            }
        }
        TuneEvent::CampaignStarted { candidates } => bar = Some(Bar::new(g.json, candidates)),
        TuneEvent::ProblemStarted {
            index,
            total,
            problem,
            candidates,
        } => {
            if let Some(b) = &mut bar {
                b.problem_started(index, total, problem, candidates)
            }
        }
        TuneEvent::Evaluated { candidate, best_s } => {
            if let Some(b) = &mut bar {
                b.evaluated(candidate, best_s)
            }
        }
        TuneEvent::ProblemDone(r) => {
            if let Some(b) = &mut bar {
                b.problem_done(r)
            }
        }
        TuneEvent::CampaignDone {
            reports,
            soc_name,
            elapsed,
            out_of_budget,
        } => {
            if let Some(b) = &bar {
                b.bar.finish_and_clear();
            }
            if !g.json {
                print_summary(reports, soc_name, &db, elapsed, out_of_budget);
            }
        }
        TuneEvent::JointStored { weights, workload } if !g.json => print_joint(weights, workload),
        TuneEvent::CheckStarted { timed: 0, .. } if !g.json => println!(
            "model-level check: nothing to time, the tuned plan runs the default plan's choices in every phase"
        ),
        TuneEvent::CheckStarted {
            rounds, threads, ..
        } if !g.json => println!(
            "model-level check: tuned plan against default plan, {rounds} alternated rounds, {threads} thread(s), f16 KV cache"
        ),
        TuneEvent::AsDefault { phase, tests } if !g.json => print_as_default(phase, tests),
        TuneEvent::Verdict {
            verdict,
            tests,
            beside_other_phase,
        } if !g.json => print_verdict(
            verdict,
            tests,
            if beside_other_phase {
                " (beside the other phase's choices)"
            } else {
                ""
            },
        ),
        TuneEvent::JointStored { .. }
        | TuneEvent::CheckStarted { .. }
        | TuneEvent::AsDefault { .. }
        | TuneEvent::Verdict { .. } => {}
    });
    let report = match report {
        Err(e @ tiletune_flow::FlowError::Stopped) => {
            if let Some(b) = &bar {
                b.bar.finish_and_clear();
            }
            eprintln!("{e}");
            return Ok(ExitCode::from(130));
        }
        r => r?,
    };
    match (&report.model, g.json) {
        (None, true) => println!("{}", serde_json::to_string_pretty(&report.problems)?),
        (None, false) => {}
        (Some(m), false) => {
            for v in &m.plan_verdicts {
                println!("verdict {v}");
            }
        }
        (Some(m), true) => {
            // One document: the campaign's reports and the verdicts.
            let out = serde_json::json!({ "problems": report.problems, "verdicts": m.verdicts });
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A flag the first Ctrl-C raises, so the campaign stops at the next
/// candidate with its measurements stored (a kill could lose the one in
/// flight, and leaves no word on how to go on); a second Ctrl-C quits at
/// once with the shell's 130.
fn stop_on_ctrl_c() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let raised = Arc::clone(&stop);
    let handler = move || {
        if raised.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
        eprintln!("\nstopping after the measurement in flight (Ctrl-C again to quit now)");
    };
    if let Err(e) = ctrlc::set_handler(handler) {
        eprintln!("warning: cannot catch Ctrl-C ({e}); it will end the campaign at once");
    }
    stop
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
