//! The f32, f16 and Q8_0 page kernels, written once against [`Simd`], and
//! the macro that stamps them out per ISA.
//!
//! Both kernels take the whole group of query heads that share a KV head,
//! so each key or value vector is loaded (and, for f16 and Q8_0, widened,
//! and for Q8_0 scaled) once for a block of heads instead of once per
//! head: blocks of up to `H = 4` heads `V` vectors wide, `V` the most whose
//! accumulators fit the register file beside the key or value vectors (4
//! with 32 registers, 2 with AVX2's 16), or, with 32 registers and a group
//! of 5–8 heads, the whole group two vectors wide ([`wide`]). AVX2 takes
//! four heads two vectors wide rather than two heads four wide: the same
//! 8 accumulators, but each key or value vector is widened (Q8_0: and
//! scaled, three instructions) for four heads instead of two.
//!
//! Scores ([`scores_cols`]) read keys stored by columns: the lanes are
//! keys and each head's query value `d` is broadcast against key values
//! `d`, so every lane sums its dot product in one register ([`KeyCols`]).
//! The value axpy keeps a slice of each head's accumulator in registers
//! across all rows of the page, so it is loaded and stored once per page.
//! Tails (keys, or head-dim for values) are masked vectors on AVX-512 and
//! scalar loops elsewhere.

use super::Q8Col;
use crate::prefetch::Stream;
use crate::quant::{BlockQ8_0, QK};
use crate::simd::{Elem, Simd};
use half::f16;

/// A V page element type as the kernels read a head row of `hd` values:
/// f32 and f16 store them as they are, Q8_0 as `hd / 32` blocks whose
/// vectors are widened and scaled by the block's `d` once, before every
/// head of the block uses them (each vector lies in one block: `LANES`
/// divides 32).
pub(super) trait PageRow: Copy {
    /// Elements per head row.
    fn stride(hd: usize) -> usize;
    /// Values `i..i + LANES` of the row at `row`.
    ///
    /// # Safety
    /// As [`Simd::load`]; the row holds them.
    unsafe fn load<S: Simd>(row: *const Self, i: usize) -> S::V;
    /// Values `i..i + n` (`n <= LANES`), zero after; only when
    /// `MASKED_TAIL` and `hd` is not a multiple of `LANES` (never Q8_0).
    ///
    /// # Safety
    /// As [`Simd::load_tail`].
    unsafe fn load_tail<S: Simd>(row: *const Self, i: usize, n: usize) -> S::V;
    /// Value `j`, for the scalar tails.
    ///
    /// # Safety
    /// The row holds it.
    unsafe fn value(row: *const Self, j: usize) -> f32;
}

macro_rules! plain_row {
    ($t:ty) => {
        impl PageRow for $t {
            #[inline(always)]
            fn stride(hd: usize) -> usize {
                hd
            }
            #[inline(always)]
            unsafe fn load<S: Simd>(row: *const Self, i: usize) -> S::V {
                // SAFETY: forwarded contract.
                unsafe { <$t as Elem>::load::<S>(row.add(i)) }
            }
            #[inline(always)]
            unsafe fn load_tail<S: Simd>(row: *const Self, i: usize, n: usize) -> S::V {
                // SAFETY: forwarded contract.
                unsafe { <$t as Elem>::load_tail::<S>(row.add(i), n) }
            }
            #[inline(always)]
            unsafe fn value(row: *const Self, j: usize) -> f32 {
                // SAFETY: forwarded contract.
                unsafe { Elem::to_f32(*row.add(j)) }
            }
        }
    };
}
plain_row!(f32);
plain_row!(f16);

impl PageRow for BlockQ8_0 {
    #[inline(always)]
    fn stride(hd: usize) -> usize {
        hd / QK
    }
    #[inline(always)]
    unsafe fn load<S: Simd>(row: *const Self, i: usize) -> S::V {
        // SAFETY: block i / 32 is in the row; lanes i % 32.. stay in it.
        unsafe {
            let b = &*row.add(i / QK);
            S::mul(
                S::load_i8(b.qs.as_ptr().add(i % QK)),
                S::splat_f16(f16::from_le_bytes(b.d.0)),
            )
        }
    }
    #[inline(always)]
    unsafe fn load_tail<S: Simd>(_row: *const Self, _i: usize, _n: usize) -> S::V {
        unreachable!("Q8_0 head rows are whole 32-blocks")
    }
    #[inline(always)]
    unsafe fn value(row: *const Self, j: usize) -> f32 {
        // SAFETY: the row holds block j / 32.
        let b = unsafe { &*row.add(j / QK) };
        b.d.to_f32() * b.qs[j % QK] as f32
    }
}

/// A K page element type as the score kernels read it: one KV head's
/// page holds `ps` keys by columns, value `d` of key `t` at `d · ps + t`
/// for f32 and f16, and as [`Q8Col`] lays it out for Q8_0, whose vectors
/// are widened and multiplied by their keys' block scales once, before
/// every head of the group uses them.
pub(super) trait KeyCols: Copy {
    /// Head-dim values that share a scale per key (f32 and f16: all).
    fn block(hd: usize) -> usize;
    /// The scales of keys `t..t + LANES` in head-dim block `b`, the `sc`
    /// that [`KeyCols::load`] takes (f32 and f16: none).
    ///
    /// # Safety
    /// As [`Simd::load`]; `page` is a whole page and the keys are in it.
    unsafe fn scales<S: Simd>(page: *const Self, hd: usize, ps: usize, b: usize, t: usize) -> S::V;
    /// Those of keys `t..t + n` (`n <= LANES`); only when `MASKED_TAIL`.
    ///
    /// # Safety
    /// As [`Simd::load_tail`]; as [`KeyCols::scales`].
    unsafe fn scales_tail<S: Simd>(
        page: *const Self,
        hd: usize,
        ps: usize,
        b: usize,
        t: usize,
        n: usize,
    ) -> S::V;
    /// Values `d` of keys `t..t + LANES`, `sc` their block's scales.
    ///
    /// # Safety
    /// As [`KeyCols::scales`].
    unsafe fn load<S: Simd>(page: *const Self, ps: usize, d: usize, t: usize, sc: S::V) -> S::V;
    /// Those of keys `t..t + n`, zero after; only when `MASKED_TAIL`.
    ///
    /// # Safety
    /// As [`KeyCols::scales_tail`].
    unsafe fn load_tail<S: Simd>(
        page: *const Self,
        ps: usize,
        d: usize,
        t: usize,
        n: usize,
        sc: S::V,
    ) -> S::V;
    /// Value `d` of key `t`, for the scalar tails.
    ///
    /// # Safety
    /// The page holds it.
    unsafe fn value(page: *const Self, hd: usize, ps: usize, d: usize, t: usize) -> f32;
}

impl<T: Elem> KeyCols for T {
    #[inline(always)]
    fn block(hd: usize) -> usize {
        hd
    }
    #[inline(always)]
    unsafe fn scales<S: Simd>(_: *const T, _: usize, _: usize, _: usize, _: usize) -> S::V {
        // SAFETY: no memory is touched.
        unsafe { S::zero() }
    }
    #[inline(always)]
    unsafe fn scales_tail<S: Simd>(
        _: *const T,
        _: usize,
        _: usize,
        _: usize,
        _: usize,
        _: usize,
    ) -> S::V {
        // SAFETY: no memory is touched.
        unsafe { S::zero() }
    }
    #[inline(always)]
    unsafe fn load<S: Simd>(page: *const T, ps: usize, d: usize, t: usize, _: S::V) -> S::V {
        // SAFETY: forwarded contract.
        unsafe { T::load::<S>(page.add(d * ps + t)) }
    }
    #[inline(always)]
    unsafe fn load_tail<S: Simd>(
        page: *const T,
        ps: usize,
        d: usize,
        t: usize,
        n: usize,
        _: S::V,
    ) -> S::V {
        // SAFETY: forwarded contract.
        unsafe { T::load_tail::<S>(page.add(d * ps + t), n) }
    }
    #[inline(always)]
    unsafe fn value(page: *const T, _: usize, ps: usize, d: usize, t: usize) -> f32 {
        // SAFETY: forwarded contract.
        unsafe { Elem::to_f32(*page.add(d * ps + t)) }
    }
}

impl KeyCols for Q8Col {
    #[inline(always)]
    fn block(_: usize) -> usize {
        QK
    }
    #[inline(always)]
    unsafe fn scales<S: Simd>(
        page: *const Q8Col,
        hd: usize,
        ps: usize,
        b: usize,
        t: usize,
    ) -> S::V {
        // SAFETY: scales t.. of block b are in the page.
        unsafe { S::load_f16(Q8Col::scale_at(page, hd, ps, b, t)) }
    }
    #[inline(always)]
    unsafe fn scales_tail<S: Simd>(
        page: *const Q8Col,
        hd: usize,
        ps: usize,
        b: usize,
        t: usize,
        n: usize,
    ) -> S::V {
        // SAFETY: as in `scales`.
        unsafe { S::load_tail_f16(Q8Col::scale_at(page, hd, ps, b, t), n) }
    }
    #[inline(always)]
    unsafe fn load<S: Simd>(page: *const Q8Col, ps: usize, d: usize, t: usize, sc: S::V) -> S::V {
        // SAFETY: byte d · ps + t and the lanes after it are in the int8 part.
        unsafe { S::mul(S::load_i8(Q8Col::value_at(page, ps, d, t)), sc) }
    }
    #[inline(always)]
    unsafe fn load_tail<S: Simd>(
        page: *const Q8Col,
        ps: usize,
        d: usize,
        t: usize,
        n: usize,
        sc: S::V,
    ) -> S::V {
        // SAFETY: as in `load`, for n lanes.
        unsafe { S::mul(S::load_tail_i8(Q8Col::value_at(page, ps, d, t), n), sc) }
    }
    #[inline(always)]
    unsafe fn value(page: *const Q8Col, hd: usize, ps: usize, d: usize, t: usize) -> f32 {
        // SAFETY: the page holds value d of key t and its block's scale.
        unsafe {
            (*Q8Col::scale_at(page, hd, ps, d / QK, t)).to_f32()
                * *Q8Col::value_at(page, ps, d, t) as f32
        }
    }
}

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

/// Scores of `H` heads against keys `off..off + n` of a page stored by
/// columns (`page` at its first key, [`KeyCols`]): `out[h · n + t]`.
/// Lanes are keys, so each lane's sum runs over `d` in one register and
/// no horizontal sums are needed; each key vector is loaded (and widened,
/// and scaled) once for the `H` heads, whose query values are broadcast.
/// Each turn of the `d` loops requests the next lines of `pf`.
///
/// # Safety
/// As [`scores_cols`], for the `H` heads at `q`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn scores_cols_heads<S: Simd, T: KeyCols, const H: usize, const V: usize>(
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
    let blk = T::block(hd);
    let mut t = 0;
    // SAFETY: keys off + t.. off + t + V·LANES (or + w) lie below off + n
    // <= ps in every row d of the page; out holds H rows of n.
    unsafe {
        let sc = S::splat(scale);
        while t + V * S::LANES <= n {
            let k = off + t;
            let mut a = [[S::zero(); V]; H];
            for d0 in (0..hd).step_by(blk) {
                let mut s = [S::zero(); V];
                for (u, x) in s.iter_mut().enumerate() {
                    *x = T::scales::<S>(page, hd, ps, d0 / blk, k + u * S::LANES);
                }
                for d in d0..d0 + blk {
                    pf.turn();
                    let mut kv = [S::zero(); V];
                    for (u, x) in kv.iter_mut().enumerate() {
                        *x = T::load::<S>(page, ps, d, k + u * S::LANES, s[u]);
                    }
                    for (h, ah) in a.iter_mut().enumerate() {
                        let qv = S::splat(*q.add(h * hd + d));
                        for (au, &x) in ah.iter_mut().zip(&kv) {
                            *au = S::fma(qv, x, *au);
                        }
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
            for d0 in (0..hd).step_by(blk) {
                let s = if w < S::LANES {
                    T::scales_tail::<S>(page, hd, ps, d0 / blk, k, w)
                } else {
                    T::scales::<S>(page, hd, ps, d0 / blk, k)
                };
                for d in d0..d0 + blk {
                    pf.turn();
                    let x = if w < S::LANES {
                        T::load_tail::<S>(page, ps, d, k, w, s)
                    } else {
                        T::load::<S>(page, ps, d, k, s)
                    };
                    for (h, ah) in a.iter_mut().enumerate() {
                        *ah = S::fma(S::splat(*q.add(h * hd + d)), x, *ah);
                    }
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
                    x += *q.add(h * hd + d) * T::value(page, hd, ps, d, off + t);
                }
                *out.add(h * n + t) = x * scale;
            }
        }
    }
}

/// `out[j · n + t] = scale · q_j·k[off + t]` for the `g = q.len() / hd`
/// query heads `q_j` and the `n = out.len() / g` keys `off..off + n` of
/// `page`, the whole page of one KV head (`ps` keys by columns,
/// [`KeyCols`]), heads taken `H` at a time. The lines of `ahead` (memory
/// the caller reads next; may be empty) are requested a few at a time over
/// all the head blocks' loops ([`Stream`]).
///
/// # Safety
/// The CPU supports `S`; `H <= 4`, `V` 2 or 4; `page` is a whole page of `ps` keys
/// and `off + n <= ps`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn scores_cols<S: Simd, T: KeyCols, A, const H: usize, const V: usize>(
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
    let mut j = 0;
    while j < g {
        let h = (g - j).min(hb);
        // SAFETY: heads j..j + h of q and rows j..j + h of out exist.
        unsafe {
            heads_of!(
                h,
                wide,
                V,
                scores_cols_heads::<S, T>(
                    qp.add(j * hd),
                    hd,
                    kp,
                    ps,
                    off,
                    n,
                    scale,
                    op.add(j * n),
                    &mut pf
                )
            );
        }
        j += h;
    }
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
unsafe fn accum_heads<S: Simd, T: PageRow, const H: usize, const V: usize>(
    acc: *mut f32,
    hd: usize,
    p: *const f32,
    n: usize,
    v: *const T,
    pf: &mut Stream,
) {
    let st = T::stride(hd);
    let mut i = 0;
    // SAFETY: lanes i..i + V·LANES (or i + LANES) are below hd, the tail is
    // masked to hd; row t starts at t·st; head h's weights at h·n.
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
                let r = v.add(t * st);
                let mut x = [S::zero(); V];
                for (u, xu) in x.iter_mut().enumerate() {
                    *xu = T::load::<S>(r, i + S::LANES * u);
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
                let r = v.add(t * st);
                let x = if S::MASKED_TAIL && w < S::LANES {
                    T::load_tail::<S>(r, i, w)
                } else {
                    T::load::<S>(r, i)
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
                    *acc.add(h * hd + j) += pt * T::value(v.add(t * st), j);
                }
            }
        }
    }
}

/// `acc_j += Σ_t p[j · n + t] · v[t]` for the `g = acc.len() / hd` heads'
/// accumulators `acc_j` over the `n = p.len() / g` value rows of `v`,
/// heads taken `H` at a time; the lines of `ahead` are requested over the
/// row loops as [`scores`] requests its own.
///
/// # Safety
/// The CPU supports `S`; `H <= 4`, `V` 2 or 4; `v` holds `n` rows of `hd` values.
#[inline(always)]
pub(super) unsafe fn accum<S: Simd, T: PageRow, A, const H: usize, const V: usize>(
    acc: &mut [f32],
    hd: usize,
    p: &[f32],
    v: &[T],
    ahead: &[A],
) {
    let g = acc.len() / hd;
    let n = p.len() / g;
    debug_assert_eq!(v.len(), n * T::stride(hd));
    let (ap, pp, vp) = (acc.as_mut_ptr(), p.as_ptr(), v.as_ptr());
    let wide = wide::<H, V>(g);
    let (hb, vecs) = if wide { (g, 2) } else { (H, V) };
    let mut pf = Stream::new(ahead, g.div_ceil(hb) * hd.div_ceil(vecs * S::LANES) * n);
    let mut j = 0;
    while j < g {
        let h = (g - j).min(hb);
        // SAFETY: heads j..j + h of acc and of p exist.
        unsafe {
            heads_of!(
                h,
                wide,
                V,
                accum_heads::<S, T>(ap.add(j * hd), hd, pp.add(j * n), n, vp, &mut pf)
            );
        }
        j += h;
    }
    pf.rest();
}

/// Stamps out one ISA's page kernels (`scores_f32`, `scores_f16`,
/// `scores_q8`, the matching `accum_*`, `max`, `exp_sum`) as
/// `#[target_feature]` entry points over the bodies above: `isa` is the
/// [`Simd`] marker, `heads` the head block `H`, `vecs` its width `V` in
/// vectors, `feature` its `target_feature` list, `needs` the same in words
/// for the safety docs.
macro_rules! page_kernels {
    (isa: $isa:ty, heads: $h:literal, vecs: $v:literal, feature: $feature:literal, needs: $needs:literal $(,)?) => {
        super::body::page_kernels!(
            @dtype $isa, $h, $v, $feature, $needs, f32, f32, scores_f32, accum_f32
        );
        super::body::page_kernels!(
            @dtype $isa, $h, $v, $feature, $needs, half::f16, half::f16, scores_f16, accum_f16
        );
        super::body::page_kernels!(
            @dtype $isa, $h, $v, $feature, $needs, crate::quant::BlockQ8_0, super::Q8Col, scores_q8,
            accum_q8
        );

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
    (@dtype $isa:ty, $h:literal, $v:literal, $feature:literal, $needs:literal, $t:ty, $k:ty, $scores:ident, $accum:ident) => {
        /// # Safety
        #[doc = concat!($needs, "; `page` is one KV head's page of `ps` keys and \
            `off + out.len() / (q.len() / hd) <= ps`.")]
        #[target_feature(enable = $feature)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn $scores(
            q: &[f32],
            hd: usize,
            page: &[$k],
            ps: usize,
            off: usize,
            ahead: &[$t],
            scale: f32,
            out: &mut [f32],
        ) {
            // SAFETY: forwarded contract.
            unsafe {
                super::body::scores_cols::<$isa, $k, $t, $h, $v>(q, hd, page, ps, off, ahead, scale, out)
            }
        }

        /// # Safety
        #[doc = concat!($needs, "; `v` holds `p.len() / (acc.len() / hd)` head rows.")]
        #[target_feature(enable = $feature)]
        pub unsafe fn $accum(acc: &mut [f32], hd: usize, p: &[f32], v: &[$t], ahead: &[$k]) {
            // SAFETY: forwarded contract.
            unsafe { super::body::accum::<$isa, $t, $k, $h, $v>(acc, hd, p, v, ahead) }
        }
    };
}
pub(super) use page_kernels;
