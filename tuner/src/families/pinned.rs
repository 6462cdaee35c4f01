//! One pinned configuration of a family as a [`KernelProblem`], for
//! `tiletune bench`: exactly one candidate, seeded inputs made and the
//! reference computed once at construction, and input copies the timed runs
//! rotate through (one copy warm, enough to exceed the caches cold). The
//! caller validates once and times `run(0)`.
//!
//! What differs per family is small, a [`PinnedKernel`]: how to run on copy
//! `i` and where the output is. The rest (the candidate, the check against
//! the reference, the tolerance, the work model, the rotation) is
//! [`Pinned`].

use super::common::row_scaled_err;
use crate::campaign::{KernelProblem, Work};
use tiletune_kernels::testing::max_rel_err;
use tiletune_tables::{Candidate, Problem};

/// The per-family part of a pinned problem: its operands and one call.
pub(super) trait PinnedKernel: Send {
    /// How many input copies the timed runs rotate through.
    fn copies(&self) -> usize;
    /// Runs the configuration on input copy `copy`; `validating` is set for
    /// the one run that is checked (in-place kernels restore their input
    /// first), not for the timed runs.
    fn call(&mut self, copy: usize, validating: bool) -> tiletune_kernels::Result<()>;
    /// What the validating run writes.
    fn output(&mut self) -> &mut [f32];
}

/// How the validating run's output is compared with the reference.
pub(super) enum Check {
    /// The largest scale-aware relative error (`max_rel_err`).
    Relative(Vec<f32>),
    /// [`Check::Relative`] divided by `√k`: the f32 accumulation error of a
    /// length-`k` dot product grows like `√k·ε`.
    PerSqrtK { reference: Vec<f32>, k: usize },
    /// `|got − want| / Σ|w·x|` per output ([`row_scaled_err`]), for
    /// products whose terms may cancel.
    RowScaled {
        reference: Vec<f64>,
        magnitude: Vec<f64>,
    },
}

impl Check {
    fn error(&self, got: &[f32]) -> f32 {
        match self {
            Check::Relative(want) => max_rel_err(got, want),
            Check::PerSqrtK { reference, k } => {
                max_rel_err(got, reference) / ((*k).max(1) as f32).sqrt()
            }
            Check::RowScaled {
                reference,
                magnitude,
            } => row_scaled_err(got, reference, magnitude),
        }
    }
}

/// Per output, the f64 sum of its product terms and the sum of their
/// magnitudes (`Σ|w·x|`, which scales the bound of [`Check::RowScaled`]).
pub(super) fn products<I: Iterator<Item = f64> + Clone>(
    outputs: impl Iterator<Item = I>,
) -> (Vec<f64>, Vec<f64>) {
    outputs
        .map(|terms| (terms.clone().sum::<f64>(), terms.map(f64::abs).sum::<f64>()))
        .unzip()
}

/// A pinned configuration: its one candidate, its kernel, how it is checked
/// and the compulsory traffic of one run (every operand read or written
/// once; flops are multiply-adds × 2, 0 where the cost is transcendental
/// functions or copies rather than flops).
pub(super) struct Pinned<K> {
    pub spec: Problem,
    pub candidate: Candidate,
    pub kernel: K,
    pub check: Check,
    pub tolerance: f32,
    pub work: Work,
}

impl<K: PinnedKernel + 'static> Pinned<K> {
    /// The problem the campaign and `tiletune bench` run.
    pub(super) fn boxed(self) -> Box<dyn KernelProblem> {
        Box::new(PinnedProblem {
            pinned: self,
            next: 0,
        })
    }
}

struct PinnedProblem<K> {
    pinned: Pinned<K>,
    /// The copy the last timed run read.
    next: usize,
}

impl<K: PinnedKernel> KernelProblem for PinnedProblem<K> {
    fn spec(&self) -> &Problem {
        &self.pinned.spec
    }
    fn candidates(&self) -> &[Candidate] {
        std::slice::from_ref(&self.pinned.candidate)
    }
    fn default_index(&self) -> usize {
        0
    }
    fn validate(&mut self, _i: usize) -> Result<f32, String> {
        let p = &mut self.pinned;
        p.kernel.output().fill(f32::NAN);
        p.kernel.call(0, true).map_err(|e| e.to_string())?;
        Ok(p.check.error(p.kernel.output()))
    }
    fn tolerance(&self) -> f32 {
        self.pinned.tolerance
    }
    fn run(&mut self, _i: usize) {
        let k = &mut self.pinned.kernel;
        self.next = (self.next + 1) % k.copies().max(1);
        // Validation already proved this configuration runs on this shape.
        let _ = k.call(self.next, false);
    }
    fn work(&self) -> Work {
        self.pinned.work
    }
}
