//! `tiletune bench <family>`: one configuration built
//! ([`families::instantiate_one`]), checked once against its scalar
//! reference, refused if it disagrees, then timed from inside its pool with
//! the measuring thread one of the workers, as the runtime calls it (see
//! [`crate::adapters::HarnessMeasure`]).

use std::sync::Arc;

use tiletune_bench::{Harness, MeasureConfig, MeasureProgress, Measurement};
use tiletune_pmu::EventSetKind;
use tiletune_tables::{Candidate, Problem, Work};

use crate::TunerError;
use crate::families::{self, Machine, OneConfig};

/// Where a run is, for a progress display: large problems take seconds to
/// build (the f64 reference) and to measure.
#[derive(Debug, Clone, Copy)]
pub enum Stage {
    /// Making the inputs and the scalar reference.
    Building,
    /// The one checked run.
    Validating,
    /// The timed runs.
    Measuring(MeasureProgress),
}

/// Called at each [`Stage`], from the thread that times (a pool worker).
pub type OnStage = Arc<dyn Fn(Stage) + Send + Sync>;

/// How to time one configuration.
pub struct OneRunConfig {
    pub schedule: MeasureConfig,
    /// CPUs the workers are pinned to (empty: not pinned).
    pub pin: Vec<usize>,
    pub counters: EventSetKind,
    pub on_stage: Option<OnStage>,
}

/// What timing one configuration gave.
#[derive(Debug)]
pub struct OneRun {
    pub candidate: Candidate,
    /// The checked run's error against the reference, within `tolerance`.
    pub validation_error: f32,
    pub tolerance: f32,
    /// Bytes moved and flops done by one run.
    pub work: Work,
    pub measurement: Measurement,
    /// Why the counters asked for could not all be read, if so.
    pub counters_note: Option<String>,
}

/// Builds, checks and times `spec` as `one` configures it.
pub fn time_one(
    spec: &Problem,
    machine: &Machine,
    one: &OneConfig,
    cfg: OneRunConfig,
) -> Result<OneRun, TunerError> {
    let stage = |s: Stage| {
        if let Some(f) = &cfg.on_stage {
            f(s)
        }
    };
    stage(Stage::Building);
    let mut p = families::instantiate_one(spec, machine, one)?;
    stage(Stage::Validating);
    let candidate = p.candidates()[0].clone();
    let tolerance = p.tolerance();
    let wrong = |why: String| TunerError::WrongKernel {
        problem: spec.to_string(),
        variant: candidate.variant().to_string(),
        why,
    };
    let err = p.validate(0).map_err(wrong)?;
    if err.is_nan() || err > tolerance {
        return Err(wrong(format!(
            "{} disagrees with the scalar reference (error {err:e} > tolerance {tolerance:e}); refusing to time a wrong kernel",
            candidate.params()
        )));
    }
    let threads = candidate.threads();
    let tids = families::worker_tids(threads);
    let OneRunConfig {
        schedule,
        pin,
        counters,
        on_stage,
    } = cfg;
    let key = spec.key();
    let measure = || {
        let mut h = Harness::new(schedule)?.workers(tids);
        if !pin.is_empty() {
            h = h.pinned(pin);
        }
        if let Some(f) = on_stage {
            h = h.on_progress(move |pr| f(Stage::Measuring(pr)));
        }
        let note = h.attach_counters(counters);
        Ok::<_, tiletune_bench::BenchError>((h.measure(&key, || p.run(0))?, note))
    };
    let (measurement, note) = tiletune_kernels::pool::install_awake(threads, measure)?;
    Ok(OneRun {
        work: p.work(),
        candidate,
        validation_error: err,
        tolerance,
        measurement,
        counters_note: note.map(|n| n.to_string()),
    })
}
