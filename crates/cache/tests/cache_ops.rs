//! Table-driven tests of every cache operation and error path, plus ghosts, placeholders, zone
//! order, snapshot incrementality, images and the debug dump.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step should abort the test

mod common;

use std::{collections::BTreeMap, sync::Arc, thread};

use common::{assert_consistent, fingerprint, node, pod, same};
use unisched_cache::{Cache, CacheError, NodeState};
use unisched_framework::{SchedulerCache, Snapshot};
use unisched_resource::Resource;

/// One step of a scripted case.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// `add_node(name, zone)`.
    AddNode(&'static str, &'static str),
    RemoveNode(&'static str),
    /// `assume_pod(uid on node)` (`None`: no nodeName).
    Assume(&'static str, Option<&'static str>),
    /// `forget_pod(uid on node)`.
    Forget(&'static str, Option<&'static str>),
    Add(&'static str, Option<&'static str>),
    /// `update_pod(old on first node, new on second node)` with a different shape.
    Update(&'static str, Option<&'static str>, Option<&'static str>),
    /// `update_pod` whose new object has another UID.
    UpdateUid(&'static str, &'static str),
    Remove(&'static str, Option<&'static str>),
}

fn apply(cache: &Cache, op: Op) -> Result<(), CacheError> {
    match op {
        Op::AddNode(n, z) => {
            cache.add_node(node(n, z, 0));
            Ok(())
        }
        Op::RemoveNode(n) => cache.remove_node(n),
        Op::Assume(u, n) => cache.assume_pod(pod(u, n, 0)),
        Op::Forget(u, n) => cache.forget_pod(&pod(u, n, 0)),
        Op::Add(u, n) => cache.add_pod(pod(u, n, 0)),
        Op::Update(u, from, to) => cache.update_pod(&pod(u, from, 0), pod(u, to, 2)),
        Op::UpdateUid(u, other) => cache.update_pod(&pod(u, Some("n1"), 0), pod(other, Some("n1"), 0)),
        Op::Remove(u, n) => cache.remove_pod(&pod(u, n, 0)),
    }
}

struct Case {
    name: &'static str,
    /// Steps with the expected error message of each (`None`: success).
    steps: &'static [(Op, Option<&'static str>)],
    /// Expected (pod_count, assumed_pod_count, node_count).
    counts: (usize, usize, usize),
    /// Expected pods per cached node (uids), ghosts and placeholders included.
    layout: &'static [(&'static str, &'static [&'static str])],
    /// Expected snapshot node order.
    snapshot: &'static [&'static str],
}

const N1: Option<&str> = Some("n1");
const N2: Option<&str> = Some("n2");
const N9: Option<&str> = Some("n9");

fn cases() -> Vec<Case> {
    use Op::*;
    vec![
        Case {
            name: "assume a new pod",
            steps: &[(AddNode("n1", ""), None), (Assume("u1", N1), None)],
            counts: (1, 1, 1),
            layout: &[("n1", &["u1"])],
            snapshot: &["n1"],
        },
        Case {
            name: "assume twice",
            steps: &[
                (AddNode("n1", ""), None),
                (Assume("u1", N1), None),
                (
                    Assume("u1", N1),
                    Some("pod u1(default/p-u1) is in the cache, so can't be assumed"),
                ),
            ],
            counts: (1, 1, 1),
            layout: &[("n1", &["u1"])],
            snapshot: &["n1"],
        },
        Case {
            name: "assume an added pod",
            steps: &[
                (AddNode("n1", ""), None),
                (Add("u1", N1), None),
                (
                    Assume("u1", N2),
                    Some("pod u1(default/p-u1) is in the cache, so can't be assumed"),
                ),
            ],
            counts: (1, 0, 1),
            layout: &[("n1", &["u1"])],
            snapshot: &["n1"],
        },
        Case {
            name: "assume without nodeName",
            steps: &[(
                Assume("u1", None),
                Some("pod u1(default/p-u1) has no spec.nodeName, so it cannot be placed in the cache"),
            )],
            counts: (0, 0, 0),
            layout: &[],
            snapshot: &[],
        },
        Case {
            name: "forget an assumed pod",
            steps: &[
                (AddNode("n1", ""), None),
                (Assume("u1", N1), None),
                (Forget("u1", N1), None),
            ],
            counts: (0, 0, 1),
            layout: &[("n1", &[])],
            snapshot: &["n1"],
        },
        Case {
            name: "forget is idempotent and ignores unknown pods",
            steps: &[
                (AddNode("n1", ""), None),
                (Forget("u0", N1), None),
                (Assume("u1", N1), None),
                (Forget("u1", N1), None),
                (Forget("u1", N1), None),
            ],
            counts: (0, 0, 1),
            layout: &[("n1", &[])],
            snapshot: &["n1"],
        },
        Case {
            name: "forget on another node",
            steps: &[
                (AddNode("n1", ""), None),
                (Assume("u1", N1), None),
                (
                    Forget("u1", N2),
                    Some("pod u1(default/p-u1) was assumed on n2 but assigned to n1"),
                ),
            ],
            counts: (1, 1, 1),
            layout: &[("n1", &["u1"])],
            snapshot: &["n1"],
        },
        Case {
            name: "forget a confirmed pod",
            steps: &[
                (AddNode("n1", ""), None),
                (Assume("u1", N1), None),
                (Add("u1", N1), None),
                (
                    Forget("u1", N1),
                    Some("pod u1(default/p-u1) is not assumed, so it cannot be removed or forgotten"),
                ),
            ],
            counts: (1, 0, 1),
            layout: &[("n1", &["u1"])],
            snapshot: &["n1"],
        },
        Case {
            name: "add confirms an assumed pod",
            steps: &[
                (AddNode("n1", ""), None),
                (Assume("u1", N1), None),
                (Add("u1", N1), None),
            ],
            counts: (1, 0, 1),
            layout: &[("n1", &["u1"])],
            snapshot: &["n1"],
        },
        Case {
            name: "add moves an assumed pod bound elsewhere",
            steps: &[
                (AddNode("n1", ""), None),
                (AddNode("n2", ""), None),
                (Assume("u1", N1), None),
                (Add("u1", N2), None),
            ],
            counts: (1, 0, 2),
            layout: &[("n1", &[]), ("n2", &["u1"])],
            snapshot: &["n1", "n2"],
        },
        Case {
            name: "add twice",
            steps: &[
                (AddNode("n1", ""), None),
                (Add("u1", N1), None),
                (
                    Add("u1", N1),
                    Some("pod u1(default/p-u1) was already in added state"),
                ),
            ],
            counts: (1, 0, 1),
            layout: &[("n1", &["u1"])],
            snapshot: &["n1"],
        },
        Case {
            name: "add without nodeName",
            steps: &[(
                Add("u1", None),
                Some("pod u1(default/p-u1) has no spec.nodeName, so it cannot be placed in the cache"),
            )],
            counts: (0, 0, 0),
            layout: &[],
            snapshot: &[],
        },
        Case {
            name: "update an added pod",
            steps: &[
                (AddNode("n1", ""), None),
                (Add("u1", N1), None),
                (Update("u1", N1, N1), None),
            ],
            counts: (1, 0, 1),
            layout: &[("n1", &["u1"])],
            snapshot: &["n1"],
        },
        Case {
            name: "update an unknown pod",
            steps: &[(
                Update("u1", N1, N1),
                Some("pod u1(default/p-u1) is not added to scheduler cache, so cannot be updated"),
            )],
            counts: (0, 0, 0),
            layout: &[],
            snapshot: &[],
        },
        Case {
            name: "update an assumed pod",
            steps: &[
                (AddNode("n1", ""), None),
                (Assume("u1", N1), None),
                (
                    Update("u1", N1, N1),
                    Some("assumed pod u1(default/p-u1) should not be updated"),
                ),
            ],
            counts: (1, 1, 1),
            layout: &[("n1", &["u1"])],
            snapshot: &["n1"],
        },
        Case {
            name: "update to another node is applied and reported",
            steps: &[
                (AddNode("n1", ""), None),
                (AddNode("n2", ""), None),
                (Add("u1", N1), None),
                (
                    Update("u1", N1, N2),
                    Some(
                        "pod u1(default/p-u1) updated on a different node (n2) than previously added to \
                         (n1); scheduler cache is corrupted and was corrected to follow the update",
                    ),
                ),
            ],
            counts: (1, 0, 2),
            layout: &[("n1", &[]), ("n2", &["u1"])],
            snapshot: &["n1", "n2"],
        },
        Case {
            name: "update that drops nodeName",
            steps: &[
                (AddNode("n1", ""), None),
                (Add("u1", N1), None),
                (
                    Update("u1", N1, None),
                    Some("pod u1(default/p-u1) has no spec.nodeName, so it cannot be placed in the cache"),
                ),
            ],
            counts: (1, 0, 1),
            layout: &[("n1", &["u1"])],
            snapshot: &["n1"],
        },
        Case {
            name: "update that changes the UID",
            steps: &[
                (AddNode("n1", ""), None),
                (Add("u1", N1), None),
                (
                    UpdateUid("u1", "u2"),
                    Some("pod default/p-u2 changed its UID from u1 to u2 in an update"),
                ),
            ],
            counts: (1, 0, 1),
            layout: &[("n1", &["u1"])],
            snapshot: &["n1"],
        },
        Case {
            name: "remove an added pod",
            steps: &[
                (AddNode("n1", ""), None),
                (Add("u1", N1), None),
                (Remove("u1", N1), None),
            ],
            counts: (0, 0, 1),
            layout: &[("n1", &[])],
            snapshot: &["n1"],
        },
        Case {
            name: "remove an unknown pod",
            steps: &[(
                Remove("u1", N1),
                Some("pod u1(default/p-u1) is not found in scheduler cache, so cannot be removed from it"),
            )],
            counts: (0, 0, 0),
            layout: &[],
            snapshot: &[],
        },
        Case {
            name: "remove with an empty nodeName (missed delete) finds the stored pod",
            steps: &[
                (AddNode("n1", ""), None),
                (Add("u1", N1), None),
                (Remove("u1", None), None),
            ],
            counts: (0, 0, 1),
            layout: &[("n1", &[])],
            snapshot: &["n1"],
        },
        Case {
            name: "remove naming another node removes the stored pod and reports",
            steps: &[
                (AddNode("n1", ""), None),
                (Add("u1", N1), None),
                (
                    Remove("u1", N2),
                    Some(
                        "pod u1(default/p-u1) was deleted from node n2 but the cache had it on n1; \
                         scheduler cache is corrupted, the pod was removed from n1",
                    ),
                ),
            ],
            counts: (0, 0, 1),
            layout: &[("n1", &[])],
            snapshot: &["n1"],
        },
        Case {
            name: "remove an assumed pod (deleted while binding), then forget is a no-op",
            steps: &[
                (AddNode("n1", ""), None),
                (Assume("u1", N1), None),
                (Remove("u1", N1), None),
                (Forget("u1", N1), None),
            ],
            counts: (0, 0, 1),
            layout: &[("n1", &[])],
            snapshot: &["n1"],
        },
        Case {
            name: "remove an unknown node",
            steps: &[(RemoveNode("n9"), Some("node n9 is not found"))],
            counts: (0, 0, 0),
            layout: &[],
            snapshot: &[],
        },
        Case {
            name: "remove a node twice",
            steps: &[
                (AddNode("n1", ""), None),
                (RemoveNode("n1"), None),
                (RemoveNode("n1"), Some("node n1 is not found")),
            ],
            counts: (0, 0, 0),
            layout: &[],
            snapshot: &[],
        },
        Case {
            name: "a placeholder is not a node that can be removed",
            steps: &[
                (Add("u1", N9), None),
                (RemoveNode("n9"), Some("node n9 is not found")),
            ],
            counts: (1, 0, 1),
            layout: &[("n9", &["u1"])],
            snapshot: &[],
        },
        Case {
            name: "a removed node with pods stays as a ghost until its last pod goes",
            steps: &[
                (AddNode("n1", ""), None),
                (AddNode("n2", ""), None),
                (Add("u1", N1), None),
                (Add("u2", N1), None),
                (RemoveNode("n1"), None),
                (Remove("u1", N1), None),
            ],
            counts: (1, 0, 2),
            layout: &[("n1", &["u2"]), ("n2", &[])],
            snapshot: &["n2"],
        },
        Case {
            name: "a ghost disappears with its last pod",
            steps: &[
                (AddNode("n1", ""), None),
                (Add("u1", N1), None),
                (RemoveNode("n1"), None),
                (Remove("u1", None), None),
            ],
            counts: (0, 0, 0),
            layout: &[],
            snapshot: &[],
        },
        Case {
            name: "a node re-added while a ghost keeps its pods",
            steps: &[
                (AddNode("n1", ""), None),
                (Add("u1", N1), None),
                (RemoveNode("n1"), None),
                (AddNode("n1", ""), None),
            ],
            counts: (1, 0, 1),
            layout: &[("n1", &["u1"])],
            snapshot: &["n1"],
        },
        Case {
            name: "pods before their node: placeholder, then a real node",
            steps: &[
                (Add("u1", N1), None),
                (Assume("u2", N1), None),
                (AddNode("n1", ""), None),
            ],
            counts: (2, 1, 1),
            layout: &[("n1", &["u1", "u2"])],
            snapshot: &["n1"],
        },
        Case {
            name: "forgetting the only pod of a placeholder drops it",
            steps: &[(Assume("u1", N9), None), (Forget("u1", N9), None)],
            counts: (0, 0, 0),
            layout: &[],
            snapshot: &[],
        },
    ]
}

#[test]
fn scripted_cases() {
    for case in cases() {
        let cache = Cache::new();
        for (i, (op, want)) in case.steps.iter().enumerate() {
            let got = apply(&cache, *op).map_err(|e| e.to_string());
            assert_eq!(got.err().as_deref(), *want, "{}: step {i} {op:?}", case.name);
        }
        let counts = (cache.pod_count(), cache.assumed_pod_count(), cache.node_count());
        assert_eq!(counts, case.counts, "{}: (pods, assumed, nodes)", case.name);
        let dump = cache.dump();
        let layout: Vec<(String, Vec<String>)> = dump
            .nodes
            .iter()
            .map(|n| {
                let mut uids: Vec<String> = n.info.pods.iter().map(|p| p.uid.clone()).collect();
                uids.sort();
                (n.name.clone(), uids)
            })
            .collect();
        let want: Vec<(String, Vec<String>)> = case
            .layout
            .iter()
            .map(|(n, uids)| (n.to_string(), uids.iter().map(|u| u.to_string()).collect()))
            .collect();
        assert_eq!(layout, want, "{}: layout", case.name);
        for n in &dump.nodes {
            assert_consistent(&n.info);
        }
        let snap = cache.update_snapshot();
        let names: Vec<&str> = snap.nodes().iter().map(|n| n.name()).collect();
        assert_eq!(names, case.snapshot, "{}: snapshot", case.name);
        for n in snap.nodes() {
            assert!(
                n.node().is_some(),
                "{}: snapshot has a node without object",
                case.name
            );
            assert_consistent(n);
        }
    }
}

#[test]
fn error_variants_carry_their_fields() {
    let cache = Cache::new();
    cache.add_node(node("n1", "", 0));
    cache.add_pod(pod("u1", Some("n1"), 0)).unwrap();
    assert_eq!(
        cache.forget_pod(&pod("u1", Some("n2"), 0)),
        Err(CacheError::AssumedOnDifferentNode {
            uid: "u1".into(),
            pod: "default/p-u1".into(),
            assumed_on: "n2".into(),
            cached_on: "n1".into(),
        })
    );
    assert_eq!(
        cache.remove_pod(&pod("u1", Some("n3"), 0)),
        Err(CacheError::CorruptedRemove {
            uid: "u1".into(),
            pod: "default/p-u1".into(),
            deleted_on: "n3".into(),
            cached_on: "n1".into(),
        })
    );
    assert_eq!(
        cache.remove_node("zz"),
        Err(CacheError::NodeNotFound { name: "zz".into() })
    );
}

#[test]
fn requests_follow_pods_including_dra_footprints() {
    let cache = Cache::new();
    cache.add_node(node("n1", "", 0));
    let shapes: Vec<_> = (0..common::SHAPES)
        .map(|s| pod(&format!("u{s}"), Some("n1"), s))
        .collect();
    let mut want = Resource::default();
    for p in &shapes {
        cache.add_pod(p.clone()).unwrap();
        want.add(p.requests());
    }
    let snap = cache.update_snapshot();
    let n1 = snap.get("n1").unwrap();
    assert!(same(&n1.requested, &want));
    assert_consistent(n1);
    assert_eq!(n1.allocatable.milli_cpu, 8000);
    assert_eq!(n1.used_ports.len(), 1, "shape 3 uses a host port");
    assert_eq!(
        n1.pods_with_required_anti_affinity.len(),
        1,
        "shape 5 has required anti-affinity"
    );

    // The KEP-5517 statuses count: the mapped claim adds 2 CPUs and 1Gi on top of the containers.
    let dra = &shapes[4];
    let mut without = (*dra.pod).clone();
    without.status = None;
    let plain = unisched_framework::PodInfo::new(without);
    assert_eq!(dra.requests().milli_cpu - plain.requests().milli_cpu, 2000);
    assert!(dra.requests().memory > plain.requests().memory + (1 << 30));

    for p in &shapes {
        cache.remove_pod(p).unwrap();
    }
    let n1 = cache.update_snapshot().get("n1").unwrap().clone();
    assert!(same(&n1.requested, &Resource::default()), "{:?}", n1.requested);
    assert!(same(&n1.non_zero_requested, &Resource::default()));
    assert_eq!(n1.used_ports.len(), 0);
}

#[test]
fn zone_interleaved_order() {
    let cache = Cache::new();
    for (n, z) in [
        ("a1", "za"),
        ("a2", "za"),
        ("a3", "za"),
        ("b1", "zb"),
        ("c1", "zc"),
        ("c2", "zc"),
        ("x", ""),
    ] {
        cache.add_node(node(n, z, 0));
    }
    let order = |c: &Cache| {
        c.update_snapshot()
            .nodes()
            .iter()
            .map(|n| n.name().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(order(&cache), ["a1", "b1", "c1", "x", "a2", "c2", "a3"]);

    // Removing the only node of a zone removes the zone.
    cache.remove_node("b1").unwrap();
    assert_eq!(order(&cache), ["a1", "c1", "x", "a2", "c2", "a3"]);

    // A zone change moves the node to the end of its new zone; an update in the same zone keeps it.
    cache.update_node(node("a1", "zc", 1));
    assert_eq!(order(&cache), ["a2", "c1", "x", "a3", "c2", "a1"]);
    let before = cache.update_snapshot();
    cache.update_node(node("c1", "zc", 2));
    let after = cache.update_snapshot();
    assert_eq!(order(&cache), ["a2", "c1", "x", "a3", "c2", "a1"]);
    assert!(!Arc::ptr_eq(&before, &after));
    assert_eq!(after.get("c1").unwrap().allocatable.milli_cpu, 16_000);

    // Re-adding a deleted node appends it to its zone.
    cache.add_node(node("b1", "zb", 0));
    cache.remove_node("a2").unwrap();
    cache.add_node(node("a2", "za", 0));
    assert_eq!(order(&cache), ["a3", "c1", "x", "b1", "a2", "c2", "a1"]);
}

fn ptr_eq_nodes(a: &Snapshot, b: &Snapshot, name: &str) -> bool {
    Arc::ptr_eq(a.get(name).unwrap(), b.get(name).unwrap())
}

#[test]
fn snapshot_is_incremental() {
    let cache = Cache::new();
    for i in 0..6 {
        cache.add_node(node(&format!("n{i}"), ["za", "zb"][i % 2], 0));
    }
    let s1 = cache.update_snapshot();
    assert_eq!(s1.len(), 6);

    // Nothing changed: the very same snapshot.
    let s2 = cache.update_snapshot();
    assert!(Arc::ptr_eq(&s1, &s2));

    // One pod on n3: only n3 is a new NodeInfo; the old snapshot is untouched.
    cache.assume_pod(pod("u1", Some("n3"), 2)).unwrap();
    let s3 = cache.update_snapshot();
    assert!(!Arc::ptr_eq(&s2, &s3));
    for i in [0, 1, 2, 4, 5] {
        assert!(ptr_eq_nodes(&s2, &s3, &format!("n{i}")), "n{i} was copied");
    }
    assert!(!ptr_eq_nodes(&s2, &s3, "n3"));
    assert_eq!(
        s2.get("n3").unwrap().pods.len(),
        0,
        "a held snapshot never changes"
    );
    assert_eq!(s3.get("n3").unwrap().pods.len(), 1);
    assert!(s3.generation > s2.generation);
    let order = |s: &Snapshot| s.nodes().iter().map(|n| n.name().to_string()).collect::<Vec<_>>();
    assert_eq!(order(&s2), order(&s3));

    // Same when nobody holds the previous snapshot (the cache may update it in place).
    drop((s1, s2));
    let n0 = s3.get("n0").unwrap().clone();
    drop(s3);
    cache.forget_pod(&pod("u1", Some("n3"), 2)).unwrap();
    let s4 = cache.update_snapshot();
    assert!(Arc::ptr_eq(s4.get("n0").unwrap(), &n0));
    assert_eq!(s4.get("n3").unwrap().pods.len(), 0);

    // Several changes to one node between snapshots: one new NodeInfo with all of them.
    cache.add_pod(pod("u2", Some("n1"), 0)).unwrap();
    cache.add_pod(pod("u3", Some("n1"), 4)).unwrap();
    let s5 = cache.update_snapshot();
    assert_eq!(s5.get("n1").unwrap().pods.len(), 2);
    assert!(ptr_eq_nodes(&s4, &s5, "n3"));

    // Changes confined to ghosts and placeholders do not touch the snapshot.
    cache.add_pod(pod("u4", Some("n2"), 0)).unwrap();
    cache.remove_node("n2").unwrap();
    let s6 = cache.update_snapshot();
    assert_eq!(s6.len(), 5);
    cache.add_pod(pod("u5", Some("later"), 0)).unwrap();
    cache.remove_pod(&pod("u4", None, 0)).unwrap();
    let s7 = cache.update_snapshot();
    assert!(Arc::ptr_eq(&s6, &s7));
    for n in ["n0", "n1", "n3", "n4", "n5"] {
        assert!(ptr_eq_nodes(&s5, &s6, n), "{n} was copied by a node removal");
    }

    // A node becoming real rebuilds the order but shares every unchanged NodeInfo.
    cache.add_node(node("later", "za", 0));
    let s8 = cache.update_snapshot();
    assert_eq!(s8.len(), 6);
    assert_eq!(s8.get("later").unwrap().pods.len(), 1);
    for n in ["n0", "n1", "n3", "n4", "n5"] {
        assert!(ptr_eq_nodes(&s7, &s8, n));
    }
    // The cache and the snapshot share every NodeInfo.
    for n in s8.nodes() {
        assert!(Arc::ptr_eq(n, &cache.node_info(n.name()).unwrap()));
    }
}

#[test]
fn image_states_count_nodes() {
    let cache = Cache::new();
    cache.add_node(node("n0", "", 0)); // app:1 (two names)
    let s = cache.update_snapshot();
    let images = &s.get("n0").unwrap().image_states;
    assert_eq!(images.len(), 2);
    assert_eq!(images["registry/app:1"].size, 300_000_000);
    assert_eq!(images["registry/app:1"].num_nodes, 1);

    cache.add_node(node("n1", "", 1)); // app:1, db:2
    let s = cache.update_snapshot();
    let n1 = &s.get("n1").unwrap().image_states;
    assert_eq!(n1["registry/app:1"].num_nodes, 2);
    assert_eq!(n1["registry/db:2"].num_nodes, 1);
    assert_eq!(n1["registry/db:2"].size, 900_000_000);
    // n0 did not change, so it keeps the count it was last refreshed with (as upstream) ...
    assert_eq!(s.get("n0").unwrap().image_states["registry/app:1"].num_nodes, 1);
    // ... until it changes.
    cache.add_pod(pod("u1", Some("n0"), 0)).unwrap();
    let s = cache.update_snapshot();
    assert_eq!(s.get("n0").unwrap().image_states["registry/app:1"].num_nodes, 2);

    // Images leave with the node, and a node update replaces its images.
    cache.remove_node("n1").unwrap();
    cache.update_node(node("n0", "", 2)); // no images
    cache.add_node(node("n2", "", 0));
    let s = cache.update_snapshot();
    assert!(s.get("n0").unwrap().image_states.is_empty());
    assert_eq!(s.get("n2").unwrap().image_states["registry/app:1"].num_nodes, 1);
}

#[test]
fn dump_shows_nodes_and_assumed_pods() {
    let cache = Cache::new();
    cache.add_node(node("n1", "za", 0));
    cache.add_node(node("n2", "za", 0));
    cache.assume_pod(pod("u1", Some("n1"), 0)).unwrap();
    cache.finish_binding(&pod("u1", Some("n1"), 0));
    cache.add_pod(pod("u2", Some("n2"), 0)).unwrap();
    cache.remove_node("n2").unwrap();
    cache.add_pod(pod("u3", Some("n3"), 0)).unwrap();
    assert!(cache.is_assumed("u1"));
    assert!(!cache.is_assumed("u2"));
    assert!(!cache.is_assumed("nope"));
    assert_eq!(cache.get_pod("u2").unwrap().name, "p-u2");
    assert!(cache.get_pod("nope").is_none());

    let dump = cache.dump();
    let states: BTreeMap<&str, NodeState> = dump.nodes.iter().map(|n| (n.name.as_str(), n.state)).collect();
    assert_eq!(
        states,
        BTreeMap::from([
            ("n1", NodeState::Ready),
            ("n2", NodeState::Ghost),
            ("n3", NodeState::Placeholder)
        ])
    );
    assert_eq!(dump.assumed_pods.len(), 1);
    assert_eq!(dump.assumed_pods[0].pod, "default/p-u1");
    assert_eq!(dump.assumed_pods[0].node, "n1");
    assert!(dump.assumed_pods[0].binding_finished);
    let text = dump.to_string();
    assert!(
        text.contains("n1 [Ready] pods=1 requested=cpu=100m,memory=134217728"),
        "{text}"
    );
    assert!(
        text.contains("allocatable=cpu=8000m,memory=34359738368"),
        "{text}"
    );
    assert!(text.contains("n2 [Ghost] pods=1"), "{text}");
    assert!(text.contains("n3 [Placeholder] pods=1"), "{text}");
    assert!(text.contains("default/p-u1 (u1) on n1, binding sent"), "{text}");

    // finish_binding on a confirmed pod changes nothing.
    cache.add_pod(pod("u1", Some("n1"), 0)).unwrap();
    cache.finish_binding(&pod("u1", Some("n1"), 0));
    assert!(cache.dump().assumed_pods.is_empty());
}

#[test]
fn assume_then_forget_restores_state() {
    let cache = Cache::new();
    cache.add_node(node("n1", "za", 0));
    cache.add_node(node("n2", "zb", 1));
    for s in 0..common::SHAPES {
        cache
            .add_pod(pod(
                &format!("b{s}"),
                Some(if s % 2 == 0 { "n1" } else { "n2" }),
                s,
            ))
            .unwrap();
    }
    for s in 0..common::SHAPES {
        for target in ["n1", "n2", "unknown"] {
            // Snapshot first: it refreshes image counts, which is not what this test is about.
            let snap_before: Vec<_> = cache
                .update_snapshot()
                .nodes()
                .iter()
                .map(|n| fingerprint(n))
                .collect();
            let before: Vec<_> = cache.dump().nodes.iter().map(|n| fingerprint(&n.info)).collect();
            let p = pod("a", Some(target), s);
            cache.assume_pod(p.clone()).unwrap();
            assert_ne!(
                cache
                    .dump()
                    .nodes
                    .iter()
                    .map(|n| fingerprint(&n.info))
                    .collect::<Vec<_>>(),
                before
            );
            cache.forget_pod(&p).unwrap();
            cache.forget_pod(&p).unwrap();
            let after: Vec<_> = cache.dump().nodes.iter().map(|n| fingerprint(&n.info)).collect();
            assert_eq!(after, before, "shape {s} on {target}");
            let snap_after: Vec<_> = cache
                .update_snapshot()
                .nodes()
                .iter()
                .map(|n| fingerprint(n))
                .collect();
            assert_eq!(snap_after, snap_before, "shape {s} on {target}: snapshot");
        }
    }
}

#[test]
fn scheduler_cache_trait_object() {
    let cache = Cache::new();
    cache.add_node(node("n1", "", 0));
    let dynamic: &dyn SchedulerCache = &cache;
    let p = pod("u1", Some("n1"), 0);
    dynamic.assume_pod(p.clone()).unwrap();
    assert!(dynamic.is_assumed("u1"));
    assert_eq!(
        dynamic.assume_pod(p.clone()).map_err(|e| e.to_string()),
        Err("pod u1(default/p-u1) is in the cache, so can't be assumed".to_string())
    );
    dynamic.finish_binding(&p);
    assert_eq!(dynamic.update_snapshot().get("n1").unwrap().pods.len(), 1);
    assert_eq!(
        dynamic
            .forget_pod(&pod("u1", Some("n2"), 0))
            .map_err(|e| e.to_string()),
        Err("pod u1(default/p-u1) was assumed on n2 but assigned to n1".to_string())
    );
    dynamic.forget_pod(&p).unwrap();
    assert!(!dynamic.is_assumed("u1"));
}

#[test]
fn concurrent_use() {
    let cache = Arc::new(Cache::new());
    for i in 0..8 {
        cache.add_node(node(&format!("n{i}"), ["za", "zb"][i % 2], 0));
    }
    let workers: Vec<_> = (0..4)
        .map(|t| {
            let cache = cache.clone();
            thread::spawn(move || {
                for i in 0..200 {
                    let p = pod(&format!("t{t}-{i}"), Some(&format!("n{}", i % 8)), i);
                    cache.assume_pod(p.clone()).unwrap();
                    let snap = cache.update_snapshot();
                    assert_eq!(snap.len(), 8);
                    if i % 3 == 0 {
                        cache.forget_pod(&p).unwrap();
                    } else {
                        cache.add_pod(p).unwrap();
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(cache.assumed_pod_count(), 0);
    assert_eq!(cache.pod_count(), 4 * (200 - 67));
    for n in cache.update_snapshot().nodes() {
        assert_consistent(n);
    }
}

/// Two 9e15-CPU pods bound (by nodeName) to a 9e15-CPU node overflow the `i64`
/// milli-CPU total. After one is deleted, the node must be exactly as full as the survivor makes
/// it, so an 8e15-CPU pod does not fit beside it.
#[test]
fn huge_requests_leave_the_ledger_exact() {
    use k8s_openapi::api::core::v1::{Container, Node, NodeStatus, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    let huge_pod = |uid: &str, cpu: &str| {
        let spec = PodSpec {
            node_name: Some("big".into()),
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests: Some(common::list(&[("cpu", cpu)])),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        };
        common::pod_from(uid, spec, None)
    };
    let cache = Cache::new();
    cache.add_node(Arc::new(Node {
        metadata: ObjectMeta {
            name: Some("big".into()),
            ..Default::default()
        },
        status: Some(NodeStatus {
            allocatable: Some(common::list(&[("cpu", "9e15"), ("pods", "110")])),
            ..Default::default()
        }),
        ..Default::default()
    }));
    let (a, b) = (huge_pod("a", "9e15"), huge_pod("b", "9e15"));
    cache.add_pod(a.clone()).unwrap();
    cache.add_pod(b).unwrap();
    let info = cache.node_info("big").unwrap();
    assert_eq!(info.requested_sum().get("cpu"), 18_000_000_000_000_000_000);
    // The i64 view is at the bound: nothing more fits.
    assert_eq!(info.requested.milli_cpu, i64::MAX);
    assert_consistent(&info);

    cache.remove_pod(&huge_pod("b", "9e15")).unwrap();
    let info = cache.node_info("big").unwrap();
    assert_eq!(info.requested.milli_cpu, 9_000_000_000_000_000_000);
    assert_eq!(info.requested_sum().get("cpu"), 9_000_000_000_000_000_000);
    assert_consistent(&info);
    let newcomer = huge_pod("c", "8e15");
    let free = info
        .allocatable
        .milli_cpu
        .saturating_sub(info.requested.milli_cpu);
    assert!(
        newcomer.requests().milli_cpu > free,
        "8e15 CPU must not fit, free {free}"
    );

    cache.remove_pod(&a).unwrap();
    assert_eq!(cache.node_info("big").unwrap().requested, Resource::default());
}
