//! Pod groups: the scheduling.k8s.io PodGroups whose pods are decided together.
//!
//! A pod joins a group through `spec.schedulingGroup.podGroupName`. The group's policy says what
//! "placed" means for it: `gang` (all or nothing: at least `minCount` of its pods, or none) or
//! `basic` (each pod placed if it fits, all in one cycle). A group may also ask for one topology
//! domain (`schedulingConstraints.topology`): then each domain is a candidate *placement*, every
//! placement is tried, and the best one is kept.
//!
//! The pieces, one per concern:
//! - [`group`]: the group as the scheduler reads it (key, policy, topology key, priority);
//! - [`composite`]: a CompositePodGroup (an inner node of a tree whose leaves are PodGroups,
//!   the CompositePodGroup gate) and the tree one cycle decides;
//! - [`forest`]: which composite each group is a child of, kept in the store;
//! - [`store`]: the groups the watches saw and which pods belong to each, shared by the watch
//!   handlers (writers), the queue and the plugins (readers);
//! - [`placement`]: the three placement extension points (`placementGenerate`, `placementScore`
//!   and the feasibility check gangs plug into);
//! - [`composite_cycle`]: a root composite and its whole subtree decided in one cycle;
//! - [`cycle`]: the pod-group scheduling cycle itself, which places the members one by one on
//!   tentative reservations and takes them all back when the group as a whole fails;
//! - [`post_filter`]: the `podGroupPostFilter` extension point, run when the group as a whole
//!   does not fit (pod-group preemption);
//! - [`simulation`]: the group's placement tried again on a cluster without some pods, for the
//!   PostFilter's dry run.

mod composite;
mod composite_cycle;
mod cycle;
mod forest;
#[cfg(test)]
mod forest_tests;
mod group;
mod placement;
mod post_filter;
mod simulation;
mod store;

pub use composite::{CompositePodGroupInfo, GroupNodeKey, GroupRef, GroupTree};
pub use composite_cycle::{
    CompositeCycleInput, CompositeCycleResult, CompositeGroupResult, run_composite_cycle,
};
pub use cycle::{MemberDecision, PodGroupCycleInput, PodGroupCycleResult, run_pod_group_cycle};
pub use forest::NoRoot;
pub use group::{GroupPolicy, PodGroupInfo, PodGroupKey};
pub use placement::{
    Placement, PlacementFeasiblePlugin, PlacementGeneratePlugin, PlacementProgress, PlacementScorePlugin,
    PodGroupAssignments,
};
pub use post_filter::{
    PodGroupPostFilterInput, PodGroupPostFilterPlugin, PodGroupPostFilterResult, PodGroupSimulator,
    ProposedAssignment, SimulatedPlacement,
};
pub use store::{MemberCounts, PodGroupStore};
