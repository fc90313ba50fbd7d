//! `RuntimeDraApi`'s claim status writes against the embedded API server: the check that refuses
//! to take a bound pod out of `reservedFor` works on the claim the caller read (no extra read per
//! write), and a refusal based on a stale copy turns into a conflict so the caller re-reads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use k8s_openapi::api::resource::v1::ResourceClaim;
use serde_json::{Value, json};
use unisched_plugins::dynamic_resources::{DraApi, DraApiError};
use unisched_runtime::{ApiWriter, LeaderFlag, Metrics, RuntimeDraApi};
use unisched_sim::{Patch, RunningServer, Store};

fn claim_in(store: &Store) -> ResourceClaim {
    serde_json::from_value(
        store
            .get("resourceclaims", Some("default"), "c0")
            .unwrap()
            .to_value(),
    )
    .unwrap()
}

/// A node, the pod `p0` bound to it, and the claim `c0`; when `reserved`, the claim is allocated
/// and reserved for `p0`.
fn seed(store: &Store, reserved: bool) {
    store
        .create(
            "nodes",
            None,
            json!({"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "8", "pods": "110"}}}),
        )
        .unwrap();
    let pod = store
        .create(
            "pods",
            Some("default"),
            json!({"metadata": {"name": "p0", "namespace": "default"},
                   "spec": {"containers": [{"name": "c", "image": "x"}]}}),
        )
        .unwrap()
        .to_value();
    store.bind("default", "p0", "n1", None).unwrap();
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    store
        .create(
            "resourceclaims",
            Some("default"),
            json!({"metadata": {"name": "c0", "namespace": "default"},
                   "spec": {"devices": {"requests": [
                       {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}}),
        )
        .unwrap();
    if !reserved {
        return;
    }
    store
        .patch_status(
            "resourceclaims",
            Some("default"),
            "c0",
            &Patch::Merge(json!({"status": {
                "allocation": {"devices": {"results": [{"request": "gpu",
                    "driver": "gpu.example.com", "pool": "n1", "device": "gpu-0"}]}},
                "reservedFor": [{"resource": "pods", "name": "p0", "uid": uid}]}})),
        )
        .unwrap();
}

/// An embedded API server holding [`seed`]'s objects, and the claim writer under test on it.
async fn seeded(reserved: bool) -> (RunningServer, Store, Arc<RuntimeDraApi>) {
    let server = support::serve().await;
    let store = server.store().clone();
    seed(&store, reserved);
    let client = support::client(&server);
    let metrics = Metrics::new().unwrap();
    let writer = ApiWriter::new(client, -1.0, 100, metrics.clone(), LeaderFlag::new(true));
    let api = Arc::new(RuntimeDraApi::new(
        writer,
        tokio::runtime::Handle::current(),
        metrics,
    ));
    (server, store, api)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_pod_stays_reserved_and_a_stale_refusal_is_a_conflict() {
    let (server, store, api) = seeded(true).await;
    let read = claim_in(&store);

    // Taking the bound pod out of reservedFor is refused, on the claim as read.
    let (a, c) = (api.clone(), read.clone());
    let refused = tokio::task::spawn_blocking(move || {
        a.patch_claim_status("default", "c0", &c, json!({"reservedFor": null}))
    })
    .await
    .unwrap();
    match refused {
        Err(DraApiError::Other(m)) => assert!(m.contains("is bound to node"), "{m}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(claim_in(&store).status, read.status, "nothing written");

    // Someone else takes the pod out meanwhile: the same write on the stale copy is a conflict
    // (the caller re-reads), not a refusal.
    store
        .patch_status(
            "resourceclaims",
            Some("default"),
            "c0",
            &Patch::Merge(json!({"status": {"reservedFor": null}})),
        )
        .unwrap();
    let (a, c) = (api.clone(), read.clone());
    let stale = tokio::task::spawn_blocking(move || {
        a.patch_claim_status("default", "c0", &c, json!({"reservedFor": null}))
    })
    .await
    .unwrap();
    assert!(matches!(stale, Err(DraApiError::Conflict(_))), "{stale:?}");

    // On a fresh read the write goes through.
    let fresh = claim_in(&store);
    let (a, c) = (api.clone(), fresh);
    let written = tokio::task::spawn_blocking(move || {
        a.patch_claim_status(
            "default",
            "c0",
            &c,
            json!({"reservedFor": null, "allocation": null}),
        )
    })
    .await
    .unwrap()
    .unwrap();
    let status: Value = serde_json::to_value(&written.status).unwrap();
    assert!(status.get("reservedFor").is_none_or(Value::is_null), "{status}");
    server.shutdown().await;
}

/// The claim writes are answered with metadata only, and the claim they return is built from the
/// caller's copy with the patch applied: it must be exactly what the server now holds (what the
/// binding cycle assumes in the cache until the watch catches up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_writes_return_the_claim_the_server_holds() {
    let (server, store, api) = seeded(false).await;
    // What the server holds, as the scheduler's watch would decode it (no managedFields).
    let on_server = || {
        let mut c = claim_in(&store);
        c.metadata.managed_fields = None;
        c
    };

    let (a, c) = (api.clone(), on_server());
    let with_finalizer = tokio::task::spawn_blocking(move || a.add_claim_finalizer("default", "c0", &c))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        with_finalizer.metadata.finalizers.as_deref(),
        Some(&["resource.kubernetes.io/delete-protection".to_string()][..])
    );
    assert_eq!(with_finalizer, on_server());

    // Allocation and a consumer added. (The consumer must exist: the embedded claim controller
    // drops references to missing pods.)
    let p1 = store
        .create(
            "pods",
            Some("default"),
            json!({"metadata": {"name": "p1", "namespace": "default"},
                   "spec": {"containers": [{"name": "c", "image": "x"}]}}),
        )
        .unwrap()
        .to_value();
    let reserved = json!([{"resource": "pods", "name": "p1", "uid": p1["metadata"]["uid"]}]);
    let status = json!({"reservedFor": reserved, "allocation": {
        "devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "n1",
                                 "device": "gpu-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}});
    let (a, c) = (api.clone(), with_finalizer.clone());
    let allocated = tokio::task::spawn_blocking(move || a.patch_claim_status("default", "c0", &c, status))
        .await
        .unwrap()
        .unwrap();
    let held = on_server();
    assert_eq!(allocated, held);
    assert_eq!(
        held.status
            .as_ref()
            .and_then(|s| s.reserved_for.as_ref())
            .map(Vec::len),
        Some(1)
    );
    assert_ne!(
        allocated.metadata.resource_version,
        with_finalizer.metadata.resource_version
    );

    // Deallocation (`null` deletes; the consumers go with the allocation) and the finalizer
    // removed.
    let (a, c) = (api.clone(), allocated);
    let cleared = tokio::task::spawn_blocking(move || {
        a.patch_claim_status(
            "default",
            "c0",
            &c,
            json!({"allocation": null, "reservedFor": null}),
        )
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(cleared, on_server());
    assert!(cleared.status.as_ref().is_some_and(|s| s.allocation.is_none()));
    let (a, c) = (api.clone(), cleared);
    let released = tokio::task::spawn_blocking(move || a.remove_claim_finalizer("default", "c0", &c))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(released, on_server());
    assert!(released.metadata.finalizers.as_ref().is_none_or(Vec::is_empty));
    server.shutdown().await;
}
