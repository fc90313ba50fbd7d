//! What is already allocated: the allocator's view of other claims.
//!
//! [`AllocatedState`] is maintained incrementally by the cache: call
//! [`AllocatedState::add_allocation`] when a claim gets (or is assumed to get) an allocation and
//! [`AllocatedState::remove_allocation`] with the same result when it goes away. It records
//!
//! * devices allocated exclusively (reference-counted, so two results naming the same device do
//!   not cancel out);
//! * shares of devices that allow multiple allocations, keyed by share id, with their consumed
//!   capacity and the aggregated consumption per device.
//!
//! Results with `adminAccess: true` are not recorded: admin access never makes a device
//! unavailable for others. Counter consumption is not stored here; the allocator derives it from
//! the devices in use and the pool's counter definitions.
//!
//! Exclusive allocations are grouped by pool, each pool's devices in their own copy-on-write map,
//! and the pools in copy-on-write shards ([`crate::pool_shards`]): cloning a state (the cache does
//! it whenever a claim changes while a snapshot holds the old one) copies a fixed number of `Arc`s
//! however many pools there are, and a change then copies one shard and the pools it touches. The
//! grouping also lets the allocator's per-node summary ask once per pool whether anything is in use
//! there.
//!
//! [`StateLayers`] stacks several states without copying (for example the informer-fed state
//! plus the in-flight allocations of pods that are assumed but not yet bound).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{AllocationResult, DeviceRequestAllocationResult, ResourceClaim};
use unisched_resource::Quantity;

use crate::ids::{DeviceId, PoolKey, PoolKeyView};
use crate::pool_shards::PoolShards;
use unisched_fasthash::FastHashMap;

pub(crate) use crate::pool_shards::PoolExclusive;

/// One share of a multi-allocatable device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Share {
    /// Consumed capacity by name; `None` when the recorded amount could not be parsed, in which
    /// case the device is treated as full.
    consumed: Option<BTreeMap<String, Quantity>>,
    /// How many results recorded this share id.
    refs: u32,
}

/// Aggregated use of one multi-allocatable device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct SharedUse {
    shares: BTreeMap<String, Share>,
    /// Sum of the consumed capacity of all shares.
    total: BTreeMap<String, Quantity>,
    /// Number of shares whose consumption is unknown.
    saturated: u32,
}

/// Devices in use by allocated (or assumed) claims. See the module documentation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocatedState {
    /// Exclusively allocated devices by pool (no empty pool maps).
    exclusive: PoolShards,
    /// Number of distinct exclusively allocated devices.
    exclusive_len: usize,
    shared: FastHashMap<DeviceId, SharedUse>,
}

fn device_id(r: &DeviceRequestAllocationResult) -> DeviceId {
    DeviceId::new(&r.driver, &r.pool, &r.device)
}

impl AllocatedState {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a state from all claims that have an allocation.
    pub fn from_claims<'a>(claims: impl IntoIterator<Item = &'a ResourceClaim>) -> Self {
        let mut state = Self::new();
        for claim in claims {
            state.add_claim(claim);
        }
        state
    }

    /// Records the allocation of a claim, if it has one.
    pub fn add_claim(&mut self, claim: &ResourceClaim) {
        if let Some(a) = claim.status.as_ref().and_then(|s| s.allocation.as_ref()) {
            self.add_allocation(a);
        }
    }

    /// Forgets the allocation of a claim, if it has one.
    pub fn remove_claim(&mut self, claim: &ResourceClaim) {
        if let Some(a) = claim.status.as_ref().and_then(|s| s.allocation.as_ref()) {
            self.remove_allocation(a);
        }
    }

    fn results(a: &AllocationResult) -> impl Iterator<Item = &DeviceRequestAllocationResult> {
        a.devices
            .iter()
            .flat_map(|d| d.results.iter().flatten())
            .filter(|r| r.admin_access != Some(true))
    }

    /// Records every device of an allocation result.
    pub fn add_allocation(&mut self, allocation: &AllocationResult) {
        for r in Self::results(allocation) {
            match &r.share_id {
                None => {
                    let pool = Arc::make_mut(self.exclusive.entry(PoolKey::new(&r.driver, &r.pool)));
                    let refs = pool.entry(Arc::from(r.device.as_str())).or_insert(0);
                    if *refs == 0 {
                        self.exclusive_len += 1;
                    }
                    *refs += 1;
                }
                Some(share_id) => {
                    let id = device_id(r);
                    let consumed: Option<BTreeMap<String, Quantity>> = r
                        .consumed_capacity
                        .iter()
                        .flatten()
                        .map(|(k, v)| Quantity::from_api(v).ok().map(|q| (k.clone(), q)))
                        .collect();
                    let usage = self.shared.entry(id).or_default();
                    let share = usage.shares.entry(share_id.clone()).or_default();
                    share.refs += 1;
                    if share.refs > 1 {
                        continue;
                    }
                    share.consumed = consumed.clone();
                    match consumed {
                        None => usage.saturated += 1,
                        Some(consumed) => {
                            for (name, q) in consumed {
                                let total = usage.total.entry(name).or_default();
                                *total = total.checked_add(&q).unwrap_or_else(|| total.clone());
                            }
                        }
                    }
                }
            }
        }
    }

    /// Forgets every device of an allocation result (the inverse of [`Self::add_allocation`]).
    pub fn remove_allocation(&mut self, allocation: &AllocationResult) {
        for r in Self::results(allocation) {
            match &r.share_id {
                None => {
                    let key: &dyn PoolKeyView = &(r.driver.as_str(), r.pool.as_str());
                    let Some(pool) = self.exclusive.get_mut(key) else {
                        continue;
                    };
                    if !pool.contains_key(r.device.as_str()) {
                        continue;
                    }
                    let pool_map = Arc::make_mut(pool);
                    if let Some(n) = pool_map.get_mut(r.device.as_str()) {
                        *n -= 1;
                        if *n == 0 {
                            pool_map.remove(r.device.as_str());
                            self.exclusive_len -= 1;
                        }
                    }
                    if pool_map.is_empty() {
                        self.exclusive.remove(key);
                    }
                }
                Some(share_id) => {
                    let id = device_id(r);
                    let Some(usage) = self.shared.get_mut(&id) else {
                        continue;
                    };
                    let Some(share) = usage.shares.get_mut(share_id) else {
                        continue;
                    };
                    share.refs -= 1;
                    if share.refs > 0 {
                        continue;
                    }
                    let consumed = share.consumed.take();
                    usage.shares.remove(share_id);
                    match consumed {
                        None => usage.saturated = usage.saturated.saturating_sub(1),
                        Some(consumed) => {
                            for (name, q) in consumed {
                                if let Some(total) = usage.total.get_mut(&name) {
                                    *total = total.checked_sub(&q).unwrap_or_default();
                                }
                            }
                        }
                    }
                    if usage.shares.is_empty() {
                        self.shared.remove(&id);
                    }
                }
            }
        }
    }

    /// Whether the device is allocated exclusively.
    pub fn is_exclusively_allocated(&self, id: &DeviceId) -> bool {
        self.exclusive
            .get(&(&*id.driver, &*id.pool) as &dyn PoolKeyView)
            .is_some_and(|p| p.contains_key(&*id.device))
    }

    /// The exclusively allocated devices of a pool; `None` when there are none.
    pub(crate) fn pool_exclusive(&self, pool: &PoolKey) -> Option<&PoolExclusive> {
        self.exclusive.get(pool as &dyn PoolKeyView).map(|p| &**p)
    }

    /// Whether the device has at least one share allocated.
    pub fn has_shares(&self, id: &DeviceId) -> bool {
        self.shared.contains_key(id)
    }

    /// Whether the device is in use in any way (exclusive or shared); such a device consumes its
    /// counters.
    pub fn is_allocated(&self, id: &DeviceId) -> bool {
        self.is_exclusively_allocated(id) || self.has_shares(id)
    }

    /// Aggregated consumed capacity of a shared device; `None` for "unknown, treat as full".
    pub fn consumed_capacity(&self, id: &DeviceId) -> Option<Option<&BTreeMap<String, Quantity>>> {
        self.shared
            .get(id)
            .map(|u| if u.saturated > 0 { None } else { Some(&u.total) })
    }

    /// Whether every device of `allocation` is still in use here: each exclusive result's device
    /// is allocated exclusively and each share is recorded (under its share id). Admin-access
    /// results never count.
    pub fn covers(&self, allocation: &AllocationResult) -> bool {
        Self::results(allocation).all(|r| {
            let id = device_id(r);
            match &r.share_id {
                None => self.is_exclusively_allocated(&id),
                Some(share) => self.shared.get(&id).is_some_and(|u| u.shares.contains_key(share)),
            }
        })
    }

    /// Number of exclusively allocated devices.
    pub fn exclusive_len(&self) -> usize {
        self.exclusive_len
    }

    /// Number of devices with shares.
    pub fn shared_len(&self) -> usize {
        self.shared.len()
    }
}

/// Several [`AllocatedState`]s seen as one (their union; capacities add up).
#[derive(Clone, Debug, Default)]
pub struct StateLayers {
    layers: Vec<Arc<AllocatedState>>,
}

/// Consumed capacity of one device across layers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayeredCapacity {
    /// Nothing consumed.
    None,
    /// Some layer recorded an amount that could not be parsed: the device is full.
    Full,
    /// Summed amounts by capacity name.
    Amounts(BTreeMap<String, Quantity>),
}

impl StateLayers {
    /// Stacks the given states.
    pub fn new(layers: Vec<Arc<AllocatedState>>) -> Self {
        StateLayers { layers }
    }

    /// One layer.
    pub fn single(state: Arc<AllocatedState>) -> Self {
        StateLayers { layers: vec![state] }
    }

    /// Adds a layer on top.
    pub fn push(&mut self, state: Arc<AllocatedState>) {
        self.layers.push(state);
    }

    /// The layers.
    pub fn layers(&self) -> &[Arc<AllocatedState>] {
        &self.layers
    }

    /// See [`AllocatedState::is_exclusively_allocated`].
    pub fn is_exclusively_allocated(&self, id: &DeviceId) -> bool {
        self.layers.iter().any(|l| l.is_exclusively_allocated(id))
    }

    /// See [`AllocatedState::has_shares`].
    pub fn has_shares(&self, id: &DeviceId) -> bool {
        self.layers.iter().any(|l| l.has_shares(id))
    }

    /// See [`AllocatedState::is_allocated`].
    pub fn is_allocated(&self, id: &DeviceId) -> bool {
        self.layers.iter().any(|l| l.is_allocated(id))
    }

    /// Consumed capacity summed over layers, each share counted once.
    ///
    /// The same share can sit in two layers at once: an allocation still recorded as in flight
    /// whose claim the watch (or our own assume) already shows as allocated. Summing the layers'
    /// totals would count that share twice and make a device look fuller than it is, rejecting pods
    /// that fit, with no event to retry them once the in-flight record goes. So when more than one
    /// layer uses the device, the shares are merged by share id first.
    pub fn consumed_capacity(&self, id: &DeviceId) -> LayeredCapacity {
        let mut users = self.layers.iter().filter_map(|l| l.shared.get(id));
        let Some(first) = users.next() else {
            return LayeredCapacity::None;
        };
        let Some(second) = users.next() else {
            return if first.saturated > 0 {
                LayeredCapacity::Full
            } else {
                LayeredCapacity::Amounts(first.total.clone())
            };
        };
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        let mut out: BTreeMap<String, Quantity> = BTreeMap::new();
        for usage in [first, second].into_iter().chain(users) {
            for (share_id, share) in &usage.shares {
                if !seen.insert(share_id.as_str()) {
                    continue;
                }
                let Some(consumed) = &share.consumed else {
                    return LayeredCapacity::Full;
                };
                for (name, q) in consumed {
                    let slot = out.entry(name.clone()).or_default();
                    match slot.checked_add(q) {
                        Some(sum) => *slot = sum,
                        None => return LayeredCapacity::Full,
                    }
                }
            }
        }
        LayeredCapacity::Amounts(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::resource::v1::DeviceAllocationResult;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

    fn result(
        device: &str,
        share: Option<&str>,
        mem: Option<&str>,
        admin: bool,
    ) -> DeviceRequestAllocationResult {
        DeviceRequestAllocationResult {
            request: "r".into(),
            driver: "d".into(),
            pool: "p".into(),
            device: device.into(),
            share_id: share.map(String::from),
            consumed_capacity: mem
                .map(|m| [("mem".to_string(), ApiQuantity(m.into()))].into_iter().collect()),
            admin_access: admin.then_some(true),
            ..Default::default()
        }
    }

    fn alloc(results: Vec<DeviceRequestAllocationResult>) -> AllocationResult {
        AllocationResult {
            devices: Some(DeviceAllocationResult {
                results: Some(results),
                config: None,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn add_remove_is_symmetric() {
        let a = alloc(vec![
            result("a", None, None, false),
            result("s", Some("1"), Some("1Gi"), false),
        ]);
        let b = alloc(vec![
            result("a", None, None, false),
            result("s", Some("2"), Some("2Gi"), false),
        ]);
        let admin = alloc(vec![result("x", None, None, true)]);
        let mut st = AllocatedState::new();
        st.add_allocation(&a);
        st.add_allocation(&b);
        st.add_allocation(&admin);
        let id = DeviceId::new("d", "p", "s");
        assert!(st.is_exclusively_allocated(&DeviceId::new("d", "p", "a")));
        assert!(
            !st.is_allocated(&DeviceId::new("d", "p", "x")),
            "admin access is not recorded"
        );
        assert_eq!(
            st.consumed_capacity(&id),
            Some(Some(
                &[("mem".to_string(), Quantity::parse("3Gi").unwrap())]
                    .into_iter()
                    .collect()
            ))
        );
        st.remove_allocation(&a);
        assert!(
            st.is_exclusively_allocated(&DeviceId::new("d", "p", "a")),
            "refcounted"
        );
        st.remove_allocation(&b);
        st.remove_allocation(&admin);
        assert_eq!(st, AllocatedState::new());
    }

    #[test]
    fn unparseable_consumption_saturates() {
        let a = alloc(vec![result("s", Some("1"), Some("garbage"), false)]);
        let mut st = AllocatedState::new();
        st.add_allocation(&a);
        let layers = StateLayers::single(Arc::new(st.clone()));
        assert_eq!(
            layers.consumed_capacity(&DeviceId::new("d", "p", "s")),
            LayeredCapacity::Full
        );
        st.remove_allocation(&a);
        assert_eq!(st, AllocatedState::new());
    }

    #[test]
    fn exclusive_devices_by_pool() {
        let in_pool = |pool: &str, device: &str| DeviceRequestAllocationResult {
            pool: pool.into(),
            ..result(device, None, None, false)
        };
        let a = alloc(vec![in_pool("p", "a"), in_pool("q", "a")]);
        let b = alloc(vec![in_pool("p", "b")]);
        let mut st = AllocatedState::new();
        st.add_allocation(&a);
        st.add_allocation(&a);
        let before = st.clone();
        st.add_allocation(&b);
        assert_eq!(st.exclusive_len(), 3);
        assert!(st.is_exclusively_allocated(&DeviceId::new("d", "q", "a")));
        assert!(!st.is_exclusively_allocated(&DeviceId::new("d", "q", "b")));
        assert!(!st.is_exclusively_allocated(&DeviceId::new("e", "p", "a")));
        // The clone shares the pools' maps but never sees later changes.
        assert_eq!(before.exclusive_len(), 2);
        assert!(!before.is_exclusively_allocated(&DeviceId::new("d", "p", "b")));
        let p = PoolKey::new("d", "p");
        assert_eq!(st.pool_exclusive(&p).map(|m| m.len()), Some(2));
        assert_eq!(before.pool_exclusive(&p).map(|m| m.len()), Some(1));
        // Removing what was never recorded changes nothing.
        st.remove_allocation(&alloc(vec![in_pool("p", "zz"), in_pool("zz", "a")]));
        assert_eq!(st.exclusive_len(), 3);
        st.remove_allocation(&b);
        assert_eq!(st, before);
        st.remove_allocation(&a);
        assert_eq!(st.exclusive_len(), 2, "still referenced once");
        st.remove_allocation(&a);
        assert_eq!(st.pool_exclusive(&p), None);
        assert_eq!(st, AllocatedState::new());
        assert_eq!(before.exclusive_len(), 2);
    }
}
