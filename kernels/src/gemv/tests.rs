//! GEMV variants against the scalar reference.
//!
//! Tolerance: the variants reorder the k-sum (vector lanes, `unroll`
//! accumulators, k-blocks) and use fused multiply-add, so with inputs uniform
//! in [-1, 1) each output may differ from the sequential f32 reference by
//! about ε·√k·(typical partial sum); we allow `|got − want| ≤ tol + tol·|want|`
//! with `tol = 1e-5·√max(k, 1)`. NaN must match NaN and ±inf must match
//! exactly. f16 weights are widened exactly, so the same bound applies.

use super::*;
use crate::testing::{Rng, assert_close};
use proptest::prelude::*;

/// n and k values: 0, 1, vector widths ± 1 (4, 8, 16 lanes, unroll 2 and 4),
/// non-multiples, and a size above the test k-block (256).
const EDGE: [usize; 14] = [0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 63, 65, 100, 257];
/// One shape larger than every tile and k-block.
const LARGE: GemvShape = GemvShape { n: 67, k: 1031 };

/// A small fake core so that the analytic defaults block k (kc = 256 for
/// k > 256) and prefetch, and the candidate lists contain both.
const CAPS: CpuCaps = CpuCaps {
    l1d: 2048,
    l2: 64 << 10,
    l3: 1 << 20,
    cores: 2,
};

fn tol(k: usize) -> f32 {
    1e-5 * (k.max(1) as f32).sqrt()
}

/// The variants implemented here that this CPU can run.
fn runnable() -> Vec<Isa> {
    variants()
        .iter()
        .copied()
        .filter(|i| i.is_available())
        .collect()
}

/// Inputs of one problem: f32 and f16 copies of the same weights (the f32
/// copy holds the f16-rounded values when used for the f16 path).
struct Problem {
    shape: GemvShape,
    w: Vec<f32>,
    w16: Vec<f16>,
    x: Vec<f32>,
    bias: Vec<f32>,
    y0: Vec<f32>,
}

impl Problem {
    fn new(shape: GemvShape, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let w = rng.vec_f32(shape.n * shape.k);
        let w16 = w.iter().map(|&v| f16::from_f32(v)).collect();
        Problem {
            shape,
            w,
            w16,
            x: rng.vec_f32(shape.k),
            bias: rng.vec_f32(shape.n),
            y0: rng.vec_f32(shape.n),
        }
    }

    /// Runs the entry point for `f16` or f32 weights and returns `y`.
    fn run(&self, f16w: bool, use_bias: bool, accumulate: bool, cfg: &GemvConfig) -> Vec<f32> {
        let mut y = self.y0.clone();
        let bias = use_bias.then_some(&self.bias[..]);
        let r = if f16w {
            gemv_f16_f32(
                &self.w16, &self.x, bias, &mut y, self.shape, accumulate, cfg,
            )
        } else {
            gemv_f32(&self.w, &self.x, bias, &mut y, self.shape, accumulate, cfg)
        };
        r.unwrap_or_else(|e| panic!("{cfg:?} {:?}: {e}", self.shape));
        y
    }

    fn reference(&self, f16w: bool, use_bias: bool, accumulate: bool) -> Vec<f32> {
        let mut y = self.y0.clone();
        let bias = use_bias.then_some(&self.bias[..]);
        if f16w {
            scalar::gemv(&self.w16, &self.x, bias, &mut y, accumulate);
        } else {
            scalar::gemv(&self.w, &self.x, bias, &mut y, accumulate);
        }
        y
    }
}

/// Every runnable variant with its default parameters over the full n × k
/// edge cross product, both weight types, all four bias/accumulate paths.
#[test]
fn default_params_full_edge_sweep() {
    let mut seed = 1;
    for &n in &EDGE {
        for &k in &EDGE {
            let shape = GemvShape { n, k };
            seed += 1;
            let pb = Problem::new(shape, seed);
            for f16w in [false, true] {
                for (use_bias, acc) in [(false, false), (true, false), (false, true), (true, true)]
                {
                    let want = pb.reference(f16w, use_bias, acc);
                    for isa in runnable() {
                        let cfg = GemvConfig {
                            isa: Some(isa),
                            ..GemvConfig::default_for(&shape, &CAPS)
                        };
                        let got = pb.run(f16w, use_bias, acc, &cfg);
                        let what =
                            format!("{isa} n={n} k={k} f16={f16w} bias={use_bias} acc={acc}");
                        assert_close(&got, &want, tol(k), tol(k), &what);
                    }
                }
            }
        }
    }
}

/// Every runnable variant × every candidate the enumerator offers × threads
/// 1, 2, 3, over shapes in which every edge n and every edge k occurs
/// (twice) plus the large shape; the bias/accumulate path
/// rotates with the shape.
#[test]
fn every_candidate_every_thread_count() {
    // Two different pairings (5 and 3 are coprime with 14, so each is a
    // permutation): every n meets two k values.
    let mut shapes: Vec<GemvShape> = (0..EDGE.len())
        .flat_map(|i| {
            [(i * 5 + 3), (i * 3 + 8)].map(|j| GemvShape {
                n: EDGE[i],
                k: EDGE[j % EDGE.len()],
            })
        })
        .collect();
    shapes.push(LARGE);
    let mut checked = 0usize;
    for (si, &shape) in shapes.iter().enumerate() {
        let pb = Problem::new(shape, 1000 + si as u64);
        let (use_bias, acc) = [(false, false), (true, false), (false, true), (true, true)][si % 4];
        let cands = GemvParams::candidates(&shape, &CAPS);
        for f16w in [false, true] {
            let want = pb.reference(f16w, use_bias, acc);
            for isa in runnable() {
                // The scalar reference ignores the parameters: one set is enough.
                let params: &[GemvParams] = if isa == Isa::Scalar {
                    &cands[..1]
                } else {
                    &cands
                };
                for &p in params {
                    for threads in 1..=3 {
                        let cfg = GemvConfig {
                            isa: Some(isa),
                            params: p,
                            threads,
                        };
                        let got = pb.run(f16w, use_bias, acc, &cfg);
                        let what = format!("{isa} {p:?} t={threads} {shape:?} f16={f16w}");
                        assert_close(&got, &want, tol(shape.k), tol(shape.k), &what);
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked > 0);
}

/// Edits a problem's inputs to plant NaN / inf values.
type Poison<'a> = Box<dyn Fn(&mut Problem) + 'a>;

/// NaN and ±inf flow like in the reference: a NaN in `x` poisons every row,
/// a NaN weight its row, an inf in `x` gives ±inf rows (NaN where two infs
/// of opposite sign meet), NaN/inf in bias or accumulated `y` carry through.
#[test]
fn nan_and_inf_propagate_like_reference() {
    // k = 300 crosses the test k-block (256) so blocked paths are covered.
    for shape in [GemvShape { n: 13, k: 37 }, GemvShape { n: 9, k: 300 }] {
        let GemvShape { n, k } = shape;
        let cases: Vec<(&str, Poison<'_>)> = vec![
            (
                "nan in x",
                Box::new(|p: &mut Problem| p.x[k / 2] = f32::NAN),
            ),
            (
                "nan in last x",
                Box::new(|p: &mut Problem| p.x[k - 1] = f32::NAN),
            ),
            (
                "nan weight",
                Box::new(|p: &mut Problem| {
                    p.w[3 * k + 5] = f32::NAN;
                    p.w16[3 * k + 5] = f16::NAN;
                }),
            ),
            (
                "+inf in x",
                Box::new(|p: &mut Problem| p.x[1] = f32::INFINITY),
            ),
            (
                "+inf and -inf in x",
                Box::new(|p: &mut Problem| {
                    p.x[0] = f32::INFINITY;
                    p.x[k - 2] = f32::NEG_INFINITY;
                }),
            ),
            (
                "inf weight",
                Box::new(|p: &mut Problem| {
                    p.w[2 * k] = f32::NEG_INFINITY;
                    p.w16[2 * k] = f16::NEG_INFINITY;
                }),
            ),
            (
                "nan and inf in bias and y",
                Box::new(|p: &mut Problem| {
                    p.bias[0] = f32::NAN;
                    p.bias[1] = f32::INFINITY;
                    p.y0[2] = f32::NAN;
                    p.y0[3] = f32::NEG_INFINITY;
                }),
            ),
        ];
        for (name, poison) in &cases {
            let mut pb = Problem::new(shape, 77);
            poison(&mut pb);
            for f16w in [false, true] {
                for (use_bias, acc) in [(false, false), (true, true)] {
                    let want = pb.reference(f16w, use_bias, acc);
                    if name.starts_with("nan in") && !use_bias && !acc {
                        assert!(want.iter().all(|v| v.is_nan()), "{name}: reference");
                    }
                    for isa in runnable() {
                        for p in GemvParams::candidates(&shape, &CAPS) {
                            let cfg = GemvConfig {
                                isa: Some(isa),
                                params: p,
                                threads: 2,
                            };
                            let got = pb.run(f16w, use_bias, acc, &cfg);
                            let what = format!("{name}: {isa} {p:?} {shape:?} f16={f16w}");
                            assert_close(&got, &want, tol(k), tol(k), &what);
                        }
                    }
                }
            }
        }
        assert!(n > 3);
    }
}

#[test]
fn forced_isa_is_refused_or_run() {
    for isa in Isa::ALL {
        match resolve_isa(Some(isa)) {
            Ok(got) => {
                assert_eq!(got, isa);
                assert!(isa.is_available() && variants().contains(&isa));
            }
            Err(KernelError::IsaUnavailable { isa: i, .. }) => {
                assert_eq!(i, isa);
                assert!(!isa.is_available());
            }
            Err(KernelError::NoVariant { isa: i, .. }) => {
                assert_eq!(i, isa);
                assert!(isa.is_available() && !variants().contains(&isa));
            }
            Err(e) => panic!("{isa}: unexpected {e}"),
        }
    }
    // Through the entry point too, and the output is left untouched.
    #[cfg(target_arch = "x86_64")]
    let foreign = Isa::Neon;
    #[cfg(not(target_arch = "x86_64"))]
    let foreign = Isa::Avx2;
    let shape = GemvShape { n: 2, k: 3 };
    let mut y = [7.0f32; 2];
    let cfg = GemvConfig {
        isa: Some(foreign),
        ..GemvConfig::default_for(&shape, &CAPS)
    };
    let err = gemv_f32(&[0.0; 6], &[0.0; 3], None, &mut y, shape, false, &cfg).unwrap_err();
    assert!(matches!(err, KernelError::IsaUnavailable { .. }), "{err}");
    assert_eq!(y, [7.0; 2]);
    // Auto selection picks the best implemented variant.
    assert_eq!(resolve_isa(None).unwrap(), Isa::best_of(variants()));
}

#[test]
fn candidates_are_valid_unique_and_contain_default() {
    for shape in [
        GemvShape { n: 0, k: 0 },
        GemvShape { n: 3, k: 5 },
        GemvShape { n: 896, k: 896 },
        GemvShape { n: 11008, k: 4096 },
        LARGE,
    ] {
        for caps in [CAPS, CpuCaps::default()] {
            let c = GemvParams::candidates(&shape, &caps);
            let def = GemvParams::default_for(&shape, &caps);
            assert_eq!(c[0], def);
            assert!((20..=50).contains(&c.len()), "{} candidates", c.len());
            for (i, p) in c.iter().enumerate() {
                p.validate().unwrap();
                assert!(!c[..i].contains(p), "duplicate {p:?}");
            }
        }
    }
}

#[test]
fn default_follows_the_cache_model() {
    let caps = CpuCaps {
        l1d: 48 << 10,
        l2: 1 << 20,
        l3: 32 << 20,
        cores: 2,
    };
    // x of 896 floats (3.5 KiB) fits half of L1: no k blocking.
    let p = GemvParams::default_for(&GemvShape { n: 4864, k: 896 }, &caps);
    assert_eq!((p.nr, p.unroll, p.kc), (4, 2, 0));
    assert!(p.prefetch > 0 && p.prefetch.is_multiple_of(64));
    // x of 11008 floats (43 KiB) does not: blocks of 24 KiB = 6144 floats.
    let p = GemvParams::default_for(&GemvShape { n: 4096, k: 11008 }, &caps);
    assert_eq!(p.kc, 6144);
    // A W that fits in half of L2 gets no software prefetch.
    let p = GemvParams::default_for(&GemvShape { n: 64, k: 64 }, &caps);
    assert_eq!(p.prefetch, 0);
    // Tiny n lowers nr.
    let p = GemvParams::default_for(&GemvShape { n: 3, k: 64 }, &caps);
    assert_eq!(p.nr, 2);
}

#[test]
fn invalid_params_threads_and_shapes_are_errors() {
    let shape = GemvShape { n: 4, k: 4 };
    let good = GemvConfig::default_for(&shape, &CAPS);
    let (w, x) = (vec![1.0f32; 16], vec![1.0f32; 4]);
    let mut y = vec![0.0f32; 4];
    let bad_params = [
        GemvParams {
            nr: 3,
            ..good.params
        },
        GemvParams {
            unroll: 8,
            ..good.params
        },
        GemvParams {
            prefetch: 100,
            ..good.params
        },
        GemvParams {
            prefetch: 16384,
            ..good.params
        },
        GemvParams {
            kc: 100,
            ..good.params
        },
    ];
    for params in bad_params {
        let cfg = GemvConfig { params, ..good };
        let e = gemv_f32(&w, &x, None, &mut y, shape, false, &cfg).unwrap_err();
        assert!(matches!(e, KernelError::InvalidParams { .. }), "{e}");
    }
    let cfg = GemvConfig { threads: 0, ..good };
    let e = gemv_f32(&w, &x, None, &mut y, shape, false, &cfg).unwrap_err();
    assert!(matches!(e, KernelError::InvalidThreads { .. }), "{e}");
    let huge = GemvShape {
        n: usize::MAX,
        k: 2,
    };
    let e = gemv_f32(&w, &x, None, &mut y, huge, false, &good).unwrap_err();
    assert!(matches!(e, KernelError::InvalidShape { .. }), "{e}");
    assert_eq!(y, [0.0; 4]);
}

fn arb_params() -> impl Strategy<Value = GemvParams> {
    (
        0usize..10,
        0usize..6,
        prop::sample::select(vec![0usize, 64, 100, 1024, 8192, 8256]),
        prop::sample::select(vec![0usize, 64, 65, 128, 256]),
    )
        .prop_map(|(nr, unroll, prefetch, kc)| GemvParams {
            nr,
            unroll,
            prefetch,
            kc,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Random shapes, buffer lengths off by a little, random parameters and
    /// thread counts: the call succeeds exactly when everything is valid (and
    /// then matches the reference), otherwise it returns an error and leaves
    /// `y` untouched; it never panics.
    #[test]
    fn bad_inputs_are_errors_never_panics(
        n in 0usize..24,
        k in 0usize..80,
        dw in -2i64..=2,
        dx in -2i64..=2,
        dy in -2i64..=2,
        db in prop::option::of(-2i64..=2),
        params in arb_params(),
        threads in 0usize..4,
        f16w: bool,
        accumulate: bool,
        seed: u64,
    ) {
        // Lengths: mostly right, sometimes off.
        let off = |len: usize, d: i64| if d.abs() == 2 { len.saturating_add_signed(d as isize) } else { len };
        let (wl, xl, yl) = (off(n * k, dw), off(k, dx), off(n, dy));
        let bl = db.map(|d| off(n, d));
        let mut rng = Rng::new(seed);
        let w = rng.vec_f32(wl);
        let w16: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
        let x = rng.vec_f32(xl);
        let bias = bl.map(|l| rng.vec_f32(l));
        let y0 = rng.vec_f32(yl);
        let mut y = y0.clone();
        let shape = GemvShape { n, k };
        let cfg = GemvConfig { isa: None, params, threads };
        let r = if f16w {
            gemv_f16_f32(&w16, &x, bias.as_deref(), &mut y, shape, accumulate, &cfg)
        } else {
            gemv_f32(&w, &x, bias.as_deref(), &mut y, shape, accumulate, &cfg)
        };
        let valid = wl == n * k && xl == k && yl == n && bl.is_none_or(|l| l == n)
            && params.validate().is_ok() && threads >= 1;
        prop_assert_eq!(r.is_ok(), valid, "{:?}", r);
        if valid {
            let mut want = y0.clone();
            if f16w {
                scalar::gemv(&w16, &x, bias.as_deref(), &mut want, accumulate);
            } else {
                scalar::gemv(&w, &x, bias.as_deref(), &mut want, accumulate);
            }
            assert_close(&y, &want, tol(k), tol(k), "proptest");
        } else {
            prop_assert_eq!(y, y0);
        }
    }
}
