//! AVX2 + FMA + F16C row-block kernels: 8 lanes per vector, f16 weights
//! widened with `vcvtph2ps`.

use super::{DotFn, Weight, select_dot};
use std::arch::x86_64::*;

const V: usize = 8;

/// The kernel for `nr` rows and `unroll` accumulators per row.
pub(super) fn select<T: Weight>(nr: usize, unroll: usize) -> DotFn<T> {
    select_dot!(dot_rows, T, nr, unroll)
}

/// Loads 8 weights as f32.
///
/// # Safety
/// AVX2 + F16C available (the caller's `#[target_feature]` context); `p` valid
/// for 8 reads.
#[inline(always)]
unsafe fn load_w<T: Weight>(p: *const T) -> __m256 {
    unsafe {
        if T::IS_F16 {
            _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
        } else {
            _mm256_loadu_ps(p as *const f32)
        }
    }
}

/// Sum of the 8 lanes.
#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }
}

/// Dot products of `R` rows of `W` with `x[..len]`, `U` accumulators per row.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `w` is valid for `R` rows of `len`
/// elements at stride `ldw`, `x` for `len` reads, `out` for `R` writes.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_rows<T: Weight, const R: usize, const U: usize>(
    w: *const T,
    ldw: usize,
    x: *const f32,
    len: usize,
    pf: usize,
    out: *mut f32,
) {
    debug_assert!(R >= 1 && U >= 1);
    let step = V * U;
    let step_bytes = step * size_of::<T>();
    let mut acc = [[_mm256_setzero_ps(); U]; R];
    let mut i = 0;
    unsafe {
        while i + step <= len {
            if pf != 0 {
                for r in 0..R {
                    // wrapping_add: the prefetch target may lie past the end
                    // of `W`; prefetches never fault, but pointer `add` past
                    // the allocation would be UB.
                    let p = (w.wrapping_add(r * ldw + i) as *const i8).wrapping_add(pf);
                    let mut b = 0;
                    while b < step_bytes {
                        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(b));
                        b += 64;
                    }
                }
            }
            let mut xv = [_mm256_setzero_ps(); U];
            for (u, xu) in xv.iter_mut().enumerate() {
                *xu = _mm256_loadu_ps(x.add(i + u * V));
            }
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let wr = w.add(r * ldw + i);
                for (u, a) in acc_r.iter_mut().enumerate() {
                    *a = _mm256_fmadd_ps(load_w(wr.add(u * V)), xv[u], *a);
                }
            }
            i += step;
        }
        while i + V <= len {
            let xv = _mm256_loadu_ps(x.add(i));
            for (r, acc_r) in acc.iter_mut().enumerate() {
                acc_r[0] = _mm256_fmadd_ps(load_w(w.add(r * ldw + i)), xv, acc_r[0]);
            }
            i += V;
        }
        if i < len {
            // Fewer than 8 left: zero-padded copies (0 · 0 adds nothing and
            // cannot create a NaN).
            let rem = len - i;
            let mut xb = [0f32; V];
            std::ptr::copy_nonoverlapping(x.add(i), xb.as_mut_ptr(), rem);
            let xv = _mm256_loadu_ps(xb.as_ptr());
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let mut wb = [T::ZERO; V];
                std::ptr::copy_nonoverlapping(w.add(r * ldw + i), wb.as_mut_ptr(), rem);
                acc_r[0] = _mm256_fmadd_ps(load_w(wb.as_ptr()), xv, acc_r[0]);
            }
        }
        for (r, acc_r) in acc.iter().enumerate() {
            let mut s = acc_r[0];
            for a in &acc_r[1..] {
                s = _mm256_add_ps(s, *a);
            }
            *out.add(r) = hsum(s);
        }
    }
}
