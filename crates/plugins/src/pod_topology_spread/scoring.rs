//! PreScore (per-domain counts of the soft constraints over all nodes), Score and NormalizeScore.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use unisched_framework::{
    CycleState, MAX_NODE_SCORE, NodeInfo, NodeScore, PodInfo, PreScorePlugin, ScorePlugin, Status,
};

use super::{
    PodTopologySpread,
    common::{Constraint, LABEL_HOSTNAME, SCHEDULE_ANYWAY, count_matching, node_has_all_keys},
};
use crate::{label_selector::labels_of, selector::RequiredNodeAffinity};

const PRE_SCORE_KEY: &str = "PreScorePodTopologySpread";

#[derive(Debug)]
struct PreScoreData {
    constraints: Vec<Constraint>,
    /// Nodes missing a topology key (when all keys are required): they score 0.
    ignored: HashSet<String>,
    /// Per constraint: domain of a feasible node → matching pods over all nodes. Empty for
    /// hostname constraints, which count on the node itself in Score.
    counts: Vec<HashMap<String, i64>>,
    /// Per constraint: `ln(number of domains + 2)`, so that small topologies weigh more.
    weights: Vec<f64>,
}

/// Shared, read-only after PreScore.
#[derive(Clone, Debug)]
struct PreScoreState(Arc<PreScoreData>);

fn topology_normalizing_weight(size: usize) -> f64 {
    // Node counts are far below 2^52: the conversion is exact.
    let size = size as f64;
    (size + 2.0).ln()
}

fn score_for_count(count: i64, max_skew: i32, weight: f64) -> f64 {
    let count = count as f64;
    count * weight + f64::from(max_skew - 1)
}

impl PreScorePlugin for PodTopologySpread {
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[Arc<NodeInfo>]) -> Status {
        let snapshot = state.snapshot();
        let all = snapshot.nodes();
        if all.is_empty() {
            return Status::skip();
        }
        let constraints = match self.constraints(&pod.pod, SCHEDULE_ANYWAY) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(pod = %pod.key(), error = %e, "PodTopologySpread cannot parse the pod's constraints");
                return Status::error(format!("calculating preScoreState: {e}"));
            }
        };
        if constraints.is_empty() {
            return Status::skip();
        }
        // With the system defaults, nodes without a zone label still get hostname spreading.
        let own = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.as_ref())
            .is_some_and(|c| !c.is_empty());
        let require_all = own || !self.system_defaulted;

        let mut ignored = HashSet::new();
        let mut counts: Vec<HashMap<String, i64>> = vec![HashMap::new(); constraints.len()];
        for ni in nodes {
            let Some(node) = ni.node() else { continue };
            let labels = labels_of(&node.metadata);
            if require_all && !node_has_all_keys(labels, &constraints) {
                ignored.insert(ni.name().to_string());
                continue;
            }
            for (i, c) in constraints.iter().enumerate() {
                if c.topology_key == LABEL_HOSTNAME {
                    continue;
                }
                let value = labels.get(&c.topology_key).map_or("", String::as_str);
                if !counts[i].contains_key(value) {
                    counts[i].insert(value.to_string(), 0);
                }
            }
        }
        let weights = constraints
            .iter()
            .zip(&counts)
            .map(|(c, domains)| {
                let size = if c.topology_key == LABEL_HOSTNAME {
                    nodes.len().saturating_sub(ignored.len())
                } else {
                    domains.len()
                };
                topology_normalizing_weight(size)
            })
            .collect();

        let required = RequiredNodeAffinity::of(&pod.pod);
        for ni in all {
            let Some(node) = ni.node() else { continue };
            let labels = labels_of(&node.metadata);
            if require_all && !node_has_all_keys(labels, &constraints) {
                continue;
            }
            for (i, c) in constraints.iter().enumerate() {
                if !c.includes_node(&pod.pod, node, &required, self.enable_comparison_operators) {
                    continue;
                }
                let value = labels.get(&c.topology_key).map_or("", String::as_str);
                // Only domains of feasible nodes are scored (hostname counts happen in Score).
                if let Some(n) = counts[i].get_mut(value) {
                    *n += count_matching(&ni.pods, &c.selector, &pod.namespace);
                }
            }
        }
        state.write(
            PRE_SCORE_KEY,
            PreScoreState(Arc::new(PreScoreData {
                constraints,
                ignored,
                counts,
                weights,
            })),
        );
        Status::success()
    }
}

fn read_state(state: &CycleState) -> Result<&PreScoreData, Status> {
    state
        .read::<PreScoreState>(PRE_SCORE_KEY)
        .map(|s| &*s.0)
        .map_err(|e| Status::error(format!("error reading {PRE_SCORE_KEY:?} from cycleState: {e}")))
}

impl ScorePlugin for PodTopologySpread {
    /// The weighted number of matching pods in the node's domains (lower is better).
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let s = read_state(state)?;
        let Some(n) = node.node() else {
            return Err(Status::error("node not found"));
        };
        if s.ignored.contains(node.name()) {
            return Ok(0);
        }
        let labels = labels_of(&n.metadata);
        let mut score = 0.0;
        for (i, c) in s.constraints.iter().enumerate() {
            let Some(value) = labels.get(&c.topology_key) else {
                continue;
            };
            let count = if c.topology_key == LABEL_HOSTNAME {
                count_matching(&node.pods, &c.selector, &pod.namespace)
            } else {
                s.counts[i].get(value).copied().unwrap_or(0)
            };
            score += score_for_count(count, c.max_skew, s.weights[i]);
        }
        // Scores are small (pod counts times a logarithm): the conversion cannot saturate.
        Ok(score.round() as i64)
    }

    fn has_normalize(&self) -> bool {
        true
    }

    /// The lowest raw score becomes 100, the rest proportionally less; ignored nodes get 0.
    fn normalize_score(&self, state: &CycleState, _pod: &PodInfo, scores: &mut [NodeScore<'_>]) -> Status {
        let s = match read_state(state) {
            Ok(s) => s,
            Err(e) => return e,
        };
        let mut min = i64::MAX;
        let mut max = 0;
        for ns in scores.iter().filter(|ns| !s.ignored.contains(ns.name)) {
            min = min.min(ns.score);
            max = max.max(ns.score);
        }
        for ns in scores.iter_mut() {
            ns.score = if s.ignored.contains(ns.name) {
                0
            } else if max == 0 {
                MAX_NODE_SCORE
            } else {
                MAX_NODE_SCORE * (max + min - ns.score) / max
            };
        }
        Status::success()
    }
}
