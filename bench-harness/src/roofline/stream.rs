//! STREAM-style memory bandwidth (J. D. McCalpin, "Memory Bandwidth and
//! Machine Balance in Current High Performance Computers", IEEE TCCA
//! Newsletter, 1995; <https://www.cs.virginia.edu/stream/>).
//!
//! Three `f64` arrays, each far larger than the LLC; `threads` workers each
//! own one contiguous chunk of all three (first-touched by that worker, so
//! pages land on its NUMA node). One repetition runs
//! **Copy** `c[i] = a[i]` then **Triad** `a[i] = b[i] + s * c[i]`, each between
//! two barriers, and the first worker times it. Bytes are counted as STREAM
//! does: 16 per element for Copy, 24 for Triad (reads + writes, no
//! write-allocate traffic). A third, **Read** `Σ b[i]` (8 bytes per
//! element, not in STREAM), is the ceiling of a kernel that only streams
//! its operand in, as a decode GEMV streams the weights: a core's read
//! bandwidth can exceed what Triad's mix of reads and writes reaches. It
//! runs after the lines Copy and Triad dirtied are written back (untimed),
//! once per software prefetch distance of [`READ_AHEADS`] (none to 8 KiB
//! ahead), because the distance a core reads fastest at is the core's: one
//! fixed distance is a ceiling decode kernels tuned to another can beat.
//! The best repetition after the first is the ceiling (STREAM's reported
//! rate), and the distance that reached it is kept with the median of its
//! repetitions.
//! `s = 0.5` and `b = 2` make `a` converge to 4 instead of overflowing, and
//! let the result be checked exactly.

use crate::error::BenchError;
use crate::pin::PinGuard;
use std::sync::Barrier;
use std::time::Instant;
use tiletune_kernels::mem::HugeBuf;
use tiletune_kernels::prefetch;

/// STREAM's triad scalar here (converging; see module docs).
pub const TRIAD_SCALAR: f64 = 0.5;
pub const INIT_A: f64 = 1.0;
pub const INIT_B: f64 = 2.0;

/// Copy kernel on one chunk.
pub fn copy(c: &mut [f64], a: &[f64]) {
    c.copy_from_slice(a);
}

/// Triad kernel on one chunk.
pub fn triad(a: &mut [f64], b: &[f64], c: &[f64], s: f64) {
    for ((a, b), c) in a.iter_mut().zip(b).zip(c) {
        *a = b + s * c;
    }
}

/// Read kernel on one chunk: the sum, with eight independent accumulators
/// so that the loop is bound by loads, not by one chain of dependent adds,
/// requesting each line `ahead` bytes before it is read (0: no software
/// prefetch).
pub fn read(a: &[f64], ahead: usize) -> f64 {
    let mut acc = [0.0f64; 8];
    let chunks = a.chunks_exact(8);
    let tail: f64 = chunks.remainder().iter().sum();
    let base = a.as_ptr().cast::<u8>();
    for (i, c) in chunks.enumerate() {
        if ahead > 0 {
            // A prefetch is a hint that never faults: past the end is fine.
            prefetch::line(base.wrapping_add(64 * i + ahead));
        }
        for (s, &x) in acc.iter_mut().zip(c) {
            *s += x;
        }
    }
    acc.iter().sum::<f64>() + tail
}

/// Bytes the Read pass prefetches ahead, each distance a pass of its own.
/// On the Xeon of docs/PERF.md one core read fastest 1 KiB ahead, 14–25%
/// more than at 8 KiB (the streaming kernels' default); none is there for
/// cores whose hardware prefetchers do better alone.
pub const READ_AHEADS: [usize; 6] = [0, 512, 1024, 2048, 4096, 8192];

/// Writes the cache lines of `a` back to memory and evicts them (x86
/// `clflush`; nothing elsewhere), so that the Read pass after Triad does
/// not share the bus with the write-back of up to an LLC of dirty lines.
fn write_back(a: &[f64]) {
    #[cfg(target_arch = "x86_64")]
    {
        let start = a.as_ptr() as usize;
        let end = start + std::mem::size_of_val(a);
        let mut line = start & !63;
        while line < end {
            // SAFETY: the line holds at least one element of `a`.
            unsafe { std::arch::x86_64::_mm_clflush(line as *const u8) };
            line += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = a;
}

/// Per-repetition times (ns) of Copy, Triad and Read, plus the final
/// arrays' (and sums') agreement with the expected values.
#[derive(Debug, Clone)]
pub struct StreamRun {
    pub copy_ns: Vec<f64>,
    pub triad_ns: Vec<f64>,
    /// Read's times at each distance of [`READ_AHEADS`], in its order.
    pub read_ns: Vec<Vec<f64>>,
    /// Every element held the expected value after the last repetition.
    pub validated: bool,
}

/// Value of `a` after `reps` repetitions (and of `c` after `reps`: a_{reps-1}).
pub fn expected_a(reps: usize) -> f64 {
    (0..reps).fold(INIT_A, |a, _| INIT_B + TRIAD_SCALAR * a)
}

/// One worker's Copy, Triad and Read (per distance) times and validation.
type WorkerOut = (Vec<f64>, Vec<f64>, Vec<Vec<f64>>, bool);

/// Runs `reps` repetitions on arrays of `len` elements with `threads` workers
/// (worker `i` pinned to `cpus[i]` when given).
pub fn run(
    len: usize,
    threads: usize,
    reps: usize,
    cpus: Option<&[usize]>,
) -> Result<StreamRun, BenchError> {
    if threads == 0 || reps == 0 || len < threads {
        return Err(BenchError::InvalidConfig {
            reason: format!(
                "stream needs threads >= 1, reps >= 1 and len >= threads (got {threads}, {reps}, {len})"
            ),
        });
    }
    // Zeroed, untouched until each worker writes its chunk, and in the
    // huge-page memory the runtime holds weights in: a roof measured on
    // 4 KiB pages sits below what decode streams from 2 MiB pages.
    let mut a = HugeBuf::<f64>::zeroed(len);
    let mut b = HugeBuf::<f64>::zeroed(len);
    let mut c = HugeBuf::<f64>::zeroed(len);
    let chunk = len.div_ceil(threads);
    // Rounding can leave fewer chunks than threads (len 5, 4 threads -> 3).
    let barrier = Barrier::new(len.div_ceil(chunk));
    let expect_a = expected_a(reps);
    let expect_c = expected_a(reps - 1);

    let results: Vec<Result<WorkerOut, BenchError>> = std::thread::scope(|s| {
        let handles: Vec<_> = a
            .chunks_mut(chunk)
            .zip(b.chunks_mut(chunk))
            .zip(c.chunks_mut(chunk))
            .enumerate()
            .map(|(i, ((a, b), c))| {
                let barrier = &barrier;
                let cpu = cpus.and_then(|l| l.get(i)).copied();
                s.spawn(move || {
                    // Pinning is best effort: a failed pin must not leave the others at the barrier.
                    let _pin = cpu.and_then(|c| PinGuard::pin(&[c]).ok());
                    a.fill(INIT_A);
                    b.fill(INIT_B);
                    c.fill(0.0);
                    let (mut tc, mut tt) = (Vec::new(), Vec::new());
                    let mut tr = vec![Vec::new(); READ_AHEADS.len()];
                    // b holds INIT_B = 2 throughout: its sum is exact.
                    let expect_sum = INIT_B * b.len() as f64;
                    let mut sums_ok = true;
                    for rep in 0..reps {
                        barrier.wait();
                        let t0 = Instant::now();
                        copy(c, a);
                        barrier.wait();
                        let t1 = Instant::now();
                        triad(a, b, c, TRIAD_SCALAR);
                        barrier.wait();
                        let t2x = Instant::now();
                        write_back(a);
                        write_back(c);
                        tc.push((t1 - t0).as_nanos() as f64);
                        tt.push((t2x - t1).as_nanos() as f64);
                        // Each repetition starts at the next distance, so
                        // that none always runs first after the write-back.
                        for k in 0..READ_AHEADS.len() {
                            let d = (rep + k) % READ_AHEADS.len();
                            barrier.wait();
                            let t2 = Instant::now();
                            let sum = read(std::hint::black_box(&*b), READ_AHEADS[d]);
                            barrier.wait();
                            tr[d].push(t2.elapsed().as_nanos() as f64);
                            sums_ok &= sum == expect_sum;
                        }
                    }
                    let ok = sums_ok
                        && a.iter().all(|&x| x == expect_a)
                        && c.iter().all(|&x| x == expect_c);
                    Ok((tc, tt, tr, ok))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(Err(BenchError::WorkerPanicked)))
            .collect()
    });
    let mut validated = true;
    let mut first = None;
    for r in results {
        let (tc, tt, tr, ok) = r?;
        validated &= ok;
        // Worker 0's clock spans barrier to barrier, i.e. the slowest worker.
        first.get_or_insert((tc, tt, tr));
    }
    let (copy_ns, triad_ns, read_ns) = first.expect("threads >= 1");
    Ok(StreamRun {
        copy_ns,
        triad_ns,
        read_ns,
        validated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_compute_what_stream_defines() {
        let a = [1.0, 2.0, 3.0];
        let mut c = [0.0; 3];
        copy(&mut c, &a);
        assert_eq!(c, a);
        let mut a2 = [0.0; 3];
        triad(&mut a2, &[1.0, 1.0, 1.0], &[2.0, 4.0, 6.0], 0.5);
        assert_eq!(a2, [2.0, 3.0, 4.0]);
        assert_eq!(expected_a(0), 1.0);
        assert_eq!(expected_a(1), 2.5);
        assert_eq!(expected_a(2), 3.25);
        for len in [0usize, 1, 7, 8, 9, 100] {
            let v: Vec<f64> = (0..len).map(|i| i as f64).collect();
            for ahead in READ_AHEADS {
                assert_eq!(
                    read(&v, ahead),
                    (len * len.saturating_sub(1) / 2) as f64,
                    "len {len} ahead {ahead}"
                );
            }
        }
    }

    #[test]
    fn every_element_is_processed_once_per_rep_for_any_split() {
        for (len, threads) in [(1, 1), (7, 2), (5, 4), (1000, 3), (4096, 2)] {
            let r = run(len, threads, 3, None).unwrap();
            assert!(r.validated, "len={len} threads={threads}");
            assert_eq!(r.copy_ns.len(), 3);
            assert_eq!(r.triad_ns.len(), 3);
            assert_eq!(r.read_ns.len(), READ_AHEADS.len());
            assert!(r.read_ns.iter().all(|t| t.len() == 3));
        }
        assert!(run(1, 2, 1, None).is_err());
        assert!(run(10, 0, 1, None).is_err());
        assert!(run(10, 1, 0, None).is_err());
    }
}
