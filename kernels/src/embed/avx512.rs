//! AVX-512 LM-head GEMV over the bit-packed table.
//!
//! Sixteen values of a row span `2·B` bytes (≤ 14, so one 128-bit lane).
//! One 16-byte load takes those bytes (masked to them at the very end of
//! the table), `vbroadcasti32x4` copies them
//! into all four 128-bit lanes, and one `vpshufb` gives i32 lane j the two
//! bytes `⌊jB/8⌋` and `⌊jB/8⌋ + 1` that hold value j (B ≤ 7, so a value
//! never spans three bytes); `vpsrlvd` by `jB mod 8` and a mask finish the
//! unpacking. The data never passes through a general register (building
//! the lanes from scalars, `vmovd` + `vpbroadcastd` + `vinserti32x4` per
//! 4 values, was the bottleneck before). B is a const generic (one kernel
//! per width 1..=7); groups are multiples of 16 values.

use std::arch::x86_64::*;

/// [`super::unpack_tables`] in registers.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
fn unpack_consts<const B: usize>() -> (__m512i, __m512i) {
    let (ctrl, sh) = super::unpack_tables::<B>();
    // SAFETY: the tables hold 64 bytes each.
    unsafe {
        (
            _mm512_loadu_si512(ctrl.as_ptr().cast()),
            _mm512_loadu_si512(sh.as_ptr().cast()),
        )
    }
}

/// # Safety
/// Needs AVX-512 F/BW/VL; shapes as in `avx2::rows` with group % 16 = 0.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
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
    debug_assert!(data.len() >= R * rb);
    let (ctrl, sh) = unpack_consts::<B>();
    let mask = _mm512_set1_epi32((1 << B) - 1);
    // The 2·B bytes of 16 values.
    let bytes = (1u16 << (2 * B)) - 1;
    let row: [*const u8; R] = std::array::from_fn(|r| data[r * rb..].as_ptr());
    let mut acc = [_mm512_setzero_ps(); R];
    let mut corr = [0.0f32; R];
    for g in 0..gpr {
        let mut s = [_mm512_setzero_ps(); R];
        let mut i = g * group;
        while i < (g + 1) * group {
            // SAFETY: i + 16 <= x.len().
            let xv = unsafe { _mm512_loadu_ps(x.as_ptr().add(i)) };
            let at = i / 16 * 2 * B;
            for r in 0..R {
                // Values i..i + 16 of row r are its bytes at .. at + 2B,
                // inside the row (i + 16 <= dim). A plain 16-byte load
                // (the bytes past 2B are not used) wherever 16 bytes are
                // left in `data`: a masked load per step ran at a tenth of
                // the speed from DRAM (the hardware prefetcher seemed not
                // to follow masked loads on this Zen 5).
                // SAFETY: at + 16 <= data.len() - r·rb for the plain load;
                // the masked one reads only the 2B bytes inside the row.
                let v = unsafe {
                    let p = row[r].add(at);
                    if r * rb + at + 16 <= data.len() {
                        _mm_loadu_si128(p.cast())
                    } else {
                        _mm_maskz_loadu_epi8(bytes, p.cast())
                    }
                };
                let v = _mm512_shuffle_epi8(_mm512_broadcast_i32x4(v), ctrl);
                let q = _mm512_and_si512(_mm512_srlv_epi32(v, sh), mask);
                s[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), xv, s[r]);
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

super::body::lm_head_driver! { feature: "avx512f,avx512bw,avx512vl", needs: "AVX-512 F/BW/VL" }
