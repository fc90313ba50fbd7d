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
    Code, Framework, GroupRef, MemberDecision, PodGroupCycleInput, PodGroupInfo, PodGroupKey, PodGroupStore,
    PodInfo, QueuedPodInfo, SchedulingAlgorithm, SchedulingFailure, Status, run_pod_group_cycle,
};
use unisched_plugins::names::GANG_SCHEDULING;

use super::{Shared, handle_failure, start_binding};
use crate::{
    metrics::{PODGROUP_ERROR, PODGROUP_SCHEDULED, PODGROUP_UNSCHEDULABLE, PODGROUP_WAITING_ON_PREEMPTION},
    writer::patch_for_metadata,
};

/// A pod's preemption policy when it sets none.
const PREEMPT_LOWER_PRIORITY: &str = "PreemptLowerPriority";

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
    let checked = check_against_root(sh, fwk, groups, GroupRef::Group(&group), &[&key], &members);
    if let Err(message) = checked {
        refuse_invalid(sh, fwk, &[group], members, message, start);
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
    forget_own_reverts(
        sh,
        &result.status,
        result.waiting_on_preemption,
        members.iter().map(|m| m.pod_info.uid.as_str()),
    );
    dispatch(sh, fwk, members, result.members, start);
}

/// After a failed group (or tree) cycle, leaves the scheduler's own changes recorded so far out
/// of its members' replay: the members' own reservations, taken back, are no reason to retry
/// them. Cluster events recorded during the cycle still count: a victim's claim deallocated while
/// the group was tried is what frees its devices (when every event was forgotten, such a gang
/// waited for the unschedulable-pods flush; seen under load in `gang_faults`). Not after a cycle
/// that preempted: replayed, its reverts cost at most one early retry, which PreEnqueue holds
/// while the evictions are written.
pub(super) fn forget_own_reverts<'a>(
    sh: &Shared,
    status: &Status,
    waiting_on_preemption: bool,
    members: impl IntoIterator<Item = &'a str>,
) {
    if !status.is_success() && !waiting_on_preemption {
        sh.queue.forget_own_events_so_far(members);
    }
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

/// What every pod of a group (or of a tree) must share with its root, checked before the group
/// is tried (upstream's `validatePodGroup`).
pub(super) struct GroupRules<'a> {
    /// The root's priority.
    pub(super) priority: i32,
    /// The root's own `preemptionPolicy`; read only with the PodGroupPreemptionPolicy gate.
    pub(super) preemption_policy: Option<&'a str>,
    /// The PodGroupPreemptionPolicy gate: members must have the root's policy; without it they
    /// must have the first member's.
    pub(super) policy_gate: bool,
}

/// A pod's preemption policy (unset: `PreemptLowerPriority`).
fn preemption_policy_of(pod: &PodInfo) -> &str {
    pod.pod
        .spec
        .as_ref()
        .and_then(|s| s.preemption_policy.as_deref())
        .unwrap_or(PREEMPT_LOWER_PRIORITY)
}

/// Upstream's checks before a group (or a tree) is tried, over its queued members first and then
/// its members already placed: every pod under this profile, with the root's priority, and with
/// one preemption policy (the root's with PodGroupPreemptionPolicy, else the first member's).
pub(super) fn validate_members<'p>(
    rules: &GroupRules<'_>,
    profile: &str,
    members: impl IntoIterator<Item = &'p PodInfo>,
) -> Result<(), String> {
    let mut policy: Option<&str> = rules
        .policy_gate
        .then(|| rules.preemption_policy.unwrap_or(PREEMPT_LOWER_PRIORITY));
    for pod in members {
        let name = pod.scheduler_name();
        if name != profile {
            return Err(format!(
                "all pods in a single pod group should have the same .spec.schedulerName set, got: {name:?} and {profile:?}"
            ));
        }
        let priority = pod.pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
        if priority != rules.priority {
            return Err(format!(
                "all pods in a single pod group should have the same priority as the pod group's priority, got {priority} and {}",
                rules.priority
            ));
        }
        let own = preemption_policy_of(pod);
        match policy {
            Some(shared) if own != shared && rules.policy_gate => {
                return Err(format!(
                    "all pods in a single pod group should have the same preemption policy as the pod group's preemption policy, got {own} and {shared}"
                ));
            }
            Some(shared) if own != shared => {
                return Err(format!(
                    "all pods in a single pod group should have the same preemption policy, got {own} and {shared}"
                ));
            }
            Some(_) => {}
            None => policy = Some(own),
        }
    }
    Ok(())
}

/// A group (or tree) whose pods do not agree with its root is not tried: an error on every
/// PodGroup's condition and on every member, counted as an attempt that ended in error (before
/// any algorithm ran).
pub(super) fn refuse_invalid(
    sh: &Arc<Shared>,
    fwk: &Arc<Framework>,
    groups: &[Arc<PodGroupInfo>],
    members: impl IntoIterator<Item = QueuedPodInfo>,
    message: String,
    start: Instant,
) {
    let status = Status::error(message);
    sh.metrics
        .workload
        .podgroup_attempt(PODGROUP_ERROR, fwk.profile_name(), start.elapsed());
    for group in groups {
        report_condition(sh, group, &status);
    }
    for m in members {
        let failure = SchedulingFailure::from_pod_group(m.pod_info.clone(), status.clone());
        handle_failure(sh, fwk, m, failure, start);
    }
}

/// [`validate_members`] for a group or a tree's `root`: its queued members, then the members of
/// its PodGroups (`leaves`) already bound, as the cache has them.
pub(super) fn check_against_root<'q>(
    sh: &Shared,
    fwk: &Framework,
    store: &PodGroupStore,
    root: GroupRef<'_>,
    leaves: &[&PodGroupKey],
    queued: impl IntoIterator<Item = &'q QueuedPodInfo>,
) -> Result<(), String> {
    let rules = GroupRules {
        priority: root.priority(),
        preemption_policy: root.preemption_policy(),
        policy_gate: sh.group_preemption_policy,
    };
    let placed: Vec<Arc<PodInfo>> = leaves
        .iter()
        .flat_map(|key| store.bound_members(key))
        .filter_map(|uid| sh.cache.get_pod(&uid))
        .collect();
    let members = queued
        .into_iter()
        .map(|m| m.pod_info.as_ref())
        .chain(placed.iter().map(Arc::as_ref));
    validate_members(&rules, fwk.profile_name(), members)
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
    use unisched_plugins::testing::PodBuilder;

    use super::*;

    /// Upstream's `TestValidatePodGroup` cases: one profile, the root's priority and one
    /// preemption policy over the queued members and then the placed ones.
    #[test]
    fn a_group_is_tried_only_when_its_pods_agree_with_its_root() {
        const NEVER: &str = "Never";
        const LOWER: &str = "PreemptLowerPriority";
        let pod = |name: &str, priority: i32, policy: Option<&str>| {
            let mut b = PodBuilder::new(name).priority(priority).scheduler_name("sched1");
            if let Some(p) = policy {
                b = b.preemption_policy(p);
            }
            b.info()
        };
        let other_profile = PodBuilder::new("p2").priority(10).scheduler_name("sched2").info();
        // (name, root priority, root policy, gate, queued, placed, error)
        type Case = (
            &'static str,
            i32,
            Option<&'static str>,
            bool,
            Vec<PodInfo>,
            Vec<PodInfo>,
            Option<&'static str>,
        );
        let cases: Vec<Case> = vec![
            (
                "priorities match",
                10,
                None,
                false,
                vec![pod("p1", 10, None), pod("p2", 10, None)],
                vec![],
                None,
            ),
            (
                "different priorities across pods",
                10,
                None,
                false,
                vec![pod("p1", 9, None), pod("p2", 10, None)],
                vec![],
                Some(
                    "all pods in a single pod group should have the same priority as the pod group's priority, got 9 and 10",
                ),
            ),
            (
                "a placed pod with another profile",
                10,
                None,
                false,
                vec![pod("p1", 10, None)],
                vec![other_profile],
                Some(
                    r#"all pods in a single pod group should have the same .spec.schedulerName set, got: "sched2" and "sched1""#,
                ),
            ),
            (
                "a placed pod with another priority",
                10,
                None,
                false,
                vec![pod("p1", 10, None)],
                vec![pod("p2", 9, None)],
                Some(
                    "all pods in a single pod group should have the same priority as the pod group's priority, got 9 and 10",
                ),
            ),
            (
                "policies match the group's (gate on)",
                0,
                Some(NEVER),
                true,
                vec![pod("p1", 0, Some(NEVER)), pod("p2", 0, Some(NEVER))],
                vec![],
                None,
            ),
            (
                "different policies across pods (gate on)",
                0,
                Some(NEVER),
                true,
                vec![pod("p1", 0, Some(LOWER)), pod("p2", 0, Some(NEVER))],
                vec![],
                Some(
                    "all pods in a single pod group should have the same preemption policy as the pod group's preemption policy, got PreemptLowerPriority and Never",
                ),
            ),
            (
                "pods agree with each other but not with the group (gate on)",
                0,
                Some(NEVER),
                true,
                vec![pod("p1", 0, Some(LOWER)), pod("p2", 0, None)],
                vec![],
                Some(
                    "all pods in a single pod group should have the same preemption policy as the pod group's preemption policy, got PreemptLowerPriority and Never",
                ),
            ),
            (
                "the group's policy is not read with the gate off",
                0,
                Some(NEVER),
                false,
                vec![pod("p1", 0, Some(LOWER)), pod("p2", 0, Some(LOWER))],
                vec![],
                None,
            ),
            (
                "pods disagree with the first pod (gate off)",
                0,
                Some(NEVER),
                false,
                vec![pod("p1", 0, Some(LOWER)), pod("p2", 0, Some(NEVER))],
                vec![],
                Some(
                    "all pods in a single pod group should have the same preemption policy, got Never and PreemptLowerPriority",
                ),
            ),
            (
                "an unset policy is PreemptLowerPriority",
                0,
                None,
                true,
                vec![pod("p1", 0, None), pod("p2", 0, Some(LOWER))],
                vec![],
                None,
            ),
            (
                "a placed pod with another policy (gate off)",
                0,
                None,
                false,
                vec![pod("p1", 0, None)],
                vec![pod("p2", 0, Some(NEVER))],
                Some(
                    "all pods in a single pod group should have the same preemption policy, got Never and PreemptLowerPriority",
                ),
            ),
        ];
        for (name, priority, policy, gate, queued, placed, want) in cases {
            let rules = GroupRules {
                priority,
                preemption_policy: policy,
                policy_gate: gate,
            };
            let got = validate_members(&rules, "sched1", queued.iter().chain(&placed));
            assert_eq!(got.err().as_deref(), want, "{name}");
        }
    }

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
