//! Thread placement: pin the calling thread to a set of CPUs with
//! `sched_setaffinity` (e.g. one cluster of a big.LITTLE SoC), record where it
//! actually ran, and restore the previous mask afterwards. A kernel's pool
//! workers are other threads: [`WorkerPin`] pins each of them (by TID) to one
//! CPU of the set, round robin, and restores their masks too.

use crate::error::BenchError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// Where a measurement ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// CPUs the thread was pinned to (empty: not pinned).
    pub pinned_to: Vec<usize>,
    /// CPUs `sched_getcpu` reported at the observation points.
    pub observed: BTreeSet<usize>,
    /// The CPU each pool worker was pinned to, in worker order (empty: no
    /// workers pinned).
    #[serde(default)]
    pub workers: Vec<usize>,
}

impl Placement {
    /// Whether every observed CPU is inside the pinned set.
    pub fn honoured(&self) -> bool {
        self.pinned_to.is_empty() || self.observed.iter().all(|c| self.pinned_to.contains(c))
    }
}

const SETSIZE: usize = libc::CPU_SETSIZE as usize;

/// The calling thread's allowed CPUs.
pub fn affinity() -> Result<Vec<usize>, BenchError> {
    affinity_of(0)
}

/// Thread `tid`'s allowed CPUs (0: the calling thread).
pub fn affinity_of(tid: i32) -> Result<Vec<usize>, BenchError> {
    // SAFETY: cpu_set_t is plain data; the kernel writes at most its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(BenchError::Pin {
                cpus: Vec::new(),
                source: std::io::Error::last_os_error(),
            });
        }
        Ok((0..SETSIZE).filter(|&c| libc::CPU_ISSET(c, &set)).collect())
    }
}

fn set_affinity(cpus: &[usize]) -> Result<(), BenchError> {
    set_affinity_of(0, cpus)
}

fn set_affinity_of(tid: i32, cpus: &[usize]) -> Result<(), BenchError> {
    if cpus.is_empty() || cpus.iter().any(|&c| c >= SETSIZE) {
        return Err(BenchError::InvalidCpus {
            cpus: cpus.to_vec(),
            max: SETSIZE,
        });
    }
    // SAFETY: as above; every index is < CPU_SETSIZE (checked).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(BenchError::Pin {
                cpus: cpus.to_vec(),
                source: std::io::Error::last_os_error(),
            });
        }
    }
    Ok(())
}

/// The CPU the calling thread is on now, if the kernel says.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: no arguments; -1 on error.
    usize::try_from(unsafe { libc::sched_getcpu() }).ok()
}

/// Pins the calling thread while alive; restores the previous mask on drop.
#[derive(Debug)]
pub struct PinGuard {
    previous: Vec<usize>,
    placement: Placement,
}

impl PinGuard {
    /// Pins the calling thread to `cpus`.
    pub fn pin(cpus: &[usize]) -> Result<PinGuard, BenchError> {
        let previous = affinity()?;
        set_affinity(cpus)?;
        let mut pinned: Vec<usize> = cpus.to_vec();
        pinned.sort_unstable();
        pinned.dedup();
        let mut g = PinGuard {
            previous,
            placement: Placement {
                pinned_to: pinned,
                observed: BTreeSet::new(),
                workers: Vec::new(),
            },
        };
        g.observe();
        Ok(g)
    }

    /// Records the CPU the thread is on now (call around timed regions).
    pub fn observe(&mut self) {
        if let Some(c) = current_cpu() {
            self.placement.observed.insert(c);
        }
    }

    /// Where the thread ran so far.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        // Best effort: a failure here leaves the thread pinned, which is safe.
        let _ = set_affinity(&self.previous);
    }
}

/// Pins other threads (a pool's workers, by TID) while alive: worker `i` to
/// `cpus[i % cpus.len()]`, one CPU each, so a `t`-thread kernel on a cluster
/// of `t` cores runs one worker per core. Restores every mask on drop.
#[derive(Debug)]
pub struct WorkerPin {
    previous: Vec<(i32, Vec<usize>)>,
    assigned: Vec<usize>,
}

impl WorkerPin {
    pub fn pin(tids: &[i32], cpus: &[usize]) -> Result<WorkerPin, BenchError> {
        if cpus.is_empty() {
            return Err(BenchError::InvalidCpus {
                cpus: Vec::new(),
                max: SETSIZE,
            });
        }
        let mut g = WorkerPin {
            previous: Vec::new(),
            assigned: Vec::new(),
        };
        for (i, &tid) in tids.iter().enumerate() {
            let cpu = cpus[i % cpus.len()];
            let before = affinity_of(tid)?;
            // On error `g` drops and restores the workers pinned so far.
            set_affinity_of(tid, &[cpu])?;
            g.previous.push((tid, before));
            g.assigned.push(cpu);
        }
        Ok(g)
    }

    /// The CPU each worker was pinned to.
    pub fn assigned(&self) -> &[usize] {
        &self.assigned
    }
}

impl Drop for WorkerPin {
    fn drop(&mut self) {
        for (tid, cpus) in &self.previous {
            let _ = set_affinity_of(*tid, cpus);
        }
    }
}

/// Runs `f` pinned to `cpus` and returns its result with the placement.
pub fn run_pinned<R>(cpus: &[usize], f: impl FnOnce() -> R) -> Result<(R, Placement), BenchError> {
    let mut g = PinGuard::pin(cpus)?;
    let r = f();
    g.observe();
    Ok((r, g.placement().clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_records_and_restores() {
        let before = affinity().unwrap();
        let target = before[before.len() - 1];
        let ((), placement) = run_pinned(&[target], || {
            assert_eq!(affinity().unwrap(), vec![target]);
        })
        .unwrap();
        assert_eq!(placement.pinned_to, vec![target]);
        assert!(placement.honoured(), "{placement:?}");
        assert!(!placement.observed.is_empty());
        assert_eq!(affinity().unwrap(), before);
    }

    #[test]
    fn workers_are_pinned_one_cpu_each_and_restored() {
        let allowed = affinity().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let done_rx = std::sync::Arc::new(std::sync::Mutex::new(done_rx));
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let (tx, done_rx) = (tx.clone(), done_rx.clone());
                std::thread::spawn(move || {
                    tx.send(tiletune_pmu::counters::current_tid()).unwrap();
                    let _ = done_rx.lock().unwrap().recv();
                })
            })
            .collect();
        let tids: Vec<i32> = (0..3).map(|_| rx.recv().unwrap()).collect();
        let before: Vec<_> = tids.iter().map(|&t| affinity_of(t).unwrap()).collect();
        {
            let g = WorkerPin::pin(&tids, &allowed).unwrap();
            for (i, &t) in tids.iter().enumerate() {
                assert_eq!(affinity_of(t).unwrap(), vec![allowed[i % allowed.len()]]);
            }
            assert_eq!(g.assigned().len(), 3);
        }
        for (t, b) in tids.iter().zip(&before) {
            assert_eq!(&affinity_of(*t).unwrap(), b);
        }
        assert!(WorkerPin::pin(&tids, &[]).is_err());
        for _ in &workers {
            done_tx.send(()).unwrap();
        }
        for w in workers {
            w.join().unwrap();
        }
    }

    #[test]
    fn bad_cpu_sets_are_errors_and_leave_affinity_alone() {
        let before = affinity().unwrap();
        assert!(matches!(
            PinGuard::pin(&[]),
            Err(BenchError::InvalidCpus { .. })
        ));
        assert!(matches!(
            PinGuard::pin(&[SETSIZE + 3]),
            Err(BenchError::InvalidCpus { .. })
        ));
        assert_eq!(affinity().unwrap(), before);
        let p = Placement {
            pinned_to: vec![0],
            observed: [0, 1].into_iter().collect(),
            workers: Vec::new(),
        };
        assert!(!p.honoured());
    }
}
