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

#[inline]
#[target_feature(enable = "avx2,fma")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
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
        y[r] = hsum(acc[r]) - corr[r];
    }
}

/// Runs the width-`B` kernel over all rows, `rpb` rows at a time.
///
/// # Safety
/// As for [`rows`], with `y.len()` rows.
#[target_feature(enable = "avx2,fma")]
unsafe fn drive<const B: usize>(p: &super::Rows<'_>, y: &mut [f32], rpb: usize) {
    let gpr = p.xs.len();
    let rb = p.x.len() * B / 8;
    let mut r = 0;
    while r < y.len() {
        let n = if rpb >= 4 && r + 4 <= y.len() {
            4
        } else if rpb >= 2 && r + 2 <= y.len() {
            2
        } else {
            1
        };
        let (d, s, z) = (&p.data[r * rb..], &p.scales[r * gpr..], &p.zeros[r * gpr..]);
        p.prefetch(r, n, rb);
        let yr = &mut y[r..r + n];
        // SAFETY: forwarded; the slices start at row r and hold n rows.
        unsafe {
            match n {
                4 => rows::<B, 4>(d, p.group, s, z, p.x, p.xs, yr),
                2 => rows::<B, 2>(d, p.group, s, z, p.x, p.xs, yr),
                _ => rows::<B, 1>(d, p.group, s, z, p.x, p.xs, yr),
            }
        }
        r += n;
    }
}

/// LM-head GEMV for any width 1..=7.
///
/// # Safety
/// Needs AVX2 + FMA; `p` consistent with `y.len()` rows (checked by the entry point).
pub unsafe fn lm_head(p: &super::Rows<'_>, y: &mut [f32], rpb: usize) {
    // SAFETY (all arms): forwarded.
    unsafe {
        match p.bits {
            1 => drive::<1>(p, y, rpb),
            2 => drive::<2>(p, y, rpb),
            3 => drive::<3>(p, y, rpb),
            4 => drive::<4>(p, y, rpb),
            5 => drive::<5>(p, y, rpb),
            6 => drive::<6>(p, y, rpb),
            _ => drive::<7>(p, y, rpb),
        }
    }
}
