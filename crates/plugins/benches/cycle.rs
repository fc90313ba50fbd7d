//! One scheduling cycle with the default profile for a pod with cpu/memory requests, on 5,000 nodes
//! carrying 10 pods each: PreFilter, Filter until enough feasible nodes (500 at this size),
//! PreScore, Score, NormalizeScore and host selection.

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use unisched_framework::{CycleState, NoNominations, NodeInfo, SchedulingAlgorithm, Snapshot};
use unisched_plugins::testing::{NodeBuilder, PodBuilder, default_framework};

const NODES: usize = 5_000;
const PODS_PER_NODE: usize = 10;

fn cluster() -> Arc<Snapshot> {
    let nodes: Vec<Arc<NodeInfo>> = (0..NODES)
        .map(|i| {
            let name = format!("node-{i:05}");
            let node = NodeBuilder::new(&name)
                .alloc("cpu", "32")
                .alloc("memory", "128Gi")
                .alloc("ephemeral-storage", "200Gi")
                .label("topology.kubernetes.io/zone", ["a", "b", "c"][i % 3])
                .label("kubernetes.io/hostname", &name);
            let pods = (0..PODS_PER_NODE).map(|j| {
                PodBuilder::new(&format!("pod-{i}-{j}"))
                    .node_name(&name)
                    .req("cpu", &format!("{}m", 100 + 50 * ((i + j) % 8)))
                    .req("memory", &format!("{}Mi", 256 * (1 + (i * j) % 6)))
                    .info()
            });
            Arc::new(node.info_with(pods))
        })
        .collect();
    Arc::new(Snapshot::new(nodes))
}

fn bench(c: &mut Criterion) {
    let snapshot = cluster();
    let (fwk, _binder) = default_framework();
    let pod = PodBuilder::new("incoming")
        .req("cpu", "500m")
        .req("memory", "1Gi")
        .info();
    let mut algo = SchedulingAlgorithm::new(16, None, 42);
    c.bench_function("schedule_pod/default_profile/5000_nodes_x10_pods", |b| {
        b.iter(|| {
            let mut state = CycleState::with_snapshot(snapshot.clone());
            let result = algo.schedule_pod(&fwk, &mut state, &pod, &NoNominations);
            assert!(result.is_ok(), "the pod fits");
            result
        });
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
