//! Mirrors `events.k8s.io/v1` Events into core `v1` Events.
//!
//! In a real cluster both APIs are views of one stored object, so `kubectl get events` (core v1)
//! shows what a scheduler records through `events.k8s.io/v1` (as kube-rs's `Recorder` does). Here
//! the two are stored separately; this controller keeps a core copy of each `events.k8s.io` Event
//! (same namespace and name, fields renamed: `regarding` → `involvedObject`, `note` → `message`,
//! `reportingController` → `reportingComponent`/`source.component`, `deprecated*` → the core
//! timestamps and count) and deletes it with the original. Core Events are not mirrored back.

use serde_json::{Map, Value, json};

use super::{Next, next_event};
use crate::store::{DeleteOptions, EventType, ObjectRef, Store};
use crate::util::get_str;

/// Runs until `shutdown` changes.
pub async fn run(store: Store, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let (Some(new_events), Some(_)) = (
        store.registry().by_gvr("events.k8s.io", "v1", "events"),
        store.registry().by_gvr("", "v1", "events"),
    ) else {
        return;
    };
    // Only events.k8s.io Events matter here; a subscription to that kind alone is not woken by
    // every other write.
    let mut sub = store.subscribe_kind(new_events);
    resync(&store);
    loop {
        match next_event(&mut sub, &mut shutdown).await {
            Next::Stop => return,
            Next::Resync => {
                sub = store.subscribe_kind(new_events);
                resync(&store);
            }
            Next::Event(ev) if ev.kind == new_events => match ev.event_type {
                EventType::Deleted => {
                    let _ = store.delete(
                        "v1/events",
                        Some(ev.object.namespace()),
                        ev.object.name(),
                        &DeleteOptions::default(),
                    );
                }
                _ => mirror(&store, &ev.object),
            },
            Next::Event(_) => {}
        }
    }
}

fn resync(store: &Store) {
    if let Ok(all) = store.list_all("events.events.k8s.io", None) {
        for e in all {
            mirror(store, &e);
        }
    }
}

/// The core/v1 form of an events.k8s.io/v1 Event.
pub fn to_core(e: &Value) -> Value {
    let mut meta = Map::new();
    if let Some(m) = e.get("metadata").and_then(Value::as_object) {
        for k in ["name", "namespace", "labels", "annotations"] {
            if let Some(v) = m.get(k) {
                meta.insert(k.into(), v.clone());
            }
        }
    }
    let mut core = json!({"apiVersion": "v1", "kind": "Event", "metadata": meta});
    let copy = |core: &mut Value, from: &str, to: &str| {
        if let Some(v) = e.get(from).filter(|v| !v.is_null()) {
            core[to] = v.clone();
        }
    };
    copy(&mut core, "regarding", "involvedObject");
    copy(&mut core, "related", "related");
    copy(&mut core, "reason", "reason");
    copy(&mut core, "note", "message");
    copy(&mut core, "type", "type");
    copy(&mut core, "action", "action");
    copy(&mut core, "eventTime", "eventTime");
    copy(&mut core, "series", "series");
    copy(&mut core, "reportingController", "reportingComponent");
    copy(&mut core, "reportingInstance", "reportingInstance");
    copy(&mut core, "deprecatedSource", "source");
    copy(&mut core, "deprecatedFirstTimestamp", "firstTimestamp");
    copy(&mut core, "deprecatedLastTimestamp", "lastTimestamp");
    copy(&mut core, "deprecatedCount", "count");
    if core.get("involvedObject").is_none() {
        core["involvedObject"] = json!({});
    }
    if core.get("source").is_none()
        && let Some(c) = get_str(e, &["reportingController"])
    {
        core["source"] = json!({"component": c});
    }
    core
}

fn mirror(store: &Store, e: &ObjectRef) {
    let core = to_core(e.value());
    let ns = e.namespace();
    let res = match store.try_get("v1/events", Some(ns), e.name()) {
        Some(_) => store.update("v1/events", Some(ns), core),
        None => store.create("v1/events", Some(ns), core),
    };
    if let Err(err) = res {
        tracing::debug!(event = e.name(), error = %err, "could not mirror an events.k8s.io Event");
    }
}
