//! When an allocation gives up: a point in time, a cancellation callback, or both.
//!
//! Filter runs the allocator under a time limit and the scheduler may abandon a cycle midway;
//! the search checks the deadline every few steps and selector evaluation passes the point in
//! time on to CEL, so one slow node cannot hold a whole scheduling attempt.

use std::time::{Duration, Instant};

/// When to give up.
#[derive(Clone, Copy, Default)]
pub struct Deadline<'a> {
    pub(super) at: Option<Instant>,
    pub(super) cancelled: Option<&'a (dyn Fn() -> bool + Sync)>,
}

impl std::fmt::Debug for Deadline<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deadline")
            .field("at", &self.at)
            .field("cancellable", &self.cancelled.is_some())
            .finish()
    }
}

impl<'a> Deadline<'a> {
    /// Never give up.
    pub fn none() -> Self {
        Deadline::default()
    }

    /// Give up at `at`.
    pub fn at(at: Instant) -> Self {
        Deadline {
            at: Some(at),
            cancelled: None,
        }
    }

    /// Give up after `d` from now.
    pub fn after(d: Duration) -> Self {
        Deadline::at(Instant::now() + d)
    }

    /// Also give up when `cancelled` returns true.
    pub fn with_cancel(mut self, cancelled: &'a (dyn Fn() -> bool + Sync)) -> Self {
        self.cancelled = Some(cancelled);
        self
    }

    pub(super) fn expired(&self) -> Option<String> {
        if let Some(at) = self.at
            && Instant::now() >= at
        {
            return Some("deadline exceeded".to_string());
        }
        if let Some(c) = self.cancelled
            && c()
        {
            return Some("cancelled".to_string());
        }
        None
    }
}
