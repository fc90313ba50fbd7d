//! How many devices of one DeviceClass a node has, and how many of them are taken: the capacity
//! and usage of a DRA-backed extended resource (KEP-5004) in resource scoring.
//!
//! A node serving `example.com/gpu` through DRA has no allocatable for it, so without this the
//! resource would drop out of NodeResourcesFit's score (allocatable 0 means "ignore"). Upstream
//! counts the class's devices on the node as the capacity and the allocated ones as the usage; so
//! do we. The answer uses the same DRA snapshot DynamicResources' Filter allocated against in
//! this attempt, so Filter and Score never see two different clusters.

use std::sync::Arc;

use unisched_dra::ClassSelector;
use unisched_dra::pools::NodeScope;
use unisched_framework::{CycleState, NodeInfo};

use super::device_scoring::slice_targets;
use super::state::{CycleData, PodState, STATE_KEY};

/// The devices of one class, ready to be counted per node in this attempt.
#[derive(Clone, Debug)]
pub(crate) struct ClassCapacity {
    selector: ClassSelector,
    data: Arc<PodState>,
}

impl ClassCapacity {
    /// For `class` in this attempt; `None` when DynamicResources did not prepare the pod (no
    /// claims, no DRA-backed resources), the class is unknown, or its selectors do not compile.
    pub(crate) fn new(state: &CycleState, class: &str) -> Option<Self> {
        let data = state.read::<CycleData>(STATE_KEY).ok()?.0.clone();
        let class = data.snapshot.class(class)?.clone();
        let selector = ClassSelector::compile(&class, &*data.engine).ok()?;
        Some(ClassCapacity { selector, data })
    }

    /// `(devices of the class on the node, how many of them are allocated or being allocated)`.
    /// A device whose selector evaluation fails counts as not in the class.
    pub(crate) fn count(&self, node: &NodeInfo) -> (i64, i64) {
        let node_name = node.name();
        let api_node = node.node().map(|n| &**n);
        let layers = self.data.snapshot.state_layers();
        let (mut devices, mut allocated) = (0i64, 0i64);
        for slice in self.data.snapshot.index().node_slices(node_name) {
            if !slice_targets(slice, node_name, api_node) {
                continue;
            }
            for (i, dev) in slice.devices().iter().enumerate() {
                if matches!(slice.scope(), NodeScope::PerDevice)
                    && !api_node.is_some_and(|n| slice.device_targets(i, n).unwrap_or(false))
                {
                    continue;
                }
                if !self.selector.matches(slice, i).unwrap_or(false) {
                    continue;
                }
                devices += 1;
                if layers.is_allocated(&dev.id) {
                    allocated += 1;
                }
            }
        }
        (devices, allocated)
    }
}
