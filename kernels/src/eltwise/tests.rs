//! Every available variant × parameter set against the scalar reference.

use super::*;
use crate::testing::{Rng, assert_close};

/// The length sweep: empty, single, around 8- and 16-lane tiles, and large.
pub(crate) const LENS: [usize; 13] = [0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1000, 4099];

const SPECIALS: [f32; 12] = [
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    0.0,
    -0.0,
    100.0,
    -100.0,
    88.7,
    -88.7,
    1e30,
    -1e30,
    1e-40,
];

/// Uniform in [-12, 12] with specials sprinkled in (about 1 in 16).
fn input(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| {
            if rng.below(16) == 0 {
                SPECIALS[rng.below(SPECIALS.len())]
            } else {
                rng.uniform(-12.0, 12.0)
            }
        })
        .collect()
}

/// Parameter sets: the enumerator's candidates plus small chunks so that
/// short vectors are split across threads too.
fn param_sets(len: usize) -> Vec<EltParams> {
    let cpu = CpuCaps {
        cores: 3,
        ..CpuCaps::default()
    };
    let mut v = EltParams::candidates(&EltShape { len }, &cpu);
    v.push(EltParams {
        threads: 2,
        chunk: 16,
    });
    v.push(EltParams {
        threads: 3,
        chunk: 48,
    });
    v
}

/// (atol, rtol) per op against the scalar reference.
fn tolerance(op: EltOp) -> (f32, f32) {
    match op {
        EltOp::Relu | EltOp::Relu2 => (0.0, 0.0),
        EltOp::GeluErf => (1e-6, 1e-6),
        _ => (1e-30, 2e-6),
    }
}

#[test]
fn unary_ops_match_scalar_on_every_lane() {
    for isa in available_isas() {
        for op in EltOp::ALL {
            let (atol, rtol) = tolerance(op);
            for (li, &n) in LENS.iter().enumerate() {
                let mut rng = Rng::new(1000 + li as u64);
                let x = input(&mut rng, n);
                let mut want = x.clone();
                scalar::unary(op, &mut want);
                for p in param_sets(n) {
                    let mut got = x.clone();
                    apply_with(op, &mut got, isa, &p).unwrap();
                    assert_close(&got, &want, atol, rtol, &format!("{op} {isa} n={n} {p:?}"));
                }
            }
        }
    }
}

#[test]
fn binary_ops_match_scalar_on_every_lane() {
    for isa in available_isas() {
        for (li, &n) in LENS.iter().enumerate() {
            let mut rng = Rng::new(2000 + li as u64);
            let a = input(&mut rng, n);
            let b = input(&mut rng, n);
            for p in param_sets(n) {
                let what = format!("{isa} n={n} {p:?}");

                let mut want = a.clone();
                scalar::mul_const(&mut want, -1.7);
                let mut got = a.clone();
                mul_const_with(&mut got, -1.7, isa, &p).unwrap();
                assert_close(&got, &want, 0.0, 0.0, &format!("mul_const {what}"));

                let mut want = a.clone();
                scalar::add_from(&mut want, &b);
                let mut got = a.clone();
                add_from_with(&mut got, &b, isa, &p).unwrap();
                assert_close(&got, &want, 0.0, 0.0, &format!("add_from {what}"));

                let mut want = a.clone();
                scalar::swiglu(&mut want, &b);
                let mut got = a.clone();
                swiglu_with(&mut got, &b, isa, &p).unwrap();
                assert_close(&got, &want, 1e-30, 2e-6, &format!("swiglu {what}"));
            }
        }
    }
}

/// A dense sweep of the exp-based ops over the whole interesting range,
/// including the subnormal and overflow edges of exp.
#[test]
fn dense_sweep_over_exp_range() {
    let x: Vec<f32> = (0..40_000).map(|i| -110.0 + i as f32 * 0.0055).collect();
    for isa in available_isas() {
        let p = EltParams {
            threads: 1,
            chunk: DEFAULT_CHUNK,
        };
        for op in EltOp::ALL {
            let (atol, rtol) = tolerance(op);
            let mut want = x.clone();
            scalar::unary(op, &mut want);
            let mut got = x.clone();
            apply_with(op, &mut got, isa, &p).unwrap();
            assert_close(&got, &want, atol, rtol, &format!("{op} {isa} sweep"));
        }
    }
}

#[test]
fn specials_behave_like_the_reference() {
    let x = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        -0.0,
        0.0,
        f32::MAX,
        f32::MIN,
    ];
    for isa in available_isas() {
        for op in EltOp::ALL {
            let mut got = x.to_vec();
            apply_with(op, &mut got, isa, &EltParams::default_for(&EltShape { len: 7 }, &CpuCaps::default()))
                .unwrap();
            let want: Vec<f32> = x.iter().map(|&v| scalar::eval(op, v)).collect();
            assert_close(&got, &want, 1e-30, 2e-6, &format!("{op} {isa} specials"));
        }
        let mut s = vec![f32::INFINITY, f32::NEG_INFINITY];
        apply_with(EltOp::Sigmoid, &mut s, isa, &EltParams { threads: 1, chunk: 16 }).unwrap();
        assert_eq!(s, [1.0, 0.0], "{isa}");
        let mut s = vec![f32::NEG_INFINITY];
        apply_with(EltOp::Silu, &mut s, isa, &EltParams { threads: 1, chunk: 16 }).unwrap();
        assert_eq!(s[0], 0.0, "{isa}: silu(-inf)");
    }
}

#[test]
fn wrong_lengths_and_params_are_errors() {
    let mut a = vec![0.0; 10];
    assert!(matches!(
        add_from(&mut a, &[0.0; 9]),
        Err(KernelError::ShapeMismatch { .. })
    ));
    assert!(swiglu(&mut a, &[0.0; 11]).is_err());
    let bad = EltParams { threads: 0, chunk: 16 };
    assert!(apply_with(EltOp::Silu, &mut a, Isa::Scalar, &bad).is_err());
    let bad = EltParams { threads: 1, chunk: 17 };
    assert!(apply_with(EltOp::Silu, &mut a, Isa::Scalar, &bad).is_err());
}

#[test]
fn forcing_a_missing_variant_is_refused() {
    let p = EltParams { threads: 1, chunk: 16 };
    let mut x = vec![1.0; 4];
    for isa in Isa::ALL {
        let r = apply_with(EltOp::Relu, &mut x, isa, &p);
        if !isa.is_available() {
            assert!(matches!(r, Err(KernelError::IsaUnavailable { .. })), "{isa}");
        } else if !ISAS.contains(&isa) {
            assert!(matches!(r, Err(KernelError::NoVariant { .. })), "{isa}");
        } else {
            assert!(r.is_ok());
        }
    }
}

#[test]
fn op_names_round_trip_and_params_are_valid() {
    for op in EltOp::ALL {
        assert_eq!(op.name().parse::<EltOp>().unwrap(), op);
    }
    assert!("gelu".parse::<EltOp>().is_err());
    for len in [0, 100, 1 << 20, 1 << 24] {
        for cores in [1, 2, 16] {
            let cpu = CpuCaps {
                cores,
                ..CpuCaps::default()
            };
            let shape = EltShape { len };
            let c = EltParams::candidates(&shape, &cpu);
            assert_eq!(c[0], EltParams::default_for(&shape, &cpu));
            for p in c {
                p.validate().unwrap();
            }
        }
    }
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn binary_length_mismatch_is_an_error(n in 0usize..300, m in 0usize..300) {
            let mut a = vec![1.0f32; n];
            let b = vec![2.0f32; m];
            let r = add_from(&mut a, &b);
            prop_assert_eq!(r.is_ok(), n == m);
            let r = swiglu(&mut a, &b);
            prop_assert_eq!(r.is_ok(), n == m);
        }
    }
}
