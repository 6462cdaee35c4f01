//! AVX2 + FMA LM-head GEMV over the bit-packed table.
//!
//! Eight values of one row span exactly `B` bytes (8·B bits, byte-aligned
//! because the row offset of value 8·j is j·B bytes). One 8-byte load
//! takes them (a B-byte copy at the very end of the table), it is copied
//! into both 128-bit lanes, and one `vpshufb` gives i32 lane j the two
//! bytes `⌊jB/8⌋` and `⌊jB/8⌋ + 1` that hold value j (B ≤ 7, so a value
//! never spans three bytes); `vpsrlvd` by `jB mod 8` and a mask finish the
//! unpacking, without moving the lanes through general registers. B is a
//! const generic, so each width 1..=7 gets its own kernel with constant
//! selectors, shifts and masks. Σ q·x per group accumulates in a vector,
//! is scaled once per group with FMA, and the zero-point term
//! `scale·zero·Σx_g` is subtracted in scalar at the end of the row.

use crate::simd::Simd;
use crate::simd::avx2::Avx2;
use std::arch::x86_64::*;

/// [`super::unpack_tables`] in registers.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn unpack_consts<const B: usize>() -> (__m256i, __m256i) {
    let (ctrl, sh) = super::unpack_tables::<B>();
    // SAFETY: the tables hold 64 bytes, this loads the first 32.
    unsafe {
        (
            _mm256_loadu_si256(ctrl.as_ptr().cast()),
            _mm256_loadu_si256(sh.as_ptr().cast()),
        )
    }
}

/// `R` rows at once (sharing each load of x).
///
/// # Safety
/// Needs AVX2 + FMA; `data` holds `R` rows of `dim·B/8` bytes, `scales` and
/// `zeros` `R · xs.len()` entries, `x.len() = xs.len() · group`, group % 8 = 0.
#[target_feature(enable = "avx2,fma")]
unsafe fn rows<const B: usize, const R: usize>(
    data: &[u8],
    group: usize,
    scales: &[f32],
    zeros: &[f32],
    x: &[f32],
    xs: &[f32],
    y: &mut [f32],
) {
    let gpr = xs.len();
    let rb = x.len() * B / 8;
    let (ctrl, sh) = unpack_consts::<B>();
    let mask = _mm256_set1_epi32((1 << B) - 1);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut corr = [0.0f32; R];
    for g in 0..gpr {
        let mut s = [_mm256_setzero_ps(); R];
        let mut i = g * group;
        while i < (g + 1) * group {
            // SAFETY: i + 8 <= x.len().
            let xv = unsafe { _mm256_loadu_ps(x.as_ptr().add(i)) };
            let at = i / 8 * B;
            for (r, sr) in s.iter_mut().enumerate() {
                // Values i..i + 8 of row r are its bytes at .. at + B
                // (i + 8 <= dim).
                let u = super::load8::<B>(data, r * rb + at);
                let v = _mm256_broadcastsi128_si256(_mm_cvtsi64_si128(u as i64));
                let q = _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(v, ctrl), sh), mask);
                *sr = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), xv, *sr);
            }
            i += 8;
        }
        for r in 0..R {
            let sc = scales[r * gpr + g];
            acc[r] = _mm256_fmadd_ps(s[r], _mm256_set1_ps(sc), acc[r]);
            corr[r] += sc * zeros[r * gpr + g] * xs[g];
        }
    }
    for r in 0..R {
        // SAFETY: AVX2 is enabled here.
        y[r] = unsafe { Avx2::reduce_add(acc[r]) } - corr[r];
    }
}

super::body::lm_head_driver! { feature: "avx2,fma", needs: "AVX2 + FMA" }
