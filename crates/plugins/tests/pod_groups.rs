//! The pod-group cycle with the default profile and the workload plugins, on an in-memory
//! cache: gangs all or nothing, basic groups pod by pod, topology placements, and the ledger
//! after every cycle exactly what the placed members hold (nothing of a failed gang left).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::MemCache;

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::{
    api::scheduling::v1beta1::{
        AllDisruptionMode, BasicSchedulingPolicy, DisruptionMode, GangSchedulingPolicy, PodGroup,
        PodGroupSchedulingConstraints, PodGroupSchedulingPolicy, PodGroupSpec, SingleDisruptionMode,
        TopologyConstraint,
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use proptest::prelude::*;
use unisched_framework::{
    Code, Framework, MemberDecision, NoNominations, PodGroupCycleInput, PodGroupCycleResult, PodGroupInfo,
    PodGroupStore, PodInfo, SchedulerCache, SchedulingAlgorithm, config::KubeSchedulerProfile,
    run_pod_group_cycle,
};
use unisched_plugins::{
    PluginContext, PreemptionPlan, RecordingPreemptor, Registry, StaticPdbs,
    testing::{PodBuilder, RecordingBinder},
};

fn group(min: Option<i32>, topology: Option<&str>) -> PodGroupInfo {
    PodGroupInfo::new(Arc::new(PodGroup {
        metadata: ObjectMeta {
            namespace: Some("ns".into()),
            name: Some("pg".into()),
            ..Default::default()
        },
        spec: PodGroupSpec {
            scheduling_policy: PodGroupSchedulingPolicy {
                gang: min.map(|min_count| GangSchedulingPolicy { min_count }),
                basic: min.is_none().then(BasicSchedulingPolicy::default),
            },
            scheduling_constraints: topology.map(|key| PodGroupSchedulingConstraints {
                topology: Some(vec![TopologyConstraint { key: key.into() }]),
            }),
            ..Default::default()
        },
        ..Default::default()
    }))
}

fn members(cpus: &[&str]) -> Vec<Arc<PodInfo>> {
    cpus.iter()
        .enumerate()
        .map(|(i, cpu)| {
            PodBuilder::new(&format!("m{i}"))
                .namespace("ns")
                .uid(&format!("m{i}"))
                .pod_group("pg")
                .req("cpu", cpu)
                .arc()
        })
        .collect()
}

fn framework(groups: Arc<PodGroupStore>, topology_aware: bool) -> Framework {
    let registry =
        Registry::in_tree(PluginContext::new(RecordingBinder::new()).with_pod_groups(groups, topology_aware));
    Framework::new(&KubeSchedulerProfile::default(), &registry).expect("default profile")
}

fn cycle(cache: &MemCache, group: &PodGroupInfo, pods: Vec<Arc<PodInfo>>) -> PodGroupCycleResult {
    cycle_with(cache, group, pods, true)
}

fn cycle_with(
    cache: &MemCache,
    group: &PodGroupInfo,
    pods: Vec<Arc<PodInfo>>,
    topology_aware: bool,
) -> PodGroupCycleResult {
    let store = Arc::new(PodGroupStore::new());
    store.set_group(group.object.clone());
    for p in &pods {
        store.observe_pod(&p.pod);
    }
    let fwk = framework(store, topology_aware);
    let mut algo = SchedulingAlgorithm::new(1, None, 7);
    run_pod_group_cycle(
        &fwk,
        &mut algo,
        cache,
        &NoNominations,
        PodGroupCycleInput {
            group,
            members: pods,
            already_scheduled: 0,
            record_plugin_metrics: false,
        },
    )
}

fn bound(result: &PodGroupCycleResult) -> BTreeMap<String, String> {
    result
        .members
        .iter()
        .filter_map(|m| match m {
            MemberDecision::Bind(t) => Some((t.pod.uid.clone(), t.node.clone())),
            _ => None,
        })
        .collect()
}

fn messages(result: &PodGroupCycleResult) -> Vec<String> {
    result
        .members
        .iter()
        .filter_map(|m| match m {
            MemberDecision::Failed(f) => Some(f.message.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_gang_that_fits_is_placed_whole() {
    let cache = MemCache::with_nodes(&[("a", "4", None), ("b", "4", None)]);
    let result = cycle(&cache, &group(Some(3), None), members(&["2", "2", "2"]));
    assert!(result.status.is_success(), "{:?}", result.status);
    assert_eq!(bound(&result).len(), 3);
    assert_eq!(
        cache.placed(),
        bound(&result),
        "what is bound is exactly what is held"
    );
}

/// Upstream's wording: with TopologyAwareWorkloadScheduling on, every group goes through the
/// placement algorithm (one placement, all nodes, without a topology constraint), whose failure
/// quotes the try's verdict; the group's preemption (DefaultPreemption's podGroupPostFilter,
/// finding nothing of lower priority) adds its own; members that fitted and were taken back
/// prefix the group's verdict once more, as upstream's failure handler does.
#[test]
fn a_gang_short_of_its_quorum_holds_nothing_and_every_member_says_why() {
    for (topology_aware, group_message) in [
        (
            true,
            "pod group is unschedulable, 0/1 placements are available, first placement status: \
             minCount (3) cannot be satisfied: 2 scheduled, 0 remaining, \
             pod group preemption: No preemption victims found for incoming preemptor",
        ),
        (
            false,
            "minCount (3) cannot be satisfied: 2 scheduled, 0 remaining, \
             pod group preemption: No preemption victims found for incoming preemptor",
        ),
    ] {
        let cache = MemCache::with_nodes(&[("a", "4", None), ("b", "4", None)]);
        let result = cycle_with(
            &cache,
            &group(Some(3), None),
            members(&["3", "3", "3"]),
            topology_aware,
        );
        assert_eq!(result.status.code(), Code::Unschedulable);
        assert_eq!(result.status.message(), group_message);
        assert!(bound(&result).is_empty());
        assert!(cache.placed().is_empty(), "the two that fitted were taken back");
        let m = messages(&result);
        assert_eq!(m.len(), 3);
        let taken_back = format!("pod group is unschedulable, {group_message}");
        assert_eq!(m.iter().filter(|m| **m == taken_back).count(), 2, "{m:?}");
        assert!(
            m.iter()
                .any(|m| m.starts_with("0/2 nodes are available") && m.contains("Insufficient cpu")),
            "{m:?}"
        );
    }
}

#[test]
fn a_gang_stops_at_the_first_member_that_makes_the_quorum_unreachable() {
    let cache = MemCache::with_nodes(&[("a", "4", None)]);
    // minCount 2 of 2: the first member does not fit, so the second is never tried and says
    // what the group said before its preemption added its own.
    let result = cycle_with(&cache, &group(Some(2), None), members(&["8", "1"]), false);
    assert_eq!(
        result.status.message(),
        "minCount (2) cannot be satisfied: 0 scheduled, 1 remaining, \
         pod group preemption: No preemption victims found for incoming preemptor"
    );
    let m = messages(&result);
    assert!(m[0].contains("Insufficient cpu"), "{m:?}");
    assert_eq!(m[1], "minCount (2) cannot be satisfied: 0 scheduled, 1 remaining");
    assert!(cache.placed().is_empty());
}

#[test]
fn a_gang_with_fewer_pods_than_its_quorum_is_not_tried() {
    let cache = MemCache::with_nodes(&[("a", "4", None)]);
    let result = cycle_with(&cache, &group(Some(3), None), members(&["1", "1"]), false);
    assert_eq!(
        result.status.message(),
        "pod group is unschedulable, minCount (3) cannot be satisfied: 0 scheduled, 2 remaining, \
         pod group preemption: No preemption victims found for incoming preemptor"
    );
    assert_eq!(messages(&result).len(), 2);
    assert!(cache.placed().is_empty());
}

#[test]
fn members_beyond_min_count_are_placed_if_they_fit() {
    let cache = MemCache::with_nodes(&[("a", "4", None)]);
    let result = cycle(&cache, &group(Some(2), None), members(&["2", "2", "2"]));
    assert!(result.status.is_success(), "{:?}", result.status);
    assert_eq!(bound(&result).len(), 2);
    assert_eq!(
        messages(&result).len(),
        1,
        "the third does not fit, the gang stands"
    );
}

#[test]
fn a_basic_group_places_each_member_that_fits() {
    let cache = MemCache::with_nodes(&[("a", "8", None), ("b", "8", None)]);
    let result = cycle(&cache, &group(None, None), members(&["5", "5", "5"]));
    assert!(result.status.is_success());
    assert_eq!(bound(&result).len(), 2);
    assert_eq!(cache.placed(), bound(&result));
}

#[test]
fn a_topology_constraint_picks_the_domain_that_holds_the_gang() {
    let cache = MemCache::with_nodes(&[
        ("a-1", "4", Some("rack-a")),
        ("a-2", "4", Some("rack-a")),
        ("b-1", "8", Some("rack-b")),
        ("b-2", "8", Some("rack-b")),
    ]);
    let result = cycle(
        &cache,
        &group(Some(4), Some("rack")),
        members(&["3", "3", "3", "3"]),
    );
    assert!(result.status.is_success(), "{:?}", result.status);
    assert_eq!(result.placement.as_deref(), Some("rack-b"));
    let nodes = bound(&result);
    assert_eq!(nodes.len(), 4);
    assert!(nodes.values().all(|n| n.starts_with("b-")), "{nodes:?}");
    assert_eq!(cache.placed(), nodes, "only the chosen placement is held");
}

/// Once a domain holds every member, no other can score higher (PodGroupPodsCount) or win a
/// tie (it sorts first): the racks after it are not tried, and it is not placed a second time.
/// When the first domain holds only part of a basic group, the next is tried; once one holds
/// all, the search ends there and the scorers choose among those tried.
#[test]
fn the_first_domain_holding_the_whole_group_ends_the_search() {
    let racks = [
        ("a-1", "8", Some("rack-a")),
        ("b-1", "8", Some("rack-b")),
        ("c-1", "8", Some("rack-c")),
    ];
    let cache = MemCache::with_nodes(&racks);
    let result = cycle(&cache, &group(Some(2), Some("rack")), members(&["3", "3"]));
    assert!(result.status.is_success(), "{:?}", result.status);
    assert_eq!(result.placement.as_deref(), Some("rack-a"));
    assert_eq!(cache.placed(), bound(&result));
    assert_eq!(cache.assume_count(), 2, "one try of two members, kept as it is");

    let cache = MemCache::with_nodes(&[
        ("a-1", "4", Some("rack-a")),
        ("b-1", "8", Some("rack-b")),
        ("c-1", "8", Some("rack-c")),
    ]);
    let result = cycle(&cache, &group(None, Some("rack")), members(&["3", "3"]));
    assert_eq!(
        result.placement.as_deref(),
        Some("rack-b"),
        "rack-a holds one of two"
    );
    assert_eq!(bound(&result).len(), 2);
    assert_eq!(cache.placed(), bound(&result));
    assert_eq!(
        cache.assume_count(),
        5,
        "rack-a's one member, rack-b's two, then rack-b's two again as chosen; rack-c not tried"
    );
}

#[test]
fn the_placement_holding_more_of_a_basic_group_wins() {
    let cache = MemCache::with_nodes(&[("a-1", "4", Some("rack-a")), ("b-1", "8", Some("rack-b"))]);
    let result = cycle(&cache, &group(None, Some("rack")), members(&["3", "3", "3"]));
    assert_eq!(
        result.placement.as_deref(),
        Some("rack-b"),
        "two of three beat one of three"
    );
    assert_eq!(bound(&result).len(), 2);
}

#[test]
fn no_domain_holds_the_gang() {
    let cache = MemCache::with_nodes(&[("a-1", "4", Some("rack-a")), ("b-1", "4", Some("rack-b"))]);
    let result = cycle(&cache, &group(Some(2), Some("rack")), members(&["3", "3"]));
    assert_eq!(
        result.status.message(),
        "pod group is unschedulable, 0/2 placements are available, first placement status: \
         minCount (2) cannot be satisfied: 1 scheduled, 0 remaining, \
         pod group preemption: No preemption victims found for incoming preemptor"
    );
    assert!(cache.placed().is_empty());
}

/// A PodGroup `ns/name` of `priority`: a gang of `min`, disrupted as a whole when `all`.
fn prioritised_gang(name: &str, priority: i32, min: i32, all: bool) -> PodGroupInfo {
    PodGroupInfo::new(Arc::new(PodGroup {
        metadata: ObjectMeta {
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        spec: PodGroupSpec {
            priority: Some(priority),
            scheduling_policy: PodGroupSchedulingPolicy {
                gang: Some(GangSchedulingPolicy { min_count: min }),
                basic: None,
            },
            disruption_mode: Some(if all {
                DisruptionMode {
                    all: Some(AllDisruptionMode::default()),
                    single: None,
                }
            } else {
                DisruptionMode {
                    all: None,
                    single: Some(SingleDisruptionMode::default()),
                }
            }),
            ..Default::default()
        },
        ..Default::default()
    }))
}

/// `count` pods of `group` with 3 CPUs each, bound to `nodes` in turn when given.
fn gang_pods(group: &str, priority: i32, count: usize, nodes: Option<&[&str]>) -> Vec<Arc<PodInfo>> {
    (0..count)
        .map(|i| {
            let mut b = PodBuilder::new(&format!("{group}-{i}"))
                .namespace("ns")
                .uid(&format!("{group}-{i}"))
                .pod_group(group)
                .priority(priority)
                .req("cpu", "3");
            if let Some(nodes) = nodes {
                b = b.node_name(nodes[i % nodes.len()]);
            }
            b.arc()
        })
        .collect()
}

/// The high gang's cycle over a cluster the low gang fills, with preemption recorded.
fn gang_against_gang(
    low_all: bool,
) -> (
    MemCache,
    PodGroupCycleResult,
    Vec<PreemptionPlan>,
    Vec<Arc<PodInfo>>,
) {
    let cache = MemCache::with_nodes(&[("a", "4", None), ("b", "4", None), ("c", "4", None)]);
    let low = prioritised_gang("low", 0, 3, low_all);
    let high = prioritised_gang("high", 1000, 2, true);
    let low_pods = gang_pods("low", 0, 3, Some(&["a", "b", "c"]));
    for p in &low_pods {
        cache.assume_pod(p.clone()).unwrap();
    }
    let high_pods = gang_pods("high", 1000, 2, None);
    let store = Arc::new(PodGroupStore::new());
    store.set_group(low.object.clone());
    store.set_group(high.object.clone());
    for p in low_pods.iter().chain(&high_pods) {
        store.observe_pod(&p.pod);
    }
    let rec = RecordingPreemptor::new();
    let ctx = PluginContext::new(RecordingBinder::new())
        .with_pod_groups(store, false)
        .with_preemption(rec.clone(), Arc::new(StaticPdbs::default()));
    let fwk = Framework::new(&KubeSchedulerProfile::default(), &Registry::in_tree(ctx)).unwrap();
    let mut algo = SchedulingAlgorithm::new(1, None, 7);
    let result = run_pod_group_cycle(
        &fwk,
        &mut algo,
        &cache,
        &NoNominations,
        PodGroupCycleInput {
            group: &high,
            members: high_pods.clone(),
            already_scheduled: 0,
            record_plugin_metrics: false,
        },
    );
    (cache, result, rec.plans(), high_pods)
}

/// A high-priority gang preempts a low-priority gang disrupted as a whole: every member of the
/// low gang goes, though two nodes would have been enough, and none of the high gang is held
/// before the evictions land; its members are nominated to two different nodes. Once the
/// victims are gone, the gang is placed where it was nominated.
#[test]
fn a_gang_preempts_a_whole_gang_and_nothing_is_left_half() {
    let (cache, result, plans, high_pods) = gang_against_gang(true);
    assert_eq!(result.status.code(), Code::Unschedulable);
    assert!(result.waiting_on_preemption);
    assert!(
        result
            .status
            .message()
            .ends_with("pod group preemption: found a placement for podgroup, preempting 3 victims"),
        "{}",
        result.status.message()
    );
    assert_eq!(plans.len(), 1);
    let mut victims: Vec<String> = plans[0].victims.iter().map(|v| v.name.clone()).collect();
    victims.sort();
    assert_eq!(victims, ["low-0", "low-1", "low-2"], "the low gang goes whole");
    assert_eq!(
        plans[0].event_note(),
        "Preempted by podgroup uid-high on node cluster"
    );
    let nominated: BTreeMap<String, String> = result
        .members
        .iter()
        .filter_map(|m| match m {
            MemberDecision::Failed(f) => Some((f.pod.uid.clone(), f.nominated_node.clone()?)),
            _ => None,
        })
        .collect();
    assert_eq!(nominated.len(), 2, "{nominated:?}");
    assert_ne!(nominated["high-0"], nominated["high-1"]);
    assert!(
        cache.placed().keys().all(|uid| uid.starts_with("low-")),
        "nothing of the high gang is held before the evictions"
    );

    // The evictions land: the gang fits where it was nominated.
    for v in &plans[0].victims {
        cache.forget_pod(v).unwrap();
    }
    let nominated_pods: Vec<Arc<PodInfo>> = high_pods
        .iter()
        .map(|p| {
            let mut pod = (*p.pod).clone();
            pod.status.get_or_insert_default().nominated_node_name = Some(nominated[&p.uid].clone());
            Arc::new(PodInfo::new(pod))
        })
        .collect();
    let retried = cycle_with_groups(&cache, "high", 1000, nominated_pods);
    assert!(retried.status.is_success(), "{:?}", retried.status);
    assert_eq!(bound(&retried), nominated);
    assert!(cache.placed().keys().all(|uid| uid.starts_with("high-")));
}

/// The same low gang disrupted member by member loses only the two members in the way.
#[test]
fn a_gang_disrupted_member_by_member_loses_only_what_is_in_the_way() {
    let (_, result, plans, _) = gang_against_gang(false);
    assert!(result.waiting_on_preemption);
    assert_eq!(plans[0].victims.len(), 2);
}

/// The high gang's second cycle (after the evictions), with its group known to the plugins.
fn cycle_with_groups(
    cache: &MemCache,
    name: &str,
    priority: i32,
    pods: Vec<Arc<PodInfo>>,
) -> PodGroupCycleResult {
    let group = prioritised_gang(name, priority, 2, true);
    let store = Arc::new(PodGroupStore::new());
    store.set_group(group.object.clone());
    for p in &pods {
        store.observe_pod(&p.pod);
    }
    let fwk = framework(store, false);
    let mut algo = SchedulingAlgorithm::new(1, None, 7);
    run_pod_group_cycle(
        &fwk,
        &mut algo,
        cache,
        &NoNominations,
        PodGroupCycleInput {
            group: &group,
            members: pods,
            already_scheduled: 0,
            record_plugin_metrics: false,
        },
    )
}

proptest! {
    /// Whatever the sizes, a gang cycle leaves the cache holding exactly the members it binds,
    /// and a failed gang leaves it as it was.
    #[test]
    fn the_cache_holds_exactly_what_a_gang_cycle_binds(
        cpus in proptest::collection::vec(1u32..6, 1..6),
        min in 1i32..6,
        node_cpus in proptest::collection::vec(2u32..9, 1..4),
    ) {
        let nodes: Vec<(String, String)> =
            node_cpus.iter().enumerate().map(|(i, c)| (format!("n{i}"), c.to_string())).collect();
        let spec: Vec<(&str, &str, Option<&str>)> =
            nodes.iter().map(|(n, c)| (n.as_str(), c.as_str(), None)).collect();
        let cache = MemCache::with_nodes(&spec);
        let sizes: Vec<String> = cpus.iter().map(u32::to_string).collect();
        let refs: Vec<&str> = sizes.iter().map(String::as_str).collect();
        let result = cycle(&cache, &group(Some(min), None), members(&refs));
        let b = bound(&result);
        prop_assert_eq!(cache.placed(), b.clone());
        if result.status.is_success() {
            prop_assert!(b.len() >= usize::try_from(min).unwrap().min(cpus.len()));
        } else {
            prop_assert!(b.is_empty());
        }
        for ((_, node_cpu), ni) in nodes.iter().zip(cache.nodes.read().values()) {
            let (requested, _) = ni.recomputed_requested();
            let alloc = node_cpu.parse::<i64>().unwrap_or(0) * 1000;
            prop_assert!(requested.milli_cpu <= alloc, "a node holds more than it has");
        }
    }
}

/// What the placement search reports to the metrics: how many placements were generated for the
/// group, and each one tried with whether the group fit it.
#[derive(Default)]
struct PlacementCounts {
    generated: parking_lot::Mutex<Vec<usize>>,
    evaluated: parking_lot::Mutex<Vec<bool>>,
}

impl unisched_framework::FrameworkObserver for PlacementCounts {
    fn placements_generated(&self, _profile: &str, count: usize) {
        self.generated.lock().push(count);
    }

    fn placement_evaluated(&self, _profile: &str, feasible: bool, _elapsed: std::time::Duration) {
        self.evaluated.lock().push(feasible);
    }
}

#[test]
fn the_placement_search_reports_what_it_generated_and_tried() {
    let cache = MemCache::with_nodes(&[
        ("a-1", "4", Some("rack-a")),
        ("a-2", "4", Some("rack-a")),
        ("b-1", "8", Some("rack-b")),
        ("b-2", "8", Some("rack-b")),
    ]);
    let group = group(Some(4), Some("rack"));
    let pods = members(&["3", "3", "3", "3"]);
    let store = Arc::new(PodGroupStore::new());
    store.set_group(group.object.clone());
    for p in &pods {
        store.observe_pod(&p.pod);
    }
    let counts = Arc::new(PlacementCounts::default());
    let fwk = framework(store, true).with_observer(counts.clone());
    let mut algo = SchedulingAlgorithm::new(1, None, 7);
    let result = run_pod_group_cycle(
        &fwk,
        &mut algo,
        &cache,
        &NoNominations,
        PodGroupCycleInput {
            group: &group,
            members: pods,
            already_scheduled: 0,
            record_plugin_metrics: false,
        },
    );
    assert_eq!(result.placement.as_deref(), Some("rack-b"));
    assert_eq!(*counts.generated.lock(), [2], "one placement per rack");
    assert_eq!(
        *counts.evaluated.lock(),
        [false, true],
        "rack-a holds two of the four members, rack-b all"
    );
}
