//! NEON quantized GEMV (baseline aarch64).
//!
//! W·A32: a block's nibbles are split with `and`/`ushr` (MXFP4 codes looked
//! up with `tbl`), widened `sxtl` → `sxtl` → `scvtf` into eight
//! `float32x4_t`, dotted with the activations and scaled once per block.
//! W·A8 without dotprod: `smull`/`smlal2` into i16 (at most 2·128·127, no
//! overflow), pairwise-widened to i32 with `sadalp`, converted and scaled by
//! `d_w · d_x`. The W·A8 kernel body is shared with `dotprod.rs` through
//! [`a8_family`], which only swaps the block dot product.

use super::{A8Rows, Rows, drive};
use crate::quant::blocks::{
    BlockMxfp4, BlockQ4_0, BlockQ4_1, BlockQ8_0, BlockQ8_1, F16Le, KVALUES_MXFP4, QK,
    e8m0_to_f32_half,
};
use std::arch::aarch64::*;

#[inline]
pub(super) fn fp16(h: F16Le) -> f32 {
    h.to_f32()
}

/// The 16 packed bytes of a 4-bit block as (values 0..16, values 16..32).
///
/// # Safety
/// `qs` must point to 16 readable bytes.
#[inline]
#[target_feature(enable = "neon")]
pub(super) unsafe fn nibbles(qs: *const u8) -> (uint8x16_t, uint8x16_t) {
    // SAFETY: the caller guarantees 16 readable bytes.
    let q = unsafe { vld1q_u8(qs) };
    (vandq_u8(q, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(q))
}

#[inline]
#[target_feature(enable = "neon")]
pub(super) fn mxfp4_table() -> int8x16_t {
    // SAFETY: KVALUES_MXFP4 is 16 bytes.
    unsafe { vld1q_s8(KVALUES_MXFP4.as_ptr()) }
}

/// Σ q·x over 16 int8 quants and 16 activations.
#[inline]
#[target_feature(enable = "neon")]
fn dot16(q: int8x16_t, x: &[float32x4_t]) -> float32x4_t {
    let lo = vmovl_s8(vget_low_s8(q));
    let hi = vmovl_high_s8(q);
    let f = |v: int32x4_t| vcvtq_f32_s32(v);
    let mut s = vmulq_f32(f(vmovl_s16(vget_low_s16(lo))), x[0]);
    s = vfmaq_f32(s, f(vmovl_high_s16(lo)), x[1]);
    s = vfmaq_f32(s, f(vmovl_s16(vget_low_s16(hi))), x[2]);
    vfmaq_f32(s, f(vmovl_high_s16(hi)), x[3])
}

macro_rules! a32_kernel {
    ($name:ident, $B:ty, |$b:ident, $x:ident, $xs:ident, $acc:ident| $body:expr) => {
        /// # Safety
        /// Needs NEON; `w` holds `y.len()` rows of `x.len() / 32` blocks.
        #[target_feature(enable = "neon")]
        unsafe fn $name<const R: usize>(w: &[$B], x: &[f32], y: &mut [f32]) {
            let nb = x.len() / QK;
            debug_assert!(w.len() == R * nb && y.len() == R);
            let mut accs = [vdupq_n_f32(0.0); R];
            for i in 0..nb {
                let xp = x[QK * i..QK * i + QK].as_ptr();
                // SAFETY: the slice above holds 32 floats.
                let $x: [float32x4_t; 8] =
                    std::array::from_fn(|j| unsafe { vld1q_f32(xp.add(4 * j)) });
                #[allow(unused_variables)]
                let $xs = {
                    let a = vaddq_f32(vaddq_f32($x[0], $x[1]), vaddq_f32($x[2], $x[3]));
                    let b = vaddq_f32(vaddq_f32($x[4], $x[5]), vaddq_f32($x[6], $x[7]));
                    vaddq_f32(a, b)
                };
                for (r, acc) in accs.iter_mut().enumerate() {
                    // SAFETY: r < R and i < nb (debug-asserted above).
                    let $b = unsafe { w.get_unchecked(r * nb + i) };
                    let $acc = *acc;
                    *acc = $body;
                }
            }
            for (out, acc) in y.iter_mut().zip(accs) {
                *out = vaddvq_f32(acc);
            }
        }
    };
}

a32_kernel!(a32_q4_0, BlockQ4_0, |b, x, xs, acc| {
    // SAFETY: qs is 16 bytes.
    let (lo, hi) = unsafe { nibbles(b.qs.as_ptr()) };
    let eight = vdupq_n_s8(8);
    let s = vaddq_f32(
        dot16(vsubq_s8(vreinterpretq_s8_u8(lo), eight), &x[0..4]),
        dot16(vsubq_s8(vreinterpretq_s8_u8(hi), eight), &x[4..8]),
    );
    vfmaq_n_f32(acc, s, fp16(b.d))
});

a32_kernel!(a32_q4_1, BlockQ4_1, |b, x, xs, acc| {
    // SAFETY: qs is 16 bytes.
    let (lo, hi) = unsafe { nibbles(b.qs.as_ptr()) };
    let s = vaddq_f32(
        dot16(vreinterpretq_s8_u8(lo), &x[0..4]),
        dot16(vreinterpretq_s8_u8(hi), &x[4..8]),
    );
    // Σ (d q + m) x = d Σ q x + m Σ x; `xs` lanes sum to Σ x.
    vfmaq_n_f32(vfmaq_n_f32(acc, s, fp16(b.d)), xs, fp16(b.m))
});

a32_kernel!(a32_q8_0, BlockQ8_0, |b, x, xs, acc| {
    // SAFETY: qs is 32 bytes.
    let (lo, hi) = unsafe { (vld1q_s8(b.qs.as_ptr()), vld1q_s8(b.qs.as_ptr().add(16))) };
    let s = vaddq_f32(dot16(lo, &x[0..4]), dot16(hi, &x[4..8]));
    vfmaq_n_f32(acc, s, fp16(b.d))
});

a32_kernel!(a32_mxfp4, BlockMxfp4, |b, x, xs, acc| {
    // SAFETY: qs is 16 bytes.
    let (lo, hi) = unsafe { nibbles(b.qs.as_ptr()) };
    let t = mxfp4_table();
    let s = vaddq_f32(
        dot16(vqtbl1q_s8(t, lo), &x[0..4]),
        dot16(vqtbl1q_s8(t, hi), &x[4..8]),
    );
    vfmaq_n_f32(acc, s, e8m0_to_f32_half(b.e))
});

/// W·A32 over the rows of `w`.
///
/// # Safety
/// `w` holds `y.len()` rows of `x.len() / block_size` blocks (NEON is
/// baseline on aarch64). Other formats fall back to scalar.
pub unsafe fn gemv_a32(w: Rows<'_>, x: &[f32], y: &mut [f32], rpb: usize) {
    let nb = x.len() / QK;
    // SAFETY (all arms): forwarded from the caller.
    unsafe {
        match w {
            Rows::Q4_0(w) => drive(
                w,
                x,
                nb,
                y,
                rpb,
                [a32_q4_0::<1>, a32_q4_0::<2>, a32_q4_0::<4>],
            ),
            Rows::Q4_1(w) => drive(
                w,
                x,
                nb,
                y,
                rpb,
                [a32_q4_1::<1>, a32_q4_1::<2>, a32_q4_1::<4>],
            ),
            Rows::Q8_0(w) => drive(
                w,
                x,
                nb,
                y,
                rpb,
                [a32_q8_0::<1>, a32_q8_0::<2>, a32_q8_0::<4>],
            ),
            Rows::Mxfp4(w) => drive(
                w,
                x,
                nb,
                y,
                rpb,
                [a32_mxfp4::<1>, a32_mxfp4::<2>, a32_mxfp4::<4>],
            ),
            other => super::scalar::gemv_a32(other, x, y),
        }
    }
}

/// Block dot product of 32 int8 pairs with `smull`/`smlal2`/`sadalp`:
/// four i32 partial sums.
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn dot32_smull(wl: int8x16_t, wh: int8x16_t, xl: int8x16_t, xh: int8x16_t) -> int32x4_t {
    let pl = vmlal_high_s8(vmull_s8(vget_low_s8(wl), vget_low_s8(xl)), wl, xl);
    let ph = vmlal_high_s8(vmull_s8(vget_low_s8(wh), vget_low_s8(xh)), wh, xh);
    vpadalq_s16(vpaddlq_s16(pl), ph)
}

/// The `s = d · Σq` term of an activation block (zero for Q8_0).
pub(super) trait ActSum {
    fn sum(&self) -> f32;
}
impl ActSum for BlockQ8_0 {
    #[inline(always)]
    fn sum(&self) -> f32 {
        0.0
    }
}
impl ActSum for BlockQ8_1 {
    #[inline(always)]
    fn sum(&self) -> f32 {
        self.s.to_f32()
    }
}

/// Generates one W·A8 kernel under `$feat` with block dot `$dot`:
/// `$decode` maps a weight block `$b` to (values 0..16, values 16..32 as
/// int8, scale `d`, offset `m`).
macro_rules! a8_kernel {
    ($feat:literal, $dot:path, $name:ident, $B:ty, $X:ty, |$b:ident| $decode:expr) => {
        /// # Safety
        /// Needs the target features above; `w` holds `y.len()` rows of `x.len()` blocks.
        #[target_feature(enable = $feat)]
        unsafe fn $name<const R: usize>(w: &[$B], x: &[$X], y: &mut [f32]) {
            use $crate::qgemv::neon::ActSum as _;
            let nb = x.len();
            debug_assert!(w.len() == R * nb && y.len() == R);
            let mut accs = [vdupq_n_f32(0.0); R];
            let mut offs = [0.0f32; R];
            for (i, xb) in x.iter().enumerate() {
                // SAFETY: qs is 32 bytes.
                let (xl, xh) =
                    unsafe { (vld1q_s8(xb.qs.as_ptr()), vld1q_s8(xb.qs.as_ptr().add(16))) };
                let (dx, sx) = (xb.d.to_f32(), xb.sum());
                for r in 0..R {
                    // SAFETY: r < R and i < nb (debug-asserted above).
                    let $b = unsafe { w.get_unchecked(r * nb + i) };
                    let (wl, wh, dw, m): (int8x16_t, int8x16_t, f32, f32) = $decode;
                    let s = vcvtq_f32_s32($dot(wl, wh, xl, xh));
                    accs[r] = vfmaq_n_f32(accs[r], s, dw * dx);
                    offs[r] += m * sx;
                }
            }
            for r in 0..R {
                y[r] = vaddvq_f32(accs[r]) + offs[r];
            }
        }
    };
}
pub(super) use a8_kernel;

/// The four W·A8 kernels (Q4_0, Q8_0, MXFP4 × Q8_0; Q4_1 × Q8_1) of one
/// dot-product flavour.
macro_rules! a8_family {
    ($feat:literal, $dot:path, $q4_0:ident, $q8_0:ident, $mxfp4:ident, $q4_1:ident) => {
        $crate::qgemv::neon::a8_kernel!($feat, $dot, $q4_0, BlockQ4_0, BlockQ8_0, |b| {
            // SAFETY: qs is 16 bytes.
            let (lo, hi) = unsafe { $crate::qgemv::neon::nibbles(b.qs.as_ptr()) };
            let eight = vdupq_n_s8(8);
            (
                vsubq_s8(vreinterpretq_s8_u8(lo), eight),
                vsubq_s8(vreinterpretq_s8_u8(hi), eight),
                $crate::qgemv::neon::fp16(b.d),
                0.0,
            )
        });
        $crate::qgemv::neon::a8_kernel!($feat, $dot, $q8_0, BlockQ8_0, BlockQ8_0, |b| {
            // SAFETY: qs is 32 bytes.
            let (l, h) = unsafe { (vld1q_s8(b.qs.as_ptr()), vld1q_s8(b.qs.as_ptr().add(16))) };
            (l, h, $crate::qgemv::neon::fp16(b.d), 0.0)
        });
        $crate::qgemv::neon::a8_kernel!($feat, $dot, $mxfp4, BlockMxfp4, BlockQ8_0, |b| {
            // SAFETY: qs is 16 bytes.
            let (lo, hi) = unsafe { $crate::qgemv::neon::nibbles(b.qs.as_ptr()) };
            let t = $crate::qgemv::neon::mxfp4_table();
            (
                vqtbl1q_s8(t, lo),
                vqtbl1q_s8(t, hi),
                e8m0_to_f32_half(b.e),
                0.0,
            )
        });
        $crate::qgemv::neon::a8_kernel!($feat, $dot, $q4_1, BlockQ4_1, BlockQ8_1, |b| {
            // SAFETY: qs is 16 bytes.
            let (lo, hi) = unsafe { $crate::qgemv::neon::nibbles(b.qs.as_ptr()) };
            (
                vreinterpretq_s8_u8(lo),
                vreinterpretq_s8_u8(hi),
                $crate::qgemv::neon::fp16(b.d),
                $crate::qgemv::neon::fp16(b.m),
            )
        });
    };
}
pub(super) use a8_family;

a8_family!("neon", dot32_smull, a8_q4_0, a8_q8_0, a8_mxfp4, a8_q4_1);

/// W·A8 with `smull`/`sadalp` (baseline NEON).
///
/// # Safety
/// Shapes as in `drive`. Other formats fall back to scalar.
pub unsafe fn gemv_a8(w: A8Rows<'_>, y: &mut [f32], rpb: usize) {
    // SAFETY (all arms): forwarded from the caller.
    unsafe {
        match w {
            A8Rows::Q4_0(w, x) => drive(
                w,
                x,
                x.len(),
                y,
                rpb,
                [a8_q4_0::<1>, a8_q4_0::<2>, a8_q4_0::<4>],
            ),
            A8Rows::Q8_0(w, x) => drive(
                w,
                x,
                x.len(),
                y,
                rpb,
                [a8_q8_0::<1>, a8_q8_0::<2>, a8_q8_0::<4>],
            ),
            A8Rows::Mxfp4(w, x) => drive(
                w,
                x,
                x.len(),
                y,
                rpb,
                [a8_mxfp4::<1>, a8_mxfp4::<2>, a8_mxfp4::<4>],
            ),
            A8Rows::Q4_1(w, x) => drive(
                w,
                x,
                x.len(),
                y,
                rpb,
                [a8_q4_1::<1>, a8_q4_1::<2>, a8_q4_1::<4>],
            ),
            other => super::scalar::gemv_a8(other, y),
        }
    }
}
