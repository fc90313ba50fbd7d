//! Time as the queue sees it.
//!
//! Backoff, the unschedulable timeout and the backoff ordering windows are all functions of "now".
//! Reading the system clock directly would make them untestable without sleeping, so the queue asks a
//! [`Clock`] instead: [`RealClock`] in production, [`testing::FakeClock`] (moved by hand) in tests.
//! Blocking in [`crate::SchedulingQueue::pop`] is the one place that uses real time, because it
//! waits for another thread rather than for a deadline in queue time.

use std::{fmt, time::Instant};

/// A source of the current instant.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The monotonic system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealClock;

impl Clock for RealClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// Test helpers that other crates may use too.
pub mod testing {
    use std::time::{Duration, Instant};

    use parking_lot::Mutex;

    use super::Clock;

    /// A clock that only moves when told to.
    #[derive(Debug)]
    pub struct FakeClock {
        now: Mutex<Instant>,
    }

    impl Default for FakeClock {
        fn default() -> Self {
            Self::new()
        }
    }

    impl FakeClock {
        /// A clock stopped at the current instant.
        pub fn new() -> Self {
            FakeClock {
                now: Mutex::new(Instant::now()),
            }
        }

        /// A clock stopped at `at`.
        pub fn at(at: Instant) -> Self {
            FakeClock { now: Mutex::new(at) }
        }

        /// Moves the clock forward by `d`.
        pub fn advance(&self, d: Duration) {
            let mut now = self.now.lock();
            *now += d;
        }

        /// Sets the clock to `at` (which may be earlier than now; the queue tolerates it).
        pub fn set(&self, at: Instant) {
            *self.now.lock() = at;
        }
    }

    impl Clock for FakeClock {
        fn now(&self) -> Instant {
            *self.now.lock()
        }
    }
}
