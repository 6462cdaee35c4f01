//! AVX-512 (BW) and AVX-512 VNNI I8 micro-tiles.
//!
//! AVX-512: 32 int8 per operand sign-extended to i16 (`vpmovsxbw` to a zmm)
//! and `vpmaddwd` into 16 i32 lanes — exact for the full int8 range (see
//! `avx2.rs` for why not `maddubs`).
//!
//! AVX-512 VNNI: `vpdpbusd` is u8 × s8, so s8 × s8 uses the +128 offset
//! trick: activations get their sign bit flipped (`a ^ 0x80 = a + 128` as
//! u8) and the kernel subtracts `128 · Σ_k w[c, k]`, the per-channel weight
//! sum precomputed by `QWeights`. The i32 accumulators stay exact while
//! `k · 255 · 128 < 2³¹` (k ≤ [`super::MAX_K`]). The k tail uses zero-masked
//! loads (`vmovdqu8{z}`), so no scalar remainder loop is needed.

use super::prefetch_rows;
use std::arch::x86_64::*;

/// Mask selecting the first `n` (≤ 64) bytes.
#[inline]
fn mask64(n: usize) -> u64 {
    if n >= 64 { u64::MAX } else { (1u64 << n) - 1 }
}

/// # Safety
/// Needs AVX-512 F/BW/VL; `a` holds `MR` rows of `k`, `w` holds `NR` rows of `k`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn tile_512<const MR: usize, const NR: usize, const U: usize>(
    a: &[i8],
    w: &[i8],
    k: usize,
    pf: usize,
    acc: &mut [i32; 8],
) {
    debug_assert!(a.len() >= MR * k && w.len() >= NR * k);
    let mut v = [[[_mm512_setzero_si512(); NR]; MR]; U];
    // Bytes t..t + 32 of every row into accumulator set u (zero-masked past k).
    let step = |u: usize, t: usize| {
        let m = mask64(k - t) as u32;
        if t.is_multiple_of(64) {
            prefetch_rows::<NR>(w, k, t, pf);
        }
        // SAFETY: the mask limits the load to bytes t..min(t + 32, k) of the row.
        let wv: [__m512i; NR] = std::array::from_fn(|c| unsafe {
            _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(m, w.as_ptr().add(c * k + t)))
        });
        for (r, vr) in v[u].iter_mut().enumerate() {
            // SAFETY: as above.
            let av = unsafe {
                _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(m, a.as_ptr().add(r * k + t)))
            };
            for (c, vc) in vr.iter_mut().enumerate() {
                *vc = _mm512_add_epi32(*vc, _mm512_madd_epi16(av, wv[c]));
            }
        }
    };
    unrolled!(U, k, 32, step);
    for r in 0..MR {
        for c in 0..NR {
            let s = (1..U).fold(v[0][r][c], |s, u| _mm512_add_epi32(s, v[u][r][c]));
            acc[r * NR + c] = _mm512_reduce_add_epi32(s);
        }
    }
}

/// # Safety
/// Needs AVX-512 F/BW/VL + VNNI; shapes as in [`tile_512`]; `wsum[c]` is the
/// exact sum of weight row `c`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile_vnni<const MR: usize, const NR: usize, const U: usize>(
    a: &[i8],
    w: &[i8],
    wsum: &[i32],
    k: usize,
    pf: usize,
    acc: &mut [i32; 8],
) {
    debug_assert!(a.len() >= MR * k && w.len() >= NR * k && wsum.len() >= NR);
    let flip = _mm512_set1_epi8(-128);
    let mut v = [[[_mm512_setzero_si512(); NR]; MR]; U];
    // Bytes t..t + 64 of every row into accumulator set u.
    let step = |u: usize, t: usize| {
        let m = mask64(k - t);
        prefetch_rows::<NR>(w, k, t, pf);
        // SAFETY: the mask limits the load to bytes t..min(t + 64, k) of the row;
        // masked-off weight bytes are zero, so their (flipped) activations add nothing.
        let wv: [__m512i; NR] = std::array::from_fn(|c| unsafe {
            _mm512_maskz_loadu_epi8(m, w.as_ptr().add(c * k + t))
        });
        for (r, vr) in v[u].iter_mut().enumerate() {
            // SAFETY: as above.
            let au = _mm512_xor_si512(
                unsafe { _mm512_maskz_loadu_epi8(m, a.as_ptr().add(r * k + t)) },
                flip,
            );
            for (c, vc) in vr.iter_mut().enumerate() {
                *vc = _mm512_dpbusd_epi32(*vc, au, wv[c]);
            }
        }
    };
    unrolled!(U, k, 64, step);
    for r in 0..MR {
        for c in 0..NR {
            let s = (1..U).fold(v[0][r][c], |s, u| _mm512_add_epi32(s, v[u][r][c]));
            acc[r * NR + c] = _mm512_reduce_add_epi32(s).wrapping_sub(wsum[c].wrapping_mul(128));
        }
    }
}

tile_entry!(
    /// AVX-512 tile for `(mr, nr)`, `mr ∈ {1, 2}`, `nr ∈ {1, 2, 4}`, prefetching
    /// `pf` bytes ahead in each weight row.
    ///
    /// # Safety
    /// Needs AVX-512 F/BW/VL; `a` holds `mr` rows of `k`, `w` holds `nr` rows of `k`.
    tile(a, w, _wsum, k, pf, acc)
        => tile_512(a, w, k, pf, acc), unrolled by super::unroll
);

tile_entry!(
    /// AVX-512 VNNI tile for `(mr, nr)`, `mr ∈ {1, 2}`, `nr ∈ {1, 2, 4}`, prefetching
    /// `pf` bytes ahead in each weight row.
    ///
    /// # Safety
    /// Needs AVX-512 F/BW/VL + VNNI; shapes as in [`tile`]; `wsum` holds the `nr`
    /// exact weight-row sums.
    tile_vnni512(a, w, wsum, k, pf, acc)
        => tile_vnni(a, w, wsum, k, pf, acc), unrolled by super::unroll
);
