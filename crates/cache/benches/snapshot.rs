//! `update_snapshot` on a 5,000-node cluster with 30 pods per node (150,000 pods).
//!
//! The scheduling loop takes a snapshot once per pod, so what matters is the cost after one pod
//! changed (the previous attempt's assume) and after no change at all. Only `update_snapshot` is
//! timed; the change that precedes it and its undo are not.
//!
//! - `no_change`: nothing changed since the last snapshot.
//! - `one_pod_changed/prev_held`: one pod assumed, while the previous snapshot is still held (as an
//!   in-flight binding cycle holds it): a released older snapshot is recycled.
//! - `one_pod_changed/prev_dropped`: the same with nobody holding the previous snapshot: updated in
//!   place.
//! - `one_pod_changed/all_held`: the last 8 snapshots are all still held, more than the cache keeps
//!   for reuse, so the node list is copied (the fallback).
//! - `node_added`: a node joined: the zone-interleaved order is rebuilt (for reference).
//! - `assume_pod`: the cost moved to the mutation by copy-on-write (one 30-pod NodeInfo copied).

use std::{
    collections::BTreeMap,
    hint::black_box,
    sync::Arc,
    time::{Duration, Instant},
};

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::{
    api::core::v1::{Container, Node, NodeStatus, Pod, PodSpec, ResourceRequirements},
    apimachinery::pkg::{api::resource::Quantity, apis::meta::v1::ObjectMeta},
};
use unisched_cache::{Cache, LABEL_TOPOLOGY_REGION, LABEL_TOPOLOGY_ZONE};
use unisched_framework::PodInfo;

const NODES: usize = 5_000;
const PODS_PER_NODE: usize = 30;

fn list(entries: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect()
}

fn node(i: usize) -> Arc<Node> {
    let labels = BTreeMap::from([
        (LABEL_TOPOLOGY_REGION.to_string(), "r1".to_string()),
        (LABEL_TOPOLOGY_ZONE.to_string(), format!("z{}", i % 3)),
    ]);
    Arc::new(Node {
        metadata: ObjectMeta {
            name: Some(format!("node-{i}")),
            labels: Some(labels),
            ..Default::default()
        },
        status: Some(NodeStatus {
            allocatable: Some(list(&[("cpu", "64"), ("memory", "256Gi"), ("pods", "110")])),
            ..Default::default()
        }),
        ..Default::default()
    })
}

fn pod(uid: &str, node: usize) -> Arc<PodInfo> {
    Arc::new(PodInfo::new(Pod {
        metadata: ObjectMeta {
            name: Some(uid.to_string()),
            namespace: Some("bench".into()),
            uid: Some(uid.to_string()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(format!("node-{node}")),
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests: Some(list(&[("cpu", "500m"), ("memory", "1Gi")])),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }))
}

fn cluster() -> Cache {
    let cache = Cache::new();
    for i in 0..NODES {
        cache.add_node(node(i));
    }
    // One PodInfo shared by the 30 pods of a node would not be realistic: build each.
    for i in 0..NODES {
        for j in 0..PODS_PER_NODE {
            let p = pod(&format!("p-{i}-{j}"), i);
            if let Err(e) = cache.add_pod(p) {
                panic!("{e}");
            }
        }
    }
    cache.update_snapshot();
    cache
}

fn bench(c: &mut Criterion) {
    let cache = cluster();
    let probes: Vec<Arc<PodInfo>> = (0..NODES).map(|i| pod(&format!("probe-{i}"), i)).collect();
    let mut g = c.benchmark_group("update_snapshot_5000x30");

    g.bench_function("no_change", |b| b.iter(|| black_box(cache.update_snapshot())));

    g.bench_function("one_pod_changed/prev_held", |b| {
        let mut k = 0;
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let held = cache.update_snapshot();
                let p = &probes[k % NODES];
                k += 1;
                let _ = cache.assume_pod(p.clone());
                let t = Instant::now();
                let snap = cache.update_snapshot();
                total += t.elapsed();
                black_box((&held, &snap));
                let _ = cache.forget_pod(p);
            }
            total
        })
    });

    g.bench_function("one_pod_changed/prev_dropped", |b| {
        let mut k = 0;
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                drop(cache.update_snapshot());
                let p = &probes[k % NODES];
                k += 1;
                let _ = cache.assume_pod(p.clone());
                let t = Instant::now();
                let snap = cache.update_snapshot();
                total += t.elapsed();
                drop(black_box(snap));
                let _ = cache.forget_pod(p);
            }
            total
        })
    });

    g.bench_function("one_pod_changed/all_held", |b| {
        let mut k = 0;
        let mut held = std::collections::VecDeque::new();
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                held.push_back(cache.update_snapshot());
                if held.len() > 8 {
                    held.pop_front();
                }
                let p = &probes[k % NODES];
                k += 1;
                let _ = cache.assume_pod(p.clone());
                let t = Instant::now();
                let snap = cache.update_snapshot();
                total += t.elapsed();
                black_box(&snap);
                let _ = cache.forget_pod(p);
            }
            total
        })
    });

    g.bench_function("node_added", |b| {
        let extra = node(NODES);
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                cache.add_node(extra.clone());
                let t = Instant::now();
                let snap = cache.update_snapshot();
                total += t.elapsed();
                drop(black_box(snap));
                let _ = cache.remove_node(&format!("node-{NODES}"));
                cache.update_snapshot();
            }
            total
        })
    });

    g.bench_function("assume_pod", |b| {
        let mut k = 0;
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let snap = cache.update_snapshot();
                let p = &probes[k % NODES];
                k += 1;
                let t = Instant::now();
                let _ = cache.assume_pod(p.clone());
                total += t.elapsed();
                let _ = cache.forget_pod(p);
                black_box(snap);
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
