//! `NodeFootprints`: the part of a pod's demand that depends on the node.
//!
//! A pod's spec requests are the same on every node, but what its DRA claims cost in node
//! allocatable (KEP-5517 mappings and overheads) depends on which devices the allocator picks on
//! each node. DynamicResources computes that per node in Filter and records it here; the resource
//! Score plugins add it to the pod's requests, so scoring sees the whole footprint.
//!
//! Filter runs in parallel, so the record has interior mutability; it is shared through the
//! cycle state under [`NODE_FOOTPRINTS_KEY`].

use std::{collections::HashMap, sync::Arc};

use parking_lot::RwLock;
use unisched_resource::Resource;

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
