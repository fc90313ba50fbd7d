//! Whether an attempt's Filter or Score work is split over the worker pool.
//!
//! Splitting costs CPU whatever the amount of work: the idle workers are woken, and after their
//! share each one spins (rayon's workers yield to the OS a few dozen times) before it sleeps
//! again. On the benchmarks' 2-core machine that came to tens of microseconds of CPU per split
//! section, more than the whole Filter of 600 nodes when each costs a fraction of a microsecond
//! (`SchedulingBasic`), and taken from the core that the watches, the binding writes and an
//! embedded API server need. Splitting every section made the full path slower, not faster.
//!
//! So a section is split only when the work it is expected to take on one thread is large enough
//! to pay for the split many times over ([`SPLIT_MIN_WORK`]). The expectation is the measured
//! time per item (node) of the earlier sections of the same kind in this algorithm, a moving
//! average, so a profile whose plugins are expensive (the device allocator over many candidate
//! devices, inter-pod affinity over many pods) splits and a cheap one does not. Whether a section
//! is split never changes its result: the items are evaluated the same way and collected in order.

use std::time::Duration;

/// A section expected to take at least this long on one thread is split over the pool.
pub const SPLIT_MIN_WORK: Duration = Duration::from_micros(500);

/// The weight of the newest section in the moving average (the rest is the history's).
const NEWEST_WEIGHT: f64 = 0.25;

/// The expected cost per item of one kind of section (Filter, Score), from the sections measured
/// so far. See the module documentation.
#[derive(Clone, Debug)]
pub(crate) struct WorkEstimate {
    /// Nanoseconds of one thread's time per item; `None` until a section was measured.
    nanos_per_item: Option<f64>,
    /// Split sections expected to take at least this many nanoseconds.
    min_work_nanos: f64,
}

impl WorkEstimate {
    /// An estimate with nothing measured, splitting sections expected to take `min_work`.
    pub(crate) fn new(min_work: Duration) -> Self {
        WorkEstimate {
            nanos_per_item: None,
            min_work_nanos: min_work.as_nanos() as f64,
        }
    }

    /// Whether a section of `items` should be split over `threads` threads. Nothing measured yet
    /// counts as no work: the first section runs on one thread, which measures it exactly.
    pub(crate) fn split(&self, items: usize, threads: usize) -> bool {
        if threads < 2 || items < 3 {
            return false;
        }
        let expected = self.nanos_per_item.unwrap_or(0.0) * items as f64;
        expected >= self.min_work_nanos
    }

    /// Records a section of `items` that took `elapsed` on `threads` threads (1 when it was not
    /// split). A split section counts as `threads` times its wall time: an upper bound on its
    /// work, since the workers' wake-up is in it, which keeps a borderline kind split rather than
    /// flipping back and forth.
    pub(crate) fn record(&mut self, items: usize, threads: usize, elapsed: Duration) {
        if items == 0 {
            return;
        }
        let sample = elapsed.as_nanos() as f64 * threads.max(1) as f64 / items as f64;
        self.nanos_per_item = Some(match self.nanos_per_item {
            None => sample,
            Some(old) => old + NEWEST_WEIGHT * (sample - old),
        });
    }

    /// The current expectation per item, if any (tests).
    #[cfg(test)]
    pub(crate) fn per_item(&self) -> Option<Duration> {
        self.nanos_per_item.map(|n| Duration::from_nanos(n as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_only_work_that_pays_for_it() {
        let us = Duration::from_micros;
        let mut e = WorkEstimate::new(us(500));
        // Nothing measured: one thread.
        assert!(!e.split(10_000, 2));
        // 1 µs per node: 400 nodes stay on one thread, 600 are split.
        e.record(100, 1, us(100));
        assert_eq!(e.per_item(), Some(us(1)));
        assert!(!e.split(400, 2));
        assert!(e.split(600, 2));
        // Never with one thread or fewer than three items, whatever the cost.
        e.record(1, 1, Duration::from_secs(1));
        assert!(!e.split(600, 1));
        assert!(!e.split(2, 16));
        assert!(e.split(3, 2));
        // An empty section teaches nothing.
        let before = e.per_item();
        e.record(0, 2, Duration::from_secs(9));
        assert_eq!(e.per_item(), before);
    }

    #[test]
    fn the_average_follows_the_newest_sections() {
        let us = Duration::from_micros;
        let mut e = WorkEstimate::new(us(500));
        // An expensive kind of pod, then a run of cheap ones: the estimate falls below the split
        // point within a few sections.
        e.record(100, 1, us(2_000)); // 20 µs per node
        assert!(e.split(100, 2));
        let mut sections = 0;
        while e.split(500, 2) {
            e.record(500, 1, us(100)); // 0.2 µs per node
            sections += 1;
            assert!(sections < 20, "the estimate never came down: {:?}", e.per_item());
        }
        assert!((5..=15).contains(&sections), "{sections} sections");
        // A split section counts as its wall time on every thread.
        let mut s = WorkEstimate::new(us(500));
        s.record(100, 2, us(100));
        assert_eq!(s.per_item(), Some(us(2)));
    }

    #[test]
    fn a_zero_threshold_splits_from_the_first_section() {
        let e = WorkEstimate::new(Duration::ZERO);
        assert!(e.split(3, 2));
        assert!(!e.split(2, 2));
    }
}
