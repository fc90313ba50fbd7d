//! DefaultPreemption's side effects: the PodDisruptionBudget watch it reads and the API writes it
//! asks for.
//!
//! [`PdbStore`] keeps every `policy/v1` PodDisruptionBudget (fed by a watch through the generic
//! [`Handler`]) and is the plugin's [`PdbLister`]. [`RuntimePreemptor`] is the plugin's
//! [`Preemptor`]: the scheduling cycle hands it a plan and goes on; the writes run as tokio tasks
//! through the [`ApiWriter`] (leader check, rate limit, retries), as upstream's asynchronous
//! preemption does. Per victim: patch its status with the `DisruptionTarget` condition (so the
//! kubelet and controllers know why it goes, and the preemptor does not preempt again while it
//! terminates), then delete it, then record a `Preempted` event. Lower-priority pods nominated to
//! the node get their `nominatedNodeName` cleared. All writes are patches or deletes, never PUTs.
//!
//! The preemptor is let go (no longer held in PreEnqueue, and activated if it was held) only once
//! the scheduler's cache has seen its victims go, not as soon as the deletions are written: a
//! cycle that still saw them would preempt them again (the writes then fail, they are gone) and
//! leave the preemptor in the unschedulable pool waiting for deletion events that already came.
//! Upstream's PreEnqueue reads its pod informer for the last victim for the same reason.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::{core::v1::Pod, policy::v1::PodDisruptionBudget},
    jiff::Timestamp,
};
use kube::api::DeleteParams;
use parking_lot::{Mutex, RwLock};
use tokio::{runtime::Handle, sync::Notify};
use unisched_framework::{Code, PodInfo};
use unisched_plugins::{PdbLister, PreemptionPlan, Preemptor, default_preemption::EVENT_PREEMPTED};

use crate::{
    events::{EventRecorder, EventType, PodEvent},
    informers::Handler,
    metrics::{Metrics, TASK_ERROR, TASK_SUCCESS},
    writer::{ApiWriter, WriteError, delete_for_metadata},
};

/// PodDisruptionBudgets by `namespace/name`.
#[derive(Debug, Default)]
pub struct PdbStore {
    pdbs: RwLock<HashMap<String, Arc<PodDisruptionBudget>>>,
}

impl PdbStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many budgets are known (the watch tests check it).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.pdbs.read().len()
    }

    /// True when no budget is known.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.pdbs.read().is_empty()
    }
}

fn pdb_key(p: &PodDisruptionBudget) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or_default(),
        p.metadata.name.as_deref().unwrap_or_default()
    )
}

impl PdbLister for PdbStore {
    fn list(&self) -> Vec<Arc<PodDisruptionBudget>> {
        let map = self.pdbs.read();
        let mut keys: Vec<&String> = map.keys().collect();
        // Sorted so that the budgets' order (which affects nothing but is visible in debugging)
        // does not depend on hashing.
        keys.sort();
        keys.into_iter().filter_map(|k| map.get(k).cloned()).collect()
    }
}

/// Feeds a [`PdbStore`] from a watch. PDB changes requeue nothing: they only steer which victims a
/// later preemption picks, as upstream.
#[derive(Debug)]
pub struct PdbHandler {
    store: Arc<PdbStore>,
}

impl PdbHandler {
    /// A handler over `store`.
    pub fn new(store: Arc<PdbStore>) -> Self {
        PdbHandler { store }
    }
}

impl Handler for PdbHandler {
    type Obj = PodDisruptionBudget;

    fn key(obj: &PodDisruptionBudget) -> String {
        pdb_key(obj)
    }

    fn apply(&self, obj: PodDisruptionBudget) {
        self.store.pdbs.write().insert(pdb_key(&obj), Arc::new(obj));
    }

    fn delete(&self, key: &str) {
        self.store.pdbs.write().remove(key);
    }

    fn known_keys(&self) -> Vec<String> {
        self.store.pdbs.read().keys().cloned().collect()
    }
}

/// Executes preemption plans asynchronously and records the preemption metrics.
#[derive(Clone)]
pub struct RuntimePreemptor {
    writer: ApiWriter,
    handle: Handle,
    events: EventRecorder,
    metrics: Metrics,
    /// Preemptors whose evictions are still being written.
    in_flight: Arc<Mutex<HashSet<String>>>,
    /// Of those, the ones PreEnqueue held: they are activated when their evictions are written.
    held: Arc<Mutex<HashSet<String>>>,
    /// Moves a held pod (`namespace/name`) back to the active queue (the queue is made after the
    /// plugins, so it is set later: [`RuntimePreemptor::activate_with`]).
    activate: Arc<parking_lot::RwLock<Option<ActivateFn>>>,
    /// Whether a victim is still in the scheduler's cache (the cache is made after the plugins
    /// too: [`RuntimePreemptor::victims_known_with`]).
    known: Arc<parking_lot::RwLock<Option<KnownFn>>>,
    /// Woken whenever a bound pod leaves the cache ([`RuntimePreemptor::victim_left`]): the
    /// writes waiting for their victims to go look again then, rather than on a timer.
    left: Arc<Notify>,
}

/// Moves a pod, by `namespace/name`, to the active queue.
pub type ActivateFn = Arc<dyn Fn(&str) + Send + Sync>;

/// Whether a pod, by UID, is still in the scheduler's cache.
pub type KnownFn = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// How long the victims may stay in the cache once their deletions are written before the
/// preemptor is let go anyway (a deletion that failed leaves its victim there for good).
const VICTIMS_GONE_WAIT: Duration = Duration::from_secs(5);

impl RuntimePreemptor {
    /// A preemptor writing through `writer` on `handle`.
    pub fn new(writer: ApiWriter, handle: Handle, events: EventRecorder, metrics: Metrics) -> Self {
        RuntimePreemptor {
            writer,
            handle,
            events,
            metrics,
            in_flight: Arc::new(Mutex::new(HashSet::new())),
            held: Arc::new(Mutex::new(HashSet::new())),
            activate: Arc::default(),
            known: Arc::default(),
            left: Arc::new(Notify::new()),
        }
    }

    /// How the victims are known to have left the scheduler's cache.
    pub fn victims_known_with(&self, known: KnownFn) {
        *self.known.write() = Some(known);
    }

    /// A bound pod left the scheduler's cache: preemptions waiting for their victims to go look
    /// again.
    pub fn victim_left(&self) {
        self.left.notify_waiters();
    }

    /// How a pod held in PreEnqueue is let go once its evictions are written.
    pub fn activate_with(&self, activate: ActivateFn) {
        *self.activate.write() = Some(activate);
    }
}

impl std::fmt::Debug for RuntimePreemptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimePreemptor")
            .field("in_flight", &self.in_flight.lock().len())
            .field("held", &self.held.lock().len())
            .finish_non_exhaustive()
    }
}

async fn delete_pod(writer: &ApiWriter, ns: &str, name: &str) -> Result<(), WriteError> {
    let params = DeleteParams::default();
    match writer
        .write("delete", "pods", || {
            let params = &params;
            async move {
                delete_for_metadata::<Pod>(writer.client(), Some(ns), name, params)
                    .await
                    .map(|_| ())
            }
        })
        .await
    {
        // Already gone: the eviction's goal is met.
        Err(WriteError::NotFound(_)) => Ok(()),
        other => other,
    }
}

/// Evicts one victim; false when it could not be deleted (a victim already gone counts as
/// evicted).
async fn evict(writer: ApiWriter, events: EventRecorder, plan: Arc<PreemptionPlan>, victim: usize) -> bool {
    let Some(v) = plan.victims.get(victim) else {
        return true;
    };
    let (ns, name) = (v.namespace.as_str(), v.name.as_str());
    let patch = plan.victim_status_patch(&Timestamp::now().to_string());
    match writer.patch_pod_status(ns, name, patch).await {
        Ok(()) => {}
        Err(WriteError::NotFound(_)) => return true,
        // The condition is informative; the deletion is what frees the node, so go on.
        Err(e) => tracing::warn!(pod = %v.key(), error = %e, "setting DisruptionTarget on preemption victim"),
    }
    if let Err(e) = delete_pod(&writer, ns, name).await {
        tracing::warn!(pod = %v.key(), error = %e, "deleting preemption victim");
        return false;
    }
    events.record(preempted_event(&plan, v));
    true
}

/// The `Preempted` event on a victim.
fn preempted_event(plan: &PreemptionPlan, v: &PodInfo) -> PodEvent {
    PodEvent {
        namespace: v.namespace.clone(),
        name: v.name.clone(),
        uid: v.uid.clone(),
        type_: EventType::Normal,
        reason: EVENT_PREEMPTED.into(),
        action: "Preempting".into(),
        note: plan.event_note(),
        controller: plan.scheduler_name.clone(),
    }
}

/// Waits until none of the plan's victims is in the cache any more (or [`VICTIMS_GONE_WAIT`]),
/// looking again each time a bound pod leaves the cache.
async fn victims_gone(plan: &PreemptionPlan, known: Option<KnownFn>, left: Arc<Notify>) {
    let Some(known) = known else { return };
    let deadline = tokio::time::Instant::now() + VICTIMS_GONE_WAIT;
    // A victim gone from the cache does not come back: each is looked for until it is gone.
    let mut next = 0;
    while let Some(v) = plan.victims.get(next) {
        // Registered before the look, so a pod that leaves between the look and the wait still
        // wakes it.
        let woken = left.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        if !known(&v.uid) {
            next += 1;
        } else if tokio::time::timeout_at(deadline, woken).await.is_err() {
            tracing::debug!(pod = %v.key(), "preemption victim still in the cache; letting the preemptor go");
            return;
        }
    }
}

async fn clear_nomination(writer: ApiWriter, ns: String, name: String) {
    let patch = PreemptionPlan::clear_nomination_patch();
    match writer.patch_pod_status(&ns, &name, patch).await {
        Ok(()) | Err(WriteError::NotFound(_)) => {}
        Err(e) => tracing::debug!(pod = %format!("{ns}/{name}"), error = %e, "clearing nominatedNodeName"),
    }
}

impl Preemptor for RuntimePreemptor {
    fn attempted(&self) {
        self.metrics.preemption_attempts.inc();
    }

    fn group_attempted(&self, result: Code) {
        self.metrics
            .workload
            .workload_preemption_attempts
            .with_label_values(&[result.as_str()])
            .inc();
    }

    fn evaluated(&self, preemptor_type: &'static str, result: Code, elapsed: Duration) {
        self.metrics
            .workload
            .preemption_evaluated(preemptor_type, result, elapsed);
    }

    fn execute(&self, plan: PreemptionPlan) {
        let victims = plan.victims.len() + plan.rejected_at_permit.len();
        // Upstream counts a group's victims apart from a pod's.
        if plan.group.is_none() {
            self.metrics
                .preemption_victims
                .with_label_values::<&str>(&[])
                .observe(victims as f64);
        }
        self.metrics.workload.preemption_chosen(
            plan.preemptor_type(),
            victims,
            plan.counts.pdb_violations,
            plan.counts.group_disruptions,
        );
        tracing::info!(
            pod = %plan.preemptor.key(),
            pod_group = plan.group.as_ref().map(|g| g.key.as_str()).unwrap_or_default(),
            node = %plan.node,
            victims = plan.victims.len(),
            "preempting"
        );
        // Rejected at Permit by the plugin already: nothing to write but the event.
        for v in &plan.rejected_at_permit {
            self.events.record(preempted_event(&plan, v));
        }
        let plan = Arc::new(plan);
        let uid = plan.preemptor_id().to_string();
        self.in_flight.lock().insert(uid.clone());
        let (writer, events, in_flight) = (self.writer.clone(), self.events.clone(), self.in_flight.clone());
        let (held, activate) = (self.held.clone(), self.activate.clone());
        let metrics = self.metrics.workload.clone();
        let known = self.known.read().clone();
        let left = self.left.clone();
        self.handle.spawn(async move {
            let started = Instant::now();
            // Victims in parallel; the nominations once the victims are on their way out.
            let evictions =
                (0..plan.victims.len()).map(|i| evict(writer.clone(), events.clone(), plan.clone(), i));
            let evicted = futures::future::join_all(evictions).await;
            let result = if evicted.iter().all(|ok| *ok) {
                TASK_SUCCESS
            } else {
                TASK_ERROR
            };
            metrics.preemption_executed(plan.preemptor_type(), result, started.elapsed());
            let clears = plan
                .clear_nominations
                .iter()
                .map(|p| clear_nomination(writer.clone(), p.namespace.clone(), p.name.clone()));
            futures::future::join_all(clears).await;
            victims_gone(&plan, known, left).await;
            // In this order: a PreEnqueue that checks after the removal lets the pod through; one
            // that checked before marked it held, and it is activated here.
            in_flight.lock().remove(&uid);
            let was_held = held.lock().remove(&uid);
            if was_held && let Some(activate) = activate.read().clone() {
                for pod in plan.waiting_pods() {
                    activate(&pod);
                }
            }
        });
    }

    fn is_preempting(&self, pod_uid: &str) -> bool {
        self.in_flight.lock().contains(pod_uid)
    }

    fn holds_until_preempted(&self, pod_uid: &str) -> bool {
        // Both locks, in the spawned task's order, so a hold is never recorded after the task
        // looked for it.
        let in_flight = self.in_flight.lock();
        if !in_flight.contains(pod_uid) {
            return false;
        }
        self.held.lock().insert(pod_uid.to_string());
        true
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn pdb(ns: &str, name: &str) -> PodDisruptionBudget {
        PodDisruptionBudget {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                labels: Some(BTreeMap::new()),
                ..ObjectMeta::default()
            },
            ..PodDisruptionBudget::default()
        }
    }

    /// A preemptor whose writer does not lead: every write fails at once with NotLeader,
    /// without touching the network.
    fn not_leading_preemptor() -> (RuntimePreemptor, Metrics) {
        let metrics = Metrics::new().unwrap();
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
        let writer = ApiWriter::new(
            client,
            0.0,
            1,
            metrics.clone(),
            crate::writer::LeaderFlag::new(false),
        );
        let events = crate::events::spawn_event_writer(writer.clone(), metrics.clone(), "test".into(), 10);
        (
            RuntimePreemptor::new(writer, Handle::current(), events, metrics.clone()),
            metrics,
        )
    }

    #[tokio::test]
    async fn metrics_are_recorded_and_writes_need_the_lease() {
        use unisched_plugins::testing::PodBuilder;

        let (p, metrics) = not_leading_preemptor();
        p.attempted();
        p.attempted();
        p.execute(PreemptionPlan {
            preemptor: PodBuilder::new("hi").arc(),
            group: None,
            node: "n1".into(),
            scheduler_name: "unisched".into(),
            victims: vec![PodBuilder::new("a").arc(), PodBuilder::new("b").arc()],
            rejected_at_permit: vec![PodBuilder::new("c").arc()],
            clear_nominations: vec![PodBuilder::new("lo").arc()],
            counts: Default::default(),
        });
        assert!(p.is_preempting("hi"), "until the writes are done");
        assert_eq!(metrics.preemption_attempts.get(), 2);
        let h = metrics.preemption_victims.with_label_values::<&str>(&[]);
        assert_eq!(h.get_sample_count(), 1);
        assert!((h.get_sample_sum() - 3.0).abs() < f64::EPSILON);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(
            metrics
                .api_writes
                .with_label_values(&["patch", "pods/status", "2xx"])
                .get(),
            0,
            "nothing is written without the lease"
        );
        assert!(!p.is_preempting("hi"));
        let tasks = &metrics.workload;
        assert_eq!(
            tasks.preemption_tasks.with_label_values(&["error"]).get(),
            1,
            "no victim was deleted"
        );
        assert_eq!(tasks.preemption_tasks.with_label_values(&["success"]).get(), 0);
        assert_eq!(
            tasks
                .preemption_execution_duration
                .with_label_values(&["pod", "error"])
                .get_sample_count(),
            1
        );
    }

    /// A group's preemption is counted apart from a pod's: its victims, the group units among
    /// them and the budgets it breaks, under `preemptor="podgroup"`.
    #[tokio::test]
    async fn a_group_preemption_records_the_workload_metrics() {
        use unisched_plugins::{GroupPreemptor, PreemptionCounts, testing::PodBuilder};

        let (p, metrics) = not_leading_preemptor();
        let members = vec![
            PodBuilder::new("m0").uid("m0").arc(),
            PodBuilder::new("m1").uid("m1").arc(),
        ];
        p.group_attempted(Code::Success);
        p.group_attempted(Code::Unschedulable);
        p.evaluated("podgroup", Code::Success, Duration::from_millis(3));
        p.execute(PreemptionPlan {
            preemptor: members[0].clone(),
            group: Some(GroupPreemptor {
                id: "pg-uid".into(),
                key: "default/pg".into(),
                composite: false,
                members,
            }),
            node: "cluster".into(),
            scheduler_name: "unisched".into(),
            victims: ["a", "b", "c"].iter().map(|n| PodBuilder::new(n).arc()).collect(),
            rejected_at_permit: vec![],
            clear_nominations: vec![],
            counts: PreemptionCounts {
                pdb_violations: 1,
                group_disruptions: 2,
            },
        });
        let w = &metrics.workload;
        assert_eq!(
            w.workload_preemption_attempts
                .with_label_values(&["Success"])
                .get(),
            1
        );
        assert_eq!(
            w.workload_preemption_attempts
                .with_label_values(&["Unschedulable"])
                .get(),
            1
        );
        assert_eq!(
            metrics.preemption_attempts.get(),
            0,
            "a group's attempt is not a pod's"
        );
        let victims = w.workload_preemption_victims.with_label_values::<&str>(&[]);
        assert_eq!(victims.get_sample_count(), 1);
        assert!((victims.get_sample_sum() - 3.0).abs() < f64::EPSILON);
        assert_eq!(
            metrics
                .preemption_victims
                .with_label_values::<&str>(&[])
                .get_sample_count(),
            0
        );
        let units = w.preemption_workload_disruptions.with_label_values(&["podgroup"]);
        assert!((units.get_sample_sum() - 2.0).abs() < f64::EPSILON);
        assert_eq!(
            w.preemption_pdb_violations.with_label_values(&["podgroup"]).get(),
            1
        );
        assert_eq!(
            w.preemption_evaluation_duration
                .with_label_values(&["podgroup", "Success"])
                .get_sample_count(),
            1
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while p.is_preempting("pg-uid") && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            w.preemption_execution_duration
                .with_label_values(&["podgroup", "error"])
                .get_sample_count(),
            1,
            "without the lease no victim is deleted"
        );
    }

    /// A pod PreEnqueue held while its evictions were written is activated once they are; a pod
    /// that was never held is not (its victims' deletions requeue it as usual).
    #[tokio::test]
    async fn a_pod_held_while_preempting_is_activated_when_the_evictions_are_written() {
        use unisched_plugins::testing::PodBuilder;

        let (p, _) = not_leading_preemptor();
        let activated: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen = activated.clone();
        p.activate_with(Arc::new(move |key: &str| seen.lock().push(key.to_string())));
        let plan = |name: &str| PreemptionPlan {
            preemptor: PodBuilder::new(name).namespace("ns").uid(name).arc(),
            group: None,
            node: "n1".into(),
            scheduler_name: "unisched".into(),
            victims: vec![PodBuilder::new("victim").arc()],
            rejected_at_permit: vec![],
            clear_nominations: vec![],
            counts: Default::default(),
        };
        assert!(!p.holds_until_preempted("held"), "nothing in flight: not held");
        p.execute(plan("held"));
        p.execute(plan("free"));
        assert!(p.holds_until_preempted("held"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let settled = || !p.is_preempting("held") && !p.is_preempting("free") && !activated.lock().is_empty();
        while !settled() && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert!(!p.holds_until_preempted("held"), "done: no longer held");
        assert_eq!(*activated.lock(), vec!["ns/held".to_string()]);
    }

    /// A PodGroup's preemption is named after the group: PreEnqueue holds its members on the
    /// group's UID, and every member is activated once the evictions are written.
    #[tokio::test]
    async fn a_group_held_while_preempting_has_every_member_activated() {
        use unisched_plugins::{GroupPreemptor, testing::PodBuilder};

        let (p, _) = not_leading_preemptor();
        let activated: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen = activated.clone();
        p.activate_with(Arc::new(move |key: &str| seen.lock().push(key.to_string())));
        let members = vec![
            PodBuilder::new("m0").namespace("ml").arc(),
            PodBuilder::new("m1").namespace("ml").arc(),
        ];
        p.execute(PreemptionPlan {
            preemptor: members[0].clone(),
            group: Some(GroupPreemptor {
                id: "uid-pg".into(),
                key: "ml/pg".into(),
                composite: false,
                members: members.clone(),
            }),
            node: "cluster".into(),
            scheduler_name: "unisched".into(),
            victims: vec![PodBuilder::new("victim").arc()],
            rejected_at_permit: vec![],
            clear_nominations: vec![],
            counts: Default::default(),
        });
        assert!(p.holds_until_preempted("uid-pg"));
        assert!(
            !p.is_preempting("m0"),
            "the members are not preemptors of their own"
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while activated.lock().len() < 2 && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert_eq!(*activated.lock(), vec!["ml/m0".to_string(), "ml/m1".to_string()]);
        assert!(!p.is_preempting("uid-pg"));
    }

    /// The preemptor is let go only once its victims have left the cache, not when the deletions
    /// are written: a cycle that still saw them would preempt them again.
    #[tokio::test]
    async fn the_preemptor_is_held_until_the_cache_has_seen_its_victims_go() {
        use std::sync::atomic::{AtomicBool, Ordering};

        use unisched_plugins::testing::PodBuilder;

        let (p, _) = not_leading_preemptor();
        let activated: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen = activated.clone();
        p.activate_with(Arc::new(move |key: &str| seen.lock().push(key.to_string())));
        let in_cache = Arc::new(AtomicBool::new(true));
        let cached = in_cache.clone();
        p.victims_known_with(Arc::new(move |uid: &str| {
            uid == "v" && cached.load(Ordering::SeqCst)
        }));
        p.execute(PreemptionPlan {
            preemptor: PodBuilder::new("hi").namespace("ns").uid("hi").arc(),
            group: None,
            node: "n1".into(),
            scheduler_name: "unisched".into(),
            victims: vec![PodBuilder::new("victim").uid("v").arc()],
            rejected_at_permit: vec![],
            clear_nominations: vec![],
            counts: Default::default(),
        });
        assert!(p.holds_until_preempted("hi"));
        // The writes fail at once (no lease); the victim is still cached.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(p.is_preempting("hi"), "victim still in the cache");
        assert!(activated.lock().is_empty());
        in_cache.store(false, Ordering::SeqCst);
        p.victim_left();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while activated.lock().is_empty() && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert!(!p.is_preempting("hi"));
        assert_eq!(*activated.lock(), vec!["ns/hi".to_string()]);
    }

    #[test]
    fn store_follows_the_watch() {
        let store = Arc::new(PdbStore::new());
        let h = PdbHandler::new(store.clone());
        h.apply(pdb("b", "x"));
        h.apply(pdb("a", "y"));
        h.apply(pdb("a", "y"));
        let names: Vec<String> = store.list().iter().map(|p| pdb_key(p)).collect();
        assert_eq!(names, ["a/y", "b/x"]);
        let mut keys = h.known_keys();
        keys.sort();
        assert_eq!(keys, ["a/y", "b/x"]);
        h.delete("a/y");
        assert_eq!(store.len(), 1);
        h.delete("missing");
        assert!(!store.is_empty());
    }
}
