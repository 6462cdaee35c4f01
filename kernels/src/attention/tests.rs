//! Paged attention against the dense f64 oracle: random page tables (pages
//! out of order, the last one partial), GQA ratios 1/2/4, decode and
//! prefill with `pos0 > 0`, every KV dtype, every available variant,
//! threads 1/2/3 with and without the KV split, with and without the
//! probabilities, on fresh and on reused scratch buffers; plus the cache's
//! bookkeeping and the error paths.
//!
//! Tolerances: against the oracle run on the K/V the kernel actually sees
//! (f16-rounded, or Q8_0-dequantized, and for Q8_0 on the query it
//! quantizes to Q8_0 blocks as well), outputs agree within
//! `1e-5 + 1e-5·|want|` and probabilities within `1e-6 + 1e-5·p` (f32
//! accumulation over ≤ 128-wide dot products and ≤ 100 positions). Q8_0
//! outputs of the variants with an int8 dot product carry the rounding of
//! their value weights to Q8_0 blocks as well ([`dense_q8_value_bound`]), and
//! get that bound on top. Against the unquantized K/V, a Q8_0 cache stays
//! within `2e-2` absolute (the Q8_0 step is `amax/127` per 32 values).

use super::*;
use crate::quant::legacy;
use crate::testing::{Rng, assert_close, edge_sizes};

const ATOL: f32 = 1e-5;
const RTOL: f32 = 1e-5;
const P_ATOL: f32 = 1e-6;
const Q8_RAW_ATOL: f32 = 2e-2;

/// The query a Q8_0 page's scores see: each 32 values as llama.cpp's
/// `quantize_row_q8_0` rounds them (`d = max|x| / 127`, `round(x · 1/d)`),
/// the scale kept as f32.
fn query_as_scored(dtype: KvDtype, q: &[f32]) -> Vec<f32> {
    if dtype != KvDtype::Q8_0 {
        return q.to_vec();
    }
    let mut y = Vec::with_capacity(q.len());
    for b in q.chunks_exact(QK) {
        let d = b.iter().fold(0.0f32, |a, v| a.max(v.abs())) / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        y.extend(b.iter().map(|&v| d * (v * id).round()));
    }
    y
}

/// The values a `dtype` page stores for `x` (rows of `hd`), computed
/// independently of the cache.
fn rounded(dtype: KvDtype, x: &[f32], hd: usize) -> Vec<f32> {
    match dtype {
        KvDtype::F32 => x.to_vec(),
        KvDtype::F16 => x.iter().map(|&v| f16::from_f32(v).to_f32()).collect(),
        KvDtype::Q8_0 => {
            let mut y = vec![0.0; x.len()];
            for (xb, yb) in x.chunks_exact(QK).zip(y.chunks_exact_mut(QK)) {
                let b = legacy::quantize_q8_0(xb.try_into().unwrap());
                legacy::dequantize_q8_0(&b, yb.try_into().unwrap());
            }
            debug_assert!(hd.is_multiple_of(QK));
            y
        }
    }
}

fn params() -> Vec<AttnParams> {
    let mut v = Vec::new();
    for threads in 1..=3 {
        for kv_block in [0, 16, 40] {
            v.push(AttnParams { threads, kv_block });
        }
    }
    v
}

/// A cache whose layer 1 of `seq` holds `kv_len` tokens of the returned raw
/// K/V (`[kv_len, nkv, hd]`), appended in random batches interleaved with a
/// second sequence, from a shuffled free list.
struct Fixture {
    cache: PagedKvCache,
    seq: SeqId,
    k: Vec<f32>,
    v: Vec<f32>,
}

const LAYER: usize = 1;

fn fixture(
    rng: &mut Rng,
    dtype: KvDtype,
    nkv: usize,
    hd: usize,
    ps: usize,
    kv_len: usize,
) -> Fixture {
    let pages = 2 * (kv_len.div_ceil(ps) + 1) + 2;
    let mut cache = PagedKvCache::new(2, nkv, hd, ps, dtype, pages).unwrap();
    cache.shuffle_free(rng);
    let other = cache.alloc_sequence();
    let seq = cache.alloc_sequence();
    let tok = nkv * hd;
    let k = rng.vec_f32(kv_len * tok);
    let v = rng.vec_f32(kv_len * tok);
    let mut t = 0;
    while t < kv_len {
        let n = (1 + rng.below(5)).min(kv_len - t);
        let (ks, vs) = (&k[t * tok..(t + n) * tok], &v[t * tok..(t + n) * tok]);
        if n == 1 {
            cache.append(seq, LAYER, ks, vs).unwrap();
        } else {
            cache.append_batch(seq, LAYER, ks, vs).unwrap();
        }
        // Layer 0 gets other data, so a wrong layer offset shows.
        let junk = rng.vec_f32(n * tok);
        cache.append_batch(seq, 0, &junk, &junk).unwrap();
        if rng.below(3) == 0 {
            let o = rng.vec_f32(tok);
            cache.append(other, 0, &o, &o).unwrap();
        }
        t += n;
    }
    Fixture { cache, seq, k, v }
}

thread_local! {
    /// One scratch reused by every `check` of a test, across shapes.
    static SCRATCH: std::cell::RefCell<AttnScratch> = Default::default();
}

/// Runs every variant × params × probs on one query block and compares
/// with the oracle on the stored K/V (and, for Q8_0, loosely with the raw
/// one); the same calls on a reused [`AttnScratch`] give identical bits.
fn check(
    rng: &mut Rng,
    f: &Fixture,
    group: usize,
    q_rows: usize,
    pos0: usize,
    scale: Option<f32>,
    all_params: bool,
) {
    let c = &f.cache;
    let (nkv, hd, dtype) = (c.n_kv_heads(), c.head_dim(), c.dtype());
    let kv_len = c.layer_len(f.seq, LAYER).unwrap();
    let nq = nkv * group;
    let mut query = AttnQuery::new(nq, q_rows, pos0, hd);
    if let Some(s) = scale {
        query = query.with_scale(s);
    }
    let shape = AttnShape {
        n_q_heads: nq,
        n_kv_heads: nkv,
        head_dim: hd,
        q_rows,
        kv_len,
    };
    // Spread 2: peaked enough that the running max moves between pages.
    let q: Vec<f32> = (0..q_rows * nq * hd)
        .map(|_| rng.uniform(-2.0, 2.0))
        .collect();
    let (kd, vd) = (rounded(dtype, &f.k, hd), rounded(dtype, &f.v, hd));
    let (kg, vg) = c.gather(f.seq, LAYER).unwrap();
    assert_eq!(
        (&kg, &vg),
        (&kd, &vd),
        "{dtype:?}: gather vs independent rounding"
    );
    let mut want = vec![0.0; q.len()];
    let mut want_p = vec![0.0; nq * q_rows * kv_len];
    let sc = query.scale;
    let qd = query_as_scored(dtype, &q);
    dense_reference(
        &shape,
        pos0,
        sc,
        &qd,
        &kd,
        &vd,
        &mut want,
        Some(&mut want_p),
    )
    .unwrap();
    // The value weights' rounding, on top of the f32 tolerance, for the
    // variants that round them (1% over for the f32 weights themselves).
    let vbound = (dtype == KvDtype::Q8_0).then(|| {
        let mut b = vec![0.0; q.len()];
        dense_q8_value_bound(&shape, pos0, sc, &qd, &kd, &vd, c.page_size(), &mut b).unwrap();
        b
    });
    let close = |out: &[f32], isa: Isa, what: &str| match &vbound {
        Some(vb) if rounds_q8_value_weights(isa) => {
            for (k, ((&o, &w), &b)) in out.iter().zip(&want).zip(vb).enumerate() {
                let tol = 1.01 * b + ATOL + RTOL * w.abs();
                assert!(
                    (o - w).abs() <= tol,
                    "{what}: [{k}] {o} vs {w}, beyond {tol} (weights' rounding bound {b})"
                );
            }
        }
        _ => assert_close(out, &want, ATOL, RTOL, what),
    };
    let what = |isa: Isa, p: &AttnParams| {
        format!(
            "{isa} {dtype:?} nkv={nkv} group={group} hd={hd} ps={} kv={kv_len} rows={q_rows} pos0={pos0} {p:?}",
            c.page_size()
        )
    };
    // The loose raw bound holds for the usual scale; a larger scale
    // sharpens the softmax and amplifies the quantization error.
    if dtype == KvDtype::Q8_0 && scale.is_none() {
        let mut raw = vec![0.0; q.len()];
        dense_reference(&shape, pos0, sc, &q, &f.k, &f.v, &mut raw, None).unwrap();
        assert_close(
            &want,
            &raw,
            Q8_RAW_ATOL,
            0.0,
            "q8_0 oracle vs unquantized oracle",
        );
    }
    let mut plist = if all_params {
        params()
    } else {
        vec![AttnParams {
            threads: 2,
            kv_block: 16,
        }]
    };
    plist.push(AttnParams::default_for(&shape, &CpuCaps::default()));
    for isa in available_isas() {
        for p in &plist {
            let mut out = vec![f32::NAN; q.len()];
            paged_attention_with(c, f.seq, LAYER, &query, &q, &mut out, None, isa, p).unwrap();
            close(&out, isa, &what(isa, p));
            // A scratch that served other shapes, dtypes, thread counts and
            // splits before gives the same bits as a fresh one.
            let mut again = vec![f32::NAN; q.len()];
            SCRATCH.with_borrow_mut(|s| {
                paged_attention_scratch(c, f.seq, LAYER, &query, &q, &mut again, None, isa, p, s)
                    .unwrap()
            });
            assert_eq!(
                again.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                out.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                "reused scratch: {}",
                what(isa, p)
            );
            let mut out2 = vec![f32::NAN; q.len()];
            let mut probs = vec![f32::NAN; want_p.len()];
            paged_attention_with(
                c,
                f.seq,
                LAYER,
                &query,
                &q,
                &mut out2,
                Some(&mut probs),
                isa,
                p,
            )
            .unwrap();
            close(&out2, isa, &what(isa, p));
            assert_close(
                &probs,
                &want_p,
                P_ATOL,
                RTOL,
                &format!("probs {}", what(isa, p)),
            );
            let mut probs2 = vec![f32::NAN; want_p.len()];
            SCRATCH.with_borrow_mut(|s| {
                paged_attention_scratch(
                    c,
                    f.seq,
                    LAYER,
                    &query,
                    &q,
                    &mut out2,
                    Some(&mut probs2),
                    isa,
                    p,
                    s,
                )
                .unwrap()
            });
            assert_eq!(
                probs2.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                probs.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                "reused scratch, probs: {}",
                what(isa, p)
            );
        }
    }
    // The default entry point agrees too.
    let mut out = vec![0.0; q.len()];
    paged_attention(c, f.seq, LAYER, &query, &q, &mut out, None).unwrap();
    close(&out, best_isa(), "paged_attention default");
}

/// Head dims per dtype: 64 and 128 everywhere, 40 where no 32-block is needed.
fn head_dims(dtype: KvDtype) -> Vec<usize> {
    match dtype {
        KvDtype::Q8_0 => vec![64, 128],
        _ => vec![64, 128, 40],
    }
}

#[test]
fn decode_matches_dense_reference() {
    let mut rng = Rng::new(41);
    for dtype in KvDtype::ALL {
        for (hi, hd) in head_dims(dtype).into_iter().enumerate() {
            for (gi, group) in [1, 2, 4].into_iter().enumerate() {
                let ps = [16, 32, 8][(hi + gi) % 3];
                let nkv = [2, 1, 3][gi];
                for kv_len in [1, ps - 1, ps, 2 * ps + 3, 97] {
                    let f = fixture(&mut rng, dtype, nkv, hd, ps, kv_len);
                    if f.cache.page_table(f.seq).unwrap().len() >= 5 {
                        let t = f.cache.page_table(f.seq).unwrap();
                        assert!(t.windows(2).any(|w| w[0] > w[1]), "pages in order: {t:?}");
                    }
                    let all = kv_len == 97 || kv_len == ps;
                    check(&mut rng, &f, group, 1, kv_len - 1, None, all);
                }
            }
        }
    }
}

#[test]
fn prefill_matches_dense_reference() {
    let mut rng = Rng::new(42);
    for dtype in KvDtype::ALL {
        for (hi, hd) in head_dims(dtype).into_iter().enumerate() {
            for (gi, group) in [1, 2, 4].into_iter().enumerate() {
                let ps = [16, 8, 32][(hi + gi) % 3];
                let nkv = [2, 2, 1][gi];
                let kv_len = [45, 70, 33][(hi + gi) % 3];
                let f = fixture(&mut rng, dtype, nkv, hd, ps, kv_len);
                // Whole prompt, a chunk after a prefix, and a chunk with
                // positions past it already cached (kv_len > pos0 + rows).
                check(&mut rng, &f, group, kv_len, 0, None, false);
                check(&mut rng, &f, group, 13, kv_len - 13, None, true);
                check(&mut rng, &f, group, 7, 5, None, false);
            }
        }
    }
}

/// Groups that split into head blocks of every width (the SIMD kernels
/// take 4 heads at a time, or on AVX-512 and NEON a group of 5–8 whole:
/// 3, 5 = 4 + 1, 7 = 4 + 3, 8 = 4 + 4), with row counts that leave 1–3 rows
/// after the blocks of four and a head dim with a tail on every ISA.
#[test]
fn groups_of_every_head_block_width() {
    let mut rng = Rng::new(46);
    for dtype in KvDtype::ALL {
        for hd in head_dims(dtype) {
            for (gi, group) in [3, 5, 7, 8].into_iter().enumerate() {
                let ps = [16, 32][gi % 2];
                let kv_len = [37, 70, 19, 66][gi];
                let f = fixture(&mut rng, dtype, 2, hd, ps, kv_len);
                check(&mut rng, &f, group, 1, kv_len - 1, None, gi == 2);
                check(&mut rng, &f, group, 6, kv_len - 6, None, false);
            }
        }
    }
}

#[test]
fn edge_lengths_and_custom_scale() {
    let mut rng = Rng::new(43);
    for dtype in KvDtype::ALL {
        for kv_len in edge_sizes(16).into_iter().filter(|&n| n > 0) {
            let f = fixture(&mut rng, dtype, 1, 32, 16, kv_len);
            check(&mut rng, &f, 2, 1, kv_len - 1, Some(0.3), false);
            let rows = kv_len.min(5);
            check(&mut rng, &f, 2, rows, kv_len - rows, Some(2.0), false);
        }
    }
}

/// Pages long enough for the by-columns score kernels' four-vector key
/// blocks on every ISA (64 keys on AVX-512), whole and from an offset (the
/// KV splits of `check`), on every dtype.
#[test]
fn large_page_sizes() {
    let mut rng = Rng::new(44);
    for dtype in KvDtype::ALL {
        for (ps, kv_len) in [(64, 150), (128, 130), (128, 211)] {
            let f = fixture(&mut rng, dtype, 2, 64, ps, kv_len);
            check(&mut rng, &f, 2, 1, kv_len - 1, None, false);
            check(&mut rng, &f, 7, 1, kv_len - 1, None, false);
            check(&mut rng, &f, 2, 9, 100, None, false);
        }
    }
}

/// A late page whose score beats everything before by ~200 (so the
/// rescale factor `e^(m_old - m_new)` underflows to 0): the output must be
/// that token's value, the earlier accumulator fully discarded.
#[test]
fn max_jump_between_pages() {
    let mut rng = Rng::new(48);
    let (hd, ps, kv_len, hot) = (32, 8, 40, 35);
    let mut c = PagedKvCache::new(1, 1, hd, ps, KvDtype::F32, 5).unwrap();
    c.shuffle_free(&mut rng);
    let seq = c.alloc_sequence();
    let q = rng.vec_f32(hd);
    let scale = 1.0 / (hd as f32).sqrt();
    let qq: f32 = q.iter().map(|x| x * x).sum();
    let mut k: Vec<f32> = rng.vec_f32(kv_len * hd).iter().map(|x| x * 0.01).collect();
    for (d, &qd) in q.iter().enumerate() {
        k[hot * hd + d] = qd * 200.0 / (scale * qq);
    }
    let v = rng.vec_f32(kv_len * hd);
    c.append_batch(seq, 0, &k, &v).unwrap();
    let query = AttnQuery::new(1, 1, kv_len - 1, hd);
    for isa in available_isas() {
        for p in params() {
            let mut out = vec![0.0; hd];
            paged_attention_with(&c, seq, 0, &query, &q, &mut out, None, isa, &p).unwrap();
            assert_close(
                &out,
                &v[hot * hd..(hot + 1) * hd],
                1e-6,
                1e-6,
                &format!("{isa} {p:?}"),
            );
        }
    }
}

#[test]
fn zero_rows_is_a_no_op() {
    let mut rng = Rng::new(45);
    let f = fixture(&mut rng, KvDtype::F32, 1, 32, 16, 5);
    let q = AttnQuery::new(2, 0, 5, 32);
    paged_attention(&f.cache, f.seq, LAYER, &q, &[], &mut [], Some(&mut [])).unwrap();
    // An empty sequence: no rows is fine, one row has no key to see.
    let mut c = PagedKvCache::new(1, 1, 32, 16, KvDtype::Q8_0, 1).unwrap();
    let s = c.alloc_sequence();
    let q0 = AttnQuery::new(1, 0, 0, 32);
    paged_attention(&c, s, 0, &q0, &[], &mut [], None).unwrap();
    let q1 = AttnQuery::new(1, 1, 0, 32);
    let mut out = vec![0.0; 32];
    assert!(paged_attention(&c, s, 0, &q1, &[0.0; 32], &mut out, None).is_err());
    c.append(s, 0, &[0.5; 32], &[0.25; 32]).unwrap();
    paged_attention(&c, s, 0, &q1, &[1.0; 32], &mut out, None).unwrap();
    // One visible key: the output is its dequantized value, 127 · f16(0.25 / 127).
    let d = crate::quant::F16Le::from_f32(0.25 / 127.0).to_f32();
    assert_eq!(out, vec![127.0 * d; 32]);
}

#[test]
fn cache_bookkeeping() {
    let mut rng = Rng::new(46);
    let mut c = PagedKvCache::new(2, 2, 32, 4, KvDtype::F32, 5).unwrap();
    let a = c.alloc_sequence();
    let b = c.alloc_sequence();
    assert_ne!(a, b);
    let tok = 2 * 32;
    let x = rng.vec_f32(7 * tok);
    c.append_batch(a, 0, &x, &x).unwrap();
    assert_eq!(c.layer_len(a, 0).unwrap(), 7);
    assert_eq!(c.len(a).unwrap(), 0, "layer 1 is still empty");
    assert_eq!(c.page_table(a).unwrap().len(), 2);
    assert_eq!(c.free_pages(), 3);
    c.append_batch(a, 1, &x[..3 * tok], &x[..3 * tok]).unwrap();
    assert_eq!(c.len(a).unwrap(), 3);
    let (k, v) = c.gather(a, 0).unwrap();
    assert_eq!(k, x);
    assert_eq!(v, x);
    // 4 more pages needed, 3 free: an error, and nothing changes.
    let big = rng.vec_f32(13 * tok);
    assert!(matches!(
        c.append_batch(b, 0, &big, &big),
        Err(KernelError::InvalidShape { .. })
    ));
    assert_eq!(c.layer_len(b, 0).unwrap(), 0);
    assert_eq!(c.free_pages(), 3);
    c.reset(a).unwrap();
    assert_eq!(c.free_pages(), 5);
    assert!(c.is_empty(a).unwrap());
    c.append_batch(b, 0, &big[..12 * tok], &big[..12 * tok])
        .unwrap();
    assert_eq!(c.gather(b, 0).unwrap().0, &big[..12 * tok]);
    c.free_sequence(b).unwrap();
    assert!(c.len(b).is_err());
    assert_eq!(c.free_pages(), 5);
    // The freed id is reused.
    assert_eq!(c.alloc_sequence(), b);
    // Wrong lengths, unknown layer or sequence.
    assert!(c.append(a, 0, &x[..tok - 1], &x[..tok - 1]).is_err());
    assert!(c.append(a, 0, &x[..tok], &x[..2 * tok]).is_err());
    assert!(c.append(a, 2, &x[..tok], &x[..tok]).is_err());
    assert!(c.append(SeqId(9), 0, &x[..tok], &x[..tok]).is_err());
    assert!(c.reset(SeqId(9)).is_err());
}

#[test]
fn truncate_keeps_a_prefix_and_frees_pages() {
    let mut rng = Rng::new(48);
    let tok = 2 * 32;
    for dtype in KvDtype::ALL {
        let mut c = PagedKvCache::new(2, 2, 32, 4, dtype, 6).unwrap();
        let a = c.alloc_sequence();
        let x = rng.vec_f32(10 * tok);
        for layer in 0..2 {
            c.append_batch(a, layer, &x, &x).unwrap();
        }
        assert_eq!(c.free_pages(), 3);
        // Beyond the length: nothing changes.
        c.truncate(a, 11).unwrap();
        assert_eq!((c.len(a).unwrap(), c.free_pages()), (10, 3));
        // Into the middle of page 1: pages 2.. return to the pool.
        c.truncate(a, 6).unwrap();
        assert_eq!(c.len(a).unwrap(), 6);
        assert_eq!(c.page_table(a).unwrap().len(), 2);
        assert_eq!(c.free_pages(), 4);
        let want = rounded(dtype, &x[..6 * tok], 32);
        assert_eq!(c.gather(a, 1).unwrap().0, want);
        // Appending after a truncate overwrites the dropped positions.
        let y = rng.vec_f32(5 * tok);
        for layer in 0..2 {
            c.append_batch(a, layer, &y, &y).unwrap();
        }
        let mut want = x[..6 * tok].to_vec();
        want.extend_from_slice(&y);
        let want = rounded(dtype, &want, 32);
        assert_eq!(c.gather(a, 0).unwrap().1, want);
        assert_eq!(c.free_pages(), 3);
        c.truncate(a, 0).unwrap();
        assert!(c.is_empty(a).unwrap());
        assert_eq!(c.free_pages(), 6);
        assert!(c.truncate(SeqId(7), 0).is_err());
    }
}

#[test]
fn bad_cache_shapes_are_errors() {
    for hd in [40, 16, 33] {
        assert!(matches!(
            PagedKvCache::new(1, 1, hd, 16, KvDtype::Q8_0, 4),
            Err(KernelError::InvalidShape { .. })
        ));
        assert!(PagedKvCache::new(1, 1, hd, 16, KvDtype::F16, 4).is_ok());
    }
    assert!(PagedKvCache::new(0, 1, 32, 16, KvDtype::F32, 4).is_err());
    assert!(PagedKvCache::new(1, 0, 32, 16, KvDtype::F32, 4).is_err());
    assert!(PagedKvCache::new(1, 1, 0, 16, KvDtype::F32, 4).is_err());
    assert!(PagedKvCache::new(1, 1, 32, 0, KvDtype::F32, 4).is_err());
    assert!(PagedKvCache::new(1, 1, 32, 16, KvDtype::F32, 0).is_err());
    assert!(PagedKvCache::new(1, usize::MAX, 32, 16, KvDtype::F32, 4).is_err());
    for ps in [1, 6, 18] {
        assert!(matches!(
            PagedKvCache::new(1, 1, 32, ps, KvDtype::Q8_0, 4),
            Err(KernelError::InvalidShape { .. })
        ));
        assert!(PagedKvCache::new(1, 1, 32, ps, KvDtype::F16, 4).is_ok());
    }
}

#[test]
fn bad_call_shapes_are_errors() {
    let mut rng = Rng::new(47);
    let f = fixture(&mut rng, KvDtype::F32, 2, 32, 16, 10);
    let (c, s) = (&f.cache, f.seq);
    let p = AttnParams {
        threads: 1,
        kv_block: 0,
    };
    let isa = Isa::Scalar;
    let call = |nq: usize, rows: usize, pos0: usize, ql: usize, ol: usize, pl: Option<usize>| {
        let q = vec![0.0; ql];
        let mut out = vec![0.0; ol];
        let mut pr = pl.map(|n| vec![0.0; n]);
        let query = AttnQuery::new(nq, rows, pos0, 32);
        paged_attention_with(
            c,
            s,
            LAYER,
            &query,
            &q,
            &mut out,
            pr.as_deref_mut(),
            isa,
            &p,
        )
    };
    let shape_err = |r: Result<()>| matches!(r, Err(KernelError::InvalidShape { .. }));
    let len_err = |r: Result<()>| matches!(r, Err(KernelError::ShapeMismatch { .. }));
    assert!(call(4, 2, 8, 256, 256, Some(80)).is_ok());
    assert!(
        shape_err(call(3, 1, 9, 96, 96, None)),
        "3 q heads over 2 kv heads"
    );
    assert!(shape_err(call(0, 1, 9, 0, 0, None)));
    assert!(
        shape_err(call(4, 2, 9, 256, 256, None)),
        "pos0 + rows > kv_len"
    );
    assert!(shape_err(call(4, 1, usize::MAX, 128, 128, None)));
    assert!(len_err(call(4, 2, 8, 255, 256, None)));
    assert!(len_err(call(4, 2, 8, 256, 257, None)));
    assert!(len_err(call(4, 2, 8, 256, 256, Some(79))));
    let q = vec![0.0; 128];
    let mut out = vec![0.0; 128];
    let query = AttnQuery::new(4, 1, 9, 32);
    assert!(paged_attention(c, SeqId(7), LAYER, &query, &q, &mut out, None).is_err());
    assert!(paged_attention(c, s, 2, &query, &q, &mut out, None).is_err());
    for bad in [
        AttnParams {
            threads: 0,
            kv_block: 0,
        },
        AttnParams {
            threads: 257,
            kv_block: 0,
        },
        AttnParams {
            threads: 1,
            kv_block: 15,
        },
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
        assert!(paged_attention_with(c, s, LAYER, &query, &q, &mut out, None, isa, &bad).is_err());
    }
    for isa in Isa::ALL {
        let r = paged_attention_with(c, s, LAYER, &query, &q, &mut out, None, isa, &p);
        if !isa.is_available() {
            assert!(
                matches!(r, Err(KernelError::IsaUnavailable { .. })),
                "{isa}"
            );
        } else if !ISAS.contains(&isa) {
            assert!(matches!(r, Err(KernelError::NoVariant { .. })), "{isa}");
        } else {
            assert!(r.is_ok(), "{isa}");
        }
    }
    // The dense oracle checks its own buffers.
    let shape = AttnShape {
        n_q_heads: 4,
        n_kv_heads: 2,
        head_dim: 32,
        q_rows: 1,
        kv_len: 10,
    };
    let kv = vec![0.0; 10 * 2 * 32];
    assert!(dense_reference(&shape, 9, 1.0, &q, &kv, &kv, &mut out, None).is_ok());
    assert!(dense_reference(&shape, 9, 1.0, &q, &kv[1..], &kv, &mut out, None).is_err());
    assert!(dense_reference(&shape, 10, 1.0, &q, &kv, &kv, &mut out, None).is_err());
}

#[test]
fn default_page_sizes() {
    let cpu = CpuCaps {
        l1d: 48 << 10,
        ..CpuCaps::default()
    };
    assert_eq!(default_page_size(128, KvDtype::F32, &cpu), 16);
    assert_eq!(default_page_size(128, KvDtype::F16, &cpu), 32);
    assert_eq!(default_page_size(128, KvDtype::Q8_0, &cpu), 64);
    assert_eq!(default_page_size(64, KvDtype::Q8_0, &cpu), 128);
    assert_eq!(default_page_size(4096, KvDtype::F32, &cpu), 16);
}

#[test]
fn params_default_candidates_validate() {
    let cpu = CpuCaps {
        cores: 4,
        ..CpuCaps::default()
    };
    for (nq, nkv, rows, kv) in [
        (32, 8, 1, 4096),
        (2, 1, 1, 8192),
        (14, 2, 128, 128),
        (1, 1, 1, 1),
    ] {
        let shape = AttnShape {
            n_q_heads: nq,
            n_kv_heads: nkv,
            head_dim: 128,
            q_rows: rows,
            kv_len: kv,
        };
        let d = AttnParams::default_for(&shape, &cpu);
        d.validate().unwrap();
        let c = AttnParams::candidates(&shape, &cpu);
        assert_eq!(c[0], d);
        for p in &c {
            p.validate().unwrap();
            assert!(p.threads <= 4);
            assert!(p.kv_block == 0 || p.kv_block < kv);
        }
        for (i, p) in c.iter().enumerate() {
            assert!(!c[i + 1..].contains(p), "duplicate {p:?}");
        }
    }
    // Decode with 2 heads on 4 cores over a long context: split-K.
    let long = AttnShape {
        n_q_heads: 2,
        n_kv_heads: 1,
        head_dim: 128,
        q_rows: 1,
        kv_len: 8192,
    };
    let d = AttnParams::default_for(&long, &cpu);
    assert_eq!(d.threads, 4);
    assert!(d.kv_block >= 256 && d.kv_block < 8192, "{d:?}");
    // A tiny problem: one thread, no split.
    let tiny = AttnShape { kv_len: 8, ..long };
    assert_eq!(
        AttnParams::default_for(&tiny, &cpu),
        AttnParams {
            threads: 1,
            kv_block: 0
        }
    );
}
