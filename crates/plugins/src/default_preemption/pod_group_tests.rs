//! Pod-group preemption through the real default profile and the real pod-group cycle, on an
//! in-memory cache: upstream's `podgrouppreemption_test.go` cases (victim selection over the
//! whole cluster, groups disrupted as a whole, PDBs, eligibility), with CPU standing in for the
//! upstream tests' pod "size" (one CPU each unless said) and node capacities.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1beta1::{
    AllDisruptionMode, BasicSchedulingPolicy, DisruptionMode, GangSchedulingPolicy, PodGroup,
    PodGroupSchedulingPolicy, PodGroupSpec, SingleDisruptionMode,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use parking_lot::RwLock;
use unisched_framework::{
    CacheWriteError, Code, Framework, GroupRef, MemberDecision, NoNominations, NodeInfo, PodGroupCycleInput,
    PodGroupCycleResult, PodGroupInfo, PodGroupStore, PodInfo, SchedulerCache, SchedulingAlgorithm, Snapshot,
    config::KubeSchedulerProfile, run_pod_group_cycle,
};

use super::eligibility::tests::being_preempted;
use super::pdb::tests::pdb;
use super::victim::GroupView;
use super::*;
use crate::testing::{NodeBuilder, PodBuilder, RecordingBinder};
use crate::{PluginContext, PluginFeatures, Registry, StaticPdbs};

const LOW: i32 = 0;
const MID: i32 = 100;
const HIGH: i32 = 1000;

#[derive(Default)]
struct MemCache {
    nodes: RwLock<BTreeMap<String, NodeInfo>>,
}

impl SchedulerCache for MemCache {
    fn update_snapshot(&self) -> Arc<Snapshot> {
        Arc::new(Snapshot::from_node_infos(self.nodes.read().values().cloned()))
    }
    fn assume_pod(&self, pod: Arc<PodInfo>) -> Result<(), CacheWriteError> {
        let node = pod.node_name().ok_or("no node")?.to_string();
        self.nodes
            .write()
            .get_mut(&node)
            .ok_or("unknown node")?
            .add_pod(pod);
        Ok(())
    }
    fn forget_pod(&self, pod: &PodInfo) -> Result<(), CacheWriteError> {
        let node = pod.node_name().ok_or("no node")?.to_string();
        self.nodes
            .write()
            .get_mut(&node)
            .and_then(|n| n.remove_pod(&pod.uid))
            .map(|_| ())
            .ok_or_else(|| "not assumed".into())
    }
}

/// A PodGroup in `default`: gang with `min` or basic, disrupted as `mode` ("All", "Single" or
/// unset).
fn group(name: &str, priority: i32, min: Option<i32>, mode: Option<&str>) -> PodGroup {
    PodGroup {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        spec: PodGroupSpec {
            priority: Some(priority),
            scheduling_policy: PodGroupSchedulingPolicy {
                gang: min.map(|min_count| GangSchedulingPolicy { min_count }),
                basic: min.is_none().then(BasicSchedulingPolicy::default),
            },
            disruption_mode: mode.map(|m| DisruptionMode {
                all: (m == "All").then(AllDisruptionMode::default),
                single: (m == "Single").then(SingleDisruptionMode::default),
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A running pod of one CPU on `node`.
fn running(name: &str, node: &str, priority: i32) -> PodBuilder {
    PodBuilder::new(name)
        .priority(priority)
        .node_name(node)
        .req("cpu", "1")
}

/// A preemptor member of one CPU in group `preemptor`.
fn member(name: &str, priority: i32) -> PodBuilder {
    PodBuilder::new(name)
        .priority(priority)
        .pod_group("preemptor")
        .req("cpu", "1")
}

fn started(b: PodBuilder, second: i64) -> Pod {
    let mut pod = b.build();
    pod.status.get_or_insert_default().start_time =
        Some(Time(k8s_openapi::jiff::Timestamp::from_second(second).unwrap()));
    pod
}

struct World {
    /// `(node, cpu)`.
    nodes: Vec<(&'static str, &'static str)>,
    pods: Vec<Pod>,
    groups: Vec<PodGroup>,
    pdbs: Vec<Arc<PodDisruptionBudget>>,
    preemptor: PodGroup,
    members: Vec<Pod>,
    policy_gate: bool,
    /// The DRA cache and API the plugins see, when the world has devices.
    dra: Option<(
        Arc<unisched_cache::DraCache>,
        Arc<crate::dynamic_resources::testing::FakeDraApi>,
    )>,
}

impl World {
    fn new(nodes: &[(&'static str, &'static str)], preemptor: PodGroup, members: Vec<Pod>) -> Self {
        World {
            nodes: nodes.to_vec(),
            pods: Vec::new(),
            groups: Vec::new(),
            pdbs: Vec::new(),
            preemptor,
            members,
            policy_gate: false,
            dra: None,
        }
    }

    fn pods(mut self, pods: Vec<Pod>) -> Self {
        self.pods = pods;
        self
    }

    fn groups(mut self, groups: Vec<PodGroup>) -> Self {
        self.groups = groups;
        self
    }

    fn pdbs(mut self, pdbs: Vec<Arc<PodDisruptionBudget>>) -> Self {
        self.pdbs = pdbs;
        self
    }
}

struct Run {
    result: PodGroupCycleResult,
    plans: Vec<PreemptionPlan>,
    /// What the preemptor was told for the metrics: each group attempt's result, and each
    /// evaluation's preemptor type and result.
    group_attempts: Vec<Code>,
    evaluations: Vec<(&'static str, Code)>,
    cache: MemCache,
}

impl Run {
    fn victims(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .plans
            .iter()
            .flat_map(|p| p.victims.iter().map(|v| v.name.clone()))
            .collect();
        v.sort();
        v
    }

    fn nominated(&self) -> BTreeMap<String, String> {
        self.result
            .members
            .iter()
            .filter_map(|m| match m {
                MemberDecision::Failed(f) => f.nominated_node.clone().map(|n| (f.pod.name.clone(), n)),
                _ => None,
            })
            .collect()
    }
}

fn run(world: World) -> Run {
    let cache = MemCache::default();
    for (name, cpu) in &world.nodes {
        let pods: Vec<PodInfo> = world
            .pods
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(*name))
            .map(|p| PodInfo::new(p.clone()))
            .collect();
        let info = NodeBuilder::new(name).alloc("cpu", cpu).info_with(pods);
        cache.nodes.write().insert((*name).to_string(), info);
    }
    let store = Arc::new(PodGroupStore::new());
    for g in world.groups.iter().chain([&world.preemptor]) {
        store.set_group(Arc::new(g.clone()));
    }
    for p in world.pods.iter().chain(&world.members) {
        store.observe_pod(p);
    }
    let rec = RecordingPreemptor::new();
    let features = PluginFeatures {
        pod_group_preemption_policy: world.policy_gate,
        ..PluginFeatures::default()
    };
    let mut ctx = PluginContext::new(RecordingBinder::new())
        .with_features(features)
        .with_pod_groups(store.clone(), false)
        .with_preemption(rec.clone(), Arc::new(StaticPdbs(world.pdbs.clone())));
    if let Some((dra, api)) = &world.dra {
        ctx = ctx.with_dra(dra.clone(), api.clone());
    }
    let fwk = Framework::new(&KubeSchedulerProfile::default(), &Registry::in_tree(ctx)).unwrap();
    let group = PodGroupInfo::new(Arc::new(world.preemptor.clone()));
    let mut algo = SchedulingAlgorithm::new(1, None, 7);
    let result = run_pod_group_cycle(
        &fwk,
        &mut algo,
        &cache,
        &NoNominations,
        PodGroupCycleInput {
            group: &group,
            members: world
                .members
                .iter()
                .map(|p| Arc::new(PodInfo::new(p.clone())))
                .collect(),
            already_scheduled: 0,
            record_plugin_metrics: false,
        },
    );
    Run {
        result,
        plans: rec.plans(),
        group_attempts: rec.group_attempts(),
        evaluations: rec.evaluations(),
        cache,
    }
}

/// One preemptor member of priority `HIGH` in a basic group of priority `HIGH`.
fn one_high() -> (PodGroup, Vec<Pod>) {
    (
        group("preemptor", HIGH, None, None),
        vec![member("p", HIGH).build()],
    )
}

/// Upstream `TestPodGroupEvaluator_SelectVictimsOnDomain`, the cases without composite groups
/// or a mock Filter that ignores a node's resources.
#[test]
fn victims_over_the_whole_cluster() {
    let pdb_foo = || vec![pdb("foo", "foo", 0, &[])];
    let (pg, members) = one_high();
    let cases: Vec<(&str, World, &[&str])> = vec![
        (
            "a pod of no group is less important than a member of a group of the same priority",
            World::new(&[("node1", "2")], pg.clone(), members.clone())
                .pods(vec![
                    running("p1", "node1", LOW).build(),
                    running("p2", "node1", LOW).pod_group("pg1").build(),
                ])
                .groups(vec![group("pg1", LOW, None, Some("Single"))]),
            &["p1"],
        ),
        (
            "members disrupted one by one: the later start goes",
            World::new(&[("node1", "2")], pg.clone(), members.clone())
                .pods(vec![
                    started(running("p1", "node1", LOW).pod_group("pg1"), 1),
                    started(running("p2", "node1", LOW).pod_group("pg1"), 0),
                ])
                .groups(vec![group("pg1", LOW, None, Some("Single"))]),
            &["p1"],
        ),
        (
            "a group disrupted as a whole is not reprieved in part",
            World::new(&[("node1", "1"), ("node2", "1")], pg.clone(), members.clone())
                .pods(vec![
                    running("p1", "node1", LOW).pod_group("pg1").build(),
                    running("p2", "node2", LOW).pod_group("pg1").build(),
                ])
                .groups(vec![group("pg1", LOW, None, Some("All"))]),
            &["p1", "p2"],
        ),
        (
            "PDB: a group member under a budget is kept, its sibling goes",
            World::new(&[("node1", "2")], pg.clone(), members.clone())
                .pods(vec![
                    running("victim-pdb", "node1", LOW)
                        .label("app", "foo")
                        .pod_group("pg1")
                        .build(),
                    running("victim-no-pdb", "node1", LOW).pod_group("pg1").build(),
                ])
                .groups(vec![group("pg1", LOW, None, Some("Single"))])
                .pdbs(pdb_foo()),
            &["victim-no-pdb"],
        ),
        (
            "the one lower-priority pod",
            World::new(&[("node1", "1")], pg.clone(), members.clone())
                .pods(vec![running("p1", "node1", LOW).build()]),
            &["p1"],
        ),
        (
            "the lower priority goes first",
            World::new(&[("node1", "2")], pg.clone(), members.clone()).pods(vec![
                running("p1", "node1", LOW).build(),
                running("p2", "node1", MID).build(),
            ]),
            &["p1"],
        ),
        (
            "as few victims as needed",
            World::new(&[("node1", "3")], pg.clone(), members.clone()).pods(vec![
                started(running("p1", "node1", LOW), 1),
                started(running("p2", "node1", LOW), 2),
                started(running("p3", "node1", LOW), 3),
            ]),
            &["p3"],
        ),
        (
            "PDB: the victim no budget protects",
            World::new(&[("node1", "2")], pg.clone(), members.clone())
                .pods(vec![
                    running("victim-pdb", "node1", LOW).label("app", "foo").build(),
                    running("victim-no-pdb", "node1", LOW).build(),
                ])
                .pdbs(pdb_foo()),
            &["victim-no-pdb"],
        ),
        (
            "PDB: a higher priority without a budget before a lower priority under one",
            World::new(&[("node1", "2")], pg.clone(), members.clone())
                .pods(vec![
                    running("victim-pdb", "node1", LOW).label("app", "foo").build(),
                    running("victim-no-pdb", "node1", MID).build(),
                ])
                .pdbs(pdb_foo()),
            &["victim-no-pdb"],
        ),
        (
            "PDB: when every choice violates, the lower priority",
            World::new(&[("node1", "2")], pg.clone(), members.clone())
                .pods(vec![
                    running("p1", "node1", LOW).label("app", "foo").build(),
                    running("p2", "node1", MID).label("app", "foo").build(),
                ])
                .pdbs(pdb_foo()),
            &["p1"],
        ),
        (
            "a group disrupted as a whole goes whole",
            World::new(&[("node1", "1"), ("node2", "2")], pg.clone(), members.clone())
                .pods(vec![
                    running("p1", "node1", LOW).pod_group("pg1").build(),
                    running("p2", "node2", LOW).pod_group("pg1").build(),
                    running("filler", "node2", HIGH).build(),
                ])
                .groups(vec![group("pg1", LOW, None, Some("All"))]),
            &["p1", "p2"],
        ),
        (
            "a lone pod rather than a whole group",
            World::new(&[("node1", "3")], pg.clone(), members.clone())
                .pods(vec![
                    running("p1", "node1", LOW).build(),
                    running("g1-1", "node1", LOW).pod_group("pg1").build(),
                    running("g1-2", "node1", LOW).pod_group("pg1").build(),
                ])
                .groups(vec![group("pg1", LOW, None, Some("All"))]),
            &["p1"],
        ),
        (
            "a whole low group rather than a mid pod",
            World::new(&[("node1", "3")], pg.clone(), members.clone())
                .pods(vec![
                    running("g1-1", "node1", LOW).pod_group("pg1").build(),
                    running("g1-2", "node1", LOW).pod_group("pg1").build(),
                    running("p1", "node1", MID).build(),
                ])
                .groups(vec![group("pg1", LOW, None, Some("All"))]),
            &["g1-1", "g1-2"],
        ),
        (
            "PDB: a group violates when one member does",
            World::new(&[("node1", "3")], pg.clone(), members.clone())
                .pods(vec![
                    running("g1-1", "node1", LOW)
                        .label("app", "foo")
                        .pod_group("pg1")
                        .build(),
                    running("g1-2", "node1", LOW).pod_group("pg1").build(),
                    running("p1", "node1", LOW).build(),
                ])
                .groups(vec![group("pg1", LOW, None, Some("All"))])
                .pdbs(pdb_foo()),
            &["p1"],
        ),
        (
            "a victim group's priority is the group's, not its pods'",
            World::new(&[("node1", "1"), ("node2", "1")], pg.clone(), members.clone())
                .pods(vec![
                    running("p1", "node1", HIGH).pod_group("pg1").build(),
                    running("p2", "node2", HIGH).pod_group("pg1").build(),
                ])
                .groups(vec![group("pg1", MID, None, Some("All"))]),
            &["p1", "p2"],
        ),
        (
            "gang: as many members as fit without touching higher priorities",
            World::new(
                &[("node1", "1"), ("node2", "1"), ("node3", "1"), ("node4", "1")],
                group("preemptor", HIGH, Some(1), None),
                vec![
                    member("p-a", HIGH).build(),
                    member("p-b", HIGH).build(),
                    member("p-c", HIGH).build(),
                ],
            )
            .pods(vec![
                running("p1", "node1", LOW).build(),
                running("p2", "node2", LOW).build(),
                running("p3", "node3", HIGH).build(),
                running("p4", "node4", HIGH).build(),
            ]),
            &["p1", "p2"],
        ),
        (
            "gang: a victim group is not reprieved in part",
            World::new(
                &[("node1", "1"), ("node2", "1"), ("node3", "1")],
                group("preemptor", HIGH, Some(1), None),
                vec![
                    member("p-a", HIGH).build(),
                    member("p-b", HIGH).build(),
                    member("p-c", HIGH).build(),
                ],
            )
            .pods(vec![
                running("v1", "node1", MID).pod_group("victim-pg").build(),
                running("v2", "node2", MID).pod_group("victim-pg").build(),
                running("v3", "node3", LOW).build(),
            ])
            .groups(vec![group("victim-pg", MID, Some(1), Some("All"))]),
            &["v1", "v2", "v3"],
        ),
        (
            "basic: as many members as fit without touching higher priorities",
            World::new(
                &[("node1", "1"), ("node2", "1"), ("node3", "1"), ("node4", "1")],
                group("preemptor", HIGH, None, None),
                vec![
                    member("p-a", HIGH).build(),
                    member("p-b", HIGH).build(),
                    member("p-c", HIGH).build(),
                ],
            )
            .pods(vec![
                running("p1", "node1", LOW).build(),
                running("p2", "node2", LOW).build(),
                running("p3", "node3", HIGH).build(),
                running("p4", "node4", HIGH).build(),
            ]),
            &["p1", "p2"],
        ),
    ];
    for (name, world, want) in cases {
        let r = run(world);
        assert_eq!(r.victims(), want, "{name}: {:?}", r.result.status);
        assert!(r.result.waiting_on_preemption, "{name}");
        assert_eq!(
            r.result.status.reasons().last().unwrap(),
            &format!(
                "pod group preemption: found a placement for podgroup, preempting {} victims",
                want.len()
            ),
            "{name}"
        );
        assert_eq!(r.plans.len(), 1, "{name}");
        assert_eq!(r.plans[0].node, "cluster", "{name}");
        assert_eq!(r.plans[0].preemptor_id(), "uid-preemptor", "{name}");
        assert!(!r.nominated().is_empty(), "{name}: the members are nominated");
    }
}

/// Upstream's failure cases: nothing of lower priority anywhere.
#[test]
fn nothing_to_preempt() {
    let cases: Vec<(&str, World)> = vec![
        (
            "a victim of higher priority",
            World::new(
                &[("node1", "1")],
                group("preemptor", MID, None, None),
                vec![member("p", MID).build()],
            )
            .pods(vec![running("p1", "node1", HIGH).build()]),
        ),
        (
            "a victim of equal priority",
            World::new(
                &[("node1", "1")],
                group("preemptor", MID, None, None),
                vec![member("p", MID).build()],
            )
            .pods(vec![running("p1", "node1", MID).build()]),
        ),
        (
            "a victim group whose group priority is not lower, whatever its pods say",
            World::new(
                &[("node1", "1"), ("node2", "1")],
                group("preemptor", MID, None, None),
                vec![member("p", MID).build()],
            )
            .pods(vec![
                running("p1", "node1", LOW).pod_group("pg1").build(),
                running("p2", "node2", LOW).pod_group("pg1").build(),
            ])
            .groups(vec![group("pg1", MID, None, Some("All"))]),
        ),
    ];
    for (name, world) in cases {
        let r = run(world);
        assert!(r.plans.is_empty(), "{name}");
        assert!(!r.result.waiting_on_preemption, "{name}");
        assert_eq!(
            r.result.status.reasons().last().unwrap(),
            &format!("pod group preemption: {NO_GROUP_VICTIMS}"),
            "{name}"
        );
        assert!(r.nominated().is_empty(), "{name}");
    }
}

/// What one group preemption reports for the metrics: the attempt's result, the evaluation's,
/// and what the chosen victims cost (group units, broken budgets).
#[test]
fn what_a_group_preemption_counts() {
    let (pg, members) = one_high();
    // (name, world, attempt result, plan counts when a plan is made)
    let cases: Vec<(&str, World, Code, Option<PreemptionCounts>)> = vec![
        (
            "a group disrupted as a whole is one unit",
            World::new(&[("node1", "1"), ("node2", "1")], pg.clone(), members.clone())
                .pods(vec![
                    running("p1", "node1", LOW).pod_group("pg1").build(),
                    running("p2", "node2", LOW).pod_group("pg1").build(),
                ])
                .groups(vec![group("pg1", LOW, None, Some("All"))]),
            Code::Success,
            Some(PreemptionCounts {
                pdb_violations: 0,
                group_disruptions: 1,
            }),
        ),
        (
            "a pod of no group is no group unit",
            World::new(&[("node1", "1")], pg.clone(), members.clone())
                .pods(vec![running("p1", "node1", LOW).build()]),
            Code::Success,
            Some(PreemptionCounts::default()),
        ),
        (
            "a victim its budget protects, evicted all the same, is a violation",
            World::new(&[("node1", "1")], pg.clone(), members.clone())
                .pods(vec![running("p1", "node1", LOW).label("app", "foo").build()])
                .pdbs(vec![pdb("foo", "foo", 0, &[])]),
            Code::Success,
            Some(PreemptionCounts {
                pdb_violations: 1,
                group_disruptions: 0,
            }),
        ),
        (
            "nothing of lower priority",
            World::new(&[("node1", "1")], pg.clone(), members.clone())
                .pods(vec![running("p1", "node1", HIGH).build()]),
            Code::UnschedulableAndUnresolvable,
            None,
        ),
    ];
    for (name, world, code, counts) in cases {
        let r = run(world);
        assert_eq!(r.group_attempts, [code], "{name}");
        assert_eq!(r.evaluations, [("podgroup", code)], "{name}");
        assert_eq!(
            r.plans.iter().map(|p| p.counts).collect::<Vec<_>>(),
            Vec::from_iter(counts),
            "{name}"
        );
    }
}

/// Upstream `TestNewPodGroupPreemptorResolvesPreemptionPolicy` (PodGroups only) and the
/// eligibility cases of `TestPodGroupEvaluator_Preempt`.
#[test]
fn who_may_preempt() {
    let never = |b: PodBuilder| {
        let mut pod = b.build();
        pod.spec.as_mut().unwrap().preemption_policy = Some("Never".into());
        pod
    };
    let with_policy = |policy: Option<&str>| {
        let mut g = group("preemptor", HIGH, None, None);
        g.spec.preemption_policy = policy.map(str::to_string);
        PodGroupInfo::new(Arc::new(g))
    };
    let plain = vec![member("a", HIGH).arc(), member("b", HIGH).arc()];
    let one_never = vec![
        member("a", HIGH).arc(),
        Arc::new(PodInfo::new(never(member("b", HIGH)))),
    ];
    // (case, group policy, members, gate, may preempt)
    let cases = [
        (
            "gate on: the group says Never",
            Some("Never"),
            &plain,
            true,
            false,
        ),
        (
            "gate on: the group says PreemptLowerPriority",
            Some("PreemptLowerPriority"),
            &one_never,
            true,
            true,
        ),
        ("gate on: unset means it may", None, &one_never, true, true),
        (
            "gate off: no member says Never",
            Some("Never"),
            &plain,
            false,
            true,
        ),
        ("gate off: one member says Never", None, &one_never, false, false),
    ];
    for (name, policy, members, gate, want) in cases {
        assert_eq!(
            resolve_preemption_policy(GroupRef::Group(&with_policy(policy)), members, gate),
            want,
            "{name}"
        );
    }

    // Through the cycle: a member saying Never keeps the group from preempting.
    let world = World::new(
        &[("node1", "1")],
        group("preemptor", HIGH, None, None),
        vec![never(member("p", HIGH))],
    )
    .pods(vec![running("p1", "node1", LOW).build()]);
    let r = run(world);
    assert!(r.plans.is_empty());
    assert_eq!(
        r.result.status.reasons().last().unwrap(),
        &format!("pod group preemption: {NOT_ELIGIBLE_NEVER}")
    );
    // With the gate, the group's own policy decides.
    let mut world = World::new(
        &[("node1", "1")],
        group("preemptor", HIGH, None, None),
        vec![never(member("p", HIGH))],
    )
    .pods(vec![running("p1", "node1", LOW).build()]);
    world.policy_gate = true;
    assert_eq!(run(world).victims(), ["p1"]);
}

/// A member nominated to a node where a victim of a lower priority still terminates: the group
/// waits, keeping its nominations, and preempts nothing more (upstream's "ongoing preemption");
/// a terminating pod of a higher-priority group does not count.
#[test]
fn an_ongoing_preemption_is_waited_for() {
    let nominated = |name: &str| member(name, HIGH).nominated_node("node1").build();
    let terminating = |group_name: &str| being_preempted(running("old", "node1", LOW).pod_group(group_name));
    let world = World::new(
        &[("node1", "2")],
        group("preemptor", HIGH, None, None),
        vec![nominated("p")],
    )
    .pods(vec![
        terminating("victim-pg"),
        running("other", "node1", LOW).build(),
    ])
    .groups(vec![group("victim-pg", LOW, None, Some("All"))]);
    let r = run(world);
    assert!(r.plans.is_empty());
    assert!(r.result.waiting_on_preemption);
    assert_eq!(
        r.result.status.reasons().last().unwrap(),
        &format!("pod group preemption: {ONGOING_PREEMPTION}")
    );
    assert_eq!(
        r.nominated(),
        BTreeMap::from([("p".to_string(), "node1".to_string())])
    );

    // The terminating pod belongs to a group of higher priority: not this group's preemption.
    let world = World::new(
        &[("node1", "2")],
        group("preemptor", MID, None, None),
        vec![member("p", MID).nominated_node("node1").build()],
    )
    .pods(vec![
        terminating("high-pg"),
        running("other", "node1", LOW).build(),
    ])
    .groups(vec![group("high-pg", HIGH, None, Some("All"))]);
    let r = run(world);
    assert_eq!(r.victims(), ["other"]);
}

/// What the members are told, as upstream's `applyPodGroupPostFilterResult` and failure handler
/// word it: the group's verdict gains the preemption's message; every member is nominated where
/// the dry run put it; nothing of the group is left in the cache.
#[test]
fn members_are_nominated_and_told_why() {
    let world = World::new(
        &[("node1", "1"), ("node2", "1")],
        group("preemptor", HIGH, Some(2), None),
        vec![member("m0", HIGH).build(), member("m1", HIGH).build()],
    )
    .pods(vec![
        running("low", "node1", LOW).build(),
        running("high", "node2", HIGH).build(),
    ]);
    // Only one node can be freed: the gang of two cannot fit even with preemption.
    let r = run(world);
    assert!(r.plans.is_empty());
    assert!(!r.result.waiting_on_preemption);
    let message = r.result.status.message();
    assert!(
        message
            .ends_with(", pod group preemption: minCount (2) cannot be satisfied: 1 scheduled, 0 remaining"),
        "{message}"
    );

    let world = World::new(
        &[("node1", "1"), ("node2", "1")],
        group("preemptor", HIGH, Some(2), None),
        vec![member("m0", HIGH).build(), member("m1", HIGH).build()],
    )
    .pods(vec![
        running("low1", "node1", LOW).build(),
        running("low2", "node2", LOW).build(),
    ]);
    let r = run(world);
    assert_eq!(r.victims(), ["low1", "low2"]);
    assert_eq!(r.result.status.code(), Code::Unschedulable);
    let nominated = r.nominated();
    assert_eq!(nominated.len(), 2);
    let mut nodes: Vec<&String> = nominated.values().collect();
    nodes.sort();
    assert_eq!(nodes, ["node1", "node2"]);
    let held: usize = r.cache.nodes.read().values().map(|n| n.pods.len()).sum();
    assert_eq!(held, 2, "only the victims, not yet gone; no member is held");
}

/// Single-pod preemption with victims in PodGroups: a pod's preemption evicts a group disrupted
/// as a whole with all its placed members (on other nodes too), a group disrupted member by
/// member loses only what is in the way, and a victim's priority is its group's.
fn preempt_one(
    nodes: &[(&str, &str)],
    pods: Vec<Pod>,
    groups: Vec<PodGroup>,
    pod: Pod,
) -> (Option<String>, Vec<String>) {
    let store = Arc::new(PodGroupStore::new());
    for g in groups {
        store.set_group(Arc::new(g));
    }
    for p in &pods {
        store.observe_pod(p);
    }
    let infos: Vec<NodeInfo> = nodes
        .iter()
        .map(|(name, cpu)| {
            let on_node = pods
                .iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(*name))
                .map(|p| PodInfo::new(p.clone()));
            NodeBuilder::new(name).alloc("cpu", cpu).info_with(on_node)
        })
        .collect();
    let rec = RecordingPreemptor::new();
    let ctx = PluginContext::new(RecordingBinder::new())
        .with_pod_groups(store, false)
        .with_preemption(rec.clone(), Arc::new(StaticPdbs::default()));
    let fwk = Framework::new(&KubeSchedulerProfile::default(), &Registry::in_tree(ctx)).unwrap();
    let mut algo = SchedulingAlgorithm::new(1, None, 7);
    let mut state = unisched_framework::CycleState::with_snapshot(crate::testing::snapshot(infos));
    let nominated = match algo.schedule_pod(&fwk, &mut state, &PodInfo::new(pod), &NoNominations) {
        Err(unisched_framework::ScheduleError::Fit(_, nomination)) => {
            nomination.and_then(|n| n.nominated_node_name)
        }
        other => panic!("unexpected {other:?}"),
    };
    let mut victims: Vec<String> = rec
        .plans()
        .iter()
        .flat_map(|p| p.victims.iter().map(|v| v.name.clone()))
        .collect();
    victims.sort();
    (nominated, victims)
}

#[test]
fn a_single_pod_evicts_groups_as_their_disruption_mode_says() {
    let nodes = [("node1", "1"), ("node2", "1")];
    let pods = || {
        vec![
            running("v1", "node1", LOW).pod_group("pg1").build(),
            running("v2", "node2", LOW).pod_group("pg1").build(),
        ]
    };
    let preemptor = || PodBuilder::new("p").priority(HIGH).req("cpu", "1").build();

    let (nominated, victims) = preempt_one(
        &nodes,
        pods(),
        vec![group("pg1", LOW, None, Some("All"))],
        preemptor(),
    );
    assert!(nominated.is_some());
    assert_eq!(victims, ["v1", "v2"], "the whole group, across nodes");

    let (_, victims) = preempt_one(
        &nodes,
        pods(),
        vec![group("pg1", LOW, None, Some("Single"))],
        preemptor(),
    );
    assert_eq!(victims.len(), 1, "only the member in the way: {victims:?}");

    // The victims' pods say a higher priority than the preemptor's; their group does not.
    let high_pods = vec![
        running("v1", "node1", HIGH + 1).pod_group("pg1").build(),
        running("v2", "node2", HIGH + 1).pod_group("pg1").build(),
    ];
    let (_, victims) = preempt_one(
        &nodes,
        high_pods,
        vec![group("pg1", LOW, None, Some("All"))],
        preemptor(),
    );
    assert_eq!(victims, ["v1", "v2"]);
}

/// Upstream's eligibility case "victim priority overridden by PodGroup": a terminating victim on
/// the preemptor's nominated node counts as lower priority by its group's priority, whatever its
/// own says, so the preemptor waits for it.
#[test]
fn a_terminating_victim_counts_by_its_group_priority() {
    let mut victim = being_preempted(running("v1", "node1", HIGH * 2).pod_group("pg1"));
    victim.metadata.namespace = Some("ns2".into());
    let mut pg1 = group("pg1", LOW, None, None);
    pg1.metadata.namespace = Some("ns2".into());
    let preemptor = PodBuilder::new("p")
        .namespace("ns1")
        .priority(HIGH)
        .pod_group("pg1")
        .nominated_node("node1")
        .req("cpu", "1")
        .build();
    let store = PodGroupStore::new();
    store.set_group(Arc::new(pg1));
    let snap = crate::testing::snapshot([NodeBuilder::new("node1")
        .alloc("cpu", "1")
        .info_with([PodInfo::new(victim)])]);
    let groups = GroupView::build(Some(&store), &snap);
    let mut statuses = unisched_framework::NodeToStatus::default();
    statuses.set("node1", Status::unschedulable("Insufficient cpu"));
    assert_eq!(
        eligibility::check(&PodInfo::new(preemptor.clone()), &snap, &statuses, &|p| groups
            .priority_of(p)),
        Err(NOT_ELIGIBLE_TERMINATING)
    );
    assert_eq!(
        eligibility::check(&PodInfo::new(preemptor), &snap, &statuses, &|p| p.priority),
        Ok(()),
        "by its own priority it would not count"
    );
}

/// Upstream's PreEnqueue case for a pod of a PodGroup: held while its group's evictions are
/// being written (the preemption is the group's, named by the PodGroup's UID), let through
/// otherwise, and never held for a group nobody knows.
#[test]
fn pre_enqueue_holds_the_members_while_their_group_preempts() {
    let rec = RecordingPreemptor::new();
    rec.preempting.lock().push("uid-pg1".into());
    let store = Arc::new(PodGroupStore::new());
    store.set_group(Arc::new(group("pg1", HIGH, Some(2), None)));
    store.set_group(Arc::new(group("pg2", HIGH, Some(2), None)));
    let plugin = DefaultPreemption::new(
        &DefaultPreemptionArgs::default(),
        Some(rec.clone() as Arc<dyn Preemptor>),
        None,
    )
    .unwrap()
    .with_pod_groups(Some(store));
    let held = plugin.pre_enqueue(&member("m", HIGH).pod_group("pg1").info());
    assert_eq!(held.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(held.message(), WAITING_FOR_GROUP_PREEMPTION);
    assert!(
        plugin
            .pre_enqueue(&member("m", HIGH).pod_group("pg2").info())
            .is_success()
    );
    assert!(
        plugin
            .pre_enqueue(&member("m", HIGH).pod_group("unknown").info())
            .is_success()
    );
}

/// A pod with one GPU claim of its own (`<name>-gpu`).
fn with_gpu_claim(b: PodBuilder, name: &str) -> Pod {
    use k8s_openapi::api::core::v1::{
        PodResourceClaim, ResourceClaim as ContainerClaim, ResourceRequirements,
    };
    let mut p = b.build();
    let spec = p.spec.as_mut().unwrap();
    spec.resource_claims = Some(vec![PodResourceClaim {
        name: "gpu".into(),
        resource_claim_name: Some(format!("{name}-gpu")),
        resource_claim_template_name: None,
    }]);
    spec.containers[0]
        .resources
        .get_or_insert_with(ResourceRequirements::default)
        .claims = Some(vec![ContainerClaim {
        name: "gpu".into(),
        request: None,
    }]);
    p
}

/// A world of one node `n1` of 8 CPUs and `gpus` GPUs, whose victims hold one GPU each
/// (`(pod, device, group)`, a claim `<pod>-gpu` allocated and reserved for the pod), and a
/// high-priority gang of two members that need one GPU each. The CPU is plentiful: only the
/// devices the victims free can make room.
fn gpu_world(gpus: usize, victims: &[(&str, &str, Option<&str>)], groups: Vec<PodGroup>) -> World {
    use k8s_openapi::api::resource::v1::{
        AllocationResult, DeviceAllocationResult, DeviceRequestAllocationResult,
        ResourceClaimConsumerReference,
    };
    use unisched_cache::DraCache;
    use unisched_dra::testing::{claim, class, dev, req, slice};

    use crate::dynamic_resources::testing::FakeDraApi;

    const GPU: &str = "gpu.example.com";
    let dra = Arc::new(DraCache::new());
    let api = FakeDraApi::new();
    api.echo_to(dra.clone());
    dra.apply_class(Arc::new(class(GPU, GPU))).unwrap();
    let mut node_slice = slice("n1-gpu", GPU, "n1", "n1");
    for g in 0..gpus {
        node_slice = node_slice.device(dev(&format!("gpu-{g}")));
    }
    dra.apply_slice(Arc::new(node_slice.build())).unwrap();
    for (victim, device, _) in victims {
        let mut held = claim("default", &format!("{victim}-gpu"))
            .request(req("gpu", GPU))
            .build();
        let st = held.status.get_or_insert_with(Default::default);
        st.allocation = Some(AllocationResult {
            devices: Some(DeviceAllocationResult {
                results: Some(vec![DeviceRequestAllocationResult {
                    request: "gpu".into(),
                    driver: GPU.into(),
                    pool: "n1".into(),
                    device: (*device).into(),
                    ..Default::default()
                }]),
                config: None,
            }),
            ..Default::default()
        });
        st.reserved_for = Some(vec![ResourceClaimConsumerReference {
            api_group: None,
            name: (*victim).into(),
            resource: "pods".into(),
            uid: format!("uid-{victim}"),
        }]);
        api.seed_claim(held);
    }
    for m in ["p0", "p1"] {
        api.seed_claim(
            claim("default", &format!("{m}-gpu"))
                .request(req("gpu", GPU))
                .build(),
        );
    }
    let pods = victims
        .iter()
        .map(|(v, _, group)| {
            let mut b = running(v, "n1", LOW).uid(&format!("uid-{v}"));
            if let Some(g) = group {
                b = b.pod_group(g);
            }
            with_gpu_claim(b, v)
        })
        .collect();
    let members = ["p0", "p1"]
        .iter()
        .map(|m| with_gpu_claim(member(m, HIGH).uid(&format!("uid-{m}")), m))
        .collect();
    let mut world = World::new(&[("n1", "8")], group("preemptor", HIGH, Some(2), None), members)
        .pods(pods)
        .groups(groups);
    world.dra = Some((dra, api));
    world
}

/// Group preemption counts the devices victims free, and the devices the members take: each
/// member's check in the reprieve sees the devices of the members placed before it.
#[test]
fn a_group_preempts_for_devices_the_victims_hold() {
    let cases: Vec<(&str, World, &[&str])> = vec![
        (
            "a gang holding every GPU goes whole",
            gpu_world(
                2,
                &[("v0", "gpu-0", Some("low")), ("v1", "gpu-1", Some("low"))],
                vec![group("low", LOW, Some(2), Some("All"))],
            ),
            &["v0", "v1"],
        ),
        (
            "the lone pod's GPU is not enough for two members: the gang goes, the pod stays",
            gpu_world(
                3,
                &[
                    ("v0", "gpu-0", Some("low")),
                    ("v1", "gpu-1", Some("low")),
                    ("lone", "gpu-2", None),
                ],
                vec![group("low", LOW, Some(2), Some("All"))],
            ),
            &["v0", "v1"],
        ),
        (
            "a free GPU and one victim's: only that victim goes",
            gpu_world(2, &[("lone", "gpu-0", None)], vec![]),
            &["lone"],
        ),
    ];
    for (name, world, victims) in cases {
        let r = run(world);
        assert_eq!(r.victims(), victims, "{name}: {:?}", r.result.status);
        assert!(r.result.waiting_on_preemption, "{name}");
        assert_eq!(
            r.nominated(),
            BTreeMap::from([
                ("p0".to_string(), "n1".to_string()),
                ("p1".to_string(), "n1".to_string())
            ]),
            "{name}"
        );
    }
}
