//! PodGroups from the API: whether the Workload API is served, and the watch handler that keeps
//! the [`PodGroupStore`] and wakes the pods a group change may help.
//!
//! The scheduler reads PodGroups only (as upstream's does); Workloads are for the controllers
//! that create the groups, so they are neither watched nor granted in RBAC.

use std::{collections::HashMap, sync::Arc};

use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use kube::Client;
use parking_lot::Mutex;
use unisched_framework::{ActionType, ClusterEvent, EventObject, EventResource, PodGroupKey, PodGroupStore};
use unisched_queue::SchedulingQueue;

use crate::informers::Handler;

/// The API group and version unisched reads PodGroups from.
pub(crate) const POD_GROUP_API: &str = "scheduling.k8s.io/v1beta1";

/// The events a PodGroup change is offered to waiting pods as.
const POD_GROUP_ADD: ClusterEvent = ClusterEvent::new(
    EventResource::PodGroup,
    ActionType::ADD,
    "scheduling.k8s.io/PodGroupAdd",
);
const POD_GROUP_UPDATE: ClusterEvent = ClusterEvent::new(
    EventResource::PodGroup,
    ActionType::UPDATE_OTHER,
    "scheduling.k8s.io/PodGroupUpdate",
);
const POD_GROUP_DELETE: ClusterEvent = ClusterEvent::new(
    EventResource::PodGroup,
    ActionType::DELETE,
    "scheduling.k8s.io/PodGroupDelete",
);

/// True when the API server serves `podgroups` in `scheduling.k8s.io/v1beta1`. Any failure to
/// tell counts as not served: the feature is then off, which is safe (pods are scheduled one by
/// one, as by a scheduler without the feature).
pub(crate) async fn served(client: &Client) -> bool {
    match client.list_api_group_resources(POD_GROUP_API).await {
        Ok(list) => list.resources.iter().any(|r| r.name == "podgroups"),
        Err(e) => {
            tracing::debug!(error = %e, "discovering {POD_GROUP_API}");
            false
        }
    }
}

/// Keeps the store and offers every change to the waiting pods.
pub(crate) struct PodGroupHandler {
    groups: Arc<PodGroupStore>,
    queue: Arc<SchedulingQueue>,
    known: Mutex<HashMap<String, Arc<PodGroup>>>,
}

impl PodGroupHandler {
    /// A handler over the store and queue.
    pub(crate) fn new(groups: Arc<PodGroupStore>, queue: Arc<SchedulingQueue>) -> Self {
        PodGroupHandler {
            groups,
            queue,
            known: Mutex::new(HashMap::new()),
        }
    }
}

impl Handler for PodGroupHandler {
    type Obj = PodGroup;

    fn key(obj: &PodGroup) -> String {
        PodGroupKey::of_group(obj).to_string()
    }

    fn apply(&self, group: PodGroup) {
        let group = Arc::new(group);
        let key = Self::key(&group);
        let old = self.known.lock().insert(key, group.clone());
        self.groups.set_group(group.clone());
        let event = if old.is_some() {
            POD_GROUP_UPDATE
        } else {
            POD_GROUP_ADD
        };
        self.queue.move_all_to_active_or_backoff(
            event,
            old.map(EventObject::PodGroup),
            Some(EventObject::PodGroup(group)),
        );
    }

    fn delete(&self, key: &str) {
        let Some(old) = self.known.lock().remove(key) else {
            return;
        };
        self.groups.remove_group(&PodGroupKey::of_group(&old));
        self.queue
            .move_all_to_active_or_backoff(POD_GROUP_DELETE, Some(EventObject::PodGroup(old)), None);
    }

    fn known_keys(&self) -> Vec<String> {
        self.known.lock().keys().cloned().collect()
    }
}
