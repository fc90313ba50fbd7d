//! The scheduler `unisched sim` runs in its own process, on the same runtime as the embedded API
//! server, and the barriers a step waits at so that placements do not depend on thread timing:
//! the scheduler's caches must have seen the cluster a step describes, and the claims of its
//! pods, before those pods are released.

use std::{
    collections::BTreeSet,
    sync::Arc,
    time::{Duration, Instant},
};

use unisched_runtime::{RuntimeError, Scheduler, SchedulerOptions};
use unisched_sim::report;

use crate::args::SimArgs;
use crate::scheduler_config::SchedulerConfigError;

/// Why the in-process scheduler did not start.
#[derive(Debug, thiserror::Error)]
pub enum InProcessError {
    /// Its configuration file.
    #[error(transparent)]
    Config(#[from] SchedulerConfigError),
    /// The runtime refused to start (a configuration it cannot serve, say).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// `--feature-gates` did not parse or set a gate unisched does not run.
    #[error("invalid argument {flag:?} for \"--feature-gates\" flag: {source}")]
    FeatureGates {
        /// The flag's value.
        flag: String,
        /// What was wrong.
        #[source]
        source: unisched_features::FeatureGateError,
    },
}

/// Totals of the whole cluster: what an in-process scheduler's cache must have seen before a
/// step's pods are created.
#[derive(Debug, Default)]
pub(crate) struct Inventory {
    /// Nodes.
    pub nodes: usize,
    /// ResourceSlices.
    pub slices: usize,
    /// DeviceClass names.
    pub classes: Vec<String>,
    /// Namespace names.
    pub namespaces: Vec<String>,
}

/// Checks `done` every 5 ms until it holds or `timeout` passes (the callers go on either way:
/// a scheduler that lags only makes the run slower to settle).
async fn poll_until(timeout: Duration, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() && start.elapsed() < timeout {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until the scheduler has seen every node, slice, device class and namespace of the
/// inventory (namespace labels decide which pods a `namespaceSelector` affinity term sees).
pub(crate) async fn wait_for_cache(inventory: &Inventory, scheduler: &Scheduler, timeout: Duration) {
    poll_until(timeout, || {
        let dra = scheduler.dra();
        scheduler.cache().node_count() == inventory.nodes
            && dra.slice_count() == inventory.slices
            && inventory.classes.iter().all(|c| dra.class(c).is_some())
            && inventory
                .namespaces
                .iter()
                .all(|n| scheduler.namespaces().contains(n))
    })
    .await;
}

/// Waits (up to `timeout`) until the scheduler's claim cache holds every claim in `claims`.
pub(crate) async fn wait_for_claims(claims: &[(String, String)], scheduler: &Scheduler, timeout: Duration) {
    poll_until(timeout, || {
        let dra = scheduler.dra();
        claims.iter().all(|(ns, name)| dra.claim(ns, name).is_some())
    })
    .await;
}

/// The in-process scheduler and its task.
pub(crate) type InProcess = (Arc<Scheduler>, tokio::task::JoinHandle<Result<(), RuntimeError>>);

/// The scheduler names the profiles of the configuration serve.
pub(crate) fn profile_names(
    config: &unisched_framework::config::KubeSchedulerConfiguration,
) -> BTreeSet<String> {
    config
        .profiles
        .iter()
        .map(|p| {
            p.scheduler_name
                .clone()
                .unwrap_or_else(|| "default-scheduler".into())
        })
        .collect()
}

/// Starts the in-process scheduler on `client` and waits for its informers' first list, so the
/// first pods are not raced. Returns it with the scheduler names its profiles serve.
pub(crate) async fn start_scheduler(
    client: kube::Client,
    args: &SimArgs,
) -> Result<(InProcess, BTreeSet<String>), InProcessError> {
    let mut config = crate::scheduler_config::load(args.scheduler_config.as_ref())?;
    config.leader_election.leader_elect = false;
    config.client_connection.qps = -1.0;
    let profiles = profile_names(&config);
    let feature_gates = unisched_features::FeatureGates::parse(&args.feature_gates).map_err(|source| {
        InProcessError::FeatureGates {
            flag: args.feature_gates.clone(),
            source,
        }
    })?;
    let options = SchedulerOptions {
        config,
        seed: args.seed,
        identity: "unisched-sim".into(),
        health_addr: None,
        default_namespace: "default".into(),
        binding_connections: None,
        feature_gates,
    };
    let s = Arc::new(Scheduler::new(client, options).await?);
    s.explanations().set_recording(args.explain);
    let runner = s.clone();
    let task = tokio::spawn(async move { runner.run().await });
    let wait = Instant::now();
    while !s.health().is_synced() && wait.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(((s, task), profiles))
}

/// Stops the in-process scheduler, if any, and gives its task a few seconds to end.
pub(crate) async fn stop_scheduler(scheduler: Option<InProcess>) {
    if let Some((s, task)) = scheduler {
        s.stop();
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }
}

/// The recorded explanations of the pods that ended on the node they were explained for (a pod
/// rescheduled after a failed binding keeps only its final placement).
pub(crate) fn explanations(s: &Scheduler, report: &report::Report) -> Vec<report::PodExplanation> {
    let bound: std::collections::BTreeMap<String, &str> = report
        .pods
        .iter()
        .filter_map(|p| Some((format!("{}/{}", p.namespace, p.name), p.node.as_deref()?)))
        .collect();
    s.explanations()
        .snapshot()
        .into_iter()
        .filter(|e| bound.get(&e.pod) == Some(&e.node.as_str()))
        .map(|e| report::PodExplanation {
            text: e.to_table(),
            top: e
                .top
                .iter()
                .map(|n| report::ScoredNode {
                    node: n.name.clone(),
                    total: n.total,
                    scores: n.scores.iter().cloned().collect(),
                })
                .collect(),
            pod: e.pod,
            node: e.node,
            profile: e.profile,
            evaluated_nodes: e.evaluated_nodes,
            feasible_nodes: e.feasible_nodes,
        })
        .collect()
}
