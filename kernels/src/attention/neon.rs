//! NEON row kernels: 4 lanes, f16 rows widened with `fcvtl` (base ARMv8
//! floating point), Q8_0 rows widened `i8 → i16 → i32 → f32` in registers.
//! Same loop structure as the x86 files: one key row at a time for scores
//! (four accumulators), a 16-wide accumulator slice held in registers across
//! the page for the value axpy.

use crate::eltwise::neon::exp4;
use crate::quant::{BlockQ8_0, QK};
use half::f16;
use std::arch::aarch64::*;

/// A page element that loads as 4 f32 lanes.
trait Lane4: Copy {
    /// # Safety
    /// NEON available; `p` valid for 4 reads.
    unsafe fn load4(p: *const Self) -> float32x4_t;
    fn f32(self) -> f32;
}

impl Lane4 for f32 {
    #[inline(always)]
    unsafe fn load4(p: *const f32) -> float32x4_t {
        unsafe { vld1q_f32(p) }
    }
    #[inline(always)]
    fn f32(self) -> f32 {
        self
    }
}

impl Lane4 for f16 {
    #[inline(always)]
    unsafe fn load4(p: *const f16) -> float32x4_t {
        // f16 is a transparent u16.
        unsafe { vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p as *const u16))) }
    }
    #[inline(always)]
    fn f32(self) -> f32 {
        self.to_f32()
    }
}

/// Dot products of `q` with the `R` rows of `hd` values at `k`: the `R`
/// rows share each load of `q` and run `R` independent FMA chains.
///
/// # Safety
/// NEON; `k` valid for `R · hd` reads, `q.len() == hd`.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn dot_rows<T: Lane4, const R: usize>(q: &[f32], k: *const T) -> [f32; R] {
    let hd = q.len();
    let main = hd / 4 * 4;
    let qp = q.as_ptr();
    let mut a = [vdupq_n_f32(0.0); R];
    let mut i = 0;
    let mut dots = [0.0f32; R];
    // SAFETY: lanes below `main` <= hd in q and in each row.
    unsafe {
        while i < main {
            let qv = vld1q_f32(qp.add(i));
            for (r, ar) in a.iter_mut().enumerate() {
                *ar = vfmaq_f32(*ar, qv, T::load4(k.add(r * hd + i)));
            }
            i += 4;
        }
        for (r, d) in dots.iter_mut().enumerate() {
            *d = vaddvq_f32(a[r]);
            for (j, &qj) in q.iter().enumerate().skip(main) {
                *d += qj * (*k.add(r * hd + j)).f32();
            }
        }
    }
    dots
}

#[inline]
#[target_feature(enable = "neon")]
fn scores_dense<T: Lane4>(q: &[f32], k: &[T], scale: f32, out: &mut [f32]) {
    let hd = q.len();
    debug_assert_eq!(k.len(), out.len() * hd);
    let kp = k.as_ptr();
    let mut t = 0;
    // SAFETY: rows t..t + 4 (or t) lie within k.
    unsafe {
        while t + 4 <= out.len() {
            let d = dot_rows::<T, 4>(q, kp.add(t * hd));
            for (o, x) in out[t..t + 4].iter_mut().zip(d) {
                *o = x * scale;
            }
            t += 4;
        }
        while t < out.len() {
            out[t] = dot_rows::<T, 1>(q, kp.add(t * hd))[0] * scale;
            t += 1;
        }
    }
}

/// `s[j] = e^(s[j] - m)` (vector `exp4`); returns the sum.
///
/// # Safety
/// NEON.
#[target_feature(enable = "neon")]
pub unsafe fn exp_sum(s: &mut [f32], m: f32) -> f32 {
    let n = s.len();
    let p = s.as_mut_ptr();
    let mv = vdupq_n_f32(m);
    let mut acc = vdupq_n_f32(0.0);
    let mut i = 0;
    // SAFETY: i + 4 <= n.
    unsafe {
        while i + 4 <= n {
            let e = exp4(vsubq_f32(vld1q_f32(p.add(i)), mv));
            vst1q_f32(p.add(i), e);
            acc = vaddq_f32(acc, e);
            i += 4;
        }
    }
    let mut sum = vaddvq_f32(acc);
    for x in &mut s[i..] {
        *x = (*x - m).exp();
        sum += *x;
    }
    sum
}

#[inline]
#[target_feature(enable = "neon")]
fn accum_dense<T: Lane4>(acc: &mut [f32], p: &[f32], v: &[T]) {
    let hd = acc.len();
    debug_assert_eq!(v.len(), p.len() * hd);
    let ap = acc.as_mut_ptr();
    let vp = v.as_ptr();
    let mut i = 0;
    // SAFETY: lanes i..i+16 (or i+4) are below hd; row t starts at t·hd.
    unsafe {
        while i + 16 <= hd {
            let mut a = [
                vld1q_f32(ap.add(i)),
                vld1q_f32(ap.add(i + 4)),
                vld1q_f32(ap.add(i + 8)),
                vld1q_f32(ap.add(i + 12)),
            ];
            for (t, &pt) in p.iter().enumerate() {
                let r = vp.add(t * hd + i);
                for (u, au) in a.iter_mut().enumerate() {
                    *au = vfmaq_n_f32(*au, T::load4(r.add(4 * u)), pt);
                }
            }
            for (u, au) in a.iter().enumerate() {
                vst1q_f32(ap.add(i + 4 * u), *au);
            }
            i += 16;
        }
        while i + 4 <= hd {
            let mut a = vld1q_f32(ap.add(i));
            for (t, &pt) in p.iter().enumerate() {
                a = vfmaq_n_f32(a, T::load4(vp.add(t * hd + i)), pt);
            }
            vst1q_f32(ap.add(i), a);
            i += 4;
        }
    }
    for (t, &pt) in p.iter().enumerate() {
        for j in i..hd {
            acc[j] += pt * v[t * hd + j].f32();
        }
    }
}

/// The 32 quants of a block as 8 vectors of 4 f32.
///
/// # Safety
/// NEON available.
#[inline(always)]
unsafe fn widen32(qs: &[i8; QK]) -> [float32x4_t; 8] {
    unsafe {
        let mut r = [vdupq_n_f32(0.0); 8];
        for h in 0..2 {
            let b = vld1q_s8(qs.as_ptr().add(16 * h));
            let lo = vmovl_s8(vget_low_s8(b));
            let hi = vmovl_s8(vget_high_s8(b));
            r[4 * h] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
            r[4 * h + 1] = vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo)));
            r[4 * h + 2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
            r[4 * h + 3] = vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi)));
        }
        r
    }
}

/// # Safety
/// NEON; `k` holds `out.len()` rows of `q.len()` values.
#[target_feature(enable = "neon")]
pub unsafe fn scores_f32(q: &[f32], k: &[f32], scale: f32, out: &mut [f32]) {
    scores_dense(q, k, scale, out)
}

/// # Safety
/// NEON; `k` holds `out.len()` rows of `q.len()` values.
#[target_feature(enable = "neon")]
pub unsafe fn scores_f16(q: &[f32], k: &[f16], scale: f32, out: &mut [f32]) {
    scores_dense(q, k, scale, out)
}

/// # Safety
/// NEON; `v` holds `p.len()` rows of `acc.len()` values.
#[target_feature(enable = "neon")]
pub unsafe fn accum_f32(acc: &mut [f32], p: &[f32], v: &[f32]) {
    accum_dense(acc, p, v)
}

/// # Safety
/// NEON; `v` holds `p.len()` rows of `acc.len()` values.
#[target_feature(enable = "neon")]
pub unsafe fn accum_f16(acc: &mut [f32], p: &[f32], v: &[f16]) {
    accum_dense(acc, p, v)
}

/// Scores against Q8_0 rows: per block `d · Σ q·qs`.
///
/// # Safety
/// NEON; `q.len()` is a multiple of 32 and `k` holds `out.len()` rows of
/// `q.len() / 32` blocks.
#[target_feature(enable = "neon")]
pub unsafe fn scores_q8(q: &[f32], k: &[BlockQ8_0], scale: f32, out: &mut [f32]) {
    let nb = q.len() / QK;
    debug_assert_eq!(k.len(), out.len() * nb);
    let qp = q.as_ptr();
    for (s, kr) in out.iter_mut().zip(k.chunks_exact(nb)) {
        let mut acc = vdupq_n_f32(0.0);
        for (b, blk) in kr.iter().enumerate() {
            // SAFETY: 32 quants per block, 32 query values per block.
            unsafe {
                let x = widen32(&blk.qs);
                let qb = qp.add(b * QK);
                let mut s0 = vmulq_f32(vld1q_f32(qb), x[0]);
                let mut s1 = vmulq_f32(vld1q_f32(qb.add(4)), x[1]);
                for u in 1..4 {
                    s0 = vfmaq_f32(s0, vld1q_f32(qb.add(8 * u)), x[2 * u]);
                    s1 = vfmaq_f32(s1, vld1q_f32(qb.add(8 * u + 4)), x[2 * u + 1]);
                }
                acc = vfmaq_n_f32(acc, vaddq_f32(s0, s1), blk.d.to_f32());
            }
        }
        *s = vaddvq_f32(acc) * scale;
    }
}

/// Value axpy over Q8_0 rows: per block `acc += (p·d) · qs`, the block's
/// 32 accumulators held in registers across the page's rows.
///
/// # Safety
/// NEON; `acc.len()` is a multiple of 32 and `v` holds `p.len()` rows of
/// `acc.len() / 32` blocks.
#[target_feature(enable = "neon")]
pub unsafe fn accum_q8(acc: &mut [f32], p: &[f32], v: &[BlockQ8_0]) {
    let nb = acc.len() / QK;
    debug_assert_eq!(v.len(), p.len() * nb);
    for (b, ab) in acc.chunks_exact_mut(QK).enumerate() {
        let ap = ab.as_mut_ptr();
        // SAFETY: ab holds 32 values; each block holds 32 quants.
        unsafe {
            let mut a = [vdupq_n_f32(0.0); 8];
            for (u, au) in a.iter_mut().enumerate() {
                *au = vld1q_f32(ap.add(4 * u));
            }
            for (t, &pt) in p.iter().enumerate() {
                let blk = &v[t * nb + b];
                let pd = pt * blk.d.to_f32();
                let x = widen32(&blk.qs);
                for (au, xu) in a.iter_mut().zip(x) {
                    *au = vfmaq_n_f32(*au, xu, pd);
                }
            }
            for (u, au) in a.iter().enumerate() {
                vst1q_f32(ap.add(4 * u), *au);
            }
        }
    }
}
