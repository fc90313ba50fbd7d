//! PodGroups in engine mode: the group store the runtime's watch handlers would keep, fed
//! directly, and the pod-group cycle the runtime runs when a popped pod names a group.
//!
//! Engine mode measures the cost of deciding, so a group is decided exactly as the runtime decides
//! it (its waiting members taken out of the queue with the popped one, in creation order, then
//! `run_pod_group_cycle`); only the PodGroup's status condition, an API write, is left out. The
//! engine turns each member's decision into a binding cycle or a requeue, as for a single pod.

use std::sync::Arc;

use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use unisched_cache::Cache;
use unisched_framework::{
    ActionType, ClusterEvent, EventObject, EventResource, Framework, MemberDecision, PodGroupCycleInput,
    PodGroupKey, PodGroupStore, PodInfo, QueuedPodInfo, SchedulingAlgorithm, SchedulingFailure, Status,
    run_pod_group_cycle, well_known,
};
use unisched_plugins::names::GANG_SCHEDULING;
use unisched_queue::SchedulingQueue;

/// What a PodGroup's arrival is offered to waiting pods as (the runtime's watch event).
const POD_GROUP_ADD: ClusterEvent =
    ClusterEvent::new(EventResource::PodGroup, ActionType::ADD, "PodGroupAdd");

/// The engine's PodGroups: the store the plugins and the cycle read, and the queue to wake.
pub(crate) struct EngineGroups {
    store: Arc<PodGroupStore>,
    queue: Arc<SchedulingQueue>,
}

impl EngineGroups {
    pub(crate) fn new(store: Arc<PodGroupStore>, queue: Arc<SchedulingQueue>) -> Self {
        EngineGroups { store, queue }
    }

    /// A PodGroup was created: stored, and offered to the pods waiting for it.
    pub(crate) fn add_group(&self, group: PodGroup) {
        let group = Arc::new(group);
        self.store.set_group(group.clone());
        self.queue
            .move_all_to_active_or_backoff(POD_GROUP_ADD, None, Some(EventObject::PodGroup(group)));
    }

    /// A pod was created or bound: its membership recorded, and (when it names a group) offered
    /// to the group's gated members, whose quorum it may complete.
    pub(crate) fn pod_seen(&self, pod: &Arc<PodInfo>, bound: bool) {
        self.store.observe_pod(&pod.pod);
        if PodGroupKey::of_pod(&pod.pod).is_some() {
            let event = if bound {
                well_known::ASSIGNED_POD_ADD
            } else {
                well_known::UNSCHEDULED_POD_ADD
            };
            self.queue
                .move_all_to_active_or_backoff(event, None, Some(EventObject::Pod(pod.clone())));
        }
    }

    /// A bound pod was deleted.
    pub(crate) fn pod_deleted(&self, pod: &PodInfo) {
        self.store.forget_pod(&pod.pod);
    }

    /// The group `pod` names, when it names one.
    pub(crate) fn key_of(&self, pod: &PodInfo) -> Option<PodGroupKey> {
        PodGroupKey::of_pod(&pod.pod)
    }

    /// Decides the popped member's group: its waiting members with it, all or nothing for a
    /// gang. Returns each member with its decision.
    pub(crate) fn decide(
        &self,
        fwk: &Arc<Framework>,
        algo: &mut SchedulingAlgorithm,
        cache: &Cache,
        key: &PodGroupKey,
        qpi: QueuedPodInfo,
        record: bool,
    ) -> Vec<(QueuedPodInfo, MemberDecision)> {
        let Some(group) = self.store.group(key) else {
            // Popped before its group exists: it waits for the group, as in the runtime.
            let status = Status::unresolvable(format!(
                "waiting for pods's pod group {:?} to appear in scheduling queue",
                key.name
            ))
            .with_plugin(GANG_SCHEDULING);
            let failure = SchedulingFailure::from_pod_group(qpi.pod_info.clone(), status);
            return vec![(qpi, MemberDecision::Failed(Box::new(failure)))];
        };
        let others: Vec<String> = self
            .store
            .unbound_members(key)
            .into_iter()
            .filter(|uid| *uid != qpi.pod_info.uid)
            .collect();
        let mut members = vec![qpi];
        members.extend(self.queue.take_group_members(others.iter().map(String::as_str)));
        members.sort_by_key(|m| creation_order(&m.pod_info));
        let already_scheduled = self.store.counts(key, &|uid| cache.is_assumed(uid)).scheduled;
        let result = run_pod_group_cycle(
            fwk,
            algo,
            cache,
            self.queue.as_ref(),
            PodGroupCycleInput {
                group: &group,
                members: members.iter().map(|m| m.pod_info.clone()).collect(),
                already_scheduled,
                record_plugin_metrics: record,
            },
        );
        if !result.status.is_success() {
            // The members' own reservations, taken back, are no reason to retry them.
            self.queue
                .forget_own_events_so_far(members.iter().map(|m| m.pod_info.uid.as_str()));
        }
        members
            .into_iter()
            .zip(result.members)
            .map(|(qpi, decision)| match decision {
                MemberDecision::Failed(mut f)
                    if f.status.is_rejected()
                        && f.unschedulable_plugins.is_empty()
                        && f.pending_plugins.is_empty() =>
                {
                    // Held back by the group alone: it waits for the group's events.
                    f.unschedulable_plugins.insert(GANG_SCHEDULING.to_string());
                    (qpi, MemberDecision::Failed(f))
                }
                other => (qpi, other),
            })
            .collect()
    }
}

/// The order members arrived in: creation time, then name. Engine pods have no creation time;
/// their names end in their index, compared as a number so `p-10` follows `p-9`.
fn creation_order(pod: &PodInfo) -> (Option<k8s_openapi::jiff::Timestamp>, String, u64) {
    let name = pod.pod.metadata.name.clone().unwrap_or_default();
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit());
    let index = name[stem.len()..].parse().unwrap_or(0);
    (
        pod.pod.metadata.creation_timestamp.as_ref().map(|t| t.0),
        stem.to_string(),
        index,
    )
}
