//! The `podGroupPostFilter` extension point: what runs when a whole group does not fit.
//!
//! A member of a group never runs PostFilter on its own (one member preempting for a group that
//! may not fit as a whole would evict for nothing). Instead, when the group's cycle ends
//! Unschedulable, the group's PostFilter plugins run once for the group (upstream's
//! `RunPodGroupPostFilterPlugins`; DefaultPreemption is the default one). A plugin sees the
//! group, its members and the cluster, and may ask for the group's placement to be tried again on
//! a view of the cluster with some pods removed ([`PodGroupSimulator`], upstream's
//! `PodGroupSchedulingFunc`): the same cycle, the same plugins, nothing written to the cache.
//! A success names the node each member is nominated to; the members go back to the queue and
//! are tried again once the evictions land.

use std::{collections::BTreeMap, sync::Arc};

use super::GroupRef;
use crate::{CycleState, FrameworkHandle, Plugin, PodInfo, Snapshot, Status};

/// What a successful pod-group PostFilter decided: where each member is nominated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodGroupPostFilterResult {
    /// Member pod UID → the node it is nominated to. Members not named keep their nomination.
    pub nominations: BTreeMap<String, String>,
}

/// One member the simulated placement put on a node, with the cycle state its attempt made (its
/// PreFilter data, computed with the removed pods gone and the earlier members placed).
#[derive(Debug)]
pub struct ProposedAssignment {
    /// The member.
    pub pod: Arc<PodInfo>,
    /// The member as it would be assumed (`spec.nodeName` set).
    pub assumed: Arc<PodInfo>,
    /// The node the placement chose.
    pub node: String,
    /// The member's cycle state; its reservations are already taken back.
    pub state: CycleState,
}

/// The group's placement on the simulated cluster.
#[derive(Debug)]
pub struct SimulatedPlacement {
    /// The group's verdict there (success: the group fits).
    pub status: Status,
    /// The members placed, in the order they were tried.
    pub assignments: Vec<ProposedAssignment>,
}

/// Places the group on the cluster with some pods removed, and takes it all back.
pub trait PodGroupSimulator {
    /// The group's placement with `removed` gone from their nodes (and from plugins' own
    /// ledgers, such as the devices their claims hold).
    fn place_without(&mut self, removed: &[Arc<PodInfo>]) -> SimulatedPlacement;
}

/// What a pod-group PostFilter plugin is given about the group that did not fit.
pub struct PodGroupPostFilterInput<'a> {
    /// The group: a PodGroup, or the root CompositePodGroup of a tree (which preempts for
    /// its whole subtree, with its own priority and policy).
    pub group: GroupRef<'a>,
    /// Its members of this cycle (not yet placed), in the order they were tried; for a tree,
    /// the members of every PodGroup in it.
    pub members: &'a [Arc<PodInfo>],
    /// The cluster as the cycle saw it.
    pub snapshot: &'a Arc<Snapshot>,
}

/// Runs when a group's cycle ends Unschedulable (`podGroupPostFilter`).
///
/// Success: the plugin made room; the result's nominations are applied and the members wait
/// for the next cycle. Unschedulable: the plugin could not help; the next plugin runs.
/// UnschedulableAndUnresolvable stops the point. Anything else is an error.
pub trait PodGroupPostFilterPlugin: Plugin {
    /// The verdict and, on success, the members' nominations.
    fn pod_group_post_filter(
        &self,
        fwk: &dyn FrameworkHandle,
        input: &PodGroupPostFilterInput<'_>,
        simulator: &mut dyn PodGroupSimulator,
    ) -> (Option<PodGroupPostFilterResult>, Status);
}
