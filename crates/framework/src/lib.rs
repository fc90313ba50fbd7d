//! The scheduling framework: plugin interfaces, `Status`, `CycleState`, `NodeInfo`/`PodInfo`,
//! `Snapshot`, configuration, and the scheduling and binding cycles.
//!
//! This crate is synchronous and knows nothing about HTTP or tokio. Given the same snapshot, pod,
//! configuration and seed it makes the same decision, which is what lets the whole scheduler be
//! tested with plain unit tests. The cache and the queue (crates above) plug in through
//! [`SchedulerCache`] and [`PodNominator`].
#![forbid(unsafe_code)]

mod algorithm;
mod cycle_state;
mod diagnosis;
mod events;
mod footprint;
mod node_info;
mod node_veto;
mod permit;
mod plugin;
mod plugin_clock;
mod pod_group;
mod pod_info;
mod profile;
mod rng;
mod scheduler;
mod snapshot;
mod split;
mod status;
#[cfg(test)]
mod test_support;

pub mod config;
pub mod extender;

pub use algorithm::{NoNominations, PodNominator, ScheduleError, ScheduleResult, SchedulingAlgorithm};
pub use cycle_state::{CycleState, PodGroupAttempt, StateData, StateError};
pub use diagnosis::{
    DIAGNOSIS_DETAIL_KEY, Diagnosis, DiagnosisDetail, DiagnosisDetailSource, FitError, NodeToStatus,
};
pub use events::{
    ActionType, ClusterEvent, ClusterEventWithHint, EventKeysFn, EventNarrowing, EventObject, EventResource,
    EventSide, PodKeysFn, QueueingHint, QueueingHintError, QueueingHintFn, well_known,
};
pub use footprint::{
    ClassDeviceCount, DEVICE_CLASS_CAPACITY_KEY, DeviceClassCapacity, DeviceClassSource, NODE_FOOTPRINTS_KEY,
    NodeFootprints,
};
pub use node_info::{HostPortInfo, ImageStateSummary, NodeInfo, SlotMemo};
pub use node_veto::{NODE_VETO_KEY, NodeVeto, NodeVetoHandle};
pub use permit::WaitingPods;
pub use plugin::{
    AssumedPodPlugin, BindPlugin, EnqueueExtensions, FilterPlugin, FrameworkHandle, MAX_NODE_SCORE,
    MIN_NODE_SCORE, NodeScore, PermitPlugin, Plugin, PostBindPlugin, PostFilterPlugin, PostFilterResult,
    PreBindPlugin, PreEnqueuePlugin, PreFilterPlugin, PreFilterResult, PreScorePlugin, QueueSortPlugin,
    ReservePlugin, ScorePlugin, StatusFuture, score_each,
};
pub use plugin_clock::calibrate_plugin_clock;
pub use pod_group::{
    CompositeCycleInput, CompositeCycleResult, CompositeGroupResult, CompositePodGroupInfo, GroupNodeKey,
    GroupPolicy, GroupRef, GroupTree, MemberCounts, MemberDecision, NoRoot, Placement,
    PlacementFeasiblePlugin, PlacementGeneratePlugin, PlacementProgress, PlacementScorePlugin,
    PodGroupAssignments, PodGroupCycleInput, PodGroupCycleResult, PodGroupInfo, PodGroupKey,
    PodGroupPostFilterInput, PodGroupPostFilterPlugin, PodGroupPostFilterResult, PodGroupSimulator,
    PodGroupStore, ProposedAssignment, SimulatedPlacement, run_composite_cycle, run_pod_group_cycle,
};
pub use pod_info::{HostPort, PodInfo, QueuedPodInfo, shrink_vec};
pub use profile::{
    BindInFlight, DurationRecorder, FilterChain, Framework, FrameworkError, FrameworkObserver,
    NodePluginScores, PluginBuildError, PluginRegistry, PluginTiming, PreBindInFlight, ScoreTable,
    TimingBatch, WeightedScore,
};
pub use rng::SeededRng;
pub use scheduler::{
    AsyncBinding, BindingInProgress, BindingTask, BoundPod, CacheWriteError, CycleOutcome, SchedulerCache,
    SchedulingFailure, abandon_binding_cycle, async_binding, finish_binding_cycle, nomination_before_binding,
    reasons, run_binding_cycle, run_scheduling_cycle, start_binding_cycle, wait_for_permit,
};
pub use snapshot::Snapshot;
pub use split::SPLIT_MIN_WORK;
pub use status::{Code, Status};
