//! Storage in the runtime: watches for PersistentVolumes, PersistentVolumeClaims, StorageClasses,
//! CSINodes, CSIDrivers, CSIStorageCapacities and VolumeAttachments feeding the [`VolumeCache`], and
//! [`RuntimeVolumeApi`], the blocking writes of VolumeBinding's PreBind.
//!
//! Every watch event is also a cluster event for the queue, so a pod waiting for a claim, a PV, a
//! class, a CSI driver or free storage is retried when one appears or changes (the volume plugins
//! registered for them). The watches also end PreBind's wait: the cache wakes waiting binding cycles on each change.

use std::{collections::HashMap, sync::Arc};

use k8s_openapi::api::{
    core::v1::{PersistentVolume, PersistentVolumeClaim},
    storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass, VolumeAttachment},
};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::runtime::Handle;
use unisched_cache::VolumeCache;
use unisched_framework::{ActionType, ClusterEvent, EventObject, EventResource};
use unisched_plugins::{VolumeApi, VolumeApiError};
use unisched_queue::SchedulingQueue;

use crate::{
    binding_threads::SyncWriter,
    informers::Handler,
    writer::{ApiWriter, WriteError},
};

/// A storage kind a [`VolumeHandler`] feeds into the cache.
pub trait VolumeKind: Clone + Send + Sync + 'static {
    /// The queue's resource for this kind.
    const RESOURCE: EventResource;
    /// Event labels: add, update, delete, as upstream names them (the resource with its API group,
    /// then the action): the `event` label of the queue metrics.
    const LABELS: [&'static str; 3];
    /// Identity: name, or `namespace/name` for claims.
    fn key(&self) -> String;
    /// Stores the object in the cache.
    fn apply(obj: Arc<Self>, volumes: &VolumeCache);
    /// Removes it from the cache.
    fn remove(old: &Self, volumes: &VolumeCache);
    /// The object as queueing hints see it.
    fn event_object(obj: Arc<Self>) -> EventObject;
}

fn name(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

impl VolumeKind for PersistentVolume {
    fn event_object(obj: Arc<Self>) -> EventObject {
        EventObject::PersistentVolume(obj)
    }
    const RESOURCE: EventResource = EventResource::PersistentVolume;
    const LABELS: [&'static str; 3] = [
        "PersistentVolumeAdd",
        "PersistentVolumeUpdate",
        "PersistentVolumeDelete",
    ];
    fn key(&self) -> String {
        name(&self.metadata)
    }
    fn apply(obj: Arc<Self>, volumes: &VolumeCache) {
        volumes.apply_pv(obj);
    }
    fn remove(old: &Self, volumes: &VolumeCache) {
        volumes.remove_pv(&old.key());
    }
}

impl VolumeKind for PersistentVolumeClaim {
    fn event_object(obj: Arc<Self>) -> EventObject {
        EventObject::PersistentVolumeClaim(obj)
    }
    const RESOURCE: EventResource = EventResource::PersistentVolumeClaim;
    const LABELS: [&'static str; 3] = [
        "PersistentVolumeClaimAdd",
        "PersistentVolumeClaimUpdate",
        "PersistentVolumeClaimDelete",
    ];
    fn key(&self) -> String {
        format!(
            "{}/{}",
            self.metadata.namespace.clone().unwrap_or_default(),
            name(&self.metadata)
        )
    }
    fn apply(obj: Arc<Self>, volumes: &VolumeCache) {
        volumes.apply_pvc(obj);
    }
    fn remove(old: &Self, volumes: &VolumeCache) {
        volumes.remove_pvc(
            old.metadata.namespace.as_deref().unwrap_or_default(),
            &name(&old.metadata),
        );
    }
}

impl VolumeKind for StorageClass {
    fn event_object(obj: Arc<Self>) -> EventObject {
        EventObject::StorageClass(obj)
    }
    const RESOURCE: EventResource = EventResource::StorageClass;
    const LABELS: [&'static str; 3] = [
        "storage.k8s.io/StorageClassAdd",
        "storage.k8s.io/StorageClassUpdate",
        "storage.k8s.io/StorageClassDelete",
    ];
    fn key(&self) -> String {
        name(&self.metadata)
    }
    fn apply(obj: Arc<Self>, volumes: &VolumeCache) {
        volumes.apply_class(obj);
    }
    fn remove(old: &Self, volumes: &VolumeCache) {
        volumes.remove_class(&old.key());
    }
}

impl VolumeKind for CSINode {
    fn event_object(obj: Arc<Self>) -> EventObject {
        EventObject::CsiNode(obj)
    }
    const RESOURCE: EventResource = EventResource::CsiNode;
    const LABELS: [&'static str; 3] = [
        "storage.k8s.io/CSINodeAdd",
        "storage.k8s.io/CSINodeUpdate",
        "storage.k8s.io/CSINodeDelete",
    ];
    fn key(&self) -> String {
        name(&self.metadata)
    }
    fn apply(obj: Arc<Self>, volumes: &VolumeCache) {
        volumes.apply_csi_node(obj);
    }
    fn remove(old: &Self, volumes: &VolumeCache) {
        volumes.remove_csi_node(&old.key());
    }
}

impl VolumeKind for CSIDriver {
    fn event_object(obj: Arc<Self>) -> EventObject {
        EventObject::CsiDriver(obj)
    }
    const RESOURCE: EventResource = EventResource::CsiDriver;
    const LABELS: [&'static str; 3] = [
        "storage.k8s.io/CSIDriverAdd",
        "storage.k8s.io/CSIDriverUpdate",
        "storage.k8s.io/CSIDriverDelete",
    ];
    fn key(&self) -> String {
        name(&self.metadata)
    }
    fn apply(obj: Arc<Self>, volumes: &VolumeCache) {
        volumes.apply_csi_driver(obj);
    }
    fn remove(old: &Self, volumes: &VolumeCache) {
        volumes.remove_csi_driver(&old.key());
    }
}

impl VolumeKind for CSIStorageCapacity {
    fn event_object(obj: Arc<Self>) -> EventObject {
        EventObject::CsiStorageCapacity(obj)
    }
    const RESOURCE: EventResource = EventResource::CsiStorageCapacity;
    const LABELS: [&'static str; 3] = [
        "storage.k8s.io/CSIStorageCapacityAdd",
        "storage.k8s.io/CSIStorageCapacityUpdate",
        "storage.k8s.io/CSIStorageCapacityDelete",
    ];
    fn key(&self) -> String {
        format!(
            "{}/{}",
            self.metadata.namespace.clone().unwrap_or_default(),
            name(&self.metadata)
        )
    }
    fn apply(obj: Arc<Self>, volumes: &VolumeCache) {
        volumes.apply_capacity(obj);
    }
    fn remove(old: &Self, volumes: &VolumeCache) {
        volumes.remove_capacity(
            old.metadata.namespace.as_deref().unwrap_or_default(),
            &name(&old.metadata),
        );
    }
}

impl VolumeKind for VolumeAttachment {
    fn event_object(obj: Arc<Self>) -> EventObject {
        EventObject::VolumeAttachment(obj)
    }
    const RESOURCE: EventResource = EventResource::VolumeAttachment;
    const LABELS: [&'static str; 3] = [
        "storage.k8s.io/VolumeAttachmentAdd",
        "storage.k8s.io/VolumeAttachmentUpdate",
        "storage.k8s.io/VolumeAttachmentDelete",
    ];
    fn key(&self) -> String {
        name(&self.metadata)
    }
    fn apply(obj: Arc<Self>, volumes: &VolumeCache) {
        volumes.apply_attachment(obj);
    }
    fn remove(old: &Self, volumes: &VolumeCache) {
        volumes.remove_attachment(&old.key());
    }
}

/// Feeds one storage kind's watch into the cache and the queue.
pub struct VolumeHandler<K: VolumeKind> {
    volumes: Arc<VolumeCache>,
    queue: Arc<SchedulingQueue>,
    known: Mutex<HashMap<String, Arc<K>>>,
}

impl<K: VolumeKind> VolumeHandler<K> {
    /// A handler.
    pub fn new(volumes: Arc<VolumeCache>, queue: Arc<SchedulingQueue>) -> Self {
        VolumeHandler {
            volumes,
            queue,
            known: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: VolumeKind> Handler for VolumeHandler<K> {
    type Obj = K;

    fn key(obj: &K) -> String {
        obj.key()
    }

    fn apply(&self, obj: K) {
        let obj = Arc::new(obj);
        let old = self.known.lock().insert(obj.key(), obj.clone());
        K::apply(obj.clone(), &self.volumes);
        let ev = if old.is_some() {
            ClusterEvent::new(K::RESOURCE, ActionType::UPDATE_OTHER, K::LABELS[1])
        } else {
            ClusterEvent::new(K::RESOURCE, ActionType::ADD, K::LABELS[0])
        };
        let old = old.map(K::event_object);
        self.queue
            .move_all_to_active_or_backoff(ev, old, Some(K::event_object(obj)));
    }

    fn delete(&self, key: &str) {
        let Some(old) = self.known.lock().remove(key) else {
            return;
        };
        K::remove(&old, &self.volumes);
        let ev = ClusterEvent::new(K::RESOURCE, ActionType::DELETE, K::LABELS[2]);
        self.queue
            .move_all_to_active_or_backoff(ev, Some(K::event_object(old)), None);
    }

    fn known_keys(&self) -> Vec<String> {
        self.known.lock().keys().cloned().collect()
    }
}

/// VolumeBinding's API writes, made from the binding cycle's thread (see [`SyncWriter`]).
pub struct RuntimeVolumeApi {
    api: SyncWriter,
}

impl RuntimeVolumeApi {
    /// Writes through `writer` (a binding thread's own connection where it has one), off the
    /// binding threads blocking on `handle`.
    pub fn new(writer: ApiWriter, handle: Handle) -> Self {
        RuntimeVolumeApi {
            api: SyncWriter::new(writer, handle),
        }
    }

    /// `api` gives the resource's `Api` through a writer's client.
    fn merge_patch<K>(
        &self,
        api: impl Fn(&ApiWriter) -> Api<K>,
        resource: &'static str,
        name: &str,
        patch: Value,
    ) -> Result<(), VolumeApiError>
    where
        K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    {
        let patch = Patch::Merge(patch);
        let params = PatchParams::default();
        self.api
            .run(async |writer| {
                let api = api(writer);
                writer
                    .write("patch", resource, || api.patch(name, &params, &patch))
                    .await
            })
            .map(|_| ())
            .map_err(|e| match e {
                WriteError::Conflict(m) => VolumeApiError::Conflict(m),
                WriteError::NotFound(m) => VolumeApiError::NotFound(m),
                other => VolumeApiError::Other(other.to_string()),
            })
    }
}

impl VolumeApi for RuntimeVolumeApi {
    fn patch_pv(&self, name: &str, patch: Value) -> Result<(), VolumeApiError> {
        self.merge_patch(
            |w| Api::<PersistentVolume>::all(w.client().clone()),
            "persistentvolumes",
            name,
            patch,
        )
    }

    fn patch_pvc(&self, namespace: &str, name: &str, patch: Value) -> Result<(), VolumeApiError> {
        self.merge_patch(
            |w| Api::<PersistentVolumeClaim>::namespaced(w.client().clone(), namespace),
            "persistentvolumeclaims",
            name,
            patch,
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use unisched_framework::{CycleOutcome, PodInfo, SchedulingAlgorithm, run_scheduling_cycle};
    use unisched_plugins::{
        PluginContext, Registry,
        testing::{NodeBuilder, PodBuilder, RecordingBinder},
        volume::testing::{FakeVolumeApi, PvcBuilder, with_claims},
    };
    use unisched_queue::PodLocation;

    use super::*;

    #[test]
    fn claim_watch_feeds_the_cache_and_wakes_only_its_users() {
        let volumes = Arc::new(VolumeCache::new());
        let registry = Registry::in_tree(
            PluginContext::new(RecordingBinder::new()).with_volumes(volumes.clone(), FakeVolumeApi::new()),
        );
        let (fwk, queue) = crate::testing::unisched_profile(&registry);
        let cache = crate::testing::cache_with([NodeBuilder::new("n1")
            .alloc("cpu", "4")
            .alloc("pods", "10")
            .build()]);
        let pod = Arc::new(PodInfo::new(with_claims(
            PodBuilder::new("db")
                .uid("uid-db")
                .scheduler_name("unisched")
                .build(),
            &["data"],
        )));
        assert!(queue.add(pod.clone()));
        let qpi = queue.try_pop().unwrap();
        let mut algo = SchedulingAlgorithm::new(1, None, 1);
        let CycleOutcome::Failed(f) =
            run_scheduling_cycle(&fwk, &mut algo, cache.as_ref(), queue.as_ref(), pod, false)
        else {
            panic!("the claim is missing: the pod must fail");
        };
        assert!(
            f.message.contains("persistentvolumeclaim \"data\" not found"),
            "{}",
            f.message
        );
        queue.handle_failure(qpi, &f).unwrap();
        assert_eq!(queue.location("uid-db"), Some(PodLocation::Unschedulable));

        let handler = VolumeHandler::<PersistentVolumeClaim>::new(volumes.clone(), queue.clone());
        handler.apply(
            PvcBuilder::new("other", "standard", "1Gi")
                .bound_to("pv0")
                .build(),
        );
        assert!(volumes.pvc("default", "other").is_some());
        assert_eq!(
            queue.location("uid-db"),
            Some(PodLocation::Unschedulable),
            "someone else's claim does not help"
        );
        handler.apply(PvcBuilder::new("data", "standard", "1Gi").bound_to("pv1").build());
        assert!(
            matches!(
                queue.location("uid-db"),
                Some(PodLocation::Active | PodLocation::Backoff)
            ),
            "its claim appeared: retried"
        );
        assert_eq!(handler.known_keys().len(), 2);
        handler.delete("default/data");
        assert!(volumes.pvc("default", "data").is_none());
    }
}
