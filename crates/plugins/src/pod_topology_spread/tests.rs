use std::sync::Arc;

use unisched_framework::{
    ClusterEvent, Code, CycleState, EnqueueExtensions, EventObject, FilterPlugin, NodeInfo, NodeScore,
    PodInfo, PreFilterPlugin, PreScorePlugin, QueueingHint, ScorePlugin, Snapshot,
};

use super::{filtering::CriticalPaths, *};
use crate::{
    helper::decode_args,
    testing::{NodeBuilder, PodBuilder, label_selector, selector_exists, spread_constraint, term_in},
};

const HARD: &str = "DoNotSchedule";
const SOFT: &str = "ScheduleAnyway";

/// Nodes `n1`,`n2` in zone east and `n3`,`n4` in zone west, each labelled `node=<name>`.
fn four_nodes() -> Vec<NodeBuilder> {
    [("n1", "east"), ("n2", "east"), ("n3", "west"), ("n4", "west")]
        .into_iter()
        .map(|(n, z)| NodeBuilder::new(n).label("zone", z).label("node", n))
        .collect()
}

/// `count` pods labelled `foo` bound to `node`.
fn foos(node: &str, count: usize) -> Vec<PodInfo> {
    (0..count)
        .map(|i| {
            PodBuilder::new(&format!("{node}-p{i}"))
                .label("foo", "")
                .node_name(node)
                .info()
        })
        .collect()
}

/// Puts `pods` on their nodes (by `spec.nodeName`).
fn place(nodes: Vec<NodeBuilder>, pods: Vec<PodInfo>) -> Vec<NodeInfo> {
    nodes
        .into_iter()
        .map(|b| {
            let name = b.clone().build().metadata.name.unwrap_or_default();
            let mine: Vec<PodInfo> = pods
                .iter()
                .filter(|p| p.node_name() == Some(name.as_str()))
                .cloned()
                .collect();
            b.info_with(mine)
        })
        .collect()
}

fn state_for(nodes: Vec<NodeInfo>) -> (CycleState, Arc<Snapshot>) {
    let snapshot = Arc::new(Snapshot::from_node_infos(nodes));
    (CycleState::with_snapshot(snapshot.clone()), snapshot)
}

/// PreFilter, then Filter on every node: `(node, code, message)`.
fn filter_all(pl: &PodTopologySpread, pod: &PodInfo, nodes: Vec<NodeInfo>) -> Vec<(String, Code, String)> {
    let (mut state, snapshot) = state_for(nodes);
    let (_, s) = pl.pre_filter(&mut state, pod, snapshot.nodes());
    assert!(s.is_success(), "PreFilter: {s:?}");
    snapshot
        .nodes()
        .iter()
        .map(|n| {
            let s = pl.filter(&state, pod, n);
            (n.name().to_string(), s.code(), s.message())
        })
        .collect()
}

fn codes(results: &[(String, Code, String)]) -> Vec<(&str, Code)> {
    results.iter().map(|(n, c, _)| (n.as_str(), *c)).collect()
}

const OK: Code = Code::Success;
const NO: Code = Code::Unschedulable;
const NEVER: Code = Code::UnschedulableAndUnresolvable;

#[test]
fn filter_single_constraint_table() {
    struct Case {
        name: &'static str,
        pod: PodBuilder,
        nodes: Vec<NodeBuilder>,
        pods: Vec<PodInfo>,
        want: [Code; 4],
    }
    let foo_pod = || PodBuilder::new("p").label("foo", "");
    let zone1 = || foo_pod().spread_constraint(1, "zone", HARD, selector_exists("foo"));
    let node1 = || foo_pod().spread_constraint(1, "node", HARD, selector_exists("foo"));
    let spread_2103 = || [foos("n1", 2), foos("n2", 1), foos("n4", 3)].concat();
    let cases = vec![
        Case {
            name: "no existing pods",
            pod: zone1(),
            nodes: four_nodes(),
            pods: vec![],
            want: [OK; 4],
        },
        Case {
            name: "pod not matching itself, no pods",
            pod: PodBuilder::new("p").label("foo", "").spread_constraint(
                1,
                "zone",
                HARD,
                selector_exists("bar"),
            ),
            nodes: four_nodes(),
            pods: vec![],
            want: [OK; 4],
        },
        Case {
            name: "pods of other namespaces do not count",
            pod: zone1(),
            nodes: four_nodes(),
            pods: vec![
                PodBuilder::new("o1")
                    .namespace("other")
                    .label("foo", "")
                    .node_name("n1")
                    .info(),
                PodBuilder::new("o2")
                    .namespace("other")
                    .label("foo", "")
                    .node_name("n2")
                    .info(),
                foos("n3", 1).remove(0),
                foos("n4", 1).remove(0),
            ],
            want: [OK, OK, NO, NO],
        },
        Case {
            name: "zones balanced 3/3: every node fits",
            pod: zone1(),
            nodes: four_nodes(),
            pods: [foos("n1", 2), foos("n2", 1), foos("n4", 3)].concat(),
            want: [OK; 4],
        },
        Case {
            name: "node without the zone label: missing label, its pods not counted",
            pod: zone1(),
            nodes: vec![
                NodeBuilder::new("n1").label("zone", "east"),
                NodeBuilder::new("n2").label("zonee", "east"),
                NodeBuilder::new("n3").label("zone", "west"),
                NodeBuilder::new("n4").label("zone", "west"),
            ],
            pods: [foos("n1", 1), foos("n2", 1), foos("n3", 1), foos("n4", 1)].concat(),
            want: [OK, NEVER, NO, NO],
        },
        Case {
            name: "no node has the key",
            pod: foo_pod().spread_constraint(1, "rack", HARD, selector_exists("foo")),
            nodes: four_nodes(),
            pods: vec![],
            want: [NEVER; 4],
        },
        Case {
            name: "per node 2/1/0/3: only the empty node",
            pod: node1(),
            nodes: four_nodes(),
            pods: spread_2103(),
            want: [NO, NO, OK, NO],
        },
        Case {
            name: "per node 2/1/0/3 with maxSkew 2",
            pod: foo_pod().spread_constraint(2, "node", HARD, selector_exists("foo")),
            nodes: four_nodes(),
            pods: spread_2103(),
            want: [NO, OK, OK, NO],
        },
        Case {
            name: "per node 2/1/0/3, pod does not match itself",
            pod: PodBuilder::new("p").label("bar", "").spread_constraint(
                1,
                "node",
                HARD,
                selector_exists("foo"),
            ),
            nodes: four_nodes(),
            pods: spread_2103(),
            want: [NO, OK, OK, NO],
        },
        Case {
            name: "node affinity (Honor) leaves n1 and n4 as the only domains",
            pod: node1().required_term(term_in("node", &["n1", "n4"])),
            nodes: four_nodes(),
            pods: spread_2103(),
            want: [OK, OK, OK, NO],
        },
        Case {
            name: "nodeAffinityPolicy Ignore counts every node",
            pod: foo_pod()
                .spread(k8s_openapi::api::core::v1::TopologySpreadConstraint {
                    node_affinity_policy: Some("Ignore".into()),
                    ..spread_constraint(1, "node", HARD, Some(selector_exists("foo")))
                })
                .required_term(term_in("node", &["n1", "n4"])),
            nodes: four_nodes(),
            pods: spread_2103(),
            want: [NO, NO, OK, NO],
        },
        Case {
            name: "nodeTaintsPolicy Honor drops the untolerated empty node from the domains",
            pod: foo_pod().spread(k8s_openapi::api::core::v1::TopologySpreadConstraint {
                node_taints_policy: Some("Honor".into()),
                ..spread_constraint(1, "node", HARD, Some(selector_exists("foo")))
            }),
            nodes: {
                let mut n = four_nodes();
                n[2] = NodeBuilder::new("n3")
                    .label("zone", "west")
                    .label("node", "n3")
                    .taint("k", "v", "NoSchedule");
                n
            },
            pods: spread_2103(),
            want: [NO, OK, OK, NO],
        },
        Case {
            name: "nodeTaintsPolicy Ignore (default) keeps it",
            pod: node1(),
            nodes: {
                let mut n = four_nodes();
                n[2] = NodeBuilder::new("n3")
                    .label("zone", "west")
                    .label("node", "n3")
                    .taint("k", "v", "NoSchedule");
                n
            },
            pods: spread_2103(),
            want: [NO, NO, OK, NO],
        },
        Case {
            name: "terminating pods are not counted",
            pod: node1(),
            nodes: four_nodes(),
            pods: vec![
                PodBuilder::new("t1")
                    .label("foo", "")
                    .node_name("n1")
                    .terminating()
                    .info(),
                foos("n2", 1).remove(0),
                foos("n3", 1).remove(0),
                foos("n4", 1).remove(0),
            ],
            want: [OK, NO, NO, NO],
        },
        Case {
            name: "minDomains above the domain count makes the global minimum 0",
            pod: foo_pod().spread(k8s_openapi::api::core::v1::TopologySpreadConstraint {
                min_domains: Some(3),
                ..spread_constraint(1, "zone", HARD, Some(selector_exists("foo")))
            }),
            nodes: four_nodes(),
            pods: [foos("n1", 1), foos("n3", 1)].concat(),
            want: [NO; 4],
        },
        Case {
            name: "minDomains met",
            pod: foo_pod().spread(k8s_openapi::api::core::v1::TopologySpreadConstraint {
                min_domains: Some(2),
                ..spread_constraint(1, "zone", HARD, Some(selector_exists("foo")))
            }),
            nodes: four_nodes(),
            pods: [foos("n1", 1), foos("n3", 1)].concat(),
            want: [OK; 4],
        },
        Case {
            name: "an empty selector counts nothing",
            pod: foo_pod().spread_constraint(1, "node", HARD, label_selector(&[], &[])),
            nodes: four_nodes(),
            pods: spread_2103(),
            want: [OK; 4],
        },
        Case {
            name: "matchLabelKeys narrows the group to the pod's revision",
            pod: PodBuilder::new("p").label("app", "web").label("rev", "2").spread(
                k8s_openapi::api::core::v1::TopologySpreadConstraint {
                    match_label_keys: Some(vec!["rev".into()]),
                    ..spread_constraint(1, "zone", HARD, Some(label_selector(&[("app", "web")], &[])))
                },
            ),
            nodes: four_nodes(),
            pods: vec![
                PodBuilder::new("r1a")
                    .label("app", "web")
                    .label("rev", "1")
                    .node_name("n1")
                    .info(),
                PodBuilder::new("r1b")
                    .label("app", "web")
                    .label("rev", "1")
                    .node_name("n2")
                    .info(),
                PodBuilder::new("r2a")
                    .label("app", "web")
                    .label("rev", "2")
                    .node_name("n3")
                    .info(),
            ],
            want: [OK, OK, NO, NO],
        },
        Case {
            name: "without matchLabelKeys every revision counts",
            pod: PodBuilder::new("p")
                .label("app", "web")
                .label("rev", "2")
                .spread_constraint(1, "zone", HARD, label_selector(&[("app", "web")], &[])),
            nodes: four_nodes(),
            pods: vec![
                PodBuilder::new("r1a")
                    .label("app", "web")
                    .label("rev", "1")
                    .node_name("n1")
                    .info(),
                PodBuilder::new("r1b")
                    .label("app", "web")
                    .label("rev", "1")
                    .node_name("n2")
                    .info(),
                PodBuilder::new("r2a")
                    .label("app", "web")
                    .label("rev", "2")
                    .node_name("n3")
                    .info(),
            ],
            want: [NO, NO, OK, OK],
        },
        Case {
            name: "two constraints: zones 3/3 and nodes 2/1/0/3 leave n3",
            pod: zone1().spread_constraint(1, "node", HARD, selector_exists("foo")),
            nodes: four_nodes(),
            pods: spread_2103(),
            want: [NO, NO, OK, NO],
        },
        Case {
            name: "two constraints: zones 1/3 and nodes 0/1/0/3 leave n1",
            pod: zone1().spread_constraint(1, "node", HARD, selector_exists("foo")),
            nodes: four_nodes(),
            pods: [foos("n2", 1), foos("n4", 3)].concat(),
            want: [OK, NO, NO, NO],
        },
    ];
    let pl = PodTopologySpread::default();
    for c in cases {
        let pod = c.pod.info();
        let got = filter_all(&pl, &pod, place(c.nodes, c.pods));
        let want: Vec<(&str, Code)> = ["n1", "n2", "n3", "n4"].into_iter().zip(c.want).collect();
        assert_eq!(codes(&got), want, "{}", c.name);
        for (node, code, msg) in &got {
            let want_msg = match code {
                Code::Unschedulable => ERR_REASON_CONSTRAINTS_NOT_MATCH,
                Code::UnschedulableAndUnresolvable => ERR_REASON_NODE_LABEL_NOT_MATCH,
                _ => "",
            };
            assert_eq!(msg, want_msg, "{}: {node}", c.name);
        }
    }
}

#[test]
fn pre_filter_skips_and_errors() {
    let pl = PodTopologySpread::default();
    let (mut state, snapshot) = state_for(place(four_nodes(), vec![]));
    struct Case {
        name: &'static str,
        pod: PodBuilder,
        code: Code,
        message: &'static str,
    }
    let cases = [
        Case {
            name: "no constraints",
            pod: PodBuilder::new("p"),
            code: Code::Skip,
            message: "",
        },
        Case {
            name: "only soft constraints",
            pod: PodBuilder::new("p").spread_constraint(1, "zone", SOFT, selector_exists("foo")),
            code: Code::Skip,
            message: "",
        },
        Case {
            name: "system defaults are soft only",
            pod: PodBuilder::new("p")
                .label("app", "x")
                .owner("apps/v1", "ReplicaSet", "rs"),
            code: Code::Skip,
            message: "",
        },
        Case {
            name: "invalid selector",
            pod: PodBuilder::new("p").spread_constraint(
                1,
                "zone",
                HARD,
                label_selector(&[], &[("a", "Near", &["b"])]),
            ),
            code: Code::Error,
            message: "get constraints from pod: obtaining pod's hard topology spread constraints: \"Near\" is not a valid label selector operator",
        },
    ];
    for c in cases {
        let (r, s) = pl.pre_filter(&mut state, &c.pod.info(), snapshot.nodes());
        assert!(r.is_none(), "{}", c.name);
        assert_eq!(
            (s.code(), s.message().as_str()),
            (c.code, c.message),
            "{}",
            c.name
        );
    }
    // Filter without PreFilter state is an error.
    let s = pl.filter(
        &CycleState::new(),
        &PodBuilder::new("p").info(),
        &snapshot.nodes()[0],
    );
    assert_eq!(s.code(), Code::Error);
}

#[test]
fn add_and_remove_pod_update_a_copy() {
    let pl = PodTopologySpread::default();
    let pod = PodBuilder::new("p")
        .label("foo", "")
        .spread_constraint(1, "node", HARD, selector_exists("foo"))
        .info();
    let nodes = place(
        four_nodes(),
        [foos("n1", 1), foos("n2", 1), foos("n3", 1)].concat(),
    );
    let (mut state, snapshot) = state_for(nodes);
    assert!(pl.pre_filter(&mut state, &pod, snapshot.nodes()).1.is_success());
    let node = |i: usize| snapshot.nodes()[i].clone();
    let verdicts = |state: &CycleState| -> Vec<Code> {
        snapshot
            .nodes()
            .iter()
            .map(|n| pl.filter(state, &pod, n).code())
            .collect()
    };
    assert_eq!(verdicts(&state), [NO, NO, NO, OK], "1/1/1/0");

    // A nominated pod on n4 evens things out.
    let mut with = state.deep_clone();
    let nominated = Arc::new(foos("n4", 1).remove(0));
    assert!(pl.add_pod(&mut with, &pod, &nominated, &node(3)).is_success());
    assert_eq!(verdicts(&with), [OK; 4], "1/1/1/1");
    assert_eq!(
        verdicts(&state),
        [NO, NO, NO, OK],
        "the original state is untouched"
    );

    // Pods that do not match, or live in another namespace, change nothing.
    let unrelated = Arc::new(PodBuilder::new("u").label("bar", "").node_name("n4").info());
    let elsewhere = Arc::new(
        PodBuilder::new("e")
            .namespace("x")
            .label("foo", "")
            .node_name("n4")
            .info(),
    );
    let mut other = state.deep_clone();
    assert!(pl.add_pod(&mut other, &pod, &unrelated, &node(3)).is_success());
    assert!(pl.add_pod(&mut other, &pod, &elsewhere, &node(3)).is_success());
    assert_eq!(verdicts(&other), [NO, NO, NO, OK]);

    // Removing the pod on n1 (a preemption victim) makes n1 the emptiest.
    let victim = snapshot.nodes()[0].pods[0].clone();
    let mut without = state.deep_clone();
    assert!(pl.remove_pod(&mut without, &pod, &victim, &node(0)).is_success());
    assert_eq!(verdicts(&without), [OK, NO, NO, OK], "0/1/1/0");

    // Without PreFilter state the extensions fail.
    let mut empty = CycleState::new();
    assert_eq!(
        pl.add_pod(&mut empty, &pod, &nominated, &node(3)).code(),
        Code::Error
    );
}

#[test]
fn critical_paths_keep_the_minimum() {
    struct Case {
        name: &'static str,
        updates: Vec<(&'static str, i64)>,
        want_min: i64,
    }
    let cases = [
        Case {
            name: "one domain",
            updates: vec![("a", 3)],
            want_min: 3,
        },
        Case {
            name: "smaller later",
            updates: vec![("a", 3), ("b", 1), ("c", 2)],
            want_min: 1,
        },
        Case {
            name: "existing domain grows past the other",
            updates: vec![("a", 1), ("b", 2), ("a", 5)],
            want_min: 2,
        },
        Case {
            name: "existing domain shrinks",
            updates: vec![("a", 4), ("b", 3), ("a", 0)],
            want_min: 0,
        },
        Case {
            name: "ties keep the first",
            updates: vec![("a", 1), ("b", 1)],
            want_min: 1,
        },
    ];
    for c in cases {
        let mut p = CriticalPaths::default();
        for (v, n) in &c.updates {
            p.update(v, *n);
        }
        assert_eq!(p.min(), c.want_min, "{}", c.name);
    }
}

/// PreScore over all nodes, Score and NormalizeScore on every node: final scores by node.
fn scores(pl: &PodTopologySpread, pod: &PodInfo, nodes: Vec<NodeInfo>) -> Result<Vec<i64>, Code> {
    let (mut state, snapshot) = state_for(nodes);
    let s = pl.pre_score(&mut state, pod, snapshot.nodes());
    if !s.is_success() {
        return Err(s.code());
    }
    let mut list: Vec<NodeScore<'_>> = snapshot
        .nodes()
        .iter()
        .map(|n| NodeScore {
            name: n.name(),
            score: pl.score(&state, pod, n).unwrap(),
        })
        .collect();
    assert!(pl.normalize_score(&state, pod, &mut list).is_success());
    Ok(list.into_iter().map(|s| s.score).collect())
}

#[test]
fn score_table() {
    struct Case {
        name: &'static str,
        pl: PodTopologySpread,
        pod: PodBuilder,
        nodes: Vec<NodeBuilder>,
        pods: Vec<PodInfo>,
        want: Result<Vec<i64>, Code>,
    }
    let rs_pod = |name: &str, node: &str| {
        PodBuilder::new(name)
            .label("app", "x")
            .label("pod-template-hash", "h1")
            .owner("apps/v1", "ReplicaSet", "x-h1")
            .node_name(node)
            .info()
    };
    let host = |n: &str| NodeBuilder::new(n).label("kubernetes.io/hostname", n);
    let list_args = PodTopologySpreadArgs {
        defaulting_type: Some("List".into()),
        default_constraints: vec![spread_constraint(1, "zone", SOFT, None)],
        ..Default::default()
    };
    let cases = vec![
        Case {
            name: "zone counts 3/0: the empty zone wins",
            pl: PodTopologySpread::default(),
            pod: PodBuilder::new("p").label("foo", "").spread_constraint(
                1,
                "zone",
                SOFT,
                selector_exists("foo"),
            ),
            nodes: four_nodes(),
            pods: [foos("n1", 2), foos("n2", 1)].concat(),
            // raw east = round(3·ln 4) = 4, west = 0.
            want: Ok(vec![0, 0, 100, 100]),
        },
        Case {
            name: "hostname counts 3/1/0 are taken per node",
            pl: PodTopologySpread::default(),
            pod: PodBuilder::new("p").label("foo", "").spread_constraint(
                1,
                "kubernetes.io/hostname",
                SOFT,
                selector_exists("foo"),
            ),
            nodes: vec![host("n1"), host("n2"), host("n3")],
            pods: [foos("n1", 3), foos("n2", 1)].concat(),
            // raw = round(count·ln 5) = 5, 2, 0; normalised 100·(5+0−raw)/5.
            want: Ok(vec![0, 60, 100]),
        },
        Case {
            name: "a node without the key scores 0 and is left out of the range",
            pl: PodTopologySpread::default(),
            pod: PodBuilder::new("p").label("foo", "").spread_constraint(
                3,
                "zone",
                SOFT,
                selector_exists("foo"),
            ),
            nodes: vec![
                NodeBuilder::new("n1").label("zone", "east"),
                NodeBuilder::new("n2").label("zone", "west"),
                NodeBuilder::new("n3"),
            ],
            pods: [foos("n1", 1), foos("n3", 5)].concat(),
            // raw n1 = round(1·ln 4 + 2) = 3, n2 = 2; normalised over [2, 3].
            want: Ok(vec![66, 100, 0]),
        },
        Case {
            name: "all raw scores 0 give 100",
            pl: PodTopologySpread::default(),
            pod: PodBuilder::new("p").spread_constraint(1, "zone", SOFT, selector_exists("foo")),
            nodes: four_nodes(),
            pods: vec![],
            want: Ok(vec![100; 4]),
        },
        Case {
            name: "system defaults for a ReplicaSet pod, zone-less node still spread by hostname",
            pl: PodTopologySpread::default(),
            pod: PodBuilder::new("p")
                .label("app", "x")
                .label("pod-template-hash", "h1")
                .owner("apps/v1", "ReplicaSet", "x-h1"),
            nodes: vec![
                host("n1").label("topology.kubernetes.io/zone", "a"),
                host("n2").label("topology.kubernetes.io/zone", "a"),
                host("n3"),
            ],
            pods: vec![
                rs_pod("x1", "n1"),
                rs_pod("x2", "n1"),
                // Another revision of the same app is another group.
                PodBuilder::new("old")
                    .label("app", "x")
                    .label("pod-template-hash", "h0")
                    .owner("apps/v1", "ReplicaSet", "x-h0")
                    .node_name("n2")
                    .info(),
            ],
            // n1: 2·ln5+2 + 2·ln4+4 = 12; n2: 2 + 2·ln4+4 = 9; n3: 2 (no zone label).
            want: Ok(vec![16, 41, 100]),
        },
        Case {
            name: "system defaults need a supported controller",
            pl: PodTopologySpread::default(),
            pod: PodBuilder::new("p")
                .label("app", "x")
                .owner("batch/v1", "Job", "j"),
            nodes: vec![host("n1"), host("n2")],
            pods: vec![],
            want: Err(Code::Skip),
        },
        Case {
            name: "no controller, no defaults",
            pl: PodTopologySpread::default(),
            pod: PodBuilder::new("p").label("app", "x"),
            nodes: vec![host("n1"), host("n2")],
            pods: vec![],
            want: Err(Code::Skip),
        },
        Case {
            name: "List defaults, StatefulSet per-pod labels ignored, zone required",
            pl: PodTopologySpread::new(&list_args).unwrap(),
            pod: PodBuilder::new("db-2")
                .label("app", "db")
                .label("statefulset.kubernetes.io/pod-name", "db-2")
                .label("controller-revision-hash", "r2")
                .owner("apps/v1", "StatefulSet", "db"),
            nodes: vec![
                NodeBuilder::new("n1").label("zone", "east"),
                NodeBuilder::new("n2").label("zone", "west"),
                NodeBuilder::new("n3"),
            ],
            pods: vec![
                PodBuilder::new("db-0")
                    .label("app", "db")
                    .label("statefulset.kubernetes.io/pod-name", "db-0")
                    .label("controller-revision-hash", "r1")
                    .node_name("n1")
                    .info(),
            ],
            // n1 = round(1·ln 4) = 1, n2 = 0, n3 ignored.
            want: Ok(vec![0, 100, 0]),
        },
        Case {
            name: "pod constraints win over defaults",
            pl: PodTopologySpread::new(&list_args).unwrap(),
            pod: PodBuilder::new("p")
                .label("app", "db")
                .owner("apps/v1", "StatefulSet", "db")
                .spread_constraint(1, "zone", HARD, selector_exists("app")),
            nodes: four_nodes(),
            pods: vec![],
            want: Err(Code::Skip),
        },
    ];
    for c in cases {
        let pod = c.pod.info();
        assert_eq!(scores(&c.pl, &pod, place(c.nodes, c.pods)), c.want, "{}", c.name);
    }
}

#[test]
fn pre_score_without_nodes_skips() {
    let pl = PodTopologySpread::default();
    let pod = PodBuilder::new("p")
        .spread_constraint(1, "zone", SOFT, selector_exists("foo"))
        .info();
    let mut state = CycleState::new();
    assert_eq!(pl.pre_score(&mut state, &pod, &[]).code(), Code::Skip);
    let bad = PodBuilder::new("p")
        .spread_constraint(1, "zone", SOFT, label_selector(&[], &[("a", "In", &[])]))
        .info();
    let (mut state, snapshot) = state_for(place(four_nodes(), vec![]));
    let s = pl.pre_score(&mut state, &bad, snapshot.nodes());
    assert_eq!(s.code(), Code::Error);
    assert!(
        s.message().starts_with(
            "calculating preScoreState: obtaining pod's soft topology spread constraints: values:"
        ),
        "{}",
        s.message()
    );
}

#[test]
fn args_validation_table() {
    struct Case {
        name: &'static str,
        args: serde_json::Value,
        want: Result<(), &'static str>,
    }
    let cases = [
        Case {
            name: "defaults",
            args: serde_json::Value::Null,
            want: Ok(()),
        },
        Case {
            name: "list with constraints",
            args: serde_json::json!({"defaultingType": "List", "defaultConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}]}),
            want: Ok(()),
        },
        Case {
            name: "empty list",
            args: serde_json::json!({"defaultingType": "List"}),
            want: Ok(()),
        },
        Case {
            name: "system with constraints",
            args: serde_json::json!({"defaultConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}]}),
            want: Err("defaultingType: Invalid value: \"System\": when .defaultConstraints are not empty"),
        },
        Case {
            name: "unknown defaulting",
            args: serde_json::json!({"defaultingType": "Some"}),
            want: Err("defaultingType: Unsupported value: \"Some\": supported values: \"System\", \"List\""),
        },
        Case {
            name: "bad constraint",
            args: serde_json::json!({"defaultingType": "List", "defaultConstraints": [
                {"maxSkew": 0, "topologyKey": "", "whenUnsatisfiable": "Maybe",
                 "labelSelector": {"matchLabels": {"a": "b"}}}]}),
            want: Err(
                "[defaultConstraints[0].maxSkew: Invalid value: 0: not in valid range (0, inf), \
                       defaultConstraints[0].topologyKey: Required value: can not be empty, \
                       defaultConstraints[0].whenUnsatisfiable: Unsupported value: \"Maybe\": supported values: \"DoNotSchedule\", \"ScheduleAnyway\", \
                       defaultConstraints[0].labelSelector: Forbidden: constraint must not define a selector, as they deduced for each pod]",
            ),
        },
        Case {
            name: "duplicate",
            args: serde_json::json!({"defaultingType": "List", "defaultConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]}),
            want: Err("defaultConstraints[1]: Duplicate value: \"{zone, DoNotSchedule}\""),
        },
        Case {
            name: "bad key",
            args: serde_json::json!({"defaultingType": "List", "defaultConstraints": [
                {"maxSkew": 1, "topologyKey": "a/b/c", "whenUnsatisfiable": "DoNotSchedule"}]}),
            want: Err(
                "defaultConstraints[0].topologyKey: Invalid value: \"a/b/c\": a qualified name must consist",
            ),
        },
        Case {
            name: "unknown field",
            args: serde_json::json!({"defaultingtype": "List"}),
            want: Err("decoding PodTopologySpreadArgs: unknown field `defaultingtype`"),
        },
    ];
    for c in cases {
        let got = decode_args::<PodTopologySpreadArgs>(&c.args)
            .and_then(|a| PodTopologySpread::new(&a).map(|_| ()))
            .map_err(|e| e.to_string());
        match (got, c.want) {
            (Ok(()), Ok(())) => {}
            (Err(e), Err(w)) => assert!(e.starts_with(w), "{}: {e}", c.name),
            (got, want) => panic!("{}: got {got:?}, want {want:?}", c.name),
        }
    }
}

fn pod_obj(p: PodBuilder) -> Option<EventObject> {
    Some(EventObject::pod(p.build()))
}

fn node_obj(n: NodeBuilder) -> Option<EventObject> {
    Some(EventObject::Node(Arc::new(n.build())))
}

fn hint_for(
    pl: &PodTopologySpread,
    resource: EventResource,
    pod: &Pod,
    old: Option<EventObject>,
    new: Option<EventObject>,
) -> QueueingHint {
    let registered = pl.events_to_register();
    let e = registered
        .iter()
        .find(|e| e.event.resource == resource)
        .unwrap_or_else(|| panic!("{resource:?} registered"));
    (e.hint.as_ref().unwrap())(pod, old.as_ref(), new.as_ref()).unwrap()
}

#[test]
fn pod_event_hints() {
    use QueueingHint::{Queue, Skip};
    let pl = PodTopologySpread::default();
    let waiting =
        PodBuilder::new("w")
            .label("foo", "")
            .spread_constraint(1, "zone", HARD, selector_exists("foo"));
    let honor =
        PodBuilder::new("w")
            .label("foo", "")
            .spread(k8s_openapi::api::core::v1::TopologySpreadConstraint {
                node_taints_policy: Some("Honor".into()),
                ..spread_constraint(1, "zone", HARD, Some(selector_exists("foo")))
            });
    let assigned = |labels: &[(&str, &str)]| {
        labels
            .iter()
            .fold(PodBuilder::new("a").node_name("n1"), |b, (k, v)| b.label(k, v))
    };
    struct Case {
        name: &'static str,
        waiting: PodBuilder,
        old: Option<EventObject>,
        new: Option<EventObject>,
        want: QueueingHint,
    }
    let cases = vec![
        Case {
            name: "matching pod bound",
            waiting: waiting.clone(),
            old: None,
            new: pod_obj(assigned(&[("foo", "")])),
            want: Queue,
        },
        Case {
            name: "non-matching pod bound",
            waiting: waiting.clone(),
            old: None,
            new: pod_obj(assigned(&[("bar", "")])),
            want: Skip,
        },
        Case {
            name: "unscheduled pod added",
            waiting: waiting.clone(),
            old: None,
            new: pod_obj(PodBuilder::new("u").label("foo", "")),
            want: Skip,
        },
        Case {
            name: "pod in another namespace",
            waiting: waiting.clone(),
            old: None,
            new: pod_obj(assigned(&[("foo", "")]).namespace("x")),
            want: Skip,
        },
        Case {
            name: "matching pod deleted",
            waiting: waiting.clone(),
            old: pod_obj(assigned(&[("foo", "")])),
            new: None,
            want: Queue,
        },
        Case {
            name: "matching nominated pod deleted",
            waiting: waiting.clone(),
            old: pod_obj(PodBuilder::new("n").label("foo", "").nominated_node("n1")),
            new: None,
            want: Queue,
        },
        Case {
            name: "other pod deleted",
            waiting: waiting.clone(),
            old: pod_obj(assigned(&[("bar", "")])),
            new: None,
            want: Skip,
        },
        Case {
            name: "label change flips the selector",
            waiting: waiting.clone(),
            old: pod_obj(assigned(&[("foo", "")])),
            new: pod_obj(assigned(&[("bar", "")])),
            want: Queue,
        },
        Case {
            name: "unrelated label change",
            waiting: waiting.clone(),
            old: pod_obj(assigned(&[("foo", ""), ("x", "1")])),
            new: pod_obj(assigned(&[("foo", ""), ("x", "2")])),
            want: Skip,
        },
        Case {
            name: "the pod gained a toleration and a constraint honours taints",
            waiting: honor.clone(),
            old: pod_obj(honor.clone()),
            new: pod_obj(honor.clone().toleration("k", "Exists", "", "NoSchedule")),
            want: Queue,
        },
        Case {
            name: "the pod gained a toleration, taints ignored",
            waiting: waiting.clone(),
            old: pod_obj(waiting.clone()),
            new: pod_obj(waiting.clone().toleration("k", "Exists", "", "NoSchedule")),
            want: Skip,
        },
    ];
    for c in cases {
        let pod = c.waiting.build();
        assert_eq!(
            hint_for(&pl, EventResource::Pod, &pod, c.old, c.new),
            c.want,
            "{}",
            c.name
        );
    }
}

#[test]
fn node_event_hints() {
    use QueueingHint::{Queue, Skip};
    let pl = PodTopologySpread::default();
    let pod = PodBuilder::new("w")
        .label("foo", "")
        .spread_constraint(1, "zone", HARD, selector_exists("foo"))
        .spread_constraint(1, "node", HARD, selector_exists("foo"))
        .build();
    let full = || NodeBuilder::new("n").label("zone", "a").label("node", "n");
    struct Case {
        name: &'static str,
        old: Option<EventObject>,
        new: Option<EventObject>,
        want: QueueingHint,
    }
    let cases = vec![
        Case {
            name: "added with every key",
            old: None,
            new: node_obj(full()),
            want: Queue,
        },
        Case {
            name: "added without a key",
            old: None,
            new: node_obj(NodeBuilder::new("n").label("zone", "a")),
            want: Skip,
        },
        Case {
            name: "deleted with every key",
            old: node_obj(full()),
            new: None,
            want: Queue,
        },
        Case {
            name: "deleted without keys",
            old: node_obj(NodeBuilder::new("n")),
            new: None,
            want: Skip,
        },
        Case {
            name: "gained the last key",
            old: node_obj(NodeBuilder::new("n").label("zone", "a")),
            new: node_obj(full()),
            want: Queue,
        },
        Case {
            name: "lost a key",
            old: node_obj(full()),
            new: node_obj(NodeBuilder::new("n").label("zone", "a")),
            want: Queue,
        },
        Case {
            name: "moved zone",
            old: node_obj(full()),
            new: node_obj(NodeBuilder::new("n").label("zone", "b").label("node", "n")),
            want: Queue,
        },
        Case {
            name: "unrelated label",
            old: node_obj(full()),
            new: node_obj(full().label("x", "y")),
            want: Skip,
        },
        Case {
            name: "taints changed",
            old: node_obj(full()),
            new: node_obj(full().taint("k", "", "NoSchedule")),
            want: Queue,
        },
        Case {
            name: "taints changed on a node without keys",
            old: node_obj(NodeBuilder::new("n")),
            new: node_obj(NodeBuilder::new("n").taint("k", "", "NoSchedule")),
            want: Skip,
        },
    ];
    for c in cases {
        assert_eq!(
            hint_for(&pl, EventResource::Node, &pod, c.old, c.new),
            c.want,
            "{}",
            c.name
        );
    }
    let registered: Vec<ClusterEvent> = pl.events_to_register().into_iter().map(|e| e.event).collect();
    assert_eq!(registered.len(), 2);
}

#[test]
fn score_counts_all_nodes_but_ranks_feasible_ones() {
    // n4 failed Filter: its pods still count for its zone, but its domain set and rank do not.
    let pl = PodTopologySpread::default();
    let pod = PodBuilder::new("p")
        .label("foo", "")
        .spread_constraint(1, "zone", SOFT, selector_exists("foo"))
        .info();
    let nodes = place(
        four_nodes(),
        [foos("n1", 3), foos("n2", 1), foos("n3", 1), foos("n4", 2)].concat(),
    );
    let (mut state, snapshot) = state_for(nodes);
    let feasible = &snapshot.nodes()[..3];
    assert!(pl.pre_score(&mut state, &pod, feasible).is_success());
    let mut list: Vec<NodeScore<'_>> = feasible
        .iter()
        .map(|n| NodeScore {
            name: n.name(),
            score: pl.score(&state, &pod, n).unwrap(),
        })
        .collect();
    // east = 4, west = 3 matching pods over two domains: raw round(4·ln 4) = 6 and round(3·ln 4) = 4.
    assert_eq!(list.iter().map(|s| s.score).collect::<Vec<_>>(), vec![6, 6, 4]);
    assert!(pl.normalize_score(&state, &pod, &mut list).is_success());
    assert_eq!(
        list.iter().map(|s| s.score).collect::<Vec<_>>(),
        vec![66, 66, 100]
    );
}

/// Upstream's queueing-hint tables (`podtopologyspread/plugin_test.go`), case by case.
mod upstream_tables {
    use super::*;

    /// Waiting pod `p` (label `foo`) with hard constraints over `keys`, each selecting `foo`.
    fn spreading_foo(keys: &[&str]) -> PodBuilder {
        keys.iter().fold(PodBuilder::new("p").label("foo", ""), |p, k| {
            p.spread_constraint(1, k, HARD, selector_exists("foo"))
        })
    }

    /// Waiting pod `p` spreading `foo` over zone and `bar` over node.
    fn spreading_foo_and_bar(zone_taints_policy: Option<&str>) -> PodBuilder {
        PodBuilder::new("p")
            .label("foo", "")
            .spread(k8s_openapi::api::core::v1::TopologySpreadConstraint {
                node_taints_policy: zone_taints_policy.map(str::to_string),
                ..spread_constraint(1, "zone", HARD, Some(selector_exists("foo")))
            })
            .spread_constraint(1, "node", HARD, selector_exists("bar"))
    }

    fn with_labels(p: PodBuilder, labels: &[(&str, &str)]) -> PodBuilder {
        labels.iter().fold(p, |p, (k, v)| p.label(k, v))
    }

    fn bound(labels: &[(&str, &str)]) -> PodBuilder {
        with_labels(PodBuilder::new("p2").node_name("fake-node"), labels)
    }

    fn pending(labels: &[(&str, &str)]) -> PodBuilder {
        with_labels(PodBuilder::new("p2"), labels)
    }

    fn node(labels: &[(&str, &str)]) -> NodeBuilder {
        labels
            .iter()
            .fold(NodeBuilder::new("node-a"), |n, (k, v)| n.label(k, v))
    }

    /// Upstream `Test_isSchedulableAfterNodeChange`.
    #[test]
    fn is_schedulable_after_node_change() {
        use QueueingHint::{Queue, Skip};
        let pl = PodTopologySpread::default();
        let zone = spreading_foo(&["zone"]).build();
        let zone_node = spreading_foo(&["zone", "node"]).build();
        let cases: Vec<(&str, &Pod, Option<NodeBuilder>, Option<NodeBuilder>, QueueingHint)> = vec![
            (
                "node updates label which matches topologyKey",
                &zone,
                Some(node(&[("zone", "zone1")])),
                Some(node(&[("zone", "zone2")])),
                Queue,
            ),
            (
                "node that doesn't match topologySpreadConstraints updates non-related label",
                &zone,
                Some(node(&[("foo", "bar1")])),
                Some(node(&[("foo", "bar2")])),
                Skip,
            ),
            (
                "node that match topologySpreadConstraints adds non-related label",
                &zone_node,
                Some(node(&[("zone", "zone1"), ("node", "node1"), ("foo", "bar")])),
                Some(node(&[("zone", "zone1"), ("node", "node1")])),
                Skip,
            ),
            (
                "create node with non-related labels",
                &zone,
                None,
                Some(node(&[("foo", "bar")])),
                Skip,
            ),
            (
                "create node with related labels",
                &zone,
                None,
                Some(node(&[("zone", "zone1")])),
                Queue,
            ),
            (
                "delete node with non-related labels",
                &zone,
                Some(node(&[("foo", "bar")])),
                None,
                Skip,
            ),
            (
                "delete node with related labels",
                &zone,
                Some(node(&[("zone", "zone1")])),
                None,
                Queue,
            ),
            (
                "add node with related labels that only match one of topologySpreadConstraints",
                &zone_node,
                None,
                Some(node(&[("zone", "zone1")])),
                Skip,
            ),
            (
                "add node with related labels that match all topologySpreadConstraints",
                &zone_node,
                None,
                Some(node(&[("zone", "zone1"), ("node", "node1")])),
                Queue,
            ),
            (
                "update node with related labels that only match one of topologySpreadConstraints",
                &zone_node,
                Some(node(&[("zone", "zone1")])),
                Some(node(&[("zone", "zone1")])),
                Skip,
            ),
            (
                "update node with related labels that match all topologySpreadConstraints",
                &zone_node,
                Some(node(&[("zone", "zone1"), ("node", "node1")])),
                Some(node(&[("zone", "zone1"), ("node", "node2")])),
                Queue,
            ),
            (
                "update node with different taints that match all topologySpreadConstraints",
                &zone_node,
                Some(node(&[("zone", "zone1"), ("node", "node1")]).taint("aaa", "bbb", "NoSchedule")),
                Some(node(&[("zone", "zone1"), ("node", "node1")]).taint("ccc", "bbb", "NoSchedule")),
                Queue,
            ),
            (
                "update node with different taints that only match one of topologySpreadConstraints",
                &zone_node,
                Some(node(&[("node", "node1")]).taint("aaa", "bbb", "NoSchedule")),
                Some(node(&[("node", "node1")]).taint("ccc", "bbb", "NoSchedule")),
                Skip,
            ),
        ];
        for (name, pod, old, new, want) in cases {
            assert_eq!(
                hint_for(
                    &pl,
                    EventResource::Node,
                    pod,
                    old.and_then(node_obj),
                    new.and_then(node_obj)
                ),
                want,
                "{name}"
            );
        }
    }

    /// Upstream `Test_isSchedulableAfterAssignedPodChange`.
    #[test]
    fn is_schedulable_after_assigned_pod_change() {
        use QueueingHint::{Queue, Skip};
        let pl = PodTopologySpread::default();
        let foo = spreading_foo(&["zone"]).build();
        let foo_bar = spreading_foo(&["zone"])
            .spread_constraint(1, "node", HARD, selector_exists("bar"))
            .build();
        let cases: Vec<(&str, &Pod, Option<PodBuilder>, Option<PodBuilder>, QueueingHint)> = vec![
            (
                "add pod with labels match topologySpreadConstraints selector",
                &foo,
                None,
                Some(bound(&[("foo", "")])),
                Queue,
            ),
            (
                "add un-scheduled pod",
                &foo,
                None,
                Some(pending(&[("foo", "")])),
                Skip,
            ),
            (
                "update un-scheduled pod",
                &foo,
                Some(pending(&[("bar", "")])),
                Some(pending(&[("foo", "")])),
                Skip,
            ),
            (
                "delete un-scheduled pod",
                &foo,
                Some(pending(&[("foo", "")])),
                None,
                Skip,
            ),
            (
                "add pod with different namespace",
                &foo,
                None,
                Some(bound(&[("foo", "")]).namespace("fake-namespace")),
                Skip,
            ),
            (
                "add pod with labels don't match topologySpreadConstraints selector",
                &foo,
                None,
                Some(bound(&[("bar", "")])),
                Skip,
            ),
            (
                "delete pod with labels that match topologySpreadConstraints selector",
                &foo,
                Some(bound(&[("foo", "")])),
                None,
                Queue,
            ),
            (
                "delete nominated pod with labels that don't match topologySpreadConstraints selector",
                &foo,
                Some(pending(&[("bar", "")]).nominated_node("fake-node")),
                None,
                Skip,
            ),
            (
                "delete nominated pod with labels that match topologySpreadConstraints selector",
                &foo,
                Some(pending(&[("foo", "")]).nominated_node("fake-node")),
                None,
                Queue,
            ),
            (
                "delete pod with labels that don't match topologySpreadConstraints selector",
                &foo,
                Some(bound(&[("bar", "")])),
                None,
                Skip,
            ),
            (
                "update pod's non-related label",
                &foo,
                Some(bound(&[("foo", ""), ("bar", "bar1")])),
                Some(bound(&[("foo", ""), ("bar", "bar2")])),
                Skip,
            ),
            (
                "add pod's label that matches topologySpreadConstraints selector",
                &foo,
                Some(bound(&[])),
                Some(bound(&[("foo", "")])),
                Queue,
            ),
            (
                "delete pod label that matches topologySpreadConstraints selector",
                &foo,
                Some(bound(&[("foo", "")])),
                Some(bound(&[])),
                Queue,
            ),
            (
                "change pod's label that matches topologySpreadConstraints selector",
                &foo,
                Some(bound(&[("foo", "foo1")])),
                Some(bound(&[("foo", "foo2")])),
                Skip,
            ),
            (
                "change pod's label that doesn't match topologySpreadConstraints selector",
                &foo,
                Some(bound(&[("foo", ""), ("bar", "bar1")])),
                Some(bound(&[("foo", ""), ("bar", "bar2")])),
                Skip,
            ),
            (
                "add pod's label that matches topologySpreadConstraints selector with multi topologySpreadConstraints",
                &foo_bar,
                Some(bound(&[("foo", "")])),
                Some(bound(&[("foo", ""), ("bar", "bar2")])),
                Queue,
            ),
            (
                "change pod's label that doesn't match topologySpreadConstraints selector with multi topologySpreadConstraints",
                &foo_bar,
                Some(bound(&[("foo", "")])),
                Some(bound(&[("foo", ""), ("baz", "")])),
                Skip,
            ),
            (
                "change pod's label that match topologySpreadConstraints selector with multi topologySpreadConstraints",
                &foo_bar,
                Some(bound(&[("foo", ""), ("bar", "")])),
                Some(bound(&[("foo", ""), ("bar", "bar2")])),
                Skip,
            ),
        ];
        for (name, pod, old, new, want) in cases {
            assert_eq!(
                hint_for(
                    &pl,
                    EventResource::Pod,
                    pod,
                    old.and_then(pod_obj),
                    new.and_then(pod_obj)
                ),
                want,
                "{name}"
            );
        }
    }

    /// Upstream `Test_isSchedulableAfterTargetPodChange`: the waiting pod's own update, which our
    /// queue hands to the same pod hint as an unscheduled-pod update.
    #[test]
    fn is_schedulable_after_target_pod_change() {
        use QueueingHint::{Queue, Skip};
        let pl = PodTopologySpread::default();
        let honor = spreading_foo_and_bar(Some("Honor")).build();
        let ignore = spreading_foo_and_bar(Some("Ignore")).build();
        let plain = || PodBuilder::new("p");
        let tolerating =
            |p: PodBuilder| p.toleration("node.kubernetes.io/unschedulable", "Exists", "", "NoSchedule");
        let cases: Vec<(&str, &Pod, PodBuilder, PodBuilder, QueueingHint)> = vec![
            (
                "the unschedulable Pod has topologySpreadConstraint with NodeTaintsPolicy:Honor and has got a new toleration",
                &honor,
                plain().label("foo", ""),
                tolerating(plain().label("foo", "")),
                Queue,
            ),
            (
                "the unschedulable Pod has topologySpreadConstraint without NodeTaintsPolicy:Honor and has got a new toleration",
                &ignore,
                plain().label("foo", ""),
                tolerating(plain().label("foo", "")),
                Skip,
            ),
            (
                "the unschedulable Pod has topologySpreadConstraint and has got a new label matching the selector of the constraint",
                &ignore,
                plain(),
                plain().label("foo", ""),
                Queue,
            ),
            (
                "the unschedulable Pod has topologySpreadConstraint and has got a new unrelated label",
                &ignore,
                plain(),
                plain().label("unrelated", ""),
                Skip,
            ),
        ];
        for (name, pod, old, new, want) in cases {
            assert_eq!(
                hint_for(&pl, EventResource::Pod, pod, pod_obj(old), pod_obj(new)),
                want,
                "{name}"
            );
        }
    }
}
