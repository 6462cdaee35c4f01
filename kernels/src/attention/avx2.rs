//! AVX2 + FMA + F16C page kernels: the bodies of `body.rs` at 8 lanes, four
//! heads at a time two vectors wide (16 registers hold no more accumulators
//! beside the rows), f16 rows widened with `vcvtph2ps`, Q8_0 rows
//! `i8 → i32 → f32`. Q8_0 keys are scored with AVX-VNNI's `vpdpbusd` where
//! it is present, else widened from their quads by shifts.

use super::body::Quads;
use crate::simd::avx2::Avx2;
use std::arch::x86_64::*;

/// Quads widened to f32: value `i` of a lane is its byte `i`, moved to
/// the top and shifted back down with its sign.
#[derive(Clone, Copy)]
pub(super) struct Widen;

impl Quads<Avx2> for Widen {
    const DOT: bool = false;
    type I = __m256i;
    #[inline(always)]
    unsafe fn load(p: *const i8) -> __m256i {
        // SAFETY: forwarded contract.
        unsafe { _mm256_loadu_si256(p.cast()) }
    }
    #[inline(always)]
    unsafe fn start(_: i32) -> __m256i {
        // SAFETY: the caller's CPU has the ISA (the trait's contract).
        unsafe { _mm256_setzero_si256() }
    }
    #[inline(always)]
    unsafe fn dot(_: __m256i, _: __m256i, _: *const i8) -> __m256i {
        unreachable!("no int8 dot product without AVX-VNNI")
    }
    #[inline(always)]
    unsafe fn to_f32(_: __m256i) -> __m256 {
        unreachable!("no int8 dot product without AVX-VNNI")
    }
    #[inline(always)]
    unsafe fn value(k: __m256i, i: usize) -> __m256 {
        // SAFETY: the caller's CPU has the ISA (the trait's contract).
        unsafe {
            let x = match i {
                0 => _mm256_srai_epi32::<24>(_mm256_slli_epi32::<24>(k)),
                1 => _mm256_srai_epi32::<24>(_mm256_slli_epi32::<16>(k)),
                2 => _mm256_srai_epi32::<24>(_mm256_slli_epi32::<8>(k)),
                _ => _mm256_srai_epi32::<24>(k),
            };
            _mm256_cvtepi32_ps(x)
        }
    }
}

/// AVX-VNNI `vpdpbusd` (u8 × s8): the keys are made unsigned by flipping
/// their sign bits (`k + 128`), and each block's accumulator starts at
/// `-128 · Σ q`.
#[derive(Clone, Copy)]
pub(super) struct Vnni;

impl Quads<Avx2> for Vnni {
    const DOT: bool = true;
    type I = __m256i;
    #[inline(always)]
    unsafe fn load(p: *const i8) -> __m256i {
        // SAFETY: forwarded contract.
        unsafe { _mm256_xor_si256(_mm256_loadu_si256(p.cast()), _mm256_set1_epi8(-128)) }
    }
    #[inline(always)]
    unsafe fn start(sum: i32) -> __m256i {
        // SAFETY: the caller's CPU has the ISA (the trait's contract).
        unsafe { _mm256_set1_epi32(-128 * sum) }
    }
    #[inline(always)]
    unsafe fn dot(acc: __m256i, k: __m256i, q: *const i8) -> __m256i {
        // SAFETY: four bytes at q (forwarded contract).
        unsafe {
            _mm256_dpbusd_avx_epi32(acc, k, _mm256_set1_epi32(q.cast::<i32>().read_unaligned()))
        }
    }
    #[inline(always)]
    unsafe fn to_f32(acc: __m256i) -> __m256 {
        // SAFETY: the caller's CPU has the ISA (the trait's contract).
        unsafe { _mm256_cvtepi32_ps(acc) }
    }
    #[inline(always)]
    unsafe fn value(_: __m256i, _: usize) -> __m256 {
        unreachable!("AVX-VNNI takes the quads whole")
    }
    #[inline(always)]
    unsafe fn load_raw(p: *const i8) -> __m256i {
        // SAFETY: forwarded contract.
        unsafe { _mm256_loadu_si256(p.cast()) }
    }
    #[inline(always)]
    unsafe fn dot_weights(acc: __m256i, v: __m256i, w: *const i8) -> __m256i {
        // SAFETY: four bytes at w (forwarded contract).
        unsafe {
            _mm256_dpbusd_avx_epi32(acc, _mm256_set1_epi32(w.cast::<i32>().read_unaligned()), v)
        }
    }
    #[inline(always)]
    unsafe fn narrow(y: __m256, out: *mut i8) {
        // The low bytes in 0..=255 survive both unsigned saturating packs.
        // SAFETY: 8 bytes at out (forwarded contract).
        unsafe {
            let x = _mm256_and_si256(_mm256_castps_si256(y), _mm256_set1_epi32(0xff));
            let w = _mm_packus_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256::<1>(x));
            _mm_storel_epi64(out.cast(), _mm_packus_epi16(w, w));
        }
    }
}

super::body::page_kernels! { isa: Avx2, heads: 4, vecs: 2, quads: Widen, feature: "avx2,fma,f16c", needs: "AVX2 + FMA + F16C" }
super::body::page_kernels! { q8_dot: Avx2, heads: 4, vecs: 2, quads: Vnni, feature: "avx2,fma,f16c,avxvnni", needs: "AVX2 + FMA + F16C + AVX-VNNI" }
