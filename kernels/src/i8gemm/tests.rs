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

/// Variant `isa` with the default tile, or SME's first (its tiles are
/// others).
fn runner(isa: Isa) -> I8Gemm {
    let g = I8Gemm::new().isa(isa);
    match tiles(isa).first() {
        Some(&(mr, nr)) if isa == Isa::Sme => g.params(I8GemmParams { mr, nr, pf: 0 }),
        _ => g,
    }
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
                        for (ti, (mr, nr)) in tiles(isa).into_iter().enumerate() {
                            let p = I8GemmParams { mr, nr, pf: 0 };
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
                for (mr, nr) in tiles(isa) {
                    for &pf in prefetch::byte_candidates(isa) {
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
        runner(isa).run_i32(&a, &w, &mut acc).unwrap();
        assert_eq!(acc, want, "{isa}");
        // zp = −128 and a_q = −128: the real activations are all zero.
        let mut c = vec![f32::NAN; m * n];
        runner(isa).run(&a, &w, None, &mut c).unwrap();
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
            runner(isa).threads(t).run_i32(&a, &w, &mut acc).unwrap();
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
            runner(isa).run(&a, &w, Some(&bias), &mut c).unwrap();
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
        let r = g.isa(isa).run(&a, &w, None, &mut c);
        if !variants().contains(&isa) {
            // AMX: only the quantized GEMM has a variant.
            assert!(matches!(r, Err(KernelError::NoVariant { .. })), "{isa}");
        } else if !isa.is_available() {
            assert!(
                matches!(r, Err(KernelError::IsaUnavailable { .. })),
                "{isa}"
            );
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

/// The SME tiles where the CPU has SME (qemu `max`, at whatever streaming
/// vector length it was started with): every tile against the scalar
/// accumulators, bit for bit, on the edges of one ZA tile (`v ± 1`) and
/// of the whole block (`mr ± 1`, `nr ± 1`), k not a multiple of 4, with
/// 1–3 threads, and one larger case. Elsewhere forcing SME is refused.
#[test]
fn sme_tiles_match_scalar_at_every_edge() {
    let mut rng = Rng::new(7);
    let Some(v) = crate::sme::words() else {
        let (a, w) = (random_qa(&mut rng, 2, 8, false), random_qw(&mut rng, 3, 8));
        let (mr, nr) = crate::sme::tile_shapes(8)[0];
        let g = I8Gemm::new()
            .isa(Isa::Sme)
            .params(I8GemmParams { mr, nr, pf: 0 });
        let err = g.run(&a, &w, None, &mut [0.0; 6]).unwrap_err();
        crate::testing::assert_isa_unavailable(&err, OP, Isa::Sme);
        assert!(!isas().contains(&Isa::Sme));
        return;
    };
    assert!(isas().contains(&Isa::Sme));
    assert_eq!(tiles(Isa::Sme), crate::sme::tile_shapes(v));
    let ks = [1, 3, 4, 5, 63, 130, 257];
    let mut case = 0;
    for (mr, nr) in tiles(Isa::Sme) {
        let p = I8GemmParams { mr, nr, pf: 0 };
        for m in [1, v - 1, v + 1, mr - 1, mr + 1, 2 * mr + 3] {
            for n in [1, v - 1, nr - 1, nr + 1, 2 * nr + 5] {
                case += 1;
                let (k, asym, t) = (ks[case % ks.len()], case.is_multiple_of(2), 1 + case % 3);
                let a = random_qa(&mut rng, m, k, asym);
                let w = random_qw(&mut rng, n, k);
                let bias = rng.vec_f32(n);
                let g = I8Gemm::new().isa(Isa::Sme).params(p).threads(t);
                let what = format!("sme {mr}x{nr} t{t} m{m} n{n} k{k} asym {asym}");
                let mut acc = vec![0; m * n];
                g.run_i32(&a, &w, &mut acc).unwrap();
                assert_eq!(acc, scalar_acc(&a, &w), "{what}");
                let (mut got, mut want) = (vec![f32::NAN; m * n], vec![0.0; m * n]);
                g.run(&a, &w, Some(&bias), &mut got).unwrap();
                I8Gemm::new()
                    .isa(Isa::Scalar)
                    .run(&a, &w, Some(&bias), &mut want)
                    .unwrap();
                assert_eq!(got, want, "{what}");
            }
        }
    }
    let (m, n, k) = (2 * v + 7, 4 * v + 9, 1001);
    let (a, w) = (random_qa(&mut rng, m, k, true), random_qw(&mut rng, n, k));
    let want = scalar_acc(&a, &w);
    for (mr, nr) in tiles(Isa::Sme) {
        let mut acc = vec![0; m * n];
        let p = I8GemmParams { mr, nr, pf: 0 };
        let g = I8Gemm::new().isa(Isa::Sme).params(p).threads(3);
        g.run_i32(&a, &w, &mut acc).unwrap();
        assert_eq!(acc, want, "sme {mr}x{nr} large");
    }
}

/// What the SME variant is offered with and refuses: its tiles at this
/// CPU's vector length only, no prefetch, the other variants' tiles
/// refused, and SME tiles refused for them.
#[test]
fn sme_params_contract() {
    let cpu = CpuCaps::default();
    let shape = I8GemmShape {
        m: 9,
        n: 4096,
        k: 4096,
    };
    let d = I8GemmParams::default_for_isa(&shape, &cpu, Isa::Sme);
    let c = I8GemmParams::candidates_for_isa(&shape, &cpu, Isa::Sme);
    assert!(c.contains(&d) && c.iter().all(|p| p.pf == 0));
    assert_eq!(c.len(), tiles(Isa::Sme).len().max(1));
    for v in crate::sme::SVL_WORDS {
        let (mr, nr) = crate::sme::tile_shapes(v)[0];
        let p = I8GemmParams { mr, nr, pf: 0 };
        // A stored SME tile reads back on any machine.
        assert!(p.validate().is_ok(), "{p:?}");
        assert!(p.validate_for(Isa::Neon).is_err());
        let here = tiles(Isa::Sme).contains(&(mr, nr));
        match crate::sme::vector_bytes() {
            Some(_) => assert_eq!(p.validate_for(Isa::Sme).is_ok(), here, "{p:?}"),
            None => assert!(p.validate_for(Isa::Sme).is_ok(), "{p:?}"),
        }
        let err = I8GemmParams { pf: 4096, ..p }
            .validate_for(Isa::Sme)
            .unwrap_err();
        assert!(err.to_string().contains("do not prefetch"), "{err}");
    }
    if let Some(svl) = crate::sme::vector_bytes() {
        let v = svl / 4;
        // m = 1: the tile one vector tall wastes least.
        let gemv = I8GemmShape {
            m: 1,
            n: 4096,
            k: 64,
        };
        let d = I8GemmParams::default_for_isa(&gemv, &cpu, Isa::Sme);
        assert_eq!((d.mr, d.nr), (v, 4 * v));
        let other = crate::sme::SVL_WORDS.into_iter().find(|&w| w != v).unwrap();
        let (mr, nr) = crate::sme::tile_shapes(other)[0];
        let err = I8GemmParams { mr, nr, pf: 0 }
            .validate_for(Isa::Sme)
            .unwrap_err();
        assert!(err.to_string().contains("streaming vector length"), "{err}");
        assert!(I8GemmParams::default().validate_for(Isa::Sme).is_err());
    }
}
