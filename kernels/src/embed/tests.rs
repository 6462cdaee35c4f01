//! Embedding tests: round-trip error per width, lookup vs dequantize_row,
//! the LM head of every variant vs scalar and vs an f64 GEMV on the
//! dequantized table, and bad input.
//!
//! Tolerance of the LM head: `|got − want| ≤ 1e-5 · (1 + Σ_d |W[v, d] · x[d]|)`
//! — f32 summation in a different order (and the factored zero point) over
//! at most a few hundred terms.

use super::*;
use crate::testing::Rng;

fn isas() -> Vec<Isa> {
    variants()
        .iter()
        .copied()
        .filter(|i| i.is_available())
        .collect()
}

fn table(rng: &mut Rng, vocab: usize, dim: usize) -> Vec<f32> {
    rng.vec_f32(vocab * dim)
}

#[test]
fn round_trip_error_decreases_with_bits() {
    let mut rng = Rng::new(11);
    let (vocab, dim) = (6, 256);
    let w = table(&mut rng, vocab, dim);
    let rms = |v: &[f32]| (v.iter().map(|x| x * x).sum::<f32>() / v.len() as f32).sqrt();
    for group in GROUPS {
        let mut prev = f32::INFINITY;
        for bits in 1..=7 {
            let e = PackedEmbedding::quantize(&w, vocab, dim, bits, group).unwrap();
            let mut deq = vec![0.0; vocab * dim];
            for r in 0..vocab {
                e.dequantize_row(r as u32, &mut deq[r * dim..(r + 1) * dim])
                    .unwrap();
            }
            for (i, (&d, &x)) in deq.iter().zip(&w).enumerate() {
                let s = e.scales[i / group];
                assert!(
                    (d - x).abs() <= 0.5 * s * 1.001 + 1e-6,
                    "b{bits} g{group} i{i}: {d} vs {x}"
                );
            }
            let err: Vec<f32> = deq.iter().zip(&w).map(|(a, b)| a - b).collect();
            let rel = rms(&err) / rms(&w);
            // Uniform data: RMS error ≈ step/√12 with step = range/(2^b − 1),
            // so rel ≈ 1/(2^b − 1); 1 bit is at most 1.2 (and about 0.5).
            assert!(
                rel <= 1.2 / ((1 << bits) - 1) as f32,
                "b{bits} g{group}: rel {rel}"
            );
            assert!(rel < prev, "b{bits} g{group}: {rel} !< {prev}");
            prev = rel;
        }
    }
}

#[test]
fn lookup_equals_dequantize_row() {
    let mut rng = Rng::new(12);
    let (vocab, dim) = (7, 192);
    let w = table(&mut rng, vocab, dim);
    for bits in 1..=7 {
        let e = PackedEmbedding::quantize(&w, vocab, dim, bits, 64).unwrap();
        let ids = [3u32, 0, 6, 3, 1];
        let mut out = vec![0.0; ids.len() * dim];
        e.lookup(&ids, &mut out).unwrap();
        for (t, &id) in ids.iter().enumerate() {
            let mut row = vec![0.0; dim];
            e.dequantize_row(id, &mut row).unwrap();
            assert_eq!(&out[t * dim..(t + 1) * dim], &row[..], "b{bits} id {id}");
        }
        let err = e
            .lookup(&[1, 7], &mut vec![0.0; 2 * dim])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("token id 7") && err.contains("vocab size 7"),
            "{err}"
        );
        assert!(e.lookup(&[1], &mut vec![0.0; dim + 1]).is_err());
        assert!(e.dequantize_row(9, &mut vec![0.0; dim]).is_err());
    }
}

#[test]
fn constant_group_is_exact() {
    let w = vec![0.25f32; 2 * 64];
    let e = PackedEmbedding::quantize(&w, 2, 64, 3, 32).unwrap();
    let mut out = vec![0.0; 64];
    e.dequantize_row(1, &mut out).unwrap();
    assert!(out.iter().all(|&v| v == 0.25));
}

#[test]
fn lm_head_every_variant_bits_groups_threads() {
    let mut rng = Rng::new(13);
    for group in GROUPS {
        let dim = 2 * group;
        for vocab in [1, 3, 7, 13] {
            let w = table(&mut rng, vocab, dim);
            let x = rng.vec_f32(dim);
            for bits in 1..=7 {
                let e = PackedEmbedding::quantize(&w, vocab, dim, bits, group).unwrap();
                // f64 GEMV over the dequantized table, and its magnitude bound.
                let mut want = vec![0.0f32; vocab];
                let mut mag = vec![0.0f32; vocab];
                let mut row = vec![0.0; dim];
                for v in 0..vocab {
                    e.dequantize_row(v as u32, &mut row).unwrap();
                    want[v] = row
                        .iter()
                        .zip(&x)
                        .map(|(&a, &b)| a as f64 * b as f64)
                        .sum::<f64>() as f32;
                    mag[v] = row.iter().zip(&x).map(|(a, b)| (a * b).abs()).sum();
                }
                let check = |got: &[f32], what: &str| {
                    for v in 0..vocab {
                        let tol = 1e-5 * (1.0 + mag[v]);
                        assert!(
                            (got[v] - want[v]).abs() <= tol,
                            "{what} b{bits} g{group} vocab {vocab} row {v}: {} vs {}",
                            got[v],
                            want[v]
                        );
                    }
                };
                for isa in isas() {
                    for rpb in ROWS_PER_BLOCK {
                        for t in [1, 2, 3] {
                            // Every distance over the sweep (a prefetch past
                            // the table must change nothing).
                            let pf = PREFETCHES[(rpb + t) % PREFETCHES.len()];
                            let mut y = vec![f32::NAN; vocab];
                            LmHead::new()
                                .isa(isa)
                                .params(LmHeadParams {
                                    rows_per_block: rpb,
                                    pf,
                                })
                                .threads(t)
                                .run(&e, &x, &mut y)
                                .unwrap();
                            check(&y, &format!("{isa} rpb{rpb} pf{pf} t{t}"));
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn larger_lm_head() {
    let mut rng = Rng::new(14);
    let (vocab, dim) = (101, 640);
    let w = table(&mut rng, vocab, dim);
    let x = rng.vec_f32(dim);
    for bits in [2, 4, 5] {
        let e = PackedEmbedding::quantize(&w, vocab, dim, bits, 128).unwrap();
        let mut want = vec![0.0; vocab];
        LmHead::new()
            .isa(Isa::Scalar)
            .run(&e, &x, &mut want)
            .unwrap();
        for isa in isas() {
            let mut y = vec![0.0; vocab];
            LmHead::new()
                .isa(isa)
                .threads(2)
                .run(&e, &x, &mut y)
                .unwrap();
            crate::testing::assert_close(&y, &want, 1e-3, 1e-4, &format!("{isa} b{bits}"));
        }
    }
}

#[test]
fn bad_input_is_an_error() {
    let w = vec![0.5f32; 3 * 96];
    assert!(matches!(
        PackedEmbedding::quantize(&w, 3, 96, 4, 64),
        Err(KernelError::InvalidShape { .. })
    ));
    assert!(PackedEmbedding::quantize(&w, 3, 96, 0, 32).is_err());
    assert!(PackedEmbedding::quantize(&w, 3, 96, 8, 32).is_err());
    assert!(PackedEmbedding::quantize(&w, 3, 96, 4, 16).is_err());
    assert!(PackedEmbedding::quantize(&w[1..], 3, 96, 4, 32).is_err());
    let e = PackedEmbedding::quantize(&w, 3, 96, 4, 32).unwrap();
    let h = LmHead::new();
    assert!(h.run(&e, &[0.0; 95], &mut [0.0; 3]).is_err());
    assert!(h.run(&e, &[0.0; 96], &mut [0.0; 4]).is_err());
    assert!(h.threads(0).run(&e, &[0.0; 96], &mut [0.0; 3]).is_err());
    assert!(
        h.params(LmHeadParams {
            rows_per_block: 3,
            pf: 0
        })
        .run(&e, &[0.0; 96], &mut [0.0; 3])
        .is_err()
    );
    assert!(
        h.params(LmHeadParams {
            rows_per_block: 4,
            pf: 100
        })
        .run(&e, &[0.0; 96], &mut [0.0; 3])
        .is_err()
    );
    let mut broken = e.clone();
    broken.data.pop();
    assert!(h.run(&broken, &[0.0; 96], &mut [0.0; 3]).is_err());
    for isa in Isa::ALL {
        if !isa.is_available() && variants().contains(&isa) {
            assert!(matches!(
                h.isa(isa).run(&e, &[0.0; 96], &mut [0.0; 3]),
                Err(KernelError::IsaUnavailable { .. })
            ));
        }
    }
    let shape = LmHeadShape {
        vocab: 151_936,
        dim: 896,
        bits: 4,
    };
    let cpu = CpuCaps::default();
    let (d, c) = (
        LmHeadParams::default_for(&shape, &cpu),
        LmHeadParams::candidates(&shape, &cpu),
    );
    assert!(c.contains(&d));
    let best = Isa::best_of(variants());
    let timed: Vec<usize> = c.iter().map(|p| p.pf).collect();
    crate::testing::assert_prefetch_contract(best, d.pf, &timed, &PREFETCHES);
    #[cfg(target_arch = "aarch64")]
    assert_eq!(best, Isa::Neon);
    // Tables from before `pf` existed read as no prefetch.
    let old: LmHeadParams = serde_json::from_str(r#"{"rows_per_block":2}"#).unwrap();
    assert_eq!(old.pf, 0);
}
