//! KEP-5004: extended resources (`example.com/gpu: 2`) served by DRA.
//!
//! A DeviceClass serves an extended resource name (its `spec.extendedResourceName`, and always the
//! implicit `deviceclass.resource.kubernetes.io/<class>`). On a node whose allocatable lacks the
//! resource (or has 0 of it) the request is satisfied by DRA: the scheduler allocates devices for a
//! claim of its own, one per pod, created in PreBind. On a node that has the resource, a device
//! plugin serves it and NodeResourcesFit checks it as before; a node serves a resource one way or
//! the other, never both.
//!
//! The claim's requests are named `container-<i>-request-<j>`: `i` indexes `initContainers ++
//! containers`, `j` the resource in the sorted list of that container's request names. Each is
//! `exactly {deviceClassName, allocationMode: ExactCount, count}`; requests are sorted by name. The
//! pod status gets `extendedResourceClaimStatus {resourceClaimName, requestMappings}` so the kubelet
//! can map devices to containers.
//!
//! Not done: upstream's newest refinement where short-lived init containers reuse devices requested
//! by later long-lived containers (here every container's request is allocated separately, which can
//! over-allocate for pods with init containers asking for the same resource).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ContainerExtendedResourceRequest, Node, Pod};
use k8s_openapi::api::resource::v1::{
    DeviceClaim, DeviceRequest, ExactDeviceRequest, ResourceClaim, ResourceClaimSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use parking_lot::Mutex;
use unisched_cache::{DraSnapshot, EXTENDED_RESOURCE_CLAIM_ANNOTATION, IMPLICIT_EXTENDED_RESOURCE_PREFIX};
use unisched_dra::{FatalError, Features, PreparedClaim, SelectorEngine};
use unisched_resource::{Quantity, Resource, is_extended_resource_name};

use super::FINALIZER;

/// Why the extended-resource claim for a node could not be built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExtendedClaimError {
    /// The claim's requests do not prepare (for example a device class that does not exist);
    /// printed as the preparation's error.
    #[error(transparent)]
    Prepare(Box<FatalError>),
}

/// Name of the in-memory claim before PreBind creates it (deliberately not a valid name).
pub const PLACEHOLDER_NAME: &str = "<extended-resources>";

/// One extended resource of one container that a DeviceClass can serve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ExtItem {
    /// Index in `initContainers ++ containers`.
    pub container_index: usize,
    /// The container's name.
    pub container_name: String,
    /// The resource name.
    pub resource: String,
    /// Index of the resource in the container's sorted request names.
    pub request_index: usize,
    /// The class serving it.
    pub class: String,
    /// How many devices.
    pub count: i64,
}

impl ExtItem {
    /// `container-<i>-request-<j>`.
    pub fn request_name(&self) -> String {
        format!(
            "container-{}-request-{}",
            self.container_index, self.request_index
        )
    }
}

/// The claim for one node: which of the items DRA serves there.
#[derive(Debug)]
pub(crate) struct Variant {
    pub claim: Arc<ResourceClaim>,
    pub prepared: Arc<PreparedClaim>,
    pub mappings: Vec<ContainerExtendedResourceRequest>,
}

/// What the pod asks for through extended resources, computed once in PreFilter.
#[derive(Debug)]
pub(crate) struct ExtendedPlan {
    pub items: Vec<ExtItem>,
    /// A real claim from an earlier attempt (stale: PostFilter deletes it).
    pub existing: Option<Arc<ResourceClaim>>,
    /// The in-flight key of the placeholder claim.
    pub placeholder_uid: String,
    namespace: String,
    pod_name: String,
    pod_uid: String,
    /// Variants by "served by DRA" mask.
    variants: Mutex<HashMap<Vec<bool>, Arc<Variant>>>,
}

/// The pod's extended-resource items that a class can serve, or `None`.
pub(crate) fn plan(
    pod: &Pod,
    snapshot: &DraSnapshot,
    existing: Option<Arc<ResourceClaim>>,
) -> Option<ExtendedPlan> {
    let spec = pod.spec.as_ref()?;
    let mut items = Vec::new();
    for (i, c) in spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .enumerate()
    {
        let Some(res) = c.resources.as_ref() else {
            continue;
        };
        // Requests as the API server defaults them: limits fill in missing requests.
        let mut merged: BTreeMap<&str, &k8s_openapi::apimachinery::pkg::api::resource::Quantity> =
            BTreeMap::new();
        for (k, v) in res.limits.iter().flatten() {
            merged.insert(k, v);
        }
        for (k, v) in res.requests.iter().flatten() {
            merged.insert(k, v);
        }
        for (j, (name, q)) in merged.iter().enumerate() {
            if !is_extended_resource_name(name) && !name.starts_with(IMPLICIT_EXTENDED_RESOURCE_PREFIX) {
                continue;
            }
            let Some(class) = snapshot.class_for_extended_resource(name) else {
                continue;
            };
            let count = Quantity::from_api(q).map(|q| q.value()).unwrap_or(0);
            if count <= 0 {
                continue;
            }
            items.push(ExtItem {
                container_index: i,
                container_name: c.name.clone(),
                resource: (*name).to_string(),
                request_index: j,
                class: class.to_string(),
                count,
            });
        }
    }
    if items.is_empty() {
        return None;
    }
    let pod_uid = pod.metadata.uid.clone().unwrap_or_default();
    Some(ExtendedPlan {
        items,
        existing,
        placeholder_uid: format!("{pod_uid}/{PLACEHOLDER_NAME}"),
        namespace: pod.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
        pod_name: pod.metadata.name.clone().unwrap_or_default(),
        pod_uid,
        variants: Mutex::new(HashMap::new()),
    })
}

/// Whether DRA serves `resource` on the node: the node has none of it.
fn served_by_dra(allocatable: &Resource, resource: &str) -> bool {
    allocatable.scalar_resources.get(resource).copied().unwrap_or(0) <= 0
}

impl ExtendedPlan {
    /// Whether an earlier attempt's claim still exists and has requests (it cannot be reused).
    pub fn has_stale_claim(&self) -> bool {
        self.existing.as_ref().is_some_and(|c| {
            c.spec
                .as_ref()
                .and_then(|s| s.devices.as_ref())
                .and_then(|d| d.requests.as_ref())
                .is_some_and(|r| !r.is_empty())
        })
    }

    /// The claim for this node, or `None` when device plugins serve everything here.
    pub fn variant_for(
        &self,
        allocatable: &Resource,
        snapshot: &DraSnapshot,
        engine: &dyn SelectorEngine,
        features: &Features,
    ) -> Result<Option<Arc<Variant>>, ExtendedClaimError> {
        let mask: Vec<bool> = self
            .items
            .iter()
            .map(|it| served_by_dra(allocatable, &it.resource))
            .collect();
        if !mask.iter().any(|b| *b) {
            return Ok(None);
        }
        if let Some(v) = self.variants.lock().get(&mask) {
            return Ok(Some(v.clone()));
        }
        let mut chosen: Vec<&ExtItem> = self
            .items
            .iter()
            .zip(&mask)
            .filter(|(_, m)| **m)
            .map(|(i, _)| i)
            .collect();
        chosen.sort_by_key(|i| i.request_name());
        let requests: Vec<DeviceRequest> = chosen
            .iter()
            .map(|it| DeviceRequest {
                name: it.request_name(),
                exactly: Some(ExactDeviceRequest {
                    device_class_name: it.class.clone(),
                    allocation_mode: Some("ExactCount".into()),
                    count: Some(it.count),
                    ..Default::default()
                }),
                first_available: None,
            })
            .collect();
        let mappings = chosen
            .iter()
            .map(|it| ContainerExtendedResourceRequest {
                container_name: it.container_name.clone(),
                request_name: it.request_name(),
                resource_name: it.resource.clone(),
            })
            .collect();
        let claim = Arc::new(self.claim_object(requests));
        let prepared = PreparedClaim::new(claim.clone(), snapshot, engine, features)
            .map_err(ExtendedClaimError::Prepare)?;
        let v = Arc::new(Variant {
            claim,
            prepared: Arc::new(prepared),
            mappings,
        });
        self.variants.lock().insert(mask, v.clone());
        Ok(Some(v))
    }

    /// The claim object as PreBind creates it (placeholder name and UID until then).
    fn claim_object(&self, requests: Vec<DeviceRequest>) -> ResourceClaim {
        ResourceClaim {
            metadata: ObjectMeta {
                name: Some(PLACEHOLDER_NAME.into()),
                namespace: Some(self.namespace.clone()),
                uid: Some(self.placeholder_uid.clone()),
                generate_name: Some(format!("{}-extended-resources-", self.pod_name)),
                annotations: Some(BTreeMap::from([(
                    EXTENDED_RESOURCE_CLAIM_ANNOTATION.to_string(),
                    "true".to_string(),
                )])),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Pod".into(),
                    name: self.pod_name.clone(),
                    uid: self.pod_uid.clone(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                finalizers: Some(vec![FINALIZER.to_string()]),
                ..Default::default()
            },
            spec: Some(ResourceClaimSpec {
                devices: Some(DeviceClaim {
                    requests: Some(requests),
                    ..Default::default()
                }),
            }),
            status: None,
        }
    }
}

/// The object to POST: placeholder name, UID and status cleared.
pub(crate) fn for_create(variant: &Variant) -> ResourceClaim {
    let mut c = (*variant.claim).clone();
    c.metadata.name = None;
    c.metadata.uid = None;
    c.status = None;
    c
}

/// Whether a resource on the node is served by a device plugin (used by tests and hints).
#[allow(dead_code)]
pub(crate) fn node_has_resource(node: &Node, resource: &str) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| a.get(resource))
        .and_then(|q| Quantity::from_api(q).ok())
        .is_some_and(|q| !q.is_zero())
}
