//! The scheduling queue: which pod the scheduler tries next, and when a pod that could not be
//! placed is tried again.
//!
//! It follows upstream kube-scheduler's `PriorityQueue` (`pkg/scheduler/backend/queue`) because
//! users tune and reason about scheduling latency in its terms: activeQ ordered by the QueueSort
//! plugin, backoffQ with exponential backoff (1 s, 2 s, 4 s, … capped at 10 s by default), the
//! unschedulable pool flushed after 5 minutes, PreEnqueue gating, and queueing hints that let only
//! the events relevant to a pod's rejection wake it. Retrying every pod on every cluster change would
//! burn the single scheduling thread; never retrying would strand pods, so the hints are the heart of
//! it.
//!
//! The queue is synchronous and thread-safe (`&self` everywhere): informer callbacks, the
//! scheduling loop and binding threads share one `Arc<SchedulingQueue>`. Time comes from a
//! [`Clock`] so that every timing rule is testable with [`testing::FakeClock`]; the periodic flushes
//! are called by the runtime ([`SchedulingQueue::flush_backoff_completed`] every second,
//! [`SchedulingQueue::flush_unschedulable_leftover`] every 30 s).
#![forbid(unsafe_code)]

mod affinity;
mod clock;
mod config;
mod events;
mod heap;
mod hints;
mod nominator;
mod pool_index;
mod queue;

#[cfg(test)]
mod tests;

pub use clock::{Clock, RealClock, testing};
pub use config::{
    BACKOFF_WINDOW, DEFAULT_MAX_IN_UNSCHEDULABLE, DEFAULT_POD_INITIAL_BACKOFF, DEFAULT_POD_MAX_BACKOFF,
    NoQueueObserver, QueueConfig, QueueConfigBuilder, QueueObserver, UNSCHEDULABLE_FLUSH_INTERVAL,
};
pub use events::{
    BACKOFF_COMPLETE, FORCE_ACTIVATE, POP_FROM_BACKOFF_Q, SCHEDULE_ATTEMPT_FAILURE, UNSCHEDULED_POD_ADD,
    UNSCHEDULED_POD_UPDATE, pod_scheduling_properties_change,
};
pub use queue::{
    DropReason, PendingPods, PodLocation, QueueError, Requeued, SchedulingQueue, backoff_duration,
};
