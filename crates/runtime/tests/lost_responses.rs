//! Writes whose answer is lost after the server committed them (the embedded server's
//! `fail_after_commit`): the runtime must resolve them by reading, never by undoing. With one GPU
//! and many pods, losing every binding answer and half of the claim and pod-status answers must
//! not hand the GPU to two pods, bind a pod without its device, or overcommit the node.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::wait_until;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use unisched_framework::config::KubeSchedulerConfiguration;
use unisched_runtime::{Scheduler, SchedulerOptions};
use unisched_sim::{RunningServer, Store};

const PODS: usize = 8;

async fn start() -> (
    RunningServer,
    std::sync::Arc<Scheduler>,
    tokio::task::JoinHandle<()>,
) {
    let server = support::serve().await;
    let mut config = KubeSchedulerConfiguration::defaulted();
    config.leader_election.leader_elect = false;
    config.client_connection.qps = -1.0;
    let client = support::client(&server);
    let options = SchedulerOptions {
        config,
        seed: 7,
        identity: "lost-responses".into(),
        health_addr: None,
        default_namespace: "default".into(),
        // As `unisched run` does: binding cycles write on connections of their own, so the lost
        // answers below are lost on those.
        binding_connections: Some(kube::Config::new(server.url().parse().unwrap())),
        feature_gates: Default::default(),
    };
    let s = std::sync::Arc::new(Scheduler::new(client, options).await.unwrap());
    let runner = s.clone();
    let task = tokio::spawn(async move {
        let _ = runner.run().await;
    });
    (server, s, task)
}

fn seed_cluster(store: &Store) {
    store
        .create(
            "nodes",
            None,
            json!({"metadata": {"name": "gpu-node"},
                   "status": {"capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}),
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
            json!({"metadata": {"name": "gpu-node-gpu"},
                   "spec": {"driver": "gpu.example.com", "nodeName": "gpu-node",
                            "pool": {"name": "gpu-node", "generation": 1, "resourceSliceCount": 1},
                            "devices": [{"name": "gpu-0"}]}}),
        )
        .unwrap();
}

fn create_pod_with_claim(store: &Store, i: usize) {
    create_pod_with_claim_finalized(store, i, &[]);
}

/// [`create_pod_with_claim`] with `finalizers` on the claim.
fn create_pod_with_claim_finalized(store: &Store, i: usize, finalizers: &[&str]) {
    let mut claim = json!({"metadata": {"name": format!("claim-{i}"), "namespace": "default"},
                           "spec": {"devices": {"requests": [
                               {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}});
    if !finalizers.is_empty() {
        claim["metadata"]["finalizers"] = json!(finalizers);
    }
    store.create("resourceclaims", Some("default"), claim).unwrap();
    store
        .create(
            "pods",
            Some("default"),
            json!({"metadata": {"name": format!("p{i}"), "namespace": "default"},
                   "spec": {"schedulerName": "unisched",
                            "resourceClaims": [{"name": "gpu", "resourceClaimName": format!("claim-{i}")}],
                            "containers": [{"name": "c", "image": "x",
                                            "resources": {"requests": {"cpu": "100m"}, "claims": [{"name": "gpu"}]}}]}}),
        )
        .unwrap();
}

fn bound_pods(store: &Store) -> Vec<Value> {
    store
        .list_all("pods", None)
        .unwrap()
        .iter()
        .map(|p| p.to_value())
        .filter(|p| p["spec"]["nodeName"].as_str().is_some_and(|n| !n.is_empty()))
        .collect()
}

/// (claim name, devices) of every allocated claim.
fn allocations(store: &Store) -> Vec<(String, Vec<String>)> {
    store
        .list_all("resourceclaims", None)
        .unwrap()
        .iter()
        .filter_map(|c| {
            let results = c["status"]["allocation"]["devices"]["results"].as_array()?;
            Some((
                c["metadata"]["name"].as_str()?.to_string(),
                results
                    .iter()
                    .map(|r| {
                        format!(
                            "{}/{}",
                            r["pool"].as_str().unwrap_or(""),
                            r["device"].as_str().unwrap_or("")
                        )
                    })
                    .collect(),
            ))
        })
        .collect()
}

fn reserved_for(store: &Store, claim: &str) -> Vec<String> {
    let c = store.get("resourceclaims", Some("default"), claim).unwrap();
    c["status"]["reservedFor"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str().map(str::to_string))
        .collect()
}

/// Checks the invariants; returns how many pods are bound.
fn check_invariants(store: &Store) -> usize {
    let bound = bound_pods(store);
    let allocs = allocations(store);
    // No device in two allocations.
    let mut devices: Vec<&String> = allocs.iter().flat_map(|(_, d)| d).collect();
    let n = devices.len();
    devices.sort();
    devices.dedup();
    assert_eq!(devices.len(), n, "a device is in two allocations: {allocs:?}");
    // No overcommit: one GPU, so at most one pod bound.
    assert!(bound.len() <= 1, "{} pods bound on one GPU", bound.len());
    // No bound pod without its device.
    for p in &bound {
        let name = p["metadata"]["name"].as_str().unwrap();
        let claim = format!("claim-{}", &name[1..]);
        assert!(
            allocs.iter().any(|(c, d)| *c == claim && !d.is_empty()),
            "{name} is bound but {claim} is not allocated: {allocs:?}"
        );
        assert!(
            reserved_for(store, &claim).iter().any(|r| r == name),
            "{name} is bound but not in {claim}'s reservedFor"
        );
    }
    bound.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_write_responses_never_free_the_devices_of_a_bound_pod() {
    let (server, sched, task) = start().await;
    let store = server.store().clone();
    seed_cluster(&store);
    wait_until("node and slice in cache", Duration::from_secs(10), || {
        sched.cache().node_count() == 1
    })
    .await;
    let faults = server.faults().clone();
    // Every binding answer is lost after commit; so is every second claim write (status and
    // finalizer) and every second pod status patch.
    faults.fail_after_commit("POST", "/binding", 500, 1, 1000);
    faults.fail_after_commit("PATCH", "/resourceclaims/", 500, 2, 1000);
    faults.fail_after_commit("PATCH", "/pods/", 503, 2, 1000);
    for i in 0..PODS {
        create_pod_with_claim(&store, i);
    }
    wait_until("one pod bound", Duration::from_secs(30), || {
        !bound_pods(&store).is_empty()
    })
    .await;
    // Give the scheduler time to try (and reject) every other pod, checking all along.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(4) {
        check_invariants(&store);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(check_invariants(&store), 1, "exactly one pod holds the GPU");
    assert!(
        faults.injected() >= 2,
        "lost answers were injected: {}",
        faults.injected()
    );
    // The binding answer was lost, yet the pod counts as scheduled (resolved by reading).
    let scheduled: f64 = sched
        .metrics()
        .render()
        .lines()
        .filter(|l| l.starts_with("scheduler_schedule_attempts_total") && l.contains("result=\"scheduled\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(scheduled, 1.0, "the bound pod's attempt succeeded");
    sched.stop();
    let _ = tokio::time::timeout(Duration::from_secs(15), task).await;
    server.shutdown().await;
}

/// The extended-resource claims (KEP-5004) in the store that the pod with `uid` owns.
fn extended_claims_of(store: &Store, uid: &str) -> Vec<Value> {
    store
        .list_all("resourceclaims", None)
        .unwrap()
        .iter()
        .map(|c| c.to_value())
        .filter(|c| {
            c["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
                && c["metadata"]["ownerReferences"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|o| o["uid"] == uid)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_create_of_the_extended_resource_claim_leaves_exactly_one_claim() {
    let (server, sched, task) = start().await;
    let store = server.store().clone();
    store
        .create(
            "nodes",
            None,
            json!({"metadata": {"name": "gpu-node"},
                   "status": {"capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}),
        )
        .unwrap();
    // The class serves `example.com/gpu`; the node has none of it, so DRA serves it there.
    store
        .create(
            "deviceclasses",
            None,
            json!({"metadata": {"name": "gpu.example.com"},
                   "spec": {"extendedResourceName": "example.com/gpu",
                            "selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]}}),
        )
        .unwrap();
    store
        .create(
            "resourceslices",
            None,
            json!({"metadata": {"name": "gpu-node-gpu"},
                   "spec": {"driver": "gpu.example.com", "nodeName": "gpu-node",
                            "pool": {"name": "gpu-node", "generation": 1, "resourceSliceCount": 1},
                            "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}]}}),
        )
        .unwrap();
    wait_until("node in cache", Duration::from_secs(10), || {
        sched.cache().node_count() == 1
    })
    .await;
    let faults = server.faults().clone();
    // The first claim create is committed, and its answer lost.
    faults.fail_after_commit("POST", "/resourceclaims", 500, 1, 1);
    let pod = store
        .create(
            "pods",
            Some("default"),
            json!({"metadata": {"name": "ext", "namespace": "default"},
                   "spec": {"schedulerName": "unisched",
                            "containers": [{"name": "c", "image": "x",
                                            "resources": {"requests": {"example.com/gpu": "1"},
                                                          "limits": {"example.com/gpu": "1"}}}]}}),
        )
        .unwrap();
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    wait_until("the pod bound", Duration::from_secs(30), || {
        bound_pods(&store).len() == 1
    })
    .await;
    assert_eq!(faults.injected(), 1, "the create's answer was lost");
    let status_claim = || {
        store.get("pods", Some("default"), "ext").unwrap()["status"]["extendedResourceClaimStatus"]
            ["resourceClaimName"]
            .as_str()
            .map(str::to_string)
    };
    wait_until("the pod's extended claim status", Duration::from_secs(10), || {
        status_claim().is_some()
    })
    .await;
    let claims = extended_claims_of(&store, &uid);
    let names: Vec<&str> = claims
        .iter()
        .filter_map(|c| c["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        names.len(),
        1,
        "exactly one extended-resource claim for the pod: {names:?}"
    );
    let claim = &claims[0];
    assert_eq!(
        Some(names[0].to_string()),
        status_claim(),
        "the pod status names that claim"
    );
    assert!(
        names[0].starts_with("ext-extended-resources-"),
        "generated name {}",
        names[0]
    );
    let results = claim["status"]["allocation"]["devices"]["results"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(results.len(), 1, "the claim is allocated one GPU: {claim}");
    assert_eq!(
        reserved_for(&store, names[0]),
        vec!["ext".to_string()],
        "the claim is reserved for the pod"
    );
    sched.stop();
    let _ = tokio::time::timeout(Duration::from_secs(15), task).await;
    server.shutdown().await;
}

/// Binding a pod with a claim writes the claim's finalizer and status from the cached claim and
/// its resourceVersion, without reading the claim first: every GET of it fails here, and the pod
/// still binds. A finalizer another controller put on the claim is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_a_claim_reads_nothing_and_keeps_other_finalizers() {
    let (server, sched, task) = start().await;
    let store = server.store().clone();
    seed_cluster(&store);
    wait_until("node and slice in cache", Duration::from_secs(10), || {
        sched.cache().node_count() == 1
    })
    .await;
    let faults = server.faults().clone();
    faults.fail_next("GET", "/resourceclaims/claim-0", 500, 1000);
    create_pod_with_claim_finalized(&store, 0, &["example.com/keep"]);
    wait_until("p0 bound", Duration::from_secs(30), || {
        bound_pods(&store).len() == 1
    })
    .await;
    assert_eq!(faults.injected(), 0, "the claim was read during binding");
    let claim = store
        .get("resourceclaims", Some("default"), "claim-0")
        .unwrap()
        .to_value();
    let finalizers: Vec<&str> = claim["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        finalizers,
        ["example.com/keep", "resource.kubernetes.io/delete-protection"]
    );
    assert_eq!(reserved_for(&store, "claim-0"), ["p0"]);
    // The claim's writes and the binding ran as futures on the I/O runtime: no binding thread.
    assert_eq!(
        sched.binding_thread_jobs(),
        0,
        "binding cycles that held a thread"
    );
    sched.stop();
    let _ = tokio::time::timeout(Duration::from_secs(15), task).await;
    server.shutdown().await;
}
