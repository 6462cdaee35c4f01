//! Quantized GEMM (W·A8): the repack is lossless (and its rows dequantize
//! exactly as the GGUF rows do), and every variant the CPU
//! runs (every interleave it reads, every `mr`, 1 or 3 threads) is
//! **bit-identical** to the definition — the scalar W·A8 GEMV on each
//! activation row — for Q4_0, Q4_1, Q5_0, Q8_0 over m ∈ {1, 2, 3, 5, 17, 64},
//! n not a multiple of the interleave, k = 1, 3 and 9 blocks. Against the
//! best (SIMD) GEMV variant, whose horizontal sums round differently, each
//! row agrees within the W·A8 bound `1e-5 · Σ|w·x| + 1e-6`.

use tiletune_kernels::qgemm::{
    self, FORMATS, MRS, QGemm, QGemmParams, interleaves, quantize_activations, repack, scalar,
};
use tiletune_kernels::qgemv::{self, QGemv, QMode};
use tiletune_kernels::quant::{self, QuantFormat};
use tiletune_kernels::testing::Rng;
use tiletune_kernels::{Isa, KernelError};

struct Case {
    w: Vec<u8>,
    a: Vec<f32>,
    m: usize,
    n: usize,
    k: usize,
}

fn case(rng: &mut Rng, f: QuantFormat, m: usize, n: usize, k: usize) -> Case {
    Case {
        w: quant::quantize(f, &rng.vec_f32(n * k)).unwrap(),
        a: rng.vec_f32(m * k),
        m,
        n,
        k,
    }
}

fn reference(f: QuantFormat, c: &Case) -> Vec<f32> {
    let mut out = vec![f32::NAN; c.m * c.n];
    scalar::reference(f, &c.w, &c.a, c.m, c.n, c.k, &mut out).unwrap();
    out
}

fn run(q: &QGemm, c: &Case) -> Vec<f32> {
    let p = q.pack(&c.w, c.n, c.k).unwrap();
    let mut out = vec![f32::NAN; c.m * c.n];
    let mut scratch = Vec::new();
    q.run(&p, &c.a, c.m, &mut out, &mut scratch).unwrap();
    out
}

fn available(f: QuantFormat) -> Vec<Isa> {
    qgemm::variants(f)
        .iter()
        .copied()
        .filter(|i| i.is_available())
        .collect()
}

#[test]
fn repack_round_trips() {
    let mut rng = Rng::new(21);
    for f in FORMATS {
        for nr in qgemm::INTERLEAVES {
            for (n, k) in [
                (0, 32),
                (1, 32),
                (3, 96),
                (nr + 1, 64),
                (2 * nr - 1, 32),
                (5, 0),
            ] {
                let c = case(&mut rng, f, 0, n, k);
                let p = repack(f, &c.w, n, k, nr).unwrap();
                assert_eq!((p.n(), p.k(), p.nr()), (n, k, nr));
                assert_eq!(p.groups(), n.div_ceil(nr));
                assert_eq!(p.unpack(), c.w, "{f} nr={nr} n={n} k={k}");
                let mut want = vec![0.0f32; n * k];
                quant::dequantize(f, &c.w, &mut want).unwrap();
                let mut row = vec![f32::NAN; k];
                for (r, w) in want.chunks_exact(k.max(1)).take(n).enumerate() {
                    p.dequantize_row(r, &mut row).unwrap();
                    let same = row.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{f} nr={nr} n={n} k={k} row {r}");
                }
                assert!(p.dequantize_row(n, &mut row).is_err());
            }
        }
    }
}

#[test]
fn repack_rejects_bad_input() {
    let w = vec![0u8; 18 * 2];
    assert!(matches!(
        repack(QuantFormat::Q4K, &w, 1, 256, 8),
        Err(KernelError::InvalidShape { .. })
    ));
    assert!(matches!(
        repack(QuantFormat::Q4_0, &w, 2, 32, 6),
        Err(KernelError::InvalidParams { .. })
    ));
    assert!(repack(QuantFormat::Q4_0, &w, 2, 33, 8).is_err());
    assert!(matches!(
        repack(QuantFormat::Q4_0, &w, 3, 32, 8),
        Err(KernelError::ShapeMismatch { .. })
    ));
}

/// Every m with each variant's default mr, then every mr at m = 17.
#[test]
fn every_variant_is_bit_identical_to_the_reference() {
    let mut rng = Rng::new(22);
    let mut ran = 0;
    for f in FORMATS {
        for isa in available(f) {
            for &nr in interleaves(isa) {
                let mut shapes: Vec<(usize, usize)> = Vec::new();
                for m in [1, 2, 3, 5, 17, 64] {
                    shapes.push((m, 4));
                }
                for &mr in &MRS {
                    shapes.push((17, mr));
                }
                for (j, &(m, mr)) in shapes.iter().enumerate() {
                    let n = [nr - 1, 2 * nr + 3, nr, 1][j % 4];
                    let k = 32 * [1, 3, 9][j % 3];
                    let c = case(&mut rng, f, m, n, k);
                    let want = reference(f, &c);
                    let q = QGemm::new(f)
                        .isa(isa)
                        .params(QGemmParams { mr, nr })
                        .threads(1 + 2 * (j % 2));
                    let got = run(&q, &c);
                    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            g.to_bits() == w.to_bits(),
                            "{f} {isa} nr={nr} mr={mr} m={m} n={n} k={k} at ({}, {}): {g} vs {w}",
                            i / n,
                            i % n
                        );
                    }
                    ran += 1;
                }
            }
        }
    }
    assert!(ran >= 4 * 10 * 3, "only {ran} cases ran");
}

#[test]
fn rows_match_the_best_gemv_within_the_a8_bound() {
    let mut rng = Rng::new(23);
    for f in FORMATS {
        let (m, n, k) = (5, 19, 96);
        let c = case(&mut rng, f, m, n, k);
        let got = run(&QGemm::new(f).threads(2), &c);
        let mut wd = vec![0.0f32; n * k];
        quant::dequantize(f, &c.w, &mut wd).unwrap();
        let g = QGemv::new(f, QMode::A8);
        for i in 0..m {
            let x = &c.a[i * k..(i + 1) * k];
            let xq = qgemv::quantize_activations(f, x).unwrap();
            let mut y = vec![0.0f32; n];
            g.run_prequantized(&c.w, &xq, k, &mut y).unwrap();
            let mut xd = vec![0.0f32; k];
            quant::dequantize(qgemv::activation_format(f), &xq, &mut xd).unwrap();
            for r in 0..n {
                let mag: f64 = (0..k)
                    .map(|j| (wd[r * k + j] as f64 * xd[j] as f64).abs())
                    .sum();
                let err = (got[i * n + r] as f64 - y[r] as f64).abs();
                assert!(
                    err <= 1e-5 * mag + 1e-6,
                    "{f} {} row {i} col {r}: {} vs {} (Σ|w·x| {mag})",
                    g.isa,
                    got[i * n + r],
                    y[r]
                );
            }
        }
    }
}

#[test]
fn empty_and_degenerate_shapes() {
    let mut rng = Rng::new(24);
    for f in FORMATS {
        for (m, n, k) in [(0, 8, 32), (3, 0, 32), (2, 5, 0)] {
            let c = case(&mut rng, f, m, n, k);
            let want = reference(f, &c);
            let got = run(&QGemm::new(f), &c);
            assert_eq!(got, want, "{f} m={m} n={n} k={k}");
            assert!(got.iter().all(|v| *v == 0.0));
        }
    }
}

#[test]
fn prequantized_activations_give_the_same_result() {
    let mut rng = Rng::new(25);
    let f = QuantFormat::Q4_1;
    let c = case(&mut rng, f, 6, 13, 64);
    let q = QGemm::new(f).threads(2);
    let p = q.pack(&c.w, c.n, c.k).unwrap();
    let aq = quantize_activations(&c.a, c.m, c.k).unwrap();
    let mut out = vec![0.0; c.m * c.n];
    q.run_prequantized(&p, &aq, c.m, &mut out).unwrap();
    assert_eq!(out, run(&q, &c));
    assert!(q.run_prequantized(&p, &aq[1..], c.m, &mut out).is_err());
}

#[test]
fn bad_configurations_are_refused() {
    let mut rng = Rng::new(26);
    let f = QuantFormat::Q8_0;
    let c = case(&mut rng, f, 2, 8, 32);
    let q = QGemm::new(f);
    let p = q.pack(&c.w, c.n, c.k).unwrap();
    let mut out = vec![0.0; 16];
    let mut s = Vec::new();
    // A format without a GEMM.
    assert!(matches!(
        QGemm::new(QuantFormat::Q6K).isa(Isa::Scalar).check_config(),
        Err(KernelError::NoVariant { .. })
    ));
    // A variant this CPU lacks (the other architecture's always is).
    #[cfg(target_arch = "x86_64")]
    let foreign = Isa::NeonDotprod;
    #[cfg(not(target_arch = "x86_64"))]
    let foreign = Isa::Avx2;
    assert!(matches!(
        q.isa(foreign).check_config(),
        Err(KernelError::IsaUnavailable { .. })
    ));
    // Weights packed for another interleave.
    let other = [4, 8, 16].into_iter().find(|&r| r != q.params.nr).unwrap();
    let p2 = repack(f, &c.w, c.n, c.k, other).unwrap();
    assert!(matches!(
        q.run(&p2, &c.a, c.m, &mut out, &mut s),
        Err(KernelError::InvalidParams { .. })
    ));
    // An interleave the variant does not read.
    if q.isa != Isa::Scalar {
        let bad = [4, 8, 16]
            .into_iter()
            .find(|r| !interleaves(q.isa).contains(r))
            .unwrap();
        let q2 = q.params(QGemmParams { mr: 4, nr: bad });
        assert!(matches!(
            q2.check_config(),
            Err(KernelError::InvalidParams { .. })
        ));
    }
    // Shape mismatches and zero threads.
    assert!(q.run(&p, &c.a[1..], c.m, &mut out, &mut s).is_err());
    assert!(q.run(&p, &c.a, c.m, &mut out[1..], &mut s).is_err());
    assert!(matches!(
        q.threads(0).run(&p, &c.a, c.m, &mut out, &mut s),
        Err(KernelError::InvalidThreads { .. })
    ));
    assert!(q.run(&p, &c.a, c.m, &mut out, &mut s).is_ok());
}
