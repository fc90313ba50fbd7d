//! Scaffolding shared by the runtime's integration tests: an embedded API server on a free port,
//! a client for it, and polling until a condition holds.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use unisched_framework::config::KubeSchedulerConfiguration;
use unisched_runtime::{Scheduler, SchedulerOptions};
use unisched_sim::{ApiServer, RunningServer};

/// The embedded API server with its default settings, listening on a free local port.
pub async fn serve() -> RunningServer {
    ApiServer::builder()
        .build()
        .serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

/// A client for `server`.
pub fn client(server: &RunningServer) -> kube::Client {
    kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap()
}

/// Polls `f` every 20 ms until it holds; fails the test after `timeout`.
pub async fn wait_until(what: &str, timeout: Duration, f: impl FnMut() -> bool) {
    wait_until_explained(what, timeout, f, String::new).await;
}

/// [`wait_until`], whose failure message ends with what `explain` says about the state then.
pub async fn wait_until_explained(
    what: &str,
    timeout: Duration,
    mut f: impl FnMut() -> bool,
    explain: impl Fn() -> String,
) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < timeout,
            "timed out waiting for {what}{}",
            explain()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A scheduler on `server` (defaults, no leader election, no client rate limit, tie-breaks
/// seeded with `seed`), running in a task.
pub async fn start_scheduler(
    server: &RunningServer,
    identity: &str,
    seed: u64,
) -> (Arc<Scheduler>, tokio::task::JoinHandle<()>) {
    start_scheduler_with(server, identity, seed, false).await
}

/// [`start_scheduler`]; with `own_binding_connections` its binding cycles write on connections
/// of their own, as under `unisched run`.
pub async fn start_scheduler_with(
    server: &RunningServer,
    identity: &str,
    seed: u64,
    own_binding_connections: bool,
) -> (Arc<Scheduler>, tokio::task::JoinHandle<()>) {
    let mut config = KubeSchedulerConfiguration::defaulted();
    config.leader_election.leader_elect = false;
    config.client_connection.qps = -1.0;
    let options = SchedulerOptions {
        config,
        seed,
        identity: identity.into(),
        health_addr: None,
        default_namespace: "default".into(),
        binding_connections: own_binding_connections
            .then(|| kube::Config::new(server.url().parse().unwrap())),
        feature_gates: Default::default(),
    };
    let s = Arc::new(Scheduler::new(client(server), options).await.unwrap());
    let runner = s.clone();
    let task = tokio::spawn(async move {
        let _ = runner.run().await;
    });
    (s, task)
}

/// `scheduler_queue_incoming_pods_total` summed per `event` label.
pub fn incoming_by_event(s: &Scheduler) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in s.metrics().render().lines() {
        if !line.starts_with("scheduler_queue_incoming_pods_total{") {
            continue;
        }
        let Some(event) = line.split("event=\"").nth(1).and_then(|r| r.split('"').next()) else {
            continue;
        };
        let n = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        *out.entry(event.to_string()).or_default() += n as u64;
    }
    out
}
