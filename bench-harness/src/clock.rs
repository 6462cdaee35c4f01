//! The clock the harness reads. Measuring code only ever asks a [`Clock`] for
//! "now", so tests can swap in a [`MockClock`] whose time only moves when the
//! measured closure says so: the repetition schedule, the statistics and the
//! drift guard are then deterministic.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// A monotonic clock.
pub trait Clock {
    /// Time since an arbitrary fixed origin.
    fn now(&self) -> Duration;
}

/// `std::time::Instant`, i.e. `CLOCK_MONOTONIC` on Linux.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    pub fn new() -> SystemClock {
        SystemClock {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// A clock that moves only when told to. Clones share the same time, so the
/// harness holds one handle and the measured closure another.
#[derive(Debug, Clone, Default)]
pub struct MockClock {
    now: Rc<Cell<Duration>>,
    reads: Rc<Cell<u64>>,
}

impl MockClock {
    pub fn new() -> MockClock {
        MockClock::default()
    }

    /// Moves time forward (what a "run" of the mocked work costs).
    pub fn advance(&self, d: Duration) {
        self.now.set(self.now.get() + d);
    }

    /// Moves time forward by `ns` nanoseconds.
    pub fn advance_ns(&self, ns: u64) {
        self.advance(Duration::from_nanos(ns));
    }

    /// How many times the clock was read.
    pub fn reads(&self) -> u64 {
        self.reads.get()
    }
}

impl Clock for MockClock {
    fn now(&self) -> Duration {
        self.reads.set(self.reads.get() + 1);
        self.now.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mock_moves_only_when_advanced_and_clones_share_time() {
        let c = MockClock::new();
        let h = c.clone();
        assert_eq!(c.now(), Duration::ZERO);
        h.advance_ns(150);
        assert_eq!(c.now(), Duration::from_nanos(150));
        assert_eq!(c.reads(), 2);
    }

    #[test]
    fn system_clock_is_monotonic() {
        let c = SystemClock::new();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
    }
}
