//! RMSNorm and LayerNorm over the rows of a `[rows, dim]` activation, in
//! place or out of place, with a weight (`γ`), an optional bias (`β`) and
//! `eps` inside the square root:
//!
//! - RMSNorm (Llama, Qwen): `y = x / √(mean(x²) + eps) · γ (+ β)`
//! - LayerNorm (GPT-2, BERT): `y = (x - mean) / √(var + eps) · γ + β`, with the
//!   biased variance, computed in a second pass over `x - mean` (no
//!   `E[x²] - mean²` cancellation), as PyTorch does.
//!
//! The reference sums in f64; the SIMD variants sum in f32 with several
//! accumulators, so they agree within `1e-5 + 1e-5·|y|` for rows up to a few
//! thousand (tested), and they can overflow where the reference does not
//! when `|x| > ~1e19`. NaN anywhere in a row makes the row NaN; a `±∞` makes
//! RMSNorm's finite outputs `0` and the `∞` itself NaN, and LayerNorm's row NaN,
//! in both.

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod body;
pub mod scalar;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "aarch64")]
mod neon;

use crate::eltwise::{
    best_isa, check_row_threads, default_row_threads, for_row_blocks, resolve_isa,
    thread_candidates,
};
use crate::error::check_len;
use crate::tune::{CpuCaps, Tunable};
use crate::{Isa, KernelError, Result};
use serde::{Deserialize, Serialize};

/// Which normalisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NormKind {
    Rms,
    Layer,
}

impl NormKind {
    /// Stable name for selector tables.
    pub fn name(self) -> &'static str {
        match self {
            NormKind::Rms => "rms_norm",
            NormKind::Layer => "layer_norm",
        }
    }
}

/// Problem shape: `rows` vectors of `dim` floats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NormShape {
    pub rows: usize,
    pub dim: usize,
}

/// Tunable parameters: the number of threads the rows are split over
/// (`1..=256`; exactly that many workers run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NormParams {
    pub threads: usize,
}

impl Tunable for NormParams {
    type Shape = NormShape;

    /// One thread below 256 KiB of activations (a decode step), else one
    /// thread per 128 KiB, at most one per row and per core.
    fn default_for(shape: &NormShape, cpu: &CpuCaps) -> Self {
        NormParams {
            threads: default_row_threads(shape.rows * shape.dim * 4, shape.rows, cpu),
        }
    }

    fn candidates(shape: &NormShape, cpu: &CpuCaps) -> Vec<Self> {
        let mut v = vec![Self::default_for(shape, cpu)];
        for threads in thread_candidates(shape.rows, cpu) {
            if !v.contains(&NormParams { threads }) {
                v.push(NormParams { threads });
            }
        }
        v
    }

    fn validate(&self) -> Result<()> {
        check_row_threads("norm", self.threads)
    }
}

/// A normalisation layer: kind, weight, optional bias and eps. `dim` is the
/// weight's length.
///
/// ```
/// use tiletune_kernels::norm::Norm;
/// let w = [1.0f32; 4];
/// let mut x = [1.0f32, 2.0, 3.0, 4.0, 0.5, 0.5, 0.5, 0.5];
/// Norm::rms(&w, 1e-6).forward_inplace(&mut x, 2).unwrap();
/// assert!((x[4] - 1.0).abs() < 1e-5);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Norm<'a> {
    pub kind: NormKind,
    pub weight: &'a [f32],
    pub bias: Option<&'a [f32]>,
    pub eps: f32,
}

impl<'a> Norm<'a> {
    /// RMSNorm with weight `weight` (length `dim`).
    pub fn rms(weight: &'a [f32], eps: f32) -> Self {
        Norm {
            kind: NormKind::Rms,
            weight,
            bias: None,
            eps,
        }
    }

    /// LayerNorm with weight `weight` (length `dim`); add a bias with [`Norm::with_bias`].
    pub fn layer(weight: &'a [f32], eps: f32) -> Self {
        Norm {
            kind: NormKind::Layer,
            weight,
            bias: None,
            eps,
        }
    }

    /// Adds a bias (length `dim`).
    pub fn with_bias(self, bias: &'a [f32]) -> Self {
        Norm {
            bias: Some(bias),
            ..self
        }
    }

    /// The row length.
    pub fn dim(&self) -> usize {
        self.weight.len()
    }

    fn check(&self, rows: usize, x_len: usize) -> Result<()> {
        let op = self.kind.name();
        let dim = self.dim();
        if dim == 0 {
            return Err(KernelError::InvalidShape {
                op,
                reason: "the weight is empty; pass one weight per feature".into(),
            });
        }
        if let Some(b) = self.bias {
            check_len(op, "bias", b.len(), dim)?;
        }
        if !(self.eps >= 0.0 && self.eps.is_finite()) {
            return Err(KernelError::InvalidParams {
                op,
                reason: format!("eps = {} must be finite and non-negative", self.eps),
            });
        }
        let expected = rows.checked_mul(dim).ok_or(KernelError::InvalidShape {
            op,
            reason: format!("rows × dim = {rows} × {dim} overflows"),
        })?;
        check_len(op, "x", x_len, expected)
    }

    /// `out = norm(x)` for `rows` rows, best variant, default parameters.
    pub fn forward(&self, x: &[f32], out: &mut [f32], rows: usize) -> Result<()> {
        let p = NormParams::default_for(
            &NormShape {
                rows,
                dim: self.dim(),
            },
            &crate::eltwise::host_caps(),
        );
        self.forward_with(x, out, rows, best_isa(), &p)
    }

    /// `x = norm(x)` for `rows` rows, best variant, default parameters.
    pub fn forward_inplace(&self, x: &mut [f32], rows: usize) -> Result<()> {
        let p = NormParams::default_for(
            &NormShape {
                rows,
                dim: self.dim(),
            },
            &crate::eltwise::host_caps(),
        );
        self.forward_inplace_with(x, rows, best_isa(), &p)
    }

    /// Out of place with a forced variant and parameters.
    pub fn forward_with(
        &self,
        x: &[f32],
        out: &mut [f32],
        rows: usize,
        isa: Isa,
        params: &NormParams,
    ) -> Result<()> {
        self.check(rows, x.len())?;
        check_len(self.kind.name(), "out", out.len(), x.len())?;
        self.run(Some(x), out, isa, params)
    }

    /// In place with a forced variant and parameters.
    pub fn forward_inplace_with(
        &self,
        x: &mut [f32],
        rows: usize,
        isa: Isa,
        params: &NormParams,
    ) -> Result<()> {
        self.check(rows, x.len())?;
        self.run(None, x, isa, params)
    }

    fn run(
        &self,
        src: Option<&[f32]>,
        dst: &mut [f32],
        isa: Isa,
        params: &NormParams,
    ) -> Result<()> {
        let isa = resolve_isa(self.kind.name(), isa)?;
        params.validate()?;
        let (kind, w, b, eps) = (self.kind, self.weight, self.bias, self.eps);
        let d = w.len();
        for_row_blocks(dst, d, params.threads, |first, block| {
            let src = src.map(|s| &s[first * d..first * d + block.len()]);
            match isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: AVX2 + FMA checked by resolve_isa; lengths checked above.
                Isa::Avx2 => unsafe { avx2::rows(kind, src, block, w, b, eps) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: AVX-512F checked by resolve_isa; lengths checked above.
                Isa::Avx512 => unsafe { avx512::rows(kind, src, block, w, b, eps) },
                #[cfg(target_arch = "aarch64")]
                // SAFETY: NEON is always present on aarch64; lengths checked above.
                Isa::Neon => unsafe { neon::rows(kind, src, block, w, b, eps) },
                _ => scalar::rows(kind, src, block, w, b, eps),
            }
        });
        Ok(())
    }
}

/// `1 / √(var + eps)`, formed in f64 so the only rounding is the final one.
#[inline]
pub(crate) fn inv_std(var: f32, eps: f32) -> f32 {
    (1.0 / (var as f64 + eps as f64).sqrt()) as f32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eltwise::available_isas;
    use crate::testing::{Rng, assert_close};

    const DIMS: [usize; 13] = [1, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1000, 4099, 2];

    fn params() -> Vec<NormParams> {
        let cpu = CpuCaps {
            cores: 3,
            ..CpuCaps::default()
        };
        let mut v = NormParams::candidates(&NormShape { rows: 5, dim: 64 }, &cpu);
        v.push(NormParams { threads: 2 });
        v.push(NormParams { threads: 3 });
        v
    }

    #[test]
    fn every_lane_matches_scalar() {
        for isa in available_isas() {
            for (di, &dim) in DIMS.iter().enumerate() {
                for rows in [0, 1, 5] {
                    let mut rng = Rng::new(300 + di as u64);
                    let x: Vec<f32> = (0..rows * dim).map(|_| rng.uniform(-3.0, 5.0)).collect();
                    let w: Vec<f32> = (0..dim).map(|_| rng.uniform(0.5, 1.5)).collect();
                    let b: Vec<f32> = rng.vec_f32(dim);
                    let norms = [
                        Norm::rms(&w, 1e-6),
                        Norm::rms(&w, 1e-5).with_bias(&b),
                        Norm::layer(&w, 1e-5).with_bias(&b),
                        Norm::layer(&w, 0.0),
                    ];
                    for norm in norms {
                        let mut want = vec![0.0; x.len()];
                        scalar::rows(norm.kind, Some(&x), &mut want, &w, norm.bias, norm.eps);
                        for p in params() {
                            let what = format!("{:?} {isa} dim={dim} rows={rows} {p:?}", norm.kind);
                            let mut out = vec![f32::NAN; x.len()];
                            norm.forward_with(&x, &mut out, rows, isa, &p).unwrap();
                            assert_close(&out, &want, 1e-5, 1e-5, &what);
                            let mut inp = x.clone();
                            norm.forward_inplace_with(&mut inp, rows, isa, &p).unwrap();
                            assert_close(&inp, &want, 1e-5, 1e-5, &format!("{what} in place"));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn reference_is_right() {
        // Hand-computed: x = [1, 2, 3, 4]; mean 2.5, var 1.25, ms 7.5.
        let x = [1.0f32, 2.0, 3.0, 4.0];
        let w = [1.0f32, 2.0, 1.0, 1.0];
        let b = [0.0f32, 0.0, 0.0, 1.0];
        let mut y = [0.0; 4];
        scalar::row(NormKind::Rms, Some(&x), &mut y, &w, None, 0.0);
        let r = 7.5f32.sqrt();
        assert_close(&y, &[1.0 / r, 4.0 / r, 3.0 / r, 4.0 / r], 0.0, 1e-6, "rms");
        scalar::row(NormKind::Layer, Some(&x), &mut y, &w, Some(&b), 0.0);
        let s = 1.25f32.sqrt();
        assert_close(
            &y,
            &[-1.5 / s, -1.0 / s, 0.5 / s, 1.5 / s + 1.0],
            0.0,
            1e-6,
            "layer",
        );
    }

    #[test]
    fn nan_and_inf_rows_match_reference() {
        let dim = 37;
        let w = vec![1.0; dim];
        for isa in available_isas() {
            for (pos, val) in [(0, f32::NAN), (20, f32::INFINITY), (36, f32::NEG_INFINITY)] {
                let mut x: Vec<f32> = (0..dim).map(|i| i as f32 * 0.1).collect();
                x[pos] = val;
                for norm in [Norm::rms(&w, 1e-6), Norm::layer(&w, 1e-6)] {
                    let mut want = vec![0.0; dim];
                    scalar::rows(norm.kind, Some(&x), &mut want, &w, None, 1e-6);
                    let mut got = vec![0.0; dim];
                    norm.forward_with(&x, &mut got, 1, isa, &NormParams { threads: 1 })
                        .unwrap();
                    assert_close(&got, &want, 1e-6, 1e-6, &format!("{isa} {val} at {pos}"));
                }
            }
        }
    }

    #[test]
    fn bad_shapes_are_errors() {
        let w = [1.0f32; 4];
        let mut x = vec![0.0f32; 8];
        let mut out = vec![0.0f32; 8];
        assert!(Norm::rms(&w, 1e-6).forward(&x, &mut out, 3).is_err());
        assert!(Norm::rms(&w, 1e-6).forward(&x, &mut out[..7], 2).is_err());
        assert!(
            Norm::rms(&w, 1e-6)
                .with_bias(&[0.0; 3])
                .forward_inplace(&mut x, 2)
                .is_err()
        );
        assert!(Norm::rms(&[], 1e-6).forward_inplace(&mut x, 2).is_err());
        assert!(Norm::rms(&w, -1.0).forward_inplace(&mut x, 2).is_err());
        assert!(Norm::rms(&w, f32::NAN).forward_inplace(&mut x, 2).is_err());
        assert!(Norm::rms(&w, 1e-6).forward_inplace(&mut x, 2).is_ok());
        let bad = NormParams { threads: 0 };
        assert!(
            Norm::rms(&w, 1e-6)
                .forward_inplace_with(&mut x, 2, Isa::Scalar, &bad)
                .is_err()
        );
    }

    #[test]
    fn candidates_are_valid() {
        for rows in [1, 7, 4096] {
            for cores in [1, 2, 8] {
                let cpu = CpuCaps {
                    cores,
                    ..CpuCaps::default()
                };
                let shape = NormShape { rows, dim: 4096 };
                let c = NormParams::candidates(&shape, &cpu);
                assert_eq!(c[0], NormParams::default_for(&shape, &cpu));
                for p in c {
                    p.validate().unwrap();
                    assert!(p.threads <= rows.max(1));
                }
            }
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]
            #[test]
            fn shape_checks(rows in 0usize..6, dim in 0usize..40, xl in 0usize..250, bl in 0usize..40) {
                let w = vec![1.0f32; dim];
                let b = vec![0.0f32; bl];
                let x = vec![1.0f32; xl];
                let mut out = vec![0.0f32; xl];
                let r = Norm::layer(&w, 1e-5).with_bias(&b).forward(&x, &mut out, rows);
                prop_assert_eq!(r.is_ok(), dim > 0 && bl == dim && xl == rows * dim);
            }
        }
    }
}
