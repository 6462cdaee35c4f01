//! I8 GEMM tests: every available variant against the scalar accumulators
//! (exact i32 equality, and therefore exact f32 equality through the shared
//! epilogue), the f32 result against an f64 reference on the dequantized
//! values (rel 1e-5), the quantizers' error bounds, and bad input.

use super::*;
use crate::testing::{Rng, assert_close};

fn isas() -> Vec<Isa> {
    variants()
        .iter()
        .copied()
        .filter(|i| i.is_available())
        .collect()
}

fn random_qw(rng: &mut Rng, n: usize, k: usize) -> QWeights {
    quantize_weights(&rng.vec_f32(n * k), n, k).unwrap()
}

fn random_qa(rng: &mut Rng, m: usize, k: usize, asym: bool) -> QActivations {
    // Shifted data makes the asymmetric zero point non-trivial.
    let a: Vec<f32> = (0..m * k).map(|_| rng.uniform(-0.3, 1.7)).collect();
    quantize_activations(&a, m, k, asym).unwrap()
}

fn scalar_acc(a: &QActivations, w: &QWeights) -> Vec<i32> {
    let mut acc = vec![0; a.m * w.n];
    I8Gemm::new()
        .isa(Isa::Scalar)
        .run_i32(a, w, &mut acc)
        .unwrap();
    acc
}

#[test]
fn scalar_matches_definition() {
    let mut rng = Rng::new(1);
    let (a, w) = (random_qa(&mut rng, 3, 33, true), random_qw(&mut rng, 5, 33));
    let acc = scalar_acc(&a, &w);
    for i in 0..3 {
        for j in 0..5 {
            let want: i32 = (0..33)
                .map(|t| a.q[i * 33 + t] as i32 * w.q[j * 33 + t] as i32)
                .sum();
            assert_eq!(acc[i * 5 + j], want);
        }
    }
}

#[test]
fn every_variant_matches_scalar_edge_sweep() {
    let mut rng = Rng::new(2);
    let tiles: Vec<I8GemmParams> = MR_VALUES
        .iter()
        .flat_map(|&mr| {
            NR_VALUES
                .iter()
                .map(move |&nr| I8GemmParams { mr, nr, pf: 0 })
        })
        .collect();
    for m in [1, 2, 3, 5] {
        for n in [1, 3, 8, 17] {
            for k in [1, 4, 7, 16, 33, 100] {
                for asym in [false, true] {
                    let a = random_qa(&mut rng, m, k, asym);
                    let w = random_qw(&mut rng, n, k);
                    let bias = rng.vec_f32(n);
                    let want_acc = scalar_acc(&a, &w);
                    let mut want_c = vec![0.0; m * n];
                    I8Gemm::new()
                        .isa(Isa::Scalar)
                        .run(&a, &w, Some(&bias), &mut want_c)
                        .unwrap();
                    assert_close(
                        &want_c,
                        &reference_f32(&a, &w, Some(&bias)),
                        1e-5,
                        1e-5,
                        "scalar vs f64 reference",
                    );
                    for isa in isas() {
                        for (ti, &p) in tiles.iter().enumerate() {
                            // Threads 2 and 3 on a subset of tiles keep the sweep short.
                            let threads: &[usize] = if ti % 2 == 0 { &[1, 2, 3] } else { &[1] };
                            for &t in threads {
                                let g = I8Gemm::new().isa(isa).params(p).threads(t);
                                let mut acc = vec![0; m * n];
                                g.run_i32(&a, &w, &mut acc).unwrap();
                                assert_eq!(
                                    acc, want_acc,
                                    "{isa} {p:?} t{t} m{m} n{n} k{k} asym {asym}"
                                );
                                let mut c = vec![f32::NAN; m * n];
                                g.run(&a, &w, Some(&bias), &mut c).unwrap();
                                assert_eq!(
                                    c, want_c,
                                    "{isa} {p:?} t{t} m{m} n{n} k{k} asym {asym}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The long-k paths: the unrolled accumulator sets (4 for `nr` 1, 2 for
/// `nr` 2 or `mr` 2, up to 256 bytes per round on AVX-512 VNNI) with their
/// remainders, at every prefetch distance (prefetches past the rows must
/// not matter).
#[test]
fn unrolled_tiles_and_every_prefetch_distance_match_scalar() {
    let mut rng = Rng::new(5);
    for k in [255, 256, 257, 520, 1000] {
        for m in [1, 2] {
            let (n, asym) = (5, k % 2 == 1);
            let a = random_qa(&mut rng, m, k, asym);
            let w = random_qw(&mut rng, n, k);
            let want = scalar_acc(&a, &w);
            for isa in isas() {
                for mr in MR_VALUES {
                    for nr in NR_VALUES {
                        for pf in PREFETCHES {
                            let p = I8GemmParams { mr, nr, pf };
                            let mut acc = vec![0; m * n];
                            I8Gemm::new()
                                .isa(isa)
                                .params(p)
                                .run_i32(&a, &w, &mut acc)
                                .unwrap();
                            assert_eq!(acc, want, "{isa} {p:?} m{m} k{k}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn extreme_values_do_not_saturate() {
    // −128 · −127 everywhere: maddubs-style i16 saturation or a wrong VNNI
    // correction would show here.
    let (m, n, k) = (3, 5, 4099);
    let a = QActivations {
        m,
        k,
        q: vec![-128; m * k],
        scales: vec![1.0; m],
        zeros: Some(vec![-128; m]),
    };
    let w = QWeights::from_quantized(
        (0..n * k)
            .map(|i| if i % 3 == 0 { -127 } else { 127 })
            .collect(),
        vec![1.0; n],
        n,
        k,
    )
    .unwrap();
    let want = scalar_acc(&a, &w);
    for isa in isas() {
        let mut acc = vec![0; m * n];
        I8Gemm::new().isa(isa).run_i32(&a, &w, &mut acc).unwrap();
        assert_eq!(acc, want, "{isa}");
        // zp = −128 and a_q = −128: the real activations are all zero.
        let mut c = vec![f32::NAN; m * n];
        I8Gemm::new().isa(isa).run(&a, &w, None, &mut c).unwrap();
        assert!(c.iter().all(|&v| v == 0.0), "{isa}: {c:?}");
    }
}

#[test]
fn larger_case_threads() {
    let mut rng = Rng::new(3);
    let (m, n, k) = (7, 37, 1000);
    let a = random_qa(&mut rng, m, k, true);
    let w = random_qw(&mut rng, n, k);
    let want = scalar_acc(&a, &w);
    for isa in isas() {
        for t in [1, 2, 3] {
            let mut acc = vec![0; m * n];
            I8Gemm::new()
                .isa(isa)
                .threads(t)
                .run_i32(&a, &w, &mut acc)
                .unwrap();
            assert_eq!(acc, want, "{isa} t{t}");
        }
    }
}

#[test]
fn quantizers_round_to_nearest() {
    let mut rng = Rng::new(4);
    let (n, k) = (5, 77);
    let x = rng.vec_f32(n * k);
    let w = quantize_weights(&x, n, k).unwrap();
    for j in 0..n {
        for t in 0..k {
            let err = (w.scales[j] * w.q[j * k + t] as f32 - x[j * k + t]).abs();
            assert!(err <= 0.5 * w.scales[j] * 1.0001 + 1e-7, "w err {err}");
        }
        assert_eq!(
            w.sums[j],
            w.q[j * k..(j + 1) * k]
                .iter()
                .map(|&v| v as i32)
                .sum::<i32>()
        );
    }
    let y: Vec<f32> = (0..n * k).map(|_| rng.uniform(-0.2, 2.0)).collect();
    let a = quantize_activations(&y, n, k, true).unwrap();
    let z = a.zeros.as_ref().unwrap();
    for i in 0..n {
        assert!(a.q[i * k..(i + 1) * k].contains(&-128) || a.q[i * k..(i + 1) * k].contains(&127));
        for t in 0..k {
            let deq = a.scales[i] * (a.q[i * k + t] as i32 - z[i]) as f32;
            // Rounding of zp adds up to half a step on top of the value's own half step.
            assert!((deq - y[i * k + t]).abs() <= a.scales[i] * 1.0001, "a err");
        }
    }
    // All-zero rows quantize to zeros with scale 0, no NaN.
    let zq = quantize_activations(&[0.0; 8], 1, 8, true).unwrap();
    assert!(zq.q.iter().all(|&v| v == 0) && zq.scales[0] == 0.0);
}

#[test]
fn zero_sized_shapes() {
    let mut rng = Rng::new(5);
    for (m, n, k) in [(0, 3, 4), (2, 0, 4), (2, 3, 0)] {
        let a = random_qa(&mut rng, m, k, false);
        let w = random_qw(&mut rng, n, k);
        let bias = vec![0.5; n];
        for isa in isas() {
            let mut c = vec![f32::NAN; m * n];
            I8Gemm::new()
                .isa(isa)
                .run(&a, &w, Some(&bias), &mut c)
                .unwrap();
            assert!(c.iter().all(|&v| v == 0.5), "{isa} {m} {n} {k}");
        }
    }
}

#[test]
fn bad_input_is_an_error() {
    let mut rng = Rng::new(6);
    let a = random_qa(&mut rng, 2, 8, false);
    let w = random_qw(&mut rng, 3, 8);
    let w9 = random_qw(&mut rng, 3, 9);
    let g = I8Gemm::new();
    let mut c = vec![0.0; 6];
    assert!(matches!(
        g.run(&a, &w9, None, &mut c),
        Err(KernelError::InvalidShape { .. })
    ));
    assert!(matches!(
        g.run(&a, &w, None, &mut c[..5]),
        Err(KernelError::ShapeMismatch { .. })
    ));
    assert!(g.run(&a, &w, Some(&[0.0; 2]), &mut c).is_err());
    assert!(g.run_i32(&a, &w, &mut [0; 7]).is_err());
    assert!(g.threads(0).run(&a, &w, None, &mut c).is_err());
    assert!(
        g.params(I8GemmParams {
            mr: 3,
            nr: 4,
            pf: 0
        })
        .run(&a, &w, None, &mut c)
        .is_err()
    );
    assert!(quantize_weights(&[0.0; 5], 2, 3).is_err());
    assert!(quantize_activations(&[0.0; 5], 2, 3, true).is_err());
    assert!(quantize_weights(&[], 0, MAX_K + 1).is_err());
    assert!(QWeights::from_quantized(vec![0; 5], vec![1.0; 2], 2, 3).is_err());
    let mut bad = a.clone();
    bad.scales.pop();
    assert!(g.run(&bad, &w, None, &mut c).is_err());
    for isa in Isa::ALL {
        if !isa.is_available() {
            assert!(matches!(
                g.isa(isa).run(&a, &w, None, &mut c),
                Err(KernelError::IsaUnavailable { .. })
            ));
        }
    }
}

#[test]
fn params_contract() {
    let cpu = CpuCaps::default();
    for shape in [
        I8GemmShape { m: 1, n: 1, k: 8 },
        I8GemmShape {
            m: 9,
            n: 4096,
            k: 4096,
        },
    ] {
        let d = I8GemmParams::default_for(&shape, &cpu);
        let c = I8GemmParams::candidates(&shape, &cpu);
        assert!(c.contains(&d));
        assert!(c.iter().all(|p| p.validate().is_ok()));
        // A GEMV has one activation row: no 2-row tiles to time.
        assert_eq!(c.iter().any(|p| p.mr == 2), shape.m >= 2);
        let timed: Vec<usize> = c.iter().map(|p| p.pf).collect();
        crate::testing::assert_prefetch_contract(
            Isa::best_of(variants()),
            d.pf,
            &timed,
            &PREFETCHES,
        );
    }
    // Every aarch64 CPU has NEON, so ARM always times the distances.
    #[cfg(target_arch = "aarch64")]
    assert!(matches!(
        Isa::best_of(variants()),
        Isa::Neon | Isa::NeonDotprod | Isa::NeonI8mm
    ));
    let ok = I8GemmParams::default();
    assert!(I8GemmParams { pf: 100, ..ok }.validate().is_err());
    // Tables from before `pf` existed read as no prefetch.
    let old: I8GemmParams = serde_json::from_str(r#"{"mr":2,"nr":4}"#).unwrap();
    assert_eq!(old.pf, 0);
}

/// The NEON tiles' walk: every step once, in order, and one line request
/// per 64 bytes of the row, each before the steps it covers, including the
/// 64 bytes only the scalar tail reads (k = 257: kv = 256).
#[test]
fn by_lines_steps_once_and_requests_each_line_once() {
    fn walk<const W: usize>(k: usize) -> Vec<(char, usize)> {
        let kv = k / W * W;
        let log = std::cell::RefCell::new(Vec::new());
        let ahead = |t| log.borrow_mut().push(('p', t));
        let step = |t| log.borrow_mut().push(('s', t));
        by_lines!(W, k, kv, ahead, step);
        log.into_inner()
    }
    fn check<const W: usize>(k: usize) {
        let kv = k / W * W;
        let log = walk::<W>(k);
        let steps: Vec<usize> = log.iter().filter(|e| e.0 == 's').map(|e| e.1).collect();
        let want: Vec<usize> = (0..kv).step_by(W).collect();
        assert_eq!(steps, want, "W{W} k{k} steps");
        let reqs: Vec<usize> = log.iter().filter(|e| e.0 == 'p').map(|e| e.1).collect();
        assert_eq!(
            reqs,
            (0..k).step_by(64).collect::<Vec<_>>(),
            "W{W} k{k} requests"
        );
        // Each step comes after the request of its 64 bytes.
        let mut line = None;
        for &(what, t) in &log {
            match what {
                'p' => line = Some(t),
                _ => assert_eq!(line, Some(t / 64 * 64), "W{W} k{k} step {t}"),
            }
        }
    }
    for k in [
        0, 1, 7, 8, 15, 16, 63, 64, 65, 100, 128, 130, 255, 256, 257, 520, 1000,
    ] {
        check::<16>(k);
        check::<8>(k);
    }
}
