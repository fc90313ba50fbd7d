//! `InterPodAffinity`: required and preferred pod affinity and anti-affinity, as upstream
//! `interpodaffinity`.
//!
//! - **Filter**, from counts PreFilter takes once per attempt (O(terms) per node):
//!   - the pod's required affinity: some domain of the node (per term's topology key) must hold a
//!     pod meeting *all* terms, else UnschedulableAndUnresolvable `node(s) didn't match pod affinity
//!     rules`. The first pod of a group may schedule onto itself: when no such pod exists anywhere
//!     and the pod meets its own terms, any node with every topology key passes;
//!   - the pod's required anti-affinity: no domain of the node may hold a pod some term selects,
//!     else Unschedulable `node(s) didn't match pod anti-affinity rules`;
//!   - existing pods' required anti-affinity (from `NodeInfo::pods_with_required_anti_affinity`):
//!     no pod in a domain of the node may have a term selecting the pod, else Unschedulable
//!     `node(s) didn't satisfy existing pods anti-affinity rules`.
//!
//!   AddPod/RemovePod update the counts for nominated pods and preemption dry runs.
//! - **Score**: per domain, the weights of the pod's preferred terms selecting existing pods (anti:
//!   negative), of existing pods' preferred terms selecting the pod, and `hardPodAffinityWeight`
//!   (default 1) for existing pods' required affinity selecting the pod; `ignorePreferredTermsOfExistingPods`
//!   skips scoring for pods without preferences. NormalizeScore maps the raw range onto 0..100.
//! - **Namespaces**: a term applies to the namespaces it lists plus those its `namespaceSelector`
//!   selects, or else to its pod's namespace. Namespace labels come from the [`NamespaceLister`] in
//!   the plugin context; without one, only listed namespaces and the pod's own count (an empty
//!   selector `{}` still means every namespace).
//! - A pod whose own selectors do not parse is rejected in PreFilter with
//!   `parsing pod: requiredAffinityTerms: …` (UnschedulableAndUnresolvable), as upstream.
//! - Queueing hints, as upstream 1.37.2: bound (or nominated) pods being added that meet all
//!   required affinity terms; such pods changing labels so that they start meeting the affinity
//!   terms or stop matching an anti-affinity term; such pods being deleted that an anti-affinity
//!   term selects or whose own required anti-affinity selects the pod; the waiting pod's own label
//!   change (upstream's `TargetPod` event: an existing pod's anti-affinity may have selected the old
//!   labels); nodes added or relabelled so that a term's topology domain appears or moves, and
//!   (anti-affinity) any new node or a node losing the anti-affinity key. Like upstream, a relabel
//!   that only takes a node out of some other domain does not requeue. Beyond upstream (where its
//!   tables are silent, and only ever requeueing more): a new node for a pod without terms (existing
//!   pods' anti-affinity rejected it), and the deletion of the last member of a group the pod can
//!   then start on its own (upstream waits for the unschedulable timeout in both).

mod filtering;
mod scoring;
mod terms;
#[cfg(test)]
mod tests;

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};
use unisched_framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, EnqueueExtensions, EventObject, EventResource, Plugin,
    QueueingHint, QueueingHintError,
};

use crate::{
    helper::{
        PluginArgs, PluginArgsError, aggregate, bound_or_nominated, event_nodes, event_pod_objects, invalid,
        pod_key,
    },
    label_selector::labels_of,
    names::INTER_POD_AFFINITY,
};
use terms::{
    NsResolver, PodTerms, PodTermsError, TargetNs, Term, all_match, any_match, existing_term_matches,
    required_anti_terms,
};

/// Filter reason: the pod's required affinity is not met.
pub const ERR_REASON_AFFINITY_RULES_NOT_MATCH: &str = "node(s) didn't match pod affinity rules";
/// Filter reason: the pod's required anti-affinity is violated.
pub const ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH: &str = "node(s) didn't match pod anti-affinity rules";
/// Filter reason: an existing pod's required anti-affinity is violated.
pub const ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";

/// Namespace labels, for `namespaceSelector` in pod (anti-)affinity terms. The runtime backs it with
/// a namespace watch.
pub trait NamespaceLister: Send + Sync {
    /// The labels of namespace `ns`; `None` when the namespace does not exist (or is not known yet).
    fn labels(&self, ns: &str) -> Option<BTreeMap<String, String>>;
}

/// `InterPodAffinityArgs`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InterPodAffinityArgs {
    /// `InterPodAffinityArgs` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `kubescheduler.config.k8s.io/v1` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Score weight of an existing pod's required affinity term selecting the pod, 0..=100
    /// (default 1; 0 disables it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hard_pod_affinity_weight: Option<i32>,
    /// Skip scoring for pods without preferred (anti-)affinity terms of their own.
    #[serde(default)]
    pub ignore_preferred_terms_of_existing_pods: bool,
}

impl PluginArgs for InterPodAffinityArgs {
    const KIND: &'static str = "InterPodAffinityArgs";
    fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }
    fn api_version(&self) -> Option<&str> {
        self.api_version.as_deref()
    }
}

/// The default `hardPodAffinityWeight`.
pub const DEFAULT_HARD_POD_AFFINITY_WEIGHT: i32 = 1;

/// Pod affinity and anti-affinity.
#[derive(Clone)]
pub struct InterPodAffinity {
    hard_pod_affinity_weight: i64,
    ignore_preferred_terms_of_existing_pods: bool,
    namespaces: Option<Arc<dyn NamespaceLister>>,
}

impl std::fmt::Debug for InterPodAffinity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterPodAffinity")
            .field("hard_pod_affinity_weight", &self.hard_pod_affinity_weight)
            .field(
                "ignore_preferred_terms_of_existing_pods",
                &self.ignore_preferred_terms_of_existing_pods,
            )
            .field("namespaces", &self.namespaces.is_some())
            .finish()
    }
}

impl Default for InterPodAffinity {
    /// Default args, no namespace lister.
    fn default() -> Self {
        InterPodAffinity {
            hard_pod_affinity_weight: i64::from(DEFAULT_HARD_POD_AFFINITY_WEIGHT),
            ignore_preferred_terms_of_existing_pods: false,
            namespaces: None,
        }
    }
}

impl InterPodAffinity {
    /// Builds the plugin, validating the args as upstream.
    pub fn new(
        args: &InterPodAffinityArgs,
        namespaces: Option<Arc<dyn NamespaceLister>>,
    ) -> Result<Self, PluginArgsError> {
        let weight = args
            .hard_pod_affinity_weight
            .unwrap_or(DEFAULT_HARD_POD_AFFINITY_WEIGHT);
        let mut errs = Vec::new();
        if !(0..=100).contains(&weight) {
            errs.push(invalid(
                "hardPodAffinityWeight",
                weight,
                "not in valid range [0, 100]",
            ));
        }
        aggregate(errs)?;
        Ok(InterPodAffinity {
            hard_pod_affinity_weight: i64::from(weight),
            ignore_preferred_terms_of_existing_pods: args.ignore_preferred_terms_of_existing_pods,
            namespaces,
        })
    }
}

impl Plugin for InterPodAffinity {
    fn name(&self) -> &str {
        INTER_POD_AFFINITY
    }
    unisched_framework::serves!(
        as_pre_filter,
        as_filter,
        as_pre_score,
        as_score,
        as_enqueue_extensions
    );
}

fn namespace_of(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

impl InterPodAffinity {
    /// The waiting pod's required terms, for hints.
    fn required_terms(pod: &Pod) -> Result<(Vec<Term>, Vec<Term>), PodTermsError> {
        let t = PodTerms::parse(pod)?;
        Ok((t.required_affinity, t.required_anti_affinity))
    }

    fn hint_pod_change(
        &self,
        pod: &Pod,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> Result<QueueingHint, QueueingHintError> {
        let (old, new) = event_pod_objects(old, new)?;
        // The waiting pod's own relabel (upstream registers it as `TargetPod/UpdatePodLabel`; our
        // queue hands it over as an unscheduled-pod label update): an existing pod's anti-affinity
        // may have selected only the old labels.
        if let (Some(_), Some(m)) = (old, new)
            && pod_key(m) == pod_key(pod)
        {
            return Ok(QueueingHint::Queue);
        }
        if new.is_some_and(|p| !bound_or_nominated(p)) || old.is_some_and(|p| !bound_or_nominated(p)) {
            return Ok(QueueingHint::Skip);
        }
        let (affinity, anti) = Self::required_terms(pod).map_err(QueueingHintError::plugin)?;
        let mut resolver = NsResolver::new(self.namespaces.as_deref());
        let r = &mut resolver;
        let all = |terms: &[Term], p: &Pod, r: &mut NsResolver<'_>| {
            all_match(terms, namespace_of(p), labels_of(&p.metadata), r)
        };
        let any = |terms: &[Term], p: &Pod, r: &mut NsResolver<'_>| {
            any_match(terms, namespace_of(p), labels_of(&p.metadata), r)
        };
        let queue = match (old, new) {
            // A label change: the pod now meets all affinity terms, or no longer matches an
            // anti-affinity term.
            (Some(o), Some(m)) => {
                (!all(&affinity, o, r) && all(&affinity, m, r)) || (any(&anti, o, r) && !any(&anti, m, r))
            }
            (None, Some(m)) => all(&affinity, m, r),
            (Some(o), None) => {
                // The deleted pod was hated by the pod, or its own anti-affinity hated the pod, or
                // (beyond upstream) it was a member of the group the pod can now start on its own.
                let hated = any(&anti, o, r);
                let self_affinity = all(&affinity, o, r) && all(&affinity, pod, r);
                let namespace_labels = self
                    .namespaces
                    .as_deref()
                    .map(|l| l.labels(namespace_of(pod)).unwrap_or_default());
                let target = TargetNs {
                    name: namespace_of(pod),
                    labels: namespace_labels.as_ref(),
                };
                let hating = required_anti_terms(o)
                    .iter()
                    .any(|t| existing_term_matches(o, t, labels_of(&pod.metadata), target));
                hated || hating || self_affinity
            }
            (None, None) => false,
        };
        Ok(if queue {
            QueueingHint::Queue
        } else {
            QueueingHint::Skip
        })
    }

    fn hint_node_change(
        &self,
        pod: &Pod,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> Result<QueueingHint, QueueingHintError> {
        let (old, new) = event_nodes(old, new)?;
        let (affinity, anti) = Self::required_terms(pod).map_err(QueueingHintError::plugin)?;
        let new_labels = labels_of(&new.metadata);
        let Some(old) = old else {
            // A new node: affinity needs a term's topology key on it; for anti-affinity any new
            // node may do (without the key it is always allowed; with it, its domain may be free).
            let helps_affinity = affinity.iter().any(|t| new_labels.contains_key(&t.topology_key));
            // Beyond upstream: a pod with no terms at all was rejected by existing pods'
            // anti-affinity, and a new node holds no pods.
            let no_terms = affinity.is_empty() && anti.is_empty();
            return Ok(if helps_affinity || !anti.is_empty() || no_terms {
                QueueingHint::Queue
            } else {
                QueueingHint::Skip
            });
        };
        let old_labels = labels_of(&old.metadata);
        let key_moved =
            |key: &str| matches!((old_labels.get(key), new_labels.get(key)), (Some(a), Some(b)) if a != b);
        let affinity_changed = affinity.iter().any(|t| {
            key_moved(&t.topology_key)
                || (!old_labels.contains_key(&t.topology_key) && new_labels.contains_key(&t.topology_key))
        });
        let anti_changed = anti.iter().any(|t| {
            key_moved(&t.topology_key)
                || (old_labels.contains_key(&t.topology_key) && !new_labels.contains_key(&t.topology_key))
        });
        Ok(if affinity_changed || anti_changed {
            QueueingHint::Queue
        } else {
            QueueingHint::Skip
        })
    }
}

impl EnqueueExtensions for InterPodAffinity {
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        let for_pods = self.clone();
        let for_nodes = self.clone();
        vec![
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Pod,
                    ActionType::ADD
                        .or(ActionType::UPDATE_POD_LABEL)
                        .or(ActionType::DELETE),
                    "PodAdd|UpdatePodLabel|Delete",
                ),
                move |pod, old, new| for_pods.hint_pod_change(pod, old, new),
            ),
            // Only labels decide topology domains: a taint-only update cannot help (upstream
            // 1.37.2 registers Node Add|UpdateNodeLabel too).
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Node,
                    ActionType::ADD.or(ActionType::UPDATE_NODE_LABEL),
                    "NodeAdd|UpdateNodeLabel",
                ),
                move |pod, old, new| for_nodes.hint_node_change(pod, old, new),
            ),
        ]
    }
}
