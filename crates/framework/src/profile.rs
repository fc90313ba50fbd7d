//! `Framework`: one profile's plugins, in order, per extension point, and the functions that run
//! them with upstream semantics.
//!
//! Built once from a `KubeSchedulerProfile` and a registry of plugin constructors. Multi-point
//! entries expand to every point a plugin implements; a plugin listed at a specific point overrides
//! its multi-point entry there, and `disabled` at a specific point removes it from that point only.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::{Duration, Instant},
};

use crate::{
    AssumedPodPlugin, BindPlugin, ClusterEventWithHint, Code, CycleState, FilterPlugin, FrameworkHandle,
    NodeInfo, NodeScore, NodeToStatus, PermitPlugin, Plugin, PodInfo, PodNominator, PostBindPlugin,
    PostFilterPlugin, PostFilterResult, PreBindPlugin, PreEnqueuePlugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, QueueSortPlugin, QueuedPodInfo, ReservePlugin, ScorePlugin, Status, StatusFuture,
    config::{DEFAULT_MULTI_POINT, KubeSchedulerProfile, PluginRef, PluginSet, merge_plugin_set},
    permit::WaitingPods,
    plugin_clock::Reading,
};

/// Constructs plugins by name. The plugins crate provides the in-tree registry; tests provide fakes.
pub trait PluginRegistry {
    /// True when a plugin of that name can be built.
    fn contains(&self, name: &str) -> bool;
    /// Builds the plugin with its `pluginConfig` args (`Null` when none were given).
    fn build(&self, name: &str, args: &serde_json::Value) -> Result<Arc<dyn Plugin>, String>;
}

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

/// PreBind plugins' runs as futures ([`Framework::pre_bind_future`]), to be awaited through
/// [`Framework::complete_pre_bind`].
pub struct PreBindInFlight {
    runs: Vec<(Arc<dyn PreBindPlugin>, StatusFuture)>,
    record: bool,
}

impl std::fmt::Debug for PreBindInFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.runs.iter().map(|(p, _)| p.name()))
            .finish()
    }
}

/// A Bind plugin's run as a future ([`Framework::bind_future`]), to be awaited through
/// [`Framework::complete_bind`].
pub struct BindInFlight {
    plugin: Arc<dyn BindPlugin>,
    record: bool,
    future: StatusFuture,
}

impl std::fmt::Debug for BindInFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BindInFlight")
            .field("plugin", &self.plugin.name())
            .finish_non_exhaustive()
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

struct NoObserver;
impl FrameworkObserver for NoObserver {}

/// Why a profile could not be built. Messages follow upstream.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameworkError {
    /// A configured plugin is not in the registry.
    #[error("{point} plugin {name:?} does not exist")]
    UnknownPlugin {
        /// Extension point.
        point: String,
        /// Plugin name.
        name: String,
    },
    /// A plugin listed at a point it does not implement.
    #[error("plugin {name:?} does not extend {point} plugin")]
    DoesNotExtend {
        /// Plugin name.
        name: String,
        /// Extension point.
        point: String,
    },
    /// Not exactly one QueueSort plugin.
    #[error(
        "only one queue sort plugin required for profile with scheduler name {profile:?}, but got {count}"
    )]
    QueueSort {
        /// Profile.
        profile: String,
        /// How many were configured.
        count: usize,
    },
    /// No Bind plugin.
    #[error("at least one bind plugin is needed for profile with scheduler name {0:?}")]
    NoBind(String),
    /// A plugin listed twice at one point.
    #[error("plugin {name:?} already registered as {point:?}")]
    Duplicate {
        /// Plugin name.
        name: String,
        /// Extension point.
        point: String,
    },
    /// The plugin's constructor rejected its args.
    #[error("initializing plugin {name:?}: {message}")]
    Init {
        /// Plugin name.
        name: String,
        /// What was wrong.
        message: String,
    },
    /// `pluginConfig` for a plugin that does not exist.
    #[error("pluginConfig for unknown plugin {0:?}")]
    UnknownPluginConfig(String),
}

/// A score plugin with its weight.
#[derive(Clone)]
pub struct WeightedScore {
    /// The plugin.
    pub plugin: Arc<dyn ScorePlugin>,
    /// Its weight (≥ 1).
    pub weight: i64,
}

/// Per-plugin and total scores of one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodePluginScores {
    /// The node.
    pub name: String,
    /// `(plugin, weighted score)` in plugin order.
    pub scores: Vec<(String, i64)>,
    /// Sum of weighted scores.
    pub total: i64,
}

/// Weighted scores of one attempt, by plugin and node index (the order of the scored nodes).
///
/// Kept as plain numbers because Score runs for hundreds of nodes per pod: named per-node records
/// ([`NodePluginScores`]) are built only for the few nodes an explanation shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScoreTable {
    /// The score plugins that ran, in profile order.
    pub plugins: Vec<String>,
    /// `weighted[plugin][node]`: normalised score × weight.
    pub weighted: Vec<Vec<i64>>,
    /// Sum over plugins, per node.
    pub totals: Vec<i64>,
}

impl ScoreTable {
    /// Every node scoring `total` (no score plugins ran).
    pub fn uniform(nodes: usize, total: i64) -> Self {
        ScoreTable {
            plugins: Vec::new(),
            weighted: Vec::new(),
            totals: vec![total; nodes],
        }
    }

    /// The named record of node `index`.
    pub fn node(&self, index: usize, name: &str) -> NodePluginScores {
        NodePluginScores {
            name: name.to_string(),
            scores: self
                .plugins
                .iter()
                .zip(&self.weighted)
                .map(|(p, w)| (p.clone(), w.get(index).copied().unwrap_or(0)))
                .collect(),
            total: self.totals.get(index).copied().unwrap_or(0),
        }
    }
}

/// One profile's plugins per extension point.
pub struct Framework {
    profile_name: String,
    percentage_of_nodes_to_score: Option<i32>,
    plugins: BTreeMap<String, Arc<dyn Plugin>>,
    pre_enqueue: Vec<Arc<dyn PreEnqueuePlugin>>,
    queue_sort: Arc<dyn QueueSortPlugin>,
    pre_filter: Vec<Arc<dyn PreFilterPlugin>>,
    filter: Vec<Arc<dyn FilterPlugin>>,
    /// `filter[i].name()`, shared: every rejection carries its plugin's name, and Filter rejects
    /// thousands of nodes per pod.
    filter_names: Vec<Arc<str>>,
    post_filter: Vec<Arc<dyn PostFilterPlugin>>,
    pre_score: Vec<Arc<dyn PreScorePlugin>>,
    score: Vec<WeightedScore>,
    reserve: Vec<Arc<dyn ReservePlugin>>,
    permit: Vec<Arc<dyn PermitPlugin>>,
    pre_bind: Vec<Arc<dyn PreBindPlugin>>,
    bind: Vec<Arc<dyn BindPlugin>>,
    post_bind: Vec<Arc<dyn PostBindPlugin>>,
    assumed_pod: Vec<Arc<dyn AssumedPodPlugin>>,
    events: Vec<(String, Vec<ClusterEventWithHint>)>,
    waiting_pods: WaitingPods,
    observer: Arc<dyn FrameworkObserver>,
}

impl std::fmt::Debug for Framework {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Framework")
            .field("profile", &self.profile_name)
            .field(
                "pre_filter",
                &self
                    .pre_filter
                    .iter()
                    .map(|p| p.name().to_string())
                    .collect::<Vec<_>>(),
            )
            .field(
                "filter",
                &self
                    .filter
                    .iter()
                    .map(|p| p.name().to_string())
                    .collect::<Vec<_>>(),
            )
            .field(
                "score",
                &self
                    .score
                    .iter()
                    .map(|p| (p.plugin.name().to_string(), p.weight))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

fn default_multi_point(registry: &dyn PluginRegistry) -> Vec<PluginRef> {
    DEFAULT_MULTI_POINT
        .iter()
        .filter(|(n, _)| registry.contains(n))
        .map(|(n, w)| PluginRef {
            name: (*n).to_string(),
            weight: (*w > 0).then_some(*w),
        })
        .collect()
}

/// Which conversions a point uses, so expansion can test "implements".
type Probe = fn(&Arc<dyn Plugin>) -> bool;

fn probe(point: &str) -> Probe {
    match point {
        "preEnqueue" => |p| p.clone().as_pre_enqueue().is_some(),
        "queueSort" => |p| p.clone().as_queue_sort().is_some(),
        "preFilter" => |p| p.clone().as_pre_filter().is_some(),
        "filter" => |p| p.clone().as_filter().is_some(),
        "postFilter" => |p| p.clone().as_post_filter().is_some(),
        "preScore" => |p| p.clone().as_pre_score().is_some(),
        "score" => |p| p.clone().as_score().is_some(),
        "reserve" => |p| p.clone().as_reserve().is_some(),
        "permit" => |p| p.clone().as_permit().is_some(),
        "preBind" => |p| p.clone().as_pre_bind().is_some(),
        "bind" => |p| p.clone().as_bind().is_some(),
        _ => |p| p.clone().as_post_bind().is_some(),
    }
}

fn point_type(point: &str) -> String {
    let mut c = point.chars();
    match c.next() {
        Some(f) => format!("{}{}Plugin", f.to_ascii_uppercase(), c.as_str()),
        None => String::new(),
    }
}

/// The Filter plugins one attempt runs, PreFilter's skips applied once: the skip set is keyed by
/// plugin name, and asking it per plugin and node hashed a name thousands of times per pod.
pub struct FilterChain<'f> {
    plugins: Vec<(&'f dyn FilterPlugin, &'f Arc<str>, PluginTiming)>,
}

impl FilterChain<'_> {
    /// An empty batch for one worker's timed successes of this chain's plugins.
    pub fn timing_batch(&self) -> TimingBatch<'_> {
        TimingBatch::new(self.plugins.iter().map(|(_, _, t)| t))
    }
}

/// The [`FrameworkHandle`] PostFilter plugins get: this profile plus the queue's nominations.
struct NominatingHandle<'a> {
    fwk: &'a Framework,
    nominator: &'a dyn PodNominator,
}

impl FrameworkHandle for NominatingHandle<'_> {
    fn profile_name(&self) -> &str {
        self.fwk.profile_name()
    }

    fn run_filter_with_nominated(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let nominated = self.nominator.nominated_pods_for_node(node.name());
        self.fwk.run_filter_with_nominated(state, pod, node, &nominated)
    }

    fn run_pre_filter_add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        to_add: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status {
        self.fwk.run_pre_filter_add_pod(state, pod, to_add, node)
    }

    fn run_pre_filter_remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        to_remove: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status {
        self.fwk.run_pre_filter_remove_pod(state, pod, to_remove, node)
    }

    fn nominated_pods_for_node(&self, node: &str) -> Vec<Arc<PodInfo>> {
        self.nominator.nominated_pods_for_node(node)
    }

    fn reject_waiting_pod(&self, uid: &str, plugin: &str, reason: &str) -> bool {
        let waiting = self.fwk.waiting_pods();
        if !waiting.uids().iter().any(|u| u == uid) {
            return false;
        }
        waiting.reject(uid, plugin, reason);
        true
    }
}

impl Framework {
    /// Builds a profile. Plugins are constructed once, even when they serve several points.
    pub fn new(
        profile: &KubeSchedulerProfile,
        registry: &dyn PluginRegistry,
    ) -> Result<Framework, FrameworkError> {
        let name = profile
            .scheduler_name
            .clone()
            .unwrap_or_else(|| crate::config::DEFAULT_SCHEDULER_NAME.into());
        let plugins_cfg = profile.plugins.clone().unwrap_or_default();
        let multi = merge_plugin_set(&default_multi_point(registry), &plugins_cfg.multi_point);

        // Resolve each point's ordered (plugin, weight) list.
        let mut per_point: BTreeMap<&str, Vec<PluginRef>> = BTreeMap::new();
        let mut needed: BTreeSet<String> = BTreeSet::new();
        for point in crate::config::EXTENSION_POINTS {
            let set = plugins_cfg.set(point).cloned().unwrap_or_default();
            for p in &set.enabled {
                if !registry.contains(&p.name) {
                    return Err(FrameworkError::UnknownPlugin {
                        point: point_type(point),
                        name: p.name.clone(),
                    });
                }
                needed.insert(p.name.clone());
            }
            per_point.insert(point, set.enabled.clone());
        }
        for p in &multi {
            if !registry.contains(&p.name) {
                return Err(FrameworkError::UnknownPlugin {
                    point: "MultiPoint".into(),
                    name: p.name.clone(),
                });
            }
            needed.insert(p.name.clone());
        }
        for pc in &profile.plugin_config {
            if !registry.contains(&pc.name) {
                return Err(FrameworkError::UnknownPluginConfig(pc.name.clone()));
            }
        }
        let mut built: BTreeMap<String, Arc<dyn Plugin>> = BTreeMap::new();
        for n in &needed {
            let args = profile
                .plugin_config
                .iter()
                .find(|pc| &pc.name == n)
                .map(|pc| pc.args.clone())
                .unwrap_or(serde_json::Value::Null);
            let plugin = registry.build(n, &args).map_err(|message| FrameworkError::Init {
                name: n.clone(),
                message,
            })?;
            built.insert(n.clone(), plugin);
        }

        let mut resolved: BTreeMap<&str, Vec<(Arc<dyn Plugin>, i64)>> = BTreeMap::new();
        for point in crate::config::EXTENSION_POINTS {
            let implements = probe(point);
            let specific = per_point.get(point).cloned().unwrap_or_default();
            let set: PluginSet = plugins_cfg.set(point).cloned().unwrap_or_default();
            let disabled: BTreeSet<&str> = set.disabled.iter().map(|p| p.name.as_str()).collect();
            let weight_of = |r: &PluginRef, fallback: Option<i32>| -> i64 {
                i64::from(r.weight.or(fallback).filter(|w| *w > 0).unwrap_or(1))
            };
            let mut overrides = Vec::new();
            let mut multi_only = Vec::new();
            let specific_names: BTreeSet<&str> = specific.iter().map(|p| p.name.as_str()).collect();
            if !disabled.contains("*") {
                for m in &multi {
                    let Some(p) = built.get(&m.name) else { continue };
                    if !implements(p) || disabled.contains(m.name.as_str()) {
                        continue;
                    }
                    if specific_names.contains(m.name.as_str()) {
                        overrides.push(m.name.clone());
                        continue;
                    }
                    multi_only.push((p.clone(), weight_of(m, None)));
                }
            }
            let mut list: Vec<(Arc<dyn Plugin>, i64)> = Vec::new();
            let mut seen = BTreeSet::new();
            // Overrides first (in their specific order), then multi-point-only, then the rest.
            for s in specific.iter().filter(|s| overrides.contains(&s.name)) {
                let Some(p) = built.get(&s.name) else { continue };
                let multi_weight = multi.iter().find(|m| m.name == s.name).and_then(|m| m.weight);
                list.push((p.clone(), weight_of(s, multi_weight)));
                seen.insert(s.name.clone());
            }
            for (p, w) in multi_only {
                seen.insert(p.name().to_string());
                list.push((p, w));
            }
            for s in specific.iter().filter(|s| !overrides.contains(&s.name)) {
                let Some(p) = built.get(&s.name) else { continue };
                if !implements(p) {
                    return Err(FrameworkError::DoesNotExtend {
                        name: s.name.clone(),
                        point: point_type(point),
                    });
                }
                if !seen.insert(s.name.clone()) {
                    return Err(FrameworkError::Duplicate {
                        name: s.name.clone(),
                        point: point.to_string(),
                    });
                }
                list.push((p.clone(), weight_of(s, None)));
            }
            resolved.insert(point, list);
        }

        let take = |point: &str| resolved.get(point).cloned().unwrap_or_default();
        let queue_sorts: Vec<Arc<dyn QueueSortPlugin>> = take("queueSort")
            .into_iter()
            .filter_map(|(p, _)| p.as_queue_sort())
            .collect();
        if queue_sorts.len() != 1 {
            return Err(FrameworkError::QueueSort {
                profile: name,
                count: queue_sorts.len(),
            });
        }
        let bind: Vec<Arc<dyn BindPlugin>> = take("bind")
            .into_iter()
            .filter_map(|(p, _)| p.as_bind())
            .collect();
        if bind.is_empty() {
            return Err(FrameworkError::NoBind(name));
        }
        let used: BTreeSet<String> = resolved
            .values()
            .flatten()
            .map(|(p, _)| p.name().to_string())
            .collect();
        let events = built
            .iter()
            .filter(|(n, _)| used.contains(*n))
            .filter_map(|(n, p)| {
                p.clone()
                    .as_enqueue_extensions()
                    .map(|e| (n.clone(), e.events_to_register()))
            })
            .collect();
        let assumed_pod = built
            .iter()
            .filter(|(n, _)| used.contains(*n))
            .filter_map(|(_, p)| p.clone().as_assumed_pod())
            .collect();
        let mut fwk = Framework {
            profile_name: name,
            percentage_of_nodes_to_score: profile.percentage_of_nodes_to_score,
            pre_enqueue: take("preEnqueue")
                .into_iter()
                .filter_map(|(p, _)| p.as_pre_enqueue())
                .collect(),
            queue_sort: queue_sorts.into_iter().next().ok_or(FrameworkError::QueueSort {
                profile: String::new(),
                count: 0,
            })?,
            pre_filter: take("preFilter")
                .into_iter()
                .filter_map(|(p, _)| p.as_pre_filter())
                .collect(),
            filter: take("filter")
                .into_iter()
                .filter_map(|(p, _)| p.as_filter())
                .collect(),
            post_filter: take("postFilter")
                .into_iter()
                .filter_map(|(p, _)| p.as_post_filter())
                .collect(),
            pre_score: take("preScore")
                .into_iter()
                .filter_map(|(p, _)| p.as_pre_score())
                .collect(),
            score: take("score")
                .into_iter()
                .filter_map(|(p, w)| p.as_score().map(|plugin| WeightedScore { plugin, weight: w }))
                .collect(),
            reserve: take("reserve")
                .into_iter()
                .filter_map(|(p, _)| p.as_reserve())
                .collect(),
            permit: take("permit")
                .into_iter()
                .filter_map(|(p, _)| p.as_permit())
                .collect(),
            pre_bind: take("preBind")
                .into_iter()
                .filter_map(|(p, _)| p.as_pre_bind())
                .collect(),
            bind,
            post_bind: take("postBind")
                .into_iter()
                .filter_map(|(p, _)| p.as_post_bind())
                .collect(),
            assumed_pod,
            events,
            plugins: built,
            waiting_pods: WaitingPods::default(),
            observer: Arc::new(NoObserver),
            filter_names: Vec::new(),
        };
        fwk.filter_names = fwk.filter.iter().map(|p| Arc::from(p.name())).collect();
        Ok(fwk)
    }

    /// Sets the observer that receives timings.
    #[must_use]
    pub fn with_observer(mut self, observer: Arc<dyn FrameworkObserver>) -> Self {
        self.observer = observer;
        self
    }

    /// The profile's scheduler name.
    pub fn profile_name(&self) -> &str {
        &self.profile_name
    }

    /// The profile's percentage of nodes to score, if it overrides the global one.
    pub fn percentage_of_nodes_to_score(&self) -> Option<i32> {
        self.percentage_of_nodes_to_score
    }

    /// A plugin by name.
    pub fn plugin(&self, name: &str) -> Option<&Arc<dyn Plugin>> {
        self.plugins.get(name)
    }

    /// Names of the plugins at each point (for `/configz` and tests).
    pub fn plugin_names(&self) -> BTreeMap<&'static str, Vec<String>> {
        fn names<T: ?Sized + Plugin>(v: &[Arc<T>]) -> Vec<String> {
            v.iter().map(|p| p.name().to_string()).collect()
        }
        let mut m = BTreeMap::new();
        m.insert("preEnqueue", names(&self.pre_enqueue));
        m.insert("queueSort", vec![self.queue_sort.name().to_string()]);
        m.insert("preFilter", names(&self.pre_filter));
        m.insert("filter", names(&self.filter));
        m.insert("postFilter", names(&self.post_filter));
        m.insert("preScore", names(&self.pre_score));
        m.insert(
            "score",
            self.score
                .iter()
                .map(|s| format!("{}={}", s.plugin.name(), s.weight))
                .collect(),
        );
        m.insert("reserve", names(&self.reserve));
        m.insert("permit", names(&self.permit));
        m.insert("preBind", names(&self.pre_bind));
        m.insert("bind", names(&self.bind));
        m.insert("postBind", names(&self.post_bind));
        m
    }

    /// Events each plugin registered, by plugin name.
    pub fn events_to_register(&self) -> &[(String, Vec<ClusterEventWithHint>)] {
        &self.events
    }

    /// True when the profile has Filter plugins.
    pub fn has_filter_plugins(&self) -> bool {
        !self.filter.is_empty()
    }

    /// True when the profile has Score plugins.
    pub fn has_score_plugins(&self) -> bool {
        !self.score.is_empty()
    }

    /// True when the profile has PostFilter plugins.
    pub fn has_post_filter_plugins(&self) -> bool {
        !self.post_filter.is_empty()
    }

    /// Pods waiting at Permit.
    pub fn waiting_pods(&self) -> &WaitingPods {
        &self.waiting_pods
    }

    fn timed<T>(&self, point: &'static str, f: impl FnOnce() -> (T, Code)) -> T {
        let start = Instant::now();
        let (out, code) = f();
        self.observer
            .extension_point(&self.profile_name, point, code, start.elapsed());
        out
    }

    fn plugin_timed<T>(
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
    fn evaluated<'a>(&self, point: &'static str, plugins: impl IntoIterator<Item = &'a str>) {
        for p in plugins {
            self.observer.plugin_evaluated(&self.profile_name, point, p);
        }
    }

    /// Counts the Filter plugins that run for this attempt (those PreFilter did not skip).
    pub fn count_filter_evaluations(&self, chain: &FilterChain<'_>) {
        self.evaluated("Filter", chain.plugins.iter().map(|(p, _, _)| p.name()));
    }

    /// Times the Score extension point (the caller runs the plugins, possibly in parallel) and
    /// counts one evaluation per active Score plugin.
    pub fn timed_score<T>(&self, plugins: &[&WeightedScore], f: impl FnOnce() -> (T, Code)) -> T {
        self.evaluated("Score", plugins.iter().map(|ws| ws.plugin.name()));
        self.timed("Score", f)
    }

    /// PreEnqueue: the first rejecting plugin gates the pod.
    pub fn run_pre_enqueue(&self, pod: &PodInfo) -> Status {
        for p in &self.pre_enqueue {
            let s = p.pre_enqueue(pod);
            if !s.is_success() {
                let s = s.with_plugin(p.name());
                return if s.is_rejected() {
                    s
                } else {
                    s.wrap_error(format!("running PreEnqueue plugin {:?}", p.name()))
                };
            }
        }
        Status::success()
    }

    /// QueueSort.
    pub fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        self.queue_sort.less(a, b)
    }

    /// The QueueSort plugin's name (all profiles must agree).
    pub fn queue_sort_name(&self) -> &str {
        self.queue_sort.name()
    }

    /// PreFilter. Returns the merged node restriction, the status, and the plugins that rejected.
    pub fn run_pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status, BTreeSet<String>) {
        let record = state.record_plugin_metrics;
        self.timed("PreFilter", || {
            let mut result: Option<PreFilterResult> = None;
            let mut rejectors = BTreeSet::new();
            let mut narrowed_by = Vec::new();
            for p in &self.pre_filter {
                self.observer
                    .plugin_evaluated(&self.profile_name, "PreFilter", p.name());
                let (r, s) = self.plugin_timed(
                    record,
                    "PreFilter",
                    p.name(),
                    || p.pre_filter(state, pod, nodes),
                    |(_, s)| s.code(),
                );
                if s.is_skip() {
                    state.skip_filter_plugins.insert(p.name().to_string());
                    continue;
                }
                if !s.is_success() {
                    let s = s.with_plugin(p.name());
                    if s.is_rejected() {
                        rejectors.insert(p.name().to_string());
                        let code = s.code();
                        return ((None, s, rejectors), code);
                    }
                    let s = s.wrap_error(format!("running PreFilter plugin {:?}", p.name()));
                    return ((None, s, rejectors), Code::Error);
                }
                if let Some(r) = r.filter(|r| r.node_names.is_some()) {
                    narrowed_by.push(p.name().to_string());
                    result = Some(match result {
                        None => r,
                        Some(prev) => prev.merge(r),
                    });
                    if result
                        .as_ref()
                        .and_then(|r| r.node_names.as_ref())
                        .is_some_and(BTreeSet::is_empty)
                    {
                        let msg = if narrowed_by.len() == 1 {
                            format!("node(s) didn't satisfy plugin {}", narrowed_by[0])
                        } else {
                            format!(
                                "node(s) didn't satisfy plugin(s) [{}] simultaneously",
                                narrowed_by.join(" ")
                            )
                        };
                        rejectors.extend(narrowed_by.iter().cloned());
                        let s = Status::unresolvable(msg).with_plugin(p.name());
                        return ((None, s, rejectors), Code::UnschedulableAndUnresolvable);
                    }
                }
            }
            ((result, Status::success(), rejectors), Code::Success)
        })
    }

    /// The Filter plugins this attempt runs (those PreFilter did not skip), in profile order.
    pub fn filter_chain(&self, state: &CycleState) -> FilterChain<'_> {
        let plugins = self
            .filter
            .iter()
            .zip(&self.filter_names)
            .filter(|(p, _)| !state.skip_filter_plugins.contains(p.name()))
            .map(|(p, name)| {
                let timing = self.plugin_timing(state.record_plugin_metrics, "Filter", p.name());
                (&**p, name, timing)
            })
            .collect();
        FilterChain { plugins }
    }

    /// Filter on one node: the first rejection stops.
    pub fn run_filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        self.run_filter_chain(&self.filter_chain(state), state, pod, node)
    }

    /// Filter on one node with the attempt's chain worked out beforehand (the per-node path).
    pub fn run_filter_chain(
        &self,
        chain: &FilterChain<'_>,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        self.run_filter_chain_in(chain, &mut chain.timing_batch(), state, pod, node)
    }

    /// [`Framework::run_filter_chain`] with the timed successes kept in a worker's `batch`
    /// (from [`FilterChain::timing_batch`] of the same chain).
    pub fn run_filter_chain_in(
        &self,
        chain: &FilterChain<'_>,
        batch: &mut TimingBatch<'_>,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        batch.start_node();
        for (i, (p, name, timing)) in chain.plugins.iter().enumerate() {
            let s = self.run_timed_in(
                timing,
                batch,
                i,
                "Filter",
                p.name(),
                || p.filter(state, pod, node),
                Status::code,
            );
            if !s.is_success() {
                let s = s.with_plugin(Arc::clone(name));
                if s.is_rejected() {
                    return s;
                }
                return s.wrap_error(format!("running {:?} filter plugin", p.name()));
            }
        }
        Status::success()
    }

    /// Filter with the pods nominated to this node (priority ≥ the pod's) added, then without them:
    /// the pod must fit both ways, as upstream.
    pub fn run_filter_with_nominated(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        nominated: &[Arc<PodInfo>],
    ) -> Status {
        self.run_filter_chain_with_nominated(&self.filter_chain(state), state, pod, node, nominated)
    }

    /// [`Framework::run_filter_with_nominated`] with the attempt's chain worked out beforehand.
    pub fn run_filter_chain_with_nominated(
        &self,
        chain: &FilterChain<'_>,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        nominated: &[Arc<PodInfo>],
    ) -> Status {
        let relevant: Vec<&Arc<PodInfo>> = nominated
            .iter()
            .filter(|n| n.uid != pod.uid && n.priority >= pod.priority)
            .collect();
        if relevant.is_empty() {
            return self.run_filter_chain(chain, state, pod, node);
        }
        // The cloned state carries the same skips, so the chain serves it too.
        let mut state_with = state.deep_clone();
        let mut node_with = node.clone();
        for n in &relevant {
            node_with.add_pod((*n).clone());
            let s = self.run_pre_filter_add_pod(&mut state_with, pod, n, &node_with);
            if !s.is_success() {
                return s;
            }
        }
        let s = self.run_filter_chain(chain, &state_with, pod, &node_with);
        if !s.is_success() {
            return s;
        }
        self.run_filter_chain(chain, state, pod, node)
    }

    /// PreFilter AddPod extensions.
    pub fn run_pre_filter_add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        to_add: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status {
        for p in self.pre_filter.iter().filter(|p| p.has_extensions()) {
            if state.skip_filter_plugins.contains(p.name()) {
                continue;
            }
            let s = p.add_pod(state, pod, to_add, node);
            if !s.is_success() {
                return s
                    .with_plugin(p.name())
                    .wrap_error(format!("running AddPod on PreFilter plugin {:?}", p.name()));
            }
        }
        Status::success()
    }

    /// PreFilter RemovePod extensions.
    pub fn run_pre_filter_remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        to_remove: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status {
        for p in self.pre_filter.iter().filter(|p| p.has_extensions()) {
            if state.skip_filter_plugins.contains(p.name()) {
                continue;
            }
            let s = p.remove_pod(state, pod, to_remove, node);
            if !s.is_success() {
                return s
                    .with_plugin(p.name())
                    .wrap_error(format!("running RemovePod on PreFilter plugin {:?}", p.name()));
            }
        }
        Status::success()
    }

    /// PostFilter: the first Success wins; UnschedulableAndUnresolvable stops; otherwise reasons
    /// accumulate into one Unschedulable status.
    /// `nominator` supplies the nominated pods the plugins' dry runs must respect.
    pub fn run_post_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        statuses: &NodeToStatus,
        nominator: &dyn PodNominator,
    ) -> (Option<PostFilterResult>, Status) {
        let handle = NominatingHandle { fwk: self, nominator };
        let record = state.record_plugin_metrics;
        self.timed("PostFilter", || {
            let mut reasons = Vec::new();
            let mut first_rejector: Option<String> = None;
            let mut result = None;
            for p in &self.post_filter {
                let (r, s) = self.plugin_timed(
                    record,
                    "PostFilter",
                    p.name(),
                    || p.post_filter(&handle, state, pod, statuses),
                    |(_, s)| s.code(),
                );
                if s.is_success() {
                    return ((r, s.with_plugin(p.name())), Code::Success);
                }
                if s.code() == Code::UnschedulableAndUnresolvable {
                    let code = s.code();
                    return ((r, s.with_plugin(p.name())), code);
                }
                if !s.is_rejected() {
                    return ((None, s.with_plugin(p.name())), Code::Error);
                }
                reasons.extend(s.reasons());
                first_rejector.get_or_insert_with(|| p.name().to_string());
                if r.as_ref().is_some_and(|r| r.nominated_node_name.is_some()) {
                    result = r;
                }
            }
            let mut s = Status::new(Code::Unschedulable, reasons);
            if let Some(p) = first_rejector {
                s.set_plugin(p);
            }
            ((result, s), Code::Unschedulable)
        })
    }

    /// PreScore.
    pub fn run_pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[Arc<NodeInfo>]) -> Status {
        let record = state.record_plugin_metrics;
        self.timed("PreScore", || {
            for p in &self.pre_score {
                self.observer
                    .plugin_evaluated(&self.profile_name, "PreScore", p.name());
                let s = self.plugin_timed(
                    record,
                    "PreScore",
                    p.name(),
                    || p.pre_score(state, pod, nodes),
                    Status::code,
                );
                if s.is_skip() {
                    state.skip_score_plugins.insert(p.name().to_string());
                    continue;
                }
                if !s.is_success() {
                    let s = s
                        .with_plugin(p.name())
                        .wrap_error(format!("running PreScore plugin {:?}", p.name()));
                    return (s, Code::Error);
                }
            }
            (Status::success(), Code::Success)
        })
    }

    /// The score plugins that will run for this attempt.
    pub fn active_score_plugins(&self, state: &CycleState) -> Vec<&WeightedScore> {
        self.score
            .iter()
            .filter(|s| !state.skip_score_plugins.contains(s.plugin.name()))
            .collect()
    }

    /// Normalises, validates and weights raw scores (`raw[plugin][node]`), then totals per node.
    pub fn finish_scores(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        plugins: &[&WeightedScore],
        nodes: &[Arc<NodeInfo>],
        raw: Vec<Vec<i64>>,
    ) -> Result<ScoreTable, Status> {
        let mut table = ScoreTable {
            plugins: Vec::with_capacity(plugins.len()),
            weighted: Vec::with_capacity(plugins.len()),
            totals: vec![0; nodes.len()],
        };
        let mut raw = raw.into_iter();
        for ws in plugins {
            let mut scores = raw.next().unwrap_or_default();
            scores.resize(nodes.len(), 0);
            if ws.plugin.has_normalize() {
                // The normalisation interface names nodes; only plugins that normalise pay for it.
                let mut list: Vec<NodeScore<'_>> = nodes
                    .iter()
                    .zip(&scores)
                    .map(|(n, s)| NodeScore {
                        name: n.name(),
                        score: *s,
                    })
                    .collect();
                let s = ws.plugin.normalize_score(state, pod, &mut list);
                if !s.is_success() {
                    return Err(s.with_plugin(ws.plugin.name()).wrap_error(format!(
                        "running Normalize on Score plugin {:?}",
                        ws.plugin.name()
                    )));
                }
                for (score, ns) in scores.iter_mut().zip(&list) {
                    *score = ns.score;
                }
            }
            for (ni, score) in scores.iter_mut().enumerate() {
                if !(crate::MIN_NODE_SCORE..=crate::MAX_NODE_SCORE).contains(score) {
                    return Err(Status::error(format!(
                        "plugin {:?} returns an invalid score {}, it should in the range of [{}, {}] after normalizing",
                        ws.plugin.name(),
                        score,
                        crate::MIN_NODE_SCORE,
                        crate::MAX_NODE_SCORE
                    )));
                }
                *score *= ws.weight;
                table.totals[ni] += *score;
            }
            table.plugins.push(ws.plugin.name().to_string());
            table.weighted.push(scores);
        }
        Ok(table)
    }

    /// Lets plugins add their per-node results to the pod the cache will assume.
    pub fn prepare_assumed_pod(&self, state: &CycleState, pod: &PodInfo, node: &str) -> PodInfo {
        let mut assumed = pod.assumed_on(node);
        if self.assumed_pod.is_empty() {
            return assumed;
        }
        // One copy of the pod for all plugins; derived anew only if one of them changed it (a
        // DRA pod whose claims carry no node-allocatable statuses, the common case, is not).
        let mut changed = false;
        let obj = Arc::make_mut(&mut assumed.pod);
        for p in &self.assumed_pod {
            changed |= p.prepare_assumed_pod(state, obj, node);
        }
        if changed {
            assumed = PodInfo::from_arc(assumed.pod.clone());
        }
        assumed
    }

    /// Reserve; on failure the caller runs Unreserve.
    pub fn run_reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        let record = state.record_plugin_metrics;
        self.timed("Reserve", || {
            for p in &self.reserve {
                let s = self.plugin_timed(
                    record,
                    "Reserve",
                    p.name(),
                    || p.reserve(state, pod, node),
                    Status::code,
                );
                if !s.is_success() {
                    let s = s.with_plugin(p.name());
                    let code = s.code();
                    if s.is_rejected() {
                        return (s, code);
                    }
                    return (
                        s.wrap_error(format!("running Reserve plugin {:?}", p.name())),
                        Code::Error,
                    );
                }
            }
            (Status::success(), Code::Success)
        })
    }

    /// Unreserve, in reverse order of Reserve.
    pub fn run_unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) {
        self.timed("Unreserve", || {
            let record = state.record_plugin_metrics;
            for p in self.reserve.iter().rev() {
                self.plugin_timed(
                    record,
                    "Unreserve",
                    p.name(),
                    || p.unreserve(state, pod, node),
                    |()| Code::Success,
                );
            }
            ((), Code::Success)
        });
    }

    /// Permit. Wait registers the pod as waiting (see [`Framework::wait_on_permit`]).
    pub fn run_permit(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        let record = state.record_plugin_metrics;
        self.timed("Permit", || {
            let mut waits: BTreeMap<String, Duration> = BTreeMap::new();
            for p in &self.permit {
                let (s, timeout) = self.plugin_timed(
                    record,
                    "Permit",
                    p.name(),
                    || p.permit(state, pod, node),
                    |(s, _)| s.code(),
                );
                match s.code() {
                    Code::Success => {}
                    Code::Wait => {
                        waits.insert(p.name().to_string(), timeout.min(Duration::from_secs(15 * 60)));
                    }
                    code if s.is_rejected() => return (s.with_plugin(p.name()), code),
                    _ => {
                        return (
                            s.with_plugin(p.name())
                                .wrap_error(format!("running Permit plugin {:?}", p.name())),
                            Code::Error,
                        );
                    }
                }
            }
            if waits.is_empty() {
                return (Status::success(), Code::Success);
            }
            self.waiting_pods.add(&pod.uid, waits);
            let msg = format!(
                "one or more plugins asked to wait and no plugin rejected pod {:?}",
                pod.name
            );
            (Status::new(Code::Wait, [msg]), Code::Wait)
        })
    }

    /// Blocks until every plugin that asked the pod to wait allows it, one rejects it, or a timeout.
    pub fn wait_on_permit(&self, pod: &PodInfo) -> Status {
        if !self.waiting_pods.contains(&pod.uid) {
            return self.waiting_pods.wait(&pod.uid);
        }
        let start = Instant::now();
        let s = self.waiting_pods.wait(&pod.uid);
        self.observer.permit_wait(s.code(), start.elapsed());
        s
    }

    /// PreBind.
    pub fn run_pre_bind(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        let record = state.record_plugin_metrics;
        self.timed("PreBind", || {
            for p in &self.pre_bind {
                if p.pre_bind_pre_flight(state, pod, node).is_skip() {
                    continue;
                }
                let s = self.plugin_timed(
                    record,
                    "PreBind",
                    p.name(),
                    || p.pre_bind(state, pod, node),
                    Status::code,
                );
                if !s.is_success() {
                    let s = s.with_plugin(p.name());
                    let code = s.code();
                    if s.is_rejected() {
                        return (s, code);
                    }
                    return (
                        s.wrap_error(format!("running PreBind plugin {:?}", p.name())),
                        Code::Error,
                    );
                }
            }
            (Status::success(), Code::Success)
        })
    }

    /// True when some PreBind plugin has work for this pod.
    pub fn has_pre_bind_work(&self, state: &CycleState, pod: &PodInfo, node: &str) -> bool {
        self.pre_bind
            .iter()
            .any(|p| !p.pre_bind_pre_flight(state, pod, node).is_skip())
    }

    /// Bind: the first plugin that does not Skip decides.
    pub fn run_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        self.timed("Bind", || {
            for p in &self.bind {
                let s = self.plugin_timed(
                    state.record_plugin_metrics,
                    "Bind",
                    p.name(),
                    || p.bind(state, pod, node),
                    Status::code,
                );
                if s.is_skip() {
                    continue;
                }
                if !s.is_success() {
                    let s = s.with_plugin(p.name());
                    if s.is_rejected() {
                        let code = s.code();
                        return (s, code);
                    }
                    return (
                        s.wrap_error(format!("running Bind plugin {:?}", p.name())),
                        Code::Error,
                    );
                }
                return (s, Code::Success);
            }
            (Status::skip(), Code::Skip)
        })
    }

    /// True while `uid` waits at Permit: its binding cycle may block in
    /// [`wait_on_permit`](Self::wait_on_permit).
    pub fn waits_at_permit(&self, uid: &str) -> bool {
        self.waiting_pods.contains(uid)
    }

    /// PreBind as futures, when every PreBind plugin with work for this pod offers one
    /// ([`PreBindPlugin::pre_bind_async`]); `None` otherwise (use
    /// [`run_pre_bind`](Self::run_pre_bind)). Nothing runs until
    /// [`complete_pre_bind`](Self::complete_pre_bind) awaits them.
    pub fn pre_bind_future(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Option<PreBindInFlight> {
        let mut runs = Vec::new();
        for p in &self.pre_bind {
            if p.pre_bind_pre_flight(state, pod, node).is_skip() {
                continue;
            }
            runs.push((Arc::clone(p), p.pre_bind_async(state, pod, node)?));
        }
        Some(PreBindInFlight {
            runs,
            record: state.record_plugin_metrics,
        })
    }

    /// Awaits a [`pre_bind_future`](Self::pre_bind_future)'s plugins in order and reports them
    /// as [`run_pre_bind`](Self::run_pre_bind) does: the first failure stops, with the same
    /// status, durations and extension-point code.
    pub async fn complete_pre_bind(&self, pre_bind: PreBindInFlight) -> Status {
        let PreBindInFlight { runs, record } = pre_bind;
        let start = Instant::now();
        let mut outcome = (Status::success(), Code::Success);
        for (plugin, future) in runs {
            let began = Instant::now();
            let s = future.await;
            if record {
                self.observer
                    .plugin("PreBind", plugin.name(), s.code(), began.elapsed());
            }
            if !s.is_success() {
                let s = s.with_plugin(plugin.name());
                let code = s.code();
                outcome = if s.is_rejected() {
                    (s, code)
                } else {
                    (
                        s.wrap_error(format!("running PreBind plugin {:?}", plugin.name())),
                        Code::Error,
                    )
                };
                break;
            }
        }
        let (s, code) = outcome;
        self.observer
            .extension_point(&self.profile_name, "PreBind", code, start.elapsed());
        s
    }

    /// Bind as a future, when the profile has a single Bind plugin and it can bind without a
    /// thread ([`BindPlugin::bind_async`]); `None` otherwise (use [`run_bind`](Self::run_bind)).
    /// Nothing runs until [`complete_bind`](Self::complete_bind) awaits it.
    pub fn bind_future(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Option<BindInFlight> {
        let [plugin] = self.bind.as_slice() else {
            return None;
        };
        let future = plugin.bind_async(state, pod, node)?;
        Some(BindInFlight {
            plugin: Arc::clone(plugin),
            record: state.record_plugin_metrics,
            future,
        })
    }

    /// Awaits a [`bind_future`](Self::bind_future) and reports it as [`run_bind`](Self::run_bind)
    /// reports the same plugin's run: the Bind extension point's duration, the plugin's on
    /// sampled attempts, and the same status.
    pub async fn complete_bind(&self, bind: BindInFlight) -> Status {
        let BindInFlight {
            plugin,
            record,
            future,
        } = bind;
        let start = Instant::now();
        let s = future.await;
        let elapsed = start.elapsed();
        if record {
            self.observer.plugin("Bind", plugin.name(), s.code(), elapsed);
        }
        let (s, code) = if s.is_skip() {
            (Status::skip(), Code::Skip)
        } else if s.is_success() {
            (s, Code::Success)
        } else {
            let s = s.with_plugin(plugin.name());
            if s.is_rejected() {
                let code = s.code();
                (s, code)
            } else {
                (
                    s.wrap_error(format!("running Bind plugin {:?}", plugin.name())),
                    Code::Error,
                )
            }
        };
        self.observer
            .extension_point(&self.profile_name, "Bind", code, elapsed);
        s
    }

    /// PostBind.
    pub fn run_post_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) {
        self.timed("PostBind", || {
            for p in &self.post_bind {
                self.plugin_timed(
                    state.record_plugin_metrics,
                    "PostBind",
                    p.name(),
                    || p.post_bind(state, pod, node),
                    |()| Code::Success,
                );
            }
            ((), Code::Success)
        });
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{Node, Pod};
    use parking_lot::Mutex;

    use super::*;

    /// A Filter plugin that takes `pause` on every node.
    struct Pausing {
        name: &'static str,
        pause: Duration,
    }
    impl Plugin for Pausing {
        fn name(&self) -> &str {
            self.name
        }
        crate::serves!(as_filter);
    }
    impl FilterPlugin for Pausing {
        fn filter(&self, _: &CycleState, _: &PodInfo, _: &NodeInfo) -> Status {
            std::thread::sleep(self.pause);
            Status::success()
        }
    }

    /// First in, first out, and binds nowhere (a profile needs a QueueSort and a Bind plugin).
    struct Fifo;
    impl Plugin for Fifo {
        fn name(&self) -> &str {
            "Fifo"
        }
        crate::serves!(as_queue_sort, as_bind);
    }
    impl BindPlugin for Fifo {
        fn bind(&self, _: &CycleState, _: &PodInfo, _: &str) -> Status {
            Status::success()
        }
    }
    impl QueueSortPlugin for Fifo {
        fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
            a.timestamp < b.timestamp
        }
    }

    struct Registry(BTreeMap<String, Arc<dyn Plugin>>);
    impl PluginRegistry for Registry {
        fn contains(&self, name: &str) -> bool {
            self.0.contains_key(name)
        }
        fn build(&self, name: &str, _: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
            self.0
                .get(name)
                .cloned()
                .ok_or_else(|| format!("no plugin {name}"))
        }
    }

    /// A framework running exactly `plugins` (multi-point, everything else disabled), reporting
    /// to `observer`.
    fn framework_of(plugins: Vec<Arc<dyn Plugin>>, observer: Arc<dyn FrameworkObserver>) -> Framework {
        let profile = KubeSchedulerProfile::with_only_plugins(plugins.iter().map(|p| p.name().to_string()));
        let registry = Registry(plugins.into_iter().map(|p| (p.name().to_string(), p)).collect());
        match Framework::new(&profile, &registry) {
            Ok(f) => f.with_observer(observer),
            Err(e) => panic!("framework: {e}"),
        }
    }

    /// Every duration a sampled Filter run reported, per plugin.
    #[derive(Default)]
    struct Durations(Mutex<BTreeMap<String, Vec<Duration>>>);
    impl FrameworkObserver for Arc<Durations> {
        fn plugin(&self, _point: &'static str, plugin: &str, _status: Code, elapsed: Duration) {
            self.0.lock().entry(plugin.to_string()).or_default().push(elapsed);
        }
    }

    /// A node's plugins share clock readings, each starting where the previous one ended: the
    /// plugin after a slow one is not charged the slow one's time, and every plugin and node is
    /// still timed once.
    #[test]
    fn chained_plugin_timings_charge_each_plugin_its_own_time() {
        let slow = Duration::from_millis(150);
        let plugins: Vec<Arc<dyn Plugin>> = vec![
            Arc::new(Fifo),
            Arc::new(Pausing {
                name: "Slow",
                pause: slow,
            }),
            Arc::new(Pausing {
                name: "Quick",
                pause: Duration::ZERO,
            }),
        ];
        let durations = Arc::new(Durations::default());
        let fwk = framework_of(plugins, Arc::new(Arc::clone(&durations)));
        let mut state = CycleState::new();
        state.record_plugin_metrics = true;
        let pod = PodInfo::new(Pod::default());
        let nodes: Vec<NodeInfo> = ["a", "b"]
            .iter()
            .map(|name| {
                let mut node = Node::default();
                node.metadata.name = Some(name.to_string());
                NodeInfo::new(Arc::new(node))
            })
            .collect();
        let chain = fwk.filter_chain(&state);
        let mut batch = chain.timing_batch();
        for (i, node) in nodes.iter().enumerate() {
            if i > 0 {
                // Work between two nodes belongs to no plugin.
                std::thread::sleep(slow);
            }
            let s = fwk.run_filter_chain_in(&chain, &mut batch, &state, &pod, node);
            assert!(s.is_success(), "{s:?}");
        }
        drop(batch);
        let durations = durations.0.lock().clone();
        let slow_runs = &durations["Slow"];
        let quick_runs = &durations["Quick"];
        assert_eq!((slow_runs.len(), quick_runs.len()), (2, 2), "{durations:?}");
        assert!(slow_runs.iter().all(|d| *d >= slow), "{durations:?}");
        // With a shared start (or the previous plugin's start) the quick plugin would be charged
        // at least the slow one's pause.
        assert!(quick_runs.iter().all(|d| *d < slow), "{durations:?}");
        // The second node's first plugin starts on its own reading, not at the first node's
        // last one: it is not charged the pause between the nodes.
        assert!(slow_runs[1] < slow * 2, "{durations:?}");
    }

    /// A Score plugin that scores each node by a function of its name and fails on the named
    /// nodes.
    struct Scripted {
        name: &'static str,
        fails_on: &'static [&'static str],
    }
    impl Plugin for Scripted {
        fn name(&self) -> &str {
            self.name
        }
        crate::serves!(as_score);
    }
    impl ScorePlugin for Scripted {
        fn score(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
            if self.fails_on.contains(&node.name()) {
                return Err(Status::error(format!("{} broke on {}", self.name, node.name())));
            }
            let seed = self.name.len() as i64 * 7;
            Ok(node.name().bytes().map(i64::from).sum::<i64>() * seed % 101)
        }
    }

    /// Attempts that time each plugin call score node by node; the others plugin by plugin
    /// (`ScorePlugin::score_nodes`). Both must give the same table, and on failures the same
    /// error: the first failing node's first failing plugin, as a node-by-node run meets it.
    #[test]
    fn scoring_plugin_by_plugin_matches_scoring_node_by_node() {
        let cases: [(
            &str,
            &'static [&'static str],
            &'static [&'static str],
            Option<&str>,
        ); 4] = [
            ("no failure", &[], &[], None),
            (
                "the later plugin fails on an earlier node",
                &["n4"],
                &["n2"],
                Some("Second broke on n2"),
            ),
            (
                "both fail on one node: the first plugin",
                &["n3"],
                &["n3"],
                Some("First broke on n3"),
            ),
            (
                "only the first plugin fails",
                &["n1", "n5"],
                &[],
                Some("First broke on n1"),
            ),
        ];
        let nodes: Vec<Arc<NodeInfo>> = (0..8)
            .map(|i| {
                let mut node = Node::default();
                node.metadata.name = Some(format!("n{i}"));
                Arc::new(NodeInfo::new(Arc::new(node)))
            })
            .collect();
        let pod = PodInfo::new(Pod::default());
        for (name, first_fails, second_fails, want_error) in cases {
            let plugins: Vec<Arc<dyn Plugin>> = vec![
                Arc::new(Fifo),
                Arc::new(Scripted {
                    name: "First",
                    fails_on: first_fails,
                }),
                Arc::new(Scripted {
                    name: "Second",
                    fails_on: second_fails,
                }),
            ];
            let fwk = framework_of(plugins, Arc::new(Arc::new(Durations::default())));
            let run = |timed: bool| {
                let mut state = CycleState::new();
                state.record_plugin_metrics = timed;
                crate::SchedulingAlgorithm::new(1, None, 1).prioritize_nodes(&fwk, &mut state, &pod, &nodes)
            };
            let (node_by_node, plugin_by_plugin) = (run(true), run(false));
            match want_error {
                None => {
                    let table = plugin_by_plugin.unwrap_or_else(|s| panic!("{name}: {s:?}"));
                    assert_eq!(Ok(&table), node_by_node.as_ref(), "{name}");
                    assert_eq!(table.plugins, ["First", "Second"], "{name}");
                    assert!(
                        table.totals.iter().any(|&t| t != table.totals[0]),
                        "{name}: scores vary"
                    );
                }
                Some(want) => {
                    let (a, b) = (node_by_node.unwrap_err(), plugin_by_plugin.unwrap_err());
                    assert_eq!(a.to_string(), b.to_string(), "{name}");
                    assert!(b.to_string().contains(want), "{name}: {b}");
                }
            }
        }
    }

    /// Orders pods first in, first out, and nothing else.
    struct SortOnly;
    impl Plugin for SortOnly {
        fn name(&self) -> &str {
            "SortOnly"
        }
        crate::serves!(as_queue_sort);
    }
    impl QueueSortPlugin for SortOnly {
        fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
            a.timestamp < b.timestamp
        }
    }

    /// PreBind and Bind that end with `outcome`, synchronously or as futures.
    struct Writes {
        outcome: Status,
    }
    impl Plugin for Writes {
        fn name(&self) -> &str {
            "Writes"
        }
        crate::serves!(as_pre_bind, as_bind);
    }
    impl PreBindPlugin for Writes {
        fn pre_bind(&self, _: &mut CycleState, _: &PodInfo, _: &str) -> Status {
            self.outcome.clone()
        }
        fn pre_bind_async(&self, _: &CycleState, _: &PodInfo, _: &str) -> Option<StatusFuture> {
            Some(Box::pin(std::future::ready(self.outcome.clone())))
        }
    }
    impl BindPlugin for Writes {
        fn bind(&self, _: &CycleState, _: &PodInfo, _: &str) -> Status {
            self.outcome.clone()
        }
        fn bind_async(&self, _: &CycleState, _: &PodInfo, _: &str) -> Option<StatusFuture> {
            Some(Box::pin(std::future::ready(self.outcome.clone())))
        }
    }

    /// Every extension point reported, with its code, and every plugin run timed.
    #[derive(Default)]
    struct Reports(Mutex<Vec<(String, Code)>>);
    impl FrameworkObserver for Arc<Reports> {
        fn extension_point(&self, _profile: &str, point: &'static str, status: Code, _elapsed: Duration) {
            self.0.lock().push((point.to_string(), status));
        }
        fn plugin(&self, point: &'static str, plugin: &str, status: Code, _elapsed: Duration) {
            self.0.lock().push((format!("{point}/{plugin}"), status));
        }
    }

    /// Runs a future that never waits.
    fn run_ready<T>(future: impl std::future::Future<Output = T>) -> T {
        let mut future = std::pin::pin!(future);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match future.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(out) => out,
            std::task::Poll::Pending => panic!("the test plugins never wait"),
        }
    }

    /// PreBind and Bind awaited as futures return and report what the synchronous runs do: the
    /// same statuses (plugin named, errors wrapped) and the same extension-point and plugin codes.
    #[test]
    fn write_futures_report_as_the_synchronous_runs_do() {
        for outcome in [
            Status::success(),
            Status::error("the API server said no"),
            Status::unschedulable("the claim is gone"),
        ] {
            let plugins: Vec<Arc<dyn Plugin>> = vec![
                Arc::new(SortOnly),
                Arc::new(Writes {
                    outcome: outcome.clone(),
                }),
            ];
            let run = |as_futures: bool| {
                let reports = Arc::new(Reports::default());
                let fwk = framework_of(plugins.clone(), Arc::new(Arc::clone(&reports)));
                let mut state = CycleState::new();
                state.record_plugin_metrics = true;
                let pod = PodInfo::new(Pod::default());
                let (pre_bind, bind) = if as_futures {
                    let pre_bind = fwk
                        .pre_bind_future(&state, &pod, "n")
                        .map(|f| run_ready(fwk.complete_pre_bind(f)));
                    let bind = fwk
                        .bind_future(&state, &pod, "n")
                        .map(|f| run_ready(fwk.complete_bind(f)));
                    (pre_bind, bind)
                } else {
                    (
                        Some(fwk.run_pre_bind(&mut state, &pod, "n")),
                        Some(fwk.run_bind(&state, &pod, "n")),
                    )
                };
                let reports = reports.0.lock().clone();
                (pre_bind, bind, reports)
            };
            let synchronous = run(false);
            assert_eq!(synchronous, run(true), "{outcome:?}");
            assert!(
                synchronous.0.is_some_and(|s| s.code() == outcome.code()),
                "{outcome:?}"
            );
        }
    }
}
