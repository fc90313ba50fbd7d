//! A PodGroup as the scheduler reads it.

use std::{fmt, sync::Arc};

use k8s_openapi::api::{core::v1::Pod, scheduling::v1beta1::PodGroup};

/// `namespace/name` of a PodGroup; pods name their group within their own namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodGroupKey {
    /// The group's namespace (the pod's).
    pub namespace: String,
    /// The group's name.
    pub name: String,
}

impl PodGroupKey {
    /// A key from its parts.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        PodGroupKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The group a pod names in `spec.schedulingGroup.podGroupName`, if any.
    pub fn of_pod(pod: &Pod) -> Option<Self> {
        let name = pod
            .spec
            .as_ref()?
            .scheduling_group
            .as_ref()?
            .pod_group_name
            .as_ref()?;
        Some(PodGroupKey::new(
            pod.metadata.namespace.clone().unwrap_or_default(),
            name.clone(),
        ))
    }

    /// The key of a PodGroup object.
    pub fn of_group(group: &PodGroup) -> Self {
        PodGroupKey::new(
            group.metadata.namespace.clone().unwrap_or_default(),
            group.metadata.name.clone().unwrap_or_default(),
        )
    }
}

impl fmt::Display for PodGroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What "placed" means for a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupPolicy {
    /// Each pod is placed if it fits; the group needs one.
    Basic,
    /// All or nothing: at least `min_count` pods, or none.
    Gang {
        /// The quorum.
        min_count: usize,
    },
}

/// A PodGroup with the fields scheduling reads decoded once.
#[derive(Clone, Debug)]
pub struct PodGroupInfo {
    /// Its key.
    pub key: PodGroupKey,
    /// The object as last seen (its status conditions are patched from it).
    pub object: Arc<PodGroup>,
    /// Gang or basic.
    pub policy: GroupPolicy,
    /// The node label every member must share one value of (the first topology constraint;
    /// the API allows one).
    pub topology_key: Option<String>,
    /// The group's priority (`spec.priority`, 0 when unset): every member must have it.
    pub priority: i32,
    /// `spec.disruptionMode.all`: preemption evicts the group's members all together or none
    /// of them (otherwise each member is a victim on its own).
    pub disrupted_together: bool,
    /// `spec.preemptionPolicy` (read only with the PodGroupPreemptionPolicy gate).
    pub preemption_policy: Option<String>,
    /// `spec.parentCompositePodGroupName`: the CompositePodGroup the group is a child of (read
    /// only with the CompositePodGroup gate).
    pub parent: Option<String>,
}

impl PodGroupInfo {
    /// Decodes a PodGroup. A gang whose `minCount` is not positive is taken as 1 (the API
    /// server refuses it; a stored one must not make a group unplaceable by arithmetic).
    pub fn new(object: Arc<PodGroup>) -> Self {
        let spec = &object.spec;
        let policy = match &spec.scheduling_policy.gang {
            Some(g) => GroupPolicy::Gang {
                min_count: usize::try_from(g.min_count).unwrap_or(0).max(1),
            },
            None => GroupPolicy::Basic,
        };
        let topology_key = spec
            .scheduling_constraints
            .as_ref()
            .and_then(|c| c.topology.as_ref())
            .and_then(|t| t.first())
            .map(|t| t.key.clone());
        PodGroupInfo {
            key: PodGroupKey::of_group(&object),
            policy,
            topology_key,
            priority: spec.priority.unwrap_or(0),
            disrupted_together: spec.disruption_mode.as_ref().is_some_and(|m| m.all.is_some()),
            preemption_policy: spec.preemption_policy.clone(),
            parent: spec
                .parent_composite_pod_group_name
                .clone()
                .filter(|p| !p.is_empty()),
            object,
        }
    }

    /// How many members must be placed for the group to count as placed (1 for basic groups).
    pub fn min_count(&self) -> usize {
        match self.policy {
            GroupPolicy::Basic => 1,
            GroupPolicy::Gang { min_count } => min_count,
        }
    }

    /// True for a gang.
    pub fn is_gang(&self) -> bool {
        matches!(self.policy, GroupPolicy::Gang { .. })
    }
}
