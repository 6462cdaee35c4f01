//! NEON GEMM micro-kernels (4 f32 lanes, 32 q registers).
//!
//! Packed kernels `mr × nr` (mr a multiple of 4) keep `mr · nr/4`
//! accumulators, `nr/4` W vectors and `mr/4` A vectors in registers (≤ 31
//! of 32) and multiply by A lanes with `fmla v.4s, v.4s, v.s[i]`: per k
//! step, `nr/4 + mr/4` vector loads and `mr · nr/4` FMAs.
//! Direct kernels keep `mr · nr` accumulators of dot products along k.
//! f16 weights are widened with `fcvtl` (baseline ARMv8 FP, no FEAT_FP16
//! needed) through `asm!`, because the `float16x4_t` intrinsics are unstable.

use super::{DirectFn, PackedFn};
use core::arch::aarch64::*;
use core::arch::asm;
use half::f16;

macro_rules! packed_kernels {
    ($(($name:ident, $mr:literal, $nv:literal)),* $(,)?) => {
        /// Packed micro-kernel shapes `(mr, nr)`, in order of preference.
        pub(super) const PACKED: &[(usize, usize)] = &[$(($mr, $nv * 4)),*];

        pub(super) fn packed(mr: usize, nr: usize) -> Option<PackedFn> {
            match (mr, nr) {
                $(($mr, nr) if nr == $nv * 4 => Some($name as PackedFn),)*
                _ => None,
            }
        }

        $(
        /// Packed micro-kernel, see [`PackedFn`] for the contract.
        ///
        /// # Safety
        /// The CPU must support NEON; the pointers must satisfy the
        /// [`PackedFn`] contract.
        #[target_feature(enable = "neon")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $name(
            kc: usize,
            a: *const f32,
            b: *const f32,
            c: *mut f32,
            ldc: usize,
            m_eff: usize,
            n_eff: usize,
        ) {
            const MR: usize = $mr;
            const NV: usize = $nv;
            const NR: usize = NV * 4;
            const _: () = assert!(MR % 4 == 0, "NEON packed kernels load A by whole vectors");
            // SAFETY: all reads stay within the kc × mr A panel and the
            // kc × nr panel; writes within the m_eff × n_eff C tile.
            unsafe {
                let mut acc = [[vdupq_n_f32(0.0); NV]; MR];
                let mut ap = a;
                let mut bp = b;
                for _ in 0..kc {
                    let mut bv = [vdupq_n_f32(0.0); NV];
                    for (j, v) in bv.iter_mut().enumerate() {
                        *v = vld1q_f32(bp.add(4 * j));
                    }
                    // A as whole vectors (the packed panel holds MR
                    // contiguous values per k step), used lane by lane:
                    // scalar A operands would each take a whole register.
                    let mut av = [vdupq_n_f32(0.0); MR / 4];
                    for (q, v) in av.iter_mut().enumerate() {
                        *v = vld1q_f32(ap.add(4 * q));
                    }
                    for (i, row) in acc.iter_mut().enumerate() {
                        for (acc, &bv) in row.iter_mut().zip(&bv) {
                            *acc = fma_lane(*acc, bv, av[i / 4], i % 4);
                        }
                    }
                    ap = ap.add(MR);
                    bp = bp.add(NR);
                }
                if m_eff == MR && n_eff == NR {
                    for (i, row) in acc.iter().enumerate() {
                        for (j, &v) in row.iter().enumerate() {
                            let p = c.add(i * ldc + 4 * j);
                            vst1q_f32(p, vaddq_f32(vld1q_f32(p), v));
                        }
                    }
                } else {
                    // Ragged edge: spill the tile, add the valid part.
                    let mut tmp = [0.0f32; MR * NR];
                    for (i, row) in acc.iter().enumerate() {
                        for (j, &v) in row.iter().enumerate() {
                            vst1q_f32(tmp.as_mut_ptr().add(i * NR + 4 * j), v);
                        }
                    }
                    for i in 0..m_eff {
                        for j in 0..n_eff {
                            *c.add(i * ldc + j) += tmp[i * NR + j];
                        }
                    }
                }
            }
        }
        )*
    };
}

packed_kernels! {
    (k8x12, 8, 3),
    (k12x8, 12, 2),
    (k8x8, 8, 2),
    (k4x16, 4, 4),
    (k4x24, 4, 6),
}

/// `acc + b · a[lane]` (`fmla v.4s, v.4s, v.s[lane]`); `lane` is a constant
/// after the kernels' loops unroll, so the match folds away.
#[inline(always)]
fn fma_lane(acc: float32x4_t, b: float32x4_t, a: float32x4_t, lane: usize) -> float32x4_t {
    // SAFETY: register-only NEON ops, baseline on aarch64.
    unsafe {
        match lane {
            0 => vfmaq_laneq_f32::<0>(acc, b, a),
            1 => vfmaq_laneq_f32::<1>(acc, b, a),
            2 => vfmaq_laneq_f32::<2>(acc, b, a),
            _ => vfmaq_laneq_f32::<3>(acc, b, a),
        }
    }
}

/// Loads 4 weights as f32.
trait Load4: Copy {
    /// # Safety
    /// 4 elements readable at `p`; NEON available.
    unsafe fn load4(p: *const Self) -> float32x4_t;
    fn widen(self) -> f32;
}

impl Load4 for f32 {
    #[inline(always)]
    unsafe fn load4(p: *const f32) -> float32x4_t {
        // SAFETY: per the trait contract.
        unsafe { vld1q_f32(p) }
    }
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
}

impl Load4 for f16 {
    #[inline(always)]
    unsafe fn load4(p: *const f16) -> float32x4_t {
        // SAFETY: per the trait contract; f16 is a transparent u16.
        unsafe { fcvtl(vld1_u16(p as *const u16)) }
    }
    #[inline(always)]
    fn widen(self) -> f32 {
        self.to_f32()
    }
}

/// Body of a direct kernel (see [`DirectFn`]), generic over the weight type.
/// Rows past `m_eff`/`n_eff` alias the last valid row so every load stays in
/// bounds; their sums are discarded.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn direct_body<W: Load4, const MR: usize, const NR: usize>(
    k: usize,
    a: *const f32,
    lda: usize,
    w: *const W,
    ldw: usize,
    c: *mut f32,
    ldc: usize,
    m_eff: usize,
    n_eff: usize,
) {
    // SAFETY: reads of m_eff rows of A and n_eff rows of W of length k;
    // writes of the m_eff × n_eff C tile (the DirectFn contract).
    unsafe {
        let mut ar = [a; MR];
        for (i, r) in ar.iter_mut().enumerate() {
            *r = a.add(i.min(m_eff - 1) * lda);
        }
        let mut wr = [w; NR];
        for (j, r) in wr.iter_mut().enumerate() {
            *r = w.add(j.min(n_eff - 1) * ldw);
        }
        let mut acc = [[vdupq_n_f32(0.0); NR]; MR];
        let kv = k / 4 * 4;
        let mut p = 0;
        while p < kv {
            let mut wv = [vdupq_n_f32(0.0); NR];
            for (v, r) in wv.iter_mut().zip(&wr) {
                *v = W::load4(r.add(p));
            }
            for (row, r) in acc.iter_mut().zip(&ar) {
                let av = vld1q_f32(r.add(p));
                for (acc, &wv) in row.iter_mut().zip(&wv) {
                    *acc = vfmaq_f32(*acc, av, wv);
                }
            }
            p += 4;
        }
        for i in 0..m_eff {
            for j in 0..n_eff {
                let mut s = vaddvq_f32(acc[i][j]);
                for q in kv..k {
                    s += *ar[i].add(q) * (*wr[j].add(q)).widen();
                }
                *c.add(i * ldc + j) += s;
            }
        }
    }
}

macro_rules! direct_kernels {
    ($(($f32name:ident, $f16name:ident, $mr:literal, $nr:literal)),* $(,)?) => {
        /// Direct kernel shapes `(mr, nr)`.
        pub(super) const DIRECT: &[(usize, usize)] = &[$(($mr, $nr)),*];

        pub(super) fn direct_f32(mr: usize, nr: usize) -> Option<DirectFn<f32>> {
            match (mr, nr) {
                $(($mr, $nr) => Some($f32name as DirectFn<f32>),)*
                _ => None,
            }
        }

        pub(super) fn direct_f16(mr: usize, nr: usize) -> Option<DirectFn<f16>> {
            match (mr, nr) {
                $(($mr, $nr) => Some($f16name as DirectFn<f16>),)*
                _ => None,
            }
        }

        $(
        /// Direct f32 kernel, see [`DirectFn`].
        ///
        /// # Safety
        /// NEON available; pointers per the [`DirectFn`] contract.
        #[target_feature(enable = "neon")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $f32name(k: usize, a: *const f32, lda: usize, w: *const f32, ldw: usize,
                           c: *mut f32, ldc: usize, m_eff: usize, n_eff: usize) {
            // SAFETY: forwarded contract.
            unsafe { direct_body::<f32, $mr, $nr>(k, a, lda, w, ldw, c, ldc, m_eff, n_eff) }
        }

        /// Direct W16A32 kernel, see [`DirectFn`].
        ///
        /// # Safety
        /// NEON available; pointers per the [`DirectFn`] contract.
        #[target_feature(enable = "neon")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $f16name(k: usize, a: *const f32, lda: usize, w: *const f16, ldw: usize,
                           c: *mut f32, ldc: usize, m_eff: usize, n_eff: usize) {
            // SAFETY: forwarded contract.
            unsafe { direct_body::<f16, $mr, $nr>(k, a, lda, w, ldw, c, ldc, m_eff, n_eff) }
        }
        )*
    };
}

direct_kernels! {
    (d1x8_f32, d1x8_f16, 1, 8),
    (d2x8_f32, d2x8_f16, 2, 8),
    (d4x4_f32, d4x4_f16, 4, 4),
    (d3x6_f32, d3x6_f16, 3, 6),
}

/// Widens 4 f16 (as raw bits) to f32 with `fcvtl`.
#[inline(always)]
fn fcvtl(h: uint16x4_t) -> float32x4_t {
    let out: float32x4_t;
    // SAFETY: a register-only conversion, available on every aarch64 CPU.
    unsafe {
        asm!("fcvtl {o:v}.4s, {i:v}.4h", o = out(vreg) out, i = in(vreg) h,
             options(pure, nomem, nostack, preserves_flags));
    }
    out
}

/// Widens `src` into `dst` (same length) with `fcvtl`, 4 at a time.
///
/// # Safety
/// NEON must be available (always true on aarch64).
#[target_feature(enable = "neon")]
pub(super) unsafe fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
    debug_assert_eq!(src.len(), dst.len());
    let mut s = src.chunks_exact(4);
    let mut d = dst.chunks_exact_mut(4);
    for (s, d) in (&mut s).zip(&mut d) {
        // SAFETY: 4 f16 readable (transparent u16) and 4 f32 writable.
        unsafe { vst1q_f32(d.as_mut_ptr(), fcvtl(vld1_u16(s.as_ptr() as *const u16))) };
    }
    for (d, s) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *d = s.to_f32();
    }
}

/// Packs 4 W rows (row `j` at `w + j·ldw`, `kb` long) into 4 adjacent
/// columns of a packed panel with row stride `nr`: `dst[p·nr + j] = W[j][p]`,
/// 4×4 blocks at a time with an in-register transpose (`trn1`/`trn2` on 32-
/// then 64-bit lanes).
#[inline(always)]
unsafe fn pack4_body<W: Load4>(w: *const W, ldw: usize, kb: usize, dst: *mut f32, nr: usize) {
    // SAFETY: 4 rows of kb readable; kb rows of 4 writable at stride nr.
    unsafe {
        let kv = kb / 4 * 4;
        let mut p = 0;
        while p < kv {
            let r0 = W::load4(w.add(p));
            let r1 = W::load4(w.add(ldw + p));
            let r2 = W::load4(w.add(2 * ldw + p));
            let r3 = W::load4(w.add(3 * ldw + p));
            let t0 = vreinterpretq_f64_f32(vtrn1q_f32(r0, r1));
            let t1 = vreinterpretq_f64_f32(vtrn2q_f32(r0, r1));
            let t2 = vreinterpretq_f64_f32(vtrn1q_f32(r2, r3));
            let t3 = vreinterpretq_f64_f32(vtrn2q_f32(r2, r3));
            vst1q_f32(dst.add(p * nr), vreinterpretq_f32_f64(vtrn1q_f64(t0, t2)));
            vst1q_f32(
                dst.add((p + 1) * nr),
                vreinterpretq_f32_f64(vtrn1q_f64(t1, t3)),
            );
            vst1q_f32(
                dst.add((p + 2) * nr),
                vreinterpretq_f32_f64(vtrn2q_f64(t0, t2)),
            );
            vst1q_f32(
                dst.add((p + 3) * nr),
                vreinterpretq_f32_f64(vtrn2q_f64(t1, t3)),
            );
            p += 4;
        }
        for p in kv..kb {
            for j in 0..4 {
                *dst.add(p * nr + j) = (*w.add(j * ldw + p)).widen();
            }
        }
    }
}

/// [`pack4_body`] for f32 weights.
///
/// # Safety
/// 4 rows of `kb` readable at `w` (stride `ldw`), `kb` rows of 4 writable at
/// `dst` (stride `nr`).
#[target_feature(enable = "neon")]
pub(super) unsafe fn pack4_f32(w: *const f32, ldw: usize, kb: usize, dst: *mut f32, nr: usize) {
    // SAFETY: forwarded contract.
    unsafe { pack4_body(w, ldw, kb, dst, nr) }
}

/// [`pack4_body`] for f16 weights (widened with `fcvtl` on load).
///
/// # Safety
/// As [`pack4_f32`].
#[target_feature(enable = "neon")]
pub(super) unsafe fn pack4_f16(w: *const f16, ldw: usize, kb: usize, dst: *mut f32, nr: usize) {
    // SAFETY: forwarded contract.
    unsafe { pack4_body(w, ldw, kb, dst, nr) }
}
