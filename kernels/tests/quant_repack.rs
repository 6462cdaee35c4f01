//! Repacked (4-row interleaved) Q4_0 weights: the repack is lossless (unpack
//! gives the GGUF bytes back), the scalar kernel over the repacked layout is
//! bit-equal to the plain scalar W·A8 reference, and every ISA variant the
//! CPU runs matches it within the W·A8 tolerance (`1e-5 · Σ|w·x| + 1e-6`)
//! over n = 0, 1, 3, 4, 5, 7, 8, 9, 97 (groups of 4 plus 0–3 tail rows),
//! k = 1, 3, 7, 32 blocks, 1 or 3 threads.

use tiletune_kernels::qgemv::repack::RepackedQ4_0x4;
use tiletune_kernels::qgemv::{QGemv, QMode, quantize_activations};
use tiletune_kernels::quant::{self, QuantFormat};
use tiletune_kernels::testing::Rng;
use tiletune_kernels::{Isa, KernelError};

const F: QuantFormat = QuantFormat::Q4_0;

fn case(rng: &mut Rng, n: usize, k: usize) -> (Vec<u8>, Vec<f32>, Vec<u8>) {
    let w = quant::quantize(F, &rng.vec_f32(n * k)).unwrap();
    let x = rng.vec_f32(k);
    let xq = quantize_activations(F, &x).unwrap();
    (w, x, xq)
}

fn plain_scalar(w: &[u8], xq: &[u8], k: usize, n: usize) -> Vec<f32> {
    let mut y = vec![0.0; n];
    QGemv::new(F, QMode::A8)
        .isa(Isa::Scalar)
        .run_prequantized(w, xq, k, &mut y)
        .unwrap();
    y
}

#[test]
fn repack_round_trips() {
    let mut rng = Rng::new(11);
    for n in [0, 1, 4, 5, 11] {
        for k in [0, 32, 96] {
            let (w, _, _) = case(&mut rng, n, k);
            let r = RepackedQ4_0x4::new(&w, n, k).unwrap();
            assert_eq!((r.n(), r.k()), (n, k));
            assert_eq!(r.unpack(), w, "n={n} k={k}");
        }
    }
}

#[test]
fn scalar_repacked_equals_plain_scalar_exactly() {
    let mut rng = Rng::new(12);
    for (n, k) in [(4, 32), (9, 96), (13, 224)] {
        let (w, _, xq) = case(&mut rng, n, k);
        let r = RepackedQ4_0x4::new(&w, n, k).unwrap();
        let mut y = vec![f32::NAN; n];
        r.gemv_a8(Isa::Scalar, 1, &xq, &mut y).unwrap();
        assert_eq!(y, plain_scalar(&w, &xq, k, n), "n={n} k={k}");
    }
}

#[test]
fn every_variant_matches_scalar() {
    let mut rng = Rng::new(13);
    let mut ran = 0;
    for n in [0, 1, 3, 4, 5, 7, 8, 9, 97] {
        for blocks in [1, 3, 7, 32] {
            let k = 32 * blocks;
            let (w, _, xq) = case(&mut rng, n, k);
            let r = RepackedQ4_0x4::new(&w, n, k).unwrap();
            let want = plain_scalar(&w, &xq, k, n);
            // Σ|w·x| per row from the dequantized operands.
            let mut wf = vec![0.0; n * k];
            quant::dequantize(F, &w, &mut wf).unwrap();
            let mut xf = vec![0.0; k];
            quant::dequantize(QuantFormat::Q8_0, &xq, &mut xf).unwrap();
            for &isa in RepackedQ4_0x4::variants()
                .iter()
                .filter(|i| i.is_available())
            {
                for threads in [1, 3] {
                    let mut y = vec![f32::NAN; n];
                    r.gemv_a8(isa, threads, &xq, &mut y).unwrap();
                    for row in 0..n {
                        let mag: f64 = (0..k)
                            .map(|j| (wf[row * k + j] as f64 * xf[j] as f64).abs())
                            .sum();
                        let tol = 1e-5 * mag + 1e-6;
                        assert!(
                            ((y[row] - want[row]) as f64).abs() <= tol,
                            "{isa} n={n} k={k} t={threads} row {row}: got {}, want {}",
                            y[row],
                            want[row]
                        );
                    }
                    ran += 1;
                }
            }
        }
    }
    assert!(ran >= 9 * 4 * 2, "only {ran} runs");
}

#[test]
fn bad_inputs_are_errors() {
    let (n, k) = (5, 64);
    let w = vec![0u8; n * F.row_bytes(k)];
    assert!(matches!(
        RepackedQ4_0x4::new(&w[1..], n, k),
        Err(KernelError::ShapeMismatch { .. })
    ));
    assert!(matches!(
        RepackedQ4_0x4::new(&w, n, 40),
        Err(KernelError::InvalidShape { .. })
    ));
    let r = RepackedQ4_0x4::new(&w, n, k).unwrap();
    let xq = vec![0u8; QuantFormat::Q8_0.row_bytes(k)];
    let mut y = vec![0.0; n];
    assert!(matches!(
        r.gemv_a8(Isa::Scalar, 1, &xq[1..], &mut y),
        Err(KernelError::ShapeMismatch { .. })
    ));
    assert!(matches!(
        r.gemv_a8(Isa::Scalar, 1, &xq, &mut y[1..]),
        Err(KernelError::ShapeMismatch { .. })
    ));
    assert!(matches!(
        r.gemv_a8(Isa::Scalar, 0, &xq, &mut y),
        Err(KernelError::InvalidThreads { .. })
    ));
    assert!(matches!(
        r.gemv_a8(Isa::Avx512Vnni, 1, &xq, &mut y),
        Err(KernelError::NoVariant { .. })
    ));
    let foreign = if cfg!(target_arch = "x86_64") {
        Isa::NeonDotprod
    } else {
        Isa::Avx2
    };
    assert!(matches!(
        r.gemv_a8(foreign, 1, &xq, &mut y),
        Err(KernelError::IsaUnavailable { .. })
    ));
    r.gemv_a8(Isa::Scalar, 1, &xq, &mut y).unwrap();
    assert!(y.iter().all(|&v| v == 0.0));
}
