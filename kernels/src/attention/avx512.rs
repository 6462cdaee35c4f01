//! AVX-512 (F + BW + VL) page kernels: the f32/f16 bodies of `body.rs` at
//! 16 lanes with masked head-dim tails (f16 rows widened with
//! `vcvtph2ps zmm`), and the Q8_0 kernels, whose rows are widened
//! `i8 → i32 → f32` in registers (a 32-block is two vectors).

use crate::quant::{BlockQ8_0, QK};
use crate::simd::avx512::Avx512;
use std::arch::x86_64::*;

super::body::page_kernels! { isa: Avx512, feature: "avx512f,avx512bw,avx512vl,fma,f16c", needs: "AVX-512 F/BW/VL + FMA + F16C" }

/// 16 int8 at `p` as 16 f32 lanes.
///
/// # Safety
/// AVX-512F available; `p` valid for 16 reads.
#[inline(always)]
unsafe fn load16_i8(p: *const i8) -> __m512 {
    unsafe { _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p as *const __m128i))) }
}

/// Scores against Q8_0 rows: per block `d · Σ q·qs`.
///
/// # Safety
/// AVX-512 F/BW/VL + FMA + F16C; `q.len()` is a multiple of 32 and `k`
/// holds `out.len()` rows of `q.len() / 32` blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
pub unsafe fn scores_q8(q: &[f32], k: &[BlockQ8_0], scale: f32, out: &mut [f32]) {
    let nb = q.len() / QK;
    debug_assert_eq!(k.len(), out.len() * nb);
    let qp = q.as_ptr();
    for (s, kr) in out.iter_mut().zip(k.chunks_exact(nb)) {
        let mut acc = _mm512_setzero_ps();
        for (b, blk) in kr.iter().enumerate() {
            let x = blk.qs.as_ptr();
            let qb = qp.wrapping_add(b * QK);
            // SAFETY: 32 quants per block, 32 query values per block.
            unsafe {
                let mut s = _mm512_mul_ps(_mm512_loadu_ps(qb), load16_i8(x));
                s = _mm512_fmadd_ps(_mm512_loadu_ps(qb.add(16)), load16_i8(x.add(16)), s);
                acc = _mm512_fmadd_ps(s, _mm512_set1_ps(blk.d.to_f32()), acc);
            }
        }
        *s = _mm512_reduce_add_ps(acc) * scale;
    }
}

/// Value axpy over Q8_0 rows: per block `acc += (p·d) · qs`.
///
/// # Safety
/// AVX-512 F/BW/VL + FMA + F16C; `acc.len()` is a multiple of 32 and `v`
/// holds `p.len()` rows of `acc.len() / 32` blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
pub unsafe fn accum_q8(acc: &mut [f32], p: &[f32], v: &[BlockQ8_0]) {
    let nb = acc.len() / QK;
    debug_assert_eq!(v.len(), p.len() * nb);
    for (b, ab) in acc.chunks_exact_mut(QK).enumerate() {
        let ap = ab.as_mut_ptr();
        // SAFETY: ab holds 32 values; each block holds 32 quants.
        unsafe {
            let (mut a0, mut a1) = (_mm512_loadu_ps(ap), _mm512_loadu_ps(ap.add(16)));
            for (t, &pt) in p.iter().enumerate() {
                let blk = &v[t * nb + b];
                let pd = _mm512_set1_ps(pt * blk.d.to_f32());
                let x = blk.qs.as_ptr();
                a0 = _mm512_fmadd_ps(pd, load16_i8(x), a0);
                a1 = _mm512_fmadd_ps(pd, load16_i8(x.add(16)), a1);
            }
            _mm512_storeu_ps(ap, a0);
            _mm512_storeu_ps(ap.add(16), a1);
        }
    }
}
