//! How many devices of one DeviceClass a node has, and how many of them are taken: the capacity
//! and usage of a DRA-backed extended resource (KEP-5004) in resource scoring.
//!
//! A node serving `example.com/gpu` through DRA has no allocatable for it, so without this the
//! resource would drop out of the resource scorers' score (allocatable 0 means "ignore").
//! Upstream counts the class's devices on the node as the capacity and the allocated ones as the
//! usage; so do we. The answer uses the same DRA snapshot DynamicResources' Filter allocated
//! against in this attempt, so Filter and Score never see two different clusters.
//!
//! The node-resource scorers reach it only through the framework's read-only
//! [`DeviceClassCapacity`] handle, which PreFilter publishes backed by [`ClassCapacitySource`]:
//! they never read this plugin's cycle state.

use std::sync::Arc;

use unisched_dra::ClassSelector;
use unisched_dra::pools::PreparedDevice;
use unisched_framework::{ClassDeviceCount, CycleState, DeviceClassCapacity, DeviceClassSource, NodeInfo};

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
        Self::of(data, class)
    }

    /// For `class` in the attempt `data` was prepared for.
    fn of(data: Arc<PodState>, class: &str) -> Option<Self> {
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

impl ClassDeviceCount for ClassCapacity {
    fn count(&self, node: &NodeInfo) -> (i64, i64) {
        ClassCapacity::count(self, node)
    }
}

/// The pod's prepared DRA state as the framework's [`DeviceClassSource`].
#[derive(Debug)]
pub(crate) struct ClassCapacitySource(pub(crate) Arc<PodState>);

impl ClassCapacitySource {
    /// The handle to publish for the attempt `data` was prepared for.
    pub(crate) fn handle(data: Arc<PodState>) -> DeviceClassCapacity {
        DeviceClassCapacity::new(Arc::new(ClassCapacitySource(data)))
    }
}

impl DeviceClassSource for ClassCapacitySource {
    fn class(&self, class: &str) -> Option<Arc<dyn ClassDeviceCount>> {
        let capacity = ClassCapacity::of(self.0.clone(), class)?;
        Some(Arc::new(capacity))
    }
}
