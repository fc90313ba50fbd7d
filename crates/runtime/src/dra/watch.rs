//! The DRA watches' side: each ResourceSlice, DeviceClass, DeviceTaintRule and ResourceClaim
//! event feeds the [`DraCache`] and is offered to the queue as a cluster event, so a pod waiting
//! for a device is retried when a slice, class or claim changes, and only then (the plugin's hints
//! decide). The scheduler's own claim changes are turned into the same events.

use std::{collections::HashMap, sync::Arc};

use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::Mutex;
use unisched_cache::{ClaimChange, DraCache};
use unisched_dra::{restore_device_maps, split_device_maps};
use unisched_framework::{ActionType, ClusterEvent, EventObject, EventResource};
use unisched_queue::SchedulingQueue;

use crate::informers::Handler;

/// A queue event of a DRA kind: the event, the new object and the old one.
pub type KindEvent = (ClusterEvent, EventObject, Option<EventObject>);

/// Which DRA kind a [`DraHandler`] feeds.
pub trait DraKind: Clone + Send + Sync + 'static {
    /// Identity: name, or `namespace/name` for claims.
    fn key(&self) -> String;
    /// Feeds the cache with a freshly decoded object; returns what the handler keeps of it (the
    /// `old` of the next event: the object itself, or a compacted form) and the queue event to
    /// send, if any.
    fn apply(obj: Self, old: Option<Arc<Self>>, dra: &DraCache) -> (Arc<Self>, Option<KindEvent>);
    /// Removes from the cache; returns the queue event to send, if any.
    fn remove(old: Arc<Self>, dra: &DraCache) -> Option<(ClusterEvent, Option<EventObject>)>;
}

fn name_of(meta: &ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

fn add_or_update(
    old: bool,
    resource: EventResource,
    add: &'static str,
    update: &'static str,
) -> ClusterEvent {
    if old {
        ClusterEvent::new(resource, ActionType::UPDATE_OTHER, update)
    } else {
        ClusterEvent::new(resource, ActionType::ADD, add)
    }
}

impl DraKind for ResourceSlice {
    fn key(&self) -> String {
        name_of(&self.metadata)
    }
    /// The devices' attribute and capacity maps are taken out here and kept once, compactly, by
    /// the cache (see `unisched_dra::device_maps`); the handler and the cache keep the slice
    /// without them. The event's objects are those stripped slices, so DynamicResources' hint
    /// (which skips an update whose spec is unchanged) would miss a change in the maps alone:
    /// then both objects go out with their maps put back.
    fn apply(mut obj: Self, old: Option<Arc<Self>>, dra: &DraCache) -> (Arc<Self>, Option<KindEvent>) {
        let maps = split_device_maps(&mut obj);
        let key = obj.key();
        let old_maps = old.as_ref().and_then(|_| dra.slice_device_maps(&key));
        let obj = Arc::new(obj);
        if let Err(e) = dra.apply_split_slice(obj.clone(), maps.clone()) {
            tracing::warn!(slice = %key, error = %e, "ignoring ResourceSlice");
            return (obj, None);
        }
        let ev = add_or_update(
            old.is_some(),
            EventResource::ResourceSlice,
            "resource.k8s.io/ResourceSliceAdd",
            "resource.k8s.io/ResourceSliceUpdate",
        );
        let (new, old) = match (old, old_maps) {
            (Some(o), Some(om)) if o.spec == obj.spec && *om != *maps => (
                Arc::new(restore_device_maps(&obj, &maps)),
                Some(Arc::new(restore_device_maps(&o, &om))),
            ),
            (old, _) => (obj.clone(), old),
        };
        let event = (
            ev,
            EventObject::ResourceSlice(new),
            old.map(EventObject::ResourceSlice),
        );
        (obj, Some(event))
    }
    fn remove(old: Arc<Self>, dra: &DraCache) -> Option<(ClusterEvent, Option<EventObject>)> {
        dra.remove_slice(&old.key());
        let ev = ClusterEvent::new(
            EventResource::ResourceSlice,
            ActionType::DELETE,
            "resource.k8s.io/ResourceSliceDelete",
        );
        Some((ev, Some(EventObject::ResourceSlice(old))))
    }
}

impl DraKind for DeviceClass {
    fn key(&self) -> String {
        name_of(&self.metadata)
    }
    fn apply(obj: Self, old: Option<Arc<Self>>, dra: &DraCache) -> (Arc<Self>, Option<KindEvent>) {
        let obj = Arc::new(obj);
        if let Err(e) = dra.apply_class(obj.clone()) {
            tracing::warn!(class = %obj.key(), error = %e, "ignoring DeviceClass");
            return (obj, None);
        }
        let ev = add_or_update(
            old.is_some(),
            EventResource::DeviceClass,
            "resource.k8s.io/DeviceClassAdd",
            "resource.k8s.io/DeviceClassUpdate",
        );
        let event = (
            ev,
            EventObject::DeviceClass(obj.clone()),
            old.map(EventObject::DeviceClass),
        );
        (obj, Some(event))
    }
    fn remove(old: Arc<Self>, dra: &DraCache) -> Option<(ClusterEvent, Option<EventObject>)> {
        dra.remove_class(&old.key());
        let ev = ClusterEvent::new(
            EventResource::DeviceClass,
            ActionType::DELETE,
            "resource.k8s.io/DeviceClassDelete",
        );
        Some((ev, Some(EventObject::DeviceClass(old))))
    }
}

impl DraKind for DeviceTaintRule {
    fn key(&self) -> String {
        name_of(&self.metadata)
    }
    fn apply(obj: Self, _old: Option<Arc<Self>>, dra: &DraCache) -> (Arc<Self>, Option<KindEvent>) {
        let obj = Arc::new(obj);
        if let Err(e) = dra.apply_taint_rule(obj.clone()) {
            tracing::warn!(rule = %obj.key(), error = %e, "ignoring DeviceTaintRule");
            return (obj, None);
        }
        // A taint rule changes what slices offer: tell pods waiting for devices.
        let ev = ClusterEvent::new(
            EventResource::ResourceSlice,
            ActionType::UPDATE_OTHER,
            "DeviceTaintRuleChange",
        );
        (obj, Some((ev, EventObject::Other, None)))
    }
    fn remove(old: Arc<Self>, dra: &DraCache) -> Option<(ClusterEvent, Option<EventObject>)> {
        dra.remove_taint_rule(&old.key());
        let ev = ClusterEvent::new(
            EventResource::ResourceSlice,
            ActionType::UPDATE_OTHER,
            "DeviceTaintRuleChange",
        );
        Some((ev, None))
    }
}

fn claim_event(change: &ClaimChange) -> Option<(ClusterEvent, Option<EventObject>, Option<EventObject>)> {
    if !change.changed() {
        return None;
    }
    let ev = match (&change.old, &change.new) {
        (None, Some(_)) => ClusterEvent::new(
            EventResource::ResourceClaim,
            ActionType::ADD,
            "resource.k8s.io/ResourceClaimAdd",
        ),
        (Some(_), None) => ClusterEvent::new(
            EventResource::ResourceClaim,
            ActionType::DELETE,
            "resource.k8s.io/ResourceClaimDelete",
        ),
        _ => ClusterEvent::new(
            EventResource::ResourceClaim,
            ActionType::UPDATE_OTHER,
            "resource.k8s.io/ResourceClaimUpdate",
        ),
    };
    Some((
        ev,
        change.old.clone().map(EventObject::ResourceClaim),
        change.new.clone().map(EventObject::ResourceClaim),
    ))
}

impl DraKind for ResourceClaim {
    fn key(&self) -> String {
        format!(
            "{}/{}",
            self.metadata.namespace.clone().unwrap_or_default(),
            name_of(&self.metadata)
        )
    }
    fn apply(mut obj: Self, _old: Option<Arc<Self>>, dra: &DraCache) -> (Arc<Self>, Option<KindEvent>) {
        crate::lean::shrink_claim(&mut obj);
        let obj = Arc::new(obj);
        let event = match dra.apply_claim(obj.clone()) {
            Ok(change) => {
                claim_event(&change).map(|(ev, old, new)| (ev, new.unwrap_or(EventObject::Other), old))
            }
            Err(e) => {
                tracing::warn!(claim = %obj.key(), error = %e, "ignoring ResourceClaim");
                None
            }
        };
        (obj, event)
    }
    fn remove(old: Arc<Self>, dra: &DraCache) -> Option<(ClusterEvent, Option<EventObject>)> {
        let ns = old.metadata.namespace.clone().unwrap_or_default();
        let change = dra.remove_claim(&ns, &name_of(&old.metadata));
        let (ev, old, _) = claim_event(&change)?;
        Some((ev, old))
    }
}

/// Turns the scheduler's own claim changes (assume, forget, an in-flight allocation released
/// without being written) into the same cluster events a watch change makes, so that a pod
/// DynamicResources rejected meanwhile is moved by its queueing hints instead of waiting for the
/// unschedulable-pods flush. The observer holds the queue weakly: the queue's hints
/// hold the cache.
pub(crate) fn observe_own_claim_changes(dra: &DraCache, queue: &Arc<SchedulingQueue>) {
    let queue = Arc::downgrade(queue);
    dra.set_observer(Arc::new(move |change: &ClaimChange| {
        let Some(queue) = queue.upgrade() else {
            return;
        };
        if let Some((ev, old, new)) = claim_event(change) {
            queue.move_all_for_own_change(ev, old, new);
        }
    }));
}

/// Feeds one DRA kind's watch into the cache and the queue.
pub struct DraHandler<K: DraKind> {
    dra: Arc<DraCache>,
    queue: Arc<SchedulingQueue>,
    known: Mutex<HashMap<String, Arc<K>>>,
}

impl<K: DraKind> DraHandler<K> {
    /// A handler.
    pub fn new(dra: Arc<DraCache>, queue: Arc<SchedulingQueue>) -> Self {
        DraHandler {
            dra,
            queue,
            known: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: DraKind> Handler for DraHandler<K> {
    type Obj = K;

    fn key(obj: &K) -> String {
        obj.key()
    }

    fn apply(&self, obj: K) {
        // One watch feeds each handler, so nothing changes the entry between the two locks.
        let key = obj.key();
        let old = self.known.lock().get(&key).cloned();
        let (kept, event) = K::apply(obj, old, &self.dra);
        self.known.lock().insert(key, kept);
        if let Some((ev, new, old)) = event {
            self.queue.move_all_to_active_or_backoff(ev, old, Some(new));
        }
    }

    fn delete(&self, key: &str) {
        let Some(old) = self.known.lock().remove(key) else {
            return;
        };
        if let Some((ev, old)) = K::remove(old, &self.dra) {
            self.queue.move_all_to_active_or_backoff(ev, old, None);
        }
    }

    fn known_keys(&self) -> Vec<String> {
        self.known.lock().keys().cloned().collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use k8s_openapi::api::resource::v1::AllocationResult;
    use serde_json::{Value, json};
    use unisched_framework::{CycleOutcome, PodInfo, SchedulingAlgorithm, run_scheduling_cycle};
    use unisched_plugins::{
        PluginContext, Registry,
        dynamic_resources::testing::FakeDraApi,
        testing::{NodeBuilder, RecordingBinder},
    };
    use unisched_queue::PodLocation;

    use super::*;

    fn obj<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    fn pod(name: &str, claim: &str) -> Arc<PodInfo> {
        Arc::new(PodInfo::new(obj(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
            "spec": {"schedulerName": "unisched",
                     "resourceClaims": [{"name": "dev", "resourceClaimName": claim}],
                     "containers": [{"name": "c", "image": "x",
                                     "resources": {"claims": [{"name": "dev"}]}}]}}))))
    }

    fn claim(
        name: &str,
        rv: u64,
        allocation: Option<&AllocationResult>,
        reserved: &[&str],
    ) -> Arc<ResourceClaim> {
        let mut c = json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                         "resourceVersion": rv.to_string()},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}}});
        if let Some(a) = allocation {
            c["status"] = json!({"allocation": a,
                "reservedFor": reserved.iter().map(|p| json!({"resource": "pods", "name": p, "uid": format!("uid-{p}")}))
                    .collect::<Vec<_>>()});
        }
        Arc::new(obj(c))
    }

    fn allocation() -> AllocationResult {
        obj(json!({"devices": {"results": [
            {"request": "r", "driver": "gpu.example.com", "pool": "n1", "device": "gpu-0"}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}))
    }

    /// The scheduler's own claim changes requeue the pods DynamicResources rejected,
    /// as a watch change would. A pod waiting for a shared claim another pod is allocating is
    /// retried once that allocation is assumed (the watch echo that follows compares equal to the
    /// assumed copy and would not move it), and a pod rejected for want of the one GPU is retried
    /// when a binding cycle that never wrote its claim releases the in-flight allocation.
    #[test]
    fn own_claim_changes_requeue_the_pods_dynamic_resources_rejected() {
        let dra = Arc::new(DraCache::new());
        let registry = Registry::in_tree(
            PluginContext::new(RecordingBinder::new()).with_dra(dra.clone(), FakeDraApi::new()),
        );
        let (fwk, queue) = crate::testing::unisched_profile(&registry);
        observe_own_claim_changes(&dra, &queue);
        let cache = crate::testing::cache_with([NodeBuilder::new("n1")
            .alloc("cpu", "4")
            .alloc("pods", "10")
            .build()]);
        dra.apply_class(Arc::new(obj(json!({"metadata": {"name": "gpu"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]}}))))
            .unwrap();
        dra.apply_slice(Arc::new(obj(json!({"metadata": {"name": "n1-gpu"},
            "spec": {"driver": "gpu.example.com", "nodeName": "n1",
                     "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "gpu-0"}]}}))))
            .unwrap();

        let reject = |p: &Arc<PodInfo>, why: &str| {
            assert!(queue.add(p.clone()));
            let qpi = queue.try_pop().unwrap();
            let mut algo = SchedulingAlgorithm::new(1, None, 1);
            let CycleOutcome::Failed(f) =
                run_scheduling_cycle(&fwk, &mut algo, cache.as_ref(), queue.as_ref(), p.clone(), false)
            else {
                panic!("{} must be rejected", p.name);
            };
            assert!(f.message.contains(why), "{}: {}", p.name, f.message);
            queue.handle_failure(qpi, &f).unwrap();
            assert_eq!(queue.location(&p.uid), Some(PodLocation::Unschedulable));
        };
        let retried = |p: &Arc<PodInfo>| {
            matches!(
                queue.location(&p.uid),
                Some(PodLocation::Active | PodLocation::Backoff)
            )
        };

        // Pod a's binding cycle is allocating the shared claim: pod b must wait.
        dra.apply_claim(claim("shared", 1, None, &[])).unwrap();
        dra.reserve_in_flight("uid-shared", allocation());
        let b = pod("b", "shared");
        reject(&b, "is in the process of being allocated");
        // PreBind wrote it and assumes it: b is retried at once.
        dra.assume_claim(claim("shared", 2, Some(&allocation()), &["a"]))
            .unwrap();
        dra.release_in_flight("uid-shared");
        assert!(
            retried(&b),
            "the assumed allocation moved b: {:?}",
            queue.location(&b.uid)
        );
        queue.delete(&b);
        // The echo equals the assumed copy (it moves nobody by itself).
        dra.apply_claim(claim("shared", 2, Some(&allocation()), &["a"]))
            .unwrap();

        // The one GPU is taken by the shared claim; a claim of its own does not fit.
        dra.apply_claim(claim("own", 1, None, &[])).unwrap();
        let c = pod("c", "own");
        reject(&c, "cannot allocate all claims");
        queue.delete(&c);
        // Now the shared claim is deallocated (the watch; its hint covers that), but a third
        // claim's allocation of the GPU is in flight and will never be written.
        dra.apply_claim(claim("shared", 3, None, &[])).unwrap();
        dra.reserve_in_flight("uid-third", allocation());
        let c = pod("c", "own");
        reject(&c, "cannot allocate all claims");
        assert!(
            dra.release_in_flight("uid-third"),
            "the binding cycle failed before writing"
        );
        assert!(retried(&c), "the freed GPU moved c: {:?}", queue.location(&c.uid));
    }
}
