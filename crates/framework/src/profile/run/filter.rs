//! PreFilter and Filter: which nodes can take the pod.
//!
//! PreFilter runs once per attempt through the shared loop; Filter runs per plugin and node (the
//! hot path, thousands of calls per pod), so it has its own loop over a [`FilterChain`] worked
//! out once per attempt, with its timings batched per worker ([`TimingBatch`]).

use std::{collections::BTreeSet, sync::Arc};

use super::{FailureReport, run_until_failure};
use crate::{
    Code, CycleState, FilterPlugin, Framework, NodeInfo, PluginTiming, PodInfo, PreFilterResult, Status,
    TimingBatch,
};

/// PreFilter plugins may reject the pod outright.
const PRE_FILTER: FailureReport = FailureReport::rejections_stand("PreFilter");
/// The AddPod and RemovePod extensions only update state: any failure is an error.
const ADD_POD: FailureReport = FailureReport::always_error("AddPod on PreFilter");
const REMOVE_POD: FailureReport = FailureReport::always_error("RemovePod on PreFilter");

/// The Filter plugins one attempt runs, PreFilter's skips applied once: the skip set is keyed by
/// plugin name, and asking it per plugin and node hashed a name thousands of times per pod.
pub struct FilterChain<'f> {
    plugins: Vec<(&'f dyn FilterPlugin, &'f Arc<str>, PluginTiming)>,
}

impl FilterChain<'_> {
    /// An empty batch for one worker's timed successes of this chain's plugins.
    pub fn timing_batch(&self) -> TimingBatch<'_> {
        TimingBatch::new(self.plugins.iter().map(|(_, _, t)| t))
    }
}

impl Framework {
    /// PreFilter. Returns the merged node restriction, the status, and the plugins that rejected.
    pub fn run_pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status, BTreeSet<String>) {
        let record = state.record_plugin_metrics;
        self.timed("PreFilter", || {
            let mut result: Option<PreFilterResult> = None;
            let mut rejectors = BTreeSet::new();
            let mut narrowed_by = Vec::new();
            let (status, code) = run_until_failure(&self.pre_filter, PRE_FILTER, |p| {
                self.observer
                    .plugin_evaluated(&self.profile_name, "PreFilter", p.name());
                let (r, s) = self.plugin_timed(
                    record,
                    "PreFilter",
                    p.name(),
                    || p.pre_filter(state, pod, nodes),
                    |(_, s)| s.code(),
                );
                if s.is_skip() {
                    state.skip_filter_plugins.insert(p.name().to_string());
                    return None;
                }
                if !s.is_success() {
                    if s.is_rejected() {
                        rejectors.insert(p.name().to_string());
                    }
                    return Some(s);
                }
                let r = r.filter(|r| r.node_names.is_some())?;
                narrowed_by.push(p.name().to_string());
                let merged = match result.take() {
                    None => r,
                    Some(prev) => prev.merge(r),
                };
                let nothing_left = merged.node_names.as_ref().is_some_and(BTreeSet::is_empty);
                result = Some(merged);
                if !nothing_left {
                    return None;
                }
                // The plugins' restrictions together leave no node: the pod is unresolvable.
                let msg = if narrowed_by.len() == 1 {
                    format!("node(s) didn't satisfy plugin {}", narrowed_by[0])
                } else {
                    format!(
                        "node(s) didn't satisfy plugin(s) [{}] simultaneously",
                        narrowed_by.join(" ")
                    )
                };
                rejectors.extend(narrowed_by.iter().cloned());
                Some(Status::unresolvable(msg))
            });
            let result = if code == Code::Success { result } else { None };
            ((result, status, rejectors), code)
        })
    }

    /// Counts the Filter plugins that run for this attempt (those PreFilter did not skip).
    pub fn count_filter_evaluations(&self, chain: &FilterChain<'_>) {
        self.evaluated("Filter", chain.plugins.iter().map(|(p, _, _)| p.name()));
    }

    /// The Filter plugins this attempt runs (those PreFilter did not skip), in profile order.
    pub fn filter_chain(&self, state: &CycleState) -> FilterChain<'_> {
        let plugins = self
            .filter
            .iter()
            .zip(&self.filter_names)
            .filter(|(p, _)| !state.skip_filter_plugins.contains(p.name()))
            .map(|(p, name)| {
                let timing = self.plugin_timing(state.record_plugin_metrics, "Filter", p.name());
                (&**p, name, timing)
            })
            .collect();
        FilterChain { plugins }
    }

    /// Filter on one node: the first rejection stops.
    pub fn run_filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        self.run_filter_chain(&self.filter_chain(state), state, pod, node)
    }

    /// Filter on one node with the attempt's chain worked out beforehand (the per-node path).
    pub fn run_filter_chain(
        &self,
        chain: &FilterChain<'_>,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        self.run_filter_chain_in(chain, &mut chain.timing_batch(), state, pod, node)
    }

    /// [`Framework::run_filter_chain`] with the timed successes kept in a worker's `batch`
    /// (from [`FilterChain::timing_batch`] of the same chain).
    ///
    /// Not the shared loop: the rejection takes the chain's shared name (a node's rejection is
    /// kept for every node that fails), and upstream words Filter's errors differently.
    pub fn run_filter_chain_in(
        &self,
        chain: &FilterChain<'_>,
        batch: &mut TimingBatch<'_>,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        batch.start_node();
        for (i, (p, name, timing)) in chain.plugins.iter().enumerate() {
            let s = self.run_timed_in(
                timing,
                batch,
                i,
                "Filter",
                p.name(),
                || p.filter(state, pod, node),
                Status::code,
            );
            if !s.is_success() {
                let s = s.with_plugin(Arc::clone(name));
                if s.is_rejected() {
                    return s;
                }
                return s.wrap_error(format!("running {:?} filter plugin", p.name()));
            }
        }
        Status::success()
    }

    /// Filter with the pods nominated to this node (priority ≥ the pod's) added, then without them:
    /// the pod must fit both ways, as upstream.
    pub fn run_filter_with_nominated(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        nominated: &[Arc<PodInfo>],
    ) -> Status {
        self.run_filter_chain_with_nominated(&self.filter_chain(state), state, pod, node, nominated)
    }

    /// [`Framework::run_filter_with_nominated`] with the attempt's chain worked out beforehand.
    pub fn run_filter_chain_with_nominated(
        &self,
        chain: &FilterChain<'_>,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        nominated: &[Arc<PodInfo>],
    ) -> Status {
        let relevant: Vec<&Arc<PodInfo>> = nominated
            .iter()
            .filter(|n| n.uid != pod.uid && n.priority >= pod.priority)
            .collect();
        if relevant.is_empty() {
            return self.run_filter_chain(chain, state, pod, node);
        }
        // The cloned state carries the same skips, so the chain serves it too.
        let mut state_with = state.deep_clone();
        let mut node_with = node.clone();
        for n in &relevant {
            node_with.add_pod((*n).clone());
            let s = self.run_pre_filter_add_pod(&mut state_with, pod, n, &node_with);
            if !s.is_success() {
                return s;
            }
        }
        let s = self.run_filter_chain(chain, &state_with, pod, &node_with);
        if !s.is_success() {
            return s;
        }
        self.run_filter_chain(chain, state, pod, node)
    }

    /// PreFilter AddPod extensions.
    pub fn run_pre_filter_add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        to_add: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status {
        let with_extensions = self.pre_filter.iter().filter(|p| p.has_extensions());
        run_until_failure(with_extensions, ADD_POD, |p| {
            (!state.skip_filter_plugins.contains(p.name())).then(|| p.add_pod(state, pod, to_add, node))
        })
        .0
    }

    /// PreFilter RemovePod extensions.
    pub fn run_pre_filter_remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        to_remove: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status {
        let with_extensions = self.pre_filter.iter().filter(|p| p.has_extensions());
        run_until_failure(with_extensions, REMOVE_POD, |p| {
            (!state.skip_filter_plugins.contains(p.name())).then(|| p.remove_pod(state, pod, to_remove, node))
        })
        .0
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::{Node, Pod};

    use super::*;
    use crate::{
        Plugin,
        test_support::{Durations, Fifo, framework_of},
    };

    /// A Filter plugin that takes `pause` on every node.
    struct Pausing {
        name: &'static str,
        pause: Duration,
    }
    impl Plugin for Pausing {
        fn name(&self) -> &str {
            self.name
        }
        crate::serves!(as_filter);
    }
    impl FilterPlugin for Pausing {
        fn filter(&self, _: &CycleState, _: &PodInfo, _: &NodeInfo) -> Status {
            std::thread::sleep(self.pause);
            Status::success()
        }
    }

    /// A node's plugins share clock readings, each starting where the previous one ended: the
    /// plugin after a slow one is not charged the slow one's time, and every plugin and node is
    /// still timed once.
    #[test]
    fn chained_plugin_timings_charge_each_plugin_its_own_time() {
        let slow = Duration::from_millis(150);
        let plugins: Vec<Arc<dyn Plugin>> = vec![
            Arc::new(Fifo),
            Arc::new(Pausing {
                name: "Slow",
                pause: slow,
            }),
            Arc::new(Pausing {
                name: "Quick",
                pause: Duration::ZERO,
            }),
        ];
        let durations = Arc::new(Durations::default());
        let fwk = framework_of(plugins, Arc::new(Arc::clone(&durations)));
        let mut state = CycleState::new();
        state.record_plugin_metrics = true;
        let pod = PodInfo::new(Pod::default());
        let nodes: Vec<NodeInfo> = ["a", "b"]
            .iter()
            .map(|name| {
                let mut node = Node::default();
                node.metadata.name = Some(name.to_string());
                NodeInfo::new(Arc::new(node))
            })
            .collect();
        let chain = fwk.filter_chain(&state);
        let mut batch = chain.timing_batch();
        for (i, node) in nodes.iter().enumerate() {
            if i > 0 {
                // Work between two nodes belongs to no plugin.
                std::thread::sleep(slow);
            }
            let s = fwk.run_filter_chain_in(&chain, &mut batch, &state, &pod, node);
            assert!(s.is_success(), "{s:?}");
        }
        drop(batch);
        let durations = durations.0.lock().clone();
        let slow_runs = &durations["Slow"];
        let quick_runs = &durations["Quick"];
        assert_eq!((slow_runs.len(), quick_runs.len()), (2, 2), "{durations:?}");
        assert!(slow_runs.iter().all(|d| *d >= slow), "{durations:?}");
        // With a shared start (or the previous plugin's start) the quick plugin would be charged
        // at least the slow one's pause.
        assert!(quick_runs.iter().all(|d| *d < slow), "{durations:?}");
        // The second node's first plugin starts on its own reading, not at the first node's
        // last one: it is not charged the pause between the nodes.
        assert!(slow_runs[1] < slow * 2, "{durations:?}");
    }
}
