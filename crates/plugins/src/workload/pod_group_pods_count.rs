//! `PodGroupPodsCount`: prefers the placement that fits more of the group.

use unisched_framework::{
    CompositePodGroupInfo, MAX_NODE_SCORE, MIN_NODE_SCORE, PlacementScorePlugin, Plugin, PodGroupAssignments,
    PodGroupInfo, Status,
};

use crate::names::POD_GROUP_PODS_COUNT;

/// Scores a placement by the members it holds: placed before this cycle plus proposed in it.
#[derive(Clone, Copy, Debug, Default)]
pub struct PodGroupPodsCount;

impl Plugin for PodGroupPodsCount {
    fn name(&self) -> &str {
        POD_GROUP_PODS_COUNT
    }
    unisched_framework::serves!(as_placement_score);
}

impl PlacementScorePlugin for PodGroupPodsCount {
    fn score_placement(
        &self,
        _group: &PodGroupInfo,
        assignments: &PodGroupAssignments,
    ) -> Result<i64, Status> {
        Ok(pods_count(assignments))
    }

    /// Every member this cycle could place is placed: no placement holds more.
    fn is_best_possible(
        &self,
        _group: &PodGroupInfo,
        assignments: &PodGroupAssignments,
        placeable: usize,
    ) -> bool {
        assignments.proposed.len() >= placeable
    }

    /// Scaled by the largest count, so the best placement scores 100. `minCount` plays no part:
    /// placements that differ by one pod should differ by little. No placement holding any pod
    /// is an error (the quorum check lets no such placement through).
    fn normalize_placement_scores(&self, _group: &PodGroupInfo, scores: &mut [i64]) -> Status {
        normalize(scores)
    }

    /// A composite's placement: every pod of its subtree, placed before or proposed now.
    fn score_composite_placement(
        &self,
        _composite: &CompositePodGroupInfo,
        assignments: &PodGroupAssignments,
    ) -> Result<i64, Status> {
        Ok(pods_count(assignments))
    }

    fn normalize_composite_placement_scores(
        &self,
        _composite: &CompositePodGroupInfo,
        scores: &mut [i64],
    ) -> Status {
        normalize(scores)
    }
}

/// Members placed before this cycle plus those the placement's try proposes.
fn pods_count(assignments: &PodGroupAssignments) -> i64 {
    let count = assignments.already_scheduled + assignments.proposed.len();
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// Scaled by the largest count, so the best placement scores 100.
fn normalize(scores: &mut [i64]) -> Status {
    let max = scores.iter().copied().max().unwrap_or(0);
    if max == 0 {
        return Status::error("no pods from pod group are assigned to any of the candidate placements");
    }
    for s in scores.iter_mut() {
        *s = MIN_NODE_SCORE + *s * (MAX_NODE_SCORE - MIN_NODE_SCORE) / max;
    }
    Status::success()
}
