//! Every available variant × parameter set against the scalar reference.

use super::*;
use crate::eltwise::available_isas;
use crate::testing::{Rng, assert_close};

const DIMS: [usize; 13] = [0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1000, 4099];
const ATOL: f32 = 1e-9;
const RTOL: f32 = 1e-5;

fn params() -> Vec<SoftmaxParams> {
    let cpu = CpuCaps {
        cores: 3,
        ..CpuCaps::default()
    };
    let mut v = SoftmaxParams::candidates(&SoftmaxShape { rows: 6, dim: 64 }, &cpu);
    v.push(SoftmaxParams { threads: 2 });
    v.push(SoftmaxParams { threads: 3 });
    v
}

fn logits(rng: &mut Rng, n: usize, spread: f32) -> Vec<f32> {
    (0..n).map(|_| rng.uniform(-spread, spread)).collect()
}

fn reference(x: &[f32], rows: usize, dim: usize) -> Vec<f32> {
    let mut want = x.to_vec();
    if dim > 0 {
        for r in want.chunks_exact_mut(dim).take(rows) {
            scalar::row(r, dim, 1.0);
        }
    }
    want
}

#[test]
fn softmax_matches_scalar_on_every_lane() {
    for isa in available_isas() {
        for (di, &dim) in DIMS.iter().enumerate() {
            for rows in [1, 6] {
                let mut rng = Rng::new(500 + di as u64);
                let x = logits(&mut rng, rows * dim, 20.0);
                let want = reference(&x, rows, dim);
                for p in params() {
                    let mut got = x.clone();
                    softmax_with(&mut got, rows, dim, isa, &p).unwrap();
                    assert_close(&got, &want, ATOL, RTOL, &format!("{isa} dim={dim} rows={rows} {p:?}"));
                    if dim > 0 {
                        for r in got.chunks_exact(dim) {
                            let s: f32 = r.iter().sum();
                            assert!((s - 1.0).abs() < 1e-4, "{isa} dim={dim}: row sums to {s}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn softmax_non_finite_rows() {
    let ninf = f32::NEG_INFINITY;
    let rows: Vec<(Vec<f32>, &str)> = vec![
        ((0..19).map(|i| if i % 3 == 0 { ninf } else { i as f32 }).collect(), "some -inf"),
        (vec![ninf; 19], "all -inf"),
        ((0..19).map(|i| if i == 17 { f32::NAN } else { i as f32 }).collect(), "nan"),
        ((0..19).map(|i| if i == 3 { f32::INFINITY } else { i as f32 }).collect(), "+inf"),
        ((0..19).map(|i| if i == 5 { f32::NAN } else { ninf }).collect(), "nan among -inf"),
    ];
    for isa in available_isas() {
        for (x, what) in &rows {
            let want = reference(x, 1, x.len());
            let mut got = x.clone();
            softmax_with(&mut got, 1, x.len(), isa, &SoftmaxParams { threads: 1 }).unwrap();
            assert_close(&got, &want, ATOL, RTOL, &format!("{isa} {what}"));
        }
    }
    // The documented rules, checked on the reference itself.
    let w = reference(&rows[0].0, 1, 19);
    assert!(w.iter().step_by(3).all(|&p| p == 0.0));
    assert!((w.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    assert!(reference(&rows[1].0, 1, 19).iter().all(|&p| p == 0.0));
    assert!(reference(&rows[2].0, 1, 19).iter().all(|p| p.is_nan()));
    assert!(reference(&rows[3].0, 1, 19).iter().all(|p| p.is_nan()));
}

#[test]
fn causal_matches_scalar_and_masks() {
    for isa in available_isas() {
        for &(q_rows, kv_len, pos0) in &[(1, 1, 0), (1, 33, 32), (7, 7, 0), (5, 40, 20), (17, 100, 83), (3, 1000, 997)] {
            let mut rng = Rng::new(700 + kv_len as u64);
            let x = logits(&mut rng, q_rows * kv_len, 30.0);
            let mask = CausalMask { q_rows, kv_len, pos0, scale: 0.125 };
            let mut want = x.clone();
            for (i, r) in want.chunks_exact_mut(kv_len).enumerate() {
                scalar::row(r, pos0 + i + 1, 0.125);
            }
            for p in params() {
                let mut got = x.clone();
                // Masked positions may hold garbage: they must not be read.
                for (i, r) in got.chunks_exact_mut(kv_len).enumerate() {
                    r[pos0 + i + 1..].fill(f32::NAN);
                }
                softmax_causal_with(&mut got, &mask, isa, &p).unwrap();
                let what = format!("{isa} q={q_rows} kv={kv_len} pos0={pos0} {p:?}");
                assert_close(&got, &want, ATOL, RTOL, &what);
                for (i, r) in got.chunks_exact(kv_len).enumerate() {
                    assert!(r[pos0 + i + 1..].iter().all(|&v| v == 0.0), "{what}: mask");
                }
            }
        }
    }
}

/// Independent oracle: sort all indices (value descending, NaN last,
/// stable so ties keep the lower index), take k, probabilities from the
/// reference softmax of the whole row.
fn topk_oracle(x: &[f32], k: usize) -> (Vec<u32>, Vec<f32>) {
    let mut order: Vec<usize> = (0..x.len()).collect();
    order.sort_by(|&a, &b| {
        let (va, vb) = (x[a], x[b]);
        match (va.is_nan(), vb.is_nan()) {
            (true, true) => std::cmp::Ordering::Equal,
            (true, false) => std::cmp::Ordering::Greater,
            (false, true) => std::cmp::Ordering::Less,
            _ => vb.partial_cmp(&va).unwrap(),
        }
    });
    let p = reference(x, 1, x.len());
    let idx: Vec<u32> = order[..k].iter().map(|&i| i as u32).collect();
    let probs = order[..k].iter().map(|&i| p[i]).collect();
    (idx, probs)
}

#[test]
fn topk_matches_oracle_on_every_lane() {
    for isa in available_isas() {
        for (di, &n) in DIMS.iter().enumerate().skip(1) {
            let mut rng = Rng::new(900 + di as u64);
            // Coarse values so that ties happen.
            let mut x: Vec<f32> = (0..n).map(|_| (rng.uniform(-8.0, 8.0) * 4.0).round() / 4.0).collect();
            if n > 20 {
                x[n / 2] = f32::NEG_INFINITY;
            }
            for k in [1, 2, 5, 40, n] {
                if k > n {
                    continue;
                }
                let (want_idx, want_p) = topk_oracle(&x, k);
                let mut idx = vec![0u32; k];
                let mut p = vec![0f32; k];
                softmax_topk_with(&x, &mut idx, &mut p, isa).unwrap();
                assert_eq!(idx, want_idx, "{isa} n={n} k={k}");
                assert_close(&p, &want_p, ATOL, RTOL, &format!("{isa} n={n} k={k}"));
            }
        }
    }
}

#[test]
fn topk_with_non_finite_logits() {
    let mut x: Vec<f32> = (0..50).map(|i| (i % 7) as f32).collect();
    x[3] = f32::NAN;
    x[10] = f32::NEG_INFINITY;
    for isa in available_isas() {
        for k in [1, 5, 49, 50] {
            let (want_idx, _) = topk_oracle(&x, k);
            let mut idx = vec![0u32; k];
            let mut p = vec![0f32; k];
            softmax_topk_with(&x, &mut idx, &mut p, isa).unwrap();
            assert_eq!(idx, want_idx, "{isa} k={k}");
            assert!(p.iter().all(|v| v.is_nan()), "{isa}: NaN row gives NaN probabilities");
        }
        let all_ninf = vec![f32::NEG_INFINITY; 20];
        let mut idx = vec![0u32; 3];
        let mut p = vec![1f32; 3];
        softmax_topk_with(&all_ninf, &mut idx, &mut p, isa).unwrap();
        assert_eq!(idx, [0, 1, 2]);
        assert_eq!(p, [0.0; 3]);
    }
}

#[test]
fn shape_errors() {
    let mut x = vec![0.0f32; 12];
    assert!(softmax(&mut x, 5, 3).is_err());
    assert!(softmax(&mut x, 4, 3).is_ok());
    let m = CausalMask { q_rows: 3, kv_len: 4, pos0: 2, scale: 1.0 };
    assert!(matches!(softmax_causal(&mut x, &m), Err(KernelError::InvalidShape { .. })));
    let m = CausalMask { pos0: 1, ..m };
    assert!(softmax_causal(&mut x, &m).is_ok());
    let mut idx = [0u32; 3];
    let mut p = [0f32; 2];
    assert!(softmax_topk(&x, &mut idx, &mut p).is_err());
    assert!(softmax_topk(&x[..2], &mut idx, &mut [0.0; 3]).is_err());
    assert!(softmax_topk(&x, &mut [], &mut []).is_err());
    assert!(softmax_with(&mut x, 4, 3, Isa::Scalar, &SoftmaxParams { threads: 0 }).is_err());
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn softmax_shape_checks(rows in 0usize..5, dim in 0usize..20, len in 0usize..100) {
            let mut x = vec![0.5f32; len];
            prop_assert_eq!(softmax(&mut x, rows, dim).is_ok(), len == rows * dim);
        }

        #[test]
        fn causal_shape_checks(q in 0usize..5, kv in 0usize..10, pos0 in 0usize..10, len in 0usize..60) {
            let mut x = vec![0.5f32; len];
            let m = CausalMask { q_rows: q, kv_len: kv, pos0, scale: 1.0 };
            prop_assert_eq!(softmax_causal(&mut x, &m).is_ok(), len == q * kv && pos0 + q <= kv);
        }

        #[test]
        fn topk_shape_checks(n in 0usize..40, k in 0usize..45, pl in 0usize..45) {
            let x = vec![0.5f32; n];
            let mut idx = vec![0u32; k];
            let mut p = vec![0f32; pl];
            let ok = softmax_topk(&x, &mut idx, &mut p).is_ok();
            prop_assert_eq!(ok, k >= 1 && k <= n && pl == k);
        }
    }
}
