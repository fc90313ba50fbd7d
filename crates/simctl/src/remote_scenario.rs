//! `unisched sim --kubeconfig`: the steps of a scenario on an API server this command did not
//! start, with or without an in-process scheduler. The objects go through [`RemoteCluster`],
//! which keeps to its rules (create only, delete only what it created); the step barriers are the
//! same as on the embedded control plane.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use serde_json::Value;
use unisched_sim::{report, scenario};

use crate::args::SimArgs;
use crate::in_process::{
    InProcess, InProcessError, explanations, start_scheduler, stop_scheduler, wait_for_cache, wait_for_claims,
};
use crate::print_report;
use crate::progress::{progress, step_banner};
use crate::remote::{RUN_LABEL, RemoteCluster, RemoteError};
use crate::settle::settle_remote;

/// Why a run on a remote API server failed.
#[derive(Debug, thiserror::Error)]
pub enum RemoteScenarioError {
    /// The API server, or an object on it.
    #[error(transparent)]
    Remote(#[from] RemoteError),
    /// The in-process scheduler.
    #[error(transparent)]
    Scheduler(#[from] InProcessError),
    /// Writing the JSON report.
    #[error(transparent)]
    Report(#[from] serde_json::Error),
}

/// `unisched sim --kubeconfig`: runs the scenario on the remote API server, deletes what it created
/// (unless `--keep`) and prints the report; returns the exit code (0 settled, 3 did not settle).
pub(crate) async fn sim_remote(
    args: SimArgs,
    scenario: scenario::Scenario,
    kubeconfig: &std::path::Path,
) -> Result<u8, RemoteScenarioError> {
    let started = Instant::now();
    let mut cluster = RemoteCluster::connect(kubeconfig).await?;
    let objects: Vec<&scenario::ScenarioObject> = scenario.steps.iter().flat_map(|s| &s.apply).collect();
    let namespaces = scenario::missing_namespaces(&scenario);
    progress(&cluster.plan(&objects, &namespaces));
    if args.keep {
        progress("--keep: the created objects stay in the cluster after the run");
    } else {
        progress("the created objects are deleted at the end (--keep leaves them)");
    }
    let (scheduler, profiles) = if args.no_scheduler {
        (None, None)
    } else {
        let (s, p) = start_scheduler(cluster.client().clone(), &args).await?;
        (Some(s), Some(p))
    };
    let outcome = run_remote_steps(
        &mut cluster,
        &scenario,
        &args,
        &namespaces,
        &scheduler,
        profiles.as_ref(),
    )
    .await;
    let explained = match (&outcome, &scheduler) {
        (Ok((_, listing)), Some((s, _))) => {
            let report = report::build(listing, 0.0);
            explanations(s, &report)
        }
        _ => Vec::new(),
    };
    stop_scheduler(scheduler).await;
    if args.keep {
        progress(&format!(
            "kept the objects labelled {}={} on {}",
            RUN_LABEL,
            cluster.run_id(),
            cluster.server()
        ));
    } else {
        for failure in cluster.cleanup().await {
            progress(&format!("cleanup: {failure}"));
        }
    }
    let (settled, listing) = outcome?;
    let mut report = report::build(&listing, started.elapsed().as_secs_f64());
    report.explanations = explained;
    print_report(&args, &report)?;
    Ok(if settled { 0 } else { 3 })
}

/// Applies the steps one by one, each settled before the next; returns whether all settled and
/// the last listing.
async fn run_remote_steps(
    cluster: &mut RemoteCluster,
    scenario: &scenario::Scenario,
    args: &SimArgs,
    namespaces: &BTreeSet<String>,
    scheduler: &Option<InProcess>,
    profiles: Option<&BTreeSet<String>>,
) -> Result<(bool, BTreeMap<String, Vec<Value>>), RemoteError> {
    for ns in namespaces {
        cluster.ensure_namespace(ns).await?;
    }
    let quiet = Duration::from_millis(args.settle_ms);
    let timeout = Duration::from_secs_f64(args.timeout.max(0.1));
    let mut settled = true;
    let mut listing = BTreeMap::new();
    for (i, step) in scenario.steps.iter().enumerate() {
        step_banner(i, scenario.steps.len(), step);
        for d in &step.delete {
            cluster.delete(d).await?;
        }
        for o in step.apply.iter().filter(|o| o.kind != "Pod") {
            cluster.create(o).await?;
        }
        if let Some((s, _)) = scheduler {
            let inventory = cluster.cluster_inventory().await?;
            wait_for_cache(&inventory, s, Duration::from_secs(10)).await;
        }
        for o in step.apply.iter().filter(|o| o.kind == "Pod") {
            cluster.create(o).await?;
        }
        let generated = cluster.await_template_claims(Duration::from_secs(30)).await?;
        for pod in &generated.missing {
            progress(&format!("pod {pod}: its claims were not created within 30s"));
        }
        if let Some((s, _)) = scheduler {
            // The claim watch and the pod watch are separate streams: a pod released before the
            // scheduler has seen its claim waits for it while later pods go first, and the
            // placements then depend on which stream was faster.
            wait_for_claims(&generated.claims, s, Duration::from_secs(10)).await;
        }
        cluster.release_held_pods().await?;
        let (ok, l) = settle_remote(
            cluster,
            quiet,
            timeout,
            scheduler.as_ref().map(|(s, _)| s.as_ref()),
            profiles,
        )
        .await?;
        listing = l;
        if !ok {
            settled = false;
            progress(&format!(
                "step {:?} did not settle within {:.0}s",
                step.name, args.timeout
            ));
        }
    }
    Ok((settled, listing))
}
