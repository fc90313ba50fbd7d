//! The garbage collector.
//!
//! - An object whose owners (by `ownerReferences[].uid`) are all gone is deleted (background
//!   propagation); owners of kinds this server does not serve are assumed to exist. When only some
//!   owners are gone, the dangling references are removed.
//! - An owner being deleted with the `orphan` finalizer has the references to it removed from its
//!   dependents, then the finalizer removed; with `foregroundDeletion`, its dependents are deleted
//!   and the finalizer is removed once none is left.
//! - A deleted namespace takes every object in it along.

use serde_json::{Value, json};

use super::{Next, next_event};
use crate::patch::Patch;
use crate::registry::KindId;
use crate::store::{DeleteOptions, EventType, ObjectRef, Store};
use crate::util::{get_path, get_str};

/// Runs until `shutdown` changes.
pub async fn run(store: Store, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut sub = store.subscribe();
    sweep(&store);
    loop {
        match next_event(&mut sub, &mut shutdown).await {
            Next::Stop => return,
            Next::Resync => {
                sub = store.subscribe();
                sweep(&store);
            }
            Next::Event(ev) => handle(
                &store,
                ev.kind,
                ev.event_type,
                &ev.object,
                ev.source.as_ref().and_then(|s| s.previous.clone()),
            ),
        }
    }
}

fn owner_refs(v: &Value) -> Vec<Value> {
    get_path(v, &["metadata", "ownerReferences"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn finalizers(v: &Value) -> Vec<String> {
    get_path(v, &["metadata", "finalizers"])
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|f| f.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// Checks every object with owner references (after start and after falling behind).
fn sweep(store: &Store) {
    for (i, _) in store.registry().types().iter().enumerate() {
        let kind = KindId(i);
        for obj in store.snapshot(kind, None) {
            if !owner_refs(obj.value()).is_empty() {
                check_owners(store, kind, &obj);
            }
            if get_path(obj.value(), &["metadata", "deletionTimestamp"]).is_some() {
                handle_deleting_owner(store, &obj);
            }
        }
    }
}

fn handle(store: &Store, kind: KindId, event_type: EventType, obj: &ObjectRef, previous: Option<ObjectRef>) {
    match event_type {
        EventType::Deleted => {
            for (dkind, dep) in store.dependents_of(obj.uid()) {
                check_owners(store, dkind, &dep);
            }
            if store.registry().get(kind).is("", "Namespace") {
                delete_namespace_contents(store, obj.name());
            }
            // A dependent is gone: a foreground-deleting owner may now be finalizable.
            for r in owner_refs(obj.value()) {
                if let Some((_, owner)) = get_str(&r, &["uid"]).and_then(|u| store.get_by_uid(u)) {
                    handle_deleting_owner(store, &owner);
                }
            }
        }
        EventType::Added | EventType::Modified => {
            let refs = owner_refs(obj.value());
            let refs_changed = previous.as_ref().is_none_or(|p| owner_refs(p.value()) != refs);
            if !refs.is_empty() && refs_changed {
                check_owners(store, kind, obj);
            }
            if get_path(obj.value(), &["metadata", "deletionTimestamp"]).is_some() {
                handle_deleting_owner(store, obj);
            }
        }
    }
}

/// Whether the owner named by a reference still exists.
fn owner_exists(store: &Store, r: &Value) -> bool {
    let api_version = get_str(r, &["apiVersion"]).unwrap_or_default();
    let kind = get_str(r, &["kind"]).unwrap_or_default();
    let uid = get_str(r, &["uid"]).unwrap_or_default();
    if store.registry().by_api_version_kind(api_version, kind).is_none() {
        // Not served here (e.g. a ReplicaSet): cannot tell, so keep the dependent.
        return true;
    }
    store.get_by_uid(uid).is_some()
}

fn check_owners(store: &Store, kind: KindId, dep: &ObjectRef) {
    let refs = owner_refs(dep.value());
    if refs.is_empty() {
        return;
    }
    let solid: Vec<Value> = refs.iter().filter(|r| owner_exists(store, r)).cloned().collect();
    let rt = store.registry().get(kind);
    let ns = dep.namespace().to_string();
    let name = dep.name().to_string();
    if solid.is_empty() {
        let res = store.delete_in(kind, &ns, &name, &DeleteOptions::default());
        if let Err(e) = res
            && !e.is_not_found()
        {
            tracing::warn!(resource = rt.plural, %ns, %name, error = %e, "garbage collector could not delete a dependent");
        }
    } else if solid.len() < refs.len() {
        let patch = Patch::Merge(json!({"metadata": {"ownerReferences": solid}}));
        if let Err(e) = store.patch_in(kind, &ns, &name, &patch, false, false)
            && !e.is_not_found()
        {
            tracing::warn!(resource = rt.plural, %ns, %name, error = %e, "garbage collector could not drop dangling owner references");
        }
    }
}

fn remove_finalizer(store: &Store, obj: &ObjectRef, finalizer: &str) {
    let Some((kind, cur)) = store.get_by_uid(obj.uid()) else {
        return;
    };
    let left: Vec<String> = finalizers(cur.value())
        .into_iter()
        .filter(|f| f != finalizer)
        .collect();
    let patch = Patch::Merge(
        json!({"metadata": {"finalizers": left, "resourceVersion": cur.resource_version().to_string()}}),
    );
    if let Err(e) = store.patch_in(kind, cur.namespace(), cur.name(), &patch, false, false)
        && !e.is_not_found()
        && !e.is_conflict()
    {
        tracing::warn!(error = %e, finalizer, "garbage collector could not remove a finalizer");
    }
}

fn handle_deleting_owner(store: &Store, owner: &ObjectRef) {
    let fins = finalizers(owner.value());
    let uid = owner.uid().to_string();
    if fins.iter().any(|f| f == "orphan") {
        for (dkind, dep) in store.dependents_of(&uid) {
            let kept: Vec<Value> = owner_refs(dep.value())
                .into_iter()
                .filter(|r| get_str(r, &["uid"]) != Some(uid.as_str()))
                .collect();
            let patch = Patch::Merge(json!({"metadata": {"ownerReferences": kept}}));
            if let Err(e) = store.patch_in(dkind, dep.namespace(), dep.name(), &patch, false, false)
                && !e.is_not_found()
            {
                tracing::warn!(error = %e, "garbage collector could not orphan a dependent");
            }
        }
        remove_finalizer(store, owner, "orphan");
    } else if fins.iter().any(|f| f == "foregroundDeletion") {
        let deps = store.dependents_of(&uid);
        if deps.is_empty() {
            remove_finalizer(store, owner, "foregroundDeletion");
            return;
        }
        for (dkind, dep) in deps {
            if get_path(dep.value(), &["metadata", "deletionTimestamp"]).is_none()
                && let Err(e) = store.delete_in(dkind, dep.namespace(), dep.name(), &DeleteOptions::default())
                && !e.is_not_found()
            {
                tracing::warn!(error = %e, "garbage collector could not delete a dependent in the foreground");
            }
        }
    }
}

fn delete_namespace_contents(store: &Store, namespace: &str) {
    for (i, t) in store.registry().types().iter().enumerate() {
        if !t.namespaced {
            continue;
        }
        for obj in store.snapshot(KindId(i), Some(namespace)) {
            if let Err(e) = store.delete_in(KindId(i), namespace, obj.name(), &DeleteOptions::default())
                && !e.is_not_found()
            {
                tracing::warn!(error = %e, namespace, "could not delete namespace content");
            }
        }
    }
}
