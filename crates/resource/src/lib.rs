//! Exact Kubernetes quantities, resource vectors and pod request math.
//!
//! This crate is the bottom of the unisched ledger. Everything that asks "how much does this pod need"
//! or "how much does this node have" goes through it, so that the scheduler, the embedded kubelet and
//! the DRA node-allocatable accounting agree to the unit.
#![forbid(unsafe_code)]

mod quantity;
mod requests;
mod resize;
mod resource;
mod sum;

pub use quantity::{Format, Quantity, QuantityError};
pub use requests::{
    DEFAULT_MEMORY_REQUEST, DEFAULT_MILLI_CPU_REQUEST, PodRequestOptions, PodResources,
    node_allocatable_claim_footprint, pod_limits, pod_requests, pod_requests_checked,
    pod_requests_with_claims, pod_resources,
};
pub use resize::{is_pod_resize_deferred, is_pod_resize_infeasible};
pub use resource::{
    CPU, EPHEMERAL_STORAGE, HUGEPAGES_PREFIX, InvalidQuantity, MEMORY, PODS, Resource,
    is_extended_resource_name, is_hugepages, is_node_allocatable_resource,
};
pub use sum::ResourceSum;
