//! AVX2 + FMA + F16C page kernels: the f32/f16 bodies of `body.rs` at 8
//! lanes (f16 rows widened with `vcvtph2ps`), and the Q8_0 kernels, whose
//! rows are widened `i8 → i32 → f32` in registers 8 at a time.

use crate::quant::{BlockQ8_0, QK};
use crate::simd::Simd;
use crate::simd::avx2::Avx2;
use std::arch::x86_64::*;

super::body::page_kernels! { isa: Avx2, feature: "avx2,fma,f16c", needs: "AVX2 + FMA + F16C" }

/// 8 int8 at `p` as 8 f32 lanes.
///
/// # Safety
/// AVX2 available; `p` valid for 8 reads.
#[inline(always)]
unsafe fn load8_i8(p: *const i8) -> __m256 {
    unsafe { _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p as *const __m128i))) }
}

/// Scores against Q8_0 rows: per block `d · Σ q·qs`, the block sum kept in
/// a vector and scaled by `d` with one FMA.
///
/// # Safety
/// AVX2 + FMA + F16C; `q.len()` is a multiple of 32 and `k` holds
/// `out.len()` rows of `q.len() / 32` blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn scores_q8(q: &[f32], k: &[BlockQ8_0], scale: f32, out: &mut [f32]) {
    let nb = q.len() / QK;
    debug_assert_eq!(k.len(), out.len() * nb);
    let qp = q.as_ptr();
    for (s, kr) in out.iter_mut().zip(k.chunks_exact(nb)) {
        let mut acc = _mm256_setzero_ps();
        for (b, blk) in kr.iter().enumerate() {
            let x = blk.qs.as_ptr();
            let qb = qp.wrapping_add(b * QK);
            // SAFETY: 32 quants per block, 32 query values per block.
            unsafe {
                let mut s = _mm256_mul_ps(_mm256_loadu_ps(qb), load8_i8(x));
                s = _mm256_fmadd_ps(_mm256_loadu_ps(qb.add(8)), load8_i8(x.add(8)), s);
                s = _mm256_fmadd_ps(_mm256_loadu_ps(qb.add(16)), load8_i8(x.add(16)), s);
                s = _mm256_fmadd_ps(_mm256_loadu_ps(qb.add(24)), load8_i8(x.add(24)), s);
                acc = _mm256_fmadd_ps(s, _mm256_set1_ps(blk.d.to_f32()), acc);
            }
        }
        // SAFETY: AVX2 is enabled here.
        *s = unsafe { Avx2::reduce_add(acc) } * scale;
    }
}

/// Value axpy over Q8_0 rows: per block `acc += (p·d) · qs`, the block's
/// 32 accumulators held in registers across the page's rows.
///
/// # Safety
/// AVX2 + FMA + F16C; `acc.len()` is a multiple of 32 and `v` holds
/// `p.len()` rows of `acc.len() / 32` blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn accum_q8(acc: &mut [f32], p: &[f32], v: &[BlockQ8_0]) {
    let nb = acc.len() / QK;
    debug_assert_eq!(v.len(), p.len() * nb);
    for (b, ab) in acc.chunks_exact_mut(QK).enumerate() {
        let ap = ab.as_mut_ptr();
        // SAFETY: ab holds 32 values; each block holds 32 quants.
        unsafe {
            let mut a = [
                _mm256_loadu_ps(ap),
                _mm256_loadu_ps(ap.add(8)),
                _mm256_loadu_ps(ap.add(16)),
                _mm256_loadu_ps(ap.add(24)),
            ];
            for (t, &pt) in p.iter().enumerate() {
                let blk = &v[t * nb + b];
                let pd = _mm256_set1_ps(pt * blk.d.to_f32());
                let x = blk.qs.as_ptr();
                for (u, au) in a.iter_mut().enumerate() {
                    *au = _mm256_fmadd_ps(pd, load8_i8(x.add(8 * u)), *au);
                }
            }
            for (u, au) in a.iter().enumerate() {
                _mm256_storeu_ps(ap.add(8 * u), *au);
            }
        }
    }
}
