//! Queue settings.
//!
//! The defaults are upstream's (`podInitialBackoffSeconds: 1`, `podMaxBackoffSeconds: 10`, 5 minutes
//! in the unschedulable pool). A builder, because the runtime sets the backoffs from
//! `KubeSchedulerConfiguration` while tests mostly only swap the clock.

use std::{fmt, sync::Arc, time::Duration};

use crate::clock::{Clock, RealClock};

/// Upstream `DefaultPodInitialBackoffDuration`.
pub const DEFAULT_POD_INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// Upstream `DefaultPodMaxBackoffDuration`.
pub const DEFAULT_POD_MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Upstream `DefaultPodMaxInUnschedulablePodsDuration`.
pub const DEFAULT_MAX_IN_UNSCHEDULABLE: Duration = Duration::from_secs(5 * 60);
/// How often upstream flushes the unschedulable pool (`flushUnschedulablePodsLeftover`).
pub const UNSCHEDULABLE_FLUSH_INTERVAL: Duration = Duration::from_secs(30);
/// The backoff ordering window, which is also the backoff flush interval.
pub const BACKOFF_WINDOW: Duration = Duration::from_secs(1);

/// Settings of a [`crate::SchedulingQueue`].
#[derive(Clone, Debug)]
pub struct QueueConfig {
    /// Backoff after the first failed attempt.
    pub pod_initial_backoff: Duration,
    /// Backoff cap. Zero disables backoff entirely.
    pub pod_max_backoff: Duration,
    /// A rejected pod is retried after this long even if no event woke it.
    pub max_in_unschedulable: Duration,
    /// Upstream's `SchedulerPopFromBackoffQ` (beta, on by default): pop a backing-off rejected pod
    /// when activeQ is empty, run PreEnqueue when a pod enters backoffQ rather than when it leaves,
    /// and align backoff expiry to 1 s ordering windows. Off gives the older exact-expiry behaviour.
    pub pop_from_backoff: bool,
    /// Where "now" comes from.
    pub clock: Arc<dyn Clock>,
    /// Receives the queue's metric events (the runtime turns them into Prometheus metrics).
    pub observer: Arc<dyn QueueObserver>,
}

/// What the queue reports for upstream's queue metrics.
pub trait QueueObserver: Send + Sync + fmt::Debug {
    /// A pod entered `queue` (`active`, `backoff`, `unschedulable`) because of `event`
    /// (`scheduler_queue_incoming_pods_total`).
    fn incoming(&self, _queue: &'static str, _event: &str) {}
    /// `delta` pods of `profile` were rejected by `plugin` and wait for a retry (+1 when a rejected
    /// pod is requeued, -1 when it is popped or deleted; `scheduler_unschedulable_pods`).
    fn unschedulable(&self, _plugin: &str, _profile: &str, _delta: i64) {}
    /// A cluster event the queue is interested in was handled in `elapsed`
    /// (`scheduler_event_handling_duration_seconds`).
    fn event_handled(&self, _event: &str, _elapsed: Duration) {}
    /// PreEnqueue `plugin` of `profile` refused `pod`, and `message` is what the plugin wants the
    /// user told ([`unisched_framework::PreEnqueuePlugin::rejection_message`]; refusals it opts
    /// out of are not passed on). Called every time the pod is checked, under the queue's lock: it
    /// must not block; the runtime reports each distinct message once, off the scheduling cycle.
    fn gated(&self, _pod: &unisched_framework::PodInfo, _profile: &str, _plugin: &str, _message: &str) {}
}

/// The observer that ignores everything (the default).
#[derive(Debug)]
pub struct NoQueueObserver;
impl QueueObserver for NoQueueObserver {}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            pod_initial_backoff: DEFAULT_POD_INITIAL_BACKOFF,
            pod_max_backoff: DEFAULT_POD_MAX_BACKOFF,
            max_in_unschedulable: DEFAULT_MAX_IN_UNSCHEDULABLE,
            pop_from_backoff: true,
            clock: Arc::new(RealClock),
            observer: Arc::new(NoQueueObserver),
        }
    }
}

impl QueueConfig {
    /// A builder starting from the defaults.
    pub fn builder() -> QueueConfigBuilder {
        QueueConfigBuilder {
            config: QueueConfig::default(),
        }
    }
}

/// Builds a [`QueueConfig`].
#[derive(Clone, Debug)]
pub struct QueueConfigBuilder {
    config: QueueConfig,
}

impl QueueConfigBuilder {
    /// Backoff after the first failed attempt.
    #[must_use]
    pub fn pod_initial_backoff(mut self, d: Duration) -> Self {
        self.config.pod_initial_backoff = d;
        self
    }

    /// Backoff cap (zero disables backoff).
    #[must_use]
    pub fn pod_max_backoff(mut self, d: Duration) -> Self {
        self.config.pod_max_backoff = d;
        self
    }

    /// Both backoffs from `podInitialBackoffSeconds`/`podMaxBackoffSeconds` (negative values count as 0).
    #[must_use]
    pub fn backoff_seconds(self, initial: i64, max: i64) -> Self {
        let secs = |s: i64| Duration::from_secs(u64::try_from(s).unwrap_or(0));
        self.pod_initial_backoff(secs(initial)).pod_max_backoff(secs(max))
    }

    /// How long a rejected pod may wait for an event before it is retried anyway.
    #[must_use]
    pub fn max_in_unschedulable(mut self, d: Duration) -> Self {
        self.config.max_in_unschedulable = d;
        self
    }

    /// Upstream `SchedulerPopFromBackoffQ` behaviour (default on).
    #[must_use]
    pub fn pop_from_backoff(mut self, on: bool) -> Self {
        self.config.pop_from_backoff = on;
        self
    }

    /// The clock (default: [`RealClock`]).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.config.clock = clock;
        self
    }

    /// The configuration.
    /// Where the queue reports its metric events.
    #[must_use]
    pub fn observer(mut self, observer: Arc<dyn QueueObserver>) -> Self {
        self.config.observer = observer;
        self
    }

    pub fn build(self) -> QueueConfig {
        self.config
    }
}
