//! `Framework`: one profile's plugins, in order, per extension point.
//!
//! Building a profile (`build`: configuration to plugin lists, once) and running it (`run`:
//! the extension points, once or many times per pod) live apart; `timing` is how runs are
//! measured. This module holds what both share: the plugin lists themselves and the read-only
//! view of them that the scheduler, the queue and `/configz` use.

mod build;
mod run;
mod timing;

use std::{collections::BTreeMap, sync::Arc};

pub use build::{FrameworkError, PluginBuildError, PluginRegistry};
pub use run::{BindInFlight, FilterChain, NodePluginScores, PreBindInFlight, ScoreTable, WeightedScore};
pub use timing::{DurationRecorder, FrameworkObserver, PluginTiming, TimingBatch};

use crate::{
    AssumedPodPlugin, BindPlugin, ClusterEventWithHint, FilterPlugin, PermitPlugin, PlacementFeasiblePlugin,
    PlacementGeneratePlugin, PlacementScorePlugin, Plugin, PodGroupPostFilterPlugin, PostBindPlugin,
    PostFilterPlugin, PreBindPlugin, PreEnqueuePlugin, PreFilterPlugin, PreScorePlugin, QueueSortPlugin,
    ReservePlugin, permit::WaitingPods,
};

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
    placement_generate: Vec<Arc<dyn PlacementGeneratePlugin>>,
    placement_score: Vec<(Arc<dyn PlacementScorePlugin>, i64)>,
    placement_feasible: Vec<Arc<dyn PlacementFeasiblePlugin>>,
    pod_group_post_filter: Vec<Arc<dyn PodGroupPostFilterPlugin>>,
    assumed_pod: Vec<Arc<dyn AssumedPodPlugin>>,
    events: Vec<(String, Vec<ClusterEventWithHint>)>,
    waiting_pods: WaitingPods,
    observer: Arc<dyn FrameworkObserver>,
    /// The scheduler's extenders (the same for every profile, as upstream).
    extenders: crate::extender::Extenders,
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

impl Framework {
    /// Sets the observer that receives timings.
    #[must_use]
    pub fn with_observer(mut self, observer: Arc<dyn FrameworkObserver>) -> Self {
        self.observer = observer;
        self
    }

    /// The observer that receives timings and task counts.
    pub fn observer(&self) -> &dyn FrameworkObserver {
        self.observer.as_ref()
    }

    /// Sets the extenders the scheduling and binding cycles call.
    #[must_use]
    pub fn with_extenders(mut self, extenders: crate::extender::Extenders) -> Self {
        // Extenders register no events, and a pod they rejected is marked as rejected by
        // `EXTENDER_NAME`: as upstream, any cluster event may make it schedulable again.
        let name = crate::extender::EXTENDER_NAME;
        self.events.retain(|(plugin, _)| plugin != name);
        if !extenders.is_empty() {
            let every_event = crate::ClusterEventWithHint {
                event: crate::ClusterEvent::new(crate::EventResource::Wildcard, crate::ActionType::ALL, "*"),
                hint: None,
                narrowing: None,
            };
            self.events.push((name.to_string(), vec![every_event]));
        }
        self.extenders = extenders;
        self
    }

    /// The extenders, in call order.
    pub fn extenders(&self) -> &crate::extender::Extenders {
        &self.extenders
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
        if !self.placement_generate.is_empty() {
            m.insert("placementGenerate", names(&self.placement_generate));
        }
        if !self.pod_group_post_filter.is_empty() {
            m.insert("podGroupPostFilter", names(&self.pod_group_post_filter));
        }
        if !self.placement_score.is_empty() {
            m.insert(
                "placementScore",
                self.placement_score
                    .iter()
                    .map(|(p, w)| format!("{}={w}", p.name()))
                    .collect(),
            );
        }
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
}
