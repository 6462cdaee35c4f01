//! The workers of one [`install_awake`](super::install_awake) call as a
//! team that runs the calling thread's [`parallel_ranges`](super::parallel_ranges)
//! without going through rayon.
//!
//! Why: a decode step is some two hundred parallel regions of a few
//! microseconds each (every linear layer of every layer is one). A rayon
//! scope per region boxes its jobs, has them stolen, and parks the caller
//! on the scope's latch, to be woken through the kernel when the other half
//! ends late; in a two-thread decode that costs half the process's system
//! time and a few percent of its wall time (docs/PERF.md). Here a region is
//! one atomic word: the caller publishes the region's closure and part
//! count under a new generation, the members, already spinning, claim parts
//! from it, and the caller spins until the claimed parts are done.
//!
//! Parts are claimed, not assigned: the caller claims too, so a region never
//! waits on a member that has not started (one busy inside a rayon job, or
//! not scheduled): it waits only for parts a member has begun, and a part
//! never waits on the team (the caller takes the team away while it runs
//! one, so a nested `parallel_ranges` goes to rayon).

use std::any::Any;
use std::cell::{Cell, UnsafeCell};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// One region's work: part `i` of its parts.
type Part<'a> = &'a (dyn Fn(usize) + Sync);

/// Polls of an idle loop spent spinning before each poll also yields the
/// CPU to the OS (a thread count above the CPUs given must not starve the
/// thread doing the work).
const SPINS: u32 = 1 << 8;

/// The state word: the region's generation (bits 32..64), its part count
/// (16..32) and its next unclaimed part (0..16).
fn unpack(s: u64) -> (u64, u64, u64) {
    (s >> 32, (s >> 16) & 0xFFFF, s & 0xFFFF)
}

pub(super) struct Team {
    threads: usize,
    state: AtomicU64,
    /// The current region's closure; written only while no part is claimed
    /// (before a generation is published), read only by a thread holding a
    /// claimed part of that generation.
    job: UnsafeCell<Option<Part<'static>>>,
    /// Parts of the current region claimed or not yet claimed, not finished.
    unfinished: AtomicUsize,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    done: AtomicBool,
}

// SAFETY: `job` is the only field without its own synchronization; the
// protocol on `state` (above and in `run`/`work`) orders every write of it
// before the reads it serves.
unsafe impl Sync for Team {}

thread_local! {
    /// The team whose caller this thread is, while its `install_awake`
    /// closure runs and no part of a region is running on it.
    static CURRENT: Cell<*const Team> = const { Cell::new(std::ptr::null()) };
}

impl Team {
    pub(super) fn new(threads: usize) -> Self {
        Self {
            threads,
            state: AtomicU64::new(0),
            job: UnsafeCell::new(None),
            unfinished: AtomicUsize::new(0),
            panic: Mutex::new(None),
            done: AtomicBool::new(false),
        }
    }

    /// Makes this thread the team's caller until the guard drops, which also
    /// tells the members to leave.
    pub(super) fn lead(&self) -> Lead<'_> {
        let outer = CURRENT.with(|c| c.replace(self));
        Lead { team: self, outer }
    }

    /// A member's loop: run parts of every new region, serve the pool's
    /// rayon jobs (kernels that use rayon directly), until the caller is done.
    pub(super) fn serve(&self) {
        let (mut seen, mut idle) = (0, 0u32);
        loop {
            let (generation, ..) = unpack(self.state.load(Ordering::Acquire));
            if generation != seen {
                seen = generation;
                self.work(generation);
                idle = 0;
            } else if self.done.load(Ordering::Acquire) {
                return;
            } else if rayon::yield_now() == Some(rayon::Yield::Executed) {
                idle = 0;
            } else {
                backoff(&mut idle);
            }
        }
    }

    /// Runs `part(0..parts)` across the team and returns when every part has
    /// finished; a part's panic is resumed here once all have.
    fn run(&self, parts: usize, part: Part<'_>) {
        assert!(
            parts <= 0xFFFF,
            "a region has at most 65535 parts (one per thread)"
        );
        let (generation, ..) = unpack(self.state.load(Ordering::Relaxed));
        let generation = (generation + 1) & 0xFFFF_FFFF;
        // SAFETY: the last region returned only when it had no unfinished
        // part, so no thread holds a claim and none reads `job`; the
        // lifetime is erased for the time of this call only (the slot is
        // cleared before returning, and members read it only under a claim
        // of this generation).
        unsafe {
            *self.job.get() = Some(std::mem::transmute::<Part<'_>, Part<'static>>(part));
        }
        self.unfinished.store(parts, Ordering::Relaxed);
        self.state
            .store(generation << 32 | (parts as u64) << 16, Ordering::Release);
        // This thread's own parts run with the team taken away, so a nested
        // parallel_ranges cannot publish over this region.
        let me = CURRENT.with(|c| c.replace(std::ptr::null()));
        self.work(generation);
        CURRENT.with(|c| c.set(me));
        let mut idle = 0;
        while self.unfinished.load(Ordering::Acquire) != 0 {
            backoff(&mut idle);
        }
        // SAFETY: every part has finished: no thread reads `job`.
        unsafe { *self.job.get() = None };
        let panicked = self.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(p) = panicked {
            resume_unwind(p);
        }
    }

    /// Claims and runs parts of region `generation` until none is left.
    fn work(&self, generation: u64) {
        let mut s = self.state.load(Ordering::Acquire);
        loop {
            let (g, parts, next) = unpack(s);
            if g != generation || next >= parts {
                return;
            }
            match self
                .state
                .compare_exchange_weak(s, s + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    // SAFETY: part `next` of this generation is claimed and
                    // unfinished, so `run` has not returned and `job` holds
                    // its closure.
                    let part = unsafe { (*self.job.get()).expect("a claimed region has a job") };
                    if let Err(p) = catch_unwind(AssertUnwindSafe(|| part(next as usize))) {
                        self.panic
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .get_or_insert(p);
                    }
                    self.unfinished.fetch_sub(1, Ordering::Release);
                    s = self.state.load(Ordering::Acquire);
                }
                Err(now) => s = now,
            }
        }
    }
}

/// Runs the region on the calling thread's team if it leads one of
/// `threads` threads; false (nothing run) otherwise.
pub(super) fn run_on_current(threads: usize, parts: usize, part: Part<'_>) -> bool {
    let team = CURRENT.with(Cell::get);
    // SAFETY: CURRENT is set only by `lead`, whose guard outlives every use
    // on this thread and clears it before the team can be dropped.
    match unsafe { team.as_ref() } {
        Some(t) if t.threads == threads => {
            t.run(parts, part);
            true
        }
        _ => false,
    }
}

/// While alive, its thread leads the team; dropping it (on return or
/// unwind) restores the thread's previous team and sends the members home.
pub(super) struct Lead<'a> {
    team: &'a Team,
    outer: *const Team,
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.outer));
        self.team.done.store(true, Ordering::Release);
    }
}

fn backoff(idle: &mut u32) {
    if *idle < SPINS {
        *idle += 1;
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}
