//! The composite cycle with the default profile and the workload plugins, on an in-memory cache:
//! upstream's CompositePodGroup cases (`TestCPGMinGroupCount_Internal`,
//! `TestCPGBasicWithGangChildren_Internal`, `TestCPGHierarchicalScheduling_Internal`, and the
//! placement cases of `TestCPGSchedulingPlacementAlgorithm`) with real plugins and real
//! capacity in place of upstream's fake filter, and after every cycle the ledger exactly what
//! the placed members hold.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::MemCache;

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::{
    api::scheduling::{
        v1alpha3::{
            CompositeBasicSchedulingPolicy, CompositeGangSchedulingPolicy, CompositePodGroup,
            CompositePodGroupSchedulingConstraints, CompositePodGroupSchedulingPolicy, CompositePodGroupSpec,
            TopologyConstraint as CompositeTopologyConstraint,
        },
        v1beta1::{
            BasicSchedulingPolicy, GangSchedulingPolicy, PodGroup, PodGroupSchedulingPolicy, PodGroupSpec,
        },
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use unisched_framework::{
    CompositeCycleInput, CompositeCycleResult, Framework, GroupNodeKey, MemberDecision, NoNominations,
    PodGroupKey, PodGroupStore, PodInfo, SchedulingAlgorithm, config::KubeSchedulerProfile,
    run_composite_cycle,
};
use unisched_plugins::{
    PluginContext, Registry,
    testing::{PodBuilder, RecordingBinder},
};

/// The tree under construction: composites, groups and their members.
struct Tree {
    store: Arc<PodGroupStore>,
    members: BTreeMap<PodGroupKey, Vec<Arc<PodInfo>>>,
    /// Creation order: children are tried oldest first.
    created: i64,
}

impl Tree {
    fn new() -> Self {
        Tree {
            store: Arc::new(PodGroupStore::with_composites()),
            members: BTreeMap::new(),
            created: 0,
        }
    }

    fn meta(&mut self, name: &str) -> ObjectMeta {
        self.created += 1;
        ObjectMeta {
            namespace: Some("ns".into()),
            name: Some(name.into()),
            creation_timestamp: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + self.created).unwrap(),
            )),
            ..Default::default()
        }
    }

    /// A composite: gang with `min_groups`, or basic when `None`.
    fn composite(
        &mut self,
        name: &str,
        min_groups: Option<i32>,
        parent: Option<&str>,
        topology: Option<&str>,
    ) {
        let object = CompositePodGroup {
            metadata: self.meta(name),
            spec: CompositePodGroupSpec {
                parent_composite_pod_group_name: parent.map(str::to_string),
                scheduling_policy: CompositePodGroupSchedulingPolicy {
                    gang: min_groups.map(|min_group_count| CompositeGangSchedulingPolicy { min_group_count }),
                    basic: min_groups.is_none().then(CompositeBasicSchedulingPolicy::default),
                },
                scheduling_constraints: topology.map(|key| CompositePodGroupSchedulingConstraints {
                    topology: Some(vec![CompositeTopologyConstraint { key: key.into() }]),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        self.store.set_composite(Arc::new(object));
    }

    /// A PodGroup under `parent` (gang with `min`, or basic) with one member per cpu request.
    fn group(&mut self, name: &str, min: Option<i32>, parent: &str, cpus: &[&str]) {
        let object = PodGroup {
            metadata: self.meta(name),
            spec: PodGroupSpec {
                parent_composite_pod_group_name: Some(parent.into()),
                scheduling_policy: PodGroupSchedulingPolicy {
                    gang: min.map(|min_count| GangSchedulingPolicy { min_count }),
                    basic: min.is_none().then(BasicSchedulingPolicy::default),
                },
                ..Default::default()
            },
            ..Default::default()
        };
        self.store.set_group(Arc::new(object));
        let pods: Vec<Arc<PodInfo>> = cpus
            .iter()
            .enumerate()
            .map(|(i, cpu)| {
                let uid = format!("{name}-pod-{i}");
                PodBuilder::new(&uid)
                    .namespace("ns")
                    .uid(&uid)
                    .pod_group(name)
                    .req("cpu", cpu)
                    .arc()
            })
            .collect();
        for p in &pods {
            self.store.observe_pod(&p.pod);
        }
        self.members.insert(PodGroupKey::new("ns", name), pods);
    }

    /// Runs the cycle of the tree `root` heads.
    fn run(&self, cache: &MemCache, root: &str) -> CompositeCycleResult {
        let registry = Registry::in_tree(
            PluginContext::new(RecordingBinder::new()).with_pod_groups(self.store.clone(), true),
        );
        let fwk = Framework::new(&KubeSchedulerProfile::default(), &registry).expect("default profile");
        let mut algo = SchedulingAlgorithm::new(1, None, 7);
        let tree = self
            .store
            .tree(&PodGroupKey::new("ns", root))
            .expect("the root exists");
        run_composite_cycle(
            &fwk,
            &mut algo,
            cache,
            &NoNominations,
            CompositeCycleInput {
                tree: &tree,
                members: self.members.clone(),
                already_scheduled: BTreeMap::new(),
                record_plugin_metrics: false,
            },
        )
    }
}

/// Pod uid → node of every member the cycle sends to binding.
fn bound(result: &CompositeCycleResult) -> BTreeMap<String, String> {
    result
        .groups
        .iter()
        .flat_map(|g| &g.result.members)
        .filter_map(|m| match m {
            MemberDecision::Bind(t) => Some((t.pod.uid.clone(), t.node.clone())),
            _ => None,
        })
        .collect()
}

/// Pod uid → message of every member that failed.
fn failed(result: &CompositeCycleResult) -> BTreeMap<String, String> {
    result
        .groups
        .iter()
        .flat_map(|g| &g.result.members)
        .filter_map(|m| match m {
            MemberDecision::Failed(f) => Some((f.pod.uid.clone(), f.message.clone())),
            _ => None,
        })
        .collect()
}

fn uids(prefixes: &[&str], per_group: usize) -> Vec<String> {
    prefixes
        .iter()
        .flat_map(|p| (0..per_group).map(move |i| format!("{p}-pod-{i}")))
        .collect()
}

fn group_status(result: &CompositeCycleResult, name: &str) -> String {
    let g = result
        .groups
        .iter()
        .find(|g| g.group.key.name == name)
        .expect("group in the result");
    g.result.status.message()
}

fn composite_status(result: &CompositeCycleResult, name: &str) -> (bool, String) {
    let (_, s) = result
        .composites
        .iter()
        .find(|(c, _)| c.key.name == name)
        .expect("composite in the result");
    (s.is_success(), s.message())
}

/// Upstream `TestCPGMinGroupCount_Internal`: a gang composite of three gangs needing two; the
/// third cannot fit its first pod. The two that fit are placed, the third is not.
#[test]
fn a_gang_composite_places_the_children_that_fit_once_min_group_count_is_met() {
    let cache = MemCache::with_nodes(&[("node1", "20", None)]);
    let mut tree = Tree::new();
    tree.composite("cpg-root", Some(2), None, None);
    tree.group("pg1", Some(3), "cpg-root", &["1", "1", "1"]);
    tree.group("pg2", Some(3), "cpg-root", &["1", "1", "1"]);
    tree.group("pg3", Some(3), "cpg-root", &["100", "1", "1"]);
    let result = tree.run(&cache, "cpg-root");
    assert!(result.status.is_success(), "{:?}", result.status);
    assert_eq!(
        bound(&result).keys().cloned().collect::<Vec<_>>(),
        uids(&["pg1", "pg2"], 3)
    );
    assert_eq!(
        failed(&result).keys().cloned().collect::<Vec<_>>(),
        uids(&["pg3"], 3)
    );
    assert_eq!(
        cache.placed(),
        bound(&result),
        "what is bound is exactly what is held"
    );
}

/// Upstream `TestCPGBasicWithGangChildren_Internal`: a basic composite lets each ready gang
/// child be placed on its own.
#[test]
fn a_basic_composite_places_each_child_gang_that_fits() {
    let cache = MemCache::with_nodes(&[("node1", "20", None)]);
    let mut tree = Tree::new();
    tree.composite("cpg-root", None, None, None);
    tree.group("pg1", Some(3), "cpg-root", &["1", "1", "1"]);
    tree.group("pg2", Some(3), "cpg-root", &["100", "1", "1"]);
    let result = tree.run(&cache, "cpg-root");
    assert!(result.status.is_success(), "{:?}", result.status);
    assert_eq!(
        bound(&result).keys().cloned().collect::<Vec<_>>(),
        uids(&["pg1"], 3)
    );
    assert_eq!(
        failed(&result).keys().cloned().collect::<Vec<_>>(),
        uids(&["pg2"], 3)
    );
    assert_eq!(cache.placed(), bound(&result));
}

/// Upstream `TestCPGHierarchicalScheduling_Internal`:
///
/// ```text
///                  cpg-root (gang, 2)
///           /             |              \
///   cpg-sub1 (gang, 2)  cpg-sub2 (basic)  cpg-sub3 (gang, 2)
///    /    |    \          /     \           /     \
///  pg1   pg2   pg3      pg4     pg5       pg6     pg7
///  (S)   (S)   (F)      (S)     (S)      (S->F)   (F)
/// ```
///
/// pg6 fits but is not placed: its parent cpg-sub3 fails, and its members say so.
#[test]
fn a_failed_composite_takes_back_its_children_and_they_carry_its_verdict() {
    let cache = MemCache::with_nodes(&[("node1", "100", None)]);
    let mut tree = Tree::new();
    tree.composite("cpg-root", Some(2), None, None);
    tree.composite("cpg-sub1", Some(2), Some("cpg-root"), None);
    tree.composite("cpg-sub2", None, Some("cpg-root"), None);
    tree.composite("cpg-sub3", Some(2), Some("cpg-root"), None);
    tree.group("pg1", Some(2), "cpg-sub1", &["1", "1"]);
    tree.group("pg2", Some(2), "cpg-sub1", &["1", "1"]);
    tree.group("pg3", Some(2), "cpg-sub1", &["200", "1"]);
    tree.group("pg4", Some(2), "cpg-sub2", &["1", "1"]);
    tree.group("pg5", Some(2), "cpg-sub2", &["1", "1"]);
    tree.group("pg6", Some(2), "cpg-sub3", &["1", "1"]);
    tree.group("pg7", Some(2), "cpg-sub3", &["200", "1"]);
    let result = tree.run(&cache, "cpg-root");
    assert!(result.status.is_success(), "{:?}", result.status);
    assert_eq!(
        bound(&result).keys().cloned().collect::<Vec<_>>(),
        uids(&["pg1", "pg2", "pg4", "pg5"], 2)
    );
    assert_eq!(
        failed(&result).keys().cloned().collect::<Vec<_>>(),
        uids(&["pg3", "pg6", "pg7"], 2)
    );
    assert_eq!(cache.placed(), bound(&result));
    assert!(composite_status(&result, "cpg-sub1").0);
    assert!(composite_status(&result, "cpg-sub2").0);
    let (ok, sub3) = composite_status(&result, "cpg-sub3");
    assert!(!ok);
    assert_eq!(
        sub3,
        "pod group is unschedulable, 0/1 placements are available, first placement status: \
         minCount (2) cannot be satisfied: 1 scheduled, 0 remaining"
    );
    assert_eq!(
        group_status(&result, "pg6"),
        sub3,
        "pg6 carries its parent's verdict"
    );
    for uid in uids(&["pg6"], 2) {
        assert_eq!(failed(&result)[&uid], sub3);
    }
}

/// A gang composite short of `minGroupCount` places nothing: the child that fitted is taken
/// back and its members quote the composite's verdict (from before the tree's preemption was
/// tried, as upstream hands it to them; the tree's own verdict carries preemption's answer).
#[test]
fn a_gang_composite_short_of_its_children_holds_nothing() {
    let cache = MemCache::with_nodes(&[("node1", "20", None)]);
    let mut tree = Tree::new();
    tree.composite("cpg-root", Some(2), None, None);
    tree.group("pg1", Some(2), "cpg-root", &["1", "1"]);
    tree.group("pg2", Some(2), "cpg-root", &["100", "1"]);
    let result = tree.run(&cache, "cpg-root");
    let root = "pod group is unschedulable, 0/1 placements are available, first placement status: \
                minCount (2) cannot be satisfied: 1 scheduled, 0 remaining";
    assert!(result.status.is_rejected(), "{:?}", result.status);
    assert_eq!(
        result.status.message(),
        format!("{root}, pod group preemption: No preemption victims found for incoming preemptor")
    );
    assert!(!result.waiting_on_preemption);
    assert!(bound(&result).is_empty());
    assert!(cache.placed().is_empty(), "nothing of the tree is held");
    let failed = failed(&result);
    assert_eq!(failed["pg1-pod-0"], root);
    assert_eq!(failed["pg1-pod-1"], root);
    assert!(
        failed["pg2-pod-0"].starts_with("0/1 nodes are available"),
        "{}",
        failed["pg2-pod-0"]
    );
}

/// A composite's topology constraint keeps the whole subtree in one domain: rack a holds one
/// of the two gangs, rack b both, so a gang composite needing both lands on rack b.
#[test]
fn a_composite_topology_constraint_keeps_the_subtree_in_one_domain() {
    let cache = MemCache::with_nodes(&[
        ("a1", "4", Some("a")),
        ("b1", "4", Some("b")),
        ("b2", "4", Some("b")),
    ]);
    let mut tree = Tree::new();
    tree.composite("cpg-root", Some(2), None, Some("rack"));
    tree.group("pg1", Some(2), "cpg-root", &["2", "2"]);
    tree.group("pg2", Some(2), "cpg-root", &["2", "2"]);
    let result = tree.run(&cache, "cpg-root");
    assert!(result.status.is_success(), "{:?}", result.status);
    let bound = bound(&result);
    assert_eq!(bound.len(), 4);
    assert!(bound.values().all(|n| n.starts_with('b')), "{bound:?}");
    assert_eq!(cache.placed(), bound);
}

/// Among placements that all work, the scorer (PodGroupPodsCount) picks the one holding the
/// most pods of the subtree, and the subtree is placed again there: a basic composite fits one
/// gang on rack a and both on rack b.
#[test]
fn the_placement_holding_most_of_the_subtree_wins() {
    let cache = MemCache::with_nodes(&[
        ("a1", "4", Some("a")),
        ("b1", "4", Some("b")),
        ("b2", "4", Some("b")),
    ]);
    let mut tree = Tree::new();
    tree.composite("cpg-root", None, None, Some("rack"));
    tree.group("pg1", Some(2), "cpg-root", &["2", "2"]);
    tree.group("pg2", Some(2), "cpg-root", &["2", "2"]);
    let result = tree.run(&cache, "cpg-root");
    assert!(result.status.is_success(), "{:?}", result.status);
    let bound = bound(&result);
    assert_eq!(bound.len(), 4, "{bound:?}");
    assert!(bound.values().all(|n| n.starts_with('b')), "{bound:?}");
    assert_eq!(cache.placed(), bound);
}

/// Upstream "respects pods already scheduled in sibling pod groups": a later child sees what
/// an earlier one placed in the same cycle.
#[test]
fn a_later_child_sees_what_an_earlier_one_placed() {
    let cache = MemCache::with_nodes(&[("node1", "2", None)]);
    let mut tree = Tree::new();
    tree.composite("cpg", None, None, None);
    tree.group("pg1", None, "cpg", &["2"]);
    tree.group("pg2", None, "cpg", &["2"]);
    let result = tree.run(&cache, "cpg");
    assert!(result.status.is_success(), "{:?}", result.status);
    assert_eq!(
        bound(&result).keys().cloned().collect::<Vec<_>>(),
        vec!["pg1-pod-0"]
    );
    assert_eq!(
        failed(&result).keys().cloned().collect::<Vec<_>>(),
        vec!["pg2-pod-0"]
    );
    assert_eq!(cache.placed(), bound(&result));
}

/// Upstream "returns unschedulable if no pods got scheduled": a tree that places nothing fails
/// as a whole, each member with its own reason.
#[test]
fn a_tree_that_places_nothing_is_unschedulable() {
    let cache = MemCache::with_nodes(&[("node1", "1", None)]);
    let mut tree = Tree::new();
    tree.composite("cpg", None, None, None);
    tree.group("pg1", None, "cpg", &["2"]);
    tree.group("pg2", None, "cpg", &["2"]);
    let result = tree.run(&cache, "cpg");
    assert!(result.status.is_rejected(), "{:?}", result.status);
    assert!(bound(&result).is_empty());
    for (uid, message) in failed(&result) {
        assert!(message.starts_with("0/1 nodes are available"), "{uid}: {message}");
    }
    assert!(cache.placed().is_empty());
}

/// The forest: a pod's group finds its root through its parents; a broken chain has none.
#[test]
fn a_group_finds_the_root_of_its_tree() {
    let mut tree = Tree::new();
    tree.composite("root", Some(1), None, None);
    tree.composite("mid", None, Some("root"), None);
    tree.group("leaf", None, "mid", &["1"]);
    tree.group("orphan", None, "missing", &["1"]);
    let root = GroupNodeKey::Composite(PodGroupKey::new("ns", "root"));
    assert_eq!(
        tree.store
            .root_of(&GroupNodeKey::Group(PodGroupKey::new("ns", "leaf"))),
        Some(root.clone())
    );
    assert_eq!(
        tree.store
            .root_of(&GroupNodeKey::Composite(PodGroupKey::new("ns", "mid"))),
        Some(root)
    );
    assert_eq!(
        tree.store
            .root_of(&GroupNodeKey::Group(PodGroupKey::new("ns", "orphan"))),
        None
    );
}

/// GangScheduling's PreEnqueue over trees (upstream `preEnqueueWithHierarchies`): a pod of a
/// group in a tree waits until the whole tree is ready, and says why in upstream's words.
#[test]
fn a_pod_of_a_tree_is_admitted_when_the_tree_is_ready() {
    use unisched_framework::PreEnqueuePlugin;
    use unisched_plugins::GangScheduling;

    let pod = |name: &str, group: &str| {
        PodBuilder::new(name)
            .namespace("ns")
            .uid(name)
            .pod_group(group)
            .req("cpu", "1")
            .arc()
    };
    let mut tree = Tree::new();
    let gang = GangScheduling::new(Some(tree.store.clone()));
    tree.group("pg1", Some(2), "root", &["1", "1"]);
    assert_eq!(
        gang.pre_enqueue(&pod("pg1-pod-0", "pg1")).message(),
        "failed to build hierarchy snapshot: parent composite pod group state not found for \
         compositepodgroup/ns/root"
    );
    tree.composite("root", Some(2), None, None);
    tree.group("pg2", Some(2), "root", &["1"]);
    let waiting = gang.pre_enqueue(&pod("pg1-pod-0", "pg1"));
    assert_eq!(
        waiting.code(),
        unisched_framework::Code::UnschedulableAndUnresolvable
    );
    assert_eq!(
        waiting.message(),
        "waiting for composite pod group \"root\" tree to meet quorum"
    );
    tree.group("pg2", Some(2), "root", &["1", "1"]);
    assert!(gang.pre_enqueue(&pod("pg1-pod-0", "pg1")).is_success());

    let stray = pod("stray-0", "nowhere");
    tree.store.observe_pod(&stray.pod);
    assert_eq!(
        gang.pre_enqueue(&stray).message(),
        "failed to build hierarchy snapshot: pod group object not found in state for podgroup/ns/nowhere"
    );
}

/// Upstream `Test_isSchedulableAfterPodAdded`, `Test_isSchedulableAfterPodGroupAdded` and
/// `Test_isSchedulableAfterCompositePodGroupAdded`, the hierarchy cases: an addition in another
/// group (or a composite) of the waiting pod's tree queues it; one outside the tree does not;
/// without the gate nothing of a tree counts.
#[test]
fn an_addition_anywhere_in_the_tree_queues_the_waiting_pod() {
    use unisched_framework::{EnqueueExtensions, EventObject, QueueingHint};
    use unisched_plugins::GangScheduling;

    for composites in [true, false] {
        let store = Arc::new(if composites {
            PodGroupStore::with_composites()
        } else {
            PodGroupStore::new()
        });
        let mut tree = Tree {
            store: store.clone(),
            members: BTreeMap::new(),
            created: 0,
        };
        tree.composite("cpg-root", Some(2), None, None);
        tree.composite("cpg-sub", None, Some("cpg-root"), None);
        tree.composite("cpg-other", None, None, None);
        tree.group("pg", Some(2), "cpg-sub", &[]);
        tree.group("sibling", Some(2), "cpg-root", &[]);
        tree.group("stranger", Some(2), "cpg-other", &[]);
        let gang = GangScheduling::new(Some(store.clone()));
        let events = gang.events_to_register();
        let hint = |label: &str, added: &EventObject| {
            let registered = events.iter().find(|e| e.event.label == label);
            let Some(registered) = registered else {
                return QueueingHint::Skip;
            };
            let waiting = PodBuilder::new("p")
                .namespace("ns")
                .uid("p")
                .pod_group("pg")
                .build();
            (registered.hint.as_ref().unwrap())(&waiting, None, Some(added)).unwrap()
        };
        let pod_of = |group: &str| {
            EventObject::pod(
                PodBuilder::new("new")
                    .namespace("ns")
                    .uid("new")
                    .pod_group(group)
                    .build(),
            )
        };
        let on = |b: bool| {
            if b && composites {
                QueueingHint::Queue
            } else {
                QueueingHint::Skip
            }
        };
        let gate = if composites { "CPG=true" } else { "CPG=false" };
        assert_eq!(
            hint("UnscheduledPodAdd", &pod_of("sibling")),
            on(true),
            "a pod of another group of the same root ({gate})"
        );
        assert_eq!(
            hint("UnscheduledPodAdd", &pod_of("stranger")),
            QueueingHint::Skip,
            "a pod of a group of another root ({gate})"
        );
        let group_of = |name: &str| {
            EventObject::PodGroup(Arc::new(PodGroup {
                metadata: ObjectMeta {
                    namespace: Some("ns".into()),
                    name: Some(name.into()),
                    ..Default::default()
                },
                ..Default::default()
            }))
        };
        assert_eq!(
            hint("PodGroupAdd", &group_of("sibling")),
            on(true),
            "a pod group of the same root ({gate})"
        );
        assert_eq!(
            hint("PodGroupAdd", &group_of("stranger")),
            QueueingHint::Skip,
            "a pod group of another root ({gate})"
        );
        let composite_of = |name: &str| {
            EventObject::CompositePodGroup(
                store
                    .composite(&PodGroupKey::new("ns", name))
                    .map_or_else(|| Arc::new(CompositePodGroup::default()), |c| c.object.clone()),
            )
        };
        assert_eq!(
            hint("CompositePodGroupAdd", &composite_of("cpg-root")),
            on(true),
            "the root ({gate})"
        );
        assert_eq!(
            hint("CompositePodGroupAdd", &composite_of("cpg-sub")),
            on(true),
            "an intermediate composite implying the same root ({gate})"
        );
        assert_eq!(
            hint("CompositePodGroupAdd", &composite_of("cpg-other")),
            QueueingHint::Skip,
            "a composite of another hierarchy ({gate})"
        );
    }
}
