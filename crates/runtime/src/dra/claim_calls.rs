//! The claim calls the DynamicResources plugin's writes are made of, as async functions over one
//! [`ApiWriter`]: the binding threads block on them and PreBind on the I/O runtime awaits them.
//!
//! Two rules protect the devices of running pods when the API misbehaves:
//! - a write whose answer was lost ([`WriteError::outcome_unknown`]) is resolved by reading the
//!   object back: if it already holds what we wrote, the write succeeded;
//! - an undo (taking a pod out of `reservedFor`, deleting its extended-resource claim, clearing its
//!   DRA pod status) is refused while that pod is bound to a node, or when we cannot tell: the
//!   devices of a bound pod are never released by the scheduler.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Api, api::Patch};
use serde_json::{Value, json};
use unisched_plugins::{DraApiError, dynamic_resources::merge_patch};

use crate::{
    metrics::Metrics,
    writer::{ApiWriter, WriteError, patch_for_metadata},
};

/// The finalizer that keeps an allocated claim from disappearing under a running pod.
pub const DELETE_PROTECTION_FINALIZER: &str = "resource.kubernetes.io/delete-protection";

/// The claim calls behind [`super::RuntimeDraApi`], as async functions over one writer: the binding
/// threads block on them, and PreBind on the I/O runtime awaits them.
pub(super) struct ClaimCalls<'a> {
    pub(super) writer: &'a ApiWriter,
    pub(super) metrics: &'a Metrics,
}

impl ClaimCalls<'_> {
    pub(super) async fn get_claim(&self, ns: &str, name: &str) -> Result<Option<ResourceClaim>, DraApiError> {
        claims(self.writer, ns)
            .get_opt(name)
            .await
            .map_err(|e| DraApiError::Other(e.to_string()))
    }

    /// The claim as it is on the server while `current`'s resourceVersion holds: `current`
    /// itself, read only when it carries no version to make a precondition of.
    async fn at_version<'c>(
        &self,
        ns: &str,
        name: &str,
        current: &'c ResourceClaim,
    ) -> Result<Cow<'c, ResourceClaim>, DraApiError> {
        if current
            .metadata
            .resource_version
            .as_deref()
            .is_some_and(|rv| !rv.is_empty())
        {
            return Ok(Cow::Borrowed(current));
        }
        self.get_claim(ns, name)
            .await?
            .map(Cow::Owned)
            .ok_or_else(|| DraApiError::NotFound(format!("{ns}/{name}")))
    }

    /// The finalizer patch: `current`'s list with ours added or removed, conditioned on
    /// `current`'s resourceVersion (so the list is the server's when it applies).
    pub(super) async fn finalizers(
        &self,
        ns: &str,
        name: &str,
        current: &ResourceClaim,
        add: bool,
    ) -> Result<ResourceClaim, DraApiError> {
        let current = self.at_version(ns, name, current).await?;
        let rv = current.metadata.resource_version.clone().unwrap_or_default();
        let mut list = current.metadata.finalizers.clone().unwrap_or_default();
        list.retain(|f| f != DELETE_PROTECTION_FINALIZER);
        if add {
            list.push(DELETE_PROTECTION_FINALIZER.to_string());
        }
        let patch = Patch::Merge(json!({"metadata": {"resourceVersion": rv, "finalizers": list}}));
        let result = self.patch_claim(ns, name, None, &patch, "resourceclaims").await;
        match result {
            // Conditioned on `rv`, the patch changed nothing but the metadata.
            Ok(metadata) => Ok(ResourceClaim {
                metadata,
                ..current.into_owned()
            }),
            Err(e) if e.outcome_unknown() => {
                let want = json!({ "finalizers": list });
                self.resolve(ns, name, e, |c| {
                    let have = json!({ "finalizers": c.metadata.finalizers.clone().unwrap_or_default() });
                    have == want
                })
                .await
            }
            Err(e) => Err(to_dra(e)),
        }
    }

    /// One patch of a claim (or its `subresource`) through the writer, answered with the
    /// claim's new metadata only (see [`patch_for_metadata`]).
    async fn patch_claim(
        &self,
        ns: &str,
        name: &str,
        subresource: Option<&str>,
        patch: &Patch<Value>,
        label: &str,
    ) -> Result<ObjectMeta, WriteError> {
        let client = self.writer.client();
        self.writer
            .write("patch", label, || {
                patch_for_metadata::<ResourceClaim>(client, Some(ns), name, subresource, patch)
            })
            .await
    }

    /// Resolves a claim write whose outcome is unknown by reading the claim: `applied` decides
    /// whether it already holds what was written. Not applied: a conflict (the caller re-reads
    /// and recomputes); unreadable: still unknown, reported as such.
    async fn resolve(
        &self,
        ns: &str,
        name: &str,
        err: WriteError,
        applied: impl Fn(&ResourceClaim) -> bool,
    ) -> Result<ResourceClaim, DraApiError> {
        match self.get_claim(ns, name).await {
            Ok(Some(c)) if applied(&c) => {
                tracing::debug!(claim = %format!("{ns}/{name}"), "write outcome resolved by reading: applied");
                Ok(c)
            }
            Ok(Some(_)) => Err(DraApiError::Conflict(format!("{err}; not applied"))),
            Ok(None) => Err(DraApiError::NotFound(format!("{ns}/{name}"))),
            Err(read) => Err(DraApiError::Other(format!("{err}; reading back: {read}"))),
        }
    }

    /// The node a pod is bound to (`None`: unbound or gone, or recreated with another UID).
    pub(super) async fn bound_node(
        &self,
        ns: &str,
        name: &str,
        uid: &str,
    ) -> Result<Option<String>, DraApiError> {
        let pod = Api::<Pod>::namespaced(self.writer.client().clone(), ns)
            .get_opt(name)
            .await
            .map_err(|e| DraApiError::Other(format!("reading pod {ns}: {e}")))?;
        Ok(pod
            .filter(|p| uid.is_empty() || p.metadata.uid.as_deref() == Some(uid))
            .and_then(|p| p.spec?.node_name)
            .filter(|n| !n.is_empty()))
    }

    /// Refuses an undo that would release what a bound pod holds: `consumers` are the pods the
    /// write takes away from a claim. A pod we cannot read counts as bound.
    pub(super) async fn refuse_undo_for_bound(
        &self,
        ns: &str,
        claim: &str,
        consumers: &[(String, String)],
    ) -> Result<(), DraApiError> {
        for (pod, uid) in consumers {
            let bound = self
                .bound_node(ns, pod, uid)
                .await
                .map_err(|e| DraApiError::Other(format!("claim {ns}/{claim} kept: {e}")))?;
            if let Some(node) = bound {
                return Err(DraApiError::Other(format!(
                    "claim {ns}/{claim} kept: pod {ns}/{pod} is bound to node {node:?}"
                )));
            }
        }
        Ok(())
    }

    pub(super) async fn patch_claim_status(
        &self,
        namespace: &str,
        name: &str,
        current: &ResourceClaim,
        status: Value,
    ) -> Result<ResourceClaim, DraApiError> {
        let current = self.at_version(namespace, name, current).await?;
        let resource_version = current.metadata.resource_version.clone().unwrap_or_default();
        // An undo: pods leave `reservedFor`. Refused while any of them is bound. (Checked against
        // `current`, which is the server's object whenever the write applies.)
        if let Some(reserved) = status.get("reservedFor") {
            let kept: Vec<&str> = reserved
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r.get("uid")?.as_str())
                .collect();
            let leaving: Vec<(String, String)> = pod_consumers(&current)
                .into_iter()
                .filter(|(_, uid)| !kept.contains(&uid.as_str()))
                .collect();
            if let Err(refused) = self.refuse_undo_for_bound(namespace, name, &leaving).await {
                // Refused on what the caller saw. If the claim changed since, the write would
                // conflict anyway: say so, so that the caller re-reads and decides again.
                let fresh = self.get_claim(namespace, name).await?;
                if fresh
                    .as_ref()
                    .and_then(|c| c.metadata.resource_version.as_deref())
                    != Some(resource_version.as_str())
                {
                    return Err(DraApiError::Conflict(format!(
                        "claim {namespace}/{name} changed since it was read"
                    )));
                }
                return Err(refused);
            }
        }
        let patch =
            Patch::Merge(json!({"metadata": {"resourceVersion": resource_version}, "status": status}));
        let result = self
            .patch_claim(namespace, name, Some("status"), &patch, "resourceclaims/status")
            .await;
        let claim = match result {
            // Conditioned on `resource_version`, the server's result is `current` with the patch
            // applied and the reply's metadata.
            Ok(metadata) => match with_status_patch(&current, metadata, &status) {
                Some(claim) => claim,
                None => self
                    .get_claim(namespace, name)
                    .await?
                    .ok_or_else(|| DraApiError::NotFound(format!("{namespace}/{name}")))?,
            },
            Err(e) if e.outcome_unknown() => {
                self.resolve(namespace, name, e, |c| {
                    let have = serde_json::to_value(&c.status).unwrap_or(Value::Null);
                    merge_applied(&have, &status)
                })
                .await?
            }
            Err(e) => return Err(to_dra(e)),
        };
        count_allocations(self.metrics, &claim);
        Ok(claim)
    }
}

/// The pods in a claim's `reservedFor`, as (name, uid).
pub(super) fn pod_consumers(claim: &ResourceClaim) -> Vec<(String, String)> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_ref())
        .into_iter()
        .flatten()
        .filter(|r| r.resource == "pods")
        .map(|r| (r.name.clone(), r.uid.clone()))
        .collect()
}

fn count_allocations(metrics: &Metrics, claim: &ResourceClaim) {
    let Some(results) = claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
    else {
        return;
    };
    let requests = claim
        .spec
        .as_ref()
        .map(|s| s.devices.clone().unwrap_or_default().requests.unwrap_or_default());
    for r in results.results.iter().flatten() {
        let top = r.request.split('/').next().unwrap_or(&r.request);
        let class = requests
            .iter()
            .flatten()
            .find(|q| q.name == top)
            .and_then(|q| {
                q.exactly
                    .as_ref()
                    .map(|e| e.device_class_name.clone())
                    .or_else(|| {
                        let sub = r.request.split('/').nth(1)?;
                        q.first_available
                            .as_ref()?
                            .iter()
                            .find(|s| s.name == sub)
                            .map(|s| s.device_class_name.clone())
                    })
            })
            .unwrap_or_default();
        metrics
            .dra_allocations
            .with_label_values(&[&r.driver, &class])
            .inc();
    }
}

/// `current` after the status merge patch `status` applied, with the server's `metadata`; `None`
/// when the merged status does not decode (the server accepted it, so the caller reads it back).
fn with_status_patch(current: &ResourceClaim, metadata: ObjectMeta, status: &Value) -> Option<ResourceClaim> {
    let mut merged = serde_json::to_value(&current.status).ok()?;
    merge_patch(&mut merged, status);
    Some(ResourceClaim {
        metadata,
        spec: current.spec.clone(),
        status: serde_json::from_value(merged).ok()?,
    })
}

/// True when `have` already holds every field of the merge patch `patch` (`null` = absent).
fn merge_applied(have: &Value, patch: &Value) -> bool {
    match patch {
        Value::Object(fields) => fields.iter().all(|(k, v)| {
            let h = have.get(k).unwrap_or(&Value::Null);
            if v.is_null() {
                h.is_null()
            } else {
                merge_applied(h, v)
            }
        }),
        other => have == other,
    }
}

pub(super) fn to_dra(e: WriteError) -> DraApiError {
    match e {
        WriteError::Conflict(m) => DraApiError::Conflict(m),
        WriteError::NotFound(m) => DraApiError::NotFound(m),
        other => DraApiError::Other(other.to_string()),
    }
}

/// The claims of `ns`, through `writer`'s client.
pub(super) fn claims(writer: &ApiWriter, ns: &str) -> Api<ResourceClaim> {
    Api::namespaced(writer.client().clone(), ns)
}
