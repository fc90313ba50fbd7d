//! ResourceClaims with an assume layer and the allocated-device index.
//!
//! Each claim key (`namespace/name`) holds the watch's copy and an optional assumed copy; the
//! *effective* claim is the assumed copy when there is one. The [`AllocatedState`] always equals the
//! union of the effective claims' allocations; it is updated incrementally whenever a claim's
//! effective allocation changes, and only then (a `reservedFor` change does not touch it, so it does
//! not copy a state a snapshot shares).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{AllocationResult, ResourceClaim};
use unisched_dra::AllocatedState;

use super::{DraCacheError, EXTENDED_RESOURCE_CLAIM_ANNOTATION};

/// The effective claim before and after an operation, for the runtime's cluster events.
#[derive(Clone, Debug, Default)]
pub struct ClaimChange {
    /// Before (None: the claim did not exist).
    pub old: Option<Arc<ResourceClaim>>,
    /// After (None: the claim is gone).
    pub new: Option<Arc<ResourceClaim>>,
    allocation_changed: bool,
}

impl ClaimChange {
    /// Whether the effective claim changed at all (an event worth sending).
    pub fn changed(&self) -> bool {
        match (&self.old, &self.new) {
            (None, None) => false,
            (Some(a), Some(b)) => !Arc::ptr_eq(a, b),
            _ => true,
        }
    }

    /// The change an in-flight allocation's release makes visible: `old` is `claim` with
    /// `allocation` (what the cycles saw), `new` is `claim` without one (the devices are free).
    pub(crate) fn released(claim: ResourceClaim, allocation: AllocationResult) -> Self {
        let mut old = claim.clone();
        old.status.get_or_insert_with(Default::default).allocation = Some(allocation);
        let mut new = claim;
        if let Some(s) = new.status.as_mut() {
            s.allocation = None;
        }
        ClaimChange {
            old: Some(Arc::new(old)),
            new: Some(Arc::new(new)),
            allocation_changed: true,
        }
    }

    /// Whether the effective allocation changed (the allocated-device index moved).
    pub fn allocation_changed(&self) -> bool {
        self.allocation_changed
    }
}

#[derive(Debug, Default)]
struct Entry {
    informer: Option<Arc<ResourceClaim>>,
    assumed: Option<Arc<ResourceClaim>>,
}

impl Entry {
    fn effective(&self) -> Option<&Arc<ResourceClaim>> {
        self.assumed.as_ref().or(self.informer.as_ref())
    }
}

fn allocation(claim: &ResourceClaim) -> Option<&AllocationResult> {
    claim.status.as_ref().and_then(|s| s.allocation.as_ref())
}

/// Whether an allocation has results on shares of multi-allocatable devices.
fn has_shares(a: &AllocationResult) -> bool {
    a.devices
        .iter()
        .flat_map(|d| d.results.iter().flatten())
        .any(|r| r.share_id.is_some())
}

fn uid(claim: &ResourceClaim) -> Option<&str> {
    claim.metadata.uid.as_deref().filter(|u| !u.is_empty())
}

/// The pod UID that controls an extended-resource claim, if the claim is one.
fn extended_owner(claim: &ResourceClaim) -> Option<&str> {
    let annotated = claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION))
        .is_some_and(|v| v == "true");
    if !annotated {
        return None;
    }
    claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == "Pod")
        .map(|o| o.uid.as_str())
}

/// Whether `incoming` is at least as new as `current`. Versions compare numerically when both
/// parse; otherwise the incoming (watch) object wins.
pub(crate) fn at_least_as_new(incoming: &ResourceClaim, current: &ResourceClaim) -> bool {
    let parse = |c: &ResourceClaim| {
        c.metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
    };
    match (parse(incoming), parse(current)) {
        (Some(a), Some(b)) => a >= b,
        _ => true,
    }
}

#[derive(Debug, Default)]
pub(crate) struct ClaimStore {
    entries: HashMap<String, Entry>,
    /// UID of the effective claim → key.
    by_uid: HashMap<String, String>,
    /// Pod UID → key of its extended-resource claim.
    extended_by_owner: HashMap<String, String>,
    allocated: Arc<AllocatedState>,
    /// How many times an effective allocation was dropped or replaced (see [`DraSnapshot::frees`]).
    ///
    /// [`DraSnapshot::frees`]: super::DraSnapshot::frees
    frees: u64,
}

impl ClaimStore {
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn get(&self, key: &str) -> Option<Arc<ResourceClaim>> {
        self.entries.get(key).and_then(Entry::effective).cloned()
    }

    pub(crate) fn get_by_uid(&self, uid: &str) -> Option<Arc<ResourceClaim>> {
        self.by_uid.get(uid).and_then(|k| self.get(k))
    }

    pub(crate) fn extended_claim_for(&self, pod_uid: &str) -> Option<Arc<ResourceClaim>> {
        self.extended_by_owner.get(pod_uid).and_then(|k| self.get(k))
    }

    pub(crate) fn is_assumed(&self, uid: &str) -> bool {
        self.by_uid
            .get(uid)
            .and_then(|k| self.entries.get(k))
            .is_some_and(|e| e.assumed.is_some())
    }

    pub(crate) fn allocated(&self) -> Arc<AllocatedState> {
        self.allocated.clone()
    }

    pub(crate) fn frees(&self) -> u64 {
        self.frees
    }

    pub(crate) fn recompute_allocated(&self) -> AllocatedState {
        AllocatedState::from_claims(self.entries.values().filter_map(Entry::effective).map(|c| &**c))
    }

    /// Moves the indexes from the old effective claim of `key` to the new one.
    fn transition(
        &mut self,
        key: &str,
        old: Option<Arc<ResourceClaim>>,
        new: Option<Arc<ResourceClaim>>,
    ) -> ClaimChange {
        let same = match (&old, &new) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if same {
            return ClaimChange {
                old,
                new,
                allocation_changed: false,
            };
        }
        let old_alloc = old.as_deref().and_then(allocation);
        let new_alloc = new.as_deref().and_then(allocation);
        let allocation_changed = old_alloc != new_alloc;
        if allocation_changed {
            let state = Arc::make_mut(&mut self.allocated);
            if let Some(a) = old_alloc {
                state.remove_allocation(a);
            }
            if let Some(a) = new_alloc {
                state.add_allocation(a);
            }
            // A device is freed only if the new state no longer holds it; a rewritten allocation
            // of the same devices (the API server's echo, a field the scheduler does not read)
            // frees nothing. Shares are counted as freed whenever they change: their consumed
            // capacity may have shrunk under the same share id.
            if old_alloc.is_some_and(|a| has_shares(a) || !state.covers(a)) {
                self.frees += 1;
            }
        }
        if let Some(o) = old.as_deref() {
            if let Some(u) = uid(o)
                && self.by_uid.get(u).is_some_and(|k| k == key)
            {
                self.by_uid.remove(u);
            }
            if let Some(owner) = extended_owner(o)
                && self.extended_by_owner.get(owner).is_some_and(|k| k == key)
            {
                self.extended_by_owner.remove(owner);
            }
        }
        if let Some(n) = new.as_deref() {
            if let Some(u) = uid(n) {
                self.by_uid.insert(u.to_string(), key.to_string());
            }
            if let Some(owner) = extended_owner(n) {
                self.extended_by_owner.insert(owner.to_string(), key.to_string());
            }
        }
        ClaimChange {
            old,
            new,
            allocation_changed,
        }
    }

    pub(crate) fn apply(&mut self, key: String, claim: Arc<ResourceClaim>) -> ClaimChange {
        let entry = self.entries.entry(key.clone()).or_default();
        let old = entry.effective().cloned();
        if let Some(assumed) = &entry.assumed {
            let recreated = uid(assumed) != uid(&claim);
            if recreated || at_least_as_new(&claim, assumed) {
                entry.assumed = None;
            }
        }
        entry.informer = Some(claim);
        let new = entry.effective().cloned();
        self.transition(&key, old, new)
    }

    pub(crate) fn remove(&mut self, key: &str) -> ClaimChange {
        let Some(entry) = self.entries.remove(key) else {
            return ClaimChange::default();
        };
        let old = entry.effective().cloned();
        self.transition(key, old, None)
    }

    pub(crate) fn assume(
        &mut self,
        key: String,
        claim: Arc<ResourceClaim>,
    ) -> Result<ClaimChange, DraCacheError> {
        let entry = self.entries.entry(key.clone()).or_default();
        if let Some(informer) = &entry.informer
            && uid(informer) == uid(&claim)
        {
            if !at_least_as_new(&claim, informer) {
                return Err(DraCacheError::StaleAssume {
                    key,
                    cached: informer.metadata.resource_version.clone().unwrap_or_default(),
                    assumed: claim.metadata.resource_version.clone().unwrap_or_default(),
                });
            }
            if entry.assumed.is_none() && at_least_as_new(informer, &claim) {
                // The watch already delivered this very version: nothing to assume.
                let same = entry.effective().cloned();
                return Ok(ClaimChange {
                    old: same.clone(),
                    new: same,
                    allocation_changed: false,
                });
            }
        }
        let old = entry.effective().cloned();
        entry.assumed = Some(claim);
        let new = entry.effective().cloned();
        Ok(self.transition(&key, old, new))
    }

    pub(crate) fn forget(&mut self, claim_uid: &str) -> ClaimChange {
        let Some(key) = self.by_uid.get(claim_uid).cloned() else {
            return ClaimChange::default();
        };
        let Some(entry) = self.entries.get_mut(&key) else {
            return ClaimChange::default();
        };
        if entry.assumed.as_deref().and_then(uid) != Some(claim_uid) {
            let same = entry.effective().cloned();
            return ClaimChange {
                old: same.clone(),
                new: same,
                allocation_changed: false,
            };
        }
        let old = entry.effective().cloned();
        entry.assumed = None;
        let new = entry.effective().cloned();
        if entry.informer.is_none() {
            self.entries.remove(&key);
        }
        self.transition(&key, old, new)
    }
}
