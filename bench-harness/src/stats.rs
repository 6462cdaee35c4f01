//! Robust summary statistics of timing samples.
//!
//! Timings are skewed (a floor set by the hardware, a long tail from
//! interrupts, frequency changes and other tenants), so the summary is built on
//! the median, not the mean:
//!
//! - **Spread**: the median absolute deviation, `MAD = median(|x_i - median|)`
//!   (unscaled).
//! - **Outliers**: the modified z-score of Iglewicz & Hoaglin,
//!   `M_i = 0.6745 * (x_i - median) / MAD`, with `|M_i| > 3.5` marking an
//!   outlier (B. Iglewicz and D. C. Hoaglin, *How to Detect and Handle
//!   Outliers*, ASQC Quality Press, 1993). The constant 0.6745 is the 0.75
//!   quantile of the standard normal, which makes `MAD / 0.6745` a consistent
//!   estimate of σ for normal data. When `MAD = 0` (more than half the samples
//!   are identical, e.g. a coarse clock) the score is undefined and no sample
//!   is marked. hyperfine uses the same rule.
//! - **95% confidence interval of the median**: distribution-free, from order
//!   statistics. For `n` samples the interval `[x_(j), x_(k)]` with
//!   `j = floor(n/2 - 0.98 sqrt(n))`, `k = ceil(n/2 + 1 + 0.98 sqrt(n))`
//!   (1-based ranks) covers the true median with probability ≈ 95%
//!   (J.-Y. Le Boudec, *Performance Evaluation of Computer and Communication
//!   Systems*, EPFL Press 2010, Theorem 2.1 and its normal approximation to
//!   the binomial, 0.98 = 1.96 / 2; the test checks the exact binomial
//!   coverage is ≥ 95% for n = 6..400). Below `n = 6` no interval reaches 95%
//!   and `[min, max]` is reported with `ci_exact = false`.

use serde::{Deserialize, Serialize};

/// Summary of a set of samples (all in the samples' unit, here nanoseconds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    pub mad: f64,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    pub ci95_low: f64,
    pub ci95_high: f64,
    /// The interval is a true ≥95% order-statistic interval (n ≥ 6).
    pub ci_exact: bool,
    /// Indices (into the sample vector) of modified-z-score outliers.
    pub outliers: Vec<usize>,
}

/// Threshold on |modified z-score| (Iglewicz & Hoaglin 1993).
pub const OUTLIER_Z: f64 = 3.5;
/// 0.75 quantile of N(0, 1).
pub const MAD_NORMAL_CONSTANT: f64 = 0.6745;

/// Median of an already sorted slice; `NaN` when empty.
pub fn median_sorted(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]),
    }
}

fn sorted(xs: &[f64]) -> Vec<f64> {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

/// Median of any slice.
pub fn median(xs: &[f64]) -> f64 {
    median_sorted(&sorted(xs))
}

/// Median absolute deviation (unscaled).
pub fn mad(xs: &[f64]) -> f64 {
    let m = median(xs);
    let dev: Vec<f64> = xs.iter().map(|x| (x - m).abs()).collect();
    median(&dev)
}

/// Modified z-scores; `None` when MAD is zero.
pub fn modified_z_scores(xs: &[f64]) -> Option<Vec<f64>> {
    let m = median(xs);
    let d = mad(xs);
    if d.is_nan() || d <= 0.0 {
        return None;
    }
    Some(
        xs.iter()
            .map(|x| MAD_NORMAL_CONSTANT * (x - m) / d)
            .collect(),
    )
}

/// Indices of outliers by the modified z-score rule.
pub fn outliers(xs: &[f64]) -> Vec<usize> {
    modified_z_scores(xs).map_or_else(Vec::new, |z| {
        z.iter()
            .enumerate()
            .filter(|(_, z)| z.abs() > OUTLIER_Z)
            .map(|(i, _)| i)
            .collect()
    })
}

/// 1-based ranks `(j, k)` of the 95% order-statistic interval of the median,
/// or `None` when `n < 6`.
pub fn median_ci_ranks(n: usize) -> Option<(usize, usize)> {
    if n < 6 {
        return None;
    }
    let nf = n as f64;
    let half = 0.98 * nf.sqrt();
    let j = (0.5 * nf - half).floor().max(1.0) as usize;
    let k = (0.5 * nf + 1.0 + half).ceil().min(nf) as usize;
    Some((j, k))
}

impl Summary {
    /// Summarizes `xs`; `None` for an empty slice.
    pub fn of(xs: &[f64]) -> Option<Summary> {
        if xs.is_empty() {
            return None;
        }
        let s = sorted(xs);
        let n = s.len();
        let (lo, hi, exact) = match median_ci_ranks(n) {
            Some((j, k)) => (s[j - 1], s[k - 1], true),
            None => (s[0], s[n - 1], false),
        };
        Some(Summary {
            n,
            median: median_sorted(&s),
            mad: mad(xs),
            mean: xs.iter().sum::<f64>() / n as f64,
            min: s[0],
            max: s[n - 1],
            ci95_low: lo,
            ci95_high: hi,
            ci_exact: exact,
            outliers: outliers(xs),
        })
    }

    /// MAD relative to the median (a unitless spread).
    pub fn relative_mad(&self) -> f64 {
        if self.median > 0.0 {
            self.mad / self.median
        } else {
            f64::NAN
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_mad_by_hand() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        // |x - 3| = 2,1,0,1,6 -> median 1
        assert_eq!(mad(&[1.0, 2.0, 3.0, 4.0, 9.0]), 1.0);
    }

    #[test]
    fn modified_z_marks_only_the_far_point() {
        // median 10, MAD 1; 20 has M = 0.6745 * 10 = 6.7 > 3.5; 14 has 2.7.
        let xs = [9.0, 10.0, 11.0, 10.0, 9.0, 11.0, 14.0, 20.0, 10.0];
        assert_eq!(median(&xs), 10.0);
        assert_eq!(mad(&xs), 1.0);
        assert_eq!(outliers(&xs), vec![7]);
        let z = modified_z_scores(&xs).unwrap();
        assert!((z[7] - 6.745).abs() < 1e-12);
        // MAD = 0: undefined, nothing is marked.
        assert_eq!(outliers(&[5.0, 5.0, 5.0, 9.0]), Vec::<usize>::new());
    }

    /// P(j <= B <= k-1) for B ~ Binomial(n, 1/2): the probability that
    /// [x_(j), x_(k)] contains the true median.
    fn coverage(n: usize, j: usize, k: usize) -> f64 {
        // log-space binomial pmf to stay finite for large n.
        let ln_fact = |m: usize| (1..=m).map(|i| (i as f64).ln()).sum::<f64>();
        let lf_n = ln_fact(n);
        (j..k)
            .map(|b| (lf_n - ln_fact(b) - ln_fact(n - b) - n as f64 * 2f64.ln()).exp())
            .sum()
    }

    #[test]
    fn order_statistic_interval_covers_the_median_95_percent() {
        assert_eq!(median_ci_ranks(5), None);
        assert_eq!(median_ci_ranks(6), Some((1, 6)));
        assert_eq!(median_ci_ranks(11), Some((2, 10)));
        assert_eq!(median_ci_ranks(100), Some((40, 61)));
        let mut worst = 1.0f64;
        for n in 6..=400 {
            let (j, k) = median_ci_ranks(n).unwrap();
            assert!(1 <= j && j < k && k <= n, "n={n}: ({j},{k})");
            worst = worst.min(coverage(n, j, k));
        }
        assert!(worst >= 0.95, "worst coverage {worst}");
        // And not absurdly wide: for large n the coverage is close to 95%.
        let (j, k) = median_ci_ranks(400).unwrap();
        assert!(coverage(400, j, k) < 0.97);
    }

    #[test]
    fn summary_of_known_samples() {
        let xs: Vec<f64> = (1..=11).map(f64::from).collect();
        let s = Summary::of(&xs).unwrap();
        assert_eq!(s.n, 11);
        assert_eq!(s.median, 6.0);
        assert_eq!(s.mad, 3.0);
        assert_eq!(s.mean, 6.0);
        assert_eq!((s.min, s.max), (1.0, 11.0));
        // n = 11: j = floor(5.5 - 3.25) = 2, k = ceil(6.5 + 3.25) = 10.
        assert_eq!((s.ci95_low, s.ci95_high), (2.0, 10.0));
        assert!(s.ci_exact);
        assert!(s.outliers.is_empty());
        assert!((s.relative_mad() - 0.5).abs() < 1e-12);
        let small = Summary::of(&[3.0, 1.0]).unwrap();
        assert!(!small.ci_exact);
        assert_eq!((small.ci95_low, small.ci95_high), (1.0, 3.0));
        assert_eq!(Summary::of(&[]), None);
    }
}
