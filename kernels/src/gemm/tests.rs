//! Every GEMM variant on this host × every micro-kernel × packing on/off,
//! against the f64 reference, over edge sweeps of m, n, k.
//!
//! Tolerance: inputs are uniform in [-1, 1), so a dot product of length k has
//! magnitude ≈ √k/3 and the f32 rounding error of any summation order is a
//! small multiple of √k·ε; we allow `|got − want| ≤ 1e-5·√k·(1 + |want|)`,
//! ~100× that bound yet far below the error of a single wrong term (≈ 0.3).

use super::*;
use crate::testing::{Rng, assert_close};
use proptest::prelude::*;

fn simd_isas() -> Vec<Isa> {
    GEMM_ISAS
        .iter()
        .copied()
        .filter(|&i| i != Isa::Scalar && i.is_available())
        .collect()
}

fn tol(k: usize) -> f32 {
    1e-5 * (k.max(1) as f32).sqrt()
}

/// Runs one case with f32 or f16 weights and compares with the reference.
#[allow(clippy::too_many_arguments)]
fn check(
    isa: Isa,
    params: GemmParams,
    (m, n, k): (usize, usize, usize),
    with_bias: bool,
    accumulate: bool,
    threads: usize,
    f16w: bool,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    let a = rng.vec_f32(m * k);
    let w32 = rng.vec_f32(n * k);
    let bias = rng.vec_f32(n);
    let c0 = rng.vec_f32(m * n);
    let bias = with_bias.then_some(bias.as_slice());
    let shape = GemmShape::new(m, n, k);
    let cfg = GemmConfig {
        isa: Some(isa),
        params,
        threads,
    };
    let mut want = c0.clone();
    let mut got = c0.clone();
    let what = format!(
        "{isa} {params:?} m={m} n={n} k={k} bias={with_bias} acc={accumulate} t={threads} f16={f16w}"
    );
    if f16w {
        let w: Vec<f16> = w32.iter().map(|&x| f16::from_f32(x)).collect();
        scalar::gemm_ref(&a, &w, bias, &mut want, m, n, k, accumulate);
        gemm_f16w_f32(&a, &w, bias, &mut got, shape, accumulate, &cfg).unwrap();
    } else {
        scalar::gemm_ref(&a, &w32, bias, &mut want, m, n, k, accumulate);
        gemm_f32(&a, &w32, bias, &mut got, shape, accumulate, &cfg).unwrap();
    }
    assert_close(&got, &want, tol(k), tol(k), &what);
}

/// Small blocks so that the kc, mc and nc loops all take several steps.
fn small_blocks(mr: usize, nr: usize, pack: bool) -> GemmParams {
    GemmParams {
        mr,
        nr,
        kc: 16,
        mc: mr,
        nc: 2 * nr,
        pack,
    }
}

fn default_blocks(shape: (usize, usize, usize), mr: usize, nr: usize, pack: bool) -> GemmParams {
    let s = GemmShape::new(shape.0, shape.1, shape.2);
    GemmParams::blocking(&s, &CpuCaps::default(), mr, nr, pack)
}

#[test]
fn packed_kernels_match_reference() {
    let mut seed = 0;
    for isa in simd_isas() {
        for &(mr, nr) in microkernels(isa) {
            for m in [1, mr - 1, mr + 1, 2 * mr + 3] {
                for n in [1, nr - 1, nr + 1, 2 * nr + 5] {
                    for k in [1, 7, 37] {
                        seed += 1;
                        let shape = (m.max(1), n, k);
                        let bias = seed % 2 == 0;
                        let acc = seed % 3 == 0;
                        check(
                            isa,
                            small_blocks(mr, nr, true),
                            shape,
                            bias,
                            acc,
                            1,
                            false,
                            seed,
                        );
                        let p = default_blocks(shape, mr, nr, true);
                        check(isa, p, shape, !bias, !acc, 1, false, seed);
                    }
                }
            }
        }
    }
}

#[test]
fn direct_kernels_match_reference() {
    let mut seed = 1000;
    for isa in simd_isas() {
        for &(mr, nr) in direct_kernels(isa) {
            for m in [1, mr + 1, 2 * mr + 1] {
                for n in [1, nr - 1, nr + 1, 2 * nr + 3] {
                    for k in [1, 15, 17, 67] {
                        seed += 1;
                        let shape = (m, n.max(1), k);
                        let p = small_blocks(mr, nr, false);
                        check(isa, p, shape, seed % 2 == 0, seed % 3 == 0, 1, false, seed);
                    }
                }
            }
        }
    }
}

#[test]
fn f16_weights_match_reference() {
    let mut seed = 2000;
    for isa in simd_isas() {
        let kernels = microkernels(isa).iter().map(|&(mr, nr)| (mr, nr, true));
        let direct = direct_kernels(isa).iter().map(|&(mr, nr)| (mr, nr, false));
        for (mr, nr, pack) in kernels.chain(direct) {
            for (m, n, k) in [
                (1, 1, 1),
                (mr + 1, nr - 1, 19),
                (2 * mr + 1, 2 * nr + 3, 41),
            ] {
                seed += 1;
                let p = small_blocks(mr, nr, pack);
                check(isa, p, (m, n.max(1), k), true, seed % 2 == 0, 1, true, seed);
            }
        }
    }
    // The scalar variant with f16 weights is the reference itself, but it
    // must still run through the entry point.
    check(
        Isa::Scalar,
        default_blocks((3, 5, 7), 4, 4, true),
        (3, 5, 7),
        true,
        false,
        2,
        true,
        1,
    );
}

#[test]
fn zero_sized_dimensions() {
    let mut seed = 3000;
    for isa in simd_isas().into_iter().chain([Isa::Scalar]) {
        let packed =
            GemmParams::default_for_isa(&GemmShape::new(64, 64, 64), &CpuCaps::default(), isa);
        let direct = direct_kernels(isa)
            .first()
            .map(|&(mr, nr)| small_blocks(mr, nr, false));
        for p in [Some(packed), direct].into_iter().flatten() {
            for (m, n, k) in [(0, 5, 3), (4, 0, 3), (4, 5, 0), (0, 0, 0), (1, 1, 0)] {
                for (bias, acc) in [(false, false), (true, false), (true, true), (false, true)] {
                    seed += 1;
                    check(isa, p, (m, n, k), bias, acc, 1, false, seed);
                    check(isa, p, (m, n, k), bias, acc, 2, true, seed);
                }
            }
        }
    }
}

#[test]
fn larger_case_all_thread_counts() {
    let shape = (67, 131, 259);
    let mut seed = 4000;
    for isa in simd_isas().into_iter().chain([Isa::Scalar]) {
        let s = GemmShape::new(shape.0, shape.1, shape.2);
        let mut params = vec![GemmParams::default_for_isa(&s, &CpuCaps::default(), isa)];
        if let Some(&(mr, nr)) = direct_kernels(isa).first() {
            params.push(default_blocks(shape, mr, nr, false));
        }
        if let Some(&(mr, nr)) = microkernels(isa).first() {
            params.push(GemmParams {
                kc: 64,
                mc: 2 * mr,
                nc: 3 * nr,
                ..default_blocks(shape, mr, nr, true)
            });
        }
        for p in params {
            for threads in 1..=3 {
                seed += 1;
                check(isa, p, shape, true, seed % 2 == 0, threads, false, seed);
            }
            // Narrow n forces the split over rows.
            check(isa, p, (40, 3, 33), false, true, 3, false, seed);
        }
    }
}

/// The SME variant where the CPU has it (qemu `max`, at whatever
/// streaming vector length it was started with): every kernel on the edges
/// of one ZA tile (`v ± 1`) and of the whole block (`mr ± 1`, `nr ± 1`),
/// several k slices accumulating into C, bias, f16 weights, 1–3 threads.
/// Elsewhere forcing SME is refused with an error that says so.
#[test]
fn sme_kernels_match_reference_at_every_edge() {
    let Some(v) = crate::sme::words() else {
        let shape = GemmShape::new(2, 3, 4);
        let (mr, nr) = crate::sme::tile_shapes(8)[0];
        let cfg = GemmConfig {
            isa: Some(Isa::Sme),
            params: small_blocks(mr, nr, true),
            threads: 1,
        };
        let (a, w, mut c) = (vec![0.0; 8], vec![0.0; 12], vec![0.0; 6]);
        let err = gemm_f32(&a, &w, None, &mut c, shape, false, &cfg).unwrap_err();
        crate::testing::assert_isa_unavailable(&err, OP, Isa::Sme);
        assert!(!simd_isas().contains(&Isa::Sme));
        // A choice stored on an SME device still reads back as valid here.
        assert!(cfg.params.validate().is_ok());
        return;
    };
    assert!(simd_isas().contains(&Isa::Sme));
    assert_eq!(microkernels(Isa::Sme), crate::sme::tile_shapes(v));
    assert!(direct_kernels(Isa::Sme).is_empty());
    let ks = [1, 2, 7, 37, 100];
    let mut seed = 6000u64;
    for &(mr, nr) in microkernels(Isa::Sme) {
        for m in [1, v - 1, v + 1, mr - 1, mr + 1, 2 * mr + 3] {
            for n in [1, v - 1, nr - 1, nr + 1, 2 * nr + 5] {
                seed += 1;
                let k = ks[seed as usize % ks.len()];
                let p = if seed.is_multiple_of(2) {
                    small_blocks(mr, nr, true)
                } else {
                    default_blocks((m, n, k), mr, nr, true)
                };
                let (bias, acc, f16w) =
                    (seed.is_multiple_of(3), seed % 5 < 2, seed.is_multiple_of(7));
                let threads = 1 + seed as usize % 3;
                check(Isa::Sme, p, (m, n, k), bias, acc, threads, f16w, seed);
            }
        }
    }
    let (mr, nr) = microkernels(Isa::Sme)[0];
    let direct = GemmParams {
        pack: false,
        ..small_blocks(mr, nr, true)
    };
    let err = direct.validate_for(OP, Isa::Sme).unwrap_err();
    assert!(err.to_string().contains("set `pack` to true"), "{err}");
    let other = crate::sme::SVL_WORDS.into_iter().find(|&w| w != v).unwrap();
    let (mr, nr) = crate::sme::tile_shapes(other)[0];
    let other = small_blocks(mr, nr, true);
    let err = other.validate_for(OP, Isa::Sme).unwrap_err();
    assert!(err.to_string().contains("streaming vector length"), "{err}");
    // It parses (another device's choice); running it here is refused.
    assert!(other.validate().is_ok());
    let cfg = GemmConfig {
        isa: Some(Isa::Sme),
        params: other,
        threads: 1,
    };
    let (a, w, mut c) = (vec![0.0; 8], vec![0.0; 12], vec![0.0; 6]);
    let err = gemm_f32(&a, &w, None, &mut c, GemmShape::new(2, 3, 4), false, &cfg);
    assert!(
        matches!(err, Err(KernelError::InvalidParams { .. })),
        "{err:?}"
    );
    // Never the untuned pick.
    assert_ne!(resolve_isa(OP, None).unwrap(), Isa::Sme);
}

#[test]
fn default_config_runs_best_variant() {
    let shape = GemmShape::new(9, 20, 30);
    let mut rng = Rng::new(5);
    let (a, w) = (rng.vec_f32(9 * 30), rng.vec_f32(20 * 30));
    let mut got = vec![0.0; 9 * 20];
    let mut want = got.clone();
    let cfg = GemmConfig::new(&shape, &CpuCaps::default(), 2);
    gemm_f32(&a, &w, None, &mut got, shape, false, &cfg).unwrap();
    scalar::gemm_ref(&a, &w, None, &mut want, 9, 20, 30, false);
    assert_close(&got, &want, tol(30), tol(30), "default config");
    for isa in GEMM_ISAS.iter().copied().filter(|i| i.is_available()) {
        let cfg = GemmConfig::for_isa(&shape, &CpuCaps::default(), isa, 1);
        gemm_f32(&a, &w, None, &mut got, shape, false, &cfg).unwrap();
        assert_close(&got, &want, tol(30), tol(30), isa.name());
    }
}

#[test]
fn tunable_candidates_are_valid_and_contain_default() {
    let big = CpuCaps {
        l1d: 1 << 20,
        l2: 64 << 20,
        l3: 1 << 30,
        cores: 1,
    };
    for cpu in [CpuCaps::default(), big] {
        for shape in [
            GemmShape::new(1, 896, 896),
            GemmShape::new(16, 4864, 896),
            GemmShape::new(512, 896, 4864),
            GemmShape::new(1024, 1024, 1024),
            // Degenerate depth with huge m and n: blocks must stay in range.
            GemmShape::new(1 << 22, 1 << 22, 1),
        ] {
            for isa in GEMM_ISAS.iter().copied().filter(|i| i.is_available()) {
                let d = GemmParams::default_for_isa(&shape, &cpu, isa);
                let c = GemmParams::candidates_for_isa(&shape, &cpu, isa);
                assert!(c.contains(&d), "{isa} {shape:?}");
                for p in &c {
                    p.validate_for("test", isa).unwrap();
                }
                if isa != Isa::Scalar {
                    // At least one per kernel shape, a few per shape at most.
                    let shapes = microkernels(isa).len() + direct_kernels(isa).len();
                    assert!(
                        (shapes..=80).contains(&c.len()),
                        "{isa}: {} candidates",
                        c.len()
                    );
                    d.validate().unwrap();
                }
            }
            let d = GemmParams::default_for(&shape, &cpu);
            assert!(GemmParams::candidates(&shape, &cpu).contains(&d));
        }
    }
}

#[test]
fn errors_on_bad_input() {
    let shape = GemmShape::new(2, 3, 4);
    let cfg = GemmConfig::new(&shape, &CpuCaps::default(), 1);
    let (a, w, b) = (vec![0.0; 8], vec![0.0; 12], vec![0.0; 3]);
    let mut c = vec![0.0; 6];
    let mismatch = |r: Result<()>, what: &str| match r {
        Err(KernelError::ShapeMismatch { what: w, .. }) => assert_eq!(w, what),
        other => panic!("expected mismatch on {what}, got {other:?}"),
    };
    mismatch(gemm_f32(&a[..7], &w, None, &mut c, shape, false, &cfg), "a");
    mismatch(
        gemm_f32(&a, &w[..11], None, &mut c, shape, false, &cfg),
        "w",
    );
    mismatch(
        gemm_f32(&a, &w, Some(&b[..2]), &mut c, shape, false, &cfg),
        "bias",
    );
    mismatch(gemm_f32(&a, &w, None, &mut c[..5], shape, false, &cfg), "c");
    let huge = GemmShape::new(usize::MAX, 2, 2);
    assert!(matches!(
        gemm_f32(&a, &w, None, &mut c, huge, false, &cfg),
        Err(KernelError::InvalidShape { .. })
    ));
    let zero_t = GemmConfig { threads: 0, ..cfg };
    assert!(matches!(
        gemm_f32(&a, &w, None, &mut c, shape, false, &zero_t),
        Err(KernelError::InvalidThreads { .. })
    ));
    let bad_tile = GemmConfig {
        params: GemmParams {
            mr: 5,
            nr: 7,
            ..cfg.params
        },
        ..cfg
    };
    if Isa::best_of(GEMM_ISAS) != Isa::Scalar {
        assert!(matches!(
            gemm_f32(&a, &w, None, &mut c, shape, false, &bad_tile),
            Err(KernelError::InvalidParams { .. })
        ));
    }
    assert!(bad_tile.params.validate().is_err());
    let bad_kc = GemmConfig {
        params: GemmParams {
            kc: 0,
            ..cfg.params
        },
        ..cfg
    };
    assert!(matches!(
        gemm_f32(&a, &w, None, &mut c, shape, false, &bad_kc),
        Err(KernelError::InvalidParams { .. })
    ));
    for isa in Isa::ALL {
        let forced = GemmConfig {
            isa: Some(isa),
            ..cfg
        };
        let r = gemm_f32(&a, &w, None, &mut c, shape, false, &forced);
        if !isa.is_available() {
            assert_eq!(r, Err(KernelError::IsaUnavailable { op: "gemm", isa }));
        } else if !GEMM_ISAS.contains(&isa) {
            assert_eq!(r, Err(KernelError::NoVariant { op: "gemm", isa }));
        }
        let h = vec![f16::ZERO; 12];
        let r = gemm_f16w_f32(&a, &h, None, &mut c, shape, false, &forced);
        if !isa.is_available() {
            assert!(matches!(r, Err(KernelError::IsaUnavailable { .. })));
        }
    }
}

/// Mostly right lengths (so both outcomes are common), sometimes off by ±1–2.
fn len_delta() -> impl Strategy<Value = i64> {
    prop_oneof![4 => Just(0i64), 1 => -2i64..=2]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random shapes with random length errors: a wrong length is always an
    /// error (never a panic), a right one always computes the reference.
    #[test]
    fn shape_handling(
        m in 0usize..20, n in 0usize..40, k in 0usize..40,
        da in len_delta(), dw in len_delta(), dc in len_delta(), db in len_delta(),
        with_bias: bool, f16w: bool, threads in 1usize..=3, isa_pick in 0usize..4,
    ) {
        let len = |base: usize, d: i64| (base as i64 + d).max(0) as usize;
        let mut rng = Rng::new((m * 10007 + n * 101 + k) as u64);
        let a = rng.vec_f32(len(m * k, da));
        let w = rng.vec_f32(len(n * k, dw));
        let b = rng.vec_f32(len(n, db));
        let mut c = vec![0.0; len(m * n, dc)];
        let isas: Vec<Isa> = GEMM_ISAS.iter().copied().filter(|i| i.is_available()).collect();
        let isa = isas[isa_pick % isas.len()];
        let shape = GemmShape::new(m, n, k);
        let cfg = GemmConfig {
            isa: Some(isa),
            params: GemmParams::default_for_isa(&shape, &CpuCaps::default(), isa),
            threads,
        };
        let bias = with_bias.then_some(b.as_slice());
        let r = if f16w {
            let h: Vec<f16> = w.iter().map(|&x| f16::from_f32(x)).collect();
            gemm_f16w_f32(&a, &h, bias, &mut c, shape, false, &cfg)
        } else {
            gemm_f32(&a, &w, bias, &mut c, shape, false, &cfg)
        };
        let ok_lens = len(m * k, da) == m * k && len(n * k, dw) == n * k
            && len(m * n, dc) == m * n && (!with_bias || len(n, db) == n);
        prop_assert_eq!(r.is_ok(), ok_lens, "{:?}", r);
        if ok_lens && !f16w {
            let mut want = vec![0.0; m * n];
            scalar::gemm_ref(&a, &w, bias, &mut want, m, n, k, false);
            prop_assert!(crate::testing::max_rel_err(&c, &want) <= tol(k));
        }
    }
}
