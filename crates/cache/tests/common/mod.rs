//! Builders shared by the integration tests.
#![allow(dead_code)]

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::{
    api::core::v1::{
        Affinity, Container, ContainerImage, ContainerPort, Node, NodeAllocatableMappedResources,
        NodeAllocatableOverheadResources, NodeAllocatableResourceClaimStatus, NodeStatus, Pod,
        PodAffinityTerm, PodAntiAffinity, PodSpec, PodStatus, ResourceRequirements,
    },
    apimachinery::pkg::{
        api::resource::Quantity,
        apis::meta::v1::{LabelSelector, ObjectMeta},
    },
};
use unisched_cache::{LABEL_TOPOLOGY_REGION, LABEL_TOPOLOGY_ZONE};
use unisched_framework::{NodeInfo, PodInfo};
use unisched_resource::Resource;

pub fn q(s: &str) -> Quantity {
    Quantity(s.to_string())
}

pub fn list(entries: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    entries.iter().map(|(k, v)| (k.to_string(), q(v))).collect()
}

/// A node in `zone` ("" for no zone labels). `variant` varies allocatable and images.
pub fn node(name: &str, zone: &str, variant: usize) -> Arc<Node> {
    let mut labels = BTreeMap::from([("kubernetes.io/hostname".to_string(), name.to_string())]);
    if !zone.is_empty() {
        labels.insert(LABEL_TOPOLOGY_REGION.into(), "r1".into());
        labels.insert(LABEL_TOPOLOGY_ZONE.into(), zone.into());
    }
    let cpu = format!("{}", 8 + variant * 4);
    let images = match variant % 3 {
        0 => vec![image(&["registry/app:1", "registry/app@sha256:aa"], 300_000_000)],
        1 => vec![
            image(&["registry/app:1"], 300_000_000),
            image(&["registry/db:2"], 900_000_000),
        ],
        _ => vec![],
    };
    Arc::new(Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels),
            ..Default::default()
        },
        status: Some(NodeStatus {
            allocatable: Some(list(&[
                ("cpu", &cpu),
                ("memory", "32Gi"),
                ("ephemeral-storage", "100Gi"),
                ("hugepages-2Mi", "1Gi"),
                ("example.com/gpu", "4"),
                ("pods", "110"),
            ])),
            images: Some(images),
            ..Default::default()
        }),
        ..Default::default()
    })
}

pub fn image(names: &[&str], size: i64) -> ContainerImage {
    ContainerImage {
        names: Some(names.iter().map(|s| s.to_string()).collect()),
        size_bytes: Some(size),
    }
}

fn container(name: &str, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
    Container {
        name: name.into(),
        resources: Some(ResourceRequirements {
            requests: (!requests.is_empty()).then(|| list(requests)),
            limits: (!limits.is_empty()).then(|| list(limits)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Number of pod shapes [`pod`] knows.
pub const SHAPES: usize = 7;

/// The spec and status of pod shape `shape` (see [`SHAPES`]): plain cpu/memory, best effort,
/// hugepages + extended resource + overhead, init container + host port, KEP-5517 mapped claim,
/// required anti-affinity + extended + ephemeral storage, overhead-only claim + hugepages.
fn shape(shape: usize) -> (PodSpec, Option<PodStatus>) {
    let mut spec = PodSpec::default();
    let mut status = None;
    match shape % SHAPES {
        0 => spec.containers = vec![container("c0", &[("cpu", "100m"), ("memory", "128Mi")], &[])],
        1 => spec.containers = vec![container("c0", &[], &[])],
        2 => {
            spec.containers = vec![container(
                "c0",
                &[
                    ("cpu", "1500m"),
                    ("memory", "1Gi"),
                    ("hugepages-2Mi", "4Mi"),
                    ("example.com/gpu", "1"),
                ],
                &[("hugepages-2Mi", "4Mi"), ("example.com/gpu", "1")],
            )];
            spec.overhead = Some(list(&[("cpu", "50m"), ("memory", "10Mi")]));
        }
        3 => {
            let mut c = container("c0", &[("cpu", "500m"), ("memory", "64Mi")], &[]);
            c.ports = Some(vec![ContainerPort {
                container_port: 80,
                host_port: Some(8080),
                ..Default::default()
            }]);
            spec.containers = vec![c];
            spec.init_containers = Some(vec![container("init", &[("cpu", "2"), ("memory", "32Mi")], &[])]);
        }
        4 => {
            spec.containers = vec![
                container(
                    "c0",
                    &[("cpu", "250m"), ("memory", "256Mi")],
                    &[("cpu", "1"), ("memory", "1Gi")],
                ),
                container("c1", &[("cpu", "100m")], &[("cpu", "1"), ("memory", "512Mi")]),
            ];
            status = Some(PodStatus {
                node_allocatable_resource_claim_statuses: Some(vec![NodeAllocatableResourceClaimStatus {
                    resource_claim_name: "accel".into(),
                    containers: Some(vec!["c0".into()]),
                    mapping: Some(vec![
                        NodeAllocatableMappedResources {
                            name: "cpu".into(),
                            quantity: q("2"),
                        },
                        NodeAllocatableMappedResources {
                            name: "memory".into(),
                            quantity: q("1Gi"),
                        },
                    ]),
                    overhead: Some(vec![NodeAllocatableOverheadResources {
                        name: "memory".into(),
                        per_pod: Some(q("64Mi")),
                        per_container: Some(q("16Mi")),
                    }]),
                }]),
                ..Default::default()
            });
        }
        5 => {
            spec.containers = vec![container(
                "c0",
                &[
                    ("cpu", "300m"),
                    ("example.com/gpu", "2"),
                    ("ephemeral-storage", "1Gi"),
                ],
                &[("example.com/gpu", "2")],
            )];
            spec.affinity = Some(Affinity {
                pod_anti_affinity: Some(PodAntiAffinity {
                    required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                        topology_key: "kubernetes.io/hostname".into(),
                        label_selector: Some(LabelSelector::default()),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        _ => {
            spec.containers = vec![container(
                "c0",
                &[("cpu", "200m"), ("memory", "100Mi"), ("hugepages-2Mi", "8Mi")],
                &[("cpu", "1"), ("memory", "1Gi"), ("hugepages-2Mi", "8Mi")],
            )];
            status = Some(PodStatus {
                node_allocatable_resource_claim_statuses: Some(vec![NodeAllocatableResourceClaimStatus {
                    resource_claim_name: "shared-nic".into(),
                    containers: Some(vec!["c0".into()]),
                    mapping: None,
                    overhead: Some(vec![NodeAllocatableOverheadResources {
                        name: "cpu".into(),
                        per_pod: Some(q("100m")),
                        per_container: Some(q("50m")),
                    }]),
                }]),
                ..Default::default()
            });
        }
    }
    (spec, status)
}

/// Pod `uid` (named `p-<uid>` in `default`) of `shape`, bound to `node` when given.
pub fn pod(uid: &str, node: Option<&str>, shape_idx: usize) -> Arc<PodInfo> {
    let (mut spec, status) = shape(shape_idx);
    spec.node_name = node.map(str::to_string);
    pod_from(uid, spec, status)
}

/// Pod `uid` (named `p-<uid>` in `default`) with the given spec and status.
pub fn pod_from(uid: &str, spec: PodSpec, status: Option<PodStatus>) -> Arc<PodInfo> {
    Arc::new(PodInfo::new(Pod {
        metadata: ObjectMeta {
            name: Some(format!("p-{uid}")),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(spec),
        status,
    }))
}

/// `a == b` ignoring zero-valued scalar entries, which mean nothing (see `Resource`).
pub fn same(a: &Resource, b: &Resource) -> bool {
    let norm = |r: &Resource| {
        let mut r = r.clone();
        r.scalar_resources.retain(|_, v| *v != 0);
        r
    };
    norm(a) == norm(b)
}

/// Asserts that the node's aggregates equal the sum over its pods.
pub fn assert_consistent(info: &NodeInfo) {
    let (req, nz) = info.recomputed_requested();
    assert!(
        same(&info.requested, &req),
        "{}: requested {:?} != sum {:?}",
        info.name(),
        info.requested,
        req
    );
    assert!(
        same(&info.non_zero_requested, &nz),
        "{}: non_zero_requested {:?} != sum {:?}",
        info.name(),
        info.non_zero_requested,
        nz
    );
}

/// Everything observable about a node except its generation, for "restored exactly" checks.
#[derive(Debug, PartialEq)]
pub struct Fingerprint {
    pub name: String,
    pub has_node: bool,
    pub pods: Vec<String>,
    pub affinity: Vec<String>,
    pub anti_affinity: Vec<String>,
    pub requested: Resource,
    pub non_zero_requested: Resource,
    pub allocatable: Resource,
    pub ports: usize,
    pub images: Vec<(String, i64, usize)>,
}

pub fn fingerprint(info: &NodeInfo) -> Fingerprint {
    let norm = |r: &Resource| {
        let mut r = r.clone();
        r.scalar_resources.retain(|_, v| *v != 0);
        r
    };
    let uids = |v: &[Arc<PodInfo>]| v.iter().map(|p| p.uid.clone()).collect::<Vec<_>>();
    Fingerprint {
        name: info.name().to_string(),
        has_node: info.node().is_some(),
        pods: uids(&info.pods),
        affinity: uids(&info.pods_with_affinity),
        anti_affinity: uids(&info.pods_with_required_anti_affinity),
        requested: norm(&info.requested),
        non_zero_requested: norm(&info.non_zero_requested),
        allocatable: norm(&info.allocatable),
        ports: info.used_ports.len(),
        images: info
            .image_states
            .iter()
            .map(|(k, v)| (k.clone(), v.size, v.num_nodes))
            .collect(),
    }
}
