//! Non-causal attention within segments: the rows of one call are cut into
//! consecutive segments (`bounds`, the `cu_seqlens` of flash-attention's
//! variable-length form) and each query row attends to every key of its own
//! segment and to no other. A vision transformer's window attention is
//! this with one segment per window, its full attention one segment per
//! image.
//!
//! The per-row work is the paged kernel's: keys and values are first laid
//! out as pages of [`SEG_PAGE`] rows per head (the paged cache's layout,
//! one copy per call, `O(rows · kv_dim)` against the `O(rows · segment ·
//! kv_dim)` of the attention itself), and then every (row, KV head) unit
//! runs the same online-softmax walk over the pages of its segment with the
//! same ISA row kernels (scores, max, exp-sum, accumulate) as
//! [`super::paged_attention_scratch`], so the variants and their accuracy
//! are that kernel's. [`segments_reference`] is the independent f64
//! oracle.

use super::{AttnParams, AttnScratch, Ctx, PageElem, check_heads, grown, par_units, resolve_isa};
use crate::error::check_len;
use crate::tune::Tunable;
use crate::{Isa, KernelError, Result};

const OP: &str = "segment_attention";

/// Rows per page of the segment kernel's K/V copy: 128 rows of an 80-wide
/// f32 head are 40 KiB, a page of keys and values together stays within L2
/// while a group of heads walks it.
pub const SEG_PAGE: usize = 128;

/// Shape of one segment-attention call: `rows` tokens, `q` and `out`
/// `[rows, n_q_heads, head_dim]`, `k` and `v` `[rows, n_kv_heads,
/// head_dim]` (token-major, as a QKV projection writes them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegShape {
    pub rows: usize,
    pub n_q_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

/// The segment kernel's reusable buffers: the paged kernel's scratch and the
/// paged copies of K and V. Buffers grow and are never shrunk.
#[derive(Debug, Clone, Default)]
pub struct SegScratch {
    attn: AttnScratch,
    k: Vec<f32>,
    v: Vec<f32>,
    pages: Vec<u32>,
    seg_of: Vec<u32>,
}

impl SegScratch {
    pub fn new() -> Self {
        Self::default()
    }
}

/// Checks `bounds` (`0 = b0 ≤ b1 ≤ … ≤ bn = rows`) and the lengths of
/// `q`, `out`, `k`, `v`.
fn check(shape: &SegShape, bounds: &[usize], lens: [usize; 4]) -> Result<()> {
    let bad = |reason: String| Err(KernelError::InvalidShape { op: OP, reason });
    let s = shape;
    check_heads(OP, s.n_q_heads, s.n_kv_heads, s.head_dim)?;
    if bounds.first() != Some(&0) || bounds.last() != Some(&s.rows) {
        return bad(format!(
            "segment bounds must start at 0 and end at rows = {}, got {:?}..{:?}",
            s.rows,
            bounds.first(),
            bounds.last()
        ));
    }
    if let Some(w) = bounds.windows(2).find(|w| w[1] < w[0]) {
        return bad(format!(
            "segment bounds must not decrease, got {} then {}",
            w[0], w[1]
        ));
    }
    let (nq, nkv) = (s.n_q_heads, s.n_kv_heads);
    for (name, got, per_row) in [
        ("q", lens[0], nq),
        ("out", lens[1], nq),
        ("k", lens[2], nkv),
        ("v", lens[3], nkv),
    ] {
        let want = s
            .rows
            .checked_mul(per_row)
            .and_then(|x| x.checked_mul(s.head_dim))
            .ok_or(KernelError::InvalidShape {
                op: OP,
                reason: "the buffer sizes overflow usize".into(),
            })?;
        check_len(OP, name, got, want)?;
    }
    Ok(())
}

/// Attention of each row of `q` over the keys and values of its segment
/// (rows `bounds[s]..bounds[s + 1]`), scores scaled by `scale`, written to
/// `out`; variant `isa`, threads from `params` (`kv_block` is ignored: a
/// segment is short next to a decode context, and the units, rows × KV
/// heads, already outnumber the threads). Once `scratch` has served a call
/// of this size, the call allocates nothing.
#[allow(clippy::too_many_arguments)]
pub fn segment_attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &mut [f32],
    shape: SegShape,
    bounds: &[usize],
    scale: f32,
    isa: Isa,
    params: &AttnParams,
    scratch: &mut SegScratch,
) -> Result<()> {
    let (nq, nkv) = (shape.n_q_heads, shape.n_kv_heads);
    check(&shape, bounds, [q.len(), out.len(), k.len(), v.len()])?;
    let isa = resolve_isa(OP, isa)?;
    params.validate()?;
    let (rows, hd) = (shape.rows, shape.head_dim);
    if rows == 0 {
        return Ok(());
    }
    let ps = SEG_PAGE;
    let npages = rows.div_ceil(ps);
    let SegScratch {
        attn,
        k: kp,
        v: vp,
        pages,
        seg_of,
    } = scratch;
    let page_elems = nkv * ps * hd;
    let kp = grown(kp, npages * page_elems);
    let vp = grown(vp, npages * page_elems);
    // Token-major rows to the paged layout: [page][kv head][row][hd] for
    // V, and for K by columns, [page][kv head][hd][row] (f32 pages'
    // layout, `KvDtype::k_row_elems`).
    for t in 0..rows {
        let (page, off) = (t / ps, t % ps);
        for h in 0..nkv {
            let src = (t * nkv + h) * hd;
            let base = (page * nkv + h) * ps * hd;
            for (d, &x) in k[src..src + hd].iter().enumerate() {
                kp[base + d * ps + off] = x;
            }
            let dst = base + off * hd;
            vp[dst..dst + hd].copy_from_slice(&v[src..src + hd]);
        }
    }
    pages.clear();
    pages.extend(0..npages as u32);
    seg_of.clear();
    for (s, w) in bounds.windows(2).enumerate() {
        seg_of.extend(std::iter::repeat_n(s as u32, w[1] - w[0]));
    }
    let group = nq / nkv;
    let ctx = Ctx {
        k: &kp[..],
        v: &vp[..],
        pages: &pages[..],
        ops: <f32 as PageElem>::ops(isa),
        n_kv: nkv,
        ps,
        k_row: hd,
        v_row: hd,
        hd,
        group,
        n_q_heads: nq,
        q_rows: rows,
        pos0: 0,
        scale,
        q,
        qh: hd,
    };
    let threads = params.threads;
    let AttnScratch { stats, scores, .. } = attn;
    let units = rows * nkv;
    let stats = grown(stats, 2 * group * units);
    let sw = group * ps;
    let scores = grown(scores, threads * sw);
    let seg_of = &seg_of[..];
    par_units(
        units,
        threads,
        out,
        group * hd,
        stats,
        2 * group,
        scores,
        sw,
        |r, out, st, scratch| {
            for (j, u) in r.enumerate() {
                let (i, kvh) = (u / nkv, u % nkv);
                let s = seg_of[i] as usize;
                let accs = &mut out[j * group * hd..(j + 1) * group * hd];
                let ml = &mut st[j * 2 * group..(j + 1) * 2 * group];
                ctx.attend_group(i, kvh, bounds[s], bounds[s + 1], scratch, accs, ml);
                for (acc, st) in accs.chunks_exact_mut(hd).zip(ml.chunks_exact(2)) {
                    let inv = 1.0 / st[1];
                    acc.iter_mut().for_each(|a| *a *= inv);
                }
            }
        },
    );
    Ok(())
}

/// The oracle: plain f64 attention of each row over its segment, every
/// score materialized. Same layouts and rules as [`segment_attention`].
#[allow(clippy::too_many_arguments)]
pub fn segments_reference(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &mut [f32],
    shape: SegShape,
    bounds: &[usize],
    scale: f32,
) -> Result<()> {
    let (nq, nkv, hd) = (shape.n_q_heads, shape.n_kv_heads, shape.head_dim);
    check(&shape, bounds, [q.len(), out.len(), k.len(), v.len()])?;
    let group = nq / nkv;
    for w in bounds.windows(2) {
        let (s0, s1) = (w[0], w[1]);
        for i in s0..s1 {
            for h in 0..nq {
                let kvh = h / group;
                let qr = &q[(i * nq + h) * hd..][..hd];
                let s: Vec<f64> = (s0..s1)
                    .map(|t| {
                        let kr = &k[(t * nkv + kvh) * hd..][..hd];
                        let dot: f64 = qr.iter().zip(kr).map(|(&a, &b)| a as f64 * b as f64).sum();
                        dot * scale as f64
                    })
                    .collect();
                let m = s.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
                let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                let l: f64 = e.iter().sum();
                let o = &mut out[(i * nq + h) * hd..][..hd];
                for (d, od) in o.iter_mut().enumerate() {
                    let acc: f64 = (s0..s1)
                        .zip(&e)
                        .map(|(t, p)| p * v[(t * nkv + kvh) * hd + d] as f64)
                        .sum();
                    *od = (acc / l) as f32;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Every available variant against the f64 oracle, over segment layouts
    //! with empty, single-row, page-straddling and whole-call segments, GQA
    //! ratios 1/2/4, head sizes around the vector widths, threads 1..3, on
    //! fresh and reused scratch. Tolerance as the paged kernel's:
    //! `1e-5 + 1e-5·|want|` (f32 accumulation over ≤ 300 positions).
    use super::*;
    use crate::attention::available_isas;
    use crate::testing::{Rng, assert_close};

    fn run_case(rows: usize, bounds: &[usize], nq: usize, nkv: usize, hd: usize, seed: u64) {
        let mut rng = Rng::new(seed);
        let shape = SegShape {
            rows,
            n_q_heads: nq,
            n_kv_heads: nkv,
            head_dim: hd,
        };
        let q = rng.vec_f32(rows * nq * hd);
        let k = rng.vec_f32(rows * nkv * hd);
        let v = rng.vec_f32(rows * nkv * hd);
        let scale = 1.0 / (hd as f32).sqrt();
        let mut want = vec![0.0; q.len()];
        segments_reference(&q, &k, &v, &mut want, shape, bounds, scale).unwrap();
        for isa in available_isas() {
            let mut scratch = SegScratch::new();
            for threads in 1..=3 {
                let p = AttnParams {
                    threads,
                    kv_block: 0,
                };
                let mut got = vec![f32::NAN; q.len()];
                segment_attention(
                    &q,
                    &k,
                    &v,
                    &mut got,
                    shape,
                    bounds,
                    scale,
                    isa,
                    &p,
                    &mut scratch,
                )
                .unwrap();
                assert_close(
                    &got,
                    &want,
                    1e-5,
                    1e-5,
                    &format!("{isa:?} t{threads} rows {rows} {bounds:?} {nq}/{nkv} hd {hd}"),
                );
            }
        }
    }

    #[test]
    fn every_variant_matches_the_oracle() {
        let layouts: [(usize, &[usize]); 6] = [
            (1, &[0, 1]),
            (7, &[0, 7]),
            (10, &[0, 1, 1, 5, 10]),
            (64, &[0, 16, 32, 48, 64]),
            (300, &[0, 64, 200, 300]),
            (260, &[0, 260]),
        ];
        let heads = [(1, 1), (4, 2), (4, 1), (3, 3)];
        let mut seed = 0;
        for &(rows, bounds) in &layouts {
            for &(nq, nkv) in &heads {
                for hd in [1, 8, 15, 16, 33, 80] {
                    seed += 1;
                    if rows * hd > 300 * 33 && nq > 1 {
                        continue;
                    }
                    run_case(rows, bounds, nq, nkv, hd, seed);
                }
            }
        }
    }

    #[test]
    fn a_segment_ignores_its_neighbours() {
        // The output of rows in segment 0 does not change when segment 1's
        // keys and values do.
        let shape = SegShape {
            rows: 6,
            n_q_heads: 2,
            n_kv_heads: 2,
            head_dim: 4,
        };
        let bounds = [0, 3, 6];
        let mut rng = Rng::new(9);
        let q = rng.vec_f32(48);
        let (k, mut v) = (rng.vec_f32(48), rng.vec_f32(48));
        let p = AttnParams {
            threads: 1,
            kv_block: 0,
        };
        let run = |v: &[f32]| {
            let mut out = vec![0.0; 48];
            segment_attention(
                &q,
                &k,
                v,
                &mut out,
                shape,
                &bounds,
                0.5,
                Isa::Scalar,
                &p,
                &mut SegScratch::new(),
            )
            .unwrap();
            out
        };
        let a = run(&v);
        v[24..].iter_mut().for_each(|x| *x += 10.0);
        let b = run(&v);
        assert_eq!(a[..24], b[..24]);
        assert_ne!(a[24..], b[24..]);
    }

    #[test]
    fn bad_calls_are_errors() {
        let shape = SegShape {
            rows: 4,
            n_q_heads: 2,
            n_kv_heads: 2,
            head_dim: 2,
        };
        let b = vec![0.0; 16];
        let mut out = vec![0.0; 16];
        let p = AttnParams {
            threads: 1,
            kv_block: 0,
        };
        let mut s = SegScratch::new();
        for bounds in [&[0, 3][..], &[1, 4], &[0, 3, 2, 4], &[]] {
            let e = segment_attention(
                &b,
                &b,
                &b,
                &mut out,
                shape,
                bounds,
                1.0,
                Isa::Scalar,
                &p,
                &mut s,
            );
            assert!(e.is_err(), "{bounds:?}");
        }
        let e = segment_attention(
            &b[..8],
            &b,
            &b,
            &mut out,
            shape,
            &[0, 4],
            1.0,
            Isa::Scalar,
            &p,
            &mut s,
        );
        assert!(e.is_err());
        let gqa = SegShape {
            n_kv_heads: 3,
            n_q_heads: 4,
            ..shape
        };
        assert!(
            segment_attention(
                &b,
                &b,
                &b,
                &mut out,
                gqa,
                &[0, 4],
                1.0,
                Isa::Scalar,
                &p,
                &mut s
            )
            .is_err()
        );
    }
}
