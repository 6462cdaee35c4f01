//! Quantization error against f32, per format: relative RMS error
//! `sqrt(Σ(dq(q(x)) − x)² / Σx²)` on Gaussian rows (the shape of trained
//! weights) must fall in a stated range. The upper bound catches a broken
//! quantizer; the lower bound catches a test that silently compares a
//! format with itself (e.g. a quantizer that stores f32).

use tiletune_kernels::quant::{self, QuantFormat};
use tiletune_kernels::testing::Rng;

/// Standard normal via Box–Muller over the crate's seeded generator.
fn gaussian(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let u1 = rng.unit_f32().max(1e-7);
            let u2 = rng.unit_f32();
            (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
        })
        .collect()
}

fn rel_rms(format: QuantFormat, x: &[f32]) -> f64 {
    let q = quant::quantize(format, x).unwrap();
    assert_eq!(q.len(), format.row_bytes(x.len()));
    let mut y = vec![0.0; x.len()];
    quant::dequantize(format, &q, &mut y).unwrap();
    let err: f64 = x
        .iter()
        .zip(&y)
        .map(|(&a, &b)| ((a - b) as f64).powi(2))
        .sum();
    let sig: f64 = x.iter().map(|&a| (a as f64).powi(2)).sum();
    (err / sig).sqrt()
}

/// (format, lowest plausible, highest allowed) relative RMS error.
/// Expected values for N(0,1) rows: a b-bit symmetric code over a block's
/// range 2·amax ≈ 4.2σ has step ≈ 4.2σ/2^b and error ≈ step/√12.
const BOUNDS: [(QuantFormat, f64, f64); 10] = [
    (QuantFormat::Q8_0, 0.001, 0.010),
    (QuantFormat::Q8_1, 0.001, 0.010),
    (QuantFormat::Q8K, 0.001, 0.010),
    (QuantFormat::Q6K, 0.005, 0.030),
    (QuantFormat::Q5_0, 0.015, 0.060),
    (QuantFormat::Q5_1, 0.015, 0.060),
    (QuantFormat::Q4_0, 0.040, 0.120),
    (QuantFormat::Q4_1, 0.040, 0.120),
    (QuantFormat::Q4K, 0.030, 0.110),
    (QuantFormat::Mxfp4, 0.050, 0.200),
];

#[test]
fn relative_rms_error_within_stated_range() {
    let mut rng = Rng::new(42);
    let x = gaussian(&mut rng, 16 * 256);
    for (format, lo, hi) in BOUNDS {
        let e = rel_rms(format, &x);
        println!("{format}: relative RMS error {e:.4}");
        assert!(
            e >= lo && e <= hi,
            "{format}: relative RMS error {e:.4} outside [{lo}, {hi}]"
        );
    }
}

#[test]
fn error_is_scale_invariant_for_power_of_two_scaling() {
    // Scaling the input by 2^s scales every block scale by 2^s exactly (f16 and
    // E8M0 are floating point), so the relative error must not change.
    let mut rng = Rng::new(7);
    let x = gaussian(&mut rng, 4 * 256);
    let x8: Vec<f32> = x.iter().map(|v| v * 8.0).collect();
    for (format, _, _) in BOUNDS {
        let (a, b) = (rel_rms(format, &x), rel_rms(format, &x8));
        assert!(
            (a - b).abs() <= 1e-3 * a.max(1e-6) + 1e-9,
            "{format}: {a} vs {b}"
        );
    }
}

#[test]
fn higher_bit_formats_are_more_accurate() {
    let mut rng = Rng::new(9);
    let x = gaussian(&mut rng, 8 * 256);
    let e = |f| rel_rms(f, &x);
    assert!(e(QuantFormat::Q8_0) < e(QuantFormat::Q6K));
    assert!(e(QuantFormat::Q6K) < e(QuantFormat::Q5_0));
    assert!(e(QuantFormat::Q5_0) < e(QuantFormat::Q4_0));
    assert!(e(QuantFormat::Q5_1) < e(QuantFormat::Q4_1));
    assert!(e(QuantFormat::Q4K) < e(QuantFormat::Q4_0));
}
