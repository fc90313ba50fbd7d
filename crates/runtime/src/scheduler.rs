//! The running scheduler: profiles, cache, queue, watches, the scheduling loop and binding tasks.
//!
//! The scheduling cycle runs on one dedicated OS thread, one pod at a time, exactly like upstream;
//! it never awaits. Everything that does I/O — binding cycles, status patches, events — is handed
//! to the tokio runtime, so a slow API server delays a pod's binding, never the next pod's
//! placement. The same code runs in a cluster (`unisched run`) and inside `unisched sim`.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::{api::core::v1::Pod, jiff::Timestamp};
use kube::Client;
use serde_json::json;
use tokio::{runtime::Handle, task::JoinHandle};
use tokio_util::sync::CancellationToken;
use unisched_cache::{Cache, DraCache, VolumeCache};
mod composite;
mod nomination;
mod workload;

use nomination::Nomination;

use unisched_framework::{
    AsyncBinding, BindingTask, BoundPod, CycleOutcome, EventObject, Framework, FrameworkError, PodGroupKey,
    PodGroupStore, PodInfo, QueuedPodInfo, SchedulingAlgorithm, SchedulingFailure, SeededRng, Status,
    abandon_binding_cycle, async_binding, config::KubeSchedulerConfiguration, finish_binding_cycle,
    run_binding_cycle, run_scheduling_cycle, start_binding_cycle, wait_for_permit, well_known,
};
use unisched_plugins::{BindError, BindFuture, Binder, PluginContext, PluginFeatures, Registry};
use unisched_queue::{PendingPods, QueueConfig, QueueError, SchedulingQueue};

use unisched_features::FeatureGates;

use crate::{
    binding_threads::{BINDING_THREAD_KEEP_ALIVE, BindingThreads, SyncWriter},
    dra::{RuntimeDraApi, observe_own_claim_changes},
    events::{EventRecorder, EventType, PodEvent, spawn_event_writer},
    explain::Explanations,
    gated::{GATED_REPORT_GRACE, GateReporter},
    http::{Health, serve},
    in_flight::InFlight,
    informers::PodHandler,
    leader::{ElectionEnd, LeaseConfig, run_leader_election},
    metrics::{Metrics, MetricsError},
    namespaces::NamespaceStore,
    preemption::{PdbStore, RuntimePreemptor},
    volume::RuntimeVolumeApi,
    watches::{self, ReadinessGate, WatchTargets},
    writer::{ApiWriter, LeaderFlag, WriteError},
};

/// Why the scheduler could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The configuration does not describe a valid scheduler.
    #[error("building profile {profile:?}: {source}")]
    Profile {
        /// Profile.
        profile: String,
        /// What was wrong.
        #[source]
        source: FrameworkError,
    },
    /// The queue rejected the profiles (e.g. different QueueSort plugins).
    #[error("building the scheduling queue: {0}")]
    Queue(#[source] QueueError),
    /// Metrics could not be registered.
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    /// The health/metrics endpoint could not bind.
    #[error("serving health and metrics on {addr}: {error}")]
    Serve {
        /// Address.
        addr: SocketAddr,
        /// Error.
        #[source]
        error: std::io::Error,
    },
    /// A configured extender could not be set up.
    #[error(transparent)]
    Extenders(#[from] unisched_extender::ExtendersError),
    /// The leader lease was lost; the process must exit.
    #[error("leaderelection lost")]
    LeaseLost,
}

/// How to run.
#[derive(Clone, Debug)]
pub struct SchedulerOptions {
    /// The completed, validated configuration.
    pub config: KubeSchedulerConfiguration,
    /// Tie-break seed; a fixed one makes runs repeatable.
    pub seed: u64,
    /// This replica's identity (lease holder, event `reportingInstance`).
    pub identity: String,
    /// Where to serve `/metrics`, `/healthz`, `/readyz`, `/configz`; `None` serves nothing.
    pub health_addr: Option<SocketAddr>,
    /// Lease namespace when the configuration leaves it empty.
    pub default_namespace: String,
    /// When set, each binding thread opens a connection of its own with this configuration and
    /// sends its cycle's writes on it (see `SyncWriter`); `None`: binding writes go
    /// through the shared client. `unisched run` sets it; the embedded simulator, whose API server
    /// shares the I/O runtime, does not.
    pub binding_connections: Option<kube::Config>,
    /// The effective feature gates (`--feature-gates`): reported by `/configz` and
    /// `kubernetes_feature_enabled`.
    pub feature_gates: FeatureGates,
}

/// Binds through the API writer: from a binding thread ([`Binder::bind`]), or as a future on the
/// I/O runtime ([`Binder::bind_later`], for binding cycles with nothing else to wait for).
struct RuntimeBinder {
    api: SyncWriter,
    writer: ApiWriter,
}

/// The binding's pod coordinates: namespace, name, UID.
fn binding_target(pod: &Pod) -> (String, String, String) {
    (
        pod.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
        pod.metadata.name.clone().unwrap_or_default(),
        pod.metadata.uid.clone().unwrap_or_default(),
    )
}

fn to_bind_error(e: WriteError) -> BindError {
    match e {
        WriteError::Conflict(m) => BindError::Conflict(m),
        WriteError::NotFound(m) => BindError::NotFound(m),
        other => BindError::Api(other.to_string()),
    }
}

impl Binder for RuntimeBinder {
    fn bind(&self, pod: &Pod, node: &str) -> Result<(), BindError> {
        let (ns, name, uid) = binding_target(pod);
        self.api
            .run(async |writer| writer.bind(&ns, &name, &uid, node).await)
            .map_err(to_bind_error)
    }

    fn bind_later(&self, pod: &Pod, node: &str) -> Option<BindFuture> {
        let (ns, name, uid) = binding_target(pod);
        let (writer, node) = (self.writer.clone(), node.to_string());
        Some(Box::pin(async move {
            writer.bind(&ns, &name, &uid, &node).await.map_err(to_bind_error)
        }))
    }
}

pub(crate) struct Shared {
    profiles: HashMap<String, Arc<Framework>>,
    cache: Arc<Cache>,
    dra: Arc<DraCache>,
    volumes: Arc<VolumeCache>,
    queue: Arc<SchedulingQueue>,
    pods: Arc<PodHandler>,
    writer: ApiWriter,
    events: EventRecorder,
    metrics: Metrics,
    handle: Handle,
    /// Where binding cycles run.
    binding: BindingThreads,
    /// Cancelled by [`Scheduler::stop`] or when the lease is lost: no new pod is taken.
    stop: CancellationToken,
    bindings_in_flight: InFlight,
    namespaces: Arc<NamespaceStore>,
    explanations: Explanations,
    pdbs: Arc<PdbStore>,
    /// PodGroups and their members, when pod groups are scheduled together (GenericWorkload on
    /// and the Workload API served); `None`: every pod is scheduled alone.
    pub(crate) pod_groups: Option<Arc<PodGroupStore>>,
    /// Gate NominatedNodeNameForExpectation: a binding cycle that waits first writes the pod's
    /// nomination (see `nomination`).
    nominate_before_binding: bool,
    /// Gate PodGroupPreemptionPolicy: a group's members must share the root group's own
    /// `preemptionPolicy` (otherwise the first member's).
    group_preemption_policy: bool,
}

/// A running scheduler.
pub struct Scheduler {
    shared: Arc<Shared>,
    health: Health,
    leader: LeaderFlag,
    options: SchedulerOptions,
    client: Client,
    /// Where the health endpoints listen, when served.
    pub health_addr: Option<SocketAddr>,
    /// The endpoints' router, for a server of the caller's (HTTPS in `unisched run`).
    router: axum::Router,
    /// How long a stop waits for in-flight binding cycles before giving up the lease anyway.
    shutdown_grace: Duration,
}

/// The default for [`Scheduler::with_shutdown_grace`]: well inside the kubelet's 30 s
/// `terminationGracePeriodSeconds`.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("identity", &self.options.identity)
            .finish()
    }
}

/// The PodGroup store when pod groups are scheduled together: GenericWorkload on and the API
/// server serving PodGroups. Otherwise one line says why not, and pods are scheduled alone.
/// With CompositePodGroup on and composites served, the store keeps the forest too.
async fn workload_store(client: &Client, gates: &FeatureGates) -> Option<Arc<PodGroupStore>> {
    if !gates.enabled("GenericWorkload") {
        tracing::info!("GenericWorkload is off: pods of a PodGroup are scheduled one by one");
        return None;
    }
    if !crate::pod_groups::served(client).await {
        tracing::info!(
            api = crate::pod_groups::POD_GROUP_API,
            "PodGroups are not served: pods of a PodGroup are scheduled one by one"
        );
        return None;
    }
    if !gates.enabled("CompositePodGroup") {
        return Some(Arc::new(PodGroupStore::new()));
    }
    if !crate::composite_pod_groups::served(client).await {
        tracing::info!(
            api = crate::composite_pod_groups::COMPOSITE_POD_GROUP_API,
            "CompositePodGroups are not served: every PodGroup is scheduled as a root"
        );
        return Some(Arc::new(PodGroupStore::new()));
    }
    Some(Arc::new(PodGroupStore::with_composites()))
}

impl Scheduler {
    /// Builds profiles, cache, queue and writer, and starts the health endpoint. Nothing is
    /// watched or scheduled until [`Scheduler::run`].
    pub async fn new(client: Client, options: SchedulerOptions) -> Result<Self, RuntimeError> {
        let metrics = Metrics::new()?;
        let cfg = &options.config;
        let leader = LeaderFlag::new(!cfg.leader_election.leader_elect);
        let writer = ApiWriter::new(
            client.clone(),
            cfg.client_connection.qps,
            cfg.client_connection.burst,
            metrics.clone(),
            leader.clone(),
        );
        let handle = Handle::current();
        let binder: Arc<dyn Binder> = Arc::new(RuntimeBinder {
            api: SyncWriter::new(writer.clone(), handle.clone()),
            writer: writer.clone(),
        });
        let dra = Arc::new(DraCache::new());
        let dra_api = Arc::new(RuntimeDraApi::new(
            writer.clone(),
            handle.clone(),
            metrics.clone(),
        ));
        // Namespace labels for InterPodAffinity's namespaceSelector; `run` feeds it from a watch.
        let namespaces = Arc::new(NamespaceStore::new());
        // Events get a client of their own (own token bucket, same leader fence), as upstream's
        // event broadcaster does: a burst of FailedScheduling events never delays a binding.
        let event_writer = ApiWriter::new(
            client.clone(),
            cfg.client_connection.qps,
            cfg.client_connection.burst,
            metrics.clone(),
            leader.clone(),
        );
        let events = spawn_event_writer(event_writer, metrics.clone(), options.identity.clone(), 1000);
        // DefaultPreemption: PDBs from a watch (`run`), evictions written asynchronously.
        let pdbs = Arc::new(PdbStore::new());
        let preemptor = Arc::new(RuntimePreemptor::new(
            writer.clone(),
            handle.clone(),
            events.clone(),
            metrics.clone(),
        ));
        // Volume plugins: PVs, PVCs, StorageClasses and CSINodes from watches (`run`).
        let volumes = Arc::new(VolumeCache::new());
        let volume_api = Arc::new(RuntimeVolumeApi::new(writer.clone(), handle.clone()));
        let pod_groups = workload_store(&client, &options.feature_gates).await;
        let mut context = PluginContext::new(binder)
            .with_dra(dra.clone(), dra_api)
            .with_namespaces(namespaces.clone())
            .with_preemption(preemptor.clone(), pdbs.clone())
            .with_volumes(volumes.clone(), volume_api)
            .with_features(plugin_features(&options.feature_gates));
        if let Some(groups) = &pod_groups {
            context = context.with_pod_groups(
                groups.clone(),
                options.feature_gates.enabled("TopologyAwareWorkloadScheduling"),
            );
        }
        let registry = Registry::in_tree(context);
        let extenders = crate::extenders::extenders(&cfg.extenders, &metrics)?;
        let mut profiles = HashMap::new();
        let mut frameworks = Vec::new();
        for p in &cfg.profiles {
            let name = p.scheduler_name.clone().unwrap_or_default();
            let fwk = Framework::new(p, &registry)
                .map_err(|source| RuntimeError::Profile {
                    profile: name.clone(),
                    source,
                })?
                .with_observer(Arc::new(metrics.clone()))
                .with_extenders(extenders.clone());
            let fwk = Arc::new(fwk);
            metrics.init_profile(&name);
            frameworks.push(fwk.clone());
            profiles.insert(name, fwk);
        }
        let configz = configz(
            cfg,
            &frameworks,
            &options.default_namespace,
            &options.feature_gates,
        );
        metrics.record_feature_gates(&options.feature_gates)?;
        let gate_reporter = GateReporter::new(
            metrics.clone(),
            events.clone(),
            writer.clone(),
            handle.clone(),
            GATED_REPORT_GRACE,
        );
        let qcfg = QueueConfig::builder()
            .backoff_seconds(cfg.pod_initial_backoff_seconds, cfg.pod_max_backoff_seconds)
            .observer(gate_reporter.clone())
            .build();
        let queue = Arc::new(SchedulingQueue::new(frameworks, qcfg).map_err(RuntimeError::Queue)?);
        gate_reporter.attach(&queue);
        observe_own_claim_changes(&dra, &queue);
        let held_queue = Arc::downgrade(&queue);
        preemptor.activate_with(Arc::new(move |key: &str| {
            if let Some(q) = held_queue.upgrade() {
                q.activate([key]);
            }
        }));
        let cache = Arc::new(Cache::new());
        let victims_cache = Arc::downgrade(&cache);
        preemptor.victims_known_with(Arc::new(move |uid: &str| {
            victims_cache.upgrade().is_some_and(|c| c.get_pod(uid).is_some())
        }));
        let waiting_preemptor = Arc::downgrade(&preemptor);
        let pods = Arc::new(
            PodHandler::new(cache.clone(), queue.clone())
                .with_pod_groups(pod_groups.clone())
                .on_bound_pod_left(Arc::new(move || {
                    if let Some(p) = waiting_preemptor.upgrade() {
                        p.victim_left();
                    }
                })),
        );
        let health = Health::default();
        let router = crate::http::router(metrics.clone(), health.clone(), configz.clone());
        // Profiles and the run-time verbosity only when asked for, and only on this router
        // (served with authorization).
        let router = if cfg.enable_profiling == Some(true) {
            #[cfg(target_os = "linux")]
            let router = router.merge(crate::profiling::router());
            router.merge(crate::debug_flags::router())
        } else {
            router
        };
        let mut health_addr = None;
        if let Some(addr) = options.health_addr {
            let (bound, _task) = serve(addr, metrics.clone(), health.clone(), configz.clone())
                .await
                .map_err(|error| RuntimeError::Serve { addr, error })?;
            health_addr = Some(bound);
        }
        let shared = Arc::new(Shared {
            profiles,
            cache,
            dra,
            volumes,
            queue,
            pods,
            writer,
            events,
            metrics,
            binding: BindingThreads::new(
                handle.clone(),
                options.binding_connections.clone(),
                BINDING_THREAD_KEEP_ALIVE,
            ),
            handle,
            stop: CancellationToken::new(),
            bindings_in_flight: InFlight::default(),
            namespaces,
            explanations: Explanations::default(),
            pdbs,
            pod_groups,
            nominate_before_binding: options.feature_gates.enabled("NominatedNodeNameForExpectation"),
            group_preemption_policy: options.feature_gates.enabled("PodGroupPreemptionPolicy"),
        });
        Ok(Scheduler {
            shared,
            health,
            leader,
            options,
            client,
            health_addr,
            router,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
        })
    }

    /// Overrides how long [`Scheduler::run`] waits, once stopped, for in-flight binding cycles.
    #[must_use]
    pub fn with_shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// The metrics (for tests and the benchmark).
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// Binding cycles (and undos of failed bindings) that ran on binding threads so far. A cycle
    /// with nothing to wait for but its binding write runs on the I/O runtime instead and is not
    /// counted.
    pub fn binding_thread_jobs(&self) -> u64 {
        self.shared.binding.jobs()
    }

    /// The cache (for reports and tests).
    pub fn cache(&self) -> &Arc<Cache> {
        &self.shared.cache
    }

    /// The DRA state (for reports and tests).
    pub fn dra(&self) -> &Arc<DraCache> {
        &self.shared.dra
    }

    /// Namespace labels as the namespace watch last saw them (for the simulator and tests).
    pub fn namespaces(&self) -> &Arc<NamespaceStore> {
        &self.shared.namespaces
    }

    /// The volume state (for reports and tests).
    pub fn volumes(&self) -> &Arc<VolumeCache> {
        &self.shared.volumes
    }

    /// The queue (for reports and tests).
    pub fn queue(&self) -> &Arc<SchedulingQueue> {
        &self.shared.queue
    }

    /// True when no pod is waiting to be tried soon: activeQ and backoffQ are empty and no
    /// attempt or binding is in flight. Pods in the unschedulable pool wait for an event and do not
    /// count. The simulator uses this to know the cluster has settled.
    pub fn is_idle(&self) -> bool {
        self.nothing_pending_but(|_| 0)
    }

    /// Like [`Scheduler::is_idle`], except that pods backing off after repeated errors
    /// ([`PendingPods::repeated_errors`]) do not count: they are retried for ever, and for a bad
    /// input (a pod group whose members' priorities differ, say) nothing will change the outcome.
    /// The simulator settles on this, so such a scenario ends with the error as the pod's reason
    /// instead of waiting out `--timeout`.
    pub fn is_settled(&self) -> bool {
        self.nothing_pending_but(|p| p.repeated_errors)
    }

    /// Nothing in activeQ, in flight or binding, and no pod in backoffQ but the ones `ignored`
    /// counts.
    fn nothing_pending_but(&self, ignored: fn(&PendingPods) -> usize) -> bool {
        let p = self.shared.queue.pending_pods();
        p.active == 0
            && p.backoff == ignored(&p)
            && p.in_flight == 0
            && self.shared.bindings_in_flight.count() == 0
    }

    /// Placement explanations: debug logs, and with recording on the last placement per pod
    /// (`unisched sim --explain`).
    pub fn explanations(&self) -> &Explanations {
        &self.shared.explanations
    }

    /// The router of `/metrics`, `/healthz`, `/livez`, `/readyz` and `/configz`, to serve
    /// elsewhere (over HTTPS, behind authentication).
    pub fn router(&self) -> axum::Router {
        self.router.clone()
    }

    /// Health state.
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// Asks the scheduler to stop: no new pod is taken; [`Scheduler::run`] then lets in-flight
    /// binding cycles finish (within the shutdown grace), releases the lease and returns `Ok`.
    /// Safe to call from a signal handler's task or another thread.
    pub fn stop(&self) {
        self.shared.stop.cancel();
        self.shared.queue.close();
    }

    /// Watches, elects, schedules. Returns `Err(LeaseLost)` when leadership is lost, `Ok` after
    /// [`Scheduler::stop`].
    ///
    /// Either way it shuts down in order, so nothing runs on a runtime that is going away: the
    /// scheduling thread is joined, in-flight binding cycles finish (they fail fast with
    /// `NotLeader` once the lease is gone), queued events are written while we still lead, and
    /// only then is the lease released and the watches ended.
    pub async fn run(&self) -> Result<(), RuntimeError> {
        // Watches, and the periodic queue flushes and gauges: they run until the very end.
        let background = CancellationToken::new();
        let (election_stop, election_stop_rx) = tokio::sync::watch::channel(false);
        let mut election = self.start_election(election_stop_rx);
        let stop = self.shared.stop.clone();
        // `delayCacheUntilActive`: a standby replica lists and watches nothing until it leads.
        let delay = self.options.config.delay_cache_until_active == Some(true) && election.is_some();
        if delay {
            tracing::info!("delayCacheUntilActive: the watches start once this replica leads");
            while !self.leader.is_leader()
                && !stop.is_cancelled()
                && !election.as_ref().is_some_and(JoinHandle::is_finished)
            {
                tokio::time::sleep(LEADERSHIP_POLL).await;
            }
        }
        let tasks = self.spawn_background(&background);
        let loop_thread = self.start_scheduling_thread();
        // Until the lease is lost (or the election ends otherwise) or `stop` is called.
        let ended = match election.as_mut() {
            Some(e) => tokio::select! {
                end = e => Some(end.unwrap_or(ElectionEnd::Lost)),
                () = stop.cancelled() => None,
            },
            None => {
                stop.cancelled().await;
                None
            }
        };
        let result = match ended {
            Some(end) => {
                election = None;
                if end == ElectionEnd::Lost {
                    Err(RuntimeError::LeaseLost)
                } else {
                    Ok(())
                }
            }
            None => Ok(()),
        };
        if result.is_err() {
            self.health.set_dying();
            self.leader.set(false);
            tracing::error!("leader lease lost: stopping");
        } else {
            tracing::info!("stopping: no new pods are taken");
        }
        self.shut_down(loop_thread, election_stop, election).await;
        // Last, end the watches and the periodic task.
        background.cancel();
        for t in tasks {
            let _ = t.await;
        }
        result
    }

    /// Starts every watch (see [`watches::WATCHES`]) and the periodic task; all of them end when
    /// `stop` is cancelled. Readiness is reported once every watch has listed.
    fn spawn_background(&self, stop: &CancellationToken) -> Vec<JoinHandle<()>> {
        let sh = &self.shared;
        let readiness = ReadinessGate::new(self.health.clone());
        let targets = WatchTargets {
            client: self.client.clone(),
            cache: sh.cache.clone(),
            queue: sh.queue.clone(),
            pods: sh.pods.clone(),
            dra: sh.dra.clone(),
            namespaces: sh.namespaces.clone(),
            pdbs: sh.pdbs.clone(),
            volumes: sh.volumes.clone(),
            pod_groups: sh.pod_groups.clone(),
        };
        let mut tasks = watches::spawn_all(&targets, &readiness, stop);
        let (periodic_stop, periodic_shared) = (stop.clone(), sh.clone());
        tasks.push(tokio::spawn(async move {
            let _ = periodic_stop.run_until_cancelled(periodic(periodic_shared)).await;
        }));
        readiness.all_spawned();
        tasks
    }

    /// Starts leader election when the configuration asks for it (`None`: this replica leads
    /// from the start). The election gives up the lease when `stop` turns true.
    fn start_election(&self, stop: tokio::sync::watch::Receiver<bool>) -> Option<JoinHandle<ElectionEnd>> {
        let metrics = &self.shared.metrics;
        let le = &self.options.config.leader_election;
        if !le.leader_elect {
            metrics.leader.set(1);
            return None;
        }
        let lease = LeaseConfig {
            namespace: if le.resource_namespace.is_empty() {
                self.options.default_namespace.clone()
            } else {
                le.resource_namespace.clone()
            },
            name: le.resource_name.clone(),
            identity: self.options.identity.clone(),
            lease_duration: le.lease_duration.0,
            renew_deadline: le.renew_deadline.0,
            retry_period: le.retry_period.0,
        };
        metrics.set_lease_name(&lease.name);
        Some(tokio::spawn(run_leader_election(
            self.client.clone(),
            lease,
            self.leader.clone(),
            metrics.clone(),
            stop,
        )))
    }

    /// Starts the scheduling loop on its own thread.
    fn start_scheduling_thread(&self) -> std::io::Result<std::thread::JoinHandle<()>> {
        let cfg = &self.options.config;
        let loop_shared = self.shared.clone();
        let health = self.health.clone();
        let leader = self.leader.clone();
        let seed = self.options.seed;
        let parallelism = usize::try_from(cfg.parallelism).unwrap_or(1);
        let percentage = cfg.percentage_of_nodes_to_score;
        let loop_thread = std::thread::Builder::new()
            .name("unisched-schedule".into())
            .spawn(move || scheduling_loop(loop_shared, health, leader, seed, parallelism, percentage));
        if let Err(e) = &loop_thread {
            tracing::error!(error = %e, "cannot start the scheduling thread");
        }
        loop_thread
    }

    /// The ordered shutdown of [`Scheduler::run`], up to (not including) ending the watches.
    async fn shut_down(
        &self,
        loop_thread: std::io::Result<std::thread::JoinHandle<()>>,
        election_stop: tokio::sync::watch::Sender<bool>,
        election: Option<JoinHandle<ElectionEnd>>,
    ) {
        let sh = &self.shared;
        // 1. Take no new pod; let the current scheduling cycle end.
        sh.stop.cancel();
        sh.queue.close();
        if let Ok(t) = loop_thread {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        // 2. Let in-flight binding cycles finish (or undo) while we may still write.
        let left = sh.bindings_in_flight.drained_within(self.shutdown_grace).await;
        if left > 0 {
            tracing::warn!(
                bindings = left,
                "shutdown grace period over with binding cycles in flight"
            );
            // Whatever they still try is refused: the new leader starts from the API's state.
            self.leader.set(false);
        }
        // 3. Write the queued events (the last `Scheduled` ones) while we still lead.
        let unwritten = sh.events.flush(Duration::from_secs(3)).await;
        if unwritten > 0 {
            tracing::warn!(events = unwritten, "events not written before shutdown");
        }
        // 4. Give up the lease (client-go's ReleaseOnCancel): the standby leads at its next retry.
        let _ = election_stop.send(true);
        if let Some(e) = election {
            let _ = tokio::time::timeout(Duration::from_secs(5), e).await;
        }
        self.leader.set(false);
        // 5. Binding threads that outlived the grace now fail fast; wait briefly so none of them
        //    is still inside the runtime when it shuts down.
        sh.bindings_in_flight.drained_within(Duration::from_secs(2)).await;
    }
}

/// The gates plugins read, from the scheduler's `--feature-gates`.
/// How often a replica with `delayCacheUntilActive` looks whether it leads yet.
const LEADERSHIP_POLL: Duration = Duration::from_millis(50);

fn plugin_features(gates: &FeatureGates) -> PluginFeatures {
    let mut features = PluginFeatures::default();
    features.taint_toleration_comparison_operators = gates.enabled("TaintTolerationComparisonOperators");
    features.workload_resource_claims = gates.enabled("DRAWorkloadResourceClaims");
    features.storage_capacity_scoring = gates.enabled("StorageCapacityScoring");
    features.volume_limit_scaling = gates.enabled("VolumeLimitScaling");
    features.pod_group_preemption_policy = gates.enabled("PodGroupPreemptionPolicy");
    features
}

/// The `/configz` body: the effective configuration (defaults applied, the plugins each profile
/// runs, the lease namespace actually used) under `componentconfig`, as upstream serves it, and
/// every feature gate's effective value under `featureGates`.
fn configz(
    cfg: &KubeSchedulerConfiguration,
    frameworks: &[Arc<Framework>],
    own_namespace: &str,
    gates: &FeatureGates,
) -> String {
    let mut effective = cfg.clone();
    if effective.leader_election.resource_namespace.is_empty() {
        effective.leader_election.resource_namespace = own_namespace.to_string();
    }
    let resolved: Vec<_> = frameworks.iter().map(|f| f.plugin_names()).collect();
    let feature_gates: serde_json::Map<String, serde_json::Value> = gates
        .all()
        .map(|(name, _, on)| (name.to_string(), json!(on)))
        .collect();
    serde_json::to_string_pretty(&json!({
        "componentconfig": effective.effective_json(&resolved),
        "featureGates": feature_gates,
    }))
    .unwrap_or_default()
}

async fn periodic(sh: Arc<Shared>) {
    let mut tick = 0u64;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        tick += 1;
        sh.queue.flush_backoff_completed();
        if tick.is_multiple_of(30) {
            sh.queue.flush_unschedulable_leftover();
        }
        for (label, n) in sh.queue.pending_pods().by_label() {
            sh.metrics
                .pending_pods
                .with_label_values(&[label])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        let set = |t: &str, n: usize| {
            sh.metrics
                .cache_size
                .with_label_values(&[t])
                .set(i64::try_from(n).unwrap_or(i64::MAX))
        };
        set("nodes", sh.cache.node_count());
        set("pods", sh.cache.pod_count());
        set("assumed_pods", sh.cache.assumed_pod_count());
    }
}

fn scheduling_loop(
    sh: Arc<Shared>,
    health: Health,
    leader: LeaderFlag,
    seed: u64,
    parallelism: usize,
    percentage: Option<i32>,
) {
    let mut algos: HashMap<String, SchedulingAlgorithm> = HashMap::new();
    let mut sampler = SeededRng::new(seed ^ 0x5eed);
    unisched_framework::calibrate_plugin_clock();
    while !sh.stop.is_cancelled() {
        if !health.is_synced() || !leader.is_leader() {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        let Some(qpi) = sh.queue.pop(Duration::from_millis(200)) else {
            continue;
        };
        schedule_one(&sh, &mut algos, &mut sampler, qpi, seed, parallelism, percentage);
    }
}

fn schedule_one(
    sh: &Arc<Shared>,
    algos: &mut HashMap<String, SchedulingAlgorithm>,
    sampler: &mut SeededRng,
    qpi: QueuedPodInfo,
    seed: u64,
    parallelism: usize,
    percentage: Option<i32>,
) {
    let start = Instant::now();
    let pod = qpi.pod_info.clone();
    let Some(fwk) = sh.profiles.get(pod.scheduler_name()).cloned() else {
        sh.queue.done(&pod.uid);
        return;
    };
    let algo = algos
        .entry(fwk.profile_name().to_string())
        .or_insert_with(|| SchedulingAlgorithm::new(parallelism, percentage, seed));
    let record = sampler.below(100) < 10;
    if let Some(groups) = &sh.pod_groups
        && let Some(key) = PodGroupKey::of_pod(&pod.pod)
    {
        let pop = workload::GroupPop {
            key,
            qpi,
            record,
            start,
        };
        workload::schedule_group(sh, groups, &fwk, algo, pop);
        return;
    }
    let outcome = run_scheduling_cycle(
        &fwk,
        algo,
        sh.cache.as_ref(),
        sh.queue.as_ref(),
        pod.clone(),
        record,
    );
    match outcome {
        CycleOutcome::Skipped(why) => {
            tracing::debug!(pod = %pod.key(), why, "skipping pod");
            sh.queue.done(&pod.uid);
        }
        CycleOutcome::Failed(f) => handle_failure(sh, &fwk, qpi, *f, start),
        CycleOutcome::Assumed(task) => start_binding(sh, &fwk, qpi, task, start),
    }
}

/// Hands an assumed pod to its binding cycle: as futures on the I/O runtime when it only
/// writes, else on a binding thread.
pub(crate) fn start_binding(
    sh: &Arc<Shared>,
    fwk: &Arc<Framework>,
    qpi: QueuedPodInfo,
    task: Box<BindingTask>,
    start: Instant,
) {
    let fwk = fwk.clone();
    let pod = task.pod.clone();
    sh.explanations
        .observe(&pod.key(), fwk.profile_name(), &task.result);
    sh.metrics
        .algorithm_duration
        .with_label_values::<&str>(&[])
        .observe(start.elapsed().as_secs_f64());
    sh.bindings_in_flight.start();
    sh.metrics.goroutines.with_label_values(&["binding"]).inc();
    let assumed = task.assumed.clone();
    let nomination = match Nomination::before_binding(sh.nominate_before_binding, &fwk, &task) {
        Ok(nomination) => nomination,
        Err(s) => {
            // A failed pre-flight check fails the cycle; its Unreserve may write and wait, so
            // it runs on a binding thread, as the whole cycle would have.
            let sh2 = sh.clone();
            sh.binding.spawn(Box::new(move || {
                let failure = abandon_binding_cycle(&fwk, sh2.cache.as_ref(), *task, s);
                binding_done(&sh2, &fwk, qpi, start, &assumed, Err(failure), false);
            }));
            return;
        }
    };
    let nominated = nomination.is_some();
    let plan = async_binding(&fwk, &task);
    match plan {
        // Nothing to wait for but API writes: Permit (and PreBind's checks, when no plugin
        // has work) return at once here, as a Reserve failure's Unreserve runs here; the
        // writes run on the I/O runtime, holding no thread while they are in flight.
        Some(AsyncBinding { pre_bind, bind }) => {
            let started = match pre_bind {
                None => start_binding_cycle(&fwk, sh.cache.as_ref(), *task),
                Some(_) => wait_for_permit(&fwk, sh.cache.as_ref(), *task),
            };
            match started {
                Err(f) => binding_done(sh, &fwk, qpi, start, &assumed, Err(f), false),
                Ok(binding) => {
                    let sh2 = sh.clone();
                    sh.handle.spawn(async move {
                        if let Some(nomination) = &nomination {
                            nomination.write(&sh2.writer).await;
                        }
                        let mut s = Status::success();
                        if let Some(pre_bind) = pre_bind {
                            s = fwk.complete_pre_bind(pre_bind).await;
                        }
                        if s.is_success() {
                            s = fwk.complete_bind(bind).await;
                        }
                        if s.is_success() {
                            let result = finish_binding_cycle(&fwk, sh2.cache.as_ref(), binding, s);
                            binding_done(&sh2, &fwk, qpi, start, &assumed, result, nominated);
                            return;
                        }
                        // Unreserve plugins may write and wait: the undo runs on a
                        // binding thread, as the whole cycle would have.
                        let sh3 = sh2.clone();
                        sh2.binding.spawn(Box::new(move || {
                            let result = finish_binding_cycle(&fwk, sh3.cache.as_ref(), binding, s);
                            binding_done(&sh3, &fwk, qpi, start, &assumed, result, nominated);
                        }));
                    });
                }
            }
        }
        None => {
            let sh2 = sh.clone();
            sh.binding.spawn(Box::new(move || {
                if let Some(nomination) = &nomination {
                    nomination.write_blocking(&SyncWriter::new(sh2.writer.clone(), sh2.handle.clone()));
                }
                let result = run_binding_cycle(&fwk, sh2.cache.as_ref(), *task);
                binding_done(&sh2, &fwk, qpi, start, &assumed, result, nominated);
            }));
        }
    }
}

/// After a binding cycle of `assumed`: the `Scheduled` event and metrics, or the failure
/// handled (`nominated`: the cycle wrote the pod's nomination, which the failure clears); then
/// the cycle no longer counts as in flight.
fn binding_done(
    sh: &Arc<Shared>,
    fwk: &Framework,
    qpi: QueuedPodInfo,
    start: Instant,
    assumed: &Arc<PodInfo>,
    result: Result<BoundPod, Box<SchedulingFailure>>,
    nominated: bool,
) {
    match result {
        Ok(bound) => {
            sh.queue.done(&bound.assumed.uid);
            let profile = fwk.profile_name();
            sh.metrics
                .schedule_attempts
                .with_label_values(&["scheduled", profile])
                .inc();
            sh.metrics
                .attempt_duration
                .with_label_values(&["scheduled", profile])
                .observe(start.elapsed().as_secs_f64());
            let attempts = qpi.attempts.max(1);
            sh.metrics
                .pod_scheduling_attempts
                .with_label_values::<&str>(&[])
                .observe(f64::from(attempts));
            let first = qpi.initial_attempt_timestamp.unwrap_or(qpi.timestamp);
            sh.metrics
                .sli_duration
                .with_label_values(&[&attempts.to_string()])
                .observe(first.elapsed().as_secs_f64());
            sh.events.record(PodEvent {
                namespace: bound.assumed.namespace.clone(),
                name: bound.assumed.name.clone(),
                uid: bound.assumed.uid.clone(),
                type_: EventType::Normal,
                reason: "Scheduled".into(),
                action: "Binding".into(),
                note: format!("Successfully assigned {} to {}", bound.assumed.key(), bound.node),
                controller: profile.to_string(),
            });
        }
        Err(f) => {
            sh.queue.move_all_to_active_or_backoff(
                well_known::ASSIGNED_POD_DELETE,
                Some(EventObject::Pod(assumed.clone())),
                None,
            );
            report_failure(sh, fwk, qpi, *f, start, nominated);
        }
    }
    sh.bindings_in_flight.finish();
    sh.metrics.goroutines.with_label_values(&["binding"]).dec();
}

/// Requeues, tells the user (event + PodScheduled=False), records metrics.
fn handle_failure(
    sh: &Arc<Shared>,
    fwk: &Framework,
    qpi: QueuedPodInfo,
    f: SchedulingFailure,
    start: Instant,
) {
    report_failure(sh, fwk, qpi, f, start, false);
}

/// [`handle_failure`] after a binding cycle that wrote the pod's nomination (`nominated`): the
/// watch may not have shown that write yet, and the failure's clearing must not be skipped.
fn report_failure(
    sh: &Arc<Shared>,
    fwk: &Framework,
    qpi: QueuedPodInfo,
    f: SchedulingFailure,
    start: Instant,
    nominated: bool,
) {
    let profile = fwk.profile_name();
    if let Some(fit) = &f.fit_error {
        sh.metrics.observe_fit_error(fit);
    }
    let result = if f.status.is_rejected() || f.fit_error.is_some() {
        "unschedulable"
    } else {
        "error"
    };
    sh.metrics
        .schedule_attempts
        .with_label_values(&[result, profile])
        .inc();
    sh.metrics
        .attempt_duration
        .with_label_values(&[result, profile])
        .observe(start.elapsed().as_secs_f64());
    let pod = f.pod.clone();
    // The pod may have been deleted or bound by someone else meanwhile.
    let latest: Option<Arc<PodInfo>> = sh.pods.get(&pod.uid);
    let Some(latest) = latest else {
        sh.queue.done(&pod.uid);
        return;
    };
    if latest.node_name().is_some() {
        sh.queue.done(&pod.uid);
        return;
    }
    if let Err(e) = sh.queue.handle_failure(qpi, &f) {
        tracing::debug!(pod = %pod.key(), error = %e, "requeue after failure");
    }
    tracing::info!(pod = %pod.key(), reason = f.reason, message = %f.message, "unable to schedule pod");
    sh.events.record(PodEvent {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        uid: pod.uid.clone(),
        type_: EventType::Warning,
        reason: "FailedScheduling".into(),
        action: "Scheduling".into(),
        note: f.message.clone(),
        controller: profile.to_string(),
    });
    let unchanged = latest
        .pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
        .is_some_and(|c| {
            c.status == "False"
                && c.reason.as_deref() == Some(f.reason)
                && c.message.as_deref() == Some(&f.message)
        });
    // A clearing is written only when there is a nomination to clear, as upstream compares the
    // pod's nomination before it patches; a node (from preemption) is always written.
    let latest_nomination = latest
        .pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .unwrap_or_default();
    let nominated_change = match f.nominated_node.as_deref() {
        None => false,
        Some("") => nominated || !latest_nomination.is_empty(),
        Some(_) => true,
    };
    if unchanged && !nominated_change {
        return;
    }
    let mut status = json!({
        "conditions": [{
            "type": "PodScheduled",
            "status": "False",
            "reason": f.reason,
            "message": f.message,
            "lastProbeTime": null,
            "lastTransitionTime": Timestamp::now().to_string(),
        }]
    });
    if let Some(n) = &f.nominated_node {
        status["nominatedNodeName"] = if n.is_empty() {
            serde_json::Value::Null
        } else {
            json!(n)
        };
    }
    let writer = sh.writer.clone();
    let (ns, name) = (pod.namespace.clone(), pod.name.clone());
    sh.handle.spawn(async move {
        if let Err(e) = writer
            .patch_pod_status(&ns, &name, json!({ "status": status }))
            .await
        {
            tracing::debug!(pod = %format!("{ns}/{name}"), error = %e, "patching PodScheduled condition");
        }
    });
}
