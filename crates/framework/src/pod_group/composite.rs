//! A CompositePodGroup as the scheduler reads it: an inner node of a tree whose leaves are
//! PodGroups.
//!
//! A composite owns no pods. Its policy counts *child groups*: a gang composite is placed when
//! at least `minGroupCount` of its children are (all or nothing over children, as a gang
//! PodGroup is over pods); a basic one when at least one is. Its topology constraint asks the
//! whole subtree to share one domain. The same placement extension points judge it as they judge
//! a PodGroup, through [`GroupRef`].

use std::{fmt, sync::Arc};

use k8s_openapi::{api::scheduling::v1alpha3::CompositePodGroup, apimachinery::pkg::apis::meta::v1::Time};

use super::{GroupPolicy, PodGroupInfo, PodGroupKey};

/// A CompositePodGroup with the fields scheduling reads decoded once.
#[derive(Clone, Debug)]
pub struct CompositePodGroupInfo {
    /// Its key (`namespace/name`; composites and PodGroups have separate name spaces).
    pub key: PodGroupKey,
    /// The object as last seen.
    pub object: Arc<CompositePodGroup>,
    /// Gang (`min_count` is `minGroupCount`: children, not pods) or basic.
    pub policy: GroupPolicy,
    /// The node label the whole subtree must share one value of (the first topology
    /// constraint; the API allows one).
    pub topology_key: Option<String>,
    /// `spec.priority`, 0 when unset.
    pub priority: i32,
    /// `spec.parentCompositePodGroupName`: the composite this one is a child of.
    pub parent: Option<String>,
    /// `disruptionMode: All`: preemption evicts every placed pod of its subtree together.
    pub disrupted_together: bool,
    /// `spec.preemptionPolicy` (read only with the PodGroupPreemptionPolicy gate).
    pub preemption_policy: Option<String>,
}

impl CompositePodGroupInfo {
    /// Decodes a CompositePodGroup. A gang whose `minGroupCount` is not positive is taken as 1
    /// (the API server refuses it).
    pub fn new(object: Arc<CompositePodGroup>) -> Self {
        let spec = &object.spec;
        let policy = match &spec.scheduling_policy.gang {
            Some(g) => GroupPolicy::Gang {
                min_count: usize::try_from(g.min_group_count).unwrap_or(0).max(1),
            },
            None => GroupPolicy::Basic,
        };
        let topology_key = spec
            .scheduling_constraints
            .as_ref()
            .and_then(|c| c.topology.as_ref())
            .and_then(|t| t.first())
            .map(|t| t.key.clone());
        CompositePodGroupInfo {
            key: PodGroupKey::new(
                object.metadata.namespace.clone().unwrap_or_default(),
                object.metadata.name.clone().unwrap_or_default(),
            ),
            policy,
            topology_key,
            priority: spec.priority.unwrap_or(0),
            parent: spec
                .parent_composite_pod_group_name
                .clone()
                .filter(|p| !p.is_empty()),
            disrupted_together: spec.disruption_mode.as_ref().is_some_and(|m| m.all.is_some()),
            preemption_policy: spec.preemption_policy.clone(),
            object,
        }
    }

    /// How many children must be placed for the composite to count as placed (1 when basic).
    pub fn min_count(&self) -> usize {
        match self.policy {
            GroupPolicy::Basic => 1,
            GroupPolicy::Gang { min_count } => min_count,
        }
    }

    /// When the object was created (children are tried oldest first).
    pub fn created(&self) -> Option<&Time> {
        self.object.metadata.creation_timestamp.as_ref()
    }
}

/// Which kind of group a key names: PodGroups and CompositePodGroups may share a name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupNodeKey {
    /// A PodGroup (a leaf).
    Group(PodGroupKey),
    /// A CompositePodGroup.
    Composite(PodGroupKey),
}

impl GroupNodeKey {
    /// The `namespace/name` part.
    pub fn key(&self) -> &PodGroupKey {
        match self {
            GroupNodeKey::Group(k) | GroupNodeKey::Composite(k) => k,
        }
    }
}

impl fmt::Display for GroupNodeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GroupNodeKey::Group(k) => write!(f, "PodGroup {k}"),
            GroupNodeKey::Composite(k) => write!(f, "CompositePodGroup {k}"),
        }
    }
}

/// A group the placement extension points judge: a PodGroup or a CompositePodGroup.
#[derive(Clone, Copy, Debug)]
pub enum GroupRef<'a> {
    /// A PodGroup.
    Group(&'a PodGroupInfo),
    /// A CompositePodGroup.
    Composite(&'a CompositePodGroupInfo),
}

impl GroupRef<'_> {
    /// Its `namespace/name`.
    pub fn key(&self) -> &PodGroupKey {
        match self {
            GroupRef::Group(g) => &g.key,
            GroupRef::Composite(c) => &c.key,
        }
    }

    /// Its topology key, if it has a topology constraint.
    pub fn topology_key(&self) -> Option<&str> {
        match self {
            GroupRef::Group(g) => g.topology_key.as_deref(),
            GroupRef::Composite(c) => c.topology_key.as_deref(),
        }
    }

    /// Its quorum: pods for a PodGroup, children for a composite (1 when basic).
    pub fn min_count(&self) -> usize {
        match self {
            GroupRef::Group(g) => g.min_count(),
            GroupRef::Composite(c) => c.min_count(),
        }
    }

    /// Its `spec.priority` (0 when unset): for a tree's root, the priority of every pod in it.
    pub fn priority(&self) -> i32 {
        match self {
            GroupRef::Group(g) => g.priority,
            GroupRef::Composite(c) => c.priority,
        }
    }

    /// Its own `spec.preemptionPolicy`, if set.
    pub fn preemption_policy(&self) -> Option<&str> {
        match self {
            GroupRef::Group(g) => g.preemption_policy.as_deref(),
            GroupRef::Composite(c) => c.preemption_policy.as_deref(),
        }
    }

    /// Its object's UID, when it has one.
    pub fn uid(&self) -> Option<&str> {
        let uid = match self {
            GroupRef::Group(g) => g.object.metadata.uid.as_deref(),
            GroupRef::Composite(c) => c.object.metadata.uid.as_deref(),
        };
        uid.filter(|u| !u.is_empty())
    }

    /// True for a CompositePodGroup.
    pub fn is_composite(&self) -> bool {
        matches!(self, GroupRef::Composite(_))
    }
}

/// A composite and its subtree, as one cycle decides it. Children come oldest first, then by
/// name (upstream's order), so the same tree is tried the same way every time.
#[derive(Clone, Debug)]
pub enum GroupTree {
    /// A PodGroup.
    Leaf(Arc<PodGroupInfo>),
    /// A CompositePodGroup and its children.
    Composite {
        /// The composite.
        info: Arc<CompositePodGroupInfo>,
        /// Its children, in the order they are tried.
        children: Vec<GroupTree>,
    },
}

impl GroupTree {
    /// The node's key.
    pub fn node_key(&self) -> GroupNodeKey {
        match self {
            GroupTree::Leaf(g) => GroupNodeKey::Group(g.key.clone()),
            GroupTree::Composite { info, .. } => GroupNodeKey::Composite(info.key.clone()),
        }
    }

    /// The node as the placement extension points see it.
    pub fn as_ref(&self) -> GroupRef<'_> {
        match self {
            GroupTree::Leaf(g) => GroupRef::Group(g),
            GroupTree::Composite { info, .. } => GroupRef::Composite(info),
        }
    }

    /// Every PodGroup of the subtree, depth first in child order.
    pub fn leaves(&self) -> Vec<Arc<PodGroupInfo>> {
        let mut out = Vec::new();
        self.collect_leaves(&mut out);
        out
    }

    fn collect_leaves(&self, out: &mut Vec<Arc<PodGroupInfo>>) {
        match self {
            GroupTree::Leaf(g) => out.push(g.clone()),
            GroupTree::Composite { children, .. } => {
                for c in children {
                    c.collect_leaves(out);
                }
            }
        }
    }
}
