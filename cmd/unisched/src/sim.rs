//! `unisched sim`: apply a scenario to the embedded control plane (or, with `--kubeconfig`, to any
//! API server), let the real scheduler runtime place it over HTTP, and report.

use std::{
    collections::{BTreeMap, BTreeSet},
    io::Write,
    net::SocketAddr,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use serde_json::Value;
use unisched_runtime::{Scheduler, SchedulerOptions};
use unisched_sim::{
    ApiServer, DeleteOptions, ObjectRef, RunningServer, Store,
    report::{self, ObjectSource},
    scenario,
};

use crate::remote::{Inventory, RemoteCluster, fingerprint};
use crate::snapshot;

/// Output format of the report.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Output {
    /// Readable tables.
    Table,
    /// One JSON document (stable shape).
    Json,
}

/// Flags of `unisched sim`.
#[derive(Args, Debug)]
pub struct SimArgs {
    /// Scenario files or directories (see README: steps, `*.delete.yaml`).
    #[arg(required_unless_present_any = ["serve", "from_cluster"])]
    pub paths: Vec<PathBuf>,
    /// Copy the cluster of this kubeconfig (read only: get and list) into the embedded control
    /// plane first, then apply the scenario, if any, and let unisched decide the pending pods.
    #[arg(long = "from-cluster", conflicts_with = "kubeconfig")]
    pub from_cluster: Option<PathBuf>,
    /// Report format.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Give up waiting for the cluster to settle after this many seconds (per step).
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
    /// A `KubeSchedulerConfiguration` for the in-process scheduler (leader election is turned off).
    #[arg(long = "scheduler-config")]
    pub scheduler_config: Option<PathBuf>,
    /// Keep the control plane running after the scenario (Ctrl-C stops it).
    #[arg(long, conflicts_with = "kubeconfig")]
    pub serve: bool,
    /// Where to write a kubeconfig for kubectl and `unisched run` (with --serve; default
    /// `unisched-sim.kubeconfig` in the current directory).
    #[arg(long = "kubeconfig-out", requires = "serve")]
    pub kubeconfig_out: Option<PathBuf>,
    /// Apply the scenario to the API server of this kubeconfig instead of starting the embedded
    /// one. Only objects this run creates are touched, and they are deleted at the end.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// With --kubeconfig: leave the objects this run created in the cluster.
    #[arg(long, requires = "kubeconfig")]
    pub keep: bool,
    /// Run only the control plane (start `unisched run --kubeconfig …` separately).
    #[arg(long = "no-scheduler")]
    pub no_scheduler: bool,
    /// Port to listen on (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Seed for tie-breaks, so the same scenario gives the same placement.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// How long nothing may change for the cluster to count as settled (milliseconds).
    #[arg(long = "settle-ms", default_value_t = 500)]
    pub settle_ms: u64,
    /// Explain every placement: the best-scored nodes with each score plugin's weighted score
    /// (a table after the report; `explanations` in JSON output).
    #[arg(long)]
    pub explain: bool,
}

/// A progress line for the user: plain `[sim] …` text, or under `--logging-format json` one
/// record of the log stream (target `unisched::sim`, shown at every verbosity) so that stderr
/// stays one JSON object per line.
pub(crate) fn progress(msg: &str) {
    if crate::logging::json_enabled() {
        tracing::info!(target: "unisched::sim", "{msg}");
        return;
    }
    let mut e = std::io::stderr();
    let _ = writeln!(e, "[sim] {msg}");
}

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
/// and may still land, so the cluster has not settled.
async fn settle(
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
            Some(s) if quiet_ok && decided && s.is_idle() => return true,
            _ => {}
        }
        if last_report.elapsed() > Duration::from_secs(2) {
            progress(&format!("waiting: {}/{total} pods decided", total - undecided));
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn plural_of(kind: &str) -> String {
    match kind {
        "PriorityClass" => "priorityclasses".into(),
        "DeviceClass" => "deviceclasses".into(),
        "PodDisruptionBudget" => "poddisruptionbudgets".into(),
        "StorageClass" => "storageclasses".into(),
        other => format!("{}s", other.to_ascii_lowercase()),
    }
}

/// Creates (or, for `pods: true`, only the pods / for `false` everything but the pods) of a step.
fn apply_objects(store: &Store, step: &scenario::Step, pods: bool) -> Result<()> {
    for o in step.apply.iter().filter(|o| (o.kind == "Pod") == pods) {
        apply_one(store, o)?;
    }
    Ok(())
}

/// Creates the step's pods held by [`HOLD_GATE`](crate::remote::HOLD_GATE) and returns them as (namespace, name), in
/// creation order.
fn apply_pods_held(store: &Store, step: &scenario::Step) -> Result<Vec<(String, String)>> {
    let mut held = Vec::new();
    for o in step.apply.iter().filter(|o| o.kind == "Pod") {
        let mut pod = o.clone();
        crate::remote::hold(&mut pod.value);
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
) -> crate::remote::TemplateClaims {
    let start = Instant::now();
    let mut out = crate::remote::TemplateClaims::default();
    for (ns, name) in held {
        loop {
            let pod = store.get("pods", Some(ns), name).map(|p| p.to_value());
            if let Ok(pod) = &pod
                && crate::remote::claims_created(pod)
            {
                let claims = crate::remote::generated_claim_names(pod);
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

/// Removes [`HOLD_GATE`](crate::remote::HOLD_GATE) from the held pods, in creation order.
fn release_held(store: &Store, held: &[(String, String)]) -> Result<()> {
    for (ns, name) in held {
        let pod = store
            .get("pods", Some(ns), name)
            .with_context(|| format!("releasing pod {ns}/{name}"))?;
        let patch = unisched_sim::Patch::Merge(crate::remote::release(pod.value()));
        store
            .patch("pods", Some(ns), name, &patch)
            .with_context(|| format!("releasing pod {ns}/{name}"))?;
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
            Err(e) => bail!("{}: deleting {} {}: {e}", d.source, d.kind, d.name),
        }
    }
    Ok(())
}

/// Creates one scenario object; returns it as stored.
fn apply_one(store: &Store, o: &scenario::ScenarioObject) -> Result<ObjectRef> {
    let plural = plural_of(&o.kind);
    let mut value: Value = o.value.clone();
    // Status in scenario files is accepted for nodes (allocatable) and slices; the store keeps it.
    if let Some(m) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    let made = store
        .create(&plural, o.namespace.as_deref(), value)
        .with_context(|| format!("{}: creating {} {}", o.source, o.kind, o.display_name()))?;
    if o.kind == "Node" && o.value.get("status").is_some() {
        // Creation may drop status for kinds with a status subresource; write it explicitly.
        let name = o.value["metadata"]["name"].as_str().unwrap_or_default();
        let patch = unisched_sim::Patch::Merge(serde_json::json!({"status": o.value["status"].clone()}));
        store
            .patch_status("nodes", None, name, &patch)
            .with_context(|| format!("{}: node status", o.source))?;
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
async fn wait_for_cache(inventory: &Inventory, scheduler: &Scheduler, timeout: Duration) {
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
async fn wait_for_claims(claims: &[(String, String)], scheduler: &Scheduler, timeout: Duration) {
    poll_until(timeout, || {
        let dra = scheduler.dra();
        claims.iter().all(|(ns, name)| dra.claim(ns, name).is_some())
    })
    .await;
}

/// The in-process scheduler and its task.
type InProcess = (
    Arc<Scheduler>,
    tokio::task::JoinHandle<Result<(), unisched_runtime::RuntimeError>>,
);

/// The scheduler names the profiles of the configuration serve.
fn profile_names(config: &unisched_framework::config::KubeSchedulerConfiguration) -> BTreeSet<String> {
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
async fn start_scheduler(client: kube::Client, args: &SimArgs) -> Result<(InProcess, BTreeSet<String>)> {
    let mut config = crate::run::load_config(args.scheduler_config.as_ref())?;
    config.leader_election.leader_elect = false;
    config.client_connection.qps = -1.0;
    let profiles = profile_names(&config);
    let options = SchedulerOptions {
        config,
        seed: args.seed,
        identity: "unisched-sim".into(),
        health_addr: None,
        default_namespace: "default".into(),
        binding_connections: None,
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

async fn stop_scheduler(scheduler: Option<InProcess>) {
    if let Some((s, task)) = scheduler {
        s.stop();
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }
}

fn print_report(args: &SimArgs, report: &report::Report) -> Result<()> {
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&report.to_json())?),
        Output::Table => print!("{}", report.to_table()),
    }
    Ok(())
}

fn step_banner(i: usize, n: usize, step: &scenario::Step) {
    progress(&format!(
        "step {}/{n} {:?}: {} to create, {} to delete",
        i + 1,
        step.name,
        step.apply.len(),
        step.delete.len()
    ));
}

/// Runs the command; returns the exit code (0 settled, 3 did not settle in time).
pub async fn sim(args: SimArgs) -> Result<u8> {
    // Read and validate everything first: nothing is applied if any file is bad.
    let scenario = if args.paths.is_empty() {
        scenario::Scenario::default()
    } else {
        scenario::load(&args.paths)?
    };
    if let Some(kc) = args.kubeconfig.clone() {
        return sim_remote(args, scenario, &kc).await;
    }
    let snapshot = match &args.from_cluster {
        Some(kc) => {
            let snap = snapshot::read(kc).await?;
            snapshot::check_not_empty(&snap)?;
            progress(&format!(
                "read {} (get/list only; nothing is written to it)",
                snap.server
            ));
            Some(snap)
        }
        None => None,
    };
    sim_embedded(args, scenario, snapshot).await
}

async fn sim_embedded(
    args: SimArgs,
    scenario: scenario::Scenario,
    snapshot: Option<snapshot::Snapshot>,
) -> Result<u8> {
    let started = Instant::now();
    // The claim controller (and, for a copy, the garbage collector and kubelet) start below: the claim
    // controller with the run's seed, so generated claim names repeat from run to run; both only
    // after a copied cluster is complete.
    let mut builder = ApiServer::builder().claim_controller(false);
    if snapshot.is_some() {
        // The fake kubelet admits a bound pod when it appears; a copied pod's status (its claims)
        // is written just after it is created, so the kubelet starts after the copy, too.
        builder = builder.garbage_collector(false).kubelet(None);
    }
    let server: RunningServer = builder
        .build()
        .serve(SocketAddr::from(([127, 0, 0, 1], args.port)))
        .await
        .context("starting the embedded API server")?;
    let store = server.store().clone();
    progress(&format!("control plane listening on {}", server.url()));

    let from_cluster = match &snapshot {
        Some(snap) => {
            let ours = if args.no_scheduler {
                None
            } else {
                Some(profile_names(&crate::run::load_config(
                    args.scheduler_config.as_ref(),
                )?))
            };
            let loaded = snapshot::load(&store, snap, ours.as_ref());
            progress(&format!(
                "copied {} objects; {} pending pods to decide, {} of other schedulers left out, {} refused",
                loaded.copied.values().sum::<usize>(),
                loaded.pending.len(),
                loaded.not_ours.len(),
                loaded.rejected.len()
            ));
            Some(loaded)
        }
        None => None,
    };
    let (stop_controllers, controllers_stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(unisched_sim::controllers::claims::run_seeded(
        store.clone(),
        args.seed,
        controllers_stopped.clone(),
    ));
    if snapshot.is_some() {
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

    let (scheduler, profiles) = if args.no_scheduler {
        (None, None)
    } else {
        let kconfig = kube::Config::new(server.url().parse().context("server URL")?);
        let client = kube::Client::try_from(kconfig).context("building the API client")?;
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
        apply_deletes(&store, step)?;
        apply_objects(&store, step, false)?;
        if let Some((s, _)) = &scheduler {
            // A barrier: the pods of a step see the cluster the step describes, whatever order the
            // watches deliver events in. Without it placement would depend on thread timing.
            wait_for_cache(&store_inventory(&store), s, Duration::from_secs(10)).await;
        }
        // Pods are held until the claims generated from their templates exist and the scheduler
        // has seen them, then released in creation order, as on a real cluster (`--kubeconfig`):
        // a pod whose claim the scheduler has not seen yet waits for it while later pods go
        // first, and placements would depend on which of two watch streams was faster.
        let held = apply_pods_held(&store, step)?;
        let generated = await_template_claims_in(&store, &held, Duration::from_secs(30)).await;
        for pod in &generated.missing {
            progress(&format!("pod {pod}: its claims were not created within 30s"));
        }
        if let Some((s, _)) = &scheduler {
            wait_for_claims(&generated.claims, s, Duration::from_secs(10)).await;
        }
        release_held(&store, &held)?;
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
        let kubeconfig = server.kubeconfig();
        let path = args
            .kubeconfig_out
            .clone()
            .unwrap_or_else(|| PathBuf::from("unisched-sim.kubeconfig"));
        std::fs::write(&path, kubeconfig).with_context(|| format!("writing {}", path.display()))?;
        let shown = std::path::absolute(&path).unwrap_or(path);
        progress(&format!("wrote the kubeconfig to {}", shown.display()));
        progress(&format!(
            "serving on {} — try: kubectl --kubeconfig {} get pods -A   (Ctrl-C to stop)",
            server.url(),
            shown.display()
        ));
        let _ = tokio::signal::ctrl_c().await;
    }
    stop_scheduler(scheduler).await;
    let _ = stop_controllers.send(true);
    server.shutdown().await;
    Ok(if settled { 0 } else { 3 })
}

/// Waits until this run's objects have not changed for `quiet`, every pod is decided and (with
/// an in-process scheduler) nothing is queued or binding. Observed through lists only.
async fn settle_remote(
    cluster: &mut RemoteCluster,
    quiet: Duration,
    timeout: Duration,
    scheduler: Option<&Scheduler>,
    profiles: Option<&BTreeSet<String>>,
) -> Result<(bool, BTreeMap<String, Vec<Value>>)> {
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
        let idle = scheduler.is_none_or(Scheduler::is_idle);
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

async fn sim_remote(args: SimArgs, scenario: scenario::Scenario, kubeconfig: &std::path::Path) -> Result<u8> {
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
            crate::remote::RUN_LABEL,
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

async fn run_remote_steps(
    cluster: &mut RemoteCluster,
    scenario: &scenario::Scenario,
    args: &SimArgs,
    namespaces: &BTreeSet<String>,
    scheduler: &Option<InProcess>,
    profiles: Option<&BTreeSet<String>>,
) -> Result<(bool, BTreeMap<String, Vec<Value>>)> {
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

/// The recorded explanations of the pods that ended on the node they were explained for (a pod
/// rescheduled after a failed binding keeps only its final placement).
fn explanations(s: &Scheduler, report: &report::Report) -> Vec<report::PodExplanation> {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;
    use crate::remote::HOLD_GATE;

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
