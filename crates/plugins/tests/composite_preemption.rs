//! Preemption for and against CompositePodGroup trees, with the default profile and real
//! capacity on an in-memory cache: a tree that does not fit preempts once for the whole tree
//! (its root's priority and policy, every member nominated, the root named in the evictions), and
//! a victim tree whose root (or any group above a PodGroup) asks to be disrupted as a whole goes
//! whole, at its root's priority. Upstream's cases: `TestPodGroupEvaluator_*` with composite
//! preemptors, `TestNewDomainForWorkloadPreemption` and `TestGetPodPriority` (the CPG rows), and
//! `TestPreEnqueue`'s composite rows.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::MemCache;

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::{
    api::{
        core::v1::Pod,
        scheduling::{
            v1alpha3::{
                AllCompositeDisruptionMode, CompositeDisruptionMode, CompositeGangSchedulingPolicy,
                CompositePodGroup, CompositePodGroupSchedulingPolicy, CompositePodGroupSpec,
                SingleCompositeDisruptionMode,
            },
            v1beta1::{
                AllDisruptionMode, DisruptionMode, GangSchedulingPolicy, PodGroup, PodGroupSchedulingPolicy,
                PodGroupSpec, SingleDisruptionMode,
            },
        },
    },
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
};
use unisched_framework::PreEnqueuePlugin;
use unisched_framework::{
    Code, CompositeCycleInput, CompositeCycleResult, Framework, MemberDecision, NoNominations, PodGroupKey,
    PodGroupStore, PodInfo, SchedulingAlgorithm, config::KubeSchedulerProfile, run_composite_cycle,
};
use unisched_plugins::{
    DefaultPreemption, DefaultPreemptionArgs, PluginContext, PluginFeatures, PreemptionPlan,
    RecordingPreemptor, Registry, StaticPdbs,
    default_preemption::{NOT_ELIGIBLE_NEVER, WAITING_FOR_GROUP_PREEMPTION},
    testing::{PodBuilder, RecordingBinder},
};

const LOW: i32 = 0;
const HIGH: i32 = 1000;

/// How a group asks to be disrupted.
#[derive(Clone, Copy)]
enum Mode {
    All,
    Single,
    Unset,
}

/// The cluster, the trees in it and the pods running on it.
struct World {
    store: Arc<PodGroupStore>,
    cache: MemCache,
    /// Members waiting to be scheduled, by PodGroup.
    members: BTreeMap<PodGroupKey, Vec<Arc<PodInfo>>>,
    /// Pods running before the cycle (uid → node).
    running: BTreeMap<String, String>,
    created: i64,
    policy_gate: bool,
}

impl World {
    /// Nodes `(name, cpus)`.
    fn new(nodes: &[(&str, &str)]) -> Self {
        let specs: Vec<(&str, &str, Option<&str>)> = nodes.iter().map(|(n, cpu)| (*n, *cpu, None)).collect();
        World {
            store: Arc::new(PodGroupStore::with_composites()),
            cache: MemCache::with_nodes(&specs),
            members: BTreeMap::new(),
            running: BTreeMap::new(),
            created: 0,
            policy_gate: false,
        }
    }

    fn meta(&mut self, name: &str) -> ObjectMeta {
        self.created += 1;
        ObjectMeta {
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            creation_timestamp: Some(Time(
                k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + self.created).unwrap(),
            )),
            ..Default::default()
        }
    }

    /// A gang composite needing all `min_groups` children, disrupted as `mode`.
    fn composite(
        &mut self,
        name: &str,
        priority: i32,
        min_groups: i32,
        parent: Option<&str>,
        mode: Mode,
        policy: Option<&str>,
    ) -> &mut Self {
        let object = CompositePodGroup {
            metadata: self.meta(name),
            spec: CompositePodGroupSpec {
                parent_composite_pod_group_name: parent.map(str::to_string),
                priority: Some(priority),
                preemption_policy: policy.map(str::to_string),
                scheduling_policy: CompositePodGroupSchedulingPolicy {
                    gang: Some(CompositeGangSchedulingPolicy {
                        min_group_count: min_groups,
                    }),
                    basic: None,
                },
                disruption_mode: match mode {
                    Mode::All => Some(CompositeDisruptionMode {
                        all: Some(AllCompositeDisruptionMode::default()),
                        single: None,
                    }),
                    Mode::Single => Some(CompositeDisruptionMode {
                        all: None,
                        single: Some(SingleCompositeDisruptionMode::default()),
                    }),
                    Mode::Unset => None,
                },
                ..Default::default()
            },
            ..Default::default()
        };
        self.store.set_composite(Arc::new(object));
        self
    }

    /// A gang PodGroup needing all its pods, under `parent`.
    fn group(
        &mut self,
        name: &str,
        priority: i32,
        parent: Option<&str>,
        pods: usize,
        mode: Mode,
    ) -> &mut Self {
        let object = PodGroup {
            metadata: self.meta(name),
            spec: PodGroupSpec {
                parent_composite_pod_group_name: parent.map(str::to_string),
                priority: Some(priority),
                scheduling_policy: PodGroupSchedulingPolicy {
                    gang: Some(GangSchedulingPolicy {
                        min_count: i32::try_from(pods).unwrap(),
                    }),
                    basic: None,
                },
                disruption_mode: match mode {
                    Mode::All => Some(DisruptionMode {
                        all: Some(AllDisruptionMode::default()),
                        single: None,
                    }),
                    Mode::Single => Some(DisruptionMode {
                        all: None,
                        single: Some(SingleDisruptionMode::default()),
                    }),
                    Mode::Unset => None,
                },
                ..Default::default()
            },
            ..Default::default()
        };
        self.store.set_group(Arc::new(object));
        self
    }

    /// `count` pending members of one CPU in `group`, at the tree's `priority`.
    fn pending(&mut self, group: &str, count: usize, priority: i32, policy: Option<&str>) -> &mut Self {
        let pods: Vec<Arc<PodInfo>> = (0..count)
            .map(|i| {
                let uid = format!("{group}-{i}");
                let mut b = PodBuilder::new(&uid)
                    .namespace("ns")
                    .uid(&uid)
                    .pod_group(group)
                    .priority(priority)
                    .req("cpu", "1");
                if let Some(p) = policy {
                    b = b.preemption_policy(p);
                }
                b.arc()
            })
            .collect();
        for p in &pods {
            self.store.observe_pod(&p.pod);
        }
        self.members.insert(PodGroupKey::new("ns", group), pods);
        self
    }

    /// A running pod of one CPU on `node` (of `group` when given), started at `second`.
    fn running(
        &mut self,
        uid: &str,
        node: &str,
        group: Option<&str>,
        priority: i32,
        second: i64,
    ) -> &mut Self {
        let mut b = PodBuilder::new(uid)
            .namespace("ns")
            .uid(uid)
            .priority(priority)
            .node_name(node)
            .req("cpu", "1");
        if let Some(g) = group {
            b = b.pod_group(g);
        }
        let mut pod: Pod = b.build();
        pod.status.get_or_insert_default().start_time =
            Some(Time(k8s_openapi::jiff::Timestamp::from_second(second).unwrap()));
        self.store.observe_pod(&pod);
        self.cache
            .nodes
            .write()
            .get_mut(node)
            .unwrap()
            .add_pod(Arc::new(PodInfo::new(pod)));
        self.running.insert(uid.into(), node.into());
        self
    }

    fn registry(&self, preemptor: &Arc<RecordingPreemptor>) -> Registry {
        let mut features = PluginFeatures::default();
        features.pod_group_preemption_policy = self.policy_gate;
        Registry::in_tree(
            PluginContext::new(RecordingBinder::new())
                .with_features(features)
                .with_pod_groups(self.store.clone(), true)
                .with_preemption(preemptor.clone(), Arc::new(StaticPdbs(Vec::new()))),
        )
    }

    /// Runs the cycle of the tree `root` heads.
    fn run(&self, root: &str) -> Outcome {
        let preemptor = RecordingPreemptor::new();
        let fwk = Framework::new(&KubeSchedulerProfile::default(), &self.registry(&preemptor)).unwrap();
        let tree = self
            .store
            .tree(&PodGroupKey::new("ns", root))
            .expect("the root exists");
        let result = run_composite_cycle(
            &fwk,
            &mut SchedulingAlgorithm::new(1, None, 7),
            &self.cache,
            &NoNominations,
            CompositeCycleInput {
                tree: &tree,
                members: self.members.clone(),
                already_scheduled: BTreeMap::new(),
                record_plugin_metrics: false,
            },
        );
        assert_eq!(
            self.cache.placed(),
            self.running,
            "a cycle that preempts leaves the cache as it found it"
        );
        Outcome {
            result,
            plans: preemptor.plans(),
            evaluations: preemptor.evaluations(),
        }
    }
}

struct Outcome {
    result: CompositeCycleResult,
    plans: Vec<PreemptionPlan>,
    evaluations: Vec<(&'static str, Code)>,
}

impl Outcome {
    fn victims(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .plans
            .iter()
            .flat_map(|p| p.victims.iter().map(|v| v.uid.clone()))
            .collect();
        v.sort();
        v
    }

    /// Member uid → the node it is nominated to.
    fn nominated(&self) -> BTreeMap<String, String> {
        self.result
            .groups
            .iter()
            .flat_map(|g| &g.result.members)
            .filter_map(|m| match m {
                MemberDecision::Failed(f) => f.nominated_node.clone().map(|n| (f.pod.uid.clone(), n)),
                _ => None,
            })
            .collect()
    }

    /// Every PodGroup's message.
    fn group_messages(&self) -> Vec<String> {
        self.result
            .groups
            .iter()
            .map(|g| g.result.status.message())
            .collect()
    }
}

/// The urgent tree: root `train` (HIGH, gang of its two children), gangs `a` and `b` of two
/// pods each: four CPUs in all.
fn urgent_tree(world: &mut World, policy: Option<&str>, pod_policy: Option<&str>) {
    world
        .composite("train", HIGH, 2, None, Mode::Unset, policy)
        .group("a", HIGH, Some("train"), 2, Mode::Unset)
        .group("b", HIGH, Some("train"), 2, Mode::Unset)
        .pending("a", 2, HIGH, pod_policy)
        .pending("b", 2, HIGH, pod_policy);
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_string()).collect()
}

#[test]
fn a_tree_that_does_not_fit_preempts_once_for_all_its_members() {
    let mut world = World::new(&[("n1", "2"), ("n2", "2"), ("n3", "2")]);
    urgent_tree(&mut world, None, None);
    for (i, node) in ["n1", "n1", "n2", "n2", "n3", "n3"].iter().enumerate() {
        world.running(
            &format!("lone-{i}"),
            node,
            None,
            LOW,
            100 + i64::try_from(i).unwrap(),
        );
    }
    let out = world.run("train");

    assert_eq!(out.result.status.code(), Code::Unschedulable);
    assert!(
        out.result.waiting_on_preemption,
        "the tree waits for its evictions"
    );
    // One preemption for the tree, named after its root, of exactly the four CPUs it needs.
    assert_eq!(out.plans.len(), 1);
    let plan = &out.plans[0];
    assert_eq!(plan.preemptor_type(), "compositepodgroup");
    assert_eq!(plan.preemptor_id(), "uid-train");
    assert_eq!(plan.node, "cluster");
    assert_eq!(out.victims().len(), 4, "{:?}", out.victims());
    assert_eq!(plan.waiting_pods().len(), 4, "every member of the tree waits");
    assert_eq!(out.evaluations, [("compositepodgroup", Code::Success)]);
    // Every member is nominated, each to a node a victim frees.
    let nominated = out.nominated();
    assert_eq!(
        nominated.keys().cloned().collect::<Vec<_>>(),
        strings(&["a-0", "a-1", "b-0", "b-1"])
    );
    let mut freed: Vec<String> = plan
        .victims
        .iter()
        .filter_map(|v| v.node_name().map(str::to_string))
        .collect();
    freed.sort();
    let mut taken: Vec<String> = nominated.values().cloned().collect();
    taken.sort();
    assert_eq!(taken, freed, "members go where the victims were");
    for message in out.group_messages() {
        assert!(
            message.ends_with("pod group preemption: found a placement for podgroup, preempting 4 victims"),
            "{message}"
        );
    }
}

/// A victim's priority is its tree root's, and the highest group disrupted as a whole is the
/// unit: all of it, on any node, or none of it.
#[test]
fn victims_come_as_their_trees_say() {
    // (case, root's disruption mode, leaf groups' mode, victims)
    let cases = [
        (
            "root disrupted as a whole: the whole old tree goes, and one lone pod",
            Mode::All,
            Mode::Single,
            vec!["lone-x", "old-a-0", "old-b-0"],
        ),
        (
            "root disrupted pod by pod: one pod of the old tree is spared",
            Mode::Single,
            Mode::Single,
            vec!["lone-x", "lone-y", "old-b-0"],
        ),
        (
            "no disruption mode anywhere is pod by pod",
            Mode::Unset,
            Mode::Unset,
            vec!["lone-x", "lone-y", "old-b-0"],
        ),
    ];
    for (name, root_mode, leaf_mode, want) in cases {
        // One node, so that where the members go is not in question.
        let mut world = World::new(&[("n1", "4")]);
        // The old tree's leaf groups say HIGH, its root LOW: the root's priority is the tree's.
        world
            .composite("old", LOW, 2, None, root_mode, None)
            .group("old-a", HIGH, Some("old"), 1, leaf_mode)
            .group("old-b", HIGH, Some("old"), 1, leaf_mode)
            .running("old-a-0", "n1", Some("old-a"), HIGH, 10)
            .running("old-b-0", "n1", Some("old-b"), HIGH, 11)
            .running("lone-y", "n1", None, LOW, 5)
            .running("lone-x", "n1", None, LOW, 20);
        // Three CPUs wanted: `a` of two pods and `b` of one.
        world
            .composite("train", HIGH, 2, None, Mode::Unset, None)
            .group("a", HIGH, Some("train"), 2, Mode::Unset)
            .group("b", HIGH, Some("train"), 1, Mode::Unset)
            .pending("a", 2, HIGH, None)
            .pending("b", 1, HIGH, None);
        let out = world.run("train");
        assert!(out.result.waiting_on_preemption, "{name}");
        assert_eq!(out.victims(), strings(&want), "{name}");
        // The whole tree, or its one member that goes (ranked as a group): one group disrupted.
        assert_eq!(out.plans[0].counts.group_disruptions, 1, "{name}");
    }
}

#[test]
fn a_tree_of_higher_priority_is_not_a_victim() {
    let mut world = World::new(&[("n1", "2"), ("n2", "2")]);
    // The old tree's leaves say LOW but its root says HIGH: nothing of it may go.
    world
        .composite("old", HIGH, 2, None, Mode::All, None)
        .group("old-a", LOW, Some("old"), 2, Mode::Unset)
        .group("old-b", LOW, Some("old"), 2, Mode::Unset)
        .running("old-a-0", "n1", Some("old-a"), LOW, 1)
        .running("old-a-1", "n1", Some("old-a"), LOW, 1)
        .running("old-b-0", "n2", Some("old-b"), LOW, 1)
        .running("old-b-1", "n2", Some("old-b"), LOW, 1);
    urgent_tree(&mut world, None, None);
    let out = world.run("train");
    assert!(!out.result.waiting_on_preemption);
    assert!(out.plans.is_empty());
    for message in out.group_messages() {
        assert!(
            message.ends_with("pod group preemption: No preemption victims found for incoming preemptor"),
            "{message}"
        );
    }
}

/// `preemptionPolicy: Never`: the root's own with PodGroupPreemptionPolicy, any member's without.
#[test]
fn a_tree_that_may_not_preempt_does_not() {
    // (case, gate, root's policy, members' policy, preempts)
    let cases = [
        ("gate on, root says Never", true, Some("Never"), None, false),
        (
            "gate on, root says PreemptLowerPriority, members Never",
            true,
            Some("PreemptLowerPriority"),
            Some("Never"),
            true,
        ),
        ("gate on, root says nothing", true, None, Some("Never"), true),
        (
            "gate off, a member says Never",
            false,
            Some("PreemptLowerPriority"),
            Some("Never"),
            false,
        ),
        (
            "gate off, root's Never is not read",
            false,
            Some("Never"),
            None,
            true,
        ),
    ];
    for (name, gate, root_policy, member_policy, preempts) in cases {
        let mut world = World::new(&[("n1", "2"), ("n2", "2")]);
        world.policy_gate = gate;
        urgent_tree(&mut world, root_policy, member_policy);
        world
            .running("lone-0", "n1", None, LOW, 1)
            .running("lone-1", "n2", None, LOW, 1);
        let out = world.run("train");
        assert_eq!(out.result.waiting_on_preemption, preempts, "{name}");
        assert_eq!(out.plans.is_empty(), !preempts, "{name}");
        if !preempts {
            for message in out.group_messages() {
                assert!(
                    message.ends_with(&format!("pod group preemption: {NOT_ELIGIBLE_NEVER}")),
                    "{name}: {message}"
                );
            }
        }
    }
}

/// Upstream `TestPreEnqueue`, composite rows: while a tree's root preempts, the members of every
/// PodGroup of the tree wait; members of another tree, or of a group whose parent is missing, do
/// not.
#[test]
fn pre_enqueue_holds_the_whole_tree_while_its_root_preempts() {
    let mut world = World::new(&[("n1", "2")]);
    world
        .composite("root", HIGH, 2, None, Mode::Unset, None)
        .composite("mid-1", HIGH, 1, Some("root"), Mode::Unset, None)
        .composite("mid-2", HIGH, 1, Some("root"), Mode::Unset, None)
        .group("pg1", HIGH, Some("mid-1"), 1, Mode::Unset)
        .group("pg2", HIGH, Some("mid-2"), 1, Mode::Unset)
        .composite("other", HIGH, 1, None, Mode::Unset, None)
        .group("pg3", HIGH, Some("other"), 1, Mode::Unset)
        .group("orphan", HIGH, Some("gone"), 1, Mode::Unset);
    let preemptor = RecordingPreemptor::new();
    preemptor.preempting.lock().push("uid-root".into());
    let plugin = DefaultPreemption::new(&DefaultPreemptionArgs::default(), Some(preemptor.clone()), None)
        .unwrap()
        .with_pod_groups(Some(world.store.clone()));
    let pod = |group: &str| {
        PodBuilder::new(&format!("{group}-p"))
            .namespace("ns")
            .pod_group(group)
            .info()
    };
    let held = |group: &str| {
        let s = plugin.pre_enqueue(&pod(group));
        assert!(
            s.is_success() || s.code() == Code::UnschedulableAndUnresolvable,
            "{s}"
        );
        s.message() == WAITING_FOR_GROUP_PREEMPTION
    };
    assert!(held("pg1"), "the preempting tree's own group");
    assert!(
        held("pg2"),
        "another leaf of the same tree, under another composite"
    );
    assert!(!held("pg3"), "a leaf of another tree");
    assert!(!held("orphan"), "a group whose parent is missing");
}
