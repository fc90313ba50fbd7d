//! Fakes shared by the framework's tests: a minimal profile's QueueSort and Bind plugin, a
//! registry of given plugins, and an observer that keeps plugin durations.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use parking_lot::Mutex;

use crate::{
    BindPlugin, Code, CycleState, Framework, FrameworkObserver, Plugin, PluginBuildError, PluginRegistry,
    PodInfo, QueueSortPlugin, QueuedPodInfo, Status, config::KubeSchedulerProfile,
};

/// First in, first out, and binds nowhere (a profile needs a QueueSort and a Bind plugin).
pub(crate) struct Fifo;
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
    fn build(&self, name: &str, _: &serde_json::Value) -> Result<Arc<dyn Plugin>, PluginBuildError> {
        self.0
            .get(name)
            .cloned()
            .ok_or_else(|| format!("no plugin {name}").into())
    }
}

/// A framework running exactly `plugins` (multi-point, everything else disabled), reporting
/// to `observer`.
pub(crate) fn framework_of(plugins: Vec<Arc<dyn Plugin>>, observer: Arc<dyn FrameworkObserver>) -> Framework {
    let profile = KubeSchedulerProfile::with_only_plugins(plugins.iter().map(|p| p.name().to_string()));
    let registry = Registry(plugins.into_iter().map(|p| (p.name().to_string(), p)).collect());
    match Framework::new(&profile, &registry) {
        Ok(f) => f.with_observer(observer),
        Err(e) => panic!("framework: {e}"),
    }
}

/// Every duration a sampled Filter run reported, per plugin.
#[derive(Default)]
pub(crate) struct Durations(pub(crate) Mutex<BTreeMap<String, Vec<Duration>>>);
impl FrameworkObserver for Arc<Durations> {
    fn plugin(&self, _point: &'static str, plugin: &str, _status: Code, elapsed: Duration) {
        self.0.lock().entry(plugin.to_string()).or_default().push(elapsed);
    }
}

/// An observer that keeps nothing.
pub(crate) struct Unobserved;
impl FrameworkObserver for Unobserved {}
