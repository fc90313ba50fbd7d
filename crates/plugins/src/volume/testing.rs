//! Test doubles and fixture builders for the volume plugins: a recording [`FakeVolumeApi`] that can
//! also play the PV controller against a [`VolumeCache`], and compact PV/PVC/StorageClass/CSINode/
//! CSIDriver/CSIStorageCapacity builders.

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::{
    api::{
        core::v1::{
            CSIPersistentVolumeSource, NodeSelector, ObjectReference, PersistentVolume,
            PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimStatus,
            PersistentVolumeSpec, PersistentVolumeStatus, Pod, PodSpec, TopologySelectorLabelRequirement,
            TopologySelectorTerm, Volume, VolumeNodeAffinity, VolumeResourceRequirements,
        },
        storage::v1::{
            CSIDriver, CSIDriverSpec, CSINode, CSINodeDriver, CSINodeSpec, CSIStorageCapacity, StorageClass,
            VolumeNodeResources,
        },
    },
    apimachinery::pkg::{
        api::resource::Quantity,
        apis::meta::v1::{LabelSelector, ObjectMeta},
    },
};
use parking_lot::Mutex;
use serde_json::Value;
use unisched_cache::VolumeCache;

use super::{ANNOTATION_BIND_COMPLETED, VolumeApi, VolumeApiError, claim_volume_name};

/// One recorded write.
#[derive(Clone, Debug, PartialEq)]
pub enum VolumeWrite {
    /// `patch_pv(name, patch)`.
    Pv(String, Value),
    /// `patch_pvc("namespace/name", patch)`.
    Pvc(String, Value),
}

/// Records writes; with a cache attached it also applies them the way the PV controller would
/// finish them (bind both sides, or provision a PV on the selected node), so PreBind's wait ends.
#[derive(Default)]
pub struct FakeVolumeApi {
    writes: Mutex<Vec<VolumeWrite>>,
    complete_in: Option<Arc<VolumeCache>>,
    fail: Mutex<Option<VolumeApiError>>,
}

impl FakeVolumeApi {
    /// Records only.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Records and completes bindings in `cache`.
    pub fn completing(cache: Arc<VolumeCache>) -> Arc<Self> {
        Arc::new(FakeVolumeApi {
            complete_in: Some(cache),
            ..Self::default()
        })
    }

    /// Every write so far.
    pub fn writes(&self) -> Vec<VolumeWrite> {
        self.writes.lock().clone()
    }

    /// Makes every following call fail with `err` (None: succeed again).
    pub fn fail_with(&self, err: Option<VolumeApiError>) {
        *self.fail.lock() = err;
    }

    fn check(&self) -> Result<(), VolumeApiError> {
        match self.fail.lock().clone() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

fn bump(meta: &mut ObjectMeta) {
    let rv: u64 = meta
        .resource_version
        .as_deref()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    meta.resource_version = Some((rv + 1).to_string());
}

fn bind_claim(cache: &VolumeCache, ns: &str, name: &str, pv_name: &str) {
    if let Some(pvc) = cache.api_pvc(ns, name) {
        let mut pvc = (*pvc).clone();
        bump(&mut pvc.metadata);
        pvc.spec.get_or_insert_with(Default::default).volume_name = Some(pv_name.into());
        pvc.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(ANNOTATION_BIND_COMPLETED.into(), "yes".into());
        pvc.status = Some(PersistentVolumeClaimStatus {
            phase: Some("Bound".into()),
            ..Default::default()
        });
        cache.apply_pvc(Arc::new(pvc));
    }
}

impl VolumeApi for FakeVolumeApi {
    fn patch_pv(&self, name: &str, patch: Value) -> Result<(), VolumeApiError> {
        self.check()?;
        self.writes
            .lock()
            .push(VolumeWrite::Pv(name.into(), patch.clone()));
        if let Some(cache) = &self.complete_in {
            let Some(pv) = cache.api_pv(name) else {
                return Err(VolumeApiError::NotFound(name.into()));
            };
            let claim_ref: Option<ObjectReference> =
                serde_json::from_value(patch["spec"]["claimRef"].clone()).ok();
            let mut pv = (*pv).clone();
            bump(&mut pv.metadata);
            pv.spec.get_or_insert_with(Default::default).claim_ref = claim_ref.clone();
            pv.status = Some(PersistentVolumeStatus {
                phase: Some("Bound".into()),
                ..Default::default()
            });
            cache.apply_pv(Arc::new(pv));
            if let Some(c) = claim_ref {
                bind_claim(
                    cache,
                    c.namespace.as_deref().unwrap_or_default(),
                    c.name.as_deref().unwrap_or_default(),
                    name,
                );
            }
        }
        Ok(())
    }

    fn patch_pvc(&self, namespace: &str, name: &str, patch: Value) -> Result<(), VolumeApiError> {
        self.check()?;
        self.writes
            .lock()
            .push(VolumeWrite::Pvc(format!("{namespace}/{name}"), patch));
        if let Some(cache) = &self.complete_in {
            let Some(pvc) = cache.api_pvc(namespace, name) else {
                return Err(VolumeApiError::NotFound(format!("{namespace}/{name}")));
            };
            if claim_volume_name(&pvc).is_none() {
                let pv_name = format!("pvc-{name}");
                let class = super::claim_class(&pvc).to_string();
                let mut pv = PvBuilder::new(&pv_name, &class, "1Gi")
                    .claim(namespace, name)
                    .build();
                pv.metadata.resource_version = Some("1".into());
                cache.apply_pv(Arc::new(pv));
                bind_claim(cache, namespace, name, &pv_name);
            }
        }
        Ok(())
    }
}

fn q(s: &str) -> Quantity {
    Quantity(s.to_string())
}

/// Builds a PersistentVolume.
#[derive(Clone, Debug)]
pub struct PvBuilder(PersistentVolume);

impl PvBuilder {
    /// A PV of `capacity` in `class`, ReadWriteOnce, phase Available, resourceVersion 1.
    pub fn new(name: &str, class: &str, capacity: &str) -> Self {
        PvBuilder(PersistentVolume {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some("1".into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeSpec {
                storage_class_name: Some(class.into()),
                capacity: Some(BTreeMap::from([("storage".to_string(), q(capacity))])),
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                ..Default::default()
            }),
            status: Some(PersistentVolumeStatus {
                phase: Some("Available".into()),
                ..Default::default()
            }),
        })
    }

    /// Required node affinity `key In values`.
    pub fn node_affinity(mut self, key: &str, values: &[&str]) -> Self {
        self.spec().node_affinity = Some(VolumeNodeAffinity {
            required: Some(NodeSelector {
                node_selector_terms: vec![crate::testing::term_in(key, values)],
            }),
        });
        self
    }

    /// A label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(key.into(), value.into());
        self
    }

    /// Access modes.
    pub fn access_modes(mut self, modes: &[&str]) -> Self {
        self.spec().access_modes = Some(modes.iter().map(|m| (*m).to_string()).collect());
        self
    }

    /// Bound to (or pre-bound for) `namespace/name`.
    pub fn claim(mut self, namespace: &str, name: &str) -> Self {
        self.spec().claim_ref = Some(ObjectReference {
            kind: Some("PersistentVolumeClaim".into()),
            api_version: Some("v1".into()),
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            ..Default::default()
        });
        self.0.status = Some(PersistentVolumeStatus {
            phase: Some("Bound".into()),
            ..Default::default()
        });
        self
    }

    /// Status phase `phase` (`None`: no status, as a PV no controller has seen yet).
    pub fn phase(mut self, phase: Option<&str>) -> Self {
        self.0.status = phase.map(|p| PersistentVolumeStatus {
            phase: Some(p.into()),
            ..Default::default()
        });
        self
    }

    /// `volumeAttributesClassName`.
    pub fn attributes_class(mut self, class: &str) -> Self {
        self.spec().volume_attributes_class_name = Some(class.into());
        self
    }

    /// A CSI volume of `driver` with `handle`.
    pub fn csi(mut self, driver: &str, handle: &str) -> Self {
        self.spec().csi = Some(CSIPersistentVolumeSource {
            driver: driver.into(),
            volume_handle: handle.into(),
            ..Default::default()
        });
        self
    }

    fn spec(&mut self) -> &mut PersistentVolumeSpec {
        self.0.spec.get_or_insert_with(Default::default)
    }

    /// The PV.
    pub fn build(self) -> PersistentVolume {
        self.0
    }

    /// The PV, shared.
    pub fn arc(self) -> Arc<PersistentVolume> {
        Arc::new(self.0)
    }
}

/// Builds a PersistentVolumeClaim in `default`.
#[derive(Clone, Debug)]
pub struct PvcBuilder(PersistentVolumeClaim);

impl PvcBuilder {
    /// An unbound ReadWriteOnce claim for `request` in `class`, resourceVersion 1.
    pub fn new(name: &str, class: &str, request: &str) -> Self {
        PvcBuilder(PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{name}")),
                resource_version: Some("1".into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                storage_class_name: Some(class.into()),
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([("storage".to_string(), q(request))])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            status: Some(PersistentVolumeClaimStatus {
                phase: Some("Pending".into()),
                ..Default::default()
            }),
        })
    }

    /// Bound to `pv` by the PV controller (`spec.volumeName` and the bind-completed annotation).
    pub fn bound_to(mut self, pv: &str) -> Self {
        self.0
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(ANNOTATION_BIND_COMPLETED.into(), "yes".into());
        self.0.spec.get_or_insert_with(Default::default).volume_name = Some(pv.into());
        self.0.status = Some(PersistentVolumeClaimStatus {
            phase: Some("Bound".into()),
            ..Default::default()
        });
        self
    }

    /// Access modes.
    pub fn access_modes(mut self, modes: &[&str]) -> Self {
        self.0.spec.get_or_insert_with(Default::default).access_modes =
            Some(modes.iter().map(|m| (*m).to_string()).collect());
        self
    }

    /// Names `pv` in `spec.volumeName` before the PV controller has bound it (no bind-completed
    /// annotation).
    pub fn naming_volume(mut self, pv: &str) -> Self {
        self.0.spec.get_or_insert_with(Default::default).volume_name = Some(pv.into());
        self
    }

    /// `volumeAttributesClassName`.
    pub fn attributes_class(mut self, class: &str) -> Self {
        self.0
            .spec
            .get_or_insert_with(Default::default)
            .volume_attributes_class_name = Some(class.into());
        self
    }

    /// The claim.
    pub fn build(self) -> PersistentVolumeClaim {
        self.0
    }

    /// The claim, shared.
    pub fn arc(self) -> Arc<PersistentVolumeClaim> {
        Arc::new(self.0)
    }
}

/// A StorageClass with `provisioner` and `volumeBindingMode` (`Immediate`/`WaitForFirstConsumer`),
/// optionally restricted to nodes whose `key` is one of `values`.
pub fn storage_class(
    name: &str,
    provisioner: &str,
    mode: &str,
    allowed: Option<(&str, &[&str])>,
) -> Arc<StorageClass> {
    Arc::new(StorageClass {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        provisioner: provisioner.into(),
        volume_binding_mode: Some(mode.into()),
        allowed_topologies: allowed.map(|(key, values)| {
            vec![TopologySelectorTerm {
                match_label_expressions: Some(vec![TopologySelectorLabelRequirement {
                    key: key.into(),
                    values: values.iter().map(|v| (*v).to_string()).collect(),
                }]),
            }]
        }),
        ..Default::default()
    })
}

/// A CSINode for `node` with one driver and its volume limit.
pub fn csi_node(node: &str, driver: &str, limit: Option<i32>) -> Arc<CSINode> {
    Arc::new(CSINode {
        metadata: ObjectMeta {
            name: Some(node.into()),
            ..Default::default()
        },
        spec: CSINodeSpec {
            drivers: vec![CSINodeDriver {
                name: driver.into(),
                node_id: node.into(),
                allocatable: limit.map(|c| VolumeNodeResources { count: Some(c) }),
                ..Default::default()
            }],
        },
        ..Default::default()
    })
}

/// A CSIDriver object: whether it publishes storage capacity, and whether pods must be kept off
/// nodes without it.
pub fn csi_driver(name: &str, storage_capacity: bool, prevent_if_missing: bool) -> Arc<CSIDriver> {
    Arc::new(CSIDriver {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: CSIDriverSpec {
            storage_capacity: Some(storage_capacity),
            prevent_pod_scheduling_if_missing: Some(prevent_if_missing),
            ..Default::default()
        },
    })
}

/// A CSIStorageCapacity in namespace `kube-system` for `class`, on the nodes with label
/// `key=value` (`None`: every node, as an empty selector), with `capacity` and
/// `maximumVolumeSize` when given.
pub fn storage_capacity(
    name: &str,
    class: &str,
    node_label: Option<(&str, &str)>,
    capacity: Option<&str>,
    maximum_volume_size: Option<&str>,
) -> Arc<CSIStorageCapacity> {
    Arc::new(CSIStorageCapacity {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("kube-system".into()),
            ..Default::default()
        },
        storage_class_name: class.into(),
        node_topology: Some(LabelSelector {
            match_labels: node_label.map(|(k, v)| BTreeMap::from([(k.to_string(), v.to_string())])),
            ..Default::default()
        }),
        capacity: capacity.map(|q| Quantity(q.into())),
        maximum_volume_size: maximum_volume_size.map(|q| Quantity(q.into())),
    })
}

/// Adds volumes referring to claims to a pod.
pub fn with_claims(mut pod: Pod, claims: &[&str]) -> Pod {
    let spec = pod.spec.get_or_insert_with(PodSpec::default);
    let volumes = spec.volumes.get_or_insert_with(Vec::new);
    for c in claims {
        volumes.push(Volume {
            name: format!("vol-{c}"),
            persistent_volume_claim: Some(k8s_openapi::api::core::v1::PersistentVolumeClaimVolumeSource {
                claim_name: (*c).to_string(),
                read_only: None,
            }),
            ..Default::default()
        });
    }
    pod
}

/// Adds an arbitrary volume to a pod.
pub fn with_volume(mut pod: Pod, volume: Volume) -> Pod {
    pod.spec
        .get_or_insert_with(PodSpec::default)
        .volumes
        .get_or_insert_with(Vec::new)
        .push(volume);
    pod
}

/// Adds a generic ephemeral volume named `name` to a pod (its claim is `<pod>-<name>`).
pub fn with_ephemeral_volume(pod: Pod, name: &str) -> Pod {
    with_volume(
        pod,
        Volume {
            name: name.into(),
            ephemeral: Some(k8s_openapi::api::core::v1::EphemeralVolumeSource::default()),
            ..Default::default()
        },
    )
}
