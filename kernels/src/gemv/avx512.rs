//! AVX-512 (F + BW + VL) row-block kernels: 16 lanes per vector, f16 weights
//! widened with `vcvtph2ps zmm`, the k tail done with masked loads.

use super::{DotFn, Weight, select_dot};
use std::arch::x86_64::*;

const V: usize = 16;

/// The kernel for `nr` rows and `unroll` accumulators per row.
pub(super) fn select<T: Weight>(nr: usize, unroll: usize) -> DotFn<T> {
    select_dot!(dot_rows, T, nr, unroll)
}

/// Loads 16 weights as f32.
///
/// # Safety
/// AVX-512F available (the caller's `#[target_feature]` context); `p` valid
/// for 16 reads.
#[inline(always)]
unsafe fn load_w<T: Weight>(p: *const T) -> __m512 {
    unsafe {
        if T::IS_F16 {
            _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
        } else {
            _mm512_loadu_ps(p as *const f32)
        }
    }
}

/// Loads the first lanes of `m` weights as f32, the others zero; masked-off
/// lanes are not read, so they may lie past the end of `W`.
///
/// # Safety
/// AVX-512 F + BW + VL available; `p` valid for the reads `m` selects.
#[inline(always)]
unsafe fn load_w_masked<T: Weight>(m: __mmask16, p: *const T) -> __m512 {
    unsafe {
        if T::IS_F16 {
            _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p as *const i16))
        } else {
            _mm512_maskz_loadu_ps(m, p as *const f32)
        }
    }
}

/// Dot products of `R` rows of `W` with `x[..len]`, `U` accumulators per row.
///
/// # Safety
/// The CPU supports AVX-512 F, BW and VL; `w` is valid for `R` rows of `len`
/// elements at stride `ldw`, `x` for `len` reads, `out` for `R` writes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
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
    let mut acc = [[_mm512_setzero_ps(); U]; R];
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
            let mut xv = [_mm512_setzero_ps(); U];
            for (u, xu) in xv.iter_mut().enumerate() {
                *xu = _mm512_loadu_ps(x.add(i + u * V));
            }
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let wr = w.add(r * ldw + i);
                for (u, a) in acc_r.iter_mut().enumerate() {
                    *a = _mm512_fmadd_ps(load_w(wr.add(u * V)), xv[u], *a);
                }
            }
            i += step;
        }
        while i + V <= len {
            let xv = _mm512_loadu_ps(x.add(i));
            for (r, acc_r) in acc.iter_mut().enumerate() {
                acc_r[0] = _mm512_fmadd_ps(load_w(w.add(r * ldw + i)), xv, acc_r[0]);
            }
            i += V;
        }
        if i < len {
            // Masked-off lanes load as 0 in both operands: 0 · 0 adds nothing.
            let m: __mmask16 = (1u16 << (len - i)) - 1;
            let xv = _mm512_maskz_loadu_ps(m, x.add(i));
            for (r, acc_r) in acc.iter_mut().enumerate() {
                acc_r[0] = _mm512_fmadd_ps(load_w_masked(m, w.add(r * ldw + i)), xv, acc_r[0]);
            }
        }
        for (r, acc_r) in acc.iter().enumerate() {
            let mut s = acc_r[0];
            for a in &acc_r[1..] {
                s = _mm512_add_ps(s, *a);
            }
            *out.add(r) = _mm512_reduce_add_ps(s);
        }
    }
}
