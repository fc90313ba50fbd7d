//! Table tests of the workload plugins, with upstream's cases (gangscheduling,
//! topologyaware and podgrouppodscount tests of kube-scheduler 1.37.2) as our own tables.

use std::sync::Arc;

use k8s_openapi::{
    api::scheduling::v1beta1::{
        BasicSchedulingPolicy, GangSchedulingPolicy, PodGroup, PodGroupSchedulingConstraints,
        PodGroupSchedulingPolicy, PodGroupSpec, TopologyConstraint,
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use unisched_framework::{
    Code, EventObject, Placement, PlacementFeasiblePlugin, PlacementGeneratePlugin, PlacementProgress,
    PlacementScorePlugin, PodGroupAssignments, PodGroupInfo, PodGroupStore, PreEnqueuePlugin, QueueingHint,
};

use super::{
    GangScheduling, PodGroupPodsCount, TopologyPlacementGenerator,
    gang_scheduling::{pod_added, pod_group_added, pod_group_updated},
};
use crate::testing::{NodeBuilder, PodBuilder, snapshot};

fn group(ns: &str, name: &str, gang: Option<i32>, topology: Option<&str>) -> PodGroup {
    PodGroup {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            ..Default::default()
        },
        spec: PodGroupSpec {
            scheduling_policy: PodGroupSchedulingPolicy {
                gang: gang.map(|min_count| GangSchedulingPolicy { min_count }),
                basic: gang.is_none().then(BasicSchedulingPolicy::default),
            },
            scheduling_constraints: topology.map(|key| PodGroupSchedulingConstraints {
                topology: Some(vec![TopologyConstraint { key: key.into() }]),
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn info(g: PodGroup) -> PodGroupInfo {
    PodGroupInfo::new(Arc::new(g))
}

fn member(name: &str, group: &str) -> PodBuilder {
    PodBuilder::new(name).namespace("ns").uid(name).pod_group(group)
}

#[test]
fn pre_enqueue() {
    struct Case {
        name: &'static str,
        group: Option<PodGroup>,
        other_members: usize,
        pod_in_group: bool,
        want: Code,
        want_message: &'static str,
    }
    let cases = [
        Case {
            name: "a pod without a scheduling group passes",
            group: None,
            other_members: 0,
            pod_in_group: false,
            want: Code::Success,
            want_message: "",
        },
        Case {
            name: "a basic policy pod passes",
            group: Some(group("ns", "pg", None, None)),
            other_members: 0,
            pod_in_group: true,
            want: Code::Success,
            want_message: "",
        },
        Case {
            name: "a gang pod waits while its pod group does not exist",
            group: None,
            other_members: 5,
            pod_in_group: true,
            want: Code::UnschedulableAndUnresolvable,
            want_message: "waiting for pods's pod group \"pg\" to appear in scheduling queue",
        },
        Case {
            name: "a gang pod waits while the quorum is not met",
            group: Some(group("ns", "pg", Some(3), None)),
            other_members: 1,
            pod_in_group: true,
            want: Code::UnschedulableAndUnresolvable,
            want_message: "waiting for minCount pods from a gang to appear in scheduling queue",
        },
        Case {
            name: "a gang pod passes once minCount pods exist",
            group: Some(group("ns", "pg", Some(3), None)),
            other_members: 2,
            pod_in_group: true,
            want: Code::Success,
            want_message: "",
        },
    ];
    for c in cases {
        let store = Arc::new(PodGroupStore::new());
        if let Some(g) = c.group {
            store.set_group(Arc::new(g));
        }
        for i in 0..c.other_members {
            store.observe_pod(&member(&format!("other-{i}"), "pg").build());
        }
        let pod = if c.pod_in_group {
            member("p", "pg").build()
        } else {
            PodBuilder::new("p").namespace("ns").uid("p").build()
        };
        store.observe_pod(&pod);
        let plugin = GangScheduling::new(Some(store));
        let s = plugin.pre_enqueue(&unisched_framework::PodInfo::new(pod));
        assert_eq!(s.code(), c.want, "{}", c.name);
        assert_eq!(s.message(), c.want_message, "{}", c.name);
    }
}

#[test]
fn without_a_store_every_pod_passes() {
    let plugin = GangScheduling::new(None);
    let pod = member("p", "pg").info();
    assert!(plugin.pre_enqueue(&pod).is_success());
}

#[test]
fn placement_feasible() {
    // (name, minCount, initially scheduled, per-pod outcomes (true: placed), expected verdicts)
    let cases: [(&str, i32, usize, &[bool], &[Code]); 6] = [
        (
            "all pods succeed, minCount met at the end",
            2,
            0,
            &[true, true],
            &[Code::Wait, Code::Success],
        ),
        (
            "first pod fails, minCount no longer satisfiable",
            3,
            0,
            &[false],
            &[Code::Unschedulable],
        ),
        (
            "second pod fails, minCount no longer satisfiable",
            2,
            0,
            &[true, false],
            &[Code::Wait, Code::Unschedulable],
        ),
        (
            "a failure that still leaves enough pods",
            2,
            0,
            &[false, true, true],
            &[Code::Wait, Code::Wait, Code::Success],
        ),
        (
            "pods scheduled earlier count towards minCount",
            3,
            2,
            &[true],
            &[Code::Success],
        ),
        (
            "pods beyond minCount keep the group feasible",
            1,
            0,
            &[true, false, true],
            &[Code::Success, Code::Success, Code::Success],
        ),
    ];
    let plugin = GangScheduling::new(None);
    for (name, min, initial, outcomes, want) in cases {
        let g = info(group("ns", "pg", Some(min), None));
        let mut progress = PlacementProgress {
            scheduled: initial,
            remaining: outcomes.len(),
        };
        let mut got = Vec::new();
        for placed in outcomes {
            progress.remaining -= 1;
            if *placed {
                progress.scheduled += 1;
            }
            got.push(plugin.placement_feasible(&g, progress).code());
        }
        assert_eq!(got, want, "{name}");
    }
    let g = info(group("ns", "pg", Some(3), None));
    let s = plugin.placement_feasible(
        &g,
        PlacementProgress {
            scheduled: 1,
            remaining: 1,
        },
    );
    assert_eq!(
        s.message(),
        "minCount (3) cannot be satisfied: 1 scheduled, 1 remaining"
    );
    let basic = info(group("ns", "pg", None, None));
    let s = plugin.placement_feasible(
        &basic,
        PlacementProgress {
            scheduled: 0,
            remaining: 2,
        },
    );
    assert_eq!(s.code(), Code::Wait, "a basic group needs one pod");
}

#[test]
fn hints() {
    let waiting = member("w", "pg").build();
    let same = EventObject::pod(member("n", "pg").build());
    let other_group = EventObject::pod(member("n", "other").build());
    let other_ns = EventObject::pod(
        PodBuilder::new("n")
            .namespace("ns2")
            .uid("n")
            .pod_group("pg")
            .build(),
    );
    let bound = EventObject::pod(member("n", "pg").node_name("node1").build());
    let cases = [
        ("a pod of the same group was added", &same, QueueingHint::Queue),
        (
            "a bound pod of the same group was added",
            &bound,
            QueueingHint::Queue,
        ),
        (
            "a pod of another group was added",
            &other_group,
            QueueingHint::Skip,
        ),
        (
            "a pod of a same-named group in another namespace",
            &other_ns,
            QueueingHint::Skip,
        ),
    ];
    for (name, added, want) in cases {
        assert_eq!(pod_added(&waiting, None, Some(added)).unwrap(), want, "{name}");
    }
    let no_group = PodBuilder::new("w").namespace("ns").uid("w").build();
    assert_eq!(
        pod_added(&no_group, None, Some(&same)).unwrap(),
        QueueingHint::Skip,
        "a pod without a group is skipped"
    );

    let pg =
        |ns: &str, name: &str, min: Option<i32>| EventObject::PodGroup(Arc::new(group(ns, name, min, None)));
    assert_eq!(
        pod_group_added(&waiting, None, Some(&pg("ns", "pg", Some(2)))).unwrap(),
        QueueingHint::Queue
    );
    assert_eq!(
        pod_group_added(&waiting, None, Some(&pg("ns", "other", Some(2)))).unwrap(),
        QueueingHint::Skip
    );
    assert_eq!(
        pod_group_added(&waiting, None, Some(&pg("ns2", "pg", Some(2)))).unwrap(),
        QueueingHint::Skip
    );

    let updates = [
        (
            "minCount decreased",
            pg("ns", "pg", Some(3)),
            pg("ns", "pg", Some(2)),
            QueueingHint::Queue,
        ),
        (
            "basic policy updated",
            pg("ns", "pg", None),
            pg("ns", "pg", None),
            QueueingHint::Skip,
        ),
        (
            "minCount increased",
            pg("ns", "pg", Some(2)),
            pg("ns", "pg", Some(3)),
            QueueingHint::Skip,
        ),
        (
            "minCount unchanged",
            pg("ns", "pg", Some(2)),
            pg("ns", "pg", Some(2)),
            QueueingHint::Skip,
        ),
        (
            "minCount decreased on another group",
            pg("ns", "other", Some(3)),
            pg("ns", "other", Some(2)),
            QueueingHint::Skip,
        ),
        (
            "minCount decreased in another namespace",
            pg("ns2", "pg", Some(3)),
            pg("ns2", "pg", Some(2)),
            QueueingHint::Skip,
        ),
    ];
    for (name, old, new, want) in updates {
        assert_eq!(
            pod_group_updated(&waiting, Some(&old), Some(&new)).unwrap(),
            want,
            "{name}"
        );
    }
    assert_eq!(
        pod_group_updated(
            &no_group,
            Some(&pg("ns", "pg", Some(3))),
            Some(&pg("ns", "pg", Some(2)))
        )
        .unwrap(),
        QueueingHint::Skip,
        "a pod without a scheduling group is skipped"
    );
    assert!(
        pod_group_added(&waiting, None, Some(&same)).is_err(),
        "a pod where a group belongs"
    );
}

/// With the runtime's groups, a pod added to a gang is offered to the gang's waiting members only
/// once the gang can pass PreEnqueue (or its group is gone), and the narrowing names exactly the
/// pods the hint would queue (the queue's own tests check the narrowing against a walk of the whole pool).
#[test]
fn pod_added_waits_for_the_quorum_with_a_store() {
    let store = Arc::new(PodGroupStore::new());
    store.set_group(Arc::new(group("ns", "pg", Some(3), None)));
    store.set_group(Arc::new(group("ns", "basic", None, None)));
    let plugin = GangScheduling::new(Some(store.clone()));
    let events = unisched_framework::EnqueueExtensions::events_to_register(&plugin);
    let pod_add = |label: &str| {
        events
            .iter()
            .find(|e| e.event.label == label)
            .unwrap_or_else(|| panic!("{label} registered"))
            .clone()
    };
    let waiting = member("w", "pg").build();
    let of_other_group = member("o", "third").build();
    let no_group = PodBuilder::new("x").namespace("ns").uid("x").build();
    for label in ["UnscheduledPodAdd", "AssignedPodAdd"] {
        let narrowing = pod_add(label).narrowing.expect("narrowed");
        let waiting_keys = (narrowing.pod_keys)(&waiting);
        assert_eq!(waiting_keys, vec!["podgroup:ns/pg".to_string()]);
        assert!((narrowing.pod_keys)(&no_group).is_empty());
        // (members seen, the added pod, want for the waiting member, want keys)
        let cases: Vec<(usize, Option<&str>, QueueingHint, Vec<String>)> = vec![
            (1, Some("pg"), QueueingHint::Skip, vec![]),
            (2, Some("pg"), QueueingHint::Skip, vec![]),
            (3, Some("pg"), QueueingHint::Queue, waiting_keys.clone()),
            (4, Some("pg"), QueueingHint::Queue, waiting_keys.clone()),
            // `other` does not exist: its own members would learn so.
            (
                4,
                Some("other"),
                QueueingHint::Skip,
                vec!["podgroup:ns/other".to_string()],
            ),
            (
                4,
                Some("basic"),
                QueueingHint::Skip,
                vec!["podgroup:ns/basic".to_string()],
            ),
            (4, None, QueueingHint::Skip, vec![]),
            // The group is gone: the members learn so, whatever the count.
            (
                1,
                Some("gone"),
                QueueingHint::Skip,
                vec!["podgroup:ns/gone".to_string()],
            ),
        ];
        for (seen, added_group, want, want_keys) in cases {
            let store = Arc::new(PodGroupStore::new());
            store.set_group(Arc::new(group("ns", "pg", Some(3), None)));
            store.set_group(Arc::new(group("ns", "basic", None, None)));
            for i in 0..seen {
                store.observe_pod(&member(&format!("m{i}"), "pg").build());
            }
            let plugin = GangScheduling::new(Some(store));
            let registered = unisched_framework::EnqueueExtensions::events_to_register(&plugin)
                .into_iter()
                .find(|e| e.event.label == label)
                .expect("registered");
            let (hint, narrowing) = (registered.hint.unwrap(), registered.narrowing.unwrap());
            let added = EventObject::pod(match added_group {
                Some(g) => member("n", g).build(),
                None => PodBuilder::new("n").namespace("ns").uid("n").build(),
            });
            let name = format!("{label}: {seen} members, a pod of {added_group:?} added");
            assert_eq!(hint(&waiting, None, Some(&added)).unwrap(), want, "{name}");
            assert_eq!(
                hint(&of_other_group, None, Some(&added)).unwrap(),
                QueueingHint::Skip,
                "{name}: another group's member"
            );
            assert_eq!(
                (narrowing.event_keys)(None, Some(&added)),
                Some(want_keys),
                "{name}"
            );
        }
        // A member of a group that is gone is told so when another member arrives.
        let store = Arc::new(PodGroupStore::new());
        store.observe_pod(&member("m0", "gone").build());
        let plugin = GangScheduling::new(Some(store));
        let registered = unisched_framework::EnqueueExtensions::events_to_register(&plugin)
            .into_iter()
            .find(|e| e.event.label == label)
            .expect("registered");
        let added = EventObject::pod(member("n", "gone").build());
        let hint = registered.hint.unwrap();
        assert_eq!(
            hint(&member("w", "gone").build(), None, Some(&added)).unwrap(),
            QueueingHint::Queue,
            "{label}: the group is gone"
        );
    }
}

#[test]
fn topology_placements() {
    let nodes = || {
        snapshot([
            NodeBuilder::new("node1").label("rack", "a").info(),
            NodeBuilder::new("node2").label("rack", "b").info(),
            NodeBuilder::new("node3").label("rack", "b").info(),
            NodeBuilder::new("node4").info(),
        ])
    };
    let names = |placements: &[Placement]| -> Vec<(String, Vec<String>)> {
        placements
            .iter()
            .map(|p| {
                (
                    p.name.clone(),
                    p.nodes
                        .as_ref()
                        .map(|n| n.iter().cloned().collect())
                        .unwrap_or_default(),
                )
            })
            .collect()
    };
    let store = Arc::new(PodGroupStore::new());
    let plugin = TopologyPlacementGenerator::new(Some(store.clone()));

    let no_constraint = info(group("ns", "pg", Some(2), None));
    let parent = Placement::all_nodes();
    assert_eq!(
        plugin
            .generate_placements(&no_constraint, &nodes(), &parent)
            .unwrap(),
        vec![parent.clone()],
        "without a topology constraint the parent placement is returned"
    );

    let by_rack = info(group("ns", "pg", Some(2), Some("rack")));
    assert_eq!(
        names(&plugin.generate_placements(&by_rack, &nodes(), &parent).unwrap()),
        vec![
            ("a".to_string(), vec!["node1".to_string()]),
            ("b".to_string(), vec!["node2".to_string(), "node3".to_string()]),
        ],
        "one placement per domain; unlabelled nodes are in none"
    );

    let narrowed = Placement::of_nodes("parent", ["node1".to_string(), "node2".to_string()]);
    assert_eq!(
        names(&plugin.generate_placements(&by_rack, &nodes(), &narrowed).unwrap()),
        vec![
            ("a".to_string(), vec!["node1".to_string()]),
            ("b".to_string(), vec!["node2".to_string()]),
        ],
        "only the parent's nodes"
    );

    store.observe_pod(&member("bound", "pg").node_name("node3").build());
    assert_eq!(
        names(&plugin.generate_placements(&by_rack, &nodes(), &parent).unwrap()),
        vec![("b".to_string(), vec!["node2".to_string(), "node3".to_string()])],
        "scheduled pods pin the domain"
    );

    store.observe_pod(&member("bound2", "pg").node_name("node1").build());
    let err = plugin
        .generate_placements(&by_rack, &nodes(), &parent)
        .unwrap_err();
    assert!(
        err.message()
            .contains("more than 1 domain found for pod group: b, a"),
        "{}",
        err.message()
    );

    let unlabelled = Arc::new(PodGroupStore::new());
    unlabelled.observe_pod(&member("bound", "pg").node_name("node4").build());
    let err = TopologyPlacementGenerator::new(Some(unlabelled))
        .generate_placements(&by_rack, &nodes(), &parent)
        .unwrap_err();
    assert!(
        err.message().contains("no topology domain found"),
        "{}",
        err.message()
    );
}

#[test]
fn pods_count_scores_and_normalizes() {
    let g = info(group("ns", "pg", Some(2), None));
    let assignments = |already: usize, proposed: usize| PodGroupAssignments {
        placement: "p".into(),
        proposed: (0..proposed)
            .map(|i| (format!("pod{i}"), "node".to_string()))
            .collect(),
        already_scheduled: already,
    };
    let cases = [
        ("existing assigned and assumed pods", 3, 2, 5),
        ("no scheduled pods", 0, 4, 4),
        ("no proposed pods", 2, 0, 2),
        ("nothing", 0, 0, 0),
    ];
    for (name, already, proposed, want) in cases {
        assert_eq!(
            PodGroupPodsCount
                .score_placement(&g, &assignments(already, proposed))
                .unwrap(),
            want,
            "{name}"
        );
    }

    let normalize: [(&str, Vec<i64>, Result<Vec<i64>, &str>); 5] = [
        ("distinct scores", vec![10, 50, 110], Ok(vec![9, 45, 100])),
        ("equal scores", vec![50, 50], Ok(vec![100, 100])),
        ("single score", vec![50], Ok(vec![100])),
        (
            "a low score far from a close group",
            vec![11, 100, 101, 102],
            Ok(vec![10, 98, 99, 100]),
        ),
        (
            "zero scores",
            vec![0, 0],
            Err("no pods from pod group are assigned to any of the candidate placements"),
        ),
    ];
    for (name, mut scores, want) in normalize {
        let s = PodGroupPodsCount.normalize_placement_scores(&g, &mut scores);
        match want {
            Ok(w) => {
                assert!(s.is_success(), "{name}: {s:?}");
                assert_eq!(scores, w, "{name}");
            }
            Err(m) => {
                assert_eq!(s.code(), Code::Error, "{name}");
                assert_eq!(s.message(), m, "{name}");
            }
        }
    }
}

/// Beyond upstream: a topology key that no node carries as a label but devices carry as an
/// attribute. Each node's domain is the value all its devices share; a node with devices of two
/// values, or none, is in no domain; short attribute names are qualified by the driver; a label
/// of the same name, where any node has it, wins.
#[test]
fn device_attribute_topology_placements() {
    use unisched_cache::DraCache;
    use unisched_dra::testing::{dev, slice};

    const KEY: &str = "gpu.example.com/clique";
    let dra = Arc::new(DraCache::new());
    let gpus = |node: &str, cliques: &[&str]| {
        let mut s = slice(&format!("{node}-gpus"), "gpu.example.com", node, node);
        for (i, c) in cliques.iter().enumerate() {
            // The attribute by its short name: the driver's name qualifies it.
            s = s.device(dev(&format!("gpu-{i}")).string("clique", c));
        }
        s.build()
    };
    for (node, cliques) in [
        ("node1", &["c1", "c1"][..]),
        ("node2", &["c1"][..]),
        ("node3", &["c2", "c2"][..]),
        ("node4", &["c1", "c2"][..]),
    ] {
        dra.apply_slice(Arc::new(gpus(node, cliques))).unwrap();
    }
    // Another driver's attribute of the same short name is another attribute.
    dra.apply_slice(Arc::new(
        slice("node5-nics", "nic.example.com", "node5", "node5")
            .device(dev("nic-0").string("clique", "c1"))
            .build(),
    ))
    .unwrap();
    let nodes = || {
        snapshot(["node1", "node2", "node3", "node4", "node5", "node6"].map(|n| NodeBuilder::new(n).info()))
    };
    let names = |placements: &[Placement]| -> Vec<(String, Vec<String>)> {
        placements
            .iter()
            .map(|p| {
                let nodes = p
                    .nodes
                    .as_ref()
                    .map(|n| n.iter().cloned().collect())
                    .unwrap_or_default();
                (p.name.clone(), nodes)
            })
            .collect()
    };
    let store = Arc::new(PodGroupStore::new());
    let plugin = TopologyPlacementGenerator::new(Some(store.clone())).with_devices(Some(dra.clone()));
    let by_clique = info(group("ns", "pg", Some(2), Some(KEY)));
    let parent = Placement::all_nodes();
    assert_eq!(
        names(&plugin.generate_placements(&by_clique, &nodes(), &parent).unwrap()),
        vec![
            ("c1".to_string(), vec!["node1".to_string(), "node2".to_string()]),
            ("c2".to_string(), vec!["node3".to_string()]),
        ],
    );
    // Without the DRA state the key is only a label: no node has it, no placement.
    let labels_only = TopologyPlacementGenerator::new(Some(store.clone()));
    assert!(
        labels_only
            .generate_placements(&by_clique, &nodes(), &parent)
            .unwrap()
            .is_empty()
    );
    // A bound member pins the domain through its node's devices.
    store.observe_pod(&member("bound", "pg").node_name("node3").build());
    assert_eq!(
        names(&plugin.generate_placements(&by_clique, &nodes(), &parent).unwrap()),
        vec![("c2".to_string(), vec!["node3".to_string()])],
    );
    // A label of that name on any candidate node makes the key a label again (upstream's meaning).
    let labelled = snapshot([
        NodeBuilder::new("node1").label(KEY, "x").info(),
        NodeBuilder::new("node3").info(),
    ]);
    let fresh = TopologyPlacementGenerator::new(Some(Arc::new(PodGroupStore::new()))).with_devices(Some(dra));
    assert_eq!(
        names(&fresh.generate_placements(&by_clique, &labelled, &parent).unwrap()),
        vec![("x".to_string(), vec!["node1".to_string()])],
    );
}
