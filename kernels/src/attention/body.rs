//! The f32, f16 and Q8_0 page kernels, written once against [`Simd`], and
//! the macro that stamps them out per ISA.
//!
//! Both kernels take the whole group of query heads that share a KV head,
//! so each key or value vector is loaded (and, for f16, widened) once for
//! up to `H` heads instead of once per head; `H` is the most heads whose
//! accumulators fit the ISA's register file beside the key or value
//! vectors (4 with 32 registers, 2 with AVX2's 16).
//!
//! Scores over f32 and f16 pages ([`scores_cols`]) read keys stored by
//! columns: the lanes are keys, four vectors of them at a time, and each
//! head's query value `d` is broadcast against key values `d`, so every
//! lane sums its dot product in one register. Q8_0 keys are rows
//! ([`scores`]): four key rows at a time, their `H × 4` dot products
//! independent FMA chains, each head's four reduced by one
//! [`Simd::reduce_add4`] tree. The value axpy keeps a four-vector slice of
//! `H` accumulators in registers across all rows of the page, so it is
//! loaded and stored once per page. Tails (keys, or head-dim for rows) are
//! masked vectors on AVX-512 and scalar loops elsewhere.

use crate::prefetch::Stream;
use crate::quant::{BlockQ8_0, QK};
use crate::simd::{Elem, Simd};
use half::f16;

/// A page element type as the kernels read a head row of `hd` values:
/// f32 and f16 store them as they are, Q8_0 as `hd / 32` blocks whose
/// vectors are widened and scaled by the block's `d` once, before every
/// head of the group uses them (each vector lies in one block: `LANES`
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
                S::splat(b.d.to_f32()),
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

/// `f::<h>(args)` for `h = min(left, H)` heads, `H <= 4`: the head-block
/// widths a group of any size splits into.
macro_rules! heads_of {
    ($h:expr, $f:ident::<$s:ty, $t:ty>($($arg:expr),*)) => {
        match $h {
            1 => $f::<$s, $t, 1>($($arg),*),
            2 => $f::<$s, $t, 2>($($arg),*),
            3 => $f::<$s, $t, 3>($($arg),*),
            _ => $f::<$s, $t, 4>($($arg),*),
        }
    };
}

/// Dot products of the `H` query heads at `q` (`hd` apart) with the `R`
/// head rows at `k`: `[head][row]`.
///
/// # Safety
/// The CPU supports `S`; `q` valid for `H · hd` reads, `k` holds `R` rows.
#[inline(always)]
unsafe fn dot_block<S: Simd, T: PageRow, const H: usize, const R: usize>(
    q: *const f32,
    hd: usize,
    k: *const T,
) -> [[f32; R]; H] {
    let st = T::stride(hd);
    let mut dots = [[0.0f32; R]; H];
    // SAFETY: full loads stay below hd; the tail is masked to it or scalar.
    unsafe {
        let mut a = [[S::zero(); R]; H];
        let mut i = 0;
        while i + S::LANES <= hd {
            let mut kv = [S::zero(); R];
            for (r, x) in kv.iter_mut().enumerate() {
                *x = T::load::<S>(k.add(r * st), i);
            }
            for (h, ah) in a.iter_mut().enumerate() {
                let qv = S::load(q.add(h * hd + i));
                for (ar, &x) in ah.iter_mut().zip(&kv) {
                    *ar = S::fma(qv, x, *ar);
                }
            }
            i += S::LANES;
        }
        if S::MASKED_TAIL && i < hd {
            let mut kv = [S::zero(); R];
            for (r, x) in kv.iter_mut().enumerate() {
                *x = T::load_tail::<S>(k.add(r * st), i, hd - i);
            }
            for (h, ah) in a.iter_mut().enumerate() {
                let qv = S::load_tail(q.add(h * hd + i), hd - i);
                for (ar, &x) in ah.iter_mut().zip(&kv) {
                    *ar = S::fma(qv, x, *ar);
                }
            }
        }
        for (h, (dh, ah)) in dots.iter_mut().zip(&a).enumerate() {
            if R == 4 {
                dh.copy_from_slice(&S::reduce_add4([ah[0], ah[1], ah[2], ah[3]]));
            } else {
                for (d, &x) in dh.iter_mut().zip(ah) {
                    *d = S::reduce_add(x);
                }
            }
            if !S::MASKED_TAIL {
                for (r, d) in dh.iter_mut().enumerate() {
                    for j in i..hd {
                        *d += *q.add(h * hd + j) * T::value(k.add(r * st), j);
                    }
                }
            }
        }
    }
    dots
}

/// Scores of `H` heads against all `n` rows: `out[h · n + t]`. Each turn
/// of the row loop requests the next lines of `pf`.
///
/// # Safety
/// As [`scores`], for the `H` heads at `q`.
#[inline(always)]
unsafe fn scores_heads<S: Simd, T: PageRow, const H: usize>(
    q: *const f32,
    hd: usize,
    k: *const T,
    n: usize,
    scale: f32,
    out: *mut f32,
    pf: &mut Stream,
) {
    let st = T::stride(hd);
    let mut t = 0;
    // SAFETY: rows t..t + 4 (or t) lie within k; out holds H rows of n.
    unsafe {
        while t + 4 <= n {
            pf.turn();
            let d = dot_block::<S, T, H, 4>(q, hd, k.add(t * st));
            for (h, dh) in d.iter().enumerate() {
                for (r, &x) in dh.iter().enumerate() {
                    *out.add(h * n + t + r) = x * scale;
                }
            }
            t += 4;
        }
        while t < n {
            pf.turn();
            let d = dot_block::<S, T, H, 1>(q, hd, k.add(t * st));
            for (h, dh) in d.iter().enumerate() {
                *out.add(h * n + t) = dh[0] * scale;
            }
            t += 1;
        }
    }
}

/// `out[j · n + t] = scale · q_j·k[t]` for the `g = q.len() / hd` query
/// heads `q_j` and the `n = out.len() / g` key rows of `k`, heads taken
/// `H` at a time. The lines of `ahead` (memory the caller reads next; may
/// be empty) are requested a few at a time over all the head blocks' row
/// loops ([`Stream`]).
///
/// # Safety
/// The CPU supports `S`; `H <= 4`; `k` holds `n` rows of `hd` values.
#[inline(always)]
pub(super) unsafe fn scores<S: Simd, T: PageRow, const H: usize>(
    q: &[f32],
    hd: usize,
    k: &[T],
    ahead: &[T],
    scale: f32,
    out: &mut [f32],
) {
    let g = q.len() / hd;
    let n = out.len() / g;
    debug_assert_eq!(k.len(), n * T::stride(hd));
    let (qp, kp, op) = (q.as_ptr(), k.as_ptr(), out.as_mut_ptr());
    let mut pf = Stream::new(ahead, g.div_ceil(H) * (n / 4 + n % 4));
    let mut j = 0;
    while j < g {
        let h = (g - j).min(H);
        // SAFETY: heads j..j + h of q and rows j..j + h of out exist.
        unsafe {
            heads_of!(
                h,
                scores_heads::<S, T>(qp.add(j * hd), hd, kp, n, scale, op.add(j * n), &mut pf)
            );
        }
        j += h;
    }
    pf.rest();
}

/// Scores of `H` heads against `n` keys of a page stored by columns
/// (element `d` of key `t` at `k[d · ps + t]`, `k` at the first key):
/// `out[h · n + t]`. Lanes are keys, so each lane's sum runs over `d` in
/// one register and no horizontal sums are needed; each key vector is
/// loaded (and widened) once for the `H` heads, whose query values are
/// broadcast. Each turn of the `d` loops requests the next lines of `pf`.
///
/// # Safety
/// As [`scores_cols`], for the `H` heads at `q`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn scores_cols_heads<S: Simd, T: Elem, const H: usize>(
    q: *const f32,
    hd: usize,
    k: *const T,
    ps: usize,
    n: usize,
    scale: f32,
    out: *mut f32,
    pf: &mut Stream,
) {
    let mut t = 0;
    // SAFETY: keys t..t + 4·LANES (or t + w) lie below n in every row d of
    // the page; out holds H rows of n.
    unsafe {
        let sc = S::splat(scale);
        while t + 4 * S::LANES <= n {
            let mut a = [[S::zero(); 4]; H];
            for d in 0..hd {
                pf.turn();
                let kr = k.add(d * ps + t);
                let mut kv = [S::zero(); 4];
                for (u, x) in kv.iter_mut().enumerate() {
                    *x = T::load::<S>(kr.add(u * S::LANES));
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
            t += 4 * S::LANES;
        }
        while t < n && (S::MASKED_TAIL || t + S::LANES <= n) {
            let w = (n - t).min(S::LANES);
            let mut a = [S::zero(); H];
            for d in 0..hd {
                pf.turn();
                let kr = k.add(d * ps + t);
                let x = if w < S::LANES {
                    T::load_tail::<S>(kr, w)
                } else {
                    T::load::<S>(kr)
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
                    x += *q.add(h * hd + d) * Elem::to_f32(*k.add(d * ps + t));
                }
                *out.add(h * n + t) = x * scale;
            }
        }
    }
}

/// [`scores`] for a page whose keys are stored by columns (f32 and f16
/// pages; see [`super::KvDtype::k_by_columns`]): `page` is the whole page of
/// one KV head (`hd` rows of `ps` keys), the scores are those of keys
/// `off..off + n`, and `ahead` is memory to request along the way, as in
/// [`scores`].
///
/// # Safety
/// The CPU supports `S`; `H <= 4`; `page` holds `hd · ps` values and
/// `off + n <= ps`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn scores_cols<S: Simd, T: Elem, const H: usize>(
    q: &[f32],
    hd: usize,
    page: &[T],
    ps: usize,
    off: usize,
    ahead: &[T],
    scale: f32,
    out: &mut [f32],
) {
    let g = q.len() / hd;
    let n = out.len() / g;
    debug_assert!(page.len() == hd * ps && off + n <= ps);
    // SAFETY: key off lies in the page (off + n <= ps).
    let (qp, kp, op) = (
        q.as_ptr(),
        unsafe { page.as_ptr().add(off) },
        out.as_mut_ptr(),
    );
    let mut pf = Stream::new(ahead, g.div_ceil(H) * hd * n.div_ceil(4 * S::LANES));
    let mut j = 0;
    while j < g {
        let h = (g - j).min(H);
        // SAFETY: heads j..j + h of q and rows j..j + h of out exist.
        unsafe {
            heads_of!(
                h,
                scores_cols_heads::<S, T>(
                    qp.add(j * hd),
                    hd,
                    kp,
                    ps,
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

/// [`scores`] over keys `off..off + n` of a page stored by rows (Q8_0
/// pages), with the page-level arguments of [`scores_cols`].
///
/// # Safety
/// As [`scores`]; `page` holds `ps` rows and `off + n <= ps`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn scores_rows<S: Simd, T: PageRow, const H: usize>(
    q: &[f32],
    hd: usize,
    page: &[T],
    _ps: usize,
    off: usize,
    ahead: &[T],
    scale: f32,
    out: &mut [f32],
) {
    let st = T::stride(hd);
    let n = out.len() / (q.len() / hd);
    // SAFETY: forwarded contract.
    unsafe { scores::<S, T, H>(q, hd, &page[off * st..(off + n) * st], ahead, scale, out) }
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
unsafe fn accum_heads<S: Simd, T: PageRow, const H: usize>(
    acc: *mut f32,
    hd: usize,
    p: *const f32,
    n: usize,
    v: *const T,
    pf: &mut Stream,
) {
    let st = T::stride(hd);
    let mut i = 0;
    // SAFETY: lanes i..i + 4·LANES (or i + LANES) are below hd, the tail is
    // masked to hd; row t starts at t·st; head h's weights at h·n.
    unsafe {
        while i + 4 * S::LANES <= hd {
            let mut a = [[S::zero(); 4]; H];
            for (h, ah) in a.iter_mut().enumerate() {
                for (u, au) in ah.iter_mut().enumerate() {
                    *au = S::load(acc.add(h * hd + i + S::LANES * u));
                }
            }
            for t in 0..n {
                pf.turn();
                let r = v.add(t * st);
                let mut x = [S::zero(); 4];
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
            i += 4 * S::LANES;
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
/// The CPU supports `S`; `H <= 4`; `v` holds `n` rows of `hd` values.
#[inline(always)]
pub(super) unsafe fn accum<S: Simd, T: PageRow, const H: usize>(
    acc: &mut [f32],
    hd: usize,
    p: &[f32],
    v: &[T],
    ahead: &[T],
) {
    let g = acc.len() / hd;
    let n = p.len() / g;
    debug_assert_eq!(v.len(), n * T::stride(hd));
    let (ap, pp, vp) = (acc.as_mut_ptr(), p.as_ptr(), v.as_ptr());
    let mut pf = Stream::new(ahead, g.div_ceil(H) * hd.div_ceil(4 * S::LANES) * n);
    let mut j = 0;
    while j < g {
        let h = (g - j).min(H);
        // SAFETY: heads j..j + h of acc and of p exist.
        unsafe {
            heads_of!(
                h,
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
/// [`Simd`] marker, `heads` the head block `H`, `feature` its
/// `target_feature` list, `needs` the same in words for the safety docs.
macro_rules! page_kernels {
    (isa: $isa:ty, heads: $h:literal, feature: $feature:literal, needs: $needs:literal $(,)?) => {
        super::body::page_kernels!(
            @dtype $isa, $h, $feature, $needs, f32, scores_cols, scores_f32, accum_f32
        );
        super::body::page_kernels!(
            @dtype $isa, $h, $feature, $needs, half::f16, scores_cols, scores_f16, accum_f16
        );
        super::body::page_kernels!(
            @dtype $isa, $h, $feature, $needs, crate::quant::BlockQ8_0, scores_rows, scores_q8,
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
    (@dtype $isa:ty, $h:literal, $feature:literal, $needs:literal, $t:ty, $body:ident, $scores:ident, $accum:ident) => {
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
            unsafe { super::body::$body::<$isa, $t, $h>(q, hd, page, ps, off, ahead, scale, out) }
        }

        /// # Safety
        #[doc = concat!($needs, "; `v` holds `p.len() / (acc.len() / hd)` head rows.")]
        #[target_feature(enable = $feature)]
        pub unsafe fn $accum(acc: &mut [f32], hd: usize, p: &[f32], v: &[$t], ahead: &[$t]) {
            // SAFETY: forwarded contract.
            unsafe { super::body::accum::<$isa, $t, $h>(acc, hd, p, v, ahead) }
        }
    };
}
pub(super) use page_kernels;
