//! `sdot` and `smmla` int8 peak loops (see `int8.rs` for the design).
//!
//! `vdotq_s32` and `vmmlaq_s32` are unstable in Rust 1.95
//! (`stdarch_neon_dotprod`, `stdarch_neon_i8mm`), so the instruction is
//! emitted with `asm!` on registers only; being opaque, it is never folded
//! across iterations.

use std::arch::aarch64::*;
use std::arch::asm;

/// Stamps one peak loop: `ACC` chains of 4 i32, each iteration one `$ins`
/// per chain, under the features `$feat`.
macro_rules! peak_loop {
    ($(#[$m:meta])* $name:ident, $feat:literal, $ins:literal) => {
        $(#[$m])*
        ///
        /// # Safety
        /// The CPU must support the instruction's feature; `a.len() == b.len() == 16`,
        /// `init.len() == ACC`, `out.len() == ACC * 4`.
        #[target_feature(enable = $feat)]
        pub unsafe fn $name<const ACC: usize>(
            iters: usize,
            a: &[i8],
            b: &[i8],
            init: &[i32],
            out: &mut [i32],
        ) {
            debug_assert!(
                a.len() == 16 && b.len() == 16 && init.len() == ACC && out.len() == ACC * 4
            );
            // SAFETY: a and b hold 16 bytes each.
            let (va, vb) = unsafe { (vld1q_s8(a.as_ptr()), vld1q_s8(b.as_ptr())) };
            let mut acc = [vdupq_n_s32(0); ACC];
            for (r, x) in acc.iter_mut().zip(init) {
                *r = vdupq_n_s32(*x);
            }
            for _ in 0..iters {
                for r in &mut acc {
                    // SAFETY: register-only instruction, available under `$feat`.
                    unsafe {
                        asm!($ins, acc = inout(vreg) *r, a = in(vreg) va, b = in(vreg) vb,
                            options(pure, nomem, nostack, preserves_flags));
                    }
                }
            }
            for (k, r) in acc.iter().enumerate() {
                // SAFETY: out holds ACC * 4 i32.
                unsafe { vst1q_s32(out.as_mut_ptr().add(k * 4), *r) };
            }
        }
    };
}

peak_loop!(
    /// `sdot v.4s, v.16b, v.16b`: 16 multiply-adds per instruction.
    dotprod,
    "neon,dotprod",
    "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b"
);

peak_loop!(
    /// `smmla v.4s, v.16b, v.16b`: a 2×8 by 8×2 product, 32 multiply-adds.
    i8mm,
    "neon,i8mm",
    "smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b"
);
