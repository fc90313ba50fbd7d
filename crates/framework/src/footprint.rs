//! The pod's device footprint as the resource scorers see it: the handles through which the DRA
//! plugin (the writer) tells the node-resource plugins (the readers) what the pod's claims cost,
//! without either plugin reading the other's cycle state or types.
//!
//! Two views, both written by DynamicResources in PreFilter and only read afterwards:
//!
//! * [`NodeFootprints`] (under [`NODE_FOOTPRINTS_KEY`]): the part of a pod's demand that depends
//!   on the node. A pod's spec requests are the same on every node, but what its DRA claims cost
//!   in node allocatable (KEP-5517 mappings and overheads) depends on which devices the allocator
//!   picks on each node. DynamicResources computes that per node in Filter and records it here;
//!   the resource Score plugins add it to the pod's requests, so scoring sees the whole
//!   footprint. Filter runs in parallel, so the record has interior mutability.
//! * [`DeviceClassCapacity`] (under [`DEVICE_CLASS_CAPACITY_KEY`]): how many devices of a
//!   DeviceClass a node has and how many are taken, for an extended resource served through DRA
//!   (KEP-5004). Such a node has no allocatable for the resource, so without it the resource
//!   would drop out of the score. The answer comes from the same DRA snapshot the pod's Filter
//!   allocated against, so Filter and Score never see two different clusters.
//!
//! Both are cheap to clone (an `Arc`) and cost nothing per node beyond the lookup itself: a
//! scorer resolves its classes once per attempt (PreScore) and counts per node through the
//! resolved [`ClassDeviceCount`].

use std::{collections::HashMap, fmt, sync::Arc};

use parking_lot::RwLock;
use unisched_resource::Resource;

use crate::NodeInfo;

/// Cycle-state key of the [`NodeFootprints`] record.
pub const NODE_FOOTPRINTS_KEY: &str = "unisched.io/NodeFootprints";

/// Extra requests per node name for the pod being scheduled.
#[derive(Clone, Debug, Default)]
pub struct NodeFootprints(Arc<RwLock<HashMap<String, Resource>>>);

impl NodeFootprints {
    /// Records the extra demand on `node`, replacing an earlier value.
    pub fn set(&self, node: &str, extra: Resource) {
        self.0.write().insert(node.to_string(), extra);
    }

    /// The extra demand on `node` (empty when none was recorded).
    pub fn get(&self, node: &str) -> Option<Resource> {
        self.0.read().get(node).cloned()
    }

    /// Forgets `node`. Filter calls this for every node it rejects, mostly nodes never recorded,
    /// from several threads: the shared read lock answers those without serialising them.
    pub fn remove(&self, node: &str) {
        if self.0.read().contains_key(node) {
            self.0.write().remove(node);
        }
    }

    /// Forgets every node but `node`, and the room the others took: once Reserve has chosen a
    /// node, the others' entries are never read again, yet the cycle state holding them lives
    /// until the binding cycle ends.
    pub fn retain_only(&self, node: &str) {
        let mut map = self.0.write();
        let kept = map.remove(node);
        *map = HashMap::new();
        if let Some(extra) = kept {
            map.insert(node.to_string(), extra);
        }
    }
}

/// Cycle-state key of the [`DeviceClassCapacity`] handle.
pub const DEVICE_CLASS_CAPACITY_KEY: &str = "unisched.io/DeviceClassCapacity";

/// The devices of one DeviceClass, resolved for this attempt and counted per node.
pub trait ClassDeviceCount: Send + Sync + fmt::Debug {
    /// `(devices of the class on the node, how many of them are allocated or being allocated)`.
    fn count(&self, node: &NodeInfo) -> (i64, i64);
}

/// What the DRA side knows about DeviceClasses in this attempt.
pub trait DeviceClassSource: Send + Sync + fmt::Debug {
    /// The devices of `class`; `None` when the class is unknown or its selectors do not compile.
    fn class(&self, class: &str) -> Option<Arc<dyn ClassDeviceCount>>;
}

/// The read-only handle to DeviceClass capacity the DRA plugin publishes for the pod being
/// scheduled. Absent from the cycle state when the DRA plugin did not prepare the pod (no claims,
/// no DRA-backed extended resources) or no longer holds its DRA snapshot (after Reserve).
#[derive(Clone, Debug)]
pub struct DeviceClassCapacity(Arc<dyn DeviceClassSource>);

impl DeviceClassCapacity {
    /// A handle answering from `source`.
    pub fn new(source: Arc<dyn DeviceClassSource>) -> Self {
        DeviceClassCapacity(source)
    }

    /// The devices of `class` (see [`DeviceClassSource::class`]).
    pub fn class(&self, class: &str) -> Option<Arc<dyn ClassDeviceCount>> {
        self.0.class(class)
    }
}
