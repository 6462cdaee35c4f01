//! Integer vector instructions the quantized families (`qgemm`, `qgemv`,
//! `i8gemm`) share and Rust 1.95 has no stable intrinsic for.
//!
//! `vdotq_s32` (FEAT_DotProd) and `vmmlaq_s32` (FEAT_I8MM) are unstable
//! (`stdarch_neon_dotprod`, `stdarch_neon_i8mm`), so `sdot` and `smmla` are
//! emitted with `asm!` inside `#[target_feature]` functions: register-only,
//! `pure` and `nomem`, so the compiler schedules and keeps them like an
//! intrinsic once they are inlined into a kernel with the same features.

#[cfg(target_arch = "aarch64")]
pub(crate) use aarch64::*;

#[cfg(target_arch = "aarch64")]
mod aarch64 {
    use std::arch::aarch64::*;
    use std::arch::asm;

    /// Stamps `$name(acc, a, b)`: the one instruction `$ins` on three vector
    /// registers, accumulating into `acc`, under the features `$feat`.
    macro_rules! acc_op {
        ($(#[$m:meta])* $name:ident, $feat:literal, $ins:literal) => {
            $(#[$m])*
            #[inline]
            #[target_feature(enable = $feat)]
            pub(crate) fn $name(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
                let mut acc = acc;
                // SAFETY: register-only instruction, available under `$feat`.
                unsafe {
                    asm!($ins, acc = inout(vreg) acc, a = in(vreg) a, b = in(vreg) b,
                        options(pure, nomem, nostack, preserves_flags));
                }
                acc
            }
        };
    }

    acc_op!(
        /// `acc + Σ_{4 bytes} a·b` per i32 lane (`sdot v.4s, v.16b, v.16b`).
        sdot,
        "neon,dotprod",
        "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b"
    );

    acc_op!(
        /// `acc + a · bᵀ` for 2×8 int8 `a`, `b` (`smmla`): lanes
        /// `[a0·b0, a0·b1, a1·b0, a1·b1]`.
        smmla,
        "neon,i8mm",
        "smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b"
    );
}
