//! The f32 and f16 page kernels, written once against [`Simd`], and the
//! macro that stamps them out per ISA. Scores take four key rows at a time
//! (they share each load of `q`, four independent FMA chains); the value
//! axpy keeps a four-vector slice of the accumulator in registers across
//! all rows of the page, so it is loaded and stored once per page. Head-dim
//! tails are masked vectors on AVX-512 (whose single-vector loops run
//! masked throughout, one loop body) and scalar loops elsewhere.

use crate::simd::{Elem, Simd};

/// Dot products of `q` with the `R` rows of `hd` values at `k`.
///
/// # Safety
/// The CPU supports `S`; `k` valid for `R · hd` reads, `q.len() == hd`.
#[inline(always)]
unsafe fn dot_rows<S: Simd, T: Elem, const R: usize>(q: &[f32], k: *const T) -> [f32; R] {
    let hd = q.len();
    let qp = q.as_ptr();
    let mut dots = [0.0f32; R];
    // SAFETY: full loads stay below hd; the tail is masked to it or scalar.
    unsafe {
        let mut a = [S::zero(); R];
        let mut i = 0;
        while i + S::LANES <= hd {
            let qv = S::load(qp.add(i));
            for (r, ar) in a.iter_mut().enumerate() {
                *ar = S::fma(qv, T::load::<S>(k.add(r * hd + i)), *ar);
            }
            i += S::LANES;
        }
        if S::MASKED_TAIL && i < hd {
            let qv = S::load_tail(qp.add(i), hd - i);
            for (r, ar) in a.iter_mut().enumerate() {
                *ar = S::fma(qv, T::load_tail::<S>(k.add(r * hd + i), hd - i), *ar);
            }
        }
        for (r, d) in dots.iter_mut().enumerate() {
            *d = S::reduce_add(a[r]);
            if !S::MASKED_TAIL {
                for (j, &qj) in q.iter().enumerate().skip(i) {
                    *d += qj * (*k.add(r * hd + j)).to_f32();
                }
            }
        }
    }
    dots
}

/// `out[t] = scale · q·k[t]` for every key row `t` of `k`.
///
/// # Safety
/// The CPU supports `S`; `k` holds `out.len()` rows of `q.len()` values.
#[inline(always)]
pub(super) unsafe fn scores<S: Simd, T: Elem>(q: &[f32], k: &[T], scale: f32, out: &mut [f32]) {
    let hd = q.len();
    debug_assert_eq!(k.len(), out.len() * hd);
    let kp = k.as_ptr();
    let mut t = 0;
    // SAFETY: rows t..t + 4 (or t) lie within k.
    unsafe {
        while t + 4 <= out.len() {
            let d = dot_rows::<S, T, 4>(q, kp.add(t * hd));
            for (o, x) in out[t..t + 4].iter_mut().zip(d) {
                *o = x * scale;
            }
            t += 4;
        }
        while t < out.len() {
            out[t] = dot_rows::<S, T, 1>(q, kp.add(t * hd))[0] * scale;
            t += 1;
        }
    }
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

/// `acc += Σ_t p[t] · v[t]` over the page's value rows.
///
/// # Safety
/// The CPU supports `S`; `v` holds `p.len()` rows of `acc.len()` values.
#[inline(always)]
pub(super) unsafe fn accum<S: Simd, T: Elem>(acc: &mut [f32], p: &[f32], v: &[T]) {
    let hd = acc.len();
    debug_assert_eq!(v.len(), p.len() * hd);
    let ap = acc.as_mut_ptr();
    let vp = v.as_ptr();
    let mut i = 0;
    // SAFETY: lanes i..i + 4·LANES (or i + LANES) are below hd, the tail is
    // masked to hd; row t starts at t·hd.
    unsafe {
        while i + 4 * S::LANES <= hd {
            let mut a = [S::zero(); 4];
            for (u, au) in a.iter_mut().enumerate() {
                *au = S::load(ap.add(i + S::LANES * u));
            }
            for (t, &pt) in p.iter().enumerate() {
                let pv = S::splat(pt);
                let r = vp.add(t * hd + i);
                for (u, au) in a.iter_mut().enumerate() {
                    *au = S::fma(pv, T::load::<S>(r.add(S::LANES * u)), *au);
                }
            }
            for (u, au) in a.iter().enumerate() {
                S::store(ap.add(i + S::LANES * u), *au);
            }
            i += 4 * S::LANES;
        }
        if S::MASKED_TAIL {
            while i < hd {
                let n = (hd - i).min(S::LANES);
                let mut a = S::load_tail(ap.add(i), n);
                for (t, &pt) in p.iter().enumerate() {
                    a = S::fma(S::splat(pt), T::load_tail::<S>(vp.add(t * hd + i), n), a);
                }
                S::store_tail(ap.add(i), a, n);
                i += n;
            }
            return;
        } else {
            while i + S::LANES <= hd {
                let mut a = S::load(ap.add(i));
                for (t, &pt) in p.iter().enumerate() {
                    a = S::fma(S::splat(pt), T::load::<S>(vp.add(t * hd + i)), a);
                }
                S::store(ap.add(i), a);
                i += S::LANES;
            }
        }
    }
    for (t, &pt) in p.iter().enumerate() {
        for j in i..hd {
            acc[j] += pt * v[t * hd + j].to_f32();
        }
    }
}

/// Stamps out one ISA's f32/f16 page kernels (`scores_f32`, `scores_f16`,
/// `accum_f32`, `accum_f16`, `exp_sum`) as `#[target_feature]` entry points
/// over the bodies above: `isa` is the [`Simd`] marker, `feature` its
/// `target_feature` list, `needs` the same in words for the safety docs.
macro_rules! page_kernels {
    (isa: $isa:ty, feature: $feature:literal, needs: $needs:literal $(,)?) => {
        /// # Safety
        #[doc = concat!($needs, "; `k` holds `out.len()` rows of `q.len()` values.")]
        #[target_feature(enable = $feature)]
        pub unsafe fn scores_f32(q: &[f32], k: &[f32], scale: f32, out: &mut [f32]) {
            // SAFETY: forwarded contract.
            unsafe { super::body::scores::<$isa, f32>(q, k, scale, out) }
        }

        /// # Safety
        #[doc = concat!($needs, "; `k` holds `out.len()` rows of `q.len()` values.")]
        #[target_feature(enable = $feature)]
        pub unsafe fn scores_f16(q: &[f32], k: &[half::f16], scale: f32, out: &mut [f32]) {
            // SAFETY: forwarded contract.
            unsafe { super::body::scores::<$isa, half::f16>(q, k, scale, out) }
        }

        /// # Safety
        #[doc = concat!($needs, "; `v` holds `p.len()` rows of `acc.len()` values.")]
        #[target_feature(enable = $feature)]
        pub unsafe fn accum_f32(acc: &mut [f32], p: &[f32], v: &[f32]) {
            // SAFETY: forwarded contract.
            unsafe { super::body::accum::<$isa, f32>(acc, p, v) }
        }

        /// # Safety
        #[doc = concat!($needs, "; `v` holds `p.len()` rows of `acc.len()` values.")]
        #[target_feature(enable = $feature)]
        pub unsafe fn accum_f16(acc: &mut [f32], p: &[f32], v: &[half::f16]) {
            // SAFETY: forwarded contract.
            unsafe { super::body::accum::<$isa, half::f16>(acc, p, v) }
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
}
pub(super) use page_kernels;
