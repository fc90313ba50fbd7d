//! A pod that names a `resourceClaimName` that does not exist is held by
//! DynamicResources' PreEnqueue. It must say so (a Warning `FailedScheduling` event and a
//! `PodScheduled=False` condition naming the claim, once, not at every re-check), and it must be
//! scheduled as soon as the claim appears. A pod waiting for the claim controller to create a
//! claim from its template, in contrast, is not reported at all.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::wait_until;

use std::time::Duration;

use serde_json::{Value, json};
use unisched_runtime::Scheduler;
use unisched_sim::Store;

fn claim(name: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "default"},
           "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}})
}

/// FailedScheduling events of pod `p` whose note mentions `text`, with their series counts.
fn failed_events(store: &Store, text: &str) -> Vec<(String, i64)> {
    store
        // The events.k8s.io Events the scheduler wrote (not the core copies the embedded server's
        // mirror makes later, which could lag a series patch).
        .list_all("events.events.k8s.io", Some("default"))
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "FailedScheduling" && e["regarding"]["name"] == "p")
        .filter_map(|e| {
            let note = e["note"].as_str()?;
            let count = e["series"]["count"].as_i64().unwrap_or(1);
            note.contains(text).then(|| (note.to_string(), count))
        })
        .collect()
}

fn scheduled_condition(store: &Store) -> Option<Value> {
    let p = store.get("pods", Some("default"), "p").unwrap().to_value();
    p["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "PodScheduled")
        .cloned()
}

/// Creates pod `default/p` for unisched, its one container using the pod claim `gpu` given by
/// `entry` (its `spec.resourceClaims` entry); returns the pod as created.
fn pod_with_claim(store: &Store, entry: Value) -> Value {
    store
        .create(
            "pods",
            Some("default"),
            json!({"metadata": {"name": "p", "namespace": "default"},
                   "spec": {"schedulerName": "unisched",
                            "resourceClaims": [entry],
                            "containers": [{"name": "c", "image": "x",
                                            "resources": {"claims": [{"name": "gpu"}]}}]}}),
        )
        .unwrap()
        .to_value()
}

/// A running scheduler on an embedded API server with one node and two GPUs of class
/// `gpu.example.com` (no claim controller: tests create claims themselves).
async fn cluster_with_scheduler(
    identity: &str,
) -> (
    unisched_sim::RunningServer,
    Store,
    std::sync::Arc<Scheduler>,
    tokio::task::JoinHandle<()>,
) {
    let server = support::serve().await;
    let store = server.store().clone();
    store
        .create(
            "nodes",
            None,
            json!({"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}),
        )
        .unwrap();
    store
        .create(
            "deviceclasses",
            None,
            json!({"metadata": {"name": "gpu.example.com"},
                   "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]}}),
        )
        .unwrap();
    store
        .create(
            "resourceslices",
            None,
            json!({"metadata": {"name": "n1-gpu"},
                   "spec": {"driver": "gpu.example.com", "nodeName": "n1",
                            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                            "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}]}}),
        )
        .unwrap();

    let (sched, task) = support::start_scheduler(&server, identity, 5).await;
    (server, store, sched, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_claim_is_reported_once_and_the_pod_schedules_when_it_appears() {
    let (server, store, sched, task) = cluster_with_scheduler("missing-claim").await;
    pod_with_claim(&store, json!({"name": "gpu", "resourceClaimName": "late-claim"}));
    wait_until("the missing claim reported", Duration::from_secs(20), || {
        !failed_events(&store, "late-claim").is_empty()
            && scheduled_condition(&store).is_some_and(|c| c["status"] == "False")
    })
    .await;
    let cond = scheduled_condition(&store).unwrap();
    assert!(
        cond["message"]
            .as_str()
            .unwrap()
            .contains("could not find ResourceClaim \"default/late-claim\""),
        "{cond}"
    );
    assert_eq!(cond["reason"], "Unschedulable");

    // Updates of the pod itself re-run PreEnqueue, unrelated claims come and go: the same
    // message is not reported again.
    for i in 0..5 {
        store
            .create("resourceclaims", Some("default"), claim(&format!("other-{i}")))
            .unwrap();
        store
            .patch(
                "pods",
                Some("default"),
                "p",
                &unisched_sim::Patch::Merge(json!({"metadata": {"labels": {"round": i.to_string()}}})),
            )
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let events = failed_events(&store, "late-claim");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        events[0].1, 1,
        "written once, not counted up at every re-check: {events:?}"
    );
    assert!(
        store.get("pods", Some("default"), "p").unwrap()["spec"]["nodeName"].is_null(),
        "still held"
    );

    // The claim appears: the pod is scheduled.
    store
        .create("resourceclaims", Some("default"), claim("late-claim"))
        .unwrap();
    wait_until("the pod bound", Duration::from_secs(20), || {
        store.get("pods", Some("default"), "p").unwrap()["spec"]["nodeName"] == "n1"
    })
    .await;
    let c = store
        .get("resourceclaims", Some("default"), "late-claim")
        .unwrap();
    assert_eq!(c["status"]["reservedFor"][0]["name"], "p");
    sched.stop();
    let _ = tokio::time::timeout(Duration::from_secs(15), task).await;
    server.shutdown().await;
}

/// A pod whose claim comes from a template waits for the claim controller to create it. That wait
/// is not reported (KEP-5501: DynamicResources opts out), however long it lasts: no event, no
/// condition, no write. Once the claim exists and the pod's status names it, the pod schedules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_for_a_generated_claim_is_not_reported() {
    let (server, store, sched, task) = cluster_with_scheduler("generated-claim").await;
    let pod = pod_with_claim(
        &store,
        json!({"name": "gpu", "resourceClaimTemplateName": "gpu-template"}),
    );
    // Longer than the reporting grace for a refusal that lasts.
    let held = unisched_runtime::GATED_REPORT_GRACE + Duration::from_secs(2);
    tokio::time::sleep(held).await;
    let events: Vec<Value> = store
        .list_all("events.events.k8s.io", Some("default"))
        .unwrap()
        .iter()
        .map(|e| e.to_value())
        .filter(|e| e["regarding"]["name"] == "p")
        .collect();
    assert!(events.is_empty(), "{events:?}");
    assert!(
        scheduled_condition(&store).is_none(),
        "{:?}",
        scheduled_condition(&store)
    );
    assert_eq!(
        store.get("pods", Some("default"), "p").unwrap()["metadata"]["resourceVersion"],
        pod["metadata"]["resourceVersion"],
        "nothing wrote the pod"
    );

    // The claim controller's part: the claim, owned by the pod, then the pod's claim status.
    let mut generated = claim("p-gpu-1");
    generated["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod", "name": "p",
        "uid": pod["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}]);
    store
        .create("resourceclaims", Some("default"), generated)
        .unwrap();
    store
        .patch_status(
            "pods",
            Some("default"),
            "p",
            &unisched_sim::Patch::Merge(json!({"status": {"resourceClaimStatuses": [
                {"name": "gpu", "resourceClaimName": "p-gpu-1"}]}})),
        )
        .unwrap();
    wait_until("the pod bound", Duration::from_secs(20), || {
        store.get("pods", Some("default"), "p").unwrap()["spec"]["nodeName"] == "n1"
    })
    .await;
    sched.stop();
    let _ = tokio::time::timeout(Duration::from_secs(15), task).await;
    server.shutdown().await;
}
