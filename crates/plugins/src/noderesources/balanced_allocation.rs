//! `NodeResourcesBalancedAllocation`: prefers nodes whose resource utilisation becomes more
//! balanced across resources when the pod is placed (upstream `balanced_allocation.go`).
//!
//! Per resource with allocatable > 0, `fraction = min(requested / allocatable, 1)` using exact
//! requests; a node's balance is `⌊(1 − σ) × 100⌋` where σ is `|f₁ − f₂| / 2` for two resources
//! and the population standard deviation otherwise. The score is the *change* in balance that the
//! pod causes, as upstream 1.37 computes it (read in the 1.37.2 sources): `50 + (50 + balance with
//! the pod − balance without it) / 2`, so 75 means "no change", 100 the best improvement and 50 the
//! worst. Upstream up to 1.35 scored the balance with the pod alone; its test table moved with the
//! formula, and the table below is the 1.37.2 one.
//!
//! PreScore returns Skip for pods that request none of the configured resources (best-effort pods),
//! so they are not piled onto one node — unless DynamicResources recorded a node-allocatable
//! footprint for the pod on some node, which unisched scores like a spec request.

use std::sync::Arc;

use unisched_framework::{
    CycleState, NodeInfo, Plugin, PodInfo, PreScorePlugin, ScorePlugin, Status, score_each,
};

use super::{
    args::NodeResourcesBalancedAllocationArgs,
    scoring::{ResourceAllocationScorer, ScorePreState},
};
use crate::helper::PluginArgsError;
use crate::names::NODE_RESOURCES_BALANCED_ALLOCATION;
use crate::resource_scoring::Strategy;

const PRE_SCORE_KEY: &str = "PreScoreNodeResourcesBalancedAllocation";

/// Balanced resource utilisation.
#[derive(Clone, Debug)]
pub struct NodeResourcesBalancedAllocation {
    scorer: ResourceAllocationScorer,
}

impl NodeResourcesBalancedAllocation {
    /// Builds the plugin from args (defaults applied, then validated as upstream).
    pub fn new(args: &NodeResourcesBalancedAllocationArgs) -> Result<Self, PluginArgsError> {
        let mut args = args.clone();
        args.complete();
        args.validate()?;
        Ok(NodeResourcesBalancedAllocation {
            scorer: ResourceAllocationScorer::new(
                args.resources.iter().map(|r| (r.name.clone(), r.weight)),
                Strategy::Balanced,
                true,
                args.include_dra_footprint,
            ),
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
                    f.get(n.name())
                        .is_some_and(|extra| self.scorer.resource_names().any(|name| extra.get(name) != 0))
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
        let pre = ScorePreState::stored_or(state, PRE_SCORE_KEY, || self.scorer.pre_state(state, pod));
        self.scorer.score(node, &pre)
    }

    fn score_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        out: &mut [i64],
    ) -> Result<(), (usize, Status)> {
        let pre = ScorePreState::stored_or(state, PRE_SCORE_KEY, || self.scorer.pre_state(state, pod));
        score_each(nodes, out, |node| self.scorer.score(node, &pre))
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
        let one_by_one: Vec<i64> = arcs.iter().map(|n| pl.score(state, pod, n).unwrap()).collect();
        let mut all_at_once = vec![-1; arcs.len()];
        pl.score_nodes(state, pod, &arcs, &mut all_at_once).unwrap();
        assert_eq!(all_at_once, one_by_one, "score_nodes disagrees with score");
        Some(one_by_one)
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
        let gpu = "nvidia.com/gpu";
        let three = || {
            vec![
                ResourceSpec::new("cpu", 1),
                ResourceSpec::new("memory", 1),
                ResourceSpec::new(gpu, 1),
            ]
        };
        let node =
            |name: &str, cpu: &str, mem: &str| NodeBuilder::new(name).alloc("cpu", cpu).alloc("memory", mem);
        // Two containers: 1 CPU + 2000 B and 2 CPU + 3000 B, upstream's usual requested pod.
        let two_containers = |name: &str| {
            PodBuilder::new(name)
                .req("cpu", "1")
                .req("memory", "2000")
                .container("c1")
                .req("cpu", "2")
                .req("memory", "3000")
        };
        let cpu_only = |name: &str| {
            PodBuilder::new(name)
                .req("cpu", "1")
                .container("c1")
                .req("cpu", "2")
        };
        let on = |p: PodBuilder, node: &str| p.node_name(node).info();
        let cases = vec![
            Case {
                name: "best-effort pod is skipped",
                resources: vec![],
                pod: PodBuilder::new("p"),
                nodes: vec![n1().info()],
                want: None,
            },
            Case {
                // node1: 75% cpu, 50% mem (87, from 100) -> 68; node2: 50%, 50% (100, from 100) -> 75.
                name: "nothing scheduled, resources requested, differently sized nodes",
                resources: vec![],
                pod: two_containers("p"),
                nodes: vec![n1().info(), n2().info()],
                want: Some(vec![68, 75]),
            },
            Case {
                // node1: cpu 30% -> 60%, mem 0 -> 25% (85 -> 82); node2: 30 -> 60, 25 -> 50 (97 -> 95).
                name: "resources requested, pods scheduled with resources",
                resources: vec![],
                pod: two_containers("p"),
                nodes: vec![
                    node("node1", "10", "20000").info_with([on(cpu_only("e1"), "node1")]),
                    node("node2", "10", "20000").info_with([on(two_containers("e2"), "node2")]),
                ],
                want: Some(vec![73, 74]),
            },
            Case {
                // node2: cpu 30 -> 60, mem 10 -> 20 of 50000 (90 -> 80).
                name: "resources requested, pods scheduled with resources, differently sized nodes",
                resources: vec![],
                pod: two_containers("p"),
                nodes: vec![
                    node("node1", "10", "20000").info_with([on(cpu_only("e1"), "node1")]),
                    node("node2", "10", "50000").info_with([on(two_containers("e2"), "node2")]),
                ],
                want: Some(vec![73, 70]),
            },
            Case {
                // node1: cpu 100%, mem 0 -> 100% (50 -> 100); node2: mem 0 -> 100% (100 -> 50).
                name: "nodes to reach min/max score",
                resources: vec![],
                pod: PodBuilder::new("p")
                    .req("memory", "2000")
                    .container("c1")
                    .req("memory", "3000"),
                nodes: vec![
                    node("node1", "3", "5000").info_with([on(cpu_only("e1"), "node1")]),
                    node("node2", "3", "5000").info(),
                ],
                want: Some(vec![100, 50]),
            },
            Case {
                // node1: cpu 50 -> 100, mem 0 (75 -> 50); node2: cpu 50 -> 100, mem 50 (100 -> 75).
                name: "requested resources at node capacity",
                resources: vec![],
                pod: cpu_only("p"),
                nodes: vec![
                    node("node1", "6", "10000").info_with([on(cpu_only("e1"), "node1")]),
                    node("node2", "6", "10000").info_with([on(two_containers("e2"), "node2")]),
                ],
                want: Some(vec![62, 62]),
            },
            Case {
                // node1: gpu 3 -> 4 of 8 (69 -> 70); node2: gpu 0 -> 1 (62 -> 65).
                name: "a scalar resource the pod requests is scored",
                resources: three(),
                pod: PodBuilder::new("p")
                    .req("cpu", "0")
                    .req("memory", "0")
                    .req(gpu, "1"),
                nodes: vec![
                    node("node1", "3500m", "40000").alloc(gpu, "8").info_with([on(
                        PodBuilder::new("e1")
                            .req("cpu", "1")
                            .req("memory", "2000")
                            .container("c1")
                            .req("cpu", "2")
                            .req("memory", "3000")
                            .req(gpu, "3"),
                        "node1",
                    )]),
                    node("node2", "3500m", "40000")
                        .alloc(gpu, "8")
                        .info_with([on(two_containers("e2"), "node2")]),
                ],
                want: Some(vec![75, 76]),
            },
            Case {
                // cpu 0 -> 85.7%, mem 0 -> 12.5%, gpu left out (100 -> 63).
                name: "a scalar resource the pod does not request is left out",
                resources: three(),
                pod: two_containers("p"),
                nodes: vec![
                    node("node1", "3500m", "40000").alloc(gpu, "8").info(),
                    node("node2", "3500m", "40000").info(),
                ],
                want: Some(vec![56, 56]),
            },
            Case {
                // cpu 25 -> 50, mem 0 -> 10 (87 -> 80).
                name: "existing pods count with exact requests",
                resources: vec![],
                pod: PodBuilder::new("p").req("cpu", "1").req("memory", "1000"),
                nodes: vec![n1().info_with([PodBuilder::new("e").node_name("node1").req("cpu", "1").info()])],
                want: Some(vec![71]),
            },
            Case {
                // cpu capped at 100%, mem ~0 (100 -> 50).
                name: "over capacity capped at one",
                resources: vec![],
                pod: PodBuilder::new("p").req("cpu", "8").req("memory", "1"),
                nodes: vec![n1().info()],
                want: Some(vec![50]),
            },
            Case {
                // fractions 0.25, 0.5, 0.75 (100 -> 79).
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
                want: Some(vec![64]),
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
                want: Some(vec![75, 62]),
            },
            Case {
                name: "footprint disabled",
                pod: PodBuilder::new("p").req("memory", "5000"),
                include: false,
                want: Some(vec![62, 62]),
            },
            Case {
                name: "best-effort pod with a footprint is scored",
                pod: PodBuilder::new("p"),
                include: true,
                want: Some(vec![62, 75]),
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
            // Both nodes start empty (balance 100). a with the footprint: cpu 0.5 and mem 0.5 -> 100,
            // no change -> 75; a best-effort pod: cpu 0.5, mem 0 -> 75 -> 62. b (no footprint):
            // cpu 0, mem 0.5 -> 75 -> 62; best-effort: nothing changes -> 75.
            assert_eq!(run(&pl, &mut state, &c.pod.info(), nodes), c.want, "{}", c.name);
        }
    }
}
