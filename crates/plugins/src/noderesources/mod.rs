//! The resource plugins: `NodeResourcesFit` and `NodeResourcesBalancedAllocation`.

mod args;
mod balanced_allocation;
mod fit;
mod scoring;

pub(crate) use args::validate_shape;
pub use args::{
    MAX_CUSTOM_PRIORITY_SCORE, NodeResourcesBalancedAllocationArgs, NodeResourcesFitArgs,
    RequestedToCapacityRatioParam, ResourceSpec, ScoringStrategy, ScoringStrategyType, UtilizationShapePoint,
};
pub use balanced_allocation::NodeResourcesBalancedAllocation;
pub use fit::{
    DEVICE_CLASS_RESOURCE_PREFIX, ExtendedResourceResolver, InsufficientResource, NodeResourcesFit,
    fits_request,
};
