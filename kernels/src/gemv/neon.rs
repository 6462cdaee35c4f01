//! NEON row-block kernels: 4 lanes per vector, f16 weights widened with
//! `fcvtl` (base ARMv8 floating point, so every aarch64 core has it).

use super::{DotFn, Weight, select_dot};
use std::arch::aarch64::*;

const V: usize = 4;

/// The kernel for `nr` rows and `unroll` accumulators per row.
pub(super) fn select<T: Weight>(nr: usize, unroll: usize) -> DotFn<T> {
    select_dot!(dot_rows, T, nr, unroll)
}

/// Loads 4 weights as f32.
///
/// # Safety
/// NEON available (the caller's `#[target_feature]` context); `p` valid for
/// 4 reads.
#[inline(always)]
unsafe fn load_w<T: Weight>(p: *const T) -> float32x4_t {
    unsafe {
        if T::IS_F16 {
            vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p as *const u16)))
        } else {
            vld1q_f32(p as *const f32)
        }
    }
}

/// Hints the line at `p` into L1 for one streaming read; `prfm` never faults,
/// so `p` may point anywhere (`core::arch::aarch64::_prefetch` is unstable).
#[inline(always)]
unsafe fn prefetch(p: *const u8) {
    unsafe {
        std::arch::asm!(
            "prfm pldl1strm, [{p}]",
            p = in(reg) p,
            options(nostack, readonly, preserves_flags)
        );
    }
}

/// Dot products of `R` rows of `W` with `x[..len]`, `U` accumulators per row.
///
/// # Safety
/// The CPU supports NEON; `w` is valid for `R` rows of `len` elements at
/// stride `ldw`, `x` for `len` reads, `out` for `R` writes.
#[target_feature(enable = "neon")]
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
    let mut acc = [[vdupq_n_f32(0.0); U]; R];
    let mut i = 0;
    unsafe {
        while i + step <= len {
            if pf != 0 {
                for r in 0..R {
                    // wrapping_add: the target may lie past the end of `W`.
                    let p = (w.wrapping_add(r * ldw + i) as *const u8).wrapping_add(pf);
                    let mut b = 0;
                    while b < step_bytes {
                        prefetch(p.wrapping_add(b));
                        b += 64;
                    }
                }
            }
            let mut xv = [vdupq_n_f32(0.0); U];
            for (u, xu) in xv.iter_mut().enumerate() {
                *xu = vld1q_f32(x.add(i + u * V));
            }
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let wr = w.add(r * ldw + i);
                for (u, a) in acc_r.iter_mut().enumerate() {
                    *a = vfmaq_f32(*a, load_w(wr.add(u * V)), xv[u]);
                }
            }
            i += step;
        }
        while i + V <= len {
            let xv = vld1q_f32(x.add(i));
            for (r, acc_r) in acc.iter_mut().enumerate() {
                acc_r[0] = vfmaq_f32(acc_r[0], load_w(w.add(r * ldw + i)), xv);
            }
            i += V;
        }
        if i < len {
            // Fewer than 4 left: zero-padded copies (0 · 0 adds nothing and
            // cannot create a NaN).
            let rem = len - i;
            let mut xb = [0f32; V];
            std::ptr::copy_nonoverlapping(x.add(i), xb.as_mut_ptr(), rem);
            let xv = vld1q_f32(xb.as_ptr());
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let mut wb = [T::ZERO; V];
                std::ptr::copy_nonoverlapping(w.add(r * ldw + i), wb.as_mut_ptr(), rem);
                acc_r[0] = vfmaq_f32(acc_r[0], load_w(wb.as_ptr()), xv);
            }
        }
        for (r, acc_r) in acc.iter().enumerate() {
            let mut s = acc_r[0];
            for a in &acc_r[1..] {
                s = vaddq_f32(s, *a);
            }
            *out.add(r) = vaddvq_f32(s);
        }
    }
}
