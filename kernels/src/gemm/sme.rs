//! SME f32 GEMM micro-kernels: `fmopa` outer products into the four 32-bit
//! ZA tiles, one `2v × 2v`, `v × 4v` or `4v × v` block of C per call at
//! `v = SVL / 32` (see [`crate::sme`] for why they are shaped so).
//!
//! Only the packed (BLIS) path has SME kernels: the packed A micro-panel
//! (`kc` groups of `mr` contiguous values, A transposed) and W panel (`kc`
//! rows of `nr` values) are already the column and row vectors an outer
//! product takes, whole and zero-padded, so the k loop is loads and
//! `fmopa`s. The packing and the f16 widening run before the kernel, outside
//! streaming mode, with the NEON routines (every SME CPU has NEON). The tile
//! starts from C (C += A·P over the `kc` slice), as the [`super::PackedFn`]
//! contract asks. A direct (unpacked) kernel would need A's rows as
//! columns, a transpose per k step, so there is none: the tuner weighs the
//! packed SME kernels against NEON's direct ones for small m.

use super::PackedFn;

crate::sme::mopa_kernels! {
    load: "ld1w", ty: "s", mopa: "fmopa", a: f32, c: f32, c_in: true,
    names: [k2x2, k1x4, k4x1],
}

/// Packed micro-kernel shapes `(mr, nr)` of this CPU, in order of
/// preference; empty without SME.
pub(super) fn packed_shapes() -> &'static [(usize, usize)] {
    crate::sme::shapes()
}

/// The packed kernel `(mr, nr)` at this CPU's streaming vector length.
pub(super) fn packed(mr: usize, nr: usize) -> Option<PackedFn> {
    crate::sme::kernel_for::<PackedFn>([k2x2, k1x4, k4x1], mr, nr)
}
