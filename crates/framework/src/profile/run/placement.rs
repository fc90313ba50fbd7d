//! The pod-group cycle's points: placementGenerate, the placement feasibility check, and
//! placementScore.

use crate::{
    Code, Framework, GroupRef, Placement, PlacementProgress, PodGroupAssignments, PodGroupInfo, Snapshot,
    Status,
};

impl Framework {
    /// True when the profile has placementGenerate plugins.
    pub fn has_placement_generate_plugins(&self) -> bool {
        !self.placement_generate.is_empty()
    }

    /// placementGenerate: each plugin in turn refines every placement the previous ones made
    /// (starting from `parent`). A plugin's failure stops the point, named after the plugin.
    pub fn run_placement_generate(
        &self,
        group: &PodGroupInfo,
        snapshot: &Snapshot,
        parent: &Placement,
    ) -> Result<Vec<Placement>, Status> {
        self.run_group_placement_generate(GroupRef::Group(group), snapshot, parent)
    }

    /// placementGenerate for a PodGroup or a CompositePodGroup.
    pub fn run_group_placement_generate(
        &self,
        group: GroupRef<'_>,
        snapshot: &Snapshot,
        parent: &Placement,
    ) -> Result<Vec<Placement>, Status> {
        let mut placements = vec![parent.clone()];
        for plugin in &self.placement_generate {
            let mut next = Vec::new();
            for placement in &placements {
                let generated = match group {
                    GroupRef::Group(g) => plugin.generate_placements(g, snapshot, placement),
                    GroupRef::Composite(c) => plugin.generate_composite_placements(c, snapshot, placement),
                };
                match generated {
                    Ok(generated) => next.extend(generated),
                    Err(s) => {
                        return Err(Status::error(format!(
                            "running PlacementGenerate plugin {:?}: {}",
                            plugin.name(),
                            s.message()
                        ))
                        .with_plugin(plugin.name()));
                    }
                }
            }
            placements = next;
        }
        Ok(placements)
    }

    /// The feasibility check: the first verdict that is not Success decides (a Wait from one
    /// plugin and an Unschedulable from a later one is Unschedulable: the attempt cannot
    /// succeed); an error becomes the point's error.
    pub fn run_placement_feasible(&self, group: &PodGroupInfo, progress: PlacementProgress) -> Status {
        self.run_group_placement_feasible(GroupRef::Group(group), progress)
    }

    /// The feasibility check for a PodGroup or a CompositePodGroup.
    pub fn run_group_placement_feasible(&self, group: GroupRef<'_>, progress: PlacementProgress) -> Status {
        let mut verdict = Status::success();
        for plugin in &self.placement_feasible {
            let s = match group {
                GroupRef::Group(g) => plugin.placement_feasible(g, progress),
                GroupRef::Composite(c) => plugin.composite_placement_feasible(c, progress),
            };
            match s.code() {
                Code::Success => {}
                Code::Wait => {
                    if verdict.is_success() {
                        verdict = s.with_plugin(plugin.name());
                    }
                }
                Code::Unschedulable | Code::UnschedulableAndUnresolvable => {
                    return s.with_plugin(plugin.name());
                }
                _ => {
                    return Status::error(format!(
                        "running PlacementFeasible plugin {:?}: {}",
                        plugin.name(),
                        s.message()
                    ));
                }
            }
        }
        verdict
    }

    /// Whether every placementScore plugin says no placement can outscore `assignments` (see
    /// [`PlacementScorePlugin::is_best_possible`]); with no scorer every placement ties.
    pub fn is_best_possible_placement(
        &self,
        group: &PodGroupInfo,
        assignments: &PodGroupAssignments,
        placeable: usize,
    ) -> bool {
        self.placement_score
            .iter()
            .all(|(plugin, _)| plugin.is_best_possible(group, assignments, placeable))
    }

    /// placementScore: every plugin scores every placement, normalises its scores, and the
    /// weighted sums are returned in the order of `assignments`.
    pub fn run_placement_score(
        &self,
        group: &PodGroupInfo,
        assignments: &[PodGroupAssignments],
    ) -> Result<Vec<i64>, Status> {
        self.run_group_placement_score(GroupRef::Group(group), assignments)
    }

    /// placementScore for a PodGroup or a CompositePodGroup.
    pub fn run_group_placement_score(
        &self,
        group: GroupRef<'_>,
        assignments: &[PodGroupAssignments],
    ) -> Result<Vec<i64>, Status> {
        let mut totals = vec![0i64; assignments.len()];
        for (plugin, weight) in &self.placement_score {
            let mut scores = Vec::with_capacity(assignments.len());
            for a in assignments {
                let score = match group {
                    GroupRef::Group(g) => plugin.score_placement(g, a),
                    GroupRef::Composite(c) => plugin.score_composite_placement(c, a),
                };
                scores.push(score.map_err(|s| {
                    Status::error(format!(
                        "running PlacementScore plugin {:?}: {}",
                        plugin.name(),
                        s.message()
                    ))
                })?);
            }
            let s = match group {
                GroupRef::Group(g) => plugin.normalize_placement_scores(g, &mut scores),
                GroupRef::Composite(c) => plugin.normalize_composite_placement_scores(c, &mut scores),
            };
            if !s.is_success() {
                return Err(Status::error(format!(
                    "running NormalizePlacementScore plugin {:?}: {}",
                    plugin.name(),
                    s.message()
                )));
            }
            for (t, s) in totals.iter_mut().zip(scores) {
                *t = t.saturating_add(s.saturating_mul(*weight));
            }
        }
        Ok(totals)
    }
}
