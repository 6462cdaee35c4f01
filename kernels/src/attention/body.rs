//! The f32, f16 and Q8_0 page kernels, written once against [`Simd`], and
//! the macro that stamps them out per ISA.
//!
//! Both kernels take the whole group of query heads that share a KV head,
//! so each key or value vector is loaded (and, for f16 and Q8_0, widened)
//! once for a block of heads instead of once per head: blocks of up to `H
//! = 4` heads `V` vectors wide, `V` the most whose accumulators fit the
//! register file beside the key or value vectors (4 with 32 registers, 2
//! with AVX2's 16), or, with 32 registers and a group of 5–8 heads, the
//! whole group two vectors wide ([`wide`]). AVX2 takes four heads two
//! vectors wide rather than two heads four wide: the same 8 accumulators,
//! but each key or value vector is widened for four heads instead of two.
//!
//! Scores ([`scores_cols`]) read keys stored by columns: the lanes are
//! keys and each head's query value `d` is broadcast against key values
//! `d`, so every lane sums its dot product in one register. Q8_0 keys
//! ([`scores_q8`]) are scored as llama.cpp scores them, against a query
//! quantized to Q8_0 blocks: four values of a key per 32-bit lane meet
//! four broadcast query bytes in one `vpdpbusd` or `sdot` ([`Quads`];
//! ISAs without one widen the quads to f32), and each block's integer sum
//! is scaled once.
//! The value axpy keeps a slice of each head's accumulator in registers
//! across all rows of the page, so it is loaded and stored once per page.
//! Q8_0 values ([`accum_q8`]) are stored in quads of positions, and the
//! same instructions multiply four positions of `LANES` values by four
//! weights rounded to int8 per window of 32 positions.
//! Tails (keys, or head-dim for values) are masked vectors on AVX-512 and
//! scalar loops elsewhere.

use super::{Q8Col, QBlock};
use crate::prefetch::Stream;
use crate::quant::QK;
use crate::simd::{Elem, Simd};

/// Whether a group of `g` heads runs as one head block two vectors wide
/// (`f::<g, 2>`) rather than in blocks of at most `H` heads `V` vectors
/// wide (`f::<h, V>`): on ISAs with 32 vector registers (those with `V =
/// 4`) a group of 5–8 heads fits in one block of 2 · g accumulators, so each
/// key or value vector is loaded and widened (and, for Q8_0, scaled) once
/// for the group instead of once per block of four.
#[inline(always)]
fn wide<const H: usize, const V: usize>(g: usize) -> bool {
    H == 4 && V == 4 && (5..=8).contains(&g)
}

/// `f::<h, V>(args)` for a head block of `h` heads: `V = 2` when `wide`
/// (`h` 5–8), else the ISA's block width `$v` (`h` 1–4).
macro_rules! heads_of {
    ($h:expr, $wide:expr, $v:ident, $f:ident::<$s:ty, $t:ty>($($arg:expr),*)) => {
        if $wide {
            match $h {
                5 => $f::<$s, $t, 5, 2>($($arg),*),
                6 => $f::<$s, $t, 6, 2>($($arg),*),
                7 => $f::<$s, $t, 7, 2>($($arg),*),
                _ => $f::<$s, $t, 8, 2>($($arg),*),
            }
        } else {
            match $h {
                1 => $f::<$s, $t, 1, $v>($($arg),*),
                2 => $f::<$s, $t, 2, $v>($($arg),*),
                3 => $f::<$s, $t, 3, $v>($($arg),*),
                _ => $f::<$s, $t, 4, $v>($($arg),*),
            }
        }
    };
}

/// Runs `f::<S, T, h, v>(args)` ([`heads_of!`]) on each head block of a
/// group of `$g` heads, `$j` its first head: blocks of `$hb` (the whole
/// group when `$wide`), the last one shorter.
macro_rules! each_block {
    ($g:expr, $wide:expr, $hb:expr, $v:ident, |$j:ident| $f:ident::<$s:ty, $t:ty>($($arg:expr),*)) => {
        let mut $j = 0;
        while $j < $g {
            let h = ($g - $j).min($hb);
            // SAFETY: heads j..j + h of the group exist (the caller's
            // arguments address them from `$j`).
            unsafe {
                heads_of!(h, $wide, $v, $f::<$s, $t>($($arg),*));
            }
            $j += h;
        }
    };
}

/// Scores of `H` heads against keys `off..off + n` of an f32 or f16 page
/// stored by columns (value `d` of key `t` at `d · ps + t`):
/// `out[h · n + t]`. Lanes are keys, so each lane's sum runs over `d` in
/// one register and no horizontal sums are needed; each key vector is
/// loaded (and widened) once for the `H` heads, whose query values are
/// broadcast. Each turn of the `d` loops requests the next lines of `pf`.
///
/// # Safety
/// As [`scores_cols`], for the `H` heads at `q`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn scores_cols_heads<S: Simd, T: Elem, const H: usize, const V: usize>(
    q: *const f32,
    hd: usize,
    page: *const T,
    ps: usize,
    off: usize,
    n: usize,
    scale: f32,
    out: *mut f32,
    pf: &mut Stream,
) {
    let mut t = 0;
    // SAFETY: keys off + t.. off + t + V·LANES (or + w) lie below off + n
    // <= ps in every row d of the page; out holds H rows of n.
    unsafe {
        let sc = S::splat(scale);
        while t + V * S::LANES <= n {
            let k = off + t;
            let mut a = [[S::zero(); V]; H];
            for d in 0..hd {
                pf.turn();
                let mut kv = [S::zero(); V];
                for (u, x) in kv.iter_mut().enumerate() {
                    *x = T::load::<S>(page.add(d * ps + k + u * S::LANES));
                }
                for (h, ah) in a.iter_mut().enumerate() {
                    let qv = S::splat(*q.add(h * hd + d));
                    for (au, &x) in ah.iter_mut().zip(&kv) {
                        *au = S::fma(qv, x, *au);
                    }
                }
            }
            for (h, ah) in a.iter().enumerate() {
                for (u, &au) in ah.iter().enumerate() {
                    S::store(out.add(h * n + t + u * S::LANES), S::mul(au, sc));
                }
            }
            t += V * S::LANES;
        }
        while t < n && (S::MASKED_TAIL || t + S::LANES <= n) {
            let (k, w) = (off + t, (n - t).min(S::LANES));
            let mut a = [S::zero(); H];
            for d in 0..hd {
                pf.turn();
                let x = if w < S::LANES {
                    T::load_tail::<S>(page.add(d * ps + k), w)
                } else {
                    T::load::<S>(page.add(d * ps + k))
                };
                for (h, ah) in a.iter_mut().enumerate() {
                    *ah = S::fma(S::splat(*q.add(h * hd + d)), x, *ah);
                }
            }
            for (h, &ah) in a.iter().enumerate() {
                if w < S::LANES {
                    S::store_tail(out.add(h * n + t), S::mul(ah, sc), w);
                } else {
                    S::store(out.add(h * n + t), S::mul(ah, sc));
                }
            }
            t += w;
        }
        for t in t..n {
            for h in 0..H {
                let mut x = 0.0f32;
                for d in 0..hd {
                    x += *q.add(h * hd + d) * (*page.add(d * ps + off + t)).to_f32();
                }
                *out.add(h * n + t) = x * scale;
            }
        }
    }
}

/// `out[j · n + t] = scale · q_j·k[off + t]` for the `g = q.len() / hd`
/// query heads `q_j` and the `n = out.len() / g` keys `off..off + n` of
/// `page`, the whole f32 or f16 page of one KV head (`ps` keys by
/// columns), heads taken `H` at a time. The lines of `ahead` (memory
/// the caller reads next; may be empty) are requested a few at a time over
/// all the head blocks' loops ([`Stream`]).
///
/// # Safety
/// The CPU supports `S`; `H <= 4`, `V` 2 or 4; `page` is a whole page of `ps` keys
/// and `off + n <= ps`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn scores_cols<S: Simd, T: Elem, A, const H: usize, const V: usize>(
    q: &[f32],
    hd: usize,
    page: &[T],
    ps: usize,
    off: usize,
    ahead: &[A],
    scale: f32,
    out: &mut [f32],
) {
    let g = q.len() / hd;
    let n = out.len() / g;
    debug_assert!(off + n <= ps);
    let (qp, kp, op) = (q.as_ptr(), page.as_ptr(), out.as_mut_ptr());
    let wide = wide::<H, V>(g);
    let (hb, vecs) = if wide { (g, 2) } else { (H, V) };
    let mut pf = Stream::new(ahead, g.div_ceil(hb) * hd * n.div_ceil(vecs * S::LANES));
    each_block!(g, wide, hb, V, |j| scores_cols_heads::<S, T>(
        qp.add(j * hd),
        hd,
        kp,
        ps,
        off,
        n,
        scale,
        op.add(j * n),
        &mut pf
    ));
    pf.rest();
}

/// How an ISA multiplies the quads of a Q8_0 K page ([`Q8Col`]: four
/// int8 values of a key per 32-bit lane, `LANES` consecutive keys per
/// vector) by four int8 values of a quantized query ([`QBlock`]).
pub(super) trait Quads<S: Simd> {
    /// `true` where [`Quads::dot`] is one instruction (`vpdpbusd`,
    /// `sdot`); elsewhere the kernel widens each quad to four f32 vectors
    /// ([`Quads::value`]) and multiplies them by the query's `qf`, which
    /// is exact: a product of two int8 and a sum of 32 of them fit the 24
    /// bits of an f32 significand, so both paths compute the same integer.
    const DOT: bool;
    /// The quads of `LANES` keys as loaded, and a block's accumulator.
    type I: Copy;
    /// The quads of `LANES` keys at `p` (`4 · LANES` bytes).
    ///
    /// # Safety
    /// The CPU supports the ISA; the bytes are readable.
    unsafe fn load(p: *const i8) -> Self::I;
    /// A block's accumulator before its first [`Quads::dot`], for a query
    /// block whose values sum to `sum` (x86: `-128 · sum`, undoing the
    /// `+128` that makes the keys unsigned for `vpdpbusd`; else zero).
    ///
    /// # Safety
    /// The CPU supports the ISA.
    unsafe fn start(sum: i32) -> Self::I;
    /// `acc + Σ_4 k · q` per lane, `q` the four int8 at `q` (`DOT` only).
    ///
    /// # Safety
    /// The CPU supports the ISA; four bytes at `q`.
    unsafe fn dot(acc: Self::I, k: Self::I, q: *const i8) -> Self::I;
    /// A block's accumulator as f32 (`DOT` only).
    ///
    /// # Safety
    /// The CPU supports the ISA.
    unsafe fn to_f32(acc: Self::I) -> S::V;
    /// Value `i` (`0..4`) of each lane's quad as f32 (not `DOT`).
    ///
    /// # Safety
    /// The CPU supports the ISA.
    unsafe fn value(k: Self::I, i: usize) -> S::V;
    /// The quads at `p` as stored (signed; [`Quads::load`] may flip them).
    ///
    /// # Safety
    /// As [`Quads::load`].
    #[inline(always)]
    unsafe fn load_raw(p: *const i8) -> Self::I {
        // SAFETY: forwarded contract.
        unsafe { Self::load(p) }
    }
    /// `acc + Σ_4 v · w` per lane for quads `v` as stored and the four
    /// weights in `0..=127` at `w` (`DOT` only). Where the instruction is
    /// u8 × s8 the weights are its unsigned operand, so nothing is flipped.
    ///
    /// # Safety
    /// The CPU supports the ISA; four bytes at `w`.
    #[inline(always)]
    unsafe fn dot_weights(acc: Self::I, v: Self::I, w: *const i8) -> Self::I {
        // SAFETY: forwarded contract.
        unsafe { Self::dot(acc, v, w) }
    }
    /// The low byte of each lane's bits of `y` to `LANES` bytes at `out`
    /// (`DOT` only).
    ///
    /// # Safety
    /// The CPU supports the ISA; `LANES` bytes at `out` are writable.
    #[inline(always)]
    unsafe fn narrow(y: S::V, out: *mut i8) {
        let mut f = [0.0f32; 16];
        // SAFETY: LANES <= 16; forwarded contract.
        unsafe {
            S::store(f.as_mut_ptr(), y);
            for (i, x) in f.iter().enumerate().take(S::LANES) {
                *out.add(i) = (x.to_bits() & 0xff) as i8;
            }
        }
    }
}

/// Scores of `H` heads (query blocks `q`, `nb = hd / 32` per head) against
/// the `V · LANES` keys `k..` of a Q8_0 page: `o[h · os + u · LANES + l]`.
/// Per 32-value block the int8 dot products are summed exactly (in i32, or
/// in f32 where that is exact, [`Quads`]), then scaled by the key's and
/// the query block's scales (and `scale`) into `o`: stored after the first
/// block, accumulated after the others. Each quad's keys are loaded once
/// for the `H` heads; each turn of the quad loop requests the next lines
/// of `pf`.
///
/// # Safety
/// The CPU supports `S` and `D`; keys `k..k + V · LANES` lie in the page of
/// `ps` keys at `page`; `o` holds `H` rows of `os ≥ V · LANES` floats.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn scores_q8_chunk<S: Simd, D: Quads<S>, const H: usize, const V: usize>(
    q: *const QBlock,
    nb: usize,
    page: *const Q8Col,
    hd: usize,
    ps: usize,
    k: usize,
    scale: f32,
    o: *mut f32,
    os: usize,
    pf: &mut Stream,
) {
    // SAFETY: forwarded contract; block b of head h is at q + h·nb + b.
    unsafe {
        for b in 0..nb {
            // The integer sums (`DOT`) or the f32 ones; the other is unused.
            let mut a: [[D::I; V]; H] =
                std::array::from_fn(|h| [D::start((*q.add(h * nb + b)).sum); V]);
            let mut f = [[S::zero(); V]; H];
            for j in 0..QK / 4 {
                pf.turn();
                let kq: [D::I; V] = std::array::from_fn(|u| {
                    D::load(Q8Col::value_at(page, ps, b * QK + 4 * j, k + u * S::LANES))
                });
                if D::DOT {
                    for (h, ah) in a.iter_mut().enumerate() {
                        let qp = (*q.add(h * nb + b)).qs.as_ptr().add(4 * j);
                        for (au, &x) in ah.iter_mut().zip(&kq) {
                            *au = D::dot(*au, x, qp);
                        }
                    }
                } else {
                    for i in 0..4 {
                        let kv: [S::V; V] = std::array::from_fn(|u| D::value(kq[u], i));
                        for (h, fh) in f.iter_mut().enumerate() {
                            let qv = S::splat((*q.add(h * nb + b)).qf[4 * j + i]);
                            for (fu, &x) in fh.iter_mut().zip(&kv) {
                                *fu = S::fma(qv, x, *fu);
                            }
                        }
                    }
                }
            }
            if D::DOT {
                for (fh, ah) in f.iter_mut().zip(&a) {
                    for (fu, &au) in fh.iter_mut().zip(ah) {
                        *fu = D::to_f32(au);
                    }
                }
            }
            let mut ks = [S::zero(); V];
            for (u, x) in ks.iter_mut().enumerate() {
                *x = S::load_f16(Q8Col::scale_at(page, hd, ps, b, k + u * S::LANES));
            }
            for (h, fh) in f.iter().enumerate() {
                let qd = S::splat((*q.add(h * nb + b)).d * scale);
                for (u, (&fu, &ku)) in fh.iter().zip(&ks).enumerate() {
                    let p = o.add(h * os + u * S::LANES);
                    let w = S::mul(ku, qd);
                    S::store(
                        p,
                        if b == 0 {
                            S::mul(fu, w)
                        } else {
                            S::fma(fu, w, S::load(p))
                        },
                    );
                }
            }
        }
    }
}

/// [`scores_cols_heads`] for a Q8_0 page and `H` quantized query heads:
/// chunks of `V · LANES` keys, then of `LANES` (the last one reading keys
/// past `n` that are still in the page, and keeping only its first
/// lanes), then scalar (exact i32 dot products per block).
///
/// # Safety
/// As [`scores_q8`], for the `H` heads at `q`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn scores_q8_heads<S: Simd, D: Quads<S>, const H: usize, const V: usize>(
    q: *const QBlock,
    hd: usize,
    page: *const Q8Col,
    ps: usize,
    off: usize,
    n: usize,
    scale: f32,
    out: *mut f32,
    pf: &mut Stream,
) {
    let nb = hd / QK;
    let mut t = 0;
    // SAFETY: full chunks end at or below off + n <= ps; a partial one is
    // taken only while its keys stay in the page, into `tmp` (at most 8
    // heads of one vector of at most 16 lanes); out holds H rows of n.
    unsafe {
        while t + V * S::LANES <= n {
            scores_q8_chunk::<S, D, H, V>(q, nb, page, hd, ps, off + t, scale, out.add(t), n, pf);
            t += V * S::LANES;
        }
        while t < n && off + t + S::LANES <= ps {
            let w = (n - t).min(S::LANES);
            if w == S::LANES {
                scores_q8_chunk::<S, D, H, 1>(
                    q,
                    nb,
                    page,
                    hd,
                    ps,
                    off + t,
                    scale,
                    out.add(t),
                    n,
                    pf,
                );
            } else {
                let mut tmp = [0.0f32; 8 * 16];
                debug_assert!(H <= 8 && S::LANES <= 16);
                let tp = tmp.as_mut_ptr();
                scores_q8_chunk::<S, D, H, 1>(q, nb, page, hd, ps, off + t, scale, tp, 16, pf);
                for h in 0..H {
                    std::ptr::copy_nonoverlapping(tp.add(h * 16), out.add(h * n + t), w);
                }
            }
            t += w;
        }
        let (qs, sc) = Q8Col::split(
            std::slice::from_raw_parts(page, ps * Q8Col::per_key(hd)),
            hd,
            ps,
        );
        for t in t..n {
            for h in 0..H {
                let qh = std::slice::from_raw_parts(q.add(h * nb), nb);
                *out.add(h * n + t) = super::scalar::score_q8(qh, qs, sc, ps, off + t, scale);
            }
        }
    }
}

/// `out[j · n + t] = scale · q_j·k[off + t]` for the `g = q.len() / (hd /
/// 32)` quantized query heads `q_j` and the `n = out.len() / g` keys
/// `off..off + n` of the Q8_0 `page` of one KV head ([`Q8Col`]), heads
/// taken as [`scores_cols`] takes them; `ahead` as there.
///
/// # Safety
/// The CPU supports `S` and `D`; `H <= 4`, `V` 2 or 4; `page` is a whole
/// page of `ps` keys and `off + n <= ps`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn scores_q8<S: Simd, D: Quads<S>, A, const H: usize, const V: usize>(
    q: &[QBlock],
    hd: usize,
    page: &[Q8Col],
    ps: usize,
    off: usize,
    ahead: &[A],
    scale: f32,
    out: &mut [f32],
) {
    let nb = hd / QK;
    let g = q.len() / nb;
    let n = out.len() / g;
    debug_assert!(off + n <= ps && page.len() == ps * Q8Col::per_key(hd));
    let (qp, kp, op) = (q.as_ptr(), page.as_ptr(), out.as_mut_ptr());
    let wide = wide::<H, V>(g);
    let (hb, vecs) = if wide { (g, 2) } else { (H, V) };
    let mut pf = Stream::new(ahead, g.div_ceil(hb) * hd / 4 * n.div_ceil(vecs * S::LANES));
    each_block!(g, wide, hb, V, |j| scores_q8_heads::<S, D>(
        qp.add(j * nb),
        hd,
        kp,
        ps,
        off,
        n,
        scale,
        op.add(j * n),
        &mut pf
    ));
    pf.rest();
}

/// The largest of `s` (NaNs ignored, as `f32::max` does). The tail is a
/// scalar loop on every ISA: a masked load fills with zeros, not -∞.
///
/// # Safety
/// The CPU supports `S`.
#[inline(always)]
pub(super) unsafe fn max<S: Simd>(s: &[f32]) -> f32 {
    let p = s.as_ptr();
    let mut i = 0;
    // SAFETY: full vectors below s.len().
    let mut m = unsafe {
        let mut acc = S::splat(f32::NEG_INFINITY);
        while i + S::LANES <= s.len() {
            acc = S::max(acc, S::load(p.add(i)));
            i += S::LANES;
        }
        S::reduce_max(acc)
    };
    for &x in &s[i..] {
        m = m.max(x);
    }
    m
}

/// `s[j] = e^(s[j] - m)` ([`Simd::exp`]); returns the sum.
///
/// # Safety
/// The CPU supports `S`.
#[inline(always)]
pub(super) unsafe fn exp_sum<S: Simd>(s: &mut [f32], m: f32) -> f32 {
    let n = s.len();
    let p = s.as_mut_ptr();
    let mut i = 0;
    // SAFETY: full vectors below n; the tail is masked to n or scalar.
    let mut sum = unsafe {
        let mv = S::splat(m);
        let mut acc = S::zero();
        if S::MASKED_TAIL {
            while i < n {
                let k = (n - i).min(S::LANES);
                let e = S::exp(S::sub(S::load_tail(p.add(i), k), mv));
                S::store_tail(p.add(i), e, k);
                acc = S::add_tail(acc, e, k);
                i += k;
            }
            return S::reduce_add(acc);
        } else {
            while i + S::LANES <= n {
                let e = S::exp(S::sub(S::load(p.add(i)), mv));
                S::store(p.add(i), e);
                acc = S::add(acc, e);
                i += S::LANES;
            }
        }
        S::reduce_add(acc)
    };
    for x in &mut s[i..] {
        *x = (*x - m).exp();
        sum += *x;
    }
    sum
}

/// `acc_h += Σ_t p[h · n + t] · v[t]` for the `H` heads whose accumulators
/// are at `acc` (`hd` apart) and whose weights are at `p` (`n` apart).
/// Each turn of the row loops requests the next lines of `pf`.
///
/// # Safety
/// As [`accum`], for those `H` heads.
#[inline(always)]
unsafe fn accum_heads<S: Simd, T: Elem, const H: usize, const V: usize>(
    acc: *mut f32,
    hd: usize,
    p: *const f32,
    n: usize,
    v: *const T,
    pf: &mut Stream,
) {
    let mut i = 0;
    // SAFETY: lanes i..i + V·LANES (or i + LANES) are below hd, the tail is
    // masked to hd; row t starts at t·hd; head h's weights at h·n.
    unsafe {
        while i + V * S::LANES <= hd {
            let mut a = [[S::zero(); V]; H];
            for (h, ah) in a.iter_mut().enumerate() {
                for (u, au) in ah.iter_mut().enumerate() {
                    *au = S::load(acc.add(h * hd + i + S::LANES * u));
                }
            }
            for t in 0..n {
                pf.turn();
                let r = v.add(t * hd + i);
                let mut x = [S::zero(); V];
                for (u, xu) in x.iter_mut().enumerate() {
                    *xu = T::load::<S>(r.add(S::LANES * u));
                }
                for (h, ah) in a.iter_mut().enumerate() {
                    let pv = S::splat(*p.add(h * n + t));
                    for (au, &xu) in ah.iter_mut().zip(&x) {
                        *au = S::fma(pv, xu, *au);
                    }
                }
            }
            for (h, ah) in a.iter().enumerate() {
                for (u, au) in ah.iter().enumerate() {
                    S::store(acc.add(h * hd + i + S::LANES * u), *au);
                }
            }
            i += V * S::LANES;
        }
        while i < hd && (S::MASKED_TAIL || i + S::LANES <= hd) {
            let w = (hd - i).min(S::LANES);
            let mut a = [S::zero(); H];
            for (h, ah) in a.iter_mut().enumerate() {
                *ah = if S::MASKED_TAIL {
                    S::load_tail(acc.add(h * hd + i), w)
                } else {
                    S::load(acc.add(h * hd + i))
                };
            }
            for t in 0..n {
                pf.turn();
                let r = v.add(t * hd + i);
                let x = if S::MASKED_TAIL && w < S::LANES {
                    T::load_tail::<S>(r, w)
                } else {
                    T::load::<S>(r)
                };
                for (h, ah) in a.iter_mut().enumerate() {
                    *ah = S::fma(S::splat(*p.add(h * n + t)), x, *ah);
                }
            }
            for (h, ah) in a.iter().enumerate() {
                if S::MASKED_TAIL {
                    S::store_tail(acc.add(h * hd + i), *ah, w);
                } else {
                    S::store(acc.add(h * hd + i), *ah);
                }
            }
            i += w;
        }
        for h in 0..H {
            for t in 0..n {
                let pt = *p.add(h * n + t);
                for j in i..hd {
                    *acc.add(h * hd + j) += pt * (*v.add(t * hd + j)).to_f32();
                }
            }
        }
    }
}

/// `acc_j += Σ_t p[j · n + t] · v[off + t]` for the `g = acc.len() / hd`
/// heads' accumulators `acc_j` over the `n = p.len() / g` value rows
/// `off..off + n` of `page` (`ps` rows of `hd` values), heads taken `H` at
/// a time; the lines of `ahead` are requested over the row loops as
/// [`scores_cols`] requests its own.
///
/// # Safety
/// The CPU supports `S`; `H <= 4`, `V` 2 or 4; `off + n <= ps`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn accum<S: Simd, T: Elem, A, const H: usize, const V: usize>(
    acc: &mut [f32],
    hd: usize,
    p: &[f32],
    page: &[T],
    ps: usize,
    off: usize,
    ahead: &[A],
) {
    let g = acc.len() / hd;
    let n = p.len() / g;
    assert!(
        off + n <= ps && page.len() == ps * hd,
        "rows off..off + n of one page"
    );
    let v = &page[off * hd..(off + n) * hd];
    let (ap, pp, vp) = (acc.as_mut_ptr(), p.as_ptr(), v.as_ptr());
    let wide = wide::<H, V>(g);
    let (hb, vecs) = if wide { (g, 2) } else { (H, V) };
    let mut pf = Stream::new(ahead, g.div_ceil(hb) * hd.div_ceil(vecs * S::LANES) * n);
    each_block!(g, wide, hb, V, |j| accum_heads::<S, T>(
        ap.add(j * hd),
        hd,
        pp.add(j * n),
        n,
        vp,
        &mut pf
    ));
    pf.rest();
}

/// Window `w0..w0 + wl` of a head's weights `p` (`n` of them, for
/// positions `off..off + n`): where the whole window lies in that range,
/// `p` itself, else `buf` filled with the weights in range and zeros.
///
/// # Safety
/// `p` holds `n` floats.
#[inline(always)]
unsafe fn window_row(
    p: *const f32,
    (off, n): (usize, usize),
    (w0, wl): (usize, usize),
    full: bool,
    buf: &mut [f32; QK],
) -> *const f32 {
    // SAFETY: positions in off..off + n index p.
    unsafe {
        if full {
            return p.add(w0 - off);
        }
        *buf = [0.0; QK];
        for (i, x) in buf.iter_mut().enumerate().take(wl) {
            if (off..off + n).contains(&(w0 + i)) {
                *x = *p.add(w0 + i - off);
            }
        }
    }
    buf.as_ptr()
}

/// `acc_h += Σ_t p[h · n + t] · v[off + t]` for the `H` heads whose
/// accumulators are at `acc` (`hd` apart) and whose weights are at `p`
/// (`n` apart), over a Q8_0 V page in quads of positions ([`Q8Col`]).
///
/// The positions go in windows of 32 aligned in the page. In a window,
/// value block `b` weighs position `t` by `w = p_t · d_t,b` (probability
/// times the value's scale). With an int8 dot product (`D::DOT`) each
/// head's weights are rounded to int8 (`0..=127`) on a step of `max_t p_t ·
/// max_t d_t,b / 127`, as llama.cpp rounds the activation of a Q8_0
/// matrix product to Q8_0 blocks but with the two maxima taken apart, so
/// no horizontal max runs per head and block; each quad of 4 positions of
/// `LANES` values meets 4 weights in one `vpdpbusd` / `sdot` (the weights
/// are the unsigned operand of `vpdpbusd`, the values stay as stored), and
/// each block's integer sums are scaled into `acc` after the window.
/// Without one the weights stay f32 and multiply the widened quads. Each
/// quad vector is loaded once for the `H` heads; each quad step requests
/// the next lines of `pf`.
///
/// # Safety
/// The CPU supports `S` and `D`; `page` is a whole V page of `ps`
/// positions of `hd` values, `ps` a multiple of 4, and `off + n <= ps`;
/// `acc` holds `H` rows of `hd`, `p` `H` rows of `n`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn accum_q8_heads<S: Simd, D: Quads<S>, const H: usize, const V: usize>(
    acc: *mut f32,
    hd: usize,
    p: *const f32,
    n: usize,
    page: *const Q8Col,
    ps: usize,
    off: usize,
    pf: &mut Stream,
) {
    // `w · id + 1.5 · 2²³` rounds to the nearest integer and leaves it in
    // the low bits (ties to even).
    const MAGIC: f32 = 12_582_912.0;
    // Vectors per chunk of values: within one 32-value block.
    let vb = V.min(QK / S::LANES);
    let (q0, q1) = (off & !3, (off + n).next_multiple_of(4));
    let mut w0 = off / QK * QK;
    // Per window: the heads' weights where `window_row` copies them; per
    // block, DOT: each head's int8 weights and their step, else the f32
    // weights. Set up once per call: each window or block writes every
    // entry it reads, and zeroing ~1 KiB per window would cost about as
    // much as rounding the weights.
    let mut bufs = [[0.0f32; QK]; H];
    let mut qw = [[0i8; QK]; H];
    let mut step = [0.0f32; H];
    let mut fw = [[0.0f32; QK]; H];
    // SAFETY: quads q0..q1 lie in the page; a window's rows hold `len`
    // floats (`window_row`); chunk c's vb vectors of values lie in block
    // b; acc and p as the contract says.
    unsafe {
        while w0 < q1 {
            let (s0, s1) = (q0.max(w0), q1.min(w0 + QK));
            let wl = QK.min(ps - w0);
            let full = w0 >= off && w0 + wl <= off + n && wl.is_multiple_of(S::LANES);
            let len = if full { wl } else { QK };
            let nv = len / S::LANES;
            let mut rows = [std::ptr::null::<f32>(); H];
            // 1 / max p per head (0 where all are 0).
            let mut ipmax = [0.0f32; H];
            let mut pmax = [0.0f32; H];
            for h in 0..H {
                rows[h] = window_row(p.add(h * n), (off, n), (w0, wl), full, &mut bufs[h]);
                if D::DOT {
                    pmax[h] = max::<S>(std::slice::from_raw_parts(rows[h], len));
                    ipmax[h] = if pmax[h] > 0.0 { 1.0 / pmax[h] } else { 0.0 };
                }
            }
            for b in 0..hd / QK {
                // The window's scales of block b as f32 (zeros out of
                // range), `nv` vectors.
                let mut dv = [S::zero(); 8];
                debug_assert!(QK / S::LANES <= 8);
                if full {
                    for (k, x) in dv.iter_mut().enumerate().take(nv) {
                        *x = S::load_f16(Q8Col::scale_at(page, hd, ps, b, w0 + k * S::LANES));
                    }
                } else {
                    let mut d = [0.0f32; QK];
                    for (i, x) in d.iter_mut().enumerate().take(wl) {
                        if (off..off + n).contains(&(w0 + i)) {
                            *x = (*Q8Col::scale_at(page, hd, ps, b, w0 + i)).to_f32();
                        }
                    }
                    for (k, x) in dv.iter_mut().enumerate().take(nv) {
                        *x = S::load(d.as_ptr().add(k * S::LANES));
                    }
                }
                if D::DOT {
                    let mut m = S::zero();
                    for &x in dv.iter().take(nv) {
                        m = S::max(m, x);
                    }
                    let dmax = S::reduce_max(m);
                    let idm = if dmax > 0.0 { 127.0 / dmax } else { 0.0 };
                    for h in 0..H {
                        // w ≤ max p · max d, so w · id ≤ 127 (up to a few
                        // ulps, far from the 127.5 that would round up).
                        step[h] = pmax[h] * dmax / 127.0;
                        let id = S::splat(idm * ipmax[h]);
                        for (k, &x) in dv.iter().enumerate().take(nv) {
                            let i = k * S::LANES;
                            let w = S::mul(S::load(rows[h].add(i)), x);
                            D::narrow(S::fma(w, id, S::splat(MAGIC)), qw[h].as_mut_ptr().add(i));
                        }
                    }
                } else {
                    for h in 0..H {
                        for (k, &x) in dv.iter().enumerate().take(nv) {
                            let i = k * S::LANES;
                            S::store(
                                fw[h].as_mut_ptr().add(i),
                                S::mul(S::load(rows[h].add(i)), x),
                            );
                        }
                    }
                }
                let mut c = b * QK;
                while c < (b + 1) * QK {
                    let mut a = [[D::start(0); V]; H];
                    let mut f = [[S::zero(); V]; H];
                    if !D::DOT {
                        for (h, fh) in f.iter_mut().enumerate() {
                            for (u, fu) in fh.iter_mut().enumerate().take(vb) {
                                *fu = S::load(acc.add(h * hd + c + u * S::LANES));
                            }
                        }
                    }
                    for t in (s0..s1).step_by(4) {
                        pf.turn();
                        let mut vq = [D::start(0); V];
                        for (u, x) in vq.iter_mut().enumerate().take(vb) {
                            *x = D::load_raw(Q8Col::pos_at(page, hd, c + u * S::LANES, t));
                        }
                        let i = t - w0;
                        if D::DOT {
                            for (ah, qh) in a.iter_mut().zip(&qw) {
                                let wq = qh.as_ptr().add(i);
                                for (au, &x) in ah.iter_mut().zip(&vq).take(vb) {
                                    *au = D::dot_weights(*au, x, wq);
                                }
                            }
                        } else {
                            for k in 0..4 {
                                let mut x = [S::zero(); V];
                                for (xu, &q) in x.iter_mut().zip(&vq).take(vb) {
                                    *xu = D::value(q, k);
                                }
                                for (fh, wh) in f.iter_mut().zip(&fw) {
                                    let wv = S::splat(wh[i + k]);
                                    for (fu, &xu) in fh.iter_mut().zip(&x).take(vb) {
                                        *fu = S::fma(wv, xu, *fu);
                                    }
                                }
                            }
                        }
                    }
                    for h in 0..H {
                        for u in 0..vb {
                            let o = acc.add(h * hd + c + u * S::LANES);
                            if D::DOT {
                                let dq = S::splat(step[h]);
                                S::store(o, S::fma(D::to_f32(a[h][u]), dq, S::load(o)));
                            } else {
                                S::store(o, f[h][u]);
                            }
                        }
                    }
                    c += vb * S::LANES;
                }
            }
            w0 += QK;
        }
    }
}

/// `acc_j += Σ_t p[j · n + t] · v[off + t]` for the `g = acc.len() / hd`
/// heads' accumulators `acc_j` over positions `off..off + n` (`n =
/// p.len() / g`) of the Q8_0 V `page` of `ps` positions, heads taken as
/// [`accum`] takes them; `ahead` as there.
///
/// # Safety
/// The CPU supports `S` and `D`; `H <= 4`, `V` 2 or 4; `page` is a whole
/// page of `ps` positions and `off + n <= ps`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn accum_q8<S: Simd, D: Quads<S>, A, const H: usize, const V: usize>(
    acc: &mut [f32],
    hd: usize,
    p: &[f32],
    page: &[Q8Col],
    ps: usize,
    off: usize,
    ahead: &[A],
) {
    let g = acc.len() / hd;
    let n = p.len() / g;
    assert!(
        off + n <= ps && page.len() == ps * Q8Col::per_key(hd),
        "positions off..off + n of one page"
    );
    let (ap, pp, vp) = (acc.as_mut_ptr(), p.as_ptr(), page.as_ptr());
    let wide = wide::<H, V>(g);
    let (hb, vecs) = if wide { (g, 2) } else { (H, V) };
    let vb = vecs.min(QK / S::LANES);
    let quads = (off + n).div_ceil(4) - off / 4;
    let mut pf = Stream::new(ahead, g.div_ceil(hb) * hd.div_ceil(vb * S::LANES) * quads);
    each_block!(g, wide, hb, V, |j| accum_q8_heads::<S, D>(
        ap.add(j * hd),
        hd,
        pp.add(j * n),
        n,
        vp,
        ps,
        off,
        &mut pf
    ));
    pf.rest();
}

/// Stamps out one ISA's page kernels (`scores_f32`, `scores_f16`,
/// `scores_q8`, the matching `accum_*`, `max`, `exp_sum`) as
/// `#[target_feature]` entry points over the bodies above: `isa` is the
/// [`Simd`] marker, `heads` the head block `H`, `vecs` its width `V` in
/// vectors, `quads` the [`Quads`] of `scores_q8` and `accum_q8`, `feature`
/// its `target_feature` list, `needs` the same in words for the safety
/// docs. The `q8_dot` arm stamps only `scores_q8_dot` and `accum_q8_dot`,
/// for the same ISA with an int8 dot-product instruction (its own `quads`
/// and `feature`).
macro_rules! page_kernels {
    (isa: $isa:ty, heads: $h:literal, vecs: $v:literal, quads: $quads:ty, feature: $feature:literal, needs: $needs:literal $(,)?) => {
        super::body::page_kernels!(@float $isa, $h, $v, $feature, $needs, f32, scores_f32, accum_f32);
        super::body::page_kernels!(@float $isa, $h, $v, $feature, $needs, half::f16, scores_f16, accum_f16);
        super::body::page_kernels!(@q8 $isa, $h, $v, $quads, $feature, $needs, scores_q8, accum_q8);

        /// The largest of `s`.
        ///
        /// # Safety
        #[doc = concat!($needs, ".")]
        #[target_feature(enable = $feature)]
        pub unsafe fn max(s: &[f32]) -> f32 {
            // SAFETY: forwarded contract.
            unsafe { super::body::max::<$isa>(s) }
        }

        /// `s[j] = e^(s[j] - m)`; returns the sum.
        ///
        /// # Safety
        #[doc = concat!($needs, ".")]
        #[target_feature(enable = $feature)]
        pub unsafe fn exp_sum(s: &mut [f32], m: f32) -> f32 {
            // SAFETY: forwarded contract.
            unsafe { super::body::exp_sum::<$isa>(s, m) }
        }
    };
    (q8_dot: $isa:ty, heads: $h:literal, vecs: $v:literal, quads: $quads:ty, feature: $feature:literal, needs: $needs:literal $(,)?) => {
        super::body::page_kernels!(@q8 $isa, $h, $v, $quads, $feature, $needs, scores_q8_dot, accum_q8_dot);
    };
    (@float $isa:ty, $h:literal, $v:literal, $feature:literal, $needs:literal, $t:ty, $scores:ident, $accum:ident) => {
        /// # Safety
        #[doc = concat!($needs, "; `page` is one KV head's page of `ps` keys and \
            `off + out.len() / (q.len() / hd) <= ps`.")]
        #[target_feature(enable = $feature)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn $scores(
            q: &[f32],
            hd: usize,
            page: &[$t],
            ps: usize,
            off: usize,
            ahead: &[$t],
            scale: f32,
            out: &mut [f32],
        ) {
            // SAFETY: forwarded contract.
            unsafe {
                super::body::scores_cols::<$isa, $t, $t, $h, $v>(q, hd, page, ps, off, ahead, scale, out)
            }
        }

        /// # Safety
        #[doc = concat!($needs, "; `page` is one KV head's V page of `ps` positions and \
            `off + p.len() / (acc.len() / hd) <= ps`.")]
        #[target_feature(enable = $feature)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn $accum(
            acc: &mut [f32],
            hd: usize,
            p: &[f32],
            page: &[$t],
            ps: usize,
            off: usize,
            ahead: &[$t],
        ) {
            // SAFETY: forwarded contract.
            unsafe { super::body::accum::<$isa, $t, $t, $h, $v>(acc, hd, p, page, ps, off, ahead) }
        }
    };
    (@q8 $isa:ty, $h:literal, $v:literal, $quads:ty, $feature:literal, $needs:literal, $scores:ident, $accum:ident) => {
        /// # Safety
        #[doc = concat!($needs, "; `page` is one KV head's page of `ps` keys and \
            `off + out.len() / (q.len() / (hd / 32)) <= ps`.")]
        #[target_feature(enable = $feature)]
        #[allow(clippy::too_many_arguments)]
        pub(crate) unsafe fn $scores(
            q: &[super::QBlock],
            hd: usize,
            page: &[super::Q8Col],
            ps: usize,
            off: usize,
            ahead: &[super::Q8Col],
            scale: f32,
            out: &mut [f32],
        ) {
            // SAFETY: forwarded contract.
            unsafe {
                super::body::scores_q8::<$isa, $quads, _, $h, $v>(q, hd, page, ps, off, ahead, scale, out)
            }
        }

        /// # Safety
        #[doc = concat!($needs, "; `page` is one KV head's V page of `ps` positions and \
            `off + p.len() / (acc.len() / hd) <= ps`.")]
        #[target_feature(enable = $feature)]
        #[allow(clippy::too_many_arguments)]
        pub(crate) unsafe fn $accum(
            acc: &mut [f32],
            hd: usize,
            p: &[f32],
            page: &[super::Q8Col],
            ps: usize,
            off: usize,
            ahead: &[super::Q8Col],
        ) {
            // SAFETY: forwarded contract.
            unsafe { super::body::accum_q8::<$isa, $quads, _, $h, $v>(acc, hd, p, page, ps, off, ahead) }
        }
    };
}
pub(super) use page_kernels;
