//! PodTopologySpread and InterPodAffinity through the default profile: pods scheduled one after the
//! other onto an in-memory cluster, each seeing the ones placed before it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::{collections::BTreeMap, sync::Arc};

use parking_lot::RwLock;
use unisched_framework::{
    CycleOutcome, NoNominations, NodeInfo, PodInfo, SchedulerCache, SchedulingAlgorithm, Snapshot,
    run_binding_cycle, run_scheduling_cycle,
};
use unisched_plugins::testing::{
    NodeBuilder, PodBuilder, affinity_term, default_framework, selector_in, spread_constraint,
};

const ZONE: &str = "topology.kubernetes.io/zone";
const HOST: &str = "kubernetes.io/hostname";

/// Nodes by name; an assumed pod joins its node at once.
struct Cluster {
    nodes: RwLock<BTreeMap<String, NodeInfo>>,
}

impl SchedulerCache for Cluster {
    fn update_snapshot(&self) -> Arc<Snapshot> {
        Arc::new(Snapshot::from_node_infos(self.nodes.read().values().cloned()))
    }

    fn assume_pod(&self, pod: Arc<PodInfo>) -> Result<(), unisched_framework::CacheWriteError> {
        let node = pod.node_name().ok_or("no node")?.to_string();
        self.nodes
            .write()
            .get_mut(&node)
            .ok_or("unknown node")?
            .add_pod(pod);
        Ok(())
    }

    fn forget_pod(&self, pod: &PodInfo) -> Result<(), unisched_framework::CacheWriteError> {
        let node = pod.node_name().ok_or("no node")?.to_string();
        let mut nodes = self.nodes.write();
        let ni = nodes.get_mut(&node).ok_or("unknown node")?;
        ni.remove_pod(&pod.uid)
            .map(|_| ())
            .ok_or_else(|| "not assumed".into())
    }
}

/// Six nodes, two per zone `a`, `b`, `c`; `n5` has no zone label when `zoneless_n5`.
fn cluster(zoneless_n5: bool) -> Cluster {
    let nodes = (0..6)
        .map(|i| {
            let name = format!("n{i}");
            let mut b = NodeBuilder::new(&name)
                .alloc("cpu", "8")
                .alloc("memory", "16Gi")
                .label(HOST, &name);
            if !(zoneless_n5 && i == 5) {
                b = b.label(ZONE, ["a", "b", "c"][i / 2]);
            }
            (name, b.info())
        })
        .collect();
    Cluster {
        nodes: RwLock::new(nodes),
    }
}

/// Schedules and binds `pod`; the node, or the failure message and rejecting plugins.
fn schedule(
    cluster: &Cluster,
    algo: &mut SchedulingAlgorithm,
    pod: PodBuilder,
) -> Result<String, (String, Vec<String>)> {
    let (fwk, _binder) = default_framework();
    match run_scheduling_cycle(&fwk, algo, cluster, &NoNominations, pod.arc(), false) {
        CycleOutcome::Assumed(task) => run_binding_cycle(&fwk, cluster, *task)
            .map(|bound| bound.node)
            .map_err(|f| (f.message, Vec::new())),
        CycleOutcome::Failed(f) => Err((f.message, f.unschedulable_plugins.into_iter().collect())),
        CycleOutcome::Skipped(why) => Err((why.to_string(), Vec::new())),
    }
}

fn zone_of(node: &str) -> &'static str {
    ["a", "a", "b", "b", "c", "c"][node[1..].parse::<usize>().unwrap()]
}

#[test]
fn hard_zone_spread_balances_zones() {
    let cluster = cluster(false);
    let mut algo = SchedulingAlgorithm::new(2, None, 1);
    let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
    for i in 0..9 {
        let pod = PodBuilder::new(&format!("web-{i}"))
            .label("app", "web")
            .req("cpu", "100m")
            .spread_constraint(1, ZONE, "DoNotSchedule", selector_in("app", &["web"]));
        let node = schedule(&cluster, &mut algo, pod).unwrap();
        *per_zone.entry(zone_of(&node)).or_default() += 1;
        let (min, max) = (per_zone.values().min().unwrap(), per_zone.values().max().unwrap());
        assert!(per_zone.len() < 3 || max - min <= 1, "after {i}: {per_zone:?}");
    }
    assert_eq!(per_zone.into_values().collect::<Vec<_>>(), vec![3, 3, 3]);
}

#[test]
fn missing_topology_label_is_explained() {
    let cluster = cluster(true);
    let mut algo = SchedulingAlgorithm::new(2, None, 1);
    let pod = PodBuilder::new("p").label("app", "web").spread_constraint(
        1,
        "rack",
        "DoNotSchedule",
        selector_in("app", &["web"]),
    );
    let (msg, plugins) = schedule(&cluster, &mut algo, pod).unwrap_err();
    assert_eq!(
        msg,
        "0/6 nodes are available: 6 node(s) didn't match pod topology spread constraints (missing required label). \
         preemption: 0/6 nodes are available: 6 Preemption is not helpful for scheduling."
    );
    assert_eq!(plugins, vec!["PodTopologySpread"]);
}

#[test]
fn required_anti_affinity_one_per_node() {
    let cluster = cluster(false);
    let mut algo = SchedulingAlgorithm::new(2, None, 3);
    let solo = |i: usize| {
        PodBuilder::new(&format!("solo-{i}"))
            .label("app", "solo")
            .pod_anti_affinity(affinity_term(selector_in("app", &["solo"]), HOST))
    };
    let mut nodes: Vec<String> = (0..6)
        .map(|i| schedule(&cluster, &mut algo, solo(i)).unwrap())
        .collect();
    nodes.sort();
    nodes.dedup();
    assert_eq!(nodes.len(), 6, "one per node");
    let (msg, plugins) = schedule(&cluster, &mut algo, solo(6)).unwrap_err();
    assert_eq!(
        msg,
        "0/6 nodes are available: 6 node(s) didn't match pod anti-affinity rules. \
         preemption: 0/6 nodes are available: 6 No preemption victims found for incoming pod."
    );
    assert_eq!(plugins, vec!["InterPodAffinity"]);

    // A pod without terms is kept out by the existing pods' anti-affinity, which selects it.
    let (msg, _) = schedule(
        &cluster,
        &mut algo,
        PodBuilder::new("intruder").label("app", "solo"),
    )
    .unwrap_err();
    assert_eq!(
        msg,
        "0/6 nodes are available: 6 node(s) didn't satisfy existing pods anti-affinity rules. \
         preemption: 0/6 nodes are available: 6 No preemption victims found for incoming pod."
    );
    assert!(
        schedule(
            &cluster,
            &mut algo,
            PodBuilder::new("other").label("app", "other")
        )
        .is_ok()
    );
}

#[test]
fn required_affinity_follows_the_first_pod() {
    let cluster = cluster(false);
    let mut algo = SchedulingAlgorithm::new(2, None, 5);
    let member = |i: usize| {
        PodBuilder::new(&format!("cache-{i}"))
            .label("app", "cache")
            .req("cpu", "100m")
            .pod_affinity(affinity_term(selector_in("app", &["cache"]), ZONE))
    };
    let first = schedule(&cluster, &mut algo, member(0)).unwrap();
    for i in 1..8 {
        let node = schedule(&cluster, &mut algo, member(i)).unwrap();
        assert_eq!(
            zone_of(&node),
            zone_of(&first),
            "cache-{i} joins the group's zone"
        );
    }
    // A client that wants to be near the cache but is not one itself.
    let client = PodBuilder::new("client").pod_affinity(affinity_term(selector_in("app", &["cache"]), HOST));
    let node = schedule(&cluster, &mut algo, client).unwrap();
    assert_eq!(zone_of(&node), zone_of(&first));
    // And one that needs a group nobody started.
    let orphan = PodBuilder::new("orphan").pod_affinity(affinity_term(selector_in("app", &["nobody"]), ZONE));
    let (msg, plugins) = schedule(&cluster, &mut algo, orphan).unwrap_err();
    assert_eq!(
        msg,
        "0/6 nodes are available: 6 node(s) didn't match pod affinity rules. \
         preemption: 0/6 nodes are available: 6 Preemption is not helpful for scheduling."
    );
    assert_eq!(plugins, vec!["InterPodAffinity"]);
}

#[test]
fn preferred_terms_and_soft_spread_steer_placement() {
    let cluster = cluster(false);
    let mut algo = SchedulingAlgorithm::new(2, None, 9);
    let db = schedule(
        &cluster,
        &mut algo,
        PodBuilder::new("db").label("app", "db").req("cpu", "100m"),
    )
    .unwrap();
    // Strongly preferring the db's zone wins over a small resource imbalance.
    for i in 0..2 {
        let app = PodBuilder::new(&format!("app-{i}"))
            .req("cpu", "100m")
            .preferred_pod_affinity(100, affinity_term(selector_in("app", &["db"]), ZONE));
        let node = schedule(&cluster, &mut algo, app).unwrap();
        assert_eq!(zone_of(&node), zone_of(&db), "app-{i}");
    }
    // Soft zone spreading keeps web pods out of the most crowded zone while others are free.
    let mut zones = Vec::new();
    for i in 0..3 {
        let web = PodBuilder::new(&format!("web-{i}"))
            .label("app", "web")
            .req("cpu", "100m")
            .spread(spread_constraint(
                1,
                ZONE,
                "ScheduleAnyway",
                Some(selector_in("app", &["web"])),
            ));
        zones.push(zone_of(&schedule(&cluster, &mut algo, web).unwrap()));
    }
    zones.sort_unstable();
    assert_eq!(zones, vec!["a", "b", "c"]);
}
