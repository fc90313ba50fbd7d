//! Kubernetes events (`events.k8s.io/v1`), written off the scheduling path and aggregated.
//!
//! The scheduling loop only pushes onto a bounded queue; [`MAX_WRITES_IN_FLIGHT`] background
//! writers take events from it and write them through their own writer (own token bucket, so a
//! burst of events never delays a binding). One write at a time kept up with an idle API server,
//! but a busy kube-apiserver answers an event create in 10–20 ms: the side-by-side benchmark saw
//! one `Scheduled` event written for every four or five pods bound, the rest dropped, while
//! upstream's broadcaster (a goroutine per event) wrote them all. Events of one series key are
//! never written concurrently, so a repeat still becomes a series patch of the first event. A repeat of the same
//! (object, reason, note) within six minutes becomes a PATCH of the first event's `series` instead
//! of a new object, so a pod stuck for hours produces one event with a count, not thousands.
//!
//! The queue never blocks the scheduler: when it is full something is dropped and counted in
//! `unisched_events_dropped_total` (one count per lost occurrence), as client-go's broadcaster
//! does. What is dropped is chosen so that as little as possible is lost: a repeat of a queued
//! event takes no slot of its own (it is folded into the queued one and written with the summed
//! count), and a first occurrence evicts a queued repeat of an already written series before the
//! newcomer itself is dropped. Under a storm of `FailedScheduling` repeats the events that say
//! something new still get through; what is lost is a series count.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::{
        core::v1::ObjectReference,
        events::v1::{Event as ApiEvent, EventSeries},
    },
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::api::Patch;
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::Notify;

use crate::{
    metrics::Metrics,
    writer::{ApiWriter, create_for_metadata, patch_for_metadata},
};

/// Event writes under way at once (distinct series keys).
pub const MAX_WRITES_IN_FLIGHT: usize = 16;

/// How long a repeat is folded into the first event's series.
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// How often the writer drops series older than [`SERIES_WINDOW`] from its memory.
const PRUNE_EVERY: Duration = Duration::from_secs(1);

/// `Normal` or `Warning`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Informational.
    Normal,
    /// Something needs attention.
    Warning,
}

/// One event to record about a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodEvent {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Pod UID.
    pub uid: String,
    /// Normal or Warning.
    pub type_: EventType,
    /// `Scheduled`, `FailedScheduling`, …
    pub reason: String,
    /// `Binding`, `Scheduling`, …
    pub action: String,
    /// The message.
    pub note: String,
    /// The reporting controller (the profile's scheduler name).
    pub controller: String,
}

/// What identifies a series: repeats of the same key are folded into one event's `series`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SeriesKey {
    namespace: String,
    name: String,
    uid: String,
    reason: String,
    note: String,
}

impl SeriesKey {
    fn of(ev: &PodEvent) -> Self {
        SeriesKey {
            namespace: ev.namespace.clone(),
            name: ev.name.clone(),
            uid: ev.uid.clone(),
            reason: ev.reason.clone(),
            note: ev.note.clone(),
        }
    }
}

/// One queued event and how many occurrences were folded into it (at least 1).
#[derive(Debug)]
struct Queued {
    event: PodEvent,
    occurrences: i32,
}

/// What [`EventQueue::offer`] did with an event.
#[derive(Debug, PartialEq, Eq)]
enum Offer {
    /// Took a slot.
    Queued,
    /// Folded into the queued event of the same key (no slot taken).
    Folded,
    /// Took the slot of a queued repeat, which is dropped with its `occurrences`.
    EvictedRepeat { occurrences: i32 },
    /// The queue is full of events that are not repeats: the newcomer is dropped.
    Dropped,
}

/// The bounded queue between the scheduling loop and the event writer.
///
/// A plain bounded channel drops whatever arrives when it is full, and under faults it fills with
/// `FailedScheduling` repeats, so the first occurrences, the events that say something new, were
/// the ones lost. Here one key holds at most one slot (repeats are folded and written as one series
/// bump), and when the queue is full a first occurrence takes the slot of a queued repeat (an
/// event whose series the writer already created): losing a repeat loses only a count.
///
/// Finding a repeat to evict looks only at the events that were repeats when they were queued
/// (their series existed or was being written then): no other queued event can have become one,
/// since a series is created only by writing an event the queue no longer holds. When the API
/// server is the bottleneck the queue stays full of first occurrences (`Scheduled` of distinct
/// pods), and scanning all of them, hashing each key, on every new event was a tenth of the
/// runtime's CPU on a real control plane.
#[derive(Debug)]
struct EventQueue {
    capacity: usize,
    /// Queued keys in arrival order, by sequence number.
    order: BTreeMap<u64, SeriesKey>,
    entries: HashMap<SeriesKey, Queued>,
    /// Sequence numbers of the queued events that were repeats when queued.
    repeats: BTreeSet<u64>,
    next_seq: u64,
}

impl EventQueue {
    fn new(capacity: usize) -> Self {
        EventQueue {
            capacity: capacity.max(1),
            order: BTreeMap::new(),
            entries: HashMap::new(),
            repeats: BTreeSet::new(),
            next_seq: 0,
        }
    }

    fn len(&self) -> usize {
        self.order.len()
    }

    /// Queues `event`; `written` tells whether a key's series already exists on the server,
    /// `writing` whether an event of the key is being written now (its series will exist).
    fn offer(
        &mut self,
        event: PodEvent,
        written: impl Fn(&SeriesKey) -> bool,
        writing: impl Fn(&SeriesKey) -> bool,
    ) -> Offer {
        let key = SeriesKey::of(&event);
        if let Some(q) = self.entries.get_mut(&key) {
            q.occurrences = q.occurrences.saturating_add(1);
            return Offer::Folded;
        }
        let mut outcome = Offer::Queued;
        let repeat = written(&key);
        if self.order.len() >= self.capacity {
            if repeat {
                // A repeat never displaces anything.
                return Offer::Dropped;
            }
            let oldest_written = self
                .repeats
                .iter()
                .copied()
                .find(|seq| self.order.get(seq).is_some_and(&written));
            let Some(seq) = oldest_written else {
                return Offer::Dropped;
            };
            self.repeats.remove(&seq);
            let evicted = self.order.remove(&seq).and_then(|k| self.entries.remove(&k));
            outcome = Offer::EvictedRepeat {
                occurrences: evicted.map_or(1, |q| q.occurrences),
            };
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        if repeat || writing(&key) {
            self.repeats.insert(seq);
        }
        self.order.insert(seq, key.clone());
        self.entries.insert(
            key,
            Queued {
                event,
                occurrences: 1,
            },
        );
        outcome
    }

    /// The oldest queued event.
    #[cfg(test)]
    fn pop(&mut self) -> Option<(SeriesKey, Queued)> {
        self.pop_first(|_| true)
    }

    /// The oldest queued event whose key is `ready` (the writer passes over keys whose previous
    /// event is still being written).
    fn pop_first(&mut self, ready: impl Fn(&SeriesKey) -> bool) -> Option<(SeriesKey, Queued)> {
        let seq = self.order.iter().find(|(_, k)| ready(k)).map(|(seq, _)| *seq)?;
        let key = self.order.remove(&seq)?;
        self.repeats.remove(&seq);
        let queued = self.entries.remove(&key)?;
        Some((key, queued))
    }
}

/// A series the writer created: the event object and the occurrences it counts.
struct Seen {
    name: String,
    namespace: String,
    count: i32,
    first: Instant,
}

impl Seen {
    /// Created within [`SERIES_WINDOW`] of `now`: a new occurrence bumps this series.
    fn open_at(&self, now: Instant) -> bool {
        now.duration_since(self.first) < SERIES_WINDOW
    }
}

/// State shared by the recorders and the writer task, under one lock.
struct QueueState {
    queue: EventQueue,
    /// Series created within [`SERIES_WINDOW`], and some older ones not yet pruned: lookups
    /// check the window themselves.
    seen: HashMap<SeriesKey, Seen>,
    /// When `seen` was last pruned. Pruning walks the whole map, so it runs at most once per
    /// [`PRUNE_EVERY`] instead of on every write (with thousands of pods scheduled within the
    /// window, a walk per write made the writer's CPU grow with the square of the event rate).
    pruned: Instant,
    /// Keys of the events popped and being written.
    in_flight: std::collections::HashSet<SeriesKey>,
    /// Every recorder is gone: the writer ends once the queue is empty.
    closed: bool,
}

/// Whether the writer created `key`'s event within [`SERIES_WINDOW`] (a new occurrence would only
/// bump its series).
fn series_open(seen: &HashMap<SeriesKey, Seen>, key: &SeriesKey) -> bool {
    seen.get(key).is_some_and(|s| s.open_at(Instant::now()))
}

struct Shared {
    state: Mutex<QueueState>,
    wake: Notify,
    /// Woken each time a write ends, so [`EventRecorder::flush`] looks again without polling.
    written: Notify,
}

/// Closes the queue when the last [`EventRecorder`] clone is dropped.
struct CloseOnDrop(Arc<Shared>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.state.lock().closed = true;
        self.0.wake.notify_waiters();
    }
}

/// The sending side: cheap to clone, never blocks.
#[derive(Clone)]
pub struct EventRecorder {
    shared: Arc<Shared>,
    metrics: Metrics,
    _close: Arc<CloseOnDrop>,
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder")
            .field("pending", &self.pending())
            .finish()
    }
}

impl EventRecorder {
    /// Queues an event. A repeat of a queued event is folded into it; when the queue is full, a
    /// first occurrence takes the place of a queued repeat, and only if there is none is it
    /// dropped. Every lost occurrence is counted in `unisched_events_dropped_total`.
    pub fn record(&self, event: PodEvent) {
        let outcome = {
            let mut guard = self.shared.state.lock();
            let st = &mut *guard;
            let (seen, writing) = (&st.seen, &st.in_flight);
            st.queue
                .offer(event, |k| series_open(seen, k), |k| writing.contains(k))
        };
        match outcome {
            Offer::Queued => self.shared.wake.notify_one(),
            Offer::Folded => {}
            Offer::EvictedRepeat { occurrences } => {
                self.metrics
                    .events_dropped
                    .inc_by(u64::try_from(occurrences).unwrap_or(1));
                self.shared.wake.notify_one();
            }
            Offer::Dropped => self.metrics.events_dropped.inc(),
        }
    }

    /// Events queued or being written now (folded repeats count once).
    pub fn pending(&self) -> usize {
        let st = self.shared.state.lock();
        st.queue.len() + st.in_flight.len()
    }

    /// Waits (at most `timeout`) until every queued event was written or given up on. Shutdown
    /// calls it while this replica still leads, so the last `Scheduled` events are not lost.
    /// Returns how many were still pending.
    pub async fn flush(&self, timeout: Duration) -> usize {
        let flushed = async {
            loop {
                // Registered before looking, so a write ending between the look and the wait
                // still wakes this flush.
                let written = self.shared.written.notified();
                tokio::pin!(written);
                written.as_mut().enable();
                if self.pending() == 0 {
                    return;
                }
                written.await;
            }
        };
        let _ = tokio::time::timeout(timeout, flushed).await;
        self.pending()
    }
}

/// Starts the background writer. `instance` identifies this replica (`reportingInstance`);
/// `capacity` bounds the queue (distinct events, repeats folded).
pub fn spawn_event_writer(
    writer: ApiWriter,
    metrics: Metrics,
    instance: String,
    capacity: usize,
) -> EventRecorder {
    let shared = Arc::new(Shared {
        state: Mutex::new(QueueState {
            queue: EventQueue::new(capacity),
            seen: HashMap::new(),
            pruned: Instant::now(),
            in_flight: Default::default(),
            closed: false,
        }),
        wake: Notify::new(),
        written: Notify::new(),
    });
    let instance: Arc<str> = instance.into();
    for _ in 0..MAX_WRITES_IN_FLIGHT {
        tokio::spawn(write_loop(writer.clone(), instance.clone(), shared.clone()));
    }
    EventRecorder {
        shared: shared.clone(),
        metrics,
        _close: Arc::new(CloseOnDrop(shared)),
    }
}

/// One of the [`MAX_WRITES_IN_FLIGHT`] writers: takes the first queued event whose series no
/// other writer is writing, writes it, and looks again; sleeps while there is none, and ends once
/// the queue is closed and holds nothing it could take. A fixed set of writers rather than a task
/// per event: spawning and joining a task whose future holds a whole request was a quarter of the
/// event path's CPU in the embedded benchmark's profile.
async fn write_loop(writer: ApiWriter, instance: Arc<str>, shared: Arc<Shared>) {
    loop {
        // Registered before looking, so that an event queued (or the close) after the look still
        // wakes this writer.
        let notified = shared.wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let next = {
            let mut guard = shared.state.lock();
            let st = &mut *guard;
            let in_flight = &st.in_flight;
            let next = st.queue.pop_first(|k| !in_flight.contains(k));
            match &next {
                Some((key, _)) => {
                    st.in_flight.insert(key.clone());
                }
                // What is left belongs to series other writers are writing; they take it.
                None if st.closed => return,
                None => {}
            }
            next
        };
        match next {
            Some((key, queued)) => {
                write_one(&writer, &instance, &shared, key.clone(), queued).await;
                shared.state.lock().in_flight.remove(&key);
                shared.written.notify_waiters();
            }
            None => notified.await,
        }
    }
}

async fn write_one(writer: &ApiWriter, instance: &str, shared: &Shared, key: SeriesKey, queued: Queued) {
    let Queued {
        event: ev,
        occurrences,
    } = queued;
    let series = {
        let mut st = shared.state.lock();
        let now = Instant::now();
        if now.duration_since(st.pruned) >= PRUNE_EVERY {
            st.seen.retain(|_, s| s.open_at(now));
            st.pruned = now;
        }
        st.seen.get_mut(&key).filter(|s| s.open_at(now)).map(|s| {
            // Counted even if the patch fails: the next one carries the true total.
            s.count = s.count.saturating_add(occurrences);
            (s.name.clone(), s.namespace.clone(), s.count)
        })
    };
    // Neither write reads its reply: both ask for the event's metadata only.
    if let Some((name, namespace, count)) = series {
        let patch = Patch::Merge(
            json!({"series": {"count": count, "lastObservedTime": MicroTime(Timestamp::now())}}),
        );
        let result = writer
            .write("patch", "events", || {
                patch_for_metadata::<ApiEvent>(writer.client(), Some(&namespace), &name, None, &patch)
            })
            .await;
        if let Err(e) = result {
            tracing::debug!(error = %e, "event series patch failed");
        }
        return;
    }
    let mut event = build_event(&ev, instance);
    if occurrences > 1 {
        // Repeats folded before the first one was written: the event starts as a series.
        event.series = Some(EventSeries {
            count: occurrences,
            last_observed_time: MicroTime(Timestamp::now()),
        });
    }
    let name = event.metadata.name.clone().unwrap_or_default();
    let result = writer
        .write("create", "events", || {
            create_for_metadata(writer.client(), Some(&ev.namespace), &event)
        })
        .await;
    match result {
        Ok(_) => {
            shared.state.lock().seen.insert(
                key,
                Seen {
                    name,
                    namespace: ev.namespace.clone(),
                    count: occurrences,
                    first: Instant::now(),
                },
            );
        }
        Err(e) => tracing::debug!(error = %e, "event create failed"),
    }
}

/// The API object for an event (name `<pod>.<unique hex>`, like client-go).
pub fn build_event(ev: &PodEvent, instance: &str) -> ApiEvent {
    let now = Timestamp::now();
    let suffix = format!("{:x}", now.as_nanosecond());
    ApiEvent {
        metadata: ObjectMeta {
            name: Some(format!("{}.{suffix}", ev.name)),
            namespace: Some(ev.namespace.clone()),
            ..Default::default()
        },
        event_time: Some(MicroTime(now)),
        action: Some(ev.action.clone()),
        reason: Some(ev.reason.clone()),
        note: Some(ev.note.clone()),
        type_: Some(match ev.type_ {
            EventType::Normal => "Normal".into(),
            EventType::Warning => "Warning".into(),
        }),
        reporting_controller: Some(ev.controller.clone()),
        reporting_instance: Some(instance.to_string()),
        regarding: Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(ev.namespace.clone()),
            name: Some(ev.name.clone()),
            uid: (!ev.uid.is_empty()).then(|| ev.uid.clone()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::collections::HashSet;

    use serde_json::Value;
    use unisched_sim::{ApiServer, Store};

    use super::*;
    use crate::writer::LeaderFlag;

    fn event(pod: &str, reason: &str, note: &str) -> PodEvent {
        PodEvent {
            namespace: "default".into(),
            name: pod.into(),
            uid: format!("uid-{pod}"),
            type_: EventType::Warning,
            reason: reason.into(),
            action: "Scheduling".into(),
            note: note.into(),
            controller: "unisched".into(),
        }
    }

    #[test]
    fn the_queue_folds_repeats_and_evicts_repeats_before_first_occurrences() {
        let mut q = EventQueue::new(3);
        let written: HashSet<SeriesKey> = ["a", "b", "c"]
            .iter()
            .map(|p| SeriesKey::of(&event(p, "FailedScheduling", "no fit")))
            .collect();
        let is_written = |k: &SeriesKey| written.contains(k);
        // Repeats of written series fill the queue; more repeats of them fold.
        for pod in ["a", "b", "c", "a", "a", "b"] {
            let outcome = q.offer(event(pod, "FailedScheduling", "no fit"), is_written, |_| false);
            assert!(
                matches!(outcome, Offer::Queued | Offer::Folded),
                "{pod}: {outcome:?}"
            );
        }
        assert_eq!(q.len(), 3, "one slot per key");
        // A repeat of a written series never displaces anything.
        let late = event("x", "FailedScheduling", "no fit");
        let mut written_x = written.clone();
        written_x.insert(SeriesKey::of(&late));
        assert_eq!(
            q.offer(late, |k| written_x.contains(k), |_| false),
            Offer::Dropped
        );
        // Each first occurrence takes the oldest repeat's slot (a: 3 occurrences, then b: 2, c: 1).
        let cases = [("d", 3), ("e", 2), ("f", 1)];
        for (pod, evicted) in cases {
            assert_eq!(
                q.offer(event(pod, "Scheduled", "bound"), is_written, |_| false),
                Offer::EvictedRepeat { occurrences: evicted },
                "{pod}"
            );
        }
        // Full of first occurrences: now the newcomer is the one dropped.
        assert_eq!(
            q.offer(event("g", "Scheduled", "bound"), is_written, |_| false),
            Offer::Dropped
        );
        let order: Vec<String> = std::iter::from_fn(|| q.pop().map(|(_, e)| e.event.name)).collect();
        assert_eq!(order, ["d", "e", "f"]);
    }

    #[test]
    fn a_repeat_queued_while_its_first_occurrence_is_written_can_be_evicted() {
        let mut q = EventQueue::new(2);
        let a = event("a", "FailedScheduling", "no fit");
        let a_key = SeriesKey::of(&a);
        // `a`'s first occurrence is being written: neither its series exists nor is it queued.
        assert_eq!(q.offer(a, |_| false, |k| *k == a_key), Offer::Queued);
        assert_eq!(
            q.offer(event("b", "Scheduled", "bound"), |_| false, |_| false),
            Offer::Queued
        );
        // Not written yet: nothing to evict.
        assert_eq!(
            q.offer(event("c", "Scheduled", "bound"), |_| false, |_| false),
            Offer::Dropped
        );
        // The write finished: `a` is now a repeat of an existing series and gives up its slot.
        let written = |k: &SeriesKey| *k == a_key;
        assert_eq!(
            q.offer(event("d", "Scheduled", "bound"), written, |_| false),
            Offer::EvictedRepeat { occurrences: 1 }
        );
        let order: Vec<String> = std::iter::from_fn(|| q.pop().map(|(_, e)| e.event.name)).collect();
        assert_eq!(order, ["b", "d"]);
        assert!(q.repeats.is_empty() && q.entries.is_empty());
    }

    /// The events.k8s.io Events the writer created, as (pod, reason, count). Read from that
    /// resource itself, not from the core Events the embedded server's mirror controller copies
    /// them to: the mirror runs on its own and may not have copied the last writes yet.
    fn events_in(store: &Store) -> Vec<(String, String, i64)> {
        let mut out: Vec<_> = store
            .list_all("events.events.k8s.io", Some("default"))
            .unwrap()
            .iter()
            .map(|e| {
                let e: Value = e.to_value();
                let pod = e["regarding"]["name"].as_str().unwrap_or_default().to_string();
                let reason = e["reason"].as_str().unwrap_or_default().to_string();
                // A single occurrence has no series.
                let count = e["series"]["count"].as_i64().unwrap_or(1);
                (pod, reason, count)
            })
            .collect();
        out.sort();
        out
    }

    /// A current-thread runtime: the writer task runs only when the test awaits, so the queue can
    /// be filled deterministically.
    #[tokio::test]
    async fn first_occurrences_get_through_a_full_queue_of_repeats_and_repeats_fold_into_the_series() {
        let server = ApiServer::builder()
            .build()
            .serve("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
        let metrics = Metrics::new().unwrap();
        let writer = ApiWriter::new(client, -1.0, 1, metrics.clone(), LeaderFlag::new(true));
        let recorder = spawn_event_writer(writer, metrics.clone(), "test".into(), 3);
        let failed = |pod: &str| event(pod, "FailedScheduling", "0/1 nodes are available");
        for pod in ["a", "b", "c"] {
            recorder.record(failed(pod));
        }
        assert_eq!(recorder.flush(Duration::from_secs(10)).await, 0);
        // The queue fills with repeats of written series (a three times, folded into one slot)…
        for pod in ["a", "a", "a", "b", "c"] {
            recorder.record(failed(pod));
        }
        assert_eq!(recorder.pending(), 3);
        // …and three first occurrences still get in, each taking a repeat's slot.
        for pod in ["d", "e", "f"] {
            recorder.record(event(pod, "Scheduled", "Successfully assigned"));
        }
        assert_eq!(recorder.pending(), 3);
        assert_eq!(metrics.events_dropped.get(), 5, "a's 3 + b's 1 + c's 1 lost");
        assert_eq!(recorder.flush(Duration::from_secs(10)).await, 0);
        // Repeats queued behind an event fold into it: one patch with the summed count.
        for _ in 0..4 {
            recorder.record(failed("a"));
        }
        assert_eq!(recorder.pending(), 1);
        // Repeats folded before the first write: the event is created as a series.
        for _ in 0..3 {
            recorder.record(failed("g"));
        }
        assert_eq!(recorder.flush(Duration::from_secs(10)).await, 0);
        assert_eq!(
            events_in(server.store()),
            vec![
                ("a".into(), "FailedScheduling".into(), 5),
                ("b".into(), "FailedScheduling".into(), 1),
                ("c".into(), "FailedScheduling".into(), 1),
                ("d".into(), "Scheduled".into(), 1),
                ("e".into(), "Scheduled".into(), 1),
                ("f".into(), "Scheduled".into(), 1),
                ("g".into(), "FailedScheduling".into(), 3),
            ]
        );
        drop(recorder);
        server.shutdown().await;
    }

    /// A busy API server answers each event write late. The writer keeps several writes under way
    /// (one at a time fell behind and dropped most `Scheduled` events in the side-by-side run),
    /// never more than its limit, and never two of one series: a repeat that arrives while its
    /// first event is being created still becomes a series patch, not a second event.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_server_gets_concurrent_writes_and_series_stay_one_event() {
        let server = ApiServer::builder()
            .build()
            .serve("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        server
            .faults()
            .slow_down("", "/events", Duration::from_millis(100));
        let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
        let metrics = Metrics::new().unwrap();
        let writer = ApiWriter::new(client, -1.0, 1, metrics.clone(), LeaderFlag::new(true));
        let recorder = spawn_event_writer(writer, metrics.clone(), "test".into(), 1000);
        let failed = || event("x", "FailedScheduling", "0/1 nodes are available");
        recorder.record(failed());
        for i in 0..40 {
            recorder.record(event(&format!("p{i:02}"), "Scheduled", "Successfully assigned"));
        }
        // x's create is (normally) under way now; its repeats queue behind it.
        tokio::time::sleep(Duration::from_millis(20)).await;
        recorder.record(failed());
        recorder.record(failed());
        assert_eq!(recorder.flush(Duration::from_secs(30)).await, 0);
        let peak = server.faults().peak_held();
        assert!(peak > 1, "event writes were sequential (peak {peak})");
        assert!(peak <= MAX_WRITES_IN_FLIGHT as u64, "peak {peak} over the limit");
        let mut want: Vec<(String, String, i64)> = (0..40)
            .map(|i| (format!("p{i:02}"), "Scheduled".to_string(), 1))
            .collect();
        want.push(("x".into(), "FailedScheduling".into(), 3));
        want.sort();
        assert_eq!(events_in(server.store()), want);
        assert_eq!(metrics.events_dropped.get(), 0);
        drop(recorder);
        server.shutdown().await;
    }
}
