//! The ResourceClaim controller, after kube-controller-manager's `resourceclaim` controller:
//!
//! - For each `pod.spec.resourceClaims[]` entry naming a `resourceClaimTemplateName`, creates a
//!   ResourceClaim from the template (named `<pod>-<entry>-<suffix>`, controller owner reference to the
//!   pod, annotation `resource.kubernetes.io/pod-claim-name: <entry>`, labels/annotations from the
//!   template metadata, spec from the template's `spec.spec`) and records it in
//!   `pod.status.resourceClaimStatuses`. An orphan claim created earlier for the same pod entry is
//!   reused instead of creating another. A missing template is recorded as a Warning event
//!   `FailedResourceClaimCreation` on the pod, in upstream's wording.
//!
//! Upstream's suffix is random (the API server's `generateName`). Here it is a hash of a seed, the
//! namespace, the pod and the entry (with a counter to step past a name that is taken), so the same
//! scenario run with the same seed gives the same claim names, and reports compare line by line.
//! - For a scheduled pod, reserves allocated claims that are not yet reserved for it.
//! - Removes deleted, replaced or finished pods from `status.reservedFor`. When the list becomes empty
//!   and the claim carries the `resource.kubernetes.io/delete-protection` finalizer, clears
//!   `status.allocation` and removes the finalizer (also for a claim being deleted).
//! - Deletes an unreserved generated claim whose pod is finished or replaced (the garbage collector
//!   deletes those of deleted pods).

use serde_json::{Map, Value, json};

use super::{Next, group_claims, is_terminal, next_event, record_event};
use crate::patch::Patch;
use crate::store::{DeleteOptions, EventType, ObjectRef, Store};
use crate::util::{get_path, get_str};

/// Annotation on generated claims naming the pod's claim entry.
pub const POD_CLAIM_NAME_ANNOTATION: &str = "resource.kubernetes.io/pod-claim-name";
/// Finalizer the scheduler puts on claims it allocates.
pub const DELETE_PROTECTION_FINALIZER: &str = "resource.kubernetes.io/delete-protection";

const COMPONENT: &str = "resource_claim";

/// Runs until `shutdown` changes, naming claims with seed 0 (see [`run_seeded`]).
pub async fn run(store: Store, shutdown: tokio::sync::watch::Receiver<bool>) {
    run_seeded(store, 0, shutdown).await;
}

/// Runs until `shutdown` changes; `seed` decides the suffixes of generated claim names.
pub async fn run_seeded(store: Store, seed: u64, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    // PodGroups are optional: without them no claim is a group's.
    let pod_groups = store.resolve("podgroups").ok();
    let (Ok(pods), Ok(claims), Ok(templates)) = (
        store.resolve("pods"),
        store.resolve("resourceclaims"),
        store.resolve("resourceclaimtemplates"),
    ) else {
        tracing::info!("resource claims are not served: the ResourceClaim controller does not run");
        return;
    };
    let mut sub = store.subscribe();
    resync(&store, seed);
    loop {
        match next_event(&mut sub, &mut shutdown).await {
            Next::Stop => return,
            Next::Resync => {
                sub = store.subscribe();
                resync(&store, seed);
            }
            Next::Event(ev) => {
                if ev.kind == pods {
                    let deleted = ev.event_type == EventType::Deleted;
                    on_pod(&store, &ev.object, deleted, seed);
                } else if ev.kind == claims {
                    if ev.event_type != EventType::Deleted {
                        sync_claim(&store, &ev.object);
                    }
                } else if ev.kind == templates && ev.event_type == EventType::Added {
                    // Pods and PodGroups that waited for this template.
                    for pod in store.snapshot(pods, Some(ev.object.namespace())) {
                        if pod_uses_template(pod.value(), ev.object.name()) {
                            sync_pod(&store, &pod, seed);
                        }
                    }
                    if let Some(kind) = pod_groups {
                        for group in store.snapshot(kind, Some(ev.object.namespace())) {
                            if group_claims::uses_template(group.value(), ev.object.name()) {
                                on_pod_group(&store, pods, &group, false, seed);
                            }
                        }
                    }
                } else if Some(ev.kind) == pod_groups {
                    on_pod_group(
                        &store,
                        pods,
                        &ev.object,
                        ev.event_type == EventType::Deleted,
                        seed,
                    );
                }
            }
        }
    }
}

/// A PodGroup changed: its claims are made (or, deleted, its reservations released by syncing
/// the claims reserved for it), and its members' statuses follow.
fn on_pod_group(store: &Store, pods: crate::registry::KindId, group: &ObjectRef, deleted: bool, seed: u64) {
    let ns = group.namespace();
    if deleted {
        if let Ok(claims) = store.list_all("resourceclaims", Some(ns)) {
            for claim in claims {
                if group_claims::is_reserved_for(claim.value(), group.uid()) {
                    sync_claim(store, &claim);
                }
            }
        }
        return;
    }
    if !group_claims::has_claims(group.value()) {
        return;
    }
    group_claims::sync_pod_group(store, group, seed);
    for pod in store.snapshot(pods, Some(ns)) {
        if group_claims::is_member(pod.value(), group.name()) && has_claims(pod.value()) {
            sync_pod(store, &pod, seed);
        }
    }
}

fn resync(store: &Store, seed: u64) {
    if let Ok(groups) = store.list_all("podgroups", None) {
        for group in groups {
            if group_claims::has_claims(group.value()) {
                group_claims::sync_pod_group(store, &group, seed);
            }
        }
    }
    if let Ok(list) = store.list_all("pods", None) {
        for pod in list {
            if has_claims(pod.value()) {
                on_pod(store, &pod, false, seed);
            }
        }
    }
    if let Ok(list) = store.list_all("resourceclaims", None) {
        for claim in list {
            sync_claim(store, &claim);
        }
    }
}

fn pod_claims(pod: &Value) -> Vec<Value> {
    get_path(pod, &["spec", "resourceClaims"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn has_claims(pod: &Value) -> bool {
    !pod_claims(pod).is_empty()
}

fn pod_uses_template(pod: &Value, template: &str) -> bool {
    pod_claims(pod)
        .iter()
        .any(|c| get_str(c, &["resourceClaimTemplateName"]) == Some(template))
}

/// Whether it is certain that the pod's containers will never run (upstream `isPodDone`).
fn is_pod_done(pod: &Value) -> bool {
    is_terminal(pod)
        || (get_path(pod, &["metadata", "deletionTimestamp"]).is_some()
            && get_str(pod, &["spec", "nodeName"]).unwrap_or_default().is_empty())
}

/// The claim name a pod entry refers to: `Some(Some(name))`, `Some(None)` when the controller decided
/// no claim is needed, `None` when a template claim was not created yet.
fn claim_name_for(pod: &Value, entry: &Value) -> Option<Option<String>> {
    if let Some(n) = get_str(entry, &["resourceClaimName"]) {
        return Some(Some(n.to_string()));
    }
    let entry_name = get_str(entry, &["name"]).unwrap_or_default();
    let statuses = get_path(pod, &["status", "resourceClaimStatuses"]).and_then(Value::as_array)?;
    let s = statuses
        .iter()
        .find(|s| get_str(s, &["name"]) == Some(entry_name))?;
    Some(get_str(s, &["resourceClaimName"]).map(str::to_string))
}

fn controller_pod(claim: &Value) -> Option<(String, String)> {
    get_path(claim, &["metadata", "ownerReferences"])
        .and_then(Value::as_array)?
        .iter()
        .find_map(|o| {
            (o.get("controller") == Some(&json!(true))
                && get_str(o, &["apiVersion"]) == Some("v1")
                && get_str(o, &["kind"]) == Some("Pod"))
            .then(|| {
                (
                    get_str(o, &["name"]).unwrap_or_default().to_string(),
                    get_str(o, &["uid"]).unwrap_or_default().to_string(),
                )
            })
        })
}

fn on_pod(store: &Store, pod: &ObjectRef, deleted: bool, seed: u64) {
    if !has_claims(pod.value()) {
        return;
    }
    let ns = pod.namespace();
    if deleted || is_pod_done(pod.value()) {
        // Release reservations held by this pod.
        if let Ok(claims) = store.list_all("resourceclaims", Some(ns)) {
            for claim in claims {
                let reserved = get_path(claim.value(), &["status", "reservedFor"]).and_then(Value::as_array);
                let owned = controller_pod(claim.value()).is_some_and(|(_, uid)| uid == pod.uid());
                if owned
                    || reserved.is_some_and(|r| r.iter().any(|e| get_str(e, &["uid"]) == Some(pod.uid())))
                {
                    sync_claim(store, &claim);
                }
            }
        }
        return;
    }
    sync_pod(store, pod, seed);
}

fn sync_pod(store: &Store, pod: &ObjectRef, seed: u64) {
    let pod_v = pod.value();
    if get_path(pod_v, &["metadata", "deletionTimestamp"]).is_some() {
        return;
    }
    let ns = pod.namespace().to_string();
    let group = group_claims::group_of(store, pod_v);
    let mut new_statuses: Vec<Value> = Vec::new();
    for entry in pod_claims(pod_v) {
        let entry_name = get_str(&entry, &["name"]).unwrap_or_default().to_string();
        if let Some(g) = group
            .as_ref()
            .filter(|g| group_claims::is_group_entry(g.value(), &entry))
        {
            // One of the group's claims: a template entry uses the claim made for the PodGroup
            // (none yet: the PodGroup's sync records it, and the pod is synced again then).
            if get_str(&entry, &["resourceClaimTemplateName"]).is_some()
                && let Some(name) = group_claims::generated_claim(g.value(), &entry_name)
                && claim_name_for(pod_v, &entry) != Some(Some(name.clone()))
            {
                new_statuses.push(json!({"name": entry_name, "resourceClaimName": name}));
            }
            continue;
        }
        let Some(template) = get_str(&entry, &["resourceClaimTemplateName"]).map(str::to_string) else {
            continue;
        };
        match claim_name_for(pod_v, &entry) {
            Some(None) => continue,
            Some(Some(existing)) => {
                if let Some(c) = store.try_get("resourceclaims", Some(&ns), &existing)
                    && controller_pod(c.value()).is_some_and(|(_, uid)| uid == pod.uid())
                {
                    continue;
                }
            }
            None => {}
        }
        let claim = match find_generated_claim(store, pod, &entry_name) {
            Some(c) => c,
            None => match create_claim(store, &ClaimOwner::pod(pod), &entry_name, &template, seed) {
                Ok(c) => c,
                Err(msg) => {
                    record_event(
                        store,
                        pod_v,
                        "Warning",
                        "FailedResourceClaimCreation",
                        &format!("PodResourceClaim {entry_name}: {msg}"),
                        COMPONENT,
                    );
                    continue;
                }
            },
        };
        new_statuses.push(json!({"name": entry_name, "resourceClaimName": claim.name()}));
    }
    if !new_statuses.is_empty() {
        let patch = Patch::Strategic(json!({"status": {"resourceClaimStatuses": new_statuses}}));
        if let Err(e) = store.patch_status("pods", Some(&ns), pod.name(), &patch) {
            tracing::warn!(pod = pod.name(), error = %e, "could not record generated resource claims in the pod status");
        }
    }
    // A pod bound without the scheduler (spec.nodeName set at creation) gets its claims reserved here.
    let Some(current) = store.try_get("pods", Some(&ns), pod.name()) else {
        return;
    };
    if get_str(current.value(), &["spec", "nodeName"])
        .unwrap_or_default()
        .is_empty()
    {
        return;
    }
    for entry in pod_claims(current.value()) {
        let Some(Some(name)) = claim_name_for(current.value(), &entry) else {
            continue;
        };
        let consumer = match group
            .as_ref()
            .filter(|g| group_claims::is_group_entry(g.value(), &entry))
        {
            Some(g) => group_claims::reference(g),
            None => json!({"resource": "pods", "name": current.name(), "uid": current.uid()}),
        };
        let consumer_uid = get_str(&consumer, &["uid"]).unwrap_or_default().to_string();
        let Some(claim) = store.try_get("resourceclaims", Some(&ns), &name) else {
            continue;
        };
        let c = claim.value();
        let reserved: Vec<Value> = get_path(c, &["status", "reservedFor"])
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if get_path(c, &["status", "allocation"]).is_some()
            && !reserved
                .iter()
                .any(|r| get_str(r, &["uid"]) == Some(consumer_uid.as_str()))
            && reserved.len() < 256
        {
            let mut list = reserved;
            list.push(consumer);
            let patch = Patch::Merge(
                json!({"metadata": {"resourceVersion": claim.resource_version().to_string()},
                                            "status": {"reservedFor": list}}),
            );
            if let Err(e) = store.patch_status("resourceclaims", Some(&ns), &name, &patch) {
                tracing::debug!(claim = name, error = %e, "could not reserve a claim for a bound pod");
            }
        }
    }
}

fn find_generated_claim(store: &Store, pod: &ObjectRef, entry_name: &str) -> Option<ObjectRef> {
    store
        .dependents_of(pod.uid())
        .into_iter()
        .map(|(_, c)| c)
        .find(|c| {
            c.get("kind").and_then(Value::as_str) == Some("ResourceClaim")
                && controller_pod(c.value()).is_some_and(|(_, uid)| uid == pod.uid())
                && get_str(c.value(), &["metadata", "annotations", POD_CLAIM_NAME_ANNOTATION])
                    == Some(entry_name)
        })
}

/// What a generated claim is controlled by: a pod, or a PodGroup for the group's own claims.
pub(super) struct ClaimOwner<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
}

impl<'a> ClaimOwner<'a> {
    fn pod(pod: &'a ObjectRef) -> Self {
        ClaimOwner {
            api_version: "v1",
            kind: "Pod",
            namespace: pod.namespace(),
            name: pod.name(),
            uid: pod.uid(),
        }
    }
}

/// Creates the claim for `owner`'s entry `entry_name` from `template`: named
/// `<owner>-<entry>-<suffix>`, controlled by the owner, annotated with the entry's name.
pub(super) fn create_claim(
    store: &Store,
    owner: &ClaimOwner<'_>,
    entry_name: &str,
    template: &str,
    seed: u64,
) -> Result<ObjectRef, ClaimCreationError> {
    let ns = owner.namespace;
    let tpl = store
        .try_get("resourceclaimtemplates", Some(ns), template)
        .ok_or_else(|| ClaimCreationError::TemplateNotFound {
            template: template.to_string(),
        })?;
    let tmeta = get_path(tpl.value(), &["spec", "metadata"])
        .cloned()
        .unwrap_or(json!({}));
    let mut annotations: Map<String, Value> = tmeta
        .get("annotations")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    annotations.insert(POD_CLAIM_NAME_ANNOTATION.into(), json!(entry_name));
    let mut generate = format!("{}-{entry_name}-", owner.name);
    let max_base = 57;
    if generate.len() > max_base {
        let owner_part = owner.name.len() * max_base / generate.len();
        let entry_part = entry_name.len() * max_base / generate.len();
        generate = format!("{}-{}", &owner.name[..owner_part], &entry_name[..entry_part]);
    }
    let mut claim = json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": generate,
            "namespace": ns,
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": owner.api_version, "kind": owner.kind, "name": owner.name, "uid": owner.uid,
                "controller": true, "blockOwnerDeletion": true,
            }],
        },
    });
    if let Some(labels) = tmeta.get("labels") {
        claim["metadata"]["labels"] = labels.clone();
    }
    if let Some(spec) = get_path(tpl.value(), &["spec", "spec"]) {
        claim["spec"] = spec.clone();
    }
    for attempt in 0..MAX_NAME_ATTEMPTS {
        let name = format!(
            "{generate}{}",
            name_suffix(seed, &[ns, owner.name, entry_name], attempt)
        );
        claim["metadata"]["name"] = json!(name);
        match store.create("resourceclaims", Some(ns), claim.clone()) {
            Ok(c) => return Ok(c),
            Err(crate::StoreError::AlreadyExists { .. }) => continue,
            Err(source) => {
                return Err(ClaimCreationError::Create {
                    generate_name: generate,
                    source,
                });
            }
        }
    }
    Err(ClaimCreationError::NoFreeName {
        generate_name: generate,
    })
}

/// Why a claim could not be created from a pod's template (recorded as a Warning event on the
/// pod, in upstream's wording).
#[derive(Debug, thiserror::Error)]
pub(super) enum ClaimCreationError {
    /// The template does not exist. Upstream reads templates through a lister, whose NotFound
    /// names the singular resource.
    #[error(
        "resource claim template {template:?}: resourceclaimtemplate.resource.k8s.io {template:?} not found"
    )]
    TemplateNotFound {
        /// The template's name.
        template: String,
    },
    /// The store refused the claim.
    #[error("create ResourceClaim {generate_name}: {source}")]
    Create {
        /// The claim's name prefix.
        generate_name: String,
        /// The store's error.
        #[source]
        source: crate::StoreError,
    },
    /// Every generated name tried was taken.
    #[error("create ResourceClaim {generate_name}: no free name after {MAX_NAME_ATTEMPTS} attempts")]
    NoFreeName {
        /// The claim's name prefix.
        generate_name: String,
    },
}

/// How many suffixes [`create_claim`] tries before giving up.
const MAX_NAME_ATTEMPTS: u32 = 32;

/// The characters of upstream's generated-name suffixes (no vowels, no look-alikes).
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// A five-character suffix derived from the seed, the parts and the attempt (FNV-1a, so it is the
/// same on every platform and build).
fn name_suffix(seed: u64, parts: &[&str], attempt: u32) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    eat(&seed.to_le_bytes());
    for p in parts {
        eat(p.as_bytes());
        eat(&[0]);
    }
    eat(&attempt.to_le_bytes());
    let n = SUFFIX_ALPHABET.len() as u64;
    (0..5)
        .map(|_| {
            let c = SUFFIX_ALPHABET[(h % n) as usize];
            h /= n;
            char::from(c)
        })
        .collect()
}

fn sync_claim(store: &Store, claim: &ObjectRef) {
    for _ in 0..5 {
        match try_sync_claim(store, claim.namespace(), claim.name()) {
            Ok(()) => return,
            Err(e) if e.is_conflict() => continue,
            Err(e) if e.is_not_found() => return,
            Err(e) => {
                tracing::warn!(claim = claim.name(), error = %e, "ResourceClaim controller could not sync a claim");
                return;
            }
        }
    }
}

fn try_sync_claim(store: &Store, ns: &str, name: &str) -> Result<(), crate::StoreError> {
    let claim = store.get("resourceclaims", Some(ns), name)?;
    let c = claim.value();
    let reserved: Vec<Value> = get_path(c, &["status", "reservedFor"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let valid: Vec<Value> = reserved
        .iter()
        .filter(|r| {
            let group = get_str(r, &["apiGroup"]).unwrap_or_default();
            if group == group_claims::SCHEDULING_GROUP && get_str(r, &["resource"]) == Some("podgroups") {
                return group_claims::reservation_is_live(store, ns, r);
            }
            if !group.is_empty() || get_str(r, &["resource"]) != Some("pods") {
                return true;
            }
            let pod_name = get_str(r, &["name"]).unwrap_or_default();
            match store.try_get("pods", Some(ns), pod_name) {
                Some(p) => p.uid() == get_str(r, &["uid"]).unwrap_or_default() && !is_pod_done(p.value()),
                None => false,
            }
        })
        .cloned()
        .collect();
    let has_finalizer = get_path(c, &["metadata", "finalizers"])
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|x| x == DELETE_PROTECTION_FINALIZER));
    let rv = claim.resource_version().to_string();
    let mut current = claim.clone();
    if valid.len() < reserved.len() {
        let mut status = json!({"reservedFor": if valid.is_empty() { Value::Null } else { json!(valid) }});
        if valid.is_empty() && has_finalizer {
            status["allocation"] = Value::Null;
        }
        current = store.patch_status(
            "resourceclaims",
            Some(ns),
            name,
            &Patch::Merge(json!({"metadata": {"resourceVersion": rv}, "status": status})),
        )?;
        if has_finalizer && get_path(current.value(), &["status", "allocation"]).is_none() {
            current = remove_protection(store, &current)?;
        }
    } else if has_finalizer && get_path(c, &["metadata", "deletionTimestamp"]).is_some() && valid.is_empty() {
        if get_path(c, &["status", "allocation"]).is_some() {
            current = store.patch_status(
                "resourceclaims",
                Some(ns),
                name,
                &Patch::Merge(json!({"metadata": {"resourceVersion": rv}, "status": {"allocation": null}})),
            )?;
        }
        current = remove_protection(store, &current)?;
    }
    if valid.is_empty()
        && let Some((pod_name, pod_uid)) = controller_pod(current.value())
        && let Some(pod) = store.try_get("pods", Some(ns), &pod_name)
        && (pod.uid() != pod_uid || is_pod_done(pod.value()))
    {
        let opts = DeleteOptions {
            precondition_uid: Some(current.uid().to_string()),
            ..DeleteOptions::default()
        };
        match store.delete("resourceclaims", Some(ns), name, &opts) {
            Ok(_) => {}
            Err(e) if e.is_not_found() || e.is_conflict() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn remove_protection(store: &Store, claim: &ObjectRef) -> Result<ObjectRef, crate::StoreError> {
    let left: Vec<Value> = get_path(claim.value(), &["metadata", "finalizers"])
        .and_then(Value::as_array)
        .map(|f| {
            f.iter()
                .filter(|x| *x != DELETE_PROTECTION_FINALIZER)
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let patch = Patch::Merge(
        json!({"metadata": {"finalizers": left, "resourceVersion": claim.resource_version().to_string()}}),
    );
    match store.patch("resourceclaims", Some(claim.namespace()), claim.name(), &patch) {
        Ok(o) => Ok(o),
        // Removing the last finalizer of a claim being deleted removes the claim.
        Err(e) if e.is_not_found() => Ok(claim.clone()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_suffix_depends_on_seed_parts_and_attempt_only() {
        let a = name_suffix(1, &["default", "p", "gpu"], 0);
        assert_eq!(a.len(), 5);
        assert!(a.bytes().all(|b| SUFFIX_ALPHABET.contains(&b)), "{a}");
        assert_eq!(a, name_suffix(1, &["default", "p", "gpu"], 0));
        assert_ne!(a, name_suffix(2, &["default", "p", "gpu"], 0));
        assert_ne!(a, name_suffix(1, &["default", "p", "gpu"], 1));
        assert_ne!(a, name_suffix(1, &["default", "q", "gpu"], 0));
        // Part boundaries count: "pg"+"pu" is not "p"+"gpu".
        assert_ne!(
            name_suffix(1, &["default", "pg", "pu"], 0),
            name_suffix(1, &["default", "p", "gpu"], 0)
        );
    }
}
