//! When a run has settled: every pod decided, nothing written for a while and the in-process
//! scheduler idle. A pod in backoff will be retried and may still land, so a quiet store alone
//! is not enough; but a pod retried after error upon error (bad input) would hold the run for
//! ever, so it counts as settled once its errors repeat. The embedded control plane is watched
//! through its store; a remote one only through lists, so an external scheduler and a real API
//! server settle the same way.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use serde_json::Value;
use unisched_runtime::Scheduler;
use unisched_sim::{
    Store,
    report::{self, ObjectSource},
};

use crate::progress::progress;
use crate::remote::{RemoteCluster, RemoteError, fingerprint};

/// True when every pod is bound, rejected with a reason (a condition, or a blocking event such as
/// a missing claim template), finished, or one the in-process scheduler will never attempt (gated,
/// or another `schedulerName` when `profiles` is given).
fn all_decided(objects: &dyn ObjectSource, profiles: Option<&BTreeSet<String>>) -> (bool, usize, usize) {
    let pods = objects.objects("pods");
    let blocked = report::blocking_events(objects);
    let mut undecided = 0;
    for v in &pods {
        let bound = v["spec"]["nodeName"].as_str().is_some_and(|n| !n.is_empty());
        let phase = v["status"]["phase"].as_str().unwrap_or("");
        let rejected = v["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            // The kubelet-less API server reports a gated pod as SchedulingGated; once the gates
            // are gone that condition is stale until a scheduler has looked at the pod.
            .any(|c| {
                c["type"] == "PodScheduled" && c["status"] == "False" && c["reason"] != "SchedulingGated"
            });
        let gated = v["spec"]["schedulingGates"]
            .as_array()
            .is_some_and(|g| !g.is_empty());
        let not_ours = profiles
            .is_some_and(|p| !p.contains(v["spec"]["schedulerName"].as_str().unwrap_or("default-scheduler")));
        let key = (
            v["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            v["metadata"]["name"].as_str().unwrap_or_default().to_string(),
        );
        let rejected = rejected || blocked.contains_key(&key);
        if !(bound || rejected || gated || not_ours || phase == "Succeeded" || phase == "Failed") {
            undecided += 1;
        }
    }
    (undecided == 0, pods.len(), undecided)
}

/// Waits until nothing has been written for `quiet`, every pod is decided, and (with an in-process
/// scheduler) no pod is waiting in activeQ/backoffQ or being bound: a pod in backoff will be retried
/// and may still land, so the cluster has not settled. A pod that failed with an error on
/// several attempts in a row does not hold the run ([`Scheduler::is_settled`]).
pub(crate) async fn settle(
    store: &Store,
    quiet: Duration,
    timeout: Duration,
    scheduler: Option<&Scheduler>,
    profiles: Option<&BTreeSet<String>>,
) -> bool {
    let deadline = Instant::now() + timeout;
    let mut last_report = Instant::now();
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return false;
        }
        let quiet_ok = store.wait_quiet(quiet, remaining).await;
        let (decided, total, undecided) = all_decided(store, profiles);
        match scheduler {
            None if quiet_ok => return true,
            Some(s) if quiet_ok && decided && s.is_settled() => return true,
            _ => {}
        }
        if last_report.elapsed() > Duration::from_secs(2) {
            progress(&format!("waiting: {}/{total} pods decided", total - undecided));
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until this run's objects have not changed for `quiet`, every pod is decided and (with
/// an in-process scheduler) nothing is queued or binding. Observed through lists only.
pub(crate) async fn settle_remote(
    cluster: &mut RemoteCluster,
    quiet: Duration,
    timeout: Duration,
    scheduler: Option<&Scheduler>,
    profiles: Option<&BTreeSet<String>>,
) -> Result<(bool, BTreeMap<String, Vec<Value>>), RemoteError> {
    let deadline = Instant::now() + timeout;
    let mut last = None;
    let mut changed = Instant::now();
    let mut last_report = Instant::now();
    loop {
        let listing = cluster.listing().await?;
        if cluster.finish_terminating_pods(&listing).await? > 0 {
            continue;
        }
        let fp = fingerprint(&listing);
        if last.as_ref() != Some(&fp) {
            last = Some(fp);
            changed = Instant::now();
        }
        let (decided, total, undecided) = all_decided(&listing, profiles);
        let idle = scheduler.is_none_or(Scheduler::is_settled);
        if decided && idle && changed.elapsed() >= quiet {
            return Ok((true, listing));
        }
        if Instant::now() >= deadline {
            return Ok((false, listing));
        }
        if last_report.elapsed() > Duration::from_secs(2) {
            progress(&format!("waiting: {}/{total} pods decided", total - undecided));
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
