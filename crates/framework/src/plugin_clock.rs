//! The clock that times plugin runs on sampled attempts.
//!
//! One attempt in ten records `plugin_execution_duration_seconds` (as upstream), and such an
//! attempt times every Filter and Score plugin on every node it visits: about ten clock
//! readings per node, thousands per attempt. The operating system's monotonic clock costs
//! ~22 ns a reading on our 2-core VMs, which made the readings a tenth of the scheduling
//! thread's time. The processor's time-stamp counter, read through `quanta`, costs ~9 ns, and
//! only the differences that are reported are converted to nanoseconds. Where the counter is
//! not invariant across cores and power states, `quanta` reads the monotonic clock instead.
//!
//! The conversion is calibrated once per process against the monotonic clock (up to 200 ms):
//! [`calibrate_plugin_clock`] lets a scheduler pay for it before its first pod instead of in
//! the middle of an attempt.

use std::{sync::OnceLock, time::Duration};

static CLOCK: OnceLock<quanta::Clock> = OnceLock::new();

fn clock() -> &'static quanta::Clock {
    CLOCK.get_or_init(quanta::Clock::new)
}

/// Calibrates the clock that times plugins now, if nothing has yet. Call it before the first
/// scheduling attempt; otherwise the first sampled attempt calibrates it.
pub fn calibrate_plugin_clock() {
    clock();
}

/// A raw reading of the plugin clock; only the time between two readings means anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Reading(u64);

impl Reading {
    /// The clock now.
    pub(crate) fn now() -> Self {
        Reading(clock().raw())
    }

    /// The time from this reading to `later`; zero when `later` is not after it (readings
    /// taken on two cores whose counters disagree slightly).
    pub(crate) fn until(self, later: Reading) -> Duration {
        clock().delta(self.0, later.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_measure_the_time_between_them() {
        calibrate_plugin_clock();
        let pause = Duration::from_millis(30);
        let (start, began) = (Reading::now(), std::time::Instant::now());
        std::thread::sleep(pause);
        let (end, measured) = (Reading::now(), began.elapsed());
        let elapsed = start.until(end);
        assert!(elapsed >= pause, "{elapsed:?} < {pause:?}");
        // Within a millisecond (plus 5 %) of the monotonic clock over the same interval: a
        // raw counter difference left unconverted would be off by the counter's frequency.
        let slack = Duration::from_millis(1) + measured / 20;
        assert!(elapsed <= measured + slack, "{elapsed:?} vs {measured:?}");
        assert_eq!(end.until(start), Duration::ZERO);
    }
}
