//! Fused Matmul+RoPE on every variant × packed/direct kernels × both layouts
//! × full and partial rotary, against plain matmul then plain RoPE.
//!
//! Tolerance as for GEMM (`1e-5·√k·(1 + |want|)`): the rotation adds a few
//! ulps (f32 cos/sin tables and arithmetic vs f64) to the GEMM's rounding.

use super::*;
use crate::gemm::{GEMM_ISAS, GemmParams, direct_kernels, microkernels};
use crate::testing::{Rng, assert_close};
use crate::{CpuCaps, Isa};

fn tol(k: usize) -> f32 {
    1e-5 * (k.max(1) as f32).sqrt()
}

#[allow(clippy::too_many_arguments)]
fn check(
    isa: Isa,
    params: GemmParams,
    (m, n_heads, k): (usize, usize, usize),
    rope: RopeSpec,
    per_row: bool,
    with_bias: bool,
    threads: usize,
    f16w: bool,
    seed: u64,
) {
    let n = n_heads * rope.head_dim;
    let mut rng = Rng::new(seed);
    let x = rng.vec_f32(m * k);
    let w = rng.vec_f32(n * k);
    let b = rng.vec_f32(n);
    let pos: Vec<usize> = (0..m).map(|_| rng.below(5000)).collect();
    let positions = if per_row {
        Positions::PerRow(&pos)
    } else {
        Positions::Offset(37)
    };
    let bias = with_bias.then_some(b.as_slice());
    let shape = GemmShape::new(m, n, k);
    let cfg = GemmConfig {
        isa: Some(isa),
        params,
        threads,
    };
    let mut want = rng.vec_f32(m * n);
    let mut got = rng.vec_f32(m * n);
    let what = format!(
        "{isa} {params:?} m={m} heads={n_heads} k={k} {rope:?} per_row={per_row} t={threads} f16={f16w}"
    );
    if f16w {
        let h: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
        scalar::matmul_rope_ref(&x, &h, bias, &mut want, m, n, k, &rope, positions);
        matmul_rope_f16w_f32(&x, &h, bias, &mut got, shape, &rope, positions, &cfg).unwrap();
    } else {
        scalar::matmul_rope_ref(&x, &w, bias, &mut want, m, n, k, &rope, positions);
        matmul_rope_f32(&x, &w, bias, &mut got, shape, &rope, positions, &cfg).unwrap();
    }
    assert_close(&got, &want, tol(k), tol(k), &what);
}

fn specs() -> Vec<RopeSpec> {
    let mut v = Vec::new();
    for layout in [RopeLayout::RotateHalf, RopeLayout::Interleaved] {
        for (head_dim, rotary_dim) in [(8, 8), (16, 8), (6, 4), (64, 64), (10, 0)] {
            v.push(RopeSpec {
                head_dim,
                rotary_dim,
                theta: 10_000.0,
                layout,
            });
        }
    }
    v
}

#[test]
fn fused_matches_matmul_then_rope() {
    let mut seed = 0;
    for isa in GEMM_ISAS.iter().copied().filter(|i| i.is_available()) {
        // The first packed and direct kernels with tiny blocks (several kc,
        // mc, nc steps), and the analytic default.
        let mut params = Vec::new();
        for (table, pack) in [(microkernels(isa), true), (direct_kernels(isa), false)] {
            if let Some(&(mr, nr)) = table.first() {
                params.push(GemmParams {
                    mr,
                    nr,
                    kc: 16,
                    mc: mr,
                    nc: nr,
                    pack,
                });
            }
        }
        params.push(GemmParams::default_for_isa(
            &GemmShape::new(5, 96, 40),
            &CpuCaps::default(),
            isa,
        ));
        for p in params {
            for rope in specs() {
                for (m, heads, k) in [(1, 1, 1), (5, 3, 19), (17, 2, 40)] {
                    seed += 1;
                    let threads = 1 + (seed as usize % 3);
                    check(
                        isa,
                        p,
                        (m, heads, k),
                        rope,
                        seed % 2 == 0,
                        seed % 3 != 0,
                        threads,
                        false,
                        seed,
                    );
                }
            }
        }
    }
}

#[test]
fn fused_f16_weights_and_qwen_like_heads() {
    let rope = RopeSpec {
        head_dim: 64,
        rotary_dim: 64,
        theta: 1_000_000.0,
        layout: RopeLayout::RotateHalf,
    };
    for isa in GEMM_ISAS.iter().copied().filter(|i| i.is_available()) {
        let shape = GemmShape::new(9, 4 * 64, 72);
        let p = GemmParams::default_for_isa(&shape, &CpuCaps::default(), isa);
        for threads in 1..=3 {
            check(
                isa,
                p,
                (9, 4, 72),
                rope,
                true,
                true,
                threads,
                true,
                threads as u64,
            );
        }
        check(isa, p, (0, 4, 72), rope, false, true, 2, false, 9);
    }
}

#[test]
fn rejects_bad_rope_shapes() {
    let shape = GemmShape::new(2, 16, 4);
    let cfg = GemmConfig::new(&shape, &CpuCaps::default(), 1);
    let (x, w) = (vec![0.0; 8], vec![0.0; 64]);
    let mut out = vec![0.0; 32];
    let good = RopeSpec {
        head_dim: 8,
        rotary_dim: 8,
        theta: 10_000.0,
        layout: RopeLayout::RotateHalf,
    };
    let run = |rope: RopeSpec, pos: Positions<'_>, out: &mut [f32]| {
        matmul_rope_f32(&x, &w, None, out, shape, &rope, pos, &cfg)
    };
    assert!(run(good, Positions::Offset(0), &mut out).is_ok());
    for bad in [
        RopeSpec {
            head_dim: 0,
            ..good
        },
        RopeSpec {
            head_dim: 6,
            ..good
        },
        RopeSpec {
            rotary_dim: 7,
            ..good
        },
        RopeSpec {
            rotary_dim: 10,
            ..good
        },
        RopeSpec { theta: 0.0, ..good },
        RopeSpec {
            theta: f32::NAN,
            ..good
        },
    ] {
        assert!(
            matches!(
                run(bad, Positions::Offset(0), &mut out),
                Err(KernelError::InvalidShape { .. })
            ),
            "{bad:?}"
        );
    }
    assert!(matches!(
        run(good, Positions::PerRow(&[1]), &mut out),
        Err(KernelError::ShapeMismatch {
            what: "positions",
            ..
        })
    ));
    assert!(matches!(
        run(good, Positions::Offset(0), &mut out[..31]),
        Err(KernelError::ShapeMismatch { what: "c", .. })
    ));
    let unavailable = Isa::ALL.into_iter().find(|i| !i.is_available()).unwrap();
    let forced = GemmConfig {
        isa: Some(unavailable),
        ..cfg
    };
    assert!(matches!(
        matmul_rope_f32(
            &x,
            &w,
            None,
            &mut out,
            shape,
            &good,
            Positions::Offset(0),
            &forced
        ),
        Err(KernelError::IsaUnavailable { .. })
    ));
}
