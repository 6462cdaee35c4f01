//! ARMv9 SME (FEAT_SME): whether the CPU has it, its streaming vector
//! length, the tile shapes the outer-product micro-kernels come in, and the
//! macro that stamps those kernels for the f32 GEMM (`fmopa`, in
//! `gemm/sme.rs`) and the int8 GEMM (`smopa`, in `i8gemm/sme.rs`).
//!
//! Why the kernels are shaped as they are:
//! - **One `asm!` block per call, streaming mode inside it.** `fmopa` and
//!   `smopa` run only in streaming SVE mode with ZA enabled. `smstart`
//!   enters both and `smstop` leaves both, and each zeroes the Z (hence the
//!   NEON V), P and FFR registers; in streaming mode most NEON instructions
//!   are illegal unless the CPU has FEAT_SME_FA64. No compiler-generated
//!   code may therefore run between the two, so a micro-kernel is one block:
//!   enter, load or zero the accumulators, the k loop, store, leave. It
//!   declares `clobber_abi("C")` (x0–x17, x30, v0–v31, p0–p15, ffr, which
//!   covers every register the mode switches zero) plus the x registers it
//!   uses. ZA is invisible to Rust; the block starts and ends with ZA off,
//!   the AAPCS64 state of every ordinary function, so there is no lazy-save
//!   state (TPIDR2_EL0) to handle.
//! - **Assembler.** `#[target_feature(enable = "sme")]` is unstable in Rust
//!   1.95, so the functions carry no target feature and each block opens
//!   with `.arch_extension sme`, which LLVM's assembler accepts; what keeps
//!   the code off CPUs without SME is the dispatch ([`crate::Isa::Sme`] is
//!   available only when the kernel reports `HWCAP2_SME`).
//! - **Any streaming vector length.** The SVL is the CPU's (128 to 2048
//!   bits, a power of two: Apple M4 has 512, qemu's `max` 256 unless
//!   `sme-default-vector-length` says otherwise). A 32-bit ZA tile is
//!   `v × v` with `v = SVL / 32`, and ZA holds four (ZA0.S–ZA3.S). Every
//!   kernel uses all four as one block of C, `2v × 2v`, `v × 4v` or
//!   `4v × v` ([`tile_shapes`]): per k step it loads `mr / v + nr / v`
//!   vectors for 4 outer products of `v²` multiply-adds each, and the four
//!   tiles are four independent accumulation chains. The loop reads `v`
//!   with `cntw` and steps by whole vectors (`addvl`), so one binary runs
//!   at every SVL; the shape table ([`shapes`]) is made once from
//!   `rdsvl`.
//! - **Edges outside the k loop.** The operands are packed (by NEON code,
//!   before the block) and zero-padded to whole tiles, so the k loop has no
//!   predicate logic; only C's edge is predicated: C rows past `m_eff` are
//!   never loaded or stored, and columns past `n_eff` are masked by
//!   `whilelo` predicates. One kernel serves every shape.
//! - **The mode switch's cost** (a few tens of cycles on the first cores,
//!   unmeasured here) is paid once per call, against `kc · 4 · v²`
//!   multiply-adds (kc = 256 at SVL 512: 262144).

/// Streaming vector lengths the architecture allows, in 32-bit words
/// (`v`): 128, 256, 512, 1024 and 2048 bits.
pub const SVL_WORDS: [usize; 5] = [4, 8, 16, 32, 64];

/// The micro-kernel shapes `(mr, nr)` at `v` 32-bit words per streaming
/// vector, in order of preference: `2v × 2v` (4 loads for 4 outer
/// products), `v × 4v` (for few rows), `4v × v` (for few columns).
pub fn tile_shapes(v: usize) -> [(usize, usize); 3] {
    [(2 * v, 2 * v), (v, 4 * v), (4 * v, v)]
}

/// Whether `(mr, nr)` is a micro-kernel shape at some streaming vector
/// length: what a stored choice from another SME device is checked against
/// on a CPU that cannot say its own.
pub fn is_shape_at_any_svl(mr: usize, nr: usize) -> bool {
    SVL_WORDS
        .iter()
        .any(|&v| tile_shapes(v).contains(&(mr, nr)))
}

/// The kernel of `kernels` (one per [`tile_shapes`] entry, in its order)
/// for the shape `(mr, nr)` at this CPU's streaming vector length.
#[cfg(target_arch = "aarch64")]
pub(crate) fn kernel_for<F: Copy>(kernels: [F; 3], mr: usize, nr: usize) -> Option<F> {
    let v = words()?;
    let i = tile_shapes(v).iter().position(|&s| s == (mr, nr))?;
    Some(kernels[i])
}

/// Whether the CPU has SME and the OS lets this process use it.
pub fn detected() -> bool {
    vector_bytes().is_some()
}

/// The streaming vector length in bytes, `None` without SME.
pub fn vector_bytes() -> Option<usize> {
    use std::sync::OnceLock;
    static SVL: OnceLock<Option<usize>> = OnceLock::new();
    *SVL.get_or_init(read_vector_bytes)
}

/// 32-bit words per streaming vector (`v`), `None` without SME.
pub fn words() -> Option<usize> {
    vector_bytes().map(|b| b / 4)
}

/// The micro-kernel shapes of this CPU ([`tile_shapes`] at its SVL), empty
/// without SME.
pub fn shapes() -> &'static [(usize, usize)] {
    use std::sync::OnceLock;
    static SHAPES: OnceLock<Vec<(usize, usize)>> = OnceLock::new();
    SHAPES.get_or_init(|| words().map_or_else(Vec::new, |v| tile_shapes(v).to_vec()))
}

/// `HWCAP2_SME` (arch/arm64/include/uapi/asm/hwcap.h): the kernel saves and
/// restores the streaming state, so user code may run `smstart`.
/// `is_aarch64_feature_detected!("sme")` is unstable in Rust 1.95.
#[cfg(all(
    target_arch = "aarch64",
    any(target_os = "linux", target_os = "android")
))]
fn read_vector_bytes() -> Option<usize> {
    const HWCAP2_SME: u64 = 1 << 23;
    // SAFETY: getauxval only reads the process's auxiliary vector.
    let hwcap2 = unsafe { libc::getauxval(libc::AT_HWCAP2) };
    if hwcap2 & HWCAP2_SME == 0 {
        return None;
    }
    let bytes: usize;
    // SAFETY: the CPU has SME (checked above); `rdsvl` reads the streaming
    // vector length and runs outside streaming mode.
    unsafe {
        core::arch::asm!(
            ".arch_extension sme",
            "rdsvl {0}, #1",
            out(reg) bytes,
            options(nomem, nostack, preserves_flags, pure),
        );
    }
    Some(bytes)
}

#[cfg(not(all(
    target_arch = "aarch64",
    any(target_os = "linux", target_os = "android")
)))]
fn read_vector_bytes() -> Option<usize> {
    None
}

/// One row block of C ↔ ZA: `$op` (`ld1w` with `/z`, or `st1w`) moves rows
/// `0..min(x13, v)` of the block between C (row pointer `x9`, `x4` bytes
/// apart) and the horizontal slices `w12` of the block's tiles, each tile
/// `(number, column predicate, column offset)`; then `x13 -= v`. The
/// column offsets are registers holding `v`, `2v`, `3v` words (`x7`, `x10`,
/// `x11`), scaled by 4 in the address.
#[cfg(target_arch = "aarch64")]
macro_rules! za_rows {
    ($op:literal, $zeroing:literal, $(($tile:literal, $pred:literal, $off:literal)),+) => {
        concat!(
            "cmp x13, x7\n",
            "csel x14, x13, x7, lt\n",
            "sub x13, x13, x7\n",
            "mov w12, #0\n",
            "cmp x14, #0\n",
            "b.le 3f\n",
            "2:\n",
            $($op, " {{za", $tile, "h.s[w12, 0]}}, ", $pred, $zeroing, ", [x9", $off, "]\n",)+
            "add x9, x9, x4\n",
            "add w12, w12, #1\n",
            "cmp x12, x14\n",
            "b.lt 2b\n",
            "3:\n",
        )
    };
}
#[cfg(target_arch = "aarch64")]
pub(crate) use za_rows;

/// Stamps the three SME micro-kernels of one element type (one per
/// [`tile_shapes`] entry, named by the caller), each of the signature
///
/// `unsafe fn(steps, a: *const $a, b: *const $a, c: *mut $c, ldc, m_eff, n_eff)`:
///
/// `C[0..m_eff, 0..n_eff] (+)= Σ_s A_s ⊗ B_s` over `steps` k steps, where
/// step `s` of the packed A panel is `mr` 32-bit lanes (`mr / v` whole
/// vectors) and of the packed B panel `nr` lanes, C's rows are `ldc`
/// elements (4 bytes each) apart, and `$mopa` (`fmopa` on f32 lanes, `smopa` on 4-byte groups of
/// int8, `$ty` `s` or `b`, loaded with `$load`) accumulates the outer
/// product into ZA. With `c_in: true` the tile starts from C (C += A·B),
/// else from zero (C = A·B).
///
/// Registers: x0 steps, x1 A, x2 B, x3 C, x4 ldc (in bytes once the block
/// has scaled it), x5 m_eff, x6 n_eff; x7,
/// x10, x11 hold `v`, `2v`, `3v`; x9, x12–x14 walk C's rows (`za_rows!`).
/// p0 is all-true (byte granular, so it governs `.s` and `.b` alike), p4–p7
/// mask the four column vectors of C.
#[cfg(target_arch = "aarch64")]
macro_rules! mopa_kernels {
    (
        load: $load:literal, ty: $ty:literal, mopa: $mopa:literal, a: $a:ty, c: $c:ty,
        c_in: $cin:tt, names: [$k2x2:ident, $k1x4:ident, $k4x1:ident] $(,)?
    ) => {
        $crate::sme::mopa_kernels!(@kernel $k2x2, $load, $ty, $mopa, $a, $c, $cin,
            "2v × 2v: A vectors z0, z1; B vectors z2, z3; ZA0..3 = z0⊗z2, z0⊗z3, z1⊗z2, z1⊗z3",
            step: [
                $load, " {{z0.", $ty, "}}, p0/z, [x1]\n",
                $load, " {{z1.", $ty, "}}, p0/z, [x1, #1, mul vl]\n",
                $load, " {{z2.", $ty, "}}, p0/z, [x2]\n",
                $load, " {{z3.", $ty, "}}, p0/z, [x2, #1, mul vl]\n",
                $mopa, " za0.s, p0/m, p0/m, z0.", $ty, ", z2.", $ty, "\n",
                $mopa, " za1.s, p0/m, p0/m, z0.", $ty, ", z3.", $ty, "\n",
                $mopa, " za2.s, p0/m, p0/m, z1.", $ty, ", z2.", $ty, "\n",
                $mopa, " za3.s, p0/m, p0/m, z1.", $ty, ", z3.", $ty, "\n",
                "addvl x1, x1, #2\n",
                "addvl x2, x2, #2\n",
            ],
            rows: [[("0", "p4", ""), ("1", "p5", ", x7, lsl #2")],
                   [("2", "p4", ""), ("3", "p5", ", x7, lsl #2")]]);
        $crate::sme::mopa_kernels!(@kernel $k1x4, $load, $ty, $mopa, $a, $c, $cin,
            "v × 4v: A vector z0; B vectors z4..z7; ZAc = z0⊗z(4+c)",
            step: [
                $load, " {{z0.", $ty, "}}, p0/z, [x1]\n",
                $load, " {{z4.", $ty, "}}, p0/z, [x2]\n",
                $load, " {{z5.", $ty, "}}, p0/z, [x2, #1, mul vl]\n",
                $load, " {{z6.", $ty, "}}, p0/z, [x2, #2, mul vl]\n",
                $load, " {{z7.", $ty, "}}, p0/z, [x2, #3, mul vl]\n",
                $mopa, " za0.s, p0/m, p0/m, z0.", $ty, ", z4.", $ty, "\n",
                $mopa, " za1.s, p0/m, p0/m, z0.", $ty, ", z5.", $ty, "\n",
                $mopa, " za2.s, p0/m, p0/m, z0.", $ty, ", z6.", $ty, "\n",
                $mopa, " za3.s, p0/m, p0/m, z0.", $ty, ", z7.", $ty, "\n",
                "addvl x1, x1, #1\n",
                "addvl x2, x2, #4\n",
            ],
            rows: [[("0", "p4", ""), ("1", "p5", ", x7, lsl #2"),
                    ("2", "p6", ", x10, lsl #2"), ("3", "p7", ", x11, lsl #2")]]);
        $crate::sme::mopa_kernels!(@kernel $k4x1, $load, $ty, $mopa, $a, $c, $cin,
            "4v × v: A vectors z0..z3; B vector z4; ZAr = zr⊗z4",
            step: [
                $load, " {{z0.", $ty, "}}, p0/z, [x1]\n",
                $load, " {{z1.", $ty, "}}, p0/z, [x1, #1, mul vl]\n",
                $load, " {{z2.", $ty, "}}, p0/z, [x1, #2, mul vl]\n",
                $load, " {{z3.", $ty, "}}, p0/z, [x1, #3, mul vl]\n",
                $load, " {{z4.", $ty, "}}, p0/z, [x2]\n",
                $mopa, " za0.s, p0/m, p0/m, z0.", $ty, ", z4.", $ty, "\n",
                $mopa, " za1.s, p0/m, p0/m, z1.", $ty, ", z4.", $ty, "\n",
                $mopa, " za2.s, p0/m, p0/m, z2.", $ty, ", z4.", $ty, "\n",
                $mopa, " za3.s, p0/m, p0/m, z3.", $ty, ", z4.", $ty, "\n",
                "addvl x1, x1, #4\n",
                "addvl x2, x2, #1\n",
            ],
            rows: [[("0", "p4", "")], [("1", "p4", "")], [("2", "p4", "")], [("3", "p4", "")]]);
    };
    (@c_in true, $([$($t:tt),+]),+) => {
        concat!("mov x9, x3\n", "mov x13, x5\n",
                $($crate::sme::za_rows!("ld1w", "/z", $($t),+),)+)
    };
    (@c_in false, $([$($t:tt),+]),+) => { "" };
    (
        @kernel $name:ident, $load:literal, $ty:literal, $mopa:literal, $a:ty, $c:ty, $cin:tt,
        $layout:literal, step: [$($step:expr),+ $(,)?], rows: [$([$($t:tt),+]),+]
    ) => {
        #[doc = concat!("SME `", $mopa, "` micro-kernel, ", $layout, " (see `sme::mopa_kernels!`).")]
        ///
        /// # Safety
        /// The CPU has SME; A and B hold `steps` whole packed steps of the
        /// kernel's `mr` and `nr` lanes; C holds `m_eff ≤ mr` rows of
        /// `n_eff ≤ nr` elements, `ldc` elements apart.
        pub(super) unsafe fn $name(
            steps: usize,
            a: *const $a,
            b: *const $a,
            c: *mut $c,
            ldc: usize,
            m_eff: usize,
            n_eff: usize,
        ) {
            // SAFETY: per the contract above; the block enters and leaves
            // streaming mode itself and clobbers what the switch zeroes.
            unsafe {
                core::arch::asm!(
                    ".arch_extension sme",
                    "smstart",
                    "zero {{za}}",
                    "lsl x4, x4, #2",
                    "cntw x7",
                    "add x10, x7, x7",
                    "add x11, x10, x7",
                    "ptrue p0.b",
                    "whilelo p4.s, xzr, x6",
                    "whilelo p5.s, x7, x6",
                    "whilelo p6.s, x10, x6",
                    "whilelo p7.s, x11, x6",
                    $crate::sme::mopa_kernels!(@c_in $cin, $([$($t),+]),+),
                    "cbz x0, 5f",
                    "4:",
                    concat!($($step),+),
                    "subs x0, x0, #1",
                    "b.ne 4b",
                    "5:",
                    "mov x9, x3",
                    "mov x13, x5",
                    $($crate::sme::za_rows!("st1w", "", $($t),+),)+
                    "smstop",
                    inout("x0") steps => _,
                    inout("x1") a => _,
                    inout("x2") b => _,
                    in("x3") c,
                    inout("x4") ldc => _,
                    in("x5") m_eff,
                    in("x6") n_eff,
                    out("x7") _,
                    out("x9") _,
                    out("x10") _,
                    out("x11") _,
                    out("x12") _,
                    out("x13") _,
                    out("x14") _,
                    clobber_abi("C"),
                    options(nostack),
                );
            }
        }
    };
}
#[cfg(target_arch = "aarch64")]
pub(crate) use mopa_kernels;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_follow_the_vector_length() {
        assert_eq!(tile_shapes(8), [(16, 16), (8, 32), (32, 8)]);
        assert!(is_shape_at_any_svl(16, 16));
        assert!(is_shape_at_any_svl(64, 256));
        assert!(!is_shape_at_any_svl(8, 12));
        assert!(!is_shape_at_any_svl(24, 24));
        match words() {
            Some(v) => {
                assert!(SVL_WORDS.contains(&v), "SVL of {v} words");
                assert_eq!(shapes(), tile_shapes(v));
                assert!(crate::Isa::Sme.is_available());
            }
            None => {
                assert!(shapes().is_empty());
                assert!(!crate::Isa::Sme.is_available());
            }
        }
    }
}
