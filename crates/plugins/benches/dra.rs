//! DynamicResources cost: a one-claim DRA pod (one GPU out of ten per node) on 500 nodes.
//!
//! * `dra/cycle_500x10` — PreFilter + Filter + Score of the default profile with DynamicResources
//!   (upstream's adaptive percentage: Filter stops after 230 feasible nodes), i.e. the scheduling
//!   cycle up to host selection;
//! * `dra/pre_filter` — claim resolution, class lookup, CEL compilation (cached) and allocator setup;
//! * `dra/filter_all_nodes` — the plugin's Filter over all 500 nodes on one thread (divide by 500 for
//!   the per-node cost);
//! * `dra/filter_node_allocatable` — the same with a KEP-5517 CPU claim (allocation + footprint +
//!   node fit per node).
//! * `dra/score_phase/<config>/<pod>` — PreScore + Score + normalisation over all 500 nodes (after
//!   PreFilter and Filter ran on them) for the GPU pod and the KEP-5517 CPU-claim pod, with
//!   spec-only scoring, unified scoring (the pod's DRA footprint added, the default) and unified
//!   scoring plus the `DeviceResources` plugin: what unified and device-aware scoring cost.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::{
    Pod, PodResourceClaim, ResourceClaim as ContainerClaim, ResourceRequirements,
};
use k8s_openapi::api::resource::v1::{NodeAllocatableMapping, NodeAllocatableResource};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use unisched_cache::{Cache, DraCache};
use unisched_dra::testing::{claim, class, dev, req, slice};
use unisched_framework::config::{KubeSchedulerConfiguration, KubeSchedulerProfile};
use unisched_framework::{
    CycleState, FilterPlugin, Framework, NoNominations, NodeInfo, PodInfo, PreFilterPlugin,
    SchedulingAlgorithm,
};
use unisched_plugins::dynamic_resources::testing::FakeDraApi;
use unisched_plugins::dynamic_resources::{DraApi, DynamicResources, DynamicResourcesArgs};
use unisched_plugins::testing::{NodeBuilder, PodBuilder, RecordingBinder};
use unisched_plugins::{PluginContext, Registry};

const NODES: usize = 500;
const DEVICES: usize = 10;
const GPU: &str = "gpu.example.com";

struct Env {
    cache: Cache,
    dra: Arc<DraCache>,
    plugin: Arc<DynamicResources>,
    fwk: Framework,
    nodes: Vec<Arc<NodeInfo>>,
}

fn setup() -> Env {
    let cache = Cache::new();
    let dra = Arc::new(DraCache::new());
    dra.apply_class(Arc::new(class(GPU, GPU))).unwrap();
    dra.apply_class(Arc::new(class("dra.cpu", "dra.cpu"))).unwrap();
    for i in 0..NODES {
        let name = format!("node-{i:04}");
        cache.add_node(Arc::new(
            NodeBuilder::new(&name)
                .alloc("cpu", "64")
                .alloc("memory", "256Gi")
                .alloc("pods", "110")
                .build(),
        ));
        let mut s = slice(&format!("{name}-gpu"), GPU, &name, &name);
        for d in 0..DEVICES {
            s = s.device(
                dev(&format!("gpu-{d}"))
                    .string("model", "a100")
                    .int("index", d as i64)
                    .cap("memory", "80Gi"),
            );
        }
        dra.apply_slice(Arc::new(s.build())).unwrap();
        let mut cpu = dev("numa0").multi().cap("dra.cpu/cpu", "64");
        cpu.0.node_allocatable_resources = Some(
            [(
                "cpu".to_string(),
                NodeAllocatableResource {
                    mapping: Some(NodeAllocatableMapping {
                        capacity_key: Some("dra.cpu/cpu".into()),
                        capacity_multiplier: Some(Quantity("1".into())),
                        device_multiplier: None,
                    }),
                    overhead: None,
                },
            )]
            .into_iter()
            .collect(),
        );
        dra.apply_slice(Arc::new(
            slice(&format!("{name}-cpu"), "dra.cpu", &name, &format!("{name}-cpu"))
                .device(cpu)
                .build(),
        ))
        .unwrap();
    }
    let api = FakeDraApi::new();
    api.echo_to(dra.clone());
    for c in [
        claim("default", "gpu")
            .request(req("gpu", GPU).selector(&format!("device.attributes[\"{GPU}\"].model == \"a100\"")))
            .build(),
        claim("default", "cpu")
            .request(req("cpus", "dra.cpu").capacity("dra.cpu/cpu", "4"))
            .build(),
    ] {
        api.seed_claim(c);
    }
    let plugin = Arc::new(DynamicResources::new(
        &DynamicResourcesArgs::default(),
        Some(dra.clone()),
        Some(api.clone() as Arc<dyn DraApi>),
    ));
    let ctx =
        PluginContext::new(RecordingBinder::new()).with_dra(dra.clone(), api.clone() as Arc<dyn DraApi>);
    let reg = Registry::in_tree(ctx);
    let fwk = Framework::new(&KubeSchedulerProfile::default(), &reg).unwrap();
    let nodes = cache.update_snapshot().nodes().to_vec();
    Env {
        cache,
        dra,
        plugin,
        fwk,
        nodes,
    }
}

fn pod(claim_name: &str) -> PodInfo {
    let mut p: Pod = PodBuilder::new("bench")
        .req("cpu", "1")
        .req("memory", "1Gi")
        .build();
    let spec = p.spec.as_mut().unwrap();
    spec.resource_claims = Some(vec![PodResourceClaim {
        name: claim_name.into(),
        resource_claim_name: Some(claim_name.into()),
        resource_claim_template_name: None,
    }]);
    spec.containers[0]
        .resources
        .get_or_insert_with(ResourceRequirements::default)
        .claims = Some(vec![ContainerClaim {
        name: claim_name.into(),
        request: None,
    }]);
    PodInfo::new(p)
}

fn bench(c: &mut Criterion) {
    let env = setup();
    let gpu_pod = pod("gpu");
    let cpu_pod = pod("cpu");

    let mut algo = SchedulingAlgorithm::new(4, None, 1);
    c.bench_function("dra/cycle_500x10", |b| {
        b.iter(|| {
            let mut state = CycleState::with_snapshot(env.cache.update_snapshot());
            black_box(
                algo.schedule_pod(&env.fwk, &mut state, &gpu_pod, &NoNominations)
                    .unwrap(),
            );
        })
    });

    c.bench_function("dra/pre_filter", |b| {
        b.iter(|| {
            let mut state = CycleState::new();
            black_box(env.plugin.pre_filter(&mut state, &gpu_pod, &[]));
        })
    });

    for (name, p) in [
        ("dra/filter_all_nodes", &gpu_pod),
        ("dra/filter_node_allocatable", &cpu_pod),
    ] {
        let mut state = CycleState::new();
        assert!(env.plugin.pre_filter(&mut state, p, &[]).1.is_success());
        c.bench_function(name, |b| {
            b.iter(|| {
                for n in &env.nodes {
                    assert!(env.plugin.filter(&state, p, n).is_success());
                }
            })
        });
    }

    let configs = [
        (
            "spec_only",
            include_str!("../../../config/spec-only-scoring.yaml"),
        ),
        ("unified", include_str!("../../../config/unified-scoring.yaml")),
        (
            "device_resources",
            include_str!("../../../config/device-packing.yaml"),
        ),
    ];
    let api = FakeDraApi::new();
    let ctx = PluginContext::new(RecordingBinder::new()).with_dra(env.dra.clone(), api as Arc<dyn DraApi>);
    let reg = Registry::in_tree(ctx);
    for (config, yaml) in configs {
        let cfg = KubeSchedulerConfiguration::from_yaml(yaml).unwrap();
        let fwk = Framework::new(&cfg.profiles[0], &reg).unwrap();
        for (pod_name, p) in [("gpu", &gpu_pod), ("cpu_claim", &cpu_pod)] {
            let mut state = CycleState::with_snapshot(env.cache.update_snapshot());
            let (_, s, _) = fwk.run_pre_filter(&mut state, p, &env.nodes);
            assert!(s.is_success(), "{s:?}");
            for n in &env.nodes {
                assert!(fwk.run_filter(&state, p, n).is_success());
            }
            let mut algo = SchedulingAlgorithm::new(2, None, 1);
            c.bench_function(&format!("dra/score_phase/{config}/{pod_name}"), |b| {
                b.iter(|| black_box(algo.prioritize_nodes(&fwk, &mut state, p, &env.nodes).unwrap()))
            });
        }
    }
    black_box(env.dra.snapshot());
}

criterion_group!(benches, bench);
criterion_main!(benches);
