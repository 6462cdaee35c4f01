//! Scalar references for the element-wise ops: the definitions every SIMD
//! variant is tested against.
//!
//! They use `f32::exp` from std for everything exp-based, and compute the erf
//! GeLU in f64 with [`erf_f64`]/[`erfc_f64`] (std has no stable `erf`), so the
//! reference is accurate to about one f32 ulp. Limits at ±∞ are defined as
//! the mathematical limits: `silu(-∞) = gelu(-∞) = -0`, `silu(+∞) = +∞`,
//! `sigmoid(±∞) = 1 / 0`; NaN propagates.

use super::EltOp;

/// `√(2/π)`, the GeLU tanh-approximation constant.
pub(crate) const SQRT_2_OVER_PI: f32 = 0.797_884_6;
/// The cubic coefficient of the GeLU tanh approximation (Hendrycks & Gimpel).
pub(crate) const GELU_CUBIC: f32 = 0.044_715;
/// QuickGeLU's sigmoid slope (CLIP / OpenAI).
pub(crate) const QUICK_GELU_ALPHA: f32 = 1.702;

/// `1 / (1 + e^-x)`.
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// `x · sigmoid(a·x)` written as `x / (1 + e^(-a·x))` (one rounding fewer),
/// with the `x = -∞` limit defined as `-0`.
#[inline]
fn x_sigmoid(x: f32, a: f32) -> f32 {
    if x == f32::NEG_INFINITY {
        -0.0
    } else {
        x / (1.0 + (-a * x).exp())
    }
}

/// SiLU (swish): `x · sigmoid(x)`.
#[inline]
pub fn silu(x: f32) -> f32 {
    x_sigmoid(x, 1.0)
}

/// GeLU, tanh approximation: `0.5·x·(1 + tanh(u))`, `u = √(2/π)(x + 0.044715x³)`.
///
/// Computed through the identity `1 + tanh(u) = 2·sigmoid(2u)`, which avoids
/// the cancellation of `1 + tanh(u)` for negative `x`.
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    if x == f32::NEG_INFINITY {
        return -0.0;
    }
    let u = SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x);
    x / (1.0 + (-2.0 * u).exp())
}

/// GeLU with the exact normal CDF: `x · Φ(x) = 0.5·x·erfc(-x/√2)`, computed in f64.
#[inline]
pub fn gelu_erf(x: f32) -> f32 {
    if x == f32::NEG_INFINITY {
        return -0.0;
    }
    let xd = x as f64;
    (0.5 * xd * erfc_f64(-xd * std::f64::consts::FRAC_1_SQRT_2)) as f32
}

/// QuickGeLU: `x · sigmoid(1.702·x)`.
#[inline]
pub fn quick_gelu(x: f32) -> f32 {
    x_sigmoid(x, QUICK_GELU_ALPHA)
}

/// ReLU; NaN stays NaN (as in PyTorch), `-0` stays `-0`.
#[inline]
pub fn relu(x: f32) -> f32 {
    if x < 0.0 { 0.0 } else { x }
}

/// Squared ReLU (Primer): `relu(x)²`.
#[inline]
pub fn relu2(x: f32) -> f32 {
    let r = relu(x);
    r * r
}

/// Applies a unary op to one value.
#[inline]
pub fn eval(op: EltOp, x: f32) -> f32 {
    match op {
        EltOp::Silu => silu(x),
        EltOp::GeluTanh => gelu_tanh(x),
        EltOp::GeluErf => gelu_erf(x),
        EltOp::QuickGelu => quick_gelu(x),
        EltOp::Relu => relu(x),
        EltOp::Relu2 => relu2(x),
        EltOp::Sigmoid => sigmoid(x),
    }
}

/// Unary op over a slice, in place.
pub fn unary(op: EltOp, x: &mut [f32]) {
    for v in x {
        *v = eval(op, *v);
    }
}

/// `x *= c`.
pub fn mul_const(x: &mut [f32], c: f32) {
    for v in x {
        *v *= c;
    }
}

/// `a += b`.
pub fn add_from(a: &mut [f32], b: &[f32]) {
    debug_assert_eq!(a.len(), b.len());
    for (x, y) in a.iter_mut().zip(b) {
        *x += *y;
    }
}

/// `gate = silu(gate) · up`.
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    debug_assert_eq!(gate.len(), up.len());
    for (g, u) in gate.iter_mut().zip(up) {
        *g = silu(*g) * *u;
    }
}

const FRAC_2_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;
/// `1/√π`.
const FRAC_1_SQRT_PI: f64 = 0.564_189_583_547_756_3;
/// Below this `|x|` the series is used (erfc(2) ≈ 4.7e-3, so `1 - erf`
/// keeps ~13 correct digits); above it, the continued fraction. Checked
/// against mpmath in the tests: erf within 2e-15, erfc within 1e-11 relative.
const ERF_SWITCH: f64 = 2.0;

/// erf(x) for `0 ≤ x < 2` from the all-positive series of Abramowitz &
/// Stegun 7.1.6 (DLMF 7.6.2):
/// `erf x = (2/√π)·e^(-x²)·Σ 2ⁿ x^(2n+1) / (1·3·5···(2n+1))`.
/// No term cancels, so the sum is accurate to a few f64 ulps.
fn erf_series(x: f64) -> f64 {
    let x2 = x * x;
    let mut term = x;
    let mut sum = x;
    let mut n = 0u32;
    while term > sum * 1e-17 && n < 200 {
        n += 1;
        term *= 2.0 * x2 / f64::from(2 * n + 1);
        sum += term;
    }
    FRAC_2_SQRT_PI * (-x2).exp() * sum
}

/// erfc(x) for `x ≥ 2` from the continued fraction of Abramowitz & Stegun
/// 7.1.14 (DLMF 7.9.2):
/// `erfc x = (e^(-x²)/√π) · 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + …)))))`,
/// evaluated backwards from a fixed depth of 160 levels, enough at `x ≥ 2`.
fn erfc_cf(x: f64) -> f64 {
    let mut tail = x;
    for k in (1..=160).rev() {
        tail = x + f64::from(k) * 0.5 / tail;
    }
    FRAC_1_SQRT_PI * (-x * x).exp() / tail
}

/// The error function in f64 (reference quality, not fast). Odd; `erf(±∞) = ±1`.
pub fn erf_f64(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let y = if a < ERF_SWITCH {
        erf_series(a)
    } else {
        1.0 - erfc_cf(a)
    };
    y.copysign(x)
}

/// The complementary error function `1 - erf(x)` in f64, accurate in the
/// tail (relative, not absolute): `erfc(+∞) = 0`, `erfc(-∞) = 2`.
pub fn erfc_f64(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x == f64::INFINITY {
        return 0.0;
    }
    let a = x.abs();
    let tail = if a < ERF_SWITCH {
        1.0 - erf_series(a)
    } else {
        erfc_cf(a)
    };
    if x < 0.0 { 2.0 - tail } else { tail }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// erf/erfc values from mpmath at 30 digits.
    const TABLE: [(f64, f64, f64); 15] = [
        (0.0, 0.0, 1.0),
        (1e-10, 1.128_379_167_095_512_6e-10, 0.999_999_999_887_162_1),
        (0.1, 0.112_462_916_018_284_89, 0.887_537_083_981_715_1),
        (0.5, 0.520_499_877_813_046_5, 0.479_500_122_186_953_46),
        (0.84375, 0.767_225_661_232_341_6, 0.232_774_338_767_658_37),
        (1.0, 0.842_700_792_949_714_9, 0.157_299_207_050_285_13),
        (1.5, 0.966_105_146_475_310_7, 0.033_894_853_524_689_27),
        (2.0, 0.995_322_265_018_952_7, 0.004_677_734_981_047_266),
        (2.5, 0.999_593_047_982_555, 0.000_406_952_017_444_958_94),
        (2.99, 0.999_976_474_396_919_4, 2.352_560_308_064_022_7e-5),
        (3.01, 0.999_979_261_036_362_9, 2.073_896_363_713_260_6e-5),
        (3.5, 0.999_999_256_901_627_7, 7.430_983_723_414_127e-7),
        (4.0, 0.999_999_984_582_742_1, 1.541_725_790_028_002e-8),
        (6.0, 1.0, 2.151_973_671_249_891_3e-17),
        (9.0, 1.0, 4.137_031_746_513_810_2e-37),
    ];

    #[test]
    fn erf_matches_mpmath() {
        for &(x, erf, erfc) in &TABLE {
            let e = erf_f64(x);
            assert!((e - erf).abs() <= 2e-15, "erf({x}) = {e}, want {erf}");
            assert!((erf_f64(-x) + erf).abs() <= 2e-15, "erf odd at {x}");
            let c = erfc_f64(x);
            assert!(
                (c - erfc).abs() <= 1e-11 * erfc,
                "erfc({x}) = {c}, want {erfc}"
            );
            assert!((erfc_f64(-x) - (2.0 - erfc)).abs() <= 1e-15, "erfc(-{x})");
        }
        assert_eq!(erf_f64(f64::INFINITY), 1.0);
        assert_eq!(erf_f64(f64::NEG_INFINITY), -1.0);
        assert_eq!(erfc_f64(f64::INFINITY), 0.0);
        assert_eq!(erfc_f64(f64::NEG_INFINITY), 2.0);
        assert!(erf_f64(f64::NAN).is_nan() && erfc_f64(f64::NAN).is_nan());
    }

    /// The f32 references against independent f64 formulas (the textbook
    /// forms, with their cancellations harmless in f64).
    #[test]
    fn references_match_f64_textbook_forms() {
        let mut rng = crate::testing::Rng::new(11);
        for _ in 0..20_000 {
            let x = rng.uniform(-12.0, 12.0);
            let xd = x as f64;
            let sig = 1.0 / (1.0 + (-xd).exp());
            let u = (2.0 / std::f64::consts::PI).sqrt() * (xd + 0.044715 * xd * xd * xd);
            let cases = [
                ("silu", silu(x) as f64, xd * sig),
                ("sigmoid", sigmoid(x) as f64, sig),
                ("gelu_tanh", gelu_tanh(x) as f64, 0.5 * xd * (1.0 + u.tanh())),
                (
                    "gelu_erf",
                    gelu_erf(x) as f64,
                    0.5 * xd * (1.0 + erf_f64(xd / 2f64.sqrt())),
                ),
                (
                    "quick_gelu",
                    quick_gelu(x) as f64,
                    xd / (1.0 + (-1.702 * xd).exp()),
                ),
            ];
            for (name, got, want) in cases {
                assert!(
                    (got - want).abs() <= 1e-6 * want.abs() + 1e-7,
                    "{name}({x}) = {got}, want {want}"
                );
            }
        }
    }

    #[test]
    fn limits() {
        for op in EltOp::ALL {
            assert!(eval(op, f32::NAN).is_nan(), "{op} NaN");
            let pos = eval(op, f32::INFINITY);
            let neg = eval(op, f32::NEG_INFINITY);
            match op {
                EltOp::Sigmoid => assert!(pos == 1.0 && neg == 0.0),
                _ => assert!(pos == f32::INFINITY && neg == 0.0, "{op}: {pos} {neg}"),
            }
        }
        assert_eq!(relu(-0.0).to_bits(), (-0.0f32).to_bits());
    }
}
