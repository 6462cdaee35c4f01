//! The quantized GEMM in plain Rust: the definitions ([`reference()`]: the
//! scalar W·A8 GEMV of `crate::qgemv` on each activation row; [`definition`]:
//! what every variant equals bit for bit) and the scalar micro-kernel over
//! the packed layout (`tile`), which walks the interleaved bytes exactly
//! as the ISA kernels do.

use super::Job;
use super::pack::{Kind, MXFP4_LUT, high_bits};
use super::{QGemm, QGemmParams, repack};
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

/// Whether the GEMM of `format` is bit-identical to [`reference()`]: it is
/// when the GEMV quantizes activations as the GEMM does (Q8_0/Q8_1 blocks
/// of 32), i.e. for every format but the K-quants (Q8_K activations).
pub fn matches_reference(format: QuantFormat) -> bool {
    !matches!(
        format,
        QuantFormat::Q4K | QuantFormat::Q5K | QuantFormat::Q6K
    )
}

/// `C = A · Wᵀ` exactly as every GEMM variant computes it (bit for bit):
/// [`reference()`] where [`matches_reference`], else (the K-quants) the scalar
/// micro-kernel over `w` repacked with interleave 4 (the result does not
/// depend on the interleave or `mr`). `format` must have a GEMM.
pub fn definition(
    format: QuantFormat,
    w: &[u8],
    a: &[f32],
    m: usize,
    n: usize,
    k: usize,
    c: &mut [f32],
) -> Result<()> {
    if matches_reference(format) {
        return reference(format, w, a, m, n, k, c);
    }
    let q = QGemm::new(format).isa(Isa::Scalar).params(QGemmParams {
        mr: 1,
        nr: 4,
        pf: 0,
        ku: 1,
        panel: false,
    });
    q.run(&repack(format, w, n, k, 4)?, a, m, c, &mut Vec::new())
}

/// The scalar micro-kernel: rows `i0 .. i0 + mr` × group `g`'s `nr`
/// columns into `out[i · nr + r]`. Any interleave.
pub(crate) fn tile(job: &Job<'_>, g: usize, i0: usize, mr: usize, out: &mut [f32]) {
    let nr = job.nr;
    let acc = &mut out[..mr * nr];
    acc.fill(0.0);
    for b in 0..job.nb {
        let q = job.qs_at(g, b);
        // Bits 4 and up of the value in nibble byte `4·nr·c + 4r + t`,
        // half h; zero for the kinds without planes.
        let high = |c: usize, r: usize, t: usize, h: usize| -> i32 {
            match job.kind.five() {
                true => high_bits(job.kind, job.qh_at(g, b), nr, r, t, c, h) as i32,
                false => 0,
            }
        };
        // A nibble's value (MXFP4: its code through the table).
        let lut = job.kind == Kind::Mxfp4;
        let val = |n: u8| -> i32 {
            if lut {
                MXFP4_LUT[n as usize] as i32
            } else {
                n as i32
            }
        };
        for i in 0..mr {
            let x = job.act(i0 + i, b);
            let dx = x.d();
            for r in 0..nr {
                // Sums of values 0..16 and 16..32 (Q6_K, one scale each);
                // the other kinds add both into s[0].
                let mut s = [0i32; 2];
                let hi_half = usize::from(job.kind.six());
                if job.kind.nibbles() {
                    for c in 0..4 {
                        for t in 0..4 {
                            let v = q[4 * nr * c + 4 * r + t];
                            let lo = val(v & 0x0F) | high(c, r, t, 0);
                            let hi = val(v >> 4) | high(c, r, t, 1);
                            s[0] += lo * x.qs[4 * c + t] as i32;
                            s[hi_half] += hi * x.qs[16 + 4 * c + t] as i32;
                        }
                    }
                } else {
                    for c in 0..8 {
                        for t in 0..4 {
                            let v = q[4 * nr * c + 4 * r + t] as i8;
                            s[0] += v as i32 * x.qs[4 * c + t] as i32;
                        }
                    }
                }
                let a = &mut acc[i * nr + r];
                let d = job.d_at(g, b, r);
                match job.kind {
                    Kind::Q4_0 | Kind::Q5_0 | Kind::Mxfp4 => {
                        *a += (d * dx) * (s[0] - job.kind.offset() * x.sum()) as f32
                    }
                    Kind::Q4_1 | Kind::Q5_1 => {
                        *a += (d * dx) * s[0] as f32 + job.m_at(g, b, r) * x.s()
                    }
                    Kind::I8 => *a += (d * dx) * s[0] as f32,
                    Kind::Q6K => {
                        // Σ(u − 32)x per half, through the activation half
                        // sums: the i32 sums of GGUF's signed values q.
                        *a += (d * dx) * (s[0] - 32 * x.sum_lo()) as f32;
                        *a += (job.m_at(g, b, r) * dx) * (s[1] - 32 * x.sum_hi()) as f32;
                    }
                }
            }
        }
    }
}
