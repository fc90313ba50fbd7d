//! Controllers that run inside the control plane, as tokio tasks fed by the store's own event stream
//! (no HTTP in between): the garbage collector, the ResourceClaim controller, a fake kubelet, an
//! Event mirror (events.k8s.io/v1 → core v1), a PersistentVolume controller that also provisions,
//! and the Job controller (which makes gang Jobs Workloads and PodGroups).
//!
//! Each controller handles 410 Gone (it fell behind the event history) by resubscribing and
//! resynchronising from the current state.

pub mod claims;
pub mod events;
pub mod gc;
mod group_claims;
pub mod jobs;
pub mod kubelet;
pub mod volumes;

use serde_json::{Value, json};

pub use jobs::JobControllerConfig;
pub use kubelet::KubeletConfig;

use crate::store::{Store, Subscription, WatchEvent};
use crate::util::{self, get_path, get_str};

/// Which controllers run.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// Garbage collector: owner references, orphan/foreground finalizers, namespace contents.
    pub garbage_collector: bool,
    /// ResourceClaim controller.
    pub claim_controller: bool,
    /// Fake kubelet (None: pods stay Pending after binding).
    pub kubelet: Option<KubeletConfig>,
    /// Copy `events.k8s.io/v1` Events into core `v1` Events, so `kubectl get events` shows them.
    pub event_mirror: bool,
    /// PersistentVolume controller and provisioner (completes the volume bindings the scheduler
    /// decides).
    pub volume_controller: bool,
    /// Job controller (None: Jobs are stored and make no pods).
    pub job_controller: Option<JobControllerConfig>,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            garbage_collector: true,
            claim_controller: true,
            kubelet: Some(KubeletConfig::default()),
            event_mirror: true,
            volume_controller: true,
            job_controller: Some(JobControllerConfig::default()),
        }
    }
}

/// Starts the configured controllers; they stop when `shutdown` changes or its sender is dropped.
pub fn spawn(
    store: &Store,
    config: &ControllerConfig,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    if config.garbage_collector {
        tasks.push(tokio::spawn(gc::run(store.clone(), shutdown.clone())));
    }
    if config.claim_controller {
        tasks.push(tokio::spawn(claims::run(store.clone(), shutdown.clone())));
    }
    if config.event_mirror {
        tasks.extend(events::start(store.clone(), shutdown.clone()));
    }
    if config.volume_controller {
        tasks.push(tokio::spawn(volumes::run(store.clone(), shutdown.clone())));
    }
    if let Some(j) = &config.job_controller {
        tasks.push(tokio::spawn(jobs::run(
            store.clone(),
            j.clone(),
            shutdown.clone(),
        )));
    }
    if let Some(k) = &config.kubelet {
        tasks.push(tokio::spawn(kubelet::run(store.clone(), k.clone(), shutdown)));
    }
    tasks
}

/// What a controller loop got from its subscription.
pub(crate) enum Next {
    Event(WatchEvent),
    /// Fell behind the history: resubscribe and resync.
    Resync,
    Stop,
}

/// The next event, a resync request after 410 Gone, or Stop on shutdown.
pub(crate) async fn next_event(
    sub: &mut Subscription,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> Next {
    tokio::select! {
        r = sub.next() => match r {
            Ok(ev) => Next::Event(ev),
            Err(e) if e.code() == 410 => Next::Resync,
            Err(_) => Next::Stop,
        },
        _ = shutdown.changed() => Next::Stop,
    }
}

/// Whether a pod reached a terminal phase.
pub(crate) fn is_terminal(pod: &Value) -> bool {
    matches!(get_str(pod, &["status", "phase"]), Some("Succeeded" | "Failed"))
}

/// Records a core/v1 Event about `object` (best effort).
pub(crate) fn record_event(
    store: &Store,
    object: &Value,
    event_type: &str,
    reason: &str,
    message: &str,
    component: &str,
) {
    let ns = util::namespace_of(object);
    let ns = if ns.is_empty() { "default" } else { ns };
    let name = util::name_of(object);
    let now = util::now_rfc3339();
    let ev = json!({
        "metadata": {"generateName": format!("{name}."), "namespace": ns},
        "involvedObject": {
            "apiVersion": get_str(object, &["apiVersion"]).unwrap_or("v1"),
            "kind": get_str(object, &["kind"]).unwrap_or_default(),
            "name": name,
            "namespace": util::namespace_of(object),
            "uid": util::uid_of(object),
            "resourceVersion": get_path(object, &["metadata", "resourceVersion"]).cloned().unwrap_or(json!("")),
        },
        "reason": reason,
        "message": message,
        "type": event_type,
        "source": {"component": component},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "reportingComponent": component,
        "reportingInstance": component,
    });
    if let Err(e) = store.create("events", Some(ns), ev) {
        tracing::debug!(error = %e, reason, "could not record an event");
    }
}
