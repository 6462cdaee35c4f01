//! The quantized GEMM in plain Rust: the definition ([`reference`]: the
//! scalar W·A8 GEMV of `crate::qgemv` on each activation row, which is what
//! "the GEMM computes" means) and the scalar micro-kernel over the packed
//! layout ([`tile`]), which walks the interleaved bytes exactly as the ISA
//! kernels do and is bit-equal to the definition.

use super::Job;
use super::pack::Kind;
use crate::Isa;
use crate::Result;
use crate::error::check_len;
use crate::qgemv::{QGemv, QMode, quantize_activations};
use crate::quant::QuantFormat;

/// `C = A · Wᵀ` by running the scalar W·A8 GEMV on each of the `m` rows of
/// `a` (GGUF weights `w`, `n` rows of `k`), each row quantized as the GEMV
/// quantizes it. Any weight format the GEMV has.
pub fn reference(
    format: QuantFormat,
    w: &[u8],
    a: &[f32],
    m: usize,
    n: usize,
    k: usize,
    c: &mut [f32],
) -> Result<()> {
    check_len("qgemm_reference", "a", a.len(), m * k)?;
    check_len("qgemm_reference", "c", c.len(), m * n)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        c.fill(0.0);
        return Ok(());
    }
    let g = QGemv::new(format, QMode::A8).isa(Isa::Scalar);
    for (x, y) in a.chunks_exact(k).zip(c.chunks_exact_mut(n)) {
        let xq = quantize_activations(format, x)?;
        g.run_prequantized(w, &xq, k, y)?;
    }
    Ok(())
}

/// The scalar micro-kernel: rows `i0 .. i0 + mr` × group `g`'s `nr`
/// columns into `out[i · nr + r]`. Any interleave.
pub(crate) fn tile(job: &Job<'_>, g: usize, i0: usize, mr: usize, out: &mut [f32]) {
    let nr = job.nr;
    let acc = &mut out[..mr * nr];
    acc.fill(0.0);
    for b in 0..job.nb {
        let d = job.d_at(g, b);
        let q = job.qs_at(g, b);
        for i in 0..mr {
            let x = job.act(i0 + i, b);
            let dx = x.d();
            for r in 0..nr {
                let mut sumi = 0i32;
                if job.kind == Kind::I8 {
                    for c in 0..8 {
                        for t in 0..4 {
                            let v = q[4 * nr * c + 4 * r + t] as i8;
                            sumi += v as i32 * x.qs[4 * c + t] as i32;
                        }
                    }
                } else {
                    for c in 0..4 {
                        for t in 0..4 {
                            let v = q[4 * nr * c + 4 * r + t];
                            sumi += (v & 0x0F) as i32 * x.qs[4 * c + t] as i32;
                            sumi += (v >> 4) as i32 * x.qs[16 + 4 * c + t] as i32;
                        }
                    }
                }
                let t = match job.kind {
                    Kind::Q4_0 => (d[r] * dx) * (sumi - 8 * x.sum()) as f32,
                    Kind::Q4_1 => (d[r] * dx) * sumi as f32 + job.m_at(g, b)[r] * x.s(),
                    Kind::I8 => (d[r] * dx) * sumi as f32,
                };
                acc[i * nr + r] += t;
            }
        }
    }
}
