//! Trees of groups in the running scheduler (the CompositePodGroup gate): a popped member of any
//! PodGroup of a tree brings the waiting members of every PodGroup of the tree, the framework
//! decides the root and its whole subtree together (`run_composite_cycle`), and each PodGroup's
//! status says how it went (composites get no condition, as upstream writes none).

use std::{collections::BTreeMap, sync::Arc};

use unisched_framework::{
    CompositeCycleInput, Framework, GroupNodeKey, GroupRef, GroupTree, PodGroupInfo, PodGroupKey,
    PodGroupStore, QueuedPodInfo, SchedulingAlgorithm, SchedulingFailure, Status, run_composite_cycle,
};
use unisched_plugins::names::GANG_SCHEDULING;

use super::{
    Shared, handle_failure,
    workload::{
        GroupPop, check_against_root, creation_order, dispatch, forget_own_reverts, record_attempt,
        refuse_invalid, report_condition, wait_for_group,
    },
};

/// The popped member and the waiting members of every PodGroup of the tree, by group, each
/// group's in the order its members were created (as upstream adds them as they arrive).
fn take_members(
    sh: &Arc<Shared>,
    groups: &PodGroupStore,
    leaves: &[Arc<PodGroupInfo>],
    popped: QueuedPodInfo,
) -> BTreeMap<PodGroupKey, Vec<QueuedPodInfo>> {
    let uid = popped.pod_info.uid.clone();
    let others: Vec<String> = leaves
        .iter()
        .flat_map(|g| groups.unbound_members(&g.key))
        .filter(|other| *other != uid)
        .collect();
    let mut taken = vec![popped];
    taken.extend(sh.queue.take_group_members(others.iter().map(String::as_str)));
    let mut members: BTreeMap<PodGroupKey, Vec<QueuedPodInfo>> = BTreeMap::new();
    for m in taken {
        if let Some(group) = PodGroupKey::of_pod(&m.pod_info.pod) {
            members.entry(group).or_default().push(m);
        }
    }
    for list in members.values_mut() {
        list.sort_by_key(|m| creation_order(&m.pod_info));
    }
    members
}

/// Schedules the tree the popped pod's group is in, from its root.
pub(super) fn schedule_tree(
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
    let tree = match groups.root(&GroupNodeKey::Group(key.clone())) {
        Ok(GroupNodeKey::Composite(root)) => groups.tree(&root),
        _ => None,
    };
    let Some(tree @ GroupTree::Composite { .. }) = tree else {
        // The tree lost a composite after the pod passed PreEnqueue: it waits for it to return.
        let message = format!(
            "waiting for composite pod group tree of pod group {:?} to appear in scheduling queue",
            key.name
        );
        wait_for_group(sh, fwk, qpi, message, start);
        return;
    };
    let GroupTree::Composite { info: root, .. } = &tree else {
        return;
    };
    let leaves = tree.leaves();
    let mut members = take_members(sh, groups, &leaves, qpi);
    let leaf_keys: Vec<&PodGroupKey> = leaves.iter().map(|g| &g.key).collect();
    let checked = check_against_root(
        sh,
        fwk,
        groups,
        GroupRef::Composite(root),
        &leaf_keys,
        members.values().flatten(),
    );
    if let Err(message) = checked {
        refuse_invalid(sh, fwk, &leaves, members.into_values().flatten(), message, start);
        return;
    }
    let cache = sh.cache.as_ref();
    let already_scheduled = leaves
        .iter()
        .map(|g| {
            let placed = groups.counts(&g.key, &|uid| cache.is_assumed(uid)).scheduled;
            (g.key.clone(), placed)
        })
        .collect();
    let result = run_composite_cycle(
        fwk,
        algo,
        cache,
        sh.queue.as_ref(),
        CompositeCycleInput {
            tree: &tree,
            members: members
                .iter()
                .map(|(k, v)| (k.clone(), v.iter().map(|m| m.pod_info.clone()).collect()))
                .collect(),
            already_scheduled,
            record_plugin_metrics: record,
        },
    );
    record_attempt(sh, fwk, &result.status, result.waiting_on_preemption, start);
    tracing::info!(
        composite_pod_group = %root.key,
        members = members.values().map(Vec::len).sum::<usize>(),
        waiting_on_preemption = result.waiting_on_preemption,
        status = %result.status,
        "composite pod group scheduling cycle"
    );
    forget_own_reverts(
        sh,
        &result.status,
        result.waiting_on_preemption,
        members.values().flatten().map(|m| m.pod_info.uid.as_str()),
    );
    for group_result in result.groups {
        report_condition(sh, &group_result.group, &group_result.result.status);
        let queued = members.remove(&group_result.group.key).unwrap_or_default();
        dispatch(sh, fwk, queued, group_result.result.members, start);
    }
    // Members of a group no longer in the tree (moved while popped) go back to the queue.
    for m in members.into_values().flatten() {
        let status = Status::unresolvable(format!(
            "waiting for composite pod group {:?} tree to meet quorum",
            root.key.name
        ))
        .with_plugin(GANG_SCHEDULING);
        let failure = SchedulingFailure::from_pod_group(m.pod_info.clone(), status);
        handle_failure(sh, fwk, m, failure, start);
    }
}
