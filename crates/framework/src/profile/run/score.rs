//! PreScore, Score and NormalizeScore: how much each feasible node suits the pod.
//!
//! The per-node Score runs themselves are driven by the scheduling algorithm (in parallel, node
//! by node or plugin by plugin); this module holds what the framework adds around them: PreScore
//! through the shared loop, the active plugins, the point's timing, and the normalisation,
//! validation and weighting of the raw scores into a [`ScoreTable`].

use std::sync::Arc;

use super::{FailureReport, run_until_failure};
use crate::{Code, CycleState, Framework, NodeInfo, NodeScore, PodInfo, ScorePlugin, Status};

/// PreScore cannot reject a pod: any failure is an error.
const PRE_SCORE: FailureReport = FailureReport::always_error("PreScore");
/// Neither can a plugin's normalisation.
const NORMALIZE: FailureReport = FailureReport::always_error("Normalize on Score");

/// A score plugin with its weight.
#[derive(Clone)]
pub struct WeightedScore {
    /// The plugin.
    pub plugin: Arc<dyn ScorePlugin>,
    /// Its weight (≥ 1).
    pub weight: i64,
}

/// Per-plugin and total scores of one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodePluginScores {
    /// The node.
    pub name: String,
    /// `(plugin, weighted score)` in plugin order.
    pub scores: Vec<(String, i64)>,
    /// Sum of weighted scores.
    pub total: i64,
}

/// Weighted scores of one attempt, by plugin and node index (the order of the scored nodes).
///
/// Kept as plain numbers because Score runs for hundreds of nodes per pod: named per-node records
/// ([`NodePluginScores`]) are built only for the few nodes an explanation shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScoreTable {
    /// The score plugins that ran, in profile order.
    pub plugins: Vec<String>,
    /// `weighted[plugin][node]`: normalised score × weight.
    pub weighted: Vec<Vec<i64>>,
    /// Sum over plugins, per node.
    pub totals: Vec<i64>,
}

impl ScoreTable {
    /// Every node scoring `total` (no score plugins ran).
    pub fn uniform(nodes: usize, total: i64) -> Self {
        ScoreTable {
            plugins: Vec::new(),
            weighted: Vec::new(),
            totals: vec![total; nodes],
        }
    }

    /// The named record of node `index`.
    pub fn node(&self, index: usize, name: &str) -> NodePluginScores {
        NodePluginScores {
            name: name.to_string(),
            scores: self
                .plugins
                .iter()
                .zip(&self.weighted)
                .map(|(p, w)| (p.clone(), w.get(index).copied().unwrap_or(0)))
                .collect(),
            total: self.totals.get(index).copied().unwrap_or(0),
        }
    }
}

impl Framework {
    /// Times the Score extension point (the caller runs the plugins, possibly in parallel) and
    /// counts one evaluation per active Score plugin.
    pub fn timed_score<T>(&self, plugins: &[&WeightedScore], f: impl FnOnce() -> (T, Code)) -> T {
        self.evaluated("Score", plugins.iter().map(|ws| ws.plugin.name()));
        self.timed("Score", f)
    }

    /// PreScore: a plugin's Skip drops it from this attempt's Score.
    pub fn run_pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[Arc<NodeInfo>]) -> Status {
        let record = state.record_plugin_metrics;
        self.timed("PreScore", || {
            run_until_failure(&self.pre_score, PRE_SCORE, |p| {
                self.observer
                    .plugin_evaluated(&self.profile_name, "PreScore", p.name());
                let s = self.plugin_timed(
                    record,
                    "PreScore",
                    p.name(),
                    || p.pre_score(state, pod, nodes),
                    Status::code,
                );
                if s.is_skip() {
                    state.skip_score_plugins.insert(p.name().to_string());
                    return None;
                }
                Some(s)
            })
        })
    }

    /// The score plugins that will run for this attempt.
    pub fn active_score_plugins(&self, state: &CycleState) -> Vec<&WeightedScore> {
        self.score
            .iter()
            .filter(|s| !state.skip_score_plugins.contains(s.plugin.name()))
            .collect()
    }

    /// Normalises, validates and weights raw scores (`raw[plugin][node]`), then totals per node.
    pub fn finish_scores(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        plugins: &[&WeightedScore],
        nodes: &[Arc<NodeInfo>],
        raw: Vec<Vec<i64>>,
    ) -> Result<ScoreTable, Status> {
        let mut table = ScoreTable {
            plugins: Vec::with_capacity(plugins.len()),
            weighted: Vec::with_capacity(plugins.len()),
            totals: vec![0; nodes.len()],
        };
        let mut raw = raw.into_iter();
        for ws in plugins {
            let mut scores = raw.next().unwrap_or_default();
            scores.resize(nodes.len(), 0);
            if ws.plugin.has_normalize() {
                // The normalisation interface names nodes; only plugins that normalise pay for it.
                let mut list: Vec<NodeScore<'_>> = nodes
                    .iter()
                    .zip(&scores)
                    .map(|(n, s)| NodeScore {
                        name: n.name(),
                        score: *s,
                    })
                    .collect();
                let s = ws.plugin.normalize_score(state, pod, &mut list);
                if !s.is_success() {
                    return Err(NORMALIZE.report(ws.plugin.name(), s).0);
                }
                for (score, ns) in scores.iter_mut().zip(&list) {
                    *score = ns.score;
                }
            }
            for (ni, score) in scores.iter_mut().enumerate() {
                if !(crate::MIN_NODE_SCORE..=crate::MAX_NODE_SCORE).contains(score) {
                    return Err(Status::error(format!(
                        "plugin {:?} returns an invalid score {}, it should in the range of [{}, {}] after normalizing",
                        ws.plugin.name(),
                        score,
                        crate::MIN_NODE_SCORE,
                        crate::MAX_NODE_SCORE
                    )));
                }
                *score *= ws.weight;
                table.totals[ni] += *score;
            }
            table.plugins.push(ws.plugin.name().to_string());
            table.weighted.push(scores);
        }
        Ok(table)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Node, Pod};

    use super::*;
    use crate::{
        Plugin,
        test_support::{Durations, Fifo, framework_of},
    };

    /// A Score plugin that scores each node by a function of its name and fails on the named
    /// nodes.
    struct Scripted {
        name: &'static str,
        fails_on: &'static [&'static str],
    }
    impl Plugin for Scripted {
        fn name(&self) -> &str {
            self.name
        }
        crate::serves!(as_score);
    }
    impl ScorePlugin for Scripted {
        fn score(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
            if self.fails_on.contains(&node.name()) {
                return Err(Status::error(format!("{} broke on {}", self.name, node.name())));
            }
            let seed = self.name.len() as i64 * 7;
            Ok(node.name().bytes().map(i64::from).sum::<i64>() * seed % 101)
        }
    }

    /// Attempts that time each plugin call score node by node; the others plugin by plugin
    /// (`ScorePlugin::score_nodes`). Both must give the same table, and on failures the same
    /// error: the first failing node's first failing plugin, as a node-by-node run meets it.
    #[test]
    fn scoring_plugin_by_plugin_matches_scoring_node_by_node() {
        let cases: [(
            &str,
            &'static [&'static str],
            &'static [&'static str],
            Option<&str>,
        ); 4] = [
            ("no failure", &[], &[], None),
            (
                "the later plugin fails on an earlier node",
                &["n4"],
                &["n2"],
                Some("Second broke on n2"),
            ),
            (
                "both fail on one node: the first plugin",
                &["n3"],
                &["n3"],
                Some("First broke on n3"),
            ),
            (
                "only the first plugin fails",
                &["n1", "n5"],
                &[],
                Some("First broke on n1"),
            ),
        ];
        let nodes: Vec<Arc<NodeInfo>> = (0..8)
            .map(|i| {
                let mut node = Node::default();
                node.metadata.name = Some(format!("n{i}"));
                Arc::new(NodeInfo::new(Arc::new(node)))
            })
            .collect();
        let pod = PodInfo::new(Pod::default());
        for (name, first_fails, second_fails, want_error) in cases {
            let plugins: Vec<Arc<dyn Plugin>> = vec![
                Arc::new(Fifo),
                Arc::new(Scripted {
                    name: "First",
                    fails_on: first_fails,
                }),
                Arc::new(Scripted {
                    name: "Second",
                    fails_on: second_fails,
                }),
            ];
            let fwk = framework_of(plugins, Arc::new(Arc::new(Durations::default())));
            let run = |timed: bool| {
                let mut state = CycleState::new();
                state.record_plugin_metrics = timed;
                crate::SchedulingAlgorithm::new(1, None, 1).prioritize_nodes(&fwk, &mut state, &pod, &nodes)
            };
            let (node_by_node, plugin_by_plugin) = (run(true), run(false));
            match want_error {
                None => {
                    let table = plugin_by_plugin.unwrap_or_else(|s| panic!("{name}: {s:?}"));
                    assert_eq!(Ok(&table), node_by_node.as_ref(), "{name}");
                    assert_eq!(table.plugins, ["First", "Second"], "{name}");
                    assert!(
                        table.totals.iter().any(|&t| t != table.totals[0]),
                        "{name}: scores vary"
                    );
                }
                Some(want) => {
                    let (a, b) = (node_by_node.unwrap_err(), plugin_by_plugin.unwrap_err());
                    assert_eq!(a.to_string(), b.to_string(), "{name}");
                    assert!(b.to_string().contains(want), "{name}: {b}");
                }
            }
        }
    }
}
