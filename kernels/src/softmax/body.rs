//! The softmax row and `Σ e^(x - shift)` for the ISAs that finish a row in
//! scalar (AVX2, NEON), written once against [`Simd`]. AVX-512 keeps its
//! own: it masks every vector, with `-∞` in the masked-off lanes of the max.

use crate::simd::Simd;

/// Softmax of `x[..vis]·scale` in place, zeros in `x[vis..]`: vector max,
/// [`Simd::exp`] with the sum, one scale pass.
///
/// # Safety
/// The CPU supports `S`; `vis <= x.len()`.
#[inline(always)]
pub(super) unsafe fn row<S: Simd>(x: &mut [f32], vis: usize, scale: f32) {
    const { assert!(!S::MASKED_TAIL, "masked ISAs have their own softmax") };
    let (head, tail) = x.split_at_mut(vis);
    tail.fill(0.0);
    let n = head.len();
    let p = head.as_mut_ptr();
    let mut i = 0;
    // SAFETY: all accesses below n.
    unsafe {
        let sv = S::splat(scale);
        let mut mv = S::splat(f32::NEG_INFINITY);
        while i + S::LANES <= n {
            mv = S::max(mv, S::mul(S::load(p.add(i)), sv));
            i += S::LANES;
        }
        let mut m = S::reduce_max(mv);
        // Tails go through `p` too: a reborrow of `head` here would
        // invalidate `p` for the passes below.
        for j in i..n {
            m = m.max(*p.add(j) * scale);
        }
        let shift = super::shift_for(m);
        let shv = S::splat(shift);
        let mut acc = S::zero();
        i = 0;
        while i + S::LANES <= n {
            // mul then sub (no fma): the exp argument rounds as in the reference.
            let e = S::exp(S::sub(S::mul(S::load(p.add(i)), sv), shv));
            S::store(p.add(i), e);
            acc = S::add(acc, e);
            i += S::LANES;
        }
        let mut sum = S::reduce_add(acc);
        for j in i..n {
            let v = p.add(j);
            *v = (*v * scale - shift).exp();
            sum += *v;
        }
        let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
        let iv = S::splat(inv);
        i = 0;
        while i + S::LANES <= n {
            S::store(p.add(i), S::mul(S::load(p.add(i)), iv));
            i += S::LANES;
        }
        for j in i..n {
            *p.add(j) *= inv;
        }
    }
}

/// `Σ e^(x - shift)`, two vectors in flight.
///
/// # Safety
/// The CPU supports `S`.
#[inline(always)]
pub(super) unsafe fn sum_exp<S: Simd>(x: &[f32], shift: f32) -> f32 {
    const { assert!(!S::MASKED_TAIL, "masked ISAs have their own softmax") };
    let n = x.len();
    let mut i = 0;
    // SAFETY: i + 2·LANES <= n.
    let mut s = unsafe {
        let shv = S::splat(shift);
        let mut acc = [S::zero(); 2];
        while i + 2 * S::LANES <= n {
            for (k, a) in acc.iter_mut().enumerate() {
                let v = S::load(x.as_ptr().add(i + S::LANES * k));
                *a = S::add(*a, S::exp(S::sub(v, shv)));
            }
            i += 2 * S::LANES;
        }
        S::reduce_add(S::add(acc[0], acc[1]))
    };
    for &v in &x[i..] {
        s += (v - shift).exp();
    }
    s
}

/// Stamps out one ISA's `row` and `sum_exp` entry points over the bodies
/// above: `isa` is the [`Simd`] marker, `feature` its `target_feature`
/// list, `needs` the same in words for the safety docs.
macro_rules! softmax_kernels {
    (isa: $isa:ty, feature: $feature:literal, needs: $needs:literal $(,)?) => {
        /// Softmax of `x[..vis]·scale` in place, zeros in `x[vis..]`.
        ///
        /// # Safety
        #[doc = concat!($needs, "; `vis <= x.len()`.")]
        #[target_feature(enable = $feature)]
        pub unsafe fn row(x: &mut [f32], vis: usize, scale: f32) {
            // SAFETY: forwarded contract.
            unsafe { super::body::row::<$isa>(x, vis, scale) }
        }

        /// `Σ e^(x - shift)`.
        ///
        /// # Safety
        #[doc = concat!($needs, ".")]
        #[target_feature(enable = $feature)]
        pub unsafe fn sum_exp(x: &[f32], shift: f32) -> f32 {
            // SAFETY: forwarded contract.
            unsafe { super::body::sum_exp::<$isa>(x, shift) }
        }
    };
}
pub(super) use softmax_kernels;
