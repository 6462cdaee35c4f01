//! What `tune` prints: the progress bar, the per-problem summary, the
//! joint layout choice and the model-level check's verdicts.

use indicatif::{ProgressBar, ProgressStyle};

use std::path::Path;
use std::time::Duration;
use tiletune_tables::{Phase, Verdict};
use tiletune_tuner::campaign::{ProblemReport, Progress};
use tiletune_tuner::joint::{self, Test, Workload};
use tiletune_tuner::{Candidate, Problem};

/// What the joint layout choice changed, one line per weight it moved.
pub(super) fn print_joint(weights: &[joint::WeightReport], workload: &Workload) {
    let moved: Vec<&joint::WeightReport> =
        weights.iter().filter(|w| !w.changed.is_empty()).collect();
    println!(
        "joint layout choice for {workload}: {} weight(s), {} moved to one shared layout",
        weights.len(),
        moved.len()
    );
    for w in moved {
        // The separate winners cost less only when they disagree on the
        // layout; otherwise the pass only stored what the campaign had not.
        let why = if w.choice.unconstrained_ns < w.choice.cost_ns {
            format!(
                "separate winners {:.1} µs, but they cannot all be held at once",
                w.choice.unconstrained_ns / 1e3
            )
        } else {
            "as fast as the separate winners".to_string()
        };
        let changed: Vec<String> = w.changed.iter().map(|(p, _)| p.dims_string()).collect();
        println!(
            "  {:<20} {}: workload {:.1} µs ({why}); set {}",
            w.weight,
            w.choice.layout,
            w.choice.cost_ns / 1e3,
            changed.join(" ")
        );
    }
}

fn short(c: &Candidate) -> String {
    let params = match c.params() {
        serde_json::Value::Object(m) => m
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(","),
        v => v.to_string(),
    };
    format!("{} {} {}", c.variant(), params, c.placement())
}

pub(super) fn print_summary(
    reports: &[ProblemReport],
    soc: &str,
    db: &Path,
    took: Duration,
    partial: bool,
) {
    println!(
        "tuned on {soc} in {:.1}s; selector table: {}",
        took.as_secs_f64(),
        db.display()
    );
    println!(
        "{:<28} {:>11} {:>11} {:>8} {:>6}  winner",
        "problem", "default", "tuned", "speedup", "evals"
    );
    for r in reports {
        match &r.selection {
            Some(s) => println!(
                "{:<28} {:>9.1}µs {:>9.1}µs {:>7.2}x {:>6}  {}{}",
                r.problem.to_string(),
                s.default_s * 1e6,
                s.median_s * 1e6,
                s.speedup(),
                r.evaluations,
                short(&s.winner),
                r.note
                    .as_deref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            ),
            None => println!(
                "{:<28} {:>11} {:>11} {:>8} {:>6}  ({})",
                r.problem.to_string(),
                "-",
                "-",
                "-",
                r.evaluations,
                r.note.as_deref().unwrap_or("no selection")
            ),
        }
    }
    if partial {
        println!(
            "the budget ran out: the best so far was kept; run the same command again to continue"
        );
    }
}

/// Progress bar over all candidates of all problems. When stderr is not a
/// terminal (a log file, `tiletune remote` streaming a device's run back)
/// the bar cannot draw, so each problem's start and end is a line instead.
pub(super) struct Bar {
    pub(super) bar: ProgressBar,
    problem: String,
    lines: bool,
}

impl Bar {
    pub(super) fn new(hidden: bool, total: u64) -> Self {
        let bar = if hidden {
            ProgressBar::hidden()
        } else {
            ProgressBar::new(total)
        };
        bar.set_style(
            ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} eta {eta} {msg}",
            )
            .expect("static template")
            .progress_chars("=> "),
        );
        Bar {
            bar,
            problem: String::new(),
            lines: !hidden && !std::io::IsTerminal::is_terminal(&std::io::stderr()),
        }
    }
}

impl Progress for Bar {
    fn problem_started(&mut self, i: usize, total: usize, p: &Problem, candidates: usize) {
        self.problem = format!("[{}/{}] {p}", i + 1, total);
        self.bar.set_message(self.problem.clone());
        if self.lines {
            eprintln!("{}: {candidates} candidate(s)", self.problem);
        }
    }
    fn evaluated(&mut self, _c: &Candidate, best_s: Option<f64>) {
        self.bar.inc(1);
        if let Some(b) = best_s {
            self.bar
                .set_message(format!("{} best {:.1}µs", self.problem, b * 1e6));
        }
    }
    fn problem_done(&mut self, r: &ProblemReport) {
        if self.lines {
            match &r.selection {
                Some(s) => eprintln!(
                    "{}: done, {} evaluation(s), best {:.1}µs",
                    self.problem,
                    r.evaluations,
                    s.median_s * 1e6
                ),
                None => match &r.note {
                    // Why there is none: stopped, out of budget, nothing valid.
                    Some(why) => eprintln!(
                        "{}: {} evaluation(s), no selection: {why}",
                        self.problem, r.evaluations
                    ),
                    None => eprintln!("{}: done, {} evaluation(s)", self.problem, r.evaluations),
                },
            }
        }
    }
}

/// The line of a phase the check does not time.
pub(super) fn print_as_default(phase: Phase, tests: &[Test]) {
    println!(
        "  {:<7} {:<12} not timed: the tuned plan runs the default plan's choices",
        phase.name(),
        joint::label(tests)
    );
}

/// One line per verdict: both plans' speeds and whether the other won.
pub(super) fn print_verdict(v: &Verdict, tests: &[Test], what: &str) {
    let tokens: usize = tests.iter().map(|t| t.tokens()).sum();
    let tps = |s: &[f64]| tokens as f64 / tiletune_bench::stats::median(s);
    println!(
        "  {:<7} {:<12} default {:>8.1} tok/s, tuned{what} {:>8.1} tok/s ({:.2}x, medians) → {}",
        v.phase.name(),
        v.test,
        tps(&v.default_s),
        tps(&v.tuned_s),
        v.ratio,
        if v.won {
            "won"
        } else {
            "no win beyond the noise"
        }
    );
}
