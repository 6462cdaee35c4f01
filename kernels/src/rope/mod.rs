//! Rotary position embedding (RoPE), in place on `[rows, n_heads, head_dim]`.
//!
//! Two layouts pair the features differently:
//! - [`RopeLayout::RotateHalf`] (Hugging Face Llama / Qwen / Mistral,
//!   GPT-NeoX): feature `i` with `i + r/2`;
//! - [`RopeLayout::Interleaved`] (GPT-J, Meta's original Llama): `2i` with `2i + 1`;
//!
//! where `r = rotary_dim ≤ head_dim` is the number of rotated features (partial
//! rotary, e.g. Phi / GPT-NeoX `rotary_pct`); features `r..head_dim` are left
//! untouched. Pair `i` at position `p` is rotated by `p · θ^(-2i/r)`, or by
//! `p · θ^(-2i/r) / factor[i]` with per-pair frequency factors (llama.cpp's
//! `rope_freqs`: Llama 3 and linear scaling, [`RopeCache::with_freq_factors`]).
//!
//! The angles live in a [`RopeCache`] built once per `(θ, r, max_pos)`.
//! They are computed in f64 (`inv_freq`, `p · inv_freq`, `cos`, `sin`) and
//! rounded to f32 once. Hugging Face computes `inv_freq` and the product in
//! f32, so for large positions its tables differ from ours by the f32
//! rounding of the angle (about `p · 2^-24` radians); ours are the exact ones.
//!
//! SIMD variants use FMA; against the f64-formed reference they agree within
//! `1e-6 + 1e-6·|y|` (tested).

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
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// How the rotated features are paired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RopeLayout {
    /// Pairs `(i, i + r/2)`: Hugging Face `rotate_half`.
    RotateHalf,
    /// Pairs `(2i, 2i + 1)`: GPT-J.
    Interleaved,
}

impl RopeLayout {
    /// Stable name for selector tables.
    pub fn name(self) -> &'static str {
        match self {
            RopeLayout::RotateHalf => "rotate_half",
            RopeLayout::Interleaved => "interleaved",
        }
    }
}

/// Largest table a cache may hold (`max_pos · rotary_dim / 2` entries):
/// 2^28 entries is 2 GiB of cos + sin, far beyond any real context.
const MAX_TABLE: usize = 1 << 28;

/// The cos/sin tables of one `(θ, rotary_dim, max_pos)`: `[max_pos, rotary_dim/2]`.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeCache {
    theta: f64,
    rotary_dim: usize,
    max_pos: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl RopeCache {
    /// Builds the tables for positions `0..max_pos`. `theta` must be finite
    /// and > 1 (10 000 for Llama 2, 1 000 000 for Qwen2); `rotary_dim` even
    /// and ≥ 2; `max_pos` ≥ 1.
    pub fn new(theta: f64, rotary_dim: usize, max_pos: usize) -> Result<Self> {
        Self::build(theta, rotary_dim, max_pos, None)
    }

    /// As [`Self::new`], with pair `i`'s frequency divided by `factors[i]`
    /// (`rotary_dim / 2` finite values > 0): the angle is `p · θ^(-2i/r) /
    /// factors[i]`. This is llama.cpp's `rope_freqs` tensor (ggml's
    /// `freq_factors`), which carries Llama 3 frequency scaling; linear
    /// scaling is every factor equal to the scale.
    pub fn with_freq_factors(
        theta: f64,
        rotary_dim: usize,
        max_pos: usize,
        factors: &[f32],
    ) -> Result<Self> {
        Self::build(theta, rotary_dim, max_pos, Some(factors))
    }

    fn build(
        theta: f64,
        rotary_dim: usize,
        max_pos: usize,
        factors: Option<&[f32]>,
    ) -> Result<Self> {
        const OP: &str = "rope_cache";
        if !(theta.is_finite() && theta > 1.0) {
            return Err(KernelError::InvalidParams {
                op: OP,
                reason: format!("theta = {theta} must be finite and greater than 1"),
            });
        }
        if rotary_dim < 2 || !rotary_dim.is_multiple_of(2) {
            return Err(KernelError::InvalidShape {
                op: OP,
                reason: format!("rotary_dim = {rotary_dim} must be even and at least 2"),
            });
        }
        let half = rotary_dim / 2;
        if max_pos == 0 || max_pos.checked_mul(half).is_none_or(|n| n > MAX_TABLE) {
            return Err(KernelError::InvalidShape {
                op: OP,
                reason: format!(
                    "max_pos = {max_pos} must be at least 1 and max_pos × rotary_dim / 2 at most 2^28"
                ),
            });
        }
        if let Some(f) = factors {
            if f.len() != half {
                return Err(KernelError::InvalidShape {
                    op: OP,
                    reason: format!(
                        "{} frequency factors for rotary_dim = {rotary_dim}; pass rotary_dim / 2 = {half}",
                        f.len()
                    ),
                });
            }
            if let Some(bad) = f.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
                return Err(KernelError::InvalidParams {
                    op: OP,
                    reason: format!("frequency factor {bad} must be finite and greater than 0"),
                });
            }
        }
        let inv_freq: Vec<f64> = (0..half)
            .map(|i| {
                let f = theta.powf(-((2 * i) as f64) / rotary_dim as f64);
                factors.map_or(f, |d| f / d[i] as f64)
            })
            .collect();
        let mut cos = Vec::with_capacity(max_pos * half);
        let mut sin = Vec::with_capacity(max_pos * half);
        for p in 0..max_pos {
            for &f in &inv_freq {
                let (s, c) = (p as f64 * f).sin_cos();
                cos.push(c as f32);
                sin.push(s as f32);
            }
        }
        Ok(RopeCache {
            theta,
            rotary_dim,
            max_pos,
            cos,
            sin,
        })
    }

    /// A process-wide shared cache for these parameters, built on first use
    /// (keyed by the bits of `theta`, `rotary_dim` and `max_pos`).
    pub fn shared(theta: f64, rotary_dim: usize, max_pos: usize) -> Result<Arc<RopeCache>> {
        type Key = (u64, usize, usize);
        static CACHES: OnceLock<Mutex<HashMap<Key, Arc<RopeCache>>>> = OnceLock::new();
        let key = (theta.to_bits(), rotary_dim, max_pos);
        let caches = CACHES.get_or_init(Default::default);
        if let Some(c) = caches.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(c.clone());
        }
        // Built outside the lock: a large table takes a while, and a racing
        // builder only wastes work (the first insert wins).
        let built = Arc::new(RopeCache::new(theta, rotary_dim, max_pos)?);
        let mut guard = caches.lock().unwrap_or_else(|e| e.into_inner());
        Ok(guard.entry(key).or_insert(built).clone())
    }

    pub fn theta(&self) -> f64 {
        self.theta
    }

    pub fn rotary_dim(&self) -> usize {
        self.rotary_dim
    }

    pub fn max_pos(&self) -> usize {
        self.max_pos
    }

    /// `(cos, sin)` of position `pos` (each `rotary_dim / 2` long); `pos < max_pos`.
    pub fn at(&self, pos: usize) -> (&[f32], &[f32]) {
        let h = self.rotary_dim / 2;
        (
            &self.cos[pos * h..(pos + 1) * h],
            &self.sin[pos * h..(pos + 1) * h],
        )
    }
}

/// The position of each row: consecutive from an offset (a prefill chunk or
/// one decode step), or given per row (batched decode of several sequences).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Positions<'a> {
    /// Row `r` is at position `offset + r`.
    Offset(usize),
    /// Row `r` is at position `p[r]`; one entry per row.
    Explicit(&'a [u32]),
}

impl Positions<'_> {
    #[inline]
    fn of(&self, row: usize) -> usize {
        match self {
            Positions::Offset(o) => o + row,
            Positions::Explicit(p) => p[row] as usize,
        }
    }
}

/// Problem shape: `rows` tokens of `n_heads` heads of `head_dim` features.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RopeShape {
    pub rows: usize,
    pub n_heads: usize,
    pub head_dim: usize,
}

/// Tunable parameters: threads over the `rows × n_heads` heads (`1..=256`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RopeParams {
    pub threads: usize,
}

impl Tunable for RopeParams {
    type Shape = RopeShape;

    /// One thread below 256 KiB of activations, else one per 128 KiB, at
    /// most one per head and per core.
    fn default_for(shape: &RopeShape, cpu: &CpuCaps) -> Self {
        let units = shape.rows * shape.n_heads;
        RopeParams {
            threads: default_row_threads(units * shape.head_dim * 4, units, cpu),
        }
    }

    fn candidates(shape: &RopeShape, cpu: &CpuCaps) -> Vec<Self> {
        let mut v = vec![Self::default_for(shape, cpu)];
        for threads in thread_candidates(shape.rows * shape.n_heads, cpu) {
            if !v.contains(&RopeParams { threads }) {
                v.push(RopeParams { threads });
            }
        }
        v
    }

    fn validate(&self) -> Result<()> {
        check_row_threads("rope", self.threads)
    }
}

/// Applies RoPE in place to `x` (`[rows, n_heads, head_dim]`), best variant
/// and default parameters.
pub fn rope(
    x: &mut [f32],
    shape: RopeShape,
    positions: Positions<'_>,
    cache: &RopeCache,
    layout: RopeLayout,
) -> Result<()> {
    let p = RopeParams::default_for(&shape, &crate::eltwise::host_caps());
    rope_with(x, shape, positions, cache, layout, best_isa(), &p)
}

/// [`rope`] with a forced variant and parameters.
pub fn rope_with(
    x: &mut [f32],
    shape: RopeShape,
    positions: Positions<'_>,
    cache: &RopeCache,
    layout: RopeLayout,
    isa: Isa,
    params: &RopeParams,
) -> Result<()> {
    const OP: &str = "rope";
    let RopeShape {
        rows,
        n_heads,
        head_dim,
    } = shape;
    if cache.rotary_dim > head_dim {
        return Err(KernelError::InvalidShape {
            op: OP,
            reason: format!(
                "rotary_dim = {} exceeds head_dim = {head_dim}; build the cache with rotary_dim ≤ head_dim",
                cache.rotary_dim
            ),
        });
    }
    check_x(OP, x.len(), shape)?;
    let out_of_range = match positions {
        Positions::Offset(o) => (rows > 0 && o.checked_add(rows).is_none_or(|e| e > cache.max_pos))
            .then(|| o.saturating_add(rows - 1)),
        Positions::Explicit(p) => {
            check_len(OP, "positions", p.len(), rows)?;
            p.iter().map(|&q| q as usize).find(|&q| q >= cache.max_pos)
        }
    };
    if let Some(pos) = out_of_range {
        return Err(KernelError::InvalidShape {
            op: OP,
            reason: format!(
                "position {pos} is beyond the cache's max_pos = {}; build a larger RopeCache",
                cache.max_pos
            ),
        });
    }
    let isa = resolve_isa(OP, isa)?;
    params.validate()?;
    let r = cache.rotary_dim;
    for_row_blocks(x, head_dim, params.threads, |first, block| {
        for (u, h) in block.chunks_exact_mut(head_dim).enumerate() {
            let (cos, sin) = cache.at(positions.of((first + u) / n_heads));
            rotate(isa, &mut h[..r], cos, sin, layout);
        }
    });
    Ok(())
}

/// Per-row rotation tables, for RoPE variants whose angle depends on more
/// than one position per row: multimodal RoPE (M-RoPE, Qwen2-VL's language
/// model: pair `i` follows the temporal, height or width position by its
/// section) and a vision transformer's 2-D RoPE (the first pairs follow the
/// patch's row, the others its column). Row `r`'s pair `i` turns by
/// `pos(r, section[i]) · freqs[i]`, formed in f64 and rounded to f32 once,
/// as [`RopeCache`]'s tables are.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RowAngles {
    half: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl RowAngles {
    /// An empty table; [`Self::fill`] sizes it.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fills the tables of `rows` rows: `freqs` is each pair's angular
    /// frequency (`rotary_dim / 2` finite values), `section[i]` the
    /// position component pair `i` follows, `pos(row, component)` that
    /// component's position. Reuses the buffers.
    pub fn fill(
        &mut self,
        rows: usize,
        freqs: &[f64],
        section: &[u8],
        pos: impl Fn(usize, u8) -> f64,
    ) -> Result<()> {
        const OP: &str = "rope_row_angles";
        if freqs.is_empty() || section.len() != freqs.len() {
            return Err(KernelError::InvalidShape {
                op: OP,
                reason: format!(
                    "{} frequencies and {} section indexes: give one of each per rotated pair (at least one)",
                    freqs.len(),
                    section.len()
                ),
            });
        }
        if let Some(f) = freqs.iter().find(|f| !f.is_finite()) {
            return Err(KernelError::InvalidParams {
                op: OP,
                reason: format!("frequency {f} is not finite"),
            });
        }
        let half = freqs.len();
        self.half = half;
        self.cos.clear();
        self.sin.clear();
        for r in 0..rows {
            for (&f, &s) in freqs.iter().zip(section) {
                let (si, co) = (pos(r, s) * f).sin_cos();
                self.cos.push(co as f32);
                self.sin.push(si as f32);
            }
        }
        Ok(())
    }

    /// Rows the tables hold.
    pub fn rows(&self) -> usize {
        self.cos.len().checked_div(self.half).unwrap_or(0)
    }

    /// `2 ·` pairs per row.
    pub fn rotary_dim(&self) -> usize {
        2 * self.half
    }

    /// `(cos, sin)` of row `r`.
    pub fn at(&self, r: usize) -> (&[f32], &[f32]) {
        let h = self.half;
        (&self.cos[r * h..(r + 1) * h], &self.sin[r * h..(r + 1) * h])
    }
}

/// RoPE in place on `x` (`[rows, n_heads, head_dim]`) with per-row tables
/// (every head of row `r` turns by `angles.at(r)`), best variant and default
/// parameters.
pub fn rope_rows(
    x: &mut [f32],
    shape: RopeShape,
    angles: &RowAngles,
    layout: RopeLayout,
) -> Result<()> {
    let p = RopeParams::default_for(&shape, &crate::eltwise::host_caps());
    rope_rows_with(x, shape, angles, layout, best_isa(), &p)
}

/// [`rope_rows`] with a forced variant and parameters.
pub fn rope_rows_with(
    x: &mut [f32],
    shape: RopeShape,
    angles: &RowAngles,
    layout: RopeLayout,
    isa: Isa,
    params: &RopeParams,
) -> Result<()> {
    const OP: &str = "rope_rows";
    let RopeShape {
        rows,
        n_heads,
        head_dim,
    } = shape;
    let r = angles.rotary_dim();
    if r > head_dim || (rows > 0 && r == 0) {
        return Err(KernelError::InvalidShape {
            op: OP,
            reason: format!(
                "the tables rotate {r} features of a {head_dim}-wide head; build them with 1..=head_dim/2 pairs"
            ),
        });
    }
    if angles.rows() != rows {
        return Err(KernelError::InvalidShape {
            op: OP,
            reason: format!(
                "the tables hold {} rows, x has {rows}; fill them for every row",
                angles.rows()
            ),
        });
    }
    check_x(OP, x.len(), shape)?;
    let isa = resolve_isa(OP, isa)?;
    params.validate()?;
    for_row_blocks(x, head_dim, params.threads, |first, block| {
        for (u, h) in block.chunks_exact_mut(head_dim).enumerate() {
            let (cos, sin) = angles.at((first + u) / n_heads);
            rotate(isa, &mut h[..r], cos, sin, layout);
        }
    });
    Ok(())
}

/// Checks that `x` holds `rows × n_heads × head_dim` values.
fn check_x(op: &'static str, len: usize, shape: RopeShape) -> Result<()> {
    let RopeShape {
        rows,
        n_heads,
        head_dim,
    } = shape;
    let expected = rows
        .checked_mul(n_heads)
        .and_then(|u| u.checked_mul(head_dim))
        .ok_or(KernelError::InvalidShape {
            op,
            reason: format!(
                "rows × n_heads × head_dim = {rows} × {n_heads} × {head_dim} overflows"
            ),
        })?;
    check_len(op, "x", len, expected)
}

/// Rotates one head's first `2·cos.len()` features with variant `isa`, for
/// fused kernels (matmul + RoPE epilogue) in this crate. `isa` must come
/// from `crate::eltwise::resolve_isa`; `h.len() == 2·cos.len() == 2·sin.len()`.
pub(crate) fn rotate(isa: Isa, h: &mut [f32], cos: &[f32], sin: &[f32], layout: RopeLayout) {
    assert!(
        h.len() == 2 * cos.len() && sin.len() == cos.len(),
        "rope::rotate: head and table lengths disagree"
    );
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2 + FMA checked by resolve_isa; lengths asserted above.
        Isa::Avx2 => unsafe { avx2::head(h, cos, sin, layout) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512F checked by resolve_isa; as above.
        Isa::Avx512 => unsafe { avx512::head(h, cos, sin, layout) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is always present on aarch64; as above.
        Isa::Neon => unsafe { neon::head(h, cos, sin, layout) },
        _ => scalar::head(h, cos, sin, layout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eltwise::available_isas;
    use crate::testing::{Rng, assert_close};

    fn params() -> Vec<RopeParams> {
        let cpu = CpuCaps {
            cores: 3,
            ..CpuCaps::default()
        };
        let shape = RopeShape {
            rows: 4,
            n_heads: 3,
            head_dim: 64,
        };
        let mut v = RopeParams::candidates(&shape, &cpu);
        v.push(RopeParams { threads: 2 });
        v.push(RopeParams { threads: 3 });
        v
    }

    /// (head_dim, rotary_dim): full and partial rotary around every tile edge.
    const DIMS: [(usize, usize); 12] = [
        (2, 2),
        (8, 8),
        (14, 14),
        (16, 16),
        (18, 18),
        (34, 34),
        (64, 64),
        (64, 32),
        (80, 20),
        (128, 128),
        (128, 64),
        (66, 62),
    ];

    #[test]
    fn every_lane_matches_scalar() {
        for isa in available_isas() {
            for (di, &(head_dim, rot)) in DIMS.iter().enumerate() {
                let cache = RopeCache::new(10_000.0, rot, 64).unwrap();
                for layout in [RopeLayout::RotateHalf, RopeLayout::Interleaved] {
                    for (rows, n_heads) in [(0, 2), (1, 1), (3, 2), (5, 3)] {
                        let shape = RopeShape {
                            rows,
                            n_heads,
                            head_dim,
                        };
                        let mut rng = Rng::new(40 + di as u64);
                        let x: Vec<f32> = rng.vec_f32(rows * n_heads * head_dim);
                        let pos: Vec<u32> = (0..rows).map(|_| rng.below(64) as u32).collect();
                        for positions in [Positions::Offset(7), Positions::Explicit(&pos)] {
                            let mut want = x.clone();
                            for (u, h) in want.chunks_exact_mut(head_dim).enumerate() {
                                let (c, s) = cache.at(positions.of(u / n_heads));
                                scalar::head(&mut h[..rot], c, s, layout);
                            }
                            for p in params() {
                                let mut got = x.clone();
                                rope_with(&mut got, shape, positions, &cache, layout, isa, &p)
                                    .unwrap();
                                let what =
                                    format!("{isa} {layout:?} {shape:?} {positions:?} {p:?}");
                                assert_close(&got, &want, 1e-6, 1e-6, &what);
                                // Features past rotary_dim are untouched, bit for bit.
                                for (g, x) in
                                    got.chunks_exact(head_dim).zip(x.chunks_exact(head_dim))
                                {
                                    assert_eq!(&g[rot..], &x[rot..], "{what}: pass-through");
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Per-row tables: with one section and `pos = offset + row` they are
    /// a [`RopeCache`]'s rows, so every variant gives `rope_with`'s result;
    /// with two sections each pair follows its own component.
    #[test]
    fn row_tables_match_the_cache_and_follow_sections() {
        let (hd, theta) = (16usize, 10_000.0f64);
        let cache = RopeCache::new(theta, hd, 64).unwrap();
        let freqs: Vec<f64> = (0..hd / 2)
            .map(|i| theta.powf(-((2 * i) as f64) / hd as f64))
            .collect();
        let shape = RopeShape {
            rows: 5,
            n_heads: 3,
            head_dim: hd,
        };
        let x = Rng::new(77).vec_f32(5 * 3 * hd);
        let mut angles = RowAngles::new();
        angles
            .fill(5, &freqs, &[0; 8], |r, _| (r + 9) as f64)
            .unwrap();
        for isa in available_isas() {
            for p in params() {
                for layout in [RopeLayout::RotateHalf, RopeLayout::Interleaved] {
                    let mut want = x.clone();
                    rope_with(
                        &mut want,
                        shape,
                        Positions::Offset(9),
                        &cache,
                        layout,
                        isa,
                        &p,
                    )
                    .unwrap();
                    let mut got = x.clone();
                    rope_rows_with(&mut got, shape, &angles, layout, isa, &p).unwrap();
                    assert_close(&got, &want, 1e-6, 1e-6, &format!("{isa} {p:?}"));
                }
            }
        }
        let section = [0, 0, 0, 1, 1, 1, 1, 1];
        angles
            .fill(5, &freqs, &section, |r, s| {
                if s == 0 {
                    r as f64
                } else {
                    2.0 * r as f64 + 1.0
                }
            })
            .unwrap();
        for r in 0..5 {
            let (c, s) = angles.at(r);
            for i in 0..8 {
                let p = if i < 3 {
                    r as f64
                } else {
                    2.0 * r as f64 + 1.0
                };
                let a = p * freqs[i];
                assert_eq!((c[i], s[i]), (a.cos() as f32, a.sin() as f32));
            }
        }
        let mut y = x.clone();
        let bad = RopeShape { rows: 4, ..shape };
        assert!(rope_rows(&mut y[..4 * 3 * hd], bad, &angles, RopeLayout::RotateHalf).is_err());
        assert!(angles.fill(2, &freqs, &[0; 3], |_, _| 0.0).is_err());
    }

    /// The reference against a hand-written HF-style formula: for
    /// rotate_half, `x·cos(emb) + rotate_half(x)·sin(emb)` with `emb =
    /// cat(freqs, freqs)`; for interleaved, the complex product
    /// `(a + ib)·e^(iθ)` on each pair.
    #[test]
    fn reference_matches_the_textbook_rotation() {
        let (d, theta, pos) = (8usize, 10_000.0f64, 5usize);
        let cache = RopeCache::new(theta, d, 16).unwrap();
        let x: Vec<f32> = (0..d).map(|i| 0.1 * (i as f32 + 1.0)).collect();
        let ang = |i: usize| pos as f64 * theta.powf(-(2.0 * i as f64) / d as f64);
        let mut got = x.clone();
        let (c, s) = cache.at(pos);
        scalar::head(&mut got, c, s, RopeLayout::RotateHalf);
        let want: Vec<f32> = (0..d)
            .map(|j| {
                let i = j % (d / 2);
                let rot = if j < d / 2 {
                    -(x[j + d / 2] as f64)
                } else {
                    x[j - d / 2] as f64
                };
                (x[j] as f64 * ang(i).cos() + rot * ang(i).sin()) as f32
            })
            .collect();
        assert_close(&got, &want, 1e-7, 1e-6, "rotate_half");
        let mut got = x.clone();
        scalar::head(&mut got, c, s, RopeLayout::Interleaved);
        for i in 0..d / 2 {
            let (a, b) = (x[2 * i] as f64, x[2 * i + 1] as f64);
            let (co, si) = (ang(i).cos(), ang(i).sin());
            assert!((got[2 * i] as f64 - (a * co - b * si)).abs() < 1e-7);
            assert!((got[2 * i + 1] as f64 - (a * si + b * co)).abs() < 1e-7);
        }
        // Position 0 is the identity.
        let mut got = x.clone();
        let (c, s) = cache.at(0);
        scalar::head(&mut got, c, s, RopeLayout::RotateHalf);
        assert_eq!(got, x);
    }

    /// Frequency factors divide each pair's frequency: the tables equal a
    /// direct evaluation of `p · θ^(-2i/r) / factor[i]`, all-ones factors
    /// give [`RopeCache::new`]'s tables, and the kernels read them like any
    /// other cache.
    #[test]
    fn freq_factors_divide_the_frequencies() {
        let (r, theta, max_pos) = (8usize, 500_000.0f64, 40usize);
        let factors = [1.7359413f32, 6.234267, 8.0, 8.0];
        let cache = RopeCache::with_freq_factors(theta, r, max_pos, &factors).unwrap();
        for p in [0usize, 1, 17, 39] {
            let (c, s) = cache.at(p);
            for i in 0..r / 2 {
                let a = p as f64 * theta.powf(-(2.0 * i as f64) / r as f64) / factors[i] as f64;
                assert_eq!(
                    (c[i], s[i]),
                    (a.cos() as f32, a.sin() as f32),
                    "p {p} i {i}"
                );
            }
        }
        let ones = RopeCache::with_freq_factors(theta, r, max_pos, &[1.0; 4]).unwrap();
        assert_eq!(ones, RopeCache::new(theta, r, max_pos).unwrap());
        let shape = RopeShape {
            rows: 3,
            n_heads: 2,
            head_dim: r,
        };
        let x: Vec<f32> = Rng::new(9).vec_f32(3 * 2 * r);
        for isa in available_isas() {
            let mut got = x.clone();
            let p = RopeParams { threads: 1 };
            let pos = Positions::Offset(30);
            rope_with(
                &mut got,
                shape,
                pos,
                &cache,
                RopeLayout::Interleaved,
                isa,
                &p,
            )
            .unwrap();
            let mut want = x.clone();
            for (u, h) in want.chunks_exact_mut(r).enumerate() {
                let (c, s) = cache.at(30 + u / 2);
                scalar::head(h, c, s, RopeLayout::Interleaved);
            }
            assert_close(&got, &want, 1e-6, 1e-6, &format!("{isa} freq factors"));
        }
        assert!(RopeCache::with_freq_factors(theta, r, max_pos, &factors[..3]).is_err());
        for bad in [0.0, -1.0, f32::NAN, f32::INFINITY] {
            let f = [1.0, bad, 1.0, 1.0];
            assert!(RopeCache::with_freq_factors(theta, r, max_pos, &f).is_err());
        }
    }

    #[test]
    fn shared_cache_is_shared() {
        let a = RopeCache::shared(500_000.0, 64, 32).unwrap();
        let b = RopeCache::shared(500_000.0, 64, 32).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let c = RopeCache::shared(500_000.0, 32, 32).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(*a, RopeCache::new(500_000.0, 64, 32).unwrap());
    }

    #[test]
    fn bad_inputs_are_errors() {
        assert!(RopeCache::new(10_000.0, 7, 16).is_err());
        assert!(RopeCache::new(10_000.0, 0, 16).is_err());
        assert!(RopeCache::new(10_000.0, 8, 0).is_err());
        assert!(RopeCache::new(f64::NAN, 8, 16).is_err());
        assert!(RopeCache::new(10_000.0, 1 << 20, 1 << 20).is_err());
        let cache = RopeCache::new(10_000.0, 8, 16).unwrap();
        let shape = RopeShape {
            rows: 2,
            n_heads: 2,
            head_dim: 8,
        };
        let mut x = vec![0.0f32; 32];
        let l = RopeLayout::RotateHalf;
        assert!(rope(&mut x, shape, Positions::Offset(14), &cache, l).is_ok());
        assert!(rope(&mut x, shape, Positions::Offset(15), &cache, l).is_err());
        assert!(rope(&mut x, shape, Positions::Offset(usize::MAX), &cache, l).is_err());
        assert!(rope(&mut x, shape, Positions::Explicit(&[1, 16]), &cache, l).is_err());
        assert!(rope(&mut x, shape, Positions::Explicit(&[1]), &cache, l).is_err());
        assert!(rope(&mut x[..31], shape, Positions::Offset(0), &cache, l).is_err());
        let narrow = RopeShape {
            head_dim: 6,
            ..shape
        };
        assert!(rope(&mut x[..24], narrow, Positions::Offset(0), &cache, l).is_err());
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]
            #[test]
            fn shape_checks(rows in 0usize..4, heads in 0usize..4, hd in 0usize..12, len in 0usize..150, off in 0usize..20) {
                let cache = RopeCache::new(10_000.0, 4, 16).unwrap();
                let mut x = vec![0.25f32; len];
                let shape = RopeShape { rows, n_heads: heads, head_dim: hd };
                let r = rope(&mut x, shape, Positions::Offset(off), &cache, RopeLayout::Interleaved);
                let ok = hd >= 4 && len == rows * heads * hd && (rows == 0 || off + rows <= 16);
                prop_assert_eq!(r.is_ok(), ok);
            }
        }
    }
}
