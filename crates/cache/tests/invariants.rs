//! Property test of the cache against a small model (acceptance criterion of the cache issue).
//!
//! Any random sequence of node add/update/remove and pod assume/forget/add/update/remove/finish
//! must:
//! - give each operation the outcome upstream semantics prescribe (the model decides);
//! - keep every `NodeInfo.requested` and `non_zero_requested` equal to the sum over its pods, in the
//!   cache and in snapshots (pods with cpu, memory, hugepages, extended resources, overhead, init
//!   containers and KEP-5517 node-allocatable claim statuses);
//! - hold every pod exactly once, on the node the model says, with the right assumed flag;
//! - list exactly the existing nodes in snapshots, sharing unchanged `NodeInfo`s with the previous
//!   snapshot and returning the same snapshot when nothing visible changed, and never change a
//!   snapshot someone still holds (released snapshots are recycled);
//! - make assume followed by forget restore the exact prior state (DESIGN.md invariant 3), and a
//!   second forget a no-op.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step should abort the test

mod common;

use std::{
    collections::{BTreeMap, BTreeSet, btree_map::Entry},
    sync::Arc,
};

use common::{Fingerprint, assert_consistent, fingerprint, node, pod};
use proptest::{prelude::*, test_runner::FileFailurePersistence};
use unisched_cache::{Cache, CacheError, NodeState};
use unisched_framework::Snapshot;

const NODES: [&str; 4] = ["n0", "n1", "n2", "n3"];
const ZONES: [&str; 3] = ["za", "zb", ""];
const PODS: usize = 8;

#[derive(Clone, Debug)]
enum Op {
    AddNode {
        node: usize,
        zone: usize,
        variant: usize,
    },
    RemoveNode {
        node: usize,
    },
    Assume {
        pod: usize,
        node: usize,
        shape: usize,
    },
    Forget {
        pod: usize,
        node: usize,
    },
    AssumeForget {
        pod: usize,
        node: usize,
        shape: usize,
    },
    AddPod {
        pod: usize,
        node: usize,
        shape: usize,
    },
    UpdatePod {
        pod: usize,
        node: usize,
        shape: usize,
    },
    RemovePod {
        pod: usize,
        node: Option<usize>,
    },
    FinishBinding {
        pod: usize,
    },
    /// Take a snapshot; `hold` keeps it alive (as an in-flight binding cycle would).
    Snapshot {
        hold: bool,
    },
    /// Drop a held snapshot.
    Release {
        idx: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let n = 0..NODES.len();
    let p = 0..PODS;
    let s = 0..common::SHAPES;
    prop_oneof![
        2 => (n.clone(), 0..ZONES.len(), 0..3usize).prop_map(|(node, zone, variant)| Op::AddNode { node, zone, variant }),
        1 => n.clone().prop_map(|node| Op::RemoveNode { node }),
        3 => (p.clone(), n.clone(), s.clone()).prop_map(|(pod, node, shape)| Op::Assume { pod, node, shape }),
        2 => (p.clone(), n.clone()).prop_map(|(pod, node)| Op::Forget { pod, node }),
        2 => (p.clone(), n.clone(), s.clone()).prop_map(|(pod, node, shape)| Op::AssumeForget { pod, node, shape }),
        3 => (p.clone(), n.clone(), s.clone()).prop_map(|(pod, node, shape)| Op::AddPod { pod, node, shape }),
        2 => (p.clone(), n.clone(), s).prop_map(|(pod, node, shape)| Op::UpdatePod { pod, node, shape }),
        2 => (p.clone(), proptest::option::of(n)).prop_map(|(pod, node)| Op::RemovePod { pod, node }),
        1 => p.prop_map(|pod| Op::FinishBinding { pod }),
        3 => any::<bool>().prop_map(|hold| Op::Snapshot { hold }),
        1 => (0..8usize).prop_map(|idx| Op::Release { idx }),
    ]
}

/// What the cache should hold.
#[derive(Default)]
struct Model {
    nodes: BTreeSet<String>,
    /// uid → (node, assumed).
    pods: BTreeMap<String, (String, bool)>,
    /// Nodes changed since the last snapshot.
    touched: BTreeSet<String>,
    last: Option<Arc<Snapshot>>,
    /// Snapshots kept alive, with what they showed when taken: they must never change.
    held: Vec<(Arc<Snapshot>, Vec<Fingerprint>)>,
}

fn uid(p: usize) -> String {
    format!("u{p}")
}

fn kind(r: &Result<(), CacheError>) -> &'static str {
    match r {
        Ok(()) => "ok",
        Err(CacheError::AlreadyInCache { .. }) => "already-in-cache",
        Err(CacheError::NoNodeName { .. }) => "no-node-name",
        Err(CacheError::AssumedOnDifferentNode { .. }) => "assumed-on-different-node",
        Err(CacheError::NotAssumed { .. }) => "not-assumed",
        Err(CacheError::AlreadyAdded { .. }) => "already-added",
        Err(CacheError::NotAdded { .. }) => "not-added",
        Err(CacheError::UpdateOfAssumed { .. }) => "update-of-assumed",
        Err(CacheError::UidChanged { .. }) => "uid-changed",
        Err(CacheError::CorruptedUpdate { .. }) => "corrupted-update",
        Err(CacheError::NotFound { .. }) => "not-found",
        Err(CacheError::CorruptedRemove { .. }) => "corrupted-remove",
        Err(CacheError::NodeNotFound { .. }) => "node-not-found",
    }
}

/// Fingerprints without image node counts: those are refreshed when a node is next snapshotted
/// (see the `images` module), which is not a change assume/forget is responsible for.
fn prints(nodes: impl Iterator<Item = Fingerprint>) -> Vec<Fingerprint> {
    nodes
        .map(|mut f| {
            for image in &mut f.images {
                image.2 = 0;
            }
            f
        })
        .collect()
}

fn cache_prints(cache: &Cache) -> Vec<Fingerprint> {
    prints(cache.dump().nodes.iter().map(|n| fingerprint(&n.info)))
}

/// Takes a snapshot and checks it against the model and the previous snapshot.
fn snapshot(cache: &Cache, model: &mut Model) -> Arc<Snapshot> {
    let snap = cache.update_snapshot();
    let names: BTreeSet<String> = snap.nodes().iter().map(|n| n.name().to_string()).collect();
    assert_eq!(names.len(), snap.len(), "duplicate node in snapshot");
    assert_eq!(names, model.nodes, "snapshot lists exactly the existing nodes");
    for n in snap.nodes() {
        assert!(n.node().is_some());
        assert_consistent(n);
        let live = cache.node_info(n.name()).expect("snapshot node is cached");
        assert!(
            Arc::ptr_eq(n, &live),
            "{}: snapshot and cache share the NodeInfo",
            n.name()
        );
        assert!(Arc::ptr_eq(snap.get(n.name()).expect("indexed"), n));
    }
    if let Some(prev) = &model.last {
        let prev_names: BTreeSet<String> = prev.nodes().iter().map(|n| n.name().to_string()).collect();
        for n in snap.nodes() {
            if !model.touched.contains(n.name())
                && let Some(old) = prev.get(n.name())
            {
                assert!(Arc::ptr_eq(old, n), "{}: untouched node was copied", n.name());
            }
        }
        if prev_names == names && !names.iter().any(|n| model.touched.contains(n)) {
            assert!(
                Arc::ptr_eq(prev, &snap),
                "nothing visible changed: same snapshot expected"
            );
        }
    }
    model.touched.clear();
    model.last = Some(snap.clone());
    snap
}

fn check(cache: &Cache, model: &Model) {
    let dump = cache.dump();
    let mut held = 0;
    for n in &dump.nodes {
        assert_consistent(&n.info);
        held += n.info.pods.len();
        let want = if model.nodes.contains(&n.name) {
            NodeState::Ready
        } else {
            NodeState::Ghost
        };
        if want == NodeState::Ready {
            assert_eq!(n.state, NodeState::Ready, "{}", n.name);
        } else {
            assert_ne!(n.state, NodeState::Ready, "{}", n.name);
            assert!(
                !n.info.pods.is_empty(),
                "{}: empty ghost/placeholder kept",
                n.name
            );
        }
    }
    assert_eq!(held, model.pods.len(), "every pod held exactly once");
    for (uid, (node, assumed)) in &model.pods {
        let info = cache.node_info(node).expect("node of a pod is cached");
        let p = info.pod(uid).expect("pod on its node");
        assert_eq!(p.node_name(), Some(node.as_str()));
        assert_eq!(cache.is_assumed(uid), *assumed, "{uid}");
        assert!(cache.get_pod(uid).is_some());
    }
    assert_eq!(cache.pod_count(), model.pods.len());
    assert_eq!(
        cache.assumed_pod_count(),
        model.pods.values().filter(|(_, a)| *a).count()
    );
    let mut nodes = model.nodes.clone();
    nodes.extend(model.pods.values().map(|(n, _)| n.clone()));
    assert_eq!(cache.node_count(), nodes.len());
    assert_eq!(dump.assumed_pods.len(), cache.assumed_pod_count());
    for (snap, printed) in &model.held {
        let now = prints(snap.nodes().iter().map(|n| fingerprint(n)));
        assert_eq!(&now, printed, "a held snapshot changed");
    }
}

fn run(cache: &Cache, model: &mut Model, op: &Op) {
    match *op {
        Op::AddNode {
            node: n,
            zone,
            variant,
        } => {
            let name = NODES[n].to_string();
            cache.add_node(node(&name, ZONES[zone], variant));
            model.nodes.insert(name.clone());
            model.touched.insert(name);
        }
        Op::RemoveNode { node: n } => {
            let name = NODES[n].to_string();
            let got = cache.remove_node(&name);
            let want = if model.nodes.remove(&name) {
                "ok"
            } else {
                "node-not-found"
            };
            assert_eq!(kind(&got), want, "{op:?}");
            model.touched.insert(name);
        }
        Op::Assume {
            pod: p,
            node: n,
            shape,
        } => {
            let got = cache.assume_pod(pod(&uid(p), Some(NODES[n]), shape));
            match model.pods.entry(uid(p)) {
                Entry::Occupied(_) => assert_eq!(kind(&got), "already-in-cache", "{op:?}"),
                Entry::Vacant(e) => {
                    assert_eq!(kind(&got), "ok", "{op:?}");
                    e.insert((NODES[n].to_string(), true));
                    model.touched.insert(NODES[n].to_string());
                }
            }
        }
        Op::Forget { pod: p, node: n } => {
            let got = cache.forget_pod(&pod(&uid(p), Some(NODES[n]), 0));
            let want = match model.pods.get(&uid(p)) {
                None => "ok",
                Some((node, _)) if node != NODES[n] => "assumed-on-different-node",
                Some((_, false)) => "not-assumed",
                Some((node, true)) => {
                    model.touched.insert(node.clone());
                    model.pods.remove(&uid(p));
                    "ok"
                }
            };
            assert_eq!(kind(&got), want, "{op:?}");
        }
        Op::AssumeForget {
            pod: p,
            node: n,
            shape,
        } => {
            let assumed = pod(&uid(p), Some(NODES[n]), shape);
            if model.pods.contains_key(&uid(p)) {
                assert_eq!(kind(&cache.assume_pod(assumed)), "already-in-cache");
                return;
            }
            let snap_before = prints(snapshot(cache, model).nodes().iter().map(|n| fingerprint(n)));
            let before = cache_prints(cache);
            let count_before = (cache.pod_count(), cache.assumed_pod_count(), cache.node_count());
            cache.assume_pod(assumed.clone()).expect("assume");
            assert!(cache.is_assumed(&uid(p)));
            cache.forget_pod(&assumed).expect("forget");
            assert_eq!(cache_prints(cache), before, "assume+forget restores the cache");
            cache.forget_pod(&assumed).expect("second forget is a no-op");
            assert_eq!(cache_prints(cache), before, "second forget changes nothing");
            assert_eq!(
                (cache.pod_count(), cache.assumed_pod_count(), cache.node_count()),
                count_before
            );
            model.touched.insert(NODES[n].to_string());
            let snap_after = prints(snapshot(cache, model).nodes().iter().map(|n| fingerprint(n)));
            assert_eq!(snap_after, snap_before, "assume+forget restores the snapshot");
        }
        Op::AddPod {
            pod: p,
            node: n,
            shape,
        } => {
            let got = cache.add_pod(pod(&uid(p), Some(NODES[n]), shape));
            let want = match model.pods.get(&uid(p)).cloned() {
                Some((_, false)) => "already-added",
                Some((old, true)) => {
                    model.touched.insert(old);
                    "ok"
                }
                None => "ok",
            };
            assert_eq!(kind(&got), want, "{op:?}");
            if want == "ok" {
                model.pods.insert(uid(p), (NODES[n].to_string(), false));
                model.touched.insert(NODES[n].to_string());
            }
        }
        Op::UpdatePod {
            pod: p,
            node: n,
            shape,
        } => {
            let stored = model.pods.get(&uid(p)).cloned();
            let old_node = stored.as_ref().map_or(NODES[n], |(node, _)| node.as_str());
            let old = pod(&uid(p), Some(old_node), 0);
            let got = cache.update_pod(&old, pod(&uid(p), Some(NODES[n]), shape));
            let want = match &stored {
                None => "not-added",
                Some((_, true)) => "update-of-assumed",
                Some((node, false)) => {
                    model.touched.insert(node.clone());
                    model.touched.insert(NODES[n].to_string());
                    let moved = node != NODES[n];
                    model.pods.insert(uid(p), (NODES[n].to_string(), false));
                    if moved { "corrupted-update" } else { "ok" }
                }
            };
            assert_eq!(kind(&got), want, "{op:?}");
        }
        Op::RemovePod { pod: p, node: n } => {
            let given = n.map(|n| NODES[n]);
            let got = cache.remove_pod(&pod(&uid(p), given, 0));
            let want = match model.pods.remove(&uid(p)) {
                None => "not-found",
                Some((node, _)) => {
                    model.touched.insert(node.clone());
                    match given {
                        Some(g) if g != node => "corrupted-remove",
                        _ => "ok",
                    }
                }
            };
            assert_eq!(kind(&got), want, "{op:?}");
        }
        Op::FinishBinding { pod: p } => {
            let node = model
                .pods
                .get(&uid(p))
                .map_or("n0", |(n, _)| n.as_str())
                .to_string();
            cache.finish_binding(&pod(&uid(p), Some(&node), 0));
        }
        Op::Snapshot { hold } => {
            let snap = snapshot(cache, model);
            if hold {
                let prints = prints(snap.nodes().iter().map(|n| fingerprint(n)));
                model.held.push((snap, prints));
            }
        }
        Op::Release { idx } => {
            if !model.held.is_empty() {
                let i = idx % model.held.len();
                model.held.swap_remove(i);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/invariants.proptest-regressions",
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_operations_keep_the_ledger(ops in proptest::collection::vec(op(), 1..80)) {
        let cache = Cache::new();
        let mut model = Model::default();
        for op in &ops {
            run(&cache, &mut model, op);
            check(&cache, &model);
        }
        snapshot(&cache, &mut model);
    }
}
