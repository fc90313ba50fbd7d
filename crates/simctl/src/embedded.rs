//! A scenario on the embedded control plane (the default of `unisched sim`, and `--from-cluster`):
//! the API server runs in this process, objects are written to its store directly, and the
//! in-process scheduler places the pods over HTTP like any client.

use std::{
    net::SocketAddr,
    path::PathBuf,
    time::{Duration, Instant},
};

use serde_json::Value;
use unisched_runtime::Scheduler;
use unisched_sim::controllers::JobControllerConfig;
use unisched_sim::{
    ApiServer, DeleteOptions, ObjectRef, RunningServer, ServerError, Store, StoreError, report,
    report::FromCluster, scenario,
};

use crate::args::SimArgs;
use crate::hold::{TemplateClaims, claims_created, generated_claim_names, hold, is_held, release};
use crate::in_process::{
    InProcessError, Inventory, explanations, profile_names, start_scheduler, stop_scheduler, wait_for_cache,
    wait_for_claims,
};
use crate::print_report;
use crate::progress::{progress, step_banner};
use crate::scheduler_config::SchedulerConfigError;
use crate::settle::settle;
use crate::snapshot;

/// Why a run on the embedded control plane failed.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    /// The API server did not start (the port is taken, say).
    #[error("starting the embedded API server")]
    Serve(#[source] ServerError),
    /// The server's own URL did not parse as a URI.
    #[error("server URL")]
    ServerUrl(#[source] http::uri::InvalidUri),
    /// The in-process scheduler's client could not be built.
    #[error("building the API client")]
    Client(#[source] kube::Error),
    /// The scheduler's configuration file (read for the profiles of a copied cluster).
    #[error(transparent)]
    Config(#[from] SchedulerConfigError),
    /// The in-process scheduler.
    #[error(transparent)]
    Scheduler(#[from] InProcessError),
    /// A scenario object was refused.
    #[error("{file}: creating {kind} {name}")]
    Create {
        /// The scenario file and document.
        file: String,
        /// The kind.
        kind: String,
        /// The object's name.
        name: String,
        /// Why.
        #[source]
        source: Box<StoreError>,
    },
    /// A node's status could not be written.
    #[error("{file}: node status")]
    NodeStatus {
        /// The scenario file and document.
        file: String,
        /// Why.
        #[source]
        source: Box<StoreError>,
    },
    /// A pod's status (given by the scenario) could not be written.
    #[error("{file}: pod status")]
    PodStatus {
        /// The scenario file and document.
        file: String,
        /// Why.
        #[source]
        source: Box<StoreError>,
    },
    /// A step's deletion failed (the error is part of the message).
    #[error("{file}: deleting {kind} {name}: {error}")]
    Delete {
        /// The scenario file and document.
        file: String,
        /// The kind.
        kind: String,
        /// The object's name.
        name: String,
        /// Why.
        error: Box<StoreError>,
    },
    /// A held pod could not be released.
    #[error("releasing pod {namespace}/{name}")]
    Release {
        /// The pod's namespace.
        namespace: String,
        /// The pod.
        name: String,
        /// Why.
        #[source]
        source: Box<StoreError>,
    },
    /// Writing the JSON report.
    #[error(transparent)]
    Report(#[from] serde_json::Error),
    /// The kubeconfig of `--serve` could not be written.
    #[error("writing {}", path.display())]
    WriteKubeconfig {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

type Result<T, E = EmbeddedError> = std::result::Result<T, E>;

/// The run on the embedded control plane: the copy of a live cluster first (`--from-cluster`),
/// then the scenario's steps, each settled before the next; then the report, and with
/// `--serve` the control plane stays up until Ctrl-C. Returns the exit code (0 settled, 3 not).
pub(crate) async fn sim_embedded(
    args: SimArgs,
    scenario: scenario::Scenario,
    snapshot: Option<snapshot::Snapshot>,
) -> Result<u8> {
    let started = Instant::now();
    // The claim controller (and, for a copy, the garbage collector and kubelet) start below: the claim
    // controller with the run's seed, so generated claim names repeat from run to run; both only
    // after a copied cluster is complete.
    let mut builder = ApiServer::builder()
        .claim_controller(false)
        .job_controller(Some(job_controller(&args)));
    if snapshot.is_some() {
        // The fake kubelet admits a bound pod when it appears; a copied pod's status (its claims)
        // is written just after it is created, so the kubelet starts after the copy, too.
        builder = builder.garbage_collector(false).kubelet(None);
    }
    let server: RunningServer = builder
        .build()
        .serve(SocketAddr::from(([127, 0, 0, 1], args.port)))
        .await
        .map_err(EmbeddedError::Serve)?;
    let store = server.store().clone();
    progress(&format!("control plane listening on {}", server.url()));

    let from_cluster = match &snapshot {
        Some(snap) => Some(copy_cluster(&store, snap, &args)?),
        None => None,
    };
    let stop_controllers = start_controllers(&store, args.seed, snapshot.is_some());

    let (scheduler, profiles) = if args.no_scheduler {
        (None, None)
    } else {
        let kconfig = kube::Config::new(server.url().parse().map_err(EmbeddedError::ServerUrl)?);
        let client = kube::Client::try_from(kconfig).map_err(EmbeddedError::Client)?;
        let (s, p) = start_scheduler(client, &args).await?;
        (Some(s), Some(p))
    };

    for ns in scenario::missing_namespaces(&scenario) {
        let obj = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        if let Err(e) = store.create("namespaces", None, obj) {
            tracing::debug!(namespace = %ns, error = %e, "creating namespace");
        }
    }
    let quiet = Duration::from_millis(args.settle_ms);
    let timeout = Duration::from_secs_f64(args.timeout.max(0.1));
    let mut settled = true;
    let settle_now = || {
        settle(
            &store,
            quiet,
            timeout,
            scheduler.as_ref().map(|(s, _)| s.as_ref()),
            profiles.as_ref(),
        )
    };
    // A copy settles before the scenario's steps, so its pending pods are first decided on the
    // cluster as it is, whatever the steps add.
    if (snapshot.is_some() || scenario.steps.is_empty()) && !settle_now().await {
        settled = false;
        progress(&format!("the copy did not settle within {:.0}s", args.timeout));
    }
    for (i, step) in scenario.steps.iter().enumerate() {
        step_banner(i, scenario.steps.len(), step);
        apply_step(&store, step, scheduler.as_ref().map(|(s, _)| s.as_ref())).await?;
        if !settle_now().await {
            settled = false;
            progress(&format!(
                "step {:?} did not settle within {:.0}s",
                step.name, args.timeout
            ));
        }
    }
    let mut report = report::build(&store, started.elapsed().as_secs_f64());
    report.from_cluster = from_cluster;
    if let Some((s, _)) = &scheduler {
        report.explanations = explanations(s, &report);
    }
    print_report(&args, &report)?;
    if args.serve {
        serve_until_interrupted(&server, &args).await?;
    }
    stop_scheduler(scheduler).await;
    let _ = stop_controllers.send(true);
    server.shutdown().await;
    Ok(if settled { 0 } else { 3 })
}

/// The Job controller of the run. kube-controller-manager's `WorkloadWithJob` is on in the
/// simulator unless `--feature-gates` turns it off, or turns off `GenericWorkload`, which it needs.
/// (A flag that does not parse is reported when the scheduler starts.)
fn job_controller(args: &SimArgs) -> JobControllerConfig {
    let gates = unisched_features::FeatureGates::parse(&args.feature_gates).unwrap_or_default();
    let workload_with_job = gates
        .explicit()
        .get("WorkloadWithJob")
        .copied()
        .unwrap_or_else(|| gates.enabled("GenericWorkload"));
    JobControllerConfig { workload_with_job }
}

/// Loads the copy of the live cluster into the store; pending pods of other schedulers than the
/// in-process one's profiles are left out (all are copied with `--no-scheduler`).
fn copy_cluster(store: &Store, snap: &snapshot::Snapshot, args: &SimArgs) -> Result<FromCluster> {
    let ours = if args.no_scheduler {
        None
    } else {
        Some(profile_names(&crate::scheduler_config::load(
            args.scheduler_config.as_ref(),
        )?))
    };
    let loaded = snapshot::load(store, snap, ours.as_ref());
    progress(&format!(
        "copied {} objects; {} pending pods to decide, {} of other schedulers left out, {} refused",
        loaded.copied.values().sum::<usize>(),
        loaded.pending.len(),
        loaded.not_ours.len(),
        loaded.rejected.len()
    ));
    Ok(loaded)
}

/// Starts the claim controller with the run's seed (so generated claim names repeat from run to
/// run) and, for a copied cluster, the garbage collector and the kubelet; returns the sender
/// that stops them.
fn start_controllers(store: &Store, seed: u64, copied: bool) -> tokio::sync::watch::Sender<bool> {
    let (stop_controllers, controllers_stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(unisched_sim::controllers::claims::run_seeded(
        store.clone(),
        seed,
        controllers_stopped.clone(),
    ));
    if copied {
        tokio::spawn(unisched_sim::controllers::gc::run(
            store.clone(),
            controllers_stopped.clone(),
        ));
        tokio::spawn(unisched_sim::controllers::kubelet::run(
            store.clone(),
            unisched_sim::controllers::KubeletConfig::default(),
            controllers_stopped,
        ));
    }
    stop_controllers
}

/// Applies one step: its deletions, its other objects, then its pods, held until their claims
/// exist and (with an in-process scheduler) the scheduler has seen all of it, then its Jobs (whose
/// pods the Job controller makes at once, so they too come after the barrier).
async fn apply_step(store: &Store, step: &scenario::Step, scheduler: Option<&Scheduler>) -> Result<()> {
    apply_deletes(store, step)?;
    apply_objects(store, step, false)?;
    if let Some(s) = scheduler {
        // A barrier: the pods of a step see the cluster the step describes, whatever order the
        // watches deliver events in. Without it placement would depend on thread timing.
        wait_for_cache(&store_inventory(store), s, Duration::from_secs(10)).await;
    }
    // Pods are held until the claims generated from their templates exist and the scheduler
    // has seen them, then released in creation order, as on a real cluster (`--kubeconfig`):
    // a pod whose claim the scheduler has not seen yet waits for it while later pods go
    // first, and placements would depend on which of two watch streams was faster.
    let held = apply_pods_held(store, step)?;
    let generated = await_template_claims_in(store, &held, Duration::from_secs(30)).await;
    for pod in &generated.missing {
        progress(&format!("pod {pod}: its claims were not created within 30s"));
    }
    if let Some(s) = scheduler {
        wait_for_claims(&generated.claims, s, Duration::from_secs(10)).await;
    }
    release_held(store, &held)?;
    for job in step.apply.iter().filter(|o| o.kind == "Job") {
        apply_one(store, job)?;
    }
    Ok(())
}

/// `--serve`: writes the kubeconfig for kubectl and `unisched run`, then waits for Ctrl-C.
async fn serve_until_interrupted(server: &RunningServer, args: &SimArgs) -> Result<()> {
    let kubeconfig = server.kubeconfig();
    let path = args
        .kubeconfig_out
        .clone()
        .unwrap_or_else(|| PathBuf::from("unisched-sim.kubeconfig"));
    if let Err(source) = std::fs::write(&path, kubeconfig) {
        return Err(EmbeddedError::WriteKubeconfig { path, source });
    }
    let shown = std::path::absolute(&path).unwrap_or(path);
    progress(&format!("wrote the kubeconfig to {}", shown.display()));
    progress(&format!(
        "serving on {} — try: kubectl --kubeconfig {} get pods -A   (Ctrl-C to stop)",
        server.url(),
        shown.display()
    ));
    let _ = tokio::signal::ctrl_c().await;
    Ok(())
}

fn plural_of(kind: &str) -> String {
    match kind {
        "PriorityClass" => "priorityclasses".into(),
        "DeviceClass" => "deviceclasses".into(),
        "PodDisruptionBudget" => "poddisruptionbudgets".into(),
        "StorageClass" => "storageclasses".into(),
        "CSIStorageCapacity" => "csistoragecapacities".into(),
        other => format!("{}s", other.to_ascii_lowercase()),
    }
}

/// Creates (or, for `pods: true`, only the pods / for `false` everything but the pods and the
/// Jobs) of a step.
fn apply_objects(store: &Store, step: &scenario::Step, pods: bool) -> Result<()> {
    for o in step
        .apply
        .iter()
        .filter(|o| o.kind != "Job" && (o.kind == "Pod") == pods)
    {
        apply_one(store, o)?;
    }
    Ok(())
}

/// Creates the step's pods held by [`HOLD_GATE`](crate::hold::HOLD_GATE) and returns them as
/// (namespace, name), in creation order.
fn apply_pods_held(store: &Store, step: &scenario::Step) -> Result<Vec<(String, String)>> {
    let mut held = Vec::new();
    for o in step.apply.iter().filter(|o| o.kind == "Pod") {
        let mut pod = o.clone();
        hold(&mut pod.value);
        let made = apply_one(store, &pod)?;
        held.push((made.namespace().to_string(), made.name().to_string()));
    }
    Ok(held)
}

/// Waits (up to `timeout`) until the claim controller has created the template claims of every
/// held pod; returns them, and the pods whose claims did not appear.
async fn await_template_claims_in(
    store: &Store,
    held: &[(String, String)],
    timeout: Duration,
) -> TemplateClaims {
    let start = Instant::now();
    let mut out = TemplateClaims::default();
    for (ns, name) in held {
        loop {
            let pod = store.get("pods", Some(ns), name).map(|p| p.to_value());
            if let Ok(pod) = &pod
                && claims_created(pod)
            {
                let claims = generated_claim_names(pod);
                out.claims.extend(claims.into_iter().map(|c| (ns.clone(), c)));
                break;
            }
            // A pod whose template is missing gets a blocking event instead of its claims; the
            // report says so.
            let blocked = || report::blocking_events(store).contains_key(&(ns.clone(), name.clone()));
            if pod.is_err() || blocked() {
                break;
            }
            if start.elapsed() > timeout {
                out.missing.push(format!("{ns}/{name}"));
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    out
}

/// Removes [`HOLD_GATE`](crate::hold::HOLD_GATE) from the held pods, in creation order.
fn release_held(store: &Store, held: &[(String, String)]) -> Result<()> {
    for (ns, name) in held {
        let failed = |source| EmbeddedError::Release {
            namespace: ns.clone(),
            name: name.clone(),
            source: Box::new(source),
        };
        let pod = store.get("pods", Some(ns), name).map_err(failed)?;
        if !is_held(pod.value()) {
            continue;
        }
        let patch = unisched_sim::Patch::Merge(release(pod.value()));
        store.patch("pods", Some(ns), name, &patch).map_err(failed)?;
    }
    Ok(())
}

fn apply_deletes(store: &Store, step: &scenario::Step) -> Result<()> {
    for d in &step.delete {
        let plural = plural_of(&d.kind);
        match store.delete(
            &plural,
            d.namespace.as_deref(),
            &d.name,
            &DeleteOptions::default(),
        ) {
            Ok(_) => {}
            Err(error) => {
                return Err(EmbeddedError::Delete {
                    file: d.source.to_string(),
                    kind: d.kind.clone(),
                    name: d.name.clone(),
                    error: Box::new(error),
                });
            }
        }
    }
    Ok(())
}

/// Creates one scenario object; returns it as stored.
fn apply_one(store: &Store, o: &scenario::ScenarioObject) -> Result<ObjectRef> {
    let plural = plural_of(&o.kind);
    let mut value: Value = o.value.clone();
    // Status in scenario files is accepted for nodes (allocatable), slices and pods (a bound pod in
    // the middle of an in-place resize); the store keeps it.
    if let Some(m) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    let made = store
        .create(&plural, o.namespace.as_deref(), value)
        .map_err(|source| EmbeddedError::Create {
            file: o.source.to_string(),
            kind: o.kind.clone(),
            name: o.display_name(),
            source: Box::new(source),
        })?;
    if o.kind == "Node" && o.value.get("status").is_some() {
        // Creation may drop status for kinds with a status subresource; write it explicitly.
        let name = o.value["metadata"]["name"].as_str().unwrap_or_default();
        let patch = unisched_sim::Patch::Merge(serde_json::json!({"status": o.value["status"].clone()}));
        store
            .patch_status("nodes", None, name, &patch)
            .map_err(|source| EmbeddedError::NodeStatus {
                file: o.source.to_string(),
                source: Box::new(source),
            })?;
    }
    if o.kind == "Pod"
        && let Some(status) = o.value.get("status")
    {
        // Pod creation starts from an empty status, as kube-apiserver's does.
        let patch = unisched_sim::Patch::Merge(serde_json::json!({ "status": status }));
        return store
            .patch_status("pods", Some(made.namespace()), made.name(), &patch)
            .map_err(|source| EmbeddedError::PodStatus {
                file: o.source.to_string(),
                source: Box::new(source),
            });
    }
    Ok(made)
}

/// What the store holds: the inventory the in-process scheduler must have seen.
fn store_inventory(store: &Store) -> Inventory {
    let names = |plural: &str| -> Vec<String> {
        store
            .list_all(plural, None)
            .map(|v| {
                v.iter()
                    .filter_map(|o| o.value()["metadata"]["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    Inventory {
        nodes: names("nodes").len(),
        slices: names("resourceslices").len(),
        classes: names("deviceclasses"),
        namespaces: names("namespaces"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;
    use crate::hold::HOLD_GATE;

    const STEP: &str = "\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.example.com}
---
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: default}
spec:
  schedulerName: unisched
  resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
  containers: [{name: c, image: x, resources: {claims: [{name: gpu}]}}]
---
apiVersion: v1
kind: Pod
metadata: {name: b, namespace: default}
spec:
  schedulerName: unisched
  schedulingGates: [{name: mine}]
  containers: [{name: c, image: x}]
";

    /// A step's pods are created held, the wait returns the claims made from their templates
    /// (and names a pod whose claims did not come), and the release removes only the hold.
    #[tokio::test]
    async fn held_pods_wait_for_their_template_claims_and_keep_their_own_gates() {
        let dir = std::env::temp_dir().join(format!("unisched-sim-held-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("step.yaml");
        std::fs::write(&path, STEP).unwrap();
        let scenario = scenario::load(&[path]).unwrap();
        let step = &scenario.steps[0];
        let store = ApiServer::builder().controllers(false).build().store().clone();
        apply_objects(&store, step, false).unwrap();
        let held = apply_pods_held(&store, step).unwrap();
        let pair = |n: &str| ("default".to_string(), n.to_string());
        assert_eq!(held, [pair("a"), pair("b")]);
        let gates = |name: &str| {
            store.get("pods", Some("default"), name).unwrap().value()["spec"]["schedulingGates"].clone()
        };
        assert_eq!(gates("a"), json!([{"name": HOLD_GATE}]));
        assert_eq!(gates("b"), json!([{"name": "mine"}, {"name": HOLD_GATE}]));

        // No claim controller yet: the wait gives up on `a` and names it.
        let none = await_template_claims_in(&store, &held, Duration::from_millis(50)).await;
        assert_eq!(
            (none.claims.len(), none.missing),
            (0, vec!["default/a".to_string()])
        );

        let (_stop, stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(unisched_sim::controllers::claims::run_seeded(
            store.clone(),
            1,
            stopped,
        ));
        let made = await_template_claims_in(&store, &held, Duration::from_secs(10)).await;
        assert!(made.missing.is_empty(), "{:?}", made.missing);
        assert_eq!(made.claims.len(), 1, "{:?}", made.claims);
        assert!(
            store
                .get("resourceclaims", Some("default"), &made.claims[0].1)
                .is_ok()
        );

        release_held(&store, &held).unwrap();
        assert!(gates("a").as_array().is_none_or(Vec::is_empty), "{}", gates("a"));
        assert_eq!(gates("b"), json!([{"name": "mine"}]));
    }
}
