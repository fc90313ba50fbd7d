//! What Filter and Score share: parsed constraints, the cluster defaults, node inclusion policies
//! and counting matching pods.

use k8s_openapi::api::core::v1::{Node, Pod, TopologySpreadConstraint};
use unisched_framework::PodInfo;

use crate::{
    helper::{taints, tolerations},
    label_selector::{LabelSelector, LabelSelectorError, Labels, Requirement, labels_of},
    selector::RequiredNodeAffinity,
    toleration::{do_not_schedule, find_untolerated_taint},
};

/// `whenUnsatisfiable: DoNotSchedule`: a hard constraint (Filter).
pub(crate) const DO_NOT_SCHEDULE: &str = "DoNotSchedule";
/// `whenUnsatisfiable: ScheduleAnyway`: a soft constraint (Score).
pub(crate) const SCHEDULE_ANYWAY: &str = "ScheduleAnyway";
/// The node inclusion policy that takes a node property into account.
const HONOR: &str = "Honor";
/// The well-known hostname label; constraints on it count per node.
pub(crate) const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
/// The well-known zone label.
pub(crate) const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

/// Labels a controller puts on each of its pods individually; they are not part of the
/// controller's selector, so the approximated default selector leaves them out.
const PER_POD_LABELS: &[&str] = &[
    "statefulset.kubernetes.io/pod-name",
    "apps.kubernetes.io/pod-index",
    "controller-revision-hash",
];

/// One spread constraint with its selector parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Constraint {
    pub(crate) max_skew: i32,
    pub(crate) topology_key: String,
    pub(crate) selector: LabelSelector,
    pub(crate) min_domains: i32,
    /// `nodeAffinityPolicy: Honor` (the default): only nodes matching the pod's node affinity and
    /// selector count.
    pub(crate) honor_node_affinity: bool,
    /// `nodeTaintsPolicy: Honor` (not the default): only nodes whose taints the pod tolerates count.
    pub(crate) honor_node_taints: bool,
}

impl Constraint {
    /// True when `node` takes part in spreading for this constraint under its inclusion policies.
    pub(crate) fn includes_node(
        &self,
        pod: &Pod,
        node: &Node,
        required: &RequiredNodeAffinity,
        comparison_operators: bool,
    ) -> bool {
        if self.honor_node_affinity && !required.matches(node) {
            return false;
        }
        if self.honor_node_taints
            && find_untolerated_taint(
                taints(node),
                tolerations(pod),
                do_not_schedule,
                comparison_operators,
            )
            .is_some()
        {
            return false;
        }
        true
    }
}

/// Parses the constraints of `list` whose `whenUnsatisfiable` is `action`, merging
/// `matchLabelKeys` (the pod's values of those keys) into the selectors.
pub(crate) fn filter_constraints(
    list: &[TopologySpreadConstraint],
    pod_labels: &Labels,
    action: &str,
) -> Result<Vec<Constraint>, LabelSelectorError> {
    let mut out = Vec::new();
    for c in list.iter().filter(|c| c.when_unsatisfiable == action) {
        let mut selector = LabelSelector::parse(c.label_selector.as_ref())?;
        let from_keys: Vec<Requirement> = c
            .match_label_keys
            .iter()
            .flatten()
            .filter_map(|k| pod_labels.get(k).map(|v| Requirement::equals(k, v)))
            .collect();
        if !from_keys.is_empty() {
            // Upstream puts the pod's values first and keeps the selector's requirements; a
            // selector of nothing stays one.
            selector = match selector {
                LabelSelector::Nothing => LabelSelector::Nothing,
                LabelSelector::All(reqs) => LabelSelector::All(from_keys.into_iter().chain(reqs).collect()),
            };
        }
        out.push(Constraint {
            max_skew: c.max_skew,
            topology_key: c.topology_key.clone(),
            selector,
            min_domains: c.min_domains.unwrap_or(1),
            honor_node_affinity: c.node_affinity_policy.as_deref().unwrap_or(HONOR) == HONOR,
            honor_node_taints: c.node_taints_policy.as_deref() == Some(HONOR),
        });
    }
    Ok(out)
}

/// The selector the cluster default constraints use for `pod`.
///
/// Upstream combines the selectors of the Services selecting the pod and of its controller when
/// that is a ReplicationController, ReplicaSet or StatefulSet. unisched watches neither Services nor
/// controllers, so it approximates: for a pod whose controller (`ownerReferences[controller=true]`)
/// is a `v1` ReplicationController or an `apps/v1` ReplicaSet or StatefulSet, the selector is the
/// pod's own labels minus the labels controllers set per pod (`statefulset.kubernetes.io/pod-name`,
/// `apps.kubernetes.io/pod-index`, `controller-revision-hash`). Pods of one controller share their
/// template's labels, so this selects the controller's pods (a Deployment's ReplicaSet selector
/// includes `pod-template-hash`, as upstream's does). Pods without such a controller get no default
/// constraints (upstream would still use a matching Service's selector).
pub(crate) fn default_selector(pod: &Pod) -> LabelSelector {
    let controller = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    let Some(owner) = controller else {
        return LabelSelector::everything();
    };
    let supported = matches!(
        (owner.api_version.as_str(), owner.kind.as_str()),
        ("v1", "ReplicationController") | ("apps/v1", "ReplicaSet") | ("apps/v1", "StatefulSet")
    );
    if !supported {
        return LabelSelector::everything();
    }
    LabelSelector::from_set(
        labels_of(&pod.metadata)
            .iter()
            .filter(|(k, _)| !PER_POD_LABELS.contains(&k.as_str())),
    )
}

/// True when the node has every constraint's topology key.
pub(crate) fn node_has_all_keys(node_labels: &Labels, constraints: &[Constraint]) -> bool {
    constraints
        .iter()
        .all(|c| node_labels.contains_key(&c.topology_key))
}

/// Pods in `namespace` that `selector` selects, terminating pods excluded. A selector of everything
/// counts nothing (upstream: an empty selector is not a spreading group).
pub(crate) fn count_matching(
    pods: &[std::sync::Arc<PodInfo>],
    selector: &LabelSelector,
    namespace: &str,
) -> i64 {
    if selector.is_everything() {
        return 0;
    }
    let n = pods
        .iter()
        .filter(|p| !p.is_terminating() && p.namespace == namespace)
        .filter(|p| selector.matches(labels_of(&p.pod.metadata)))
        .count();
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// True when some constraint selects `labels`.
pub(crate) fn any_selects(constraints: &[Constraint], labels: &Labels) -> bool {
    constraints.iter().any(|c| c.selector.matches(labels))
}
