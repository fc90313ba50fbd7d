//! `delayCacheUntilActive`: a standby replica lists and watches nothing until it leads, as
//! kube-scheduler does with the option on; without it a standby's caches sync at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use support::wait_until;
use unisched_framework::config::{GoDuration, KubeSchedulerConfiguration};
use unisched_runtime::{Scheduler, SchedulerOptions};
use unisched_sim::RunningServer;

/// Another replica's lease, renewed just now, for `seconds`.
fn held_lease(server: &RunningServer, seconds: i64) {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    server
        .store()
        .create(
            "leases",
            Some("default"),
            json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": "unisched", "namespace": "default"},
                "spec": {"holderIdentity": "other-replica", "leaseDurationSeconds": seconds,
                         "acquireTime": now, "renewTime": now},
            }),
        )
        .unwrap();
}

async fn start(server: &RunningServer, delay: bool) -> (Arc<Scheduler>, tokio::task::JoinHandle<()>) {
    let mut config = KubeSchedulerConfiguration::defaulted();
    config.client_connection.qps = -1.0;
    config.delay_cache_until_active = Some(delay);
    let le = &mut config.leader_election;
    le.leader_elect = true;
    le.resource_name = "unisched".into();
    le.resource_namespace = "default".into();
    le.lease_duration = GoDuration(Duration::from_secs(3));
    le.renew_deadline = GoDuration(Duration::from_secs(2));
    le.retry_period = GoDuration(Duration::from_millis(200));
    let options = SchedulerOptions {
        config,
        seed: 1,
        identity: format!("delay-{delay}"),
        health_addr: None,
        default_namespace: "default".into(),
        binding_connections: None,
        feature_gates: Default::default(),
    };
    let s = Arc::new(Scheduler::new(support::client(server), options).await.unwrap());
    let runner = s.clone();
    let task = tokio::spawn(async move {
        let _ = runner.run().await;
    });
    (s, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_with_delay_cache_until_active_watches_nothing_until_it_leads() {
    let server = support::serve().await;
    held_lease(&server, 4);
    let (sched, task) = start(&server, true).await;
    // While the other replica's lease lasts, nothing is listed.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !sched.health().is_synced(),
        "a standby with delayCacheUntilActive lists nothing"
    );
    // The other replica never renews: this one leads, then lists and syncs.
    wait_until("leading and synced", Duration::from_secs(30), || {
        sched.health().is_synced()
    })
    .await;
    sched.stop();
    let _ = tokio::time::timeout(Duration::from_secs(15), task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_it_a_standby_syncs_its_caches_at_once() {
    let server = support::serve().await;
    held_lease(&server, 3600);
    let (sched, task) = start(&server, false).await;
    wait_until("synced while standby", Duration::from_secs(15), || {
        sched.health().is_synced()
    })
    .await;
    sched.stop();
    let _ = tokio::time::timeout(Duration::from_secs(15), task).await;
}
