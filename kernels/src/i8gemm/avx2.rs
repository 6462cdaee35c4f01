//! AVX2 and AVX-VNNI I8 micro-tiles.
//!
//! AVX2: 16 int8 of each operand are sign-extended to i16 (`vpmovsxbw`) and
//! multiplied with `vpmaddwd`, which sums adjacent pairs exactly into i32.
//! This is chosen over the `vpmaddubsw` sign trick because `maddubs`
//! saturates at i16 (−128·−128 + −128·−128 overflows) and the sign trick
//! cannot represent +128, while asymmetric activations use the full
//! [−128, 127] range.
//!
//! AVX-VNNI: `vpdpbusd` multiplies u8 × s8. Activations are made unsigned by
//! flipping their sign bit (`a ^ 0x80 = a + 128`), so the instruction
//! computes `Σ (a + 128)·w = Σ a·w + 128·Σ w`; the precomputed per-channel
//! weight sum removes the second term exactly. The k tail is copied into a
//! zero-padded 32-byte buffer (zero weights contribute nothing).

use super::prefetch_rows;
use std::arch::x86_64::*;

#[inline]
#[target_feature(enable = "avx2")]
fn hsum_i32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s)
}

/// # Safety
/// Needs AVX2; `a` holds `MR` rows of `k`, `w` holds `NR` rows of `k`.
#[target_feature(enable = "avx2")]
unsafe fn tile_avx2<const MR: usize, const NR: usize, const U: usize>(
    a: &[i8],
    w: &[i8],
    k: usize,
    pf: usize,
    acc: &mut [i32; 8],
) {
    debug_assert!(a.len() >= MR * k && w.len() >= NR * k);
    let mut v = [[[_mm256_setzero_si256(); NR]; MR]; U];
    // Bytes t..t + 16 of every row into accumulator set u.
    let step = |u: usize, t: usize| {
        if t.is_multiple_of(64) {
            prefetch_rows::<NR>(w, k, t, pf);
        }
        // SAFETY: the callers keep t + 16 <= k, so each load stays inside its row.
        let wv: [__m256i; NR] = std::array::from_fn(|c| unsafe {
            _mm256_cvtepi8_epi16(_mm_loadu_si128(w.as_ptr().add(c * k + t).cast()))
        });
        for (r, vr) in v[u].iter_mut().enumerate() {
            // SAFETY: as above.
            let av =
                unsafe { _mm256_cvtepi8_epi16(_mm_loadu_si128(a.as_ptr().add(r * k + t).cast())) };
            for (c, vc) in vr.iter_mut().enumerate() {
                *vc = _mm256_add_epi32(*vc, _mm256_madd_epi16(av, wv[c]));
            }
        }
    };
    let kv = k / 16 * 16;
    unrolled!(U, kv, 16, step);
    for r in 0..MR {
        for c in 0..NR {
            let tail: i32 = (kv..k)
                .map(|t| a[r * k + t] as i32 * w[c * k + t] as i32)
                .sum();
            let s = (1..U).fold(v[0][r][c], |s, u| _mm256_add_epi32(s, v[u][r][c]));
            acc[r * NR + c] = hsum_i32(s) + tail;
        }
    }
}

/// # Safety
/// Needs AVX2 + AVX-VNNI; shapes as in [`tile_avx2`]; `wsum[c]` is the exact
/// sum of weight row `c`.
#[target_feature(enable = "avx2,avxvnni")]
unsafe fn tile_vnni<const MR: usize, const NR: usize, const U: usize>(
    a: &[i8],
    w: &[i8],
    wsum: &[i32],
    k: usize,
    pf: usize,
    acc: &mut [i32; 8],
) {
    debug_assert!(a.len() >= MR * k && w.len() >= NR * k && wsum.len() >= NR);
    let flip = _mm256_set1_epi8(-128);
    let mut v = [[[_mm256_setzero_si256(); NR]; MR]; U];
    // 32 bytes of every row into accumulator set u; `at` (the offset in the
    // rows) places the prefetch.
    let mut step = |u: usize, at: usize, ap: [*const i8; MR], wp: [*const i8; NR]| {
        if at.is_multiple_of(64) {
            prefetch_rows::<NR>(w, k, at, pf);
        }
        // SAFETY: the callers pass pointers to 32 readable bytes.
        let wv: [__m256i; NR] =
            std::array::from_fn(|c| unsafe { _mm256_loadu_si256(wp[c].cast()) });
        for (r, vr) in v[u].iter_mut().enumerate() {
            // SAFETY: as above.
            let au = _mm256_xor_si256(unsafe { _mm256_loadu_si256(ap[r].cast()) }, flip);
            for (c, vc) in vr.iter_mut().enumerate() {
                *vc = _mm256_dpbusd_avx_epi32(*vc, au, wv[c]);
            }
        }
    };
    let kv = k / 32 * 32;
    unrolled!(U, kv, 32, |u, t| {
        // SAFETY: t + 32 <= kv <= k keeps every pointer's 32 bytes inside
        // its row.
        let (ap, wp) = unsafe {
            (
                std::array::from_fn(|r| a.as_ptr().add(r * k + t)),
                std::array::from_fn(|c| w.as_ptr().add(c * k + t)),
            )
        };
        step(u, t, ap, wp)
    });
    if kv < k {
        let n = k - kv;
        let mut ab = [[0i8; 32]; MR];
        let mut wb = [[0i8; 32]; NR];
        for (r, b) in ab.iter_mut().enumerate() {
            b[..n].copy_from_slice(&a[r * k + kv..r * k + k]);
        }
        for (c, b) in wb.iter_mut().enumerate() {
            b[..n].copy_from_slice(&w[c * k + kv..c * k + k]);
        }
        step(
            0,
            kv,
            std::array::from_fn(|r| ab[r].as_ptr()),
            std::array::from_fn(|c| wb[c].as_ptr()),
        );
    }
    for r in 0..MR {
        for c in 0..NR {
            let s = (1..U).fold(v[0][r][c], |s, u| _mm256_add_epi32(s, v[u][r][c]));
            acc[r * NR + c] = hsum_i32(s).wrapping_sub(wsum[c].wrapping_mul(128));
        }
    }
}

tile_entry!(
    /// AVX2 tile for `(mr, nr)`, `mr ∈ {1, 2}`, `nr ∈ {1, 2, 4}`, prefetching
    /// `pf` bytes ahead in each weight row.
    ///
    /// # Safety
    /// Needs AVX2; `a` holds `mr` rows of `k`, `w` holds `nr` rows of `k`.
    tile(a, w, _wsum, k, pf, acc)
        => tile_avx2(a, w, k, pf, acc), unrolled by super::unroll
);

tile_entry!(
    /// AVX-VNNI tile for `(mr, nr)`, `mr ∈ {1, 2}`, `nr ∈ {1, 2, 4}`, prefetching
    /// `pf` bytes ahead in each weight row.
    ///
    /// # Safety
    /// Needs AVX2 + AVX-VNNI; shapes as in [`tile`]; `wsum` holds the `nr` exact
    /// weight-row sums.
    tile_avxvnni(a, w, wsum, k, pf, acc)
        => tile_vnni(a, w, wsum, k, pf, acc), unrolled by super::unroll
);
