//! `unisched sim --from-cluster KUBECONFIG`: a what-if on a copy of a live cluster.
//!
//! The live cluster is only read: every request this module sends is a `GET` (one list per
//! resource in [`COPIED`], and `/version`); there is no code path here that creates, patches or
//! deletes anything on it. What it reads is loaded into the embedded control plane, in dependency
//! order, with the fields the server owns stripped (`uid`, `resourceVersion`, `managedFields`, …):
//!
//! - bound pods stay bound on their node whatever their scheduler (they occupy capacity); pending
//!   pods of the in-process scheduler's profiles are copied without their status, so unisched
//!   decides them afresh; pending pods of other schedulers are not copied but listed as not ours;
//!   finished pods are left out (they hold nothing);
//! - claims keep their allocation and their reservations (re-pointed at the copied pods' new uids),
//!   so nothing is re-allocated; a generated claim keeps its owner, the copied pod;
//! - owner references to objects that are not copied (a pod's ReplicaSet, say) are dropped, or the
//!   garbage collector of the copy would delete the pods.
//!
//! An object the embedded server refuses is named and left out, and the copy goes on: a what-if
//! with one odd object is still worth reading, and the report says what was left out. The claim
//! controller and garbage collector start only after the whole copy is in, so neither acts on a
//! half-loaded cluster (a pod seen before its claim would get a second one).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kube::{
    Api,
    api::{DynamicObject, ListParams},
    core::GroupVersionKind,
    discovery::ApiResource,
};
use serde_json::{Value, json};
use unisched_sim::{Patch, Store, StoreError, report::FromCluster};

use crate::remote::RemoteError;

/// Why the live cluster could not be read, or an object not copied.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Connecting to the live cluster.
    #[error(transparent)]
    Connect(Box<RemoteError>),
    /// A list was refused: the message says which permission is missing.
    #[error(
        "listing {plural} on {server} is Forbidden: {message}. --from-cluster only reads: grant \
         this identity get and list on {plural} (API group {group:?}) and nothing else"
    )]
    Forbidden {
        /// The resource.
        plural: String,
        /// The API server.
        server: String,
        /// The API server's message.
        message: String,
        /// The resource's API group.
        group: String,
    },
    /// The credentials were refused.
    #[error("listing {plural} on {server}: Unauthorized ({message}); check the kubeconfig's credentials")]
    Unauthorized {
        /// The resource.
        plural: String,
        /// The API server.
        server: String,
        /// The API server's message.
        message: String,
    },
    /// Any other failed list (the error is part of the message).
    #[error("listing {plural} on {server}: {error}")]
    List {
        /// The resource.
        plural: String,
        /// The API server.
        server: String,
        /// Why.
        error: Box<kube::Error>,
    },
    /// The live cluster has no nodes.
    #[error("{server} has no nodes: nothing to simulate on")]
    NoNodes {
        /// The API server.
        server: String,
    },
    /// The embedded control plane refused the object.
    #[error(transparent)]
    Create(Box<StoreError>),
    /// A namespace's labels could not be copied onto the built-in namespace.
    #[error("copying the namespace's labels")]
    NamespaceLabels(#[source] Box<StoreError>),
    /// The status the copy keeps could not be written.
    #[error("writing its status")]
    Status(#[source] Box<StoreError>),
}

type Result<T, E = SnapshotError> = std::result::Result<T, E>;

/// What is copied, in the order it is loaded: (plural, group, version, kind).
pub(crate) const COPIED: &[(&str, &str, &str, &str)] = &[
    ("namespaces", "", "v1", "Namespace"),
    ("priorityclasses", "scheduling.k8s.io", "v1", "PriorityClass"),
    ("deviceclasses", "resource.k8s.io", "v1", "DeviceClass"),
    ("nodes", "", "v1", "Node"),
    ("resourceslices", "resource.k8s.io", "v1", "ResourceSlice"),
    (
        "resourceclaimtemplates",
        "resource.k8s.io",
        "v1",
        "ResourceClaimTemplate",
    ),
    ("poddisruptionbudgets", "policy", "v1", "PodDisruptionBudget"),
    ("pods", "", "v1", "Pod"),
    ("resourceclaims", "resource.k8s.io", "v1", "ResourceClaim"),
];

/// Metadata fields the API server owns; a create in the copy sets its own.
const SERVER_FIELDS: &[&str] = &[
    "uid",
    "resourceVersion",
    "managedFields",
    "selfLink",
    "creationTimestamp",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// Everything read from the live cluster, by plural.
pub(crate) struct Snapshot {
    /// The API server it was read from.
    pub server: String,
    /// Objects by plural, as listed.
    pub objects: BTreeMap<String, Vec<Value>>,
}

/// Connects with the kubeconfig and lists every resource of [`COPIED`]. A resource the server does
/// not serve (no DRA, say) is copied as empty; anything else that fails is an error naming the
/// resource.
pub(crate) async fn read(kubeconfig: &std::path::Path) -> Result<Snapshot> {
    let (client, server) = crate::remote::client_for(kubeconfig)
        .await
        .map_err(|e| SnapshotError::Connect(Box::new(e)))?;
    let mut objects = BTreeMap::new();
    for (plural, group, version, kind) in COPIED {
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let ar = ApiResource::from_gvk_with_plural(&gvk, plural);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let items = match api.list(&ListParams::default()).await {
            Ok(list) => list
                .items
                .into_iter()
                .filter_map(|o| serde_json::to_value(o).ok())
                .map(|mut v| {
                    // Lists leave apiVersion/kind off their items.
                    v["apiVersion"] = json!(gvk.api_version());
                    v["kind"] = json!(kind);
                    v
                })
                .collect(),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                progress(&format!(
                    "{server} does not serve {plural}.{}: none copied",
                    group_or_core(group)
                ));
                Vec::new()
            }
            Err(e) => return Err(list_error(&server, plural, group, e)),
        };
        objects.insert((*plural).to_string(), items);
    }
    Ok(Snapshot { server, objects })
}

fn group_or_core(group: &str) -> &str {
    if group.is_empty() { "core" } else { group }
}

/// The error for a failed list: Forbidden says what permission is missing (and that only reads
/// are needed); anything else names the resource and the server.
fn list_error(server: &str, plural: &str, group: &str, e: kube::Error) -> SnapshotError {
    let (plural, server) = (plural.to_string(), server.to_string());
    match e {
        kube::Error::Api(s) if s.code == 403 => SnapshotError::Forbidden {
            plural,
            server,
            message: s.message.clone(),
            group: group.to_string(),
        },
        kube::Error::Api(s) if s.code == 401 => SnapshotError::Unauthorized {
            plural,
            server,
            message: s.message.clone(),
        },
        error => SnapshotError::List {
            plural,
            server,
            error: Box::new(error),
        },
    }
}

fn progress(msg: &str) {
    crate::progress::progress(&format!("from-cluster: {msg}"));
}

fn meta_str<'a>(v: &'a Value, field: &str) -> &'a str {
    v["metadata"][field].as_str().unwrap_or_default()
}

fn display(v: &Value) -> String {
    let ns = meta_str(v, "namespace");
    let name = meta_str(v, "name");
    if ns.is_empty() {
        name.to_string()
    } else {
        format!("{ns}/{name}")
    }
}

/// References (owner references, reservations) re-pointed at the copied objects' new uids; those
/// to objects that were not copied are dropped.
fn repoint(refs: &[Value], uids: &HashMap<String, String>) -> Vec<Value> {
    refs.iter()
        .filter_map(|r| {
            let new = uids.get(r["uid"].as_str()?)?;
            let mut r = r.clone();
            r["uid"] = json!(new);
            Some(r)
        })
        .collect()
}

/// Strips the server's fields; owner references are re-pointed at copied objects (by their new
/// uid) or dropped when the owner is not in the copy.
fn sanitize(v: &Value, uids: &HashMap<String, String>) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in SERVER_FIELDS {
            m.remove(*f);
        }
        if let Some(refs) = m.get("ownerReferences").and_then(Value::as_array) {
            let kept = repoint(refs, uids);
            if kept.is_empty() {
                m.remove("ownerReferences");
            } else {
                m.insert("ownerReferences".into(), json!(kept));
            }
        }
    }
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
    }
    v
}

/// What a copied pod keeps of its status: the names of its generated claims (so the claim
/// controller does not make new ones), and for a bound pod the claim statuses the scheduler wrote.
fn pod_status(pod: &Value, bound: bool) -> Value {
    let s = &pod["status"];
    let mut out = serde_json::Map::new();
    let mut keep = vec!["resourceClaimStatuses"];
    if bound {
        keep.extend([
            "extendedResourceClaimStatus",
            "nodeAllocatableResourceClaimStatuses",
        ]);
    }
    for k in keep {
        if let Some(x) = s.get(k).filter(|x| !x.is_null()) {
            out.insert(k.into(), x.clone());
        }
    }
    Value::Object(out)
}

/// A claim's status with its reservations re-pointed at the copied pods; reservations of pods that
/// were not copied are dropped.
fn claim_status(claim: &Value, uids: &HashMap<String, String>) -> Value {
    let mut s = claim["status"].clone();
    if let Some(list) = s.get("reservedFor").and_then(Value::as_array) {
        let kept = repoint(list, uids);
        s["reservedFor"] = if kept.is_empty() { Value::Null } else { json!(kept) };
    }
    s
}

fn is_bound(pod: &Value) -> bool {
    pod["spec"]["nodeName"].as_str().is_some_and(|n| !n.is_empty())
}

fn is_finished(pod: &Value) -> bool {
    matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
}

/// Loads the snapshot into the store. `ours` are the scheduler names of the in-process profiles
/// (`None`: no in-process scheduler, every pending pod is copied).
pub(crate) fn load(store: &Store, snap: &Snapshot, ours: Option<&BTreeSet<String>>) -> FromCluster {
    let mut out = FromCluster {
        server: snap.server.clone(),
        ..FromCluster::default()
    };
    // Old uid → new uid of every copied object (owner references and reservations point at them).
    let mut uids: HashMap<String, String> = HashMap::new();
    for (plural, _, _, kind) in COPIED {
        for v in snap.objects.get(*plural).into_iter().flatten() {
            if *plural == "pods" {
                let bound = is_bound(v);
                if is_finished(v) {
                    continue;
                }
                let scheduler = v["spec"]["schedulerName"].as_str().unwrap_or("default-scheduler");
                if !bound && ours.is_some_and(|o| !o.contains(scheduler)) {
                    out.not_ours
                        .push(format!("{} (schedulerName {scheduler})", display(v)));
                    continue;
                }
                if !bound {
                    out.pending.push(display(v));
                }
            }
            match load_one(store, plural, v, &uids) {
                Ok(new_uid) => {
                    if let Some(old) = v["metadata"]["uid"].as_str() {
                        uids.insert(old.to_string(), new_uid);
                    }
                    *out.copied.entry((*kind).to_string()).or_default() += 1;
                }
                Err(e) => {
                    let line = format!("{kind} {}: {}", display(v), crate::error_chain(&e));
                    progress(&format!("left out {line}"));
                    out.rejected.push(line);
                }
            }
        }
    }
    out
}

/// Creates one object in the copy and writes the status it keeps; returns its new uid.
fn load_one(store: &Store, plural: &str, v: &Value, uids: &HashMap<String, String>) -> Result<String> {
    let ns = v["metadata"]["namespace"].as_str().filter(|n| !n.is_empty());
    let name = meta_str(v, "name");
    let obj = sanitize(v, uids);
    // What a fresh embedded control plane has already (the namespaces default, kube-system, …,
    // the system-* PriorityClasses) is its built-in equivalent: keep it; a namespace takes the
    // live cluster's labels (a namespaceSelector reads them).
    if let Some(existing) = store.try_get(plural, ns, name) {
        if plural == "namespaces" {
            let labels = v["metadata"]["labels"].clone();
            if labels.is_object() {
                store
                    .patch(
                        "namespaces",
                        None,
                        name,
                        &Patch::Merge(json!({"metadata": {"labels": labels}})),
                    )
                    .map_err(|e| SnapshotError::NamespaceLabels(Box::new(e)))?;
            }
        }
        return Ok(existing.uid().to_string());
    }
    let made = store
        .create(plural, ns, obj)
        .map_err(|e| SnapshotError::Create(Box::new(e)))?;
    let status = match plural {
        "nodes" => v["status"].clone(),
        "pods" => pod_status(v, is_bound(v)),
        "resourceclaims" => claim_status(v, uids),
        _ => Value::Null,
    };
    if status.as_object().is_some_and(|s| !s.is_empty()) {
        store
            .patch_status(plural, ns, name, &Patch::Merge(json!({"status": status})))
            .map_err(|e| SnapshotError::Status(Box::new(e)))?;
    }
    Ok(made.uid().to_string())
}

/// Fails when the snapshot has nothing to schedule onto (a wrong kubeconfig, most likely).
pub(crate) fn check_not_empty(snap: &Snapshot) -> Result<()> {
    if snap.objects.get("nodes").is_none_or(Vec::is_empty) {
        return Err(SnapshotError::NoNodes {
            server: snap.server.clone(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_strips_server_fields_and_repoints_owners() {
        let uids = HashMap::from([("old-pod".to_string(), "new-pod".to_string())]);
        let claim = json!({
            "metadata": {"name": "c", "uid": "u", "resourceVersion": "7", "managedFields": [],
                "ownerReferences": [
                    {"kind": "Pod", "name": "p", "uid": "old-pod", "controller": true},
                    {"kind": "ReplicaSet", "name": "rs", "uid": "not-copied"},
                ]},
            "spec": {"devices": {}},
            "status": {"allocation": {}},
        });
        let s = sanitize(&claim, &uids);
        let m = s["metadata"].as_object().unwrap();
        assert!(
            !m.contains_key("uid") && !m.contains_key("resourceVersion") && !m.contains_key("managedFields")
        );
        assert_eq!(
            s["metadata"]["ownerReferences"],
            json!([{"kind": "Pod", "name": "p", "uid": "new-pod", "controller": true}])
        );
        assert!(s.get("status").is_none());
        let pod = json!({"metadata": {"name": "p", "ownerReferences": [{"uid": "gone"}]}});
        assert!(sanitize(&pod, &uids)["metadata"].get("ownerReferences").is_none());
    }

    #[test]
    fn reservations_follow_the_copied_pods() {
        let uids = HashMap::from([("a".to_string(), "a2".to_string())]);
        let claim = json!({"status": {"allocation": {"devices": {}}, "reservedFor": [
            {"resource": "pods", "name": "pa", "uid": "a"},
            {"resource": "pods", "name": "pb", "uid": "b"},
        ]}});
        let s = claim_status(&claim, &uids);
        assert_eq!(
            s["reservedFor"],
            json!([{"resource": "pods", "name": "pa", "uid": "a2"}])
        );
        assert_eq!(s["allocation"], json!({"devices": {}}));
        let only_gone = json!({"status": {"reservedFor": [{"uid": "b"}]}});
        assert!(claim_status(&only_gone, &uids)["reservedFor"].is_null());
    }

    #[test]
    fn a_pending_pod_loses_its_conditions_a_bound_one_keeps_its_claim_statuses() {
        let pod = json!({"status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False"}],
            "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x"}],
            "extendedResourceClaimStatus": {"resourceClaimName": "p-ext"},
        }});
        let pending = pod_status(&pod, false);
        assert_eq!(
            pending,
            json!({"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x"}]})
        );
        assert_eq!(
            pod_status(&pod, true)["extendedResourceClaimStatus"]["resourceClaimName"],
            "p-ext"
        );
    }

    #[test]
    fn forbidden_names_the_resource_and_the_read_only_permission() {
        let e = kube::Error::Api(Box::new(
            kube::core::Status::failure(
                "pods is forbidden: User \"x\" cannot list resource \"pods\"",
                "Forbidden",
            )
            .with_code(403),
        ));
        let msg = list_error("https://h:6443", "resourceclaims", "resource.k8s.io", e).to_string();
        assert!(
            msg.contains("listing resourceclaims on https://h:6443 is Forbidden")
                && msg.contains("get and list on resourceclaims")
                && msg.contains("\"resource.k8s.io\""),
            "{msg}"
        );
    }
}
