//! Tiny plugins and helpers for queue tests.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use k8s_openapi::{
    api::core::v1::{Node, Pod, PodSchedulingGate, PodSpec, PodStatus},
    serde_json,
};
use unisched_framework::{
    BindPlugin, ClusterEvent, ClusterEventWithHint, CycleState, EnqueueExtensions, EventObject, FilterPlugin,
    Framework, NodeInfo, Plugin, PluginRegistry, PodInfo, PreEnqueuePlugin, QueueSortPlugin, QueuedPodInfo,
    QueueingHint, SchedulingFailure, Status, config::KubeSchedulerProfile,
};

use crate::{QueueConfig, Requeued, SchedulingQueue, testing::FakeClock};

/// PrioritySort semantics: priority descending, then queue timestamp ascending.
pub struct Sort;
impl Plugin for Sort {
    fn name(&self) -> &str {
        "Sort"
    }
    unisched_framework::serves!(as_queue_sort);
}
impl QueueSortPlugin for Sort {
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        a.pod_info.priority > b.pod_info.priority
            || (a.pod_info.priority == b.pod_info.priority && a.timestamp < b.timestamp)
    }
}

/// Another sort, to test the "one QueueSort" rule.
pub struct OtherSort;
impl Plugin for OtherSort {
    fn name(&self) -> &str {
        "OtherSort"
    }
    unisched_framework::serves!(as_queue_sort);
}
impl QueueSortPlugin for OtherSort {
    fn less(&self, _: &QueuedPodInfo, _: &QueuedPodInfo) -> bool {
        false
    }
}

pub struct Bind;
impl Plugin for Bind {
    fn name(&self) -> &str {
        "Bind"
    }
    unisched_framework::serves!(as_bind);
}
impl BindPlugin for Bind {
    fn bind(&self, _: &CycleState, _: &PodInfo, _: &str) -> Status {
        Status::success()
    }
}

/// A Filter plugin that registers the given events (it never runs Filter in these tests).
pub struct Fake {
    pub name: String,
    pub events: Vec<ClusterEventWithHint>,
}
impl Plugin for Fake {
    fn name(&self) -> &str {
        &self.name
    }
    unisched_framework::serves!(as_filter, as_enqueue_extensions);
}
impl FilterPlugin for Fake {
    fn filter(&self, _: &CycleState, _: &PodInfo, _: &NodeInfo) -> Status {
        Status::success()
    }
}
impl EnqueueExtensions for Fake {
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        self.events.clone()
    }
}

/// A Filter plugin without `EnqueueExtensions`.
pub struct NoExtensions(pub &'static str);
impl Plugin for NoExtensions {
    fn name(&self) -> &str {
        self.0
    }
    unisched_framework::serves!(as_filter);
}
impl FilterPlugin for NoExtensions {
    fn filter(&self, _: &CycleState, _: &PodInfo, _: &NodeInfo) -> Status {
        Status::success()
    }
}

/// A PreEnqueue plugin that refuses pods carrying `spec.schedulingGates` (when `by_gates`) or the
/// label `needs=<name>`; it opts out of telling the user about pods labelled `quiet`.
pub struct Gate {
    pub name: &'static str,
    pub by_gates: bool,
    pub events: Vec<ClusterEventWithHint>,
}
impl Plugin for Gate {
    fn name(&self) -> &str {
        self.name
    }
    unisched_framework::serves!(as_pre_enqueue, as_enqueue_extensions);
}
impl PreEnqueuePlugin for Gate {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        let gated = self.by_gates
            && pod
                .pod
                .spec
                .as_ref()
                .and_then(|s| s.scheduling_gates.as_ref())
                .is_some_and(|g| !g.is_empty());
        let labeled = pod
            .pod
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.get("needs").is_some_and(|v| v == self.name));
        if gated || labeled {
            Status::unresolvable(format!("gated by {}", self.name))
        } else {
            Status::success()
        }
    }

    fn rejection_message(&self, pod: &PodInfo, status: &Status) -> Option<String> {
        let quiet = pod
            .pod
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key("quiet"));
        (!quiet).then(|| status.message())
    }
}
impl EnqueueExtensions for Gate {
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        self.events.clone()
    }
}

struct Registry(BTreeMap<String, Arc<dyn Plugin>>);
impl PluginRegistry for Registry {
    fn contains(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }
    fn build(
        &self,
        name: &str,
        _: &serde_json::Value,
    ) -> Result<Arc<dyn Plugin>, unisched_framework::PluginBuildError> {
        self.0
            .get(name)
            .cloned()
            .ok_or_else(|| format!("no plugin {name}").into())
    }
}

/// A framework for profile `name` with `Sort`, `Bind` and the given plugins.
pub fn framework_named(name: &str, plugins: Vec<Arc<dyn Plugin>>) -> Arc<Framework> {
    let mut all: Vec<Arc<dyn Plugin>> = vec![Arc::new(Sort), Arc::new(Bind)];
    all.extend(plugins);
    framework_exact(name, all)
}

/// A framework with exactly these plugins.
pub fn framework_exact(name: &str, plugins: Vec<Arc<dyn Plugin>>) -> Arc<Framework> {
    let profile = KubeSchedulerProfile {
        scheduler_name: Some(name.to_string()),
        ..KubeSchedulerProfile::with_only_plugins(plugins.iter().map(|p| p.name().to_string()))
    };
    let registry = Registry(plugins.into_iter().map(|p| (p.name().to_string(), p)).collect());
    match Framework::new(&profile, &registry) {
        Ok(f) => Arc::new(f),
        Err(e) => panic!("framework: {e}"),
    }
}

pub fn framework(plugins: Vec<Arc<dyn Plugin>>) -> Arc<Framework> {
    framework_named("unisched", plugins)
}

/// A queue with the default backoffs and the given config tweak.
pub fn queue_with(
    plugins: Vec<Arc<dyn Plugin>>,
    tweak: impl FnOnce(crate::QueueConfigBuilder) -> crate::QueueConfigBuilder,
) -> (SchedulingQueue, Arc<FakeClock>) {
    let clock = Arc::new(FakeClock::new());
    let config = tweak(QueueConfig::builder().clock(clock.clone())).build();
    match SchedulingQueue::new(vec![framework(plugins)], config) {
        Ok(q) => (q, clock),
        Err(e) => panic!("queue: {e}"),
    }
}

pub fn queue(plugins: Vec<Arc<dyn Plugin>>) -> (SchedulingQueue, Arc<FakeClock>) {
    queue_with(plugins, |b| b)
}

pub fn fake(name: &str, events: Vec<ClusterEventWithHint>) -> Arc<dyn Plugin> {
    Arc::new(Fake {
        name: name.into(),
        events,
    })
}

pub fn ev(e: ClusterEvent) -> ClusterEventWithHint {
    ClusterEventWithHint::new(e)
}

/// An event whose hint says Queue only for nodes labelled `fits=true`.
pub fn node_hint(e: ClusterEvent) -> ClusterEventWithHint {
    ClusterEventWithHint::with_hint(e, |_, _, new| match new {
        Some(EventObject::Node(n)) => {
            let fits = n
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.get("fits").is_some_and(|v| v == "true"));
            Ok(if fits {
                QueueingHint::Queue
            } else {
                QueueingHint::Skip
            })
        }
        _ => Ok(QueueingHint::Skip),
    })
}

pub fn node(name: &str, fits: bool) -> Option<EventObject> {
    let mut n = Node::default();
    n.metadata.name = Some(name.into());
    if fits {
        n.metadata.labels = Some([("fits".to_string(), "true".to_string())].into());
    }
    Some(EventObject::Node(Arc::new(n)))
}

pub fn raw_pod(name: &str, priority: i32) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = Some(name.into());
    p.metadata.namespace = Some("default".into());
    p.metadata.uid = Some(format!("uid-{name}"));
    p.spec = Some(PodSpec {
        scheduler_name: Some("unisched".into()),
        priority: Some(priority),
        ..Default::default()
    });
    p
}

pub fn pod(name: &str, priority: i32) -> Arc<PodInfo> {
    Arc::new(PodInfo::new(raw_pod(name, priority)))
}

pub fn with(pod: &PodInfo, f: impl FnOnce(&mut Pod)) -> Arc<PodInfo> {
    let mut p = (*pod.pod).clone();
    f(&mut p);
    Arc::new(PodInfo::new(p))
}

pub fn gated_pod(name: &str) -> Arc<PodInfo> {
    with(&pod(name, 0), |p| {
        if let Some(s) = p.spec.as_mut() {
            s.scheduling_gates = Some(vec![PodSchedulingGate {
                name: "example.com/gate".into(),
            }]);
        }
    })
}

pub fn labeled(pod: &PodInfo, key: &str, value: &str) -> Arc<PodInfo> {
    with(pod, |p| {
        p.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(key.into(), value.into());
    })
}

pub fn nominated_in_status(pod: &PodInfo, node: &str) -> Arc<PodInfo> {
    with(pod, |p| {
        p.status = Some(PodStatus {
            nominated_node_name: Some(node.into()),
            ..Default::default()
        })
    })
}

pub fn uid(name: &str) -> String {
    format!("uid-{name}")
}

/// Pops the pod with this name (it must be next).
pub fn pop_named(q: &SchedulingQueue, name: &str) -> QueuedPodInfo {
    match q.try_pop() {
        Some(p) if p.pod_info.name == name => p,
        other => panic!(
            "expected {name}, popped {:?}",
            other.map(|p| p.pod_info.name.clone())
        ),
    }
}

/// Requeues a popped pod as rejected by `unschedulable` / `pending` (both empty: an error).
pub fn fail(
    q: &SchedulingQueue,
    mut qpi: QueuedPodInfo,
    unschedulable: &[&str],
    pending: &[&str],
) -> Requeued {
    qpi.unschedulable_plugins = unschedulable.iter().map(|s| (*s).to_string()).collect();
    qpi.pending_plugins = pending.iter().map(|s| (*s).to_string()).collect();
    match q.add_unschedulable_if_not_present(qpi, q.scheduling_cycle()) {
        Ok(r) => r,
        Err(e) => panic!("requeue: {e}"),
    }
}

/// A failure as the scheduling cycle reports it.
pub fn failure(pod: Arc<PodInfo>, unschedulable: &[&str], nominated: Option<&str>) -> SchedulingFailure {
    SchedulingFailure {
        pod,
        status: Status::unschedulable("no"),
        fit_error: None,
        reason: "Unschedulable",
        message: "0/1 nodes are available: no.".into(),
        unschedulable_plugins: unschedulable.iter().map(|s| (*s).to_string()).collect(),
        pending_plugins: Default::default(),
        nominated_node: nominated.map(str::to_string),
        released_assumed: false,
    }
}

pub const SEC: Duration = Duration::from_secs(1);
