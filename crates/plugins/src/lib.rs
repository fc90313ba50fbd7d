//! The in-tree scheduler plugins and their registry.
//!
//! One module per plugin, each with its tests beside it. Behaviour and every user-visible string
//! (rejection reasons, argument validation errors) follow upstream kube-scheduler, because users,
//! dashboards and the cluster autoscaler match on them; where unisched differs on purpose (the
//! unified DRA footprint in resource scoring) the module says so.
//!
//! | plugin | extension points |
//! |---|---|
//! | [`PrioritySort`] | QueueSort |
//! | [`SchedulingGates`] | PreEnqueue, events |
//! | [`NodeUnschedulable`] | Filter, events |
//! | [`NodeName`] | PreFilter, Filter, events |
//! | [`TaintToleration`] | Filter, PreScore, Score (+normalize), events |
//! | [`NodeAffinity`] | PreFilter, Filter, PreScore, Score (+normalize), events |
//! | [`NodePorts`] | PreFilter, Filter, events |
//! | [`NodeResourcesFit`] | PreFilter, Filter, PreScore, Score, events |
//! | [`NodeResourcesBalancedAllocation`] | PreScore, Score |
//! | [`PodTopologySpread`] | PreFilter (+AddPod/RemovePod), Filter, PreScore, Score (+normalize), events |
//! | [`InterPodAffinity`] | PreFilter (+AddPod/RemovePod), Filter, PreScore, Score (+normalize), events |
//! | [`ImageLocality`] | Score |
//! | [`DefaultBinder`] | Bind |
//! | [`DefaultPreemption`] | PostFilter |
//! | [`VolumeRestrictions`] | PreFilter (+AddPod/RemovePod), Filter, events |
//! | [`NodeVolumeLimits`] | PreFilter, Filter, events |
//! | [`VolumeBinding`] | PreFilter, Filter, Reserve, PreBind, events |
//! | [`VolumeZone`] | PreFilter, Filter, events |
//! | [`NodeDeclaredFeatures`] | PreFilter, Filter, events |
//! | [`DynamicResources`] | PreEnqueue, PreFilter (+AddPod/RemovePod), Filter, PostFilter, PreScore, Score (+normalize), Reserve, PreBind, AssumedPod, events |
//!
//! [`Registry::in_tree`] builds them by name from `pluginConfig` args.
#![forbid(unsafe_code)]

mod default_binder;
pub mod default_preemption;
pub mod dynamic_resources;
mod extender_resources;
mod helper;
mod image_locality;
mod inter_pod_affinity;
mod label_selector;
mod node_affinity;
mod node_declared_features;
mod node_name;
mod node_ports;
mod node_unschedulable;
mod noderesources;
mod pod_topology_spread;
mod queue_sort;
mod registry;
mod resource_scoring;
mod scheduling_gates;
mod selector;
mod taint_toleration;
mod toleration;
pub mod volume;
mod workload;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use default_binder::{BindError, BindFuture, Binder, DefaultBinder};
pub use default_preemption::{
    DefaultPreemption, DefaultPreemptionArgs, GroupPreemptor, PdbLister, PreemptionCounts, PreemptionPlan,
    Preemptor, RecordingPreemptor, StaticPdbs,
};
pub use dynamic_resources::{
    DeviceResources, DeviceResourcesArgs, DraApi, DraApiError, DynamicResources, DynamicResourcesArgs,
};
pub use helper::PluginArgsError;
pub use helper::default_normalize_score;
pub use image_locality::ImageLocality;
pub use inter_pod_affinity::{InterPodAffinity, InterPodAffinityArgs, NamespaceLister};
pub use node_affinity::{NodeAffinity, NodeAffinityArgs};
pub use node_declared_features::NodeDeclaredFeatures;
pub use node_name::NodeName;
pub use node_ports::NodePorts;
pub use node_unschedulable::NodeUnschedulable;
pub use noderesources::{
    DEVICE_CLASS_RESOURCE_PREFIX, ExtendedResourceResolver, InsufficientResource, MAX_CUSTOM_PRIORITY_SCORE,
    NodeResourcesBalancedAllocation, NodeResourcesBalancedAllocationArgs, NodeResourcesFit,
    NodeResourcesFitArgs, RequestedToCapacityRatioParam, ResourceSpec, ScoringStrategy, ScoringStrategyType,
    UtilizationShapePoint, fits_request,
};
pub use pod_topology_spread::{PodTopologySpread, PodTopologySpreadArgs};
pub use queue_sort::PrioritySort;
pub use registry::{
    PluginContext, PluginFactory, PluginFeatures, Registry, RegistryError, validate_plugin_args,
};
pub use scheduling_gates::SchedulingGates;
pub use selector::{NodeSelectorMatcher, RequiredNodeAffinity};
pub use taint_toleration::TaintToleration;
pub use toleration::{find_untolerated_taint, tolerates_taint};
pub use volume::{
    NodeVolumeLimits, VolumeApi, VolumeApiError, VolumeBinding, VolumeBindingArgs, VolumeRestrictions,
    VolumeZone,
};
pub use workload::{GangScheduling, PodGroupPodsCount, TopologyPlacementGenerator};

/// The plugins' rejection reasons, as upstream prints them (`Insufficient <resource>` is built per
/// resource).
pub mod reasons {
    pub use crate::node_affinity::{ERR_REASON_CONFLICT, ERR_REASON_ENFORCED, ERR_REASON_POD};
    pub use crate::node_declared_features::ERR_REASON_UNSATISFIED_REQUIREMENTS as NODE_DECLARED_FEATURES;
    pub use crate::node_name::ERR_REASON as NODE_NAME;
    pub use crate::node_ports::ERR_REASON as NODE_PORTS;
    pub use crate::node_unschedulable::{
        ERR_REASON_UNKNOWN_CONDITION, ERR_REASON_UNSCHEDULABLE, TAINT_NODE_UNSCHEDULABLE,
    };
    pub use crate::taint_toleration::ERR_REASON_NOT_MATCH as UNTOLERATED_TAINT;
    pub use crate::{
        inter_pod_affinity::{
            ERR_REASON_AFFINITY_RULES_NOT_MATCH as POD_AFFINITY,
            ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH as POD_ANTI_AFFINITY,
            ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH as EXISTING_POD_ANTI_AFFINITY,
        },
        pod_topology_spread::{
            ERR_REASON_CONSTRAINTS_NOT_MATCH as TOPOLOGY_SPREAD,
            ERR_REASON_NODE_LABEL_NOT_MATCH as TOPOLOGY_SPREAD_MISSING_LABEL,
        },
    };
    /// NodeResourcesFit: the node is at its pod limit.
    pub const TOO_MANY_PODS: &str = "Too many pods";
}

/// Plugin names, as used in configuration.
pub mod names {
    /// `PrioritySort`.
    pub const PRIORITY_SORT: &str = "PrioritySort";
    /// `SchedulingGates`.
    pub const SCHEDULING_GATES: &str = "SchedulingGates";
    /// `NodeUnschedulable`.
    pub const NODE_UNSCHEDULABLE: &str = "NodeUnschedulable";
    /// `NodeName`.
    pub const NODE_NAME: &str = "NodeName";
    /// `TaintToleration`.
    pub const TAINT_TOLERATION: &str = "TaintToleration";
    /// `NodeAffinity`.
    pub const NODE_AFFINITY: &str = "NodeAffinity";
    /// `NodePorts`.
    pub const NODE_PORTS: &str = "NodePorts";
    /// `NodeResourcesFit`.
    pub const NODE_RESOURCES_FIT: &str = "NodeResourcesFit";
    /// `NodeResourcesBalancedAllocation`.
    pub const NODE_RESOURCES_BALANCED_ALLOCATION: &str = "NodeResourcesBalancedAllocation";
    /// `DefaultBinder`.
    pub const DEFAULT_BINDER: &str = "DefaultBinder";
    /// `DefaultPreemption`.
    pub const DEFAULT_PREEMPTION: &str = crate::default_preemption::NAME;
    /// `PodTopologySpread`.
    pub const POD_TOPOLOGY_SPREAD: &str = "PodTopologySpread";
    /// `InterPodAffinity`.
    pub const INTER_POD_AFFINITY: &str = "InterPodAffinity";
    /// `ImageLocality`.
    pub const IMAGE_LOCALITY: &str = "ImageLocality";
    /// `DynamicResources`.
    pub const DYNAMIC_RESOURCES: &str = "DynamicResources";
    /// `VolumeRestrictions`.
    pub const VOLUME_RESTRICTIONS: &str = "VolumeRestrictions";
    /// `NodeVolumeLimits`.
    pub const NODE_VOLUME_LIMITS: &str = "NodeVolumeLimits";
    /// `VolumeBinding`.
    pub const VOLUME_BINDING: &str = "VolumeBinding";
    /// `VolumeZone`.
    pub const VOLUME_ZONE: &str = "VolumeZone";
    /// `NodeDeclaredFeatures`.
    pub const NODE_DECLARED_FEATURES: &str = "NodeDeclaredFeatures";
    /// `GangScheduling`.
    pub const GANG_SCHEDULING: &str = "GangScheduling";
    /// `TopologyPlacementGenerator`.
    pub const TOPOLOGY_PLACEMENT_GENERATOR: &str = "TopologyPlacementGenerator";
    /// `PodGroupPodsCount`.
    pub const POD_GROUP_PODS_COUNT: &str = "PodGroupPodsCount";
    /// `DeviceResources` (unisched; not in the default profile).
    pub const DEVICE_RESOURCES: &str = crate::dynamic_resources::DEVICE_RESOURCES;
}
