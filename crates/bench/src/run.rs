//! Full and limit modes: the embedded API server, the scheduler under test (the real runtime, or
//! the bind-only limit) talking to it over HTTP, and the harness creating objects in process.
//!
//! Each part has its own tokio runtime with its own thread names (`bench-apiserver`,
//! `unisched-io` for the scheduler as in `unisched run`, `bench-harness`), and the scheduling loop
//! runs on its `unisched-schedule` thread, so CPU time can be attributed per component.

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use unisched_framework::config::DEFAULT_SCHEDULER_NAME;
use unisched_runtime::{Metrics, Scheduler, SchedulerOptions};
use unisched_sim::ApiServer;

use crate::{
    BenchError, RunOptions,
    driver::{Driver, Phase, WaitRules},
    limit::LimitScheduler,
    measure::Measurement,
    progress::Progress,
    report::{Mode, RunReport},
    tracker::Tracker,
    workload::{Op, Workload},
};

pub(crate) fn runtime(name: &str, workers: usize) -> Result<tokio::runtime::Runtime, BenchError> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.enable_all()
        .thread_name(name)
        // Keep blocking threads (binding cycles) alive so per-thread CPU is not lost when they exit.
        .thread_keep_alive(Duration::from_secs(3600));
    if workers > 0 {
        b.worker_threads(workers);
    }
    b.build()
        .map_err(|e| BenchError::Setup(format!("starting runtime {name}: {e}")))
}

/// Store history long enough that no watcher falls behind (410) during the run.
fn history_for(w: &Workload) -> usize {
    let mut objects = 0usize;
    for op in &w.ops {
        objects += match op {
            Op::CreateNodes { count, .. } | Op::CreateAny { count, .. } => *count,
            Op::CreatePods { count, .. } => *count * 2,
            Op::CreateResourceSlices { .. } => w.nodes() * 2,
            _ => 0,
        };
    }
    (objects * 4).max(100_000)
}

enum Under {
    Full(Arc<Scheduler>, tokio::task::JoinHandle<()>),
    Limit(Box<LimitScheduler>),
}

impl Under {
    fn metrics(&self) -> Metrics {
        match self {
            Under::Full(s, _) => s.metrics().clone(),
            Under::Limit(l) => l.metrics().clone(),
        }
    }
    fn is_synced(&self) -> bool {
        match self {
            Under::Full(s, _) => s.health().is_synced(),
            Under::Limit(l) => l.is_synced(),
        }
    }
}

struct MeasuredPhase<'a> {
    metrics: Metrics,
    counter: Arc<std::sync::atomic::AtomicU64>,
    current: Option<Measurement>,
    done: Option<crate::measure::Measured>,
    progress: &'a Progress,
}

impl Phase for MeasuredPhase<'_> {
    fn start(&mut self) {
        if self.current.is_none() && self.done.is_none() {
            self.progress.note("measured phase begins");
            let m = self.metrics.clone();
            self.current = Some(Measurement::start(self.counter.clone(), move || m.render()));
        }
    }
    fn stop(&mut self) {
        if let Some(m) = self.current.take() {
            let measured = m.finish();
            self.progress.note(&format!(
                "measured phase ends after {:.1}s",
                measured.wall_seconds
            ));
            self.done = Some(measured);
        }
    }
}

/// Runs `w` in full or limit mode.
pub(crate) fn run_api(w: &Workload, mode: Mode, opts: &RunOptions) -> Result<RunReport, BenchError> {
    let started = Instant::now();
    let progress = Progress::new(opts.progress, &format!("{} [{}]", w.name, mode.as_str()));
    let api_rt = runtime("bench-apiserver", 2)?;
    let sched_rt = runtime("unisched-io", 0)?;
    let harness_rt = runtime("bench-harness", 1)?;

    let server = api_rt
        .block_on(
            ApiServer::builder()
                .history(history_for(w))
                .kubelet(None)
                .build()
                .serve(SocketAddr::from(([127, 0, 0, 1], 0))),
        )
        .map_err(|e| BenchError::Setup(format!("starting the API server: {e}")))?;
    let store = server.store().clone();
    let url = server.url();
    let tracker = Tracker::start(&store, harness_rt.handle());

    let mut config = opts
        .config
        .clone()
        .unwrap_or_else(unisched_framework::config::KubeSchedulerConfiguration::defaulted);
    config.leader_election.leader_elect = false;
    config.client_connection.qps = -1.0;
    let seed = opts.seed;
    let feature_gates = crate::feature_gates(w)?;
    let under = sched_rt.block_on(async move {
        let kconfig = kube::Config::new(
            url.parse()
                .map_err(|e| BenchError::Setup(format!("server URL: {e}")))?,
        );
        let client =
            kube::Client::try_from(kconfig).map_err(|e| BenchError::Setup(format!("API client: {e}")))?;
        match mode {
            Mode::Limit => Ok(Under::Limit(Box::new(LimitScheduler::start(
                client,
                DEFAULT_SCHEDULER_NAME,
            )?))),
            _ => {
                let options = SchedulerOptions {
                    config,
                    seed,
                    identity: "unisched-bench".into(),
                    health_addr: None,
                    default_namespace: "default".into(),
                    binding_connections: None,
                    feature_gates,
                };
                let s = Arc::new(
                    Scheduler::new(client, options)
                        .await
                        .map_err(|e| BenchError::Setup(format!("starting the scheduler: {e}")))?,
                );
                let runner = s.clone();
                let task = tokio::spawn(async move {
                    if let Err(e) = runner.run().await {
                        tracing::error!(error = %e, "scheduler stopped");
                    }
                });
                Ok::<_, BenchError>(Under::Full(s, task))
            }
        }
    })?;
    let sync_start = Instant::now();
    while !under.is_synced() {
        if sync_start.elapsed() > Duration::from_secs(30) {
            return Err(BenchError::Setup("the scheduler did not sync within 30s".into()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }

    let rules = if w.smoke {
        WaitRules {
            rejected_stall: Duration::from_secs(2),
            stall: Duration::from_secs(4),
        }
    } else {
        WaitRules {
            rejected_stall: Duration::from_secs(5),
            stall: Duration::from_secs(30),
        }
    };
    let mut phase = MeasuredPhase {
        metrics: under.metrics(),
        counter: tracker.measured_counter(),
        current: None,
        done: None,
        progress: &progress,
    };
    let (driver_result, timed_out, measured_ns, mut notes) = std::thread::scope(|s| {
        let handle = std::thread::Builder::new()
            .name("bench-client".into())
            .spawn_scoped(s, || {
                let mut d = Driver::new(w, Arc::new(store.clone()), &tracker, &progress, rules, seed);
                let r = d.run(&mut phase);
                phase.stop();
                (r, d.timed_out, d.measured_namespaces, d.notes)
            });
        match handle {
            Ok(h) => h.join().unwrap_or_else(|_| {
                (
                    Err(BenchError::Setup("the harness thread panicked".into())),
                    false,
                    vec![],
                    vec![],
                )
            }),
            Err(e) => (
                Err(BenchError::Setup(format!("starting the harness thread: {e}"))),
                false,
                vec![],
                vec![],
            ),
        }
    });
    let measured = phase.done.take();

    // Counts in the measured namespaces.
    // Pods still in flight when the phase ended (steady state) get a moment to be decided.
    let settle = Instant::now();
    while !measured_ns.is_empty() && settle.elapsed() < Duration::from_secs(3) {
        let (p, r) = tracker.outstanding(&measured_ns);
        if p == r {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let created: u64 = measured_ns.iter().map(|ns| tracker.ns(ns).created).sum();
    let (pending, rejected) = if measured_ns.is_empty() {
        (0, 0)
    } else {
        tracker.outstanding(&measured_ns)
    };
    let undecided = pending.saturating_sub(rejected) as u64;
    let pending = pending as u64;
    if tracker.lost_events() {
        notes.push("the tracker fell behind the store history: counts may be off".into());
    }
    if let Under::Limit(l) = &under
        && l.failures() > 0
    {
        notes.push(format!("{} limit-scheduler writes failed", l.failures()));
    }

    // Tear down: let bindings in flight finish first (a binding cycle blocks on the runtime).
    if let Under::Full(s, _) = &under {
        let idle = Instant::now();
        while !s.is_idle() && idle.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    match &under {
        Under::Full(s, _) => s.stop(),
        Under::Limit(l) => l.stop(),
    }
    if let Under::Full(_, task) = under {
        let _ = sched_rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), task).await });
    }
    drop(tracker);
    api_rt.block_on(server.shutdown());
    sched_rt.shutdown_timeout(Duration::from_secs(2));
    harness_rt.shutdown_timeout(Duration::from_secs(1));
    api_rt.shutdown_timeout(Duration::from_secs(2));
    driver_result?;

    let mut report = crate::measure::report(w, mode, measured, created, pending, started);
    report.timed_out = timed_out;
    report.undecided = undecided;
    report.notes.extend(notes);
    Ok(report)
}
