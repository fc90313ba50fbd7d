//! CompositePodGroups from the API (the CompositePodGroup gate): whether they are served, and the
//! watch handler that keeps them in the [`PodGroupStore`]'s forest and wakes the pods a new
//! composite may let into the queue.
//!
//! The scheduler only reads composites: upstream writes no condition on them (a composite owns
//! no pods; its PodGroups carry the verdicts), so no status is patched and RBAC grants only
//! list and watch.

use std::{collections::HashMap, sync::Arc};

use k8s_openapi::api::scheduling::v1alpha3::CompositePodGroup;
use kube::Client;
use parking_lot::Mutex;
use unisched_framework::{ActionType, ClusterEvent, EventObject, EventResource, PodGroupKey, PodGroupStore};
use unisched_queue::SchedulingQueue;

use crate::informers::Handler;

/// The API group and version unisched reads CompositePodGroups from.
pub(crate) const COMPOSITE_POD_GROUP_API: &str = "scheduling.k8s.io/v1alpha3";

/// The events a composite change is offered to waiting pods as.
const COMPOSITE_ADD: ClusterEvent = ClusterEvent::new(
    EventResource::CompositePodGroup,
    ActionType::ADD,
    "scheduling.k8s.io/CompositePodGroupAdd",
);
const COMPOSITE_UPDATE: ClusterEvent = ClusterEvent::new(
    EventResource::CompositePodGroup,
    ActionType::UPDATE_OTHER,
    "scheduling.k8s.io/CompositePodGroupUpdate",
);
const COMPOSITE_DELETE: ClusterEvent = ClusterEvent::new(
    EventResource::CompositePodGroup,
    ActionType::DELETE,
    "scheduling.k8s.io/CompositePodGroupDelete",
);

/// True when the API server serves `compositepodgroups` in `scheduling.k8s.io/v1alpha3`. Any
/// failure to tell counts as not served: groups are then scheduled as roots, each on its own.
pub(crate) async fn served(client: &Client) -> bool {
    match client.list_api_group_resources(COMPOSITE_POD_GROUP_API).await {
        Ok(list) => list.resources.iter().any(|r| r.name == "compositepodgroups"),
        Err(e) => {
            tracing::debug!(error = %e, "discovering {COMPOSITE_POD_GROUP_API}");
            false
        }
    }
}

/// The key of a composite: `namespace/name`.
fn key_of(composite: &CompositePodGroup) -> PodGroupKey {
    PodGroupKey::new(
        composite.metadata.namespace.clone().unwrap_or_default(),
        composite.metadata.name.clone().unwrap_or_default(),
    )
}

/// Keeps the forest and offers every change to the waiting pods.
pub(crate) struct CompositePodGroupHandler {
    groups: Arc<PodGroupStore>,
    queue: Arc<SchedulingQueue>,
    known: Mutex<HashMap<String, Arc<CompositePodGroup>>>,
}

impl CompositePodGroupHandler {
    /// A handler over the store and queue.
    pub(crate) fn new(groups: Arc<PodGroupStore>, queue: Arc<SchedulingQueue>) -> Self {
        CompositePodGroupHandler {
            groups,
            queue,
            known: Mutex::new(HashMap::new()),
        }
    }
}

impl Handler for CompositePodGroupHandler {
    type Obj = CompositePodGroup;

    fn key(obj: &CompositePodGroup) -> String {
        key_of(obj).to_string()
    }

    fn apply(&self, composite: CompositePodGroup) {
        let composite = Arc::new(composite);
        let key = Self::key(&composite);
        let old = self.known.lock().insert(key, composite.clone());
        // The store first: the hints read the tree the new composite completes.
        self.groups.set_composite(composite.clone());
        let event = if old.is_some() {
            COMPOSITE_UPDATE
        } else {
            COMPOSITE_ADD
        };
        self.queue.move_all_to_active_or_backoff(
            event,
            old.map(EventObject::CompositePodGroup),
            Some(EventObject::CompositePodGroup(composite)),
        );
    }

    fn delete(&self, key: &str) {
        let Some(old) = self.known.lock().remove(key) else {
            return;
        };
        self.groups.remove_composite(&key_of(&old));
        self.queue.move_all_to_active_or_backoff(
            COMPOSITE_DELETE,
            Some(EventObject::CompositePodGroup(old)),
            None,
        );
    }

    fn known_keys(&self) -> Vec<String> {
        self.known.lock().keys().cloned().collect()
    }
}
