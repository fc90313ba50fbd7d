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
//!
//! A group that ends Unschedulable runs the `podGroupPostFilter` plugins once (pod-group
//! preemption), after its tries are all taken back. As upstream applies their verdict: the
//! group's message gains the plugins' message; on success every member is nominated where the
//! plugin's dry run put it and goes back to the queue waiting for the evictions.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Instant,
};

use super::{
    GroupRef, Placement, PlacementProgress, PodGroupAssignments, PodGroupInfo, PodGroupPostFilterInput,
    PodGroupPostFilterResult, simulation::CycleSimulator,
};
use crate::{
    BindingTask, Code, CycleOutcome, Framework, PodGroupAttempt, PodInfo, PodNominator, SchedulerCache,
    SchedulingAlgorithm, SchedulingFailure, Status, scheduler::run_member_cycle,
};

/// Upstream's generic verdict for a group that cannot be placed, which its messages quote.
pub(super) const POD_GROUP_UNSCHEDULABLE: &str = "pod group is unschedulable";

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
    /// True when the group did not fit and a pod-group PostFilter (preemption) made room: the
    /// members are nominated and wait for the evictions.
    pub waiting_on_preemption: bool,
}

/// What became of one member in one try.
#[derive(Debug)]
pub(super) enum Tried {
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
pub(super) struct Try {
    /// The verdict; a rejection's message is upstream's whole message for the group.
    pub(super) status: Status,
    /// Whether the verdict is upstream's generic "pod group is unschedulable" (the quorum could
    /// not be met before any member was tried, or was still short after the last one), which is
    /// what a placement failure quotes of it, rather than the reason.
    pub(super) marked: bool,
    /// Per member; `None` when the try stopped before reaching it.
    pub(super) members: Vec<Option<Tried>>,
}

impl Try {
    pub(super) fn placed_count(&self) -> usize {
        self.members
            .iter()
            .filter(|m| matches!(m, Some(Tried::Placed(_))))
            .count()
    }

    pub(super) fn proposed(&self) -> Vec<(String, String)> {
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
pub(super) struct Context<'a> {
    pub(super) fwk: &'a Framework,
    pub(super) cache: &'a dyn SchedulerCache,
    pub(super) nominator: &'a dyn PodNominator,
    pub(super) group: &'a PodGroupInfo,
    pub(super) already_scheduled: usize,
    pub(super) record_plugin_metrics: bool,
    /// Pods a preemption dry run removed from the cluster (`None` in a real cycle).
    pub(super) removed: Option<Arc<[Arc<PodInfo>]>>,
    /// The placement the group is tried within: all nodes, or its parent composite's.
    pub(super) parent: Placement,
    /// True for a group of a composite's subtree: a try that places no member may still
    /// succeed (every member may be bound already); only the root must place one.
    pub(super) in_composite: bool,
}

/// How the group's placement ended, before the members' decisions are made.
#[derive(Debug)]
pub(super) enum Outcome {
    /// The kept try (placed, or taken back) and the placement it was on.
    Tried {
        /// The try.
        tried: Try,
        /// The placement, when the group had candidate placements.
        placement: Option<Placement>,
    },
    /// No member was tried: the placements could not be made or judged.
    NotTried(Status),
}

impl Outcome {
    pub(super) fn status(&self) -> &Status {
        match self {
            Outcome::Tried { tried, .. } => &tried.status,
            Outcome::NotTried(status) => status,
        }
    }
}

/// The verdict of the group's PostFilter plugins.
pub(super) type Preemption = (Option<PodGroupPostFilterResult>, Status);

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
        removed: None,
        parent: Placement::all_nodes(),
        in_composite: false,
    };
    let outcome = place(&ctx, algo, &members);
    // Upstream runs the group's PostFilter only for a plain Unschedulable verdict.
    let preemption = (outcome.status().code() == Code::Unschedulable
        && fwk.has_pod_group_post_filter_plugins())
    .then(|| {
        let snapshot = cache.update_snapshot();
        let mut simulator = CycleSimulator {
            fwk,
            algo,
            cache,
            nominator,
            group,
            members: &members,
            already_scheduled,
            record_plugin_metrics,
        };
        let input = PodGroupPostFilterInput {
            group: GroupRef::Group(group),
            members: &members,
            snapshot: &snapshot,
        };
        fwk.run_pod_group_post_filter(nominator, &input, &mut simulator)
    });
    match outcome {
        Outcome::Tried { tried, placement } => decide(&members, tried, placement.map(|p| p.name), preemption),
        Outcome::NotTried(status) => all_failed(&members, status, preemption),
    }
}

/// The group's placement: one try on every node, or the best of the candidate placements.
pub(super) fn place(ctx: &Context<'_>, algo: &mut SchedulingAlgorithm, members: &[Arc<PodInfo>]) -> Outcome {
    if !ctx.fwk.has_placement_generate_plugins() {
        let pins = vec![ctx.parent.nodes.clone(); members.len()];
        let tried = try_group(ctx, algo, members, &pins);
        return Outcome::Tried {
            tried,
            placement: None,
        };
    }
    let snapshot = ctx.cache.update_snapshot();
    match ctx.fwk.run_placement_generate(ctx.group, &snapshot, &ctx.parent) {
        Ok(placements) => {
            ctx.fwk
                .observer()
                .placements_generated(ctx.fwk.profile_name(), placements.len());
            place_on_best(ctx, algo, members, &placements)
        }
        Err(status) => Outcome::NotTried(status),
    }
}

/// Tries every placement, keeps none, scores those that worked, and places the group again on
/// the best one with each member pinned to its node from that try.
fn place_on_best(
    ctx: &Context<'_>,
    algo: &mut SchedulingAlgorithm,
    members: &[Arc<PodInfo>],
    placements: &[Placement],
) -> Outcome {
    let mut first_failure: Option<Try> = None;
    let mut worked: Vec<(usize, Vec<Option<String>>, PodGroupAssignments)> = Vec::new();
    for (i, placement) in placements.iter().enumerate() {
        let pins = vec![placement.nodes.clone(); members.len()];
        let started = Instant::now();
        let mut tried = try_group(ctx, algo, members, &pins);
        if tried.status.is_success() || tried.status.is_rejected() {
            // An error is a fault, not a verdict on the placement: upstream counts only verdicts.
            ctx.fwk.observer().placement_evaluated(
                ctx.fwk.profile_name(),
                tried.status.is_success(),
                started.elapsed(),
            );
        }
        if tried.status.is_success() && placements.len() == 1 {
            // The only candidate: kept as it is (the placement scorers have nothing to choose).
            return Outcome::Tried {
                tried,
                placement: Some(placement.clone()),
            };
        }
        if tried.status.is_success() {
            let assignments = PodGroupAssignments {
                placement: placement.name.clone(),
                proposed: tried.proposed(),
                already_scheduled: ctx.already_scheduled,
            };
            let unbeatable = no_untried_placement_can_win(ctx, placements, i, &tried, &assignments);
            if unbeatable
                && worked
                    .iter()
                    .all(|(j, _, _)| placements[*j].name > placement.name)
            {
                // Nothing tried or untried can beat it or win a tie: it is the one the scorers
                // would choose, kept as it is (placing it again pinned to the same nodes gives
                // the same result).
                return Outcome::Tried {
                    tried,
                    placement: Some(placement.clone()),
                };
            }
            let nodes = tried
                .members
                .iter()
                .map(|m| match m {
                    Some(Tried::Placed(t)) => Some(t.node.clone()),
                    _ => None,
                })
                .collect();
            revert(ctx, &mut tried);
            worked.push((i, nodes, assignments));
            if unbeatable {
                // An earlier placement may tie it: the scorers choose among those tried.
                break;
            }
            continue;
        }
        if !tried.status.is_rejected() {
            return Outcome::Tried {
                tried,
                placement: Some(placement.clone()),
            };
        }
        if first_failure.is_none() {
            first_failure = Some(tried);
        }
    }
    if worked.is_empty() {
        let first = first_failure.as_ref().map(|t| (t.marked, &t.status));
        let status = no_placement_fits(placements.len(), first);
        return match first_failure {
            Some(mut t) => {
                t.status = status;
                t.marked = true;
                Outcome::Tried {
                    tried: t,
                    placement: None,
                }
            }
            None => Outcome::NotTried(status),
        };
    }
    let best = if worked.len() == 1 {
        0
    } else {
        let assignments: Vec<PodGroupAssignments> = worked.iter().map(|w| w.2.clone()).collect();
        match ctx.fwk.run_placement_score(ctx.group, &assignments) {
            Ok(scores) => best_placement(&scores, &assignments),
            Err(status) => return Outcome::NotTried(status),
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
    Outcome::Tried {
        tried,
        placement: Some(placement.clone()),
    }
}

/// Upstream's verdict when none of `placements` candidate placements held the group (or a
/// composite's subtree): it quotes the first try's error, its generic marker when the try was
/// marked unschedulable as a whole (`marked`), else its reason.
pub(super) fn no_placement_fits(placements: usize, first: Option<(bool, &Status)>) -> Status {
    let first = match first {
        Some((true, _)) => POD_GROUP_UNSCHEDULABLE.to_string(),
        Some((false, status)) => status.message(),
        None => "no placement has any node".to_string(),
    };
    Status::unschedulable(format!(
        "{POD_GROUP_UNSCHEDULABLE}, 0/{placements} placements are available, first placement status: {first}"
    ))
}

/// Whether no placement after `placements[i]` can be chosen over its successful try: every
/// scorer says nothing can outscore it, and every untried placement sorts after it (so it wins
/// any tie with them).
///
/// Why: a group asking for one rack of fifty is otherwise tried on all fifty before one is
/// kept, fifty times the member cycles, though the first rack that holds the whole group
/// already has the best score the default scorer can give.
fn no_untried_placement_can_win(
    ctx: &Context<'_>,
    placements: &[Placement],
    i: usize,
    tried: &Try,
    assignments: &PodGroupAssignments,
) -> bool {
    let name = &placements[i].name;
    if !placements[i + 1..].iter().all(|p| p.name > *name) {
        return false;
    }
    let placeable = tried
        .members
        .iter()
        .filter(|m| !matches!(m, Some(Tried::Skipped(_))))
        .count();
    ctx.fwk
        .is_best_possible_placement(ctx.group, assignments, placeable)
}

/// The highest total; ties go to the placement whose name sorts first, so the same inputs make
/// the same choice.
pub(super) fn best_placement(scores: &[i64], assignments: &[PodGroupAssignments]) -> usize {
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
pub(super) fn try_group(
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
                    removed: ctx.removed.clone(),
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
    if result.status.is_success() && result.placed_count() == 0 && !ctx.in_composite {
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
pub(super) fn revert(ctx: &Context<'_>, tried: &mut Try) {
    revert_with(ctx.fwk, ctx.cache, tried);
}

/// [`revert`] with only what it needs.
pub(super) fn revert_with(fwk: &Framework, cache: &dyn SchedulerCache, tried: &mut Try) {
    for slot in tried.members.iter_mut().rev() {
        if let Some(Tried::Placed(task)) = slot {
            let BindingTask {
                state, assumed, node, ..
            } = task.as_mut();
            fwk.run_unreserve(state, assumed, node);
            if let Err(e) = cache.forget_pod(assumed) {
                tracing::error!(pod = %assumed.key(), error = %e, "forgetting a pod-group member taken back");
            }
            *slot = Some(Tried::Reverted);
        }
    }
}

/// The group's verdict once its PostFilter plugins had their say (upstream's
/// `applyPodGroupPostFilterResult`): their error replaces it; otherwise their message is added
/// to it. Returns the verdict and, when they made room, the members' nominations.
pub(super) fn apply_preemption(
    mut group_status: Status,
    preemption: Option<Preemption>,
) -> (Status, Option<BTreeMap<String, String>>) {
    let Some((result, status)) = preemption else {
        return (group_status, None);
    };
    if status.code() == Code::Error {
        return (status, None);
    }
    let message = status.message();
    if !message.is_empty() {
        group_status.push_reason(message);
    }
    let nominations = status
        .is_success()
        .then(|| result.map(|r| r.nominations).unwrap_or_default());
    (group_status, nominations)
}

/// Nominates each failed member where the PostFilter placed it.
fn nominate(decisions: &mut [MemberDecision], nominations: &BTreeMap<String, String>) {
    for d in decisions {
        if let MemberDecision::Failed(f) = d
            && let Some(node) = nominations.get(&f.pod.uid)
        {
            f.nominated_node = Some(node.clone());
        }
    }
}

/// Every member's decision from the kept try (or the reported failure).
pub(super) fn decide(
    members: &[Arc<PodInfo>],
    tried: Try,
    placement: Option<String>,
    preemption: Option<Preemption>,
) -> PodGroupCycleResult {
    // Members the try never reached keep the verdict from before the PostFilter (upstream
    // copies it to them first).
    let untried_status = tried.status.clone();
    let (group_status, nominations) = apply_preemption(tried.status.clone(), preemption);
    let waiting = nominations.is_some();
    let error = !group_status.is_success() && !group_status.is_rejected();
    let rejectors = group_rejectors(&tried, &group_status);
    let mut decisions: Vec<MemberDecision> = members
        .iter()
        .zip(tried.members)
        .map(|(pod, t)| match t {
            Some(Tried::Placed(task)) => MemberDecision::Bind(task),
            Some(Tried::Skipped(why)) => MemberDecision::Skipped(why),
            Some(Tried::Failed(f)) if !error || !f.status.is_rejected() => MemberDecision::Failed(f),
            // Placed and taken back while the group waits for its preemption: upstream hands
            // the member the group's verdict as it is.
            Some(Tried::Reverted) if waiting => MemberDecision::Failed(Box::new(
                SchedulingFailure::from_pod_group(pod.clone(), group_status.clone()),
            )),
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
            None if !error => MemberDecision::Failed(Box::new(SchedulingFailure::from_pod_group(
                pod.clone(),
                untried_status.clone(),
            ))),
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
    if let Some(n) = &nominations {
        nominate(&mut decisions, n);
    }
    PodGroupCycleResult {
        status: group_status,
        members: decisions,
        placement,
        waiting_on_preemption: waiting,
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
pub(super) fn all_failed(
    members: &[Arc<PodInfo>],
    status: Status,
    preemption: Option<Preemption>,
) -> PodGroupCycleResult {
    let (group_status, nominations) = apply_preemption(status.clone(), preemption);
    // Upstream gives every member the verdict from before the PostFilter, unless that failed.
    let member_status = if group_status.code() == Code::Error {
        group_status.clone()
    } else {
        status
    };
    let mut decisions: Vec<MemberDecision> = members
        .iter()
        .map(|pod| {
            MemberDecision::Failed(Box::new(SchedulingFailure::from_pod_group(
                pod.clone(),
                member_status.clone(),
            )))
        })
        .collect();
    if let Some(n) = &nominations {
        nominate(&mut decisions, n);
    }
    PodGroupCycleResult {
        members: decisions,
        status: group_status,
        placement: None,
        waiting_on_preemption: nominations.is_some(),
    }
}
