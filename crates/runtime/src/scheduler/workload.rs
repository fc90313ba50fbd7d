//! Pod groups in the running scheduler: a popped member brings its group's other waiting
//! members, the framework decides them together, and the PodGroup's status says how it went.
//!
//! The decision itself is the framework's (`run_pod_group_cycle`, synchronous and tested
//! without a cluster); this module is the runtime around it: which pods make up the attempt,
//! the checks upstream makes before it (one profile, one priority), handing each member to its
//! binding cycle or back to the queue (nominated, when the group's preemption made room for
//! it), and the `PodGroupInitiallyScheduled` condition, written off the scheduling thread.

use std::{sync::Arc, time::Instant};

use k8s_openapi::{
    api::scheduling::v1beta1::PodGroup,
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};
use kube::api::Patch;
use serde_json::json;
use unisched_framework::{
    Code, Framework, MemberDecision, PodGroupCycleInput, PodGroupInfo, PodGroupKey, PodGroupStore, PodInfo,
    QueuedPodInfo, SchedulingAlgorithm, SchedulingFailure, Status, run_pod_group_cycle,
};
use unisched_plugins::names::GANG_SCHEDULING;

use super::{Shared, handle_failure, start_binding};
use crate::{
    metrics::{PODGROUP_ERROR, PODGROUP_SCHEDULED, PODGROUP_UNSCHEDULABLE, PODGROUP_WAITING_ON_PREEMPTION},
    writer::patch_for_metadata,
};

/// The condition upstream keeps on a PodGroup until its first successful placement.
pub(crate) const INITIALLY_SCHEDULED: &str = "PodGroupInitiallyScheduled";

/// The popped member that starts a group's cycle.
pub(super) struct GroupPop {
    /// Its group.
    pub(super) key: PodGroupKey,
    /// The member as popped.
    pub(super) qpi: QueuedPodInfo,
    /// Whether the attempt records plugin durations.
    pub(super) record: bool,
    /// When the attempt began.
    pub(super) start: Instant,
}

/// Schedules the popped pod's group: its waiting members with it, all or nothing for a gang.
pub(super) fn schedule_group(
    sh: &Arc<Shared>,
    groups: &PodGroupStore,
    fwk: &Arc<Framework>,
    algo: &mut SchedulingAlgorithm,
    pop: GroupPop,
) {
    let GroupPop {
        key,
        qpi,
        record,
        start,
    } = pop;
    let Some(group) = groups.group(&key) else {
        // Deleted after the pod passed PreEnqueue: it waits for the group to come back.
        let message = format!(
            "waiting for pods's pod group {:?} to appear in scheduling queue",
            key.name
        );
        wait_for_group(sh, fwk, qpi, message, start);
        return;
    };
    if groups.composites_enabled() && group.parent.is_some() {
        // A group of a tree: the whole tree is decided together, from its root.
        let pop = GroupPop {
            key,
            qpi,
            record,
            start,
        };
        super::composite::schedule_tree(sh, groups, fwk, algo, pop);
        return;
    }
    let others: Vec<String> = groups
        .unbound_members(&key)
        .into_iter()
        .filter(|uid| *uid != qpi.pod_info.uid)
        .collect();
    let mut members = vec![qpi];
    members.extend(sh.queue.take_group_members(others.iter().map(String::as_str)));
    // Members are tried in the order they were created, as upstream adds them as they arrive.
    members.sort_by_key(|m| creation_order(&m.pod_info));
    if let Err(message) = validate_members(group.priority, fwk, &members) {
        let status = Status::error(message);
        report_condition(sh, &group, &status);
        sh.metrics
            .workload
            .podgroup_attempt(PODGROUP_ERROR, fwk.profile_name(), start.elapsed());
        for m in members {
            let failure = SchedulingFailure::from_pod_group(m.pod_info.clone(), status.clone());
            handle_failure(sh, fwk, m, failure, start);
        }
        return;
    }
    let cache = sh.cache.as_ref();
    let already_scheduled = groups.counts(&key, &|uid| cache.is_assumed(uid)).scheduled;
    let result = run_pod_group_cycle(
        fwk,
        algo,
        cache,
        sh.queue.as_ref(),
        PodGroupCycleInput {
            group: &group,
            members: members.iter().map(|m| m.pod_info.clone()).collect(),
            already_scheduled,
            record_plugin_metrics: record,
        },
    );
    record_attempt(sh, fwk, &result.status, result.waiting_on_preemption, start);
    tracing::info!(
        pod_group = %key,
        members = members.len(),
        placement = result.placement.as_deref().unwrap_or(""),
        waiting_on_preemption = result.waiting_on_preemption,
        status = %result.status,
        "pod group scheduling cycle"
    );
    report_condition(sh, &group, &result.status);
    if !result.status.is_success() {
        // The members' own reservations, taken back, are no reason to retry them.
        sh.queue
            .forget_events_so_far(members.iter().map(|m| m.pod_info.uid.as_str()));
    }
    dispatch(sh, fwk, members, result.members, start);
}

/// The popped member's group (or tree) went away after it passed PreEnqueue: it waits, held by
/// GangScheduling, until the group is back.
pub(super) fn wait_for_group(
    sh: &Arc<Shared>,
    fwk: &Arc<Framework>,
    qpi: QueuedPodInfo,
    message: String,
    start: Instant,
) {
    let status = Status::unresolvable(message).with_plugin(GANG_SCHEDULING);
    let failure = SchedulingFailure::from_pod_group(qpi.pod_info.clone(), status);
    handle_failure(sh, fwk, qpi, failure, start);
}

/// The metrics of one group's (or tree's) cycle: its algorithm's time and its attempt's result.
/// Upstream times its algorithm up to its PostFilter; ours includes the group's preemption, which
/// only chooses (the evictions are written elsewhere).
pub(super) fn record_attempt(
    sh: &Arc<Shared>,
    fwk: &Framework,
    status: &Status,
    waiting_on_preemption: bool,
    start: Instant,
) {
    sh.metrics.workload.podgroup_algorithm(start.elapsed());
    let result = if status.is_success() {
        PODGROUP_SCHEDULED
    } else if status.is_rejected() && waiting_on_preemption {
        PODGROUP_WAITING_ON_PREEMPTION
    } else if status.is_rejected() {
        PODGROUP_UNSCHEDULABLE
    } else {
        PODGROUP_ERROR
    };
    sh.metrics
        .workload
        .podgroup_attempt(result, fwk.profile_name(), start.elapsed());
}

/// Hands each member to its binding cycle or back to the queue, as its decision says.
pub(super) fn dispatch(
    sh: &Arc<Shared>,
    fwk: &Arc<Framework>,
    members: Vec<QueuedPodInfo>,
    decisions: Vec<MemberDecision>,
    start: Instant,
) {
    for (qpi, decision) in members.into_iter().zip(decisions) {
        match decision {
            MemberDecision::Bind(task) => start_binding(sh, fwk, qpi, task, start),
            MemberDecision::Failed(mut f) => {
                // A member held back by the group with no rejector of its own waits for the
                // group's events (its pods, the PodGroup) rather than retrying on a timer.
                if f.status.is_rejected()
                    && f.unschedulable_plugins.is_empty()
                    && f.pending_plugins.is_empty()
                {
                    f.unschedulable_plugins.insert(GANG_SCHEDULING.to_string());
                }
                handle_failure(sh, fwk, qpi, *f, start);
            }
            MemberDecision::Skipped(why) => {
                tracing::debug!(pod = %qpi.pod_info.key(), why, "skipping pod-group member");
                sh.queue.done(&qpi.pod_info.uid);
            }
        }
    }
}

/// `(creationTimestamp, name)`: the order members arrived in.
pub(super) fn creation_order(pod: &PodInfo) -> (Option<Timestamp>, String) {
    (
        pod.pod.metadata.creation_timestamp.as_ref().map(|t| t.0),
        pod.pod.metadata.name.clone().unwrap_or_default(),
    )
}

/// Upstream's checks before a group (or a tree) is tried: every member under this profile, and
/// every member with the priority of the group (of the tree's root).
pub(super) fn validate_members(
    group_priority: i32,
    fwk: &Framework,
    members: &[QueuedPodInfo],
) -> Result<(), String> {
    for m in members {
        let name = m.pod_info.scheduler_name();
        if name != fwk.profile_name() {
            return Err(format!(
                "all pods in a single pod group should have the same .spec.schedulerName set, got: {name:?} and {:?}",
                fwk.profile_name()
            ));
        }
        let priority = m.pod_info.pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
        if priority != group_priority {
            return Err(format!(
                "all pods in a single pod group should have the same priority as the pod group's priority, got {priority} and {group_priority}"
            ));
        }
    }
    Ok(())
}

/// The `PodGroupInitiallyScheduled` condition for `status`, unless it would not change or would
/// take back a success (a later cycle for extra members does not undo the first placement).
fn condition_for(group: &PodGroup, status: &Status) -> Option<Condition> {
    let (value, reason) = match status.code() {
        Code::Success => ("True", "Scheduled"),
        _ if status.is_rejected() => ("False", "Unschedulable"),
        _ => ("False", "SchedulerError"),
    };
    let message = if status.is_success() {
        String::new()
    } else {
        status.message()
    };
    let existing = group
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == INITIALLY_SCHEDULED));
    if let Some(e) = existing {
        if e.status == "True" && value != "True" {
            return None;
        }
        if e.status == value && e.reason == reason && e.message == message {
            return None;
        }
    }
    let last_transition_time = match existing {
        Some(e) if e.status == value => e.last_transition_time.clone(),
        _ => Time(Timestamp::now()),
    };
    Some(Condition {
        type_: INITIALLY_SCHEDULED.into(),
        status: value.into(),
        reason: reason.into(),
        message,
        observed_generation: group.metadata.generation,
        last_transition_time,
    })
}

/// Patches the group's condition (strategic merge by condition type), off the scheduling
/// thread; a failure is logged, the next cycle writes again.
pub(super) fn report_condition(sh: &Arc<Shared>, group: &PodGroupInfo, status: &Status) {
    let Some(condition) = condition_for(&group.object, status) else {
        return;
    };
    let writer = sh.writer.clone();
    let key = group.key.clone();
    sh.handle.spawn(async move {
        let patch = Patch::Strategic(json!({ "status": { "conditions": [condition] } }));
        let client = writer.client().clone();
        let result = writer
            .write("patch", "podgroups/status", || {
                patch_for_metadata::<PodGroup>(
                    &client,
                    Some(&key.namespace),
                    &key.name,
                    Some("status"),
                    &patch,
                )
            })
            .await;
        if let Err(e) = result {
            tracing::warn!(pod_group = %key, error = %e, "patching PodGroup status");
        }
    });
}

#[cfg(test)]
mod tests {
    use k8s_openapi::{
        api::scheduling::v1beta1::PodGroupStatus, apimachinery::pkg::apis::meta::v1::ObjectMeta,
    };

    use super::*;

    fn group_with(condition: Option<(&str, &str, &str)>) -> PodGroup {
        PodGroup {
            metadata: ObjectMeta {
                generation: Some(3),
                ..Default::default()
            },
            status: condition.map(|(status, reason, message)| PodGroupStatus {
                conditions: Some(vec![Condition {
                    type_: INITIALLY_SCHEDULED.into(),
                    status: status.into(),
                    reason: reason.into(),
                    message: message.into(),
                    observed_generation: Some(2),
                    last_transition_time: Time(Timestamp::UNIX_EPOCH),
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_condition_follows_the_verdict_and_never_takes_back_a_success() {
        let unschedulable =
            Status::unschedulable("minCount (3) cannot be satisfied: 2 scheduled, 0 remaining");
        let c = condition_for(&group_with(None), &unschedulable).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            (
                "False",
                "Unschedulable",
                "minCount (3) cannot be satisfied: 2 scheduled, 0 remaining"
            )
        );
        assert_eq!(c.observed_generation, Some(3));

        let c = condition_for(&group_with(None), &Status::error("boom")).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "SchedulerError")
        );

        let c = condition_for(
            &group_with(Some(("False", "Unschedulable", "x"))),
            &Status::success(),
        )
        .unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "Scheduled"));
        assert_ne!(
            c.last_transition_time.0,
            Timestamp::UNIX_EPOCH,
            "a new status is a transition"
        );

        assert!(
            condition_for(&group_with(Some(("True", "Scheduled", ""))), &unschedulable).is_none(),
            "a success is not taken back"
        );
        assert!(
            condition_for(
                &group_with(Some((
                    "False",
                    "Unschedulable",
                    "minCount (3) cannot be satisfied: 2 scheduled, 0 remaining"
                ))),
                &unschedulable
            )
            .is_none(),
            "an unchanged condition is not written again"
        );
        let c = condition_for(
            &group_with(Some(("False", "Unschedulable", "old"))),
            &unschedulable,
        )
        .unwrap();
        assert_eq!(
            c.last_transition_time.0,
            Timestamp::UNIX_EPOCH,
            "same status: the transition time stays"
        );
    }
}
