//! Mirrors `events.k8s.io/v1` Events into core `v1` Events.
//!
//! In a real cluster both APIs are views of one stored object, so `kubectl get events` (core v1)
//! shows what a scheduler records through `events.k8s.io/v1` (as kube-rs's `Recorder` does). Here
//! the two are stored separately; this controller keeps a core copy of each `events.k8s.io` Event
//! (same namespace and name, fields renamed: `regarding` → `involvedObject`, `note` → `message`,
//! `reportingController` → `reportingComponent`/`source.component`, `deprecated*` → the core
//! timestamps and count) and deletes it with the original. Core Events are not mirrored back.
//!
//! The copies are made only once somebody reads core Events. Until then nobody can tell whether
//! they exist, and storing every Event twice doubled what a scheduler's events cost the embedded
//! server (a tenth of its CPU in the SchedulingBasic benchmark, where nothing reads them). The
//! first read of the core resource copies every Event there is before it is served
//! ([`Store::on_first_read`]); from then on each new version is copied as it is written.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value, json};

use super::{Next, next_event};
use crate::registry::KindId;
use crate::store::{DeleteOptions, EventType, ObjectRef, Store};
use crate::util::get_str;

/// Starts the mirror: subscribes and registers the first-read hook at once, so an Event written
/// from now on is either copied by the hook or seen by the loop after it; the loop runs until
/// `shutdown` changes.
pub fn start(
    store: Store,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    let (Some(new_events), Some(core_events)) = (
        store.registry().by_gvr("events.k8s.io", "v1", "events"),
        store.registry().by_gvr("", "v1", "events"),
    ) else {
        return None;
    };
    // Only events.k8s.io Events matter here; a subscription to that kind alone is not woken by
    // every other write.
    let mut sub = store.subscribe_kind(new_events);
    let wanted = Arc::new(AtomicBool::new(false));
    {
        let wanted = wanted.clone();
        // The flag goes up before the hook lists: an Event the list misses was written after
        // it, and the loop copies it.
        store.on_first_read(core_events, move |store| {
            wanted.store(true, Ordering::SeqCst);
            resync(store, core_events);
        });
    }
    Some(tokio::spawn(async move {
        loop {
            match next_event(&mut sub, &mut shutdown).await {
                Next::Stop => return,
                Next::Resync => {
                    sub = store.subscribe_kind(new_events);
                    if wanted.load(Ordering::SeqCst) {
                        resync(&store, core_events);
                    }
                }
                Next::Event(ev) if ev.kind == new_events && wanted.load(Ordering::SeqCst) => {
                    match ev.event_type {
                        EventType::Deleted => {
                            let _ = store.delete(
                                "v1/events",
                                Some(ev.object.namespace()),
                                ev.object.name(),
                                &DeleteOptions::default(),
                            );
                        }
                        _ => mirror(&store, core_events, &ev.object),
                    }
                }
                Next::Event(_) => {}
            }
        }
    }))
}

fn resync(store: &Store, core_events: KindId) {
    if let Ok(all) = store.list_all("events.events.k8s.io", None) {
        for e in all {
            mirror(store, core_events, &e);
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

fn mirror(store: &Store, core_events: KindId, e: &ObjectRef) {
    let core = to_core(e.value());
    let ns = e.namespace();
    // `get_in`, not `get`: a public read of core Events would wait for the hook this may run in.
    let res = match store.get_in(core_events, ns, e.name()) {
        Ok(_) => store.update("v1/events", Some(ns), core),
        Err(_) => store.create("v1/events", Some(ns), core),
    };
    if let Err(err) = res {
        tracing::debug!(event = e.name(), error = %err, "could not mirror an events.k8s.io Event");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::{Duration, Instant};

    use super::*;
    use crate::ApiServer;

    fn event(name: &str, note: &str) -> Value {
        json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": name, "namespace": "default"},
            "eventTime": "2026-12-05T10:00:00.000000Z",
            "reportingController": "unisched", "reportingInstance": "unisched-1",
            "action": "Binding", "reason": "Scheduled", "type": "Normal", "note": note,
            "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": "default", "name": "p"},
        })
    }

    /// The core copies as stored, read without running the first-read hook.
    fn stored_copies(store: &Store, core: KindId) -> Vec<(String, String)> {
        store
            .snapshot(core, None)
            .iter()
            .map(|e| {
                (
                    e.name().to_string(),
                    get_str(e, &["message"]).unwrap_or("").to_string(),
                )
            })
            .collect()
    }

    async fn until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting until {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn core_copies_are_made_at_the_first_read_and_then_follow_every_change() {
        let store = ApiServer::builder().controllers(false).build().store().clone();
        let core = store.resolve("events").unwrap();
        let (_stop, shutdown) = tokio::sync::watch::channel(false);
        let task = start(store.clone(), shutdown).unwrap();
        store
            .create("events.events.k8s.io", Some("default"), event("a", "first"))
            .unwrap();
        store
            .create("events.events.k8s.io", Some("default"), event("b", "second"))
            .unwrap();
        // Give the loop every chance to copy them if it would.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            stored_copies(&store, core).is_empty(),
            "copied before anyone read core Events"
        );

        // The first read sees every Event written before it.
        let listed: Vec<(String, String)> = store
            .list_all("events", Some("default"))
            .unwrap()
            .iter()
            .map(|e| (e.name().to_string(), e["message"].as_str().unwrap().to_string()))
            .collect();
        assert_eq!(
            listed,
            [
                ("a".to_string(), "first".to_string()),
                ("b".to_string(), "second".to_string())
            ]
        );

        // From then on, writes are followed: a new Event, a changed one and a deleted one.
        store
            .create("events.events.k8s.io", Some("default"), event("c", "third"))
            .unwrap();
        store
            .update("events.events.k8s.io", Some("default"), {
                let mut a = store
                    .get("events.events.k8s.io", Some("default"), "a")
                    .unwrap()
                    .to_value();
                a["note"] = json!("first, again");
                a
            })
            .unwrap();
        store
            .delete(
                "events.events.k8s.io",
                Some("default"),
                "b",
                &DeleteOptions::default(),
            )
            .unwrap();
        let want = [
            ("a".to_string(), "first, again".to_string()),
            ("c".to_string(), "third".to_string()),
        ];
        until("the copies follow", || stored_copies(&store, core) == want).await;
        task.abort();
    }
}
