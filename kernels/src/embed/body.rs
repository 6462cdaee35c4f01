//! The row driver of the LM-head GEMV, the same for every ISA: it walks the
//! rows `rpb` (4, 2 or 1) at a time and picks the width-`B` kernel. Each ISA
//! file keeps its own `rows::<B, R>` (the unpacking of the bit-packed table
//! is ISA-specific) and stamps the driver around it with [`lm_head_driver`].

/// Stamps out `drive::<B>` and `lm_head` around the invoking module's
/// `rows::<B, R>`: `feature` is its `target_feature` list, `needs` the same
/// in words for the safety docs.
macro_rules! lm_head_driver {
    (feature: $feature:literal, needs: $needs:literal $(,)?) => {
        /// Runs the width-`B` kernel over all rows, `rpb` rows at a time.
        ///
        /// # Safety
        /// As for [`rows`], with `y.len()` rows.
        #[target_feature(enable = $feature)]
        unsafe fn drive<const B: usize>(p: &super::Rows<'_>, y: &mut [f32], rpb: usize) {
            let gpr = p.xs.len();
            let rb = p.x.len() * B / 8;
            let mut r = 0;
            while r < y.len() {
                let n = if rpb >= 4 && r + 4 <= y.len() {
                    4
                } else if rpb >= 2 && r + 2 <= y.len() {
                    2
                } else {
                    1
                };
                let (d, s, z) = (&p.data[r * rb..], &p.scales[r * gpr..], &p.zeros[r * gpr..]);
                p.prefetch(r, n, rb);
                let yr = &mut y[r..r + n];
                // SAFETY: forwarded; the slices start at row r and hold n rows.
                unsafe {
                    match n {
                        4 => rows::<B, 4>(d, p.group, s, z, p.x, p.xs, yr),
                        2 => rows::<B, 2>(d, p.group, s, z, p.x, p.xs, yr),
                        _ => rows::<B, 1>(d, p.group, s, z, p.x, p.xs, yr),
                    }
                }
                r += n;
            }
        }

        /// LM-head GEMV for any width 1..=7.
        ///
        /// # Safety
        #[doc = concat!("Needs ", $needs, "; `p` consistent with `y.len()` rows (checked by the entry point).")]
        pub unsafe fn lm_head(p: &super::Rows<'_>, y: &mut [f32], rpb: usize) {
            // SAFETY (all arms): forwarded.
            unsafe {
                match p.bits {
                    1 => drive::<1>(p, y, rpb),
                    2 => drive::<2>(p, y, rpb),
                    3 => drive::<3>(p, y, rpb),
                    4 => drive::<4>(p, y, rpb),
                    5 => drive::<5>(p, y, rpb),
                    6 => drive::<6>(p, y, rpb),
                    _ => drive::<7>(p, y, rpb),
                }
            }
        }
    };
}
pub(super) use lm_head_driver;
