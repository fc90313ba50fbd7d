//! DRA state: ResourceSlices (with DeviceTaintRules applied), DeviceClasses, ResourceClaims with an
//! assume layer, the allocated-device index, and in-flight allocations.
//!
//! # Why a separate [`DraCache`] next to [`Cache`](crate::Cache)
//! DRA objects arrive on their own watches and are read by one plugin, while nodes and pods are read
//! by every plugin on every node. Giving DRA its own lock keeps claim and slice events from ever
//! contending with the node snapshot, and lets the runtime share one `Arc<DraCache>` between the
//! watchers and the DynamicResources plugin (through the plugin context) without the node cache
//! knowing anything about DRA. The two caches are independent: nothing here refers to pods other
//! than by UID.
//!
//! # What it holds, and why each part exists
//! * **Slices** (`slices`): the watch's objects by name, each prepared once
//!   ([`PreparedSlice`](unisched_dra::PreparedSlice), owning the CEL value and match caches) with the
//!   DeviceTaintRules that select it applied, and the [`DraSnapshotIndex`] over them, rebuilt only
//!   when a slice or rule changed. A rule change re-prepares only the slices it selects.
//! * **Classes** (`classes`): by name, plus the KEP-5004 extended-resource map (`spec.extendedResourceName`
//!   and the implicit `deviceclass.resource.kubernetes.io/<class>`; on a clash of explicit names the
//!   newest class wins, then the smallest name).
//! * **Claims** (`claims`): per `namespace/name` the watch's copy and an optional *assumed* copy — our
//!   own write, visible before the watch echoes it. A watch event with a `resourceVersion` at least as
//!   new as the assumed copy's replaces it (versions compare numerically when both parse, otherwise
//!   the watch wins). The allocated-device index ([`AllocatedState`]) is maintained from the effective
//!   copy of every claim, incrementally.
//! * **In-flight allocations** (`in_flight`): allocations decided in Reserve for pods that are
//!   still being bound, keyed by claim UID. They count as used devices for the next cycles, and a
//!   claim that is in flight is "being allocated" for every other pod — except the other members
//!   of the PodGroup scheduling attempt that made it, which share it ([`DraCache::share_in_flight`]):
//!   a group's ResourceClaim is allocated once for the whole group. A shared allocation stays in
//!   flight until its last holder has written it or let it go.
//!
//! # Changes nobody else reports
//! The watch reports what the API server holds; it never reports the scheduler's own steps: an
//! assumed claim (PreBind wrote it, the echo is still on its way), a forgotten one (Unreserve), or
//! an in-flight allocation dropped without ever being written (a failed binding cycle). Each of
//! those can make a pod that DynamicResources rejected fit (a shared claim is now allocated, a
//! device is free again), and without an event that pod would wait for the unschedulable-pods
//! flush. An optional [`ClaimObserver`] hears them as [`ClaimChange`]s, exactly like watch
//! changes, after the lock is dropped (the queue's hints read this cache under the queue's lock).
//! A released in-flight allocation is reported only when it frees something, i.e. when the
//! committed claims do not hold all of its devices already (after a successful PreBind they do).
//!
//! # Snapshots
//! [`DraCache::snapshot`] returns an `Arc<DraSnapshot>`; when nothing changed since the previous call
//! it is the very same `Arc` (O(1)). Otherwise only the parts that changed are rebuilt; the others
//! are shared. The allocated and in-flight states are copy-on-write: a change after a snapshot
//! copies that one state once, later changes mutate in place. Claims themselves are read live
//! ([`DraCache::claim`]), like upstream's assume cache: a cycle must see a claim another pod's
//! binding cycle just allocated, not a frozen copy.

mod claims;
mod classes;
mod slices;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice,
};
use parking_lot::RwLock;
use unisched_dra::{AllocatedState, ClassLookup, DeviceMaps, DraSnapshotIndex, StateLayers};

pub use claims::ClaimChange;
use claims::ClaimStore;
use classes::ClassStore;
use slices::SliceStore;

/// Annotation marking the scheduler-owned extended-resource claim of a pod (KEP-5004).
pub const EXTENDED_RESOURCE_CLAIM_ANNOTATION: &str = "resource.kubernetes.io/extended-resource-claim";

/// Prefix of the implicit extended-resource name of every DeviceClass (KEP-5004).
pub const IMPLICIT_EXTENDED_RESOURCE_PREFIX: &str = "deviceclass.resource.kubernetes.io/";

/// Why a DRA cache operation was refused. Nothing changed in either case.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DraCacheError {
    /// The object has no `metadata.name` (or no namespace, for a claim).
    #[error("{kind} without a name or namespace")]
    MissingName {
        /// The kind of object.
        kind: &'static str,
    },
    /// `assume_claim` with an object older than the watch's copy (the watch already saw a newer
    /// write; assuming would roll the claim back).
    #[error("ResourceClaim {key}: cannot assume resourceVersion {assumed}, the watch already has {cached}")]
    StaleAssume {
        /// `namespace/name`.
        key: String,
        /// The cached (watch) resourceVersion.
        cached: String,
        /// The resourceVersion that was to be assumed.
        assumed: String,
    },
}

/// An in-flight allocation (Reserve done, claim status not yet written).
#[derive(Clone, Debug, PartialEq)]
pub struct InFlightAllocation {
    /// The allocation the scheduler decided.
    pub allocation: Arc<AllocationResult>,
    /// The PodGroup scheduling attempt whose members may share it (`None`: the pod's own).
    pub share_key: Option<Arc<str>>,
    /// How many pods hold it: the one that made it and those that share it.
    pub holders: u32,
}

#[derive(Debug, Default)]
struct InFlight {
    by_uid: Arc<HashMap<String, InFlightAllocation>>,
    state: Arc<AllocatedState>,
    /// How many in-flight allocations were replaced, or dropped while the committed claims did
    /// not hold their devices (see [`DraSnapshot::frees`]).
    frees: u64,
}

/// Hears the claim changes the scheduler makes itself (see the module documentation). The
/// runtime turns them into cluster events for the queue.
pub type ClaimObserver = Arc<dyn Fn(&ClaimChange) + Send + Sync>;

#[derive(Default)]
struct Observer(RwLock<Option<ClaimObserver>>);

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.read().is_some() {
            "Observer(set)"
        } else {
            "Observer(none)"
        })
    }
}

impl Observer {
    fn notify(&self, change: &ClaimChange) {
        if !change.changed() {
            return;
        }
        let observer = self.0.read().clone();
        if let Some(o) = observer {
            o(change);
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    slices: SliceStore,
    classes: ClassStore,
    claims: ClaimStore,
    in_flight: InFlight,
    /// The last snapshot; dropped by any change.
    snapshot: Option<Arc<DraSnapshot>>,
}

/// The DRA state. See the module documentation.
///
/// All methods take `&self`; one `parking_lot` lock guards the state. Watch handlers call the
/// `apply_*`/`remove_*` methods; the DynamicResources plugin calls [`DraCache::snapshot`], the claim
/// lookups, the in-flight methods and [`DraCache::assume_claim`]/[`DraCache::forget_claim`].
#[derive(Debug, Default)]
pub struct DraCache {
    inner: RwLock<Inner>,
    observer: Observer,
}

/// `namespace/name` of an object, if it has both.
fn claim_key(claim: &ResourceClaim) -> Option<String> {
    let ns = claim.metadata.namespace.as_deref().filter(|s| !s.is_empty())?;
    let name = claim.metadata.name.as_deref().filter(|s| !s.is_empty())?;
    Some(format!("{ns}/{name}"))
}

impl DraCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the observer of the scheduler's own claim changes (replacing an earlier one).
    pub fn set_observer(&self, observer: ClaimObserver) {
        *self.observer.0.write() = Some(observer);
    }

    // ----- slices and taint rules -----

    /// A ResourceSlice was added or updated (watch event).
    pub fn apply_slice(&self, slice: Arc<ResourceSlice>) -> Result<(), DraCacheError> {
        let mut inner = self.inner.write();
        inner.slices.apply(slice)?;
        inner.snapshot = None;
        Ok(())
    }

    /// A ResourceSlice was added or updated, its devices' attribute and capacity maps already
    /// taken out by [`unisched_dra::split_device_maps`] (as the watch handler does, so that the
    /// maps are kept once, compactly).
    pub fn apply_split_slice(
        &self,
        slice: Arc<ResourceSlice>,
        maps: Arc<[DeviceMaps]>,
    ) -> Result<(), DraCacheError> {
        let mut inner = self.inner.write();
        inner.slices.apply_split(slice, maps)?;
        inner.snapshot = None;
        Ok(())
    }

    /// The devices' attribute and capacity maps of a slice as last applied, in device order.
    pub fn slice_device_maps(&self, name: &str) -> Option<Arc<[DeviceMaps]>> {
        self.inner.read().slices.device_maps(name)
    }

    /// A ResourceSlice was deleted. Returns whether it was known.
    pub fn remove_slice(&self, name: &str) -> bool {
        let mut inner = self.inner.write();
        let known = inner.slices.remove(name);
        if known {
            inner.snapshot = None;
        }
        known
    }

    /// A DeviceTaintRule was added or updated: its taint is applied to the devices it selects (and
    /// an older version's taint removed), re-preparing only the affected slices.
    pub fn apply_taint_rule(&self, rule: Arc<DeviceTaintRule>) -> Result<(), DraCacheError> {
        let mut inner = self.inner.write();
        inner.slices.apply_rule(rule)?;
        inner.snapshot = None;
        Ok(())
    }

    /// A DeviceTaintRule was deleted. Returns whether it was known.
    pub fn remove_taint_rule(&self, name: &str) -> bool {
        let mut inner = self.inner.write();
        let known = inner.slices.remove_rule(name);
        if known {
            inner.snapshot = None;
        }
        known
    }

    /// Number of slices held.
    pub fn slice_count(&self) -> usize {
        self.inner.read().slices.len()
    }

    /// The slice as the allocator sees it (taint rules applied), by name.
    pub fn slice(&self, name: &str) -> Option<Arc<ResourceSlice>> {
        self.inner.read().slices.prepared_slice(name)
    }

    // ----- classes -----

    /// A DeviceClass was added or updated.
    pub fn apply_class(&self, class: Arc<DeviceClass>) -> Result<(), DraCacheError> {
        let mut inner = self.inner.write();
        inner.classes.apply(class)?;
        inner.snapshot = None;
        Ok(())
    }

    /// A DeviceClass was deleted. Returns whether it was known.
    pub fn remove_class(&self, name: &str) -> bool {
        let mut inner = self.inner.write();
        let known = inner.classes.remove(name);
        if known {
            inner.snapshot = None;
        }
        known
    }

    /// A class by name.
    pub fn class(&self, name: &str) -> Option<Arc<DeviceClass>> {
        self.inner.read().classes.get(name)
    }

    /// The DeviceClass serving an extended resource (KEP-5004), live.
    pub fn class_for_extended_resource(&self, resource: &str) -> Option<String> {
        self.inner.read().classes.class_for_extended_resource(resource)
    }

    // ----- claims -----

    /// A ResourceClaim was added or updated (watch event). A newer watch version replaces an
    /// assumed copy. Returns the effective claim before and after.
    pub fn apply_claim(&self, claim: Arc<ResourceClaim>) -> Result<ClaimChange, DraCacheError> {
        let key = claim_key(&claim).ok_or(DraCacheError::MissingName {
            kind: "ResourceClaim",
        })?;
        let mut inner = self.inner.write();
        let change = inner.claims.apply(key, claim);
        if change.allocation_changed() {
            inner.snapshot = None;
        }
        Ok(change)
    }

    /// A ResourceClaim was deleted (watch event); the assumed copy goes too.
    pub fn remove_claim(&self, namespace: &str, name: &str) -> ClaimChange {
        let mut inner = self.inner.write();
        let change = inner.claims.remove(&format!("{namespace}/{name}"));
        if change.allocation_changed() {
            inner.snapshot = None;
        }
        change
    }

    /// Makes our own write visible before the watch echoes it (PreBind, after a successful API
    /// call). The object must not be older than the watch's copy.
    pub fn assume_claim(&self, claim: Arc<ResourceClaim>) -> Result<ClaimChange, DraCacheError> {
        let key = claim_key(&claim).ok_or(DraCacheError::MissingName {
            kind: "ResourceClaim",
        })?;
        let change = {
            let mut inner = self.inner.write();
            let change = inner.claims.assume(key, claim)?;
            if change.allocation_changed() {
                inner.snapshot = None;
            }
            change
        };
        self.observer.notify(&change);
        Ok(change)
    }

    /// Drops the assumed copy of the claim with this UID, restoring the watch's copy. Idempotent.
    pub fn forget_claim(&self, uid: &str) -> ClaimChange {
        let change = {
            let mut inner = self.inner.write();
            let change = inner.claims.forget(uid);
            if change.allocation_changed() {
                inner.snapshot = None;
            }
            change
        };
        self.observer.notify(&change);
        change
    }

    /// The effective claim (assumed copy first) by namespace and name.
    pub fn claim(&self, namespace: &str, name: &str) -> Option<Arc<ResourceClaim>> {
        self.inner.read().claims.get(&format!("{namespace}/{name}"))
    }

    /// The effective claim with this UID.
    pub fn claim_by_uid(&self, uid: &str) -> Option<Arc<ResourceClaim>> {
        self.inner.read().claims.get_by_uid(uid)
    }

    /// The scheduler-owned extended-resource claim of a pod (annotated, controlled by the pod).
    pub fn extended_resource_claim_for_pod(&self, pod_uid: &str) -> Option<Arc<ResourceClaim>> {
        self.inner.read().claims.extended_claim_for(pod_uid)
    }

    /// Whether the claim with this UID holds an assumed copy.
    pub fn is_claim_assumed(&self, uid: &str) -> bool {
        self.inner.read().claims.is_assumed(uid)
    }

    /// Number of claims held.
    pub fn claim_count(&self) -> usize {
        self.inner.read().claims.len()
    }

    // ----- in-flight allocations -----

    /// Records an allocation decided in Reserve for a claim that is not yet written. Replaces an
    /// earlier in-flight allocation of the same claim.
    pub fn reserve_in_flight(&self, claim_uid: &str, allocation: AllocationResult) {
        self.reserve_in_flight_shareable(claim_uid, allocation, None);
    }

    /// Like [`DraCache::reserve_in_flight`], for an allocation that members of the same PodGroup
    /// scheduling attempt (`share_key`) may share with [`DraCache::share_in_flight`].
    pub fn reserve_in_flight_shareable(
        &self,
        claim_uid: &str,
        allocation: AllocationResult,
        share_key: Option<Arc<str>>,
    ) {
        let mut inner = self.inner.write();
        let InFlight { by_uid, state, frees } = &mut inner.in_flight;
        let by_uid = Arc::make_mut(by_uid);
        let state = Arc::make_mut(state);
        let old = by_uid.remove(claim_uid);
        if let Some(old) = &old {
            state.remove_allocation(&old.allocation);
        }
        state.add_allocation(&allocation);
        if let Some(old) = old
            && *old.allocation != allocation
        {
            *frees += 1;
        }
        by_uid.insert(
            claim_uid.to_string(),
            InFlightAllocation {
                allocation: Arc::new(allocation),
                share_key,
                holders: 1,
            },
        );
        inner.snapshot = None;
    }

    /// Joins another pod to the in-flight allocation of a claim made in the same PodGroup
    /// scheduling attempt (`share_key`), and returns it. `None` (nothing changed) when the claim
    /// has no in-flight allocation or it belongs to someone else.
    pub fn share_in_flight(&self, claim_uid: &str, share_key: &str) -> Option<Arc<AllocationResult>> {
        let mut inner = self.inner.write();
        let by_uid = Arc::make_mut(&mut inner.in_flight.by_uid);
        let entry = by_uid.get_mut(claim_uid)?;
        if entry.share_key.as_deref() != Some(share_key) {
            return None;
        }
        entry.holders += 1;
        Some(entry.allocation.clone())
    }

    /// One holder lets an in-flight allocation go; the last one drops it. Returns whether there
    /// was one. Idempotent for an allocation held once (each holder releases once). When the
    /// committed claims do not hold all of its devices (it was never written), the observer hears
    /// the devices being freed.
    pub fn release_in_flight(&self, claim_uid: &str) -> bool {
        let freed = {
            let mut inner = self.inner.write();
            match Arc::make_mut(&mut inner.in_flight.by_uid).get_mut(claim_uid) {
                None => return false,
                Some(shared) if shared.holders > 1 => {
                    shared.holders -= 1;
                    return true;
                }
                Some(_) => {}
            }
            let InFlight { by_uid, state, .. } = &mut inner.in_flight;
            let old = Arc::make_mut(by_uid).remove(claim_uid);
            if let Some(old) = &old {
                Arc::make_mut(state).remove_allocation(&old.allocation);
            }
            inner.snapshot = None;
            let freed = old.filter(|o| !inner.claims.allocated().covers(&o.allocation));
            if freed.is_some() {
                inner.in_flight.frees += 1;
            }
            freed.map(|o| {
                let claim = inner
                    .claims
                    .get_by_uid(claim_uid)
                    .map(|c| (*c).clone())
                    .unwrap_or_else(|| {
                        let mut c = ResourceClaim::default();
                        c.metadata.uid = Some(claim_uid.to_string());
                        c
                    });
                ClaimChange::released(claim, (*o.allocation).clone())
            })
        };
        if let Some(change) = freed {
            self.observer.notify(&change);
        }
        true
    }

    /// The in-flight allocation of a claim, if any.
    pub fn in_flight(&self, claim_uid: &str) -> Option<InFlightAllocation> {
        self.inner.read().in_flight.by_uid.get(claim_uid).cloned()
    }

    /// Number of in-flight allocations.
    pub fn in_flight_count(&self) -> usize {
        self.inner.read().in_flight.by_uid.len()
    }

    // ----- snapshot -----

    /// The state one scheduling cycle allocates against. See the module documentation.
    pub fn snapshot(&self) -> Arc<DraSnapshot> {
        if let Some(s) = &self.inner.read().snapshot {
            return s.clone();
        }
        let mut inner = self.inner.write();
        if let Some(s) = &inner.snapshot {
            return s.clone();
        }
        let snap = Arc::new(DraSnapshot {
            index: inner.slices.index(),
            allocated: inner.claims.allocated(),
            in_flight: inner.in_flight.state.clone(),
            pending: inner.in_flight.by_uid.clone(),
            classes: inner.classes.map(),
            extended_resources: inner.classes.extended_map(),
            frees: inner.claims.frees() + inner.in_flight.frees,
        });
        inner.snapshot = Some(snap.clone());
        snap
    }

    /// The allocated state recomputed from scratch from the effective claims (for consistency
    /// checks and tests; O(claims)).
    pub fn recomputed_allocated(&self) -> AllocatedState {
        self.inner.read().claims.recompute_allocated()
    }

    /// The in-flight state recomputed from scratch (for consistency checks and tests).
    pub fn recomputed_in_flight(&self) -> AllocatedState {
        let inner = self.inner.read();
        let mut s = AllocatedState::new();
        for a in inner.in_flight.by_uid.values() {
            s.add_allocation(&a.allocation);
        }
        s
    }
}

/// Class name → class.
pub type ClassMap = HashMap<String, Arc<DeviceClass>>;

/// What one scheduling cycle allocates against: immutable, cheap to clone, shared between the
/// Filter calls of all nodes. See the module documentation of [`DraCache`].
#[derive(Clone, Debug, Default)]
pub struct DraSnapshot {
    index: Arc<DraSnapshotIndex>,
    allocated: Arc<AllocatedState>,
    in_flight: Arc<AllocatedState>,
    pending: Arc<HashMap<String, InFlightAllocation>>,
    classes: Arc<ClassMap>,
    extended_resources: Arc<HashMap<String, String>>,
    frees: u64,
}

impl DraSnapshot {
    /// A counter that only moves when devices may have been freed since an earlier snapshot: a
    /// committed allocation dropped or replaced (deallocation, claim deletion, a forgotten
    /// assumption), an in-flight allocation replaced, or one dropped without the committed claims
    /// holding its devices (a binding that failed before its claim was written). Allocating
    /// never moves it, nor does an in-flight allocation handing over to its written claim. Two
    /// snapshots with the same counter and the same [`Self::index`] therefore differ only by
    /// devices newly taken: a node short of free devices in the first is short in the second.
    pub fn frees(&self) -> u64 {
        self.frees
    }

    /// The slice index.
    pub fn index(&self) -> &Arc<DraSnapshotIndex> {
        &self.index
    }

    /// Devices allocated by committed (or assumed) claims.
    pub fn allocated(&self) -> &Arc<AllocatedState> {
        &self.allocated
    }

    /// Devices of in-flight allocations.
    pub fn in_flight(&self) -> &Arc<AllocatedState> {
        &self.in_flight
    }

    /// Both states stacked, as the allocator takes them.
    pub fn state_layers(&self) -> StateLayers {
        StateLayers::new(vec![self.allocated.clone(), self.in_flight.clone()])
    }

    /// Whether the claim with this UID has an in-flight allocation.
    pub fn has_pending_allocation(&self, claim_uid: &str) -> bool {
        self.pending.contains_key(claim_uid)
    }

    /// The in-flight allocation of a claim.
    pub fn pending_allocation(&self, claim_uid: &str) -> Option<&InFlightAllocation> {
        self.pending.get(claim_uid)
    }

    /// All classes.
    pub fn classes(&self) -> &Arc<ClassMap> {
        &self.classes
    }

    /// A class by name.
    pub fn class(&self, name: &str) -> Option<&Arc<DeviceClass>> {
        self.classes.get(name)
    }

    /// The class serving an extended resource (KEP-5004).
    pub fn class_for_extended_resource(&self, resource: &str) -> Option<&str> {
        self.extended_resources.get(resource).map(String::as_str)
    }

    /// The whole extended-resource map.
    pub fn extended_resources(&self) -> &Arc<HashMap<String, String>> {
        &self.extended_resources
    }
}

impl ClassLookup for DraSnapshot {
    fn class(&self, name: &str) -> Option<Arc<DeviceClass>> {
        self.classes.get(name).cloned()
    }
}
