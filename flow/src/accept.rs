//! The model-level check that ends `tune --model`: the tuned plan against
//! the default plan on the model itself, alternated round by round, per
//! phase (prefill, decode) at the thread count tuned. Each phase runs
//! `bench model`'s test definitions (random ids, BOS first, an empty cache,
//! f16 KV pages as llama-bench's default); the verdict of each phase is
//! `tiletune_tuner::acceptance::decide` and is stored with the digest of
//! the tuned choices it timed, so the runtime applies a phase's tuned
//! choices only where they won.

use crate::bench::BenchModel;
use crate::event::TuneEvent;
use crate::{FlowError, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use tiletune_bench::peers::llama_bench::{GlibcRand, TokenSource, test_gen, test_prompt};
use tiletune_kernels::attention::KvDtype;
use tiletune_runtime::GgufFile;
use tiletune_runtime::config::ModelConfig;
use tiletune_runtime::models::{FastModel, RunState};
use tiletune_runtime::plan::{ExecutionPlan, Mix, PlanOptions};
use tiletune_runtime::problems::{self, LinearWeight};
use tiletune_soc::SocInfo;
use tiletune_tables::{Phase, Problem, Verdict, now_unix};
use tiletune_tuner::acceptance;
use tiletune_tuner::joint::{self, Test, Workload};

/// The tests that time `phase`: the workload's, or llama-bench's default
/// (pp512, tg128) when the workload has none of that phase: a phase the
/// workload does not weigh still runs tuned choices, so it is checked too.
fn phase_tests(workload: &Workload, phase: Phase) -> Vec<Test> {
    let mine: Vec<Test> = workload
        .tests
        .iter()
        .copied()
        .filter(|t| {
            matches!(
                (t, phase),
                (Test::Prefill(_), Phase::Prefill) | (Test::Decode(_), Phase::Decode)
            )
        })
        .collect();
    if !mine.is_empty() {
        return mine;
    }
    match phase {
        Phase::Prefill => vec![Test::Prefill(512)],
        Phase::Decode => vec![Test::Decode(128)],
    }
}

/// Seconds one run of `tests` takes on `model` (the cache reset first).
fn time_tests(
    model: &FastModel,
    st: &mut RunState,
    tests: &[Test],
    rng: &mut GlibcRand,
    vocab: u32,
    bos: Option<u32>,
) -> Result<f64> {
    // A prompt runs as one batch.
    let source = |n_batch: usize| TokenSource {
        n_vocab: vocab,
        bos,
        n_batch,
    };
    st.reset();
    let t0 = Instant::now();
    for t in tests {
        match *t {
            Test::Prefill(n) => test_prompt(&BenchModel(model), st, rng, n, source(n))?,
            Test::Decode(n) => test_gen(&BenchModel(model), st, rng, n, source(1))?,
        }
        st.reset();
    }
    Ok(t0.elapsed().as_secs_f64())
}

/// A model `tune --model` opened and checked once, for the check to reuse.
pub struct OpenModel {
    pub path: PathBuf,
    pub gguf: GgufFile,
    pub cfg: ModelConfig,
    /// Its kernel problems (`problems::kernel_problems`, and its vision
    /// tower's, `vision::tower_problems`).
    pub problems: Vec<Problem>,
    /// Its language model's weights (`problems::linear_weights`): how many
    /// of them run each problem ([`problems::matrices`]).
    pub weights: Vec<LinearWeight>,
}

impl OpenModel {
    /// Opens the GGUF file, checks its meaning and tensors, lists its
    /// problems with those of its vision tower (in `mmproj`, or in the
    /// file itself), as the runtime's plan lists them.
    pub fn open(path: &Path, mmproj: Option<&Path>) -> Result<Self> {
        let gguf = GgufFile::open(path)?;
        let cfg = ModelConfig::from_gguf(&gguf)?;
        tiletune_runtime::models::check_tensors(&cfg, &gguf)?;
        let weights = problems::linear_weights(&gguf)?;
        let mut problems = problems::kernel_problems(&gguf)?;
        match mmproj {
            Some(m) => problems.extend(tiletune_runtime::vision::tower_problems(&GgufFile::open(
                m,
            )?)?),
            None => problems.extend(tiletune_runtime::vision::tower_problems(&gguf)?),
        }
        Ok(OpenModel {
            path: path.to_path_buf(),
            gguf,
            cfg,
            problems,
            weights,
        })
    }
}

/// What the check is run with besides the model.
pub struct CheckOptions<'a> {
    /// The selector table holding the tuned choices.
    pub db: &'a Path,
    pub soc: &'a SocInfo,
    pub threads: usize,
    pub workload: &'a Workload,
    /// Alternated rounds per phase.
    pub rounds: usize,
    /// Raised from another thread: the check ends with
    /// [`FlowError::Stopped`] before its next round.
    pub stop: Option<&'a AtomicBool>,
}

/// What the check decided.
#[derive(Debug)]
pub struct CheckOutcome {
    /// The verdict of each phase it timed (not yet stored).
    pub verdicts: Vec<Verdict>,
    /// The phases it did not time: the tuned plan runs the default plan's
    /// choices in them. A verdict stored for them before is for choices
    /// that no longer run.
    pub as_default: Vec<Phase>,
    /// The model's key in the verdicts ([`Verdict::model`]).
    pub model: String,
}

/// Times the tuned plan against the default plan on `model`, in each phase
/// where the two differ, and returns the verdicts; `on_event` hears when
/// the check starts, each phase it does not time and each verdict as it is
/// decided.
pub fn check_model(
    model: &OpenModel,
    o: &CheckOptions<'_>,
    on_event: &mut dyn FnMut(TuneEvent<'_>),
) -> Result<CheckOutcome> {
    let (g, cfg, problems, model_path) = (&model.gguf, &model.cfg, &model.problems, &model.path);
    let (soc, threads) = (o.soc, o.threads);
    let caps = soc.cpu_caps();
    let opts = PlanOptions {
        db: Some(o.db.to_path_buf()),
        threads,
        qmode: None,
    };
    let tuned = ExecutionPlan::build_unverified(problems, &soc.fingerprint, &caps, &opts);
    let default = ExecutionPlan::build_default(problems, &soc.fingerprint, &caps, &opts);
    let tests: Vec<(Phase, Vec<Test>)> = Phase::ALL
        .into_iter()
        .map(|p| (p, phase_tests(o.workload, p)))
        .collect();
    let ctx = tests
        .iter()
        .flat_map(|(_, t)| t)
        .map(|t| t.tokens())
        .max()
        .unwrap_or(1)
        + 1;
    let load = |plan: &ExecutionPlan| -> Result<FastModel> {
        Ok(FastModel::new(cfg, g, plan, ctx)?.with_kv_dtype(KvDtype::F16)?)
    };
    // Timing two runs of one plan against each other would only measure
    // the noise (and a model's phase takes up to a minute), so a phase
    // whose tuned choices are the default plan's is not timed.
    let mut as_default: Vec<Phase> = Phase::ALL
        .into_iter()
        .filter(|&p| tuned.digest(p) == default.digest(p))
        .collect();
    on_event(TuneEvent::CheckStarted {
        rounds: o.rounds,
        threads,
        timed: Phase::ALL.len() - as_default.len(),
    });
    for (phase, tests) in tests.iter().filter(|(p, _)| as_default.contains(p)) {
        on_event(TuneEvent::AsDefault {
            phase: *phase,
            tests,
        });
    }
    let mut out = Vec::new();
    if as_default.len() == Phase::ALL.len() {
        return Ok(CheckOutcome {
            verdicts: out,
            as_default,
            model: tuned.model.clone(),
        });
    }
    let models = [load(&default)?, load(&tuned)?];
    // A model that holds fewer positions (a small test model) is checked
    // with the tests cut to what it holds, and the test names say so.
    let fit = models[0].max_ctx().saturating_sub(1).max(1);
    let tests: Vec<(Phase, Vec<Test>)> = tests
        .into_iter()
        .map(|(p, ts)| (p, ts.into_iter().map(|t| t.capped(fit)).collect()))
        .collect();
    let mut states = [models[0].new_state(), models[1].new_state()];
    let name = model_path.file_name().map_or_else(
        || model_path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let check = Check {
        vocab: cfg.vocab.max(1) as u32,
        bos: cfg.bos_id,
        rounds: o.rounds,
        stop: o.stop,
    };
    let verdict = |phase: Phase, label: String, d: Vec<f64>, t: Vec<f64>, plan: &ExecutionPlan| {
        let v = acceptance::decide(&d, &t);
        Verdict {
            soc: soc.fingerprint.clone(),
            kernel_abi: tiletune_kernels::KERNEL_ABI,
            model: plan.model.clone(),
            model_name: name.clone(),
            phase,
            threads,
            plan_digest: plan.digest(phase),
            test: label,
            default_s: d,
            tuned_s: t,
            ratio: v.ratio,
            won: v.won,
            campaign: None,
            measured_at: now_unix(),
        }
    };
    for (phase, tests) in tests.iter().filter(|(p, _)| !as_default.contains(p)) {
        let (label, d, t) = check.time(&models, &mut states, tests)?;
        let v = verdict(*phase, label, d, t, &tuned);
        on_event(TuneEvent::Verdict {
            verdict: &v,
            tests,
            beside_other_phase: false,
        });
        out.push(v);
    }
    // A quantized weight holds one layout, so a phase that lost runs its
    // defaults on the layout the other phase's tuned choices hold: a plan
    // neither verdict timed. Time that mix, and store the phase's verdict
    // for it (the runtime runs the default plan if it does not win).
    let mix = Mix::of(|p| out.iter().any(|v| v.phase == p && v.won));
    let mixed = ExecutionPlan::build_mix(problems, &soc.fingerprint, &caps, &opts, mix);
    let won = |p: Phase| out.iter().any(|v| v.phase == p && v.won);
    let untimed = mixed.untimed_phases(&tuned, &default, won);
    if !untimed.is_empty() {
        // Only the default plan and the mix stay in memory.
        let [default_model, _] = models;
        let models = [default_model, load(&mixed)?];
        let mut states = [models[0].new_state(), models[1].new_state()];
        for (phase, tests) in tests.iter().filter(|(p, _)| untimed.contains(p)) {
            let (label, d, t) = check.time(&models, &mut states, tests)?;
            let v = verdict(*phase, label, d, t, &mixed);
            on_event(TuneEvent::Verdict {
                verdict: &v,
                tests,
                beside_other_phase: true,
            });
            match out.iter_mut().find(|o| o.phase == *phase) {
                Some(old) => *old = v,
                None => {
                    out.push(v);
                    as_default.retain(|p| p != phase);
                }
            }
        }
    }
    Ok(CheckOutcome {
        verdicts: out,
        as_default,
        model: tuned.model.clone(),
    })
}

/// How `check_model` times a phase.
struct Check<'a> {
    vocab: u32,
    bos: Option<u32>,
    rounds: usize,
    stop: Option<&'a AtomicBool>,
}

impl Check<'_> {
    /// `rounds` alternated timings of `tests` on the default plan's model
    /// (`models[0]`) and another plan's: the tests' label and the seconds
    /// of each.
    fn time(
        &self,
        models: &[FastModel; 2],
        states: &mut [RunState; 2],
        tests: &[Test],
    ) -> Result<(String, Vec<f64>, Vec<f64>)> {
        let label = joint::label(tests);
        let failed = |what: &'static str, label: &str| {
            let tests = label.to_string();
            move |e: FlowError| FlowError::Check {
                what,
                tests,
                source: Box::new(e),
            }
        };
        let mut rng = GlibcRand::new(1);
        let (vocab, bos) = (self.vocab, self.bos);
        // One warm-up run of each plan: first-touch page faults and pool
        // start-up are not what is compared.
        for (m, st) in models.iter().zip(states.iter_mut()) {
            time_tests(m, st, tests, &mut rng, vocab, bos).map_err(failed("warming up", &label))?;
        }
        let (mut d, mut t) = (Vec::new(), Vec::new());
        for r in 0..self.rounds {
            if self.stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                return Err(FlowError::Stopped);
            }
            // ABBA: neither plan always runs right after the other.
            let order = if r % 2 == 0 { [0, 1] } else { [1, 0] };
            for i in order {
                let s = time_tests(&models[i], &mut states[i], tests, &mut rng, vocab, bos)
                    .map_err(failed("timing", &label))?;
                if i == 0 { d.push(s) } else { t.push(s) }
            }
        }
        Ok((label, d, t))
    }
}
