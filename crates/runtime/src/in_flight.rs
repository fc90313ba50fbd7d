//! A count of binding cycles in flight that shutdown can wait on.
//!
//! Binding cycles run on binding threads and on the I/O runtime, and shutdown must let them end
//! while this replica may still write. Rather than polling the count, the waiter is woken by the
//! cycle that brings it to zero, so a stop takes as long as the last cycle and no longer.

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

use tokio::sync::Notify;

/// Binding cycles started and not yet finished.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    count: AtomicUsize,
    /// Woken whenever the count drops to zero.
    drained: Notify,
}

impl InFlight {
    /// One more cycle in flight.
    pub(crate) fn start(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
    }

    /// One cycle done; the last one wakes whoever waits in [`InFlight::drained_within`].
    pub(crate) fn finish(&self) {
        if self.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.drained.notify_waiters();
        }
    }

    /// Cycles in flight now.
    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Waits until no cycle is in flight, at most `timeout`; returns how many still are.
    pub(crate) async fn drained_within(&self, timeout: Duration) -> usize {
        let drained = async {
            loop {
                // Registered before looking, so a `finish` between the look and the wait still
                // wakes this waiter.
                let notified = self.drained.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.count() == 0 {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(timeout, drained).await;
        self.count()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn a_waiter_wakes_when_the_last_cycle_finishes() {
        let in_flight = Arc::new(InFlight::default());
        assert_eq!(in_flight.drained_within(Duration::from_secs(5)).await, 0);
        in_flight.start();
        in_flight.start();
        let finisher = in_flight.clone();
        let task = tokio::spawn(async move {
            finisher.finish();
            tokio::task::yield_now().await;
            finisher.finish();
        });
        assert_eq!(in_flight.drained_within(Duration::from_secs(30)).await, 0);
        task.await.unwrap();
    }

    #[tokio::test]
    async fn a_waiter_gives_up_after_the_timeout() {
        let in_flight = InFlight::default();
        in_flight.start();
        assert_eq!(in_flight.drained_within(Duration::from_millis(100)).await, 1);
    }
}
