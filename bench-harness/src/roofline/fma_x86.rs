//! AVX2+FMA and AVX-512 peak loops (see `fma.rs` for the design).

use std::arch::x86_64::*;

/// `ACC` chains of 8 f32 with `vfmadd`.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `init.len() == ACC`, `out.len() == ACC * 8`.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn avx2<const ACC: usize>(iters: usize, m: f32, c: f32, init: &[f32], out: &mut [f32]) {
    debug_assert!(init.len() == ACC && out.len() == ACC * 8);
    let vm = _mm256_set1_ps(std::hint::black_box(m));
    let vc = _mm256_set1_ps(std::hint::black_box(c));
    let mut acc = [_mm256_setzero_ps(); ACC];
    for (a, x) in acc.iter_mut().zip(init) {
        *a = _mm256_set1_ps(*x);
    }
    for _ in 0..iters {
        for a in &mut acc {
            *a = _mm256_fmadd_ps(*a, vm, vc);
        }
    }
    for (k, a) in acc.iter().enumerate() {
        // SAFETY: out holds ACC * 8 floats; unaligned store.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(k * 8), *a) };
    }
}

/// `ACC` chains of 16 f32 with `vfmadd` on zmm registers.
///
/// # Safety
/// The CPU must support AVX-512F; `init.len() == ACC`, `out.len() == ACC * 16`.
#[target_feature(enable = "avx512f")]
pub unsafe fn avx512<const ACC: usize>(
    iters: usize,
    m: f32,
    c: f32,
    init: &[f32],
    out: &mut [f32],
) {
    debug_assert!(init.len() == ACC && out.len() == ACC * 16);
    let vm = _mm512_set1_ps(std::hint::black_box(m));
    let vc = _mm512_set1_ps(std::hint::black_box(c));
    let mut acc = [_mm512_setzero_ps(); ACC];
    for (a, x) in acc.iter_mut().zip(init) {
        *a = _mm512_set1_ps(*x);
    }
    for _ in 0..iters {
        for a in &mut acc {
            *a = _mm512_fmadd_ps(*a, vm, vc);
        }
    }
    for (k, a) in acc.iter().enumerate() {
        // SAFETY: out holds ACC * 16 floats; unaligned store.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(k * 16), *a) };
    }
}
