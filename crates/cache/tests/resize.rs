//! Property test: in-place resizes of bound pods keep the node's ledger exact.
//!
//! A bound pod's footprint changes without the pod moving: its spec is resized, the kubelet
//! reports a new allocation, the runtime actuates it, or the kubelet declares the resize
//! infeasible. Each change arrives as a watch update, which the cache applies by replacing the
//! pod's derived requests. Any sequence of such updates, interleaved with pods being added and
//! deleted, must leave the node's `requested` and `non_zero_requested` equal to the sum of what
//! the pods *currently* count (recomputed from the full pod objects, not from the cache's own
//! copies), and exactly zero once every pod is gone: no drift, however long the sequence.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step should abort the test

mod common;

use std::{collections::BTreeMap, sync::Arc};

use common::{assert_consistent, list, node, same};
use k8s_openapi::{
    api::core::v1::{
        Container, ContainerStatus, Pod, PodCondition, PodSpec, PodStatus, ResourceRequirements,
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use proptest::prelude::*;
use unisched_cache::Cache;
use unisched_framework::PodInfo;
use unisched_resource::{Resource, ResourceSum, pod_resources};

const NODE: &str = "n0";
const PODS: usize = 4;

/// Amounts in milli-CPU and MiB; `None` is "not reported".
#[derive(Clone, Debug, Default)]
struct Shape {
    spec_cpu: u32,
    spec_mem: u32,
    /// A sidecar's spec cpu, when the pod has one.
    sidecar_cpu: Option<u32>,
    allocated_cpu: Option<u32>,
    allocated_mem: Option<u32>,
    actuated_cpu: Option<u32>,
    sidecar_actuated_cpu: Option<u32>,
    /// Pod-level `status.allocatedResources` and `status.resources.requests` cpu.
    pod_level_cpu: Option<(u32, u32)>,
    infeasible: bool,
}

#[derive(Clone, Debug)]
enum Change {
    SpecCpu(u32),
    SpecMem(u32),
    AllocatedCpu(Option<u32>),
    AllocatedMem(Option<u32>),
    ActuatedCpu(Option<u32>),
    SidecarActuatedCpu(Option<u32>),
    PodLevel(Option<(u32, u32)>),
    Infeasible(bool),
}

#[derive(Clone, Debug)]
enum Op {
    /// Create the pod bound to the node (a fresh one if it was deleted).
    Add { pod: usize, shape: Shape },
    /// Resize a bound pod (no-op for a pod that is not there).
    Resize { pod: usize, change: Change },
    /// Delete the pod (no-op for a pod that is not there).
    Delete { pod: usize },
}

fn amount() -> impl Strategy<Value = u32> {
    prop_oneof![0..4000u32, Just(0), Just(500), Just(1000)]
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        (amount(), amount(), proptest::option::of(amount())),
        (proptest::option::of(amount()), proptest::option::of(amount())),
        (proptest::option::of(amount()), proptest::option::of(amount())),
        proptest::option::of((amount(), amount())),
        any::<bool>(),
    )
        .prop_map(
            |(
                (spec_cpu, spec_mem, sidecar_cpu),
                (allocated_cpu, allocated_mem),
                (actuated_cpu, sidecar_actuated_cpu),
                pod_level_cpu,
                infeasible,
            )| Shape {
                spec_cpu,
                spec_mem,
                sidecar_cpu,
                allocated_cpu,
                allocated_mem,
                actuated_cpu,
                sidecar_actuated_cpu,
                pod_level_cpu,
                infeasible,
            },
        )
}

fn change() -> impl Strategy<Value = Change> {
    let maybe = || proptest::option::of(amount());
    prop_oneof![
        amount().prop_map(Change::SpecCpu),
        amount().prop_map(Change::SpecMem),
        maybe().prop_map(Change::AllocatedCpu),
        maybe().prop_map(Change::AllocatedMem),
        maybe().prop_map(Change::ActuatedCpu),
        maybe().prop_map(Change::SidecarActuatedCpu),
        proptest::option::of((amount(), amount())).prop_map(Change::PodLevel),
        any::<bool>().prop_map(Change::Infeasible),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let p = 0..PODS;
    prop_oneof![
        2 => (p.clone(), shape()).prop_map(|(pod, shape)| Op::Add { pod, shape }),
        6 => (p.clone(), change()).prop_map(|(pod, change)| Op::Resize { pod, change }),
        1 => p.prop_map(|pod| Op::Delete { pod }),
    ]
}

fn apply(shape: &mut Shape, change: &Change) {
    match change {
        Change::SpecCpu(v) => shape.spec_cpu = *v,
        Change::SpecMem(v) => shape.spec_mem = *v,
        Change::AllocatedCpu(v) => shape.allocated_cpu = *v,
        Change::AllocatedMem(v) => shape.allocated_mem = *v,
        Change::ActuatedCpu(v) => shape.actuated_cpu = *v,
        Change::SidecarActuatedCpu(v) => shape.sidecar_actuated_cpu = *v,
        Change::PodLevel(v) => shape.pod_level_cpu = *v,
        Change::Infeasible(v) => shape.infeasible = *v,
    }
}

fn cpu_mem(
    cpu: Option<u32>,
    mem: Option<u32>,
) -> Option<BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>> {
    let cpu = cpu.map(|v| format!("{v}m"));
    let mem = mem.map(|v| format!("{v}Mi"));
    let mut entries = Vec::new();
    if let Some(cpu) = &cpu {
        entries.push(("cpu", cpu.as_str()));
    }
    if let Some(mem) = &mem {
        entries.push(("memory", mem.as_str()));
    }
    (!entries.is_empty()).then(|| list(&entries))
}

fn container(name: &str, cpu: u32, mem: Option<u32>) -> Container {
    Container {
        name: name.into(),
        resources: Some(ResourceRequirements {
            requests: cpu_mem(Some(cpu), mem),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn container_status(
    name: &str,
    allocated: Option<BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    actuated_cpu: Option<u32>,
) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        allocated_resources: allocated,
        resources: actuated_cpu.map(|cpu| ResourceRequirements {
            requests: cpu_mem(Some(cpu), None),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The full pod object a watch would deliver for `shape`, bound to [`NODE`].
fn build(uid: &str, shape: &Shape) -> Pod {
    let mut sidecar = shape.sidecar_cpu.map(|cpu| container("sidecar", cpu, None));
    if let Some(s) = sidecar.as_mut() {
        s.restart_policy = Some("Always".into());
    }
    let spec = PodSpec {
        node_name: Some(NODE.into()),
        containers: vec![container("app", shape.spec_cpu, Some(shape.spec_mem))],
        init_containers: sidecar.map(|s| vec![s]),
        ..Default::default()
    };
    let conditions = shape.infeasible.then(|| {
        vec![PodCondition {
            type_: "PodResizePending".into(),
            status: "True".into(),
            reason: Some("Infeasible".into()),
            ..Default::default()
        }]
    });
    let status = PodStatus {
        conditions,
        container_statuses: Some(vec![container_status(
            "app",
            cpu_mem(shape.allocated_cpu, shape.allocated_mem),
            shape.actuated_cpu,
        )]),
        init_container_statuses: shape
            .sidecar_cpu
            .map(|_| vec![container_status("sidecar", None, shape.sidecar_actuated_cpu)]),
        allocated_resources: shape.pod_level_cpu.and_then(|(a, _)| cpu_mem(Some(a), None)),
        resources: shape.pod_level_cpu.map(|(_, r)| ResourceRequirements {
            requests: cpu_mem(Some(r), None),
            ..Default::default()
        }),
        ..Default::default()
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("p-{uid}")),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(spec),
        status: Some(status),
    }
}

/// The node's totals must be the sum of what the current pods count, computed afresh.
fn check(cache: &Cache, pods: &BTreeMap<usize, (Shape, Arc<PodInfo>)>) {
    let info = cache.node_info(NODE).expect("the node stays");
    assert_consistent(&info);
    let mut requested = ResourceSum::new();
    let mut non_zero = ResourceSum::new();
    for (p, (shape, _)) in pods {
        let counted = pod_resources(&build(&format!("u{p}"), shape));
        requested.add(&counted.requests);
        non_zero.add(&counted.non_zero);
    }
    assert!(
        same(&info.requested, &requested.to_resource()),
        "requested {:?} != the pods' current amounts {:?}",
        info.requested,
        requested.to_resource()
    );
    assert!(
        same(&info.non_zero_requested, &non_zero.to_resource()),
        "non-zero requested {:?} != the pods' current amounts {:?}",
        info.non_zero_requested,
        non_zero.to_resource()
    );
    assert_eq!(info.pods.len(), pods.len());
}

fn run(ops: &[Op]) {
    let cache = Cache::new();
    cache.add_node(node(NODE, "za", 0));
    // pod index → (its shape, the PodInfo the watch delivered last).
    let mut pods: BTreeMap<usize, (Shape, Arc<PodInfo>)> = BTreeMap::new();
    for op in ops {
        match op {
            Op::Add { pod, shape } => {
                if pods.contains_key(pod) {
                    continue;
                }
                let info = Arc::new(PodInfo::watched(build(&format!("u{pod}"), shape)));
                cache.add_pod(info.clone()).unwrap();
                pods.insert(*pod, (shape.clone(), info));
            }
            Op::Resize { pod, change } => {
                let Some((shape, old)) = pods.get_mut(pod) else {
                    continue;
                };
                apply(shape, change);
                let new = Arc::new(PodInfo::watched(build(&format!("u{pod}"), shape)));
                cache.update_pod(old, new.clone()).unwrap();
                *old = new;
            }
            Op::Delete { pod } => {
                let Some((_, old)) = pods.remove(pod) else {
                    continue;
                };
                cache.remove_pod(&old).unwrap();
            }
        }
        check(&cache, &pods);
    }
    while let Some((_, (_, old))) = pods.pop_first() {
        cache.remove_pod(&old).unwrap();
        check(&cache, &pods);
    }
    let info = cache.node_info(NODE).unwrap();
    assert!(
        same(&info.requested, &Resource::default()),
        "{:?}",
        info.requested
    );
    assert!(
        same(&info.non_zero_requested, &Resource::default()),
        "{:?}",
        info.non_zero_requested
    );
    assert!(info.requested_sum().fits_i64());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_resizes_keep_the_ledger(ops in proptest::collection::vec(op(), 1..60)) {
        run(&ops);
    }
}

/// The cases the property must cover, spelled out: a resize down that the runtime has not yet
/// applied keeps the old amount; once actuated, the node is freed; an infeasible resize up never
/// counts its spec.
#[test]
fn resize_down_frees_the_node_only_once_actuated() {
    let cpu = |cache: &Cache| cache.node_info(NODE).unwrap().requested.milli_cpu;
    let cache = Cache::new();
    cache.add_node(node(NODE, "za", 0));
    let mut shape = Shape {
        spec_cpu: 3000,
        spec_mem: 100,
        allocated_cpu: Some(3000),
        actuated_cpu: Some(3000),
        ..Shape::default()
    };
    let mut current = Arc::new(PodInfo::watched(build("u0", &shape)));
    cache.add_pod(current.clone()).unwrap();
    assert_eq!(cpu(&cache), 3000);
    let mut step = |shape: &Shape| {
        let new = Arc::new(PodInfo::watched(build("u0", shape)));
        cache.update_pod(&current, new.clone()).unwrap();
        current = new;
        cpu(&cache)
    };
    shape.spec_cpu = 1000;
    assert_eq!(
        step(&shape),
        3000,
        "spec lowered: the allocation still holds 3 CPUs"
    );
    shape.allocated_cpu = Some(1000);
    assert_eq!(
        step(&shape),
        3000,
        "allocation lowered: the runtime still runs 3 CPUs"
    );
    shape.actuated_cpu = Some(1000);
    assert_eq!(step(&shape), 1000, "actuated: the node is freed");
    shape.spec_cpu = 8000;
    shape.infeasible = true;
    assert_eq!(
        step(&shape),
        1000,
        "an infeasible resize up never counts its spec"
    );
    shape.infeasible = false;
    assert_eq!(step(&shape), 8000, "a pending feasible resize up counts at once");
}
