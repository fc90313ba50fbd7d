//! Placements and the extension points that make, judge and score them.
//!
//! A *placement* is a set of nodes a whole group is tried on (all nodes, or one topology
//! domain). `placementGenerate` plugins turn the parent placement (all nodes) into candidates;
//! the cycle tries the group on each; the feasibility check (`PlacementFeasiblePlugin`, the
//! gang's quorum) says after every member whether the attempt can still succeed; and
//! `placementScore` plugins rank the placements that worked. The plugins are pure functions of
//! what they are given, so they are tested without a cluster.
//!
//! A CompositePodGroup goes through the same points (its placements are tried with its whole
//! subtree; its quorum counts children). Each trait has a `composite_` method for it, which a
//! plugin that has nothing to say about composites leaves to its neutral default.

use std::{collections::BTreeSet, sync::Arc};

use super::{CompositePodGroupInfo, PodGroupInfo};
use crate::{Plugin, Snapshot, Status};

/// A set of nodes a group is tried on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// A name for logs and messages (the topology domain's value; `""` for all nodes).
    pub name: String,
    /// The nodes; `None` means every node of the snapshot.
    pub nodes: Option<Arc<BTreeSet<String>>>,
}

impl Placement {
    /// Every node.
    pub fn all_nodes() -> Self {
        Placement {
            name: String::new(),
            nodes: None,
        }
    }

    /// The named nodes.
    pub fn of_nodes(name: impl Into<String>, nodes: impl IntoIterator<Item = String>) -> Self {
        Placement {
            name: name.into(),
            nodes: Some(Arc::new(nodes.into_iter().collect())),
        }
    }

    /// True when `node` is in the placement.
    pub fn contains(&self, node: &str) -> bool {
        self.nodes.as_ref().is_none_or(|n| n.contains(node))
    }
}

/// Where an attempt stands, for the feasibility check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlacementProgress {
    /// Members placed: before this cycle (bound or assumed) and in it so far.
    pub scheduled: usize,
    /// Members of this cycle not yet tried.
    pub remaining: usize,
}

/// What one placement attempt proposed, for the scorers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodGroupAssignments {
    /// The placement tried.
    pub placement: String,
    /// `(pod uid, node)` of every member the attempt placed.
    pub proposed: Vec<(String, String)>,
    /// Members placed before this cycle.
    pub already_scheduled: usize,
}

/// Turns the parent placement into candidate placements (`placementGenerate`).
pub trait PlacementGeneratePlugin: Plugin {
    /// The candidates; a plugin with nothing to say returns the parent unchanged.
    fn generate_placements(
        &self,
        group: &PodGroupInfo,
        snapshot: &Snapshot,
        parent: &Placement,
    ) -> Result<Vec<Placement>, Status>;

    /// The candidates for a composite's subtree; the default returns the parent unchanged.
    fn generate_composite_placements(
        &self,
        _composite: &CompositePodGroupInfo,
        _snapshot: &Snapshot,
        parent: &Placement,
    ) -> Result<Vec<Placement>, Status> {
        Ok(vec![parent.clone()])
    }
}

/// Scores a placement that worked (`placementScore`).
pub trait PlacementScorePlugin: Plugin {
    /// The raw score of one placement.
    fn score_placement(&self, group: &PodGroupInfo, assignments: &PodGroupAssignments)
    -> Result<i64, Status>;
    /// Normalises the raw scores of all placements in place (to 0–100); the default keeps them.
    fn normalize_placement_scores(&self, _group: &PodGroupInfo, _scores: &mut [i64]) -> Status {
        Status::success()
    }
    /// True when no placement can score higher with this plugin than `assignments` does, after
    /// normalisation too, given that a try could place at most `placeable` members. The cycle then
    /// stops trying placements once every scorer says so of one (ties go to the name that sorts
    /// first, so it stops only when no untried placement sorts before it). The default promises
    /// nothing.
    fn is_best_possible(
        &self,
        _group: &PodGroupInfo,
        _assignments: &PodGroupAssignments,
        _placeable: usize,
    ) -> bool {
        false
    }
    /// The raw score of one placement of a composite's subtree (`assignments` holds every pod
    /// the subtree placed); the default scores every placement alike.
    fn score_composite_placement(
        &self,
        _composite: &CompositePodGroupInfo,
        _assignments: &PodGroupAssignments,
    ) -> Result<i64, Status> {
        Ok(0)
    }
    /// Normalises a composite's raw scores in place; the default keeps them.
    fn normalize_composite_placement_scores(
        &self,
        _composite: &CompositePodGroupInfo,
        _scores: &mut [i64],
    ) -> Status {
        Status::success()
    }
}

/// Says whether an attempt can still meet the group's constraints.
///
/// Success: met. `Wait`: not yet, but the remaining members may meet it. Unschedulable: cannot
/// be met any more; the attempt stops.
pub trait PlacementFeasiblePlugin: Plugin {
    /// The verdict for the progress so far.
    fn placement_feasible(&self, group: &PodGroupInfo, progress: PlacementProgress) -> Status;
    /// The verdict for a composite, whose progress counts children; the default is Success.
    fn composite_placement_feasible(
        &self,
        _composite: &CompositePodGroupInfo,
        _progress: PlacementProgress,
    ) -> Status {
        Status::success()
    }
}
