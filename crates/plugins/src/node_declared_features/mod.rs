//! `NodeDeclaredFeatures`: a pod that needs a node feature (a restart rule that restarts the whole
//! pod, host networking inside a user namespace, bind mount options) only goes to nodes whose
//! kubelet declares it in `status.declaredFeatures` (upstream `nodedeclaredfeatures`, GA in 1.37).
//!
//! Without it the scheduler would place such a pod on a kubelet too old or too restricted to run
//! it, and the kubelet would reject it at admission. Which features a pod needs is read from its
//! spec alone ([`inference`]), as upstream's component-helpers library does, so kubelets, the API
//! server and both schedulers agree.
//!
//! A node without `status.declaredFeatures` (a kubelet older than 1.35, or a node object created
//! without one) declares nothing: it is rejected for every pod that needs a feature and fits every
//! other pod, as upstream. The rejection is unresolvable: evicting pods does not add features.

mod inference;

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use unisched_framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, CycleState, EnqueueExtensions, EventObject,
    EventResource, FilterPlugin, NodeInfo, Plugin, PodInfo, PreFilterPlugin, PreFilterResult, QueueingHint,
    QueueingHintError, Status,
};

use crate::{
    helper::{event_nodes, event_pod_objects, pod_key},
    names::NODE_DECLARED_FEATURES,
};
use inference::required_features;

/// Rejection reason for a node that lacks a feature the pod needs.
pub const ERR_REASON_UNSATISFIED_REQUIREMENTS: &str = "node(s) didn't match Pod's required features";

const PRE_FILTER_KEY: &str = "PreFilterNodeDeclaredFeatures";

/// Keeps pods off nodes that do not declare the features they need.
#[derive(Clone, Copy, Debug, Default)]
pub struct NodeDeclaredFeatures;

impl Plugin for NodeDeclaredFeatures {
    fn name(&self) -> &str {
        NODE_DECLARED_FEATURES
    }
    unisched_framework::serves!(as_pre_filter, as_filter, as_enqueue_extensions);
}

/// The features the pod needs (sorted, non-empty), inferred once per cycle.
#[derive(Clone, Debug, Default)]
struct PreFilterState(Vec<&'static str>);

fn pod_requirements(pod: &Pod) -> Vec<&'static str> {
    pod.spec.as_ref().map(required_features).unwrap_or_default()
}

/// The features the node declares (none when the list is absent).
fn declared(node: &Node) -> &[String] {
    node.status
        .as_ref()
        .and_then(|s| s.declared_features.as_deref())
        .unwrap_or(&[])
}

/// True when `node` declares every feature in `required`.
fn satisfies(node: &Node, required: &[&str]) -> bool {
    let declared = declared(node);
    required.iter().all(|r| declared.iter().any(|d| d == r))
}

impl PreFilterPlugin for NodeDeclaredFeatures {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        let required = pod_requirements(&pod.pod);
        if required.is_empty() {
            return (None, Status::skip());
        }
        state.write(PRE_FILTER_KEY, PreFilterState(required));
        (None, Status::success())
    }
}

impl FilterPlugin for NodeDeclaredFeatures {
    /// Reads the PreFilter state; without one (a caller that skipped PreFilter) the pod's needs
    /// are inferred again, where upstream reports an internal error.
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(n) = node.node() else {
            return Status::error("node not found");
        };
        let inferred;
        let required = match state.read::<PreFilterState>(PRE_FILTER_KEY) {
            Ok(s) => s.0.as_slice(),
            Err(_) => {
                inferred = pod_requirements(&pod.pod);
                inferred.as_slice()
            }
        };
        if satisfies(n, required) {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON_UNSATISFIED_REQUIREMENTS)
        }
    }
}

/// A node was added, or changed what it declares: it may now have what the pod needs.
fn node_declared_features_changed(
    _pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, QueueingHintError> {
    let (old, new) = event_nodes(old, new)?;
    Ok(match old {
        Some(old) if declared(old) == declared(new) => QueueingHint::Skip,
        _ => QueueingHint::Queue,
    })
}

/// The rejected pod itself changed what it needs. (The fields the registered features read are
/// immutable today, so this is future-proofing that upstream has too.)
fn pod_requirements_changed(
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, QueueingHintError> {
    let (Some(old), Some(new)) = event_pod_objects(old, new)? else {
        return Ok(QueueingHint::Skip);
    };
    if pod_key(new) != pod_key(pod) {
        return Ok(QueueingHint::Skip);
    }
    Ok(if pod_requirements(old) == pod_requirements(new) {
        QueueingHint::Skip
    } else {
        QueueingHint::Queue
    })
}

impl EnqueueExtensions for NodeDeclaredFeatures {
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Node,
                    ActionType::ADD.or(ActionType::UPDATE_NODE_DECLARED_FEATURE),
                    "NodeAdd|UpdateNodeDeclaredFeature",
                ),
                node_declared_features_changed,
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::UnscheduledPod,
                    ActionType::UPDATE,
                    "UnscheduledPodUpdate",
                ),
                pod_requirements_changed,
            ),
        ]
    }
}

#[cfg(test)]
mod tests;
