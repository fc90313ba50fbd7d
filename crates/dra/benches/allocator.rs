//! Allocator benchmarks.
//!
//! * `allocate/one-claim-one-device-10-dev-node`: the common case, per node, warm caches.
//! * `allocate/prepare-and-allocate-one-device`: per pod (claims prepared, allocator built) + one node.
//! * `allocate/32-devices-match-attribute`: 32 devices that must share a NUMA node, out of 64.
//! * `allocate/partitionable-counters`: 4 MIG-like partitions from 8 partitionable GPUs.
//! * `allocate/consumable-capacity`: a CPU share on grouped NUMA devices already partly shared.
//! * `cel/eval-per-device`: one selector on one device, value built (cold) or cached (warm).
//! * `filter/500-nodes-x-10-devices`, `filter/5000-nodes-x-1-slice`: one pod against every node.
//! * `filter/index-build-5000-slices`: building the index from prepared slices.

// Benchmark set-up code: a failure should stop the run loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use unisched_dra::cel::{DeviceValueSlot, SelectorInput};
use unisched_dra::testing::*;
use unisched_dra::{
    AllocatedState, Allocator, CelSelectorEngine, Deadline, DraSnapshotIndex, PreparedClaim, PreparedSlice,
    SelectorEngine, StateLayers,
};

const GPU: &str = "gpu.example.com";

fn gpu_slice(node_name: &str, n: usize) -> SliceBuilder {
    slice(&format!("{node_name}-gpu"), GPU, node_name, node_name).devices((0..n).map(|i| {
        dev(&format!("gpu-{i}"))
            .int("index", i as i64)
            .string("model", "LATEST-GPU-MODEL")
            .version("driverVersion", "1.0.0")
            .int("resource.kubernetes.io/numaNode", (i / 32) as i64)
            .cap("memory", "80Gi")
    }))
}

fn fixture(slices: Vec<SliceBuilder>, claims: Vec<ClaimBuilder>) -> Fixture {
    Fixture {
        slices: slices.into_iter().map(SliceBuilder::build).collect(),
        classes: vec![class("gpu", GPU), class("dra.cpu", "dra.cpu")],
        claims: claims.into_iter().map(ClaimBuilder::build).collect(),
        ..Default::default()
    }
}

fn gpu_claim(count: i64) -> ClaimBuilder {
    claim("default", "c").request(
        req("gpu", "gpu")
            .count(count)
            .selector(r#"device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0"#),
    )
}

fn bench_allocate(c: &mut Criterion) {
    let mut g = c.benchmark_group("allocate");
    let n = node("node-0");

    let f = fixture(vec![gpu_slice("node-0", 10)], vec![gpu_claim(1)]);
    let alloc = f.allocator().unwrap();
    alloc.allocate(&n, Deadline::none()).unwrap();
    g.bench_function("one-claim-one-device-10-dev-node", |b| {
        b.iter(|| black_box(alloc.allocate(black_box(&n), Deadline::none()).unwrap()))
    });

    let index = f.index();
    let classes = f.class_map();
    g.bench_function("prepare-and-allocate-one-device", |b| {
        b.iter(|| {
            let claims = f
                .claims
                .iter()
                .map(|c| {
                    PreparedClaim::new(Arc::new(c.clone()), &classes, &*f.engine, &f.features).map(Arc::new)
                })
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let alloc = Allocator::new(Arc::clone(&index), StateLayers::default(), claims, f.features);
            black_box(alloc.allocate(&n, Deadline::none()).unwrap())
        })
    });

    let f = fixture(
        vec![gpu_slice("node-0", 64)],
        vec![
            claim("default", "c")
                .request(req("gpu", "gpu").count(32))
                .match_attribute("resource.kubernetes.io/numaNode", &[]),
        ],
    );
    let mut f_state = f;
    // Take one device of NUMA 0 so the search has to move on to NUMA 1.
    f_state.allocated = vec![allocated(
        claim("default", "other").build(),
        one_device_allocation(GPU, "node-0", "gpu-5"),
    )];
    let alloc = f_state.allocator().unwrap();
    let res = alloc.allocate(&n, Deadline::none()).unwrap();
    assert_eq!(device_names(&res[0])[0], "gpu-32");
    g.bench_function("32-devices-match-attribute", |b| {
        b.iter(|| black_box(alloc.allocate(black_box(&n), Deadline::none()).unwrap()))
    });

    // 8 GPUs, each a counter set with 8 memory slices; full device + 7 one-slice partitions.
    let mut counters = slice("node-0-counters", GPU, "node-0", "node-0").count(2);
    let mut devices = slice("node-0-devices", GPU, "node-0", "node-0").count(2);
    for gpu in 0..8 {
        let slices: Vec<(String, String)> = (0..8)
            .map(|s| (format!("memory-slice-{s}"), "1".to_string()))
            .collect();
        let refs: Vec<(&str, &str)> = slices.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        counters = counters.counter_set(&format!("gpu-{gpu}-cs"), &refs);
        devices = devices.device(
            dev(&format!("gpu-{gpu}"))
                .string("type", "gpu")
                .consumes(&format!("gpu-{gpu}-cs"), &refs),
        );
        for p in 0..7 {
            let slice_name = format!("memory-slice-{p}");
            devices = devices.device(
                dev(&format!("gpu-{gpu}-mig-{p}"))
                    .string("type", "mig")
                    .consumes(&format!("gpu-{gpu}-cs"), &[(slice_name.as_str(), "1")]),
            );
        }
    }
    let mut f = fixture(
        vec![counters, devices],
        vec![
            claim("default", "c").request(
                req("mig", "gpu")
                    .count(4)
                    .selector(r#"device.attributes["gpu.example.com"].type == "mig""#),
            ),
        ],
    );
    // Half of the GPUs are taken whole.
    f.allocated = (0..4)
        .map(|gpu| {
            allocated(
                claim("default", &format!("w{gpu}")).build(),
                one_device_allocation(GPU, "node-0", &format!("gpu-{gpu}")),
            )
        })
        .collect();
    let alloc = f.allocator().unwrap();
    let res = alloc.allocate(&n, Deadline::none()).unwrap();
    assert_eq!(device_names(&res[0])[0], "gpu-4-mig-0");
    g.bench_function("partitionable-counters", |b| {
        b.iter(|| black_box(alloc.allocate(black_box(&n), Deadline::none()).unwrap()))
    });

    let cpu = slice("node-0-cpu", "dra.cpu", "node-0", "node-0").devices((0..4).map(|i| {
        dev(&format!("cpudevnuma00{i}"))
            .multi()
            .int("resource.kubernetes.io/numaNode", i)
            .cap_range("dra.cpu/cpu", "64", "1", "1", Some("64"), Some("1"))
    }));
    let mut f = fixture(
        vec![cpu],
        vec![claim("default", "c").request(req("cpus", "dra.cpu").capacity("dra.cpu/cpu", "8"))],
    );
    f.allocated = (0..30)
        .map(|i| {
            let mut r = one_device_allocation("dra.cpu", "node-0", &format!("cpudevnuma00{}", i % 4));
            let d = &mut r.devices.as_mut().unwrap().results.as_mut().unwrap()[0];
            d.share_id = Some(format!("00000000-0000-0000-0000-{i:012}"));
            d.consumed_capacity = Some([("dra.cpu/cpu".to_string(), q("8"))].into_iter().collect());
            allocated(claim("default", &format!("s{i}")).build(), r)
        })
        .collect();
    let alloc = f.allocator().unwrap();
    alloc.allocate(&n, Deadline::none()).unwrap();
    g.bench_function("consumable-capacity", |b| {
        b.iter(|| black_box(alloc.allocate(black_box(&n), Deadline::none()).unwrap()))
    });
    g.finish();
}

fn bench_cel(c: &mut Criterion) {
    let mut g = c.benchmark_group("cel");
    let engine = CelSelectorEngine::new();
    let s = gpu_slice("node-0", 1).build();
    let device = s.spec.devices.as_ref().unwrap()[0].clone();
    let maps = unisched_dra::DeviceMaps::of(&device);
    let sel = engine
        .compile(r#"device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].model == "LATEST-GPU-MODEL" && device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0"#)
        .unwrap();
    g.bench_function("eval-per-device-cold", |b| {
        b.iter(|| {
            let slot = DeviceValueSlot::default();
            black_box(
                sel.matches(SelectorInput {
                    driver: GPU,
                    device: &device,
                    maps: &maps,
                    slot: &slot,
                    deadline: None,
                })
                .unwrap(),
            )
        })
    });
    let slot = DeviceValueSlot::default();
    g.bench_function("eval-per-device-warm", |b| {
        b.iter(|| {
            black_box(
                sel.matches(SelectorInput {
                    driver: GPU,
                    device: &device,
                    maps: &maps,
                    slot: &slot,
                    deadline: None,
                })
                .unwrap(),
            )
        })
    });
    g.bench_function("compile-uncached", |b| {
        b.iter(|| {
            let e = CelSelectorEngine::new();
            black_box(
                e.compile(r#"device.attributes["gpu.example.com"].model == "LATEST-GPU-MODEL""#)
                    .unwrap(),
            )
        })
    });
    g.finish();
}

fn bench_filter(c: &mut Criterion) {
    let mut g = c.benchmark_group("filter");
    g.sample_size(10);
    for (label, nodes, devices) in [
        ("500-nodes-x-10-devices", 500usize, 10usize),
        ("5000-nodes-x-1-slice", 5000, 1),
    ] {
        let f = fixture(
            (0..nodes)
                .map(|i| gpu_slice(&format!("node-{i}"), devices))
                .collect(),
            vec![gpu_claim(1)],
        );
        let index = f.index();
        let node_objs: Vec<_> = (0..nodes).map(|i| node(&format!("node-{i}"))).collect();
        // Warm the per-device caches once, as they are after the first pod.
        let alloc = f.allocator_with_index(Arc::clone(&index)).unwrap();
        for n in &node_objs {
            alloc.allocate(n, Deadline::none()).unwrap();
        }
        g.bench_function(format!("{label}-warm"), |b| {
            b.iter(|| {
                let alloc = f.allocator_with_index(Arc::clone(&index)).unwrap();
                for n in &node_objs {
                    black_box(alloc.allocate(n, Deadline::none()).unwrap());
                }
            })
        });
        g.bench_function(format!("{label}-cold"), |b| {
            b.iter(|| {
                let index = f.index();
                let alloc = f.allocator_with_index(index).unwrap();
                for n in &node_objs {
                    black_box(alloc.allocate(n, Deadline::none()).unwrap());
                }
            })
        });
    }
    let prepared: Vec<Arc<PreparedSlice>> = (0..5000)
        .map(|i| {
            Arc::new(PreparedSlice::new(Arc::new(
                gpu_slice(&format!("node-{i}"), 1).build(),
            )))
        })
        .collect();
    g.bench_function("index-build-5000-slices", |b| {
        b.iter(|| black_box(DraSnapshotIndex::new(prepared.iter().cloned())))
    });
    let _ = AllocatedState::new();
    g.finish();
}

criterion_group!(benches, bench_allocate, bench_cel, bench_filter);
criterion_main!(benches);
