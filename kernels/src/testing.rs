//! Helpers shared by the kernel tests, the tuner's validation step and the
//! benches: seeded random inputs, the edge-size sweep, and tolerant comparison.
//! Not part of the stable API.

/// A small, fast, seedable generator (SplitMix64) so that test inputs are the
/// same on every platform and every run without pulling `rand` into the
/// library itself.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.unit_f32()
    }

    /// A vector of `n` values uniform in `[-1, 1)`.
    pub fn vec_f32(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.uniform(-1.0, 1.0)).collect()
    }

    /// Uniform integer in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// Sizes that exercise tile edges for a tile of width `tile`: 0, 1, tile−1,
/// tile, tile+1, a couple of non-multiples and one larger case.
pub fn edge_sizes(tile: usize) -> Vec<usize> {
    let mut v = vec![
        0,
        1,
        2,
        3,
        tile.saturating_sub(1),
        tile,
        tile + 1,
        2 * tile + 3,
        5 * tile - 1,
        97,
    ];
    v.sort_unstable();
    v.dedup();
    v
}

/// Asserts `got ≈ want` elementwise: `|g - w| <= atol + rtol * |w|`, with NaN
/// matching NaN and infinities matching exactly. Panics with the first
/// mismatching index and both values.
pub fn assert_close(got: &[f32], want: &[f32], atol: f32, rtol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= atol + rtol * w.abs()
        };
        assert!(
            ok,
            "{what}: index {i}: got {g}, want {w} (atol {atol}, rtol {rtol})"
        );
    }
}

/// Largest `|g - w| / (1 + |w|)` over two slices: a scale-aware error used by
/// the tuner's validate-before-timing step.
pub fn max_rel_err(got: &[f32], want: &[f32]) -> f32 {
    got.iter()
        .zip(want)
        .map(|(&g, &w)| {
            if g.is_nan() && w.is_nan() || g == w {
                0.0
            } else {
                (g - w).abs() / (1.0 + w.abs())
            }
        })
        .fold(
            0.0,
            |a: f32, b| if b.is_nan() { f32::INFINITY } else { a.max(b) },
        )
}

/// The prefetch contract of a byte-distance family (I8 GEMV, per-row
/// quantized GEMV, LM head) whose best variant is `best`, given its
/// untuned default distance and the distances of its candidates: every
/// SIMD variant prefetches, so all of `distances` are timed (scalar: only
/// 0), and the default is 8 KiB on x86, where it was measured, and 0
/// elsewhere (ARM: no distance was measured, the tuner picks one).
pub fn assert_prefetch_contract(
    best: crate::Isa,
    default_pf: usize,
    timed: &[usize],
    distances: &[usize],
) {
    use crate::Isa;
    for &pf in distances {
        let want = pf == 0 || best != Isa::Scalar;
        assert_eq!(timed.contains(&pf), want, "{best}: pf {pf} timed?");
    }
    let x86 = matches!(
        best,
        Isa::Avx2 | Isa::AvxVnni | Isa::Avx512 | Isa::Avx512Vnni | Isa::Amx
    );
    assert_eq!(default_pf, if x86 { 8192 } else { 0 }, "{best}: default pf");
}

/// `err` is the refusal of a variant forced on a CPU without it (`op`,
/// `isa`), and its text says so.
pub fn assert_isa_unavailable(err: &crate::KernelError, op: &'static str, isa: crate::Isa) {
    assert_eq!(*err, crate::KernelError::IsaUnavailable { op, isa });
    let want = format!("`{isa}` is not available on this CPU");
    assert!(err.to_string().contains(&want), "{err}");
}
