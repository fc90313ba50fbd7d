//! One scheduling cycle on 5,000 nodes × 10 pods with PodTopologySpread, InterPodAffinity and
//! ImageLocality in the default profile: a plain pod (the three plugins have nothing to do), a pod
//! with zone/hostname spread constraints, and a pod with required anti-affinity and preferred
//! affinity; 10 % of the existing pods carry anti-affinity terms of their own.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use unisched_framework::{
    CycleState, Framework, NoNominations, NodeInfo, SchedulingAlgorithm, Snapshot,
    config::KubeSchedulerConfiguration,
};
use unisched_plugins::testing::{
    NodeBuilder, PodBuilder, affinity_term, in_tree_registry, selector_in, spread_constraint,
};

const NODES: usize = 5_000;
const PODS_PER_NODE: usize = 10;
const ZONE: &str = "topology.kubernetes.io/zone";
const HOST: &str = "kubernetes.io/hostname";

fn cluster(with_affinity_pods: bool) -> Arc<Snapshot> {
    let nodes: Vec<Arc<NodeInfo>> = (0..NODES)
        .map(|i| {
            let name = format!("node-{i:05}");
            let node = NodeBuilder::new(&name)
                .alloc("cpu", "32")
                .alloc("memory", "128Gi")
                .label(ZONE, ["a", "b", "c"][i % 3])
                .label(HOST, &name);
            let pods = (0..PODS_PER_NODE).map(|j| {
                let app = format!("svc-{}", (i * PODS_PER_NODE + j) % 50);
                let mut b = PodBuilder::new(&format!("pod-{i}-{j}"))
                    .node_name(&name)
                    .label("app", &app)
                    .req("cpu", "100m")
                    .req("memory", "256Mi");
                if with_affinity_pods && j == 0 {
                    b = b.pod_anti_affinity(affinity_term(selector_in("app", &[&app]), HOST));
                }
                b.info()
            });
            Arc::new(node.info_with(pods))
        })
        .collect();
    Arc::new(Snapshot::new(nodes))
}

fn framework(yaml: &str) -> Framework {
    let cfg = KubeSchedulerConfiguration::from_yaml(yaml).unwrap();
    let (registry, _) = in_tree_registry();
    Framework::new(&cfg.profiles[0], &registry).unwrap()
}

fn bench(c: &mut Criterion) {
    let all = framework("profiles: [{}]");
    let without = framework(
        "profiles: [{plugins: {multiPoint: {disabled: [{name: PodTopologySpread}, {name: InterPodAffinity}, {name: ImageLocality}]}}}]",
    );
    let plain = PodBuilder::new("incoming")
        .label("app", "new")
        .req("cpu", "500m")
        .req("memory", "1Gi")
        .info();
    let spread = PodBuilder::new("incoming")
        .label("app", "svc-1")
        .req("cpu", "500m")
        .spread_constraint(1, ZONE, "DoNotSchedule", selector_in("app", &["svc-1"]))
        .spread(spread_constraint(
            1,
            HOST,
            "ScheduleAnyway",
            Some(selector_in("app", &["svc-1"])),
        ))
        .info();
    let affinity = PodBuilder::new("incoming")
        .label("app", "svc-2")
        .req("cpu", "500m")
        .pod_anti_affinity(affinity_term(selector_in("app", &["svc-2"]), HOST))
        .preferred_pod_affinity(10, affinity_term(selector_in("app", &["svc-3"]), ZONE))
        .info();
    let plain_cluster = cluster(false);
    let affinity_cluster = cluster(true);
    let mut algo = SchedulingAlgorithm::new(16, None, 42);
    let mut run =
        |name: &str, fwk: &Framework, snapshot: &Arc<Snapshot>, pod: &unisched_framework::PodInfo| {
            c.bench_function(name, |b| {
                b.iter(|| {
                    let mut state = CycleState::with_snapshot(snapshot.clone());
                    let r = algo.schedule_pod(fwk, &mut state, pod, &NoNominations);
                    assert!(r.is_ok(), "{name}: {r:?}");
                    r
                });
            });
        };
    run(
        "plain_pod/without_the_three_plugins",
        &without,
        &plain_cluster,
        &plain,
    );
    for p in ["PodTopologySpread", "InterPodAffinity", "ImageLocality"] {
        let f = framework(&format!(
            "profiles: [{{plugins: {{multiPoint: {{disabled: [{{name: {p}}}]}}}}}}]"
        ));
        run(&format!("plain_pod/without_{p}"), &f, &plain_cluster, &plain);
    }
    run("plain_pod/default_profile", &all, &plain_cluster, &plain);
    run(
        "plain_pod/default_profile/10pct_anti_affinity_pods",
        &all,
        &affinity_cluster,
        &plain,
    );
    run("spread_pod/default_profile", &all, &plain_cluster, &spread);
    run(
        "affinity_pod/default_profile/10pct_anti_affinity_pods",
        &all,
        &affinity_cluster,
        &affinity,
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
