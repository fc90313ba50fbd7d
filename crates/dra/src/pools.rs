//! ResourceSlices prepared once, and the pool index built from them.
//!
//! * [`PreparedSlice`] wraps one `ResourceSlice` (shared through an `Arc`, never cloned) with
//!   everything parsed that the allocator needs repeatedly: device ids, capacities and request
//!   policies, counter sets and counter consumption, the node-selection mode. It also owns the
//!   per-device CEL values and the cache of (selector, device) match results, so those survive
//!   as long as the slice object does — the cache can keep `Arc<PreparedSlice>`s and rebuild the
//!   index cheaply whenever one slice changes.
//! * [`DraSnapshotIndex`] groups prepared slices by node name (slices with `spec.nodeName`) and
//!   keeps the node-independent ones (node selector, all nodes, per-device selection) apart, so
//!   one node's allocation touches only its own slices plus the shared ones. Per pool it records
//!   the newest generation (older generations are ignored), whether all `resourceSliceCount`
//!   slices of that generation are present, whether the pool is valid (unique device names,
//!   counter sets defined once, consumed counters defined), and the pool-wide counter sets with
//!   each device's consumption resolved to counter indices — counters may live in a slice that
//!   does not target the node.
//!
//! For the allocator's per-node summary ([`crate::Allocator::fits_without_search`]) a prepared
//! slice also knows whether all its devices are plain (see [`PreparedSlice::all_plain`]) and
//! caches, per selector list, which of its devices match (or that some device's evaluation
//! failed), so deciding a simple claim on a node costs a few lookups instead of per-device work.
//!
//! Validity is judged over all slices of the pool's newest generation (upstream only checks
//! duplicate device names among the slices that target the node); that is stricter, and the same
//! answer for the common one-node pools.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::{Node, NodeSelector};
use k8s_openapi::api::resource::v1::{Device, ResourceSlice};
use parking_lot::RwLock;
use unisched_resource::{Quantity, QuantityError};

use crate::capacity::{CapacityPolicy, CapacityRange, PreparedCapacity};
use crate::cel::{DeviceValueSlot, SelectorId};
use crate::device_maps::{DeviceMaps, split_shared_slice};
use crate::ids::{DeviceId, PoolKey};
use crate::nodesel::{NodeSelectorError, node_matches};
use unisched_fasthash::FastHashMap;

/// Entries a slice's match cache may hold per device before it is cleared.
const MATCH_CACHE_PER_DEVICE: usize = 64;

/// Selector lists a slice's selection cache may hold before it is cleared.
const SELECTION_CACHE_LISTS: usize = 64;

/// A slice's matching devices (one [`Selection`]) grouped by the scalar value of one attribute,
/// for the summary of `matchAttribute` claims: per node it then counts the free devices of each
/// group instead of looking the attribute up on every device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AttributeGroups {
    /// Per distinct value, in order of first appearance: the matching devices holding it,
    /// ascending (the first one's attribute is the group's value). Devices without the attribute
    /// are in no group.
    Groups(Arc<[Box<[u32]>]>),
    /// Some matching device holds a list value (matched by intersection): left to the search.
    Lists,
}

/// Which devices of a slice pass a list of selectors (evaluated in list order, first rejection
/// wins, as the allocator does).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Selection {
    /// Evaluating some device failed (a CEL runtime error): only the full allocator may decide.
    Errored,
    /// Indices of the matching devices, ascending.
    Devices(Arc<[u32]>),
}

/// How a slice says which nodes can reach its devices.
#[derive(Clone, Debug)]
pub enum NodeScope {
    /// `spec.nodeName`.
    NodeName(String),
    /// `spec.allNodes: true`.
    AllNodes,
    /// `spec.nodeSelector`.
    Selector(NodeSelector),
    /// `spec.perDeviceNodeSelection: true`: every device says it itself.
    PerDevice,
    /// Nothing set (a future mode): the slice is ignored.
    Unknown,
}

/// One device of a prepared slice.
#[derive(Debug)]
pub struct PreparedDevice {
    /// `<driver>/<pool>/<device>`.
    pub id: DeviceId,
    /// `allowMultipleAllocations`.
    pub allow_multiple: bool,
    /// Capacities in name order.
    pub capacities: Vec<PreparedCapacity>,
    /// `consumesCounters`: (counter set, [(counter, amount)]).
    pub consumes: Vec<(String, Vec<(String, Quantity)>)>,
    /// Whether the device has binding conditions.
    pub has_binding_conditions: bool,
    /// Engine-owned storage for the device's selector input.
    pub slot: DeviceValueSlot,
}

/// A ResourceSlice parsed once. See the module documentation.
#[derive(Debug)]
pub struct PreparedSlice {
    /// Without the devices' maps: those are in `maps`.
    slice: Arc<ResourceSlice>,
    maps: Arc<[DeviceMaps]>,
    name: Arc<str>,
    pool: PoolKey,
    generation: i64,
    slice_count: i64,
    scope: NodeScope,
    devices: Vec<PreparedDevice>,
    counter_sets: Vec<(String, Vec<(String, Quantity)>)>,
    invalid: Option<String>,
    has_binding_conditions: bool,
    /// No device has binding conditions, consumes counters or maps node-allocatable resources.
    plain_devices: bool,
    /// Some device has taints.
    has_taints: bool,
    /// Some device allows multiple allocations.
    has_multi_allocatable: bool,
    match_cache: RwLock<FastHashMap<(SelectorId, u32), bool>>,
    selection_cache: RwLock<FastHashMap<Box<[SelectorId]>, Selection>>,
    /// Per selector list: `(attribute, list-type attributes enabled, groups)`.
    attribute_groups_cache: RwLock<FastHashMap<Box<[SelectorId]>, Vec<(String, bool, AttributeGroups)>>>,
}

/// Why a device or counter set of a slice cannot be prepared. The slice is kept and its pool is
/// invalid, with this message as the reason reported for it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SliceDataError {
    /// A capacity, counter or request-policy quantity does not parse.
    #[error("{what}: {source}")]
    Quantity {
        /// Which value, e.g. `device gpu-0 capacity memory`.
        what: String,
        /// Why it does not parse.
        #[source]
        source: QuantityError,
    },
}

fn parse_quantity(
    what: &str,
    q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
) -> Result<Quantity, SliceDataError> {
    Quantity::from_api(q).map_err(|source| SliceDataError::Quantity {
        what: what.to_string(),
        source,
    })
}

fn prepare_device(
    slice: &ResourceSlice,
    device: &Device,
    maps: &DeviceMaps,
) -> Result<PreparedDevice, SliceDataError> {
    // Exact capacities: a vector grown by `push` keeps room for four, and 40,000 devices with
    // one capacity each wasted ~27 MB that way.
    let mut capacities = Vec::with_capacity(maps.capacity().len());
    for (name, cap) in maps.capacity() {
        let what = format!("device {} capacity {name}", device.name);
        let policy = match &cap.request_policy {
            None => None,
            Some(p) => Some(CapacityPolicy {
                default: p.default.as_ref().map(|q| parse_quantity(&what, q)).transpose()?,
                valid_values: p
                    .valid_values
                    .iter()
                    .flatten()
                    .map(|q| parse_quantity(&what, q))
                    .collect::<Result<_, _>>()?,
                range: match &p.valid_range {
                    None => None,
                    Some(r) => Some(CapacityRange {
                        min: parse_quantity(&what, &r.min)?,
                        max: r.max.as_ref().map(|q| parse_quantity(&what, q)).transpose()?,
                        step: r.step.as_ref().map(|q| parse_quantity(&what, q)).transpose()?,
                    }),
                },
            }),
        };
        capacities.push(PreparedCapacity {
            name: name.clone(),
            value: parse_quantity(&what, &cap.value)?,
            policy,
        });
    }
    let mut consumes = Vec::with_capacity(device.consumes_counters.as_ref().map_or(0, Vec::len));
    for c in device.consumes_counters.iter().flatten() {
        let mut counters = Vec::with_capacity(c.counters.len());
        for (name, counter) in &c.counters {
            counters.push((
                name.clone(),
                parse_quantity(&format!("device {} counter {name}", device.name), &counter.value)?,
            ));
        }
        consumes.push((c.counter_set.clone(), counters));
    }
    Ok(PreparedDevice {
        id: DeviceId::new(&slice.spec.driver, &slice.spec.pool.name, &device.name),
        allow_multiple: device.allow_multiple_allocations.unwrap_or(false),
        capacities,
        consumes,
        has_binding_conditions: device.binding_conditions.as_ref().is_some_and(|b| !b.is_empty()),
        slot: DeviceValueSlot::default(),
    })
}

impl PreparedSlice {
    /// Prepares a slice. Never fails: a slice with unparseable data is kept and makes its pool
    /// invalid (reported, never allocated from).
    ///
    /// Devices that still carry their attribute and capacity maps are split first (on a copy, so
    /// the slice is kept once, without them); see [`crate::device_maps`].
    pub fn new(slice: Arc<ResourceSlice>) -> Self {
        let (slice, maps) = split_shared_slice(slice);
        Self::with_maps(slice, maps)
    }

    /// Prepares a slice whose devices' maps were taken out by [`split_device_maps`]; `maps` is
    /// in device order.
    pub fn with_maps(slice: Arc<ResourceSlice>, maps: Arc<[DeviceMaps]>) -> Self {
        let spec = &slice.spec;
        let scope = match (
            &spec.node_name,
            spec.all_nodes,
            &spec.node_selector,
            spec.per_device_node_selection,
        ) {
            (Some(n), _, _, _) if !n.is_empty() => NodeScope::NodeName(n.clone()),
            (_, Some(true), _, _) => NodeScope::AllNodes,
            (_, _, Some(sel), _) => NodeScope::Selector(sel.clone()),
            (_, _, _, Some(true)) => NodeScope::PerDevice,
            _ => NodeScope::Unknown,
        };
        let mut invalid = None;
        let mut devices = Vec::new();
        for (i, device) in spec.devices.iter().flatten().enumerate() {
            let device_maps = maps.get(i).unwrap_or(DeviceMaps::empty());
            match prepare_device(&slice, device, device_maps) {
                Ok(d) => devices.push(d),
                Err(e) => {
                    invalid.get_or_insert(e.to_string());
                    // Keep indices aligned with the API devices.
                    devices.push(PreparedDevice {
                        id: DeviceId::new(&spec.driver, &spec.pool.name, &device.name),
                        allow_multiple: false,
                        capacities: Vec::new(),
                        consumes: Vec::new(),
                        has_binding_conditions: false,
                        slot: DeviceValueSlot::default(),
                    });
                }
            }
        }
        let mut counter_sets = Vec::new();
        for set in spec.shared_counters.iter().flatten() {
            let mut counters = Vec::new();
            for (name, c) in &set.counters {
                match parse_quantity(&format!("counter set {} counter {name}", set.name), &c.value) {
                    Ok(q) => counters.push((name.clone(), q)),
                    Err(e) => {
                        invalid.get_or_insert(e.to_string());
                    }
                }
            }
            counter_sets.push((set.name.clone(), counters));
        }
        let has_binding_conditions = devices.iter().any(|d| d.has_binding_conditions);
        let api_devices = spec.devices.as_deref().unwrap_or_default();
        let plain_devices = api_devices.len() == devices.len()
            && devices
                .iter()
                .all(|d| !d.has_binding_conditions && d.consumes.is_empty())
            && api_devices
                .iter()
                .all(|d| d.node_allocatable_resources.as_ref().is_none_or(|m| m.is_empty()));
        let has_taints = api_devices
            .iter()
            .any(|d| d.taints.as_ref().is_some_and(|t| !t.is_empty()));
        let has_multi_allocatable = devices.iter().any(|d| d.allow_multiple);
        PreparedSlice {
            name: Arc::from(slice.metadata.name.as_deref().unwrap_or_default()),
            pool: PoolKey::new(&spec.driver, &spec.pool.name),
            generation: spec.pool.generation,
            slice_count: spec.pool.resource_slice_count,
            scope,
            devices,
            counter_sets,
            invalid,
            has_binding_conditions,
            plain_devices,
            has_taints,
            has_multi_allocatable,
            match_cache: RwLock::new(FastHashMap::default()),
            selection_cache: RwLock::new(FastHashMap::default()),
            attribute_groups_cache: RwLock::new(FastHashMap::default()),
            slice,
            maps,
        }
    }

    /// The API object, without its devices' attribute and capacity maps (see
    /// [`PreparedSlice::device_maps`]).
    pub fn slice(&self) -> &Arc<ResourceSlice> {
        &self.slice
    }

    /// The attribute and capacity maps of every device, in device order.
    pub fn all_device_maps(&self) -> &Arc<[DeviceMaps]> {
        &self.maps
    }

    /// The attributes and capacities of the device at `index` (empty past the end).
    pub fn device_maps(&self, index: usize) -> &DeviceMaps {
        self.maps.get(index).unwrap_or(DeviceMaps::empty())
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The pool the slice belongs to.
    pub fn pool(&self) -> &PoolKey {
        &self.pool
    }

    /// The driver.
    pub fn driver(&self) -> &str {
        &self.pool.driver
    }

    /// Node-selection mode.
    pub fn scope(&self) -> &NodeScope {
        &self.scope
    }

    /// Prepared devices, in slice order.
    pub fn devices(&self) -> &[PreparedDevice] {
        &self.devices
    }

    /// The API device at `index`.
    pub fn api_device(&self, index: usize) -> Option<&Device> {
        self.slice.spec.devices.as_ref().and_then(|d| d.get(index))
    }

    /// Whether the slice advertises shared counters.
    pub fn has_shared_counters(&self) -> bool {
        !self.counter_sets.is_empty()
    }

    /// Whether the slice uses per-device node selection.
    pub fn per_device_node_selection(&self) -> bool {
        matches!(self.scope, NodeScope::PerDevice)
    }

    /// Whether this slice targets `node` (for per-device selection: whether any device does).
    pub fn targets(&self, node: &Node) -> Result<bool, NodeSelectorError> {
        match &self.scope {
            NodeScope::NodeName(n) => Ok(node.metadata.name.as_deref() == Some(n.as_str())),
            NodeScope::AllNodes => Ok(true),
            NodeScope::Selector(sel) => node_matches(node, None, false, Some(sel)),
            NodeScope::PerDevice => {
                for i in 0..self.devices.len() {
                    if self.device_targets(i, node)? {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
            NodeScope::Unknown => Ok(false),
        }
    }

    /// For per-device node selection: whether device `index` is reachable from `node`.
    pub fn device_targets(&self, index: usize, node: &Node) -> Result<bool, NodeSelectorError> {
        let Some(d) = self.api_device(index) else {
            return Ok(false);
        };
        node_matches(
            node,
            d.node_name.as_deref(),
            d.all_nodes.unwrap_or(false),
            d.node_selector.as_ref(),
        )
    }

    /// Whether every device is plain: no binding conditions, no counter consumption, no
    /// node-allocatable resources, and (when those features are on) no taints and no
    /// multi-allocation.
    pub fn all_plain(&self, device_taints: bool, consumable_capacity: bool) -> bool {
        self.plain_devices
            && !(device_taints && self.has_taints)
            && !(consumable_capacity && self.has_multi_allocatable)
    }

    /// The cached selection for a selector list (see [`Selection`]).
    pub(crate) fn cached_selection(&self, selectors: &[SelectorId]) -> Option<Selection> {
        self.selection_cache.read().get(selectors).cloned()
    }

    /// Stores the selection for a selector list.
    pub(crate) fn store_selection(&self, selectors: &[SelectorId], selection: Selection) {
        let mut cache = self.selection_cache.write();
        if cache.len() >= SELECTION_CACHE_LISTS {
            cache.clear();
        }
        cache.insert(selectors.into(), selection);
    }

    /// The cached grouping of a selection by `attribute` (see [`AttributeGroups`]).
    pub(crate) fn cached_attribute_groups(
        &self,
        selectors: &[SelectorId],
        attribute: &str,
        list_mode: bool,
    ) -> Option<AttributeGroups> {
        let cache = self.attribute_groups_cache.read();
        cache
            .get(selectors)?
            .iter()
            .find(|(a, l, _)| a == attribute && *l == list_mode)
            .map(|(_, _, g)| g.clone())
    }

    /// Stores the grouping of a selection by `attribute`.
    pub(crate) fn store_attribute_groups(
        &self,
        selectors: &[SelectorId],
        attribute: &str,
        list_mode: bool,
        groups: AttributeGroups,
    ) {
        let mut cache = self.attribute_groups_cache.write();
        if cache.len() >= SELECTION_CACHE_LISTS {
            cache.clear();
        }
        let per_list = cache.entry(selectors.into()).or_default();
        if per_list.len() >= SELECTION_CACHE_LISTS {
            per_list.clear();
        }
        per_list.push((attribute.to_string(), list_mode, groups));
    }

    /// Cached result of a selector for one device.
    pub(crate) fn cached_match(&self, selector: SelectorId, device: u32) -> Option<bool> {
        self.match_cache.read().get(&(selector, device)).copied()
    }

    /// Stores the result of a selector for one device.
    pub(crate) fn store_match(&self, selector: SelectorId, device: u32, matches: bool) {
        let mut cache = self.match_cache.write();
        if cache.len() >= MATCH_CACHE_PER_DEVICE * self.devices.len().max(1) {
            cache.clear();
        }
        cache.insert((selector, device), matches);
    }
}

/// One counter of a pool.
#[derive(Clone, Debug)]
pub struct CounterDef {
    /// Counter set name.
    pub set: String,
    /// Counter name.
    pub name: String,
    /// Total amount.
    pub total: Quantity,
}

/// What the index knows about one pool (its newest generation).
#[derive(Debug)]
pub struct PoolRecord {
    /// `<driver>/<pool>`.
    pub key: PoolKey,
    /// Newest generation seen.
    pub generation: i64,
    /// Slices of that generation, sorted by name (indices into the index's slice list).
    pub slices: Vec<u32>,
    /// All `resourceSliceCount` slices are present.
    pub complete: bool,
    /// Why the pool cannot be used, if it cannot.
    pub invalid: Option<String>,
    /// Pool-wide counters.
    pub counters: Vec<CounterDef>,
    /// Per slice (parallel to `slices`), per device: consumption as (counter index, amount).
    pub consumption: Vec<Vec<Vec<(u32, Quantity)>>>,
    /// Some device of the pool has binding conditions (the pool is tried last).
    pub has_binding_conditions: bool,
    /// Position of the pool in (driver, pool) order.
    pub order: u32,
}

/// Index over all prepared slices. See the module documentation.
#[derive(Debug)]
pub struct DraSnapshotIndex {
    /// This index's identity ([`Self::id`]).
    id: u64,
    slices: Vec<Arc<PreparedSlice>>,
    /// Pool index per slice, and position within the pool (None: older generation).
    slice_pool: Vec<(u32, Option<u32>)>,
    /// Per node with slices of its own: its slot ([`Self::node_slot`]).
    by_node: FastHashMap<String, u32>,
    /// Per node slot: the node's own slices.
    by_slot: Vec<Vec<u32>>,
    shared: Vec<u32>,
    pools: Vec<PoolRecord>,
    pool_by_key: FastHashMap<PoolKey, u32>,
}

/// The last [`DraSnapshotIndex::id`] handed out.
static LAST_INDEX_ID: AtomicU64 = AtomicU64::new(0);

impl Default for DraSnapshotIndex {
    fn default() -> Self {
        Self::new(std::iter::empty())
    }
}

impl DraSnapshotIndex {
    /// Builds the index. Cost: linear in the number of slices and devices; no CEL work.
    pub fn new(slices: impl IntoIterator<Item = Arc<PreparedSlice>>) -> Self {
        let mut slices: Vec<Arc<PreparedSlice>> = slices.into_iter().collect();
        slices.sort_by(|a, b| {
            (&a.pool, &a.name, a.generation, a.slice.metadata.uid.as_deref()).cmp(&(
                &b.pool,
                &b.name,
                b.generation,
                b.slice.metadata.uid.as_deref(),
            ))
        });

        // Group by pool; keep only the newest generation.
        let mut pools: Vec<PoolRecord> = Vec::new();
        let mut pool_by_key: FastHashMap<PoolKey, u32> = FastHashMap::default();
        let mut slice_pool = Vec::with_capacity(slices.len());
        for (i, s) in slices.iter().enumerate() {
            let idx = *pool_by_key.entry(s.pool.clone()).or_insert_with(|| {
                pools.push(PoolRecord {
                    key: s.pool.clone(),
                    generation: s.generation,
                    slices: Vec::new(),
                    complete: false,
                    invalid: None,
                    counters: Vec::new(),
                    consumption: Vec::new(),
                    has_binding_conditions: false,
                    order: 0,
                });
                (pools.len() - 1) as u32
            });
            let rec = &mut pools[idx as usize];
            if s.generation > rec.generation {
                rec.generation = s.generation;
                rec.slices.clear();
            }
            if s.generation == rec.generation {
                rec.slices.push(i as u32);
            }
            slice_pool.push((idx, None));
        }

        for (order, rec) in pools.iter_mut().enumerate() {
            rec.order = order as u32; // slices were sorted by pool key, so pools are in key order
            for (pos, &si) in rec.slices.iter().enumerate() {
                slice_pool[si as usize].1 = Some(pos as u32);
            }
            let members: Vec<&PreparedSlice> = rec.slices.iter().map(|&i| &*slices[i as usize]).collect();
            rec.complete =
                !members.is_empty() && members.iter().all(|s| s.slice_count == members.len() as i64);
            rec.has_binding_conditions = members.iter().any(|s| s.has_binding_conditions);
            if rec.complete {
                Self::validate_pool(rec, &members);
            }
        }

        let mut by_node: FastHashMap<String, u32> = FastHashMap::default();
        let mut by_slot: Vec<Vec<u32>> = Vec::new();
        let mut shared = Vec::new();
        for (i, s) in slices.iter().enumerate() {
            if slice_pool[i].1.is_none() {
                continue;
            }
            match &s.scope {
                NodeScope::NodeName(n) => {
                    let slot = *by_node.entry(n.clone()).or_insert_with(|| {
                        by_slot.push(Vec::new());
                        (by_slot.len() - 1) as u32
                    });
                    by_slot[slot as usize].push(i as u32);
                }
                NodeScope::Unknown => {}
                _ => shared.push(i as u32),
            }
        }

        DraSnapshotIndex {
            id: LAST_INDEX_ID.fetch_add(1, Ordering::Relaxed) + 1,
            slices,
            slice_pool,
            by_node,
            by_slot,
            shared,
            pools,
            pool_by_key,
        }
    }

    fn validate_pool(rec: &mut PoolRecord, members: &[&PreparedSlice]) {
        if let Some(reason) = members.iter().find_map(|s| s.invalid.clone()) {
            rec.invalid = Some(reason);
            return;
        }
        let mut names = std::collections::HashSet::new();
        for s in members {
            for d in &s.devices {
                if !names.insert(&*d.id.device) {
                    rec.invalid = Some(format!("duplicate device name {}", d.id.device));
                    return;
                }
            }
        }
        let mut sets = std::collections::HashSet::new();
        for s in members {
            for (set, counters) in &s.counter_sets {
                if !sets.insert(set.as_str()) {
                    rec.invalid = Some(format!("duplicate counter set name {set}"));
                    return;
                }
                for (name, total) in counters {
                    // A negative total (or consumption, below) would let allocating one device
                    // add room for others: the pool is invalid instead.
                    if total.is_negative() {
                        rec.invalid = Some(format!(
                            "counter set {set} counter {name}: negative value {total} is not allowed"
                        ));
                        return;
                    }
                    rec.counters.push(CounterDef {
                        set: set.clone(),
                        name: name.clone(),
                        total: total.clone(),
                    });
                }
            }
        }
        for s in members {
            let mut per_device = Vec::with_capacity(s.devices.len());
            for d in &s.devices {
                let mut consumption = Vec::new();
                for (set, counters) in &d.consumes {
                    if !sets.contains(set.as_str()) {
                        rec.invalid = Some(format!("counter set {set} not found"));
                        return;
                    }
                    for (name, amount) in counters {
                        let Some(ci) = rec.counters.iter().position(|c| c.set == *set && c.name == *name)
                        else {
                            rec.invalid = Some(format!("counter {name} not found in counter set {set}"));
                            return;
                        };
                        if amount.is_negative() {
                            rec.invalid = Some(format!(
                                "device {}: consumes negative amount {amount} of counter {name} in counter set {set}",
                                d.id.device
                            ));
                            return;
                        }
                        consumption.push((ci as u32, amount.clone()));
                    }
                }
                per_device.push(consumption);
            }
            rec.consumption.push(per_device);
        }
    }

    /// All prepared slices (sorted by pool and name).
    pub fn slices(&self) -> &[Arc<PreparedSlice>] {
        &self.slices
    }

    /// Number of slices.
    pub fn len(&self) -> usize {
        self.slices.len()
    }

    /// Whether the index holds no slice.
    pub fn is_empty(&self) -> bool {
        self.slices.is_empty()
    }

    /// All pools.
    pub fn pools(&self) -> &[PoolRecord] {
        &self.pools
    }

    /// A pool by key.
    pub fn pool(&self, key: &PoolKey) -> Option<&PoolRecord> {
        self.pool_by_key.get(key).map(|&i| &self.pools[i as usize])
    }

    pub(crate) fn pool_at(&self, index: u32) -> &PoolRecord {
        &self.pools[index as usize]
    }

    pub(crate) fn slice_at(&self, index: u32) -> &PreparedSlice {
        &self.slices[index as usize]
    }

    /// Candidate slices for a node: its own slices, then the node-independent ones, newest
    /// generation only. (Relevance is decided by the caller.)
    pub(crate) fn candidate_slices<'s>(&'s self, node_name: &str) -> impl Iterator<Item = u32> + 's {
        self.own_slices_at(self.node_slot(node_name))
            .iter()
            .chain(self.shared.iter())
            .copied()
    }

    /// The slices of the newest generation bound by name (`spec.nodeName`) to the node in `slot`
    /// ([`Self::node_slot`]; none for `None`).
    pub(crate) fn own_slices_at(&self, slot: Option<u32>) -> &[u32] {
        slot.and_then(|s| self.by_slot.get(s as usize))
            .map_or(&[], Vec::as_slice)
    }

    /// A dense number (`0..node_slot_count()`) for each node that has slices of its own, fixed
    /// for the life of this index: lets per-node facts derived from it live in flat arrays, and
    /// lets a caller that remembers it per node ([`Self::id`]) skip this name look-up.
    pub fn node_slot(&self, node_name: &str) -> Option<u32> {
        self.by_node.get(node_name).copied()
    }

    /// How many node slots there are (see [`Self::node_slot`]).
    pub fn node_slot_count(&self) -> usize {
        self.by_slot.len()
    }

    /// A number no other index built in this process has (never 0): a node slot remembered
    /// together with it is valid for as long as the caller's index has the same id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether some slice of the newest generation is not bound to one node by name (all nodes, a
    /// node selector, per-device selection): then a node without slices of its own may still
    /// have devices.
    pub fn has_node_independent_slices(&self) -> bool {
        !self.shared.is_empty()
    }

    /// The slices that may publish devices for `node_name` (its own, then the node-independent
    /// ones), newest generation of valid pools only. Whether a node-independent slice really
    /// targets the node is for the caller to decide (`PreparedSlice::targets`).
    pub fn node_slices<'s>(&'s self, node_name: &str) -> impl Iterator<Item = &'s PreparedSlice> + 's {
        self.candidate_slices(node_name).filter_map(|si| {
            let (pool, _) = self.slice_position(si)?;
            if self.pool_at(pool).invalid.is_some() {
                return None;
            }
            Some(self.slice_at(si))
        })
    }

    /// (pool index, position within the pool) of a slice of the newest generation.
    pub(crate) fn slice_position(&self, slice: u32) -> Option<(u32, u32)> {
        let (pool, pos) = self.slice_pool[slice as usize];
        pos.map(|p| (pool, p))
    }
}
