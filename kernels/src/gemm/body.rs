//! The GEMM micro-kernel bodies, written once against [`Simd`], and the
//! macro that stamps them out per ISA as `#[target_feature]` entry points
//! (one per `mr × nr`, as the `gemm` crate does), with the shape tables the
//! tuner enumerates.
//!
//! Packed kernels `mr × nr` keep `mr · nr/lanes` accumulators plus
//! `nr/lanes` W vectors and the A operand in registers: per k step, `nr/lanes`
//! vector loads of the packed panel, `mr` broadcasts of A (`mr/4` vector
//! loads on NEON, used lane by lane), `mr · nr/lanes` FMAs. Direct kernels
//! keep `mr · nr` accumulators of dot products along k.

use crate::simd::{Elem, Simd};
use half::f16;

/// Body of a packed micro-kernel, see [`super::PackedFn`] for the contract.
/// The ragged edge adds the valid part of each vector with masks on
/// AVX-512; elsewhere it spills the tile and adds the valid part.
///
/// # Safety
/// The CPU supports `S`; the pointers satisfy the `PackedFn` contract.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn packed<S: Simd, const MR: usize, const NV: usize>(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    m_eff: usize,
    n_eff: usize,
) {
    const {
        assert!(
            MR.is_multiple_of(S::BCAST_GROUP),
            "A is loaded by whole groups"
        )
    };
    let nr = NV * S::LANES;
    // SAFETY: all reads stay within the kc × mr A panel and the kc × nr
    // panel; writes within the m_eff × n_eff C tile.
    unsafe {
        let mut acc = [[S::zero(); NV]; MR];
        let mut ap = a;
        let mut bp = b;
        for _ in 0..kc {
            let mut bv = [S::zero(); NV];
            for (j, v) in bv.iter_mut().enumerate() {
                *v = S::load(bp.add(S::LANES * j));
            }
            for (i, row) in acc.iter_mut().enumerate() {
                let av = S::load_bcast(ap, i);
                for (acc, &bv) in row.iter_mut().zip(&bv) {
                    *acc = S::fma_bcast(*acc, bv, av, i);
                }
            }
            ap = ap.add(MR);
            bp = bp.add(nr);
        }
        if m_eff == MR && n_eff == nr {
            for (i, row) in acc.iter().enumerate() {
                for (j, &v) in row.iter().enumerate() {
                    let p = c.add(i * ldc + S::LANES * j);
                    S::store(p, S::add(S::load(p), v));
                }
            }
        } else if S::MASKED_TAIL {
            for (i, row) in acc.iter().enumerate().take(m_eff) {
                for (j, &v) in row.iter().enumerate() {
                    let lanes = n_eff.saturating_sub(S::LANES * j).min(S::LANES);
                    if lanes == 0 {
                        break;
                    }
                    let p = c.add(i * ldc + S::LANES * j);
                    S::store_tail(p, S::add(S::load_tail(p, lanes), v), lanes);
                }
            }
        } else {
            // Spill the tile (row i's vector j lands at i·nr + LANES·j),
            // add the valid part.
            let tmp = acc;
            let t = tmp.as_ptr() as *const f32;
            for i in 0..m_eff {
                for j in 0..n_eff {
                    *c.add(i * ldc + j) += *t.add(i * nr + j);
                }
            }
        }
    }
}

/// Body of a direct kernel (see [`super::DirectFn`]), generic over the
/// weight type. Rows past `m_eff`/`n_eff` alias the last valid row so every
/// load stays in bounds; their sums are discarded.
///
/// # Safety
/// The CPU supports `S`; the pointers satisfy the `DirectFn` contract.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn direct<S: Simd, W: Elem, const MR: usize, const NR: usize>(
    k: usize,
    a: *const f32,
    lda: usize,
    w: *const W,
    ldw: usize,
    c: *mut f32,
    ldc: usize,
    m_eff: usize,
    n_eff: usize,
) {
    // SAFETY: reads of m_eff rows of A and n_eff rows of W of length k;
    // writes of the m_eff × n_eff C tile (the DirectFn contract).
    unsafe {
        let mut ar = [a; MR];
        for (i, r) in ar.iter_mut().enumerate() {
            *r = a.add(i.min(m_eff - 1) * lda);
        }
        let mut wr = [w; NR];
        for (j, r) in wr.iter_mut().enumerate() {
            *r = w.add(j.min(n_eff - 1) * ldw);
        }
        let mut acc = [[S::zero(); NR]; MR];
        let kv = k / S::LANES * S::LANES;
        let mut p = 0;
        while p < kv {
            let mut wv = [S::zero(); NR];
            for (v, r) in wv.iter_mut().zip(&wr) {
                *v = W::load::<S>(r.add(p));
            }
            for (row, r) in acc.iter_mut().zip(&ar) {
                let av = S::load(r.add(p));
                for (acc, &wv) in row.iter_mut().zip(&wv) {
                    *acc = S::fma(av, wv, *acc);
                }
            }
            p += S::LANES;
        }
        for i in 0..m_eff {
            for j in 0..n_eff {
                let mut s = S::reduce_add(acc[i][j]);
                for q in kv..k {
                    s += *ar[i].add(q) * (*wr[j].add(q)).to_f32();
                }
                *c.add(i * ldc + j) += s;
            }
        }
    }
}

/// Widens `src` into `dst` (same length), a vector at a time.
///
/// # Safety
/// The CPU supports `S`.
#[inline(always)]
pub(super) unsafe fn f16_to_f32<S: Simd>(src: &[f16], dst: &mut [f32]) {
    debug_assert_eq!(src.len(), dst.len());
    let mut s = src.chunks_exact(S::LANES);
    let mut d = dst.chunks_exact_mut(S::LANES);
    for (s, d) in (&mut s).zip(&mut d) {
        // SAFETY: LANES f16 readable and LANES f32 writable.
        unsafe { S::store(d.as_mut_ptr(), S::load_f16(s.as_ptr())) };
    }
    for (d, s) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *d = s.to_f32();
    }
}

/// Stamps out one ISA's micro-kernels: `isa` is its [`Simd`] marker,
/// `feature` its `target_feature` list (`needs` says it in words for the
/// safety docs), `packed` the `(name, mr, nr/lanes)` shapes in order of
/// preference and `direct` the `(f32 name, f16 name, mr, nr)` shapes. Defines
/// `PACKED`, `DIRECT`, `packed`, `direct_f32` and `direct_f16` for `mod.rs`.
macro_rules! gemm_kernels {
    (
        isa: $isa:ty, feature: $feature:literal, needs: $needs:literal,
        packed: [$(($name:ident, $mr:literal, $nv:literal)),* $(,)?],
        direct: [$(($f32name:ident, $f16name:ident, $dmr:literal, $dnr:literal)),* $(,)?] $(,)?
    ) => {
        /// Packed micro-kernel shapes `(mr, nr)`, in order of preference.
        pub(super) const PACKED: &[(usize, usize)] =
            &[$(($mr, $nv * <$isa as $crate::simd::Simd>::LANES)),*];

        pub(super) fn packed(mr: usize, nr: usize) -> Option<$crate::gemm::PackedFn> {
            match (mr, nr) {
                $(($mr, nr) if nr == $nv * <$isa as $crate::simd::Simd>::LANES =>
                    Some($name as $crate::gemm::PackedFn),)*
                _ => None,
            }
        }

        /// Direct kernel shapes `(mr, nr)`.
        pub(super) const DIRECT: &[(usize, usize)] = &[$(($dmr, $dnr)),*];

        pub(super) fn direct_f32(mr: usize, nr: usize) -> Option<$crate::gemm::DirectFn<f32>> {
            match (mr, nr) {
                $(($dmr, $dnr) => Some($f32name as $crate::gemm::DirectFn<f32>),)*
                _ => None,
            }
        }

        pub(super) fn direct_f16(
            mr: usize,
            nr: usize,
        ) -> Option<$crate::gemm::DirectFn<half::f16>> {
            match (mr, nr) {
                $(($dmr, $dnr) => Some($f16name as $crate::gemm::DirectFn<half::f16>),)*
                _ => None,
            }
        }

        $(
        #[doc = concat!("Packed ", $mr, "-row micro-kernel, see [`PackedFn`](crate::gemm::PackedFn).")]
        ///
        /// # Safety
        #[doc = concat!("The CPU must support ", $needs, "; pointers per the `PackedFn` contract.")]
        #[target_feature(enable = $feature)]
        unsafe fn $name(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize,
                        m_eff: usize, n_eff: usize) {
            // SAFETY: forwarded contract.
            unsafe {
                $crate::gemm::body::packed::<$isa, $mr, $nv>(kc, a, b, c, ldc, m_eff, n_eff)
            }
        }
        )*

        $(
        #[doc = concat!("Direct f32 ", $dmr, "×", $dnr, " kernel, see [`DirectFn`](crate::gemm::DirectFn).")]
        ///
        /// # Safety
        #[doc = concat!("The CPU must support ", $needs, "; pointers per the `DirectFn` contract.")]
        #[target_feature(enable = $feature)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $f32name(k: usize, a: *const f32, lda: usize, w: *const f32, ldw: usize,
                           c: *mut f32, ldc: usize, m_eff: usize, n_eff: usize) {
            // SAFETY: forwarded contract.
            unsafe {
                $crate::gemm::body::direct::<$isa, f32, $dmr, $dnr>(
                    k, a, lda, w, ldw, c, ldc, m_eff, n_eff,
                )
            }
        }

        #[doc = concat!("Direct W16A32 ", $dmr, "×", $dnr, " kernel, see [`DirectFn`](crate::gemm::DirectFn).")]
        ///
        /// # Safety
        #[doc = concat!("The CPU must support ", $needs, "; pointers per the `DirectFn` contract.")]
        #[target_feature(enable = $feature)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $f16name(k: usize, a: *const f32, lda: usize, w: *const half::f16, ldw: usize,
                           c: *mut f32, ldc: usize, m_eff: usize, n_eff: usize) {
            // SAFETY: forwarded contract.
            unsafe {
                $crate::gemm::body::direct::<$isa, half::f16, $dmr, $dnr>(
                    k, a, lda, w, ldw, c, ldc, m_eff, n_eff,
                )
            }
        }
        )*
    };
}
pub(super) use gemm_kernels;
