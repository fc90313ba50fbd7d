//! DRA in the runtime: watches for ResourceSlices, DeviceClasses, DeviceTaintRules and
//! ResourceClaims feeding the [`DraCache`], and the blocking [`DraApi`] the DynamicResources
//! plugin's binding cycle writes through.
//!
//! Each watch event is also offered to the queue as a cluster event, so a pod waiting for a device
//! is retried when a slice, class or claim changes, and only then (the plugin's hints decide).
//!
//! Two rules protect the devices of running pods when the API misbehaves:
//! - a write whose answer was lost ([`WriteError::outcome_unknown`]) is resolved by reading the
//!   object back: if it already holds what we wrote, the write succeeded;
//! - an undo (taking a pod out of `reservedFor`, deleting its extended-resource claim, clearing its
//!   DRA pod status) is refused while that pod is bound to a node, or when we cannot tell: the
//!   devices of a bound pod are never released by the scheduler.

use std::{
    borrow::Cow,
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{
    Api,
    api::{DeleteParams, ListParams, Patch, PostParams, Preconditions},
};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::runtime::Handle;
use unisched_cache::{ClaimChange, DraCache};
use unisched_dra::{restore_device_maps, split_device_maps};
use unisched_framework::{ActionType, ClusterEvent, EventObject, EventResource};
use unisched_plugins::{
    DraApi, DraApiError,
    dynamic_resources::{ClaimFuture, DraApiLater, merge_patch},
};
use unisched_queue::SchedulingQueue;

use crate::{ApiWriter, Handler, Metrics, SyncWriter, WriteError, writer::patch_for_metadata};

/// The finalizer that keeps an allocated claim from disappearing under a running pod.
pub const DELETE_PROTECTION_FINALIZER: &str = "resource.kubernetes.io/delete-protection";

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

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
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
            "ResourceSliceAdd",
            "ResourceSliceUpdate",
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
            "ResourceSliceDelete",
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
            "DeviceClassAdd",
            "DeviceClassUpdate",
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
            "DeviceClassDelete",
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
        (None, Some(_)) => {
            ClusterEvent::new(EventResource::ResourceClaim, ActionType::ADD, "ResourceClaimAdd")
        }
        (Some(_), None) => ClusterEvent::new(
            EventResource::ResourceClaim,
            ActionType::DELETE,
            "ResourceClaimDelete",
        ),
        _ => ClusterEvent::new(
            EventResource::ResourceClaim,
            ActionType::UPDATE_OTHER,
            "ResourceClaimUpdate",
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
/// unschedulable-pods flush (issue 15.3). The observer holds the queue weakly: the queue's hints
/// hold the cache.
pub(crate) fn observe_own_claim_changes(dra: &DraCache, queue: &Arc<SchedulingQueue>) {
    let queue = Arc::downgrade(queue);
    dra.set_observer(Arc::new(move |change: &ClaimChange| {
        let Some(queue) = queue.upgrade() else {
            return;
        };
        if let Some((ev, old, new)) = claim_event(change) {
            queue.move_all_to_active_or_backoff(ev, old, new);
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

/// The DynamicResources plugin's API writes, made from the binding cycle's thread (see
/// [`SyncWriter`]), and PreBind's claim calls as futures on the I/O runtime ([`DraApi::later`]).
/// Both run the same calls ([`ClaimCalls`]).
pub struct RuntimeDraApi {
    api: SyncWriter,
    metrics: Metrics,
    /// The futures' side, built once (every DRA pod's binding cycle asks for it).
    later: Arc<RuntimeDraLater>,
}

impl RuntimeDraApi {
    /// Writes through `writer` (a binding thread's own connection where it has one), off the
    /// binding threads blocking on `handle`.
    pub fn new(writer: ApiWriter, handle: Handle, metrics: Metrics) -> Self {
        RuntimeDraApi {
            api: SyncWriter::new(writer.clone(), handle),
            later: Arc::new(RuntimeDraLater {
                writer,
                metrics: metrics.clone(),
            }),
            metrics,
        }
    }

    /// The calls through `writer` (the one [`SyncWriter::run`] hands out).
    fn calls<'a>(&'a self, writer: &'a ApiWriter) -> ClaimCalls<'a> {
        ClaimCalls {
            writer,
            metrics: &self.metrics,
        }
    }
}

/// The claim calls behind [`RuntimeDraApi`], as async functions over one writer: the binding
/// threads block on them, and PreBind on the I/O runtime awaits them.
struct ClaimCalls<'a> {
    writer: &'a ApiWriter,
    metrics: &'a Metrics,
}

impl ClaimCalls<'_> {
    async fn get_claim(&self, ns: &str, name: &str) -> Result<Option<ResourceClaim>, DraApiError> {
        claims(self.writer, ns)
            .get_opt(name)
            .await
            .map_err(|e| DraApiError::Other(e.to_string()))
    }

    /// The claim as it is on the server while `current`'s resourceVersion holds: `current`
    /// itself, read only when it carries no version to make a precondition of.
    async fn at_version<'c>(
        &self,
        ns: &str,
        name: &str,
        current: &'c ResourceClaim,
    ) -> Result<Cow<'c, ResourceClaim>, DraApiError> {
        if current
            .metadata
            .resource_version
            .as_deref()
            .is_some_and(|rv| !rv.is_empty())
        {
            return Ok(Cow::Borrowed(current));
        }
        self.get_claim(ns, name)
            .await?
            .map(Cow::Owned)
            .ok_or_else(|| DraApiError::NotFound(format!("{ns}/{name}")))
    }

    /// The finalizer patch: `current`'s list with ours added or removed, conditioned on
    /// `current`'s resourceVersion (so the list is the server's when it applies).
    async fn finalizers(
        &self,
        ns: &str,
        name: &str,
        current: &ResourceClaim,
        add: bool,
    ) -> Result<ResourceClaim, DraApiError> {
        let current = self.at_version(ns, name, current).await?;
        let rv = current.metadata.resource_version.clone().unwrap_or_default();
        let mut list = current.metadata.finalizers.clone().unwrap_or_default();
        list.retain(|f| f != DELETE_PROTECTION_FINALIZER);
        if add {
            list.push(DELETE_PROTECTION_FINALIZER.to_string());
        }
        let patch = Patch::Merge(json!({"metadata": {"resourceVersion": rv, "finalizers": list}}));
        let result = self.patch_claim(ns, name, None, &patch, "resourceclaims").await;
        match result {
            // Conditioned on `rv`, the patch changed nothing but the metadata.
            Ok(metadata) => Ok(ResourceClaim {
                metadata,
                ..current.into_owned()
            }),
            Err(e) if e.outcome_unknown() => {
                let want = json!({ "finalizers": list });
                self.resolve(ns, name, e, |c| {
                    let have = json!({ "finalizers": c.metadata.finalizers.clone().unwrap_or_default() });
                    have == want
                })
                .await
            }
            Err(e) => Err(to_dra(e)),
        }
    }

    /// One patch of a claim (or its `subresource`) through the writer, answered with the
    /// claim's new metadata only (see [`patch_for_metadata`]).
    async fn patch_claim(
        &self,
        ns: &str,
        name: &str,
        subresource: Option<&str>,
        patch: &Patch<Value>,
        label: &str,
    ) -> Result<ObjectMeta, WriteError> {
        let client = self.writer.client();
        self.writer
            .write("patch", label, || {
                patch_for_metadata::<ResourceClaim>(client, Some(ns), name, subresource, patch)
            })
            .await
    }

    /// Resolves a claim write whose outcome is unknown by reading the claim: `applied` decides
    /// whether it already holds what was written. Not applied: a conflict (the caller re-reads
    /// and recomputes); unreadable: still unknown, reported as such.
    async fn resolve(
        &self,
        ns: &str,
        name: &str,
        err: WriteError,
        applied: impl Fn(&ResourceClaim) -> bool,
    ) -> Result<ResourceClaim, DraApiError> {
        match self.get_claim(ns, name).await {
            Ok(Some(c)) if applied(&c) => {
                tracing::debug!(claim = %format!("{ns}/{name}"), "write outcome resolved by reading: applied");
                Ok(c)
            }
            Ok(Some(_)) => Err(DraApiError::Conflict(format!("{err}; not applied"))),
            Ok(None) => Err(DraApiError::NotFound(format!("{ns}/{name}"))),
            Err(read) => Err(DraApiError::Other(format!("{err}; reading back: {read}"))),
        }
    }

    /// The node a pod is bound to (`None`: unbound or gone, or recreated with another UID).
    async fn bound_node(&self, ns: &str, name: &str, uid: &str) -> Result<Option<String>, DraApiError> {
        let pod = Api::<Pod>::namespaced(self.writer.client().clone(), ns)
            .get_opt(name)
            .await
            .map_err(|e| DraApiError::Other(format!("reading pod {ns}: {e}")))?;
        Ok(pod
            .filter(|p| uid.is_empty() || p.metadata.uid.as_deref() == Some(uid))
            .and_then(|p| p.spec?.node_name)
            .filter(|n| !n.is_empty()))
    }

    /// Refuses an undo that would release what a bound pod holds: `consumers` are the pods the
    /// write takes away from a claim. A pod we cannot read counts as bound.
    async fn refuse_undo_for_bound(
        &self,
        ns: &str,
        claim: &str,
        consumers: &[(String, String)],
    ) -> Result<(), DraApiError> {
        for (pod, uid) in consumers {
            let bound = self
                .bound_node(ns, pod, uid)
                .await
                .map_err(|e| DraApiError::Other(format!("claim {ns}/{claim} kept: {e}")))?;
            if let Some(node) = bound {
                return Err(DraApiError::Other(format!(
                    "claim {ns}/{claim} kept: pod {ns}/{pod} is bound to node {node:?}"
                )));
            }
        }
        Ok(())
    }

    async fn patch_claim_status(
        &self,
        namespace: &str,
        name: &str,
        current: &ResourceClaim,
        status: Value,
    ) -> Result<ResourceClaim, DraApiError> {
        let current = self.at_version(namespace, name, current).await?;
        let resource_version = current.metadata.resource_version.clone().unwrap_or_default();
        // An undo: pods leave `reservedFor`. Refused while any of them is bound. (Checked against
        // `current`, which is the server's object whenever the write applies.)
        if let Some(reserved) = status.get("reservedFor") {
            let kept: Vec<&str> = reserved
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r.get("uid")?.as_str())
                .collect();
            let leaving: Vec<(String, String)> = pod_consumers(&current)
                .into_iter()
                .filter(|(_, uid)| !kept.contains(&uid.as_str()))
                .collect();
            if let Err(refused) = self.refuse_undo_for_bound(namespace, name, &leaving).await {
                // Refused on what the caller saw. If the claim changed since, the write would
                // conflict anyway: say so, so that the caller re-reads and decides again.
                let fresh = self.get_claim(namespace, name).await?;
                if fresh
                    .as_ref()
                    .and_then(|c| c.metadata.resource_version.as_deref())
                    != Some(resource_version.as_str())
                {
                    return Err(DraApiError::Conflict(format!(
                        "claim {namespace}/{name} changed since it was read"
                    )));
                }
                return Err(refused);
            }
        }
        let patch =
            Patch::Merge(json!({"metadata": {"resourceVersion": resource_version}, "status": status}));
        let result = self
            .patch_claim(namespace, name, Some("status"), &patch, "resourceclaims/status")
            .await;
        let claim = match result {
            // Conditioned on `resource_version`, the server's result is `current` with the patch
            // applied and the reply's metadata.
            Ok(metadata) => match with_status_patch(&current, metadata, &status) {
                Some(claim) => claim,
                None => self
                    .get_claim(namespace, name)
                    .await?
                    .ok_or_else(|| DraApiError::NotFound(format!("{namespace}/{name}")))?,
            },
            Err(e) if e.outcome_unknown() => {
                self.resolve(namespace, name, e, |c| {
                    let have = serde_json::to_value(&c.status).unwrap_or(Value::Null);
                    merge_applied(&have, &status)
                })
                .await?
            }
            Err(e) => return Err(to_dra(e)),
        };
        count_allocations(self.metrics, &claim);
        Ok(claim)
    }
}

/// The pods in a claim's `reservedFor`, as (name, uid).
fn pod_consumers(claim: &ResourceClaim) -> Vec<(String, String)> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_ref())
        .into_iter()
        .flatten()
        .filter(|r| r.resource == "pods")
        .map(|r| (r.name.clone(), r.uid.clone()))
        .collect()
}

fn count_allocations(metrics: &Metrics, claim: &ResourceClaim) {
    let Some(results) = claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
    else {
        return;
    };
    let requests = claim
        .spec
        .as_ref()
        .map(|s| s.devices.clone().unwrap_or_default().requests.unwrap_or_default());
    for r in results.results.iter().flatten() {
        let top = r.request.split('/').next().unwrap_or(&r.request);
        let class = requests
            .iter()
            .flatten()
            .find(|q| q.name == top)
            .and_then(|q| {
                q.exactly
                    .as_ref()
                    .map(|e| e.device_class_name.clone())
                    .or_else(|| {
                        let sub = r.request.split('/').nth(1)?;
                        q.first_available
                            .as_ref()?
                            .iter()
                            .find(|s| s.name == sub)
                            .map(|s| s.device_class_name.clone())
                    })
            })
            .unwrap_or_default();
        metrics
            .dra_allocations
            .with_label_values(&[&r.driver, &class])
            .inc();
    }
}

/// PreBind's claim calls as futures on the I/O runtime, through the shared client.
struct RuntimeDraLater {
    writer: ApiWriter,
    metrics: Metrics,
}

impl DraApiLater for RuntimeDraLater {
    fn get_claim(&self, namespace: &str, name: &str) -> ClaimFuture<Option<ResourceClaim>> {
        let (writer, metrics) = (self.writer.clone(), self.metrics.clone());
        let (ns, name) = (namespace.to_string(), name.to_string());
        Box::pin(async move {
            let calls = ClaimCalls {
                writer: &writer,
                metrics: &metrics,
            };
            calls.get_claim(&ns, &name).await
        })
    }

    fn patch_claim_status(
        &self,
        namespace: &str,
        name: &str,
        current: &ResourceClaim,
        status: Value,
    ) -> ClaimFuture<ResourceClaim> {
        let (writer, metrics) = (self.writer.clone(), self.metrics.clone());
        let (ns, name, current) = (namespace.to_string(), name.to_string(), current.clone());
        Box::pin(async move {
            let calls = ClaimCalls {
                writer: &writer,
                metrics: &metrics,
            };
            calls.patch_claim_status(&ns, &name, &current, status).await
        })
    }

    fn add_claim_finalizer(
        &self,
        namespace: &str,
        name: &str,
        current: &ResourceClaim,
    ) -> ClaimFuture<ResourceClaim> {
        let (writer, metrics) = (self.writer.clone(), self.metrics.clone());
        let (ns, name, current) = (namespace.to_string(), name.to_string(), current.clone());
        Box::pin(async move {
            let calls = ClaimCalls {
                writer: &writer,
                metrics: &metrics,
            };
            calls.finalizers(&ns, &name, &current, true).await
        })
    }
}

/// The claim an earlier attempt to create `wanted` left behind, if any: same name (or a name
/// generated from the same `generateName`), the same controlling owner, the annotations and requests
/// of `wanted`, not being deleted, and neither allocated nor reserved (so nobody else took it over).
/// Without a controlling owner a generated claim cannot be told apart from someone else's, and
/// nothing is adopted.
async fn find_created(
    api: &Api<ResourceClaim>,
    wanted: &ResourceClaim,
) -> Result<Option<ResourceClaim>, kube::Error> {
    let Some(owner) = controller_uid(wanted) else {
        return Ok(None);
    };
    let mut candidates = match (&wanted.metadata.name, &wanted.metadata.generate_name) {
        (Some(name), _) => api.get_opt(name).await?.into_iter().collect(),
        (None, Some(_)) => api.list(&ListParams::default()).await?.items,
        (None, None) => Vec::new(),
    };
    candidates.retain(|c| is_created_from(c, wanted, owner));
    // Two leftovers would mean the guard failed before; adopt the oldest, deterministically.
    candidates.sort_by(|a, b| {
        let key = |c: &ResourceClaim| {
            (
                c.metadata.creation_timestamp.as_ref().map(|t| t.0),
                c.metadata.name.clone(),
            )
        };
        key(a).cmp(&key(b))
    });
    let found = candidates.into_iter().next();
    if let Some(c) = &found {
        tracing::info!(
            claim = %format!("{}/{}", c.metadata.namespace.as_deref().unwrap_or_default(),
                             c.metadata.name.as_deref().unwrap_or_default()),
            "claim create outcome resolved by reading: adopting the claim it created"
        );
    }
    Ok(found)
}

/// The UID of the object's controlling owner.
fn controller_uid(claim: &ResourceClaim) -> Option<&str> {
    claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
        .filter(|u| !u.is_empty())
}

/// (request name, device class, count) of each exact request and the names of the others: what
/// identifies the claim's requests whatever defaults the server filled in.
fn request_shape(claim: &ResourceClaim) -> Vec<(String, Option<String>, Option<i64>)> {
    let mut shape: Vec<_> = claim
        .spec
        .as_ref()
        .and_then(|s| s.devices.as_ref())
        .and_then(|d| d.requests.as_ref())
        .into_iter()
        .flatten()
        .map(|r| {
            let exact = r.exactly.as_ref();
            (
                r.name.clone(),
                exact.map(|e| e.device_class_name.clone()),
                exact.and_then(|e| e.count),
            )
        })
        .collect();
    shape.sort();
    shape
}

/// Whether `candidate` is what a create of `wanted` (owned by `owner`) produced.
fn is_created_from(candidate: &ResourceClaim, wanted: &ResourceClaim, owner: &str) -> bool {
    let meta = &candidate.metadata;
    let name = meta.name.as_deref().unwrap_or_default();
    let named = match (&wanted.metadata.name, &wanted.metadata.generate_name) {
        (Some(want), _) => name == want,
        (None, Some(prefix)) => name.starts_with(prefix.as_str()),
        (None, None) => false,
    };
    let annotations_match = wanted
        .metadata
        .annotations
        .iter()
        .flatten()
        .all(|(k, v)| meta.annotations.as_ref().and_then(|a| a.get(k)) == Some(v));
    let untouched = candidate
        .status
        .as_ref()
        .is_none_or(|s| s.allocation.is_none() && s.reserved_for.as_ref().is_none_or(Vec::is_empty));
    named
        && controller_uid(candidate) == Some(owner)
        && annotations_match
        && meta.deletion_timestamp.is_none()
        && request_shape(candidate) == request_shape(wanted)
        && untouched
}

/// `current` after the status merge patch `status` applied, with the server's `metadata`; `None`
/// when the merged status does not decode (the server accepted it, so the caller reads it back).
fn with_status_patch(current: &ResourceClaim, metadata: ObjectMeta, status: &Value) -> Option<ResourceClaim> {
    let mut merged = serde_json::to_value(&current.status).ok()?;
    merge_patch(&mut merged, status);
    Some(ResourceClaim {
        metadata,
        spec: current.spec.clone(),
        status: serde_json::from_value(merged).ok()?,
    })
}

/// True when `have` already holds every field of the merge patch `patch` (`null` = absent).
fn merge_applied(have: &Value, patch: &Value) -> bool {
    match patch {
        Value::Object(fields) => fields.iter().all(|(k, v)| {
            let h = have.get(k).unwrap_or(&Value::Null);
            if v.is_null() {
                h.is_null()
            } else {
                merge_applied(h, v)
            }
        }),
        other => have == other,
    }
}

fn to_dra(e: WriteError) -> DraApiError {
    match e {
        WriteError::Conflict(m) => DraApiError::Conflict(m),
        WriteError::NotFound(m) => DraApiError::NotFound(m),
        other => DraApiError::Other(other.to_string()),
    }
}

/// The claims of `ns`, through `writer`'s client.
fn claims(writer: &ApiWriter, ns: &str) -> Api<ResourceClaim> {
    Api::namespaced(writer.client().clone(), ns)
}

impl DraApi for RuntimeDraApi {
    fn later(&self) -> Option<Arc<dyn DraApiLater>> {
        Some(self.later.clone())
    }

    fn get_claim(&self, namespace: &str, name: &str) -> Result<Option<ResourceClaim>, DraApiError> {
        self.api
            .run(async |writer| self.calls(writer).get_claim(namespace, name).await)
    }

    fn patch_claim_status(
        &self,
        namespace: &str,
        name: &str,
        current: &ResourceClaim,
        status: Value,
    ) -> Result<ResourceClaim, DraApiError> {
        self.api.run(async |writer| {
            self.calls(writer)
                .patch_claim_status(namespace, name, current, status)
                .await
        })
    }

    fn add_claim_finalizer(
        &self,
        namespace: &str,
        name: &str,
        current: &ResourceClaim,
    ) -> Result<ResourceClaim, DraApiError> {
        self.api.run(async |writer| {
            self.calls(writer)
                .finalizers(namespace, name, current, true)
                .await
        })
    }

    fn remove_claim_finalizer(
        &self,
        namespace: &str,
        name: &str,
        current: &ResourceClaim,
    ) -> Result<ResourceClaim, DraApiError> {
        self.api.run(async |writer| {
            self.calls(writer)
                .finalizers(namespace, name, current, false)
                .await
        })
    }

    fn create_claim(&self, namespace: &str, claim: &ResourceClaim) -> Result<ResourceClaim, DraApiError> {
        // A retry after an attempt whose answer was lost first looks for the claim that attempt
        // may have created: with `generateName` a second POST would create a second claim.
        let sent = Arc::new(AtomicBool::new(false));
        let result = self.api.run(async |writer| {
            let api = claims(writer, namespace);
            writer
                .write("create", "resourceclaims", || {
                    let (api, sent) = (api.clone(), sent.clone());
                    async move {
                        if sent.swap(true, Ordering::SeqCst)
                            && let Some(found) = find_created(&api, claim).await?
                        {
                            return Ok(found);
                        }
                        api.create(&PostParams::default(), claim).await
                    }
                })
                .await
        });
        let created = match result {
            Ok(c) => c,
            Err(e) if e.outcome_unknown() => {
                match self
                    .api
                    .run(async |writer| find_created(&claims(writer, namespace), claim).await)
                {
                    Ok(Some(c)) => c,
                    Ok(None) => return Err(DraApiError::Other(format!("{e}; no such claim was created"))),
                    Err(read) => return Err(DraApiError::Other(format!("{e}; listing claims: {read}"))),
                }
            }
            Err(e) => return Err(to_dra(e)),
        };
        self.metrics.special_claims.with_label_values(&["create"]).inc();
        Ok(created)
    }

    fn delete_claim(&self, namespace: &str, name: &str, uid: &str) -> Result<(), DraApiError> {
        self.api.run(async |writer| {
            let calls = self.calls(writer);
            if let Some(current) = calls.get_claim(namespace, name).await?
                && current.metadata.uid.as_deref() == Some(uid)
            {
                calls
                    .refuse_undo_for_bound(namespace, name, &pod_consumers(&current))
                    .await?;
            }
            Ok::<(), DraApiError>(())
        })?;
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let result = self.api.run(async |writer| {
            let api = claims(writer, namespace);
            writer
                .write("delete", "resourceclaims", || {
                    let (api, dp) = (api.clone(), dp.clone());
                    async move { api.delete(name, &dp).await }
                })
                .await
        });
        match result {
            Ok(_) => {
                self.metrics.special_claims.with_label_values(&["delete"]).inc();
                Ok(())
            }
            Err(WriteError::NotFound(_)) => Ok(()),
            Err(e) => Err(to_dra(e)),
        }
    }

    fn patch_pod_status(&self, namespace: &str, name: &str, patch: Value) -> Result<(), DraApiError> {
        // Clearing a pod's DRA status is an undo: refused while the pod is bound.
        let clears = [
            "nodeAllocatableResourceClaimStatuses",
            "extendedResourceClaimStatus",
        ]
        .iter()
        .any(|k| patch["status"].get(*k).is_some_and(Value::is_null));
        if clears
            && let Some(node) = self
                .api
                .run(async |writer| self.calls(writer).bound_node(namespace, name, "").await)?
        {
            return Err(DraApiError::Other(format!(
                "pod {namespace}/{name} is bound to node {node:?}: its DRA status is kept"
            )));
        }
        self.api
            .run(async |writer| writer.patch_pod_status(namespace, name, patch).await)
            .map_err(to_dra)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use k8s_openapi::api::resource::v1::AllocationResult;
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

    /// Issue 15.3: the scheduler's own claim changes requeue the pods DynamicResources rejected,
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

    #[test]
    fn only_an_untouched_claim_of_the_same_owner_and_shape_is_adopted_after_a_lost_create() {
        let wanted: ResourceClaim = obj(json!({
            "metadata": {"generateName": "p-extended-resources-", "namespace": "default",
                         "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p",
                                              "uid": "uid-p", "controller": true}]},
            "spec": {"devices": {"requests": [{"name": "container-0-request-0",
                "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}}]}}}));
        let created = || -> Value {
            let mut c = serde_json::to_value(&wanted).unwrap();
            c["metadata"]["name"] = json!("p-extended-resources-x7k2q");
            c["metadata"].as_object_mut().unwrap().remove("generateName");
            c["metadata"]["uid"] = json!("claim-uid");
            c
        };
        let cases: Vec<(&str, Box<dyn Fn(&mut Value)>, bool)> = vec![
            ("what the lost POST created", Box::new(|_| {}), true),
            (
                "another pod's claim",
                Box::new(|c| c["metadata"]["ownerReferences"][0]["uid"] = json!("uid-q")),
                false,
            ),
            (
                "a name from another prefix",
                Box::new(|c| c["metadata"]["name"] = json!("q-extended-resources-abcde")),
                false,
            ),
            (
                "without the annotation",
                Box::new(|c| c["metadata"]["annotations"] = json!({})),
                false,
            ),
            (
                "other requests",
                Box::new(|c| c["spec"]["devices"]["requests"][0]["exactly"]["count"] = json!(2)),
                false,
            ),
            (
                "being deleted",
                Box::new(|c| c["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z")),
                false,
            ),
            (
                "already allocated",
                Box::new(|c| c["status"] = json!({"allocation": {"devices": {"results": []}}})),
                false,
            ),
            (
                "reserved for a pod",
                Box::new(|c| {
                    c["status"] = json!({"reservedFor": [{"resource": "pods", "name": "p", "uid": "uid-p"}]})
                }),
                false,
            ),
        ];
        for (case, change, adopt) in cases {
            let mut c = created();
            change(&mut c);
            let candidate: ResourceClaim = obj(c);
            assert_eq!(is_created_from(&candidate, &wanted, "uid-p"), adopt, "{case}");
        }
        // Without a controlling owner nothing can be attributed to this create.
        let mut orphan = wanted.clone();
        orphan.metadata.owner_references = None;
        assert_eq!(controller_uid(&orphan), None);
    }
}
