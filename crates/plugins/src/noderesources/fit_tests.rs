//! NodeResourcesFit's tests: Filter and Score tables, and the queueing hints (upstream's tables).

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        core::v1::{ContainerStatus, PodStatus, ResourceRequirements},
        resource::v1::DeviceClassSpec,
    },
    apimachinery::pkg::{api::resource::Quantity, apis::meta::v1::ObjectMeta},
};
use unisched_framework::{NODE_FOOTPRINTS_KEY, NodeFootprints};

use super::*;
use crate::{
    noderesources::args::{
        RequestedToCapacityRatioParam, ResourceSpec, ScoringStrategy, UtilizationShapePoint,
    },
    testing::{NodeBuilder, PodBuilder},
};

struct Classes(BTreeMap<&'static str, &'static str>);
impl ExtendedResourceResolver for Classes {
    fn device_class_for(&self, resource: &str) -> Option<String> {
        self.0.get(resource).map(|c| c.to_string())
    }
}

fn gpu_resolver() -> Option<Arc<dyn ExtendedResourceResolver>> {
    Some(Arc::new(Classes(
        [("example.com/gpu", "gpu.example.com")].into_iter().collect(),
    )))
}

fn fit(args: NodeResourcesFitArgs) -> NodeResourcesFit {
    NodeResourcesFit::new(&args, None).unwrap()
}

/// 10 cpu, 20 bytes of memory (upstream's fit_test shape), 32 pods, 5 example.com/foo,
/// 2 hugepages-2Mi units, 20 bytes of ephemeral storage.
fn node(existing: Vec<PodBuilder>) -> NodeInfo {
    NodeBuilder::new("n")
        .alloc("cpu", "10m")
        .alloc("memory", "20")
        .alloc("pods", "32")
        .alloc("example.com/foo", "5")
        .alloc("ephemeral-storage", "20")
        .info_with(existing.into_iter().map(|p| p.node_name("n").info()))
}

fn used(cpu: &str, mem: &str) -> PodBuilder {
    PodBuilder::new(&format!("used-{cpu}-{mem}"))
        .req("cpu", cpu)
        .req("memory", mem)
}

#[test]
fn filter_table() {
    struct Case {
        name: &'static str,
        plugin: NodeResourcesFit,
        pod: PodBuilder,
        node: NodeInfo,
        code: Code,
        reasons: Vec<&'static str>,
    }
    let default = || fit(NodeResourcesFitArgs::default());
    let many_pods = || {
        NodeBuilder::new("n")
            .alloc("pods", "1")
            .alloc("cpu", "10m")
            .info_with([PodBuilder::new("e").node_name("n").info()])
    };
    let cases = vec![
        Case {
            name: "no requests on an empty node",
            plugin: default(),
            pod: PodBuilder::new("p"),
            node: node(vec![]),
            code: Code::Success,
            reasons: vec![],
        },
        Case {
            name: "no requests on a full node",
            plugin: default(),
            pod: PodBuilder::new("p"),
            node: node(vec![used("10m", "20")]),
            code: Code::Success,
            reasons: vec![],
        },
        Case {
            name: "too much cpu",
            plugin: default(),
            pod: PodBuilder::new("p").req("cpu", "1m").req("memory", "1"),
            node: node(vec![used("10m", "20")]),
            code: Code::Unschedulable,
            reasons: vec!["Insufficient cpu", "Insufficient memory"],
        },
        Case {
            name: "fits exactly",
            plugin: default(),
            pod: PodBuilder::new("p").req("cpu", "5m").req("memory", "10"),
            node: node(vec![used("5m", "10")]),
            code: Code::Success,
            reasons: vec![],
        },
        Case {
            name: "init container max counts",
            plugin: default(),
            pod: PodBuilder::new("p")
                .req("cpu", "1m")
                .req("memory", "1")
                .init_container("i", &[("cpu", "3m"), ("memory", "1")]),
            node: node(vec![used("8m", "19")]),
            code: Code::Unschedulable,
            reasons: vec!["Insufficient cpu"],
        },
        Case {
            name: "sidecar adds to containers",
            plugin: default(),
            pod: PodBuilder::new("p")
                .req("cpu", "1m")
                .sidecar("s", &[("cpu", "1m")]),
            node: node(vec![used("9m", "0")]),
            code: Code::Unschedulable,
            reasons: vec!["Insufficient cpu"],
        },
        Case {
            name: "overhead counts",
            plugin: default(),
            pod: PodBuilder::new("p").req("cpu", "1m").overhead("cpu", "1m"),
            node: node(vec![used("9m", "0")]),
            code: Code::Unschedulable,
            reasons: vec!["Insufficient cpu"],
        },
        Case {
            name: "larger than the node is unresolvable",
            plugin: default(),
            pod: PodBuilder::new("p").req("cpu", "11m").req("memory", "1"),
            node: node(vec![used("9m", "19")]),
            code: Code::UnschedulableAndUnresolvable,
            reasons: vec!["Insufficient cpu"],
        },
        Case {
            name: "ephemeral storage",
            plugin: default(),
            pod: PodBuilder::new("p").req("ephemeral-storage", "25"),
            node: node(vec![]),
            code: Code::UnschedulableAndUnresolvable,
            reasons: vec!["Insufficient ephemeral-storage"],
        },
        Case {
            name: "extended resource insufficient",
            plugin: default(),
            pod: PodBuilder::new("p").req("example.com/foo", "3"),
            node: node(vec![PodBuilder::new("e").req("example.com/foo", "3")]),
            code: Code::Unschedulable,
            reasons: vec!["Insufficient example.com/foo"],
        },
        Case {
            name: "unknown extended resource",
            plugin: default(),
            pod: PodBuilder::new("p").req("example.com/bar", "1"),
            node: node(vec![]),
            code: Code::UnschedulableAndUnresolvable,
            reasons: vec!["Insufficient example.com/bar"],
        },
        Case {
            name: "hugepages are scalars too",
            plugin: default(),
            pod: PodBuilder::new("p").req("hugepages-2Mi", "2Mi"),
            node: node(vec![]),
            code: Code::UnschedulableAndUnresolvable,
            reasons: vec!["Insufficient hugepages-2Mi"],
        },
        Case {
            name: "ignored resource",
            plugin: fit(NodeResourcesFitArgs {
                ignored_resources: vec!["example.com/bar".into()],
                ..NodeResourcesFitArgs::default()
            }),
            pod: PodBuilder::new("p").req("example.com/bar", "1"),
            node: node(vec![]),
            code: Code::Success,
            reasons: vec![],
        },
        Case {
            name: "ignored group",
            plugin: fit(NodeResourcesFitArgs {
                ignored_resource_groups: vec!["example.com".into()],
                ..NodeResourcesFitArgs::default()
            }),
            pod: PodBuilder::new("p").req("example.com/bar", "1"),
            node: node(vec![]),
            code: Code::Success,
            reasons: vec![],
        },
        Case {
            name: "ignored group does not cover native resources",
            plugin: fit(NodeResourcesFitArgs {
                ignored_resource_groups: vec!["hugepages-2Mi".into()],
                ..NodeResourcesFitArgs::default()
            }),
            pod: PodBuilder::new("p").req("hugepages-2Mi", "2Mi"),
            node: node(vec![]),
            code: Code::UnschedulableAndUnresolvable,
            reasons: vec!["Insufficient hugepages-2Mi"],
        },
        Case {
            name: "too many pods even without requests",
            plugin: default(),
            pod: PodBuilder::new("p"),
            node: many_pods(),
            code: Code::Unschedulable,
            reasons: vec!["Too many pods"],
        },
        Case {
            name: "too many pods and cpu",
            plugin: default(),
            pod: PodBuilder::new("p").req("cpu", "20m"),
            node: many_pods(),
            code: Code::UnschedulableAndUnresolvable,
            reasons: vec!["Too many pods", "Insufficient cpu"],
        },
        Case {
            name: "DRA-backed extended resource is delegated",
            plugin: NodeResourcesFit::new(&NodeResourcesFitArgs::default(), gpu_resolver()).unwrap(),
            pod: PodBuilder::new("p").req("example.com/gpu", "1"),
            node: node(vec![]),
            code: Code::Success,
            reasons: vec![],
        },
        Case {
            name: "device-plugin capacity is checked here even with a class",
            plugin: NodeResourcesFit::new(&NodeResourcesFitArgs::default(), gpu_resolver()).unwrap(),
            pod: PodBuilder::new("p").req("example.com/gpu", "2"),
            node: NodeBuilder::new("n").alloc("example.com/gpu", "1").info(),
            code: Code::UnschedulableAndUnresolvable,
            reasons: vec!["Insufficient example.com/gpu"],
        },
        Case {
            name: "no class, no delegation",
            plugin: NodeResourcesFit::new(&NodeResourcesFitArgs::default(), gpu_resolver()).unwrap(),
            pod: PodBuilder::new("p").req("example.com/tpu", "1"),
            node: node(vec![]),
            code: Code::UnschedulableAndUnresolvable,
            reasons: vec!["Insufficient example.com/tpu"],
        },
    ];
    for c in cases {
        let pod = c.pod.info();
        let (_, pre) = c.plugin.pre_filter(&mut CycleState::new(), &pod, &[]);
        assert!(pre.is_success(), "{}: {pre}", c.name);
        let s = c.plugin.filter(&CycleState::new(), &pod, &c.node);
        assert_eq!(s.code(), c.code, "{}: {s}", c.name);
        assert_eq!(s.reasons(), c.reasons, "{}", c.name);
    }
}

#[test]
fn invalid_quantities_are_rejected_in_pre_filter() {
    let pod = PodBuilder::new("p").req("cpu", "lots").info();
    let (_, s) = fit(NodeResourcesFitArgs::default()).pre_filter(&mut CycleState::new(), &pod, &[]);
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(
        s.message(),
        "pod has an invalid quantity \"lots\" for resource \"cpu\""
    );
}

fn score_all(pl: &NodeResourcesFit, state: &mut CycleState, pod: &PodInfo, nodes: &[NodeInfo]) -> Vec<i64> {
    let arcs: Vec<Arc<NodeInfo>> = nodes.iter().cloned().map(Arc::new).collect();
    assert!(pl.pre_score(state, pod, &arcs).is_success());
    let one_by_one: Vec<i64> = arcs.iter().map(|n| pl.score(state, pod, n).unwrap()).collect();
    let mut all_at_once = vec![-1; arcs.len()];
    pl.score_nodes(state, pod, &arcs, &mut all_at_once).unwrap();
    assert_eq!(all_at_once, one_by_one, "score_nodes disagrees with score");
    one_by_one
}

fn strategy(
    type_: &str,
    resources: Vec<ResourceSpec>,
    shape: Option<Vec<(i32, i32)>>,
) -> NodeResourcesFitArgs {
    NodeResourcesFitArgs {
        scoring_strategy: Some(ScoringStrategy {
            type_: type_.into(),
            resources,
            requested_to_capacity_ratio: shape.map(|s| RequestedToCapacityRatioParam {
                shape: s
                    .into_iter()
                    .map(|(u, sc)| UtilizationShapePoint {
                        utilization: u,
                        score: sc,
                    })
                    .collect(),
            }),
        }),
        ..NodeResourcesFitArgs::default()
    }
}

#[test]
fn score_table() {
    struct Case {
        name: &'static str,
        args: NodeResourcesFitArgs,
        pod: PodBuilder,
        nodes: Vec<NodeInfo>,
        want: Vec<i64>,
    }
    // Upstream least_allocated_test: node1 4000m/10000, node2 6000m/10000.
    let n1 = || {
        NodeBuilder::new("node1")
            .alloc("cpu", "4")
            .alloc("memory", "10000")
            .info()
    };
    let n2 = || {
        NodeBuilder::new("node2")
            .alloc("cpu", "6")
            .alloc("memory", "10000")
            .info()
    };
    let cpu_mem = || vec![ResourceSpec::new("cpu", 1), ResourceSpec::new("memory", 1)];
    let cases = vec![
        Case {
            name: "least: nothing scheduled, requests on differently sized nodes",
            args: NodeResourcesFitArgs::default(),
            pod: PodBuilder::new("p")
                .req("cpu", "1")
                .req("memory", "2000")
                .container("c1")
                .req("cpu", "2")
                .req("memory", "3000"),
            nodes: vec![n1(), n2()],
            // cpu (4000-3000)/4000 -> 25, mem (10000-5000)/10000 -> 50 => 37; cpu 50, mem 50 => 50
            want: vec![37, 50],
        },
        Case {
            name: "least: best-effort pod counts the non-zero defaults",
            args: NodeResourcesFitArgs::default(),
            pod: PodBuilder::new("p"),
            nodes: vec![
                NodeBuilder::new("n")
                    .alloc("cpu", "1")
                    .alloc("memory", "400Mi")
                    .info(),
            ],
            // cpu (1000-100)/1000 -> 90, mem (400-200)/400 -> 50 => 70
            want: vec![70],
        },
        Case {
            name: "least: existing pods use non-zero requests",
            args: NodeResourcesFitArgs::default(),
            pod: PodBuilder::new("p").req("cpu", "100m").req("memory", "200Mi"),
            nodes: vec![
                NodeBuilder::new("n")
                    .alloc("cpu", "1")
                    .alloc("memory", "800Mi")
                    .info_with([PodBuilder::new("e").node_name("n").info()]),
            ],
            // cpu (1000-200)/1000 -> 80, mem (800-400)/800 -> 50 => 65
            want: vec![65],
        },
        Case {
            name: "most allocated",
            args: strategy("MostAllocated", cpu_mem(), None),
            pod: PodBuilder::new("p")
                .req("cpu", "1")
                .req("memory", "2000")
                .container("c1")
                .req("cpu", "2")
                .req("memory", "3000"),
            nodes: vec![n1(), n2()],
            // cpu 75, mem 50 => 62; cpu 50, mem 50 => 50
            want: vec![62, 50],
        },
        Case {
            name: "weights",
            args: strategy(
                "LeastAllocated",
                vec![ResourceSpec::new("cpu", 3), ResourceSpec::new("memory", 1)],
                None,
            ),
            pod: PodBuilder::new("p").req("cpu", "3").req("memory", "5000"),
            nodes: vec![n1()],
            want: vec![31],
        },
        Case {
            name: "requested to capacity ratio, bin packing shape",
            args: strategy(
                "RequestedToCapacityRatio",
                cpu_mem(),
                Some(vec![(0, 0), (100, 10)]),
            ),
            pod: PodBuilder::new("p").req("cpu", "3").req("memory", "5000"),
            nodes: vec![n1(), n2()],
            // cpu 75 mem 50 => 62.5 -> 63; cpu 50 mem 50 => 50
            want: vec![63, 50],
        },
        Case {
            name: "extended resource not requested is ignored",
            args: strategy(
                "MostAllocated",
                vec![
                    ResourceSpec::new("cpu", 1),
                    ResourceSpec::new("example.com/foo", 5),
                ],
                None,
            ),
            pod: PodBuilder::new("p").req("cpu", "2"),
            nodes: vec![
                NodeBuilder::new("n")
                    .alloc("cpu", "4")
                    .alloc("example.com/foo", "4")
                    .info(),
            ],
            want: vec![50],
        },
        Case {
            name: "extended resource requested is weighted",
            args: strategy(
                "MostAllocated",
                vec![
                    ResourceSpec::new("cpu", 1),
                    ResourceSpec::new("example.com/foo", 3),
                ],
                None,
            ),
            pod: PodBuilder::new("p").req("cpu", "2").req("example.com/foo", "4"),
            nodes: vec![
                NodeBuilder::new("n")
                    .alloc("cpu", "4")
                    .alloc("example.com/foo", "4")
                    .info(),
            ],
            // (50*1 + 100*3)/4 = 87
            want: vec![87],
        },
        Case {
            name: "resource absent on node is ignored",
            args: strategy(
                "LeastAllocated",
                vec![
                    ResourceSpec::new("cpu", 1),
                    ResourceSpec::new("example.com/foo", 3),
                ],
                None,
            ),
            pod: PodBuilder::new("p").req("cpu", "1").req("example.com/foo", "1"),
            nodes: vec![NodeBuilder::new("n").alloc("cpu", "4").info()],
            want: vec![75],
        },
    ];
    for c in cases {
        let pl = NodeResourcesFit::new(&c.args, None).unwrap();
        let got = score_all(&pl, &mut CycleState::new(), &c.pod.info(), &c.nodes);
        assert_eq!(got, c.want, "{}", c.name);
    }
}

#[test]
fn footprint_is_added_when_enabled() {
    struct Case {
        name: &'static str,
        include: bool,
        record: bool,
        want: Vec<i64>,
    }
    let cases = [
        Case {
            name: "footprint recorded and included",
            include: true,
            record: true,
            want: vec![25, 50],
        },
        Case {
            name: "footprint ignored when disabled",
            include: false,
            record: true,
            want: vec![75, 50],
        },
        Case {
            name: "nothing recorded",
            include: true,
            record: false,
            want: vec![75, 50],
        },
    ];
    for c in cases {
        let args = NodeResourcesFitArgs {
            include_dra_footprint: c.include,
            ..strategy("LeastAllocated", vec![ResourceSpec::new("cpu", 1)], None)
        };
        let pl = NodeResourcesFit::new(&args, None).unwrap();
        let nodes = [
            NodeBuilder::new("a").alloc("cpu", "4").info(),
            NodeBuilder::new("b").alloc("cpu", "4").info(),
        ];
        let mut state = CycleState::new();
        if c.record {
            let fp = NodeFootprints::default();
            let extra = Resource {
                milli_cpu: 2000,
                ..Resource::default()
            };
            fp.set("a", extra);
            state.write(NODE_FOOTPRINTS_KEY, fp);
        }
        let pod = PodBuilder::new("p").req("cpu", "1").info();
        // a is empty: (4000 - 1000 - 2000 of footprint) / 4000 -> 25, or 75 without the footprint.
        // b has 1 cpu requested already and no footprint: (4000 - 2000) / 4000 -> 50.
        let mut b = nodes[1].clone();
        b.add_pod(Arc::new(
            PodBuilder::new("e").req("cpu", "1").node_name("b").info(),
        ));
        let got = score_all(&pl, &mut state, &pod, &[nodes[0].clone(), b]);
        assert_eq!(got, c.want, "{}", c.name);
    }
}

fn node_obj(allocs: &[(&str, &str)]) -> Node {
    allocs
        .iter()
        .fold(NodeBuilder::new("n"), |b, (k, v)| b.alloc(k, v))
        .build()
}

#[test]
fn node_hint_table() {
    struct Case {
        name: &'static str,
        pod: PodBuilder,
        old: Option<Node>,
        new: Node,
        resolver: bool,
        want: QueueingHint,
    }
    let cases = vec![
        Case {
            name: "added node fits",
            pod: PodBuilder::new("p").req("cpu", "1"),
            old: None,
            new: node_obj(&[("cpu", "2")]),
            resolver: false,
            want: QueueingHint::Queue,
        },
        Case {
            name: "added node too small",
            pod: PodBuilder::new("p").req("cpu", "4"),
            old: None,
            new: node_obj(&[("cpu", "2")]),
            resolver: false,
            want: QueueingHint::Skip,
        },
        Case {
            name: "cpu increased",
            pod: PodBuilder::new("p").req("cpu", "1"),
            old: Some(node_obj(&[("cpu", "1")])),
            new: node_obj(&[("cpu", "2")]),
            resolver: false,
            want: QueueingHint::Queue,
        },
        Case {
            name: "unrequested resource increased",
            pod: PodBuilder::new("p").req("cpu", "1"),
            old: Some(node_obj(&[("cpu", "2"), ("memory", "1Gi")])),
            new: node_obj(&[("cpu", "2"), ("memory", "2Gi")]),
            resolver: false,
            want: QueueingHint::Skip,
        },
        Case {
            name: "pods increased",
            pod: PodBuilder::new("p"),
            old: Some(node_obj(&[("pods", "10")])),
            new: node_obj(&[("pods", "20")]),
            resolver: false,
            want: QueueingHint::Queue,
        },
        Case {
            name: "still does not fit",
            pod: PodBuilder::new("p").req("cpu", "4"),
            old: Some(node_obj(&[("cpu", "1")])),
            new: node_obj(&[("cpu", "2")]),
            resolver: false,
            want: QueueingHint::Skip,
        },
        Case {
            name: "extended resource now delegable",
            pod: PodBuilder::new("p").req("example.com/gpu", "1"),
            old: Some(node_obj(&[("cpu", "1")])),
            new: node_obj(&[("cpu", "1"), ("memory", "1")]),
            resolver: true,
            want: QueueingHint::Queue,
        },
    ];
    for c in cases {
        let pl = NodeResourcesFit::new(
            &NodeResourcesFitArgs::default(),
            if c.resolver { gpu_resolver() } else { None },
        )
        .unwrap();
        let events = pl.events_to_register();
        let hint = events[1].hint.clone().unwrap();
        let old = c.old.map(|n| EventObject::Node(Arc::new(n)));
        let new = EventObject::Node(Arc::new(c.new));
        assert_eq!(
            hint(&c.pod.build(), old.as_ref(), Some(&new)).unwrap(),
            c.want,
            "{}",
            c.name
        );
    }
}

/// Bound pod `d` with a cpu request of `spec` whose container reports `allocated` and
/// `actuated` cpu (an in-place resize under way).
fn resizing(spec: &str, allocated: &str, actuated: &str) -> Pod {
    let mut p = PodBuilder::new("d").node_name("n").req("cpu", spec).build();
    let cpu = |v: &str| Some(BTreeMap::from([("cpu".to_string(), Quantity(v.to_string()))]));
    p.status = Some(PodStatus {
        container_statuses: Some(vec![ContainerStatus {
            name: "c0".into(),
            allocated_resources: cpu(allocated),
            resources: Some(ResourceRequirements {
                requests: cpu(actuated),
                ..ResourceRequirements::default()
            }),
            ..ContainerStatus::default()
        }]),
        ..PodStatus::default()
    });
    p
}

#[test]
fn pod_hint_table() {
    struct Case {
        name: &'static str,
        old: Option<Pod>,
        new: Option<Pod>,
        want: QueueingHint,
    }
    let target = PodBuilder::new("p").req("cpu", "1").build();
    let cases = vec![
        Case {
            name: "assigned pod deleted",
            old: Some(PodBuilder::new("d").node_name("n").build()),
            new: None,
            want: QueueingHint::Queue,
        },
        Case {
            name: "nominated pod deleted",
            old: Some(PodBuilder::new("d").nominated_node("n").build()),
            new: None,
            want: QueueingHint::Queue,
        },
        Case {
            name: "unscheduled pod deleted",
            old: Some(PodBuilder::new("d").build()),
            new: None,
            want: QueueingHint::Skip,
        },
        Case {
            name: "assigned pod scaled down cpu",
            old: Some(PodBuilder::new("d").node_name("n").req("cpu", "2").build()),
            new: Some(PodBuilder::new("d").node_name("n").req("cpu", "1").build()),
            want: QueueingHint::Queue,
        },
        Case {
            name: "assigned pod scaled down memory only",
            old: Some(PodBuilder::new("d").node_name("n").req("memory", "2Gi").build()),
            new: Some(PodBuilder::new("d").node_name("n").req("memory", "1Gi").build()),
            want: QueueingHint::Skip,
        },
        Case {
            name: "unscheduled pod scaled down",
            old: Some(PodBuilder::new("d").req("cpu", "2").build()),
            new: Some(PodBuilder::new("d").req("cpu", "1").build()),
            want: QueueingHint::Skip,
        },
        Case {
            name: "the pod itself scaled down",
            old: Some(PodBuilder::new("p").req("cpu", "2").build()),
            new: Some(PodBuilder::new("p").req("cpu", "1").build()),
            want: QueueingHint::Queue,
        },
        Case {
            name: "assigned pod resized down in place: the runtime applied it",
            old: Some(resizing("1", "1", "2")),
            new: Some(resizing("1", "1", "1")),
            want: QueueingHint::Queue,
        },
        Case {
            name: "assigned pod resized down in place: still running the old size",
            old: Some(resizing("2", "2", "2")),
            new: Some(resizing("1", "1", "2")),
            want: QueueingHint::Skip,
        },
    ];
    let pl = fit(NodeResourcesFitArgs::default());
    let events = pl.events_to_register();
    assert_eq!(events.len(), 2, "no DeviceClass event without a resolver");
    let hint = events[0].hint.clone().unwrap();
    for c in cases {
        let old = c.old.map(EventObject::pod);
        let new = c.new.map(EventObject::pod);
        assert_eq!(
            hint(&target, old.as_ref(), new.as_ref()).unwrap(),
            c.want,
            "{}",
            c.name
        );
    }
}

#[test]
fn device_class_hint_table() {
    fn class(name: &str, ext: Option<&str>) -> DeviceClass {
        DeviceClass {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: Some(DeviceClassSpec {
                extended_resource_name: ext.map(String::from),
                ..DeviceClassSpec::default()
            }),
        }
    }
    struct Case {
        name: &'static str,
        pod: PodBuilder,
        old: Option<DeviceClass>,
        new: DeviceClass,
        want: QueueingHint,
    }
    let cases = vec![
        Case {
            name: "class added with the pod's resource",
            pod: PodBuilder::new("p").req("example.com/gpu", "1"),
            old: None,
            new: class("gpu", Some("example.com/gpu")),
            want: QueueingHint::Queue,
        },
        Case {
            name: "class added for the implicit name",
            pod: PodBuilder::new("p").req("deviceclass.resource.kubernetes.io/gpu", "1"),
            old: None,
            new: class("gpu", None),
            want: QueueingHint::Queue,
        },
        Case {
            name: "unrelated class added",
            pod: PodBuilder::new("p").req("example.com/gpu", "1"),
            old: None,
            new: class("tpu", Some("example.com/tpu")),
            want: QueueingHint::Skip,
        },
        Case {
            name: "extended name unchanged",
            pod: PodBuilder::new("p").req("example.com/gpu", "1"),
            old: Some(class("gpu", Some("example.com/gpu"))),
            new: class("gpu", Some("example.com/gpu")),
            want: QueueingHint::Skip,
        },
        Case {
            name: "extended name set",
            pod: PodBuilder::new("p").req("example.com/gpu", "1"),
            old: Some(class("gpu", None)),
            new: class("gpu", Some("example.com/gpu")),
            want: QueueingHint::Queue,
        },
    ];
    let pl = NodeResourcesFit::new(&NodeResourcesFitArgs::default(), gpu_resolver()).unwrap();
    let events = pl.events_to_register();
    assert_eq!(events[2].event.resource, EventResource::DeviceClass);
    let hint = events[2].hint.clone().unwrap();
    for c in cases {
        let old = c.old.map(|d| EventObject::DeviceClass(Arc::new(d)));
        let new = EventObject::DeviceClass(Arc::new(c.new));
        assert_eq!(
            hint(&c.pod.build(), old.as_ref(), Some(&new)).unwrap(),
            c.want,
            "{}",
            c.name
        );
    }
}

/// Compares a hint's answer with `want`; `None` means the hint must fail.
fn check_hint(got: Result<QueueingHint, QueueingHintError>, want: Option<QueueingHint>, name: &str) {
    match (got, want) {
        (Ok(got), Some(want)) => assert_eq!(got, want, "{name}"),
        (Err(_), None) => {}
        (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
    }
}

/// A pod-level (`spec.resources`) request map on `pod`.
fn pod_level(mut pod: Pod, requests: &[(&str, &str)]) -> Pod {
    let spec = pod.spec.as_mut().unwrap();
    spec.resources = Some(ResourceRequirements {
        requests: Some(
            requests
                .iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect(),
        ),
        ..ResourceRequirements::default()
    });
    pod
}

/// A pod asking for `resource` only at pod level (no container requests).
fn pod_level_req(name: &str, node: Option<&str>, resource: &str, quantity: &str) -> Pod {
    let b = PodBuilder::new(name);
    let b = match node {
        Some(n) => b.node_name(n),
        None => b,
    };
    pod_level(b.build(), &[(resource, quantity)])
}

/// A pod on `node` whose in-place resize the kubelet deferred.
fn resize_deferred(name: &str, node: &str) -> Pod {
    let mut p = PodBuilder::new(name).node_name(node).req("cpu", "1").build();
    p.status.get_or_insert_with(PodStatus::default).conditions =
        Some(vec![k8s_openapi::api::core::v1::PodCondition {
            type_: "PodResizePending".into(),
            status: "True".into(),
            reason: Some("Deferred".into()),
            ..k8s_openapi::api::core::v1::PodCondition::default()
        }]);
    p
}

/// Upstream's `Test_isSchedulableAfterAssignedPodDelete`, on our pod hint (deletions arrive
/// with no new object).
///
/// The two "when-deferred" cases run upstream with InPlacePodVerticalScalingSchedulerPreemption
/// on; unisched implements that alpha gate off only, and with it off upstream queues on any
/// assigned pod's deletion, deferred resize or not. Those are the answers asserted here.
#[test]
fn assigned_pod_delete_hints() {
    struct Case {
        name: &'static str,
        pod: Pod,
        old: EventObject,
        want: Option<QueueingHint>,
    }
    let pod1 = || PodBuilder::new("pod1").req("cpu", "1").build();
    let cases = vec![
        Case {
            name: "backoff-wrong-old-object",
            pod: Pod::default(),
            old: EventObject::Other,
            want: None,
        },
        Case {
            name: "queue-on-other-pod-deleted",
            pod: pod1(),
            old: EventObject::pod(PodBuilder::new("pod2").req("cpu", "1").node_name("fake").build()),
            want: Some(QueueingHint::Queue),
        },
        Case {
            name: "skip-queue-on-unscheduled-pod-deleted",
            pod: Pod::default(),
            old: EventObject::pod(Pod::default()),
            want: Some(QueueingHint::Skip),
        },
        Case {
            name: "queue-on-nominated-pod-deleted",
            pod: pod1(),
            old: EventObject::pod(
                PodBuilder::new("pod2")
                    .req("cpu", "2")
                    .nominated_node("fake")
                    .build(),
            ),
            want: Some(QueueingHint::Queue),
        },
        Case {
            name: "other-pod-deleted-different-node-when-deferred (gate off)",
            pod: resize_deferred("pod1", "node1"),
            old: EventObject::pod(PodBuilder::new("pod2").req("cpu", "1").node_name("node2").build()),
            want: Some(QueueingHint::Queue),
        },
        Case {
            name: "queue-on-other-pod-deleted-same-node-when-deferred",
            pod: resize_deferred("pod1", "node1"),
            old: EventObject::pod(PodBuilder::new("pod2").req("cpu", "1").node_name("node1").build()),
            want: Some(QueueingHint::Queue),
        },
    ];
    let hint = fit(NodeResourcesFitArgs::default()).events_to_register()[0]
        .hint
        .clone()
        .unwrap();
    for c in cases {
        check_hint(hint(&c.pod, Some(&c.old), None), c.want, c.name);
    }
}

/// Upstream's `Test_isSchedulableAfterTargetPodScaleDown`: the waiting pod's own scale-down
/// always requeues it. Upstream hands that hint no objects; ours sees the pod's own update.
#[test]
fn target_pod_scale_down_hints() {
    let cases = [
        (
            "queue-on-target-pod-some-resource-scale-down",
            PodBuilder::new("pod1").req("cpu", "2").build(),
            PodBuilder::new("pod1").req("cpu", "1").build(),
        ),
        (
            "queue-on-target-pod-some-pod-level-resource-scale-down",
            pod_level_req("pod1", None, "cpu", "2"),
            pod_level_req("pod1", None, "cpu", "1"),
        ),
    ];
    let hint = fit(NodeResourcesFitArgs::default()).events_to_register()[0]
        .hint
        .clone()
        .unwrap();
    for (name, old, new) in cases {
        let got = hint(
            &new,
            Some(&EventObject::pod(old)),
            Some(&EventObject::pod(new.clone())),
        );
        check_hint(got, Some(QueueingHint::Queue), name);
    }
}

/// Upstream's `Test_isSchedulableAfterAssignedPodScaleDown`. The two "when-deferred" cases are
/// asserted with InPlacePodVerticalScalingSchedulerPreemption off (see
/// [`assigned_pod_delete_hints`]): a cpu scale-down on any node then requeues.
#[test]
fn assigned_pod_scale_down_hints() {
    struct Case {
        name: &'static str,
        pod: Pod,
        old: Option<EventObject>,
        new: Option<EventObject>,
        want: Option<QueueingHint>,
    }
    let pod1 = || PodBuilder::new("pod1").req("cpu", "1").build();
    let other = |node: Option<&str>, resource: &str, quantity: &str| {
        let b = PodBuilder::new("pod2").req(resource, quantity);
        EventObject::pod(match node {
            Some(n) => b.node_name(n).build(),
            None => b.build(),
        })
    };
    let cases = vec![
        Case {
            name: "backoff-wrong-old-object",
            pod: Pod::default(),
            old: Some(EventObject::Other),
            new: None,
            want: None,
        },
        Case {
            name: "backoff-wrong-new-object",
            pod: Pod::default(),
            old: None,
            new: Some(EventObject::Other),
            want: None,
        },
        Case {
            name: "skip-queue-on-other-unscheduled-pod",
            pod: pod1(),
            old: Some(other(None, "cpu", "2")),
            new: Some(other(None, "cpu", "1")),
            want: Some(QueueingHint::Skip),
        },
        Case {
            name: "skip-queue-on-other-pod-unrelated-resource-scaled-down",
            pod: pod1(),
            old: Some(other(Some("fake"), "memory", "2")),
            new: Some(other(Some("fake"), "memory", "1")),
            want: Some(QueueingHint::Skip),
        },
        Case {
            name: "skip-queue-on-other-pod-unrelated-pod-level-resource-scaled-down",
            pod: pod_level_req("pod1", None, "cpu", "1"),
            old: Some(EventObject::pod(pod_level_req(
                "pod2",
                Some("fake"),
                "memory",
                "2",
            ))),
            new: Some(EventObject::pod(pod_level_req(
                "pod2",
                Some("fake"),
                "memory",
                "1",
            ))),
            want: Some(QueueingHint::Skip),
        },
        Case {
            name: "queue-on-other-pod-some-resource-scale-down",
            pod: pod1(),
            old: Some(other(Some("fake"), "cpu", "2")),
            new: Some(other(Some("fake"), "cpu", "1")),
            want: Some(QueueingHint::Queue),
        },
        Case {
            name: "queue-on-other-pod-some-pod-level-resource-scale-down",
            pod: pod_level_req("pod1", None, "cpu", "1"),
            old: Some(EventObject::pod(pod_level_req("pod2", Some("fake"), "cpu", "2"))),
            new: Some(EventObject::pod(pod_level_req("pod2", Some("fake"), "cpu", "1"))),
            want: Some(QueueingHint::Queue),
        },
        Case {
            name: "other-pod-scaled-down-different-node-when-deferred (gate off)",
            pod: resize_deferred("pod1", "node1"),
            old: Some(other(Some("node2"), "cpu", "2")),
            new: Some(other(Some("node2"), "cpu", "1")),
            want: Some(QueueingHint::Queue),
        },
        Case {
            name: "queue-on-other-pod-scaled-down-same-node-when-deferred",
            pod: resize_deferred("pod1", "node1"),
            old: Some(other(Some("node1"), "cpu", "2")),
            new: Some(other(Some("node1"), "cpu", "1")),
            want: Some(QueueingHint::Queue),
        },
    ];
    let hint = fit(NodeResourcesFitArgs::default()).events_to_register()[0]
        .hint
        .clone()
        .unwrap();
    for c in cases {
        check_hint(hint(&c.pod, c.old.as_ref(), c.new.as_ref()), c.want, c.name);
    }
}

/// Upstream's `Test_isSchedulableAfterNodeChange` (upstream's `Capacity` sets allocatable too).
#[test]
fn node_change_hints() {
    struct Case {
        name: &'static str,
        pod: Pod,
        old: Option<EventObject>,
        new: Option<EventObject>,
        want: Option<QueueingHint>,
    }
    let node = |allocs: &[(&str, &str)]| Some(EventObject::Node(Arc::new(node_obj(allocs))));
    let mem_and_a = || {
        PodBuilder::new("p")
            .req("memory", "2")
            .req("example.com/aaa", "1")
            .build()
    };
    let cases = vec![
        Case {
            name: "backoff-wrong-new-object",
            pod: Pod::default(),
            old: None,
            new: Some(EventObject::Other),
            want: None,
        },
        Case {
            name: "backoff-wrong-old-object",
            pod: Pod::default(),
            old: Some(EventObject::Other),
            new: Some(EventObject::Node(Arc::new(Node::default()))),
            want: None,
        },
        Case {
            name: "skip-queue-on-node-add-without-sufficient-resources",
            pod: PodBuilder::new("p").req("memory", "2").build(),
            old: None,
            new: node(&[("memory", "1")]),
            want: Some(QueueingHint::Skip),
        },
        Case {
            name: "skip-queue-on-node-add-without-required-resource-type",
            pod: PodBuilder::new("p").req("example.com/aaa", "1").build(),
            old: None,
            new: node(&[("example.com/bbb", "1")]),
            want: Some(QueueingHint::Skip),
        },
        Case {
            name: "queue-on-node-add-with-sufficient-resources",
            pod: mem_and_a(),
            old: None,
            new: node(&[("memory", "4"), ("example.com/aaa", "2")]),
            want: Some(QueueingHint::Queue),
        },
        Case {
            name: "skip-queue-on-node-unrelated-changes",
            pod: mem_and_a(),
            old: node(&[("memory", "2"), ("example.com/aaa", "2")]),
            new: node(&[
                ("memory", "2"),
                ("example.com/aaa", "1"),
                ("example.com/bbb", "2"),
            ]),
            want: Some(QueueingHint::Skip),
        },
        Case {
            name: "queue-on-pod-requested-resources-increase",
            pod: mem_and_a(),
            old: node(&[("memory", "2"), ("example.com/aaa", "1")]),
            new: node(&[("memory", "2"), ("example.com/aaa", "2")]),
            want: Some(QueueingHint::Queue),
        },
        Case {
            name: "skip-queue-on-node-changes-from-suitable-to-unsuitable",
            pod: mem_and_a(),
            old: node(&[("memory", "4"), ("example.com/aaa", "2")]),
            new: node(&[("memory", "1"), ("example.com/aaa", "2")]),
            want: Some(QueueingHint::Skip),
        },
        Case {
            name: "queue-on-node-changes-from-unsuitable-to-suitable",
            pod: mem_and_a(),
            old: node(&[("memory", "1"), ("example.com/aaa", "2")]),
            new: node(&[("memory", "4"), ("example.com/aaa", "2")]),
            want: Some(QueueingHint::Queue),
        },
    ];
    let hint = fit(NodeResourcesFitArgs::default()).events_to_register()[1]
        .hint
        .clone()
        .unwrap();
    for c in cases {
        check_hint(hint(&c.pod, c.old.as_ref(), c.new.as_ref()), c.want, c.name);
    }
}

/// Upstream's `Test_isSchedulableAfterDeviceClassChange`.
#[test]
fn device_class_change_hints() {
    fn class(name: &str, ext: Option<&str>) -> Option<EventObject> {
        Some(EventObject::DeviceClass(Arc::new(DeviceClass {
            metadata: ObjectMeta {
                name: Some(name.into()).filter(|n: &String| !n.is_empty()),
                ..ObjectMeta::default()
            },
            spec: Some(DeviceClassSpec {
                extended_resource_name: ext.map(String::from),
                ..DeviceClassSpec::default()
            }),
        })))
    }
    struct Case {
        name: &'static str,
        pod: Pod,
        old: Option<EventObject>,
        new: Option<EventObject>,
        want: Option<QueueingHint>,
    }
    let mem = || PodBuilder::new("p").req("memory", "2").build();
    let wants = |resource: &str| PodBuilder::new("p").req(resource, "1").build();
    let implicit = "deviceclass.resource.kubernetes.io/gpuclass";
    let cases = vec![
        Case {
            name: "backoff-wrong-new-object",
            pod: Pod::default(),
            old: None,
            new: Some(EventObject::Other),
            want: None,
        },
        Case {
            name: "backoff-wrong-old-object",
            pod: Pod::default(),
            old: Some(EventObject::Other),
            new: class("", None),
            want: None,
        },
        Case {
            name: "skip-queue-on-class-nil-extended-resource-name-pointer",
            pod: mem(),
            old: class("", None),
            new: class("", None),
            want: Some(QueueingHint::Skip),
        },
        Case {
            name: "skip-queue-on-class-same-extended-resource-name",
            pod: mem(),
            old: class("", Some("example.com/gpu")),
            new: class("", Some("example.com/gpu")),
            want: Some(QueueingHint::Skip),
        },
        Case {
            name: "queue-on-class-add-with-implicit-extended-resource-name",
            pod: wants(implicit),
            old: None,
            new: class("gpuclass", Some("example.com/gpu")),
            want: Some(QueueingHint::Queue),
        },
        Case {
            name: "skip-on-class-add-with-implicit-extended-resource-name-not-matching",
            pod: wants(implicit),
            old: None,
            new: class("myclass", Some("example.com/gpu")),
            want: Some(QueueingHint::Skip),
        },
        Case {
            name: "skip-on-class-add-with-explicit-extended-resource-name-not-matching",
            pod: wants("example.com/othergpu"),
            old: None,
            new: class("myclass", Some("example.com/gpu")),
            want: Some(QueueingHint::Skip),
        },
        Case {
            name: "skip-on-class-update-with-implicit-extended-resource-name",
            pod: wants(implicit),
            old: class("gpuclass", None),
            new: class("gpuclass", Some("example.com/gpu")),
            want: Some(QueueingHint::Skip),
        },
        Case {
            name: "queue-on-class-add-with-extended-resource-name",
            pod: wants("example.com/gpu"),
            old: None,
            new: class("", Some("example.com/gpu")),
            want: Some(QueueingHint::Queue),
        },
        Case {
            name: "queue-on-class-update-with-extended-resource-name",
            pod: wants("example.com/gpu"),
            old: class("", Some("example.com/gpu1")),
            new: class("", Some("example.com/gpu")),
            want: Some(QueueingHint::Queue),
        },
    ];
    let pl = NodeResourcesFit::new(&NodeResourcesFitArgs::default(), gpu_resolver()).unwrap();
    let hint = pl.events_to_register()[2].hint.clone().unwrap();
    for c in cases {
        check_hint(hint(&c.pod, c.old.as_ref(), c.new.as_ref()), c.want, c.name);
    }
}

mod props {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Filter accepts exactly when every requested amount fits in what is left, and calls a
        /// rejection unresolvable exactly when some request exceeds the whole allocatable.
        #[test]
        fn filter_matches_arithmetic(
            req in (0i64..5000, 0i64..5000, 0i64..5),
            alloc in (0i64..5000, 0i64..5000, 0i64..5),
            used in (0i64..5000, 0i64..5000, 0i64..5),
        ) {
            let node = {
                let mut ni = NodeBuilder::new("n")
                    .alloc("cpu", &format!("{}m", alloc.0))
                    .alloc("memory", &alloc.1.to_string())
                    .alloc("example.com/foo", &alloc.2.to_string())
                    .info();
                ni.add_pod(Arc::new(
                    PodBuilder::new("e")
                        .node_name("n")
                        .req("cpu", &format!("{}m", used.0))
                        .req("memory", &used.1.to_string())
                        .req("example.com/foo", &used.2.to_string())
                        .info(),
                ));
                ni
            };
            let pod = PodBuilder::new("p")
                .req("cpu", &format!("{}m", req.0))
                .req("memory", &req.1.to_string())
                .req("example.com/foo", &req.2.to_string())
                .info();
            let s = fit(NodeResourcesFitArgs::default()).filter(&CycleState::new(), &pod, &node);
            let triples = [(req.0, alloc.0, used.0), (req.1, alloc.1, used.1), (req.2, alloc.2, used.2)];
            let fits = triples.iter().all(|(r, a, u)| *r == 0 || r <= &(a - u));
            prop_assert_eq!(s.is_success(), fits, "{}", s);
            let unresolvable = triples.iter().any(|(r, a, u)| *r > 0 && r > &(a - u) && r > a);
            prop_assert_eq!(s.code() == Code::UnschedulableAndUnresolvable, unresolvable, "{}", s);
        }
    }
}
