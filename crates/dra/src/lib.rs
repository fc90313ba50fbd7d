//! The DRA structured allocator and the CEL device-selector environment.
//!
//! Pure, synchronous and deterministic: no I/O, no async runtime. Given a node, the claims to
//! allocate, the ResourceSlices (with DeviceTaintRules applied), the DeviceClasses and what is
//! already allocated, it decides which devices satisfy the claims with the `resource.k8s.io/v1`
//! semantics of Kubernetes 1.37 and returns the `AllocationResult`s exactly as the API expects,
//! or a typed reason.
//!
//! Modules:
//! * [`cel`]: the [`SelectorEngine`]/[`DeviceSelector`] traits and the CEL implementation;
//! * [`cost`]: CEL cost limits (compile-time estimate, metered runtime budget, deadline);
//! * [`pools`]: [`PreparedSlice`] (a slice parsed once, owning per-device caches) and
//!   [`DraSnapshotIndex`] (slices by node, node-independent slices, pools by newest generation);
//! * [`state`]: [`AllocatedState`], maintained incrementally from allocation results, and
//!   [`StateLayers`] to stack in-flight allocations on top;
//! * [`claims`]: [`PreparedClaim`] (classes resolved, selectors compiled, requests validated);
//! * [`allocator`]: [`Allocator`], the per-pod object whose [`Allocator::allocate`] runs per node
//!   (gathering, candidates, search and result each in their own submodule);
//! * [`error`]: [`AllocationError`], separating "unschedulable on this node" from fatal errors;
//! * [`capacity`], [`taints`], [`nodesel`]: consumable capacity, taints/tolerations and
//!   `DeviceTaintRule`s, node selectors.
//!
//! Typical use by the DynamicResources plugin:
//!
//! ```text
//! let engine = CelSelectorEngine::new();                       // process-wide, caches compiled CEL
//! let index = Arc::new(DraSnapshotIndex::new(prepared_slices)); // maintained by the cache
//! let claims = pod_claims.iter()
//!     .map(|c| PreparedClaim::new(c.clone(), &classes, &engine, &features).map(Arc::new))
//!     .collect::<Result<Vec<_>, _>>()?;                        // PreFilter: fatal errors here
//! let allocator = Allocator::new(index, StateLayers::new(vec![allocated, in_flight]), claims, features);
//! match allocator.allocate(&node, Deadline::after(filter_timeout)) {   // Filter, per node
//!     Ok(results) => { /* one AllocationResult per claim */ }
//!     Err(AllocationError::Unschedulable(why)) => { /* this node only */ }
//!     Err(e) => { /* fatal or aborted: end the attempt */ }
//! }
//! ```
#![forbid(unsafe_code)]

pub mod allocator;
pub mod capacity;
pub mod cel;
pub mod claims;
pub mod class_selector;
pub mod cost;
pub mod device_maps;
pub mod error;
pub mod ids;
pub mod nodesel;
mod pool_shards;
pub mod pools;
pub mod state;
pub mod taints;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(test)]
mod tests;

pub use allocator::{Allocator, Deadline, NodeSummary, Stats, summary_shape};
pub use cel::{
    CelSelectorEngine, DeviceSelector, DeviceValueError, EvalErrorKind, SelectorEngine, SelectorId,
    split_qualified_name,
};
pub use claims::{ALLOCATION_RESULTS_MAX_SIZE, AllocationMode, ClassLookup, Features, PreparedClaim};
pub use class_selector::ClassSelector;
pub use cost::{CEL_SELECTOR_EXPRESSION_MAX_COST, CostLimits};
pub use device_maps::{
    DeviceMaps, has_device_maps, restore_device_maps, split_device_maps, split_shared_slice,
};
pub use error::{AllocationError, FatalError, SelectorSource, Unschedulable, UnschedulableReason};
pub use ids::{DeviceId, PoolKey};
pub use nodesel::NodeSelectorError;
pub use pools::{DraSnapshotIndex, PreparedSlice, SliceDataError};
pub use state::{AllocatedState, StateLayers};
pub use taints::apply_device_taint_rules;
