//! The default profile end to end: 1,000 pods through the framework's scheduling and binding cycles
//! on 100 nodes, with an in-memory cache, checking placement rules and the ledger invariant.

mod support;

use support::MemCache;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use parking_lot::Mutex;
use unisched_framework::{
    Code, CycleOutcome, DurationRecorder, Framework, FrameworkObserver, NoNominations, PodInfo,
    SchedulerCache, SchedulingAlgorithm, Snapshot, run_binding_cycle, run_scheduling_cycle,
};
use unisched_plugins::{
    reasons::TAINT_NODE_UNSCHEDULABLE,
    testing::{NodeBuilder, PodBuilder, default_framework},
};

const CONTROL_PLANE: &str = "node-role.kubernetes.io/control-plane";

fn cluster() -> MemCache {
    let cache = MemCache::default();
    {
        let mut nodes = cache.nodes.write();
        for i in 0..100 {
            let name = format!("n{i:03}");
            let mut b = NodeBuilder::new(&name)
                .alloc("cpu", "4")
                .alloc("memory", "16Gi")
                .label("topology.kubernetes.io/zone", ["a", "b", "c"][i % 3]);
            if i < 10 {
                b = b.taint(CONTROL_PLANE, "", "NoSchedule");
            } else if i < 20 {
                b = b.label("disk", "ssd");
            }
            if i == 99 {
                b = b
                    .unschedulable(true)
                    .taint(TAINT_NODE_UNSCHEDULABLE, "", "NoSchedule");
            }
            nodes.insert(name, b.info());
        }
    }
    cache
}

fn workload() -> Vec<Arc<PodInfo>> {
    (0..1000)
        .map(|i| {
            let mut b = PodBuilder::new(&format!("p{i:04}")).priority(i % 3);
            b = match i % 10 {
                3 => b.req("cpu", "600m").req("memory", "1Gi"),
                _ => b.req("cpu", "250m").req("memory", "512Mi"),
            };
            if i % 10 == 0 {
                b = b.toleration(CONTROL_PLANE, "Exists", "", "NoSchedule");
            }
            if i % 10 == 1 {
                b = b.node_selector("disk", "ssd");
            }
            if i % 50 == 2 {
                b = b.host_port(9000);
            }
            b.arc()
        })
        .collect()
}

/// Runs the first `count` pods of [`workload`] through a scheduling cycle (plugin timings sampled
/// when `record`) and binds each one that was assumed; every binding must succeed.
fn schedule_and_bind(
    fwk: &Framework,
    algo: &mut SchedulingAlgorithm,
    cache: &MemCache,
    count: usize,
    record: bool,
) {
    for pod in workload().into_iter().take(count) {
        if let CycleOutcome::Assumed(task) =
            run_scheduling_cycle(fwk, algo, cache, &NoNominations, pod.clone(), record)
        {
            assert!(run_binding_cycle(fwk, cache, *task).is_ok(), "{} binds", pod.name);
        }
    }
}

#[test]
fn thousand_pods_on_hundred_nodes() {
    let cache = cluster();
    let (fwk, binder) = default_framework();
    let mut algo = SchedulingAlgorithm::new(4, None, 7);
    let pods = workload();
    for pod in &pods {
        assert!(fwk.run_pre_enqueue(pod).is_success(), "{} is not gated", pod.name);
        match run_scheduling_cycle(&fwk, &mut algo, &cache, &NoNominations, pod.clone(), false) {
            CycleOutcome::Assumed(task) => {
                if let Err(f) = run_binding_cycle(&fwk, &cache, *task) {
                    panic!("binding {} failed: {}", pod.name, f.message);
                }
            }
            CycleOutcome::Failed(f) => panic!("{} did not fit: {}", pod.name, f.message),
            other => panic!("{}: unexpected outcome {other:?}", pod.name),
        }
    }
    assert_eq!(binder.bindings().len(), 1000, "every pod was bound once");

    let nodes = cache.nodes.read();
    let mut cpu_of_plain_nodes = Vec::new();
    let mut port_nodes = Vec::new();
    for (name, ni) in nodes.iter() {
        let (req, _) = ni.recomputed_requested();
        assert!(
            req.milli_cpu <= ni.allocatable.milli_cpu,
            "{name}: cpu {} > {}",
            req.milli_cpu,
            ni.allocatable.milli_cpu
        );
        assert!(
            req.memory <= ni.allocatable.memory,
            "{name}: memory over allocatable"
        );
        assert!(
            ni.pods.len() as i64 <= ni.allocatable.allowed_pod_number,
            "{name}: too many pods"
        );
        let node = ni.node().unwrap();
        let tainted = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == CONTROL_PLANE));
        let ssd = node
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.get("disk").map(String::as_str) == Some("ssd"));
        for p in &ni.pods {
            let i: usize = p.name[1..].parse().unwrap();
            if tainted {
                assert_eq!(i % 10, 0, "{name} is tainted, {} does not tolerate it", p.name);
            }
            if i % 10 == 1 {
                assert!(ssd, "{} wants disk=ssd, landed on {name}", p.name);
            }
            if i % 50 == 2 {
                port_nodes.push(name.clone());
            }
        }
        if name == "n099" {
            assert!(ni.pods.is_empty(), "the cordoned node gets nothing");
        } else if !tainted && !ssd {
            cpu_of_plain_nodes.push(req.milli_cpu);
        }
    }
    let before = port_nodes.len();
    port_nodes.sort();
    port_nodes.dedup();
    assert_eq!(port_nodes.len(), before, "host-port pods never share a node");
    assert_eq!(before, 20);
    let (min, max) = (
        cpu_of_plain_nodes.iter().min().unwrap(),
        cpu_of_plain_nodes.iter().max().unwrap(),
    );
    assert!(
        max - min <= 1000,
        "LeastAllocated spreads the load: min {min}m, max {max}m"
    );
    drop(nodes);

    // A pod no node can hold: the upstream-format explanation, one reason per node.
    let huge = PodBuilder::new("huge").req("cpu", "5").arc();
    match run_scheduling_cycle(&fwk, &mut algo, &cache, &NoNominations, huge, false) {
        CycleOutcome::Failed(f) => {
            assert_eq!(
                f.message,
                "0/100 nodes are available: 1 node(s) were unschedulable, 10 node(s) had untolerated taint(s), \
                 89 Insufficient cpu. preemption: 0/100 nodes are available: 100 Preemption is not helpful for \
                 scheduling."
            );
            let plugins: Vec<&str> = f.unschedulable_plugins.iter().map(String::as_str).collect();
            assert_eq!(
                plugins,
                vec!["NodeResourcesFit", "NodeUnschedulable", "TaintToleration"]
            );
        }
        other => panic!("the huge pod must not fit: {other:?}"),
    }
}

/// Plugin timings by (extension point, plugin, result), and how many arrived through
/// `FrameworkObserver::plugin` rather than a recorder.
#[derive(Default)]
struct TimingCounts {
    by_series: Mutex<BTreeMap<(String, String, String), usize>>,
    through_plugin: Mutex<usize>,
    offer_recorders: bool,
}

impl TimingCounts {
    fn count(&self, point: &str, plugin: &str, code: Code) {
        *self
            .by_series
            .lock()
            .entry((point.to_string(), plugin.to_string(), code.as_str().to_string()))
            .or_default() += 1;
    }
}

/// Forwards to a shared [`TimingCounts`] (the framework owns its observer).
struct Counting(Arc<TimingCounts>);

impl FrameworkObserver for Counting {
    fn plugin(&self, point: &'static str, plugin: &str, status: Code, _elapsed: Duration) {
        *self.0.through_plugin.lock() += 1;
        self.0.count(point, plugin, status);
    }

    fn plugin_success_recorder(&self, point: &'static str, plugin: &str) -> Option<DurationRecorder> {
        if !self.0.offer_recorders {
            return None;
        }
        let counts = Arc::clone(&self.0);
        let plugin = plugin.to_string();
        Some(Box::new(move |durations| {
            for _ in durations {
                counts.count(point, &plugin, Code::Success);
            }
        }))
    }
}

/// Sampled attempts time every plugin call at Filter and Score, per node. An observer that hands
/// out per-attempt recorders for successes must see exactly the series an observer without them
/// sees, call for call, rejections included.
#[test]
fn sampled_plugin_timings_are_the_same_through_recorders() {
    let run = |offer_recorders: bool| {
        let counts = Arc::new(TimingCounts {
            offer_recorders,
            ..Default::default()
        });
        let cache = cluster();
        let fwk = default_framework()
            .0
            .with_observer(Arc::new(Counting(Arc::clone(&counts))));
        let mut algo = SchedulingAlgorithm::new(4, None, 7);
        schedule_and_bind(&fwk, &mut algo, &cache, 200, true);
        let by_series = counts.by_series.lock().clone();
        let through_plugin = *counts.through_plugin.lock();
        (by_series, through_plugin)
    };
    let (plain, plain_calls) = run(false);
    let (recorded, recorded_calls) = run(true);
    assert_eq!(recorded, plain);
    let at = |point: &str, code: &str| -> usize {
        plain
            .iter()
            .filter(|((p, _, c), _)| p == point && c == code)
            .map(|(_, n)| n)
            .sum()
    };
    // 200 pods on 100 nodes: every attempt filters and scores many nodes, and the tainted and
    // cordoned nodes reject some.
    assert!(at("Filter", "Success") > 200 * 50, "{plain:?}");
    assert!(at("Score", "Success") > 200 * 50, "{plain:?}");
    assert!(at("Filter", "UnschedulableAndUnresolvable") > 0, "{plain:?}");
    // The recorders took the per-node successes; the rest still went through `plugin`.
    assert_eq!(
        plain_calls - recorded_calls,
        at("Filter", "Success") + at("Score", "Success")
    );
}

/// Hands out the cache's snapshots and remembers the last one.
struct KeepsLastSnapshot<'a> {
    cache: &'a MemCache,
    last: Mutex<Option<Arc<Snapshot>>>,
}

impl SchedulerCache for KeepsLastSnapshot<'_> {
    fn update_snapshot(&self) -> Arc<Snapshot> {
        let s = self.cache.update_snapshot();
        *self.last.lock() = Some(Arc::clone(&s));
        s
    }

    fn assume_pod(&self, pod: Arc<PodInfo>) -> Result<(), unisched_framework::CacheWriteError> {
        self.cache.assume_pod(pod)
    }

    fn forget_pod(&self, pod: &PodInfo) -> Result<(), unisched_framework::CacheWriteError> {
        self.cache.forget_pod(pod)
    }
}

/// A pod handed to its binding cycle does not keep the snapshot it was scheduled on: the cache
/// updates its snapshot in place only while nobody else holds it, and bindings in flight would
/// otherwise make it copy the node list for every attempt.
#[test]
fn a_binding_in_flight_does_not_hold_the_snapshot() {
    let inner = cluster();
    let cache = KeepsLastSnapshot {
        cache: &inner,
        last: Mutex::new(None),
    };
    let (fwk, _) = default_framework();
    let mut algo = SchedulingAlgorithm::new(2, None, 7);
    let pod = workload().remove(4);
    let CycleOutcome::Assumed(task) =
        run_scheduling_cycle(&fwk, &mut algo, &cache, &NoNominations, pod, false)
    else {
        panic!("the pod fits");
    };
    let last = cache.last.lock().clone().expect("the cycle took a snapshot");
    // Ours, and the copy just made: nobody else.
    assert_eq!(Arc::strong_count(&last), 2);
    assert!(run_binding_cycle(&fwk, &cache, *task).is_ok());
}

/// Records which threads flushed timed Filter successes (a worker flushes at the end of its share).
struct FilterThreads(Arc<Mutex<std::collections::BTreeSet<String>>>);

impl FrameworkObserver for FilterThreads {
    fn plugin_success_recorder(&self, point: &'static str, _plugin: &str) -> Option<DurationRecorder> {
        let threads = Arc::clone(&self.0);
        Some(Box::new(move |durations| {
            if point == "Filter" && !durations.is_empty() {
                threads
                    .lock()
                    .insert(format!("{:?}", std::thread::current().id()));
            }
        }))
    }
}

/// The thread that builds an algorithm and runs its attempts filters nodes itself, beside the
/// pool's other workers, instead of handing each attempt over and sleeping until it returns.
#[test]
fn the_scheduling_thread_filters_beside_the_workers() {
    let scheduling = std::thread::spawn(|| {
        let threads = Arc::new(Mutex::new(std::collections::BTreeSet::new()));
        let cache = cluster();
        let fwk = default_framework()
            .0
            .with_observer(Arc::new(FilterThreads(Arc::clone(&threads))));
        let mut algo = SchedulingAlgorithm::new(4, None, 7);
        schedule_and_bind(&fwk, &mut algo, &cache, 100, true);
        let me = format!("{:?}", std::thread::current().id());
        let threads = threads.lock().clone();
        (me, threads)
    });
    let (me, threads) = scheduling.join().expect("the scheduling thread finishes");
    assert!(
        threads.contains(&me),
        "Filter ran only on {threads:?}, never on {me}"
    );
}

/// An algorithm built on one thread still schedules when another thread drives it (its pool's
/// other workers take the work), and a second algorithm on the same thread builds its own pool.
#[test]
fn an_algorithm_schedules_from_any_thread() {
    let (first, second) = std::thread::spawn(|| {
        (
            SchedulingAlgorithm::new(4, None, 7),
            SchedulingAlgorithm::new(4, None, 8),
        )
    })
    .join()
    .expect("the algorithms build");
    for mut algo in [first, second] {
        let driver = std::thread::spawn(move || {
            let cache = cluster();
            let (fwk, binder) = default_framework();
            schedule_and_bind(&fwk, &mut algo, &cache, 100, false);
            binder.bindings().len()
        });
        assert_eq!(driver.join().expect("the driver finishes"), 100);
    }
}
