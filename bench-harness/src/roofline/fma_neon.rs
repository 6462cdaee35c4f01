//! NEON peak loop (see `fma.rs` for the design).

use std::arch::aarch64::*;

/// `ACC` chains of 4 f32 with `fmla`.
///
/// # Safety
/// The CPU must support NEON (every AArch64 Linux CPU does);
/// `init.len() == ACC`, `out.len() == ACC * 4`.
#[target_feature(enable = "neon")]
pub unsafe fn neon<const ACC: usize>(iters: usize, m: f32, c: f32, init: &[f32], out: &mut [f32]) {
    debug_assert!(init.len() == ACC && out.len() == ACC * 4);
    let vm = vdupq_n_f32(std::hint::black_box(m));
    let vc = vdupq_n_f32(std::hint::black_box(c));
    let mut acc = [vdupq_n_f32(0.0); ACC];
    for (a, x) in acc.iter_mut().zip(init) {
        *a = vdupq_n_f32(*x);
    }
    for _ in 0..iters {
        for a in &mut acc {
            // c + a * m, fused.
            *a = vfmaq_f32(vc, *a, vm);
        }
    }
    for (k, a) in acc.iter().enumerate() {
        // SAFETY: out holds ACC * 4 floats.
        unsafe { vst1q_f32(out.as_mut_ptr().add(k * 4), *a) };
    }
}
