//! Which ResourceClaims a pod uses, and whether they may be used by it.
//!
//! `spec.resourceClaims[]` names a claim directly (`resourceClaimName`) or through a template, in
//! which case the claim the ResourceClaim controller generated is found in
//! `status.resourceClaimStatuses` (an entry with no name means "intentionally not created": the
//! claim is skipped). A generated claim must be controlled by the pod, so a stale claim of an earlier
//! pod with the same name is never used. Messages follow upstream.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;

/// Upstream `ResourceClaimReservedForMaxSize`.
pub const RESERVED_FOR_MAX_SIZE: usize = 256;

/// One entry of `spec.resourceClaims` resolved to a claim name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ClaimRef {
    /// `spec.resourceClaims[].name` (what containers reference).
    pub pod_claim_name: String,
    /// The ResourceClaim's name.
    pub claim_name: String,
    /// Generated from a template: must be controlled by the pod.
    pub must_check_owner: bool,
}

fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Why [`resolve`] could not resolve a pod's claim references. The message is upstream's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Unresolved {
    /// A claim from a template that the ResourceClaim controller has not created yet (no entry in
    /// `status.resourceClaimStatuses`).
    NotCreatedYet(String),
    /// An entry naming neither a claim nor a template.
    UnsupportedSource(String),
}

impl From<Unresolved> for String {
    fn from(e: Unresolved) -> String {
        match e {
            Unresolved::NotCreatedYet(m) | Unresolved::UnsupportedSource(m) => m,
        }
    }
}

/// Resolves the pod's claim references, skipping claims intentionally not created.
pub(crate) fn resolve(pod: &Pod) -> Result<Vec<ClaimRef>, Unresolved> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for pc in spec.resource_claims.iter().flatten() {
        if let Some(name) = pc.resource_claim_name.as_deref().filter(|n| !n.is_empty()) {
            out.push(ClaimRef {
                pod_claim_name: pc.name.clone(),
                claim_name: name.to_string(),
                must_check_owner: false,
            });
            continue;
        }
        if pc
            .resource_claim_template_name
            .as_deref()
            .is_some_and(|t| !t.is_empty())
        {
            let status = pod
                .status
                .as_ref()
                .and_then(|s| s.resource_claim_statuses.as_ref())
                .and_then(|l| l.iter().find(|s| s.name == pc.name));
            match status {
                None => {
                    return Err(Unresolved::NotCreatedYet(format!(
                        "pod {:?}: ResourceClaim not created yet",
                        pod_key(pod)
                    )));
                }
                Some(s) => {
                    if let Some(name) = s.resource_claim_name.as_deref().filter(|n| !n.is_empty()) {
                        out.push(ClaimRef {
                            pod_claim_name: pc.name.clone(),
                            claim_name: name.to_string(),
                            must_check_owner: true,
                        });
                    }
                }
            }
            continue;
        }
        return Err(Unresolved::UnsupportedSource(format!(
            "pod {:?}, spec.resourceClaim {:?}: unsupported ResourceClaim source",
            pod_key(pod),
            pc.name
        )));
    }
    Ok(out)
}

/// Whether the pod lists any claim at all.
pub(crate) fn has_claims(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .is_some_and(|c| !c.is_empty())
}

/// Whether `name` appears among the claim names the pod refers to: a `resourceClaimName` in its
/// spec or a generated claim in `status.resourceClaimStatuses`. Every name [`resolve`] can return
/// is one of these.
pub(crate) fn names_claim(pod: &Pod, name: &str) -> bool {
    claim_names(pod).any(|n| n == name)
}

/// The claim names the pod refers to, as [`names_claim`] reads them: spec `resourceClaimName`s,
/// then generated claims in `status.resourceClaimStatuses` (duplicates possible).
pub(crate) fn claim_names(pod: &Pod) -> impl Iterator<Item = &str> {
    let in_spec = pod
        .spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| c.resource_claim_name.as_deref());
    let in_status = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| c.resource_claim_name.as_deref());
    in_spec.chain(in_status)
}

/// Whether `claim` is controlled by `pod` (same namespace, controller owner reference).
pub(crate) fn is_for_pod(pod: &Pod, claim: &ResourceClaim) -> bool {
    claim.metadata.namespace == pod.metadata.namespace
        && claim
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == pod.metadata.uid.as_deref())
}

/// Whether `status.reservedFor` contains the pod.
pub(crate) fn is_reserved_for(claim: &ResourceClaim, pod_uid: &str) -> bool {
    claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_ref())
        .is_some_and(|r| r.iter().any(|c| c.uid == pod_uid))
}

/// Consumers other than the pod.
pub(crate) fn reserved_for_others(claim: &ResourceClaim, pod_uid: &str) -> usize {
    claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_ref())
        .map_or(0, |r| r.iter().filter(|c| c.uid != pod_uid).count())
}

/// Whether the claim has an allocation.
pub(crate) fn is_allocated(claim: &ResourceClaim) -> bool {
    claim.status.as_ref().is_some_and(|s| s.allocation.is_some())
}

/// Why a claim the pod names cannot be used for it, in upstream's words.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClaimCheckError {
    /// No such claim. Upstream's claim lookup goes through the scheduler's assume cache, whose
    /// miss reads `could not find <type> "<namespace>/<name>"`.
    #[error("could not find ResourceClaim \"{namespace}/{name}\"")]
    NotFound {
        /// The pod's namespace.
        namespace: String,
        /// The claim's name.
        name: String,
    },
    /// The claim is being deleted.
    #[error("resourceclaim {name:?} is being deleted")]
    BeingDeleted {
        /// The claim's name.
        name: String,
    },
    /// A claim generated from a template that another pod owns.
    #[error("ResourceClaim {namespace}/{name} was not created for Pod {pod} (Pod is not owner)")]
    NotOwner {
        /// The pod's namespace.
        namespace: String,
        /// The claim's name.
        name: String,
        /// The pod's key.
        pod: String,
    },
}

/// Checks a looked-up claim: exists, not being deleted, owned by the pod when generated.
pub(crate) fn check(
    pod: &Pod,
    r: &ClaimRef,
    claim: Option<Arc<ResourceClaim>>,
) -> Result<Arc<ResourceClaim>, ClaimCheckError> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let Some(claim) = claim else {
        return Err(ClaimCheckError::NotFound {
            namespace: ns.to_string(),
            name: r.claim_name.clone(),
        });
    };
    if claim.metadata.deletion_timestamp.is_some() {
        return Err(ClaimCheckError::BeingDeleted {
            name: r.claim_name.clone(),
        });
    }
    if r.must_check_owner && !is_for_pod(pod, &claim) {
        return Err(ClaimCheckError::NotOwner {
            namespace: ns.to_string(),
            name: r.claim_name.clone(),
            pod: pod_key(pod),
        });
    }
    Ok(claim)
}

/// Names of the containers (init containers first) that reference the pod claim `pod_claim_name`.
pub(crate) fn containers_referencing(pod: &Pod, pod_claim_name: &str) -> Vec<String> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    spec.init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .filter(|c| {
            c.resources
                .as_ref()
                .and_then(|r| r.claims.as_ref())
                .is_some_and(|claims| claims.iter().any(|rc| rc.name == pod_claim_name))
        })
        .map(|c| c.name.clone())
        .collect()
}
