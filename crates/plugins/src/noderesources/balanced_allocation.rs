//! `NodeResourcesBalancedAllocation`: prefers nodes whose resource utilisation stays balanced across
//! resources once the pod is placed (upstream `balanced_allocation.go`).
//!
//! Formula (upstream 1.30–1.35): per resource with allocatable > 0, `fraction = min(requested /
//! allocatable, 1)` using exact requests (existing pods plus this pod); the score is
//! `⌊(1 − σ) × 100⌋` where σ is `|f₁ − f₂| / 2` for two resources and the population standard
//! deviation otherwise. Newer upstream releases score the *improvement* in balance instead
//! (unverified); unisched keeps the 1.35 formula.
//!
//! PreScore returns Skip for pods that request none of the configured resources (best-effort pods),
//! so they are not piled onto one node — unless DynamicResources recorded a node-allocatable
//! footprint for the pod on some node, which unisched scores like a spec request.

use std::sync::Arc;

use unisched_framework::{CycleState, NodeInfo, Plugin, PodInfo, PreScorePlugin, ScorePlugin, Status};

use super::{
    args::NodeResourcesBalancedAllocationArgs,
    scoring::{ResourceAllocationScorer, ScorePreState, Strategy},
};
use crate::names::NODE_RESOURCES_BALANCED_ALLOCATION;

const PRE_SCORE_KEY: &str = "PreScoreNodeResourcesBalancedAllocation";

/// Balanced resource utilisation.
#[derive(Clone, Debug)]
pub struct NodeResourcesBalancedAllocation {
    scorer: ResourceAllocationScorer,
}

impl NodeResourcesBalancedAllocation {
    /// Builds the plugin from args (defaults applied, then validated as upstream).
    pub fn new(args: &NodeResourcesBalancedAllocationArgs) -> Result<Self, String> {
        let mut args = args.clone();
        args.complete();
        args.validate()?;
        Ok(NodeResourcesBalancedAllocation {
            scorer: ResourceAllocationScorer {
                resources: args
                    .resources
                    .iter()
                    .map(|r| (r.name.clone(), r.weight))
                    .collect(),
                strategy: Strategy::Balanced,
                use_requested: true,
                include_footprint: args.include_dra_footprint,
            },
        })
    }
}

impl Plugin for NodeResourcesBalancedAllocation {
    fn name(&self) -> &str {
        NODE_RESOURCES_BALANCED_ALLOCATION
    }
    unisched_framework::serves!(as_pre_score, as_score);
}

impl PreScorePlugin for NodeResourcesBalancedAllocation {
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[Arc<NodeInfo>]) -> Status {
        let pre = self.scorer.pre_state(state, pod);
        let best_effort = pre.pod_requests.iter().all(|r| *r == 0);
        if best_effort {
            let has_footprint = pre.footprints.as_ref().is_some_and(|f| {
                nodes.iter().any(|n| {
                    f.get(n.name()).is_some_and(|extra| {
                        self.scorer.resources.iter().any(|(name, _)| extra.get(name) != 0)
                    })
                })
            });
            if !has_footprint {
                return Status::skip();
            }
        }
        state.write(PRE_SCORE_KEY, pre);
        Status::success()
    }
}

impl ScorePlugin for NodeResourcesBalancedAllocation {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        match state.read::<ScorePreState>(PRE_SCORE_KEY) {
            Ok(pre) => self.scorer.score(node, pre),
            Err(_) => self.scorer.score(node, &self.scorer.pre_state(state, pod)),
        }
    }
}

#[cfg(test)]
mod tests {
    use unisched_framework::{NODE_FOOTPRINTS_KEY, NodeFootprints};
    use unisched_resource::Resource;

    use super::*;
    use crate::{
        noderesources::args::ResourceSpec,
        testing::{NodeBuilder, PodBuilder},
    };

    fn run(
        pl: &NodeResourcesBalancedAllocation,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: Vec<NodeInfo>,
    ) -> Option<Vec<i64>> {
        let arcs: Vec<Arc<NodeInfo>> = nodes.into_iter().map(Arc::new).collect();
        let s = pl.pre_score(state, pod, &arcs);
        if s.is_skip() {
            return None;
        }
        assert!(s.is_success(), "{s}");
        Some(arcs.iter().map(|n| pl.score(state, pod, n).unwrap()).collect())
    }

    #[test]
    fn score_table() {
        struct Case {
            name: &'static str,
            resources: Vec<ResourceSpec>,
            pod: PodBuilder,
            nodes: Vec<NodeInfo>,
            want: Option<Vec<i64>>,
        }
        // Upstream balanced_allocation_test: node1 4000m/10000, node2 6000m/10000.
        let n1 = || {
            NodeBuilder::new("node1")
                .alloc("cpu", "4")
                .alloc("memory", "10000")
        };
        let n2 = || {
            NodeBuilder::new("node2")
                .alloc("cpu", "6")
                .alloc("memory", "10000")
        };
        let cases = vec![
            Case {
                name: "best-effort pod is skipped",
                resources: vec![],
                pod: PodBuilder::new("p"),
                nodes: vec![n1().info()],
                want: None,
            },
            Case {
                name: "differently sized nodes",
                resources: vec![],
                pod: PodBuilder::new("p")
                    .req("cpu", "1")
                    .req("memory", "2000")
                    .container("c1")
                    .req("cpu", "2")
                    .req("memory", "3000"),
                nodes: vec![n1().info(), n2().info()],
                // node1: cpu 0.75, mem 0.5 -> 87; node2: cpu 0.5, mem 0.5 -> 100
                want: Some(vec![87, 100]),
            },
            Case {
                name: "existing pods count with exact requests",
                resources: vec![],
                pod: PodBuilder::new("p").req("cpu", "1").req("memory", "1000"),
                nodes: vec![n1().info_with([PodBuilder::new("e").node_name("node1").req("cpu", "1").info()])],
                // cpu 2000/4000 = 0.5, mem 1000/10000 = 0.1 -> std 0.2 -> 80
                want: Some(vec![80]),
            },
            Case {
                name: "over capacity capped at one",
                resources: vec![],
                pod: PodBuilder::new("p").req("cpu", "8").req("memory", "1"),
                nodes: vec![n1().info()],
                want: Some(vec![50]),
            },
            Case {
                name: "three resources",
                resources: vec![
                    ResourceSpec::new("cpu", 1),
                    ResourceSpec::new("memory", 1),
                    ResourceSpec::new("example.com/foo", 1),
                ],
                pod: PodBuilder::new("p")
                    .req("cpu", "1")
                    .req("memory", "5000")
                    .req("example.com/foo", "3"),
                nodes: vec![n1().alloc("example.com/foo", "4").info()],
                // fractions 0.25, 0.5, 0.75 -> std 0.204 -> 79
                want: Some(vec![79]),
            },
            Case {
                name: "unrequested scalar ignored",
                resources: vec![
                    ResourceSpec::new("cpu", 1),
                    ResourceSpec::new("memory", 1),
                    ResourceSpec::new("example.com/foo", 1),
                ],
                pod: PodBuilder::new("p").req("cpu", "2").req("memory", "5000"),
                nodes: vec![n1().alloc("example.com/foo", "4").info()],
                want: Some(vec![100]),
            },
        ];
        for c in cases {
            let args = NodeResourcesBalancedAllocationArgs {
                resources: c.resources,
                ..NodeResourcesBalancedAllocationArgs::default()
            };
            let pl = NodeResourcesBalancedAllocation::new(&args).unwrap();
            assert_eq!(
                run(&pl, &mut CycleState::new(), &c.pod.info(), c.nodes),
                c.want,
                "{}",
                c.name
            );
        }
    }

    #[test]
    fn footprint_counts() {
        struct Case {
            name: &'static str,
            pod: PodBuilder,
            include: bool,
            want: Option<Vec<i64>>,
        }
        let cases = vec![
            Case {
                name: "spec pod with footprint",
                pod: PodBuilder::new("p").req("memory", "5000"),
                include: true,
                want: Some(vec![100, 75]),
            },
            Case {
                name: "footprint disabled",
                pod: PodBuilder::new("p").req("memory", "5000"),
                include: false,
                want: Some(vec![75, 75]),
            },
            Case {
                name: "best-effort pod with a footprint is scored",
                pod: PodBuilder::new("p"),
                include: true,
                want: Some(vec![75, 100]),
            },
            Case {
                name: "best-effort pod, footprint disabled",
                pod: PodBuilder::new("p"),
                include: false,
                want: None,
            },
        ];
        for c in cases {
            let args = NodeResourcesBalancedAllocationArgs {
                include_dra_footprint: c.include,
                ..NodeResourcesBalancedAllocationArgs::default()
            };
            let pl = NodeResourcesBalancedAllocation::new(&args).unwrap();
            let mut state = CycleState::new();
            let fp = NodeFootprints::default();
            let extra = Resource {
                milli_cpu: 2000,
                ..Resource::default()
            };
            fp.set("a", extra);
            state.write(NODE_FOOTPRINTS_KEY, fp);
            let nodes = vec![
                NodeBuilder::new("a")
                    .alloc("cpu", "4")
                    .alloc("memory", "10000")
                    .info(),
                NodeBuilder::new("b")
                    .alloc("cpu", "4")
                    .alloc("memory", "10000")
                    .info(),
            ];
            // a with the footprint: cpu 0.5 and mem 0.5 -> 100; a best-effort pod: cpu 0.5, mem 0 -> 75.
            // b (no footprint): cpu 0, mem 0.5 -> 75; best-effort: 0 and 0 -> 100.
            assert_eq!(run(&pl, &mut state, &c.pod.info(), nodes), c.want, "{}", c.name);
        }
    }
}
