//! Telling the user why a pod is held before it is ever tried.
//!
//! A pod a PreEnqueue plugin refuses never reaches a scheduling cycle, so the failure path that
//! writes `FailedScheduling` and `PodScheduled=False` never runs for it: a pod naming a
//! `resourceClaimName` that does not exist used to sit Pending with no word. The
//! queue reports every refusal to its observer; [`GateReporter`] passes the metric calls on to
//! [`Metrics`] and turns a refusal into a Warning `FailedScheduling` event and a
//! `PodScheduled=False` condition carrying the plugin's message (which names the missing claim).
//!
//! The queue calls the observer under its lock, every time the pod is checked again (each claim
//! or pod event re-runs PreEnqueue). So the reporter only remembers the last message per pod and
//! reports a message that differs from it; the event goes through the event recorder's channel
//! and the condition patch is spawned on the runtime, never written from the caller's thread. The
//! patch carries the pod's resourceVersion as seen by the queue, so a condition written late never
//! overwrites what a later scheduling attempt wrote (the simulator showed that race).
//! A plugin may opt out of a refusal (`PreEnqueuePlugin::rejection_message`, after KEP-5501), and
//! the queue then does not pass it on: `SchedulingGates` (the API server sets the `SchedulingGated`
//! condition) and DynamicResources while the claim controller has yet to create a claim from a
//! template.
//!
//! Only a refusal that lasts is reported: [`GATED_REPORT_GRACE`] after the first refusal the
//! reporter asks the queue whether the pod is still held by the same plugin, and writes the event
//! and the condition only then, with the pod as the queue holds it at that moment. Most refusals
//! are momentary (a claim created just before its pod has not reached the scheduler's watch yet)
//! and would otherwise put a Warning on a healthy pod. Waits on the claim controller are not
//! reported at all (above): when kube-apiserver is busy they outlast the grace for a third of the
//! pods, and reporting them cost an event and one or more status patches per such pod (measured
//! in the side-by-side run: 0.4 events and 0.7 status patches per pod that upstream did not send,
//! with kube-apiserver the bound).

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, OnceLock, Weak},
    time::Duration,
};

use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use serde_json::json;
use tokio::runtime::Handle;
use unisched_framework::PodInfo;
use unisched_queue::{QueueObserver, SchedulingQueue};

use crate::{
    events::{EventRecorder, EventType, PodEvent},
    metrics::Metrics,
    writer::ApiWriter,
};

/// How long a pod must stay held by the same PreEnqueue refusal before it is reported (see the
/// module documentation).
pub const GATED_REPORT_GRACE: Duration = Duration::from_secs(5);

/// Pods remembered at most; past this the memory is cleared (a repeat may then be reported once
/// more, nothing is lost).
const MAX_REMEMBERED: usize = 10_000;

/// The queue observer of the runtime. See the module documentation.
pub struct GateReporter {
    metrics: Metrics,
    events: EventRecorder,
    writer: ApiWriter,
    handle: Handle,
    /// Pod UID → the last message reported (or about to be) for it (shared with the patch tasks,
    /// which forget a message whose condition was not written).
    reported: Arc<Mutex<HashMap<String, String>>>,
    /// How long a refusal must last to be reported.
    grace: Duration,
    /// The queue asked after the grace whether the pod is still held ([`Self::attach`]).
    queue: OnceLock<Weak<SchedulingQueue>>,
    /// This reporter, for the delayed checks.
    me: Weak<GateReporter>,
}

impl fmt::Debug for GateReporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GateReporter")
            .field("reported", &self.reported.lock().len())
            .finish_non_exhaustive()
    }
}

impl GateReporter {
    /// A reporter writing through `writer` and `events` on `handle`, reporting refusals that last
    /// `grace` once [`Self::attach`] gave it the queue (before that, at once).
    pub fn new(
        metrics: Metrics,
        events: EventRecorder,
        writer: ApiWriter,
        handle: Handle,
        grace: Duration,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| GateReporter {
            metrics,
            events,
            writer,
            handle,
            reported: Arc::new(Mutex::new(HashMap::new())),
            grace,
            queue: OnceLock::new(),
            me: me.clone(),
        })
    }

    /// The queue whose refusals this reporter observes (it is built with the reporter as its
    /// observer, so it is handed over afterwards).
    pub fn attach(&self, queue: &Arc<SchedulingQueue>) {
        let _ = self.queue.set(Arc::downgrade(queue));
    }

    /// Forgets `message` for the pod if it is still the one remembered, so a later refusal with
    /// the same message is reported again.
    fn forget(reported: &Mutex<HashMap<String, String>>, uid: &str, message: &str) {
        let mut reported = reported.lock();
        if reported.get(uid).is_some_and(|m| m == message) {
            reported.remove(uid);
        }
    }

    /// After the grace: reports the refusal if the queue still holds the pod gated by `plugin`
    /// and no other refusal of it came since.
    async fn report_if_still_held(
        me: Weak<GateReporter>,
        queue: Weak<SchedulingQueue>,
        uid: String,
        profile: String,
        plugin: String,
        message: String,
        grace: Duration,
    ) {
        tokio::time::sleep(grace).await;
        let (Some(me), Some(queue)) = (me.upgrade(), queue.upgrade()) else {
            return;
        };
        if me.reported.lock().get(&uid) != Some(&message) {
            // A newer refusal replaced this one and has its own check pending.
            return;
        }
        match queue.get(&uid) {
            Some(q) if q.gating_plugin.as_deref() == Some(plugin.as_str()) => {
                me.report(&q.pod_info, &profile, &message);
            }
            // Scheduled, deleted, or let through: nothing to tell, and a later refusal with the
            // same words must be reported again.
            _ => Self::forget(&me.reported, &uid, &message),
        }
    }

    /// Whether `message` is new for the pod (and remembers it).
    fn first_time(&self, uid: &str, message: &str) -> bool {
        let mut reported = self.reported.lock();
        if reported.get(uid).is_some_and(|m| m == message) {
            return false;
        }
        if reported.len() >= MAX_REMEMBERED {
            reported.clear();
        }
        reported.insert(uid.to_string(), message.to_string());
        true
    }
}

impl QueueObserver for GateReporter {
    fn incoming(&self, queue: &'static str, event: &str) {
        self.metrics.incoming(queue, event);
    }

    fn unschedulable(&self, plugin: &str, profile: &str, delta: i64) {
        self.metrics.unschedulable(plugin, profile, delta);
    }

    fn event_handled(&self, event: &str, elapsed: Duration) {
        self.metrics.event_handled(event, elapsed);
    }

    fn gated(&self, pod: &PodInfo, profile: &str, plugin: &str, message: &str) {
        if !self.first_time(&pod.uid, message) {
            return;
        }
        match self.queue.get() {
            Some(queue) if !self.grace.is_zero() => {
                // Called under the queue's lock: the check runs later, on the runtime.
                self.handle.spawn(Self::report_if_still_held(
                    self.me.clone(),
                    queue.clone(),
                    pod.uid.clone(),
                    profile.to_string(),
                    plugin.to_string(),
                    message.to_string(),
                    self.grace,
                ));
            }
            _ => self.report(pod, profile, message),
        }
    }
}

impl GateReporter {
    /// Writes the Warning event and, unless the pod already carries it, the `PodScheduled=False`
    /// condition with `message`.
    fn report(&self, pod: &PodInfo, profile: &str, message: &str) {
        let already = pod
            .pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
            .is_some_and(|c| c.status == "False" && c.message.as_deref() == Some(message));
        self.events.record(PodEvent {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            type_: EventType::Warning,
            reason: "FailedScheduling".into(),
            action: "Scheduling".into(),
            note: message.to_string(),
            controller: profile.to_string(),
        });
        if already {
            return;
        }
        // The pod's resourceVersion as the queue saw it is a precondition: if the pod changed
        // since (the claim controller wrote its claim statuses, or a scheduling attempt wrote
        // its own condition), this condition may be stale and must not overwrite a newer one.
        // The change re-runs PreEnqueue, which reports again if the pod is still held.
        let mut status = json!({"status": {"conditions": [{
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastProbeTime": null,
            "lastTransitionTime": Timestamp::now().to_string(),
        }]}});
        if let Some(rv) = pod
            .pod
            .metadata
            .resource_version
            .as_deref()
            .filter(|rv| !rv.is_empty())
        {
            status["metadata"] = json!({"resourceVersion": rv});
        }
        let writer = self.writer.clone();
        let reported = self.reported.clone();
        let (ns, name, uid) = (pod.namespace.clone(), pod.name.clone(), pod.uid.clone());
        self.handle.spawn(async move {
            if let Err(e) = writer.patch_pod_status(&ns, &name, status).await {
                // Not written: let the next check of this pod report it again.
                reported.lock().remove(&uid);
                tracing::debug!(pod = %format!("{ns}/{name}"), error = %e, "patching PodScheduled condition of a gated pod");
            }
        });
    }
}
