//! AVX-512 LM-head GEMV over the bit-packed table.
//!
//! Sixteen values of a row span `2·B` bytes, read as two little-endian u64
//! (values 0..8 and 8..16, see `avx2.rs`). Each u64 is split into two 4·B-bit
//! pieces, the four pieces are broadcast to four lanes each, and one
//! `vpsrlvd` by (0, B, 2B, 3B)×4 + mask unpacks all sixteen. B is a const
//! generic (one kernel per width 1..=7); groups are multiples of 16 values.

use std::arch::x86_64::*;

#[inline(always)]
fn load8<const B: usize>(row: &[u8], o: usize) -> u64 {
    let mut b = [0u8; 8];
    b[..B].copy_from_slice(&row[o..o + B]);
    u64::from_le_bytes(b)
}

#[inline]
#[target_feature(enable = "avx512f")]
fn unpack16<const B: usize>(u0: u64, u1: u64) -> __m512 {
    let m = (1u64 << (4 * B)) - 1;
    let (p0, p1) = ((u0 & m) as i32, (u0 >> (4 * B)) as i32);
    let (p2, p3) = ((u1 & m) as i32, (u1 >> (4 * B)) as i32);
    let v = _mm512_setr_epi32(
        p0, p0, p0, p0, p1, p1, p1, p1, p2, p2, p2, p2, p3, p3, p3, p3,
    );
    let b = B as i32;
    let sh = _mm512_setr_epi32(
        0,
        b,
        2 * b,
        3 * b,
        0,
        b,
        2 * b,
        3 * b,
        0,
        b,
        2 * b,
        3 * b,
        0,
        b,
        2 * b,
        3 * b,
    );
    let q = _mm512_and_si512(_mm512_srlv_epi32(v, sh), _mm512_set1_epi32((1 << B) - 1));
    _mm512_cvtepi32_ps(q)
}

/// # Safety
/// Needs AVX-512F; shapes as in `avx2::rows` with group % 16 = 0.
#[target_feature(enable = "avx512f")]
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
    let mut acc = [_mm512_setzero_ps(); R];
    let mut corr = [0.0f32; R];
    for g in 0..gpr {
        let mut s = [_mm512_setzero_ps(); R];
        let mut i = g * group;
        while i < (g + 1) * group {
            // SAFETY: i + 16 <= x.len().
            let xv = unsafe { _mm512_loadu_ps(x.as_ptr().add(i)) };
            for r in 0..R {
                let row = &data[r * rb..(r + 1) * rb];
                let o = i / 8 * B;
                let q = unpack16::<B>(load8::<B>(row, o), load8::<B>(row, o + B));
                s[r] = _mm512_fmadd_ps(q, xv, s[r]);
            }
            i += 16;
        }
        for r in 0..R {
            let sc = scales[r * gpr + g];
            acc[r] = _mm512_fmadd_ps(s[r], _mm512_set1_ps(sc), acc[r]);
            corr[r] += sc * zeros[r * gpr + g] * xs[g];
        }
    }
    for r in 0..R {
        y[r] = _mm512_reduce_add_ps(acc[r]) - corr[r];
    }
}

/// # Safety
/// As for [`rows`], with `y.len()` rows.
#[target_feature(enable = "avx512f")]
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
/// Needs AVX-512F; `p` consistent with `y.len()` rows (checked by the entry point).
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
