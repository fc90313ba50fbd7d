//! `NodeResourcesFit`: the node must have room for the pod's requests (upstream `noderesources/fit.go`,
//! 1.34+), and nodes are scored by how their utilisation would look with the pod.
//!
//! Filter, per node, in this order, keeping every reason:
//! 1. `Too many pods` when the node is at its pod limit (checked even for pods without requests);
//! 2. nothing else for a pod without requests;
//! 3. `Insufficient cpu|memory|ephemeral-storage` when the request exceeds what is left;
//! 4. `Insufficient <name>` for other resources (sorted by name), skipping extended resources the
//!    args ignore and, KEP-5004, scalars the node has none of that a DeviceClass serves (the
//!    DynamicResources plugin allocates those).
//!
//! The code is UnschedulableAndUnresolvable when some request exceeds the node's whole allocatable
//! (preemption cannot help), Unschedulable otherwise.
//!
//! The pod's requests are `PodInfo::requests`: containers, init containers and sidecars, pod-level
//! resources, overhead, and the KEP-5517 node-allocatable claim statuses already in the pod status.
//! They are computed once when the pod enters the scheduler, so PreFilter has nothing to compute; it
//! rejects pods whose quantities do not parse.

use std::{borrow::Cow, collections::BTreeSet, sync::Arc};

use k8s_openapi::api::{
    core::v1::{Node, Pod},
    resource::v1::DeviceClass,
};
use unisched_framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, Code, CycleState, EnqueueExtensions, EventObject,
    EventResource, FilterPlugin, NodeInfo, Plugin, PodInfo, PreFilterPlugin, PreFilterResult, PreScorePlugin,
    QueueingHint, QueueingHintError, ScorePlugin, Status, score_each,
};
use unisched_resource::{Resource, is_extended_resource_name, pod_resources};

use super::{
    args::{NodeResourcesFitArgs, ScoringStrategyType},
    scoring::{ResourceAllocationScorer, ScorePreState},
};
use crate::resource_scoring::Strategy;
use crate::{
    helper::{PluginArgsError, bound_or_nominated, event_nodes, event_pods, object_kind, pod_key},
    names::NODE_RESOURCES_FIT,
};

const PRE_SCORE_KEY: &str = "PreScoreNodeResourcesFit";

/// Prefix of the implicit extended-resource name every DeviceClass has (KEP-5004).
pub const DEVICE_CLASS_RESOURCE_PREFIX: &str = "deviceclass.resource.kubernetes.io/";

/// Maps extended resource names to the DeviceClass that serves them through DRA (KEP-5004). The
/// DynamicResources side implements it over its DeviceClass cache.
pub trait ExtendedResourceResolver: Send + Sync {
    /// The DeviceClass serving `resource` (an explicit `spec.extendedResourceName` or the implicit
    /// `deviceclass.resource.kubernetes.io/<class>`), if any.
    fn device_class_for(&self, resource: &str) -> Option<String>;
}

/// One resource the node lacks for the pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InsufficientResource {
    /// The resource (`pods`, `cpu`, `example.com/gpu`, …).
    pub resource_name: String,
    /// The upstream reason (`Insufficient cpu`).
    pub reason: String,
    /// The pod's request.
    pub requested: i64,
    /// Already requested on the node.
    pub used: i64,
    /// The node's allocatable.
    pub capacity: i64,
    /// The request exceeds the node's whole allocatable: preemption cannot help.
    pub unresolvable: bool,
}

/// Whether a scalar the node has none of is left to DynamicResources (KEP-5004).
fn delegated_to_dra(
    name: &str,
    allocatable: &Resource,
    resolver: Option<&dyn ExtendedResourceResolver>,
) -> bool {
    match resolver {
        Some(r) => {
            allocatable.scalar_resources.get(name).copied().unwrap_or(0) <= 0
                && r.device_class_for(name).is_some()
        }
        None => false,
    }
}

fn ignored(name: &str, ignored: &BTreeSet<String>, groups: &BTreeSet<String>) -> bool {
    if !is_extended_resource_name(name) {
        return false;
    }
    if ignored.contains(name) {
        return true;
    }
    !groups.is_empty()
        && name
            .split('/')
            .next()
            .is_some_and(|prefix| groups.contains(prefix))
}

/// Upstream `fitsRequest`: what the node lacks for a pod requesting `request`.
pub fn fits_request(
    request: &Resource,
    node: &NodeInfo,
    ignored_resources: &BTreeSet<String>,
    ignored_groups: &BTreeSet<String>,
    resolver: Option<&dyn ExtendedResourceResolver>,
) -> Vec<InsufficientResource> {
    let mut out = Vec::new();
    let alloc = &node.allocatable;
    let used = &node.requested;
    let pods = i64::try_from(node.pods.len()).unwrap_or(i64::MAX);
    if pods.saturating_add(1) > alloc.allowed_pod_number {
        out.push(InsufficientResource {
            resource_name: "pods".to_string(),
            reason: "Too many pods".to_string(),
            requested: 1,
            used: pods,
            capacity: alloc.allowed_pod_number,
            unresolvable: false,
        });
    }
    if request.is_zero() {
        return out;
    }
    let mut check = |name: &str, reason: &str, req: i64, have: i64, in_use: i64| {
        if req > 0 && req > have.saturating_sub(in_use) {
            out.push(InsufficientResource {
                resource_name: name.to_string(),
                reason: reason.to_string(),
                requested: req,
                used: in_use,
                capacity: have,
                unresolvable: req > have,
            });
        }
    };
    check(
        "cpu",
        "Insufficient cpu",
        request.milli_cpu,
        alloc.milli_cpu,
        used.milli_cpu,
    );
    check(
        "memory",
        "Insufficient memory",
        request.memory,
        alloc.memory,
        used.memory,
    );
    check(
        "ephemeral-storage",
        "Insufficient ephemeral-storage",
        request.ephemeral_storage,
        alloc.ephemeral_storage,
        used.ephemeral_storage,
    );
    for (name, &req) in &request.scalar_resources {
        if req == 0
            || ignored(name, ignored_resources, ignored_groups)
            || delegated_to_dra(name, alloc, resolver)
        {
            continue;
        }
        let have = alloc.scalar_resources.get(name).copied().unwrap_or(0);
        let in_use = used.scalar_resources.get(name).copied().unwrap_or(0);
        check(name, &format!("Insufficient {name}"), req, have, in_use);
    }
    out
}

/// Resource fit and resource scoring.
#[derive(Clone)]
pub struct NodeResourcesFit {
    ignored_resources: BTreeSet<String>,
    ignored_groups: BTreeSet<String>,
    resolver: Option<Arc<dyn ExtendedResourceResolver>>,
    scorer: ResourceAllocationScorer,
}

impl std::fmt::Debug for NodeResourcesFit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeResourcesFit")
            .field("ignored_resources", &self.ignored_resources)
            .field("ignored_groups", &self.ignored_groups)
            .field("resolver", &self.resolver.is_some())
            .field("scorer", &self.scorer)
            .finish()
    }
}

impl NodeResourcesFit {
    /// Builds the plugin from args (defaults applied, then validated as upstream).
    pub fn new(
        args: &NodeResourcesFitArgs,
        resolver: Option<Arc<dyn ExtendedResourceResolver>>,
    ) -> Result<Self, PluginArgsError> {
        let mut args = args.clone();
        args.complete();
        args.validate()?;
        let strategy_args = args.scoring_strategy.clone().unwrap_or_default();
        let strategy = match ScoringStrategyType::parse(&strategy_args.type_) {
            Some(ScoringStrategyType::LeastAllocated) => Strategy::LeastAllocated,
            Some(ScoringStrategyType::MostAllocated) => Strategy::MostAllocated,
            Some(ScoringStrategyType::RequestedToCapacityRatio) => {
                let shape: Vec<(i32, i32)> = strategy_args
                    .requested_to_capacity_ratio
                    .iter()
                    .flat_map(|r| r.shape.iter().map(|p| (p.utilization, p.score)))
                    .collect();
                Strategy::ratio(&shape)
            }
            None => {
                return Err(PluginArgsError::UnsupportedStrategy(strategy_args.type_));
            }
        };
        Ok(NodeResourcesFit {
            ignored_resources: args.ignored_resources.iter().cloned().collect(),
            ignored_groups: args.ignored_resource_groups.iter().cloned().collect(),
            resolver,
            scorer: ResourceAllocationScorer::new(
                strategy_args.resources.iter().map(|r| (r.name.clone(), r.weight)),
                strategy,
                false,
                args.include_dra_footprint,
            ),
        })
    }

    fn resolver(&self) -> Option<&dyn ExtendedResourceResolver> {
        self.resolver.as_deref()
    }
}

impl Plugin for NodeResourcesFit {
    fn name(&self) -> &str {
        NODE_RESOURCES_FIT
    }
    unisched_framework::serves!(
        as_pre_filter,
        as_filter,
        as_pre_score,
        as_score,
        as_enqueue_extensions
    );
}

impl PreFilterPlugin for NodeResourcesFit {
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        // Same wording as the framework's own check before the cycle.
        if let Some(bad) = pod.invalid_quantities().first() {
            let msg = format!(
                "pod has an invalid quantity {:?} for resource {:?}",
                bad.value, bad.resource
            );
            return (None, Status::unresolvable(msg));
        }
        (None, Status::success())
    }
}

impl FilterPlugin for NodeResourcesFit {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let insufficient = fits_request(
            pod.requests(),
            node,
            &self.ignored_resources,
            &self.ignored_groups,
            self.resolver(),
        );
        if insufficient.is_empty() {
            return Status::success();
        }
        let code = if insufficient.iter().any(|r| r.unresolvable) {
            Code::UnschedulableAndUnresolvable
        } else {
            Code::Unschedulable
        };
        Status::new(code, insufficient.into_iter().map(|r| r.reason))
    }
}

impl PreScorePlugin for NodeResourcesFit {
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, _nodes: &[Arc<NodeInfo>]) -> Status {
        let pre = self.scorer.pre_state_with_dra(state, pod, self.resolver());
        state.write(PRE_SCORE_KEY, pre);
        Status::success()
    }
}

impl ScorePlugin for NodeResourcesFit {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        self.scorer.score(node, &self.stored_pre_state(state, pod))
    }

    fn score_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        out: &mut [i64],
    ) -> Result<(), (usize, Status)> {
        let pre = self.stored_pre_state(state, pod);
        score_each(nodes, out, |node| self.scorer.score(node, &pre))
    }
}

impl NodeResourcesFit {
    fn stored_pre_state<'a>(&self, state: &'a CycleState, pod: &PodInfo) -> Cow<'a, ScorePreState> {
        ScorePreState::stored_or(state, PRE_SCORE_KEY, || {
            self.scorer.pre_state_with_dra(state, pod, self.resolver())
        })
    }
}

/// A NodeInfo with only the node's allocatable, for hints.
fn empty_node_info(node: &Node) -> NodeInfo {
    let mut ni = NodeInfo::default();
    ni.allocatable = node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .map(Resource::from_list_lossy)
        .unwrap_or_default();
    ni
}

impl NodeResourcesFit {
    /// A pod was deleted or scaled down.
    fn pod_event(
        &self,
        pod: &Pod,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> Result<QueueingHint, QueueingHintError> {
        let (original, modified) = event_pods(old, new)?;
        let Some(modified) = modified else {
            // Deleted: only a pod that held (or was about to hold) resources frees any.
            return Ok(match original {
                Some(o) if bound_or_nominated(&o.pod) => QueueingHint::Queue,
                _ => QueueingHint::Skip,
            });
        };
        if pod_key(&modified.pod) == pod_key(pod) {
            return Ok(QueueingHint::Queue);
        }
        if modified
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_none_or(str::is_empty)
        {
            return Ok(QueueingHint::Skip);
        }
        let Some(original) = original else {
            return Ok(QueueingHint::Skip);
        };
        // The derived requests: a bound pod's PodInfo has no containers to add up.
        let (before, after) = (original.requests(), modified.requests());
        let wanted = pod_resources(pod).requests;
        let decreased = wanted
            .iter_nonzero()
            .any(|(name, _)| before.get(name) > after.get(name));
        Ok(if decreased {
            QueueingHint::Queue
        } else {
            QueueingHint::Skip
        })
    }

    /// A node was added or its allocatable changed.
    fn node_change(&self, pod: &Pod, old: Option<&Node>, new: &Node) -> QueueingHint {
        let request = pod_resources(pod).requests;
        let none = BTreeSet::new();
        let new_info = empty_node_info(new);
        if !fits_request(&request, &new_info, &none, &none, self.resolver()).is_empty() {
            return QueueingHint::Skip;
        }
        let Some(old) = old else {
            return QueueingHint::Queue;
        };
        let (before, after) = (empty_node_info(old).allocatable, new_info.allocatable);
        if after.allowed_pod_number > before.allowed_pod_number {
            return QueueingHint::Queue;
        }
        if request.is_zero() {
            return QueueingHint::Skip;
        }
        let increased = request.iter_nonzero().any(|(name, _)| {
            after.get(name) > before.get(name)
                || (!matches!(name, "cpu" | "memory" | "ephemeral-storage")
                    && delegated_to_dra(name, &after, self.resolver()))
        });
        if increased {
            QueueingHint::Queue
        } else {
            QueueingHint::Skip
        }
    }

    /// A DeviceClass appeared or changed its extended resource name (KEP-5004).
    fn device_class_event(
        pod: &Pod,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> Result<QueueingHint, QueueingHintError> {
        let class = |o: Option<&EventObject>| -> Result<Option<Arc<DeviceClass>>, QueueingHintError> {
            match o {
                None => Ok(None),
                Some(EventObject::DeviceClass(c)) => Ok(Some(c.clone())),
                Some(other) => Err(QueueingHintError::UnexpectedKind {
                    expected: "DeviceClass",
                    got: object_kind(other),
                }),
            }
        };
        let (old, new) = (class(old)?, class(new)?);
        let Some(new) = new else {
            return Ok(QueueingHint::Skip);
        };
        let extended = |c: &DeviceClass| c.spec.as_ref().and_then(|s| s.extended_resource_name.clone());
        let requests = pod_resources(pod).requests;
        let requested = |name: &str| requests.scalar_resources.contains_key(name);
        match &old {
            Some(old) if extended(old) == extended(&new) => return Ok(QueueingHint::Skip),
            Some(_) => {}
            None => {
                let implicit = format!(
                    "{DEVICE_CLASS_RESOURCE_PREFIX}{}",
                    new.metadata.name.as_deref().unwrap_or_default()
                );
                if requested(&implicit) {
                    return Ok(QueueingHint::Queue);
                }
            }
        }
        Ok(if extended(&new).is_some_and(|n| requested(&n)) {
            QueueingHint::Queue
        } else {
            QueueingHint::Skip
        })
    }
}

impl EnqueueExtensions for NodeResourcesFit {
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        let me = self.clone();
        let me2 = self.clone();
        let mut events = vec![
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Pod,
                    ActionType::DELETE.or(ActionType::UPDATE_POD_SCALE_DOWN),
                    "PodDelete|UpdatePodScaleDown",
                ),
                move |pod, old, new| me.pod_event(pod, old, new),
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Node,
                    ActionType::ADD.or(ActionType::UPDATE_NODE_ALLOCATABLE),
                    "NodeAdd|UpdateNodeAllocatable",
                ),
                move |pod, old, new| {
                    let (old, new) = event_nodes(old, new)?;
                    Ok(me2.node_change(pod, old, new))
                },
            ),
        ];
        if self.resolver.is_some() {
            events.push(ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::DeviceClass,
                    ActionType::ADD.or(ActionType::UPDATE_OTHER),
                    "resource.k8s.io/DeviceClassAdd|Update",
                ),
                Self::device_class_event,
            ));
        }
        events
    }
}

#[cfg(test)]
#[path = "fit_tests.rs"]
mod tests;
