//! Quantized GEMM (W·A8) for every format in `qgemm::FORMATS` (Q4_0, Q4_1,
//! Q5_0, Q5_1, Q8_0, Q4_K, Q6_K, MXFP4):
//!
//! - the repack keeps every value at exactly its packed size (bits per
//!   value: Q4_0 4.5, Q4_1 5, Q5_0 5.5, Q5_1 6, Q8_0 8.5, Q6_K 6.5625 and
//!   MXFP4 4.25, as GGUF; Q4_K 4.625): packed rows dequantize bit-identically
//!   to the GGUF rows (quantizer output, arbitrary bytes, extreme scales
//!   and codes), and `unpack` gives the GGUF bytes back for every format;
//! - every variant the CPU runs (every interleave it reads, every `mr`,
//!   prefetch distance and k-unroll it reads, 1 or 3 threads) is
//!   **bit-identical** to `scalar::definition` over
//!   m ∈ {1, 2, 3, 5, 17, 64}, n not a multiple of the interleave, k = 1, 3
//!   and 9 blocks (K-quants: 1 and 3 super-blocks). The definition is the
//!   scalar W·A8 GEMV on each row, except for Q4_K and Q6_K, whose GEMV
//!   quantizes activations differently (Q8_K): there it is the scalar GEMM;
//! - the scalar GEMM is within `1e-5 · Σ|w·x| + 1e-6` of an f64 dot product
//!   of the dequantized weights and Q8_1 activations (plus, for the kinds
//!   with a min, `Σ_blocks |m|·|s − d·Σq|`: Q8_1 stores the block sum `s`
//!   in f16, as ggml's Q4_1/Q5_1 dot products use it);
//! - each row agrees with the best (SIMD) per-row GEMV within the W·A8
//!   bound, plus for the K-quants the activation difference
//!   `Σ|w|·|x_Q8_1 − x_Q8_K|`.

use tiletune_kernels::qgemm::{
    self, AMX_MR, ActBlock, FORMATS, MRS, PREFETCHES, QGemm, QGemmParams, heights, interleaves,
    panels, quantize_activations, repack, repack_on, repack_stacked_on, scalar, unrolls,
};
use tiletune_kernels::qgemv::{self, QGemv, QMode};
use tiletune_kernels::quant::kquants::get_scale_min_k4;
use tiletune_kernels::quant::{
    self, BlockQ4_1, BlockQ4K, BlockQ5_1, BlockQ5K, F16Le, KSubBlock, QuantFormat, cast_blocks,
};
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

/// Packed bits per value × 16 (per padded row): scales, codes,
/// super-scales and quants.
fn bits16(f: QuantFormat) -> usize {
    match f {
        QuantFormat::Q4_0 => 72,
        QuantFormat::Q4_1 => 80,
        QuantFormat::Q5_0 => 88,
        QuantFormat::Q5_1 => 96,
        QuantFormat::Q8_0 => 136,
        // E8M0 byte + nibbles: 4.25, GGUF's size.
        QuantFormat::Mxfp4 => 68,
        // Two 6-bit codes as bytes per 32 values, two f16 per 256: 4.625
        // (GGUF 4.5).
        QuantFormat::Q4K => 74,
        // Q4_K's codes and super-scales plus the fifth-bit plane: 5.625
        // (GGUF 5.5).
        QuantFormat::Q5K => 90,
        // Nibbles + two bit planes, two i8 scales per 32, one f16 per 256:
        // 6.5625, GGUF's size.
        QuantFormat::Q6K => 105,
        _ => unreachable!("{f} has no GEMM"),
    }
}

fn kquant(f: QuantFormat) -> bool {
    matches!(f, QuantFormat::Q4K | QuantFormat::Q5K | QuantFormat::Q6K)
}

fn definition(f: QuantFormat, c: &Case) -> Vec<f32> {
    let mut out = vec![f32::NAN; c.m * c.n];
    scalar::definition(f, &c.w, &c.a, c.m, c.n, c.k, &mut out).unwrap();
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

/// Whether `q`'s configuration is refused for its parameters.
fn refused(q: &QGemm) -> bool {
    matches!(q.check_config(), Err(KernelError::InvalidParams { .. }))
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Every packed row dequantizes to exactly the GGUF row's values, and
/// workers splitting the groups pack the same bytes as one thread.
fn assert_rows_exact(f: QuantFormat, w: &[u8], n: usize, k: usize, nr: usize) {
    let p = repack(f, w, n, k, nr).unwrap();
    for threads in [2, 3, 4] {
        let q = repack_on(f, w, n, k, nr, threads).unwrap();
        assert!(q == p, "{f} nr={nr} n={n} k={k} threads={threads}");
    }
    // The same rows stacked from parts (cut inside and on a group, with an
    // empty part) pack the same bytes as the joined matrix.
    let rb = f.row_bytes(k);
    for cuts in [
        vec![0],
        vec![1.min(n)],
        vec![nr.min(n), n],
        vec![n / 3, n / 2],
    ] {
        let mut parts = Vec::new();
        let mut at = 0;
        for c in cuts.into_iter().chain([n]) {
            parts.push(&w[at * rb..c * rb]);
            at = c;
        }
        for threads in [1, 3] {
            let q = repack_stacked_on(f, &parts, n, k, nr, threads).unwrap();
            assert!(q == p, "{f} nr={nr} n={n} k={k} parts {}", parts.len());
        }
    }
    let mut want = vec![0.0f32; n * k];
    quant::dequantize(f, w, &mut want).unwrap();
    let mut row = vec![f32::NAN; k];
    for (r, w) in want.chunks_exact(k.max(1)).take(n).enumerate() {
        p.dequantize_row(r, &mut row).unwrap();
        assert!(same_bits(&row, w), "{f} nr={nr} n={n} k={k} row {r}");
    }
    assert!(p.dequantize_row(n, &mut row).is_err());
}

/// Every variant this CPU runs that reads interleave `nr`, at every `mr`
/// and k-unroll it reads (and every height of its panel tile), gives
/// `want` bit for bit on `c`.
fn assert_every_variant(f: QuantFormat, nr: usize, c: &Case, want: &[f32]) {
    for isa in available(f) {
        if !interleaves(isa).contains(&nr) {
            continue;
        }
        for (i, mr) in MRS.into_iter().enumerate() {
            // Every prefetch distance across the mr sweep: prefetching
            // must not change a bit.
            let pf = PREFETCHES[i % PREFETCHES.len()];
            for &ku in unrolls(isa, mr) {
                let q = QGemm::new(f).isa(isa).params(QGemmParams {
                    mr,
                    nr,
                    pf,
                    ku,
                    panel: false,
                });
                assert!(
                    same_bits(&run(&q, c), want),
                    "{f} {isa} nr={nr} mr={mr} pf={pf} ku={ku}"
                );
            }
        }
        if panels(isa, f) {
            for (i, &mr) in heights(isa, true).iter().enumerate() {
                let pf = PREFETCHES[i % PREFETCHES.len()];
                let q = QGemm::new(f).isa(isa).params(QGemmParams {
                    mr,
                    nr,
                    pf,
                    ku: 1,
                    panel: true,
                });
                assert!(
                    same_bits(&run(&q, c), want),
                    "{f} {isa} nr={nr} mr={mr} pf={pf} panel"
                );
            }
        }
    }
}

#[test]
fn repack_round_trips() {
    let mut rng = Rng::new(21);
    for f in FORMATS {
        let qb = f.block_size();
        for nr in qgemm::INTERLEAVES {
            for (n, blocks) in [
                (0, 1),
                (1, 1),
                (3, 3),
                (nr + 1, 2),
                (2 * nr - 1, 1),
                (5 * nr + 3, 2),
                (5, 0),
            ] {
                let k = blocks * qb;
                let c = case(&mut rng, f, 0, n, k);
                let p = repack(f, &c.w, n, k, nr).unwrap();
                assert_eq!((p.n(), p.k(), p.nr()), (n, k, nr));
                assert_eq!(p.groups(), n.div_ceil(nr));
                assert_eq!(
                    128 * p.bytes(),
                    bits16(f) * p.groups() * nr * k,
                    "{f} nr={nr} n={n} k={k}"
                );
                assert_eq!(p.unpack(), c.w, "{f} nr={nr} n={n} k={k}");
                assert_rows_exact(f, &c.w, n, k, nr);
            }
        }
    }
}

/// Q5_0 packs at 5.5 bits per value and Q5_1 at 6 (nibbles, a fifth-bit
/// plane, f16 scale and min), MXFP4 at 4.25 (its codes as nibbles, its
/// E8M0 byte), not the 8.5 and 9 of int8 values; the packed form still gives the GGUF bytes and
/// values back exactly, also for the value extremes (Q5: 0 and 31, MXFP4:
/// ±12 and −0) in every position; and every variant stays bit-identical to
/// the definition on them with activations at ±127 (the largest i16
/// partial sums the non-VNNI x86 tiles form).
#[test]
fn dense_packs_are_exact_at_their_bits_per_value() {
    let mut rng = Rng::new(29);
    for f in [QuantFormat::Q5_0, QuantFormat::Q5_1, QuantFormat::Mxfp4] {
        for nr in qgemm::INTERLEAVES {
            let (n, k) = (3 * nr, 256);
            let c = case(&mut rng, f, 0, n, k);
            let p = repack(f, &c.w, n, k, nr).unwrap();
            assert_eq!(128 * p.bytes(), bits16(f) * n * k, "{f} nr={nr}");
            assert_eq!(p.bytes(), c.w.len(), "{f} nr={nr}");
            assert_eq!(p.unpack(), c.w, "{f} nr={nr}");
            assert_rows_exact(f, &c.w, n, k, nr);
            // Q5: blocks whose values are all 31, all 0, or alternate, so
            // each fifth bit and each nibble is checked set and clear.
            // MXFP4: all 12 (code 7), all −12 (15), alternating, all −0.
            let mut w = c.w.clone();
            let bb = f.block_bytes();
            for (i, blk) in w.chunks_exact_mut(bb).enumerate() {
                let (qs, qh) = match i % 4 {
                    0 => (0xFF, 0xFFFF_FFFFu32),
                    1 => (0x00, 0),
                    2 => (0x0F, 0x5555_5555),
                    _ => (0xF0, 0xAAAA_AAAA),
                };
                match f {
                    QuantFormat::Mxfp4 => blk[1..].fill([0x77, 0xFF, 0x7F, 0x88][i % 4]),
                    _ => {
                        let at = if f == QuantFormat::Q5_0 { 2 } else { 4 };
                        blk[at..at + 4].copy_from_slice(&qh.to_le_bytes());
                        blk[at + 4..].fill(qs);
                    }
                }
            }
            let p = repack(f, &w, n, k, nr).unwrap();
            assert_eq!(p.unpack(), w, "{f} nr={nr}");
            assert_rows_exact(f, &w, n, k, nr);
            let m = 3;
            let a: Vec<f32> = (0..m * k)
                .map(|j| if j < 2 * k { 1.0 } else { -1.0 })
                .collect();
            let c = Case { w, a, m, n, k };
            let want = definition(f, &c);
            assert_every_variant(f, nr, &c, &want);
        }
    }
}

/// The five formats whose scales are GGUF f16 values pack them as f16:
/// exactly GGUF's size (Q4_0 4.5 bits per value, Q4_1 5, Q5_0 5.5, Q5_1 6,
/// Q8_0 8.5); and with extreme scales and mins (±f16 max, the smallest and
/// largest subnormals, the smallest normal, ±0, negative) the packed copy
/// still gives the GGUF bytes and values back and every variant (every
/// interleave it reads, every `mr`) stays bit-identical to the definition.
/// Q4_0 at the panel tile's i16 bound: values all −8 (nibble 0) against
/// activations all +127 (biased to 255), 8 chunks · 2 · 255 · 8 = 32640,
/// and all +7, alternating, and activations all −127 (biased to 1); every
/// variant, with and without a panel, stays bit-identical to the
/// definition.
#[test]
fn q4_0_extremes_fit_the_panel_sums() {
    let mut rng = Rng::new(33);
    let f = QuantFormat::Q4_0;
    for nr in qgemm::INTERLEAVES {
        let (m, n, k) = (3, 3 * nr + 5, 4 * 32);
        let mut c = case(&mut rng, f, m, n, k);
        for (i, blk) in c.w.chunks_exact_mut(f.block_bytes()).enumerate() {
            blk[2..].fill([0x00, 0xFF, 0x0F, 0xF0][i % 4]);
        }
        c.a = (0..m * k)
            .map(|j| [1.0, -1.0, 0.5][j / k] * if j % 64 < 32 { 1.0 } else { 3.0 })
            .collect();
        let want = definition(f, &c);
        assert_every_variant(f, nr, &c, &want);
    }
}

/// Q8_0 at the biased sums' bound: values all −128 (a byte no quantizer
/// writes but a file may hold; biased to 0), all +127 (biased to 255) and
/// alternating ±127, against activation rows all +127, all −127 and
/// halves of opposite sign. The VNNI tile sums `(w + 128)·x` from
/// `−128·Σx` (at most 32 · 255 · 127 in a block) and the sign trick takes
/// `|−128|` as 128; every variant stays bit-identical to the definition.
#[test]
fn q8_0_extremes_fit_the_biased_sums() {
    let mut rng = Rng::new(36);
    let f = QuantFormat::Q8_0;
    for nr in qgemm::INTERLEAVES {
        let (m, n, k) = (3, 2 * nr + 3, 3 * 32);
        let mut w = case(&mut rng, f, 0, n, k).w;
        for (i, blk) in w.chunks_exact_mut(f.block_bytes()).enumerate() {
            for (j, q) in blk[2..].iter_mut().enumerate() {
                *q = match i % 3 {
                    0 => 0x80,
                    1 => 0x7F,
                    _ => [0x7F, 0x81][j % 2],
                };
            }
        }
        let a: Vec<f32> = (0..m * k)
            .map(|j| match j / k {
                0 => 1.0,
                1 => -1.0,
                _ if j % 32 < 16 => 1.0,
                _ => -1.0,
            })
            .collect();
        assert_exact_everywhere(f, w, a, m, n, nr);
    }
}

#[test]
fn f16_scales_pack_at_gguf_size_and_stay_exact_at_their_extremes() {
    const SCALES: [u16; 9] = [
        0x7BFF, 0xFBFF, 0x0001, 0x03FF, 0x0400, 0x0000, 0x8000, 0xBE00, 0x3555,
    ];
    let mut rng = Rng::new(31);
    for f in [
        QuantFormat::Q4_0,
        QuantFormat::Q4_1,
        QuantFormat::Q5_0,
        QuantFormat::Q5_1,
        QuantFormat::Q8_0,
    ] {
        // Byte offsets of the f16 scale (and min) in each block.
        let halves: &[usize] = match f {
            QuantFormat::Q4_1 | QuantFormat::Q5_1 => &[0, 2],
            _ => &[0],
        };
        for nr in qgemm::INTERLEAVES {
            let (n, k) = (3 * nr, 256);
            let c = case(&mut rng, f, 0, n, k);
            let p = repack(f, &c.w, n, k, nr).unwrap();
            assert_eq!(128 * p.bytes(), bits16(f) * n * k, "{f} nr={nr}");
            assert_eq!(p.bytes(), c.w.len(), "{f} nr={nr}");

            // A padded group, 9 blocks, 9 rows (tiles of 8 and 1).
            let (m, n, k) = (9, 2 * nr + 1, 9 * 32);
            let mut c = case(&mut rng, f, m, n, k);
            for (i, blk) in c.w.chunks_exact_mut(f.block_bytes()).enumerate() {
                for (j, &o) in halves.iter().enumerate() {
                    let h = SCALES[(i + 4 * j) % SCALES.len()];
                    blk[o..o + 2].copy_from_slice(&h.to_le_bytes());
                }
            }
            let p = repack(f, &c.w, n, k, nr).unwrap();
            assert_eq!(p.unpack(), c.w, "{f} nr={nr}");
            assert_rows_exact(f, &c.w, n, k, nr);
            let want = definition(f, &c);
            assert!(want.iter().all(|v| v.is_finite()), "{f}");
            assert_every_variant(f, nr, &c, &want);
        }
    }
}

/// Random block bytes (every scale bit pattern, Q6_K's negative scales,
/// MXFP4's −0 code and extreme exponents) with finite f16 scales.
#[test]
fn arbitrary_bytes_dequantize_exactly() {
    let mut rng = Rng::new(27);
    for f in FORMATS {
        // Byte offsets of the f16 fields in each block.
        let halves: &[usize] = match f {
            QuantFormat::Q4_0 | QuantFormat::Q5_0 | QuantFormat::Q8_0 => &[0],
            QuantFormat::Q4_1 | QuantFormat::Q5_1 | QuantFormat::Q4K | QuantFormat::Q5K => &[0, 2],
            QuantFormat::Q6K => &[208],
            _ => &[],
        };
        let (n, k) = (5, 2 * f.block_size());
        let mut w: Vec<u8> = (0..n * f.row_bytes(k))
            .map(|_| rng.next_u64() as u8)
            .collect();
        for blk in w.chunks_exact_mut(f.block_bytes()) {
            for &o in halves {
                let h = F16Le::from_f32(rng.uniform(-2.0, 2.0));
                blk[o..o + 2].copy_from_slice(&h.0);
            }
        }
        for nr in qgemm::INTERLEAVES {
            assert_rows_exact(f, &w, n, k, nr);
            let p = repack(f, &w, n, k, nr).unwrap();
            // MXFP4: 320 random codes include 8 (−0) almost surely; the
            // packed codes keep it apart from +0.
            if f == QuantFormat::Mxfp4 {
                assert!(
                    w.chunks_exact(17)
                        .any(|b| b[1..].iter().any(|&q| q & 0x0F == 8 || q >> 4 == 8))
                );
            }
            assert_eq!(p.unpack(), w, "{f}");
        }
    }
}

/// Packs `w` (`n` rows of `k`), checks `unpack` and `dequantize_row`
/// against the GGUF bytes and `quant::dequantize`, then runs every variant
/// reading `nr` at every `mr` against the definition on activations `a`
/// (`m` rows); the definition must be finite.
fn assert_exact_everywhere(f: QuantFormat, w: Vec<u8>, a: Vec<f32>, m: usize, n: usize, nr: usize) {
    let k = a.len() / m;
    let p = repack(f, &w, n, k, nr).unwrap();
    assert_eq!(p.unpack(), w, "{f} nr={nr}");
    assert_rows_exact(f, &w, n, k, nr);
    let c = Case { w, a, m, n, k };
    let want = definition(f, &c);
    assert!(want.iter().all(|v| v.is_finite()), "{f} nr={nr}");
    assert_every_variant(f, nr, &c, &want);
}

/// MXFP4's E8M0 codes at their extremes: 0 and 1 (subnormal f32 scales
/// 2⁻¹²⁸, 2⁻¹²⁷), 2 (the smallest normal), 127 (1/2), 254 and 255 (2¹²⁶,
/// 2¹²⁷), every code in every row and block position: the bytes come back,
/// rows dequantize as `quant::dequantize` does (±inf at 255 included), and
/// every variant decodes the codes in registers bit-identically to the
/// definition. The activations' scale is 2⁻¹⁸, so every product of scales
/// is a finite nonzero f32 (2⁻¹⁴⁶ .. 2¹⁰⁹) and no sum overflows.
#[test]
fn mxfp4_e8m0_extremes_stay_exact() {
    const CODES: [u8; 6] = [0, 1, 2, 127, 254, 255];
    let f = QuantFormat::Mxfp4;
    let mut rng = Rng::new(33);
    for nr in qgemm::INTERLEAVES {
        // A padded group, 9 blocks, 9 rows (tiles of 8 and 1).
        let (m, n, k) = (9, 2 * nr + 1, 9 * 32);
        let mut w = case(&mut rng, f, 0, n, k).w;
        for (i, blk) in w.chunks_exact_mut(f.block_bytes()).enumerate() {
            blk[0] = CODES[(i + i / 9) % CODES.len()];
        }
        let amax = 127.0 * 2f32.powi(-18);
        let a: Vec<f32> = (0..m * k)
            .map(|j| match j % 32 {
                0 => amax,
                1 => -amax,
                _ => amax * rng.uniform(-1.0, 1.0),
            })
            .collect();
        assert_exact_everywhere(f, w, a, m, n, nr);
    }
}

/// Q6_K packs its 6-bit values at GGUF's 6.5625 bits per value (nibbles
/// plus two bit planes); blocks of all-63 and all-0 stored values (q = 31,
/// −32) with activations at ±127 give the largest products the non-VNNI
/// x86 tiles form (a chunk of one half: 4 · 63 · 127 = 32004 fits i16, two
/// chunks would not), so a tile that summed more than one chunk in i16
/// fails here; every variant stays bit-identical to the definition.
#[test]
fn q6_k_six_bit_extremes_fit_the_partial_sums() {
    let f = QuantFormat::Q6K;
    let mut rng = Rng::new(35);
    for nr in qgemm::INTERLEAVES {
        let (m, n, k) = (4, 2 * nr + 1, 512);
        let mut w = case(&mut rng, f, 0, n, k).w;
        for (i, blk) in w.chunks_exact_mut(f.block_bytes()).enumerate() {
            // ql, qh: every value 63, 0, or low half 63 and high half 0.
            match i % 3 {
                0 => blk[..192].fill(0xFF),
                1 => blk[..192].fill(0x00),
                _ => {
                    blk[..128].fill(0x0F);
                    blk[128..192].fill(0x33);
                }
            }
        }
        let p = repack(f, &w, n, k, nr).unwrap();
        assert_eq!(128 * p.bytes(), bits16(f) * p.groups() * nr * k, "nr={nr}");
        // Rows: all +1, all −1 (q = ±127), halves of opposite sign, random.
        let a: Vec<f32> = (0..m * k)
            .map(|j| match j / k {
                0 => 1.0,
                1 => -1.0,
                2 if j % 32 < 16 => 1.0,
                2 => -1.0,
                _ => rng.uniform(-1.0, 1.0),
            })
            .collect();
        assert_exact_everywhere(f, w, a, m, n, nr);
    }
}

/// The K-quants keep GGUF's super-scales (f16) and sub-block codes (Q4_K's
/// 6-bit scales and mins, Q6_K's i8 scales) and multiply them in registers:
/// with the codes at their extremes (Q4_K 0 and 63, Q6_K −128 and 127) and
/// `d`, `dmin` at ±f16 max, the smallest and largest subnormals and ±0, the
/// bytes come back, rows dequantize exactly, and every variant stays
/// bit-identical to the definition.
#[test]
fn kquant_codes_and_super_scales_stay_exact_at_their_extremes() {
    const HALVES: [u16; 7] = [0x7BFF, 0xFBFF, 0x0001, 0x03FF, 0x8001, 0x0000, 0x8000];
    let mut rng = Rng::new(34);
    for f in [QuantFormat::Q4K, QuantFormat::Q5K, QuantFormat::Q6K] {
        for nr in qgemm::INTERLEAVES {
            let (m, n, k) = (9, 2 * nr + 1, 2 * 256);
            let mut w = case(&mut rng, f, 0, n, k).w;
            for (i, blk) in w.chunks_exact_mut(f.block_bytes()).enumerate() {
                let (h0, h1) = (HALVES[i % 7], HALVES[(i / 7 + 3 * i) % 7]);
                // Codes: all at the top, all at the bottom, mixed, random.
                if f != QuantFormat::Q6K {
                    let fill = [0xFF, 0x00, 0x3F, 0xC0][i % 4];
                    blk[0..2].copy_from_slice(&h0.to_le_bytes());
                    blk[2..4].copy_from_slice(&h1.to_le_bytes());
                    if i % 5 != 4 {
                        blk[4..16].fill(fill);
                    }
                    // Quants (Q5_K: and fifth bits) all set, all 0, or random.
                    match i % 3 {
                        0 => blk[16..].fill(0xFF),
                        1 => blk[16..].fill(0x00),
                        _ => {}
                    }
                } else {
                    // Values all 31, all −32, or random.
                    match i % 3 {
                        0 => blk[..192].fill(0xFF),
                        1 => blk[..192].fill(0x00),
                        _ => {}
                    }
                    // scales at 192..208: 127 / −128 / alternating.
                    let sc = &mut blk[192..208];
                    match i % 4 {
                        0 => sc.fill(0x7F),
                        1 => sc.fill(0x80),
                        2 => sc.iter_mut().enumerate().for_each(|(j, v)| {
                            *v = if j % 2 == 0 { 0x7F } else { 0x80 };
                        }),
                        _ => {}
                    }
                    blk[208..210].copy_from_slice(&h0.to_le_bytes());
                }
            }
            // Q4_K codes 63 with dmin = ±f16 max: mins near 4·10⁶, values up
            // to 6·10⁷; activations of magnitude ~1 keep the sums finite.
            let a = rng.vec_f32(m * k);
            assert_exact_everywhere(f, w, a, m, n, nr);
        }
    }
}

#[test]
fn repack_rejects_bad_input() {
    let w = vec![0u8; 18 * 2];
    assert!(matches!(
        repack(QuantFormat::Q8K, &w, 1, 256, 8),
        Err(KernelError::InvalidShape { .. })
    ));
    assert!(matches!(
        repack(QuantFormat::Q4_0, &w, 2, 32, 6),
        Err(KernelError::InvalidParams { .. })
    ));
    assert!(repack(QuantFormat::Q4_0, &w, 2, 33, 8).is_err());
    assert!(repack(QuantFormat::Q4K, &w, 1, 32, 8).is_err());
    assert!(matches!(
        repack(QuantFormat::Q4_0, &w, 3, 32, 8),
        Err(KernelError::ShapeMismatch { .. })
    ));
    // Stacked parts: each of whole rows, all of them the matrix's.
    let (a, b) = w.split_at(9);
    assert!(matches!(
        repack_stacked_on(QuantFormat::Q4_0, &[a, b], 2, 32, 8, 1),
        Err(KernelError::InvalidShape { .. })
    ));
    let (a, b) = w.split_at(18);
    assert!(repack_stacked_on(QuantFormat::Q4_0, &[a, b], 2, 32, 8, 1).is_ok());
    assert!(matches!(
        repack_stacked_on(QuantFormat::Q4_0, &[a, b, a], 2, 32, 8, 1),
        Err(KernelError::ShapeMismatch { .. })
    ));
}

/// Every m with each variant's default mr, then every mr at m = 17.
#[test]
fn every_variant_is_bit_identical_to_the_definition() {
    let mut rng = Rng::new(22);
    let mut ran = 0;
    for f in FORMATS {
        let blocks: &[usize] = if kquant(f) { &[1, 3] } else { &[1, 3, 9] };
        for isa in available(f) {
            for &nr in interleaves(isa) {
                let mut shapes: Vec<(usize, usize)> = Vec::new();
                for m in [1, 2, 3, 5, 17, 64] {
                    shapes.push((m, 4));
                }
                // The panel tile's own heights too (AMX: 16, over one
                // tile with a tail of 1, and two whole ones).
                for &mr in heights(isa, panels(isa, f)) {
                    shapes.push((17, mr));
                }
                if heights(isa, panels(isa, f)).contains(&AMX_MR) {
                    shapes.push((32, AMX_MR));
                }
                for (j, &(m, mr)) in shapes.iter().enumerate() {
                    let n = [nr - 1, 2 * nr + 3, nr, 1][j % 4];
                    let k = f.block_size() * blocks[j % blocks.len()];
                    let c = case(&mut rng, f, m, n, k);
                    let want = definition(f, &c);
                    // Where the variant reads both k-unrolls, each over
                    // 1, 3 and 9 blocks (a lone block, pairs and an odd
                    // tail; K-quants 8 and 24).
                    let kus = unrolls(isa, mr);
                    let ku = kus[(j / 3) % kus.len()];
                    // Where the variant has a panel tile for the format,
                    // that too (the unit's second group missing at n =
                    // nr − 1 and 2nr + 3 for interleave 8).
                    let panel_too: &[bool] = if panels(isa, f) {
                        &[false, true]
                    } else {
                        &[false]
                    };
                    for &panel in panel_too {
                        if !heights(isa, panel).contains(&mr) {
                            continue;
                        }
                        let q = QGemm::new(f)
                            .isa(isa)
                            .params(QGemmParams {
                                mr,
                                nr,
                                pf: PREFETCHES[j % PREFETCHES.len()],
                                ku: if panel { 1 } else { ku },
                                panel,
                            })
                            .threads(1 + 2 * (j % 2));
                        let got = run(&q, &c);
                        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                            assert!(
                                g.to_bits() == w.to_bits(),
                                "{f} {isa} nr={nr} mr={mr} ku={ku} panel={panel} m={m} n={n} k={k} at ({}, {}): {g} vs {w}",
                                i / n,
                                i % n
                            );
                        }
                        ran += 1;
                    }
                }
            }
        }
    }
    assert!(ran >= 8 * 10 * 3, "only {ran} cases ran");
}

/// The mins `m_w` of each 32-value block of row-major GGUF weights (zero
/// for the kinds without one): `w = d·q + m_w`.
fn block_mins(f: QuantFormat, w: &[u8], n: usize, k: usize) -> Vec<f32> {
    match f {
        QuantFormat::Q4_1 => cast_blocks::<BlockQ4_1>(w)
            .unwrap()
            .iter()
            .map(|b| b.m.to_f32())
            .collect(),
        QuantFormat::Q5_1 => cast_blocks::<BlockQ5_1>(w)
            .unwrap()
            .iter()
            .map(|b| b.m.to_f32())
            .collect(),
        QuantFormat::Q4K => k_sub_mins(cast_blocks::<BlockQ4K>(w).unwrap()),
        QuantFormat::Q5K => k_sub_mins(cast_blocks::<BlockQ5K>(w).unwrap()),
        _ => vec![0.0; n * k / 32],
    }
}

fn k_sub_mins<B: KSubBlock>(blocks: &[B]) -> Vec<f32> {
    blocks
        .iter()
        .flat_map(|b| {
            (0..8).map(|j| -(b.dmin().to_f32() * get_scale_min_k4(j, b.scales()).1 as f32))
        })
        .collect()
}

/// The Q8_1 activations the GEMM sees, dequantized, and per block the
/// error of the stored sum: `|s − d·Σq|`.
fn gemm_activations(a: &[f32], m: usize, k: usize) -> (Vec<f32>, Vec<f64>) {
    let aq = quantize_activations(a, m, k).unwrap();
    let blocks = cast_blocks::<ActBlock>(&aq).unwrap();
    let mut xd = Vec::with_capacity(m * k);
    let mut s_err = Vec::with_capacity(blocks.len());
    for b in blocks {
        xd.extend(b.qs.iter().map(|&q| b.d() * q as f32));
        s_err.push((b.s() as f64 - b.d() as f64 * b.sum() as f64).abs());
    }
    (xd, s_err)
}

#[test]
fn scalar_gemm_is_within_the_f64_bound() {
    let mut rng = Rng::new(28);
    for f in FORMATS {
        for (m, n, blocks) in [(1, 9, 1), (3, 7, 3), (5, 17, 2)] {
            let k = f.block_size() * blocks;
            let c = case(&mut rng, f, m, n, k);
            let q = QGemm::new(f).isa(Isa::Scalar).params(QGemmParams {
                mr: 4,
                nr: 8,
                ..QGemmParams::default()
            });
            let got = run(&q, &c);
            let mut wd = vec![0.0f32; n * k];
            quant::dequantize(f, &c.w, &mut wd).unwrap();
            let mins = block_mins(f, &c.w, n, k);
            let (xd, s_err) = gemm_activations(&c.a, m, k);
            let nb = k / 32;
            for i in 0..m {
                for r in 0..n {
                    let (mut exact, mut mag) = (0.0f64, 0.0f64);
                    for j in 0..k {
                        let p = wd[r * k + j] as f64 * xd[i * k + j] as f64;
                        exact += p;
                        mag += p.abs();
                    }
                    let s_term: f64 = (0..nb)
                        .map(|b| (mins[r * nb + b] as f64).abs() * s_err[i * nb + b])
                        .sum();
                    let err = (got[i * n + r] as f64 - exact).abs();
                    assert!(
                        err <= 1e-5 * mag + 1e-6 + s_term,
                        "{f} m={m} n={n} k={k} at ({i}, {r}): {} vs {exact} (Σ|w·x| {mag}, s {s_term})",
                        got[i * n + r]
                    );
                }
            }
        }
    }
}

#[test]
fn rows_match_the_best_gemv_within_the_a8_bound() {
    let mut rng = Rng::new(23);
    for f in FORMATS {
        let (m, n) = (5, 19);
        let k = if kquant(f) { 512 } else { 96 };
        let c = case(&mut rng, f, m, n, k);
        let got = run(&QGemm::new(f).threads(2), &c);
        let mut wd = vec![0.0f32; n * k];
        quant::dequantize(f, &c.w, &mut wd).unwrap();
        let mins = block_mins(f, &c.w, n, k);
        let (xg, s_err) = gemm_activations(&c.a, m, k);
        let nb = k / 32;
        let g = QGemv::new(f, QMode::A8);
        for i in 0..m {
            let x = &c.a[i * k..(i + 1) * k];
            let xq = qgemv::quantize_activations(f, x).unwrap();
            let mut y = vec![0.0f32; n];
            g.run_prequantized(&c.w, &xq, k, &mut y).unwrap();
            let mut xd = vec![0.0f32; k];
            quant::dequantize(qgemv::activation_format(f), &xq, &mut xd).unwrap();
            for r in 0..n {
                let w = &wd[r * k..(r + 1) * k];
                let mag: f64 = w
                    .iter()
                    .zip(&xd)
                    .map(|(&a, &b)| (a as f64 * b as f64).abs())
                    .sum();
                let bound = if kquant(f) {
                    // Different activations: |Σw(x₁ − x₂)| ≤ Σ|w|·|x₁ − x₂|,
                    // plus the f16 block sums the GEMM's Q4_K mins use.
                    let act: f64 = (0..k)
                        .map(|j| (w[j] as f64 * (xg[i * k + j] as f64 - xd[j] as f64)).abs())
                        .sum();
                    let s_term: f64 = (0..nb)
                        .map(|b| (mins[r * nb + b] as f64).abs() * s_err[i * nb + b])
                        .sum();
                    1e-5 * mag + 1e-6 + act + s_term
                } else {
                    1e-5 * mag + 1e-6
                };
                let err = (got[i * n + r] as f64 - y[r] as f64).abs();
                assert!(
                    err <= bound,
                    "{f} {} row {i} col {r}: {} vs {} (bound {bound}, Σ|w·x| {mag})",
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
        let qb = f.block_size();
        for (m, n, k) in [(0, 8, qb), (3, 0, qb), (2, 5, 0)] {
            let c = case(&mut rng, f, m, n, k);
            let want = definition(f, &c);
            let got = run(&QGemm::new(f), &c);
            assert_eq!(got, want, "{f} m={m} n={n} k={k}");
            assert!(got.iter().all(|v| *v == 0.0));
        }
    }
}

#[test]
fn prequantized_activations_give_the_same_result() {
    let mut rng = Rng::new(25);
    for f in [QuantFormat::Q4_1, QuantFormat::Q6K] {
        let c = case(&mut rng, f, 6, 13, 256);
        let q = QGemm::new(f).threads(2);
        let p = q.pack(&c.w, c.n, c.k).unwrap();
        let aq = quantize_activations(&c.a, c.m, c.k).unwrap();
        let mut out = vec![0.0; c.m * c.n];
        q.run_prequantized(&p, &aq, c.m, &mut out).unwrap();
        assert_eq!(out, run(&q, &c));
        assert!(q.run_prequantized(&p, &aq[1..], c.m, &mut out).is_err());
    }
}

/// C in parts side by side is C cut by columns, bit for bit, on every
/// variant (register tile and panel), with part boundaries inside a tile
/// and on one, and at 1 and 3 threads; bad parts are refused.
#[test]
fn parts_of_c_are_its_columns() {
    let mut rng = Rng::new(27);
    let mut ran = 0;
    for f in [QuantFormat::Q4_0, QuantFormat::Q4_1, QuantFormat::Q6K] {
        let k = 2 * f.block_size();
        for isa in available(f) {
            for &nr in interleaves(isa) {
                for (j, widths) in [vec![5, 16, 11], vec![2 * nr, nr, 1], vec![nr + 3, 4 * nr]]
                    .into_iter()
                    .enumerate()
                {
                    let n: usize = widths.iter().sum();
                    let m = [1, 3, 17][j];
                    let c = case(&mut rng, f, m, n, k);
                    for panel in [false, true] {
                        if panel && !panels(isa, f) {
                            continue;
                        }
                        let q = QGemm::new(f)
                            .isa(isa)
                            .params(QGemmParams {
                                mr: 4,
                                nr,
                                pf: 8,
                                ku: 1,
                                panel,
                            })
                            .threads(1 + 2 * (j % 2));
                        let want = run(&q, &c);
                        let p = q.pack(&c.w, n, k).unwrap();
                        let aq = quantize_activations(&c.a, m, k).unwrap();
                        let mut bufs: Vec<Vec<f32>> =
                            widths.iter().map(|w| vec![f32::NAN; m * w]).collect();
                        let mut parts: Vec<&mut [f32]> =
                            bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
                        q.run_prequantized_parts(&p, &aq, m, &mut parts).unwrap();
                        let mut c0 = 0;
                        for (b, &w) in bufs.iter().zip(&widths) {
                            for i in 0..m {
                                assert!(
                                    same_bits(
                                        &b[i * w..(i + 1) * w],
                                        &want[i * n + c0..i * n + c0 + w]
                                    ),
                                    "{f} {isa} nr={nr} panel={panel} widths={widths:?} m={m} row {i}"
                                );
                            }
                            c0 += w;
                        }
                        ran += 1;
                    }
                }
            }
        }
    }
    assert!(ran >= 9, "only {ran} cases ran");
    let f = QuantFormat::Q8_0;
    let c = case(&mut rng, f, 2, 8, 32);
    let q = QGemm::new(f);
    let p = q.pack(&c.w, c.n, c.k).unwrap();
    let aq = quantize_activations(&c.a, c.m, c.k).unwrap();
    let (mut a, mut b) = (vec![0.0; 2 * 5], vec![0.0; 2 * 3]);
    assert!(
        q.run_prequantized_parts(&p, &aq, 2, &mut [&mut a, &mut b])
            .is_ok()
    );
    // Columns that do not add up, a part of no whole rows, too many or
    // no parts.
    let mut short = vec![0.0; 2 * 2];
    assert!(
        q.run_prequantized_parts(&p, &aq, 2, &mut [&mut a, &mut short])
            .is_err()
    );
    let mut odd = vec![0.0; 7];
    assert!(
        q.run_prequantized_parts(&p, &aq, 2, &mut [&mut a, &mut odd])
            .is_err()
    );
    let mut ones: Vec<Vec<f32>> = (0..8).map(|_| vec![0.0; 2]).collect();
    let mut many: Vec<&mut [f32]> = ones.iter_mut().map(|b| b.as_mut_slice()).collect();
    assert!(q.run_prequantized_parts(&p, &aq, 2, &mut many).is_err());
    assert!(q.run_prequantized_parts(&p, &aq, 2, &mut []).is_err());
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
    // A format without a GEMM (activation formats).
    assert!(matches!(
        QGemm::new(QuantFormat::Q8K).isa(Isa::Scalar).check_config(),
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
    // Weights packed for another interleave, or another format.
    let other = [4, 8, 16].into_iter().find(|&r| r != q.params.nr).unwrap();
    let p2 = repack(f, &c.w, c.n, c.k, other).unwrap();
    assert!(matches!(
        q.run(&p2, &c.a, c.m, &mut out, &mut s),
        Err(KernelError::InvalidParams { .. })
    ));
    let q5 = QGemm::new(QuantFormat::Q5_1).isa(q.isa).params(q.params);
    assert!(matches!(
        q5.run(&p, &c.a, c.m, &mut out, &mut s),
        Err(KernelError::InvalidParams { .. })
    ));
    // An interleave the variant does not read.
    if q.isa != Isa::Scalar {
        let bad = [4, 8, 16]
            .into_iter()
            .find(|r| !interleaves(q.isa).contains(r))
            .unwrap();
        let q2 = q.params(QGemmParams {
            mr: 4,
            nr: bad,
            ..QGemmParams::default()
        });
        assert!(refused(&q2));
    }
    // A panel tile the variant lacks for the format (of Q6_K's, only
    // AVX-512 VNNI's reads one), and a panel with a k-unroll.
    let isa6 = available(QuantFormat::Q6K)
        .into_iter()
        .rev()
        .find(|&isa| !panels(isa, QuantFormat::Q6K))
        .unwrap();
    let q3 = QGemm::new(QuantFormat::Q6K).isa(isa6).params(QGemmParams {
        panel: true,
        nr: interleaves(isa6)[0],
        ..q.params
    });
    assert!(!panels(isa6, QuantFormat::Q6K));
    assert!(refused(&q3));
    #[cfg(target_arch = "x86_64")]
    if Isa::Avx2.is_available() {
        let q4 = QGemm::new(QuantFormat::Q4_0)
            .isa(Isa::Avx2)
            .params(QGemmParams {
                ku: 2,
                panel: true,
                ..QGemmParams::default()
            });
        assert!(refused(&q4));
    }
    // The AMX panel tile's height is its alone: refused on every other
    // tile, on the CPU that runs it or not.
    for isa in available(QuantFormat::Q4_0) {
        let nr = interleaves(isa)[0];
        for panel in [false, true] {
            let q5 = QGemm::new(QuantFormat::Q4_0).isa(isa).params(QGemmParams {
                mr: AMX_MR,
                nr,
                pf: 16,
                ku: 1,
                panel,
            });
            let amx_panel = isa == Isa::Amx && panel;
            assert_eq!(q5.check_config().is_ok(), amx_panel, "{isa} panel={panel}");
            assert_eq!(refused(&q5), !amx_panel, "{isa} panel={panel}");
        }
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
