//! What a tuning campaign reports while it runs, in the order it happens:
//! the typed progress that `tiletune tune` prints and the C ABI forwards to
//! its progress callback. Both the campaign (`tune`) and the model-level
//! check (`accept`) report through it.

use std::time::Duration;
use tiletune_tables::{Campaign, Phase, Problem, Verdict};
use tiletune_tuner::Candidate;
use tiletune_tuner::campaign::ProblemReport;
use tiletune_tuner::joint::{Test, WeightReport, Workload};

/// What a campaign is doing, in the order it happens.
#[derive(Debug)]
pub enum TuneEvent<'a> {
    /// The thread budget is chosen (a front end may warn when it is more
    /// than the CPUs the process may run on).
    Threads(usize),
    /// An interrupted campaign of the same kind continues: its measurements
    /// are found again by key, so nothing is measured twice.
    Resumed {
        campaign: &'a Campaign,
    },
    /// Problems of a model that no family tunes yet, with why; they run
    /// their defaults.
    Skipped(&'a [(Problem, String)]),
    /// Pinned placements left out because their CPUs are offline or outside
    /// the process's affinity mask, one note per CPU set.
    PlacementsLeftOut(&'a [String]),
    /// Why timings may be noisy now (busy CPUs, a power-saving governor).
    Noisy(&'a [String]),
    /// Measuring starts: how many candidates the problems have in all.
    CampaignStarted {
        candidates: u64,
    },
    ProblemStarted {
        index: usize,
        total: usize,
        problem: &'a Problem,
        candidates: usize,
    },
    /// One candidate was measured (or found invalid); `best_s` is the
    /// problem's best median so far.
    Evaluated {
        candidate: &'a Candidate,
        best_s: Option<f64>,
    },
    ProblemDone(&'a ProblemReport),
    /// Measuring is over (the winners are stored).
    CampaignDone {
        reports: &'a [ProblemReport],
        soc_name: &'a str,
        elapsed: Duration,
        out_of_budget: bool,
    },
    /// The joint layout choice of a model's weights is stored.
    JointStored {
        weights: &'a [WeightReport],
        workload: &'a Workload,
    },
    /// The model-level check starts; it times `timed` phases (none when
    /// the tuned plan runs the default plan's choices in every phase).
    CheckStarted {
        rounds: usize,
        threads: usize,
        timed: usize,
    },
    /// A phase the check does not time: the tuned plan runs the default
    /// plan's choices in it (no verdict is stored, and an older one is
    /// removed).
    AsDefault {
        phase: Phase,
        tests: &'a [Test],
    },
    /// A phase's verdict; `beside_other_phase` when it timed that phase's
    /// choices moved beside the other phase's tuned ones.
    Verdict {
        verdict: &'a Verdict,
        tests: &'a [Test],
        beside_other_phase: bool,
    },
}
