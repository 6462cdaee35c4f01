//! AVX-512F GEMM micro-kernels (16 f32 lanes, 32 zmm registers).
//!
//! Packed kernels `mr × nr` keep `mr · nr/16` accumulators plus `nr/16` W
//! vectors and one broadcast in registers (≤ 31 of 32): per k step, `nr/16`
//! vector loads of the packed panel, `mr` broadcasts of A, `mr · nr/16` FMAs.
//! Direct kernels keep `mr · nr` accumulators of dot products along k.

use super::{DirectFn, PackedFn};
use core::arch::x86_64::*;
use half::f16;

macro_rules! packed_kernels {
    ($(($name:ident, $mr:literal, $nv:literal)),* $(,)?) => {
        /// Packed micro-kernel shapes `(mr, nr)`, in order of preference.
        pub(super) const PACKED: &[(usize, usize)] = &[$(($mr, $nv * 16)),*];

        pub(super) fn packed(mr: usize, nr: usize) -> Option<PackedFn> {
            match (mr, nr) {
                $(($mr, nr) if nr == $nv * 16 => Some($name as PackedFn),)*
                _ => None,
            }
        }

        $(
        /// Packed micro-kernel, see [`PackedFn`] for the contract.
        ///
        /// # Safety
        /// The CPU must support AVX-512F; the pointers must satisfy the
        /// [`PackedFn`] contract.
        #[target_feature(enable = "avx512f")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $name(
            kc: usize,
            a: *const f32,
            b: *const f32,
            c: *mut f32,
            ldc: usize,
            m_eff: usize,
            n_eff: usize,
        ) {
            const MR: usize = $mr;
            const NV: usize = $nv;
            const NR: usize = NV * 16;
            // SAFETY: all reads stay within the kc × mr A panel and the
            // kc × nr panel; writes within the m_eff × n_eff C tile.
            unsafe {
                let mut acc = [[_mm512_setzero_ps(); NV]; MR];
                let mut ap = a;
                let mut bp = b;
                for _ in 0..kc {
                    let mut bv = [_mm512_setzero_ps(); NV];
                    for (j, v) in bv.iter_mut().enumerate() {
                        *v = _mm512_loadu_ps(bp.add(16 * j));
                    }
                    for (i, row) in acc.iter_mut().enumerate() {
                        let av = _mm512_set1_ps(*ap.add(i));
                        for (acc, &bv) in row.iter_mut().zip(&bv) {
                            *acc = _mm512_fmadd_ps(av, bv, *acc);
                        }
                    }
                    ap = ap.add(MR);
                    bp = bp.add(NR);
                }
                if m_eff == MR && n_eff == NR {
                    for (i, row) in acc.iter().enumerate() {
                        for (j, &v) in row.iter().enumerate() {
                            let p = c.add(i * ldc + 16 * j);
                            _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), v));
                        }
                    }
                } else {
                    // Ragged edge: masked load/add/store per vector.
                    for (i, row) in acc.iter().enumerate().take(m_eff) {
                        for (j, &v) in row.iter().enumerate() {
                            let lanes = n_eff.saturating_sub(16 * j).min(16);
                            if lanes == 0 {
                                break;
                            }
                            let mask = (((1u32 << lanes) - 1) & 0xffff) as __mmask16;
                            let mask = if lanes == 16 { 0xffff } else { mask };
                            let p = c.add(i * ldc + 16 * j);
                            let old = _mm512_maskz_loadu_ps(mask, p);
                            _mm512_mask_storeu_ps(p, mask, _mm512_add_ps(old, v));
                        }
                    }
                }
            }
        }
        )*
    };
}

// Wide tiles first: per FMA they need fewer A broadcasts (loads), which
// quick runs on Zen 5 favoured (6x64 ≈ 1.5× 14x32 at 1024³); the tuner
// decides per shape.
packed_kernels! {
    (k6x64, 6, 4),
    (k8x48, 8, 3),
    (k4x64, 4, 4),
    (k8x32, 8, 2),
    (k14x32, 14, 2),
    (k12x32, 12, 2),
}

/// Loads 16 weights as f32.
trait Load16: Copy {
    /// # Safety
    /// 16 elements readable at `p`; AVX-512F available.
    unsafe fn load16(p: *const Self) -> __m512;
    fn widen(self) -> f32;
}

impl Load16 for f32 {
    #[inline(always)]
    unsafe fn load16(p: *const f32) -> __m512 {
        // SAFETY: per the trait contract.
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
}

impl Load16 for f16 {
    #[inline(always)]
    unsafe fn load16(p: *const f16) -> __m512 {
        // SAFETY: per the trait contract; f16 is a transparent u16.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
    }
    #[inline(always)]
    fn widen(self) -> f32 {
        self.to_f32()
    }
}

/// Body of a direct kernel (see [`DirectFn`]), generic over the weight type.
/// Rows past `m_eff`/`n_eff` alias the last valid row so every load stays in
/// bounds; their sums are discarded.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn direct_body<W: Load16, const MR: usize, const NR: usize>(
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
        let mut acc = [[_mm512_setzero_ps(); NR]; MR];
        let kv = k / 16 * 16;
        let mut p = 0;
        while p < kv {
            let mut wv = [_mm512_setzero_ps(); NR];
            for (v, r) in wv.iter_mut().zip(&wr) {
                *v = W::load16(r.add(p));
            }
            for (row, r) in acc.iter_mut().zip(&ar) {
                let av = _mm512_loadu_ps(r.add(p));
                for (acc, &wv) in row.iter_mut().zip(&wv) {
                    *acc = _mm512_fmadd_ps(av, wv, *acc);
                }
            }
            p += 16;
        }
        for i in 0..m_eff {
            for j in 0..n_eff {
                let mut s = _mm512_reduce_add_ps(acc[i][j]);
                for q in kv..k {
                    s += *ar[i].add(q) * (*wr[j].add(q)).widen();
                }
                *c.add(i * ldc + j) += s;
            }
        }
    }
}

macro_rules! direct_kernels {
    ($(($f32name:ident, $f16name:ident, $mr:literal, $nr:literal)),* $(,)?) => {
        /// Direct kernel shapes `(mr, nr)`.
        pub(super) const DIRECT: &[(usize, usize)] = &[$(($mr, $nr)),*];

        pub(super) fn direct_f32(mr: usize, nr: usize) -> Option<DirectFn<f32>> {
            match (mr, nr) {
                $(($mr, $nr) => Some($f32name as DirectFn<f32>),)*
                _ => None,
            }
        }

        pub(super) fn direct_f16(mr: usize, nr: usize) -> Option<DirectFn<f16>> {
            match (mr, nr) {
                $(($mr, $nr) => Some($f16name as DirectFn<f16>),)*
                _ => None,
            }
        }

        $(
        /// Direct f32 kernel, see [`DirectFn`].
        ///
        /// # Safety
        /// AVX-512F available; pointers per the [`DirectFn`] contract.
        #[target_feature(enable = "avx512f")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $f32name(k: usize, a: *const f32, lda: usize, w: *const f32, ldw: usize,
                           c: *mut f32, ldc: usize, m_eff: usize, n_eff: usize) {
            // SAFETY: forwarded contract.
            unsafe { direct_body::<f32, $mr, $nr>(k, a, lda, w, ldw, c, ldc, m_eff, n_eff) }
        }

        /// Direct W16A32 kernel, see [`DirectFn`].
        ///
        /// # Safety
        /// AVX-512F available; pointers per the [`DirectFn`] contract.
        #[target_feature(enable = "avx512f")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $f16name(k: usize, a: *const f32, lda: usize, w: *const f16, ldw: usize,
                           c: *mut f32, ldc: usize, m_eff: usize, n_eff: usize) {
            // SAFETY: forwarded contract.
            unsafe { direct_body::<f16, $mr, $nr>(k, a, lda, w, ldw, c, ldc, m_eff, n_eff) }
        }
        )*
    };
}

direct_kernels! {
    (d1x8_f32, d1x8_f16, 1, 8),
    (d2x8_f32, d2x8_f16, 2, 8),
    (d4x4_f32, d4x4_f16, 4, 4),
    (d3x6_f32, d3x6_f16, 3, 6),
}
