//! Thread pools, one per thread count.
//!
//! A kernel called with `threads = t` must use exactly `t` workers and must
//! not oversubscribe, whatever the global rayon pool looks like; so every
//! count gets its own explicit pool, built once and reused. `threads = 1`
//! never touches rayon: it runs inline on the caller's thread.

use crate::{KernelError, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Returns the pool with exactly `threads` workers, creating it on first use.
pub fn pool(threads: usize) -> Arc<rayon::ThreadPool> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> = OnceLock::new();
    let pools = POOLS.get_or_init(Default::default);
    let mut guard = pools.lock().unwrap_or_else(|e| e.into_inner());
    guard
        .entry(threads)
        .or_insert_with(|| {
            Arc::new(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .thread_name(move |i| format!("tiletune-{threads}t-{i}"))
                    .build()
                    .expect("building a rayon pool only fails if threads cannot be spawned"),
            )
        })
        .clone()
}

/// Validates a thread count at a kernel entry point.
pub fn check_threads(op: &'static str, threads: usize) -> Result<()> {
    if threads == 0 {
        Err(KernelError::InvalidThreads { op, threads })
    } else {
        Ok(())
    }
}

/// Splits `0..n` into `parts` contiguous ranges whose starts are multiples of
/// `align` (the last range takes the remainder), so each worker gets whole tiles.
pub fn split_range(n: usize, parts: usize, align: usize) -> Vec<std::ops::Range<usize>> {
    let parts = parts.max(1);
    let align = align.max(1);
    let tiles = n.div_ceil(align);
    let per = tiles.div_ceil(parts);
    (0..parts)
        .map(|p| {
            let start = (p * per * align).min(n);
            let end = ((p + 1) * per * align).min(n);
            start..end
        })
        .filter(|r| !r.is_empty())
        .collect()
}

/// Runs `f(range)` over `0..n` split into `threads` aligned ranges, on exactly
/// `threads` workers (inline when `threads == 1`).
pub fn parallel_ranges<F>(n: usize, threads: usize, align: usize, f: F)
where
    F: Fn(std::ops::Range<usize>) + Sync,
{
    if threads <= 1 || n <= align {
        f(0..n);
        return;
    }
    let ranges = split_range(n, threads, align);
    pool(threads).scope(|s| {
        for r in ranges {
            let f = &f;
            s.spawn(move |_| f(r));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_covers_range_aligned() {
        for n in [0, 1, 7, 8, 9, 100, 1023] {
            for parts in 1..5 {
                for align in [1, 4, 8] {
                    let r = split_range(n, parts, align);
                    let mut next = 0;
                    for x in &r {
                        assert_eq!(x.start, next);
                        assert_eq!(x.start % align, 0);
                        next = x.end;
                    }
                    assert_eq!(next, n);
                    assert!(r.len() <= parts);
                }
            }
        }
    }

    #[test]
    fn pool_has_exact_thread_count() {
        for t in 1..=3 {
            assert_eq!(pool(t).current_num_threads(), t);
        }
        assert!(check_threads("x", 0).is_err());
    }
}
