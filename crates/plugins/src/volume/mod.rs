//! The volume plugins: VolumeBinding, VolumeRestrictions, VolumeZone and NodeVolumeLimits
//! (upstream `volumebinding`, `volumerestrictions`, `volumezone`, `nodevolumelimits`).
//!
//! They share the cluster's storage state, the cache's [`VolumeCache`] (PVs, PVCs, StorageClasses,
//! CSINodes, CSIDrivers, CSIStorageCapacities, with VolumeBinding's assumed bindings), and a few helpers for reading pods' volumes,
//! kept here so the four read a pod the same way. Every plugin returns Skip from PreFilter for a pod
//! without the volumes it cares about, so most pods pay one scan over `spec.volumes` per plugin and
//! nothing per node.
//!
//! The binding cycle's writes (VolumeBinding's PreBind) go through [`VolumeApi`], a small
//! synchronous trait the runtime implements with its rate-limited API writer and tests with
//! [`testing::FakeVolumeApi`]. Like every write in unisched they are merge patches, never PUTs.

mod api;
mod binding;
mod binding_args;
mod capacity;
mod limits;
mod matching;
mod restrictions;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod zone;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use unisched_cache::VolumeCache;

pub use api::{VolumeApi, VolumeApiError};
pub use binding::{ANNOTATION_SELECTED_NODE, NO_PROVISIONER, VolumeBinding};
pub use binding_args::{DEFAULT_BIND_TIMEOUT_SECONDS, VolumeBindingArgs};
pub use limits::NodeVolumeLimits;
pub use restrictions::VolumeRestrictions;
pub use zone::VolumeZone;

/// Upstream reason strings.
pub mod reason {
    pub use super::binding::{
        ERR_REASON_BIND_CONFLICT, ERR_REASON_NODE_CONFLICT, ERR_REASON_PV_NOT_EXIST,
        ERR_REASON_UNBOUND_IMMEDIATE,
    };
    pub use super::capacity::ERR_REASON_NOT_ENOUGH_SPACE;
    pub use super::limits::ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED;
    pub use super::restrictions::{ERR_REASON_DISK_CONFLICT, ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT};
    pub use super::zone::ERR_REASON_ZONE_CONFLICT;
}

/// The deprecated annotation that named a claim's class before `spec.storageClassName`.
pub(crate) const BETA_STORAGE_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

/// The PVC names the pod's volumes refer to, in volume order: `persistentVolumeClaim.claimName`,
/// and for generic ephemeral volumes the generated `<pod>-<volume>`.
pub(crate) fn pod_claim_names(pod: &Pod) -> Vec<String> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|v| {
            if let Some(c) = &v.persistent_volume_claim {
                Some(c.claim_name.clone())
            } else {
                v.ephemeral.as_ref().map(|_| format!("{pod_name}-{}", v.name))
            }
        })
        .collect()
}

/// The claims the pod's `persistentVolumeClaim` volumes name, without its generic ephemeral
/// volumes' claims: what upstream's VolumeZone and VolumeRestrictions read (an ephemeral volume's
/// claim is the pod's own, and VolumeBinding checks it). Duplicates removed, in volume order.
pub(crate) fn persistent_claim_names(pod: &Pod) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        if let Some(c) = &v.persistent_volume_claim
            && !names.contains(&c.claim_name.as_str())
        {
            names.push(&c.claim_name);
        }
    }
    names
}

/// [`persistent_claim_names`] resolved through the cache; the first missing claim fails with the
/// API server's NotFound text.
pub(crate) fn resolve_persistent_claims(
    volumes: &VolumeCache,
    pod: &Pod,
) -> Result<Vec<(String, std::sync::Arc<PersistentVolumeClaim>)>, ClaimLookupError> {
    let ns = pod_namespace(pod);
    persistent_claim_names(pod)
        .into_iter()
        .map(|name| {
            volumes
                .pvc(ns, name)
                .map(|pvc| (name.to_string(), pvc))
                .ok_or_else(|| ClaimLookupError::NotFound { name: name.into() })
        })
        .collect()
}

/// Whether any of the pod's volumes refers to a claim (no allocation: every pod asks this).
pub(crate) fn pod_has_claims(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .is_some_and(|v| {
            v.iter()
                .any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some())
        })
}

/// The pod's namespace (`default` when unset, as the API server defaults it).
pub(crate) fn pod_namespace(pod: &Pod) -> &str {
    pod.metadata
        .namespace
        .as_deref()
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
}

/// Why a pod's claims could not be resolved through the cache, in upstream's words.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClaimLookupError {
    /// The claim does not exist (the API server's NotFound text).
    #[error("persistentvolumeclaim {name:?} not found")]
    NotFound {
        /// The claim's name.
        name: String,
    },
    /// A generic ephemeral volume's claim the ephemeral volume controller has not created yet.
    #[error("waiting for ephemeral volume controller to create the persistentvolumeclaim {name:?}")]
    EphemeralPending {
        /// The claim's name (`<pod>-<volume>`).
        name: String,
    },
    /// A claim with an ephemeral volume's name that another owner created.
    #[error("PVC {namespace}/{name} was not created for pod {namespace}/{pod} (pod is not owner)")]
    NotOwner {
        /// The pod's (and claim's) namespace.
        namespace: String,
        /// The claim's name.
        name: String,
        /// The pod's name.
        pod: String,
    },
}

/// The claim's storage class: `spec.storageClassName`, else the beta annotation, else `""`.
pub(crate) fn claim_class(pvc: &PersistentVolumeClaim) -> &str {
    if let Some(c) = pvc.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()) {
        return c;
    }
    pvc.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(BETA_STORAGE_CLASS_ANNOTATION))
        .map_or("", String::as_str)
}

/// The annotation the PV controller puts on a claim once it has bound it.
pub(crate) const ANNOTATION_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";

/// The PV a claim is bound to, when the PV controller has completed the binding: `spec.volumeName`
/// set and the claim annotated [`ANNOTATION_BIND_COMPLETED`]. VolumeBinding counts only these as
/// bound (as upstream); a claim that merely names its volume still waits for the controller.
pub(crate) fn claim_fully_bound(pvc: &PersistentVolumeClaim) -> Option<&str> {
    let completed = pvc
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ANNOTATION_BIND_COMPLETED));
    claim_volume_name(pvc).filter(|_| completed)
}

/// The PV a claim is bound to (`spec.volumeName`), when set.
pub(crate) fn claim_volume_name(pvc: &PersistentVolumeClaim) -> Option<&str> {
    pvc.spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .filter(|s| !s.is_empty())
}

/// Whether the PV's required node affinity admits the node (no affinity admits every node).
pub(crate) fn pv_node_affinity_matches(pv: &PersistentVolume, node: &Node) -> bool {
    match pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
    {
        None => true,
        Some(sel) => crate::NodeSelectorMatcher::lenient(sel, "").matches(node),
    }
}

/// Resolves the pod's claims through the cache, failing with upstream's text for the first missing
/// one (the API server's NotFound, or for a generic ephemeral volume the wait for the ephemeral
/// volume controller, which must also have created the claim for this pod). Returns `(name, claim)`
/// pairs in volume order, duplicates removed.
pub(crate) fn resolve_claims(
    volumes: &VolumeCache,
    pod: &Pod,
) -> Result<Vec<(String, std::sync::Arc<PersistentVolumeClaim>)>, ClaimLookupError> {
    let ns = pod_namespace(pod);
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let mut out: Vec<(String, std::sync::Arc<PersistentVolumeClaim>)> = Vec::new();
    let pod_volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default();
    for v in pod_volumes {
        let (name, ephemeral) = if let Some(c) = &v.persistent_volume_claim {
            (c.claim_name.clone(), false)
        } else if v.ephemeral.is_some() {
            (format!("{pod_name}-{}", v.name), true)
        } else {
            continue;
        };
        if out.iter().any(|(n, _)| *n == name) {
            continue;
        }
        let Some(pvc) = volumes.pvc(ns, &name) else {
            return Err(if ephemeral {
                ClaimLookupError::EphemeralPending { name }
            } else {
                ClaimLookupError::NotFound { name }
            });
        };
        if ephemeral && !owned_by(&pvc, pod) {
            return Err(ClaimLookupError::NotOwner {
                namespace: ns.to_string(),
                name,
                pod: pod_name.to_string(),
            });
        }
        out.push((name, pvc));
    }
    Ok(out)
}

/// Whether the pod is the claim's controller (what makes an ephemeral volume's claim the pod's).
fn owned_by(pvc: &PersistentVolumeClaim, pod: &Pod) -> bool {
    pvc.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.kind == "Pod" && Some(&o.uid) == pod.metadata.uid.as_ref())
}

/// Which of a pod's volumes a plugin's claim hint looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClaimVolumes {
    /// `persistentVolumeClaim` volumes and generic ephemeral volumes (their generated
    /// `<pod>-<volume>` claims): VolumeBinding and NodeVolumeLimits read both.
    All,
    /// `persistentVolumeClaim` volumes only: VolumeZone and VolumeRestrictions look up no other
    /// claim (an ephemeral volume's claim is VolumeBinding's to wait for), so another claim's
    /// creation is no reason to retry their rejection.
    PersistentOnly,
}

/// Queueing hint for a PVC event: only a claim in the pod's namespace that one of the pod's
/// `volumes` names can help it. Upstream's four volume plugins each have this hint; they differ
/// only in which volumes they read.
pub(crate) fn claim_event_hint(
    volumes: ClaimVolumes,
    pod: &Pod,
    old: Option<&unisched_framework::EventObject>,
    new: Option<&unisched_framework::EventObject>,
) -> Result<unisched_framework::QueueingHint, unisched_framework::QueueingHintError> {
    use unisched_framework::{EventObject, QueueingHint, QueueingHintError};
    let pvc = match new.or(old) {
        Some(EventObject::PersistentVolumeClaim(c)) => c,
        Some(other) => {
            return Err(QueueingHintError::UnexpectedKind {
                expected: "PersistentVolumeClaim",
                got: crate::helper::object_kind(other),
            });
        }
        None => return Err(QueueingHintError::EmptyEvent { kind: "claim" }),
    };
    let claim_namespace = pvc.metadata.namespace.as_deref().filter(|n| !n.is_empty());
    let same_ns = claim_namespace.unwrap_or("default") == pod_namespace(pod);
    let name = pvc.metadata.name.as_deref().unwrap_or_default();
    let named = match volumes {
        ClaimVolumes::All => pod_claim_names(pod).iter().any(|c| c == name),
        ClaimVolumes::PersistentOnly => persistent_claim_names(pod).contains(&name),
    };
    Ok(if same_ns && named {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod hint_tests {
    use std::sync::Arc;

    use unisched_framework::{EventObject, QueueingHint};

    use super::*;
    use crate::testing::PodBuilder;
    use crate::volume::testing::{PvcBuilder, with_claims};

    #[test]
    fn claim_events_queue_only_users() {
        let pod = with_claims(PodBuilder::new("p").build(), &["data"]);
        let cases = [
            ("the pod's claim", "data", QueueingHint::Queue),
            ("another claim", "other", QueueingHint::Skip),
        ];
        for (name, claim, want) in cases {
            let obj =
                EventObject::PersistentVolumeClaim(Arc::new(PvcBuilder::new(claim, "x", "1Gi").build()));
            assert_eq!(
                claim_event_hint(ClaimVolumes::All, &pod, None, Some(&obj)).unwrap(),
                want,
                "{name}"
            );
        }
        assert!(claim_event_hint(ClaimVolumes::All, &pod, None, Some(&EventObject::Other)).is_err());
    }

    #[test]
    fn ephemeral_volumes_need_their_generated_claim() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let pod = crate::volume::testing::with_ephemeral_volume(
            PodBuilder::new("p").uid("uid-p").build(),
            "scratch",
        );
        let cache = VolumeCache::new();
        assert_eq!(
            resolve_claims(&cache, &pod).unwrap_err().to_string(),
            "waiting for ephemeral volume controller to create the persistentvolumeclaim \"p-scratch\""
        );
        let mut foreign = PvcBuilder::new("p-scratch", "x", "1Gi").build();
        cache.apply_pvc(Arc::new(foreign.clone()));
        assert_eq!(
            resolve_claims(&cache, &pod).unwrap_err().to_string(),
            "PVC default/p-scratch was not created for pod default/p (pod is not owner)"
        );
        foreign.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: "p".into(),
            uid: "uid-p".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        foreign.metadata.resource_version = Some("2".into());
        cache.apply_pvc(Arc::new(foreign));
        assert_eq!(resolve_claims(&cache, &pod).unwrap().len(), 1);
    }
}
