//! The Job controller, after kube-controller-manager 1.37's: it makes a batch/v1 Job's pods and
//! keeps its status, and with the gate `WorkloadWithJob` (on in the simulator) it first makes the
//! Job a Workload and a PodGroup and puts its pods in that group, so a gang Job is scheduled all or
//! nothing (see [`scheduling`]).
//!
//! - Pods: up to `parallelism` run at once, no more than the completions still missing (with no
//!   `completions`, `parallelism` until one succeeds). Each is made from the template as upstream
//!   makes it (`<job>-` names, the template's labels with the generated `job-name` and
//!   `controller-uid` ones, the Job as controlling owner, the `batch.kubernetes.io/job-tracking`
//!   finalizer; for an Indexed Job the lowest missing index, as label, annotation, environment
//!   variable and hostname), with a `SuccessfulCreate` or `FailedCreate` event on the Job. Extra
//!   pods (`parallelism` lowered, a suspended Job) are deleted, pending ones first, and do not
//!   count as failed.
//! - Status: `startTime`, `active`, `ready`, `succeeded`, `failed` (a pod deleted before it
//!   finished counts as failed, as upstream), `completedIndexes`, then the tracking finalizer is
//!   taken off the pods counted. Enough succeeded pods make the Job `SuccessCriteriaMet` and
//!   `Complete`; more failures than `backoffLimit` make it `FailureTarget` and `Failed`
//!   (`BackoffLimitExceeded`) and delete its running pods; `suspend` deletes them and sets
//!   `Suspended`.
//!
//! It simulates no work: a pod runs for as long as the fake kubelet keeps it running, which is
//! forever unless the pod (through the template) has the `sim.unisched.io/run-seconds`
//! annotation; then it succeeds, and the Job counts it. Failed pods are replaced at once (no
//! back-off delay). Not simulated: pod failure and success policies, `backoffLimitPerIndex`,
//! `activeDeadlineSeconds`, `ttlSecondsAfterFinished`, `managedBy`, adopting orphaned pods that
//! match the selector, and the delegation of a PodGroup by a parent controller. Deleting a Job
//! deletes its pods through the garbage collector (the owner references) when the delete asks for
//! it (`kubectl delete` does); without a propagation policy the pods are orphaned, as
//! kube-apiserver's batch/v1 default has it, and lose the tracking finalizer.

mod pods;
mod scheduling;

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use self::pods::{
    PodState, format_indexes, index_of, is_ready, is_tracked, parse_indexes, pending_indexes, state_of,
};
use self::scheduling::{Management, is_controlled_by};
use super::{Next, next_event, record_event};
use crate::error::StoreError;
use crate::patch::Patch;
use crate::registry::KindId;
use crate::store::{DeleteOptions, EventType, ObjectRef, Store};
use crate::util::{self, get_path, get_str};

pub use self::pods::{COMPLETION_INDEX_ANNOTATION, TRACKING_FINALIZER};

const COMPONENT: &str = "job-controller";

/// At most this many pods are created or deleted in one sync, as upstream.
const MAX_POD_CHANGES_PER_SYNC: usize = 500;

/// How the Job controller runs.
#[derive(Clone, Debug)]
pub struct JobControllerConfig {
    /// kube-controller-manager's `WorkloadWithJob` gate: make each Job a Workload and PodGroup.
    pub workload_with_job: bool,
}

impl Default for JobControllerConfig {
    fn default() -> Self {
        Self {
            workload_with_job: true,
        }
    }
}

/// Why one sync of a Job stopped; the next event about the Job tries again.
#[derive(Debug, thiserror::Error)]
pub enum JobSyncError {
    /// The Job's Workload could not be created.
    #[error("creating the Workload of Job {job}")]
    CreateWorkload {
        /// The Job.
        job: String,
        /// Why.
        #[source]
        source: StoreError,
    },
    /// The Job's PodGroup could not be created.
    #[error("creating the PodGroup of Job {job}")]
    CreatePodGroup {
        /// The Job.
        job: String,
        /// Why.
        #[source]
        source: StoreError,
    },
    /// A gang `minCount` could not be carried to the Workload or PodGroup.
    #[error("resizing the gang of Job {job}")]
    Resize {
        /// The Job.
        job: String,
        /// Why.
        #[source]
        source: StoreError,
    },
    /// The Workload the controller owns for the Job is not the one it compiles.
    #[error("workload {workload} for job {job} has {templates} PodGroupTemplates, want exactly 1")]
    WorkloadStructure {
        /// The Workload.
        workload: String,
        /// The Job.
        job: String,
        /// How many templates it has.
        templates: usize,
    },
    /// The Job's status could not be written.
    #[error("writing the status of Job {job}")]
    Status {
        /// The Job.
        job: String,
        /// Why.
        #[source]
        source: StoreError,
    },
}

/// The kinds the controller reads.
#[derive(Clone, Copy)]
struct Kinds {
    jobs: KindId,
    pods: KindId,
    workloads: KindId,
    pod_groups: KindId,
}

impl Kinds {
    fn of(store: &Store) -> Option<Self> {
        Some(Self {
            jobs: store.resolve("jobs").ok()?,
            pods: store.resolve("pods").ok()?,
            workloads: store.resolve("workloads").ok()?,
            pod_groups: store.resolve("podgroups").ok()?,
        })
    }
}

/// Runs until `shutdown` changes (at once if the store serves no Jobs).
pub async fn run(
    store: Store,
    config: JobControllerConfig,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let Some(kinds) = Kinds::of(&store) else {
        return;
    };
    let controller = JobController { store, config, kinds };
    let mut sub = controller.store.subscribe();
    controller.resync();
    loop {
        match next_event(&mut sub, &mut shutdown).await {
            Next::Stop => return,
            Next::Resync => {
                sub = controller.store.subscribe();
                controller.resync();
            }
            Next::Event(ev) => controller.handle(ev.kind, ev.event_type, &ev.object),
        }
    }
}

struct JobController {
    store: Store,
    config: JobControllerConfig,
    kinds: Kinds,
}

impl JobController {
    /// Syncs every Job and lets go of the pods of Jobs that are gone.
    fn resync(&self) {
        for job in self.store.snapshot(self.kinds.jobs, None) {
            self.sync_logged(&job);
        }
        for pod in self.store.snapshot(self.kinds.pods, None) {
            self.on_pod(&pod);
        }
    }

    fn handle(&self, kind: KindId, event_type: EventType, obj: &ObjectRef) {
        if kind == self.kinds.jobs {
            if event_type != EventType::Deleted {
                self.sync_logged(obj);
            }
        } else if kind == self.kinds.pods {
            self.on_pod(obj);
        } else if (kind == self.kinds.workloads || kind == self.kinds.pod_groups)
            && event_type != EventType::Added
        {
            // A changed or deleted scheduling object: the Job looks again (it does not recreate it
            // once it has started).
            if let Some(job) = self.controlling_job(obj.value()) {
                self.sync_logged(&job);
            }
        }
    }

    /// The Job that controls `obj`, if it exists.
    fn controlling_job(&self, obj: &Value) -> Option<ObjectRef> {
        let owner = scheduling::controller_of(obj)?;
        if get_str(owner, &["apiVersion"]) != Some("batch/v1") || get_str(owner, &["kind"]) != Some("Job") {
            return None;
        }
        let (kind, job) = self.store.get_by_uid(get_str(owner, &["uid"])?)?;
        (kind == self.kinds.jobs).then_some(job)
    }

    /// A pod changed: its Job syncs; a pod with the tracking finalizer and no Job (the Job is
    /// gone, or orphaned it) is let go, as upstream lets orphans go.
    fn on_pod(&self, pod: &ObjectRef) {
        match self.controlling_job(pod.value()) {
            Some(job) => self.sync_logged(&job),
            None if is_tracked(pod.value()) => release(&self.store, std::slice::from_ref(pod)),
            None => {}
        }
    }

    fn sync_logged(&self, job: &ObjectRef) {
        if let Err(e) = self.sync(job) {
            tracing::warn!(error = %e, source = ?std::error::Error::source(&e), "job controller");
        }
    }

    /// The Job's pods: those it controls.
    fn pods_of(&self, job: &ObjectRef) -> Vec<ObjectRef> {
        self.store
            .dependents_of(job.uid())
            .into_iter()
            .filter(|(k, p)| *k == self.kinds.pods && is_controlled_by(p.value(), job.uid()))
            .map(|(_, p)| p)
            .collect()
    }

    /// One pass over a Job: its scheduling objects, its pods, its status.
    fn sync(&self, job_ref: &ObjectRef) -> Result<(), JobSyncError> {
        // The event may be old: work from the Job as it is now.
        let Some((_, job_ref)) = self.store.get_by_uid(job_ref.uid()) else {
            return Ok(());
        };
        let job = job_ref.value();
        let pods = self.pods_of(&job_ref);
        if get_path(job, &["metadata", "deletionTimestamp"]).is_some() {
            release(&self.store, &pods);
            return Ok(());
        }
        let tally = Tally::of(job, &pods);
        if has_condition(job, "Complete") || has_condition(job, "Failed") {
            release(&self.store, &tally.counted);
            return Ok(());
        }
        let group = self.ensure_scheduling(job, pods.len())?;
        let mut next = NextStatus {
            fields: Map::new(),
            conditions: conditions_of(job),
            now: util::now_rfc3339(),
        };
        let active = self.advance(job, &tally, group.as_deref(), &mut next);
        let indexed = get_str(job, &["spec", "completionMode"]) == Some("Indexed");
        let ready = tally.active.iter().filter(|p| is_ready(p.value())).count();
        let fields = &mut next.fields;
        fields.insert("active".into(), json!(active));
        fields.insert("ready".into(), json!(ready));
        fields.insert("succeeded".into(), json!(tally.count.succeeded(indexed)));
        fields.insert("failed".into(), json!(tally.count.failed));
        fields.insert("terminating".into(), json!(0));
        fields.insert("uncountedTerminatedPods".into(), json!({}));
        if indexed {
            let completed = format_indexes(&tally.count.completed_indexes);
            fields.insert("completedIndexes".into(), json!(completed));
        }
        if !next.conditions.is_empty() {
            fields.insert("conditions".into(), json!(next.conditions));
        }
        self.write_status(&job_ref, next.fields)?;
        release(&self.store, &tally.counted);
        Ok(())
    }

    /// Moves the Job on from what its pods did: failed past its back-off limit, complete,
    /// suspended, or running with as many pods as it wants now. Returns how many are active.
    fn advance(&self, job: &Value, tally: &Tally, group: Option<&str>, next: &mut NextStatus) -> usize {
        let spec = |f: &str| get_path(job, &["spec", f]).and_then(Value::as_i64);
        let completions = spec("completions");
        let parallelism = spec("parallelism").unwrap_or(1).max(0);
        let indexed = get_str(job, &["spec", "completionMode"]) == Some("Indexed");
        let succeeded = tally.count.succeeded(indexed);
        let active = &tally.active;
        let complete = match completions {
            Some(c) => succeeded >= c,
            None => succeeded > 0 && active.is_empty(),
        };
        if tally.count.failed > spec("backoffLimit").unwrap_or(6) {
            let message = "Job has reached the specified backoff limit";
            next.set(
                &["FailureTarget", "Failed"],
                "True",
                "BackoffLimitExceeded",
                message,
            );
            record_event(
                &self.store,
                job,
                "Warning",
                "BackoffLimitExceeded",
                message,
                COMPONENT,
            );
            return active.len() - self.delete_pods(job, active, active.len());
        }
        if complete {
            let message = "Reached expected number of succeeded pods";
            next.set(
                &["SuccessCriteriaMet", "Complete"],
                "True",
                "CompletionsReached",
                message,
            );
            next.fields.insert("completionTime".into(), json!(next.now));
            record_event(
                &self.store,
                job,
                "Normal",
                "Completed",
                "Job completed",
                COMPONENT,
            );
            return active.len();
        }
        if get_path(job, &["spec", "suspend"]).and_then(Value::as_bool) == Some(true) {
            if !has_condition(job, "Suspended") {
                next.set(&["Suspended"], "True", "JobSuspended", "Job suspended");
                record_event(
                    &self.store,
                    job,
                    "Normal",
                    "Suspended",
                    "Job suspended",
                    COMPONENT,
                );
            }
            return active.len() - self.delete_pods(job, active, active.len());
        }
        if has_condition(job, "Suspended") {
            next.set(&["Suspended"], "False", "JobResumed", "Job resumed");
            record_event(&self.store, job, "Normal", "Resumed", "Job resumed", COMPONENT);
        }
        if get_path(job, &["status", "startTime"]).is_none_or(Value::is_null) {
            next.fields.insert("startTime".into(), json!(next.now));
        }
        let want = match completions {
            Some(c) => (c - succeeded).clamp(0, parallelism),
            None if succeeded > 0 => active.len() as i64,
            None => parallelism,
        };
        let want = usize::try_from(want).unwrap_or(0);
        if active.len() > want {
            return active.len() - self.delete_pods(job, active, active.len() - want);
        }
        let missing = want - active.len();
        if missing == 0 {
            return active.len();
        }
        let indexes = indexed.then(|| {
            let running: BTreeSet<u32> = active.iter().filter_map(|p| index_of(p.value())).collect();
            let completions = u32::try_from(completions.unwrap_or(0)).unwrap_or(0);
            pending_indexes(completions, &tally.count.completed_indexes, &running, missing)
        });
        active.len() + self.create_pods(job, missing, indexes, group)
    }

    /// Writes the fields of `status` that differ from the Job's.
    fn write_status(&self, job: &ObjectRef, status: Map<String, Value>) -> Result<(), JobSyncError> {
        let current = get_path(job.value(), &["status"]).and_then(Value::as_object);
        let changed = status
            .iter()
            .any(|(k, v)| current.and_then(|c| c.get(k)) != Some(v));
        if !changed {
            return Ok(());
        }
        let patch = Patch::Merge(json!({
            "metadata": {"resourceVersion": job.resource_version().to_string()},
            "status": status,
        }));
        match self
            .store
            .patch_status("jobs", Some(job.namespace()), job.name(), &patch)
        {
            // A newer Job is on its way as an event: that sync writes.
            Err(e) if e.is_conflict() || e.is_not_found() => Ok(()),
            Err(source) => Err(JobSyncError::Status {
                job: job.name().to_string(),
                source,
            }),
            Ok(_) => Ok(()),
        }
    }

    /// Creates `n` pods (with these completion indexes for an Indexed Job); returns how many were
    /// made. The first refusal stops the batch, as upstream's slow start does.
    fn create_pods(&self, job: &Value, n: usize, indexes: Option<Vec<u32>>, group: Option<&str>) -> usize {
        let ns = util::namespace_of(job);
        let planned: Vec<Option<u32>> = match indexes {
            Some(ix) => ix.into_iter().map(Some).collect(),
            None => vec![None; n],
        };
        let mut made = 0;
        for index in planned.into_iter().take(MAX_POD_CHANGES_PER_SYNC) {
            match self
                .store
                .create("pods", Some(ns), pods::pod_for(job, index, group))
            {
                Ok(pod) => {
                    made += 1;
                    let message = format!("Created pod: {}", pod.name());
                    record_event(
                        &self.store,
                        job,
                        "Normal",
                        "SuccessfulCreate",
                        &message,
                        COMPONENT,
                    );
                }
                Err(e) => {
                    let message = format!("Error creating: {e}");
                    record_event(&self.store, job, "Warning", "FailedCreate", &message, COMPONENT);
                    break;
                }
            }
        }
        made
    }

    /// Deletes `n` of the active pods, those furthest from running first (unbound, then not
    /// ready, then the newest); returns how many went. Their finalizer goes first: a pod the
    /// controller deletes did not fail.
    fn delete_pods(&self, job: &Value, active: &[ObjectRef], n: usize) -> usize {
        let mut order: Vec<&ObjectRef> = active.iter().collect();
        order.sort_by_key(|p| {
            let bound = get_str(p.value(), &["spec", "nodeName"]).is_some_and(|n| !n.is_empty());
            (
                bound,
                is_ready(p.value()),
                std::cmp::Reverse(get_str(p.value(), &["metadata", "creationTimestamp"]).map(str::to_string)),
            )
        });
        let mut deleted = 0;
        for pod in order.into_iter().take(n.min(MAX_POD_CHANGES_PER_SYNC)) {
            release(&self.store, std::slice::from_ref(pod));
            match self.store.delete(
                "pods",
                Some(pod.namespace()),
                pod.name(),
                &DeleteOptions::default(),
            ) {
                Ok(_) => {
                    deleted += 1;
                    let message = format!("Deleted pod: {}", pod.name());
                    record_event(
                        &self.store,
                        job,
                        "Normal",
                        "SuccessfulDelete",
                        &message,
                        COMPONENT,
                    );
                }
                Err(e) if e.is_not_found() => deleted += 1,
                Err(e) => {
                    let message = format!("Error deleting: {e}");
                    record_event(&self.store, job, "Warning", "FailedDelete", &message, COMPONENT);
                }
            }
        }
        deleted
    }

    /// The Job's Workload and PodGroup, found or (for a Job that has not started) created; returns
    /// the PodGroup's name, None when the Job's pods are scheduled one by one.
    fn ensure_scheduling(&self, job: &Value, pod_count: usize) -> Result<Option<String>, JobSyncError> {
        if scheduling::management(job, self.config.workload_with_job) == Management::None {
            return Ok(None);
        }
        let job_name = util::name_of(job).to_string();
        let ns = util::namespace_of(job);
        let uid = util::uid_of(job);
        let new_job = scheduling::is_new_job(job, pod_count);
        let owned = |kind: KindId| -> Vec<ObjectRef> {
            self.store
                .dependents_of(uid)
                .into_iter()
                .filter(|(k, o)| *k == kind && is_controlled_by(o.value(), uid))
                .map(|(_, o)| o)
                .collect()
        };
        let workloads: Vec<ObjectRef> = owned(self.kinds.workloads)
            .into_iter()
            .filter(|w| get_str(w.value(), &["spec", "controllerRef", "name"]) == Some(job_name.as_str()))
            .collect();
        let workload = match workloads.as_slice() {
            [] if !new_job => return Ok(None),
            [] => {
                let created = self
                    .store
                    .create("workloads", Some(ns), scheduling::workload_for(job))
                    .map_err(|source| JobSyncError::CreateWorkload {
                        job: job_name.clone(),
                        source,
                    })?;
                let message = format!("Created Workload {} for Job {job_name}", created.name());
                record_event(&self.store, job, "Normal", "WorkloadCreated", &message, COMPONENT);
                created
            }
            [one] => {
                scheduling::check_workload_structure(one.value()).map_err(|templates| {
                    JobSyncError::WorkloadStructure {
                        workload: format!("{ns}/{}", one.name()),
                        job: format!("{ns}/{job_name}"),
                        templates,
                    }
                })?;
                one.clone()
            }
            more => {
                tracing::warn!(job = %job_name, workloads = more.len(), "several Workloads for one Job: scheduling its pods one by one");
                return Ok(None);
            }
        };
        let groups: Vec<ObjectRef> = owned(self.kinds.pod_groups)
            .into_iter()
            .filter(|g| get_str(g.value(), &["spec", "workloadRef", "workloadName"]) == Some(workload.name()))
            .collect();
        let group = match groups.as_slice() {
            [] if !new_job => return Ok(None),
            [] => {
                let Some(group) = scheduling::pod_group_for(job, workload.value()) else {
                    return Ok(None);
                };
                let created = self
                    .store
                    .create("podgroups", Some(ns), group)
                    .map_err(|source| JobSyncError::CreatePodGroup {
                        job: job_name.clone(),
                        source,
                    })?;
                let message = format!("Created PodGroup {} for Job {job_name}", created.name());
                record_event(&self.store, job, "Normal", "PodGroupCreated", &message, COMPONENT);
                created
            }
            [one] => one.clone(),
            more => {
                tracing::warn!(job = %job_name, groups = more.len(), "several PodGroups for one Workload: scheduling the Job's pods one by one");
                return Ok(None);
            }
        };
        self.sync_min_count(job, &workload, &group)
            .map_err(|source| JobSyncError::Resize {
                job: job_name,
                source,
            })?;
        Ok(Some(group.name().to_string()))
    }

    /// Carries a changed gang `minCount` of the Job to its Workload and PodGroup.
    fn sync_min_count(&self, job: &Value, workload: &ObjectRef, group: &ObjectRef) -> Result<(), StoreError> {
        let Some(min) = scheduling::desired_min_count(job) else {
            return Ok(());
        };
        let ns = Some(workload.namespace());
        let templates = get_path(workload.value(), &["spec", "podGroupTemplates"]).and_then(Value::as_array);
        if let Some(templates) = templates
            && templates.len() == 1
            && scheduling::gang_min_count(&templates[0], &["schedulingPolicy"]).is_some_and(|m| m != min)
        {
            let mut resized = templates.clone();
            resized[0]["schedulingPolicy"]["gang"]["minCount"] = json!(min);
            let patch = Patch::Merge(json!({"spec": {"podGroupTemplates": resized}}));
            self.store.patch("workloads", ns, workload.name(), &patch)?;
        }
        if scheduling::gang_min_count(group.value(), &["spec", "schedulingPolicy"]).is_some_and(|m| m != min)
        {
            let patch = Patch::Merge(json!({"spec": {"schedulingPolicy": {"gang": {"minCount": min}}}}));
            self.store.patch("podgroups", ns, group.name(), &patch)?;
        }
        Ok(())
    }
}

/// The Job's pods sorted for one sync.
struct Tally {
    /// What the Job has counted, with the pods counted in this sync.
    count: Counts,
    /// Pods that have not finished.
    active: Vec<ObjectRef>,
    /// Finished pods counted in this sync: their finalizer goes once the status is written.
    counted: Vec<ObjectRef>,
}

impl Tally {
    fn of(job: &Value, pods: &[ObjectRef]) -> Self {
        let mut tally = Self {
            count: Counts::from_status(job),
            active: Vec::new(),
            counted: Vec::new(),
        };
        for pod in pods {
            match state_of(pod.value()) {
                PodState::Active => tally.active.push(pod.clone()),
                state if is_tracked(pod.value()) => {
                    tally.count.add(state, index_of(pod.value()));
                    tally.counted.push(pod.clone());
                }
                _ => {}
            }
        }
        tally
    }
}

/// The status a sync is writing.
struct NextStatus {
    fields: Map<String, Value>,
    conditions: Vec<Value>,
    now: String,
}

impl NextStatus {
    /// Sets these conditions (or adds them); their times change only when their status does.
    fn set(&mut self, kinds: &[&str], status: &str, reason: &str, message: &str) {
        for kind in kinds {
            let fresh = json!({"type": kind, "status": status, "reason": reason, "message": message,
                               "lastProbeTime": self.now, "lastTransitionTime": self.now});
            match self
                .conditions
                .iter_mut()
                .find(|c| get_str(c, &["type"]) == Some(kind))
            {
                Some(c) if get_str(c, &["status"]) == Some(status) => {}
                Some(c) => *c = fresh,
                None => self.conditions.push(fresh),
            }
        }
    }
}

/// What the Job has counted: its status plus the finished pods of this sync.
struct Counts {
    succeeded: i64,
    failed: i64,
    completed_indexes: BTreeSet<u32>,
}

impl Counts {
    fn from_status(job: &Value) -> Self {
        let n = |f: &str| get_path(job, &["status", f]).and_then(Value::as_i64).unwrap_or(0);
        Self {
            succeeded: n("succeeded"),
            failed: n("failed"),
            completed_indexes: parse_indexes(
                get_str(job, &["status", "completedIndexes"]).unwrap_or_default(),
            ),
        }
    }

    fn add(&mut self, state: PodState, index: Option<u32>) {
        match state {
            PodState::Succeeded => {
                self.succeeded += 1;
                if let Some(i) = index {
                    self.completed_indexes.insert(i);
                }
            }
            PodState::Failed => self.failed += 1,
            PodState::Active => {}
        }
    }

    /// Succeeded completions: for an Indexed Job, the distinct indexes that succeeded.
    fn succeeded(&self, indexed: bool) -> i64 {
        if indexed {
            self.completed_indexes.len() as i64
        } else {
            self.succeeded
        }
    }
}

fn conditions_of(job: &Value) -> Vec<Value> {
    get_path(job, &["status", "conditions"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn has_condition(job: &Value, kind: &str) -> bool {
    conditions_of(job)
        .iter()
        .any(|c| get_str(c, &["type"]) == Some(kind) && get_str(c, &["status"]) == Some("True"))
}

/// Takes the tracking finalizer off the pods (they have been counted, or their Job is gone).
fn release(store: &Store, pods: &[ObjectRef]) {
    for pod in pods.iter().filter(|p| is_tracked(p.value())) {
        let left: Vec<Value> = get_path(pod.value(), &["metadata", "finalizers"])
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|f| *f != TRACKING_FINALIZER)
            .cloned()
            .collect();
        let patch = Patch::Merge(json!({"metadata": {"finalizers": left}}));
        if let Err(e) = store.patch("pods", Some(pod.namespace()), pod.name(), &patch)
            && !e.is_not_found()
        {
            tracing::warn!(pod = pod.name(), error = %e, "job controller could not remove its finalizer");
        }
    }
}

#[cfg(test)]
mod tests;
