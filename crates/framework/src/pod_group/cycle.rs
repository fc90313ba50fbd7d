//! The pod-group scheduling cycle: a group's pods decided together, on tentative reservations.
//!
//! Each member goes through the ordinary scheduling cycle (PreFilter … Reserve, Permit) in turn,
//! so a member placed earlier is already assumed in the cache when the next one is filtered: the
//! group is decided on one view of the cluster that includes its own earlier choices. After every
//! member the feasibility check (the gang's quorum) says whether the attempt can still succeed;
//! when it cannot, or when the attempt ends short of the quorum, every member placed is taken
//! back (Unreserve, forget; last placed first) and nothing of the group reaches the binding
//! cycle: no pod bound, no claim allocated, no nomination made (members do not run PostFilter).
//!
//! With placements (a topology constraint), the group is tried on each candidate placement and
//! taken back after each try; the placement scorers pick among those that worked, and the group
//! is placed again on the winner with every member pinned to the node its try chose. Pinning
//! makes the final pass repeat the scored try rather than a new search that could differ.

use std::{collections::BTreeSet, sync::Arc};

use super::{Placement, PlacementProgress, PodGroupAssignments, PodGroupInfo};
use crate::{
    BindingTask, CycleOutcome, Framework, PodGroupAttempt, PodInfo, PodNominator, SchedulerCache,
    SchedulingAlgorithm, SchedulingFailure, Status, scheduler::run_member_cycle,
};

/// Upstream's generic verdict for a group that cannot be placed, which its messages quote.
const POD_GROUP_UNSCHEDULABLE: &str = "pod group is unschedulable";

/// What happens to one member after the group's cycle.
#[derive(Debug)]
pub enum MemberDecision {
    /// Placed: run its binding cycle.
    Bind(Box<BindingTask>),
    /// Not placed: requeue it and say why.
    Failed(Box<SchedulingFailure>),
    /// Not tried (being deleted, already assumed): the caller marks it done.
    Skipped(&'static str),
}

/// The group's verdict and each member's decision.
#[derive(Debug)]
pub struct PodGroupCycleResult {
    /// Success (placed), a rejection (the group does not fit; its message is upstream's), or an
    /// error.
    pub status: Status,
    /// One decision per member, in the order the members were given.
    pub members: Vec<MemberDecision>,
    /// The placement chosen, when the group had candidate placements.
    pub placement: Option<String>,
}

/// What became of one member in one try.
#[derive(Debug)]
enum Tried {
    /// Assumed and reserved; still held.
    Placed(Box<BindingTask>),
    /// Was placed, and taken back.
    Reverted,
    /// Its own cycle failed.
    Failed(Box<SchedulingFailure>),
    /// Not attempted.
    Skipped(&'static str),
}

/// One try of the whole group on one placement.
#[derive(Debug)]
struct Try {
    /// The verdict; a rejection's message is upstream's whole message for the group.
    status: Status,
    /// Whether the verdict is upstream's generic "pod group is unschedulable" (the quorum could
    /// not be met before any member was tried, or was still short after the last one), which is
    /// what a placement failure quotes of it, rather than the reason.
    marked: bool,
    /// Per member; `None` when the try stopped before reaching it.
    members: Vec<Option<Tried>>,
}

impl Try {
    fn placed_count(&self) -> usize {
        self.members
            .iter()
            .filter(|m| matches!(m, Some(Tried::Placed(_))))
            .count()
    }

    fn proposed(&self) -> Vec<(String, String)> {
        self.members
            .iter()
            .filter_map(|m| match m {
                Some(Tried::Placed(t)) => Some((t.pod.uid.clone(), t.node.clone())),
                _ => None,
            })
            .collect()
    }
}

/// Everything a try needs besides the members.
struct Context<'a> {
    fwk: &'a Framework,
    cache: &'a dyn SchedulerCache,
    nominator: &'a dyn PodNominator,
    group: &'a PodGroupInfo,
    already_scheduled: usize,
    record_plugin_metrics: bool,
}

/// What one pod-group cycle decides about.
#[derive(Debug)]
pub struct PodGroupCycleInput<'a> {
    /// The group.
    pub group: &'a PodGroupInfo,
    /// Its pods taken from the queue together, in the order they are tried.
    pub members: Vec<Arc<PodInfo>>,
    /// Members bound or assumed before this cycle.
    pub already_scheduled: usize,
    /// Whether the members' attempts record plugin durations.
    pub record_plugin_metrics: bool,
}

/// Runs the pod-group cycle.
pub fn run_pod_group_cycle(
    fwk: &Framework,
    algo: &mut SchedulingAlgorithm,
    cache: &dyn SchedulerCache,
    nominator: &dyn PodNominator,
    input: PodGroupCycleInput<'_>,
) -> PodGroupCycleResult {
    let PodGroupCycleInput {
        group,
        members,
        already_scheduled,
        record_plugin_metrics,
    } = input;
    let ctx = Context {
        fwk,
        cache,
        nominator,
        group,
        already_scheduled,
        record_plugin_metrics,
    };
    let placements = if fwk.has_placement_generate_plugins() {
        let snapshot = cache.update_snapshot();
        match fwk.run_placement_generate(group, &snapshot, &Placement::all_nodes()) {
            Ok(p) => p,
            Err(status) => return all_failed(&members, status),
        }
    } else {
        vec![Placement::all_nodes()]
    };
    if !fwk.has_placement_generate_plugins() {
        let pins = vec![None; members.len()];
        let tried = try_group(&ctx, algo, &members, &pins);
        return decide(&members, tried, None);
    }
    place_on_best(&ctx, algo, &members, &placements)
}

/// Tries every placement, keeps none, scores those that worked, and places the group again on
/// the best one with each member pinned to its node from that try.
fn place_on_best(
    ctx: &Context<'_>,
    algo: &mut SchedulingAlgorithm,
    members: &[Arc<PodInfo>],
    placements: &[Placement],
) -> PodGroupCycleResult {
    let mut first_failure: Option<Try> = None;
    let mut worked: Vec<(usize, Vec<Option<String>>, PodGroupAssignments)> = Vec::new();
    for (i, placement) in placements.iter().enumerate() {
        let pins = vec![placement.nodes.clone(); members.len()];
        let mut tried = try_group(ctx, algo, members, &pins);
        if tried.status.is_success() && placements.len() == 1 {
            // The only candidate: kept as it is (the placement scorers have nothing to choose).
            return decide(members, tried, Some(placement.name.clone()));
        }
        let unbeatable =
            tried.status.is_success() && no_untried_placement_can_win(ctx, placements, i, &tried);
        if unbeatable
            && worked
                .iter()
                .all(|(j, _, _)| placements[*j].name > placement.name)
        {
            // Nothing tried or untried can beat it or win a tie: it is the one the scorers
            // would choose, kept as it is (placing it again pinned to the same nodes gives the
            // same result).
            return decide(members, tried, Some(placement.name.clone()));
        }
        if tried.status.is_success() {
            let nodes = tried
                .members
                .iter()
                .map(|m| match m {
                    Some(Tried::Placed(t)) => Some(t.node.clone()),
                    _ => None,
                })
                .collect();
            let assignments = PodGroupAssignments {
                placement: placement.name.clone(),
                proposed: tried.proposed(),
                already_scheduled: ctx.already_scheduled,
            };
            revert(ctx, &mut tried);
            worked.push((i, nodes, assignments));
            if unbeatable {
                // An earlier placement may tie it: the scorers choose among those tried.
                break;
            }
            continue;
        }
        if !tried.status.is_rejected() {
            return decide(members, tried, Some(placement.name.clone()));
        }
        if first_failure.is_none() {
            first_failure = Some(tried);
        }
    }
    if worked.is_empty() {
        // Upstream quotes the first try's error: its generic marker, or its reason.
        let first = match &first_failure {
            Some(t) if t.marked => POD_GROUP_UNSCHEDULABLE.to_string(),
            Some(t) => t.status.message(),
            None => "no placement has any node".to_string(),
        };
        let status = Status::unschedulable(format!(
            "{POD_GROUP_UNSCHEDULABLE}, 0/{} placements are available, first placement status: {first}",
            placements.len()
        ));
        return match first_failure {
            Some(mut t) => {
                t.status = status;
                t.marked = true;
                decide(members, t, None)
            }
            None => all_failed(members, status),
        };
    }
    let best = if worked.len() == 1 {
        0
    } else {
        let assignments: Vec<PodGroupAssignments> = worked.iter().map(|w| w.2.clone()).collect();
        match ctx.fwk.run_placement_score(ctx.group, &assignments) {
            Ok(scores) => best_placement(&scores, &assignments),
            Err(status) => return all_failed(members, status),
        }
    };
    let (index, nodes, _) = &worked[best];
    let placement = &placements[*index];
    let pins: Vec<Option<Arc<BTreeSet<String>>>> = nodes
        .iter()
        .map(|n| match n {
            Some(node) => Some(Arc::new(BTreeSet::from([node.clone()]))),
            None => placement.nodes.clone(),
        })
        .collect();
    let tried = try_group(ctx, algo, members, &pins);
    decide(members, tried, Some(placement.name.clone()))
}

/// Whether no placement after `placements[i]` can be chosen over its successful try: every
/// scorer says nothing can outscore it, and every untried placement sorts after it (so it wins
/// any tie with them).
///
/// Why: a group asking for one rack of fifty is otherwise tried on all fifty before one is
/// kept, fifty times the member cycles, though the first rack that holds the whole group
/// already has the best score the default scorer can give.
fn no_untried_placement_can_win(ctx: &Context<'_>, placements: &[Placement], i: usize, tried: &Try) -> bool {
    let name = &placements[i].name;
    if !placements[i + 1..].iter().all(|p| p.name > *name) {
        return false;
    }
    let placeable = tried
        .members
        .iter()
        .filter(|m| !matches!(m, Some(Tried::Skipped(_))))
        .count();
    let assignments = PodGroupAssignments {
        placement: name.clone(),
        proposed: tried.proposed(),
        already_scheduled: ctx.already_scheduled,
    };
    ctx.fwk
        .is_best_possible_placement(ctx.group, &assignments, placeable)
}

/// The highest total; ties go to the placement whose name sorts first, so the same inputs make
/// the same choice.
fn best_placement(scores: &[i64], assignments: &[PodGroupAssignments]) -> usize {
    let mut best = 0;
    for i in 1..scores.len() {
        if scores[i] > scores[best]
            || (scores[i] == scores[best] && assignments[i].placement < assignments[best].placement)
        {
            best = i;
        }
    }
    best
}

/// A key no other try of any group has had: the group's name and a process-wide count.
fn next_try_key(group: &PodGroupInfo) -> Arc<str> {
    static TRIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = TRIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Arc::from(format!("{}/{}#{n}", group.key.namespace, group.key.name))
}

/// One try: the feasibility check first, then each member in order with the check after each.
/// A try that does not succeed is taken back before it returns.
fn try_group(
    ctx: &Context<'_>,
    algo: &mut SchedulingAlgorithm,
    members: &[Arc<PodInfo>],
    pins: &[Option<Arc<BTreeSet<String>>>],
) -> Try {
    let mut tried: Vec<Option<Tried>> = Vec::with_capacity(members.len());
    let mut candidates = Vec::new();
    let try_key = next_try_key(ctx.group);
    for pod in members {
        if pod.is_terminating() {
            tried.push(Some(Tried::Skipped("skip schedule deleting pod")));
        } else if ctx.cache.is_assumed(&pod.uid) {
            tried.push(Some(Tried::Skipped("pod is already assumed")));
        } else {
            candidates.push(tried.len());
            tried.push(None);
        }
    }
    let mut progress = PlacementProgress {
        scheduled: ctx.already_scheduled,
        remaining: candidates.len(),
    };
    let mut status = ctx.fwk.run_placement_feasible(ctx.group, progress);
    // Rejected before any member was tried: upstream marks the verdict as the group's.
    let mut marked = status.is_rejected();
    if !status.is_rejected() && status.code() != crate::Code::Error {
        for &i in &candidates {
            let outcome = run_member_cycle(
                ctx.fwk,
                algo,
                ctx.cache,
                ctx.nominator,
                members[i].clone(),
                ctx.record_plugin_metrics,
                Some(PodGroupAttempt {
                    placement: pins[i].clone(),
                    try_key: try_key.clone(),
                }),
            );
            progress.remaining -= 1;
            let hard_error = match &outcome {
                CycleOutcome::Assumed(_) => {
                    progress.scheduled += 1;
                    None
                }
                CycleOutcome::Failed(f) if !f.status.is_rejected() && f.fit_error.is_none() => {
                    Some(f.status.message())
                }
                _ => None,
            };
            tried[i] = Some(match outcome {
                CycleOutcome::Assumed(task) => Tried::Placed(task),
                CycleOutcome::Failed(f) => Tried::Failed(f),
                CycleOutcome::Skipped(why) => Tried::Skipped(why),
            });
            if let Some(message) = hard_error {
                status = Status::error(format!(
                    "failed to schedule other pod from a pod group: {message}"
                ));
                break;
            }
            status = ctx.fwk.run_placement_feasible(ctx.group, progress);
            if status.is_rejected() || status.code() == crate::Code::Error {
                break;
            }
        }
    }
    if status.code() == crate::Code::Error {
        status = Status::error(format!(
            "failed to evaluate placement feasibility: {}",
            status.message()
        ));
    } else if status.code() == crate::Code::Wait || status.is_rejected() {
        // A Wait at the end is a quorum not met: the group is unschedulable, marked as such,
        // and still named after the plugin that judged it.
        marked |= status.code() == crate::Code::Wait;
        let judged_by = status.plugin().map(str::to_string);
        let message = if marked {
            format!("{POD_GROUP_UNSCHEDULABLE}, {}", status.message())
        } else {
            status.message()
        };
        status = Status::unschedulable(message);
        if let Some(plugin) = judged_by {
            status.set_plugin(plugin);
        }
    }
    let mut result = Try {
        status,
        marked,
        members: tried,
    };
    if result.status.is_success() && result.placed_count() == 0 {
        // Success needs at least one member placed (every member may have failed on its own
        // in a group with no quorum plugin).
        result.status = Status::unschedulable(POD_GROUP_UNSCHEDULABLE);
        result.marked = true;
    }
    if !result.status.is_success() {
        revert(ctx, &mut result);
    }
    result
}

/// Takes back every member a try placed, the last placed first: Unreserve, then forget.
fn revert(ctx: &Context<'_>, tried: &mut Try) {
    for slot in tried.members.iter_mut().rev() {
        if let Some(Tried::Placed(task)) = slot {
            let BindingTask {
                state, assumed, node, ..
            } = task.as_mut();
            ctx.fwk.run_unreserve(state, assumed, node);
            if let Err(e) = ctx.cache.forget_pod(assumed) {
                tracing::error!(pod = %assumed.key(), error = %e, "forgetting a pod-group member taken back");
            }
            *slot = Some(Tried::Reverted);
        }
    }
}

/// Every member's decision from the kept try (or the reported failure).
fn decide(members: &[Arc<PodInfo>], tried: Try, placement: Option<String>) -> PodGroupCycleResult {
    let group_status = tried.status.clone();
    let error = !group_status.is_success() && !group_status.is_rejected();
    let rejectors = group_rejectors(&tried, &group_status);
    let decisions: Vec<MemberDecision> = members
        .iter()
        .zip(tried.members)
        .map(|(pod, t)| match t {
            Some(Tried::Placed(task)) => MemberDecision::Bind(task),
            Some(Tried::Skipped(why)) => MemberDecision::Skipped(why),
            Some(Tried::Failed(f)) if !error || !f.status.is_rejected() => MemberDecision::Failed(f),
            // A member that was placed and taken back: upstream says the group is
            // unschedulable, then quotes the group's verdict.
            Some(Tried::Reverted) if !error => {
                let mut status =
                    Status::unschedulable(format!("{POD_GROUP_UNSCHEDULABLE}, {}", group_status.message()));
                if let Some(p) = group_status.plugin() {
                    status.set_plugin(p.to_string());
                }
                MemberDecision::Failed(Box::new(SchedulingFailure::from_pod_group(pod.clone(), status)))
            }
            _ => MemberDecision::Failed(Box::new(SchedulingFailure::from_pod_group(
                pod.clone(),
                group_status.clone(),
            ))),
        })
        .map(|d| match d {
            MemberDecision::Failed(mut f) if f.status.is_rejected() && f.unschedulable_plugins.is_empty() => {
                f.unschedulable_plugins = rejectors.clone();
                MemberDecision::Failed(f)
            }
            other => other,
        })
        .collect();
    PodGroupCycleResult {
        status: group_status,
        members: decisions,
        placement,
    }
}

/// What rejected the group as a whole: every plugin that rejected one of its members, and the
/// plugin of the group's verdict (the quorum check). Members the group took back carry these,
/// so they are retried on the events that can help a member (a node freeing CPU, the group's
/// pods arriving), not on every event and not never.
fn group_rejectors(tried: &Try, group_status: &Status) -> BTreeSet<String> {
    let mut plugins: BTreeSet<String> = tried
        .members
        .iter()
        .filter_map(|m| match m {
            Some(Tried::Failed(f)) => Some(f.unschedulable_plugins.iter().chain(&f.pending_plugins)),
            _ => None,
        })
        .flatten()
        .cloned()
        .collect();
    if let Some(p) = group_status.plugin() {
        plugins.insert(p.to_string());
    }
    plugins
}

/// The group failed before any member was tried.
fn all_failed(members: &[Arc<PodInfo>], status: Status) -> PodGroupCycleResult {
    PodGroupCycleResult {
        members: members
            .iter()
            .map(|pod| {
                MemberDecision::Failed(Box::new(SchedulingFailure::from_pod_group(
                    pod.clone(),
                    status.clone(),
                )))
            })
            .collect(),
        status,
        placement: None,
    }
}
