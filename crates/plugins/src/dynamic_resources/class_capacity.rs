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
use unisched_dra::pools::PreparedDevice;
use unisched_framework::{CycleState, NodeInfo};

use super::device_scoring::node_devices;
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

    /// The devices of the class that reach `node` (see [`node_devices`]). A device whose selector
    /// evaluation fails counts as not in the class.
    pub(crate) fn devices<'a>(&'a self, node: &'a NodeInfo) -> impl Iterator<Item = &'a PreparedDevice> + 'a {
        node_devices(self.data.snapshot.index(), node.name(), node.node().map(|n| &**n))
            .filter(|(slice, i, _)| self.selector.matches(slice, *i).unwrap_or(false))
            .map(|(_, _, dev)| dev)
    }

    /// `(devices of the class on the node, how many of them are allocated or being allocated)`.
    pub(crate) fn count(&self, node: &NodeInfo) -> (i64, i64) {
        let layers = self.data.snapshot.state_layers();
        self.devices(node).fold((0, 0), |(devices, allocated), dev| {
            (devices + 1, allocated + i64::from(layers.is_allocated(&dev.id)))
        })
    }
}
