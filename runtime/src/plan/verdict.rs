//! The model-level verdicts applied to a plan: which phases run their
//! table choices, so that what runs is always what `tune --model` timed.
//!
//! A quantized weight holds one layout, its decode choice's
//! ([`super::resolve_layouts`]), so the phases are not independent: giving
//! a phase that lost its defaults back does not give back the default plan's
//! kernels when the other phase's tuned choices keep the weight in another
//! layout. The defaults of the lost phase then run moved onto that layout,
//! a plan neither verdict timed (prefill moved onto decode's interleave 8
//! ran `avx2.qgemm` where the default plan runs `avx512_vnni.qgemm`).
//!
//! So the verdicts choose among whole plans: the [`Mix`]es of tuned and
//! default phases, most tuned first. A mix may run when every phase that has
//! a stored verdict runs exactly the default plan's choices of that phase or
//! choices the verdict timed and found faster (its `plan_digest` and `won`).
//! The all-default mix always qualifies. `tune --model` times the mix its
//! verdicts prefer where that mix moves a phase ([`super::ExecutionPlan::build_mix`]),
//! and stores that phase's verdict for the moved choices.

use std::fmt;

use tiletune_tables::{Phase, Verdict};

use super::{Defaults, PlanEntry, Source, phase_digest, phase_of, resolve_layouts, to_defaults};

/// Which phases run their table choices; the others run their defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mix {
    pub prefill: bool,
    pub decode: bool,
}

impl Mix {
    pub const TUNED: Mix = Mix {
        prefill: true,
        decode: true,
    };
    pub const DEFAULT: Mix = Mix {
        prefill: false,
        decode: false,
    };

    /// The order mixes are tried in: most tuned first, and decode (most of
    /// a generation's time) before prefill.
    const PREFERENCE: [Mix; 4] = [
        Mix::TUNED,
        Mix {
            prefill: false,
            decode: true,
        },
        Mix {
            prefill: true,
            decode: false,
        },
        Mix::DEFAULT,
    ];

    /// The mix that tunes the phases `tuned` says.
    pub fn of(tuned: impl Fn(Phase) -> bool) -> Mix {
        Mix {
            prefill: tuned(Phase::Prefill),
            decode: tuned(Phase::Decode),
        }
    }

    /// Whether the mix runs `phase`'s table choices.
    pub fn tunes(self, phase: Phase) -> bool {
        match phase {
            Phase::Prefill => self.prefill,
            Phase::Decode => self.decode,
        }
    }
}

fn other(phase: Phase) -> Phase {
    match phase {
        Phase::Prefill => Phase::Decode,
        Phase::Decode => Phase::Prefill,
    }
}

/// `base` (each problem's table choice or default, layouts not resolved)
/// with its defaults back in the phases `mix` does not tune, layouts
/// resolved.
pub(super) fn mixed(base: &[PlanEntry], mix: Mix, d: &Defaults<'_>) -> Vec<PlanEntry> {
    let mut e = base.to_vec();
    for phase in Phase::ALL {
        if !mix.tunes(phase) {
            to_defaults(&mut e, phase, d);
        }
    }
    resolve_layouts(&mut e, d.caps);
    e
}

/// The entries that run under the `stored` verdicts, and what each phase's
/// verdict decided.
pub(super) fn apply(
    base: &[PlanEntry],
    stored: &[Verdict],
    d: &Defaults<'_>,
) -> (Vec<PlanEntry>, Vec<VerdictCheck>) {
    let verdict = |p: Phase| stored.iter().find(|v| v.phase == p);
    let plans: Vec<(Mix, Vec<PlanEntry>)> = Mix::PREFERENCE
        .iter()
        .map(|&m| (m, mixed(base, m, d)))
        .collect();
    let digest = |m: Mix, p: Phase| {
        let (_, e) = plans
            .iter()
            .find(|(x, _)| *x == m)
            .expect("every mix is built");
        phase_digest(e, p)
    };
    let timed = |e: &[PlanEntry]| {
        Phase::ALL.iter().all(|&p| match verdict(p) {
            None => true,
            Some(v) => {
                let g = phase_digest(e, p);
                g == digest(Mix::DEFAULT, p) || (v.won && g == v.plan_digest)
            }
        })
    };
    let (mix, entries) = plans
        .iter()
        .find(|(_, e)| timed(e))
        .cloned()
        .expect("the default mix runs only the default plan's choices");
    let checks = Phase::ALL
        .into_iter()
        .map(|phase| {
            let chosen = base
                .iter()
                .filter(|e| phase_of(&e.problem) == phase && e.source != Source::Default)
                .count();
            let tuned = digest(Mix::TUNED, phase);
            let default = digest(Mix::DEFAULT, phase);
            let state = match verdict(phase) {
                None if chosen == 0 => VerdictState::NothingTuned,
                None if tuned == default => VerdictState::AsDefault,
                None => VerdictState::Unverified,
                Some(_) if chosen == 0 && tuned == default => VerdictState::NothingTuned,
                Some(v) if v.plan_digest == tuned => VerdictState::Checked(v.clone()),
                Some(v)
                    if Mix::PREFERENCE
                        .iter()
                        .any(|&m| digest(m, phase) == v.plan_digest) =>
                {
                    VerdictState::Mixed(v.clone())
                }
                Some(v) => VerdictState::Stale(v.clone()),
            };
            let runs = phase_digest(&entries, phase);
            let pure = if mix.tunes(phase) { &tuned } else { &default };
            VerdictCheck {
                phase,
                chosen,
                // Table choices that resolve to the default plan's (the
                // joint layout pass stores some as selections) are the
                // defaults running, whatever the mix.
                tuned: mix.tunes(phase) && chosen > 0 && runs != default,
                moved: runs != *pure,
                overruled: !matches!(state, VerdictState::Stale(_))
                    && verdict(phase).is_some_and(|v| v.won && v.plan_digest != runs),
                state,
            }
        })
        .collect();
    (entries, checks)
}

/// What the model-level verdict of one phase says about this plan.
#[derive(Debug, Clone, PartialEq)]
pub struct VerdictCheck {
    pub phase: Phase,
    /// Entries of the phase the table chose (tuned or nearest).
    pub chosen: usize,
    /// Whether the phase's table choices run.
    pub tuned: bool,
    /// Whether what runs is moved onto the layouts the other phase's
    /// choices hold (see the module docs).
    pub moved: bool,
    /// Whether the verdict found its choices faster, yet they do not run:
    /// beside what the other phase runs they would run untimed.
    pub overruled: bool,
    pub state: VerdictState,
}

/// What is stored about a phase's tuned choices.
#[derive(Debug, Clone, PartialEq)]
pub enum VerdictState {
    /// Nothing of the phase came from the table: the defaults run.
    NothingTuned,
    /// The phase's table choices are the default plan's (the defaults won
    /// every problem's tuning, or the joint layout pass stored them):
    /// `tune --model` has nothing to time, and stores no verdict.
    AsDefault,
    /// No verdict is stored for these choices (a table from `tune --op`,
    /// `--suite`, an import, or from before verdicts): they run unchecked.
    Unverified,
    /// The stored verdict is for exactly these choices.
    Checked(Verdict),
    /// The stored verdict is for the phase as a mix runs it: its defaults
    /// or its tuned choices moved onto the other phase's layouts.
    Mixed(Verdict),
    /// A verdict is stored, but for other choices: the table changed since
    /// the model was timed, so the defaults run until it is timed again.
    Stale(Verdict),
}

impl VerdictState {
    /// The stored verdict, if any.
    pub fn verdict(&self) -> Option<&Verdict> {
        match self {
            VerdictState::Checked(v) | VerdictState::Mixed(v) | VerdictState::Stale(v) => Some(v),
            VerdictState::NothingTuned | VerdictState::AsDefault | VerdictState::Unverified => None,
        }
    }

    /// `checked`, `stale`, …: the JSON name.
    pub fn name(&self) -> &'static str {
        match self {
            VerdictState::NothingTuned => "nothing tuned",
            VerdictState::AsDefault => "as default",
            VerdictState::Unverified => "unverified",
            VerdictState::Checked(_) => "checked",
            VerdictState::Mixed(_) => "mixed",
            VerdictState::Stale(_) => "stale",
        }
    }
}

impl VerdictCheck {
    /// Whether the phase's tuned choices run.
    pub fn tuned_runs(&self) -> bool {
        self.tuned
    }
}

impl fmt::Display for VerdictCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rounds = |v: &Verdict| {
            format!(
                "{} {:.2}x over {} alternated rounds ({}, {} threads)",
                v.test,
                v.ratio,
                v.tuned_s.len(),
                v.model_name,
                v.threads
            )
        };
        let won = |v: &Verdict| match v.won {
            true => "won",
            false => "did not win beyond the noise",
        };
        let other = other(self.phase);
        write!(f, "{}: ", self.phase)?;
        match &self.state {
            VerdictState::NothingTuned => write!(f, "nothing tuned")?,
            VerdictState::AsDefault => write!(
                f,
                "{} choice(s) from the table, each the default plan's (nothing to time)",
                self.chosen
            )?,
            VerdictState::Unverified => write!(
                f,
                "{} choice(s) from the table, no model-level check stored for them (run `tiletune tune --model` to time them against the defaults)",
                self.chosen
            )?,
            VerdictState::Checked(v) => write!(f, "tuned {}, {}", won(v), rounds(v))?,
            VerdictState::Mixed(v) => write!(
                f,
                "timed as it runs beside the {other} phase's choices, {}, {}",
                won(v),
                rounds(v)
            )?,
            VerdictState::Stale(v) => write!(
                f,
                "the table's choices changed since the model-level check ({})",
                rounds(v)
            )?,
        }
        let what = match (self.tuned, &self.state) {
            (true, VerdictState::Unverified) => "the tuned choices run unverified",
            (true, _) => "the tuned choices run",
            (false, _) => "the defaults run",
        };
        write!(f, "; {what}")?;
        if self.moved {
            write!(f, " on the layouts the {other} phase's choices hold")?;
        }
        if matches!(self.state, VerdictState::Stale(_)) && !self.tuned {
            write!(f, " until `tiletune tune --model` times them again")?;
        }
        if self.overruled {
            write!(
                f,
                " (the choices it timed would run beside {other} choices no check timed them with)"
            )?;
        }
        Ok(())
    }
}
