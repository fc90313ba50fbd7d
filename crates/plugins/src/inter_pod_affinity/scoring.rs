//! PreScore (per-domain weights from preferred terms, both directions, and existing pods'
//! required affinity), Score and NormalizeScore.

use std::sync::Arc;

use unisched_framework::{
    CycleState, MAX_NODE_SCORE, NodeInfo, NodeScore, PodInfo, PreScorePlugin, ScorePlugin, Status,
};

use super::{
    InterPodAffinity,
    terms::{
        Incoming, NsResolver, PodTerms, TargetNs, TopologyCounts, existing_term_matches, preferred_terms,
        required_affinity_terms,
    },
};
use crate::label_selector::{Labels, labels_of};

const PRE_SCORE_KEY: &str = "PreScoreInterPodAffinity";

/// Topology key → value → summed weight. Read-only after PreScore, shared between clones.
#[derive(Clone, Debug)]
struct PreScoreState(Arc<TopologyCounts>);

fn has_preferred_terms(pod: &PodInfo) -> bool {
    let affinity = pod.pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    let aff = affinity
        .and_then(|a| a.pod_affinity.as_ref())
        .and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref())
        .is_some_and(|t| !t.is_empty());
    let anti = affinity
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref())
        .is_some_and(|t| !t.is_empty());
    aff || anti
}

impl InterPodAffinity {
    /// Upstream `processExistingPod`: what one existing pod on a node with `node_labels` adds to the
    /// domains of that node.
    #[allow(clippy::too_many_arguments)]
    fn process_existing_pod(
        &self,
        scores: &mut TopologyCounts,
        incoming: &Incoming,
        existing: &PodInfo,
        node_labels: &Labels,
        pod_labels: &Labels,
        target: TargetNs<'_>,
        resolver: &mut NsResolver<'_>,
    ) {
        let existing_labels = labels_of(&existing.pod.metadata);
        let ns = existing.namespace.as_str();
        // The incoming pod's preferences about the existing pod.
        for (t, w) in &incoming.terms.preferred_affinity {
            if t.matches(ns, existing_labels, resolver) {
                scores.add(node_labels, &t.topology_key, *w, false);
            }
        }
        for (t, w) in &incoming.terms.preferred_anti_affinity {
            if t.matches(ns, existing_labels, resolver) {
                scores.add(node_labels, &t.topology_key, -*w, false);
            }
        }
        // The existing pod's rules about the incoming pod: required affinity counts with the
        // hard-affinity weight, preferred terms with their own.
        if self.hard_pod_affinity_weight > 0 {
            for t in required_affinity_terms(&existing.pod) {
                if existing_term_matches(&existing.pod, t, pod_labels, target) {
                    scores.add(node_labels, &t.topology_key, self.hard_pod_affinity_weight, false);
                }
            }
        }
        let (preferred, preferred_anti) = preferred_terms(&existing.pod);
        for wt in preferred {
            if existing_term_matches(&existing.pod, &wt.pod_affinity_term, pod_labels, target) {
                scores.add(
                    node_labels,
                    &wt.pod_affinity_term.topology_key,
                    i64::from(wt.weight),
                    false,
                );
            }
        }
        for wt in preferred_anti {
            if existing_term_matches(&existing.pod, &wt.pod_affinity_term, pod_labels, target) {
                scores.add(
                    node_labels,
                    &wt.pod_affinity_term.topology_key,
                    -i64::from(wt.weight),
                    false,
                );
            }
        }
    }
}

impl PreScorePlugin for InterPodAffinity {
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[Arc<NodeInfo>]) -> Status {
        if nodes.is_empty() {
            return Status::skip();
        }
        let has_constraints = has_preferred_terms(pod);
        if self.ignore_preferred_terms_of_existing_pods && !has_constraints {
            return Status::skip();
        }
        let terms = match PodTerms::parse(&pod.pod) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(pod = %pod.key(), error = %e, "InterPodAffinity cannot parse the pod's affinity terms");
                return Status::error(format!("failed to parse pod: {e}"));
            }
        };
        let lister = self.namespaces.as_deref();
        let incoming = Incoming::new(pod, terms, lister);
        let target = incoming.target(pod);
        let pod_labels = labels_of(&pod.pod.metadata);
        let mut resolver = NsResolver::new(lister);
        let mut scores = TopologyCounts::default();
        let snapshot = state.snapshot();
        // Unless the pod has preferences of its own, only pods with affinity terms matter.
        let candidates: Box<dyn Iterator<Item = &Arc<NodeInfo>>> = if has_constraints {
            Box::new(snapshot.nodes().iter())
        } else {
            Box::new(snapshot.nodes_with_affinity_pods())
        };
        for ni in candidates {
            let Some(node) = ni.node() else { continue };
            let node_labels = labels_of(&node.metadata);
            if node_labels.is_empty() {
                continue;
            }
            let pods = if has_constraints {
                &ni.pods
            } else {
                &ni.pods_with_affinity
            };
            for existing in pods {
                self.process_existing_pod(
                    &mut scores,
                    &incoming,
                    existing,
                    node_labels,
                    pod_labels,
                    target,
                    &mut resolver,
                );
            }
        }
        if scores.is_empty() {
            return Status::skip();
        }
        state.write(PRE_SCORE_KEY, PreScoreState(Arc::new(scores)));
        Status::success()
    }
}

impl ScorePlugin for InterPodAffinity {
    /// The summed weights of the node's domains (can be negative; normalised later).
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let s = state
            .read::<PreScoreState>(PRE_SCORE_KEY)
            .map_err(|e| Status::error(format!("error reading {PRE_SCORE_KEY:?} from cycleState: {e}")))?;
        let Some(n) = node.node() else {
            return Err(Status::error("node not found"));
        };
        Ok(s.0.sum_on(labels_of(&n.metadata)))
    }

    fn has_normalize(&self) -> bool {
        true
    }

    /// Maps the range of raw scores linearly onto 0..100 (all equal: 0).
    fn normalize_score(&self, state: &CycleState, _pod: &PodInfo, scores: &mut [NodeScore<'_>]) -> Status {
        let s = match state.read::<PreScoreState>(PRE_SCORE_KEY) {
            Ok(s) => s,
            Err(e) => return Status::error(format!("error reading {PRE_SCORE_KEY:?} from cycleState: {e}")),
        };
        if s.0.is_empty() {
            return Status::success();
        }
        let min = scores.iter().map(|s| s.score).min().unwrap_or(0);
        let max = scores.iter().map(|s| s.score).max().unwrap_or(0);
        let diff = max - min;
        for ns in scores.iter_mut() {
            ns.score = if diff > 0 {
                // Truncation as upstream's int64(float).
                (MAX_NODE_SCORE as f64 * ((ns.score - min) as f64 / diff as f64)) as i64
            } else {
                0
            };
        }
        Status::success()
    }
}
