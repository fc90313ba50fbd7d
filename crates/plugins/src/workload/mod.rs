//! The workload plugins: what upstream's pod-group scheduling adds to a profile.
//!
//! - `GangScheduling` keeps a gang's pods out of the active queue until `minCount` of them exist
//!   (PreEnqueue) and tells the pod-group cycle whether an attempt can still reach the quorum
//!   (the placement feasibility check).
//! - `TopologyPlacementGenerator` turns a group's topology constraint into one candidate
//!   placement per domain of the node label (placementGenerate) or, beyond upstream, of a DRA
//!   device attribute (`device_domains`).
//! - `PodGroupPodsCount` prefers the placement that fits more of the group (placementScore).
//! - `hierarchy`: GangScheduling over trees of groups under CompositePodGroups (the
//!   CompositePodGroup gate): a tree's pods are admitted together, and an event in one of its
//!   groups concerns all of them.
//!
//! They read the groups and their members from the [`PodGroupStore`] the runtime's watches
//! fill; without a store (the Workload API is not served, or the gate is off) they let every
//! pod through and generate no placements.

mod device_domains;
mod gang_scheduling;
mod hierarchy;
mod pod_group_pods_count;
mod topology_placement;

#[cfg(test)]
mod tests;

pub use gang_scheduling::GangScheduling;
pub use pod_group_pods_count::PodGroupPodsCount;
pub use topology_placement::TopologyPlacementGenerator;
