//! The runtime against a misbehaving API server: writes rejected with 409/429/500 are retried, and
//! dropped watches are resumed, without losing or double-binding a pod.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::wait_until;

use std::time::Duration;

use serde_json::{Value, json};
use unisched_framework::config::KubeSchedulerConfiguration;
use unisched_runtime::{Scheduler, SchedulerOptions};
use unisched_sim::{RunningServer, Store};

fn node(name: &str, labels: Value) -> Value {
    json!({"metadata": {"name": name, "labels": labels},
           "status": {"capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"}}})
}

fn pod(name: &str, cpu: &str, selector: Option<Value>) -> Value {
    let mut p = json!({"metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulerName": "unisched",
                 "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]}});
    if let Some(s) = selector {
        p["spec"]["nodeSelector"] = s;
    }
    p
}

fn bound(store: &Store, prefix: &str) -> usize {
    store
        .list_all("pods", None)
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["name"].as_str().unwrap().starts_with(prefix))
        .filter(|p| p["spec"]["nodeName"].as_str().is_some_and(|n| !n.is_empty()))
        .count()
}

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
        seed: 3,
        identity: "faults-test".into(),
        health_addr: None,
        default_namespace: "default".into(),
        binding_connections: None,
        feature_gates: Default::default(),
    };
    let s = std::sync::Arc::new(Scheduler::new(client, options).await.unwrap());
    let runner = s.clone();
    let task = tokio::spawn(async move {
        let _ = runner.run().await;
    });
    (server, s, task)
}

fn metric(s: &Scheduler, code: &str) -> u64 {
    s.metrics()
        .render()
        .lines()
        .filter(|l| l.starts_with("unisched_api_writes_total") && l.contains(&format!("code=\"{code}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_writes_are_retried_and_dropped_watches_resumed() {
    let (server, sched, task) = start().await;
    let store = server.store().clone();
    for i in 0..3 {
        store
            .create("nodes", None, node(&format!("n{i}"), json!({"pool": "a"})))
            .unwrap();
    }
    wait_until("nodes in cache", Duration::from_secs(10), || {
        sched.cache().node_count() == 3
    })
    .await;

    // 500s and a 409 on binding, 429s on the status patch of an unschedulable pod.
    let faults = server.faults().clone();
    faults.fail_next("POST", "/binding", 500, 3);
    faults.fail_next("POST", "/binding", 409, 1);
    faults.fail_next("PATCH", "/status", 429, 2);
    for i in 0..10 {
        store
            .create("pods", Some("default"), pod(&format!("a{i}"), "100m", None))
            .unwrap();
    }
    store
        .create("pods", Some("default"), pod("too-big", "100", None))
        .unwrap();
    wait_until("first pods bound", Duration::from_secs(30), || {
        bound(&store, "a") == 10
    })
    .await;
    wait_until("too-big rejected with a reason", Duration::from_secs(30), || {
        store.get("pods", Some("default"), "too-big").unwrap()["status"]["conditions"]
            .as_array()
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "PodScheduled" && c["status"] == "False")
            })
    })
    .await;
    assert_eq!(faults.injected(), 6, "every injected fault was hit");
    // Plain pods bind from the I/O runtime; only the undo of the binding refused with 409 (the
    // 500s are retried inside the write) went to a binding thread.
    assert_eq!(
        sched.binding_thread_jobs(),
        1,
        "binding cycles that held a thread"
    );
    assert!(metric(&sched, "500") >= 3, "the writer saw and retried the 500s");
    assert!(
        metric(&sched, "409") >= 1,
        "the 409 surfaced (the pod was rescheduled)"
    );

    // Drop every watch; the runtime must re-watch and keep going.
    faults.drop_watches();
    tokio::time::sleep(Duration::from_millis(200)).await;
    for i in 0..10 {
        store
            .create("pods", Some("default"), pod(&format!("b{i}"), "100m", None))
            .unwrap();
    }
    wait_until(
        "pods created after the drop bound",
        Duration::from_secs(30),
        || bound(&store, "b") == 10,
    )
    .await;
    // A node that appears after a second drop is seen too.
    faults.drop_watches();
    store
        .create("nodes", None, node("late", json!({"pool": "late"})))
        .unwrap();
    store
        .create(
            "pods",
            Some("default"),
            pod("c0", "100m", Some(json!({"pool": "late"}))),
        )
        .unwrap();
    wait_until("pod needing the late node bound", Duration::from_secs(30), || {
        bound(&store, "c") == 1
    })
    .await;
    assert_eq!(
        store.get("pods", Some("default"), "c0").unwrap()["spec"]["nodeName"],
        "late"
    );

    // Nothing was bound twice: the cache holds each pod once and the node totals match.
    let snap = sched.cache().update_snapshot();
    let total_pods: usize = snap.nodes().iter().map(|n| n.pods.len()).sum();
    assert_eq!(total_pods, 21);
    for n in snap.nodes() {
        assert_eq!(n.requested.milli_cpu, n.pods.len() as i64 * 100, "{}", n.name());
    }
    sched.stop();
    let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    server.shutdown().await;
}
