//! llama-bench's statistics (`avg` and `stdev` in llama-bench.cpp), so that
//! `avg_ns`, `stddev_ns`, `avg_ts` and `stddev_ts` mean the same thing in
//! both tools' records.

/// llama-bench's `avg`: integer division for integers.
pub fn avg_u64(v: &[u64]) -> u64 {
    if v.is_empty() {
        return 0;
    }
    (v.iter().map(|&x| u128::from(x)).sum::<u128>() / v.len() as u128) as u64
}

/// llama-bench's `stdev` on integers: `sqrt(Σx²/(n−1) − mean²·n/(n−1))` in
/// integer arithmetic (u128 here so large samples cannot overflow; a
/// negative radicand from truncation is 0 rather than a wrapped value).
pub fn stdev_u64(v: &[u64]) -> u64 {
    if v.len() <= 1 {
        return 0;
    }
    let n = v.len() as u128;
    let mean = u128::from(avg_u64(v));
    let sq: u128 = v.iter().map(|&x| u128::from(x) * u128::from(x)).sum();
    let rad = (sq / (n - 1)).saturating_sub(mean * mean * n / (n - 1));
    (rad as f64).sqrt() as u64
}

/// llama-bench's `avg` on doubles.
pub fn avg_f64(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.iter().sum::<f64>() / v.len() as f64
}

/// llama-bench's `stdev` on doubles; a radicand that rounds below zero
/// (equal samples) gives 0, where llama-bench would print nan.
pub fn stdev_f64(v: &[f64]) -> f64 {
    if v.len() <= 1 {
        return 0.0;
    }
    let n = v.len() as f64;
    let mean = avg_f64(v);
    let sq: f64 = v.iter().map(|x| x * x).sum();
    (sq / (n - 1.0) - mean * mean * n / (n - 1.0))
        .max(0.0)
        .sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_follow_llama_bench() {
        assert_eq!(avg_u64(&[]), 0);
        assert_eq!(stdev_u64(&[5]), 0);
        assert_eq!(avg_u64(&[1, 2]), 1);
        // Σx² = 1400, mean = 20 (60/3): 1400/2 − 400·3/2 = 100 → 10.
        assert_eq!(stdev_u64(&[10, 20, 30]), 10);
        let ts = [10.0, 20.0, 30.0];
        assert!((avg_f64(&ts) - 20.0).abs() < 1e-12);
        assert!((stdev_f64(&ts) - 10.0).abs() < 1e-9);
        // Equal samples: the formula leaves only rounding error.
        assert!(stdev_f64(&[3.3, 3.3, 3.3]) < 1e-6);
    }
}
