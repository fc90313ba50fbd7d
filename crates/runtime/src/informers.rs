//! Watches feeding the cache and the queue.
//!
//! One watch per kind, each with kube-runtime's watcher (list, then watch from the list's
//! resourceVersion; relist on 410; exponential backoff on errors). After a relist, objects that
//! were not re-listed are treated as deleted, so a missed delete during a disconnect cannot leave a
//! ghost pod holding resources. `synced` flips once every watch has finished its first list; the
//! scheduler does not pop a pod before that (`/readyz` reports it).

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, watcher},
};
use parking_lot::Mutex;
use unisched_cache::Cache;
use unisched_framework::{
    ActionType, ClusterEvent, EventObject, EventResource, PodGroupKey, PodGroupStore, PodInfo, well_known,
};
use unisched_queue::SchedulingQueue;

use crate::lean::Lean;

/// What a watch can carry: an API object the watcher decodes and the handlers share across
/// tasks (the bounds every watched kind needs, written once).
pub trait WatchedObject:
    kube::Resource<DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> WatchedObject for K where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// Applies watch events for one kind.
pub trait Handler: Send + Sync + 'static {
    /// The object type.
    type Obj: Clone + Send + Sync + 'static;
    /// The object's identity (UID for pods, name for nodes).
    fn key(obj: &Self::Obj) -> String;
    /// Added or modified.
    fn apply(&self, obj: Self::Obj);
    /// Deleted (by key; the handler remembers the last object).
    fn delete(&self, key: &str);
    /// Keys currently known.
    fn known_keys(&self) -> Vec<String>;
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Pods: assigned ones feed the cache, unassigned ones for our profiles feed the queue.
pub struct PodHandler {
    cache: Arc<Cache>,
    queue: Arc<SchedulingQueue>,
    known: Mutex<HashMap<String, Arc<PodInfo>>>,
    /// Group membership, kept before the queue sees the pod (its PreEnqueue counts members).
    groups: Option<Arc<PodGroupStore>>,
    /// Told each time a bound pod leaves the cache (preemptions wait for their victims to go).
    bound_pod_left: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl PodHandler {
    /// A handler over the cache and queue.
    pub fn new(cache: Arc<Cache>, queue: Arc<SchedulingQueue>) -> Self {
        PodHandler {
            cache,
            queue,
            known: Mutex::new(HashMap::new()),
            groups: None,
            bound_pod_left: None,
        }
    }

    /// Also calls `left` each time a bound pod leaves the cache.
    #[must_use]
    pub fn on_bound_pod_left(mut self, left: Arc<dyn Fn() + Send + Sync>) -> Self {
        self.bound_pod_left = Some(left);
        self
    }

    /// Also records each pod's PodGroup membership in `groups`.
    #[must_use]
    pub fn with_pod_groups(mut self, groups: Option<Arc<PodGroupStore>>) -> Self {
        self.groups = groups;
        self
    }

    /// A pod that names a group was added: the group's gated members may now have their quorum
    /// (upstream offers every such add to the waiting pods).
    fn offer_group_member(&self, pod: &Arc<PodInfo>, event: ClusterEvent) {
        if self.groups.is_some() && PodGroupKey::of_pod(&pod.pod).is_some() {
            self.queue
                .move_all_to_active_or_backoff(event, None, Some(EventObject::Pod(pod.clone())));
        }
    }

    /// The last object seen for a pod UID.
    pub fn get(&self, uid: &str) -> Option<Arc<PodInfo>> {
        self.known.lock().get(uid).cloned()
    }

    fn release(&self, old: &Arc<PodInfo>) {
        if let Err(e) = self.cache.remove_pod(old) {
            tracing::debug!(pod = %old.key(), error = %e, "removing pod from cache");
        }
        if let Some(left) = &self.bound_pod_left {
            left();
        }
        self.queue.move_all_to_active_or_backoff(
            well_known::ASSIGNED_POD_DELETE,
            Some(EventObject::Pod(old.clone())),
            None,
        );
    }
}

impl Handler for PodHandler {
    type Obj = Pod;

    fn key(obj: &Pod) -> String {
        PodInfo::uid_of(obj)
    }

    fn apply(&self, pod: Pod) {
        // A bound pod is kept lean: its containers were summed into the derived requests and
        // host ports, and at 150,000 bound pods they would be half of the process's memory.
        let new = Arc::new(PodInfo::watched(pod));
        if let Some(groups) = &self.groups {
            groups.observe_pod(&new.pod);
        }
        let old = self.known.lock().insert(new.uid.clone(), new.clone());
        let terminal = is_terminal(&new.pod);
        let old_assigned = old.as_ref().is_some_and(|o| o.node_name().is_some());
        match (new.node_name().is_some(), terminal) {
            (true, false) => {
                if old_assigned {
                    if let Some(old) = &old {
                        if let Err(e) = self.cache.update_pod(old, new.clone()) {
                            tracing::warn!(pod = %new.key(), error = %e, "updating pod in cache");
                        }
                        self.queue.assigned_pod_updated(old, &new);
                    }
                } else {
                    if let Some(old) = &old {
                        // Was pending: the queue drops it now that it has a node.
                        self.queue.update(Some(old), new.clone());
                    }
                    if let Err(e) = self.cache.add_pod(new.clone()) {
                        tracing::warn!(pod = %new.key(), error = %e, "adding pod to cache");
                    }
                    self.queue.assigned_pod_added(&new);
                    self.offer_group_member(&new, well_known::ASSIGNED_POD_ADD);
                }
            }
            (true, true) => {
                if old_assigned && let Some(old) = &old {
                    self.release(old);
                }
            }
            (false, false) => match &old {
                None => {
                    self.queue.add(new.clone());
                    self.offer_group_member(&new, well_known::UNSCHEDULED_POD_ADD);
                }
                // An assumed pod's updates wait for its binding to be seen, as upstream's do:
                // where it goes is decided, and the echo of its binding cycle's own nomination
                // would otherwise be an event for every pod in flight. A deletion that starts
                // meanwhile still reaches the queue.
                Some(old)
                    if self.cache.is_assumed(&new.uid)
                        && old.pod.metadata.deletion_timestamp == new.pod.metadata.deletion_timestamp => {}
                Some(old) => {
                    let left_nomination = old
                        .nominated_node_name()
                        .is_some_and(|n| new.nominated_node_name() != Some(n));
                    self.queue.update(Some(old), new);
                    if left_nomination {
                        // Pods of lower or equal priority counted it on its old node.
                        self.queue.nomination_left(old);
                    }
                }
            },
            (false, true) if new.nominated_node_name().is_some() => {
                self.queue.nominated_pod_deleted(&new);
            }
            (false, true) => self.queue.delete(&new),
        }
    }

    fn delete(&self, key: &str) {
        let Some(old) = self.known.lock().remove(key) else {
            return;
        };
        if let Some(groups) = &self.groups {
            groups.forget_pod(&old.pod);
        }
        if old.node_name().is_some() {
            if !is_terminal(&old.pod) {
                self.release(&old);
            }
        } else if old.nominated_node_name().is_some() {
            // Pods of lower or equal priority counted it on its nominated node.
            self.queue.nominated_pod_deleted(&old);
        } else {
            self.queue.delete(&old);
        }
    }

    fn known_keys(&self) -> Vec<String> {
        self.known.lock().keys().cloned().collect()
    }
}

/// Nodes feed the cache; their changes can make waiting pods schedulable.
pub struct NodeHandler {
    cache: Arc<Cache>,
    queue: Arc<SchedulingQueue>,
    known: Mutex<HashMap<String, Arc<Node>>>,
}

impl NodeHandler {
    /// A handler over the cache and queue.
    pub fn new(cache: Arc<Cache>, queue: Arc<SchedulingQueue>) -> Self {
        NodeHandler {
            cache,
            queue,
            known: Mutex::new(HashMap::new()),
        }
    }
}

/// The specific update events a node change contains (most specific first), as upstream.
pub fn node_scheduling_properties_change(old: &Node, new: &Node) -> Vec<ClusterEvent> {
    let mut out = Vec::new();
    let spec = |n: &Node| n.spec.clone().unwrap_or_default();
    let status = |n: &Node| n.status.clone().unwrap_or_default();
    let (os, ns) = (spec(old), spec(new));
    // A node made schedulable again counts as a taint change (it can only help); cordoning it
    // does not, as upstream (the unschedulable taint that follows is a change of its own).
    let uncordoned = os.unschedulable.unwrap_or(false) && !ns.unschedulable.unwrap_or(false);
    if uncordoned || os.taints != ns.taints {
        out.push(ClusterEvent::new(
            EventResource::Node,
            ActionType::UPDATE_NODE_TAINT,
            "NodeTaintChange",
        ));
    }
    if status(old).allocatable != status(new).allocatable {
        out.push(ClusterEvent::new(
            EventResource::Node,
            ActionType::UPDATE_NODE_ALLOCATABLE,
            "NodeAllocatableChange",
        ));
    }
    if old.metadata.labels != new.metadata.labels {
        out.push(ClusterEvent::new(
            EventResource::Node,
            ActionType::UPDATE_NODE_LABEL,
            "NodeLabelChange",
        ));
    }
    let conds = |n: &Node| {
        status(n)
            .conditions
            .unwrap_or_default()
            .into_iter()
            .map(|c| (c.type_, c.status))
            .collect::<Vec<_>>()
    };
    if conds(old) != conds(new) {
        out.push(ClusterEvent::new(
            EventResource::Node,
            ActionType::UPDATE_NODE_CONDITION,
            "NodeConditionChange",
        ));
    }
    if old.metadata.annotations != new.metadata.annotations {
        out.push(ClusterEvent::new(
            EventResource::Node,
            ActionType::UPDATE_NODE_ANNOTATION,
            "NodeAnnotationChange",
        ));
    }
    // The API server keeps the list sorted and unique, so comparing the lists compares the sets;
    // an absent list and an empty one are the same.
    let declared = |n: &Node| {
        n.status
            .as_ref()
            .and_then(|s| s.declared_features.clone())
            .unwrap_or_default()
    };
    if declared(old) != declared(new) {
        out.push(ClusterEvent::new(
            EventResource::Node,
            ActionType::UPDATE_NODE_DECLARED_FEATURE,
            "NodeDeclaredFeatureChange",
        ));
    }
    out
}

impl Handler for NodeHandler {
    type Obj = Node;

    fn key(obj: &Node) -> String {
        obj.metadata.name.clone().unwrap_or_default()
    }

    fn apply(&self, node: Node) {
        let new = Arc::new(node);
        let name = Self::key(&new);
        let old = self.known.lock().insert(name, new.clone());
        match old {
            None => {
                self.cache.add_node(new.clone());
                self.queue.move_all_to_active_or_backoff(
                    well_known::NODE_ADD,
                    None,
                    Some(EventObject::Node(new)),
                );
            }
            Some(old) => {
                self.cache.update_node(new.clone());
                for ev in node_scheduling_properties_change(&old, &new) {
                    self.queue.move_all_to_active_or_backoff(
                        ev,
                        Some(EventObject::Node(old.clone())),
                        Some(EventObject::Node(new.clone())),
                    );
                }
            }
        }
    }

    fn delete(&self, key: &str) {
        let Some(old) = self.known.lock().remove(key) else {
            return;
        };
        if let Err(e) = self.cache.remove_node(key) {
            tracing::debug!(node = key, error = %e, "removing node from cache");
        }
        self.queue
            .move_all_to_active_or_backoff(well_known::NODE_DELETE, Some(EventObject::Node(old)), None);
    }

    fn known_keys(&self) -> Vec<String> {
        self.known.lock().keys().cloned().collect()
    }
}

/// Runs a watch of every `K` in the cluster forever, applying events to `handler`. `on_synced` is
/// called after the first complete list. Objects are decoded as [`Lean`] (without
/// `managedFields`), so the handlers never hold that field.
pub async fn run_watch<H, K>(
    client: Client,
    config: watcher::Config,
    handler: Arc<H>,
    on_synced: impl Fn() + Send + 'static,
) where
    H: Handler<Obj = K>,
    K: WatchedObject,
{
    let api = Api::<Lean<K>>::all(client);
    let mut stream = watcher(api, config).default_backoff().boxed();
    let mut relist: Option<HashSet<String>> = None;
    let mut synced = false;
    loop {
        match stream.try_next().await {
            Ok(Some(event)) => match event {
                watcher::Event::Init => relist = Some(HashSet::new()),
                watcher::Event::InitApply(Lean(obj)) => {
                    if let Some(seen) = relist.as_mut() {
                        seen.insert(H::key(&obj));
                    }
                    handler.apply(obj);
                }
                watcher::Event::InitDone => {
                    if let Some(seen) = relist.take() {
                        for k in handler.known_keys() {
                            if !seen.contains(&k) {
                                handler.delete(&k);
                            }
                        }
                    }
                    if !synced {
                        synced = true;
                        on_synced();
                    }
                }
                watcher::Event::Apply(Lean(obj)) => handler.apply(obj),
                watcher::Event::Delete(Lean(obj)) => handler.delete(&H::key(&obj)),
            },
            Ok(None) => return,
            Err(e) => tracing::warn!(error = %e, "watch error; retrying with backoff"),
        }
    }
}

#[cfg(test)]
mod tests {
    use unisched_plugins::testing::{NodeBuilder, PodBuilder, in_tree_registry};

    use super::*;

    fn handler() -> (PodHandler, Arc<Cache>) {
        let (registry, _binder) = in_tree_registry();
        let (_, queue) = crate::testing::unisched_profile(&registry);
        let cache = crate::testing::cache_with([NodeBuilder::new("n1")
            .alloc("cpu", "4")
            .alloc("pods", "10")
            .build()]);
        (PodHandler::new(cache.clone(), queue), cache)
    }

    fn web(cpu: &str, node: Option<&str>) -> Pod {
        let b = PodBuilder::new("web")
            .uid("uid-web")
            .scheduler_name("unisched")
            .req("cpu", cpu)
            .host_port(8080);
        match node {
            Some(n) => b.node_name(n).build(),
            None => b.build(),
        }
    }

    fn requested_cpu(cache: &Cache) -> i64 {
        cache.update_snapshot().get("n1").unwrap().requested.milli_cpu
    }

    /// The watch handler keeps a pending pod whole and a bound pod lean, and the bound pod's
    /// requests and ports still reach the node through add, scale-down and delete.
    #[test]
    fn bound_pods_are_kept_lean_and_still_counted() {
        let (h, cache) = handler();
        h.apply(web("2", None));
        let pending = h.get("uid-web").unwrap();
        assert!(!pending.lean);
        assert_eq!(pending.pod.spec.as_ref().unwrap().containers.len(), 1);

        h.apply(web("2", Some("n1")));
        let bound = h.get("uid-web").unwrap();
        assert!(bound.lean);
        assert!(bound.pod.spec.as_ref().unwrap().containers.is_empty());
        let in_cache = cache.get_pod("uid-web").unwrap();
        assert!(Arc::ptr_eq(&in_cache, &bound), "one PodInfo per pod, shared");
        assert_eq!(requested_cpu(&cache), 2000);
        let snapshot = cache.update_snapshot();
        assert_eq!(snapshot.get("n1").unwrap().used_ports.len(), 1);

        h.apply(web("500m", Some("n1")));
        assert_eq!(requested_cpu(&cache), 500, "a scale-down of a lean pod");

        h.delete("uid-web");
        assert_eq!(requested_cpu(&cache), 0);
        assert!(cache.get_pod("uid-web").is_none());
    }

    /// An in-place resize the kubelet reports only in the pod's status (allocated and actuated
    /// amounts) reaches the node through the lean pod's derived requests: the largest of spec and
    /// status counts, and the node is freed once the runtime has applied the smaller size.
    #[test]
    fn in_place_resize_reported_in_the_status_reaches_the_node() {
        use k8s_openapi::api::core::v1::{ContainerStatus, ResourceRequirements};
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

        let resizing = |allocated: &str, actuated: &str| {
            let mut pod = web("500m", Some("n1"));
            let cpu = |v: &str| Some([("cpu".to_string(), Quantity(v.to_string()))].into());
            pod.status.get_or_insert_with(Default::default).container_statuses =
                Some(vec![ContainerStatus {
                    name: "c0".into(),
                    allocated_resources: cpu(allocated),
                    resources: Some(ResourceRequirements {
                        requests: cpu(actuated),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]);
            pod
        };
        let (h, cache) = handler();
        h.apply(resizing("2", "2"));
        assert!(h.get("uid-web").unwrap().lean);
        assert_eq!(requested_cpu(&cache), 2000, "spec lowered, still allocated");
        h.apply(resizing("500m", "2"));
        assert_eq!(
            requested_cpu(&cache),
            2000,
            "allocation lowered, still running at 2"
        );
        h.apply(resizing("500m", "500m"));
        assert_eq!(requested_cpu(&cache), 500, "applied");
        h.delete("uid-web");
        assert_eq!(requested_cpu(&cache), 0);
    }

    /// A pending pod with a nominated node that is deleted, or nominated elsewhere, wakes a
    /// lower-priority pod that NodeResourcesFit rejected (it had counted the nominated pod's
    /// requests on the node); the deletion of a pending pod without a nomination wakes nobody.
    #[test]
    fn a_nominated_pods_deletion_or_move_wakes_lower_priority_pods() {
        use unisched_queue::PodLocation;
        let (h, _cache) = handler();
        let pending = |name: &str, priority: i32, nominated: Option<&str>| {
            let b = PodBuilder::new(name)
                .uid(&format!("uid-{name}"))
                .scheduler_name("unisched")
                .priority(priority)
                .req("cpu", "3");
            match nominated {
                Some(n) => b.nominated_node(n).build(),
                None => b.build(),
            }
        };
        // The low pod is popped and NodeResourcesFit rejects it: it waits in the pool.
        let reject_low = || {
            let mut low = h.queue.try_pop().expect("the low pod is next");
            assert_eq!(low.pod_info.uid, "uid-low");
            low.unschedulable_plugins = ["NodeResourcesFit".to_string()].into();
            h.queue
                .add_unschedulable_if_not_present(low, h.queue.scheduling_cycle())
                .expect("requeued");
            assert_eq!(h.queue.location("uid-low"), Some(PodLocation::Unschedulable));
        };
        let low_woke = || {
            matches!(
                h.queue.location("uid-low"),
                Some(PodLocation::Backoff | PodLocation::Active)
            )
        };
        h.apply(pending("low", 1, None));
        reject_low();

        h.apply(pending("plain", 5, None));
        h.delete("uid-plain");
        assert_eq!(
            h.queue.location("uid-low"),
            Some(PodLocation::Unschedulable),
            "no nomination"
        );

        // A nomination that moves elsewhere frees the old node as a deletion does.
        h.apply(pending("mover", 5, Some("n1")));
        h.apply(pending("mover", 5, Some("n2")));
        assert!(low_woke(), "{:?}", h.queue.location("uid-low"));
        h.delete("uid-mover");
        reject_low();

        h.apply(pending("high", 5, Some("n1")));
        h.delete("uid-high");
        assert_eq!(h.queue.location("uid-high"), None);
        assert!(low_woke(), "{:?}", h.queue.location("uid-low"));
    }

    /// A change of `status.declaredFeatures` is its own node event (NodeDeclaredFeatures listens
    /// to it); an absent list and an empty one are the same.
    #[test]
    fn declared_feature_changes_are_a_node_event() {
        let labels = |events: Vec<ClusterEvent>| events.iter().map(|e| e.label).collect::<Vec<_>>();
        let bare = NodeBuilder::new("n").build();
        let empty = NodeBuilder::new("n").declared_features(&[]).build();
        let one = NodeBuilder::new("n").declared_features(&["FeatureA"]).build();
        let relabelled = NodeBuilder::new("n")
            .declared_features(&["FeatureA"])
            .label("k", "v")
            .build();
        assert!(node_scheduling_properties_change(&bare, &empty).is_empty());
        assert_eq!(
            labels(node_scheduling_properties_change(&bare, &one)),
            ["NodeDeclaredFeatureChange"]
        );
        assert_eq!(
            labels(node_scheduling_properties_change(&one, &empty)),
            ["NodeDeclaredFeatureChange"]
        );
        assert_eq!(
            labels(node_scheduling_properties_change(&one, &relabelled)),
            ["NodeLabelChange"]
        );
        let event = &node_scheduling_properties_change(&bare, &one)[0];
        assert_eq!(event.action, ActionType::UPDATE_NODE_DECLARED_FEATURE);
    }

    /// Upstream's `TestNodeSchedulingPropertiesChange` for taints and `spec.unschedulable`: only
    /// a node made schedulable again is a taint update; a cordon alone is none.
    #[test]
    fn unschedulable_and_taint_changes() {
        let actions = |old: &Node, new: &Node| {
            node_scheduling_properties_change(old, new)
                .iter()
                .map(|e| e.action)
                .collect::<Vec<_>>()
        };
        let open = NodeBuilder::new("n").unschedulable(false).build();
        let cordoned = NodeBuilder::new("n").unschedulable(true).build();
        let tainted = |value: &str| {
            NodeBuilder::new("n")
                .taint("node.kubernetes.io/unschedulable", value, "NoSchedule")
                .build()
        };
        let relabelled_and_tainted = NodeBuilder::new("n")
            .label("k", "v")
            .taint("node.kubernetes.io/unschedulable", "foo", "NoSchedule")
            .build();
        assert!(actions(&open, &open).is_empty(), "nothing changed");
        assert_eq!(
            actions(&cordoned, &open),
            [ActionType::UPDATE_NODE_TAINT],
            "uncordoned"
        );
        assert!(actions(&open, &cordoned).is_empty(), "cordoned: no event");
        assert_eq!(
            actions(&tainted(""), &tainted("foo")),
            [ActionType::UPDATE_NODE_TAINT]
        );
        let both = actions(&tainted(""), &relabelled_and_tainted);
        assert_eq!(both.len(), 2, "{both:?}");
        assert!(
            both.contains(&ActionType::UPDATE_NODE_TAINT) && both.contains(&ActionType::UPDATE_NODE_LABEL)
        );
    }
}
