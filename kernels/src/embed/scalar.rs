//! Reference unpacking and LM-head GEMV for the bit-packed embedding table.

/// Value `i` of a packed row at `bits` per value (little-endian bit stream:
/// bit `i·bits + j` is bit `(i·bits + j) % 8` of byte `(i·bits + j) / 8`).
#[inline]
pub fn get(row: &[u8], bits: usize, i: usize) -> u32 {
    let bit = i * bits;
    let (byte, shift) = (bit / 8, bit % 8);
    // A value spans at most two bytes (bits ≤ 7).
    let lo = row[byte] as u32;
    let hi = row.get(byte + 1).copied().unwrap_or(0) as u32;
    ((lo | hi << 8) >> shift) & ((1 << bits) - 1)
}

/// Dequantizes one packed row: `out[i] = scale[g] · (q[i] − zero[g])`.
pub fn dequantize_row(
    row: &[u8],
    bits: usize,
    group: usize,
    scales: &[f32],
    zeros: &[f32],
    out: &mut [f32],
) {
    for (i, o) in out.iter_mut().enumerate() {
        let g = i / group;
        *o = scales[g] * (get(row, bits, i) as f32 - zeros[g]);
    }
}

/// `y[r] = Σ_g scale[r, g] · (Σ_{i ∈ g} q[r, i] · x[i] − zero[r, g] · xs[g])`
/// over the rows of `data` (`row_bytes` each); `xs[g]` is `Σ_{i ∈ g} x[i]`.
#[allow(clippy::too_many_arguments)]
pub fn lm_head(
    data: &[u8],
    row_bytes: usize,
    bits: usize,
    group: usize,
    scales: &[f32],
    zeros: &[f32],
    x: &[f32],
    xs: &[f32],
    y: &mut [f32],
) {
    let gpr = xs.len();
    for (r, out) in y.iter_mut().enumerate() {
        let row = &data[r * row_bytes..(r + 1) * row_bytes];
        let mut acc = 0.0f32;
        for g in 0..gpr {
            let mut s = 0.0f32;
            for (i, &xi) in x.iter().enumerate().skip(g * group).take(group) {
                s += get(row, bits, i) as f32 * xi;
            }
            acc += scales[r * gpr + g] * (s - zeros[r * gpr + g] * xs[g]);
        }
        *out = acc;
    }
}
