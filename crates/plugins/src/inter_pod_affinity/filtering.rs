//! PreFilter (per-domain counts for required terms, both directions), its AddPod/RemovePod
//! extensions, and Filter.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use unisched_framework::{
    CycleState, FilterPlugin, NodeInfo, PodInfo, PreFilterPlugin, PreFilterResult, Status,
};

use super::{
    ERR_REASON_AFFINITY_RULES_NOT_MATCH, ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH,
    ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH, InterPodAffinity,
    terms::{
        Incoming, NsResolver, PodTerms, PodTermsError, TopologyCounts, all_match, existing_term_matches,
        required_anti_terms,
    },
};
use crate::label_selector::{Labels, labels_of};

pub(super) const PRE_FILTER_KEY: &str = "PreFilterInterPodAffinity";

/// What PreFilter computes.
#[derive(Clone, Debug)]
pub(super) struct PreFilterState {
    pub(super) incoming: Arc<Incoming>,
    /// Domains holding existing pods whose required anti-affinity selects the incoming pod.
    pub(super) existing_anti_affinity: TopologyCounts,
    /// Domains holding existing pods that meet all of the incoming pod's required affinity terms.
    pub(super) affinity: TopologyCounts,
    /// Domains holding existing pods that some required anti-affinity term of the incoming pod
    /// selects.
    pub(super) anti_affinity: TopologyCounts,
}

impl PreFilterState {
    /// Upstream `updateWithPod`: counts `other` on `node` with `delta` (+1 added, −1 removed).
    fn update_with_pod(
        &mut self,
        pod: &PodInfo,
        other: &PodInfo,
        node_labels: &Labels,
        delta: i64,
        resolver: &mut NsResolver<'_>,
    ) {
        let labels = labels_of(&pod.pod.metadata);
        let target = self.incoming.target(pod);
        for t in required_anti_terms(&other.pod) {
            if existing_term_matches(&other.pod, t, labels, target) {
                self.existing_anti_affinity
                    .add(node_labels, &t.topology_key, delta, true);
            }
        }
        let terms = &self.incoming.terms;
        let other_labels = labels_of(&other.pod.metadata);
        if all_match(&terms.required_affinity, &other.namespace, other_labels, resolver) {
            for t in &terms.required_affinity {
                self.affinity.add(node_labels, &t.topology_key, delta, true);
            }
        }
        for t in &terms.required_anti_affinity {
            if t.matches(&other.namespace, other_labels, resolver) {
                self.anti_affinity.add(node_labels, &t.topology_key, delta, true);
            }
        }
    }
}

fn node_labels(node: Option<&Arc<Node>>) -> &Labels {
    node.map_or(&crate::label_selector::NO_LABELS, |n| labels_of(&n.metadata))
}

impl InterPodAffinity {
    /// `no_existing_anti_affinity`: the caller knows no node holds a pod with required
    /// anti-affinity, so the walk over all nodes looking for them is skipped.
    fn pre_filter_state(
        &self,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        no_existing_anti_affinity: bool,
    ) -> Result<Option<PreFilterState>, PodTermsError> {
        let terms = PodTerms::parse(&pod.pod)?;
        let lister = self.namespaces.as_deref();
        let incoming = Incoming::new(pod, terms, lister);
        let labels = labels_of(&pod.pod.metadata);
        let target = incoming.target(pod);

        // Existing pods whose required anti-affinity the incoming pod would violate (the nodes of
        // `Snapshot::nodes_with_required_anti_affinity_pods`, taken from the attempt's node list).
        let mut existing_anti_affinity = TopologyCounts::default();
        let walk: &[Arc<NodeInfo>] = if no_existing_anti_affinity { &[] } else { nodes };
        for ni in walk
            .iter()
            .filter(|n| !n.pods_with_required_anti_affinity.is_empty())
        {
            let Some(node) = ni.node() else { continue };
            let node_labels = labels_of(&node.metadata);
            for existing in &ni.pods_with_required_anti_affinity {
                for t in required_anti_terms(&existing.pod) {
                    if existing_term_matches(&existing.pod, t, labels, target) {
                        existing_anti_affinity.add(node_labels, &t.topology_key, 1, true);
                    }
                }
            }
        }

        // Existing pods the incoming pod's required terms select.
        let mut affinity = TopologyCounts::default();
        let mut anti_affinity = TopologyCounts::default();
        let t = &incoming.terms;
        if !t.required_affinity.is_empty() || !t.required_anti_affinity.is_empty() {
            let mut resolver = NsResolver::new(lister);
            for ni in nodes {
                let Some(node) = ni.node() else { continue };
                let node_labels = labels_of(&node.metadata);
                for existing in &ni.pods {
                    let ns = existing.namespace.as_str();
                    let existing_labels = labels_of(&existing.pod.metadata);
                    if all_match(&t.required_affinity, ns, existing_labels, &mut resolver) {
                        for term in &t.required_affinity {
                            affinity.add(node_labels, &term.topology_key, 1, true);
                        }
                    }
                    for term in &t.required_anti_affinity {
                        if term.matches(ns, existing_labels, &mut resolver) {
                            anti_affinity.add(node_labels, &term.topology_key, 1, true);
                        }
                    }
                }
            }
        }

        if existing_anti_affinity.is_empty()
            && t.required_affinity.is_empty()
            && t.required_anti_affinity.is_empty()
        {
            return Ok(None);
        }
        Ok(Some(PreFilterState {
            incoming,
            existing_anti_affinity,
            affinity,
            anti_affinity,
        }))
    }

    fn apply_delta(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
        delta: i64,
    ) -> Status {
        let mut resolver = NsResolver::new(self.namespaces.as_deref());
        let labels = node_labels(node.node());
        let updated = state.update::<PreFilterState>(PRE_FILTER_KEY, |s| {
            s.update_with_pod(pod, other, labels, delta, &mut resolver);
        });
        match updated {
            Ok(()) => Status::success(),
            Err(e) => Status::error(format!("error reading {PRE_FILTER_KEY:?} from cycleState: {e}")),
        }
    }
}

impl PreFilterPlugin for InterPodAffinity {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        // The snapshot counts nodes with anti-affinity pods; use it when `nodes` is its node list
        // (it always is in a scheduling cycle; unit tests may pass nodes without a snapshot).
        let snapshot = state.snapshot();
        let same_list =
            std::ptr::eq(snapshot.nodes().as_ptr(), nodes.as_ptr()) && snapshot.len() == nodes.len();
        let no_existing_anti_affinity = same_list && snapshot.required_anti_affinity_node_count() == 0;
        match self.pre_filter_state(pod, nodes, no_existing_anti_affinity) {
            Err(e) => {
                tracing::warn!(pod = %pod.key(), error = %e, "InterPodAffinity cannot parse the pod's affinity terms");
                (None, Status::unresolvable(format!("parsing pod: {e}")))
            }
            Ok(None) => (None, Status::skip()),
            Ok(Some(s)) => {
                state.write(PRE_FILTER_KEY, s);
                (None, Status::success())
            }
        }
    }

    fn has_extensions(&self) -> bool {
        true
    }

    fn add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        pod_to_add: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status {
        self.apply_delta(state, pod, pod_to_add, node, 1)
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        pod_to_remove: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status {
        self.apply_delta(state, pod, pod_to_remove, node, -1)
    }
}

/// The node's domains hold a pod meeting all required affinity terms, or the pod may start the
/// group: no such pod exists anywhere and the pod meets its own terms. Every topology key must be
/// on the node either way.
fn satisfies_affinity(s: &PreFilterState, labels: &Labels) -> bool {
    let terms = &s.incoming.terms.required_affinity;
    let mut pods_exist = true;
    for t in terms {
        match labels.get(&t.topology_key) {
            Some(v) => {
                if s.affinity.get(&t.topology_key, v) <= 0 {
                    pods_exist = false;
                }
            }
            None => return false,
        }
    }
    pods_exist || (s.affinity.is_empty() && s.incoming.matches_own_affinity)
}

/// No domain of the node holds a pod the incoming pod's required anti-affinity selects.
fn satisfies_anti_affinity(s: &PreFilterState, labels: &Labels) -> bool {
    if s.anti_affinity.is_empty() {
        return true;
    }
    !s.incoming.terms.required_anti_affinity.iter().any(|t| {
        labels
            .get(&t.topology_key)
            .is_some_and(|v| s.anti_affinity.get(&t.topology_key, v) > 0)
    })
}

impl FilterPlugin for InterPodAffinity {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let s = match state.read::<PreFilterState>(PRE_FILTER_KEY) {
            Ok(s) => s,
            Err(e) => return Status::error(format!("error reading {PRE_FILTER_KEY:?} from cycleState: {e}")),
        };
        let Some(n) = node.node() else {
            return Status::error("node not found");
        };
        let labels = labels_of(&n.metadata);
        if !s.incoming.terms.required_affinity.is_empty() && !satisfies_affinity(s, labels) {
            tracing::trace!(pod = %pod.key(), node = node.name(), "pod affinity not satisfied");
            return Status::unresolvable(ERR_REASON_AFFINITY_RULES_NOT_MATCH);
        }
        if !satisfies_anti_affinity(s, labels) {
            tracing::trace!(pod = %pod.key(), node = node.name(), "pod anti-affinity not satisfied");
            return Status::unschedulable(ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH);
        }
        if s.existing_anti_affinity.any_positive_on(labels) {
            tracing::trace!(pod = %pod.key(), node = node.name(), "an existing pod's anti-affinity forbids the node");
            return Status::unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH);
        }
        Status::success()
    }
}
