//! RMSNorm / LayerNorm rows, written once against [`Simd`]: f32 sums in
//! four vector accumulators (four vectors in flight), then one fused scale
//! pass. AVX-512 runs its single-vector loops masked throughout (one loop
//! body for full vectors and the tail); the others finish in scalar.

use super::NormKind;
use crate::simd::Simd;

/// `Σ (x - shift)²` over `n` floats at `s`.
///
/// # Safety
/// The CPU supports `S`; `s` valid for `n` reads.
#[inline(always)]
unsafe fn sum_sq<S: Simd>(s: *const f32, n: usize, shift: f32) -> f32 {
    let mut i = 0;
    // SAFETY: every load is below n (the tail is masked to it).
    unsafe {
        let c = S::splat(shift);
        let mut acc = [S::zero(); 4];
        while i + 4 * S::LANES <= n {
            for (k, a) in acc.iter_mut().enumerate() {
                let d = S::sub(S::load(s.add(i + S::LANES * k)), c);
                *a = S::fma(d, d, *a);
            }
            i += 4 * S::LANES;
        }
        if S::MASKED_TAIL {
            while i < n {
                let k = (n - i).min(S::LANES);
                let d = S::zero_tail(S::sub(S::load_tail(s.add(i), k), c), k);
                acc[0] = S::fma(d, d, acc[0]);
                i += k;
            }
            return S::reduce_add(S::add(S::add(acc[0], acc[1]), S::add(acc[2], acc[3])));
        } else {
            while i + S::LANES <= n {
                let d = S::sub(S::load(s.add(i)), c);
                acc[0] = S::fma(d, d, acc[0]);
                i += S::LANES;
            }
        }
        let mut t = S::reduce_add(S::add(S::add(acc[0], acc[1]), S::add(acc[2], acc[3])));
        while i < n {
            let d = *s.add(i) - shift;
            t += d * d;
            i += 1;
        }
        t
    }
}

/// `Σ x` over `n` floats at `s`.
///
/// # Safety
/// The CPU supports `S`; `s` valid for `n` reads.
#[inline(always)]
unsafe fn sum<S: Simd>(s: *const f32, n: usize) -> f32 {
    let mut i = 0;
    // SAFETY: every load is below n (the tail is masked to it).
    unsafe {
        let mut acc = [S::zero(); 4];
        while i + 4 * S::LANES <= n {
            for (k, a) in acc.iter_mut().enumerate() {
                *a = S::add(*a, S::load(s.add(i + S::LANES * k)));
            }
            i += 4 * S::LANES;
        }
        if S::MASKED_TAIL {
            while i < n {
                let k = (n - i).min(S::LANES);
                acc[0] = S::add(acc[0], S::load_tail(s.add(i), k));
                i += k;
            }
            return S::reduce_add(S::add(S::add(acc[0], acc[1]), S::add(acc[2], acc[3])));
        } else {
            while i + S::LANES <= n {
                acc[0] = S::add(acc[0], S::load(s.add(i)));
                i += S::LANES;
            }
        }
        let mut t = S::reduce_add(S::add(S::add(acc[0], acc[1]), S::add(acc[2], acc[3])));
        while i < n {
            t += *s.add(i);
            i += 1;
        }
        t
    }
}

/// Normalises one row of `n` floats from `s` into `o` (which may equal `s`).
///
/// # Safety
/// The CPU supports `S`; `s`, `w` (and `b`) valid for `n` reads, `o` for
/// `n` writes.
#[inline(always)]
pub(super) unsafe fn row<S: Simd>(
    kind: NormKind,
    s: *const f32,
    o: *mut f32,
    n: usize,
    w: *const f32,
    b: Option<*const f32>,
    eps: f32,
) {
    // SAFETY: forwarded from the caller; every access is below n.
    unsafe {
        let (mean, var) = match kind {
            NormKind::Rms => (0.0, sum_sq::<S>(s, n, 0.0) / n as f32),
            NormKind::Layer => {
                let mean = sum::<S>(s, n) / n as f32;
                (mean, sum_sq::<S>(s, n, mean) / n as f32)
            }
        };
        let inv = super::inv_std(var, eps);
        let (vm, vi) = (S::splat(mean), S::splat(inv));
        let mut i = 0;
        if S::MASKED_TAIL {
            while i < n {
                let m = (n - i).min(S::LANES);
                let y = S::mul(S::sub(S::load_tail(s.add(i), m), vm), vi);
                let wv = S::load_tail(w.add(i), m);
                let y = match b {
                    Some(b) => S::fma(y, wv, S::load_tail(b.add(i), m)),
                    None => S::mul(y, wv),
                };
                S::store_tail(o.add(i), y, m);
                i += m;
            }
            return;
        }
        while i + S::LANES <= n {
            let y = S::mul(S::sub(S::load(s.add(i)), vm), vi);
            let y = match b {
                Some(b) => S::fma(y, S::load(w.add(i)), S::load(b.add(i))),
                None => S::mul(y, S::load(w.add(i))),
            };
            S::store(o.add(i), y);
            i += S::LANES;
        }
        while i < n {
            let y = (*s.add(i) - mean) * inv;
            *o.add(i) = match b {
                Some(b) => y.mul_add(*w.add(i), *b.add(i)),
                None => y * *w.add(i),
            };
            i += 1;
        }
    }
}

/// Stamps out one ISA's `rows` entry point and the `row` it runs per row
/// (its own `#[target_feature]` function, optimised on its own before it is
/// inlined into the loop over rows): `isa` is the [`Simd`] marker, `feature`
/// its `target_feature` list, `needs` the same in words for the safety docs.
macro_rules! norm_rows {
    (isa: $isa:ty, feature: $feature:literal, needs: $needs:literal $(,)?) => {
        /// [`super::body::row`] for this ISA.
        ///
        /// # Safety
        #[doc = concat!($needs, "; `s`, `w` (and `b`) valid for `n` reads, `o` for `n` writes.")]
        #[target_feature(enable = $feature)]
        unsafe fn row(
            kind: super::NormKind,
            s: *const f32,
            o: *mut f32,
            n: usize,
            w: *const f32,
            b: Option<*const f32>,
            eps: f32,
        ) {
            // SAFETY: forwarded contract.
            unsafe { super::body::row::<$isa>(kind, s, o, n, w, b, eps) }
        }

        /// Normalises a block of rows of length `w.len()`; `src = None` is
        /// in place.
        ///
        /// # Safety
        #[doc = concat!($needs, "; `src` (if any) has `dst`'s length, a multiple of")]
        /// `w.len()`; `b` (if any) has `w`'s length.
        #[target_feature(enable = $feature)]
        pub unsafe fn rows(
            kind: super::NormKind,
            src: Option<&[f32]>,
            dst: &mut [f32],
            w: &[f32],
            b: Option<&[f32]>,
            eps: f32,
        ) {
            let d = w.len();
            let nrows = dst.len() / d;
            let pd = dst.as_mut_ptr();
            let ps: *const f32 = src.map_or(pd as *const f32, |s| s.as_ptr());
            for r in 0..nrows {
                // SAFETY: row r lies inside both buffers.
                unsafe {
                    row(
                        kind,
                        ps.add(r * d),
                        pd.add(r * d),
                        d,
                        w.as_ptr(),
                        b.map(|b| b.as_ptr()),
                        eps,
                    )
                };
            }
        }
    };
}
pub(super) use norm_rows;
