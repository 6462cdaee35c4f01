//! The model decides: the verdict of the alternated model-level A/B that
//! ends `tune --model` (tuned plan against default plan, one phase, one
//! thread count). Kernel-level wins are hypotheses; the runtime applies a
//! phase's tuned choices only where this verdict says they won.

use tiletune_bench::stats::median;

/// The verdict on one phase from alternated rounds (`default_s[i]` and
/// `tuned_s[i]` timed back to back in round `i`, seconds per run).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PhaseVerdict {
    /// median(default) / median(tuned): above 1 the tuned plan is faster.
    pub ratio: f64,
    /// Whether the tuned plan won beyond the noise.
    pub won: bool,
}

/// Fewest rounds a verdict is taken from: with 3 + 3 timings, "every tuned
/// round faster than every default round" happens by chance with
/// probability 1 / C(6, 3) = 0.05 when the plans are equally fast.
pub const MIN_ROUNDS: usize = 3;

/// The tuned plan wins when every tuned round is faster than every default
/// round: the Mann–Whitney U statistic is 0, the one-sided rank test's
/// most extreme outcome (p = 1 / C(2n, n); 0.05 at 3 rounds, 0.014 at 4).
/// A test on ranks needs no noise model, which a VM whose bandwidth moves
/// between rounds would break; it is strict, so an unproven win keeps the
/// default, which is what a user who tunes must never be slower than.
/// Fewer than [`MIN_ROUNDS`] rounds, unequal lists or a non-finite timing
/// never win.
pub fn decide(default_s: &[f64], tuned_s: &[f64]) -> PhaseVerdict {
    let ok = default_s.len() == tuned_s.len()
        && default_s.len() >= MIN_ROUNDS
        && default_s
            .iter()
            .chain(tuned_s)
            .all(|t| t.is_finite() && *t > 0.0);
    let ratio = if ok {
        median(default_s) / median(tuned_s)
    } else {
        f64::NAN
    };
    let slowest_tuned = tuned_s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let fastest_default = default_s.iter().copied().fold(f64::INFINITY, f64::min);
    PhaseVerdict {
        ratio,
        won: ok && slowest_tuned < fastest_default,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_separation_of_every_round_wins() {
        let v = decide(&[1.10, 1.12, 1.11], &[1.00, 1.01, 1.02]);
        assert!(v.won);
        assert!((v.ratio - 1.11 / 1.01).abs() < 1e-12);
        // One tuned round as slow as a default one: not beyond the noise.
        let v = decide(&[1.10, 1.12, 1.11], &[1.00, 1.10, 1.02]);
        assert!(!v.won && v.ratio > 1.0);
        // Slower is never a win.
        assert!(!decide(&[1.0, 1.0, 1.0], &[1.1, 1.2, 1.3]).won);
        // Too few rounds, unequal lists, garbage timings.
        assert!(!decide(&[2.0, 2.0], &[1.0, 1.0]).won);
        assert!(!decide(&[2.0, 2.0, 2.0], &[1.0, 1.0]).won);
        assert!(!decide(&[2.0, f64::NAN, 2.0], &[1.0, 1.0, 1.0]).won);
        assert!(!decide(&[2.0, 2.0, 2.0], &[1.0, 0.0, 1.0]).won);
    }
}
