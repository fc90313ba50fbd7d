//! Resource-allocation scoring shared by NodeResourcesFit and NodeResourcesBalancedAllocation
//! (upstream `resource_allocation.go`, `least_allocated.go`, `most_allocated.go`,
//! `requested_to_capacity_ratio.go`, `balanced_allocation.go`).
//!
//! For each configured resource the scorer takes the node's allocatable and what would be requested
//! with the pod on it:
//! - cpu and memory use the node's *non-zero* requested sum and the pod's non-zero request (100m /
//!   200Mi for containers without one) for Fit, and exact requests for BalancedAllocation;
//! - ephemeral-storage always uses exact requests;
//! - any other ("scalar") resource is ignored when the pod does not request it, and uses exact
//!   requests when the node has it;
//! - resources with zero allocatable are left out of the weighted average.
//!
//! unisched addition: the pod's per-node DRA footprint (`NodeFootprints`, recorded by the DRA
//! plugin in Filter) is added to the pod's request on that node, so a pod whose CPU comes through
//! a claim is scored like one asking for it in its spec. Both that and the device capacity of
//! DRA-backed extended resources are read through the framework's read-only handles
//! (`unisched_framework::footprint`), never from the DRA plugin's own state.

use std::{borrow::Cow, sync::Arc};

use crate::ExtendedResourceResolver;
use crate::resource_scoring::{Strategy, balance_improvement, score_entries};
use unisched_framework::{
    ClassDeviceCount, CycleState, DEVICE_CLASS_CAPACITY_KEY, DeviceClassCapacity, NODE_FOOTPRINTS_KEY,
    NodeFootprints, NodeInfo, PodInfo, Status,
};
use unisched_resource::{CPU, EPHEMERAL_STORAGE, MEMORY, Resource, is_extended_resource_name, is_hugepages};

/// Upstream `IsScalarResourceName`: extended resources, hugepages, `kubernetes.io/`-prefixed native
/// resources and attachable volumes.
pub(crate) fn is_scalar_resource_name(name: &str) -> bool {
    is_extended_resource_name(name)
        || is_hugepages(name)
        || name.contains("kubernetes.io/")
        || name.starts_with("attachable-volumes-")
}

/// Which of a node's counters a configured resource reads, worked out once when the plugin is
/// built: Score runs per node and resource, and matching the name there was a string comparison
/// (and a scan for `/`) each time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ResourceKind {
    Cpu,
    Memory,
    EphemeralStorage,
    /// Any other resource, read by name; `scalar` ones (upstream `IsScalarResourceName`) are left
    /// out when the pod does not request them.
    Named {
        scalar: bool,
    },
}

impl ResourceKind {
    fn of(name: &str) -> Self {
        match name {
            CPU => ResourceKind::Cpu,
            MEMORY => ResourceKind::Memory,
            EPHEMERAL_STORAGE => ResourceKind::EphemeralStorage,
            other => ResourceKind::Named {
                scalar: is_scalar_resource_name(other),
            },
        }
    }
}

/// One configured resource of a scorer.
#[derive(Clone, Debug)]
struct ScoredResource {
    name: String,
    weight: i64,
    kind: ResourceKind,
}

/// The scorer of one plugin: resources with weights, a strategy, and which requests it uses.
#[derive(Clone, Debug)]
pub(crate) struct ResourceAllocationScorer {
    /// The configured resources with their weights, in configuration order.
    resources: Vec<ScoredResource>,
    pub(crate) strategy: Strategy,
    /// Exact requests (BalancedAllocation) rather than the non-zero variant (Fit) for cpu/memory.
    pub(crate) use_requested: bool,
    /// Add the pod's per-node DRA footprint.
    pub(crate) include_footprint: bool,
}

/// What PreScore computes for Score.
#[derive(Clone, Debug, Default)]
pub(crate) struct ScorePreState {
    /// The pod's request per configured resource.
    pub(crate) pod_requests: Vec<i64>,
    /// The per-node DRA footprints of this attempt, when recorded and enabled.
    pub(crate) footprints: Option<NodeFootprints>,
    /// Per configured resource: the DeviceClass devices serving it when it is a DRA-backed
    /// extended resource the pod requests (empty when there is none).
    pub(crate) dra_classes: Vec<Option<Arc<dyn ClassDeviceCount>>>,
}

impl ScorePreState {
    /// The state PreScore stored under `key`, or, when PreScore did not run for this attempt,
    /// the one `compute` makes now (Score must work either way, as upstream's does).
    pub(crate) fn stored_or<'a>(
        state: &'a CycleState,
        key: &str,
        compute: impl FnOnce() -> ScorePreState,
    ) -> Cow<'a, ScorePreState> {
        match state.read::<ScorePreState>(key) {
            Ok(pre) => Cow::Borrowed(pre),
            Err(_) => Cow::Owned(compute()),
        }
    }
}

impl ResourceAllocationScorer {
    /// A scorer of `(resource name, weight)` pairs, in that order.
    pub(crate) fn new(
        resources: impl IntoIterator<Item = (String, i64)>,
        strategy: Strategy,
        use_requested: bool,
        include_footprint: bool,
    ) -> Self {
        ResourceAllocationScorer {
            resources: resources
                .into_iter()
                .map(|(name, weight)| ScoredResource {
                    kind: ResourceKind::of(&name),
                    name,
                    weight,
                })
                .collect(),
            strategy,
            use_requested,
            include_footprint,
        }
    }

    /// The configured resources' names, in order.
    pub(crate) fn resource_names(&self) -> impl Iterator<Item = &str> {
        self.resources.iter().map(|r| r.name.as_str())
    }

    /// The pod's request per configured resource (cpu in milli-cores, the rest in units).
    pub(crate) fn pod_requests(&self, pod: &PodInfo) -> Vec<i64> {
        let r = if self.use_requested {
            pod.requests()
        } else {
            pod.non_zero_requests()
        };
        self.resources.iter().map(|res| r.get(&res.name)).collect()
    }

    /// The PreScore state for `pod`.
    pub(crate) fn pre_state(&self, state: &CycleState, pod: &PodInfo) -> ScorePreState {
        let footprints = if self.include_footprint {
            state.read::<NodeFootprints>(NODE_FOOTPRINTS_KEY).ok().cloned()
        } else {
            None
        };
        ScorePreState {
            pod_requests: self.pod_requests(pod),
            footprints,
            dra_classes: Vec::new(),
        }
    }

    /// [`Self::pre_state`], plus device capacity for the extended resources the pod requests that
    /// `resolver` maps to a DeviceClass (KEP-5004): on a node without allocatable for such a
    /// resource, the class's devices there are its capacity and the allocated ones its usage.
    pub(crate) fn pre_state_with_dra(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        resolver: Option<&dyn ExtendedResourceResolver>,
    ) -> ScorePreState {
        let mut pre = self.pre_state(state, pod);
        let Some(resolver) = resolver else {
            return pre;
        };
        let Ok(capacity) = state.read::<DeviceClassCapacity>(DEVICE_CLASS_CAPACITY_KEY) else {
            return pre;
        };
        let classes: Vec<Option<Arc<dyn ClassDeviceCount>>> = self
            .resources
            .iter()
            .zip(&pre.pod_requests)
            .map(|(res, &request)| {
                if request <= 0 || !is_extended_resource_name(&res.name) {
                    return None;
                }
                capacity.class(&resolver.device_class_for(&res.name)?)
            })
            .collect();
        if classes.iter().any(Option::is_some) {
            pre.dra_classes = classes;
        }
        pre
    }

    /// `(allocatable, requested including the pod)` of one resource on the node; `(0, 0)` leaves
    /// the resource out.
    fn allocatable_requested(&self, node: &NodeInfo, res: &ScoredResource, pod_request: i64) -> (i64, i64) {
        let requested = if self.use_requested {
            &node.requested
        } else {
            &node.non_zero_requested
        };
        match res.kind {
            ResourceKind::Cpu => (
                node.allocatable.milli_cpu,
                requested.milli_cpu.saturating_add(pod_request),
            ),
            ResourceKind::Memory => (
                node.allocatable.memory,
                requested.memory.saturating_add(pod_request),
            ),
            ResourceKind::EphemeralStorage => (
                node.allocatable.ephemeral_storage,
                node.requested.ephemeral_storage.saturating_add(pod_request),
            ),
            ResourceKind::Named { scalar: true } if pod_request == 0 => (0, 0),
            ResourceKind::Named { .. } => match node.allocatable.scalar_resources.get(&res.name) {
                Some(alloc) => (*alloc, node.requested.get(&res.name).saturating_add(pod_request)),
                None => (0, 0),
            },
        }
    }

    /// The node's score for a pod with these requests.
    pub(crate) fn score(&self, node: &NodeInfo, pre: &ScorePreState) -> Result<i64, Status> {
        if self.resources.is_empty() {
            return Err(Status::error("resources not found"));
        }
        let extra: Option<Resource> = pre.footprints.as_ref().and_then(|f| f.get(node.name()));
        // Score runs for every feasible node: keep the usual handful of resources off the heap.
        const INLINE: usize = 8;
        let n = self.resources.len();
        if n > INLINE {
            let entries: Vec<_> = self
                .resources
                .iter()
                .enumerate()
                .map(|(i, r)| self.entry(node, pre, extra.as_ref(), i, r))
                .collect();
            return Ok(self.combine(&entries));
        }
        let mut buf = [((0i64, 0i64, 0i64), 0i64); INLINE];
        for (i, r) in self.resources.iter().enumerate() {
            buf[i] = self.entry(node, pre, extra.as_ref(), i, r);
        }
        Ok(self.combine(&buf[..n]))
    }

    /// `((requested with the pod, allocatable, weight), the pod's own part of the first)` of the
    /// `i`th configured resource on `node`. Inlined into [`Self::score`]: as a call, its 32-byte
    /// result went back through memory and the loads after it waited on the stores (a third of
    /// Score's time in the SchedulingBasic engine profile).
    #[inline(always)]
    fn entry(
        &self,
        node: &NodeInfo,
        pre: &ScorePreState,
        extra: Option<&Resource>,
        i: usize,
        res: &ScoredResource,
    ) -> ((i64, i64, i64), i64) {
        let mut pod_request = pre.pod_requests.get(i).copied().unwrap_or(0);
        if let Some(extra) = extra {
            pod_request = pod_request.saturating_add(extra.get(&res.name));
        }
        let (mut alloc, mut req) = self.allocatable_requested(node, res, pod_request);
        if alloc == 0
            && let Some(Some(devices)) = pre.dra_classes.get(i)
        {
            let (capacity, allocated) = devices.count(node);
            (alloc, req) = (capacity, allocated.saturating_add(pod_request));
        }
        ((req, alloc, res.weight), pod_request)
    }

    /// The node score from `((requested with the pod, allocatable, weight), the pod's request)`
    /// per resource: the strategy applied to the node with the pod, and for BalancedAllocation the
    /// change in balance against the node without it.
    fn combine(&self, entries: &[((i64, i64, i64), i64)]) -> i64 {
        let with_pod = entries.iter().map(|&(e, _)| e);
        if self.strategy != Strategy::Balanced {
            return score_entries(&self.strategy, with_pod);
        }
        let without_pod = entries
            .iter()
            .map(|&((req, alloc, w), pod)| (req.saturating_sub(pod), alloc, w));
        balance_improvement(
            score_entries(&Strategy::Balanced, with_pod),
            score_entries(&Strategy::Balanced, without_pod),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_names() {
        for (name, want) in [
            ("cpu", false),
            ("memory", false),
            ("example.com/gpu", true),
            ("hugepages-2Mi", true),
            ("kubernetes.io/something", true),
            ("attachable-volumes-csi-x", true),
            ("pods", false),
        ] {
            assert_eq!(is_scalar_resource_name(name), want, "{name}");
        }
    }
}
