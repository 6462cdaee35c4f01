//! The row-block dot kernel, written once against [`Simd`]: `R` rows of `W`
//! against one `x`, `U` accumulators per row, an optional software prefetch
//! `pf` bytes ahead. The k tail is a masked vector on AVX-512 and
//! zero-padded copies elsewhere (0 · 0 adds nothing and cannot create a
//! NaN).

use super::Weight;
use crate::simd::Simd;
use half::f16;

/// `LANES` weights at `p` as f32 (`p` valid for them).
#[inline(always)]
unsafe fn load_w<S: Simd, T: Weight>(p: *const T) -> S::V {
    // SAFETY: per the caller.
    unsafe {
        if T::IS_F16 {
            S::load_f16(p as *const f16)
        } else {
            S::load(p as *const f32)
        }
    }
}

/// The first `n <= LANES` weights at `p` as f32, the others zero; the
/// lanes past `n` are not read (masked tails only).
#[inline(always)]
unsafe fn load_w_tail<S: Simd, T: Weight>(p: *const T, n: usize) -> S::V {
    // SAFETY: per the caller.
    unsafe {
        if T::IS_F16 {
            S::load_tail_f16(p as *const f16, n)
        } else {
            S::load_tail(p as *const f32, n)
        }
    }
}

/// Dot products of `R` rows of `W` with `x[..len]`, `U` accumulators per row.
///
/// # Safety
/// The CPU supports `S`; `w` is valid for `R` rows of `len` elements at
/// stride `ldw`, `x` for `len` reads, `out` for `R` writes.
#[inline(always)]
pub(super) unsafe fn dot_rows<S: Simd, T: Weight, const R: usize, const U: usize>(
    w: *const T,
    ldw: usize,
    x: *const f32,
    len: usize,
    pf: usize,
    out: *mut f32,
) {
    debug_assert!(R >= 1 && U >= 1);
    let v = S::LANES;
    let step = v * U;
    let step_bytes = step * size_of::<T>();
    // SAFETY: every full load is below len; the tail is masked to it or
    // copied into zeroed one-vector buffers.
    unsafe {
        let mut acc = [[S::zero(); U]; R];
        let mut i = 0;
        while i + step <= len {
            if pf != 0 {
                for r in 0..R {
                    // wrapping_add: the prefetch target may lie past the end
                    // of `W`; prefetches never fault, but pointer `add` past
                    // the allocation would be UB.
                    let p = (w.wrapping_add(r * ldw + i) as *const u8).wrapping_add(pf);
                    let mut b = 0;
                    while b < step_bytes {
                        S::prefetch(p.wrapping_add(b));
                        b += 64;
                    }
                }
            }
            let mut xv = [S::zero(); U];
            for (u, xu) in xv.iter_mut().enumerate() {
                *xu = S::load(x.add(i + u * v));
            }
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let wr = w.add(r * ldw + i);
                for (u, a) in acc_r.iter_mut().enumerate() {
                    *a = S::fma(load_w::<S, T>(wr.add(u * v)), xv[u], *a);
                }
            }
            i += step;
        }
        while i + v <= len {
            let xv = S::load(x.add(i));
            for (r, acc_r) in acc.iter_mut().enumerate() {
                acc_r[0] = S::fma(load_w::<S, T>(w.add(r * ldw + i)), xv, acc_r[0]);
            }
            i += v;
        }
        if i < len && S::MASKED_TAIL {
            let rem = len - i;
            let xv = S::load_tail(x.add(i), rem);
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let wv = load_w_tail::<S, T>(w.add(r * ldw + i), rem);
                acc_r[0] = S::fma(wv, xv, acc_r[0]);
            }
        } else if i < len {
            // A zeroed vector is LANES zero f32, or 2·LANES zero f16.
            let rem = len - i;
            let mut xb = S::zero();
            let xp = (&mut xb as *mut S::V).cast::<f32>();
            std::ptr::copy_nonoverlapping(x.add(i), xp, rem);
            let xv = S::load(xp);
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let mut wb = S::zero();
                let wp = (&mut wb as *mut S::V).cast::<T>();
                std::ptr::copy_nonoverlapping(w.add(r * ldw + i), wp, rem);
                acc_r[0] = S::fma(load_w::<S, T>(wp), xv, acc_r[0]);
            }
        }
        for (r, acc_r) in acc.iter().enumerate() {
            let mut s = acc_r[0];
            for a in &acc_r[1..] {
                s = S::add(s, *a);
            }
            *out.add(r) = S::reduce_add(s);
        }
    }
}

/// Stamps out one ISA's `dot_rows` (a `#[target_feature]` function over the
/// body above, one instance per weight type, `R` and `U`) and `select`:
/// `isa` is the [`Simd`] marker, `feature` its `target_feature` list,
/// `needs` the same in words for the safety docs.
macro_rules! gemv_kernels {
    (isa: $isa:ty, feature: $feature:literal, needs: $needs:literal $(,)?) => {
        /// The kernel for `nr` rows and `unroll` accumulators per row.
        pub(super) fn select<T: super::Weight>(nr: usize, unroll: usize) -> super::DotFn<T> {
            super::select_dot!(dot_rows, T, nr, unroll)
        }

        /// [`super::body::dot_rows`] for this ISA.
        ///
        /// # Safety
        #[doc = concat!("The CPU supports ", $needs, "; `w` is valid for `R` rows of `len`")]
        /// elements at stride `ldw`, `x` for `len` reads, `out` for `R` writes.
        #[target_feature(enable = $feature)]
        unsafe fn dot_rows<T: super::Weight, const R: usize, const U: usize>(
            w: *const T,
            ldw: usize,
            x: *const f32,
            len: usize,
            pf: usize,
            out: *mut f32,
        ) {
            // SAFETY: forwarded contract.
            unsafe { super::body::dot_rows::<$isa, T, R, U>(w, ldw, x, len, pf, out) }
        }
    };
}
pub(super) use gemv_kernels;
