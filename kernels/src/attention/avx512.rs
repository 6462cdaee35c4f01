//! AVX-512 (F + BW + VL) page kernels: the bodies of `body.rs` at 16
//! lanes, four heads at a time, with masked head-dim tails (f16 rows
//! widened with `vcvtph2ps zmm`, Q8_0 rows `i8 → i32 → f32`). Q8_0 keys
//! are scored with `vpdpbusd` where AVX-512 VNNI is present, else widened
//! from their quads by shifts.

use super::body::Quads;
use crate::simd::avx512::Avx512;
use std::arch::x86_64::*;

/// Quads widened to f32: value `i` of a lane is its byte `i`, moved to
/// the top and shifted back down with its sign.
#[derive(Clone, Copy)]
pub(super) struct Widen;

impl Quads<Avx512> for Widen {
    const DOT: bool = false;
    type I = __m512i;
    #[inline(always)]
    unsafe fn load(p: *const i8) -> __m512i {
        // SAFETY: forwarded contract.
        unsafe { _mm512_loadu_si512(p.cast()) }
    }
    #[inline(always)]
    unsafe fn start(_: i32) -> __m512i {
        // SAFETY: the caller's CPU has the ISA (the trait's contract).
        unsafe { _mm512_setzero_si512() }
    }
    #[inline(always)]
    unsafe fn dot(_: __m512i, _: __m512i, _: *const i8) -> __m512i {
        unreachable!("no int8 dot product without VNNI")
    }
    #[inline(always)]
    unsafe fn to_f32(_: __m512i) -> __m512 {
        unreachable!("no int8 dot product without VNNI")
    }
    #[inline(always)]
    unsafe fn value(k: __m512i, i: usize) -> __m512 {
        // SAFETY: the caller's CPU has the ISA (the trait's contract).
        unsafe {
            let x = match i {
                0 => _mm512_srai_epi32::<24>(_mm512_slli_epi32::<24>(k)),
                1 => _mm512_srai_epi32::<24>(_mm512_slli_epi32::<16>(k)),
                2 => _mm512_srai_epi32::<24>(_mm512_slli_epi32::<8>(k)),
                _ => _mm512_srai_epi32::<24>(k),
            };
            _mm512_cvtepi32_ps(x)
        }
    }
}

/// `vpdpbusd` (u8 × s8): the keys are made unsigned by flipping their sign
/// bits (`k + 128`), and each block's accumulator starts at `-128 · Σ q`.
#[derive(Clone, Copy)]
pub(super) struct Vnni;

impl Quads<Avx512> for Vnni {
    const DOT: bool = true;
    type I = __m512i;
    #[inline(always)]
    unsafe fn load(p: *const i8) -> __m512i {
        // SAFETY: forwarded contract.
        unsafe { _mm512_xor_si512(_mm512_loadu_si512(p.cast()), _mm512_set1_epi8(-128)) }
    }
    #[inline(always)]
    unsafe fn start(sum: i32) -> __m512i {
        // SAFETY: the caller's CPU has the ISA (the trait's contract).
        unsafe { _mm512_set1_epi32(-128 * sum) }
    }
    #[inline(always)]
    unsafe fn dot(acc: __m512i, k: __m512i, q: *const i8) -> __m512i {
        // SAFETY: four bytes at q (forwarded contract).
        unsafe { _mm512_dpbusd_epi32(acc, k, _mm512_set1_epi32(q.cast::<i32>().read_unaligned())) }
    }
    #[inline(always)]
    unsafe fn to_f32(acc: __m512i) -> __m512 {
        // SAFETY: the caller's CPU has the ISA (the trait's contract).
        unsafe { _mm512_cvtepi32_ps(acc) }
    }
    #[inline(always)]
    unsafe fn value(_: __m512i, _: usize) -> __m512 {
        unreachable!("VNNI takes the quads whole")
    }
    #[inline(always)]
    unsafe fn load_raw(p: *const i8) -> __m512i {
        // SAFETY: forwarded contract.
        unsafe { _mm512_loadu_si512(p.cast()) }
    }
    #[inline(always)]
    unsafe fn dot_weights(acc: __m512i, v: __m512i, w: *const i8) -> __m512i {
        // SAFETY: four bytes at w (forwarded contract).
        unsafe { _mm512_dpbusd_epi32(acc, _mm512_set1_epi32(w.cast::<i32>().read_unaligned()), v) }
    }
    #[inline(always)]
    unsafe fn narrow(y: __m512, out: *mut i8) {
        // SAFETY: 16 bytes at out (forwarded contract).
        unsafe { _mm_storeu_si128(out.cast(), _mm512_cvtepi32_epi8(_mm512_castps_si512(y))) }
    }
}

super::body::page_kernels! { isa: Avx512, heads: 4, vecs: 4, quads: Widen, feature: "avx512f,avx512bw,avx512vl,fma,f16c", needs: "AVX-512 F/BW/VL + FMA + F16C" }
super::body::page_kernels! { q8_dot: Avx512, heads: 4, vecs: 4, quads: Vnni, feature: "avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c", needs: "AVX-512 F/BW/VL/VNNI + FMA + F16C" }
