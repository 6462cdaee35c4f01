//! Reference I8 micro-tile: exact i32 accumulation in plain Rust. Every ISA
//! tile must reproduce these accumulators bit for bit.

/// `acc[r·nr + c] = Σ_t a[r·k + t] · w[c·k + t]` for `r < mr`, `c < nr`.
/// `a` holds `mr` rows of `k`, `w` holds `nr` rows of `k`; `wsum` is unused
/// (the signature is shared with the VNNI tiles, which need it).
pub fn tile(a: &[i8], w: &[i8], _wsum: &[i32], k: usize, mr: usize, nr: usize, acc: &mut [i32; 8]) {
    for r in 0..mr {
        let ar = &a[r * k..(r + 1) * k];
        for c in 0..nr {
            let wr = &w[c * k..(c + 1) * k];
            acc[r * nr + c] = ar.iter().zip(wr).map(|(&x, &y)| x as i32 * y as i32).sum();
        }
    }
}
