//! Carrying out a preemption: the API writes, behind a trait.
//!
//! The scheduling cycle only decides; evicting is I/O and must not block it. The plugin hands a
//! [`PreemptionPlan`] to a [`Preemptor`] and returns at once: the runtime's implementation spawns
//! the writes on its tokio runtime (patch each victim's status with the `DisruptionTarget`
//! condition, delete it, record a `Preempted` event, clear the nominations of lower-priority pods
//! nominated to the node), and records the preemption metrics. The payloads are built here so that
//! every implementation writes the same thing, and tests can check it.

use std::{sync::Arc, time::Duration};

use parking_lot::Mutex;
use serde_json::{Value, json};
use unisched_framework::{Code, PodInfo};

/// The pod condition type that marks a pod being disrupted.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";
/// The `DisruptionTarget` reason the scheduler sets on victims.
pub const REASON_PREEMPTION_BY_SCHEDULER: &str = "PreemptionByScheduler";
/// The event reason on a victim.
pub const EVENT_PREEMPTED: &str = "Preempted";

/// A PodGroup, or the root CompositePodGroup of a tree, that preempts as a whole.
#[derive(Clone, Debug)]
pub struct GroupPreemptor {
    /// What identifies its preemption while it is written: the group's UID (its
    /// `namespace/name` when it has none).
    pub id: String,
    /// `namespace/name` of the group.
    pub key: String,
    /// True for a CompositePodGroup (the preemptor type is then `compositepodgroup`).
    pub composite: bool,
    /// Its members that wait for the evictions.
    pub members: Vec<Arc<PodInfo>>,
}

/// What one successful preemption decided.
#[derive(Clone, Debug)]
pub struct PreemptionPlan {
    /// The pod that preempts (for a group, its first member).
    pub preemptor: Arc<PodInfo>,
    /// The group that preempts, when a whole PodGroup does.
    pub group: Option<GroupPreemptor>,
    /// The node it is nominated to (`cluster` for a group, whose domain is the whole cluster).
    pub node: String,
    /// The profile's scheduler name (in the victims' condition message and events).
    pub scheduler_name: String,
    /// Pods to evict, most important first.
    pub victims: Vec<Arc<PodInfo>>,
    /// Victims that were still waiting at Permit: the plugin rejected them there (they were not
    /// bound, so there is nothing to delete); counted and reported only.
    pub rejected_at_permit: Vec<Arc<PodInfo>>,
    /// Lower-priority pods nominated to the node, whose nominations no longer hold.
    pub clear_nominations: Vec<Arc<PodInfo>>,
    /// What the choice cost, for the preemption metrics.
    pub counts: PreemptionCounts,
}

/// What a chosen set of victims costs beyond its pods, as upstream's metrics count it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PreemptionCounts {
    /// Victims whose eviction breaks a PodDisruptionBudget
    /// (`scheduler_preemption_pdb_violations_total`).
    pub pdb_violations: usize,
    /// Victim units that are pod groups: a whole group disrupted together, or one member of a
    /// group disrupted member by member (`scheduler_preemption_workload_disruptions`).
    pub group_disruptions: usize,
}

impl PreemptionPlan {
    /// What preempts, in upstream's words: `pod`, `podgroup` or `compositepodgroup`.
    pub fn preemptor_type(&self) -> &'static str {
        match &self.group {
            Some(g) if g.composite => "compositepodgroup",
            Some(_) => "podgroup",
            None => "pod",
        }
    }

    /// The preemptor's identity while its evictions are written: the pod's UID, or the group's.
    pub fn preemptor_id(&self) -> &str {
        match &self.group {
            Some(g) => &g.id,
            None => &self.preemptor.uid,
        }
    }

    /// The pods that wait for the evictions (`namespace/name`).
    pub fn waiting_pods(&self) -> Vec<String> {
        match &self.group {
            Some(g) => g.members.iter().map(|m| m.key()).collect(),
            None => vec![self.preemptor.key()],
        }
    }

    /// The strategic-merge patch of a victim's status that adds the `DisruptionTarget` condition.
    pub fn victim_status_patch(&self, now: &str) -> Value {
        json!({
            "status": {
                "conditions": [{
                    "type": DISRUPTION_TARGET,
                    "status": "True",
                    "reason": REASON_PREEMPTION_BY_SCHEDULER,
                    "message": format!(
                        "{}: preempting to accommodate a higher priority {}",
                        self.scheduler_name,
                        self.preemptor_type()
                    ),
                    "lastTransitionTime": now,
                }]
            }
        })
    }

    /// The note of the `Preempted` event on a victim.
    pub fn event_note(&self) -> String {
        format!(
            "Preempted by {} {} on node {}",
            self.preemptor_type(),
            self.preemptor_id(),
            self.node
        )
    }

    /// The patch that clears `status.nominatedNodeName`.
    pub fn clear_nomination_patch() -> Value {
        json!({ "status": { "nominatedNodeName": null } })
    }
}

/// Executes preemptions and observes attempts. Implementations must not block.
pub trait Preemptor: Send + Sync {
    /// One PostFilter run of DefaultPreemption began (`scheduler_preemption_attempts_total`).
    fn attempted(&self) {}
    /// One pod-group PostFilter run of DefaultPreemption ended with `result`
    /// (`scheduler_workload_preemption_attempts_total{result}`).
    fn group_attempted(&self, _result: Code) {}
    /// Choosing the victims for a `preemptor_type` (`pod` or `podgroup`) took `elapsed` and
    /// ended with `result` (`scheduler_preemption_evaluation_duration_seconds`).
    fn evaluated(&self, _preemptor_type: &'static str, _result: Code, _elapsed: Duration) {}
    /// Evict the victims of `plan` (asynchronously).
    fn execute(&self, plan: PreemptionPlan);
    /// True while the evictions of an earlier plan of this preemptor are still being written: it
    /// must not preempt again before they land (upstream gates such pods in PreEnqueue).
    fn is_preempting(&self, _pod_uid: &str) -> bool {
        false
    }
    /// PreEnqueue's question: [`Preemptor::is_preempting`], and if so the pod is held until its
    /// evictions are written. A preemptor that answers true must let the pod go again when they
    /// are (activate it), because the victims' deletions may all have been seen while it was
    /// held.
    fn holds_until_preempted(&self, pod_uid: &str) -> bool {
        self.is_preempting(pod_uid)
    }
}

/// Records plans instead of executing them (tests).
#[derive(Debug, Default)]
pub struct RecordingPreemptor {
    attempts: Mutex<usize>,
    group_attempts: Mutex<Vec<Code>>,
    evaluations: Mutex<Vec<(&'static str, Code)>>,
    plans: Mutex<Vec<PreemptionPlan>>,
    /// Preemptor UIDs reported as still preempting.
    pub preempting: Mutex<Vec<String>>,
}

impl RecordingPreemptor {
    /// A fresh recorder.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Every plan executed so far.
    pub fn plans(&self) -> Vec<PreemptionPlan> {
        self.plans.lock().clone()
    }

    /// How many attempts were observed.
    pub fn attempts(&self) -> usize {
        *self.attempts.lock()
    }

    /// The results of the pod-group attempts observed, in order.
    pub fn group_attempts(&self) -> Vec<Code> {
        self.group_attempts.lock().clone()
    }

    /// The evaluations observed: preemptor type and result, in order.
    pub fn evaluations(&self) -> Vec<(&'static str, Code)> {
        self.evaluations.lock().clone()
    }
}

impl Preemptor for RecordingPreemptor {
    fn attempted(&self) {
        *self.attempts.lock() += 1;
    }

    fn group_attempted(&self, result: Code) {
        self.group_attempts.lock().push(result);
    }

    fn evaluated(&self, preemptor_type: &'static str, result: Code, _elapsed: Duration) {
        self.evaluations.lock().push((preemptor_type, result));
    }

    fn execute(&self, plan: PreemptionPlan) {
        self.plans.lock().push(plan);
    }

    fn is_preempting(&self, pod_uid: &str) -> bool {
        self.preempting.lock().iter().any(|u| u == pod_uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::PodBuilder;

    #[test]
    fn payloads() {
        let plan = PreemptionPlan {
            preemptor: PodBuilder::new("hi").uid("uid-hi").arc(),
            group: None,
            node: "n1".into(),
            scheduler_name: "unisched".into(),
            victims: vec![],
            rejected_at_permit: vec![],
            clear_nominations: vec![],
            counts: PreemptionCounts::default(),
        };
        let p = plan.victim_status_patch("2026-01-01T00:00:00Z");
        let c = &p["status"]["conditions"][0];
        assert_eq!(c["type"], "DisruptionTarget");
        assert_eq!(c["status"], "True");
        assert_eq!(c["reason"], "PreemptionByScheduler");
        assert_eq!(
            c["message"],
            "unisched: preempting to accommodate a higher priority pod"
        );
        assert_eq!(plan.event_note(), "Preempted by pod uid-hi on node n1");
        assert!(PreemptionPlan::clear_nomination_patch()["status"]["nominatedNodeName"].is_null());
    }

    #[test]
    fn a_group_is_named_as_upstream_names_it() {
        let members = vec![
            PodBuilder::new("m0").namespace("ml").arc(),
            PodBuilder::new("m1").namespace("ml").arc(),
        ];
        let plan = PreemptionPlan {
            preemptor: members[0].clone(),
            group: Some(GroupPreemptor {
                id: "uid-pg".into(),
                key: "ml/pg".into(),
                composite: false,
                members: members.clone(),
            }),
            node: "cluster".into(),
            scheduler_name: "unisched".into(),
            victims: vec![],
            rejected_at_permit: vec![],
            clear_nominations: vec![],
            counts: PreemptionCounts::default(),
        };
        assert_eq!(
            plan.victim_status_patch("t")["status"]["conditions"][0]["message"],
            "unisched: preempting to accommodate a higher priority podgroup"
        );
        assert_eq!(plan.event_note(), "Preempted by podgroup uid-pg on node cluster");
        assert_eq!(plan.preemptor_id(), "uid-pg");
        assert_eq!(plan.waiting_pods(), ["ml/m0", "ml/m1"]);

        // The root of a tree preempts as a `compositepodgroup`, named by its own UID.
        let mut tree = plan.clone();
        tree.group = Some(GroupPreemptor {
            id: "uid-cpg".into(),
            key: "ml/train".into(),
            composite: true,
            members,
        });
        assert_eq!(
            tree.victim_status_patch("t")["status"]["conditions"][0]["message"],
            "unisched: preempting to accommodate a higher priority compositepodgroup"
        );
        assert_eq!(
            tree.event_note(),
            "Preempted by compositepodgroup uid-cpg on node cluster"
        );
        assert_eq!(tree.preemptor_type(), "compositepodgroup");
    }
}
