//! `PodTopologySpread`: spreads pods that match a selector evenly across topology domains (zones,
//! nodes, racks), as upstream `podtopologyspread`.
//!
//! - **Hard constraints** (`whenUnsatisfiable: DoNotSchedule`) filter. PreFilter counts, per
//!   constraint and domain, the pods in the pod's namespace that the constraint selects (terminating
//!   pods excluded) on nodes that have every constraint's topology key and pass the constraint's
//!   inclusion policies (`nodeAffinityPolicy`, default Honor: the pod's node selector and required
//!   node affinity; `nodeTaintsPolicy`, default Ignore: the pod's tolerations of
//!   `NoSchedule`/`NoExecute` taints). It also keeps the two smallest domains per constraint, so
//!   Filter is O(constraints) per node: a node fails when `count(domain) + selfMatch − globalMin >
//!   maxSkew`, where `globalMin` is 0 while fewer than `minDomains` (default 1) domains exist. A node
//!   without a topology key fails as UnschedulableAndUnresolvable with `node(s) didn't match pod
//!   topology spread constraints (missing required label)`; a skew violation is Unschedulable with
//!   `node(s) didn't match pod topology spread constraints`. AddPod/RemovePod update the counts for
//!   nominated pods and preemption dry runs.
//! - **Soft constraints** (`ScheduleAnyway`) score. PreScore counts per domain over all nodes (for
//!   `kubernetes.io/hostname` the count is taken per node in Score); a node's raw score is
//!   `Σ count·ln(domains+2) + (maxSkew−1)`, and NormalizeScore maps the lowest raw score to 100 and
//!   reverses the scale; nodes missing a topology key score 0.
//! - `matchLabelKeys`: the pod's values for those keys are ANDed into the selector.
//! - **Cluster defaults** (`PodTopologySpreadArgs`) apply to pods without constraints of their own:
//!   `defaultingType: System` (the default) uses zone maxSkew 5 and hostname maxSkew 3, both
//!   ScheduleAnyway; `List` uses `defaultConstraints`. The selector comes from the pod's controller,
//!   approximated as described at `common::default_selector`: pods without a
//!   ReplicationController, ReplicaSet or StatefulSet controller get no defaults. With System
//!   defaulting nodes missing the zone label still get hostname spreading, as upstream.
//! - Queueing hints: assigned pods in the namespace being added or deleted with labels a constraint
//!   selects, or changing labels so that a selector's verdict flips, or the rejected pod gaining
//!   tolerations when a constraint honours taints; nodes added, deleted or relabelled (or
//!   re-tainted) when they carry every topology key.

mod common;
mod filtering;
mod scoring;
#[cfg(test)]
mod tests;

use k8s_openapi::api::core::v1::{Node, Pod, TopologySpreadConstraint};
use serde::{Deserialize, Serialize};
use unisched_framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, EnqueueExtensions, EventObject, EventResource, EventSide,
    Plugin, QueueingHint, QueueingHintError,
};

use crate::{
    helper::{
        PluginArgs, PluginArgsError, aggregate, bound_or_nominated, event_pod_objects, invalid, pod_key,
        qualified_name_errors, quote, unexpected_object,
    },
    label_selector::{LabelSelectorError, labels_of},
    names::POD_TOPOLOGY_SPREAD,
};
use common::{
    Constraint, DO_NOT_SCHEDULE, LABEL_HOSTNAME, LABEL_ZONE, SCHEDULE_ANYWAY, any_selects, default_selector,
    filter_constraints, node_has_all_keys,
};

/// Filter reason when a skew would exceed `maxSkew`.
pub const ERR_REASON_CONSTRAINTS_NOT_MATCH: &str = "node(s) didn't match pod topology spread constraints";
/// Filter reason when the node lacks a constraint's topology key.
pub const ERR_REASON_NODE_LABEL_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

/// `defaultingType: System`.
pub const SYSTEM_DEFAULTING: &str = "System";
/// `defaultingType: List`.
pub const LIST_DEFAULTING: &str = "List";

/// `PodTopologySpreadArgs`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodTopologySpreadArgs {
    /// `PodTopologySpreadArgs` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `kubescheduler.config.k8s.io/v1` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Constraints for pods that define none; only with `defaultingType: List`. They must not have
    /// a `labelSelector`: it is deduced per pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub default_constraints: Vec<TopologySpreadConstraint>,
    /// `System` (the default: the built-in zone/hostname constraints) or `List`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defaulting_type: Option<String>,
}

impl PluginArgs for PodTopologySpreadArgs {
    const KIND: &'static str = "PodTopologySpreadArgs";
    fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }
    fn api_version(&self) -> Option<&str> {
        self.api_version.as_deref()
    }
}

/// A pod's topology spread constraints, or the cluster defaults, that cannot be parsed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConstraintsError {
    /// One of the pod's own constraints.
    #[error("obtaining pod's {kind} topology spread constraints: {source}")]
    Pod {
        /// `hard` (DoNotSchedule) or `soft` (ScheduleAnyway).
        kind: &'static str,
        /// The bad selector.
        #[source]
        source: LabelSelectorError,
    },
    /// One of the default constraints.
    #[error("setting default {kind} topology spread constraints: {source}")]
    Defaults {
        /// `hard` (DoNotSchedule) or `soft` (ScheduleAnyway).
        kind: &'static str,
        /// The bad selector.
        #[source]
        source: LabelSelectorError,
    },
}

/// Upstream `ValidatePodTopologySpreadArgs`.
fn validate_args(args: &PodTopologySpreadArgs) -> Result<(), PluginArgsError> {
    let mut errs = Vec::new();
    let defaulting = args.defaulting_type.as_deref().unwrap_or(SYSTEM_DEFAULTING);
    if defaulting != SYSTEM_DEFAULTING && defaulting != LIST_DEFAULTING {
        errs.push(format!(
            "defaultingType: Unsupported value: {}: supported values: \"System\", \"List\"",
            quote(defaulting)
        ));
    } else if defaulting == SYSTEM_DEFAULTING && !args.default_constraints.is_empty() {
        errs.push(invalid(
            "defaultingType",
            quote(defaulting),
            "when .defaultConstraints are not empty",
        ));
    }
    for (i, c) in args.default_constraints.iter().enumerate() {
        let p = format!("defaultConstraints[{i}]");
        if c.max_skew <= 0 {
            errs.push(invalid(
                &format!("{p}.maxSkew"),
                c.max_skew,
                "not in valid range (0, inf)",
            ));
        }
        if c.topology_key.is_empty() {
            errs.push(format!("{p}.topologyKey: Required value: can not be empty"));
        } else {
            for msg in qualified_name_errors(&c.topology_key) {
                errs.push(invalid(&format!("{p}.topologyKey"), quote(&c.topology_key), msg));
            }
        }
        if c.when_unsatisfiable.is_empty() {
            errs.push(format!("{p}.whenUnsatisfiable: Required value: can not be empty"));
        } else if c.when_unsatisfiable != DO_NOT_SCHEDULE && c.when_unsatisfiable != SCHEDULE_ANYWAY {
            errs.push(format!(
                "{p}.whenUnsatisfiable: Unsupported value: {}: supported values: \"DoNotSchedule\", \"ScheduleAnyway\"",
                quote(&c.when_unsatisfiable)
            ));
        }
        if c.label_selector.is_some() {
            errs.push(format!(
                "{p}.labelSelector: Forbidden: constraint must not define a selector, as they deduced for each pod"
            ));
        }
        let repeated = args.default_constraints[..i]
            .iter()
            .any(|o| o.topology_key == c.topology_key && o.when_unsatisfiable == c.when_unsatisfiable);
        if repeated {
            errs.push(format!(
                "{p}: Duplicate value: {}",
                quote(&format!("{{{}, {}}}", c.topology_key, c.when_unsatisfiable))
            ));
        }
    }
    aggregate(errs)
}

fn system_default_constraints() -> Vec<TopologySpreadConstraint> {
    [(LABEL_HOSTNAME, 3), (LABEL_ZONE, 5)]
        .into_iter()
        .map(|(key, skew)| TopologySpreadConstraint {
            max_skew: skew,
            topology_key: key.to_string(),
            when_unsatisfiable: SCHEDULE_ANYWAY.to_string(),
            ..TopologySpreadConstraint::default()
        })
        .collect()
}

/// Even spreading of pods across topology domains.
#[derive(Clone, Debug)]
pub struct PodTopologySpread {
    default_constraints: Vec<TopologySpreadConstraint>,
    system_defaulted: bool,
    /// Honour the `Gt`/`Lt` toleration operators when `nodeTaintsPolicy: Honor` checks taints
    /// (alpha gate `TaintTolerationComparisonOperators`).
    pub enable_comparison_operators: bool,
}

impl Default for PodTopologySpread {
    /// The plugin with `defaultingType: System`.
    fn default() -> Self {
        PodTopologySpread {
            default_constraints: system_default_constraints(),
            system_defaulted: true,
            enable_comparison_operators: false,
        }
    }
}

impl PodTopologySpread {
    /// Builds the plugin, validating the args as upstream.
    pub fn new(args: &PodTopologySpreadArgs) -> Result<Self, PluginArgsError> {
        validate_args(args)?;
        let system = args.defaulting_type.as_deref().unwrap_or(SYSTEM_DEFAULTING) == SYSTEM_DEFAULTING;
        Ok(PodTopologySpread {
            default_constraints: if system {
                system_default_constraints()
            } else {
                args.default_constraints.clone()
            },
            system_defaulted: system,
            enable_comparison_operators: false,
        })
    }

    /// The pod's constraints for `action`, or the cluster defaults when it defines none. The error
    /// names the kind of constraint that failed to parse.
    fn constraints(&self, pod: &Pod, action: &str) -> Result<Vec<Constraint>, ConstraintsError> {
        let kind = if action == DO_NOT_SCHEDULE { "hard" } else { "soft" };
        let own = pod
            .spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.as_deref())
            .unwrap_or(&[]);
        let labels = labels_of(&pod.metadata);
        if !own.is_empty() {
            return filter_constraints(own, labels, action)
                .map_err(|source| ConstraintsError::Pod { kind, source });
        }
        let mut defaults = filter_constraints(&self.default_constraints, labels, action)
            .map_err(|source| ConstraintsError::Defaults { kind, source })?;
        if defaults.is_empty() {
            return Ok(defaults);
        }
        let selector = default_selector(pod);
        if selector.is_everything() {
            return Ok(Vec::new());
        }
        for c in &mut defaults {
            c.selector = selector.clone();
        }
        Ok(defaults)
    }
}

impl Plugin for PodTopologySpread {
    fn name(&self) -> &str {
        POD_TOPOLOGY_SPREAD
    }
    unisched_framework::serves!(
        as_pre_filter,
        as_filter,
        as_pre_score,
        as_score,
        as_enqueue_extensions
    );
}

/// The nodes of a node event; unlike `helper::event_nodes` a delete (no new object) is allowed.
fn event_nodes_any<'a>(
    old: Option<&'a EventObject>,
    new: Option<&'a EventObject>,
) -> Result<(Option<&'a Node>, Option<&'a Node>), QueueingHintError> {
    let conv = |o: Option<&'a EventObject>, side: EventSide| match o {
        None => Ok(None),
        Some(EventObject::Node(n)) => Ok(Some(&**n)),
        Some(other) => Err(unexpected_object("Node", side, other)),
    };
    let (old, new) = (conv(old, EventSide::Old)?, conv(new, EventSide::New)?);
    if old.is_none() && new.is_none() {
        return Err(QueueingHintError::EmptyEvent { kind: "node" });
    }
    Ok((old, new))
}

fn namespace_of(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

impl PodTopologySpread {
    /// Upstream `isSchedulableAfterPodChange`.
    fn hint_pod_change(
        &self,
        pod: &Pod,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> Result<QueueingHint, QueueingHintError> {
        let (old, new) = event_pod_objects(old, new)?;
        let target = pod_key(pod);
        // Only the rejected pod itself, or bound or nominated pods in its namespace, change its
        // counts.
        let involved =
            |p: &Pod| pod_key(p) == target || (bound_or_nominated(p) && namespace_of(p) == namespace_of(pod));
        if new.is_some_and(|p| !involved(p)) || old.is_some_and(|p| !involved(p)) {
            return Ok(QueueingHint::Skip);
        }
        let constraints = self
            .constraints(pod, DO_NOT_SCHEDULE)
            .map_err(QueueingHintError::plugin)?;
        let hint = |b: bool| {
            if b {
                QueueingHint::Queue
            } else {
                QueueingHint::Skip
            }
        };
        Ok(match (old, new) {
            (Some(o), Some(m)) => {
                let tolerations = |p: &Pod| {
                    p.spec
                        .as_ref()
                        .and_then(|s| s.tolerations.clone())
                        .unwrap_or_default()
                };
                if pod_key(m) == target
                    && tolerations(m) != tolerations(o)
                    && constraints.iter().any(|c| c.honor_node_taints)
                {
                    return Ok(QueueingHint::Queue);
                }
                let (ol, ml) = (labels_of(&o.metadata), labels_of(&m.metadata));
                hint(
                    ol != ml
                        && constraints
                            .iter()
                            .any(|c| c.selector.matches(ol) != c.selector.matches(ml)),
                )
            }
            (None, Some(m)) => hint(any_selects(&constraints, labels_of(&m.metadata))),
            (Some(o), None) => hint(any_selects(&constraints, labels_of(&o.metadata))),
            (None, None) => QueueingHint::Skip,
        })
    }

    /// Upstream `isSchedulableAfterNodeChange`.
    fn hint_node_change(
        &self,
        pod: &Pod,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> Result<QueueingHint, QueueingHintError> {
        let (old, new) = event_nodes_any(old, new)?;
        let constraints = self
            .constraints(pod, DO_NOT_SCHEDULE)
            .map_err(QueueingHintError::plugin)?;
        let has_keys = |n: &Node| node_has_all_keys(labels_of(&n.metadata), &constraints);
        let hint = |b: bool| {
            if b {
                QueueingHint::Queue
            } else {
                QueueingHint::Skip
            }
        };
        Ok(match (old, new) {
            (Some(o), Some(m)) => {
                let (was, is) = (has_keys(o), has_keys(m));
                if was != is {
                    QueueingHint::Queue
                } else {
                    let (ol, ml) = (labels_of(&o.metadata), labels_of(&m.metadata));
                    let key_changed = constraints
                        .iter()
                        .any(|c| ol.get(&c.topology_key) != ml.get(&c.topology_key));
                    let taints =
                        |n: &Node| n.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
                    hint(is && (key_changed || taints(o) != taints(m)))
                }
            }
            (None, Some(m)) => hint(has_keys(m)),
            (Some(o), None) => hint(has_keys(o)),
            (None, None) => QueueingHint::Skip,
        })
    }
}

impl EnqueueExtensions for PodTopologySpread {
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        let for_pods = self.clone();
        let for_nodes = self.clone();
        vec![
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Pod,
                    ActionType::ADD
                        .or(ActionType::UPDATE_POD_LABEL)
                        .or(ActionType::UPDATE_POD_TOLERATION)
                        .or(ActionType::DELETE),
                    "PodAdd|UpdatePodLabel|UpdatePodToleration|Delete",
                ),
                move |pod, old, new| for_pods.hint_pod_change(pod, old, new),
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Node,
                    ActionType::ADD
                        .or(ActionType::DELETE)
                        .or(ActionType::UPDATE_NODE_LABEL)
                        .or(ActionType::UPDATE_NODE_TAINT),
                    "NodeAdd|Delete|UpdateNodeLabel|UpdateNodeTaint",
                ),
                move |pod, old, new| for_nodes.hint_node_change(pod, old, new),
            ),
        ]
    }
}
