//! The clock the harness reads. Measuring code only ever asks a [`Clock`] for
//! "now", so tests can swap in a [`MockClock`] whose time only moves when the
//! measured closure says so: the repetition schedule, the statistics and the
//! drift guard are then deterministic. [`UtcTime`] turns wall-clock seconds
//! into the calendar dates the records and reports print.

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

/// A UTC calendar date and time of day, for timestamps people read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtcTime {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    /// Seconds since midnight.
    pub secs: u32,
}

impl UtcTime {
    /// `unix` seconds since 1970-01-01 00:00 UTC (Howard Hinnant's
    /// civil-from-days, exact for every `i64` day count the clock gives).
    pub fn from_unix(unix: i64) -> UtcTime {
        let days = unix.div_euclid(86_400);
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        UtcTime {
            year: yoe + era * 400 + i64::from(month <= 2),
            month,
            day,
            secs: unix.rem_euclid(86_400) as u32,
        }
    }
}
