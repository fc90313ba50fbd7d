//! Kubernetes events (`events.k8s.io/v1`), written off the scheduling path and aggregated.
//!
//! The scheduling loop only pushes onto a bounded channel; a background task writes. When the
//! channel is full the event is dropped and counted (`unisched_events_dropped_total`), as client-go's
//! broadcaster does: losing an event is better than stalling scheduling. A repeat of the same
//! (object, reason, note) within six minutes becomes a PATCH of the first event's `series` instead
//! of a new object, so a pod stuck for hours produces one event with a count, not thousands.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::{core::v1::ObjectReference, events::v1::Event as ApiEvent},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;
use tokio::sync::mpsc;

use crate::{ApiWriter, Metrics};

/// How long a repeat is folded into the first event's series.
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

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

/// The sending side: cheap to clone, never blocks.
#[derive(Clone, Debug)]
pub struct EventRecorder {
    tx: mpsc::Sender<PodEvent>,
    metrics: Metrics,
    /// Events queued or being written.
    pending: Arc<AtomicUsize>,
}

impl EventRecorder {
    /// Queues an event; drops it (and counts the drop) when the queue is full.
    pub fn record(&self, event: PodEvent) {
        self.pending.fetch_add(1, Ordering::SeqCst);
        if self.tx.try_send(event).is_err() {
            self.pending.fetch_sub(1, Ordering::SeqCst);
            self.metrics.events_dropped.inc();
        }
    }

    /// Events queued or being written now.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::SeqCst)
    }

    /// Waits (at most `timeout`) until every queued event was written or given up on. Shutdown
    /// calls it while this replica still leads, so the last `Scheduled` events are not lost.
    /// Returns how many were still pending.
    pub async fn flush(&self, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        while self.pending() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.pending()
    }
}

/// Starts the background writer. `instance` identifies this replica (`reportingInstance`).
pub fn spawn_event_writer(
    writer: ApiWriter,
    metrics: Metrics,
    instance: String,
    capacity: usize,
) -> EventRecorder {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let pending = Arc::new(AtomicUsize::new(0));
    tokio::spawn(run(writer, instance, rx, pending.clone()));
    EventRecorder { tx, metrics, pending }
}

struct Seen {
    name: String,
    namespace: String,
    count: i32,
    first: Instant,
}

async fn run(
    writer: ApiWriter,
    instance: String,
    mut rx: mpsc::Receiver<PodEvent>,
    pending: Arc<AtomicUsize>,
) {
    let mut seen: HashMap<(String, String, String), Seen> = HashMap::new();
    while let Some(ev) = rx.recv().await {
        write_one(&writer, &instance, &mut seen, ev).await;
        pending.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn write_one(
    writer: &ApiWriter,
    instance: &str,
    seen: &mut HashMap<(String, String, String), Seen>,
    ev: PodEvent,
) {
    {
        let now = Instant::now();
        seen.retain(|_, s| now.duration_since(s.first) < SERIES_WINDOW);
        let key = (ev.uid.clone(), ev.reason.clone(), ev.note.clone());
        if let Some(s) = seen.get_mut(&key) {
            s.count += 1;
            let api: Api<ApiEvent> = Api::namespaced(writer.client().clone(), &s.namespace);
            let patch =
                json!({"series": {"count": s.count, "lastObservedTime": MicroTime(Timestamp::now())}});
            let name = s.name.clone();
            let result = writer
                .write("patch", "events", || {
                    let api = api.clone();
                    let patch = patch.clone();
                    let name = name.clone();
                    async move {
                        api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                            .await
                    }
                })
                .await;
            if let Err(e) = result {
                tracing::debug!(error = %e, "event series patch failed");
            }
            return;
        }
        let event = build_event(&ev, instance);
        let name = event.metadata.name.clone().unwrap_or_default();
        let api: Api<ApiEvent> = Api::namespaced(writer.client().clone(), &ev.namespace);
        let result = writer
            .write("create", "events", || {
                let api = api.clone();
                let event = event.clone();
                async move { api.create(&PostParams::default(), &event).await }
            })
            .await;
        match result {
            Ok(_) => {
                seen.insert(
                    key,
                    Seen {
                        name,
                        namespace: ev.namespace.clone(),
                        count: 1,
                        first: now,
                    },
                );
            }
            Err(e) => tracing::debug!(error = %e, "event create failed"),
        }
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
