//! glibc's `rand()`, the generator llama-bench draws its random token ids
//! from, so that tiletune's `bench model` feeds the same tokens in the same
//! run order.

/// glibc's `rand()` (the TYPE_3 additive feedback generator behind `srand`/
/// `rand`), which llama-bench draws its token ids from, seeded with 1 as a
/// program that never calls `srand` is.
pub struct GlibcRand {
    r: [u32; 34],
    i: usize,
}

impl GlibcRand {
    pub fn new(seed: u32) -> Self {
        let mut r = [0u32; 34];
        r[0] = seed;
        for i in 1..31 {
            // 16807 · r mod (2³¹ − 1), as glibc computes it on signed ints.
            let v = (16807 * i64::from(r[i - 1] as i32)) % 2_147_483_647;
            r[i] = if v < 0 { v + 2_147_483_647 } else { v } as u32;
        }
        for i in 31..34 {
            r[i] = r[i - 31];
        }
        let mut g = GlibcRand { r, i: 0 };
        // glibc discards the first 310 outputs of the recurrence.
        for _ in 34..344 {
            g.step();
        }
        g
    }

    /// r[i] = r[i−31] + r[i−3] over a 34-entry ring.
    fn step(&mut self) -> u32 {
        let i = self.i;
        let v = self.r[(i + 3) % 34].wrapping_add(self.r[(i + 31) % 34]);
        self.r[i] = v;
        self.i = (i + 1) % 34;
        v
    }

    /// One `rand()` value in `0..=i32::MAX`.
    #[allow(clippy::should_implement_trait)] // glibc's name; not an iterator
    pub fn next(&mut self) -> u32 {
        self.step() >> 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_rand_matches_glibc_with_seed_1() {
        let mut r = GlibcRand::new(1);
        let got: Vec<u32> = (0..5).map(|_| r.next()).collect();
        assert_eq!(
            got,
            [1804289383, 846930886, 1681692777, 1714636915, 1957747793]
        );
    }
}
