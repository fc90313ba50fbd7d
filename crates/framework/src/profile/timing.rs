//! How a profile's plugin runs are timed: the [`FrameworkObserver`] that receives extension-point
//! and plugin durations, and the per-node batching of sampled plugin timings.
//!
//! Kept apart from the run loops because the timing of the per-node points (Filter, Score) is a
//! performance concern of its own: what is timed, when the clock is read and when histograms are
//! touched was tuned against profiles, and the loops only call into it.

use std::time::{Duration, Instant};

use crate::{Code, Framework, plugin_clock::Reading};

/// Receives timings of extension points and plugins (the runtime turns them into metrics).
pub trait FrameworkObserver: Send + Sync {
    /// One extension point finished for one pod.
    fn extension_point(&self, _profile: &str, _point: &'static str, _status: Code, _elapsed: Duration) {}
    /// One plugin finished at one extension point (only for sampled attempts).
    fn plugin(&self, _point: &'static str, _plugin: &str, _status: Code, _elapsed: Duration) {}
    /// A plugin was run for a pod at PreFilter, Filter, PreScore or Score (once per attempt).
    fn plugin_evaluated(&self, _profile: &str, _point: &'static str, _plugin: &str) {}
    /// A pod that waited at Permit was allowed or rejected after `elapsed`.
    fn permit_wait(&self, _status: Code, _elapsed: Duration) {}
    /// `count` candidate placements were generated for one pod group.
    fn placements_generated(&self, _profile: &str, _count: usize) {}
    /// One candidate placement was tried for a pod group: the group fit (`feasible`) or not.
    fn placement_evaluated(&self, _profile: &str, _feasible: bool, _elapsed: Duration) {}
    /// A concurrent task of `operation` started (`scheduler_goroutines{operation}` goes up).
    fn task_started(&self, _operation: &'static str) {}
    /// A task that [`task_started`](Self::task_started) announced ended.
    fn task_finished(&self, _operation: &'static str) {}
    /// A recorder of `plugin`'s successful runs at `point`, for the points that run per node
    /// (Filter, Score): resolved once per sampled attempt, it spares the per-call label lookup
    /// that [`plugin`](Self::plugin) does. Each call must count exactly as a call of `plugin`
    /// with [`Code::Success`] would. `None` (the default) sends every run to `plugin`.
    fn plugin_success_recorder(&self, _point: &'static str, _plugin: &str) -> Option<DurationRecorder> {
        None
    }
}

/// Records durations of one plugin at one extension point with one result, one observation per
/// element (see [`FrameworkObserver::plugin_success_recorder`]). The per-node points hand it a
/// worker's whole batch of an attempt at once ([`TimingBatch`]).
pub type DurationRecorder = Box<dyn Fn(&[Duration]) + Send + Sync>;

/// Where one plugin's timings go during one attempt at a point that runs per node: nowhere on
/// attempts not sampled for plugin metrics; on sampled ones, successes to a recorder resolved
/// once and any other result through [`FrameworkObserver::plugin`].
pub struct PluginTiming {
    record: bool,
    success: Option<DurationRecorder>,
}

impl PluginTiming {
    /// Whether this attempt times each call of the plugin.
    pub fn times_each_call(&self) -> bool {
        self.record
    }
}

/// The successful per-node runs one worker timed during one sampled attempt, per plugin, handed
/// to each plugin's recorder in one call when the batch is dropped (at the end of the worker's
/// share of the nodes).
///
/// Observing a shared histogram per plugin and node from every Filter and Score worker at once
/// made its atomics bounce between the cores: ~12 % of the scheduler's CPU at SchedulingBasic,
/// although only one attempt in ten is sampled. Every duration is still recorded exactly once,
/// within the attempt; only the moment moves. Outside sampled attempts a batch holds nothing.
///
/// The plugins a node runs through one after another share their clock readings: each timed run
/// starts at the instant the previous one of the same node ended ([`TimingBatch::start_node`]
/// begins a node). Reading the clock twice per plugin and node was a tenth of the scheduling
/// thread's CPU at SchedulingBasic (5,000 nodes, one attempt in ten sampled); one reading per
/// plugin and node, plus one per node, halves that, and the few instructions between two
/// plugins of a node are all that a duration gains.
pub struct TimingBatch<'t> {
    recorders: Vec<Option<&'t DurationRecorder>>,
    pending: Vec<Vec<Duration>>,
    /// When the last timed run of the current node ended.
    lap: Option<Reading>,
}

impl<'t> TimingBatch<'t> {
    /// A batch for the plugins with these timings, in the order the calls will name them.
    pub fn new(timings: impl IntoIterator<Item = &'t PluginTiming, IntoIter: Clone>) -> Self {
        let recorder = |t: &'t PluginTiming| t.success.as_ref().filter(|_| t.record);
        let timings = timings.into_iter();
        // Nine attempts in ten are not sampled: their batches (one per worker share) allocate
        // nothing.
        if timings.clone().all(|t| recorder(t).is_none()) {
            return TimingBatch {
                recorders: Vec::new(),
                pending: Vec::new(),
                lap: None,
            };
        }
        let recorders: Vec<Option<&'t DurationRecorder>> = timings.map(recorder).collect();
        let pending = recorders.iter().map(|_| Vec::new()).collect();
        TimingBatch {
            recorders,
            pending,
            lap: None,
        }
    }

    /// Begins a node's run of plugins: its first timed plugin reads the clock for its start,
    /// instead of taking the previous node's last reading (the work between two nodes is no
    /// plugin's).
    pub fn start_node(&mut self) {
        self.lap = None;
    }
}

impl Drop for TimingBatch<'_> {
    fn drop(&mut self) {
        for (recorder, durations) in self.recorders.iter().zip(&self.pending) {
            if let (Some(record), false) = (recorder, durations.is_empty()) {
                record(durations);
            }
        }
    }
}

/// The observer of a profile nobody watches (until [`Framework::with_observer`]).
pub(super) struct NoObserver;
impl FrameworkObserver for NoObserver {}

impl Framework {
    /// Runs one extension point and reports its duration with the code `f` returns.
    pub(super) fn timed<T>(&self, point: &'static str, f: impl FnOnce() -> (T, Code)) -> T {
        let start = Instant::now();
        let (out, code) = f();
        self.observer
            .extension_point(&self.profile_name, point, code, start.elapsed());
        out
    }

    /// Runs one plugin and, on attempts sampled for plugin metrics (`record`), reports its
    /// duration with the code `code` reads from its result.
    pub(super) fn plugin_timed<T>(
        &self,
        record: bool,
        point: &'static str,
        plugin: &str,
        f: impl FnOnce() -> T,
        code: impl Fn(&T) -> Code,
    ) -> T {
        if !record {
            return f();
        }
        let start = Instant::now();
        let out = f();
        self.observer.plugin(point, plugin, code(&out), start.elapsed());
        out
    }

    /// How `plugin`'s runs at `point` are timed during an attempt (`record`: sampled).
    pub fn plugin_timing(&self, record: bool, point: &'static str, plugin: &str) -> PluginTiming {
        PluginTiming {
            record,
            success: record
                .then(|| self.observer.plugin_success_recorder(point, plugin))
                .flatten(),
        }
    }

    /// Runs the `index`th plugin of `batch` once and reports its duration as `timing` says: a
    /// timed success waits in the batch for its recorder, any other timed result goes to the
    /// observer at once.
    #[allow(clippy::too_many_arguments)]
    pub fn run_timed_in<T>(
        &self,
        timing: &PluginTiming,
        batch: &mut TimingBatch<'_>,
        index: usize,
        point: &'static str,
        plugin: &str,
        f: impl FnOnce() -> T,
        code: impl Fn(&T) -> Code,
    ) -> T {
        if !timing.record {
            return f();
        }
        let start = batch.lap.take().unwrap_or_else(Reading::now);
        let out = f();
        let end = Reading::now();
        batch.lap = Some(end);
        let elapsed = start.until(end);
        let waiting = timing.success.as_ref().and_then(|_| batch.pending.get_mut(index));
        match (waiting, code(&out)) {
            (Some(durations), Code::Success) => durations.push(elapsed),
            (_, c) => self.observer.plugin(point, plugin, c, elapsed),
        }
        out
    }

    /// Counts one evaluation of each plugin that will run at `point` for this attempt.
    pub(super) fn evaluated<'a>(&self, point: &'static str, plugins: impl IntoIterator<Item = &'a str>) {
        for p in plugins {
            self.observer.plugin_evaluated(&self.profile_name, point, p);
        }
    }
}
