//! Thread pools, one per thread count.
//!
//! A kernel called with `threads = t` must use exactly `t` workers and must
//! not oversubscribe, whatever the global rayon pool looks like; so every
//! count gets its own explicit pool, built once and reused. `threads = 1`
//! never touches rayon: it runs inline on the caller's thread.
//!
//! Placement: [`pin_workers`] pins the workers of the `t`-thread pool one
//! CPU each (worker `i` to `cpus[i % cpus.len()]`) and [`pin_caller`] pins
//! the calling thread to a CPU set, the same layout the tuner measures a
//! pinned candidate with (big.LITTLE clusters); an empty set restores
//! [`allowed_cpus`]. Both are one `sched_setaffinity` per thread, done once
//! by the runtime when it applies a plan, never per kernel call.

use crate::{KernelError, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use team::Team;

mod team;

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

/// The CPUs this process may run on: the calling thread's affinity the
/// first time any placement function of this module runs (before it pins
/// anything), so restoring never widens past what the process was given
/// (e.g. by `taskset`).
pub fn allowed_cpus() -> Vec<usize> {
    static ALLOWED: OnceLock<Vec<usize>> = OnceLock::new();
    ALLOWED
        .get_or_init(|| {
            affinity::get().unwrap_or_else(|_| {
                (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
            })
        })
        .clone()
}

/// Pins the calling thread to `cpus` (the whole set); an empty list restores
/// [`allowed_cpus`].
pub fn pin_caller(cpus: &[usize]) -> std::io::Result<()> {
    let all = allowed_cpus();
    affinity::set(if cpus.is_empty() { &all } else { cpus })
}

/// Pins worker `i` of the `threads`-thread pool to `cpus[i % cpus.len()]`;
/// an empty list restores every worker to [`allowed_cpus`]. One thread runs
/// inline on the caller, so `threads <= 1` pins nothing (see [`pin_caller`]).
/// On error some workers may be pinned already; pinning again or restoring
/// repairs that.
pub fn pin_workers(threads: usize, cpus: &[usize]) -> std::io::Result<()> {
    if threads <= 1 {
        return Ok(());
    }
    let all = allowed_cpus();
    let results = pool(threads).broadcast(|ctx| {
        if cpus.is_empty() {
            affinity::set(&all)
        } else {
            affinity::set(&[cpus[ctx.index() % cpus.len()]])
        }
    });
    results.into_iter().collect()
}

/// Each worker's allowed CPUs, in worker order (empty for `threads <= 1`).
pub fn worker_affinity(threads: usize) -> std::io::Result<Vec<Vec<usize>>> {
    if threads <= 1 {
        return Ok(Vec::new());
    }
    pool(threads)
        .broadcast(|_| affinity::get())
        .into_iter()
        .collect()
}

/// The calling thread's allowed CPUs.
pub fn caller_affinity() -> std::io::Result<Vec<usize>> {
    affinity::get()
}

/// `sched_{get,set}affinity` of the calling thread.
#[cfg(any(target_os = "linux", target_os = "android"))]
mod affinity {
    const SETSIZE: usize = libc::CPU_SETSIZE as usize;

    pub fn get() -> std::io::Result<Vec<usize>> {
        // SAFETY: cpu_set_t is plain data; the kernel writes at most its size.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok((0..SETSIZE).filter(|&c| libc::CPU_ISSET(c, &set)).collect())
        }
    }

    pub fn set(cpus: &[usize]) -> std::io::Result<()> {
        if cpus.is_empty() || cpus.iter().any(|&c| c >= SETSIZE) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("cpu set {cpus:?} is empty or names a cpu >= {SETSIZE}"),
            ));
        }
        // SAFETY: as above; every index is < CPU_SETSIZE (checked).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &c in cpus {
                libc::CPU_SET(c, &mut set);
            }
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// No thread affinity outside Linux: pinning is refused, never faked.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod affinity {
    fn unsupported() -> std::io::Error {
        std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "thread pinning needs linux sched_setaffinity",
        )
    }
    pub fn get() -> std::io::Result<Vec<usize>> {
        Err(unsupported())
    }
    pub fn set(_cpus: &[usize]) -> std::io::Result<()> {
        Err(unsupported())
    }
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

/// Runs `f` on a worker of the `threads`-thread pool while the pool's other
/// workers stay awake as its team (`team.rs`): each spins, running parts of
/// the regions `f`'s [`parallel_ranges`] publish and serving the pool's rayon
/// jobs, until `f` returns, instead of falling asleep after a few
/// microseconds idle.
///
/// Why: a forward pass is a chain of kernels with single-threaded work
/// between them (norms, RoPE, quantizing activations, a one-thread kernel).
/// An idle rayon worker sleeps after a short spin, and the next
/// multi-threaded kernel then waits for its wake-up, so how long the pool
/// sat idle, not the kernel, decided what a 2-thread GEMV cost in the model
/// (measured in docs/PERF.md, fourth run). With the workers kept awake the
/// cost of a kernel no longer depends on what ran before it, which is also
/// what makes the tuner's per-kernel timings transfer to the model. The
/// price is that the other workers use their CPUs for the whole call, as
/// llama.cpp's threads do during a graph.
pub fn install_awake<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    if threads <= 1 {
        return f();
    }
    let p = pool(threads);
    let keepers = p.clone();
    p.install(move || {
        let me = rayon::current_thread_index();
        let team = Arc::new(Team::new(threads));
        let members = team.clone();
        keepers.spawn_broadcast(move |ctx| {
            if Some(ctx.index()) != me {
                members.serve();
            }
        });
        // Dropped on return and on unwind, so the members always leave.
        let _lead = team.lead();
        f()
    })
}

/// A buffer the workers of one [`parallel_ranges`] call share, each
/// writing only its own part of it (rows, blocks, columns).
pub(crate) struct Disjoint<T>(*mut T);

impl<T> Clone for Disjoint<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Disjoint<T> {}

// SAFETY: the parts the workers write do not overlap (the contract of
// `part`), and `parallel_ranges` returns only after every worker has
// finished, before the buffer's borrow ends.
unsafe impl<T: Send> Send for Disjoint<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Disjoint<T> {}

impl<T> Disjoint<T> {
    pub(crate) fn new(buf: &mut [T]) -> Self {
        Disjoint(buf.as_mut_ptr())
    }

    /// Elements `range` of the buffer.
    ///
    /// # Safety
    /// `range` lies inside the buffer, which is still borrowed, and no
    /// other live slice overlaps it.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn part(&self, range: std::ops::Range<usize>) -> &mut [T] {
        // SAFETY: forwarded from the caller.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(range.start), range.len()) }
    }

    /// The buffer's base, to read once no worker writes it (the x86
    /// panel driver's biased activations).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn ptr(self) -> *const T {
        self.0
    }
}

/// Runs `f(range)` over `0..n` split into `threads` aligned ranges, on exactly
/// `threads` workers (inline when `threads == 1`): the calling thread's team
/// when it runs an [`install_awake`] closure of that many threads, else a
/// rayon scope on the pool.
pub fn parallel_ranges<F>(n: usize, threads: usize, align: usize, f: F)
where
    F: Fn(std::ops::Range<usize>) + Sync,
{
    if threads <= 1 || n <= align {
        f(0..n);
        return;
    }
    let ranges = split_range(n, threads, align);
    if team::run_on_current(threads, ranges.len(), &|i| f(ranges[i].clone())) {
        return;
    }
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
    use std::sync::atomic::Ordering;

    /// Work inside runs on a pool worker, multi-threaded kernels inside
    /// still use every worker, and the keepers stop: a second call (and a
    /// broadcast needing every worker) completes.
    #[test]
    fn install_awake_runs_in_the_pool_and_releases_it() {
        for _ in 0..3 {
            let (idx, sum) = install_awake(2, || {
                let sum = std::sync::atomic::AtomicUsize::new(0);
                parallel_ranges(1000, 2, 1, |r| {
                    sum.fetch_add(r.len(), Ordering::Relaxed);
                });
                (rayon::current_thread_index(), sum.into_inner())
            });
            assert!(idx.is_some());
            assert_eq!(sum, 1000);
        }
        assert_eq!(pool(2).broadcast(|c| c.index()).len(), 2);
        assert_eq!(install_awake(1, rayon::current_thread_index), None);
        let caught = std::panic::catch_unwind(|| install_awake(2, || panic!("inside")));
        assert!(caught.is_err());
        assert_eq!(pool(2).broadcast(|c| c.index()).len(), 2);
    }

    /// Inside `install_awake` the caller's team runs parallel_ranges:
    /// thousands of back-to-back regions each cover their range exactly
    /// once (a region must not start before the last one's parts finished),
    /// a nested call inside a part runs (through rayon), a call with another
    /// thread count runs on its own pool, and a part's panic reaches the
    /// caller, after which the pool still runs regions.
    #[test]
    fn regions_of_the_awake_team_cover_their_ranges_and_propagate_panics() {
        use std::sync::atomic::AtomicUsize;
        install_awake(2, || {
            let hits: Vec<AtomicUsize> = (0..37).map(|_| AtomicUsize::new(0)).collect();
            for round in 1..=5000 {
                parallel_ranges(37, 2, 3, |r| {
                    for i in r {
                        hits[i].fetch_add(1, Ordering::Relaxed);
                    }
                });
                if round % 1000 == 0 {
                    assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == round));
                }
            }
            let nested = AtomicUsize::new(0);
            parallel_ranges(4, 2, 1, |outer| {
                for _ in outer {
                    parallel_ranges(10, 2, 1, |r| {
                        nested.fetch_add(r.len(), Ordering::Relaxed);
                    });
                }
            });
            assert_eq!(nested.into_inner(), 40);
            let other = AtomicUsize::new(0);
            parallel_ranges(100, 3, 1, |r| {
                other.fetch_add(r.len(), Ordering::Relaxed);
            });
            assert_eq!(other.into_inner(), 100);
        });
        for _ in 0..3 {
            let caught = std::panic::catch_unwind(|| {
                install_awake(2, || {
                    parallel_ranges(2, 2, 1, |r| {
                        if r.start == 1 {
                            panic!("in part 1");
                        }
                    })
                })
            });
            let msg = caught.expect_err("the part's panic reaches the caller");
            assert_eq!(msg.downcast_ref::<&str>(), Some(&"in part 1"));
        }
        let sum = AtomicUsize::new(0);
        install_awake(2, || {
            parallel_ranges(1000, 2, 1, |r| {
                sum.fetch_add(r.len(), Ordering::Relaxed);
            })
        });
        assert_eq!(sum.into_inner(), 1000);
    }

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

    /// On any machine with two CPUs: the workers of a pool pinned to one
    /// CPU each report exactly that CPU, and restoring gives them the
    /// process's CPUs back. (Its own pool size, 5, so no other test's
    /// kernels run pinned meanwhile.)
    #[test]
    fn pinned_workers_run_where_asked_and_are_restored() {
        let all = allowed_cpus();
        let Some(&last) = all.last() else { return };
        let first = all[0];
        pin_workers(5, &[first, last]).unwrap();
        let got = worker_affinity(5).unwrap();
        assert_eq!(got.len(), 5);
        for (i, mask) in got.iter().enumerate() {
            assert_eq!(
                mask,
                &vec![if i % 2 == 0 { first } else { last }],
                "worker {i}"
            );
        }
        pin_workers(5, &[]).unwrap();
        assert!(worker_affinity(5).unwrap().iter().all(|m| m == &all));
        // A bad set is an error and leaves the workers alone.
        assert!(pin_workers(5, &[usize::MAX]).is_err());
        assert!(worker_affinity(5).unwrap().iter().all(|m| m == &all));
        assert!(pin_workers(1, &[first]).is_ok());
        assert!(worker_affinity(1).unwrap().is_empty());
    }

    #[test]
    fn pinned_caller_is_restored() {
        let all = allowed_cpus();
        let last = *all.last().unwrap();
        std::thread::spawn(move || {
            pin_caller(&[last]).unwrap();
            assert_eq!(caller_affinity().unwrap(), vec![last]);
            pin_caller(&[]).unwrap();
            assert_eq!(caller_affinity().unwrap(), allowed_cpus());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn pool_has_exact_thread_count() {
        for t in 1..=3 {
            assert_eq!(pool(t).current_num_threads(), t);
        }
        assert!(check_threads("x", 0).is_err());
    }
}
