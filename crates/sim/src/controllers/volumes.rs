//! A small PersistentVolume controller, after kube-controller-manager's `persistentvolume-binder`,
//! plus the external provisioner a CSI driver would run. The scheduler only *decides* volume
//! bindings; without this controller nothing would complete them and VolumeBinding's PreBind
//! would wait until its timeout.
//!
//! - **Completing a binding**: a PV whose `spec.claimRef` names an unbound claim (the scheduler's
//!   PreBind wrote it, or a user pre-bound the PV) gets the claim bound to it: the claim's
//!   `spec.volumeName`, both objects' `status.phase: Bound`, the claim's capacity and access modes.
//! - **Immediate binding**: an unbound claim whose class is not `WaitForFirstConsumer` (or that has
//!   no class) is bound to the smallest available PV of its class that fits (access modes, volume
//!   mode, capacity); when none does and the class has a provisioner, a PV is provisioned.
//! - **Provisioning**: a claim annotated `volume.kubernetes.io/selected-node` whose class has a
//!   provisioner (not `kubernetes.io/no-provisioner`) gets a new PV of the requested size, with node
//!   affinity to that node's `kubernetes.io/hostname`, bound to the claim.
//!
//! - **Reclaiming**: when a bound claim is deleted, its PV is deleted (reclaim policy `Delete`, the
//!   default of provisioned volumes) or becomes `Released` (`Retain`, the default of hand-made
//!   ones) and is not handed out again.
//!
//! Not modelled: recycling, the Failed phase, label selectors on claims, expansion. Every write is a merge patch or a create; conflicts are retried a few times.

use serde_json::{Value, json};
use unisched_resource::Quantity;

use super::{Next, next_event};
use crate::patch::Patch;
use crate::store::{EventType, ObjectRef, Store};
use crate::util::{get_path, get_str};

/// The annotation the scheduler sets on a claim to ask for provisioning on a node.
pub const SELECTED_NODE_ANNOTATION: &str = "volume.kubernetes.io/selected-node";
/// The provisioner of classes whose volumes are created by hand.
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

const BETA_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";
const BIND_COMPLETED_ANNOTATION: &str = "pv.kubernetes.io/bind-completed";
const BOUND_BY_CONTROLLER_ANNOTATION: &str = "pv.kubernetes.io/bound-by-controller";
const PROVISIONED_BY_ANNOTATION: &str = "pv.kubernetes.io/provisioned-by";
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Runs until `shutdown` changes.
pub async fn run(store: Store, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let (Ok(pvs), Ok(pvcs), Ok(classes)) = (
        store.resolve("persistentvolumes"),
        store.resolve("persistentvolumeclaims"),
        store.resolve("storageclasses"),
    ) else {
        tracing::info!("persistent volumes are not served: the PV controller does not run");
        return;
    };
    let mut sub = store.subscribe();
    sync_all(&store);
    loop {
        match next_event(&mut sub, &mut shutdown).await {
            Next::Stop => return,
            Next::Resync => {
                sub = store.subscribe();
                sync_all(&store);
            }
            Next::Event(ev) => {
                if ev.event_type == EventType::Deleted {
                    if ev.kind == pvcs {
                        reclaim_for(&store, &ev.object);
                    }
                    continue;
                }
                if ev.kind == pvcs {
                    sync_claim(&store, ev.object.namespace(), ev.object.name());
                } else if ev.kind == pvs {
                    sync_volume(&store, &ev.object);
                } else if ev.kind == classes {
                    sync_all(&store);
                }
            }
        }
    }
}

/// Syncs every claim and volume once (startup, resync, a class appeared).
pub fn sync_all(store: &Store) {
    if let Ok(list) = store.list_all("persistentvolumes", None) {
        for pv in list {
            sync_volume(store, &pv);
        }
    }
    if let Ok(list) = store.list_all("persistentvolumeclaims", None) {
        for pvc in list {
            sync_claim(store, pvc.namespace(), pvc.name());
        }
    }
}

fn storage_of(v: Option<&Value>) -> i128 {
    v.and_then(Value::as_str)
        .and_then(|s| Quantity::parse(s).ok())
        .map_or(0, |q| q.nanos())
}

fn claim_class(pvc: &Value) -> &str {
    get_str(pvc, &["spec", "storageClassName"])
        .or_else(|| get_str(pvc, &["metadata", "annotations", BETA_CLASS_ANNOTATION]))
        .unwrap_or_default()
}

fn string_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

/// Whether the PV's claimRef names this claim (and, when it carries a UID, this incarnation).
fn claim_ref_is(pv: &Value, pvc: &ObjectRef) -> bool {
    let Some(r) = get_path(pv, &["spec", "claimRef"]) else {
        return false;
    };
    get_str(r, &["name"]) == Some(pvc.name())
        && get_str(r, &["namespace"]).unwrap_or("default") == pvc.namespace()
        && get_str(r, &["uid"]).is_none_or(|u| u.is_empty() || u == pvc.uid())
}

fn sync_claim(store: &Store, ns: &str, name: &str) {
    for _ in 0..5 {
        match try_sync_claim(store, ns, name) {
            Ok(()) => return,
            Err(e) if e.is_conflict() => continue,
            Err(e) if e.is_not_found() => return,
            Err(e) => {
                tracing::warn!(claim = name, error = %e, "PV controller could not sync a claim");
                return;
            }
        }
    }
}

/// Reclaims the PVs bound to a claim that was deleted.
fn reclaim_for(store: &Store, pvc: &ObjectRef) {
    let Ok(list) = store.list_all("persistentvolumes", None) else {
        return;
    };
    for pv in list {
        let bound_to_it = get_path(pv.value(), &["spec", "claimRef"])
            .is_some_and(|r| get_str(r, &["uid"]).is_some_and(|u| u == pvc.uid()));
        if bound_to_it {
            reclaim(store, &pv);
        }
    }
}

/// A PV whose claim is gone: deleted (`Delete`) or Released (anything else).
fn reclaim(store: &Store, pv: &ObjectRef) {
    let policy = get_str(pv.value(), &["spec", "persistentVolumeReclaimPolicy"]).unwrap_or("Retain");
    let result = if policy == "Delete" {
        store
            .delete("persistentvolumes", None, pv.name(), &Default::default())
            .map(|_| ())
    } else if get_str(pv.value(), &["status", "phase"]) != Some("Released") {
        store
            .patch_status(
                "persistentvolumes",
                None,
                pv.name(),
                &Patch::Merge(json!({"status": {"phase": "Released"}})),
            )
            .map(|_| ())
    } else {
        Ok(())
    };
    if let Err(e) = result
        && !e.is_not_found()
    {
        tracing::debug!(pv = pv.name(), error = %e, "could not reclaim a PV");
    }
}

fn sync_volume(store: &Store, pv: &ObjectRef) {
    let v = pv.value();
    if let Some(r) = get_path(v, &["spec", "claimRef"]) {
        let ns = get_str(r, &["namespace"]).unwrap_or("default").to_string();
        let name = get_str(r, &["name"]).unwrap_or_default().to_string();
        let uid = get_str(r, &["uid"]).unwrap_or_default();
        match store.try_get("persistentvolumeclaims", Some(&ns), &name) {
            // The claim this PV was bound to is gone (or was recreated).
            None if !uid.is_empty() => reclaim(store, pv),
            Some(c) if !uid.is_empty() && c.uid() != uid => reclaim(store, pv),
            _ if !name.is_empty() => sync_claim(store, &ns, &name),
            _ => {}
        }
    } else if get_str(v, &["status", "phase"]).is_none() {
        let patch = Patch::Merge(json!({"status": {"phase": "Available"}}));
        if let Err(e) = store.patch_status("persistentvolumes", None, pv.name(), &patch) {
            tracing::debug!(pv = pv.name(), error = %e, "could not mark a PV Available");
        }
    }
}

fn try_sync_claim(store: &Store, ns: &str, name: &str) -> Result<(), crate::StoreError> {
    let pvc = store.get("persistentvolumeclaims", Some(ns), name)?;
    let c = pvc.value();
    if get_path(c, &["metadata", "deletionTimestamp"]).is_some() {
        return Ok(());
    }
    if let Some(volume) = get_str(c, &["spec", "volumeName"]).filter(|s| !s.is_empty()) {
        // Bound or pre-bound: make sure both sides say so.
        let Some(pv) = store.try_get("persistentvolumes", None, volume) else {
            return Ok(());
        };
        if get_path(pv.value(), &["spec", "claimRef"]).is_none() {
            let pv = set_claim_ref(store, &pv, &pvc)?;
            return complete(store, &pv, &pvc);
        }
        if claim_ref_is(pv.value(), &pvc) {
            return complete(store, &pv, &pvc);
        }
        return Ok(());
    }
    // A PV that already names this claim (the scheduler's PreBind, or a pre-bound PV).
    if let Some(pv) = store
        .list_all("persistentvolumes", None)?
        .into_iter()
        .find(|pv| claim_ref_is(pv.value(), &pvc))
    {
        return complete(store, &pv, &pvc);
    }
    let class_name = claim_class(c);
    let class = (!class_name.is_empty())
        .then(|| store.try_get("storageclasses", None, class_name))
        .flatten();
    if !class_name.is_empty() && class.is_none() {
        return Ok(());
    }
    let provisioner = class
        .as_ref()
        .and_then(|k| get_str(k.value(), &["provisioner"]))
        .filter(|p| *p != NO_PROVISIONER)
        .map(str::to_string);
    let delayed = class
        .as_ref()
        .is_some_and(|k| get_str(k.value(), &["volumeBindingMode"]) == Some("WaitForFirstConsumer"));
    if delayed {
        let Some(node) = get_str(c, &["metadata", "annotations", SELECTED_NODE_ANNOTATION]) else {
            return Ok(());
        };
        let Some(provisioner) = provisioner else {
            return Ok(());
        };
        let pv = provision(store, &pvc, class_name, &provisioner, Some(node))?;
        return complete(store, &pv, &pvc);
    }
    if let Some(pv) = best_available(store, &pvc, class_name)? {
        let pv = set_claim_ref(store, &pv, &pvc)?;
        return complete(store, &pv, &pvc);
    }
    if let Some(provisioner) = provisioner {
        let pv = provision(store, &pvc, class_name, &provisioner, None)?;
        return complete(store, &pv, &pvc);
    }
    Ok(())
}

/// The smallest available PV of the class that fits the claim.
fn best_available(
    store: &Store,
    pvc: &ObjectRef,
    class: &str,
) -> Result<Option<ObjectRef>, crate::StoreError> {
    let c = pvc.value();
    let request = storage_of(get_path(c, &["spec", "resources", "requests", "storage"]));
    let modes = string_list(get_path(c, &["spec", "accessModes"]));
    let mode = get_str(c, &["spec", "volumeMode"]).unwrap_or("Filesystem");
    let mut best: Option<(i128, ObjectRef)> = None;
    for pv in store.list_all("persistentvolumes", None)? {
        let v = pv.value();
        if get_path(v, &["spec", "claimRef"]).is_some()
            || get_path(v, &["metadata", "deletionTimestamp"]).is_some()
            || get_str(v, &["spec", "storageClassName"]).unwrap_or_default() != class
            || get_str(v, &["spec", "volumeMode"]).unwrap_or("Filesystem") != mode
            || matches!(get_str(v, &["status", "phase"]), Some("Released" | "Failed"))
        {
            continue;
        }
        let pv_modes = string_list(get_path(v, &["spec", "accessModes"]));
        if !modes.iter().all(|m| pv_modes.contains(m)) {
            continue;
        }
        let capacity = storage_of(get_path(v, &["spec", "capacity", "storage"]));
        if capacity < request {
            continue;
        }
        if best.as_ref().is_none_or(|(cap, _)| capacity < *cap) {
            best = Some((capacity, pv));
        }
    }
    Ok(best.map(|(_, pv)| pv))
}

fn claim_ref_json(pvc: &ObjectRef) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "namespace": pvc.namespace(),
        "name": pvc.name(),
        "uid": pvc.uid(),
        "resourceVersion": pvc.resource_version().to_string(),
    })
}

fn set_claim_ref(store: &Store, pv: &ObjectRef, pvc: &ObjectRef) -> Result<ObjectRef, crate::StoreError> {
    let patch = Patch::Merge(json!({
        "metadata": {
            "resourceVersion": pv.resource_version().to_string(),
            "annotations": {BOUND_BY_CONTROLLER_ANNOTATION: "yes"},
        },
        "spec": {"claimRef": claim_ref_json(pvc)},
    }));
    store.patch("persistentvolumes", None, pv.name(), &patch)
}

/// Creates a PV for the claim, bound to it; on `node` when given.
fn provision(
    store: &Store,
    pvc: &ObjectRef,
    class: &str,
    provisioner: &str,
    node: Option<&str>,
) -> Result<ObjectRef, crate::StoreError> {
    let name = format!("pvc-{}", pvc.uid());
    if let Some(existing) = store.try_get("persistentvolumes", None, &name) {
        return Ok(existing);
    }
    let c = pvc.value();
    let size = get_path(c, &["spec", "resources", "requests", "storage"])
        .cloned()
        .unwrap_or(json!("0"));
    let modes = get_path(c, &["spec", "accessModes"])
        .cloned()
        .unwrap_or(json!(["ReadWriteOnce"]));
    let mut pv = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": name,
            "annotations": {PROVISIONED_BY_ANNOTATION: provisioner},
        },
        "spec": {
            "capacity": {"storage": size},
            "accessModes": modes,
            "storageClassName": class,
            "persistentVolumeReclaimPolicy": "Delete",
            "volumeMode": get_str(c, &["spec", "volumeMode"]).unwrap_or("Filesystem"),
            "claimRef": claim_ref_json(pvc),
            "csi": {"driver": provisioner, "volumeHandle": name},
        },
        "status": {"phase": "Bound"},
    });
    if let Some(node) = node {
        let hostname = store
            .try_get("nodes", None, node)
            .and_then(|n| get_str(n.value(), &["metadata", "labels", HOSTNAME_LABEL]).map(str::to_string))
            .unwrap_or_else(|| node.to_string());
        pv["spec"]["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": [hostname]}]}
        ]}});
    }
    match store.create("persistentvolumes", None, pv) {
        Ok(o) => Ok(o),
        Err(e) if e.is_conflict() => store.get("persistentvolumes", None, &name),
        Err(e) => Err(e),
    }
}

/// Binds the claim to the PV that names it and marks both Bound.
fn complete(store: &Store, pv: &ObjectRef, pvc: &ObjectRef) -> Result<(), crate::StoreError> {
    let c = pvc.value();
    // A hand-written claimRef may lack the UID; record it, so a recreated claim is not mistaken for
    // this one.
    let pv = if get_str(pv.value(), &["spec", "claimRef", "uid"]).is_none_or(str::is_empty) {
        &set_claim_ref(store, pv, pvc)?
    } else {
        pv
    };
    if get_str(pv.value(), &["status", "phase"]) != Some("Bound") {
        store.patch_status(
            "persistentvolumes",
            None,
            pv.name(),
            &Patch::Merge(json!({"status": {"phase": "Bound"}})),
        )?;
    }
    let mut current = pvc.clone();
    if get_str(c, &["spec", "volumeName"]) != Some(pv.name())
        || get_str(c, &["metadata", "annotations", BIND_COMPLETED_ANNOTATION]) != Some("yes")
    {
        current = store.patch(
            "persistentvolumeclaims",
            Some(pvc.namespace()),
            pvc.name(),
            &Patch::Merge(json!({
                "metadata": {
                    "resourceVersion": pvc.resource_version().to_string(),
                    "annotations": {BIND_COMPLETED_ANNOTATION: "yes"},
                },
                "spec": {"volumeName": pv.name()},
            })),
        )?;
    }
    if get_str(current.value(), &["status", "phase"]) != Some("Bound") {
        let capacity = get_path(pv.value(), &["spec", "capacity"])
            .cloned()
            .unwrap_or(json!({}));
        let modes = get_path(pv.value(), &["spec", "accessModes"])
            .cloned()
            .unwrap_or(json!([]));
        store.patch_status(
            "persistentvolumeclaims",
            Some(pvc.namespace()),
            pvc.name(),
            &Patch::Merge(json!({"status": {"phase": "Bound", "capacity": capacity, "accessModes": modes}})),
        )?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn store() -> Store {
        crate::ApiServer::builder()
            .controllers(false)
            .build()
            .store()
            .clone()
    }

    fn class(s: &Store, name: &str, provisioner: &str, mode: &str) {
        s.create(
            "storageclasses",
            None,
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
                   "provisioner": provisioner, "volumeBindingMode": mode}),
        )
        .unwrap();
    }

    fn pv(s: &Store, name: &str, class: &str, size: &str, claim: Option<&str>) {
        let mut v = json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "storageClassName": class,
                     "hostPath": {"path": "/tmp"}}});
        if let Some(c) = claim {
            v["spec"]["claimRef"] = json!({"namespace": "default", "name": c});
        }
        s.create("persistentvolumes", None, v).unwrap();
    }

    fn pvc(s: &Store, name: &str, class: &str, size: &str, annotations: Value) {
        s.create(
            "persistentvolumeclaims",
            Some("default"),
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                   "metadata": {"name": name, "namespace": "default", "annotations": annotations},
                   "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                            "resources": {"requests": {"storage": size}}}}),
        )
        .unwrap();
    }

    fn bound(s: &Store, claim: &str) -> Option<String> {
        let c = s.get("persistentvolumeclaims", Some("default"), claim).unwrap();
        (get_str(c.value(), &["status", "phase"]) == Some("Bound")).then(|| {
            get_str(c.value(), &["spec", "volumeName"])
                .unwrap_or_default()
                .to_string()
        })
    }

    #[test]
    fn table() {
        struct Case {
            name: &'static str,
            setup: fn(&Store),
            claim: &'static str,
            want: Option<&'static str>,
        }
        let cases = [
            Case {
                name: "claimRef written by the scheduler completes the binding",
                setup: |s| {
                    class(s, "local", NO_PROVISIONER, "WaitForFirstConsumer");
                    pv(s, "pv1", "local", "10Gi", Some("data"));
                    pvc(s, "data", "local", "1Gi", json!({}));
                },
                claim: "data",
                want: Some("pv1"),
            },
            Case {
                name: "delayed claim without a decision stays pending",
                setup: |s| {
                    class(s, "local", NO_PROVISIONER, "WaitForFirstConsumer");
                    pv(s, "pv1", "local", "10Gi", None);
                    pvc(s, "data", "local", "1Gi", json!({}));
                },
                claim: "data",
                want: None,
            },
            Case {
                name: "immediate claim gets the smallest fitting PV",
                setup: |s| {
                    class(s, "std", NO_PROVISIONER, "Immediate");
                    pv(s, "big", "std", "100Gi", None);
                    pv(s, "small", "std", "5Gi", None);
                    pv(s, "tiny", "std", "1Gi", None);
                    pvc(s, "data", "std", "2Gi", json!({}));
                },
                claim: "data",
                want: Some("small"),
            },
            Case {
                name: "immediate claim with a provisioner and no PV is provisioned",
                setup: |s| {
                    class(s, "csi", "csi.example.com", "Immediate");
                    pvc(s, "data", "csi", "2Gi", json!({}));
                },
                claim: "data",
                want: Some("pvc-"),
            },
            Case {
                name: "selected node triggers provisioning",
                setup: |s| {
                    class(s, "csi", "csi.example.com", "WaitForFirstConsumer");
                    pvc(s, "data", "csi", "2Gi", json!({SELECTED_NODE_ANNOTATION: "n1"}));
                },
                claim: "data",
                want: Some("pvc-"),
            },
            Case {
                name: "no-provisioner class is never provisioned",
                setup: |s| {
                    class(s, "local", NO_PROVISIONER, "WaitForFirstConsumer");
                    pvc(s, "data", "local", "2Gi", json!({SELECTED_NODE_ANNOTATION: "n1"}));
                },
                claim: "data",
                want: None,
            },
        ];
        for case in cases {
            let s = store();
            (case.setup)(&s);
            sync_all(&s);
            sync_all(&s);
            let got = bound(&s, case.claim);
            match case.want {
                None => assert_eq!(got, None, "{}", case.name),
                Some(prefix) => {
                    let got = got.unwrap_or_else(|| panic!("{}: not bound", case.name));
                    assert!(got.starts_with(prefix), "{}: bound to {got}", case.name);
                    let pv = s.get("persistentvolumes", None, &got).unwrap();
                    assert_eq!(
                        get_str(pv.value(), &["status", "phase"]),
                        Some("Bound"),
                        "{}",
                        case.name
                    );
                    assert_eq!(
                        get_str(pv.value(), &["spec", "claimRef", "name"]),
                        Some(case.claim),
                        "{}",
                        case.name
                    );
                }
            }
        }
    }

    #[test]
    fn deleting_a_claim_reclaims_its_volume() {
        let s = store();
        class(&s, "csi", "csi.example.com", "WaitForFirstConsumer");
        class(&s, "local", NO_PROVISIONER, "WaitForFirstConsumer");
        pvc(
            &s,
            "dynamic",
            "csi",
            "1Gi",
            json!({SELECTED_NODE_ANNOTATION: "n1"}),
        );
        pv(&s, "static", "local", "1Gi", Some("manual"));
        pvc(&s, "manual", "local", "1Gi", json!({}));
        sync_all(&s);
        let provisioned = bound(&s, "dynamic").unwrap();
        assert_eq!(bound(&s, "manual").as_deref(), Some("static"));
        for claim in ["dynamic", "manual"] {
            s.delete(
                "persistentvolumeclaims",
                Some("default"),
                claim,
                &Default::default(),
            )
            .unwrap();
        }
        sync_all(&s);
        assert!(
            s.try_get("persistentvolumes", None, &provisioned).is_none(),
            "reclaim policy Delete"
        );
        let kept = s.get("persistentvolumes", None, "static").unwrap();
        assert_eq!(get_str(kept.value(), &["status", "phase"]), Some("Released"));
        // A released PV is not handed out again.
        pvc(&s, "again", "local", "1Gi", json!({}));
        sync_all(&s);
        assert_eq!(bound(&s, "again"), None);
    }

    #[test]
    fn provisioned_pv_has_node_affinity_and_size() {
        let s = store();
        s.create(
            "nodes",
            None,
            json!({"apiVersion": "v1", "kind": "Node",
                   "metadata": {"name": "n1", "labels": {HOSTNAME_LABEL: "host-1"}}}),
        )
        .unwrap();
        class(&s, "csi", "csi.example.com", "WaitForFirstConsumer");
        pvc(&s, "data", "csi", "3Gi", json!({SELECTED_NODE_ANNOTATION: "n1"}));
        sync_all(&s);
        let name = bound(&s, "data").unwrap();
        let pv = s.get("persistentvolumes", None, &name).unwrap();
        let v = pv.value();
        assert_eq!(get_str(v, &["spec", "capacity", "storage"]), Some("3Gi"));
        assert_eq!(
            get_path(v, &["spec", "nodeAffinity", "required", "nodeSelectorTerms"]).unwrap()[0]["matchExpressions"]
                [0]["values"],
            json!(["host-1"])
        );
        assert_eq!(
            get_str(v, &["metadata", "annotations", PROVISIONED_BY_ANNOTATION]),
            Some("csi.example.com")
        );
    }
}
