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
use unisched_sim::{Patch, Store};

fn claim_in(store: &Store) -> ResourceClaim {
    serde_json::from_value(
        store
            .get("resourceclaims", Some("default"), "c0")
            .unwrap()
            .to_value(),
    )
    .unwrap()
}

fn seed(store: &Store) {
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
    store
        .patch_status(
            "resourceclaims",
            Some("default"),
            "c0",
            &Patch::Merge(json!({"status": {"reservedFor": [
                {"resource": "pods", "name": "p0", "uid": uid}]}})),
        )
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_pod_stays_reserved_and_a_stale_refusal_is_a_conflict() {
    let server = support::serve().await;
    let store = server.store().clone();
    seed(&store);
    let client = support::client(&server);
    let metrics = Metrics::new().unwrap();
    let writer = ApiWriter::new(client, -1.0, 100, metrics.clone(), LeaderFlag::new(true));
    let api = Arc::new(RuntimeDraApi::new(
        writer,
        tokio::runtime::Handle::current(),
        metrics,
    ));
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
