//! Pod-group preemption (upstream's `PodGroupEvaluator`): a PodGroup that does not fit as a
//! whole makes room for all its members at once.
//!
//! The domain is the whole cluster. Every victim (a pod, or a PodGroup disrupted as a whole) of
//! lower priority than the group is taken out, and the group's placement is run again on what
//! is left ([`PodGroupSimulator`]: the same cycle, the same plugins, DRA's freed devices
//! included). If the group still does not fit, preemption cannot help. If it does, the victims
//! are put back one by one, most important first and those a PodDisruptionBudget protects
//! before the others: a victim stays when every placed member still passes Filter on its node
//! with it back (members checked in the order they were placed, each one counted on its node
//! for the next). What could not be put back is evicted, and every member is nominated to the
//! node the dry run chose. The evictions go to the same [`Preemptor`](super::Preemptor) as a
//! single pod's, named after the group.
//!
//! Who preempts: the group's priority; `preemptionPolicy: Never` on any member keeps the group
//! from preempting, unless PodGroupPreemptionPolicy is on, when the group's own
//! `preemptionPolicy` decides. The root CompositePodGroup of a tree that does not fit preempts
//! the same way for the whole tree: its own priority and policy, every member of the tree
//! nominated, and its UID naming the preemption while it is written. A group whose members are nominated to nodes where a victim of
//! an earlier preemption is still terminating waits for it (`ongoing preemption`) and keeps its
//! nominations.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::Instant,
};

use unisched_framework::{
    Code, FrameworkHandle, GroupRef, NodeInfo, PodGroupPostFilterInput, PodGroupPostFilterResult,
    PodGroupSimulator, PodInfo, ProposedAssignment, Snapshot, Status,
};

use super::{
    DefaultPreemption, NAME, NOT_ELIGIBLE_NEVER,
    eligibility::terminating_by_preemption,
    execution::{GroupPreemptor, PreemptionCounts, PreemptionPlan},
    pdb::{Budget, split_victims_by_violation},
    victim::{GroupView, Victim, VictimKind, sort_most_important_first},
};

/// Upstream's reason when nothing in the cluster has a lower priority than the group.
pub const NO_GROUP_VICTIMS: &str = "No preemption victims found for incoming preemptor";
/// Upstream's (successful) verdict while an earlier preemption of the group still terminates.
pub const ONGOING_PREEMPTION: &str = "ongoing preemption on nominated nodes";
/// Upstream's PreEnqueue reason while the group's evictions are being written.
pub const WAITING_FOR_GROUP_PREEMPTION: &str = "waiting for the preemption for this pod group to be finished";
/// The name upstream gives the whole-cluster domain (its events say `on node cluster`).
const CLUSTER_DOMAIN: &str = "cluster";
/// The scheduling.k8s.io value that keeps a preemptor from preempting.
const NEVER: &str = "Never";

/// Whether the group (or the tree's root composite) may preempt: with PodGroupPreemptionPolicy
/// its own policy (unset: it may), otherwise no member may say `Never` (upstream's
/// `resolvePreemptionPolicy` and `resolveCompositePreemptionPolicy`).
pub fn resolve_preemption_policy(group: GroupRef<'_>, members: &[Arc<PodInfo>], gate: bool) -> bool {
    if gate {
        return group.preemption_policy() != Some(NEVER);
    }
    !members
        .iter()
        .any(|m| m.pod.spec.as_ref().and_then(|s| s.preemption_policy.as_deref()) == Some(NEVER))
}

/// What names the group's preemption while it is written (PreEnqueue holds its members, or the
/// members of the whole tree, on it): its UID, else its `namespace/name`.
pub(super) fn group_preemptor_id(group: GroupRef<'_>) -> String {
    group
        .uid()
        .map_or_else(|| group.key().to_string(), str::to_string)
}

/// What the dry run chose: the victims in eviction order and how many violate a budget.
struct Chosen {
    victims: Vec<Victim>,
    num_pdb_violations: usize,
}

impl DefaultPreemption {
    /// Upstream `PodGroupEvaluator.Preempt`, without the `pod group preemption: ` prefix.
    pub(super) fn preempt_group(
        &self,
        fwk: &dyn FrameworkHandle,
        input: &PodGroupPostFilterInput<'_>,
        simulator: &mut dyn PodGroupSimulator,
    ) -> (Option<PodGroupPostFilterResult>, Status) {
        let group = input.group;
        if !resolve_preemption_policy(group, input.members, self.group_preemption_policy) {
            return (None, Status::unschedulable(NOT_ELIGIBLE_NEVER));
        }
        let groups = GroupView::build(self.pod_groups.as_deref(), input.snapshot);
        if ongoing_preemption(group, input.members, input.snapshot, &groups) {
            let nominations = input
                .members
                .iter()
                .map(|m| {
                    (
                        m.uid.clone(),
                        m.nominated_node_name().unwrap_or_default().to_string(),
                    )
                })
                .collect();
            return (
                Some(PodGroupPostFilterResult { nominations }),
                Status::new(Code::Success, [ONGOING_PREEMPTION]),
            );
        }
        let started = Instant::now();
        let (chosen, nominations) = match self.choose_group_victims(fwk, input, simulator, &groups) {
            Ok(c) => c,
            Err(status) => {
                self.observe_group_evaluation(group, status.code(), started);
                return (None, status);
            }
        };
        self.observe_group_evaluation(group, Code::Success, started);
        let counts = PreemptionCounts {
            pdb_violations: chosen.num_pdb_violations,
            group_disruptions: chosen
                .victims
                .iter()
                .filter(|v| v.kind != VictimKind::Pod)
                .count(),
        };
        let victims: Vec<Arc<PodInfo>> = chosen.victims.into_iter().flat_map(|v| v.pods).collect();
        let count = victims.len();
        tracing::debug!(
            pod_group = %group.key(),
            composite = group.is_composite(),
            victims = count,
            pdb_violations = counts.pdb_violations,
            "pod group preemption"
        );
        self.execute_group(fwk, group, input.members, victims, counts);
        (
            Some(PodGroupPostFilterResult { nominations }),
            Status::new(
                Code::Success,
                [format!(
                    "found a placement for podgroup, preempting {count} victims"
                )],
            ),
        )
    }

    fn observe_group_evaluation(&self, group: GroupRef<'_>, result: Code, started: Instant) {
        let preemptor_type = if group.is_composite() {
            "compositepodgroup"
        } else {
            "podgroup"
        };
        if let Some(p) = &self.preemptor {
            p.evaluated(preemptor_type, result, started.elapsed());
        }
    }

    /// Upstream's evaluation: the fewest victims (a PodDisruptionBudget broken only when
    /// unavoidable) whose removal lets the whole group fit, and where each member goes.
    fn choose_group_victims(
        &self,
        fwk: &dyn FrameworkHandle,
        input: &PodGroupPostFilterInput<'_>,
        simulator: &mut dyn PodGroupSimulator,
        groups: &GroupView,
    ) -> Result<(Chosen, BTreeMap<String, String>), Status> {
        let group = input.group;
        let potential: Vec<Victim> = groups
            .victims_on(input.snapshot.nodes())
            .into_iter()
            .filter(|v| v.priority < group.priority())
            .collect();
        if potential.is_empty() {
            return Err(Status::unresolvable(NO_GROUP_VICTIMS));
        }
        let removed: Vec<Arc<PodInfo>> = potential.iter().flat_map(|v| v.pods.iter().cloned()).collect();
        let placement = simulator.place_without(&removed);
        if !placement.status.is_success() {
            return Err(placement.status);
        }
        let mut assignments = placement.assignments;
        let pdbs = self.pdbs.as_ref().map(|l| l.list()).unwrap_or_default();
        let budgets = Budget::parse_all(&pdbs);
        let chosen = reprieve(
            fwk,
            input.snapshot,
            &removed,
            potential,
            &mut assignments,
            &budgets,
        )?;
        let nominations = assignments
            .iter()
            .map(|a| (a.pod.uid.clone(), a.node.clone()))
            .collect();
        Ok((chosen, nominations))
    }

    /// Hands the evictions to the preemptor, named after the group.
    fn execute_group(
        &self,
        fwk: &dyn FrameworkHandle,
        group: GroupRef<'_>,
        members: &[Arc<PodInfo>],
        victims: Vec<Arc<PodInfo>>,
        counts: PreemptionCounts,
    ) {
        let Some(first) = members.first() else { return };
        // A victim still waiting at Permit is not bound: reject it there instead of deleting it.
        let (rejected_at_permit, victims) = victims
            .into_iter()
            .partition(|v| fwk.reject_waiting_pod(&v.uid, NAME, "preempted"));
        let plan = PreemptionPlan {
            preemptor: first.clone(),
            group: Some(GroupPreemptor {
                id: group_preemptor_id(group),
                key: group.key().to_string(),
                composite: group.is_composite(),
                members: members.to_vec(),
            }),
            node: CLUSTER_DOMAIN.to_string(),
            scheduler_name: fwk.profile_name().to_string(),
            victims,
            rejected_at_permit,
            // Upstream clears the nominations of lower-priority pods nominated to the
            // candidate's node, and a group's candidate is the cluster, which no pod is
            // nominated to.
            clear_nominations: Vec::new(),
            counts,
        };
        match &self.preemptor {
            Some(p) => p.execute(plan),
            None => tracing::debug!(pod_group = %group.key(), "no preemptor configured; not evicting"),
        }
    }
}

/// A member is nominated to a node where a lower-priority victim of a preemption still
/// terminates.
fn ongoing_preemption(
    group: GroupRef<'_>,
    members: &[Arc<PodInfo>],
    snapshot: &Snapshot,
    groups: &GroupView,
) -> bool {
    members
        .iter()
        .filter_map(|m| m.nominated_node_name())
        .filter_map(|n| snapshot.get(n))
        .any(|node| {
            node.pods
                .iter()
                .any(|p| groups.priority_of(p) < group.priority() && terminating_by_preemption(p))
        })
}

/// The nodes the reprieve works on: copies of the snapshot's, without the removed pods.
struct WorkingNodes {
    nodes: HashMap<String, NodeInfo>,
}

impl WorkingNodes {
    fn new(snapshot: &Snapshot, removed: &[Arc<PodInfo>], assignments: &[ProposedAssignment]) -> Self {
        let mut by_node: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for p in removed {
            if let Some(n) = p.node_name() {
                by_node.entry(n).or_default().push(&p.uid);
            }
        }
        for a in assignments {
            by_node.entry(&a.node).or_default();
        }
        let nodes = by_node
            .into_iter()
            .filter_map(|(name, uids)| {
                let mut info = (**snapshot.get(name)?).clone();
                for uid in uids {
                    info.remove_pod(uid);
                }
                Some((name.to_string(), info))
            })
            .collect();
        WorkingNodes { nodes }
    }

    /// Puts the victim's pods back, telling every member's PreFilter extensions.
    fn add_back(
        &mut self,
        fwk: &dyn FrameworkHandle,
        victim: &Victim,
        assignments: &mut [ProposedAssignment],
    ) -> Result<(), Status> {
        for p in &victim.pods {
            let Some(node) = p.node_name().and_then(|n| self.nodes.get_mut(n)) else {
                continue;
            };
            node.add_pod(p.clone());
            for a in assignments.iter_mut() {
                let s = fwk.run_pre_filter_add_pod(&mut a.state, &a.pod, p, node);
                if !s.is_success() {
                    return Err(s);
                }
            }
        }
        Ok(())
    }

    /// Takes the victim's pods out again.
    fn take_out(
        &mut self,
        fwk: &dyn FrameworkHandle,
        victim: &Victim,
        assignments: &mut [ProposedAssignment],
    ) -> Result<(), Status> {
        for p in &victim.pods {
            let Some(node) = p.node_name().and_then(|n| self.nodes.get_mut(n)) else {
                continue;
            };
            node.remove_pod(&p.uid);
            for a in assignments.iter_mut() {
                let s = fwk.run_pre_filter_remove_pod(&mut a.state, &a.pod, p, node);
                if !s.is_success() {
                    return Err(s);
                }
            }
        }
        Ok(())
    }

    /// Whether every member still passes Filter on its node, in placement order, each placed
    /// member counted on its node for the next ones: on the node copy, and reserved, so that what
    /// a stateful plugin hands out (DRA's devices) is taken for the members after it, as upstream's
    /// reprieve does. The nodes and the reservations are left as they were.
    fn members_fit(&mut self, fwk: &dyn FrameworkHandle, assignments: &mut [ProposedAssignment]) -> bool {
        let mut placed: Vec<usize> = Vec::new();
        let mut fits = true;
        for (i, a) in assignments.iter_mut().enumerate() {
            let Some(node) = self.nodes.get_mut(&a.node) else {
                fits = false;
                break;
            };
            if !fwk.run_filter_with_nominated(&a.state, &a.pod, node).is_success() {
                fits = false;
                break;
            }
            node.add_pod(a.assumed.clone());
            placed.push(i);
            if !fwk.run_reserve(&mut a.state, &a.assumed, &a.node).is_success() {
                fits = false;
                break;
            }
        }
        for i in placed.into_iter().rev() {
            let a = &mut assignments[i];
            fwk.run_unreserve(&mut a.state, &a.assumed, &a.node);
            if let Some(n) = self.nodes.get_mut(&a.node) {
                n.remove_pod(&a.assumed.uid);
            }
        }
        fits
    }
}

/// Puts back every victim the members can live with; the rest are chosen.
fn reprieve(
    fwk: &dyn FrameworkHandle,
    snapshot: &Snapshot,
    removed: &[Arc<PodInfo>],
    mut potential: Vec<Victim>,
    assignments: &mut [ProposedAssignment],
    budgets: &[Budget],
) -> Result<Chosen, Status> {
    let mut nodes = WorkingNodes::new(snapshot, removed, assignments);
    sort_most_important_first(&mut potential);
    let (violating, fine) = split_victims_by_violation(potential, budgets);
    let mut victims = Vec::new();
    let mut num_pdb_violations = 0;
    let lists = [violating, fine.into_iter().map(|v| (v, 0)).collect()];
    for list in lists {
        for (v, violations) in list {
            nodes.add_back(fwk, &v, assignments)?;
            if !nodes.members_fit(fwk, assignments) {
                nodes.take_out(fwk, &v, assignments)?;
                num_pdb_violations += violations;
                victims.push(v);
            }
        }
    }
    sort_most_important_first(&mut victims);
    Ok(Chosen {
        victims,
        num_pdb_violations,
    })
}

impl unisched_framework::PodGroupPostFilterPlugin for DefaultPreemption {
    fn pod_group_post_filter(
        &self,
        fwk: &dyn FrameworkHandle,
        input: &PodGroupPostFilterInput<'_>,
        simulator: &mut dyn PodGroupSimulator,
    ) -> (Option<PodGroupPostFilterResult>, Status) {
        let (result, status) = self.preempt_group(fwk, input, simulator);
        if let Some(p) = &self.preemptor {
            p.group_attempted(status.code());
        }
        let message = status.message();
        if message.is_empty() {
            return (result, status);
        }
        (
            result,
            Status::new(status.code(), [format!("pod group preemption: {message}")]),
        )
    }
}
