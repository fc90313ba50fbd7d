//! Engine-only mode: the scheduling core (framework with the in-tree plugins, cache, queue, DRA
//! cache) on in-memory inputs, with no API server and no HTTP. Pods are created straight into the
//! queue, bound pods straight into the cache, DRA objects through the runtime's DRA handlers into
//! the DRA cache (see `engine_dra`), bindings and claim writes are applied in memory and counted,
//! and the binding cycle runs inline. PodGroups (when the workload turns `GenericWorkload` on) are
//! stored where the plugins read them and decided in the pod-group cycle (see `engine_groups`).
//! DefaultPreemption's victims are deleted in memory once the cycle that chose them is over (see
//! `engine_preemption`). PriorityClasses give pods and PodGroups that name one their priority,
//! as kube-apiserver's Priority admission does; every namespace a pod is created in exists, with
//! the `kubernetes.io/metadata.name` label kube-apiserver gives it (`namespaceSelector`s see it).
//! Its throughput is what the decision logic alone allows; the gap to full mode
//! is the cost of the API path (watch decoding, writes, events).
//!
//! Runs on a thread named like the runtime's scheduling thread so its CPU is attributed the same.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    core::v1::{Node, Pod},
    scheduling::v1beta1::PodGroup,
};
use unisched_cache::{Cache, DraCache};
use unisched_framework::{
    BindingTask, BoundPod, CycleOutcome, EventObject, Framework, MemberDecision, PodGroupStore, PodInfo,
    QueuedPodInfo, SchedulerCache, SchedulingAlgorithm, SchedulingFailure, SeededRng, abandon_binding_cycle,
    config::KubeSchedulerConfiguration, nomination_before_binding, run_binding_cycle, run_scheduling_cycle,
    well_known,
};
use unisched_plugins::{BindError, Binder, PluginContext, PluginFeatures, Registry, StaticPdbs};
use unisched_queue::{QueueConfig, SchedulingQueue};
use unisched_runtime::{Metrics, NamespaceStore};

use crate::{
    BenchError, RunOptions,
    driver::{Phase, PodTemplates, render_pod_group, render_slices},
    engine_dra::{EngineDra, MemDraApi},
    engine_groups::EngineGroups,
    engine_preemption::EnginePreemptor,
    measure::{Measured, Measurement},
    progress::Progress,
    report::{Mode, RunReport},
    template::Vars,
    workload::{Op, Workload},
};

/// Accepts every binding; counts it as the write it would be.
struct CountingBinder(Metrics);

impl Binder for CountingBinder {
    fn bind(&self, _pod: &Pod, _node: &str) -> Result<(), BindError> {
        self.0
            .api_writes
            .with_label_values(&["create", "pods/binding", "2xx"])
            .inc();
        Ok(())
    }
}

/// The binding cycle as the runtime runs it with its default gates: a cycle that waits first
/// writes the pod's nomination (NominatedNodeNameForExpectation), counted as the status patch it
/// would be; a failed pre-flight check fails the cycle.
fn bind_inline(
    fwk: &Framework,
    cache: &dyn SchedulerCache,
    task: BindingTask,
    metrics: &Metrics,
) -> Result<BoundPod, Box<SchedulingFailure>> {
    match nomination_before_binding(fwk, &task) {
        Err(s) => return Err(abandon_binding_cycle(fwk, cache, task, s)),
        Ok(Some(_)) => metrics
            .api_writes
            .with_label_values(&["patch", "pods/status", "2xx"])
            .inc(),
        Ok(None) => {}
    }
    run_binding_cycle(fwk, cache, task)
}

struct Engine<'a> {
    dra: EngineDra,
    /// PodGroups, when the workload schedules them (`GenericWorkload`).
    groups: Option<EngineGroups>,
    /// DefaultPreemption's plans, carried out after the cycle that made them.
    preemptor: Arc<EnginePreemptor>,
    /// Pods whose preemption is carried out and that are not bound yet (for a PodGroup, every
    /// member): the workload is not over while one of them waits out its backoff.
    awaiting_preemption: HashSet<String>,
    /// The namespaces pods and PodGroups were created in (InterPodAffinity's lister).
    namespaces: Arc<NamespaceStore>,
    /// PriorityClass values by name.
    priority_classes: HashMap<String, i64>,
    binder: std::sync::mpsc::Sender<Binding>,
    bound_rx: std::sync::mpsc::Receiver<Done>,
    in_flight: usize,
    profiles: HashMap<String, Arc<Framework>>,
    algos: HashMap<String, SchedulingAlgorithm>,
    cache: Arc<Cache>,
    queue: Arc<SchedulingQueue>,
    metrics: Metrics,
    sampler_rng: SeededRng,
    seed: u64,
    parallelism: usize,
    percentage: Option<i32>,
    nodes: Vec<String>,
    /// Bound pods per namespace.
    bound: BTreeMap<String, Vec<Arc<PodInfo>>>,
    measured_ns: Vec<String>,
    measured: Arc<AtomicU64>,
    /// Steady state: the namespace whose scheduled pods are replaced, and their template.
    steady: Option<String>,
    steady_template: Option<PodTemplates>,
    created: BTreeMap<String, u64>,
    scheduled_total: BTreeMap<String, u64>,
    progress: &'a Progress,
    deadline: Instant,
    timed_out: bool,
    notes: Vec<String>,
}

fn api_object<T: serde::de::DeserializeOwned>(v: serde_json::Value, what: &str) -> Result<T, BenchError> {
    serde_json::from_value(v).map_err(|e| BenchError::Workload(format!("{what}: {e}")))
}

impl Engine<'_> {
    fn schedule_one(&mut self, qpi: QueuedPodInfo) {
        let started = Instant::now();
        let pod = qpi.pod_info.clone();
        let Some(fwk) = self.profiles.get(pod.scheduler_name()).cloned() else {
            self.queue.done(&pod.uid);
            return;
        };
        let profile = fwk.profile_name().to_string();
        let record = self.sampler_rng.below(100) < 10;
        let algo = self
            .algos
            .entry(profile.clone())
            .or_insert_with(|| SchedulingAlgorithm::new(self.parallelism, self.percentage, self.seed));
        if let Some(groups) = &self.groups
            && let Some(key) = groups.key_of(&pod)
        {
            let decisions = groups.decide(&fwk, algo, self.cache.as_ref(), &key, qpi, record);
            for (member, decision) in decisions {
                match decision {
                    MemberDecision::Bind(task) => self.start_binding(&fwk, task, member, started),
                    MemberDecision::Failed(f) => self.failed(member, &f, &profile, started),
                    MemberDecision::Skipped(_) => self.queue.done(&member.pod_info.uid),
                }
            }
            return;
        }
        match run_scheduling_cycle(
            &fwk,
            algo,
            self.cache.as_ref(),
            self.queue.as_ref(),
            pod.clone(),
            record,
        ) {
            CycleOutcome::Skipped(_) => self.queue.done(&pod.uid),
            CycleOutcome::Failed(f) => self.failed(qpi, &f, &profile, started),
            CycleOutcome::Assumed(task) => self.start_binding(&fwk, task, qpi, started),
        }
    }

    /// A pod that could not be placed goes back to the queue.
    fn failed(&mut self, qpi: QueuedPodInfo, f: &SchedulingFailure, profile: &str, started: Instant) {
        self.metrics
            .schedule_attempts
            .with_label_values(&["unschedulable", profile])
            .inc();
        self.metrics
            .attempt_duration
            .with_label_values(&["unschedulable", profile])
            .observe(started.elapsed().as_secs_f64());
        let _ = self.queue.handle_failure(qpi, f);
    }

    /// An assumed pod goes to its binding cycle.
    fn start_binding(
        &mut self,
        fwk: &Arc<Framework>,
        task: Box<BindingTask>,
        qpi: QueuedPodInfo,
        started: Instant,
    ) {
        self.metrics
            .algorithm_duration
            .with_label_values::<&str>(&[])
            .observe(started.elapsed().as_secs_f64());
        // The binding cycle runs on its own thread, as the runtime runs it on a blocking task:
        // the next pod's scheduling cycle does not wait for it.
        let b = Binding {
            fwk: fwk.clone(),
            task,
            qpi,
            started,
        };
        match self.binder.send(b) {
            Ok(()) => self.in_flight += 1,
            Err(std::sync::mpsc::SendError(b)) => {
                // The binding thread is gone: bind here.
                let profile = b.fwk.profile_name().to_string();
                let result = bind_inline(&b.fwk, self.cache.as_ref(), *b.task, &self.metrics);
                self.complete(Done {
                    result,
                    qpi: b.qpi,
                    started: b.started,
                    profile,
                });
            }
        }
    }

    /// Handles finished binding cycles; waits up to `wait` for one when `wait` is set.
    fn completions(&mut self, wait: Option<Duration>) {
        if let Some(w) = wait
            && let Ok(d) = self.bound_rx.recv_timeout(w)
        {
            self.in_flight -= 1;
            self.complete(d);
        }
        while let Ok(d) = self.bound_rx.try_recv() {
            self.in_flight -= 1;
            self.complete(d);
        }
    }

    fn complete(&mut self, d: Done) {
        let Done {
            result,
            qpi,
            started,
            profile,
        } = d;
        let pod = qpi.pod_info.clone();
        match result {
            Ok(bound) => {
                self.queue.done(&pod.uid);
                self.awaiting_preemption.remove(&pod.uid);
                // The watch would confirm the binding: the bound pod, kept lean as the runtime
                // keeps it, replaces the assumed one.
                let confirmed = Arc::new(PodInfo::clone(&bound.assumed).into_lean());
                if let Err(e) = self.cache.add_pod(confirmed.clone()) {
                    tracing::debug!(error = %e, "engine: confirming a binding");
                }
                self.queue.assigned_pod_added(&confirmed);
                if let Some(groups) = &self.groups {
                    groups.pod_seen(&confirmed, true);
                }
                self.metrics
                    .schedule_attempts
                    .with_label_values(&["scheduled", &profile])
                    .inc();
                self.metrics
                    .attempt_duration
                    .with_label_values(&["scheduled", &profile])
                    .observe(started.elapsed().as_secs_f64());
                let ns = confirmed.namespace.clone();
                *self.scheduled_total.entry(ns.clone()).or_default() += 1;
                if self.measured_ns.contains(&ns) {
                    self.measured.fetch_add(1, Ordering::SeqCst);
                }
                if self.steady.as_deref() == Some(ns.as_str()) {
                    self.replace(&confirmed);
                } else {
                    self.bound.entry(ns).or_default().push(confirmed);
                }
            }
            Err(f) => {
                self.queue.move_all_to_active_or_backoff(
                    well_known::ASSIGNED_POD_DELETE,
                    Some(EventObject::Pod(pod.clone())),
                    None,
                );
                let _ = self.queue.handle_failure(qpi, &f);
            }
        }
    }

    fn delete_bound(&self, pod: &Arc<PodInfo>) {
        if let Err(e) = self.cache.remove_pod(pod) {
            tracing::debug!(error = %e, "engine: removing a pod");
        }
        if let Some(groups) = &self.groups {
            groups.pod_deleted(pod);
        }
        self.queue.move_all_to_active_or_backoff(
            well_known::ASSIGNED_POD_DELETE,
            Some(EventObject::Pod(pod.clone())),
            None,
        );
        // The garbage collector deletes the claims the pod owned.
        self.dra.api.pod_deleted(&pod.uid);
    }

    /// Steady state: the scheduled pod is deleted and a new one takes its place.
    fn replace(&mut self, pod: &Arc<PodInfo>) {
        self.delete_bound(pod);
        let ns = pod.namespace.clone();
        let next = self.created.get(&ns).copied().unwrap_or(0);
        if let Some(tpl) = self.steady_template.clone()
            && let Err(e) = self.add_pod(&tpl, &ns, usize::try_from(next).unwrap_or(0), false)
        {
            self.notes.push(format!("steady state: {e}"));
        }
    }

    fn add_pod(
        &mut self,
        tpl: &PodTemplates,
        ns: &str,
        index: usize,
        pre_bound: bool,
    ) -> Result<(), BenchError> {
        let mut v = tpl.render(index, ns)?;
        let base = v["metadata"]["generateName"]
            .as_str()
            .or(v["metadata"]["name"].as_str())
            .unwrap_or("pod-")
            .to_string();
        let name = format!("{base}{index}");
        v["metadata"]["name"] = serde_json::json!(name);
        v["metadata"]["uid"] = serde_json::json!(format!("{ns}-{name}"));
        if pre_bound {
            v["spec"]["nodeName"] = serde_json::json!(self.nodes[index % self.nodes.len().max(1)]);
        } else {
            self.dra.claims_for_pod(&mut v)?;
        }
        self.admit(&mut v, ns)?;
        let pod: Pod = api_object(v, "pod")?;
        let info = Arc::new(PodInfo::watched(pod));
        if pre_bound {
            self.cache
                .add_pod(info.clone())
                .map_err(|e| BenchError::Setup(format!("pre-bound pod: {e}")))?;
            self.bound.entry(ns.to_string()).or_default().push(info.clone());
        } else {
            self.queue.add(info.clone());
        }
        if let Some(groups) = &self.groups {
            groups.pod_seen(&info, pre_bound);
        }
        *self.created.entry(ns.to_string()).or_default() += 1;
        Ok(())
    }

    /// What kube-apiserver does to a new pod or PodGroup that matters to scheduling: its namespace
    /// exists, and its priority is that of the PriorityClass it names (a `spec.priority` given as
    /// well must agree, as admission insists).
    fn admit(&mut self, v: &mut serde_json::Value, ns: &str) -> Result<(), BenchError> {
        if !self.namespaces.contains(ns) {
            let labels = BTreeMap::from([("kubernetes.io/metadata.name".to_string(), ns.to_string())]);
            self.namespaces.set(ns, labels);
        }
        let Some(class) = v["spec"]["priorityClassName"].as_str() else {
            return Ok(());
        };
        let Some(value) = self.priority_classes.get(class).copied() else {
            return Err(BenchError::Workload(format!(
                "no PriorityClass with name {class} was found"
            )));
        };
        match v["spec"]["priority"].as_i64() {
            Some(given) if given != value => Err(BenchError::Workload(format!(
                "priority {given} does not match {value} of PriorityClass {class}"
            ))),
            _ => {
                v["spec"]["priority"] = serde_json::json!(value);
                Ok(())
            }
        }
    }

    /// Carries out the preemptions the last cycle decided: each victim deleted as the pod watch
    /// would report it (out of the cache and its group, the deletion offered to waiting pods),
    /// and the preemptors remembered until they are bound.
    fn carry_out_preemptions(&mut self) {
        for plan in self.preemptor.take() {
            self.preemptor.count_writes(&plan);
            match &plan.group {
                Some(group) => self
                    .awaiting_preemption
                    .extend(group.members.iter().map(|m| m.uid.clone())),
                None => {
                    self.awaiting_preemption.insert(plan.preemptor.uid.clone());
                }
            }
            for pod in &plan.clear_nominations {
                self.queue.delete_nominated_pod_if_exists(&pod.uid);
            }
            let victims: HashSet<&str> = plan.victims.iter().map(|v| v.uid.as_str()).collect();
            for victim in &plan.victims {
                if let Some(bound) = self.cache.get_pod(&victim.uid) {
                    self.delete_bound(&bound);
                }
            }
            let namespaces: HashSet<&str> = plan.victims.iter().map(|v| v.namespace.as_str()).collect();
            for ns in namespaces {
                if let Some(pods) = self.bound.get_mut(ns) {
                    pods.retain(|p| !victims.contains(p.uid.as_str()));
                }
            }
        }
    }

    /// Schedules until nothing can be popped and no binding is in flight (what is left waits in
    /// backoff or unschedulable), or until `until`.
    fn drain(&mut self, label: &str, until: Option<Instant>) {
        let started = Instant::now();
        let mut n = 0u64;
        loop {
            self.completions(None);
            if until.is_some_and(|u| Instant::now() >= u) {
                return;
            }
            if Instant::now() >= self.deadline {
                self.timed_out = true;
                return;
            }
            if let Some(qpi) = self.queue.try_pop() {
                self.schedule_one(qpi);
                self.carry_out_preemptions();
                n += 1;
                if n.is_multiple_of(256) {
                    self.progress.update(&format!(
                        "{label}: {} scheduled in measured namespaces, {:.0}s",
                        self.measured.load(Ordering::SeqCst),
                        started.elapsed().as_secs_f64()
                    ));
                }
                continue;
            }
            if self.in_flight > 0 {
                self.completions(Some(Duration::from_millis(5)));
                continue;
            }
            if self.queue.flush_backoff_completed() > 0 {
                continue;
            }
            let backoff: usize = self
                .queue
                .pending_pods()
                .by_label()
                .iter()
                .filter(|(q, _)| *q == "backoff")
                .map(|(_, c)| c)
                .sum();
            // A preemptor waits out its backoff after its victims are gone; the phase it belongs
            // to is not over before it is bound.
            if backoff > 0 && (until.is_some() || !self.awaiting_preemption.is_empty()) {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            return;
        }
    }
}

/// A binding cycle handed to the binding thread.
struct Binding {
    fwk: Arc<Framework>,
    task: Box<BindingTask>,
    qpi: QueuedPodInfo,
    started: Instant,
}

/// A finished binding cycle.
struct Done {
    result: Result<unisched_framework::BoundPod, Box<unisched_framework::SchedulingFailure>>,
    qpi: QueuedPodInfo,
    started: Instant,
    profile: String,
}

struct EnginePhase {
    inner: Option<Measurement>,
    done: Option<Measured>,
    counter: Arc<AtomicU64>,
    metrics: Metrics,
}

impl Phase for EnginePhase {
    fn start(&mut self) {
        if self.inner.is_none() && self.done.is_none() {
            let m = self.metrics.clone();
            self.inner = Some(Measurement::start(self.counter.clone(), move || m.render()));
        }
    }
    fn stop(&mut self) {
        if let Some(m) = self.inner.take() {
            self.done = Some(m.finish());
        }
    }
}

/// Runs `w` in engine mode.
pub(crate) fn run_engine(w: &Workload, opts: &RunOptions) -> Result<RunReport, BenchError> {
    let started = Instant::now();
    let w = w.clone();
    let opts = opts.clone();
    std::thread::Builder::new()
        .name("unisched-schedule".into())
        .spawn(move || engine_thread(&w, &opts, started))
        .map_err(|e| BenchError::Setup(format!("starting the engine thread: {e}")))?
        .join()
        .map_err(|_| BenchError::Setup("the engine thread panicked".into()))?
}

fn engine_thread(w: &Workload, opts: &RunOptions, started: Instant) -> Result<RunReport, BenchError> {
    let progress = Progress::new(opts.progress, &format!("{} [engine]", w.name));
    unisched_framework::calibrate_plugin_clock();
    let cfg = opts
        .config
        .clone()
        .unwrap_or_else(KubeSchedulerConfiguration::defaulted);
    let metrics = Metrics::new().map_err(|e| BenchError::Setup(e.to_string()))?;
    let dra_api = Arc::new(MemDraApi::new(metrics.clone()));
    let dra_cache = Arc::new(DraCache::new());
    let gates = crate::feature_gates(w)?;
    let mut features = PluginFeatures::default();
    features.taint_toleration_comparison_operators = gates.enabled("TaintTolerationComparisonOperators");
    features.workload_resource_claims = gates.enabled("DRAWorkloadResourceClaims");
    let preemptor = Arc::new(EnginePreemptor::new(metrics.clone()));
    let namespaces = Arc::new(NamespaceStore::new());
    let mut context = PluginContext::new(Arc::new(CountingBinder(metrics.clone())))
        .with_dra(dra_cache.clone(), dra_api.clone())
        .with_preemption(preemptor.clone(), Arc::new(StaticPdbs(Vec::new())))
        .with_namespaces(namespaces.clone())
        .with_features(features);
    let group_store = gates
        .enabled("GenericWorkload")
        .then(|| Arc::new(PodGroupStore::new()));
    if let Some(store) = &group_store {
        context = context.with_pod_groups(store.clone(), gates.enabled("TopologyAwareWorkloadScheduling"));
    }
    let registry = Registry::in_tree(context);
    let mut profiles = HashMap::new();
    let mut frameworks = Vec::new();
    for p in &cfg.profiles {
        let name = p.scheduler_name.clone().unwrap_or_default();
        let fwk = Framework::new(p, &registry)
            .map_err(|e| BenchError::Setup(format!("profile {name}: {e}")))?
            .with_observer(Arc::new(metrics.clone()));
        let fwk = Arc::new(fwk);
        metrics.init_profile(&name);
        frameworks.push(fwk.clone());
        profiles.insert(name, fwk);
    }
    let qcfg = QueueConfig::builder()
        .backoff_seconds(cfg.pod_initial_backoff_seconds, cfg.pod_max_backoff_seconds)
        .build();
    let queue =
        Arc::new(SchedulingQueue::new(frameworks, qcfg).map_err(|e| BenchError::Setup(e.to_string()))?);
    let measured = Arc::new(AtomicU64::new(0));
    let cache = Arc::new(Cache::new());
    let (binder, binding_rx) = std::sync::mpsc::channel::<Binding>();
    let (bound_tx, bound_rx) = std::sync::mpsc::channel::<Done>();
    let binding_cache = cache.clone();
    let binding_metrics = metrics.clone();
    let binding_thread = std::thread::Builder::new()
        .name("unisched-io-bind".into())
        .spawn(move || {
            while let Ok(b) = binding_rx.recv() {
                let profile = b.fwk.profile_name().to_string();
                let result = bind_inline(&b.fwk, binding_cache.as_ref(), *b.task, &binding_metrics);
                let done = Done {
                    result,
                    qpi: b.qpi,
                    started: b.started,
                    profile,
                };
                if bound_tx.send(done).is_err() {
                    return;
                }
            }
        })
        .map_err(|e| BenchError::Setup(format!("starting the binding thread: {e}")))?;
    let mut e = Engine {
        dra: EngineDra::new(dra_api, dra_cache, &queue),
        groups: group_store.map(|store| EngineGroups::new(store, queue.clone())),
        preemptor,
        awaiting_preemption: HashSet::new(),
        namespaces,
        priority_classes: HashMap::new(),
        binder,
        bound_rx,
        in_flight: 0,
        profiles,
        algos: HashMap::new(),
        cache,
        queue,
        metrics: metrics.clone(),
        sampler_rng: SeededRng::new(opts.seed ^ 0x5eed),
        seed: opts.seed,
        parallelism: usize::try_from(cfg.parallelism).unwrap_or(1),
        percentage: cfg.percentage_of_nodes_to_score,
        nodes: Vec::new(),
        bound: BTreeMap::new(),
        measured_ns: Vec::new(),
        measured: measured.clone(),
        steady: None,
        steady_template: None,
        created: BTreeMap::new(),
        scheduled_total: BTreeMap::new(),
        progress: &progress,
        deadline: Instant::now() + Duration::from_secs_f64(w.timeout_seconds),
        timed_out: false,
        notes: Vec::new(),
    };
    let mut phase = EnginePhase {
        inner: None,
        done: None,
        counter: measured,
        metrics,
    };
    for (i, op) in w.ops.iter().enumerate() {
        if e.timed_out {
            break;
        }
        match op {
            Op::CreateNodes {
                count,
                node_template_path,
            } => {
                let t = w.template(node_template_path)?;
                for k in 0..*count {
                    let node: Node = api_object(t.render(&Vars::new().int("Index", k))?, "node")?;
                    e.nodes.push(node.metadata.name.clone().unwrap_or_default());
                    let node = Arc::new(node);
                    e.cache.add_node(node.clone());
                    e.queue.move_all_to_active_or_backoff(
                        well_known::NODE_ADD,
                        None,
                        Some(EventObject::Node(node)),
                    );
                }
            }
            Op::CreatePodGroups {
                count,
                namespace,
                template_path,
                template_params,
            } => {
                let t = w.template(template_path)?;
                if e.groups.is_none() {
                    e.notes.push(format!(
                        "GenericWorkload is off: the PodGroups of {template_path} are not created"
                    ));
                    continue;
                }
                for k in 0..*count {
                    let mut v = render_pod_group(t, k, template_params, namespace)?;
                    e.admit(&mut v, namespace)?;
                    let group: PodGroup = api_object(v, "PodGroup")?;
                    if let Some(groups) = &e.groups {
                        groups.add_group(group);
                    }
                }
            }
            Op::CreatePods {
                count,
                pod_template_path,
                template_params,
                mix_pod_template_paths,
                namespace,
                collect_metrics,
                steady_state,
                duration_seconds,
                pre_bound,
                skip_wait_to_completion,
            } => {
                let ns = namespace.clone().unwrap_or_else(|| format!("bench-{i}"));
                let t = PodTemplates::new(w, pod_template_path, mix_pod_template_paths, template_params)?;
                if *collect_metrics {
                    e.measured_ns.push(ns.clone());
                    phase.start();
                }
                if *steady_state {
                    e.steady = Some(ns.clone());
                    e.steady_template = Some(t.clone());
                }
                for k in 0..*count {
                    e.add_pod(&t, &ns, k, *pre_bound)?;
                }
                if *steady_state {
                    let until = Instant::now() + Duration::from_secs_f64(*duration_seconds);
                    e.drain("steady state", Some(until));
                    e.steady = None;
                } else if !skip_wait_to_completion && !pre_bound {
                    e.drain(if *collect_metrics { "measured" } else { "setup" }, None);
                }
                if *collect_metrics {
                    phase.stop();
                }
            }
            Op::Barrier { .. } => e.drain("barrier", None),
            Op::DeletePods { namespace, .. } => {
                for p in e.bound.remove(namespace).unwrap_or_default() {
                    e.delete_bound(&p);
                }
            }
            Op::Sleep { duration_seconds } => std::thread::sleep(Duration::from_secs_f64(*duration_seconds)),
            Op::CreateAny {
                template_path,
                count,
                namespace,
            } => {
                let t = w.template(template_path)?;
                for k in 0..*count {
                    let v = t.render(&Vars::new().int("Index", k))?;
                    if v["kind"] == "PriorityClass" {
                        let name = v["metadata"]["name"].as_str().unwrap_or_default().to_string();
                        e.priority_classes.insert(name, v["value"].as_i64().unwrap_or(0));
                        continue;
                    }
                    if !e.dra.create(v, namespace.as_deref())? {
                        e.notes
                            .push(format!("engine mode ignores createAny {template_path}"));
                        break;
                    }
                }
            }
            Op::CreateResourceSlices {
                nodes,
                slice_template_paths,
                devices,
            } => {
                let targets: Vec<String> = e
                    .nodes
                    .iter()
                    .filter(|n| n.starts_with(nodes.as_str()))
                    .cloned()
                    .collect();
                for (k, node) in targets.iter().enumerate() {
                    for s in render_slices(w, slice_template_paths, devices, node, k)? {
                        e.dra.create(s, None)?;
                    }
                }
            }
            Op::AllocResourceClaims { namespace } => {
                e.dra.alloc(namespace, opts.seed)?;
            }
            Op::Churn { .. } => e.notes.push("engine mode ignores churn".into()),
        }
    }
    phase.stop();
    // Finish what is in flight (steady state leaves pods behind), as the runtime would.
    e.steady = None;
    e.drain("finishing", None);
    let created: u64 = e
        .measured_ns
        .iter()
        .map(|ns| e.created.get(ns).copied().unwrap_or(0))
        .sum();
    let ever: u64 = e
        .measured_ns
        .iter()
        .map(|ns| e.scheduled_total.get(ns).copied().unwrap_or(0))
        .sum();
    let pending = created.saturating_sub(ever);
    let mut r = crate::measure::report(w, Mode::Engine, phase.done.take(), created, pending, started);
    r.timed_out = e.timed_out;
    r.notes.append(&mut e.notes);
    drop(e);
    let _ = binding_thread.join();
    Ok(r)
}
