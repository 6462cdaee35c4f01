//! Scalar row kernels (the reference the SIMD variants are held to) and
//! [`dense_reference`], the independent f64 oracle over contiguous K/V.
//! The group kernels take the SIMD variants' `ahead` (memory the caller
//! reads next, a prefetch hint) and ignore it: the reference does not
//! prefetch.

use super::{AttnShape, Q8Col, QBlock, check_shape};
use crate::Result;
use crate::error::check_len;
use crate::quant::QK;
use half::f16;

/// `out[t] = scale · q·k_(off + t)` for a page of `ps` keys stored by
/// columns (element `d` of key `t` at `page[d · ps + t]`; f32 and f16
/// pages).
fn scores_cols_head<T: Copy>(
    q: &[f32],
    page: &[T],
    ps: usize,
    off: usize,
    scale: f32,
    out: &mut [f32],
    f: impl Fn(T) -> f32,
) {
    debug_assert!(page.len() == q.len() * ps && off + out.len() <= ps);
    for (t, s) in out.iter_mut().enumerate() {
        *s = q
            .iter()
            .enumerate()
            .map(|(d, a)| a * f(page[d * ps + off + t]))
            .sum::<f32>()
            * scale;
    }
}

/// `scale · q·k_t` for a query head quantized to Q8_0 blocks `q` and key
/// `t` of a Q8_0 page of `ps` keys ([`Q8Col::split`]'s `qs` and `sc`):
/// per block the exact integer dot product, times the key's scale times
/// the query block's scale times `scale`, summed over the blocks.
pub(crate) fn score_q8(
    q: &[QBlock],
    qs: &[i8],
    sc: &[f16],
    ps: usize,
    t: usize,
    scale: f32,
) -> f32 {
    let mut sum = 0.0f32;
    for (b, qb) in q.iter().enumerate() {
        let dot: i32 = (qb.qs.iter().enumerate())
            .map(|(j, &a)| a as i32 * qs[Q8Col::offset(ps, b * QK + j, t)] as i32)
            .sum();
        sum += dot as f32 * (sc[b * ps + t].to_f32() * (qb.d * scale));
    }
    sum
}

/// The largest of `s` (NaNs ignored).
pub fn max(s: &[f32]) -> f32 {
    s.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b))
}

/// `s[j] = e^(s[j] - m)` in place (std `exp`); returns the sum.
pub fn exp_sum(s: &mut [f32], m: f32) -> f32 {
    let mut sum = 0.0;
    for x in s.iter_mut() {
        *x = (*x - m).exp();
        sum += *x;
    }
    sum
}

/// `acc += Σ_t p[t] · v_t`, f32 rows.
fn accum_f32_head(acc: &mut [f32], p: &[f32], v: &[f32]) {
    let hd = acc.len();
    debug_assert_eq!(v.len(), p.len() * hd);
    for (&pt, vr) in p.iter().zip(v.chunks_exact(hd)) {
        for (a, &x) in acc.iter_mut().zip(vr) {
            *a += pt * x;
        }
    }
}

/// `acc += Σ_t p[t] · v_t`, f16 rows.
fn accum_f16_head(acc: &mut [f32], p: &[f32], v: &[f16]) {
    let hd = acc.len();
    debug_assert_eq!(v.len(), p.len() * hd);
    for (&pt, vr) in p.iter().zip(v.chunks_exact(hd)) {
        for (a, x) in acc.iter_mut().zip(vr) {
            *a += pt * x.to_f32();
        }
    }
}

/// `acc += Σ_t p[t] · v_(off + t)` over a Q8_0 V page of `ps` positions
/// ([`Q8Col::split`]'s `qs` and `sc`): `(p·d) · qs` per block, the f32
/// weights as they are (the int8 ones of the dot-product variants are the
/// same weights quantized, `body::accum_q8`).
fn accum_q8_head(acc: &mut [f32], p: &[f32], qs: &[i8], sc: &[f16], ps: usize, off: usize) {
    let hd = acc.len();
    for (i, &pt) in p.iter().enumerate() {
        let t = off + i;
        for (b, ab) in acc.chunks_exact_mut(QK).enumerate() {
            let pd = pt * sc[b * ps + t].to_f32();
            for (j, a) in ab.iter_mut().enumerate() {
                *a += pd * qs[Q8Col::pos_offset(hd, b * QK + j, t)] as f32;
            }
        }
    }
}

// The group entry points: the reference computes each head on its own.

/// A group call of a one-head scores kernel: `one(q_j, out_j)` per head.
#[inline(always)]
fn each_head_scores(
    q: &[f32],
    hd: usize,
    out: &mut [f32],
    mut one: impl FnMut(&[f32], &mut [f32]),
) {
    let n = out.len() / (q.len() / hd);
    for (qj, oj) in q.chunks_exact(hd).zip(out.chunks_exact_mut(n)) {
        one(qj, oj);
    }
}

/// A group call of a one-head value kernel: `one(acc_j, p_j)` per head.
#[inline(always)]
fn each_head_accum(acc: &mut [f32], hd: usize, p: &[f32], mut one: impl FnMut(&mut [f32], &[f32])) {
    let n = p.len() / (acc.len() / hd);
    for (aj, pj) in acc.chunks_exact_mut(hd).zip(p.chunks_exact(n)) {
        one(aj, pj);
    }
}

/// [`scores_cols_head`] for each head of a group: `out[j · n + t]`.
#[allow(clippy::too_many_arguments)]
pub fn scores_f32(
    q: &[f32],
    hd: usize,
    page: &[f32],
    ps: usize,
    off: usize,
    _ahead: &[f32],
    scale: f32,
    out: &mut [f32],
) {
    each_head_scores(q, hd, out, |q, o| {
        scores_cols_head(q, page, ps, off, scale, o, |x| x)
    });
}

/// [`accum_f32_head`] for each head of a group over rows `off..` of
/// `page`: `p[j · n + t]`.
pub fn accum_f32(
    acc: &mut [f32],
    hd: usize,
    p: &[f32],
    page: &[f32],
    _ps: usize,
    off: usize,
    _ahead: &[f32],
) {
    let n = p.len() / (acc.len() / hd);
    let v = &page[off * hd..(off + n) * hd];
    each_head_accum(acc, hd, p, |a, p| accum_f32_head(a, p, v));
}

/// [`scores_cols_head`] for each head of a group: `out[j · n + t]`.
#[allow(clippy::too_many_arguments)]
pub fn scores_f16(
    q: &[f32],
    hd: usize,
    page: &[f16],
    ps: usize,
    off: usize,
    _ahead: &[f16],
    scale: f32,
    out: &mut [f32],
) {
    each_head_scores(q, hd, out, |q, o| {
        scores_cols_head(q, page, ps, off, scale, o, f16::to_f32)
    });
}

/// [`accum_f16_head`] for each head of a group over rows `off..` of
/// `page`: `p[j · n + t]`.
pub fn accum_f16(
    acc: &mut [f32],
    hd: usize,
    p: &[f32],
    page: &[f16],
    _ps: usize,
    off: usize,
    _ahead: &[f16],
) {
    let n = p.len() / (acc.len() / hd);
    let v = &page[off * hd..(off + n) * hd];
    each_head_accum(acc, hd, p, |a, p| accum_f16_head(a, p, v));
}

/// [`score_q8`] of each quantized head of a group (`hd / 32` blocks
/// each) against keys `off..`: `out[j · n + t]`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn scores_q8(
    q: &[QBlock],
    hd: usize,
    page: &[Q8Col],
    ps: usize,
    off: usize,
    _ahead: &[Q8Col],
    scale: f32,
    out: &mut [f32],
) {
    let (qs, sc) = Q8Col::split(page, hd, ps);
    let n = out.len() / (q.len() * QK / hd);
    for (qj, oj) in q.chunks_exact(hd / QK).zip(out.chunks_exact_mut(n)) {
        for (t, s) in oj.iter_mut().enumerate() {
            *s = score_q8(qj, qs, sc, ps, off + t, scale);
        }
    }
}

/// [`accum_q8_head`] for each head of a group: `p[j · n + t]`.
pub(crate) fn accum_q8(
    acc: &mut [f32],
    hd: usize,
    p: &[f32],
    page: &[Q8Col],
    ps: usize,
    off: usize,
    _ahead: &[Q8Col],
) {
    let (qs, sc) = Q8Col::split(page, hd, ps);
    each_head_accum(acc, hd, p, |a, p| accum_q8_head(a, p, qs, sc, ps, off));
}

/// Plain attention in f64 over contiguous K/V, the oracle for the paged
/// kernels: `out = softmax(q·kᵀ·scale + causal mask) · v`.
///
/// `q`, `out`: `[q_rows, n_q_heads, head_dim]`; `k`, `v`: `[kv_len,
/// n_kv_heads, head_dim]`; `probs`: `[n_q_heads, q_rows, kv_len]`. Query row
/// `i` sees positions `0..=pos0 + i`; head `h` reads KV head
/// `h / (n_q_heads / n_kv_heads)`. Materializes each score row; allocates.
#[allow(clippy::too_many_arguments)]
pub fn dense_reference(
    shape: &AttnShape,
    pos0: usize,
    scale: f32,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &mut [f32],
    mut probs: Option<&mut [f32]>,
) -> Result<()> {
    check_shape(
        shape,
        pos0,
        q.len(),
        out.len(),
        probs.as_deref().map(<[f32]>::len),
    )?;
    let (nkv, hd, q_rows, kv_len) = (shape.n_kv_heads, shape.head_dim, shape.q_rows, shape.kv_len);
    each_softmax_row(
        shape,
        pos0,
        scale,
        q,
        k,
        v,
        "dense_reference",
        |i, h, kvh, s, l| {
            let vis = s.len();
            let o = &mut out[(i * shape.n_q_heads + h) * hd..][..hd];
            for (d, od) in o.iter_mut().enumerate() {
                let acc: f64 = (0..vis)
                    .map(|t| s[t] * v[(t * nkv + kvh) * hd + d] as f64)
                    .sum();
                *od = (acc / l) as f32;
            }
            if let Some(p) = probs.as_deref_mut() {
                let row = &mut p[(h * q_rows + i) * kv_len..][..kv_len];
                for (t, pt) in row.iter_mut().enumerate() {
                    *pt = if t < vis { (s[t] / l) as f32 } else { 0.0 };
                }
            }
        },
    )
}

/// For a Q8_0 cache of `page_size` positions per page, the most that the
/// dot-product variants' rounding of their value weights may move each
/// output of [`dense_reference`] (`out`, its layout): per window of 32
/// positions of a page (the kernels' windows, or the part of one a call
/// sees) and value block `b`, the weights `p_t · d_t,b` (probability times
/// the stored scale) are rounded to a step of `max_t p_t · max_t d_t,b /
/// 127`, so each is off by at most half of it, times `|q_t,j|`, the stored
/// int8.
/// `v` is what the cache stores ([`super::PagedKvCache::gather`]), from
/// which each block's scale and int8 are recovered.
#[allow(clippy::too_many_arguments)]
pub fn dense_q8_value_bound(
    shape: &AttnShape,
    pos0: usize,
    scale: f32,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    page_size: usize,
    out: &mut [f32],
) -> Result<()> {
    check_shape(shape, pos0, q.len(), out.len(), None)?;
    let (nkv, hd) = (shape.n_kv_heads, shape.head_dim);
    // Each stored block's scale: its largest magnitude is 127 steps.
    let d: Vec<f64> = v
        .chunks(QK)
        .map(|b| b.iter().fold(0.0f64, |a, &x| a.max(x.abs() as f64)) / 127.0)
        .collect();
    let nb = hd.div_ceil(QK);
    each_softmax_row(
        shape,
        pos0,
        scale,
        q,
        k,
        v,
        "dense_q8_value_bound",
        |i, h, kvh, s, l| {
            let o = &mut out[(i * shape.n_q_heads + h) * hd..][..hd];
            o.fill(0.0);
            let vis = s.len();
            let pages = (0..vis).step_by(page_size.max(1));
            for w0 in pages.flat_map(|p0| (p0..p0 + page_size).step_by(QK)) {
                let win = w0..(w0 + QK)
                    .min(w0 / page_size * page_size + page_size)
                    .min(vis);
                for (b, ob) in o.chunks_mut(QK).enumerate() {
                    let db = |t: usize| d[(t * nkv + kvh) * nb + b];
                    let wmax = win.clone().map(|t| s[t] / l).fold(0.0, f64::max)
                        * win.clone().map(db).fold(0.0, f64::max);
                    for (j, oj) in ob.iter_mut().enumerate() {
                        let q: f64 = win
                            .clone()
                            .filter(|&t| db(t) > 0.0)
                            .map(|t| (v[(t * nkv + kvh) * hd + b * QK + j] as f64 / db(t)).abs())
                            .sum();
                        *oj += (wmax / 254.0 * q) as f32;
                    }
                }
            }
        },
    )
}

/// Runs `f(i, h, kvh, e, l)` for each query row `i` and head `h` (reading
/// KV head `kvh`) of [`dense_reference`], `e` the row's `e^(s_t - max)`
/// over its visible positions and `l` their sum, after checking `k` and `v`.
#[allow(clippy::too_many_arguments)]
fn each_softmax_row(
    shape: &AttnShape,
    pos0: usize,
    scale: f32,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    op: &'static str,
    mut f: impl FnMut(usize, usize, usize, &[f64], f64),
) -> Result<()> {
    let AttnShape {
        n_q_heads: nq,
        n_kv_heads: nkv,
        head_dim: hd,
        q_rows,
        kv_len,
    } = *shape;
    let kv = kv_len * nkv * hd;
    check_len(op, "k", k.len(), kv)?;
    check_len(op, "v", v.len(), kv)?;
    let group = nq / nkv;
    let mut s = vec![0.0f64; kv_len];
    for i in 0..q_rows {
        let vis = pos0 + i + 1;
        for h in 0..nq {
            let kvh = h / group;
            let qr = &q[(i * nq + h) * hd..][..hd];
            for (t, st) in s[..vis].iter_mut().enumerate() {
                let kr = &k[(t * nkv + kvh) * hd..][..hd];
                let dot: f64 = qr.iter().zip(kr).map(|(&a, &b)| a as f64 * b as f64).sum();
                *st = dot * scale as f64;
            }
            let m = s[..vis].iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
            let mut l = 0.0;
            for st in &mut s[..vis] {
                *st = (*st - m).exp();
                l += *st;
            }
            f(i, h, kvh, &s[..vis], l);
        }
    }
    Ok(())
}
