//! Cold-cache runs: hold enough copies of a kernel's inputs that cycling
//! through them touches more memory than the last-level cache holds, and hand
//! the closure a different copy each run. By the time a copy comes round
//! again, the others have evicted it, so every run streams its inputs from
//! DRAM — the honest setting for bandwidth-bound kernels such as GEMV, whose
//! weights never fit in cache during inference.

use serde::Serialize;

/// How many copies of `bytes_per_copy` overflow an LLC of `llc_bytes`:
/// enough that the *other* copies alone exceed `factor ×` the LLC (LRU-ish
/// replacement then evicts a copy before it is reused), and at least 2.
pub fn copies_needed(bytes_per_copy: usize, llc_bytes: usize, factor: f64) -> usize {
    let per = bytes_per_copy.max(1) as f64;
    let others = (llc_bytes as f64 * factor.max(1.0) / per).ceil() as usize;
    (others + 1).max(2)
}

/// Copies of an input, handed out round-robin.
#[derive(Debug)]
pub struct Rotation<T> {
    copies: Vec<T>,
    next: usize,
    bytes_per_copy: usize,
}

/// What a rotation holds, for the measurement record.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RotationInfo {
    pub copies: usize,
    pub bytes_per_copy: usize,
    pub total_bytes: usize,
}

impl<T> Rotation<T> {
    /// Builds `copies_needed(bytes_per_copy, llc_bytes, 2.0)` copies with `make(i)`.
    /// The default factor 2 leaves a margin for non-LRU replacement and for the
    /// kernel's outputs sharing the cache.
    pub fn cold(
        bytes_per_copy: usize,
        llc_bytes: usize,
        make: impl FnMut(usize) -> T,
    ) -> Rotation<T> {
        Rotation::with_copies(
            copies_needed(bytes_per_copy, llc_bytes, 2.0),
            bytes_per_copy,
            make,
        )
    }

    /// One copy, reused every run (the hot-cache mode).
    pub fn hot(bytes_per_copy: usize, make: impl FnMut(usize) -> T) -> Rotation<T> {
        Rotation::with_copies(1, bytes_per_copy, make)
    }

    /// Exactly `n` (at least 1) copies.
    pub fn with_copies(
        n: usize,
        bytes_per_copy: usize,
        make: impl FnMut(usize) -> T,
    ) -> Rotation<T> {
        Rotation {
            copies: (0..n.max(1)).map(make).collect(),
            next: 0,
            bytes_per_copy,
        }
    }

    /// The next copy (round-robin).
    #[allow(clippy::should_implement_trait)] // lends `&mut T`, so not an Iterator
    pub fn next(&mut self) -> &mut T {
        let i = self.next;
        self.next = (i + 1) % self.copies.len();
        &mut self.copies[i]
    }

    pub fn len(&self) -> usize {
        self.copies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.copies.is_empty()
    }

    pub fn info(&self) -> RotationInfo {
        RotationInfo {
            copies: self.copies.len(),
            bytes_per_copy: self.bytes_per_copy,
            total_bytes: self.copies.len() * self.bytes_per_copy,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_exceed_the_llc() {
        // 1 MiB inputs, 32 MiB LLC, factor 2 -> 64 others + the current one.
        assert_eq!(copies_needed(1 << 20, 32 << 20, 2.0), 65);
        // Inputs larger than the LLC still rotate between two copies.
        assert_eq!(copies_needed(64 << 20, 32 << 20, 2.0), 2);
        assert_eq!(copies_needed(0, 1024, 1.0), 1025);
        for (b, llc) in [(4096, 1 << 20), (3000, 2 << 20), (1 << 20, 8 << 20)] {
            let n = copies_needed(b, llc, 1.0);
            assert!((n - 1) * b >= llc, "{b} {llc} {n}");
        }
    }

    #[test]
    fn hands_out_each_copy_in_turn() {
        let mut r = Rotation::cold(1000, 2500, |i| vec![i as u8; 1000]);
        assert_eq!(r.len(), 6);
        let seen: Vec<u8> = (0..12).map(|_| r.next()[0]).collect();
        assert_eq!(seen, [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5]);
        assert_eq!(r.info().total_bytes, 6000);
        let mut h = Rotation::hot(8, |_| 7u64);
        assert_eq!((*h.next(), *h.next(), h.len()), (7, 7, 1));
        // Writes through the handle stick to that copy.
        *h.next() += 1;
        assert_eq!(*h.next(), 8);
    }
}
