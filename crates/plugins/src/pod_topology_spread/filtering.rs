//! PreFilter (per-domain counts of the hard constraints), its AddPod/RemovePod extensions, and
//! Filter.

use std::{collections::HashMap, sync::Arc};

use k8s_openapi::api::core::v1::Node;
use unisched_framework::{
    CycleState, FilterPlugin, NodeInfo, PodInfo, PreFilterPlugin, PreFilterResult, StateError, Status,
};

use super::{
    ConstraintsError, ERR_REASON_CONSTRAINTS_NOT_MATCH, ERR_REASON_NODE_LABEL_NOT_MATCH, PodTopologySpread,
    common::{Constraint, DO_NOT_SCHEDULE, count_matching, node_has_all_keys},
};
use crate::{label_selector::labels_of, selector::RequiredNodeAffinity};

pub(super) const PRE_FILTER_KEY: &str = "PreFilterPodTopologySpread";

/// The two domains with the fewest matching pods seen so far. `[0]` always holds the minimum;
/// `[1]` is at least as large but not necessarily the second minimum (upstream `criticalPaths`:
/// enough because preemption changes one node at a time, on its own copy of the state).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct CriticalPaths([(String, i64); 2]);

impl Default for CriticalPaths {
    fn default() -> Self {
        let none = (String::new(), i64::from(i32::MAX));
        CriticalPaths([none.clone(), none])
    }
}

impl CriticalPaths {
    pub(super) fn update(&mut self, value: &str, num: i64) {
        let p = &mut self.0;
        let existing = if p[0].0 == value {
            Some(0)
        } else if p[1].0 == value {
            Some(1)
        } else {
            None
        };
        match existing {
            Some(i) => {
                p[i].1 = num;
                if p[0].1 > p[1].1 {
                    p.swap(0, 1);
                }
            }
            None if num < p[0].1 => {
                p[1] = p[0].clone();
                p[0] = (value.to_string(), num);
            }
            None if num < p[1].1 => p[1] = (value.to_string(), num),
            None => {}
        }
    }

    pub(super) fn min(&self) -> i64 {
        self.0[0].1
    }
}

/// What PreFilter computes for the hard constraints.
#[derive(Clone, Debug)]
pub(super) struct PreFilterState {
    pub(super) constraints: Arc<[Constraint]>,
    /// Whether each constraint selects the pod being scheduled.
    pub(super) self_match: Arc<[bool]>,
    /// Per constraint: domain → matching pods. Every eligible domain has an entry, zero included.
    pub(super) counts: Vec<HashMap<String, i64>>,
    pub(super) paths: Vec<CriticalPaths>,
    /// The pod's node selector and required affinity, for AddPod/RemovePod.
    required: Arc<RequiredNodeAffinity>,
}

impl PreFilterState {
    /// The global minimum for the skew: 0 while fewer than `minDomains` domains exist.
    fn min_match(&self, i: usize) -> i64 {
        let domains = self.counts[i].len();
        if i64::try_from(domains).unwrap_or(i64::MAX) < i64::from(self.constraints[i].min_domains) {
            0
        } else {
            self.paths[i].min()
        }
    }
}

/// Why PreFilter could not compute the pod's spreading state.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FilteringError {
    /// The pod's hard constraints (or the defaults applied to it) do not parse.
    #[error("get constraints from pod: {source}")]
    Constraints {
        /// The unparsable constraint.
        #[source]
        source: ConstraintsError,
    },
}

fn read_state(state: &CycleState) -> Result<&PreFilterState, Status> {
    state
        .read::<PreFilterState>(PRE_FILTER_KEY)
        .map_err(|e: StateError| Status::error(format!("reading {PRE_FILTER_KEY:?} from cycleState: {e}")))
}

impl PodTopologySpread {
    fn pre_filter_state(
        &self,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<Option<PreFilterState>, FilteringError> {
        let constraints = self
            .constraints(&pod.pod, DO_NOT_SCHEDULE)
            .map_err(|source| FilteringError::Constraints { source })?;
        if constraints.is_empty() {
            return Ok(None);
        }
        let required = RequiredNodeAffinity::of(&pod.pod);
        let mut counts: Vec<HashMap<String, i64>> = vec![HashMap::new(); constraints.len()];
        for ni in nodes {
            let Some(node) = ni.node() else { continue };
            let labels = labels_of(&node.metadata);
            if !node_has_all_keys(labels, &constraints) {
                continue;
            }
            for (i, c) in constraints.iter().enumerate() {
                if !c.includes_node(&pod.pod, node, &required, self.enable_comparison_operators) {
                    continue;
                }
                let Some(value) = labels.get(&c.topology_key) else {
                    continue;
                };
                let n = count_matching(&ni.pods, &c.selector, &pod.namespace);
                *counts[i].entry(value.clone()).or_insert(0) += n;
            }
        }
        let paths = counts
            .iter()
            .map(|domains| {
                let mut p = CriticalPaths::default();
                for (value, n) in domains {
                    p.update(value, *n);
                }
                p
            })
            .collect();
        let pod_labels = labels_of(&pod.pod.metadata);
        let self_match = constraints
            .iter()
            .map(|c| c.selector.matches(pod_labels))
            .collect();
        Ok(Some(PreFilterState {
            constraints: constraints.into(),
            self_match,
            counts,
            paths,
            required: Arc::new(required),
        }))
    }

    /// Upstream `updateWithPod`: `delta` is +1 for AddPod, −1 for RemovePod.
    fn update_with_pod(
        &self,
        s: &mut PreFilterState,
        pod: &PodInfo,
        other: &PodInfo,
        node: Option<&Arc<Node>>,
        delta: i64,
    ) {
        let Some(node) = node else { return };
        if other.namespace != pod.namespace {
            return;
        }
        let labels = labels_of(&node.metadata);
        if !node_has_all_keys(labels, &s.constraints) {
            return;
        }
        let other_labels = labels_of(&other.pod.metadata);
        let constraints = s.constraints.clone();
        for (i, c) in constraints.iter().enumerate() {
            if !c.selector.matches(other_labels)
                || !c.includes_node(&pod.pod, node, &s.required, self.enable_comparison_operators)
            {
                continue;
            }
            let Some(value) = labels.get(&c.topology_key) else {
                continue;
            };
            let n = s.counts[i].entry(value.clone()).or_insert(0);
            *n += delta;
            let n = *n;
            s.paths[i].update(value, n);
        }
    }
}

impl PreFilterPlugin for PodTopologySpread {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        match self.pre_filter_state(pod, nodes) {
            Err(e) => {
                tracing::warn!(pod = %pod.key(), error = %e, "PodTopologySpread cannot parse the pod's constraints");
                (None, Status::error(e))
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

impl PodTopologySpread {
    fn apply_delta(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
        delta: i64,
    ) -> Status {
        let updated = state.update::<PreFilterState>(PRE_FILTER_KEY, |s| {
            self.update_with_pod(s, pod, other, node.node(), delta);
        });
        match updated {
            Ok(()) => Status::success(),
            Err(e) => Status::error(format!("reading {PRE_FILTER_KEY:?} from cycleState: {e}")),
        }
    }
}

impl FilterPlugin for PodTopologySpread {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let s = match read_state(state) {
            Ok(s) => s,
            Err(e) => return e,
        };
        let Some(n) = node.node() else {
            return Status::error("node not found");
        };
        let labels = labels_of(&n.metadata);
        for (i, c) in s.constraints.iter().enumerate() {
            let Some(value) = labels.get(&c.topology_key) else {
                tracing::trace!(pod = %pod.key(), node = node.name(), key = %c.topology_key, "node lacks the topology key");
                return Status::unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH);
            };
            let min = s.min_match(i);
            let self_match = i64::from(s.self_match[i]);
            let count = s.counts[i].get(value).copied().unwrap_or(0);
            let skew = count + self_match - min;
            if skew > i64::from(c.max_skew) {
                tracing::trace!(
                    pod = %pod.key(), node = node.name(), key = %c.topology_key, count, self_match, min,
                    max_skew = c.max_skew, "spread constraint violated"
                );
                return Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH);
            }
        }
        Status::success()
    }
}
