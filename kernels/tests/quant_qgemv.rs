//! Quantized GEMV: every ISA variant the CPU runs, for every format and both
//! activation modes, against the scalar reference, over an edge sweep of
//! shapes (n = 0, 1, rows-per-block − 1, non-multiples, a larger case; k = 1,
//! 3, 7 blocks and one long row), every rows-per-block and 1 or 3 threads.
//! The scalar reference itself is checked against an f64 dot product of the
//! dequantized operands.
//!
//! Tolerance: the variants only reorder f32 sums (integer block sums are
//! exact), so per row `|got − want| ≤ 1e-5 · Σ|w·x| + 1e-6`.

use tiletune_kernels::qgemv::{
    PREFETCHES, QGemv, QGemvParams, QGemvShape, QMode, ROWS_PER_BLOCK, activation_format,
    quantize_activations, scalar, variants,
};
use tiletune_kernels::quant::{self, F16Le, QuantFormat};
use tiletune_kernels::testing::{Rng, edge_sizes};
use tiletune_kernels::{Isa, KernelError};

/// Random weights quantized to `format`, `n` rows of `k`. Q8_0 rows get a
/// −128 quant (legal in files, never produced by the quantizer) to exercise
/// the sign trick's edge.
fn weights(rng: &mut Rng, format: QuantFormat, n: usize, k: usize) -> Vec<u8> {
    let mut w = quant::quantize(format, &rng.vec_f32(n * k)).unwrap();
    if format == QuantFormat::Q8_0 && k > 0 {
        for row in w.chunks_mut(format.row_bytes(k)) {
            row[2] = 0x80;
        }
    }
    w
}

/// Σ|w·x| per row and the f64 product of the dequantized operands.
fn f64_reference(
    format: QuantFormat,
    mode: QMode,
    w: &[u8],
    x: &[f32],
    n: usize,
) -> (Vec<f64>, Vec<f64>) {
    let k = x.len();
    let mut wf = vec![0.0; n * k];
    quant::dequantize(format, w, &mut wf).unwrap();
    let mut xq = Vec::new();
    let xf = match mode {
        QMode::A32 => x.to_vec(),
        QMode::A8 => {
            xq = quantize_activations(format, x).unwrap();
            let mut xf = vec![0.0; k];
            quant::dequantize(activation_format(format), &xq, &mut xf).unwrap();
            xf
        }
    };
    let mut mag = vec![0.0; n];
    let mut dot = vec![0.0; n];
    for r in 0..n {
        for j in 0..k {
            let p = wf[r * k + j] as f64 * xf[j] as f64;
            dot[r] += p;
            mag[r] += p.abs();
        }
    }
    if mode == QMode::A8 && activation_format(format) == QuantFormat::Q8_1 {
        // ggml's Q4_1/Q5_1 × Q8_1 dot uses the block's stored `s = d·Σq`, an
        // f16, for the offset term `m · Σx`: the product is defined with it.
        let (wb, half) = (format.block_bytes(), |b: &[u8]| {
            F16Le([b[0], b[1]]).to_f32() as f64
        });
        for r in 0..n {
            for b in 0..k / 32 {
                let m = half(&w[(r * k / 32 + b) * wb + 2..]);
                let s = half(&xq[b * 36 + 2..]);
                let sum_x: f64 = xf[32 * b..32 * b + 32].iter().map(|&v| v as f64).sum();
                dot[r] += m * (s - sum_x);
            }
        }
    }
    (mag, dot)
}

fn check_rows(got: &[f32], want: &[f64], mag: &[f64], rtol: f64, what: &str) {
    for (r, ((&g, &w), &m)) in got.iter().zip(want).zip(mag).enumerate() {
        let tol = rtol * m + 1e-6;
        assert!(
            (g as f64 - w).abs() <= tol,
            "{what}: row {r}: got {g}, want {w} (tolerance {tol:e})"
        );
    }
}

fn shapes(format: QuantFormat) -> Vec<(usize, usize)> {
    let bs = format.block_size();
    let mut v = Vec::new();
    for n in edge_sizes(4) {
        for blocks in [1, 3, 7] {
            v.push((n, blocks * bs));
        }
    }
    let long = if bs == 32 { 1024 } else { 8 * 256 };
    v.push((67, long));
    // k = 0: every output is an empty sum.
    v.push((5, 0));
    v
}

const FORMATS: [QuantFormat; 9] = scalar::FORMATS;

fn run(g: QGemv, w: &[u8], x: &[f32], n: usize) -> Vec<f32> {
    let mut y = vec![f32::NAN; n];
    g.run(w, x, &mut y).unwrap();
    y
}

#[test]
fn scalar_reference_matches_f64_dequantized_product() {
    let mut rng = Rng::new(1);
    for format in FORMATS {
        for mode in [QMode::A32, QMode::A8] {
            for (n, k) in [(5, format.block_size() * 3), (9, format.block_size() * 8)] {
                let w = weights(&mut rng, format, n, k);
                let x = rng.vec_f32(k);
                let y = run(QGemv::new(format, mode).isa(Isa::Scalar), &w, &x, n);
                let (mag, want) = f64_reference(format, mode, &w, &x, n);
                check_rows(
                    &y,
                    &want,
                    &mag,
                    1e-5,
                    &format!("{format} {} scalar", mode.name()),
                );
            }
        }
    }
}

#[test]
fn every_variant_matches_scalar_over_edge_sweep() {
    let mut rng = Rng::new(2);
    let mut ran = 0;
    for format in FORMATS {
        for mode in [QMode::A32, QMode::A8] {
            let isas: Vec<Isa> = variants(format, mode)
                .iter()
                .copied()
                .filter(|i| *i != Isa::Scalar && i.is_available())
                .collect();
            for (n, k) in shapes(format) {
                let w = weights(&mut rng, format, n, k);
                let x = rng.vec_f32(k);
                let want = run(QGemv::new(format, mode).isa(Isa::Scalar), &w, &x, n);
                let (mag, _) = f64_reference(format, mode, &w, &x, n);
                let want: Vec<f64> = want.iter().map(|&v| v as f64).collect();
                for &isa in &isas {
                    for rows_per_block in ROWS_PER_BLOCK {
                        for threads in [1, 3] {
                            // Every distance over the sweep (a prefetch past
                            // the rows must change nothing).
                            let pf = PREFETCHES[(rows_per_block + threads) % PREFETCHES.len()];
                            let g = QGemv::new(format, mode)
                                .isa(isa)
                                .params(QGemvParams { rows_per_block, pf })
                                .threads(threads);
                            let y = run(g, &w, &x, n);
                            let what = format!(
                                "{format} {} {isa} n={n} k={k} rpb={rows_per_block} pf={pf} t={threads}",
                                mode.name()
                            );
                            check_rows(&y, &want, &mag, 1e-5, &what);
                            ran += 1;
                        }
                    }
                }
            }
        }
    }
    println!("{ran} variant runs checked against scalar");
    #[cfg(target_arch = "x86_64")]
    if Isa::Avx2.is_available() {
        assert!(ran > 0);
    }
    #[cfg(target_arch = "aarch64")]
    assert!(ran > 0);
}

#[test]
fn threads_do_not_change_results() {
    let mut rng = Rng::new(3);
    for format in [QuantFormat::Q4_0, QuantFormat::Q4K] {
        for mode in [QMode::A32, QMode::A8] {
            let (n, k) = (37, format.block_size() * 4);
            let w = weights(&mut rng, format, n, k);
            let x = rng.vec_f32(k);
            let one = run(QGemv::new(format, mode), &w, &x, n);
            for threads in [2, 3, 4] {
                let many = run(QGemv::new(format, mode).threads(threads), &w, &x, n);
                assert_eq!(one, many, "{format} {} threads={threads}", mode.name());
            }
        }
    }
}

#[test]
fn a8_is_close_to_a32() {
    // Quantizing x to 8 bits costs well under 1% of Σ|w·x| per row.
    let mut rng = Rng::new(4);
    for format in FORMATS {
        let (n, k) = (16, format.block_size() * 8);
        let w = weights(&mut rng, format, n, k);
        let x = rng.vec_f32(k);
        let a32 = run(QGemv::new(format, QMode::A32), &w, &x, n);
        let a8 = run(QGemv::new(format, QMode::A8), &w, &x, n);
        let (mag, _) = f64_reference(format, QMode::A32, &w, &x, n);
        let a32: Vec<f64> = a32.iter().map(|&v| v as f64).collect();
        check_rows(&a8, &a32, &mag, 1e-2, &format!("{format} a8 vs a32"));
    }
}

#[test]
fn prequantized_activations_match_run() {
    let mut rng = Rng::new(5);
    for format in [QuantFormat::Q4_0, QuantFormat::Q4_1, QuantFormat::Q6K] {
        let (n, k) = (9, format.block_size() * 2);
        let w = weights(&mut rng, format, n, k);
        let x = rng.vec_f32(k);
        let g = QGemv::new(format, QMode::A8);
        let xq = quantize_activations(format, &x).unwrap();
        let mut y = vec![0.0; n];
        g.run_prequantized(&w, &xq, k, &mut y).unwrap();
        assert_eq!(y, run(g, &w, &x, n));
    }
}

#[test]
fn bad_inputs_are_errors() {
    let f = QuantFormat::Q4_0;
    let (n, k) = (4, 64);
    let w = vec![0u8; n * f.row_bytes(k)];
    let x = vec![0.0; k];
    let mut y = vec![0.0; n];
    let g = QGemv::new(f, QMode::A32);
    assert!(matches!(
        g.run(&w[1..], &x, &mut y),
        Err(KernelError::ShapeMismatch { .. })
    ));
    assert!(matches!(
        g.run(&w, &x[..40], &mut y),
        Err(KernelError::InvalidShape { .. })
    ));
    assert!(matches!(
        g.params(QGemvParams {
            rows_per_block: 3,
            pf: 0
        })
        .run(&w, &x, &mut y),
        Err(KernelError::InvalidParams { .. })
    ));
    assert!(matches!(
        g.threads(0).run(&w, &x, &mut y),
        Err(KernelError::InvalidThreads { .. })
    ));
    assert!(matches!(
        QGemv::new(QuantFormat::Q5_0, QMode::A8)
            .isa(Isa::Avx512)
            .run(&w, &x, &mut y),
        Err(KernelError::NoVariant { .. })
    ));
    assert!(matches!(
        QGemv::new(QuantFormat::Q8_1, QMode::A8).run(&w, &x, &mut y),
        Err(KernelError::NoVariant { .. })
    ));
    let foreign = if cfg!(target_arch = "x86_64") {
        Isa::Neon
    } else {
        Isa::Avx2
    };
    assert!(matches!(
        g.isa(foreign).run(&w, &x, &mut y),
        Err(KernelError::IsaUnavailable { .. })
    ));
    assert!(g.run_prequantized(&w, &[0u8; 68], k, &mut y).is_err());
    let a8 = QGemv::new(f, QMode::A8);
    assert!(matches!(
        a8.run_prequantized(&w, &[0u8; 67], k, &mut y),
        Err(KernelError::ShapeMismatch { .. })
    ));
    a8.run_prequantized(&w, &[0u8; 68], k, &mut y).unwrap();
}

#[test]
fn params_candidates_are_valid_and_contain_the_default() {
    use tiletune_kernels::{CpuCaps, Tunable};
    let cpu = CpuCaps::default();
    for format in FORMATS {
        for mode in [QMode::A32, QMode::A8] {
            for (n, k) in [
                (1, 4096),
                (3, 896),
                (4864, 896),
                (14336, 4096),
                (4096, 65536),
            ] {
                let shape = QGemvShape { format, mode, n, k };
                let d = QGemvParams::default_for(&shape, &cpu);
                let c = QGemvParams::candidates(&shape, &cpu);
                assert!(
                    c.contains(&d),
                    "{format} {n}x{k}: default {d:?} not a candidate"
                );
                assert!(c.iter().all(|p| p.validate().is_ok()));
                assert!(d.rows_per_block <= n.max(1));
                let best = Isa::best_of(variants(format, mode));
                let timed: Vec<usize> = c.iter().map(|p| p.pf).collect();
                tiletune_kernels::testing::assert_prefetch_contract(
                    best,
                    d.pf,
                    &timed,
                    &PREFETCHES,
                );
                #[cfg(target_arch = "aarch64")]
                assert!(matches!(best, Isa::Neon | Isa::NeonDotprod), "{best}");
            }
        }
    }
    let bad = QGemvParams {
        rows_per_block: 4,
        pf: 100,
    };
    assert!(bad.validate().is_err());
    // Tables from before `pf` existed read as no prefetch.
    let old: QGemvParams = serde_json::from_str(r#"{"rows_per_block":2}"#).unwrap();
    assert_eq!(old.pf, 0);
}
