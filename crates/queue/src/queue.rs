//! The scheduling queue itself.
//!
//! Every pod the scheduler is responsible for and has not bound yet is in exactly one place:
//!
//! | place | what it means | how it leaves |
//! |---|---|---|
//! | activeQ | ready, ordered by the QueueSort plugin | `pop` |
//! | backoffQ | retried after a failure, waiting for its backoff | `flush_backoff_completed`, `pop` when activeQ is empty, `activate` |
//! | unschedulable | rejected, waiting for an event a rejecting plugin cares about | events through hints, `flush_unschedulable_leftover`, `activate`, its own updates |
//! | gated | refused by a PreEnqueue plugin (kept in the unschedulable pool, counted apart) | events the gating plugin registered, its own updates |
//! | in flight | popped, being scheduled or bound | `done`, `add_unschedulable_if_not_present` / `handle_failure` |
//! | done | `done` was called after a successful cycle; waiting for the watch to show it bound | `assigned_pod_added`, `delete`, or a binding failure requeues it |
//!
//! Events that arrive while pods are in flight are recorded and replayed through the hints when an
//! in-flight pod fails, because the event may be exactly what the pod needed and it will not come
//! again. Recorded events are dropped once no in-flight pod started before them.
//!
//! One mutex guards all of it (upstream splits it into four locks; one is simpler and the critical
//! sections are short). Hint functions and PreEnqueue plugins run under that lock and must not call
//! back into the queue. The nominator has its own read-write lock so the parallel Filter pass only
//! reads it. Lock order: queue state, then nominator.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, VecDeque},
    fmt,
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Pod;
use parking_lot::{Condvar, Mutex, RwLock};
use unisched_framework::{
    ActionType, ClusterEvent, EventObject, EventResource, Framework, PodInfo, PodNominator, QueuedPodInfo,
    SchedulingFailure, Status, well_known,
};

use crate::{
    affinity::{POD_TOPOLOGY_SPREAD, required_affinity_selects},
    config::{BACKOFF_WINDOW, QueueConfig},
    events::{
        BACKOFF_COMPLETE, FORCE_ACTIVATE, POP_FROM_BACKOFF_Q, SCHEDULE_ATTEMPT_FAILURE, UNSCHEDULED_POD_ADD,
        UNSCHEDULED_POD_UPDATE, is_wildcard, pod_scheduling_properties_change,
    },
    heap::{Keyed, KeyedHeap},
    hints::{ProfileHints, Strategy, precheck},
    nominator::Nominator,
    pool_index::PoolIndex,
};

impl Keyed for QueuedPodInfo {
    fn key(&self) -> &str {
        &self.pod_info.uid
    }
}

/// Where a pod is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PodLocation {
    /// In activeQ.
    Active,
    /// In backoffQ (rejected-pod or error backoff).
    Backoff,
    /// In the unschedulable pool, waiting for an event.
    Unschedulable,
    /// In the unschedulable pool because a PreEnqueue plugin refused it.
    Gated,
    /// Popped and not yet done or requeued.
    InFlight,
    /// Done after a successful cycle, not yet seen bound.
    Done,
}

impl PodLocation {
    /// The name used in logs and in the `scheduler_pending_pods{queue}` label (for the four queues).
    pub fn as_str(self) -> &'static str {
        match self {
            PodLocation::Active => "active",
            PodLocation::Backoff => "backoff",
            PodLocation::Unschedulable => "unschedulable",
            PodLocation::Gated => "gated",
            PodLocation::InFlight => "in-flight",
            PodLocation::Done => "done",
        }
    }
}

impl fmt::Display for PodLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Pod counts for `scheduler_pending_pods{queue}`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PendingPods {
    /// activeQ.
    pub active: usize,
    /// backoffQ (both heaps).
    pub backoff: usize,
    /// Unschedulable pool without the gated pods.
    pub unschedulable: usize,
    /// Gated pods.
    pub gated: usize,
    /// Popped, not done (not a `pending_pods` label; for debugging).
    pub in_flight: usize,
    /// Of `backoff`, the pods whose last [`REPEATED_ERRORS`] attempts or more each ended in an
    /// error, not a rejection (not a `pending_pods` label). Such a pod is retried for ever, as
    /// upstream retries it, and no event will change the outcome of a bad input (a pod group
    /// whose members' priorities differ, say): the simulator counts it as decided.
    pub repeated_errors: usize,
}

/// How many consecutive errors make a pod one of [`PendingPods::repeated_errors`]: two retries
/// (1 s and 2 s of backoff) are enough for an error of the moment (a lost response, a conflict)
/// to have passed.
pub const REPEATED_ERRORS: u32 = 3;

impl PendingPods {
    /// `(queue label, count)` for the metric.
    pub fn by_label(&self) -> [(&'static str, usize); 4] {
        [
            ("active", self.active),
            ("backoff", self.backoff),
            ("unschedulable", self.unschedulable),
            ("gated", self.gated),
        ]
    }
}

/// Why a failed pod was not requeued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// The pod was deleted while in flight.
    Deleted,
    /// The pod got a node meanwhile (bound by someone else, or an extender).
    Bound,
    /// The queue does not know the pod (deleted after `done`, or never popped).
    NotTracked,
}

/// What happened to a failed pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requeued {
    /// It is queued here.
    To(PodLocation),
    /// It is gone.
    Dropped(DropReason),
}

/// Queue errors.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QueueError {
    /// No profile was given.
    #[error("the scheduling queue needs at least one profile")]
    NoProfiles,
    /// Two profiles with one scheduler name.
    #[error("duplicate profile for scheduler name {0:?}")]
    DuplicateProfile(String),
    /// Profiles must share one QueueSort plugin, as upstream requires.
    #[error(
        "profiles must use the same queue sort plugin: {first:?} uses {first_sort:?}, {other:?} uses {other_sort:?}"
    )]
    QueueSortMismatch {
        /// First profile.
        first: String,
        /// Its QueueSort plugin.
        first_sort: String,
        /// The profile that differs.
        other: String,
        /// Its QueueSort plugin.
        other_sort: String,
    },
    /// A failed pod is already queued (a caller bug: it was requeued twice).
    #[error("pod {pod} is already present in the {queue} queue")]
    AlreadyPresent {
        /// `namespace/name`.
        pod: String,
        /// Where it is.
        queue: PodLocation,
    },
}

#[derive(Debug)]
struct InFlight {
    seq: u64,
    pod: Arc<PodInfo>,
    deleted: bool,
    /// The scheduler's own changes recorded before this sequence number are not replayed for
    /// the pod ([`SchedulingQueue::forget_own_events_so_far`]); cluster events are.
    own_events_before: u64,
}

#[derive(Debug)]
struct Recorded {
    seq: u64,
    event: ClusterEvent,
    old: Option<EventObject>,
    new: Option<EventObject>,
    /// Made by the scheduler's own in-memory change (see
    /// [`SchedulingQueue::move_all_for_own_change`]), not seen on a watch.
    own: bool,
}

#[derive(Debug, Default)]
struct State {
    active: KeyedHeap<QueuedPodInfo>,
    backoff: KeyedHeap<QueuedPodInfo>,
    error_backoff: KeyedHeap<QueuedPodInfo>,
    unschedulable: BTreeMap<String, QueuedPodInfo>,
    /// Which pooled pods an event can concern (see [`PoolIndex`]).
    pool_index: PoolIndex,
    gated: usize,
    in_flight: BTreeMap<String, InFlight>,
    events: VecDeque<Recorded>,
    next_seq: u64,
    /// Set while [`SchedulingQueue::move_all_for_own_change`] handles an event, so that it is
    /// recorded as the scheduler's own.
    handling_own_change: bool,
    done: BTreeMap<String, Arc<PodInfo>>,
    /// `namespace/name` → uid for every pod the queue tracks (for `activate`).
    keys: HashMap<String, String>,
    cycle: u64,
    closed: bool,
}

impl State {
    fn location(&self, uid: &str) -> Option<PodLocation> {
        if self.active.contains(uid) {
            Some(PodLocation::Active)
        } else if self.backoff.contains(uid) || self.error_backoff.contains(uid) {
            Some(PodLocation::Backoff)
        } else if let Some(q) = self.unschedulable.get(uid) {
            Some(if q.gating_plugin.is_some() {
                PodLocation::Gated
            } else {
                PodLocation::Unschedulable
            })
        } else if self.in_flight.get(uid).is_some_and(|f| !f.deleted) {
            Some(PodLocation::InFlight)
        } else if self.done.contains_key(uid) {
            Some(PodLocation::Done)
        } else {
            None
        }
    }

    fn queued(&self, uid: &str) -> Option<&QueuedPodInfo> {
        self.active
            .get(uid)
            .or_else(|| self.backoff.get(uid))
            .or_else(|| self.error_backoff.get(uid))
            .or_else(|| self.unschedulable.get(uid))
    }

    /// The newest pod object the queue has for `uid`.
    fn current_pod(&self, uid: &str) -> Option<Arc<PodInfo>> {
        self.queued(uid)
            .map(|q| q.pod_info.clone())
            .or_else(|| {
                self.in_flight
                    .get(uid)
                    .filter(|f| !f.deleted)
                    .map(|f| f.pod.clone())
            })
            .or_else(|| self.done.get(uid).cloned())
    }

    fn unsched_put(&mut self, qpi: QueuedPodInfo) {
        let uid = qpi.pod_info.uid.clone();
        // A pod already pooled is replaced: take it out first so the counter and index stay exact.
        self.unsched_take(&uid);
        if qpi.gating_plugin.is_some() {
            self.gated += 1;
        }
        self.pool_index.insert(&qpi);
        self.unschedulable.insert(uid, qpi);
    }

    fn unsched_take(&mut self, uid: &str) -> Option<QueuedPodInfo> {
        let q = self.unschedulable.remove(uid)?;
        self.pool_index.remove(&q);
        if q.gating_plugin.is_some() {
            self.gated -= 1;
        }
        Some(q)
    }

    fn forget_key(&mut self, pod: &PodInfo) {
        if self.keys.get(&pod.key()).is_some_and(|u| *u == pod.uid) {
            self.keys.remove(&pod.key());
        }
    }

    fn record(&mut self, event: ClusterEvent, old: Option<EventObject>, new: Option<EventObject>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let own = self.handling_own_change;
        self.events.push_back(Recorded {
            seq,
            event,
            old,
            new,
            own,
        });
    }

    /// Ends the pod's in-flight period and drops the events nobody in flight can need any more.
    fn finish_in_flight(&mut self, uid: &str) -> Option<InFlight> {
        let f = self.in_flight.remove(uid)?;
        self.drop_events_nobody_needs();
        Some(f)
    }

    /// Drops the recorded events older than every pod in flight.
    fn drop_events_nobody_needs(&mut self) {
        let oldest = self.in_flight.values().map(|f| f.seq).min();
        while self
            .events
            .front()
            .is_some_and(|e| oldest.is_none_or(|o| e.seq < o))
        {
            self.events.pop_front();
        }
    }
}

/// The scheduling queue. See the module documentation for the life of a pod.
pub struct SchedulingQueue {
    profiles: BTreeMap<String, Arc<Framework>>,
    hints: BTreeMap<String, ProfileHints>,
    sort: Arc<Framework>,
    config: QueueConfig,
    epoch: Instant,
    state: Mutex<State>,
    cond: Condvar,
    nominator: RwLock<Nominator>,
}

impl fmt::Debug for SchedulingQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchedulingQueue")
            .field("profiles", &self.profiles.keys().collect::<Vec<_>>())
            .field("pending", &self.pending_pods())
            .finish()
    }
}

type Less<'a> = Box<dyn Fn(&QueuedPodInfo, &QueuedPodInfo) -> bool + 'a>;

impl SchedulingQueue {
    /// A queue for these profiles. Pods are matched to a profile by `spec.schedulerName`; all
    /// profiles must use the same QueueSort plugin.
    pub fn new(profiles: Vec<Arc<Framework>>, config: QueueConfig) -> Result<Self, QueueError> {
        let Some(first) = profiles.first().cloned() else {
            return Err(QueueError::NoProfiles);
        };
        let mut by_name = BTreeMap::new();
        let mut hints = BTreeMap::new();
        for fwk in profiles {
            let name = fwk.profile_name().to_string();
            if fwk.queue_sort_name() != first.queue_sort_name() {
                return Err(QueueError::QueueSortMismatch {
                    first: first.profile_name().to_string(),
                    first_sort: first.queue_sort_name().to_string(),
                    other: name,
                    other_sort: fwk.queue_sort_name().to_string(),
                });
            }
            hints.insert(name.clone(), ProfileHints::from_framework(&fwk));
            if by_name.insert(name.clone(), fwk).is_some() {
                return Err(QueueError::DuplicateProfile(name));
            }
        }
        let epoch = config.clock.now();
        let key_fns = hints
            .values()
            .flat_map(ProfileHints::pod_key_fns)
            .cloned()
            .collect();
        let state = State {
            pool_index: PoolIndex::new(key_fns),
            ..State::default()
        };
        Ok(SchedulingQueue {
            profiles: by_name,
            hints,
            sort: first,
            config,
            epoch,
            state: Mutex::new(state),
            cond: Condvar::new(),
            nominator: RwLock::new(Nominator::default()),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &QueueConfig {
        &self.config
    }

    fn now(&self) -> Instant {
        self.config.clock.now()
    }

    // ---- backoff -------------------------------------------------------------------------------

    /// The backoff after `count` failures: `initial · 2^(count-1)`, capped at the maximum; zero for
    /// `count == 0` or when the maximum is zero.
    pub fn backoff_duration(&self, count: u32) -> Duration {
        backoff_duration(
            self.config.pod_initial_backoff,
            self.config.pod_max_backoff,
            count,
        )
    }

    fn align(&self, t: Instant) -> Instant {
        if !self.config.pop_from_backoff {
            return t;
        }
        match t.checked_duration_since(self.epoch) {
            Some(d) => {
                let window = BACKOFF_WINDOW.as_nanos();
                let floored = d.as_nanos() - d.as_nanos() % window;
                u64::try_from(floored).map_or(t, |n| self.epoch + Duration::from_nanos(n))
            }
            None => t,
        }
    }

    /// When the pod's backoff ends (`None`: it has none).
    pub fn backoff_expiry(&self, qpi: &QueuedPodInfo) -> Option<Instant> {
        if self.config.pod_max_backoff.is_zero() {
            return None;
        }
        let count = if qpi.consecutive_errors_count > 0 {
            qpi.consecutive_errors_count
        } else {
            qpi.unschedulable_count
        };
        if count == 0 {
            return None;
        }
        Some(self.align(qpi.timestamp + self.backoff_duration(count)))
    }

    fn backing_off(&self, qpi: &QueuedPodInfo, now: Instant) -> bool {
        match self.backoff_expiry(qpi) {
            None => false,
            // The whole current window is still backing off; it is flushed when it ends.
            Some(e) if self.config.pop_from_backoff => e >= self.align(now),
            Some(e) => e > now,
        }
    }

    /// How long until the next backoff window starts: the runtime flushes backoffQ then, and every
    /// [`BACKOFF_WINDOW`] after, so a whole window is released at once.
    pub fn until_next_backoff_window(&self) -> Duration {
        let now = self.now();
        let next = self.align(now) + BACKOFF_WINDOW;
        next.saturating_duration_since(now)
    }

    fn active_less(&self) -> Less<'_> {
        Box::new(move |a, b| self.sort.less(a, b))
    }

    fn backoff_less(&self) -> Less<'_> {
        Box::new(move |a, b| {
            let (ea, eb) = (self.backoff_expiry(a), self.backoff_expiry(b));
            if ea != eb {
                return ea < eb;
            }
            self.config.pop_from_backoff && self.sort.less(a, b)
        })
    }

    fn error_less(&self) -> Less<'_> {
        Box::new(move |a, b| self.backoff_expiry(a) < self.backoff_expiry(b))
    }

    // ---- plumbing ------------------------------------------------------------------------------

    fn profile_of(&self, pod: &PodInfo) -> Option<&Arc<Framework>> {
        self.profiles.get(pod.scheduler_name())
    }

    fn hints_of(&self, pod: &PodInfo) -> Option<&ProfileHints> {
        self.hints.get(pod.scheduler_name())
    }

    fn interested(&self, event: &ClusterEvent) -> bool {
        is_wildcard(event) || self.hints.values().any(|h| h.interested(event))
    }

    fn worth(
        &self,
        qpi: &QueuedPodInfo,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> Strategy {
        if let Some(s) = precheck(qpi, event, new) {
            return s;
        }
        match self.hints_of(&qpi.pod_info) {
            Some(h) => h.evaluate(qpi, event, old, new),
            None => Strategy::AfterBackoff,
        }
    }

    /// Runs PreEnqueue, the gating plugin first. Sets or clears `gating_plugin`.
    fn run_pre_enqueue(&self, qpi: &mut QueuedPodInfo) {
        let Some(fwk) = self.profile_of(&qpi.pod_info) else {
            qpi.gating_plugin = None;
            return;
        };
        if self.gate_still_holds(qpi) {
            return;
        }
        let status = fwk.run_pre_enqueue(&qpi.pod_info);
        if status.is_success() {
            qpi.gating_plugin = None;
            return;
        }
        let plugin = status.plugin().unwrap_or("PreEnqueue").to_string();
        tracing::debug!(pod = %qpi.pod_info.key(), %plugin, %status, "pod gated by PreEnqueue");
        self.report_gated(fwk, &qpi.pod_info, &plugin, &status);
        qpi.unschedulable_plugins.insert(plugin.clone());
        qpi.gating_plugin = Some(plugin);
    }

    /// The first step of [`Self::run_pre_enqueue`]: true when the plugin that gated the pod
    /// refuses it again (the refusal is reported). The pod is then left exactly as it was: no
    /// other plugin runs, and its rejectors already name the gate.
    fn gate_still_holds(&self, qpi: &QueuedPodInfo) -> bool {
        let Some(gate) = &qpi.gating_plugin else {
            return false;
        };
        let Some(fwk) = self.profile_of(&qpi.pod_info) else {
            return false;
        };
        let Some(plugin) = fwk.plugin(gate).and_then(|p| p.clone().as_pre_enqueue()) else {
            return false;
        };
        let status = plugin.pre_enqueue(&qpi.pod_info);
        if status.is_success() {
            return false;
        }
        // Told again: the same plugin may refuse for another reason now (a gang whose PodGroup
        // was deleted waits for the group, no longer for its quorum).
        self.report_gated(fwk, &qpi.pod_info, gate, &status);
        true
    }

    /// Whether every PreEnqueue plugin of the pod's profile lets it through now (nothing is
    /// recorded or reported).
    fn passes_pre_enqueue(&self, pod: &PodInfo) -> bool {
        self.profile_of(pod)
            .is_some_and(|fwk| fwk.run_pre_enqueue(pod).is_success())
    }

    /// Passes a PreEnqueue refusal on to the observer, unless its plugin opts out of telling.
    fn report_gated(&self, fwk: &Framework, pod: &PodInfo, plugin: &str, status: &Status) {
        let message = match fwk.plugin(plugin).and_then(|p| p.clone().as_pre_enqueue()) {
            Some(p) => p.rejection_message(pod, status),
            None => Some(status.message()),
        };
        if let Some(message) = message {
            self.config
                .observer
                .gated(pod, fwk.profile_name(), plugin, &message);
        }
    }

    /// Upstream `moveToActiveQ`: PreEnqueue (unless the pod comes straight from backoffQ, where it
    /// already ran), then activeQ, or the pool when gated. True when the pod is now in activeQ.
    fn move_to_active(
        &self,
        st: &mut State,
        mut qpi: QueuedPodInfo,
        event: &str,
        from_backoff: bool,
    ) -> bool {
        if !(self.config.pop_from_backoff && from_backoff) {
            self.run_pre_enqueue(&mut qpi);
        }
        let uid = qpi.pod_info.uid.clone();
        if qpi.gating_plugin.is_some() {
            if st.active.contains(&uid) || st.backoff.contains(&uid) || st.error_backoff.contains(&uid) {
                // Unreachable: callers take the pod out of every queue first.
                tracing::error!(pod = %qpi.pod_info.key(), "gated pod is already queued; keeping the queued copy");
                return false;
            }
            tracing::trace!(pod = %qpi.pod_info.key(), event, "pod moved to the unschedulable pool (gated)");
            self.pool_put(st, qpi, event);
            return false;
        }
        if qpi.initial_attempt_timestamp.is_none() {
            qpi.initial_attempt_timestamp = Some(self.now());
        }
        st.unsched_take(&uid);
        st.backoff.remove(&uid, &*self.backoff_less());
        st.error_backoff.remove(&uid, &*self.error_less());
        if event == UNSCHEDULED_POD_ADD || event == UNSCHEDULED_POD_UPDATE {
            self.nominator.write().add(qpi.pod_info.clone(), None);
        }
        tracing::trace!(pod = %qpi.pod_info.key(), event, "pod moved to activeQ");
        st.active.push(qpi, &*self.active_less());
        self.config.observer.incoming("active", event);
        true
    }

    /// Upstream `moveToBackoffQ`. True when the pod is now in backoffQ (false: gated).
    fn move_to_backoff(&self, st: &mut State, mut qpi: QueuedPodInfo, event: &str) -> bool {
        if self.config.pop_from_backoff {
            self.run_pre_enqueue(&mut qpi);
            if qpi.gating_plugin.is_some() {
                self.pool_put(st, qpi, event);
                return false;
            }
        }
        let uid = qpi.pod_info.uid.clone();
        st.unsched_take(&uid);
        tracing::trace!(pod = %qpi.pod_info.key(), event, "pod moved to backoffQ");
        if qpi.unschedulable_plugins.is_empty() && qpi.pending_plugins.is_empty() {
            st.backoff.remove(&uid, &*self.backoff_less());
            st.error_backoff.push(qpi, &*self.error_less());
        } else {
            st.error_backoff.remove(&uid, &*self.error_less());
            st.backoff.push(qpi, &*self.backoff_less());
        }
        self.config.observer.incoming("backoff", event);
        true
    }

    /// Puts a pod into the unschedulable pool, counting it as incoming when it was not there yet.
    fn pool_put(&self, st: &mut State, qpi: QueuedPodInfo, event: &str) {
        if !st.unschedulable.contains_key(&qpi.pod_info.uid) {
            self.config.observer.incoming("unschedulable", event);
        }
        st.unsched_put(qpi);
    }

    /// Reports `delta` for every plugin that rejected the pod in its last attempt.
    fn count_rejectors(&self, qpi: &QueuedPodInfo, delta: i64) {
        let profile = qpi.pod_info.scheduler_name();
        for plugin in qpi.unschedulable_plugins.union(&qpi.pending_plugins) {
            self.config.observer.unschedulable(plugin, profile, delta);
        }
    }

    /// Upstream `requeuePodWithQueueingStrategy`. Returns where the pod ended up.
    fn requeue(&self, st: &mut State, qpi: QueuedPodInfo, strategy: Strategy, event: &str) -> PodLocation {
        let uid = qpi.pod_info.uid.clone();
        match self.requeue_target(&qpi, strategy) {
            PodLocation::Active => {
                self.move_to_active(st, qpi, event, false);
            }
            PodLocation::Backoff => {
                self.move_to_backoff(st, qpi, event);
            }
            _ => self.pool_put(st, qpi, event),
        }
        st.location(&uid).unwrap_or(PodLocation::Unschedulable)
    }

    /// Where [`Self::requeue`] sends a pod with `strategy`, before PreEnqueue has its say: the
    /// pool (Skip), backoffQ (its backoff not over) or activeQ.
    fn requeue_target(&self, qpi: &QueuedPodInfo, strategy: Strategy) -> PodLocation {
        match strategy {
            Strategy::Skip => PodLocation::Unschedulable,
            Strategy::AfterBackoff if self.backing_off(qpi, self.now()) => PodLocation::Backoff,
            _ => PodLocation::Active,
        }
    }

    fn woke(&self, loc: PodLocation) -> bool {
        loc == PodLocation::Active || (self.config.pop_from_backoff && loc == PodLocation::Backoff)
    }

    /// Upstream `movePodsToActiveOrBackoffQueue`. Returns how many pods left the pool.
    fn move_pods(
        &self,
        st: &mut State,
        uids: Vec<String>,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> usize {
        if !self.interested(event) {
            return 0;
        }
        let pooled = uids.iter().filter_map(|uid| st.unschedulable.get_key_value(uid));
        let moves = self.decide_moves(pooled, event, old, new);
        self.apply_moves(st, moves, event, old, new)
    }

    /// [`Self::move_pods`] over the unschedulable pool (the pods `offered` accepts: upstream's
    /// `PreEnqueueCheck`, every pod for a plain event). Most events help few of the pooled
    /// pods, so the pool is walked by reference and only the uids of the pods that move are copied
    /// (copying every key per event was a tenth of the runtime's CPU with a few thousand pods
    /// waiting for their claims).
    fn move_pool(
        &self,
        st: &mut State,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
        offered: &dyn Fn(&QueuedPodInfo) -> bool,
    ) -> usize {
        if !self.interested(event) {
            return 0;
        }
        let moves = match self.pool_candidates(st, event, old, new) {
            Some(uids) => {
                let pooled = uids
                    .iter()
                    .filter_map(|uid| st.unschedulable.get_key_value(*uid))
                    .filter(|(_, q)| offered(q));
                let moves = self.decide_moves(pooled, event, old, new);
                #[cfg(test)]
                assert_eq!(
                    moves,
                    self.decide_moves(
                        st.unschedulable.iter().filter(|(_, q)| offered(q)),
                        event,
                        old,
                        new
                    ),
                    "the pool index left out a pod {event} moves"
                );
                moves
            }
            None => self.decide_moves(
                st.unschedulable.iter().filter(|(_, q)| offered(q)),
                event,
                old,
                new,
            ),
        };
        self.apply_moves(st, moves, event, old, new)
    }

    /// A superset of the pooled pods `event` can move, in pool order; `None` when that is about
    /// the whole pool anyway (a wildcard event, or more than half of the pool).
    fn pool_candidates<'a>(
        &self,
        st: &'a State,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> Option<BTreeSet<&'a str>> {
        if is_wildcard(event) {
            return None;
        }
        let mut out: BTreeSet<&str> = st.pool_index.unrejected().collect();
        for hints in self.hints.values() {
            hints.candidates(event, old, new, &st.pool_index, &mut out);
            // (Tests always narrow, so that every narrowed decision is checked against the walk.)
            if cfg!(not(test)) && out.len() * 2 > st.unschedulable.len() {
                return None;
            }
        }
        Some(out)
    }

    /// The pooled pods (uid, pod) that `event` moves, with how; the uids are copied only for them.
    fn decide_moves<'a>(
        &self,
        pooled: impl Iterator<Item = (&'a String, &'a QueuedPodInfo)>,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> Vec<(String, Strategy)> {
        pooled
            .filter_map(|(uid, q)| {
                let strategy = self.strategy_for(q, event, old, new);
                (strategy != Strategy::Skip).then(|| (uid.clone(), strategy))
            })
            .collect()
    }

    /// What `event` means for a pooled pod: a pod gated by PreEnqueue moves only when its gating
    /// plugin registered the event; otherwise the pre-check and the queueing hints decide.
    fn strategy_for(
        &self,
        q: &QueuedPodInfo,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> Strategy {
        if let Some(gate) = &q.gating_plugin
            && !self
                .hints_of(&q.pod_info)
                .is_some_and(|h| h.plugin_interested(gate, event))
        {
            return Strategy::Skip;
        }
        self.worth(q, event, old, new)
    }

    /// True when a pooled pod that `event` moves with `strategy` would be refused again by the
    /// PreEnqueue plugin that gated it, and is left in the pool as it is (counted as incoming to
    /// the pool, as [`Self::requeue`] would).
    ///
    /// Why: the move would take the pod out of the pool, run that plugin, and put the unchanged
    /// pod back, updating the pool index twice. A preempting gang's members are gated while their
    /// victims are deleted, and every deletion moves them all: in a 10-gang preemption of 1,000
    /// victims that churn was over a quarter of the scheduler's CPU. The decision is the one the
    /// full move makes: PreEnqueue would run on the way (to activeQ, or to backoffQ when popping
    /// from it is enabled) and stop at the gate.
    fn stays_gated(&self, st: &State, uid: &str, strategy: Strategy, event: &str) -> bool {
        let Some(q) = st.unschedulable.get(uid) else {
            return false;
        };
        if q.gating_plugin.is_none() {
            return false;
        }
        let checked_on_the_way = match self.requeue_target(q, strategy) {
            PodLocation::Active => true,
            PodLocation::Backoff => self.config.pop_from_backoff,
            _ => false,
        };
        if !checked_on_the_way || !self.gate_still_holds(q) {
            return false;
        }
        self.config.observer.incoming("unschedulable", event);
        true
    }

    /// Requeues the decided pods (in the order given), records the event for in-flight pods and
    /// wakes the scheduling loop when a pod became poppable. Returns how many left the pool.
    fn apply_moves(
        &self,
        st: &mut State,
        moves: Vec<(String, Strategy)>,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> usize {
        let mut moved = 0;
        let mut wake = false;
        for (uid, strategy) in moves {
            if self.stays_gated(st, &uid, strategy, event.label) {
                continue;
            }
            let Some(q) = st.unsched_take(&uid) else { continue };
            let loc = self.requeue(st, q, strategy, event.label);
            if !matches!(loc, PodLocation::Unschedulable | PodLocation::Gated) {
                moved += 1;
            }
            wake |= self.woke(loc);
        }
        if !st.in_flight.is_empty() {
            st.record(*event, old.cloned(), new.cloned());
        }
        if wake {
            self.cond.notify_all();
        }
        moved
    }

    // ---- informer-facing operations ------------------------------------------------------------

    /// A new unscheduled pod: activeQ, or the gated pool when a PreEnqueue plugin refuses it. A pod
    /// the queue already tracks is treated as an update. Pods whose `spec.schedulerName` matches no
    /// profile are ignored (false).
    pub fn add(&self, pod: Arc<PodInfo>) -> bool {
        if self.profile_of(&pod).is_none() {
            tracing::warn!(pod = %pod.key(), scheduler = pod.scheduler_name(), "pod for an unknown profile ignored");
            return false;
        }
        let mut st = self.state.lock();
        if st.location(&pod.uid).is_some() {
            self.update_locked(&mut st, None, pod);
            return true;
        }
        st.keys.insert(pod.key(), pod.uid.clone());
        let qpi = QueuedPodInfo::new(pod, self.now());
        if self.move_to_active(&mut st, qpi, UNSCHEDULED_POD_ADD, false) {
            self.cond.notify_all();
        }
        true
    }

    /// An unscheduled pod changed. `old` is the previous object (the queue's copy when `None`).
    ///
    /// In flight: the change is recorded (and replayed if the attempt fails) and the newer object is
    /// kept for the requeue. In activeQ or backoffQ: updated in place. In the pool: each specific
    /// update event runs through the hints, so removing a scheduling gate re-runs PreEnqueue. Unknown:
    /// added. A pod that now has a node has been bound and is removed, as [`Self::delete`].
    pub fn update(&self, old: Option<&Arc<PodInfo>>, new: Arc<PodInfo>) {
        if new.node_name().is_some() {
            self.delete(&new);
            return;
        }
        let mut st = self.state.lock();
        self.update_locked(&mut st, old.cloned(), new);
    }

    fn update_locked(&self, st: &mut State, old: Option<Arc<PodInfo>>, new: Arc<PodInfo>) {
        let uid = new.uid.clone();
        let old = old.or_else(|| st.current_pod(&uid));
        let events = match &old {
            Some(o) => pod_scheduling_properties_change(o, &new),
            None => vec![ClusterEvent::new(
                EventResource::UnscheduledPod,
                ActionType::UPDATE_OTHER,
                UNSCHEDULED_POD_UPDATE,
            )],
        };
        let old_obj = old.clone().map(EventObject::Pod);
        let new_obj = EventObject::Pod(new.clone());

        if let Some(f) = st.in_flight.get_mut(&uid).filter(|f| !f.deleted) {
            f.pod = new;
            for e in events {
                st.record(e, old_obj.clone(), Some(new_obj.clone()));
            }
            return;
        }
        if let Some(p) = st.done.get_mut(&uid) {
            *p = new;
            return;
        }
        let set = |q: &mut QueuedPodInfo| q.pod_info = new.clone();
        if st.active.update(&uid, &*self.active_less(), set)
            || st.backoff.update(&uid, &*self.backoff_less(), set)
            || st.error_backoff.update(&uid, &*self.error_less(), set)
        {
            self.nominator.write().update(old.as_ref().map(|o| &*o.pod), new);
            return;
        }
        if let Some(mut qpi) = st.unsched_take(&uid) {
            qpi.pod_info = new.clone();
            self.nominator.write().update(old.as_ref().map(|o| &*o.pod), new);
            let mut current = Some(qpi);
            for e in &events {
                let Some(q) = current.take() else { break };
                let strategy = self.worth(&q, e, old_obj.as_ref(), Some(&new_obj));
                if strategy == Strategy::Skip {
                    current = Some(q);
                    continue;
                }
                let loc = self.requeue(st, q, strategy, e.label);
                if self.woke(loc) {
                    self.cond.notify_all();
                }
                if !matches!(loc, PodLocation::Unschedulable | PodLocation::Gated) {
                    break;
                }
                current = st.unsched_take(&uid);
            }
            if let Some(q) = current {
                st.unsched_put(q);
            }
            return;
        }
        if self.profile_of(&new).is_none() {
            tracing::warn!(pod = %new.key(), scheduler = new.scheduler_name(), "pod for an unknown profile ignored");
            return;
        }
        st.keys.insert(new.key(), uid);
        let qpi = QueuedPodInfo::new(new, self.now());
        if self.move_to_active(st, qpi, UNSCHEDULED_POD_UPDATE, false) {
            self.cond.notify_all();
        }
    }

    /// The pod is gone (deleted, or bound and so no longer unscheduled). It leaves every queue and
    /// the nominator; an in-flight pod is marked so that its requeue drops it.
    pub fn delete(&self, pod: &PodInfo) {
        let mut st = self.state.lock();
        let uid = &pod.uid;
        self.nominator.write().delete(uid);
        if let Some(q) = st.queued(uid) {
            self.count_rejectors(q, -1);
        }
        st.active.remove(uid, &*self.active_less());
        st.backoff.remove(uid, &*self.backoff_less());
        st.error_backoff.remove(uid, &*self.error_less());
        st.unsched_take(uid);
        st.done.remove(uid);
        if let Some(f) = st.in_flight.get_mut(uid) {
            f.deleted = true;
        }
        st.forget_key(pod);
    }

    /// A pending pod that had a nominated node was deleted (upstream's
    /// `deletePodFromSchedulingQueue`). It leaves the queue like any deleted pod; and since pods of
    /// lower or equal priority counted it on its node as if it were bound there, the
    /// `AssignedPodDelete` event is offered to them, and only to them. Returns how many pods left
    /// the pool.
    pub fn nominated_pod_deleted(&self, pod: &Arc<PodInfo>) -> usize {
        self.delete(pod);
        self.nomination_left(pod)
    }

    /// A pending pod left the node it was nominated to (`pod` is the pod as it was there): its
    /// nomination changed or was cleared, or it was deleted. As upstream's
    /// `updatePodInSchedulingQueue`, that is an `AssignedPodDelete` on that node for the pods of
    /// lower or equal priority, which counted it there. Returns how many pods left the pool.
    pub fn nomination_left(&self, pod: &Arc<PodInfo>) -> usize {
        let priority = pod.priority;
        self.move_all(
            well_known::ASSIGNED_POD_DELETE,
            Some(EventObject::Pod(pod.clone())),
            None,
            false,
            &|q| q.pod_info.priority <= priority,
        )
    }

    /// A pod was bound to a node (seen by the watch). Its nomination ends, a pod of ours waiting in
    /// `Done` is forgotten, and waiting pods whose required affinity selects it (or that
    /// PodTopologySpread rejected, in its namespace) are offered the `AssignedPodAdd` event.
    pub fn assigned_pod_added(&self, pod: &Arc<PodInfo>) {
        let mut st = self.state.lock();
        self.nominator.write().delete(&pod.uid);
        if st.done.remove(&pod.uid).is_some() {
            st.forget_key(pod);
        }
        let candidates = cross_topology_candidates(&st, &pod.pod);
        let new = EventObject::Pod(pod.clone());
        self.move_pods(
            &mut st,
            candidates,
            &well_known::ASSIGNED_POD_ADD,
            None,
            Some(&new),
        );
    }

    /// A bound pod changed. Each specific update event is offered to the waiting pods: a scale-down
    /// to all of them (freed resources help anyone), anything else only to the cross-topology
    /// candidates, as upstream.
    pub fn assigned_pod_updated(&self, old: &Arc<PodInfo>, new: &Arc<PodInfo>) {
        let events = pod_scheduling_properties_change(old, new);
        let old_obj = EventObject::Pod(old.clone());
        let new_obj = EventObject::Pod(new.clone());
        let mut st = self.state.lock();
        for e in events {
            if e.action.intersects(ActionType::UPDATE_POD_SCALE_DOWN) {
                self.move_pool(&mut st, &e, Some(&old_obj), Some(&new_obj), &|_| true);
            } else {
                let candidates = cross_topology_candidates(&st, &new.pod);
                self.move_pods(&mut st, candidates, &e, Some(&old_obj), Some(&new_obj));
            }
        }
    }

    /// Offers a cluster event to every pod in the unschedulable pool (upstream
    /// `MoveAllToActiveOrBackoffQueue`). Events no plugin registered are dropped here, before any
    /// pod is looked at; the others are also recorded for in-flight pods. Returns how many pods left
    /// the pool.
    pub fn move_all_to_active_or_backoff(
        &self,
        event: ClusterEvent,
        old: Option<EventObject>,
        new: Option<EventObject>,
    ) -> usize {
        self.move_all(event, old, new, false, &|_| true)
    }

    /// [`Self::move_all_to_active_or_backoff`] for an event the scheduler made itself, by an
    /// in-memory change no watch shows (a claim allocation assumed, forgotten, or released
    /// unwritten). It moves pods as any event does; for pods in flight it is recorded as the
    /// scheduler's own, which [`Self::forget_own_events_so_far`] can leave out of their replay.
    pub fn move_all_for_own_change(
        &self,
        event: ClusterEvent,
        old: Option<EventObject>,
        new: Option<EventObject>,
    ) -> usize {
        self.move_all(event, old, new, true, &|_| true)
    }

    /// Offers `event` to the pooled pods `offered` accepts (upstream's `PreEnqueueCheck`; every pod
    /// for a plain cluster event), recording it for pods in flight as the scheduler's own change
    /// when `own` is set; the public moves above and [`Self::nomination_left`] are this.
    fn move_all(
        &self,
        event: ClusterEvent,
        old: Option<EventObject>,
        new: Option<EventObject>,
        own: bool,
        offered: &dyn Fn(&QueuedPodInfo) -> bool,
    ) -> usize {
        let start = Instant::now();
        let mut st = self.state.lock();
        if !self.interested(&event) {
            return 0;
        }
        st.handling_own_change = own;
        let moved = self.move_pool(&mut st, &event, old.as_ref(), new.as_ref(), offered);
        st.handling_own_change = false;
        drop(st);
        self.config.observer.event_handled(event.label, start.elapsed());
        moved
    }

    /// Moves pods (by `namespace/name`) from the pool or backoffQ straight to activeQ. A pod in
    /// flight gets a `ForceActivate` event recorded so that it is retried when it comes back.
    /// Unknown keys are ignored.
    pub fn activate<'a>(&self, keys: impl IntoIterator<Item = &'a str>) {
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let mut wake = false;
        for key in keys {
            let Some(uid) = st.keys.get(key).cloned() else {
                continue;
            };
            if let Some(q) = st.unsched_take(&uid) {
                wake |= self.move_to_active(st, q, FORCE_ACTIVATE, false);
                continue;
            }
            let from_backoff = st
                .backoff
                .remove(&uid, &*self.backoff_less())
                .or_else(|| st.error_backoff.remove(&uid, &*self.error_less()));
            if let Some(q) = from_backoff {
                wake |= self.move_to_active(st, q, FORCE_ACTIVATE, true);
                continue;
            }
            if let Some(pod) = st
                .in_flight
                .get(&uid)
                .filter(|f| !f.deleted)
                .map(|f| f.pod.clone())
            {
                st.record(well_known::FORCE_ACTIVATE, None, Some(EventObject::Pod(pod)));
            }
        }
        if wake {
            self.cond.notify_all();
        }
    }

    // ---- scheduler-facing operations -----------------------------------------------------------

    fn take_next(&self, st: &mut State) -> Option<QueuedPodInfo> {
        loop {
            let mut qpi = match st.active.pop(&*self.active_less()) {
                Some(q) => q,
                None if self.config.pop_from_backoff => {
                    let q = st.backoff.pop(&*self.backoff_less())?;
                    tracing::trace!(pod = %q.pod_info.key(), event = POP_FROM_BACKOFF_Q, "popped from backoffQ");
                    q
                }
                None => return None,
            };
            if st.in_flight.contains_key(&qpi.pod_info.uid) {
                tracing::error!(pod = %qpi.pod_info.key(), "the same pod is tracked in multiple places; discarding the queued copy");
                continue;
            }
            self.start_flight(st, &mut qpi);
            st.cycle += 1;
            return Some(qpi);
        }
    }

    /// A popped pod's attempt begins: counted, its rejectors cleared, in flight.
    fn start_flight(&self, st: &mut State, qpi: &mut QueuedPodInfo) {
        qpi.attempts += 1;
        self.count_rejectors(qpi, -1);
        qpi.unschedulable_plugins.clear();
        qpi.pending_plugins.clear();
        qpi.gating_plugin = None;
        let seq = st.next_seq;
        st.next_seq += 1;
        st.in_flight.insert(
            qpi.pod_info.uid.clone(),
            InFlight {
                seq,
                pod: qpi.pod_info.clone(),
                deleted: false,
                own_events_before: 0,
            },
        );
    }

    /// Leaves the scheduler's own changes recorded so far out of these in-flight pods' replay: a
    /// pod-group cycle that took its members' tentative reservations back caused those events
    /// itself (devices released), and replaying them would requeue the group at once, forever.
    /// Cluster events recorded meanwhile still count (a victim's claim deallocated while the group
    /// was tried must wake it: forgetting every event left such a gang waiting for the
    /// unschedulable-pods flush), and so does everything recorded from now until the requeue.
    pub fn forget_own_events_so_far<'a>(&self, uids: impl IntoIterator<Item = &'a str>) {
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let seq = st.next_seq;
        for uid in uids {
            if let Some(f) = st.in_flight.get_mut(uid) {
                f.own_events_before = seq;
            }
        }
    }

    /// Takes the other members of a popped pod's group out of the queue, wherever they wait
    /// (activeQ, backoff, or the unschedulable pool; not when gated by a PreEnqueue plugin), so
    /// that the group is decided in one cycle. They are in flight, as a popped pod is, until
    /// [`Self::done`] or a requeue. Uids the queue does not hold there are skipped.
    pub fn take_group_members<'a>(&self, uids: impl IntoIterator<Item = &'a str>) -> Vec<QueuedPodInfo> {
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let mut taken = Vec::new();
        for uid in uids {
            let queued =
                st.active
                    .remove(uid, &*self.active_less())
                    .or_else(|| st.backoff.remove(uid, &*self.backoff_less()))
                    .or_else(|| st.error_backoff.remove(uid, &*self.error_less()))
                    .or_else(|| {
                        // A gated member comes along once PreEnqueue lets it through: the member
                        // that completed the quorum can be popped before the event that releases
                        // the others has been handled, and the group is decided without them
                        // otherwise.
                        let ready = st.unschedulable.get(uid).is_some_and(|q| {
                            q.gating_plugin.is_none() || self.passes_pre_enqueue(&q.pod_info)
                        });
                        if ready {
                            st.unsched_take(uid).map(|mut q| {
                                q.gating_plugin = None;
                                q
                            })
                        } else {
                            None
                        }
                    });
            if let Some(mut qpi) = queued {
                self.start_flight(st, &mut qpi);
                taken.push(qpi);
            }
        }
        taken
    }

    /// Pops the next pod, waiting up to `timeout` (real time) for one. `None` on timeout or when the
    /// queue is closed and empty. The pod is in flight until [`Self::done`] or a requeue.
    pub fn pop(&self, timeout: Duration) -> Option<QueuedPodInfo> {
        let deadline = Instant::now().checked_add(timeout);
        let mut st = self.state.lock();
        loop {
            if let Some(q) = self.take_next(&mut st) {
                return Some(q);
            }
            if st.closed {
                return None;
            }
            let timed_out = match deadline {
                Some(d) => self.cond.wait_until(&mut st, d).timed_out(),
                None => {
                    self.cond.wait(&mut st);
                    false
                }
            };
            if timed_out {
                return self.take_next(&mut st);
            }
        }
    }

    /// Pops the next pod if there is one, without waiting.
    pub fn try_pop(&self) -> Option<QueuedPodInfo> {
        let mut st = self.state.lock();
        self.take_next(&mut st)
    }

    /// The attempt for this pod is over (called after PreBind on success, and on paths that drop the
    /// pod). A pod that is not requeued stays known as `Done` until the watch shows it bound or
    /// deleted, so that a later binding failure can still requeue it. Idempotent.
    pub fn done(&self, uid: &str) {
        let mut st = self.state.lock();
        if let Some(f) = st.finish_in_flight(uid) {
            if f.deleted {
                st.forget_key(&f.pod);
            } else {
                st.done.insert(uid.to_string(), f.pod);
            }
        }
    }

    /// Requeues a pod after a failed attempt (upstream `AddUnschedulableIfNotPresent`), and ends its
    /// in-flight period. `qpi.unschedulable_plugins`/`pending_plugins` must say who rejected it (both
    /// empty: an error). Counters: an error bumps `consecutive_errors_count`; a rejection bumps
    /// `unschedulable_count` and resets the errors. The events recorded while the pod was in flight
    /// are replayed through the hints: Skip → unschedulable pool, Queue → backoffQ (or activeQ when
    /// the backoff is over), Queue from a Pending plugin → activeQ. An error always goes to backoff.
    ///
    /// The newest object seen during the attempt replaces `qpi.pod_info`. A pod deleted or bound
    /// meanwhile, or unknown to the queue, is dropped.
    pub fn add_unschedulable_if_not_present(
        &self,
        mut qpi: QueuedPodInfo,
        scheduling_cycle: u64,
    ) -> Result<Requeued, QueueError> {
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let uid = qpi.pod_info.uid.clone();
        if let Some(queue) = st.queued(&uid).and(st.location(&uid)) {
            st.finish_in_flight(&uid);
            return Err(QueueError::AlreadyPresent {
                pod: qpi.pod_info.key(),
                queue,
            });
        }
        let (latest, deleted, since) = match (st.in_flight.get(&uid), st.done.remove(&uid)) {
            (Some(f), _) => (f.pod.clone(), f.deleted, Some((f.seq, f.own_events_before))),
            (None, Some(p)) => (p, false, None),
            (None, None) => return Ok(Requeued::Dropped(DropReason::NotTracked)),
        };
        if deleted || latest.node_name().is_some() {
            st.finish_in_flight(&uid);
            st.forget_key(&latest);
            let reason = if deleted {
                DropReason::Deleted
            } else {
                DropReason::Bound
            };
            tracing::debug!(pod = %latest.key(), ?reason, "failed pod not requeued");
            return Ok(Requeued::Dropped(reason));
        }
        qpi.pod_info = latest;
        let rejected = !(qpi.unschedulable_plugins.is_empty() && qpi.pending_plugins.is_empty());
        if rejected {
            qpi.unschedulable_count += 1;
            qpi.consecutive_errors_count = 0;
        } else {
            qpi.consecutive_errors_count += 1;
        }
        qpi.timestamp = self.now();
        qpi.gating_plugin = None;
        self.count_rejectors(&qpi, 1);

        let strategy = match since {
            Some((seq, own_events_before)) if rejected => {
                let mut strategy = Strategy::Skip;
                let replayed = st
                    .events
                    .iter()
                    .filter(|e| e.seq > seq && !(e.own && e.seq < own_events_before));
                for e in replayed {
                    match self.worth(&qpi, &e.event, e.old.as_ref(), e.new.as_ref()) {
                        Strategy::Skip => {}
                        Strategy::Immediately => {
                            strategy = Strategy::Immediately;
                            break;
                        }
                        Strategy::AfterBackoff => {
                            strategy = Strategy::AfterBackoff;
                            if qpi.pending_plugins.is_empty() {
                                break;
                            }
                        }
                    }
                }
                strategy
            }
            // An error, or a pod whose in-flight record is already gone (its events are unknown).
            _ => Strategy::AfterBackoff,
        };
        st.finish_in_flight(&uid);
        let key = qpi.pod_info.key();
        let loc = self.requeue(st, qpi, strategy, SCHEDULE_ATTEMPT_FAILURE);
        tracing::debug!(pod = %key, ?strategy, queue = %loc, scheduling_cycle, "pod requeued after a failed attempt");
        if self.woke(loc) {
            self.cond.notify_all();
        }
        Ok(Requeued::To(loc))
    }

    /// [`Self::add_unschedulable_if_not_present`] for a [`SchedulingFailure`]: copies its rejecting
    /// and pending plugins into `qpi`, requeues, then applies the failure's nomination (a node from
    /// PostFilter, `""` to clear, or none: keep `status.nominatedNodeName`).
    ///
    /// When `failure.released_assumed` is set the caller should also announce the freed room with
    /// `move_all_to_active_or_backoff(ASSIGNED_POD_DELETE, Some(assumed pod), None)`: only the caller
    /// has the assumed pod (with its node) that hints need.
    pub fn handle_failure(
        &self,
        mut qpi: QueuedPodInfo,
        failure: &SchedulingFailure,
    ) -> Result<Requeued, QueueError> {
        qpi.unschedulable_plugins = failure.unschedulable_plugins.clone();
        qpi.pending_plugins = failure.pending_plugins.clone();
        let pod = qpi.pod_info.clone();
        let cycle = self.scheduling_cycle();
        let result = self.add_unschedulable_if_not_present(qpi, cycle)?;
        if matches!(result, Requeued::To(_)) {
            self.add_nominated_pod(pod, failure.nominated_node.as_deref());
        }
        Ok(result)
    }

    /// Moves pods whose backoff is over from backoffQ to activeQ (upstream runs this every second,
    /// aligned to the backoff windows; see [`Self::until_next_backoff_window`]). Returns how many moved.
    pub fn flush_backoff_completed(&self) -> usize {
        let mut st = self.state.lock();
        let now = self.now();
        let mut ready = Vec::new();
        while st.backoff.peek().is_some_and(|q| !self.backing_off(q, now)) {
            ready.extend(st.backoff.pop(&*self.backoff_less()));
        }
        while st.error_backoff.peek().is_some_and(|q| !self.backing_off(q, now)) {
            ready.extend(st.error_backoff.pop(&*self.error_less()));
        }
        let mut moved = 0;
        for q in ready {
            if self.move_to_active(&mut st, q, BACKOFF_COMPLETE, true) {
                moved += 1;
            }
        }
        if moved > 0 {
            self.cond.notify_all();
        }
        moved
    }

    /// Retries pods that waited in the pool longer than `max_in_unschedulable` (upstream runs this
    /// every 30 s) with the `UnschedulableTimeout` event. Gated pods stay unless their gating plugin
    /// registered the wildcard event. Returns how many left the pool.
    pub fn flush_unschedulable_leftover(&self) -> usize {
        let mut st = self.state.lock();
        let now = self.now();
        let max = self.config.max_in_unschedulable;
        let stale: Vec<String> = st
            .unschedulable
            .iter()
            .filter(|(_, q)| now.saturating_duration_since(q.timestamp) > max)
            .map(|(uid, _)| uid.clone())
            .collect();
        if stale.is_empty() {
            return 0;
        }
        self.move_pods(&mut st, stale, &well_known::UNSCHEDULABLE_TIMEOUT, None, None)
    }

    /// Wakes every `pop` and makes them return `None` once the queue is empty.
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.cond.notify_all();
    }

    // ---- nominator -----------------------------------------------------------------------------

    /// Nominates the pod to `node` (`Some("")` clears), or with `None` to its
    /// `status.nominatedNodeName`. Ignored for pods the queue does not track or that have a node.
    pub fn add_nominated_pod(&self, pod: Arc<PodInfo>, node: Option<&str>) {
        let st = self.state.lock();
        let Some(current) = st.current_pod(&pod.uid) else {
            return;
        };
        if current.node_name().is_some() {
            return;
        }
        self.nominator.write().add(current, node);
    }

    /// Removes the pod's nomination (upstream does this once the pod is assumed).
    pub fn delete_nominated_pod_if_exists(&self, uid: &str) {
        self.nominator.write().delete(uid);
    }

    /// The node the pod is nominated to.
    pub fn nominated_node(&self, uid: &str) -> Option<String> {
        self.nominator.read().node_of(uid).map(str::to_string)
    }

    // ---- introspection -------------------------------------------------------------------------

    /// Counts per queue.
    pub fn pending_pods(&self) -> PendingPods {
        let st = self.state.lock();
        PendingPods {
            active: st.active.len(),
            backoff: st.backoff.len() + st.error_backoff.len(),
            unschedulable: st.unschedulable.len() - st.gated,
            gated: st.gated,
            in_flight: st.in_flight.values().filter(|f| !f.deleted).count(),
            repeated_errors: st
                .error_backoff
                .iter()
                .filter(|q| q.consecutive_errors_count >= REPEATED_ERRORS)
                .count(),
        }
    }

    /// Pods popped so far (upstream `SchedulingCycle`).
    pub fn scheduling_cycle(&self) -> u64 {
        self.state.lock().cycle
    }

    /// Where the pod with this uid is, if the queue tracks it.
    pub fn location(&self, uid: &str) -> Option<PodLocation> {
        self.state.lock().location(uid)
    }

    /// A copy of the queued entry (not for in-flight or done pods).
    pub fn get(&self, uid: &str) -> Option<QueuedPodInfo> {
        self.state.lock().queued(uid).cloned()
    }

    /// Uids of the pods in one place, in no particular order (activeQ and backoffQ in heap order).
    pub fn pods_in(&self, location: PodLocation) -> Vec<String> {
        let st = self.state.lock();
        let uids =
            |h: &KeyedHeap<QueuedPodInfo>| h.iter().map(|q| q.pod_info.uid.clone()).collect::<Vec<_>>();
        match location {
            PodLocation::Active => uids(&st.active),
            PodLocation::Backoff => {
                let mut v = uids(&st.backoff);
                v.extend(uids(&st.error_backoff));
                v
            }
            PodLocation::Unschedulable | PodLocation::Gated => st
                .unschedulable
                .values()
                .filter(|q| (q.gating_plugin.is_some()) == (location == PodLocation::Gated))
                .map(|q| q.pod_info.uid.clone())
                .collect(),
            PodLocation::InFlight => st
                .in_flight
                .iter()
                .filter(|(_, f)| !f.deleted)
                .map(|(u, _)| u.clone())
                .collect(),
            PodLocation::Done => st.done.keys().cloned().collect(),
        }
    }

    /// Recorded events still held for in-flight pods.
    pub fn in_flight_events(&self) -> usize {
        self.state.lock().events.len()
    }

    /// Checks the internal bookkeeping (every pod in one place, counters and indexes agree). For
    /// tests and debugging; O(pods).
    #[doc(hidden)]
    pub fn check_consistency(&self) -> Result<(), String> {
        let st = self.state.lock();
        check(&st)
    }
}

fn check(st: &State) -> Result<(), String> {
    let mut seen: BTreeMap<String, &str> = BTreeMap::new();
    let mut note = |uid: &str, place: &'static str| -> Result<(), String> {
        match seen.insert(uid.to_string(), place) {
            Some(other) => Err(format!("pod {uid} is in {other} and {place}")),
            None => Ok(()),
        }
    };
    for q in st.active.iter() {
        note(&q.pod_info.uid, "activeQ")?;
    }
    for q in st.backoff.iter() {
        note(&q.pod_info.uid, "backoffQ")?;
    }
    for q in st.error_backoff.iter() {
        note(&q.pod_info.uid, "errorBackoffQ")?;
    }
    for uid in st.unschedulable.keys() {
        note(uid, "unschedulable")?;
    }
    st.pool_index.check(st.unschedulable.iter())?;
    for (uid, f) in &st.in_flight {
        if !f.deleted {
            note(uid, "in-flight")?;
        }
    }
    for uid in st.done.keys() {
        note(uid, "done")?;
    }
    let gated = st
        .unschedulable
        .values()
        .filter(|q| q.gating_plugin.is_some())
        .count();
    if gated != st.gated {
        return Err(format!("gated counter {} but {gated} gated pods", st.gated));
    }
    for uid in seen.keys() {
        if !st.keys.values().any(|u| u == uid) {
            return Err(format!("pod {uid} has no key"));
        }
    }
    for (key, uid) in &st.keys {
        if !seen.contains_key(uid) {
            return Err(format!("key {key} points at untracked pod {uid}"));
        }
    }
    if let Some(oldest) = st.in_flight.values().map(|f| f.seq).min() {
        if st.events.front().is_some_and(|e| e.seq < oldest) {
            return Err("an event older than every in-flight pod was kept".into());
        }
    } else if !st.events.is_empty() {
        return Err(format!("{} events kept with nothing in flight", st.events.len()));
    }
    Ok(())
}

/// Whether a bound `pod` can concern the pooled pod `q`: `q`'s required affinity selects it, or
/// PodTopologySpread rejected `q` in its namespace (`ns`).
fn is_cross_topology_candidate(q: &QueuedPodInfo, ns: &str, pod: &Pod) -> bool {
    (q.unschedulable_plugins.contains(POD_TOPOLOGY_SPREAD) && q.pod_info.namespace == ns)
        || required_affinity_selects(&q.pod_info.pod, pod)
}

/// The pooled pods [`is_cross_topology_candidate`] selects for `pod`, in pool order. Only pods
/// PodTopologySpread rejected or with a required affinity term can be (the pool index lists
/// them), so a bind costs nothing per pod waiting for something else.
fn cross_topology_candidates(st: &State, pod: &Pod) -> Vec<String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let possible: BTreeSet<&str> = st
        .pool_index
        .rejected_by(POD_TOPOLOGY_SPREAD)
        .chain(st.pool_index.with_required_affinity())
        .collect();
    let selected: Vec<String> = possible
        .into_iter()
        .filter(|uid| {
            st.unschedulable
                .get(*uid)
                .is_some_and(|q| is_cross_topology_candidate(q, ns, pod))
        })
        .map(str::to_string)
        .collect();
    #[cfg(test)]
    {
        let walked: Vec<String> = st
            .unschedulable
            .iter()
            .filter(|(_, q)| is_cross_topology_candidate(q, ns, pod))
            .map(|(uid, _)| uid.clone())
            .collect();
        assert_eq!(
            selected, walked,
            "the pool index left out a cross-topology candidate"
        );
    }
    selected
}

/// `initial · 2^(count-1)` capped at `max` (overflow-safe); zero for `count == 0` or `max == 0`.
pub fn backoff_duration(initial: Duration, max: Duration, count: u32) -> Duration {
    if count == 0 || max.is_zero() {
        return Duration::ZERO;
    }
    let shift = count - 1;
    let (init, cap) = (initial.as_nanos(), max.as_nanos());
    if shift >= 64 || init > (cap >> shift) {
        return max;
    }
    u64::try_from(init << shift).map_or(max, Duration::from_nanos)
}

impl PodNominator for SchedulingQueue {
    fn nominated_pods_for_node(&self, node: &str) -> Vec<Arc<PodInfo>> {
        self.nominator.read().pods_for_node(node)
    }

    fn nominations(&self) -> std::collections::HashMap<String, Vec<Arc<PodInfo>>> {
        self.nominator.read().all()
    }
}

#[cfg(test)]
impl SchedulingQueue {
    pub(crate) fn nominated_count(&self) -> usize {
        self.nominator.read().len()
    }
}
