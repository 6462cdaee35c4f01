//! AVX2, AVX-VNNI, AVX-512 VNNI and AMX int8 peak loops (see `int8.rs` for the design).

use std::arch::x86_64::*;

/// The 32-byte operand registers of the ymm loops, opaque to the optimizer
/// (`black_box`) so the chains are not folded.
///
/// # Safety
/// The CPU must support AVX; `a` and `b` hold at least 32 bytes.
#[target_feature(enable = "avx")]
unsafe fn operands256(a: &[i8], b: &[i8]) -> (__m256i, __m256i) {
    // SAFETY: forwarded from the caller; unaligned loads.
    let (va, vb) = unsafe {
        (
            _mm256_loadu_si256(a.as_ptr().cast()),
            _mm256_loadu_si256(b.as_ptr().cast()),
        )
    };
    (std::hint::black_box(va), std::hint::black_box(vb))
}

/// `ACC` chains of 16 i16 with `vpmaddubsw ymm` summed by `vpaddw`.
///
/// # Safety
/// The CPU must support AVX2; `a.len() == b.len() == 32`,
/// `init.len() == ACC`, `out.len() == ACC * 16`.
#[target_feature(enable = "avx2")]
pub unsafe fn avx2<const ACC: usize>(
    iters: usize,
    a: &[i8],
    b: &[i8],
    init: &[i32],
    out: &mut [i32],
) {
    debug_assert!(a.len() == 32 && b.len() == 32 && init.len() == ACC && out.len() == ACC * 16);
    // SAFETY: a and b hold 32 bytes each.
    let (va, vb) = unsafe { operands256(a, b) };
    let mut acc = [_mm256_setzero_si256(); ACC];
    for (r, x) in acc.iter_mut().zip(init) {
        *r = _mm256_set1_epi16(*x as i16);
    }
    for _ in 0..iters {
        for r in &mut acc {
            // In asm because the product does not depend on the chain:
            // written with intrinsics, LLVM computes it once outside the
            // loop and leaves only the adds.
            // SAFETY: register-only instructions of the enabled AVX2.
            unsafe {
                std::arch::asm!(
                    "vpmaddubsw {t}, {a}, {b}",
                    "vpaddw {r}, {r}, {t}",
                    r = inout(ymm_reg) *r,
                    a = in(ymm_reg) va,
                    b = in(ymm_reg) vb,
                    t = out(ymm_reg) _,
                    options(pure, nomem, nostack, preserves_flags),
                );
            }
        }
    }
    let mut lanes = [0i16; 16];
    for (k, r) in acc.iter().enumerate() {
        // SAFETY: lanes holds 16 i16; unaligned store.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), *r) };
        for (o, l) in out[k * 16..(k + 1) * 16].iter_mut().zip(lanes) {
            *o = l as i32;
        }
    }
}

/// `ACC` chains of 8 i32 with `vpdpbusd ymm` (AVX-VNNI encoding).
///
/// # Safety
/// The CPU must support AVX2 and AVX-VNNI; `a.len() == b.len() == 32`,
/// `init.len() == ACC`, `out.len() == ACC * 8`.
#[target_feature(enable = "avx2,avxvnni")]
pub unsafe fn avx_vnni<const ACC: usize>(
    iters: usize,
    a: &[i8],
    b: &[i8],
    init: &[i32],
    out: &mut [i32],
) {
    debug_assert!(a.len() == 32 && b.len() == 32 && init.len() == ACC && out.len() == ACC * 8);
    // SAFETY: a and b hold 32 bytes each.
    let (va, vb) = unsafe { operands256(a, b) };
    let mut acc = [_mm256_setzero_si256(); ACC];
    for (r, x) in acc.iter_mut().zip(init) {
        *r = _mm256_set1_epi32(*x);
    }
    for _ in 0..iters {
        for r in &mut acc {
            *r = _mm256_dpbusd_avx_epi32(*r, va, vb);
        }
    }
    for (k, r) in acc.iter().enumerate() {
        // SAFETY: out holds ACC * 8 i32; unaligned store.
        unsafe { _mm256_storeu_si256(out.as_mut_ptr().add(k * 8).cast(), *r) };
    }
}

/// `ACC` chains of 16 i32 with `vpdpbusd zmm`.
///
/// # Safety
/// The CPU must support AVX-512F and AVX512_VNNI; `a.len() == b.len() == 64`,
/// `init.len() == ACC`, `out.len() == ACC * 16`.
#[target_feature(enable = "avx512f,avx512vnni")]
pub unsafe fn avx512_vnni<const ACC: usize>(
    iters: usize,
    a: &[i8],
    b: &[i8],
    init: &[i32],
    out: &mut [i32],
) {
    debug_assert!(a.len() == 64 && b.len() == 64 && init.len() == ACC && out.len() == ACC * 16);
    // SAFETY: a and b hold 64 bytes each; unaligned loads.
    let (va, vb) = unsafe {
        (
            _mm512_loadu_si512(a.as_ptr().cast()),
            _mm512_loadu_si512(b.as_ptr().cast()),
        )
    };
    let (va, vb) = (std::hint::black_box(va), std::hint::black_box(vb));
    let mut acc = [_mm512_setzero_si512(); ACC];
    for (r, x) in acc.iter_mut().zip(init) {
        *r = _mm512_set1_epi32(*x);
    }
    for _ in 0..iters {
        for r in &mut acc {
            *r = _mm512_dpbusd_epi32(*r, va, vb);
        }
    }
    for (k, r) in acc.iter().enumerate() {
        // SAFETY: out holds ACC * 16 i32; unaligned store.
        unsafe { _mm512_storeu_si512(out.as_mut_ptr().add(k * 16).cast(), *r) };
    }
}

/// Four chains of 16 × 16 i32 tiles (tmm0..tmm3) with `tdpbssd` on one
/// 16 × 64-byte operand tile each (tmm4, tmm5). The tiles are configured
/// for this call and released after it.
///
/// # Safety
/// The CPU must run AMX-INT8 with the tile state granted
/// (`tiletune_kernels::Isa::Amx` available); `a.len() == b.len() == 1024`,
/// `init.len() == 4`, `out.len() == 4 * 256`.
pub unsafe fn amx(iters: usize, a: &[i8], b: &[i8], init: &[i32], out: &mut [i32]) {
    debug_assert!(a.len() == 1024 && b.len() == 1024 && init.len() == 4 && out.len() == 1024);
    use std::arch::asm;
    #[repr(C, align(64))]
    struct Config([u8; 64]);
    let mut c = Config([0; 64]);
    c.0[0] = 1;
    for t in 0..6 {
        c.0[16 + 2 * t] = 64;
        c.0[48 + t] = 16;
    }
    let start: Vec<i32> = init.iter().flat_map(|&x| [x; 256]).collect();
    // SAFETY: a valid palette-1 configuration on a CPU with AMX; every
    // tile load and store stays inside a 1024-byte operand or a 256-i32
    // accumulator of `start` / `out` (16 rows, 64 bytes apart); the tile
    // instructions between touch no memory.
    unsafe {
        asm!("ldtilecfg [{}]", in(reg) c.0.as_ptr(), options(nostack, readonly));
        let (s, l) = (start.as_ptr(), 64usize);
        asm!(
            "tileloadd tmm0, [{s} + {l}*1]",
            "tileloadd tmm1, [{s1} + {l}*1]",
            "tileloadd tmm2, [{s2} + {l}*1]",
            "tileloadd tmm3, [{s3} + {l}*1]",
            "tileloadd tmm4, [{a} + {l}*1]",
            "tileloadd tmm5, [{b} + {l}*1]",
            s = in(reg) s, s1 = in(reg) s.add(256), s2 = in(reg) s.add(512),
            s3 = in(reg) s.add(768), a = in(reg) a.as_ptr(), b = in(reg) b.as_ptr(), l = in(reg) l,
            options(nostack, readonly),
        );
        for _ in 0..iters {
            asm!(
                "tdpbssd tmm0, tmm4, tmm5",
                "tdpbssd tmm1, tmm4, tmm5",
                "tdpbssd tmm2, tmm4, tmm5",
                "tdpbssd tmm3, tmm4, tmm5",
                options(nomem, nostack, preserves_flags),
            );
        }
        let o = out.as_mut_ptr();
        asm!(
            "tilestored [{o} + {l}*1], tmm0",
            "tilestored [{o1} + {l}*1], tmm1",
            "tilestored [{o2} + {l}*1], tmm2",
            "tilestored [{o3} + {l}*1], tmm3",
            "tilerelease",
            o = in(reg) o, o1 = in(reg) o.add(256), o2 = in(reg) o.add(512), o3 = in(reg) o.add(768),
            l = in(reg) l, options(nostack),
        );
    }
}
