//! AVX2 + FMA (+ F16C) GEMM micro-kernels (8 f32 lanes, 16 ymm registers).
//!
//! Packed kernels `mr × nr` keep `mr · nr/8` accumulators plus `nr/8` W
//! vectors and one broadcast in registers (≤ 16): per k step, `nr/8` vector
//! loads of the packed panel, `mr` broadcasts of A, `mr · nr/8` FMAs. Direct
//! kernels keep `mr · nr` accumulators of dot products along k. Also the
//! F16C row conversion used when packing f16 weights (AVX-512 reuses it).

use super::{DirectFn, PackedFn};
use core::arch::x86_64::*;
use half::f16;

macro_rules! packed_kernels {
    ($(($name:ident, $mr:literal, $nv:literal)),* $(,)?) => {
        /// Packed micro-kernel shapes `(mr, nr)`, in order of preference.
        pub(super) const PACKED: &[(usize, usize)] = &[$(($mr, $nv * 8)),*];

        pub(super) fn packed(mr: usize, nr: usize) -> Option<PackedFn> {
            match (mr, nr) {
                $(($mr, nr) if nr == $nv * 8 => Some($name as PackedFn),)*
                _ => None,
            }
        }

        $(
        /// Packed micro-kernel, see [`PackedFn`] for the contract.
        ///
        /// # Safety
        /// The CPU must support AVX2, FMA and F16C; the pointers must satisfy the
        /// [`PackedFn`] contract.
        #[target_feature(enable = "avx2,fma,f16c")]
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
            const NR: usize = NV * 8;
            // SAFETY: all reads stay within the kc × mr A panel and the
            // kc × nr panel; writes within the m_eff × n_eff C tile.
            unsafe {
                let mut acc = [[_mm256_setzero_ps(); NV]; MR];
                let mut ap = a;
                let mut bp = b;
                for _ in 0..kc {
                    let mut bv = [_mm256_setzero_ps(); NV];
                    for (j, v) in bv.iter_mut().enumerate() {
                        *v = _mm256_loadu_ps(bp.add(8 * j));
                    }
                    for (i, row) in acc.iter_mut().enumerate() {
                        let av = _mm256_set1_ps(*ap.add(i));
                        for (acc, &bv) in row.iter_mut().zip(&bv) {
                            *acc = _mm256_fmadd_ps(av, bv, *acc);
                        }
                    }
                    ap = ap.add(MR);
                    bp = bp.add(NR);
                }
                if m_eff == MR && n_eff == NR {
                    for (i, row) in acc.iter().enumerate() {
                        for (j, &v) in row.iter().enumerate() {
                            let p = c.add(i * ldc + 8 * j);
                            _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), v));
                        }
                    }
                } else {
                    // Ragged edge: spill the tile, add the valid part.
                    let mut tmp = [0.0f32; MR * NR];
                    for (i, row) in acc.iter().enumerate() {
                        for (j, &v) in row.iter().enumerate() {
                            _mm256_storeu_ps(tmp.as_mut_ptr().add(i * NR + 8 * j), v);
                        }
                    }
                    for i in 0..m_eff {
                        for j in 0..n_eff {
                            *c.add(i * ldc + j) += tmp[i * NR + j];
                        }
                    }
                }
            }
        }
        )*
    };
}

packed_kernels! {
    (k6x16, 6, 2),
    (k4x24, 4, 3),
    (k8x8, 8, 1),
    (k4x16, 4, 2),
    (k2x32, 2, 4),
}

/// Loads 8 weights as f32.
trait Load8: Copy {
    /// # Safety
    /// 8 elements readable at `p`; AVX2, FMA and F16C available.
    unsafe fn load8(p: *const Self) -> __m256;
    fn widen(self) -> f32;
}

impl Load8 for f32 {
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> __m256 {
        // SAFETY: per the trait contract.
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
}

impl Load8 for f16 {
    #[inline(always)]
    unsafe fn load8(p: *const f16) -> __m256 {
        // SAFETY: per the trait contract; f16 is a transparent u16.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
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
unsafe fn direct_body<W: Load8, const MR: usize, const NR: usize>(
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
        let mut acc = [[_mm256_setzero_ps(); NR]; MR];
        let kv = k / 8 * 8;
        let mut p = 0;
        while p < kv {
            let mut wv = [_mm256_setzero_ps(); NR];
            for (v, r) in wv.iter_mut().zip(&wr) {
                *v = W::load8(r.add(p));
            }
            for (row, r) in acc.iter_mut().zip(&ar) {
                let av = _mm256_loadu_ps(r.add(p));
                for (acc, &wv) in row.iter_mut().zip(&wv) {
                    *acc = _mm256_fmadd_ps(av, wv, *acc);
                }
            }
            p += 8;
        }
        for i in 0..m_eff {
            for j in 0..n_eff {
                let mut s = hsum(acc[i][j]);
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
        /// AVX2, FMA and F16C available; pointers per the [`DirectFn`] contract.
        #[target_feature(enable = "avx2,fma,f16c")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $f32name(k: usize, a: *const f32, lda: usize, w: *const f32, ldw: usize,
                           c: *mut f32, ldc: usize, m_eff: usize, n_eff: usize) {
            // SAFETY: forwarded contract.
            unsafe { direct_body::<f32, $mr, $nr>(k, a, lda, w, ldw, c, ldc, m_eff, n_eff) }
        }

        /// Direct W16A32 kernel, see [`DirectFn`].
        ///
        /// # Safety
        /// AVX2, FMA and F16C available; pointers per the [`DirectFn`] contract.
        #[target_feature(enable = "avx2,fma,f16c")]
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
    (d1x4_f32, d1x4_f16, 1, 4),
    (d2x4_f32, d2x4_f16, 2, 4),
    (d4x2_f32, d4x2_f16, 4, 2),
    (d3x3_f32, d3x3_f16, 3, 3),
}

/// Horizontal sum of 8 lanes.
#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    // SAFETY: register-only AVX ops; the caller runs with AVX2 enabled.
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }
}

/// Widens `src` into `dst` (same length) with F16C, 8 at a time.
///
/// # Safety
/// The CPU must support AVX2 and F16C (the `Avx2` level guarantees both).
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
    debug_assert_eq!(src.len(), dst.len());
    let mut s = src.chunks_exact(8);
    let mut d = dst.chunks_exact_mut(8);
    for (s, d) in (&mut s).zip(&mut d) {
        // SAFETY: 8 f16 readable (transparent u16) and 8 f32 writable.
        unsafe {
            let h = _mm_loadu_si128(s.as_ptr() as *const __m128i);
            _mm256_storeu_ps(d.as_mut_ptr(), _mm256_cvtph_ps(h));
        }
    }
    for (d, s) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *d = s.to_f32();
    }
}

/// Packs 8 W rows (row `j` at `w + j·ldw`, `kb` long) into 8 adjacent
/// columns of a packed panel with row stride `nr`: `dst[p·nr + j] = W[j][p]`,
/// 8×8 blocks at a time with an in-register transpose (unpack, shuffle,
/// permute2f128), so packing costs ~3 shuffles per 8 values instead of 8
/// scalar stores.
#[inline(always)]
unsafe fn pack8_body<W: Load8>(w: *const W, ldw: usize, kb: usize, dst: *mut f32, nr: usize) {
    // SAFETY: 8 rows of kb readable; kb rows of 8 writable at stride nr.
    unsafe {
        let kv = kb / 8 * 8;
        let mut p = 0;
        while p < kv {
            let mut r = [_mm256_setzero_ps(); 8];
            for (j, v) in r.iter_mut().enumerate() {
                *v = W::load8(w.add(j * ldw + p));
            }
            let mut s = [_mm256_setzero_ps(); 8];
            for h in 0..2 {
                let (r0, r1, r2, r3) = (r[4 * h], r[4 * h + 1], r[4 * h + 2], r[4 * h + 3]);
                let (t0, t1) = (_mm256_unpacklo_ps(r0, r1), _mm256_unpackhi_ps(r0, r1));
                let (t2, t3) = (_mm256_unpacklo_ps(r2, r3), _mm256_unpackhi_ps(r2, r3));
                s[4 * h] = _mm256_shuffle_ps::<0x44>(t0, t2);
                s[4 * h + 1] = _mm256_shuffle_ps::<0xEE>(t0, t2);
                s[4 * h + 2] = _mm256_shuffle_ps::<0x44>(t1, t3);
                s[4 * h + 3] = _mm256_shuffle_ps::<0xEE>(t1, t3);
            }
            for t in 0..4 {
                let lo = _mm256_permute2f128_ps::<0x20>(s[t], s[t + 4]);
                let hi = _mm256_permute2f128_ps::<0x31>(s[t], s[t + 4]);
                _mm256_storeu_ps(dst.add((p + t) * nr), lo);
                _mm256_storeu_ps(dst.add((p + t + 4) * nr), hi);
            }
            p += 8;
        }
        for p in kv..kb {
            for j in 0..8 {
                *dst.add(p * nr + j) = (*w.add(j * ldw + p)).widen();
            }
        }
    }
}

/// [`pack8_body`] for f32 weights.
///
/// # Safety
/// AVX2 available; 8 rows of `kb` readable at `w` (stride `ldw`), `kb` rows
/// of 8 writable at `dst` (stride `nr`).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn pack8_f32(w: *const f32, ldw: usize, kb: usize, dst: *mut f32, nr: usize) {
    // SAFETY: forwarded contract.
    unsafe { pack8_body(w, ldw, kb, dst, nr) }
}

/// [`pack8_body`] for f16 weights (widened with F16C on load).
///
/// # Safety
/// As [`pack8_f32`], and F16C available.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn pack8_f16(w: *const f16, ldw: usize, kb: usize, dst: *mut f32, nr: usize) {
    // SAFETY: forwarded contract.
    unsafe { pack8_body(w, ldw, kb, dst, nr) }
}
