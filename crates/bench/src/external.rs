//! External mode (`unisched-bench --external`): the same workload against a real control plane
//! (upstream's kube-apiserver, etcd and kube-controller-manager, started by
//! `e2e/upstream/control-plane`), decided once by upstream kube-scheduler and once by
//! `unisched run`, back to back, each a child process this harness did not link in.
//!
//! Every scheduler gets a fresh control plane (nothing of the previous run remains: no objects,
//! no watch caches, no controller backlog). The harness creates objects through the API server at
//! a fixed client QPS (the same for both), counts bindings through a pod watch, and reads the CPU
//! time (`utime + stime` of `/proc/PID/stat`, children excluded) of the scheduler, kube-apiserver,
//! etcd and itself over the measured phase, so a run can say what bound it.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use unisched_sim::Registry;

use crate::{
    BenchError, Machine, RunReport, Throughput,
    driver::{Driver, Phase, WaitRules},
    leftovers,
    measure::{Measured, Measurement},
    procstat,
    progress::Progress,
    sampler,
    target::Target,
    tracker::Tracker,
    workload::Workload,
};

/// A scheduler measured by external mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Contender {
    /// Upstream kube-scheduler (`kube-scheduler` of the upstream binaries).
    Upstream,
    /// `unisched run`.
    Unisched,
    /// unisched on the embedded control plane: the bench's own full mode (`unisched-bench --mode full`,
    /// a child process), so one invocation also gives the column without a real control plane.
    Embedded,
}

impl Contender {
    /// Its name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Contender::Upstream => "kube-scheduler",
            Contender::Unisched => "unisched",
            Contender::Embedded => EMBEDDED,
        }
    }
}

/// The report name of [`Contender::Embedded`].
const EMBEDDED: &str = "unisched-embedded";

/// The thread groups of a full-mode run that are the scheduler's (see `report::Cpu`); the rest is
/// the embedded API server (`apiserver`), the harness (`harness`) and `other`.
const SCHEDULER_COMPONENTS: [&str; 3] = ["scheduling-cycle", "filter-workers", "scheduler-io"];

/// How to run external mode.
#[derive(Clone, Debug)]
pub struct ExternalOptions {
    /// `e2e/upstream/control-plane` (start DIR / stop DIR).
    pub control_plane: PathBuf,
    /// The directory holding upstream's `kube-scheduler`.
    pub upstream_bin: PathBuf,
    /// The `unisched` binary to run as `unisched run`.
    pub unisched_bin: PathBuf,
    /// The `unisched-bench` binary, run as `unisched-bench --internal-child` for
    /// [`Contender::Embedded`].
    pub bench_bin: PathBuf,
    /// A `KubeSchedulerConfiguration` for both schedulers (default: the default profile); its
    /// profiles are renamed `unisched`, leader election is turned off and the client QPS set.
    pub scheduler_config: Option<PathBuf>,
    /// QPS (and burst) of the object creator.
    pub creator_qps: f64,
    /// Client QPS (and burst) of both schedulers.
    pub scheduler_qps: f64,
    /// Control-plane directories go below this one (`<workload>-<scheduler>`).
    pub work_dir: PathBuf,
    /// Which schedulers, in order.
    pub contenders: Vec<Contender>,
    /// [`Contender::Embedded`]: the workload directory its child reads (default: the built-in one).
    pub workloads_dir: Option<PathBuf>,
    /// [`Contender::Embedded`]: the child's `--v`.
    pub verbosity: u8,
    /// Tie-break seed (unisched) and the seed of `allocResourceClaims`.
    pub seed: u64,
    /// Progress on stderr.
    pub progress: bool,
}

/// CPU seconds of one process over the measured phase, and cores it kept busy on average.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProcessCpu {
    /// CPU seconds.
    pub seconds: f64,
    /// `seconds / wall seconds`.
    pub cores: f64,
}

/// One (workload, scheduler) run of external mode.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExternalRun {
    /// Workload.
    pub workload: String,
    /// `kube-scheduler` or `unisched`.
    pub scheduler: String,
    /// Pods created in the measured phase.
    pub measured_pods: u64,
    /// Of them, bound by the end.
    pub scheduled: u64,
    /// Still pending at the end.
    pub pending: u64,
    /// Wall seconds of the measured phase.
    pub wall_seconds: f64,
    /// Bindings observed by the watch, sampled as upstream does.
    pub throughput: Throughput,
    /// The scheduler process.
    pub scheduler_cpu: ProcessCpu,
    /// Scheduler CPU milliseconds per pod bound in the measured phase.
    pub scheduler_cpu_ms_per_pod: f64,
    /// `VmHWM` of the scheduler process over the whole run.
    pub scheduler_peak_rss_bytes: u64,
    /// kube-apiserver.
    pub apiserver_cpu: ProcessCpu,
    /// etcd.
    pub etcd_cpu: ProcessCpu,
    /// This process (object creator and pod watch).
    pub creator_cpu: ProcessCpu,
    /// Pods the creator submitted per second in the measured phase.
    pub creator_pods_per_second: f64,
    /// What bound the run (see [`bound`]).
    pub bound: String,
    /// Set when the run could not be made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Anything worth knowing.
    pub notes: Vec<String>,
}

/// Everything one `unisched-bench --external` invocation ran.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExternalReport {
    /// Where.
    pub machine: Machine,
    /// When (UTC).
    pub date: String,
    /// The command line.
    pub command: String,
    /// Creator QPS.
    pub creator_qps: f64,
    /// Scheduler client QPS.
    pub scheduler_qps: f64,
    /// How the runs were isolated.
    pub isolation: String,
    /// Every run, in order.
    pub runs: Vec<ExternalRun>,
}

/// What limited a run, from the cores each party kept busy in the measured phase on a machine of
/// `cpus` cores: the machine when together they used nearly all of it, otherwise the busiest of
/// the scheduler, the API server (kube-apiserver + etcd) and the creator; "client QPS" when the
/// creator's pod rate reached its QPS.
pub fn bound(r: &ExternalRun, cpus: usize, creator_qps: f64) -> String {
    let api = r.apiserver_cpu.cores + r.etcd_cpu.cores;
    let total = r.scheduler_cpu.cores + api + r.creator_cpu.cores;
    let parts = format!(
        "scheduler {:.2}, API server {:.2}, creator {:.2} cores",
        r.scheduler_cpu.cores, api, r.creator_cpu.cores
    );
    let who = if creator_qps > 0.0 && r.creator_pods_per_second >= 0.9 * creator_qps {
        "client QPS"
    } else if total >= 0.85 * cpus as f64 {
        if api >= r.scheduler_cpu.cores {
            "machine CPU (API server largest)"
        } else {
            "machine CPU (scheduler largest)"
        }
    } else if r.scheduler_cpu.cores >= api && r.scheduler_cpu.cores >= r.creator_cpu.cores {
        "scheduler"
    } else if api >= r.creator_cpu.cores {
        "API server"
    } else {
        "creator"
    };
    format!("{who} ({parts})")
}

impl ExternalRun {
    /// A full-mode run of the embedded control plane, in this report's terms: the scheduler is the
    /// scheduling thread, the Filter/Score workers and the scheduler's runtime threads; the API
    /// server is the embedded one (no etcd); the creator is the harness. Peak RSS is the whole
    /// process (API server and harness included), which a note says.
    pub fn from_embedded(r: &RunReport, cpus: usize) -> Self {
        let wall = r.measured_seconds;
        let by = |names: &[&str]| -> f64 { names.iter().filter_map(|n| r.cpu.by_component.get(*n)).sum() };
        let scheduler = by(&SCHEDULER_COMPONENTS);
        let mut notes =
            vec!["peak RSS is the whole process: scheduler, embedded API server and harness".to_string()];
        notes.extend(r.notes.iter().cloned());
        if r.timed_out {
            notes.push("timed out".into());
        }
        let mut run = ExternalRun {
            workload: r.workload.clone(),
            scheduler: EMBEDDED.into(),
            measured_pods: r.measured_pods,
            scheduled: r.scheduled,
            pending: r.unschedulable,
            wall_seconds: wall,
            throughput: r.throughput.clone(),
            scheduler_cpu: cpu(scheduler, wall),
            scheduler_cpu_ms_per_pod: if r.scheduled > 0 {
                scheduler * 1000.0 / r.scheduled as f64
            } else {
                0.0
            },
            scheduler_peak_rss_bytes: r.peak_rss_bytes,
            apiserver_cpu: cpu(by(&["apiserver"]), wall),
            etcd_cpu: ProcessCpu::default(),
            creator_cpu: cpu(by(&["harness"]), wall),
            creator_pods_per_second: if wall > 0.0 {
                r.measured_pods as f64 / wall
            } else {
                0.0
            },
            bound: String::new(),
            skipped: r.skipped.clone(),
            notes,
        };
        // The embedded harness has no client QPS limit.
        run.bound = bound(&run, cpus, 0.0);
        run
    }
}

impl ExternalReport {
    /// A readable table, with the ratio unisched / kube-scheduler per workload.
    pub fn to_table(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "external mode, {} ({} CPUs), {}; creator QPS {}, scheduler QPS {}; {}",
            self.machine.cpu_model,
            self.machine.cpus,
            self.date,
            self.creator_qps,
            self.scheduler_qps,
            self.isolation
        );
        let _ = writeln!(
            out,
            "{:52} {:15} {:>9} {:>9} {:>10} {:>9} {:>9} {:>8} bound",
            "WORKLOAD", "SCHEDULER", "BOUND", "PODS/S", "CPU MS/POD", "RSS MIB", "APISRV S", "CREATOR S"
        );
        for r in &self.runs {
            if let Some(why) = &r.skipped {
                let _ = writeln!(out, "{:52} {:15} skipped: {why}", r.workload, r.scheduler);
                continue;
            }
            let _ = writeln!(
                out,
                "{:52} {:15} {:>4}/{:<4} {:>9.1} {:>10.2} {:>9.0} {:>9.1} {:>8.1} {}",
                r.workload,
                r.scheduler,
                r.scheduled,
                r.measured_pods,
                sampler_headline(&r.throughput),
                r.scheduler_cpu_ms_per_pod,
                r.scheduler_peak_rss_bytes as f64 / (1024.0 * 1024.0),
                r.apiserver_cpu.seconds + r.etcd_cpu.seconds,
                r.creator_cpu.seconds,
                r.bound
            );
            for n in &r.notes {
                let _ = writeln!(out, "    note: {n}");
            }
        }
        for (w, ratio, cpu) in self.ratios() {
            let _ = writeln!(
                out,
                "{w}: unisched / kube-scheduler throughput {ratio:.2}x, CPU per pod {cpu:.2}x less"
            );
        }
        out
    }

    /// Per workload with both runs: (workload, throughput ratio unisched / upstream, upstream CPU
    /// per pod / unisched CPU per pod).
    pub fn ratios(&self) -> Vec<(String, f64, f64)> {
        let mut out = Vec::new();
        for r in self
            .runs
            .iter()
            .filter(|r| r.scheduler == "unisched" && r.skipped.is_none())
        {
            let Some(up) = self
                .runs
                .iter()
                .find(|u| u.workload == r.workload && u.scheduler == "kube-scheduler" && u.skipped.is_none())
            else {
                continue;
            };
            let up_tp = sampler_headline(&up.throughput);
            let tp = if up_tp > 0.0 {
                sampler_headline(&r.throughput) / up_tp
            } else {
                0.0
            };
            let cpu = if r.scheduler_cpu_ms_per_pod > 0.0 {
                up.scheduler_cpu_ms_per_pod / r.scheduler_cpu_ms_per_pod
            } else {
                0.0
            };
            out.push((r.workload.clone(), tp, cpu));
        }
        out
    }
}

/// Upstream's Average, or the overall rate when the phase was too short for two samples.
fn sampler_headline(t: &Throughput) -> f64 {
    if t.samples > 0 { t.average } else { t.overall }
}

/// The scheduler configuration given to a contender, as YAML: `base` (or the default profile)
/// with every profile named `unisched`, leader election off and the client QPS and burst set;
/// `kubeconfig` goes into `clientConnection` (kube-scheduler reads it from there).
pub fn scheduler_config(
    base: Option<&str>,
    qps: f64,
    kubeconfig: Option<&Path>,
) -> Result<String, BenchError> {
    let mut v: Value = match base {
        Some(text) => serde_yaml::from_str(text)
            .map_err(|e| BenchError::Setup(format!("scheduler configuration: {e}")))?,
        None => json!({}),
    };
    if !v.is_object() {
        return Err(BenchError::Setup("scheduler configuration: not a mapping".into()));
    }
    v["apiVersion"] = json!("kubescheduler.config.k8s.io/v1");
    v["kind"] = json!("KubeSchedulerConfiguration");
    v["leaderElection"] = json!({"leaderElect": false});
    let burst = qps.max(1.0).round() as u64;
    let mut conn = json!({"qps": qps, "burst": burst});
    if let Some(k) = kubeconfig {
        conn["kubeconfig"] = json!(k.display().to_string());
    }
    v["clientConnection"] = conn;
    match v["profiles"].as_array_mut() {
        Some(profiles) if !profiles.is_empty() => {
            for p in profiles {
                p["schedulerName"] = json!(unisched_framework::config::DEFAULT_SCHEDULER_NAME);
            }
        }
        _ => v["profiles"] = json!([{"schedulerName": unisched_framework::config::DEFAULT_SCHEDULER_NAME}]),
    }
    serde_yaml::to_string(&v).map_err(|e| BenchError::Setup(format!("scheduler configuration: {e}")))
}

/// A control plane started by `control-plane start DIR`, stopped on drop (and by
/// [`leftovers`] if a signal ends the process first).
struct ControlPlane {
    script: PathBuf,
    dir: PathBuf,
    _registered: leftovers::Registered,
}

impl ControlPlane {
    fn start(script: &Path, dir: &Path) -> Result<Self, BenchError> {
        std::fs::create_dir_all(dir).map_err(|e| BenchError::Setup(format!("{}: {e}", dir.display())))?;
        let cp = ControlPlane {
            script: script.to_path_buf(),
            dir: dir.to_path_buf(),
            _registered: leftovers::control_plane(script, dir),
        };
        let running = |e: std::io::Error| BenchError::Setup(format!("running {}: {e}", script.display()));
        let mut start = Command::new(script)
            .arg("start")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map_err(running)?;
        let status = {
            let _start_script = leftovers::process(start.id());
            start.wait().map_err(running)?
        };
        if !status.success() {
            return Err(BenchError::Setup(format!(
                "{} start {} failed ({status})",
                script.display(),
                dir.display()
            )));
        }
        Ok(cp)
    }

    fn pid(&self, name: &str) -> Result<u32, BenchError> {
        let path = self.dir.join(format!("{name}.pid"));
        std::fs::read_to_string(&path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| BenchError::Setup(format!("no pid in {}", path.display())))
    }

    fn env(&self, key: &str) -> String {
        std::fs::read_to_string(self.dir.join("env"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                l.strip_prefix(key)
                    .and_then(|r| r.strip_prefix('='))
                    .map(str::to_string)
            })
            .unwrap_or_default()
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = Command::new(&self.script)
            .arg("stop")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status();
    }
}

/// A scheduler child process, killed on drop (and by [`leftovers`] if a signal ends this
/// process first).
struct SchedulerProcess {
    child: Child,
    _registered: leftovers::Registered,
}

impl Drop for SchedulerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A token bucket of `qps` tokens per second (burst 1 second's worth), shared by every request.
#[derive(Debug)]
struct Limiter {
    interval: Duration,
    next: Mutex<Instant>,
}

impl Limiter {
    fn new(qps: f64) -> Self {
        let interval = if qps > 0.0 {
            Duration::from_secs_f64(1.0 / qps)
        } else {
            Duration::ZERO
        };
        let now = Instant::now();
        Limiter {
            interval,
            // The bucket starts full.
            next: Mutex::new(now.checked_sub(Duration::from_secs(1)).unwrap_or(now)),
        }
    }

    /// When the caller may send its request.
    fn reserve(&self) -> Instant {
        let now = Instant::now();
        let mut next = self.next.lock();
        // At most one second of unused tokens accumulates (the burst).
        let floor = now.checked_sub(Duration::from_secs(1)).unwrap_or(now);
        let at = (*next).max(floor);
        *next = at + self.interval;
        at.max(now)
    }
}

/// Pods in flight at once (upstream's test client creates pods from many goroutines).
const POD_CONCURRENCY: usize = 32;

/// The harness's objects go through the external API server.
struct ExternalTarget {
    client: kube::Client,
    rt: tokio::runtime::Handle,
    registry: Registry,
    limiter: Arc<Limiter>,
    in_flight: Arc<AtomicUsize>,
    first_error: Arc<Mutex<Option<String>>>,
    submitted: Arc<AtomicUsize>,
}

fn api_err(e: &kube::Error) -> BenchError {
    BenchError::Api(e.to_string())
}

fn code_of(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

impl ExternalTarget {
    fn path(&self, plural: &str, ns: Option<&str>, name: Option<&str>) -> Result<String, BenchError> {
        let rt = self
            .registry
            .resolve(plural)
            .map(|id| self.registry.get(id))
            .ok_or_else(|| BenchError::Workload(format!("unknown resource {plural}")))?;
        let mut p = if rt.group.is_empty() {
            format!("/api/{}", rt.version)
        } else {
            format!("/apis/{}/{}", rt.group, rt.version)
        };
        if let Some(ns) = ns.filter(|_| rt.namespaced) {
            p.push_str(&format!("/namespaces/{ns}"));
        }
        p.push('/');
        p.push_str(rt.plural);
        if let Some(n) = name {
            p.push('/');
            p.push_str(n);
        }
        Ok(p)
    }

    async fn send(
        client: &kube::Client,
        limiter: &Limiter,
        method: http::Method,
        path: String,
        content_type: &str,
        body: Vec<u8>,
    ) -> Result<Value, kube::Error> {
        tokio::time::sleep_until(limiter.reserve().into()).await;
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", content_type)
            .body(body)
            .map_err(kube::Error::HttpError)?;
        client.request::<Value>(req).await
    }

    fn call(
        &self,
        method: http::Method,
        path: String,
        content_type: &str,
        body: &Value,
    ) -> Result<Value, kube::Error> {
        let body = serde_json::to_vec(body).unwrap_or_default();
        self.rt.block_on(Self::send(
            &self.client,
            &self.limiter,
            method,
            path,
            content_type,
            body,
        ))
    }

    fn create_ignoring_conflict(&self, plural: &str, ns: Option<&str>, v: &Value) -> Result<(), BenchError> {
        match self.call(
            http::Method::POST,
            self.path(plural, ns, None)?,
            "application/json",
            v,
        ) {
            Ok(_) => Ok(()),
            Err(e) if code_of(&e) == Some(409) => Ok(()),
            Err(e) => Err(api_err(&e)),
        }
    }

    fn list(&self, plural: &str) -> Result<Vec<Value>, BenchError> {
        let v = self
            .call(
                http::Method::GET,
                self.path(plural, None, None)?,
                "application/json",
                &Value::Null,
            )
            .map_err(|e| api_err(&e))?;
        Ok(v["items"].as_array().cloned().unwrap_or_default())
    }
}

impl Target for ExternalTarget {
    fn resource_of(&self, v: &Value) -> Result<(String, bool), BenchError> {
        let av = v["apiVersion"].as_str().unwrap_or("v1");
        let kind = v["kind"].as_str().unwrap_or_default();
        let id = self
            .registry
            .by_api_version_kind(av, kind)
            .ok_or_else(|| BenchError::Workload(format!("no resource for {av} {kind}")))?;
        let rt = self.registry.get(id);
        Ok((rt.qualified_plural(), rt.namespaced))
    }

    fn ensure_namespace(&self, ns: &str) -> Result<(), BenchError> {
        self.create_ignoring_conflict("namespaces", None, &json!({"metadata": {"name": ns}}))?;
        // ServiceAccount admission refuses pods until `default` exists; the controller manager
        // would create it a moment later, the harness does not wait for that.
        self.create_ignoring_conflict(
            "serviceaccounts",
            Some(ns),
            &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}),
        )
    }

    fn create(&self, plural: &str, ns: Option<&str>, v: Value) -> Result<String, BenchError> {
        let out = self
            .call(
                http::Method::POST,
                self.path(plural, ns, None)?,
                "application/json",
                &v,
            )
            .map_err(|e| api_err(&e))?;
        Ok(out["metadata"]["name"].as_str().unwrap_or_default().to_string())
    }

    fn submit_pod(&self, ns: &str, v: Value) -> Result<(), BenchError> {
        if let Some(e) = self.first_error.lock().clone() {
            return Err(BenchError::Api(e));
        }
        while self.in_flight.load(Ordering::SeqCst) >= POD_CONCURRENCY {
            std::thread::sleep(Duration::from_micros(200));
        }
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.submitted.fetch_add(1, Ordering::SeqCst);
        let path = self.path("pods", Some(ns), None)?;
        let body = serde_json::to_vec(&v).unwrap_or_default();
        let (client, limiter, in_flight, first_error) = (
            self.client.clone(),
            self.limiter.clone(),
            self.in_flight.clone(),
            self.first_error.clone(),
        );
        self.rt.spawn(async move {
            let r = Self::send(
                &client,
                &limiter,
                http::Method::POST,
                path,
                "application/json",
                body,
            )
            .await;
            if let Err(e) = r {
                first_error
                    .lock()
                    .get_or_insert_with(|| format!("creating a pod: {e}"));
            }
            in_flight.fetch_sub(1, Ordering::SeqCst);
        });
        Ok(())
    }

    fn flush(&self) -> Result<(), BenchError> {
        while self.in_flight.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        match self.first_error.lock().clone() {
            Some(e) => Err(BenchError::Api(e)),
            None => Ok(()),
        }
    }

    fn delete(&self, plural: &str, ns: Option<&str>, name: &str) -> Result<(), BenchError> {
        let body = json!({"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0});
        match self.call(
            http::Method::DELETE,
            self.path(plural, ns, Some(name))?,
            "application/json",
            &body,
        ) {
            Ok(_) => Ok(()),
            Err(e) if code_of(&e) == Some(404) => Ok(()),
            Err(e) => Err(api_err(&e)),
        }
    }

    fn pod_names(&self, ns: &str) -> Result<Vec<String>, BenchError> {
        let v = self
            .call(
                http::Method::GET,
                self.path("pods", Some(ns), None)?,
                "application/json",
                &Value::Null,
            )
            .map_err(|e| api_err(&e))?;
        Ok(v["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
            .collect())
    }

    fn alloc_claims(&self, ns: &str, seed: u64) -> Result<usize, BenchError> {
        let slices = self.list("resourceslices")?;
        let claims = self.list("resourceclaims")?;
        let planned = crate::alloc::plan(
            &slices.iter().collect::<Vec<_>>(),
            &claims.iter().collect::<Vec<_>>(),
            ns,
            seed,
        )?;
        for (name, allocation) in &planned {
            let path = format!("{}/status", self.path("resourceclaims", Some(ns), Some(name))?);
            self.call(
                http::Method::PATCH,
                path,
                "application/merge-patch+json",
                &json!({"status": {"allocation": allocation}}),
            )
            .map_err(|e| api_err(&e))?;
        }
        Ok(planned.len())
    }
}

/// CPU readings of the processes involved.
#[derive(Clone, Copy, Debug, Default)]
struct CpuSnapshot {
    scheduler: f64,
    apiserver: f64,
    etcd: f64,
    creator: f64,
}

#[derive(Clone, Copy, Debug)]
struct Pids {
    scheduler: u32,
    apiserver: u32,
    etcd: u32,
}

impl CpuSnapshot {
    fn read(p: Pids) -> Self {
        CpuSnapshot {
            scheduler: procstat::pid_cpu_seconds(p.scheduler),
            apiserver: procstat::pid_cpu_seconds(p.apiserver),
            etcd: procstat::pid_cpu_seconds(p.etcd),
            creator: procstat::process_cpu_seconds(),
        }
    }
}

struct ExternalPhase<'a> {
    pids: Pids,
    counter: Arc<std::sync::atomic::AtomicU64>,
    submitted: Arc<AtomicUsize>,
    current: Option<(Measurement, CpuSnapshot, usize)>,
    done: Option<(Measured, CpuSnapshot, CpuSnapshot, usize)>,
    progress: &'a Progress,
}

impl Phase for ExternalPhase<'_> {
    fn start(&mut self) {
        if self.current.is_none() && self.done.is_none() {
            self.progress.note("measured phase begins");
            let cpu = CpuSnapshot::read(self.pids);
            let m = Measurement::start(self.counter.clone(), String::new);
            self.current = Some((m, cpu, self.submitted.load(Ordering::SeqCst)));
        }
    }
    fn stop(&mut self) {
        if let Some((m, before, sub)) = self.current.take() {
            let measured = m.finish();
            let after = CpuSnapshot::read(self.pids);
            let pods = self.submitted.load(Ordering::SeqCst).saturating_sub(sub);
            self.progress.note(&format!(
                "measured phase ends after {:.1}s",
                measured.wall_seconds
            ));
            self.done = Some((measured, before, after, pods));
        }
    }
}

fn cpu(seconds: f64, wall: f64) -> ProcessCpu {
    ProcessCpu {
        seconds,
        cores: if wall > 0.0 { seconds / wall } else { 0.0 },
    }
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect()
}

fn start_scheduler(
    who: Contender,
    opts: &ExternalOptions,
    cp: &ControlPlane,
    base: Option<&str>,
    w: &Workload,
) -> Result<SchedulerProcess, BenchError> {
    let setup = |e: std::io::Error| BenchError::Setup(format!("starting {}: {e}", who.as_str()));
    let log = std::fs::File::create(cp.dir.join(format!("scheduler-{}.log", who.as_str()))).map_err(setup)?;
    let log2 = log.try_clone().map_err(setup)?;
    let cfg_path = cp.dir.join(format!("{}.yaml", who.as_str()));
    let mut cmd = match who {
        Contender::Upstream => {
            let cfg = scheduler_config(base, opts.scheduler_qps, Some(&cp.dir.join("admin.kubeconfig")))?;
            std::fs::write(&cfg_path, cfg).map_err(setup)?;
            let mut c = Command::new(opts.upstream_bin.join("kube-scheduler"));
            c.arg("--config")
                .arg(&cfg_path)
                .args(["--feature-gates", &cp.env("FEATURE_GATES")])
                .args(["--secure-port", "0", "--v", "1"]);
            c
        }
        Contender::Unisched => {
            let cfg = scheduler_config(base, opts.scheduler_qps, None)?;
            std::fs::write(&cfg_path, cfg).map_err(setup)?;
            let mut c = Command::new(&opts.unisched_bin);
            c.args(["--v=0", "run", "--kubeconfig"])
                .arg(cp.dir.join("scheduler.kubeconfig"))
                .arg("--config")
                .arg(&cfg_path)
                .args([
                    "--leader-elect=false",
                    "--metrics-bind-address",
                    "127.0.0.1:0",
                    "--secure-port",
                    "0",
                ])
                .args(["--seed", &opts.seed.to_string()]);
            // kube-scheduler runs the control plane's gates (a superset); unisched the
            // workload's own, since it refuses gates it does not run.
            if !w.feature_gates.is_empty() {
                c.args(["--feature-gates", &w.feature_gates_flag()]);
            }
            c
        }
        Contender::Embedded => {
            return Err(BenchError::Setup(
                "the embedded contender runs its own control plane (run_embedded)".into(),
            ));
        }
    };
    let child = cmd
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .spawn()
        .map_err(setup)?;
    let registered = leftovers::process(child.id());
    Ok(SchedulerProcess {
        child,
        _registered: registered,
    })
}

/// Runs `w` once per contender, each on a fresh control plane.
pub fn run_external(w: &Workload, opts: &ExternalOptions) -> Vec<ExternalRun> {
    let base = match &opts.scheduler_config {
        Some(p) => match std::fs::read_to_string(p) {
            Ok(t) => Some(t),
            Err(e) => {
                let why = format!("reading {}: {e}", p.display());
                return opts.contenders.iter().map(|c| skipped(w, *c, &why)).collect();
            }
        },
        None => None,
    };
    opts.contenders
        .iter()
        .map(|&who| {
            let run = match who {
                Contender::Embedded => run_embedded(w, opts),
                _ => run_one(w, who, opts, base.as_deref()),
            };
            run.unwrap_or_else(|e| {
                let why = format!("failed: {e}");
                // The report carries it too, but a run that ends at once should say why where
                // its progress was shown.
                run_progress(w, who, opts).note(&why);
                skipped(w, who, &why)
            })
        })
        .collect()
}

/// [`Contender::Embedded`]: `unisched-bench --mode full` for `w` in a child process (its own peak
/// RSS and CPU), read back as an [`ExternalRun`].
fn run_embedded(w: &Workload, opts: &ExternalOptions) -> Result<ExternalRun, BenchError> {
    let mut cmd = Command::new(&opts.bench_bin);
    cmd.arg(format!("--v={}", opts.verbosity))
        .args(["--internal-child", "--output", "json", "--mode", "full"])
        .args(["--workload", &w.name, "--seed", &opts.seed.to_string()]);
    if w.smoke {
        cmd.arg("--smoke");
    }
    if let Some(p) = &opts.scheduler_config {
        cmd.arg("--scheduler-config").arg(p);
    }
    if let Some(d) = &opts.workloads_dir {
        cmd.arg("--workloads-dir").arg(d);
    }
    let failed = |e: std::io::Error| BenchError::Setup(format!("starting {}: {e}", opts.bench_bin.display()));
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(failed)?;
    let out = {
        let _registered = leftovers::process(child.id());
        child.wait_with_output().map_err(failed)?
    };
    if !out.status.success() {
        return Err(BenchError::Setup(format!(
            "the embedded full-mode run exited with {}",
            out.status
        )));
    }
    let report: RunReport = serde_json::from_slice(&out.stdout)
        .map_err(|e| BenchError::Setup(format!("reading the embedded run's report: {e}")))?;
    Ok(ExternalRun::from_embedded(&report, Machine::detect().cpus))
}

/// Progress lines of one scheduler's run of `w`, prefixed `workload [scheduler]`.
fn run_progress(w: &Workload, who: Contender, opts: &ExternalOptions) -> Progress {
    Progress::new(opts.progress, &format!("{} [{}]", w.name, who.as_str()))
}

fn skipped(w: &Workload, who: Contender, why: &str) -> ExternalRun {
    ExternalRun {
        workload: w.name.clone(),
        scheduler: who.as_str().into(),
        skipped: Some(why.into()),
        ..ExternalRun::default()
    }
}

fn run_one(
    w: &Workload,
    who: Contender,
    opts: &ExternalOptions,
    base: Option<&str>,
) -> Result<ExternalRun, BenchError> {
    let progress = run_progress(w, who, opts);
    let dir = opts
        .work_dir
        .join(format!("{}-{}", sanitize(&w.name), who.as_str()));
    progress.note(&format!("starting a fresh control plane in {}", dir.display()));
    let cp = ControlPlane::start(&opts.control_plane, &dir)?;
    let rt = crate::run::runtime("bench-harness", 2)?;
    let kubeconfig = kube::config::Kubeconfig::read_from(dir.join("admin.kubeconfig"))
        .map_err(|e| BenchError::Setup(format!("admin.kubeconfig: {e}")))?;
    let client = rt.block_on(async {
        let cfg = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .map_err(|e| BenchError::Setup(format!("admin.kubeconfig: {e}")))?;
        kube::Client::try_from(cfg).map_err(|e| BenchError::Setup(format!("API client: {e}")))
    })?;
    let mut sched = start_scheduler(who, opts, &cp, base, w)?;
    let pids = Pids {
        scheduler: sched.child.id(),
        apiserver: cp.pid("kube-apiserver")?,
        etcd: cp.pid("etcd")?,
    };
    let tracker = Tracker::start_external(client.clone(), rt.handle());
    // Both schedulers start on an empty cluster; a few seconds let them sync their informers.
    std::thread::sleep(Duration::from_secs(3));
    if let Ok(Some(status)) = sched.child.try_wait() {
        return Err(BenchError::Setup(format!(
            "{} exited at start ({status}); log in {}",
            who.as_str(),
            dir.display()
        )));
    }
    let submitted = Arc::new(AtomicUsize::new(0));
    let target = Arc::new(ExternalTarget {
        client,
        rt: rt.handle().clone(),
        registry: Registry::default(),
        limiter: Arc::new(Limiter::new(opts.creator_qps)),
        in_flight: Arc::new(AtomicUsize::new(0)),
        first_error: Arc::new(Mutex::new(None)),
        submitted: submitted.clone(),
    });
    let rules = if w.smoke {
        WaitRules {
            rejected_stall: Duration::from_secs(3),
            stall: Duration::from_secs(10),
        }
    } else {
        WaitRules {
            rejected_stall: Duration::from_secs(10),
            stall: Duration::from_secs(60),
        }
    };
    let mut phase = ExternalPhase {
        pids,
        counter: tracker.measured_counter(),
        submitted,
        current: None,
        done: None,
        progress: &progress,
    };
    let (result, timed_out, measured_ns, mut notes) = {
        let mut d = Driver::new(w, target, &tracker, &progress, rules, opts.seed);
        let r = d.run(&mut phase);
        phase.stop();
        (r, d.timed_out, d.measured_namespaces, d.notes)
    };
    let settle = Instant::now();
    while !measured_ns.is_empty() && settle.elapsed() < Duration::from_secs(3) {
        let (p, r) = tracker.outstanding(&measured_ns);
        if p == r {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let created: u64 = measured_ns.iter().map(|ns| tracker.ns(ns).created).sum();
    let scheduled: u64 = measured_ns.iter().map(|ns| tracker.ns(ns).scheduled).sum();
    let (pending, _) = if measured_ns.is_empty() {
        (0, 0)
    } else {
        tracker.outstanding(&measured_ns)
    };
    let peak_rss = procstat::pid_peak_rss_bytes(pids.scheduler);
    if let Ok(Some(status)) = sched.child.try_wait() {
        notes.push(format!("{} exited during the run ({status})", who.as_str()));
    }
    if tracker.lost_events() {
        notes.push("the pod watch fell behind (410): counts may be off".into());
    }
    if timed_out {
        notes.push("timed out".into());
    }
    drop(tracker);
    drop(sched);
    drop(cp);
    rt.shutdown_timeout(Duration::from_secs(2));
    result?;
    let Some((measured, before, after, pods)) = phase.done else {
        return Err(BenchError::Workload("the workload has no measured phase".into()));
    };
    let wall = measured.wall_seconds;
    let mut run = ExternalRun {
        workload: w.name.clone(),
        scheduler: who.as_str().into(),
        measured_pods: created,
        scheduled: measured.scheduled.max(scheduled.min(created)),
        pending: pending as u64,
        wall_seconds: wall,
        throughput: sampler::summarize(&measured.points, measured.scheduled, wall),
        scheduler_cpu: cpu(after.scheduler - before.scheduler, wall),
        scheduler_cpu_ms_per_pod: if measured.scheduled > 0 {
            (after.scheduler - before.scheduler) * 1000.0 / measured.scheduled as f64
        } else {
            0.0
        },
        scheduler_peak_rss_bytes: peak_rss,
        apiserver_cpu: cpu(after.apiserver - before.apiserver, wall),
        etcd_cpu: cpu(after.etcd - before.etcd, wall),
        creator_cpu: cpu(after.creator - before.creator, wall),
        creator_pods_per_second: if wall > 0.0 { pods as f64 / wall } else { 0.0 },
        bound: String::new(),
        skipped: None,
        notes,
    };
    run.bound = bound(&run, Machine::detect().cpus, opts.creator_qps);
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_renames_profiles_and_sets_client_and_leader_election() {
        let base = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
                    profiles:\n- schedulerName: default-scheduler\n  plugins: {}\n";
        let out: Value = serde_yaml::from_str(
            &scheduler_config(Some(base), 5000.0, Some(Path::new("/x/admin.kubeconfig"))).unwrap(),
        )
        .unwrap();
        assert_eq!(out["profiles"][0]["schedulerName"], "unisched");
        assert!(out["profiles"][0]["plugins"].is_object());
        assert_eq!(out["leaderElection"]["leaderElect"], false);
        assert_eq!(out["clientConnection"]["burst"], 5000);
        assert_eq!(out["clientConnection"]["kubeconfig"], "/x/admin.kubeconfig");
        let default: Value = serde_yaml::from_str(&scheduler_config(None, 50.0, None).unwrap()).unwrap();
        assert_eq!(default["profiles"], json!([{"schedulerName": "unisched"}]));
        assert!(default["clientConnection"].get("kubeconfig").is_none());
        assert!(scheduler_config(Some("[1]"), 1.0, None).is_err());
    }

    #[test]
    fn bound_names_the_busiest_party_or_the_machine() {
        let run = |s: f64, a: f64, c: f64, rate: f64| ExternalRun {
            scheduler_cpu: cpu(s, 1.0),
            apiserver_cpu: cpu(a, 1.0),
            creator_cpu: cpu(c, 1.0),
            creator_pods_per_second: rate,
            ..ExternalRun::default()
        };
        assert!(bound(&run(0.9, 0.3, 0.1, 10.0), 2, 5000.0).starts_with("scheduler ("));
        assert!(bound(&run(0.2, 0.6, 0.1, 10.0), 2, 5000.0).starts_with("API server ("));
        assert!(bound(&run(1.0, 0.8, 0.1, 10.0), 2, 5000.0).starts_with("machine CPU (scheduler"));
        assert!(bound(&run(0.1, 0.1, 0.1, 100.0), 2, 100.0).starts_with("client QPS"));
    }

    #[test]
    fn limiter_spaces_requests_after_the_burst() {
        let l = Limiter::new(10.0);
        let first = l.reserve();
        // The bucket starts full (one second of tokens): ten requests go at once…
        for _ in 0..9 {
            assert!(l.reserve() <= first + Duration::from_millis(5));
        }
        // …then they are 100 ms apart.
        let _refilled = l.reserve();
        assert!(l.reserve() >= first + Duration::from_millis(50));
    }

    #[test]
    fn an_embedded_full_run_counts_only_the_scheduler_threads_as_the_scheduler() {
        let mut r = RunReport {
            workload: "W".into(),
            mode: crate::Mode::Full,
            measured_pods: 100,
            scheduled: 80,
            unschedulable: 20,
            measured_seconds: 4.0,
            peak_rss_bytes: 1 << 30,
            ..RunReport::default()
        };
        for (k, v) in [
            ("scheduling-cycle", 0.1),
            ("filter-workers", 0.5),
            ("scheduler-io", 0.2),
            ("apiserver", 3.0),
            ("harness", 0.4),
            ("other", 9.0),
        ] {
            r.cpu.by_component.insert(k.into(), v);
        }
        let e = ExternalRun::from_embedded(&r, 2);
        assert_eq!(e.scheduler, "unisched-embedded");
        assert!((e.scheduler_cpu.seconds - 0.8).abs() < 1e-9);
        assert!(
            (e.scheduler_cpu_ms_per_pod - 10.0).abs() < 1e-9,
            "0.8 s over 80 bound pods"
        );
        assert!((e.apiserver_cpu.cores - 0.75).abs() < 1e-9);
        assert!((e.creator_cpu.seconds - 0.4).abs() < 1e-9);
        assert_eq!((e.measured_pods, e.scheduled, e.pending), (100, 80, 20));
        // 0.2 + 0.75 + 0.1 cores of 2 is not the machine; the API server is the busiest party.
        assert!(e.bound.starts_with("API server ("), "{}", e.bound);
        assert!(e.notes[0].contains("whole process"));
        // The pairing of ratios is with `unisched` on the real control plane only.
        let report = ExternalReport {
            runs: vec![e],
            ..ExternalReport::default()
        };
        assert!(report.ratios().is_empty());
    }

    #[test]
    fn ratios_pair_the_two_schedulers_of_a_workload() {
        let r = |s: &str, tp: f64, ms: f64| ExternalRun {
            workload: "W".into(),
            scheduler: s.into(),
            throughput: Throughput {
                overall: tp,
                ..Throughput::default()
            },
            scheduler_cpu_ms_per_pod: ms,
            ..ExternalRun::default()
        };
        let report = ExternalReport {
            runs: vec![r("kube-scheduler", 100.0, 8.0), r("unisched", 400.0, 2.0)],
            ..ExternalReport::default()
        };
        assert_eq!(report.ratios(), vec![("W".to_string(), 4.0, 4.0)]);
        assert!(
            report
                .to_table()
                .contains("W: unisched / kube-scheduler throughput 4.00x")
        );
    }
}
