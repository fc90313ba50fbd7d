//! The composite cycle: a root CompositePodGroup and its whole subtree decided in one cycle.
//!
//! The tree is tried depth first. A composite is tried on each of its candidate placements (its
//! topology domains, or its parent's placement when it has no constraint); on one placement its
//! children are tried in order, each within that placement, and the feasibility check runs
//! before the first child and after each one, counting *children* placed: a gang composite needs
//! `minGroupCount` of them, a basic one any. A PodGroup child is placed as the pod-group cycle
//! places a root group ([`super::cycle`]), within its parent's placement. Every try holds its
//! reservations so that later children see them, and a composite that fails takes back
//! everything its subtree placed.
//!
//! Among a composite's placements that worked the placement scorers choose (over every pod the
//! subtree placed), and the subtree is placed again on the winner with every member pinned to
//! the node its try chose (see [`super::cycle`] for why pinned).
//!
//! Failures go down the tree: a group whose ancestor failed is not placed, whatever its own try
//! said, and its members carry the failing ancestor's verdict; a group never tried (its parent
//! stopped early) carries it too. The root must place at least one pod to succeed.
//!
//! A root that ends Unschedulable runs the `podGroupPostFilter` plugins once, for the whole
//! tree (upstream does the same): the preemptor is the root composite, with its priority and
//! policy, its members every pod of the tree, and the dry run places the whole tree again
//! ([`TreeSimulator`]). Its verdict is added to every group's, and on success every member is
//! nominated where the dry run put it and the whole tree waits for the evictions.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Instant,
};

use super::{
    CompositePodGroupInfo, GroupRef, GroupTree, Placement, PlacementProgress, PodGroupAssignments,
    PodGroupCycleInput, PodGroupCycleResult, PodGroupInfo, PodGroupKey, PodGroupPostFilterInput,
    PodGroupSimulator, SimulatedPlacement,
    cycle::{
        Context, Outcome, POD_GROUP_UNSCHEDULABLE, Preemption, Tried, all_failed, apply_preemption,
        best_placement, decide, no_placement_fits, place, revert_with, try_group,
    },
    run_pod_group_cycle,
    simulation::{OverlayCache, take_back},
};
use crate::{
    BindingTask, Code, Framework, PodInfo, PodNominator, SchedulerCache, SchedulingAlgorithm, Status,
};

/// What one composite cycle decides about.
#[derive(Debug)]
pub struct CompositeCycleInput<'a> {
    /// The root and its subtree.
    pub tree: &'a GroupTree,
    /// The pods taken from the queue, by the PodGroup they belong to, each in the order tried.
    pub members: BTreeMap<PodGroupKey, Vec<Arc<PodInfo>>>,
    /// Members of each PodGroup bound or assumed before this cycle.
    pub already_scheduled: BTreeMap<PodGroupKey, usize>,
    /// Whether the members' attempts record plugin durations.
    pub record_plugin_metrics: bool,
}

/// The verdict of one PodGroup of the tree, and its members' decisions.
#[derive(Debug)]
pub struct CompositeGroupResult {
    /// The PodGroup.
    pub group: Arc<PodGroupInfo>,
    /// Its verdict (its own, or its failed ancestor's) and its members' decisions.
    pub result: PodGroupCycleResult,
}

/// The tree's verdicts.
#[derive(Debug)]
pub struct CompositeCycleResult {
    /// The root's verdict.
    pub status: Status,
    /// Every PodGroup of the tree, depth first in child order.
    pub groups: Vec<CompositeGroupResult>,
    /// Every composite of the tree with its verdict, depth first (the root first).
    pub composites: Vec<(Arc<CompositePodGroupInfo>, Status)>,
    /// True when the tree did not fit and a pod-group PostFilter (preemption) made room: every
    /// member is nominated and waits for the evictions.
    pub waiting_on_preemption: bool,
}

/// Everything the tries share.
struct Env<'a> {
    fwk: &'a Framework,
    cache: &'a dyn SchedulerCache,
    nominator: &'a dyn PodNominator,
    members: &'a BTreeMap<PodGroupKey, Vec<Arc<PodInfo>>>,
    already_scheduled: &'a BTreeMap<PodGroupKey, usize>,
    record_plugin_metrics: bool,
    /// Pods a preemption dry run removed from the cluster (`None` in a real cycle).
    removed: Option<Arc<[Arc<PodInfo>]>>,
}

impl Env<'_> {
    fn members(&self, key: &PodGroupKey) -> &[Arc<PodInfo>] {
        self.members.get(key).map_or(&[], Vec::as_slice)
    }

    fn context<'c>(&'c self, group: &'c PodGroupInfo, parent: &Placement) -> Context<'c> {
        Context {
            fwk: self.fwk,
            cache: self.cache,
            nominator: self.nominator,
            group,
            already_scheduled: self.already_scheduled.get(&group.key).copied().unwrap_or(0),
            record_plugin_metrics: self.record_plugin_metrics,
            removed: self.removed.clone(),
            parent: parent.clone(),
            in_composite: true,
        }
    }
}

/// Where a try put things, to place the subtree again the same way.
#[derive(Debug, Default, Clone)]
struct Pins {
    /// The placement each composite was tried on.
    composites: BTreeMap<PodGroupKey, Placement>,
    /// Each PodGroup's placement and the node each member was placed on.
    groups: BTreeMap<PodGroupKey, (Placement, Vec<Option<String>>)>,
}

/// One try of a subtree on one placement. What it placed is held while it succeeds.
#[derive(Debug)]
struct SubtreeTry {
    /// The subtree root's verdict.
    status: Status,
    /// Whether the verdict is upstream's generic "pod group is unschedulable" (quoted as such
    /// by a placement failure).
    marked: bool,
    /// Whether any pod of the subtree was placed (and is still held).
    any_placed: bool,
    /// The outcome of each PodGroup tried.
    groups: BTreeMap<PodGroupKey, Outcome>,
    /// The verdict of each composite tried.
    composites: BTreeMap<PodGroupKey, Status>,
    /// Where it placed things.
    pins: Pins,
}

impl SubtreeTry {
    fn failed(status: Status) -> Self {
        SubtreeTry {
            status,
            marked: false,
            any_placed: false,
            groups: BTreeMap::new(),
            composites: BTreeMap::new(),
            pins: Pins::default(),
        }
    }

    /// Takes back every member the subtree holds.
    fn revert(&mut self, env: &Env<'_>) {
        for outcome in self.groups.values_mut().rev() {
            if let Outcome::Tried { tried, .. } = outcome {
                revert_with(env.fwk, env.cache, tried);
            }
        }
        self.any_placed = false;
    }

    /// Adds a child's try.
    fn absorb(&mut self, child: SubtreeTry) {
        self.any_placed |= child.any_placed;
        self.groups.extend(child.groups);
        self.composites.extend(child.composites);
        self.pins.composites.extend(child.pins.composites);
        self.pins.groups.extend(child.pins.groups);
    }

    /// `(pod uid, node)` of every member placed in a group whose ancestors up to `tree` all
    /// succeeded (upstream's successful leaves).
    fn proposed(&self, tree: &GroupTree) -> Vec<(String, String)> {
        let mut out = Vec::new();
        self.collect_proposed(tree, &mut out);
        out
    }

    /// Every member still held, in the tree's order (depth first, each group's members in the
    /// order tried), taken out of the try.
    fn take_placed(&mut self, tree: &GroupTree) -> Vec<BindingTask> {
        let mut out = Vec::new();
        for leaf in tree.leaves() {
            if let Some(Outcome::Tried { tried, .. }) = self.groups.get_mut(&leaf.key) {
                for slot in &mut tried.members {
                    if matches!(slot, Some(Tried::Placed(_)))
                        && let Some(Tried::Placed(task)) = slot.take()
                    {
                        out.push(*task);
                    }
                }
            }
        }
        self.any_placed = false;
        out
    }

    fn collect_proposed(&self, tree: &GroupTree, out: &mut Vec<(String, String)>) {
        match tree {
            GroupTree::Leaf(g) => {
                if let Some(Outcome::Tried { tried, .. }) = self.groups.get(&g.key)
                    && tried.status.is_success()
                {
                    out.extend(tried.proposed());
                }
            }
            GroupTree::Composite { info, children } => {
                if self.composites.get(&info.key).is_some_and(Status::is_success) {
                    for c in children {
                        self.collect_proposed(c, out);
                    }
                }
            }
        }
    }
}

/// Runs the composite cycle for the tree's root.
pub fn run_composite_cycle(
    fwk: &Framework,
    algo: &mut SchedulingAlgorithm,
    cache: &dyn SchedulerCache,
    nominator: &dyn PodNominator,
    input: CompositeCycleInput<'_>,
) -> CompositeCycleResult {
    let CompositeCycleInput {
        tree,
        mut members,
        already_scheduled,
        record_plugin_metrics,
    } = input;
    if let GroupTree::Leaf(group) = tree {
        // A PodGroup with no parent is its own root: the pod-group cycle decides it.
        let result = run_pod_group_cycle(
            fwk,
            algo,
            cache,
            nominator,
            PodGroupCycleInput {
                group,
                members: members.remove(&group.key).unwrap_or_default(),
                already_scheduled: already_scheduled.get(&group.key).copied().unwrap_or(0),
                record_plugin_metrics,
            },
        );
        return CompositeCycleResult {
            status: result.status.clone(),
            waiting_on_preemption: result.waiting_on_preemption,
            groups: vec![CompositeGroupResult {
                group: group.clone(),
                result,
            }],
            composites: Vec::new(),
        };
    }
    let env = Env {
        fwk,
        cache,
        nominator,
        members: &members,
        already_scheduled: &already_scheduled,
        record_plugin_metrics,
        removed: None,
    };
    let mut root = place_root(&env, algo, tree);
    // Upstream runs the tree's PostFilter only for a plain Unschedulable verdict.
    let preemption = (root.status.code() == Code::Unschedulable && fwk.has_pod_group_post_filter_plugins())
        .then(|| preempt_for_tree(&env, algo, tree));
    let (status, nominations) = apply_preemption(root.status.clone(), preemption.clone());
    let mut result = CompositeCycleResult {
        status,
        groups: Vec::new(),
        composites: Vec::new(),
        waiting_on_preemption: nominations.is_some(),
    };
    settle(
        &env,
        tree,
        &mut root,
        &Status::success(),
        preemption.as_ref(),
        &mut result,
    );
    result
}

/// The root placed within the whole cluster; it must place at least one pod to succeed.
fn place_root(env: &Env<'_>, algo: &mut SchedulingAlgorithm, tree: &GroupTree) -> SubtreeTry {
    let mut root = place_node(env, algo, tree, &Placement::all_nodes(), None);
    if root.status.is_success() && !root.any_placed {
        root.revert(env);
        root.status = Status::unschedulable(POD_GROUP_UNSCHEDULABLE);
        root.marked = true;
        if let GroupTree::Composite { info, .. } = tree {
            root.composites.insert(info.key.clone(), root.status.clone());
        }
    }
    root
}

/// Runs the `podGroupPostFilter` plugins for the root of a tree that did not fit.
fn preempt_for_tree(env: &Env<'_>, algo: &mut SchedulingAlgorithm, tree: &GroupTree) -> Preemption {
    let members: Vec<Arc<PodInfo>> = tree
        .leaves()
        .iter()
        .flat_map(|g| env.members(&g.key).iter().cloned())
        .collect();
    let snapshot = env.cache.update_snapshot();
    let input = PodGroupPostFilterInput {
        group: tree.as_ref(),
        members: &members,
        snapshot: &snapshot,
    };
    let mut simulator = TreeSimulator { env, algo, tree };
    env.fwk
        .run_pod_group_post_filter(env.nominator, &input, &mut simulator)
}

/// The simulator a tree's PostFilter plugins get: the whole tree placed again from its root, on
/// the cluster without the removed pods (upstream's `PodGroupSchedulingFunc` for a composite).
struct TreeSimulator<'e, 'a> {
    env: &'e Env<'a>,
    algo: &'e mut SchedulingAlgorithm,
    tree: &'e GroupTree,
}

impl PodGroupSimulator for TreeSimulator<'_, '_> {
    fn place_without(&mut self, removed: &[Arc<PodInfo>]) -> SimulatedPlacement {
        let overlay = OverlayCache::without(self.env.cache, removed);
        let env = Env {
            fwk: self.env.fwk,
            cache: &overlay,
            nominator: self.env.nominator,
            members: self.env.members,
            already_scheduled: self.env.already_scheduled,
            record_plugin_metrics: self.env.record_plugin_metrics,
            removed: Some(Arc::from(removed.to_vec())),
        };
        let mut root = place_root(&env, self.algo, self.tree);
        let placed = root.take_placed(self.tree);
        SimulatedPlacement {
            status: root.status,
            assignments: take_back(env.fwk, &overlay, placed),
        }
    }
}

/// Each group's final verdict, the failures of ancestors passed down (upstream's
/// `completeCompositePodGroupAlgorithmResultMap`).
fn settle(
    env: &Env<'_>,
    tree: &GroupTree,
    tried: &mut SubtreeTry,
    parent_status: &Status,
    preemption: Option<&Preemption>,
    out: &mut CompositeCycleResult,
) {
    match tree {
        GroupTree::Leaf(group) => {
            let members = env.members(&group.key);
            let own = tried.groups.remove(&group.key);
            let overridden = !parent_status.is_success();
            let result = match own {
                Some(Outcome::Tried { tried: t, placement }) if !(overridden && t.status.is_success()) => {
                    decide(members, t, placement.map(|p| p.name), preemption.cloned())
                }
                Some(Outcome::NotTried(status)) if !(overridden && status.is_success()) => {
                    all_failed(members, status, preemption.cloned())
                }
                _ => all_failed(members, parent_status.clone(), preemption.cloned()),
            };
            out.groups.push(CompositeGroupResult {
                group: group.clone(),
                result,
            });
        }
        GroupTree::Composite { info, children } => {
            let status = match tried.composites.get(&info.key) {
                Some(own) if parent_status.is_success() || !own.is_success() => own.clone(),
                _ => parent_status.clone(),
            };
            let (reported, _) = apply_preemption(status.clone(), preemption.cloned());
            out.composites.push((info.clone(), reported));
            for child in children {
                settle(env, child, tried, &status, preemption, out);
            }
        }
    }
}

/// Places one node of the tree within `parent` (or as `pins` say).
fn place_node(
    env: &Env<'_>,
    algo: &mut SchedulingAlgorithm,
    node: &GroupTree,
    parent: &Placement,
    pins: Option<&Pins>,
) -> SubtreeTry {
    match node {
        GroupTree::Leaf(group) => place_group(env, algo, group, parent, pins),
        GroupTree::Composite { info, children } => match pins.and_then(|p| p.composites.get(&info.key)) {
            Some(placement) => try_composite(env, algo, info, children, placement, pins),
            None => place_composite(env, algo, node, info, children, parent),
        },
    }
}

/// A PodGroup of the subtree: placed as a root group is, within `parent`.
fn place_group(
    env: &Env<'_>,
    algo: &mut SchedulingAlgorithm,
    group: &PodGroupInfo,
    parent: &Placement,
    pins: Option<&Pins>,
) -> SubtreeTry {
    let members = env.members(&group.key);
    let outcome = match pins.and_then(|p| p.groups.get(&group.key)) {
        Some((placement, nodes)) => {
            let ctx = env.context(group, placement);
            let pins: Vec<Option<Arc<BTreeSet<String>>>> = nodes
                .iter()
                .map(|n| match n {
                    Some(node) => Some(Arc::new(BTreeSet::from([node.clone()]))),
                    None => placement.nodes.clone(),
                })
                .collect();
            let tried = try_group(&ctx, algo, members, &pins);
            let placement = (!placement.name.is_empty()).then(|| placement.clone());
            Outcome::Tried { tried, placement }
        }
        None => place(&env.context(group, parent), algo, members),
    };
    let mut result = SubtreeTry::failed(outcome.status().clone());
    if let Outcome::Tried { tried, placement } = &outcome {
        result.marked = tried.marked;
        result.any_placed = tried.status.is_success() && tried.placed_count() > 0;
        let nodes = tried
            .members
            .iter()
            .map(|m| match m {
                Some(Tried::Placed(t)) => Some(t.node.clone()),
                _ => None,
            })
            .collect();
        let placement = placement.clone().unwrap_or_else(|| parent.clone());
        result.pins.groups.insert(group.key.clone(), (placement, nodes));
    }
    result.groups.insert(group.key.clone(), outcome);
    result
}

/// A composite: tried on each of its placements; the best that worked is kept.
fn place_composite(
    env: &Env<'_>,
    algo: &mut SchedulingAlgorithm,
    node: &GroupTree,
    info: &CompositePodGroupInfo,
    children: &[GroupTree],
    parent: &Placement,
) -> SubtreeTry {
    let snapshot = env.cache.update_snapshot();
    let placements = match env
        .fwk
        .run_group_placement_generate(GroupRef::Composite(info), &snapshot, parent)
    {
        Ok(p) => p,
        Err(status) => return with_own(info, SubtreeTry::failed(status)),
    };
    let observer = env.fwk.observer();
    observer.placements_generated(env.fwk.profile_name(), placements.len());
    let mut first_failure: Option<SubtreeTry> = None;
    // Each placement that worked: its index, its try (taken back) and what the try proposed.
    let mut worked: Vec<(usize, SubtreeTry, Vec<(String, String)>)> = Vec::new();
    for (i, placement) in placements.iter().enumerate() {
        let started = Instant::now();
        let mut tried = try_composite(env, algo, info, children, placement, None);
        if tried.status.code() == Code::Error {
            return tried;
        }
        observer.placement_evaluated(
            env.fwk.profile_name(),
            tried.status.is_success(),
            started.elapsed(),
        );
        if tried.status.is_success() {
            if placements.len() == 1 {
                return tried;
            }
            let proposed = tried.proposed(node);
            tried.revert(env);
            worked.push((i, tried, proposed));
        } else if first_failure.is_none() {
            first_failure = Some(tried);
        }
    }
    if worked.is_empty() {
        // Upstream reports the first placement's try, with every result of its subtree.
        let first = first_failure.as_ref().map(|t| (t.marked, &t.status));
        let status = no_placement_fits(placements.len(), first);
        let mut tried = first_failure.unwrap_or_else(|| SubtreeTry::failed(status.clone()));
        tried.status = status;
        tried.marked = true;
        return with_own(info, tried);
    }
    let best = if worked.len() == 1 {
        0
    } else {
        let assignments: Vec<PodGroupAssignments> = worked
            .iter()
            .map(|(i, _, proposed)| PodGroupAssignments {
                placement: placements[*i].name.clone(),
                proposed: proposed.clone(),
                already_scheduled: node
                    .leaves()
                    .iter()
                    .map(|g| env.already_scheduled.get(&g.key).copied().unwrap_or(0))
                    .sum(),
            })
            .collect();
        match env
            .fwk
            .run_group_placement_score(GroupRef::Composite(info), &assignments)
        {
            Ok(scores) => best_placement(&scores, &assignments),
            Err(status) => return with_own(info, SubtreeTry::failed(status)),
        }
    };
    let (index, chosen, _) = &worked[best];
    try_composite(env, algo, info, children, &placements[*index], Some(&chosen.pins))
}

/// Records a composite's verdict as its own.
fn with_own(info: &CompositePodGroupInfo, mut tried: SubtreeTry) -> SubtreeTry {
    tried.composites.insert(info.key.clone(), tried.status.clone());
    tried
}

/// One try of a composite on one placement: its children in order, the feasibility check
/// before the first and after each. A try that does not succeed is taken back before it
/// returns.
fn try_composite(
    env: &Env<'_>,
    algo: &mut SchedulingAlgorithm,
    info: &CompositePodGroupInfo,
    children: &[GroupTree],
    placement: &Placement,
    pins: Option<&Pins>,
) -> SubtreeTry {
    let group = GroupRef::Composite(info);
    let mut progress = PlacementProgress {
        scheduled: 0,
        remaining: children.len(),
    };
    let mut result = SubtreeTry::failed(Status::success());
    result.pins.composites.insert(info.key.clone(), placement.clone());
    let mut status = env.fwk.run_group_placement_feasible(group, progress);
    if !status.is_rejected() && status.code() != Code::Error {
        for child in children {
            let child_try = place_node(env, algo, child, placement, pins);
            let child_status = child_try.status.clone();
            result.absorb(child_try);
            if child_status.code() == Code::Error {
                status = Status::error(format!(
                    "composite pod group evaluation failed due to child error: {}",
                    child_status.message()
                ));
                break;
            }
            progress.remaining -= 1;
            if child_status.is_success() {
                progress.scheduled += 1;
            }
            status = env.fwk.run_group_placement_feasible(group, progress);
            if status.is_rejected() || status.code() == Code::Error {
                break;
            }
        }
    }
    if status.code() == Code::Wait {
        // A quorum of children not met: unschedulable, marked as such, still named after the
        // plugin that judged it.
        let judged_by = status.plugin().map(str::to_string);
        status = Status::unschedulable(format!("{POD_GROUP_UNSCHEDULABLE}, {}", status.message()));
        if let Some(plugin) = judged_by {
            status.set_plugin(plugin);
        }
        result.marked = true;
    }
    result.status = status;
    if !result.status.is_success() {
        result.revert(env);
    }
    with_own(info, result)
}
