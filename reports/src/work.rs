//! How much arithmetic and memory traffic one kernel problem costs, from its
//! `(op, dtype, dims)` alone: the x coordinate of the roofline (FLOP per byte)
//! and the numerator of every GFLOP/s figure.
//!
//! The model is the tuner's (`tiletune-tuner`, `KernelProblem::work`): the
//! weights are read once in their stored format, f32 activations in and
//! outputs out. Quantized formats count their GGUF block bytes (scales
//! included) per weight, so a Q4_0 GEMV sits at ~3.5 FLOP/byte, not 1/2.

use tiletune_tables::Problem;

/// Floating-point operations and bytes moved by one run of a problem.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Work {
    pub flops: f64,
    pub bytes: f64,
}

impl Work {
    /// FLOP per byte; `None` when the problem moves no bytes or does no flops.
    pub fn intensity(&self) -> Option<f64> {
        (self.flops > 0.0 && self.bytes > 0.0).then(|| self.flops / self.bytes)
    }

    /// GFLOP/s at a run time in nanoseconds (FLOP per ns is GFLOP/s).
    pub fn gflops(&self, ns: f64) -> Option<f64> {
        (self.flops > 0.0 && ns.is_finite() && ns > 0.0).then(|| self.flops / ns)
    }
}

/// Stored bytes per weight element. Block formats follow GGUF
/// (ggml `ggml-common.h`): e.g. Q4_0 is 32 weights in 18 bytes
/// (an f16 scale and 16 bytes of nibbles).
pub fn bytes_per_element(dtype: &str) -> Option<f64> {
    let (block_bytes, block_len) = match dtype.to_ascii_lowercase().as_str() {
        "f32" => (4.0, 1.0),
        "f16" | "bf16" => (2.0, 1.0),
        "q4_0" => (18.0, 32.0),
        "q4_1" => (20.0, 32.0),
        "q5_0" => (22.0, 32.0),
        "q5_1" => (24.0, 32.0),
        "q8_0" => (34.0, 32.0),
        "mxfp4" => (17.0, 32.0),
        "q2_k" => (84.0, 256.0),
        "q3_k" => (110.0, 256.0),
        "q4_k" => (144.0, 256.0),
        "q5_k" => (176.0, 256.0),
        "q6_k" => (210.0, 256.0),
        _ => return None,
    };
    Some(block_bytes / block_len)
}

/// The work of one problem, or `None` for an op or dtype without a model
/// (those problems are listed in the report but have no roofline point).
pub fn work(problem: &Problem) -> Option<Work> {
    let d = |name: &str| problem.dim(name).map(|v| v as f64);
    let w = bytes_per_element(problem.dtype())?;
    match problem.op() {
        // y[n] = W[n×k] · x[k]
        "gemv" | "qgemv_a32" => {
            let (n, k) = (d("n")?, d("k")?);
            Some(Work {
                flops: 2.0 * n * k,
                bytes: n * k * w + 4.0 * (n + k),
            })
        }
        // Activations quantized to Q8_0 blocks before the dot products.
        "qgemv_a8" => {
            let (n, k) = (d("n")?, d("k")?);
            Some(Work {
                flops: 2.0 * n * k,
                bytes: n * k * w + k * 34.0 / 32.0 + 4.0 * n,
            })
        }
        // C[m×n] = A[m×k] · W[k×n]: weights once, f32 A in and C out.
        "gemm" => {
            let (m, n, k) = (d("m")?, d("n")?, d("k")?);
            Some(Work {
                flops: 2.0 * m * n * k,
                bytes: n * k * w + 4.0 * (m * k + m * n),
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemv_f32_matches_the_tuner_model() {
        let p = Problem::new("gemv", "f32", [("n", 896), ("k", 896)]).unwrap();
        let w = work(&p).unwrap();
        assert_eq!(w.flops, 2.0 * 896.0 * 896.0);
        assert_eq!(w.bytes, 896.0 * 896.0 * 4.0 + 4.0 * 1792.0);
        // A f32 GEMV does ~1 multiply-add per 4-byte weight: just under 0.5 FLOP/byte.
        let ai = w.intensity().unwrap();
        assert!(ai > 0.49 && ai < 0.5, "{ai}");
        // 1.6 MFLOP in 1 ms is 1.6 GFLOP/s.
        assert!((w.gflops(1e6).unwrap() - w.flops / 1e6).abs() < 1e-12);
        assert_eq!(w.gflops(0.0), None);
    }

    #[test]
    fn quantized_blocks_count_their_scales() {
        let p = Problem::new("gemv", "q4_0", [("n", 4864), ("k", 896)]).unwrap();
        let w = work(&p).unwrap();
        let weights = 4864.0 * 896.0 * 18.0 / 32.0;
        assert_eq!(w.bytes, weights + 4.0 * (4864.0 + 896.0));
        let ai = w.intensity().unwrap();
        assert!(ai > 3.4 && ai < 3.6, "{ai}");
        assert_eq!(bytes_per_element("Q6_K"), Some(210.0 / 256.0));
    }

    #[test]
    fn gemm_reuses_weights_across_rows() {
        let p = Problem::new("gemm", "f32", [("m", 32), ("n", 896), ("k", 896)]).unwrap();
        let w = work(&p).unwrap();
        assert_eq!(w.flops, 2.0 * 32.0 * 896.0 * 896.0);
        assert_eq!(
            w.bytes,
            896.0 * 896.0 * 4.0 + 4.0 * (32.0 * 896.0 + 32.0 * 896.0)
        );
        assert!(w.intensity().unwrap() > 14.0);
    }

    #[test]
    fn unknown_ops_and_dtypes_have_no_model() {
        let p = Problem::new("softmax", "f32", [("rows", 4), ("dim", 8)]).unwrap();
        assert_eq!(work(&p), None);
        let p = Problem::new("gemv", "q9_9", [("n", 4), ("k", 4)]).unwrap();
        assert_eq!(work(&p), None);
        let p = Problem::new("gemv", "f32", [("n", 0), ("k", 4)]).unwrap();
        assert_eq!(work(&p).unwrap().intensity(), None);
    }
}
