//! NEON quantized GEMV (baseline aarch64).
//!
//! W·A32: a block's nibbles are split with `and`/`ushr` (MXFP4 codes looked
//! up with `tbl`), widened `sxtl` → `sxtl` → `scvtf` into eight
//! `float32x4_t`, dotted with the activations and scaled once per block.
//! W·A8 without dotprod: `smull`/`smlal2` into i16 (at most 2·128·127, no
//! overflow), pairwise-widened to i32 with `sadalp`, converted and scaled by
//! `d_w · d_x`. The W·A8 kernel body is shared with `dotprod.rs` through
//! [`a8_family`], which only swaps the block dot product.

use super::{A8Rows, QGemvParams, Rows, a8_entry, a32_entry};
use crate::quant::blocks::{
    BlockMxfp4, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K,
    BlockQ8_0, BlockQ8_1, BlockQ8K, F16Le, KSubBlock, KVALUES_MXFP4, QK, QK_K, e8m0_to_f32_half,
};
use std::arch::aarch64::*;

/// `GGML_FP16_TO_FP32` with one `fcvt s, h` (base ARMv8 FP; the
/// `float16x4_t` intrinsics are still unstable in Rust 1.95, and the
/// software conversion costs ~10 instructions per block).
#[inline]
pub(super) fn fp16(h: F16Le) -> f32 {
    let out: f32;
    // SAFETY: register-only instructions of the base aarch64 ISA.
    unsafe {
        std::arch::asm!(
            "fmov {t:s}, {b:w}",
            "fcvt {o:s}, {t:h}",
            b = in(reg) u16::from_le_bytes(h.0) as u32,
            t = out(vreg) _,
            o = out(vreg) out,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    out
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

/// The fifth bits of a Q5 block (`qh`, bit j = value j) as bytes `0x10` /
/// `0x00`: (values 0..16, values 16..32).
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn q5_high_bits(qh: [u8; 4]) -> (uint8x16_t, uint8x16_t) {
    const BITS: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    // SAFETY: BITS is 16 bytes.
    let bits = unsafe { vld1q_u8(BITS.as_ptr()) };
    let lo = vcombine_u8(vdup_n_u8(qh[0]), vdup_n_u8(qh[1]));
    let hi = vcombine_u8(vdup_n_u8(qh[2]), vdup_n_u8(qh[3]));
    let b4 = vdupq_n_u8(0x10);
    (
        vandq_u8(vtstq_u8(lo, bits), b4),
        vandq_u8(vtstq_u8(hi, bits), b4),
    )
}

/// Unsigned 5-bit quants of a Q5 block: (values 0..16, values 16..32).
///
/// # Safety
/// `qs` must point to 16 readable bytes.
#[inline]
#[target_feature(enable = "neon")]
pub(super) unsafe fn q5_values(qs: *const u8, qh: [u8; 4]) -> (int8x16_t, int8x16_t) {
    // SAFETY: forwarded.
    let (lo, hi) = unsafe { nibbles(qs) };
    let (hl, hh) = q5_high_bits(qh);
    (
        vreinterpretq_s8_u8(vorrq_u8(lo, hl)),
        vreinterpretq_s8_u8(vorrq_u8(hi, hh)),
    )
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

a32_kernel!(a32_q5_0, BlockQ5_0, |b, x, xs, acc| {
    // SAFETY: qs is 16 bytes.
    let (lo, hi) = unsafe { q5_values(b.qs.as_ptr(), b.qh) };
    let k16 = vdupq_n_s8(16);
    let s = vaddq_f32(
        dot16(vsubq_s8(lo, k16), &x[0..4]),
        dot16(vsubq_s8(hi, k16), &x[4..8]),
    );
    vfmaq_n_f32(acc, s, fp16(b.d))
});

a32_kernel!(a32_q5_1, BlockQ5_1, |b, x, xs, acc| {
    // SAFETY: qs is 16 bytes.
    let (lo, hi) = unsafe { q5_values(b.qs.as_ptr(), b.qh) };
    let s = vaddq_f32(dot16(lo, &x[0..4]), dot16(hi, &x[4..8]));
    vfmaq_n_f32(vfmaq_n_f32(acc, s, fp16(b.d)), xs, fp16(b.m))
});

/// Q4_K / Q5_K W·A32: per 32-value sub-block, the nibbles (low half of a
/// 32-byte run for even sub-blocks, high for odd), with Q5_K's fifth bit
/// (bit j of `qh`) ORed in as 16, are widened and dotted with `x`;
/// `acc += d·sc · Σ q·x − dmin·m · Σ x`.
///
/// # Safety
/// `w` holds `y.len()` rows of `x.len() / 256` super-blocks.
#[target_feature(enable = "neon")]
unsafe fn a32_k_sub<B: KSubBlock, const R: usize>(w: &[B], x: &[f32], y: &mut [f32]) {
    use crate::quant::kquants::get_scale_min_k4;
    let nb = x.len() / QK_K;
    debug_assert!(w.len() == R * nb && y.len() == R);
    let mut accs = [vdupq_n_f32(0.0); R];
    let m4 = vdupq_n_u8(0x0F);
    for i in 0..nb {
        for j in 0..QK_K / 32 {
            let xp = x[QK_K * i + 32 * j..QK_K * i + 32 * j + 32].as_ptr();
            // SAFETY: the slice above holds 32 floats.
            let xv: [float32x4_t; 8] = std::array::from_fn(|t| unsafe { vld1q_f32(xp.add(4 * t)) });
            let xs = {
                let a = vaddq_f32(vaddq_f32(xv[0], xv[1]), vaddq_f32(xv[2], xv[3]));
                let b = vaddq_f32(vaddq_f32(xv[4], xv[5]), vaddq_f32(xv[6], xv[7]));
                vaddq_f32(a, b)
            };
            for (r, acc) in accs.iter_mut().enumerate() {
                // SAFETY: in bounds (debug-asserted above).
                let b = unsafe { w.get_unchecked(r * nb + i) };
                let (sc, m) = get_scale_min_k4(j, b.scales());
                let qp = b.qs()[32 * (j / 2)..32 * (j / 2) + 32].as_ptr();
                // SAFETY: the slice above holds 32 bytes.
                let (qa, qb) = unsafe { (vld1q_u8(qp), vld1q_u8(qp.add(16))) };
                let (mut qa, mut qb) = if j % 2 == 0 {
                    (vandq_u8(qa, m4), vandq_u8(qb, m4))
                } else {
                    (vshrq_n_u8::<4>(qa), vshrq_n_u8::<4>(qb))
                };
                if B::FIVE {
                    let hp = b.qh().as_ptr();
                    // SAFETY: qh holds 32 bytes.
                    let (ha, hb) = unsafe { (vld1q_u8(hp), vld1q_u8(hp.add(16))) };
                    qa = vorrq_u8(qa, fifth_bits(ha, j));
                    qb = vorrq_u8(qb, fifth_bits(hb, j));
                }
                let s = vaddq_f32(
                    dot16(vreinterpretq_s8_u8(qa), &xv[0..4]),
                    dot16(vreinterpretq_s8_u8(qb), &xv[4..8]),
                );
                let a = vfmaq_n_f32(*acc, s, fp16(b.d()) * sc as f32);
                *acc = vfmsq_n_f32(a, xs, fp16(b.dmin()) * m as f32);
            }
        }
    }
    for (out, acc) in y.iter_mut().zip(accs) {
        *out = vaddvq_f32(acc);
    }
}

/// Bit `j` of each byte of a Q5_K `qh` run, as 16 (the value's fifth bit).
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn fifth_bits(qh: uint8x16_t, j: usize) -> uint8x16_t {
    let bit = vandq_u8(vshlq_u8(qh, vdupq_n_s8(-(j as i8))), vdupq_n_u8(1));
    vshlq_n_u8::<4>(bit)
}

/// Q6_K W·A32: per 16-value group, the 6-bit values are rebuilt from
/// `ql`/`qh`, re-centred, widened and dotted; `acc += d·sc · Σ q·x`.
///
/// # Safety
/// `w` holds `y.len()` rows of `x.len() / 256` super-blocks.
#[target_feature(enable = "neon")]
unsafe fn a32_q6_k<const R: usize>(w: &[BlockQ6K], x: &[f32], y: &mut [f32]) {
    let nb = x.len() / QK_K;
    debug_assert!(w.len() == R * nb && y.len() == R);
    let mut accs = [vdupq_n_f32(0.0); R];
    let m4 = vdupq_n_u8(0x0F);
    let m2 = vdupq_n_u8(3);
    let k32 = vdupq_n_s8(32);
    for i in 0..nb {
        for g in 0..QK_K / 16 {
            let (c, p, h) = (g / 8, (g % 8) / 2, g % 2);
            let xp = x[QK_K * i + 16 * g..QK_K * i + 16 * g + 16].as_ptr();
            // SAFETY: the slice above holds 16 floats.
            let xv: [float32x4_t; 4] = std::array::from_fn(|t| unsafe { vld1q_f32(xp.add(4 * t)) });
            for (r, acc) in accs.iter_mut().enumerate() {
                // SAFETY: in bounds (debug-asserted above).
                let b = unsafe { w.get_unchecked(r * nb + i) };
                let lo_at = 64 * c + 32 * (p & 1) + 16 * h;
                let hi_at = 32 * c + 16 * h;
                // SAFETY: ql has 128 bytes and qh 64; both 16-byte runs are inside.
                let (ql, qh) = unsafe {
                    (
                        vld1q_u8(b.ql[lo_at..lo_at + 16].as_ptr()),
                        vld1q_u8(b.qh[hi_at..hi_at + 16].as_ptr()),
                    )
                };
                let lo = if p < 2 {
                    vandq_u8(ql, m4)
                } else {
                    vshrq_n_u8::<4>(ql)
                };
                let hb = vandq_u8(vshlq_u8(qh, vdupq_n_s8(-2 * p as i8)), m2);
                let q = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, vshlq_n_u8::<4>(hb))), k32);
                let s = dot16(q, &xv);
                *acc = vfmaq_n_f32(*acc, s, fp16(b.d) * b.scales[g] as f32);
            }
        }
    }
    for (out, acc) in y.iter_mut().zip(accs) {
        *out = vaddvq_f32(acc);
    }
}

/// W·A32 over the rows of `w`.
///
/// # Safety
/// `w` holds `y.len()` rows of `x.len() / block_size` blocks (NEON is
/// baseline on aarch64).
pub unsafe fn gemv_a32(w: Rows<'_>, x: &[f32], y: &mut [f32], rpb: QGemvParams) {
    // SAFETY (all arms): forwarded from the caller.
    unsafe {
        a32_entry!(w, x, y, rpb, [
            Q4_0 => a32_q4_0, Q4_1 => a32_q4_1, Q8_0 => a32_q8_0, Mxfp4 => a32_mxfp4,
            Q4K => a32_k_sub<BlockQ4K>, Q5K => a32_k_sub<BlockQ5K>, Q6K => a32_q6_k,
            Q5_0 => a32_q5_0, Q5_1 => a32_q5_1,
        ])
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
        fp16(self.s)
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
                let (dx, sx) = ($crate::qgemv::neon::fp16(xb.d), xb.sum());
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
    (
        $feat:literal, $dot:path, $q4_0:ident, $q8_0:ident, $mxfp4:ident, $q4_1:ident, $q5_0:ident,
        $q5_1:ident
    ) => {
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
        $crate::qgemv::neon::a8_kernel!($feat, $dot, $q5_0, BlockQ5_0, BlockQ8_0, |b| {
            // SAFETY: qs is 16 bytes.
            let (lo, hi) = unsafe { $crate::qgemv::neon::q5_values(b.qs.as_ptr(), b.qh) };
            let k16 = vdupq_n_s8(16);
            (
                vsubq_s8(lo, k16),
                vsubq_s8(hi, k16),
                $crate::qgemv::neon::fp16(b.d),
                0.0,
            )
        });
        $crate::qgemv::neon::a8_kernel!($feat, $dot, $q5_1, BlockQ5_1, BlockQ8_1, |b| {
            // SAFETY: qs is 16 bytes.
            let (lo, hi) = unsafe { $crate::qgemv::neon::q5_values(b.qs.as_ptr(), b.qh) };
            (
                lo,
                hi,
                $crate::qgemv::neon::fp16(b.d),
                $crate::qgemv::neon::fp16(b.m),
            )
        });
    };
}
pub(super) use a8_family;

a8_family!(
    "neon",
    dot32_smull,
    a8_q4_0,
    a8_q8_0,
    a8_mxfp4,
    a8_q4_1,
    a8_q5_0,
    a8_q5_1
);

/// Dot product of 16 int8 pairs with `smull`/`smlal2`/`saddlp`: four i32
/// partial sums.
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn dot16_smull(w: int8x16_t, x: int8x16_t) -> int32x4_t {
    vpaddlq_s16(vmlal_high_s8(
        vmull_s8(vget_low_s8(w), vget_low_s8(x)),
        w,
        x,
    ))
}

/// The K-quant W·A8 kernels (Q4_K, Q5_K, Q6_K × Q8_K) of one dot-product flavour:
/// `$dot32` sums 32 int8 pairs given as two halves, `$dot16` sums 16.
/// Q4_K / Q5_K (Q5_K's fifth bits ORed into the nibbles as 16): each sub-block's unsigned dot is scaled by its 6-bit scale
/// in i32; the mins term `dmin · d_x · Σ m_j · bsum_j` is scalar. Q6_K:
/// each 16-value group is rebuilt from `ql`/`qh`, re-centred to `q − 32`
/// and scaled by its signed 8-bit scale in i32.
macro_rules! kq_family {
    ($feat:literal, $dot32:path, $dot16:path, $k_sub:ident, $q6_k:ident) => {
        /// # Safety
        /// Needs the target features above; `w` holds `y.len()` rows of `x.len()` super-blocks.
        #[target_feature(enable = $feat)]
        unsafe fn $k_sub<B: KSubBlock, const R: usize>(w: &[B], x: &[BlockQ8K], y: &mut [f32]) {
            use $crate::quant::kquants::get_scale_min_k4;
            let nb = x.len();
            debug_assert!(w.len() == R * nb && y.len() == R);
            let mut accs = [vdupq_n_f32(0.0); R];
            let mut offs = [0.0f32; R];
            let m4 = vdupq_n_u8(0x0F);
            for (i, xb) in x.iter().enumerate() {
                let dx = xb.d();
                let xp = xb.qs.as_ptr();
                for r in 0..R {
                    // SAFETY: in bounds (debug-asserted above).
                    let b = unsafe { w.get_unchecked(r * nb + i) };
                    let mut sumi = vdupq_n_s32(0);
                    let mut summ = 0i32;
                    // SAFETY: qh holds 32 bytes.
                    let (h0, h1) =
                        unsafe { (vld1q_u8(b.qh().as_ptr()), vld1q_u8(b.qh().as_ptr().add(16))) };
                    for c in 0..4 {
                        let (sc0, m0) = get_scale_min_k4(2 * c, b.scales());
                        let (sc1, m1) = get_scale_min_k4(2 * c + 1, b.scales());
                        // SAFETY: qs has 128 bytes and x.qs 256; offsets stay inside.
                        let (q0, q1, x0, x1, x2, x3) = unsafe {
                            (
                                vld1q_u8(b.qs().as_ptr().add(32 * c)),
                                vld1q_u8(b.qs().as_ptr().add(32 * c + 16)),
                                vld1q_s8(xp.add(64 * c)),
                                vld1q_s8(xp.add(64 * c + 16)),
                                vld1q_s8(xp.add(64 * c + 32)),
                                vld1q_s8(xp.add(64 * c + 48)),
                            )
                        };
                        let (mut l0, mut l1) = (vandq_u8(q0, m4), vandq_u8(q1, m4));
                        let (mut u0, mut u1) = (vshrq_n_u8::<4>(q0), vshrq_n_u8::<4>(q1));
                        if B::FIVE {
                            use $crate::qgemv::neon::fifth_bits;
                            l0 = vorrq_u8(l0, fifth_bits(h0, 2 * c));
                            l1 = vorrq_u8(l1, fifth_bits(h1, 2 * c));
                            u0 = vorrq_u8(u0, fifth_bits(h0, 2 * c + 1));
                            u1 = vorrq_u8(u1, fifth_bits(h1, 2 * c + 1));
                        }
                        let s = |v: uint8x16_t| vreinterpretq_s8_u8(v);
                        let lo = $dot32(s(l0), s(l1), x0, x1);
                        let hi = $dot32(s(u0), s(u1), x2, x3);
                        sumi = vmlaq_n_s32(sumi, lo, sc0 as i32);
                        sumi = vmlaq_n_s32(sumi, hi, sc1 as i32);
                        summ += m0 as i32 * (xb.bsum(4 * c) as i32 + xb.bsum(4 * c + 1) as i32);
                        summ += m1 as i32 * (xb.bsum(4 * c + 2) as i32 + xb.bsum(4 * c + 3) as i32);
                    }
                    accs[r] = vfmaq_n_f32(
                        accs[r],
                        vcvtq_f32_s32(sumi),
                        $crate::qgemv::neon::fp16(b.d()) * dx,
                    );
                    offs[r] -= ($crate::qgemv::neon::fp16(b.dmin()) * dx) * summ as f32;
                }
            }
            for r in 0..R {
                y[r] = vaddvq_f32(accs[r]) + offs[r];
            }
        }

        /// # Safety
        /// Needs the target features above; `w` holds `y.len()` rows of `x.len()` super-blocks.
        #[target_feature(enable = $feat)]
        unsafe fn $q6_k<const R: usize>(w: &[BlockQ6K], x: &[BlockQ8K], y: &mut [f32]) {
            let nb = x.len();
            debug_assert!(w.len() == R * nb && y.len() == R);
            let mut accs = [vdupq_n_f32(0.0); R];
            let m4 = vdupq_n_u8(0x0F);
            let m2 = vdupq_n_u8(3);
            let k32 = vdupq_n_s8(32);
            for (i, xb) in x.iter().enumerate() {
                let dx = xb.d();
                let xp = xb.qs.as_ptr();
                for (r, acc) in accs.iter_mut().enumerate() {
                    // SAFETY: in bounds (debug-asserted above).
                    let b = unsafe { w.get_unchecked(r * nb + i) };
                    let mut sumi = vdupq_n_s32(0);
                    for c in 0..2 {
                        for h in 0..2 {
                            // SAFETY: ql has 128 bytes, qh 64; offsets stay inside.
                            let (ql0, ql1, qh) = unsafe {
                                (
                                    vld1q_u8(b.ql.as_ptr().add(64 * c + 16 * h)),
                                    vld1q_u8(b.ql.as_ptr().add(64 * c + 32 + 16 * h)),
                                    vld1q_u8(b.qh.as_ptr().add(32 * c + 16 * h)),
                                )
                            };
                            let lows = [
                                vandq_u8(ql0, m4),
                                vandq_u8(ql1, m4),
                                vshrq_n_u8::<4>(ql0),
                                vshrq_n_u8::<4>(ql1),
                            ];
                            for (p, lo) in lows.into_iter().enumerate() {
                                let hb = vandq_u8(vshlq_u8(qh, vdupq_n_s8(-2 * p as i8)), m2);
                                let q = vorrq_u8(lo, vshlq_n_u8::<4>(hb));
                                let q = vsubq_s8(vreinterpretq_s8_u8(q), k32);
                                let g = 128 * c + 32 * p + 16 * h;
                                // SAFETY: g + 16 <= 256.
                                let xv = unsafe { vld1q_s8(xp.add(g)) };
                                sumi = vmlaq_n_s32(sumi, $dot16(q, xv), b.scales[g / 16] as i32);
                            }
                        }
                    }
                    *acc = vfmaq_n_f32(
                        *acc,
                        vcvtq_f32_s32(sumi),
                        $crate::qgemv::neon::fp16(b.d) * dx,
                    );
                }
            }
            for (out, acc) in y.iter_mut().zip(accs) {
                *out = vaddvq_f32(acc);
            }
        }
    };
}
pub(super) use kq_family;

kq_family!("neon", dot32_smull, dot16_smull, a8_k_sub, a8_q6_k);

/// W·A8 with `smull`/`sadalp` (baseline NEON).
///
/// # Safety
/// Shapes as in `drive`.
pub unsafe fn gemv_a8(w: A8Rows<'_>, y: &mut [f32], rpb: QGemvParams) {
    // SAFETY (all arms): forwarded from the caller.
    unsafe {
        a8_entry!(w, y, rpb, [
            Q4_0 => a8_q4_0, Q8_0 => a8_q8_0, Mxfp4 => a8_mxfp4, Q4_1 => a8_q4_1,
            Q4K => a8_k_sub<BlockQ4K>, Q5K => a8_k_sub<BlockQ5K>, Q6K => a8_q6_k,
            Q5_0 => a8_q5_0, Q5_1 => a8_q5_1,
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp16_asm_matches_half_for_every_bit_pattern() {
        for bits in 0..=u16::MAX {
            let h = F16Le(bits.to_le_bytes());
            let (got, want) = (fp16(h), h.to_f32());
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{bits:#06x}"
            );
        }
    }
}
