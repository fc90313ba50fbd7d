//! Namespace labels for InterPodAffinity's `namespaceSelector`.
//!
//! A pod (anti-)affinity term with a `namespaceSelector` applies to the namespaces whose labels the
//! selector matches, so the plugin needs every namespace's labels. [`NamespaceStore`] keeps them
//! (name → labels), fed by a `v1/Namespace` watch through [`NamespaceHandler`], and implements the
//! plugins' [`NamespaceLister`]. Without it, only the namespaces a term lists by name would count.
//!
//! Requeueing: the framework has no namespace event kind (`EventResource` has no `Namespace`), and
//! upstream's InterPodAffinity registers none either; upstream relies on the periodic flush of the
//! unschedulable pool. unisched does better without touching the event model: when a namespace's
//! labels change (or it appears or goes away), the handler force-activates the pods in the
//! unschedulable pool that InterPodAffinity rejected, and only those. Pods in backoff retry on
//! their own; a pod in flight during the change is retried by the periodic flush.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use k8s_openapi::api::core::v1::Namespace;
use parking_lot::RwLock;
use unisched_plugins::{NamespaceLister, names::INTER_POD_AFFINITY};
use unisched_queue::{PodLocation, SchedulingQueue};

use crate::informers::Handler;

/// Labels by namespace name; thread-safe, read by the scheduling cycle, written by the watch.
#[derive(Debug, Default)]
pub struct NamespaceStore {
    labels: RwLock<HashMap<String, BTreeMap<String, String>>>,
}

impl NamespaceStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a namespace's labels; returns true when they differ from what was known (a new
    /// namespace counts as a change).
    pub fn set(&self, name: &str, labels: BTreeMap<String, String>) -> bool {
        let mut map = self.labels.write();
        match map.get(name) {
            Some(old) if *old == labels => false,
            _ => {
                map.insert(name.to_string(), labels);
                true
            }
        }
    }

    /// Forgets a namespace; returns true when it was known.
    pub fn remove(&self, name: &str) -> bool {
        self.labels.write().remove(name).is_some()
    }

    /// True when the namespace is known.
    pub fn contains(&self, name: &str) -> bool {
        self.labels.read().contains_key(name)
    }

    /// Names of the known namespaces.
    pub fn names(&self) -> Vec<String> {
        self.labels.read().keys().cloned().collect()
    }

    /// How many namespaces are known.
    pub fn len(&self) -> usize {
        self.labels.read().len()
    }

    /// True when no namespace is known.
    pub fn is_empty(&self) -> bool {
        self.labels.read().is_empty()
    }
}

impl NamespaceLister for NamespaceStore {
    fn labels(&self, ns: &str) -> Option<BTreeMap<String, String>> {
        self.labels.read().get(ns).cloned()
    }
}

/// Applies namespace watch events to a [`NamespaceStore`] and wakes the pods a label change may
/// help.
pub struct NamespaceHandler {
    store: Arc<NamespaceStore>,
    queue: Arc<SchedulingQueue>,
}

impl NamespaceHandler {
    /// A handler over the store and queue.
    pub fn new(store: Arc<NamespaceStore>, queue: Arc<SchedulingQueue>) -> Self {
        NamespaceHandler { store, queue }
    }

    /// Force-activates the pods in the unschedulable pool that InterPodAffinity rejected: the set of
    /// namespaces a `namespaceSelector` selects may have changed, for them or for the existing pods
    /// whose anti-affinity rejected them. Returns how many pods were activated.
    fn wake_inter_pod_affinity(&self) -> usize {
        let keys: Vec<String> = self
            .queue
            .pods_in(PodLocation::Unschedulable)
            .iter()
            .filter_map(|uid| self.queue.get(uid))
            .filter(|q| q.unschedulable_plugins.contains(INTER_POD_AFFINITY))
            .map(|q| q.pod_info.key())
            .collect();
        if !keys.is_empty() {
            tracing::debug!(
                pods = keys.len(),
                "namespace labels changed; retrying pods InterPodAffinity rejected"
            );
            self.queue.activate(keys.iter().map(String::as_str));
        }
        keys.len()
    }
}

impl Handler for NamespaceHandler {
    type Obj = Namespace;

    fn key(obj: &Namespace) -> String {
        obj.metadata.name.clone().unwrap_or_default()
    }

    fn apply(&self, ns: Namespace) {
        let name = Self::key(&ns);
        if name.is_empty() {
            return;
        }
        if self.store.set(&name, ns.metadata.labels.unwrap_or_default()) {
            self.wake_inter_pod_affinity();
        }
    }

    fn delete(&self, key: &str) {
        if self.store.remove(key) {
            self.wake_inter_pod_affinity();
        }
    }

    fn known_keys(&self) -> Vec<String> {
        self.store.names()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::{
        api::core::v1::{Namespace, PodAffinityTerm},
        apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta},
    };
    use unisched_framework::{CycleOutcome, PodInfo, SchedulingAlgorithm, run_scheduling_cycle};
    use unisched_plugins::testing::{NodeBuilder, PodBuilder, in_tree_registry};
    use unisched_queue::PodLocation;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn namespace(name: &str, pairs: &[(&str, &str)]) -> Namespace {
        Namespace {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(labels(pairs)),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn store_tracks_labels_and_reports_changes() {
        let store = NamespaceStore::new();
        assert!(store.is_empty());
        assert_eq!(store.labels("team-a"), None);
        assert!(
            store.set("team-a", labels(&[("team", "a")])),
            "new namespace is a change"
        );
        assert!(
            !store.set("team-a", labels(&[("team", "a")])),
            "same labels are not"
        );
        assert_eq!(store.labels("team-a"), Some(labels(&[("team", "a")])));
        assert!(
            store.set("team-a", labels(&[("team", "b")])),
            "relabel is a change"
        );
        assert_eq!(store.labels("team-a"), Some(labels(&[("team", "b")])));
        assert!(store.set("default", BTreeMap::new()));
        assert_eq!(
            store.labels("default"),
            Some(BTreeMap::new()),
            "known, unlabelled"
        );
        assert_eq!(store.len(), 2);
        let mut names = store.names();
        names.sort();
        assert_eq!(names, ["default", "team-a"]);
        assert!(store.contains("team-a"));
        assert!(store.remove("team-a"));
        assert!(!store.remove("team-a"));
        assert!(!store.contains("team-a"));
        assert_eq!(store.labels("team-a"), None);
    }

    #[test]
    fn store_is_shared_across_threads() {
        let store = Arc::new(NamespaceStore::new());
        let writers: Vec<_> = (0..4)
            .map(|i| {
                let s = store.clone();
                std::thread::spawn(move || {
                    for j in 0..100 {
                        s.set(&format!("ns-{i}-{j}"), labels(&[("i", "x")]));
                        let _ = s.labels(&format!("ns-{i}-{j}"));
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        assert_eq!(store.len(), 400);
    }

    /// A pod whose required affinity selects pods in namespaces labelled `team=a`.
    fn waiting_pod() -> Arc<PodInfo> {
        let term = PodAffinityTerm {
            label_selector: Some(LabelSelector {
                match_labels: Some(labels(&[("app", "db")])),
                ..Default::default()
            }),
            namespace_selector: Some(LabelSelector {
                match_labels: Some(labels(&[("team", "a")])),
                ..Default::default()
            }),
            topology_key: "kubernetes.io/hostname".into(),
            ..Default::default()
        };
        Arc::new(PodInfo::new(
            PodBuilder::new("web")
                .uid("uid-web")
                .scheduler_name("unisched")
                .pod_affinity(term)
                .build(),
        ))
    }

    #[test]
    fn handler_feeds_the_store_and_wakes_pods_inter_pod_affinity_rejected() {
        let (registry, _binder) = in_tree_registry();
        let (fwk, queue) = crate::testing::unisched_profile(&registry);
        let cache = crate::testing::cache_with([NodeBuilder::new("n1")
            .alloc("cpu", "4")
            .alloc("pods", "10")
            .label("kubernetes.io/hostname", "n1")
            .build()]);
        // An unrelated pod in the team-a namespace: the waiting pod's term does not select it,
        // so the waiting pod is not its own group's first member and is rejected.
        cache
            .add_pod(Arc::new(PodInfo::new(
                PodBuilder::new("other")
                    .namespace("team-a")
                    .uid("uid-other")
                    .label("app", "other")
                    .node_name("n1")
                    .build(),
            )))
            .unwrap();
        let pod = waiting_pod();
        assert!(queue.add(pod.clone()));
        let qpi = queue.try_pop().unwrap();
        let mut algo = SchedulingAlgorithm::new(1, None, 1);
        let CycleOutcome::Failed(f) =
            run_scheduling_cycle(&fwk, &mut algo, cache.as_ref(), queue.as_ref(), pod, false)
        else {
            panic!("the pod has no affinity partner and must fail");
        };
        assert!(f.unschedulable_plugins.contains(INTER_POD_AFFINITY), "{f:?}");
        queue.handle_failure(qpi, &f).unwrap();
        assert_eq!(queue.location("uid-web"), Some(PodLocation::Unschedulable));

        let store = Arc::new(NamespaceStore::new());
        let handler = NamespaceHandler::new(store.clone(), queue.clone());
        handler.apply(namespace("team-a", &[("team", "a")]));
        assert_eq!(store.labels("team-a"), Some(labels(&[("team", "a")])));
        assert_eq!(handler.known_keys(), ["team-a"]);
        assert_eq!(
            queue.location("uid-web"),
            Some(PodLocation::Active),
            "a namespace label change retries pods InterPodAffinity rejected"
        );

        // Back in the pool; an unchanged resync does not wake it, a delete does.
        let qpi = queue.try_pop().unwrap();
        queue.handle_failure(qpi, &f).unwrap();
        assert_eq!(queue.location("uid-web"), Some(PodLocation::Unschedulable));
        handler.apply(namespace("team-a", &[("team", "a")]));
        assert_eq!(queue.location("uid-web"), Some(PodLocation::Unschedulable));
        handler.delete("team-a");
        assert_eq!(store.labels("team-a"), None);
        assert_eq!(queue.location("uid-web"), Some(PodLocation::Active));
    }

    #[test]
    fn handler_leaves_pods_other_plugins_rejected() {
        let (registry, _binder) = in_tree_registry();
        let (fwk, queue) = crate::testing::unisched_profile(&registry);
        let cache = crate::testing::cache_with([NodeBuilder::new("n1")
            .alloc("cpu", "1")
            .alloc("pods", "10")
            .build()]);
        let pod = Arc::new(PodInfo::new(
            PodBuilder::new("big")
                .uid("uid-big")
                .scheduler_name("unisched")
                .req("cpu", "8")
                .build(),
        ));
        assert!(queue.add(pod.clone()));
        let qpi = queue.try_pop().unwrap();
        let mut algo = SchedulingAlgorithm::new(1, None, 1);
        let CycleOutcome::Failed(f) =
            run_scheduling_cycle(&fwk, &mut algo, cache.as_ref(), queue.as_ref(), pod, false)
        else {
            panic!("the pod does not fit");
        };
        queue.handle_failure(qpi, &f).unwrap();
        assert_eq!(queue.location("uid-big"), Some(PodLocation::Unschedulable));
        let handler = NamespaceHandler::new(Arc::new(NamespaceStore::new()), queue.clone());
        handler.apply(namespace("team-a", &[("team", "a")]));
        assert_eq!(queue.location("uid-big"), Some(PodLocation::Unschedulable));
    }
}
