//! The PodGroup half of the ResourceClaim controller, after kube-controller-manager 1.37's
//! DRAWorkloadResourceClaims support:
//!
//! - For each `podGroup.spec.resourceClaims[]` entry naming a `resourceClaimTemplateName`, one claim
//!   is made for the whole group: named `<podgroup>-<entry>-<suffix>`, controlled by the PodGroup,
//!   annotated with the entry's name, and recorded in `podGroup.status.resourceClaimStatuses`. An
//!   earlier claim of the group for the same entry is reused. A missing template is a Warning event
//!   `FailedResourceClaimCreation` on the PodGroup.
//! - A member pod whose claim entry equals one of its group's entries in all three fields uses the
//!   group's claim (its `status.resourceClaimStatuses` names it, for a template entry) and gets no
//!   claim of its own; the claim is reserved for the PodGroup, not the pod.
//! - A reservation for a PodGroup that is gone (or replaced by another of the same name) is removed
//!   like a gone pod's; the claim is then deallocated, and the garbage collector deletes a claim
//!   the gone PodGroup controlled.
//!
//! The embedded control plane always does this: it serves PodGroups, and the matching gate is
//! unisched's own default (see the features crate).

use serde_json::{Value, json};

use super::claims::{ClaimOwner, POD_CLAIM_NAME_ANNOTATION, create_claim};
use super::record_event;
use crate::patch::Patch;
use crate::store::{ObjectRef, Store};
use crate::util::{get_path, get_str};

/// The API group of PodGroups.
pub(super) const SCHEDULING_GROUP: &str = "scheduling.k8s.io";

const COMPONENT: &str = "resource_claim";

fn entries(group: &Value) -> Vec<Value> {
    get_path(group, &["spec", "resourceClaims"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Whether the PodGroup lists claims.
pub(super) fn has_claims(group: &Value) -> bool {
    !entries(group).is_empty()
}

/// Whether one of the PodGroup's entries names `template`.
pub(super) fn uses_template(group: &Value, template: &str) -> bool {
    entries(group)
        .iter()
        .any(|e| get_str(e, &["resourceClaimTemplateName"]) == Some(template))
}

/// Whether the pod belongs to the PodGroup named `group`.
pub(super) fn is_member(pod: &Value, group: &str) -> bool {
    get_str(pod, &["spec", "schedulingGroup", "podGroupName"]) == Some(group)
}

/// The pod's PodGroup, if it belongs to one that exists.
pub(super) fn group_of(store: &Store, pod: &Value) -> Option<ObjectRef> {
    let name = get_str(pod, &["spec", "schedulingGroup", "podGroupName"])?;
    let ns = get_str(pod, &["metadata", "namespace"]).unwrap_or("default");
    store.try_get("podgroups", Some(ns), name)
}

/// Whether a pod's claim entry is one of the group's: all three fields equal.
pub(super) fn is_group_entry(group: &Value, pod_entry: &Value) -> bool {
    let field = |v: &Value, f: &str| get_str(v, &[f]).map(str::to_string);
    entries(group).iter().any(|e| {
        field(e, "name") == field(pod_entry, "name")
            && field(e, "resourceClaimName") == field(pod_entry, "resourceClaimName")
            && field(e, "resourceClaimTemplateName") == field(pod_entry, "resourceClaimTemplateName")
    })
}

/// The claim the group got for its template entry `entry_name`, as its status records it.
pub(super) fn generated_claim(group: &Value, entry_name: &str) -> Option<String> {
    get_path(group, &["status", "resourceClaimStatuses"])
        .and_then(Value::as_array)?
        .iter()
        .find(|s| get_str(s, &["name"]) == Some(entry_name))
        .and_then(|s| get_str(s, &["resourceClaimName"]))
        .map(str::to_string)
}

/// The `reservedFor` entry of the PodGroup.
pub(super) fn reference(group: &ObjectRef) -> Value {
    json!({"apiGroup": SCHEDULING_GROUP, "resource": "podgroups", "name": group.name(), "uid": group.uid()})
}

/// Whether the claim's `reservedFor` holds the PodGroup with this UID.
pub(super) fn is_reserved_for(claim: &Value, group_uid: &str) -> bool {
    get_path(claim, &["status", "reservedFor"])
        .and_then(Value::as_array)
        .is_some_and(|r| {
            r.iter().any(|e| {
                get_str(e, &["resource"]) == Some("podgroups") && get_str(e, &["uid"]) == Some(group_uid)
            })
        })
}

/// Whether a PodGroup reservation still names a PodGroup that exists (same UID, not being deleted).
pub(super) fn reservation_is_live(store: &Store, ns: &str, reservation: &Value) -> bool {
    let name = get_str(reservation, &["name"]).unwrap_or_default();
    store.try_get("podgroups", Some(ns), name).is_some_and(|g| {
        g.uid() == get_str(reservation, &["uid"]).unwrap_or_default()
            && get_path(g.value(), &["metadata", "deletionTimestamp"]).is_none()
    })
}

fn controlled_by(claim: &Value, uid: &str) -> bool {
    get_path(claim, &["metadata", "ownerReferences"])
        .and_then(Value::as_array)
        .is_some_and(|owners| {
            owners
                .iter()
                .any(|o| o.get("controller") == Some(&json!(true)) && get_str(o, &["uid"]) == Some(uid))
        })
}

fn find_claim_of(store: &Store, group: &ObjectRef, entry_name: &str) -> Option<ObjectRef> {
    store
        .dependents_of(group.uid())
        .into_iter()
        .map(|(_, c)| c)
        .find(|c| {
            c.get("kind").and_then(Value::as_str) == Some("ResourceClaim")
                && controlled_by(c.value(), group.uid())
                && get_str(c.value(), &["metadata", "annotations", POD_CLAIM_NAME_ANNOTATION])
                    == Some(entry_name)
        })
}

/// Makes the group's template claims that do not exist yet and records them in its status.
pub(super) fn sync_pod_group(store: &Store, group: &ObjectRef, seed: u64) {
    let g = group.value();
    if get_path(g, &["metadata", "deletionTimestamp"]).is_some() {
        return;
    }
    let ns = group.namespace();
    let mut statuses: Vec<Value> = Vec::new();
    for entry in entries(g) {
        let entry_name = get_str(&entry, &["name"]).unwrap_or_default().to_string();
        let Some(template) = get_str(&entry, &["resourceClaimTemplateName"]).map(str::to_string) else {
            continue;
        };
        if let Some(existing) = generated_claim(g, &entry_name)
            && store
                .try_get("resourceclaims", Some(ns), &existing)
                .is_some_and(|c| controlled_by(c.value(), group.uid()))
        {
            continue;
        }
        let owner = ClaimOwner {
            api_version: "scheduling.k8s.io/v1beta1",
            kind: "PodGroup",
            namespace: ns,
            name: group.name(),
            uid: group.uid(),
        };
        let claim = match find_claim_of(store, group, &entry_name) {
            Some(c) => c,
            None => match create_claim(store, &owner, &entry_name, &template, seed) {
                Ok(c) => c,
                Err(e) => {
                    record_event(
                        store,
                        g,
                        "Warning",
                        "FailedResourceClaimCreation",
                        &format!("PodGroupResourceClaim {entry_name}: {e}"),
                        COMPONENT,
                    );
                    continue;
                }
            },
        };
        statuses.push(json!({"name": entry_name, "resourceClaimName": claim.name()}));
    }
    if statuses.is_empty() {
        return;
    }
    // Merge with what the status already records, by entry name.
    let mut merged: Vec<Value> = get_path(g, &["status", "resourceClaimStatuses"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for s in statuses {
        merged.retain(|m| get_str(m, &["name"]) != get_str(&s, &["name"]));
        merged.push(s);
    }
    merged.sort_by(|a, b| get_str(a, &["name"]).cmp(&get_str(b, &["name"])));
    let patch = Patch::Merge(json!({"status": {"resourceClaimStatuses": merged}}));
    if let Err(e) = store.patch_status("podgroups", Some(ns), group.name(), &patch) {
        tracing::warn!(podgroup = group.name(), error = %e, "could not record the PodGroup's claims in its status");
    }
}
