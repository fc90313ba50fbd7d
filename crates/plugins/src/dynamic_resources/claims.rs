//! Which ResourceClaims a pod uses, and whether they may be used by it.
//!
//! `spec.resourceClaims[]` names a claim directly (`resourceClaimName`) or through a template, in
//! which case the claim the ResourceClaim controller generated is found in
//! `status.resourceClaimStatuses` (an entry with no name means "intentionally not created": the
//! claim is skipped). A generated claim must be controlled by the pod, so a stale claim of an earlier
//! pod with the same name is never used. Messages follow upstream.
//!
//! # PodGroup claims (DRAWorkloadResourceClaims)
//!
//! A pod in a PodGroup may share one claim with the rest of its group: its `spec.resourceClaims`
//! entry matches one of the PodGroup's `spec.resourceClaims` when all three fields (name, claim
//! name, template name) are equal. Such a claim is reserved for the PodGroup, not the pod
//! ([`Consumer::for_claim`]), so it outlives any one member; a claim generated from the group's
//! template is controlled by the PodGroup, which the pod knows only by name.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodResourceClaim};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimConsumerReference};
use k8s_openapi::api::scheduling::v1beta1::PodGroup;

/// The API group of PodGroups, as claims' `reservedFor` and owner references name it.
pub(crate) const SCHEDULING_GROUP: &str = "scheduling.k8s.io";

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

/// The pod's `spec.resourceClaims` entry with this name.
pub(crate) fn pod_claim_entry<'p>(pod: &'p Pod, pod_claim_name: &str) -> Option<&'p PodResourceClaim> {
    pod.spec
        .as_ref()?
        .resource_claims
        .as_ref()?
        .iter()
        .find(|c| c.name == pod_claim_name)
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

/// Whether `claim` is controlled by `pod` (same namespace, controller owner reference), or, with
/// `accept_group_owner`, by the PodGroup the pod belongs to (known to the pod by name only, so
/// the owner's kind, name and API group are compared).
pub(crate) fn is_for_pod(pod: &Pod, claim: &ResourceClaim, accept_group_owner: bool) -> bool {
    if claim.metadata.namespace != pod.metadata.namespace {
        return false;
    }
    let controller = claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    let Some(controller) = controller else {
        return false;
    };
    if Some(controller.uid.as_str()) == pod.metadata.uid.as_deref() {
        return true;
    }
    accept_group_owner
        && pod_group_name(pod).is_some_and(|group| {
            controller.kind == "PodGroup"
                && controller.name == group
                && controller
                    .api_version
                    .starts_with(&format!("{SCHEDULING_GROUP}/"))
        })
}

/// `spec.schedulingGroup.podGroupName`, if the pod belongs to a group.
pub(crate) fn pod_group_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .scheduling_group
        .as_ref()?
        .pod_group_name
        .as_deref()
}

/// Whether `status.reservedFor` holds the pod, or, with `accept_group`, the PodGroup the pod
/// belongs to (matched by API group, resource and name: the pod does not know the group's UID).
pub(crate) fn is_reserved_for_pod(
    claim: &ResourceClaim,
    pod: &Pod,
    pod_uid: &str,
    accept_group: bool,
) -> bool {
    let group = pod_group_name(pod).filter(|_| accept_group);
    claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_ref())
        .is_some_and(|r| {
            r.iter().any(|c| {
                c.uid == pod_uid
                    || group.is_some_and(|g| {
                        c.api_group.as_deref() == Some(SCHEDULING_GROUP)
                            && c.resource == "podgroups"
                            && c.name == g
                    })
            })
        })
}

/// What a claim is reserved for when a pod uses it: the pod, or its PodGroup when the pod's claim
/// entry is one of the group's claims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Consumer {
    /// `pods` or `podgroups`.
    pub resource: &'static str,
    /// The pod's or the PodGroup's name.
    pub name: String,
    /// The pod's or the PodGroup's UID.
    pub uid: String,
}

impl Consumer {
    /// The pod itself.
    pub fn pod(name: &str, uid: &str) -> Self {
        Consumer {
            resource: "pods",
            name: name.to_string(),
            uid: uid.to_string(),
        }
    }

    /// Whether this is the pod's PodGroup.
    pub fn is_group(&self) -> bool {
        self.resource == "podgroups"
    }

    /// The `reservedFor` entry.
    pub fn reference(&self) -> ResourceClaimConsumerReference {
        ResourceClaimConsumerReference {
            api_group: self.is_group().then(|| SCHEDULING_GROUP.to_string()),
            name: self.name.clone(),
            resource: self.resource.to_string(),
            uid: self.uid.clone(),
        }
    }

    /// Upstream's binding rule for one of the pod's claim entries: the PodGroup when `group` (the
    /// pod's, looked up only with DRAWorkloadResourceClaims on) has a claim entry with the same
    /// name, claim name and template name; otherwise the pod. The texts of the errors are
    /// upstream's.
    pub fn for_claim(
        pod: &Pod,
        pod_uid: &str,
        group: Option<&PodGroup>,
        entry: &PodResourceClaim,
    ) -> Result<Self, String> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        if entry.resource_claim_name.is_none() && entry.resource_claim_template_name.is_none() {
            return Err(format!(
                "Pod {ns}/{name} claim {}: unsupported ResourceClaim source",
                entry.name
            ));
        }
        if let Some(group) = group {
            let group_ns = group.metadata.namespace.as_deref().unwrap_or("default");
            let group_name = group.metadata.name.as_deref().unwrap_or_default();
            match pod_group_name(pod) {
                None => return Err(format!("Pod {ns}/{name} does not belong to a PodGroup")),
                Some(g) if g != group_name || ns != group_ns => {
                    return Err(format!(
                        "Pod {ns}/{name} belongs to PodGroup {ns}/{g}, not PodGroup {group_ns}/{group_name}"
                    ));
                }
                Some(_) => {}
            }
            for group_claim in group.spec.resource_claims.iter().flatten() {
                if group_claim.resource_claim_name.is_none()
                    && group_claim.resource_claim_template_name.is_none()
                {
                    return Err(format!(
                        "PodGroup {group_ns}/{group_name} claim {}: unsupported ResourceClaim source",
                        group_claim.name
                    ));
                }
                if group_claim.name == entry.name
                    && group_claim.resource_claim_name == entry.resource_claim_name
                    && group_claim.resource_claim_template_name == entry.resource_claim_template_name
                {
                    return Ok(Consumer {
                        resource: "podgroups",
                        name: group_name.to_string(),
                        uid: group.metadata.uid.clone().unwrap_or_default(),
                    });
                }
            }
        }
        Ok(Consumer::pod(name, pod_uid))
    }
}

/// Whether `status.reservedFor` contains the consumer with this UID.
pub(crate) fn is_reserved_for(claim: &ResourceClaim, uid: &str) -> bool {
    claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_ref())
        .is_some_and(|r| r.iter().any(|c| c.uid == uid))
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
    #[error(
        "ResourceClaim {namespace}/{name} was not created for Pod {pod} (neither Pod nor PodGroup {group} is the owner)"
    )]
    NotOwnerNorGroup {
        /// The pod's namespace.
        namespace: String,
        /// The claim's name.
        name: String,
        /// The pod's key.
        pod: String,
        /// The pod's PodGroup.
        group: String,
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

/// Checks a looked-up claim: exists, not being deleted, owned by the pod (or, with
/// `accept_group_owner`, its PodGroup) when generated.
pub(crate) fn check(
    pod: &Pod,
    r: &ClaimRef,
    claim: Option<Arc<ResourceClaim>>,
    accept_group_owner: bool,
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
    if r.must_check_owner && !is_for_pod(pod, &claim, accept_group_owner) {
        if let Some(group) = pod_group_name(pod).filter(|_| accept_group_owner) {
            return Err(ClaimCheckError::NotOwnerNorGroup {
                namespace: ns.to_string(),
                name: r.claim_name.clone(),
                pod: pod_key(pod),
                group: group.to_string(),
            });
        }
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

#[cfg(test)]
#[path = "claims_tests.rs"]
mod tests;
