//! Executes a workload's ops against a [`Target`] (the harness is the "test client": it creates
//! objects in the embedded store in process, as fast as it can, or through an external API server
//! at a fixed client QPS, while the scheduler under test sees them through HTTP watches), and
//! waits for pods through the [`Tracker`].

use std::{
    collections::{BTreeMap, HashSet},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use unisched_framework::config::DEFAULT_SCHEDULER_NAME;

use crate::{
    BenchError,
    progress::Progress,
    target::Target,
    template::{Template, Vars},
    tracker::Tracker,
    workload::{ChurnMode, DeviceGroup, Op, Workload},
};

/// Called around the measured phase.
pub(crate) trait Phase {
    /// The measured phase begins (before its first pod is created).
    fn start(&mut self);
    /// It ends.
    fn stop(&mut self);
}

/// Waiting rules.
#[derive(Clone, Debug)]
pub(crate) struct WaitRules {
    /// When every outstanding pod has been rejected and nothing moved for this long, stop waiting.
    pub rejected_stall: Duration,
    /// When nothing moved for this long at all, stop waiting.
    pub stall: Duration,
}

/// Renders a pod and prepares it for `ns`: the scheduler name defaults to unisched's.
pub(crate) fn render_pod(
    tpl: &Template,
    index: usize,
    params: &BTreeMap<String, i64>,
    ns: &str,
) -> Result<Value, BenchError> {
    let mut v = tpl.render(&Vars::new().int("Index", index).params(params))?;
    if !v.is_object() {
        return Err(BenchError::Workload(format!("{}: not an object", tpl.path())));
    }
    v["metadata"]["namespace"] = json!(ns);
    if v["spec"]["schedulerName"].as_str().is_none_or(str::is_empty) {
        v["spec"]["schedulerName"] = json!(DEFAULT_SCHEDULER_NAME);
    }
    Ok(v)
}

/// Renders the slices of one node (devices appended to slices whose template has `spec.devices`).
pub(crate) fn render_slices(
    w: &Workload,
    slice_templates: &[String],
    devices: &[DeviceGroup],
    node: &str,
    node_index: usize,
) -> Result<Vec<Value>, BenchError> {
    let mut out = Vec::new();
    for path in slice_templates {
        let vars = Vars::new().str("Node", node).int("NodeIndex", node_index);
        let mut slice = w.template(path)?.render(&vars)?;
        if slice["spec"]["devices"].is_array() {
            let mut list = Vec::new();
            let mut d = 0usize;
            for g in devices {
                let t = w.template(&g.template_path)?;
                for i in 0..g.count {
                    let vars = Vars::new()
                        .str("Node", node)
                        .int("NodeIndex", node_index)
                        .int("Device", d)
                        .int("I", i);
                    list.push(t.render(&vars)?);
                    d += 1;
                }
            }
            if let Some(a) = slice["spec"]["devices"].as_array_mut() {
                a.extend(list);
            }
        }
        out.push(slice);
    }
    Ok(out)
}

/// Renders PodGroup `index` of a `createPodGroups` op into `ns`.
pub(crate) fn render_pod_group(
    tpl: &Template,
    index: usize,
    params: &BTreeMap<String, i64>,
    ns: &str,
) -> Result<Value, BenchError> {
    let mut v = tpl.render(&Vars::new().int("Index", index).params(params))?;
    if !v.is_object() {
        return Err(BenchError::Workload(format!("{}: not an object", tpl.path())));
    }
    v["metadata"]["namespace"] = json!(ns);
    Ok(v)
}

/// The templates of a `createPods` op: pod `i` uses `i % n`; all see the op's `templateParams`.
#[derive(Clone, Debug)]
pub(crate) struct PodTemplates {
    templates: Vec<Template>,
    params: BTreeMap<String, i64>,
}

impl PodTemplates {
    pub(crate) fn new(
        w: &Workload,
        main: &str,
        mix: &[String],
        params: &BTreeMap<String, i64>,
    ) -> Result<Self, BenchError> {
        let templates = std::iter::once(main)
            .chain(mix.iter().map(String::as_str))
            .map(|p| w.template(p).cloned())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PodTemplates {
            templates,
            params: params.clone(),
        })
    }

    pub(crate) fn render(&self, index: usize, ns: &str) -> Result<Value, BenchError> {
        let t = &self.templates[index % self.templates.len().max(1)];
        render_pod(t, index, &self.params, ns)
    }
}

/// Runs the ops of a workload.
pub(crate) struct Driver<'a> {
    w: &'a Workload,
    store: Arc<dyn Target>,
    tracker: &'a Tracker,
    progress: &'a Progress,
    rules: WaitRules,
    deadline: Instant,
    seed: u64,
    nodes: Vec<String>,
    namespaces: HashSet<String>,
    created: BTreeMap<String, u64>,
    churn_stop: Arc<AtomicBool>,
    churn: Vec<std::thread::JoinHandle<()>>,
    /// The run hit its deadline.
    pub timed_out: bool,
    /// Namespaces of the measured phase.
    pub measured_namespaces: Vec<String>,
    /// Anything worth reporting.
    pub notes: Vec<String>,
}

impl<'a> Driver<'a> {
    pub(crate) fn new(
        w: &'a Workload,
        store: Arc<dyn Target>,
        tracker: &'a Tracker,
        progress: &'a Progress,
        rules: WaitRules,
        seed: u64,
    ) -> Self {
        Driver {
            w,
            store,
            tracker,
            progress,
            rules,
            deadline: Instant::now() + Duration::from_secs_f64(w.timeout_seconds),
            seed,
            nodes: Vec::new(),
            namespaces: HashSet::new(),
            created: BTreeMap::new(),
            churn_stop: Arc::new(AtomicBool::new(false)),
            churn: Vec::new(),
            timed_out: false,
            measured_namespaces: Vec::new(),
            notes: Vec::new(),
        }
    }

    fn ensure_ns(&mut self, ns: &str) -> Result<(), BenchError> {
        if self.namespaces.contains(ns) || ["default", "kube-system", "kube-public"].contains(&ns) {
            return Ok(());
        }
        self.store.ensure_namespace(ns)?;
        self.namespaces.insert(ns.to_string());
        Ok(())
    }

    fn create(&mut self, v: Value, namespace: Option<&str>) -> Result<String, BenchError> {
        let (plural, namespaced) = self.store.resource_of(&v)?;
        let ns = if namespaced {
            let ns = namespace
                .map(str::to_string)
                .or_else(|| v["metadata"]["namespace"].as_str().map(str::to_string))
                .unwrap_or_else(|| "default".into());
            self.ensure_ns(&ns)?;
            Some(ns)
        } else {
            None
        };
        self.store.create(&plural, ns.as_deref(), v)
    }

    /// Runs every op; `phase` is told when the measured phase starts and stops.
    pub(crate) fn run(&mut self, phase: &mut dyn Phase) -> Result<(), BenchError> {
        let ops = self.w.ops.clone();
        for (i, op) in ops.iter().enumerate() {
            if self.timed_out {
                break;
            }
            self.op(i, op, phase)?;
        }
        self.churn_stop.store(true, Ordering::SeqCst);
        for t in self.churn.drain(..) {
            let _ = t.join();
        }
        Ok(())
    }

    fn op(&mut self, i: usize, op: &Op, phase: &mut dyn Phase) -> Result<(), BenchError> {
        match op {
            Op::CreateNodes {
                count,
                node_template_path,
            } => {
                let t = self.w.template(node_template_path)?.clone();
                for k in 0..*count {
                    let v = t.render(&Vars::new().int("Index", k))?;
                    let name = self.create(v, None)?;
                    self.nodes.push(name);
                    if k % 500 == 0 {
                        self.progress.update(&format!("setup: {k}/{count} nodes"));
                    }
                }
            }
            Op::CreateAny {
                template_path,
                count,
                namespace,
            } => {
                let t = self.w.template(template_path)?.clone();
                for k in 0..*count {
                    let v = t.render(&Vars::new().int("Index", k))?;
                    self.create(v, namespace.as_deref())?;
                    if k % 1000 == 0 {
                        self.progress
                            .update(&format!("setup: {k}/{count} objects of {template_path}"));
                    }
                }
            }
            Op::CreateResourceSlices {
                nodes,
                slice_template_paths,
                devices,
            } => {
                let targets: Vec<(usize, String)> = self
                    .nodes
                    .iter()
                    .filter(|n| n.starts_with(nodes.as_str()))
                    .cloned()
                    .enumerate()
                    .collect();
                let total = targets.len();
                for (k, node) in targets {
                    for s in render_slices(self.w, slice_template_paths, devices, &node, k)? {
                        self.create(s, None)?;
                    }
                    if k % 500 == 0 {
                        self.progress
                            .update(&format!("setup: slices for {k}/{total} nodes"));
                    }
                }
            }
            Op::AllocResourceClaims { namespace } => {
                let n = self.store.alloc_claims(namespace, self.seed)?;
                self.progress
                    .note(&format!("allocated {n} claims in {namespace}"));
            }
            Op::CreatePodGroups {
                count,
                namespace,
                template_path,
                template_params,
            } => {
                self.ensure_ns(namespace)?;
                let t = self.w.template(template_path)?.clone();
                for k in 0..*count {
                    let v = render_pod_group(&t, k, template_params, namespace)?;
                    self.create(v, Some(namespace))?;
                    if k % 1000 == 0 {
                        self.progress
                            .update(&format!("setup: {k}/{count} PodGroups in {namespace}"));
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
                self.ensure_ns(&ns)?;
                let t =
                    PodTemplates::new(self.w, pod_template_path, mix_pod_template_paths, template_params)?;
                if *collect_metrics {
                    self.tracker.add_measured(&ns);
                    self.measured_namespaces.push(ns.clone());
                    phase.start();
                }
                if *steady_state {
                    self.steady(&t, &ns, *count, *duration_seconds)?;
                } else {
                    self.create_pods(&t, &ns, *count, *pre_bound, *collect_metrics)?;
                    if !skip_wait_to_completion && !pre_bound {
                        self.wait(std::slice::from_ref(&ns), *collect_metrics);
                    }
                }
                if *collect_metrics {
                    phase.stop();
                }
            }
            Op::DeletePods {
                namespace,
                per_second,
            } => {
                for p in self.store.pod_names(namespace)? {
                    let _ = self.store.delete("pods", Some(namespace), &p);
                    if *per_second > 0.0 {
                        std::thread::sleep(Duration::from_secs_f64(1.0 / per_second));
                    }
                }
            }
            Op::Barrier { namespaces } => {
                let ns = if namespaces.is_empty() {
                    self.created.keys().cloned().collect()
                } else {
                    namespaces.clone()
                };
                self.wait(&ns, false);
            }
            Op::Sleep { duration_seconds } => {
                let until = Instant::now() + Duration::from_secs_f64(*duration_seconds);
                while Instant::now() < until && Instant::now() < self.deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            Op::Churn {
                mode,
                interval_milliseconds,
                template_paths,
                number,
                namespace,
            } => self.start_churn(
                *mode,
                *interval_milliseconds,
                template_paths,
                *number,
                namespace.clone(),
            )?,
        }
        Ok(())
    }

    fn create_pods(
        &mut self,
        t: &PodTemplates,
        ns: &str,
        count: usize,
        pre_bound: bool,
        measured: bool,
    ) -> Result<(), BenchError> {
        if pre_bound && self.nodes.is_empty() {
            return Err(BenchError::Workload("preBound pods need nodes first".into()));
        }
        let label = if measured { "measured" } else { "setup" };
        for k in 0..count {
            let mut v = t.render(k, ns)?;
            if pre_bound {
                v["spec"]["nodeName"] = json!(self.nodes[k % self.nodes.len()]);
            }
            self.store.submit_pod(ns, v)?;
            *self.created.entry(ns.to_string()).or_default() += 1;
            if k % 1000 == 0 {
                let s = self.tracker.ns(ns);
                self.progress.update(&format!(
                    "{label}: created {k}/{count} pods in {ns}, {} scheduled",
                    s.scheduled
                ));
            }
        }
        self.store.flush()
    }

    fn steady(&mut self, t: &PodTemplates, ns: &str, count: usize, duration: f64) -> Result<(), BenchError> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.tracker.set_steady(Some((ns.to_string(), tx)));
        let mut index = 0usize;
        let result = (|| {
            for _ in 0..count {
                self.store.submit_pod(ns, t.render(index, ns)?)?;
                index += 1;
            }
            let end = Instant::now() + Duration::from_secs_f64(duration);
            let started = Instant::now();
            loop {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                if now >= self.deadline {
                    self.timed_out = true;
                    break;
                }
                match rx.recv_timeout((end - now).min(Duration::from_millis(50))) {
                    Ok(name) => {
                        let _ = self.store.delete("pods", Some(ns), &name);
                        self.store.submit_pod(ns, t.render(index, ns)?)?;
                        index += 1;
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                }
                let s = self.tracker.ns(ns);
                self.progress.update(&format!(
                    "steady state: {} scheduled in {:.0}/{duration:.0}s ({} rejected)",
                    s.scheduled,
                    started.elapsed().as_secs_f64(),
                    s.rejected()
                ));
            }
            Ok(())
        })();
        self.tracker.set_steady(None);
        *self.created.entry(ns.to_string()).or_default() += index as u64;
        result.and(self.store.flush())
    }

    /// Waits until the pods of `namespaces` are all scheduled, or the remaining ones are stuck.
    fn wait(&mut self, namespaces: &[String], measured: bool) {
        let started = Instant::now();
        let label = if measured { "measured" } else { "setup" };
        loop {
            // The tracker must have seen every pod we created before "nothing pending" means done.
            let seen = namespaces.iter().all(|ns| {
                let want = self.created.get(ns).copied().unwrap_or(0);
                self.tracker.ns(ns).created >= want
            });
            let (pending, rejected) = self.tracker.outstanding(namespaces);
            if seen && pending == 0 {
                return;
            }
            let idle = self.tracker.last_progress().elapsed().min(started.elapsed());
            if seen && pending == rejected && idle >= self.rules.rejected_stall {
                self.notes.push(format!(
                    "{pending} pods in {} stayed unschedulable",
                    namespaces.join(",")
                ));
                return;
            }
            if idle >= self.rules.stall {
                self.notes.push(format!(
                    "{pending} pods in {} still pending after {:.0}s without progress ({rejected} rejected)",
                    namespaces.join(","),
                    idle.as_secs_f64()
                ));
                return;
            }
            if Instant::now() >= self.deadline {
                self.timed_out = true;
                self.notes.push(format!(
                    "timed out after {:.0}s with {pending} pods pending",
                    self.w.timeout_seconds
                ));
                return;
            }
            let scheduled: u64 = namespaces.iter().map(|ns| self.tracker.ns(ns).scheduled).sum();
            self.progress.update(&format!(
                "{label}: {scheduled} scheduled, {pending} pending ({rejected} rejected), {:.0}s",
                started.elapsed().as_secs_f64()
            ));
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn start_churn(
        &mut self,
        mode: ChurnMode,
        interval_ms: u64,
        paths: &[String],
        number: usize,
        namespace: Option<String>,
    ) -> Result<(), BenchError> {
        let templates: Vec<Template> = paths
            .iter()
            .map(|p| self.w.template(p).cloned())
            .collect::<Result<_, _>>()?;
        let mut targets = Vec::new();
        for t in &templates {
            let v = t.render(&Vars::new().int("Index", 0))?;
            let (plural, namespaced) = self.store.resource_of(&v)?;
            let ns = if namespaced {
                let ns = namespace.clone().unwrap_or_else(|| "default".into());
                self.ensure_ns(&ns)?;
                Some(ns)
            } else {
                None
            };
            targets.push((t.clone(), plural, ns));
        }
        let store = self.store.clone();
        let stop = self.churn_stop.clone();
        let keep = if mode == ChurnMode::Recreate {
            1
        } else {
            number.max(1)
        };
        let handle = std::thread::Builder::new()
            .name("bench-churn".into())
            .spawn(move || {
                let mut live: Vec<std::collections::VecDeque<String>> =
                    vec![Default::default(); targets.len()];
                let mut round = 0usize;
                while !stop.load(Ordering::SeqCst) {
                    for (k, (t, plural, ns)) in targets.iter().enumerate() {
                        if live[k].len() >= keep
                            && let Some(old) = live[k].pop_front()
                        {
                            let _ = store.delete(plural, ns.as_deref(), &old);
                        }
                        let Ok(mut v) = t.render(&Vars::new().int("Index", round)) else {
                            continue;
                        };
                        if plural == "pods" && v["spec"]["schedulerName"].is_null() {
                            v["spec"]["schedulerName"] = json!(DEFAULT_SCHEDULER_NAME);
                        }
                        if let Ok(name) = store.create(plural, ns.as_deref(), v) {
                            live[k].push_back(name);
                        }
                    }
                    round += 1;
                    let until = Instant::now() + Duration::from_millis(interval_ms.max(1));
                    while Instant::now() < until && !stop.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            })
            .map_err(|e| BenchError::Setup(format!("starting churn: {e}")))?;
        self.churn.push(handle);
        Ok(())
    }
}
