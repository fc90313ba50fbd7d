//! The structured allocator: which devices satisfy a pod's claims on one node.
//!
//! An [`Allocator`] is built once per pod (index, allocated state, prepared claims) and
//! [`Allocator::allocate`] is called once per candidate node; it is `Send + Sync` and may run on
//! several nodes at once.
//!
//! One call works in three phases:
//!
//! 1. **Gather pools.** The node's own slices and the node-independent slices, newest generation
//!    only, filtered by node selection. Pools are ordered by (driver, pool), with pools that have
//!    devices with binding conditions last; slices by name; devices in slice order. Incomplete and
//!    invalid pools are set aside (never allocated from, reported when allocation fails).
//! 2. **Candidates.** For every request (and every `firstAvailable` subrequest) the devices that
//!    can serve it on their own: class selectors, then request selectors (each result cached per
//!    (selector, device) in the prepared slice; the `device.driver == "x"` prefilter skips CEL
//!    for other drivers), per-device node selection, capacity policy and free capacity, not
//!    allocated to another claim (unless `adminAccess`), taints tolerated, counters available.
//!    A request with fewer candidates than it needs fails right here, with a precise reason.
//!    For mode `All` the candidates are all selectable devices with enough capacity, and each of
//!    them must pass the remaining checks.
//! 3. **Search.** Depth-first backtracking over claims, requests, subrequests (in order) and
//!    candidates, first solution wins. Within a request only increasing candidate positions are
//!    tried (combinations, not permutations). Dynamic checks: devices already picked in this
//!    search, capacity shared with earlier picks, counters consumed by earlier picks, and the
//!    claim's constraints. More than 32 devices for one claim aborts that branch (and tells the
//!    enclosing `firstAvailable` to try a smaller alternative). The deadline is checked
//!    periodically.
//!
//! [`Allocator::fits_without_search`] is the per-node summary in front of the three phases: for
//! the simple claim on a node with only plain devices it counts free matching devices, so Filter
//! can decide the node without gathering, searching or building results.
//!
//! Differences from upstream that are deliberate: `All` mode with an incomplete/invalid pool is
//! "unschedulable on this node" rather than a fatal error (an `All` request whose devices break
//! a constraint is fatal, as upstream); a constraint's list-attribute intersection is restored exactly when backtracking;
//! counters charged by the first share of a multi-allocatable device are released when that
//! share is undone; share ids are deterministic (derived from the claim, request, device and
//! position) instead of random UUIDs.

use std::cell::OnceCell;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceAllocationConfiguration, DeviceAllocationResult, DeviceAttribute,
    DeviceRequestAllocationResult,
};
use parking_lot::RwLock;
use unisched_resource::Quantity;

use crate::capacity::{consumed_capacity, fits};
use crate::cel::{EvalErrorKind, SelectorId, SelectorInput};
use crate::claims::{
    ALLOCATION_RESULTS_MAX_SIZE, AllocationMode, Features, PreparedAlternative, PreparedClaim,
    PreparedSelector,
};
use crate::error::{AllocationError, FatalError, Unschedulable, UnschedulableReason};
use crate::ids::PoolKey;
use crate::pools::{AttributeGroups, DraSnapshotIndex, PoolRecord, PreparedDevice, PreparedSlice, Selection};
use crate::state::{LayeredCapacity, PoolExclusive, StateLayers};
use crate::taints::untolerated_taint;

/// How often (in search steps) the deadline is checked.
const DEADLINE_CHECK_INTERVAL: u64 = 64;

/// What the per-node summary ([`Allocator::summarize`]) concludes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeSummary {
    /// The claims certainly allocate on the node (the allocation itself is still to be made).
    Fits,
    /// The claims certainly do not: the allocator would report them unschedulable on the node.
    Short {
        /// How many matching devices are free on the node (fewer than the request needs). Only
        /// a device being freed or the node's slices changing can raise it.
        free: usize,
    },
    /// The summary cannot tell; only the full allocator can.
    Undecided,
}

/// The claim shape the device summary decides ([`Allocator::summarize`]): one request with one
/// alternative for an exact count, no constraints, subrequests, admin access or capacity. Returns
/// that alternative and the count. For such a claim the free matching devices of a node decide
/// everything, so a node with fewer of them than the count rejects it whatever else holds.
pub fn summary_shape(claim: &PreparedClaim) -> Option<(&PreparedAlternative, usize)> {
    if !claim.constraints().is_empty() {
        return None;
    }
    single_exact_request(claim).map(|(_, alt, needed)| (alt, needed))
}

/// The request part of both shapes the summary decides: one request, with one alternative, asking
/// for an exact count, without subrequests, admin access or capacity. Returns the request's name,
/// the alternative and the count.
fn single_exact_request(claim: &PreparedClaim) -> Option<(&str, &PreparedAlternative, usize)> {
    let [request] = claim.requests() else {
        return None;
    };
    let [alt] = request.alternatives.as_slice() else {
        return None;
    };
    let AllocationMode::ExactCount(needed) = alt.mode else {
        return None;
    };
    if request.has_subrequests || alt.admin_access || !alt.capacity.is_empty() {
        return None;
    }
    Some((request.name.as_str(), alt, needed))
}

/// The other claim shape the device summary decides: the summary's shape ([`summary_shape`])
/// plus exactly one `matchAttribute` constraint over that one request. Returns the alternative,
/// the count and the attribute. A set of devices satisfies it exactly when they all have the
/// attribute with one value (for scalar values), so the free matching devices grouped by value
/// decide it: some group must hold the count.
fn match_attribute_shape(claim: &PreparedClaim) -> Option<(&PreparedAlternative, usize, &str)> {
    let [constraint] = claim.constraints() else {
        return None;
    };
    let (request, alt, needed) = single_exact_request(claim)?;
    if constraint.distinct || !(constraint.requests.is_empty() || constraint.requests == [request]) {
        return None;
    }
    Some((alt, needed, &constraint.attribute))
}

/// When to give up.
#[derive(Clone, Copy, Default)]
pub struct Deadline<'a> {
    at: Option<Instant>,
    cancelled: Option<&'a (dyn Fn() -> bool + Sync)>,
}

impl std::fmt::Debug for Deadline<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deadline")
            .field("at", &self.at)
            .field("cancellable", &self.cancelled.is_some())
            .finish()
    }
}

impl<'a> Deadline<'a> {
    /// Never give up.
    pub fn none() -> Self {
        Deadline::default()
    }

    /// Give up at `at`.
    pub fn at(at: Instant) -> Self {
        Deadline {
            at: Some(at),
            cancelled: None,
        }
    }

    /// Give up after `d` from now.
    pub fn after(d: Duration) -> Self {
        Deadline::at(Instant::now() + d)
    }

    /// Also give up when `cancelled` returns true.
    pub fn with_cancel(mut self, cancelled: &'a (dyn Fn() -> bool + Sync)) -> Self {
        self.cancelled = Some(cancelled);
        self
    }

    fn expired(&self) -> Option<String> {
        if let Some(at) = self.at
            && Instant::now() >= at
        {
            return Some("deadline exceeded".to_string());
        }
        if let Some(c) = self.cancelled
            && c()
        {
            return Some("cancelled".to_string());
        }
        None
    }
}

/// Counters of work done, for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Search steps (upstream: `NumAllocateOneInvocations`).
    pub search_steps: u64,
    /// Selector evaluations that were not answered from the cache.
    pub selector_evaluations: u64,
}

/// The allocator for one pod. See the module documentation.
pub struct Allocator {
    index: Arc<DraSnapshotIndex>,
    state: StateLayers,
    features: Features,
    claims: Vec<Arc<PreparedClaim>>,
    /// Available counters per pool index (totals minus devices in use), computed on first use.
    available_counters: RwLock<unisched_fasthash::FastHashMap<u32, Arc<Vec<Quantity>>>>,
    search_steps: AtomicU64,
    selector_evaluations: AtomicU64,
    /// The first selector evaluation that ran out of its cost budget. Upstream ends the whole
    /// scheduling attempt at that point; here every later call (other nodes, evaluated in
    /// parallel) fails with the same error at once instead of spending the budget again.
    over_budget: OnceLock<FatalError>,
}

impl std::fmt::Debug for Allocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allocator")
            .field("claims", &self.claims.len())
            .field("features", &self.features)
            .finish()
    }
}

/// A gathered device: where it lives for this call.
#[derive(Clone, Copy)]
struct GDev<'i> {
    slice: &'i PreparedSlice,
    /// Position of the slice within its pool record.
    slice_pos: u32,
    dev: u32,
    /// Index into `Gathered::pools`.
    gpool: u32,
}

impl<'i> GDev<'i> {
    fn prepared(&self) -> &'i PreparedDevice {
        &self.slice.devices()[self.dev as usize]
    }
}

struct GPool<'i> {
    index: u32,
    rec: &'i PoolRecord,
}

#[derive(Default)]
struct Gathered<'i> {
    pools: Vec<GPool<'i>>,
    devices: Vec<GDev<'i>>,
    incomplete: Vec<&'i PoolKey>,
    invalid: Vec<(&'i PoolKey, &'i str)>,
}

#[derive(Clone)]
struct Cand {
    dev: u32,
    /// Consumed capacity (aligned with the device's capacities) when consumable capacity is on.
    consumed: Option<Arc<[Quantity]>>,
}

/// Candidates of one alternative, or why it cannot be satisfied on this node.
struct AltData {
    cands: Vec<Cand>,
    failure: Option<UnschedulableReason>,
}

struct Pick {
    req: usize,
    alt: usize,
    dev: u32,
    consumed: Option<Arc<[Quantity]>>,
    counters_charged: bool,
    multi: bool,
}

#[derive(Default, Clone)]
struct Diag {
    constraint: Option<usize>,
    counters: Option<u32>,
    capacity: Option<u32>,
    in_use: bool,
    max_size: bool,
}

/// Whether a candidate could be added right now (see `Search::compatible`).
enum Compat {
    Yes,
    InUse,
    Constraint(usize),
}

enum Stop {
    MaxSize,
    Abort(AllocationError),
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum AttrScalar {
    Int(i64),
    Bool(bool),
    Str(String),
    Version(String),
}

/// Attribute values as a sorted set (scalars are singletons).
type AttrSet = Vec<AttrScalar>;

/// A scalar attribute value, borrowed: what the device summary groups `matchAttribute` devices
/// by (equal exactly when the [`AttrScalar`]s are), without building a set per device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ScalarRef<'a> {
    Int(i64),
    Bool(bool),
    Str(&'a str),
    Version(&'a str),
}

/// The value [`attribute_set`] would give as a singleton, borrowed: `Ok(None)` where it gives
/// `None` (the device cannot join the match), `Err(())` for a list value (matched by
/// intersection; the summary leaves it to the search).
fn scalar_ref(attr: &DeviceAttribute, list_mode: bool) -> Result<Option<ScalarRef<'_>>, ()> {
    if let Some(v) = attr.int {
        return Ok(Some(ScalarRef::Int(v)));
    }
    if let Some(v) = attr.bool {
        return Ok(Some(ScalarRef::Bool(v)));
    }
    if let Some(v) = &attr.string {
        return Ok(Some(ScalarRef::Str(v)));
    }
    if let Some(v) = &attr.version {
        return Ok(Some(ScalarRef::Version(v)));
    }
    let lists = [
        attr.ints.as_ref().is_some_and(|v| !v.is_empty()),
        attr.bools.as_ref().is_some_and(|v| !v.is_empty()),
        attr.strings.as_ref().is_some_and(|v| !v.is_empty()),
        attr.versions.as_ref().is_some_and(|v| !v.is_empty()),
    ];
    if list_mode && lists.contains(&true) {
        return Err(());
    }
    Ok(None)
}

fn attribute_set(attr: &DeviceAttribute, list_mode: bool) -> Option<AttrSet> {
    let mut set: AttrSet = if let Some(v) = attr.int {
        vec![AttrScalar::Int(v)]
    } else if let Some(v) = attr.bool {
        vec![AttrScalar::Bool(v)]
    } else if let Some(v) = &attr.string {
        vec![AttrScalar::Str(v.clone())]
    } else if let Some(v) = &attr.version {
        vec![AttrScalar::Version(v.clone())]
    } else if !list_mode {
        return None;
    } else if let Some(v) = attr.ints.as_ref().filter(|v| !v.is_empty()) {
        v.iter().map(|x| AttrScalar::Int(*x)).collect()
    } else if let Some(v) = attr.bools.as_ref().filter(|v| !v.is_empty()) {
        v.iter().map(|x| AttrScalar::Bool(*x)).collect()
    } else if let Some(v) = attr.strings.as_ref().filter(|v| !v.is_empty()) {
        v.iter().map(|x| AttrScalar::Str(x.clone())).collect()
    } else if let Some(v) = attr.versions.as_ref().filter(|v| !v.is_empty()) {
        v.iter().map(|x| AttrScalar::Version(x.clone())).collect()
    } else {
        return None;
    };
    set.sort();
    set.dedup();
    Some(set)
}

fn intersect(a: &AttrSet, b: &AttrSet) -> AttrSet {
    a.iter().filter(|x| b.binary_search(x).is_ok()).cloned().collect()
}

fn intersects(a: &AttrSet, b: &AttrSet) -> bool {
    a.iter().any(|x| b.binary_search(x).is_ok())
}

struct ConstraintState {
    distinct: bool,
    requests: Vec<String>,
    /// Match: intersection after each added device. Distinct: each added device's set.
    stack: Vec<AttrSet>,
}

impl ConstraintState {
    fn applies(&self, request: &str, sub: Option<&str>) -> bool {
        if self.requests.is_empty() {
            return true;
        }
        self.requests.iter().any(|r| {
            r == request
                || sub
                    .is_some_and(|s| r.len() == request.len() + 1 + s.len() && *r == format!("{request}/{s}"))
        })
    }

    fn add(&mut self, set: Option<&AttrSet>) -> bool {
        let Some(set) = set else { return false };
        if self.distinct {
            if self.stack.iter().any(|prev| intersects(prev, set)) {
                return false;
            }
            self.stack.push(set.clone());
            return true;
        }
        match self.stack.last() {
            None => {
                self.stack.push(set.clone());
                true
            }
            Some(top) => {
                let inter = intersect(top, set);
                if inter.is_empty() {
                    return false;
                }
                self.stack.push(inter);
                true
            }
        }
    }
}

/// Looks up a fully qualified attribute; a name in the driver's domain also matches the bare id.
fn device_attribute<'a>(slice: &'a PreparedSlice, dev: u32, name: &str) -> Option<&'a DeviceAttribute> {
    let maps = slice.device_maps(dev as usize);
    if let Some(a) = maps.attribute(name) {
        return Some(a);
    }
    let (domain, id) = name.split_once('/')?;
    if domain != slice.driver() {
        return None;
    }
    maps.attribute(id)
}

/// FNV-1a over several byte strings with a separator.
fn fnv(seed: u64, parts: &[&[u8]]) -> u64 {
    let mut h = seed;
    for p in parts {
        for b in p.iter().chain(std::iter::once(&0xffu8)) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// A deterministic, UUID-shaped share id.
fn share_id(claim: &str, request: &str, device: &str, position: usize) -> String {
    let pos = position.to_le_bytes();
    let parts: [&[u8]; 4] = [claim.as_bytes(), request.as_bytes(), device.as_bytes(), &pos];
    let hi = fnv(0xcbf2_9ce4_8422_2325, &parts);
    let lo = fnv(0x8422_2325_cbf2_9ce4, &parts);
    let v = (u128::from(hi) << 64) | u128::from(lo);
    // Version 8 (custom), variant 10.
    let v = (v & !(0xf_u128 << 76)) | (0x8_u128 << 76);
    let v = (v & !(0x3_u128 << 62)) | (0x2_u128 << 62);
    let s = format!("{v:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &s[0..8],
        &s[8..12],
        &s[12..16],
        &s[16..20],
        &s[20..32]
    )
}

impl Allocator {
    /// An allocator for `claims` against the devices in `index`, with `state` in use by others.
    pub fn new(
        index: Arc<DraSnapshotIndex>,
        state: StateLayers,
        claims: Vec<Arc<PreparedClaim>>,
        features: Features,
    ) -> Self {
        Allocator {
            index,
            state,
            features,
            claims,
            available_counters: RwLock::new(unisched_fasthash::FastHashMap::default()),
            search_steps: AtomicU64::new(0),
            selector_evaluations: AtomicU64::new(0),
            over_budget: OnceLock::new(),
        }
    }

    /// The slice index given to [`Allocator::new`].
    pub fn index(&self) -> &Arc<DraSnapshotIndex> {
        &self.index
    }

    /// The claims given to [`Allocator::new`].
    pub fn claims(&self) -> &[Arc<PreparedClaim>] {
        &self.claims
    }

    /// Work done so far by all calls.
    pub fn stats(&self) -> Stats {
        Stats {
            search_steps: self.search_steps.load(AtomicOrdering::Relaxed),
            selector_evaluations: self.selector_evaluations.load(AtomicOrdering::Relaxed),
        }
    }

    /// Allocates the claims given to [`Allocator::new`] on `node`. On success the results are in
    /// claim order.
    pub fn allocate(
        &self,
        node: &Node,
        deadline: Deadline<'_>,
    ) -> Result<Vec<AllocationResult>, AllocationError> {
        let claims: Vec<&PreparedClaim> = self.claims.iter().map(|c| &**c).collect();
        self.allocate_claims(node, &claims, deadline)
    }

    /// Allocates an explicit list of claims on `node` (for node-specific claims such as the
    /// extended-resource claim). On success the results are in the order of `claims`.
    pub fn allocate_claims(
        &self,
        node: &Node,
        claims: &[&PreparedClaim],
        deadline: Deadline<'_>,
    ) -> Result<Vec<AllocationResult>, AllocationError> {
        if let Some(e) = self.over_budget.get() {
            return Err(e.clone().into());
        }
        let gathered = self.gather(node)?;
        let mut alts = Vec::with_capacity(claims.len());
        for claim in claims {
            let mut per_request = Vec::with_capacity(claim.requests().len());
            for request in claim.requests() {
                let mut per_alt = Vec::with_capacity(request.alternatives.len());
                for alt in &request.alternatives {
                    per_alt.push(self.candidates(claim, alt, node, &gathered, deadline.at)?);
                }
                per_request.push(per_alt);
            }
            alts.push(per_request);
        }

        // A request none of whose alternatives can be served alone fails right away.
        for (ci, claim) in claims.iter().enumerate() {
            for (ri, request) in claim.requests().iter().enumerate() {
                let data = &alts[ci][ri];
                if data.iter().all(|a| a.failure.is_some()) {
                    let reason = data
                        .first()
                        .and_then(|a| a.failure.clone())
                        .unwrap_or(UnschedulableReason::NoDevices);
                    let request_name = request.alternatives.first().map(|a| a.full_name.clone());
                    return Err(self.unschedulable(&gathered, claim.key(), request_name, reason));
                }
            }
        }

        let mut search = Search {
            alloc: self,
            claims,
            gathered: &gathered,
            alts: &alts,
            allocating: vec![Vec::new(); gathered.devices.len()],
            sharing: vec![None; gathered.devices.len()],
            counter_use: (0..gathered.pools.len()).map(|_| None).collect(),
            constraints: claims
                .iter()
                .map(|c| {
                    c.constraints()
                        .iter()
                        .map(|k| ConstraintState {
                            distinct: k.distinct,
                            requests: k.requests.clone(),
                            stack: Vec::new(),
                        })
                        .collect()
                })
                .collect(),
            picks: claims.iter().map(|_| Vec::new()).collect(),
            steps: 0,
            deadline,
            diag: claims
                .iter()
                .map(|c| vec![Diag::default(); c.requests().len()])
                .collect(),
            all_mode_failure: None,
            fatal: None,
            attr_cache: claims
                .iter()
                .map(|c| {
                    c.constraints()
                        .iter()
                        .map(|_| (0..gathered.devices.len()).map(|_| OnceCell::new()).collect())
                        .collect()
                })
                .collect(),
        };
        let outcome = search.allocate_one(0, 0, 0, 0, false, 0);
        self.search_steps.fetch_add(search.steps, AtomicOrdering::Relaxed);
        match outcome {
            Ok(true) => {}
            Ok(false) | Err(Stop::MaxSize) => return Err(search.failure()),
            Err(Stop::Abort(e)) => return Err(e),
        }
        let picks = std::mem::take(&mut search.picks);
        drop(search);
        let mut out = Vec::with_capacity(claims.len());
        for (ci, claim) in claims.iter().enumerate() {
            out.push(self.build_result(claim, &picks[ci], &gathered, node)?);
        }
        Ok(out)
    }

    /// The per-node summary: whether `claims` certainly allocate on `node`, decided by counting
    /// free matching devices instead of gathering, searching and building results.
    /// `true` exactly when [`Self::summarize`] says [`NodeSummary::Fits`].
    pub fn fits_without_search(&self, node: &Node, claims: &[&PreparedClaim]) -> bool {
        self.summarize(node, claims) == NodeSummary::Fits
    }

    /// The per-node summary: what [`Self::allocate_claims`] would decide for `claims` on `node`,
    /// found by counting free matching devices instead of gathering, searching and building
    /// results.
    ///
    /// Decided only for the simple shape (one claim, one request, an exact count, no
    /// constraints, subrequests, admin access or capacity) on a node whose relevant devices are
    /// all plain (node-local slices; no shared counters, binding conditions, multi-allocation,
    /// taints or node-allocatable resources). There the search takes the first free matching
    /// devices, so it succeeds exactly when at least the requested number are free:
    /// [`NodeSummary::Fits`] when they are, [`NodeSummary::Short`] with the exact free count (the allocator would return
    /// [`AllocationError::Unschedulable`]) when they are not. Anything else is
    /// [`NodeSummary::Undecided`]: run the full allocator.
    ///
    /// Per relevant slice this costs a flag test ([`PreparedSlice::all_plain`]), one lookup of the
    /// slice's matching devices for the alternative's selector list (computed on first use with
    /// the per-device match cache, then kept in the prepared slice for every pod and node), and,
    /// only while too few free devices have been counted, one lookup of the pool per state layer;
    /// only when the layers' in-use devices of the pool could leave too few matching devices free
    /// does it look up each matching device's name in the layers that use the pool. The
    /// selectors are evaluated for every device of every relevant slice, in device order, so a
    /// CEL error anywhere makes this `Undecided` and the full allocator reports it; a list for
    /// which some device fails is not cached (the next call evaluates again, up to the failure).
    /// For a `matchAttribute` claim the slice also keeps its matching devices grouped by the
    /// attribute's value, and the free devices are counted per group the same way.
    pub fn summarize(&self, node: &Node, claims: &[&PreparedClaim]) -> NodeSummary {
        let slot = self
            .index
            .node_slot(node.metadata.name.as_deref().unwrap_or_default());
        self.summarize_in_slot(slot, claims)
    }

    /// [`Self::summarize`] for the node in `slot` of this allocator's index
    /// ([`DraSnapshotIndex::node_slot`] of its name), for a caller that already knows it, e.g.
    /// remembered per node for the index's [`DraSnapshotIndex::id`]: the name look-up is skipped.
    /// (The summary reads only the node's own slices; it decides nothing when slices not bound
    /// to one node exist.)
    pub fn summarize_in_slot(&self, slot: Option<u32>, claims: &[&PreparedClaim]) -> NodeSummary {
        let [claim] = claims else {
            return NodeSummary::Undecided;
        };
        let (alt, needed, match_attribute) = match summary_shape(claim) {
            Some((alt, needed)) => (alt, needed, None),
            None => match match_attribute_shape(claim) {
                Some((alt, needed, attribute)) => (alt, needed, Some(attribute)),
                None => return NodeSummary::Undecided,
            },
        };
        // For a `matchAttribute` claim: free matching devices per value of the attribute.
        let mut groups: Vec<(ScalarRef<'_>, usize)> = Vec::new();
        let f = &self.features;
        let index: &DraSnapshotIndex = &self.index;
        let mut free = 0usize;
        // A slice not bound to one node by name (all nodes, a selector, per-device selection) is
        // the search's to judge.
        if index.has_node_independent_slices() {
            return NodeSummary::Undecided;
        }
        // The node's own slices name it, newest generation only: no name to compare.
        for &si in index.own_slices_at(slot) {
            let slice = index.slice_at(si);
            if slice.has_shared_counters() {
                return NodeSummary::Undecided;
            }
            // Incomplete and invalid pools: set aside by `gather`.
            let Some((pool, pos)) = index.slice_position(si) else {
                continue;
            };
            let rec = index.pool_at(pool);
            if !rec.complete || rec.invalid.is_some() {
                continue;
            }
            if !slice.all_plain(f.device_taints, f.consumable_capacity) {
                return NodeSummary::Undecided;
            }
            if alt
                .required_driver
                .as_deref()
                .is_some_and(|d| d != slice.driver())
            {
                continue;
            }
            let Selection::Devices(matching) = self.selection(claim, alt, slice, pos, &alt.selection_key)
            else {
                return NodeSummary::Undecided;
            };
            match match_attribute {
                None => {
                    if free < needed {
                        free += self.free_among(slice, &matching, needed - free);
                    }
                }
                Some(attribute) => {
                    let AttributeGroups::Groups(here) =
                        self.attribute_groups(slice, &matching, &alt.selection_key, attribute)
                    else {
                        // A list value matches by intersection: left to the search.
                        return NodeSummary::Undecided;
                    };
                    for members in here.iter() {
                        let free_here = self.free_among(slice, members, members.len());
                        let value = device_attribute(slice, members[0], attribute)
                            .and_then(|a| scalar_ref(a, f.list_type_attributes).ok().flatten());
                        let Some(value) = value.filter(|_| free_here > 0) else {
                            continue;
                        };
                        match groups.iter_mut().find(|(v, _)| *v == value) {
                            Some((_, n)) => *n += free_here,
                            None => groups.push((value, free_here)),
                        }
                    }
                }
            }
        }
        if match_attribute.is_some() {
            // Devices of equal value can always be picked together; devices of different
            // values never can.
            free = groups.iter().map(|(_, n)| *n).max().unwrap_or(0);
        }
        if free >= needed {
            NodeSummary::Fits
        } else {
            NodeSummary::Short { free }
        }
    }

    /// The devices of `slice` that pass the alternative's class and request selectors (`key`
    /// names them), from the slice's cache or evaluated now (and then cached, unless some device
    /// failed).
    fn selection(
        &self,
        claim: &PreparedClaim,
        alt: &PreparedAlternative,
        slice: &PreparedSlice,
        slice_pos: u32,
        key: &[SelectorId],
    ) -> Selection {
        if let Some(hit) = slice.cached_selection(key) {
            return hit;
        }
        let mut matching = Vec::new();
        for di in 0..slice.devices().len() {
            let d = GDev {
                slice,
                slice_pos,
                dev: di as u32,
                gpool: 0,
            };
            match self.selectors_reject(claim, &alt.class_selectors, &d, None) {
                Err(_) => return Selection::Errored,
                Ok(Some(_)) => continue,
                Ok(None) => {}
            }
            match self.selectors_reject(claim, &alt.selectors, &d, None) {
                Err(_) => return Selection::Errored,
                Ok(Some(_)) => continue,
                Ok(None) => matching.push(di as u32),
            }
        }
        let selection = Selection::Devices(matching.into());
        slice.store_selection(key, selection.clone());
        selection
    }

    /// `matching` (the devices of `slice` passing the selector list `key`) grouped by the scalar
    /// value of `attribute`, from the slice's cache or worked out now and cached.
    fn attribute_groups(
        &self,
        slice: &PreparedSlice,
        matching: &[u32],
        key: &[SelectorId],
        attribute: &str,
    ) -> AttributeGroups {
        let list_mode = self.features.list_type_attributes;
        if let Some(hit) = slice.cached_attribute_groups(key, attribute, list_mode) {
            return hit;
        }
        let mut groups: Vec<(ScalarRef<'_>, Vec<u32>)> = Vec::new();
        let mut lists = false;
        for &di in matching {
            // A device without the attribute cannot join the match.
            let value = match device_attribute(slice, di, attribute).map(|a| scalar_ref(a, list_mode)) {
                None | Some(Ok(None)) => continue,
                Some(Err(())) => {
                    lists = true;
                    break;
                }
                Some(Ok(Some(v))) => v,
            };
            match groups.iter_mut().find(|(v, _)| *v == value) {
                Some((_, members)) => members.push(di),
                None => groups.push((value, vec![di])),
            }
        }
        let grouped = if lists {
            AttributeGroups::Lists
        } else {
            AttributeGroups::Groups(groups.into_iter().map(|(_, m)| m.into_boxed_slice()).collect())
        };
        slice.store_attribute_groups(key, attribute, list_mode, grouped.clone());
        grouped
    }

    /// How many of the devices `matching` (indices into `slice`) no state layer allocates
    /// exclusively; or, when that is certainly at least `wanted` because the layers together
    /// allocate few enough devices of the pool, a lower bound that is at least `wanted`.
    fn free_among(&self, slice: &PreparedSlice, matching: &[u32], wanted: usize) -> usize {
        const MAX_LAYERS: usize = 4;
        let mut in_use: [Option<&PoolExclusive>; MAX_LAYERS] = [None; MAX_LAYERS];
        let mut n = 0;
        for layer in self.state.layers() {
            let Some(pool) = layer.pool_exclusive(slice.pool()) else {
                continue;
            };
            if n == MAX_LAYERS {
                let devices = slice.devices();
                return matching
                    .iter()
                    .filter(|&&di| !self.state.is_exclusively_allocated(&devices[di as usize].id))
                    .count();
            }
            in_use[n] = Some(pool);
            n += 1;
        }
        if n == 0 {
            return matching.len();
        }
        // At most this many of the matching devices are in use (fewer if some in-use devices
        // are not among them, or are in use in several layers).
        let in_use_at_most: usize = in_use[..n].iter().flatten().map(|p| p.len()).sum();
        let at_least = matching.len().saturating_sub(in_use_at_most);
        if at_least >= wanted {
            return at_least;
        }
        let devices = slice.devices();
        matching
            .iter()
            .filter(|&&di| {
                let name: &str = &devices[di as usize].id.device;
                !in_use[..n].iter().flatten().any(|p| p.contains_key(name))
            })
            .count()
    }

    fn unschedulable(
        &self,
        gathered: &Gathered<'_>,
        claim: &str,
        request: Option<String>,
        reason: UnschedulableReason,
    ) -> AllocationError {
        let reason = if !gathered.invalid.is_empty()
            && !matches!(reason, UnschedulableReason::AllModePoolUnavailable { .. })
        {
            UnschedulableReason::InvalidPools {
                pools: gathered
                    .invalid
                    .iter()
                    .map(|(k, why)| (k.to_string(), why.to_string()))
                    .collect(),
            }
        } else {
            reason
        };
        AllocationError::from(Unschedulable {
            claim: claim.to_string(),
            request,
            reason,
        })
    }

    fn gather<'i>(&'i self, node: &Node) -> Result<Gathered<'i>, AllocationError> {
        let index: &'i DraSnapshotIndex = &self.index;
        let node_name = node.metadata.name.as_deref().unwrap_or_default();
        // (binding-last, pool order, slice position, slice index, pool index)
        let mut relevant: Vec<(bool, u32, u32, u32, u32)> = Vec::new();
        for si in index.candidate_slices(node_name) {
            let Some((pool, pos)) = index.slice_position(si) else {
                continue;
            };
            let slice = index.slice_at(si);
            if !self.features.partitionable_devices
                && (slice.per_device_node_selection() || slice.has_shared_counters())
            {
                continue;
            }
            let targets = slice.targets(node).map_err(|message| {
                AllocationError::from(FatalError::NodeSelector {
                    slice: slice.name().to_string(),
                    message,
                })
            })?;
            if targets {
                let rec = index.pool_at(pool);
                relevant.push((rec.has_binding_conditions, rec.order, pos, si, pool));
            }
        }
        relevant.sort_unstable();
        let mut g = Gathered::default();
        let mut last_pool = None;
        for (_, _, pos, si, pool) in relevant {
            let rec = index.pool_at(pool);
            if last_pool != Some(pool) {
                last_pool = Some(pool);
                if !rec.complete {
                    g.incomplete.push(&rec.key);
                    continue;
                }
                if let Some(why) = &rec.invalid {
                    g.invalid.push((&rec.key, why.as_str()));
                    continue;
                }
                g.pools.push(GPool { index: pool, rec });
            } else if !rec.complete || rec.invalid.is_some() {
                continue;
            }
            let slice = index.slice_at(si);
            let gpool = (g.pools.len() - 1) as u32;
            for dev in 0..slice.devices().len() {
                g.devices.push(GDev {
                    slice,
                    slice_pos: pos,
                    dev: dev as u32,
                    gpool,
                });
            }
        }
        Ok(g)
    }

    /// Evaluates a list of selectors for a device; `Ok(Some(i))`: selector `i` rejected it.
    /// A passed `deadline` stops an evaluation midway ([`AllocationError::Aborted`]); a spent
    /// cost budget is a fatal CEL runtime error naming the class or request.
    fn selectors_reject(
        &self,
        claim: &PreparedClaim,
        selectors: &[PreparedSelector],
        d: &GDev<'_>,
        deadline: Option<Instant>,
    ) -> Result<Option<usize>, AllocationError> {
        let dev = d.prepared();
        for (i, s) in selectors.iter().enumerate() {
            if let Some(driver) = s.selector.required_driver()
                && driver != d.slice.driver()
            {
                return Ok(Some(i));
            }
            let id = s.selector.id();
            let matched = match d.slice.cached_match(id, d.dev) {
                Some(m) => m,
                None => {
                    let Some(api_device) = d.slice.api_device(d.dev as usize) else {
                        return Ok(Some(i));
                    };
                    self.selector_evaluations.fetch_add(1, AtomicOrdering::Relaxed);
                    let input = SelectorInput {
                        driver: d.slice.driver(),
                        device: api_device,
                        maps: d.slice.device_maps(d.dev as usize),
                        slot: &dev.slot,
                        deadline,
                    };
                    let m = s.selector.matches(input).map_err(|e| {
                        if e.kind == EvalErrorKind::Deadline {
                            return AllocationError::Aborted(format!(
                                "{}: selector #{}: {}",
                                s.source, s.index, e.message
                            ));
                        }
                        let fatal = FatalError::CelRuntime {
                            claim: claim.key().to_string(),
                            origin: s.source.clone(),
                            index: s.index,
                            expression: s.selector.expression().to_string(),
                            device: dev.id.clone(),
                            message: e.message,
                        };
                        if e.kind == EvalErrorKind::CostBudget {
                            let _ = self.over_budget.set(fatal.clone());
                        }
                        AllocationError::from(fatal)
                    })?;
                    d.slice.store_match(id, d.dev, m);
                    m
                }
            };
            if !matched {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    fn available_counters(&self, pool_index: u32, rec: &PoolRecord) -> Arc<Vec<Quantity>> {
        if let Some(hit) = self.available_counters.read().get(&pool_index) {
            return Arc::clone(hit);
        }
        let mut avail: Vec<Quantity> = rec.counters.iter().map(|c| c.total.clone()).collect();
        for (pos, &si) in rec.slices.iter().enumerate() {
            let slice = self.index.slice_at(si);
            for (di, dev) in slice.devices().iter().enumerate() {
                if !self.state.is_allocated(&dev.id) {
                    continue;
                }
                for (ci, amount) in rec
                    .consumption
                    .get(pos)
                    .and_then(|p| p.get(di))
                    .into_iter()
                    .flatten()
                {
                    if let Some(slot) = avail.get_mut(*ci as usize) {
                        // Overdrawn counters stay at the most negative representable value.
                        *slot = slot
                            .checked_sub(amount)
                            .unwrap_or_else(|| Quantity::from_nanos(i128::MIN, slot.format()));
                    }
                }
            }
        }
        let avail = Arc::new(avail);
        self.available_counters
            .write()
            .insert(pool_index, Arc::clone(&avail));
        avail
    }

    /// Phase 2 for one alternative.
    fn candidates(
        &self,
        claim: &PreparedClaim,
        alt: &PreparedAlternative,
        node: &Node,
        g: &Gathered<'_>,
        deadline: Option<Instant>,
    ) -> Result<AltData, AllocationError> {
        let all_mode = alt.mode == AllocationMode::All;
        if all_mode {
            if let Some(pool) = g.incomplete.first() {
                return Ok(AltData {
                    cands: Vec::new(),
                    failure: Some(UnschedulableReason::AllModePoolUnavailable {
                        pool: pool.to_string(),
                        incomplete: true,
                    }),
                });
            }
            if let Some((pool, _)) = g.invalid.first() {
                return Ok(AltData {
                    cands: Vec::new(),
                    failure: Some(UnschedulableReason::AllModePoolUnavailable {
                        pool: pool.to_string(),
                        incomplete: false,
                    }),
                });
            }
        }
        let f = &self.features;
        let mut class_rejects = vec![0usize; alt.class_selectors.len()];
        let mut request_rejects = vec![0usize; alt.selectors.len()];
        // Devices left after each stage.
        let (mut after_class, mut after_request, mut after_node, mut after_capacity) =
            (0usize, 0usize, 0usize, 0usize);
        let (mut after_in_use, mut after_taint) = (0usize, 0usize);
        let mut capacity_example = None;
        let mut taint_example = None;
        let mut counter_pool = None;
        let mut cands = Vec::new();
        let mut all_mode_failure = None;
        let has_driver = |s: &PreparedSelector| s.selector.required_driver().is_some();
        let prefilter_source = match alt.class_selectors.iter().position(has_driver) {
            Some(i) => Some((true, i)),
            None => alt.selectors.iter().position(has_driver).map(|i| (false, i)),
        };
        let mut total = 0usize;
        for (gi, d) in g.devices.iter().enumerate() {
            let dev = d.prepared();
            if !f.binding_conditions && dev.has_binding_conditions {
                continue;
            }
            total += 1;
            // Cheap prefilter: the driver some selector insists on.
            if let Some(driver) = &alt.required_driver
                && driver.as_str() != d.slice.driver()
            {
                match prefilter_source {
                    Some((true, i)) => class_rejects[i] += 1,
                    Some((false, i)) => {
                        after_class += 1;
                        request_rejects[i] += 1;
                    }
                    None => {}
                }
                continue;
            }
            if let Some(i) = self.selectors_reject(claim, &alt.class_selectors, d, deadline)? {
                class_rejects[i] += 1;
                continue;
            }
            after_class += 1;
            if let Some(i) = self.selectors_reject(claim, &alt.selectors, d, deadline)? {
                request_rejects[i] += 1;
                continue;
            }
            after_request += 1;
            if d.slice.per_device_node_selection() {
                let reachable = d.slice.device_targets(d.dev as usize, node).map_err(|message| {
                    AllocationError::from(FatalError::NodeSelector {
                        slice: d.slice.name().to_string(),
                        message,
                    })
                })?;
                if !reachable {
                    continue;
                }
            }
            after_node += 1;
            let mut consumed = None;
            // An exclusive device asked for no capacity has nothing to check: no shares exist on
            // it and its result records no consumption. Skipping the arithmetic here keeps it off
            // the per-device path of the common one-GPU claim (it was the top Filter cost).
            if f.consumable_capacity && (dev.allow_multiple || !alt.capacity.is_empty()) {
                let amounts = match consumed_capacity(&dev.capacities, &alt.capacity) {
                    Ok(a) => a,
                    Err(_) => {
                        capacity_example.get_or_insert(gi as u32);
                        continue;
                    }
                };
                let existing = match self.state.consumed_capacity(&dev.id) {
                    LayeredCapacity::None => Vec::new(),
                    LayeredCapacity::Full => {
                        capacity_example.get_or_insert(gi as u32);
                        continue;
                    }
                    LayeredCapacity::Amounts(m) => dev
                        .capacities
                        .iter()
                        .map(|c| m.get(&c.name).cloned().unwrap_or_default())
                        .collect(),
                };
                if !fits(&dev.capacities, &amounts, &[&existing]) {
                    capacity_example.get_or_insert(gi as u32);
                    continue;
                }
                consumed = Some(Arc::<[Quantity]>::from(amounts));
            }
            after_capacity += 1;
            // From here on a device that fails makes an `All` request fail.
            if !alt.admin_access && self.state.is_exclusively_allocated(&dev.id) {
                all_mode_failure.get_or_insert(UnschedulableReason::DevicesInUse);
                continue;
            }
            after_in_use += 1;
            if f.device_taints {
                let taints = d
                    .slice
                    .api_device(d.dev as usize)
                    .and_then(|a| a.taints.as_deref())
                    .unwrap_or_default();
                if let Some(t) = untolerated_taint(taints, &alt.tolerations) {
                    let text = format!(
                        "{}={}:{}",
                        t.key,
                        t.value.as_deref().unwrap_or_default(),
                        t.effect
                    );
                    all_mode_failure
                        .get_or_insert(UnschedulableReason::DevicesTainted { taint: text.clone() });
                    taint_example.get_or_insert(text);
                    continue;
                }
            }
            after_taint += 1;
            if !dev.consumes.is_empty() {
                let gp = &g.pools[d.gpool as usize];
                let skip = f.consumable_capacity && dev.allow_multiple && self.state.has_shares(&dev.id);
                let ok = f.partitionable_devices && (skip || self.counters_fit_alone(gp, d));
                if !ok {
                    counter_pool.get_or_insert(gp.rec.key.to_string());
                    all_mode_failure.get_or_insert(UnschedulableReason::CountersExhausted {
                        pool: gp.rec.key.to_string(),
                    });
                    continue;
                }
            }
            cands.push(Cand {
                dev: gi as u32,
                consumed,
            });
        }

        let mut failure = None;
        if all_mode {
            if after_capacity == 0 {
                failure = Some(UnschedulableReason::AllModeNoDevices);
            } else if cands.len() < after_capacity {
                failure = all_mode_failure;
            } else if claim.min_devices() - 1 + cands.len() > ALLOCATION_RESULTS_MAX_SIZE {
                failure = Some(UnschedulableReason::TooManyDevices);
            }
        } else {
            let needed = alt.min_devices();
            if cands.len() < needed {
                let most = |v: &[usize]| {
                    v.iter()
                        .enumerate()
                        .max_by_key(|(i, n)| (**n, std::cmp::Reverse(*i)))
                        .map(|(i, _)| i)
                };
                failure = Some(if total < needed && !g.incomplete.is_empty() {
                    UnschedulableReason::PoolsIncomplete {
                        pools: g.incomplete.iter().map(|k| k.to_string()).collect(),
                    }
                } else if total == 0 {
                    UnschedulableReason::NoDevices
                } else if total < needed {
                    UnschedulableReason::NotEnoughDevices {
                        needed,
                        usable: cands.len(),
                    }
                } else if after_class < needed {
                    UnschedulableReason::ClassSelectorsUnmatched {
                        class: alt.class.metadata.name.clone().unwrap_or_default(),
                        expression: most(&class_rejects)
                            .filter(|_| class_rejects.iter().any(|n| *n > 0))
                            .map(|i| alt.class_selectors[i].selector.expression().to_string()),
                    }
                } else if after_request < needed {
                    UnschedulableReason::RequestSelectorsUnmatched {
                        expression: most(&request_rejects)
                            .filter(|_| request_rejects.iter().any(|n| *n > 0))
                            .map(|i| alt.selectors[i].selector.expression().to_string()),
                    }
                } else if after_node < needed {
                    UnschedulableReason::DevicesNotOnNode
                } else if after_capacity < needed {
                    UnschedulableReason::CapacityExhausted {
                        device: capacity_example.map(|gi| g.devices[gi as usize].prepared().id.to_string()),
                    }
                } else if after_in_use < needed {
                    UnschedulableReason::DevicesInUse
                } else if after_taint < needed {
                    UnschedulableReason::DevicesTainted {
                        taint: taint_example.unwrap_or_default(),
                    }
                } else if let Some(pool) = counter_pool {
                    UnschedulableReason::CountersExhausted { pool }
                } else {
                    UnschedulableReason::NotEnoughDevices {
                        needed,
                        usable: cands.len(),
                    }
                });
            }
        }
        Ok(AltData { cands, failure })
    }

    fn counters_fit_alone(&self, gp: &GPool<'_>, d: &GDev<'_>) -> bool {
        let avail = self.available_counters(gp.index, gp.rec);
        let Some(consumption) = gp
            .rec
            .consumption
            .get(d.slice_pos as usize)
            .and_then(|p| p.get(d.dev as usize))
        else {
            return true;
        };
        consumption
            .iter()
            .all(|(ci, amount)| avail.get(*ci as usize).is_some_and(|a| amount <= a))
    }

    fn build_result(
        &self,
        claim: &PreparedClaim,
        picks: &[Pick],
        g: &Gathered<'_>,
        node: &Node,
    ) -> Result<AllocationResult, AllocationError> {
        let uid_or_key = claim
            .claim()
            .metadata
            .uid
            .clone()
            .unwrap_or_else(|| claim.key().to_string());
        let mut results = Vec::with_capacity(picks.len());
        let mut chosen: Vec<Option<usize>> = vec![None; claim.requests().len()];
        for (position, p) in picks.iter().enumerate() {
            let alt = &claim.requests()[p.req].alternatives[p.alt];
            chosen[p.req].get_or_insert(p.alt);
            let d = g.devices[p.dev as usize];
            let dev = d.prepared();
            let api = d.slice.api_device(d.dev as usize);
            let mut r = DeviceRequestAllocationResult {
                request: alt.full_name.clone(),
                driver: dev.id.driver.to_string(),
                pool: dev.id.pool.to_string(),
                device: dev.id.device.to_string(),
                admin_access: alt.admin_access.then_some(true),
                tolerations: (!alt.tolerations.is_empty()).then(|| alt.tolerations.clone()),
                skip_node_operations: d.slice.slice().spec.skip_node_operations.clone(),
                ..Default::default()
            };
            if self.features.binding_conditions
                && let Some(api) = api
            {
                r.binding_conditions = api.binding_conditions.clone().filter(|v| !v.is_empty());
                r.binding_failure_conditions =
                    api.binding_failure_conditions.clone().filter(|v| !v.is_empty());
            }
            if p.multi {
                r.share_id = Some(share_id(
                    &uid_or_key,
                    &alt.full_name,
                    &dev.id.to_string(),
                    position,
                ));
                if let Some(consumed) = &p.consumed
                    && !dev.capacities.is_empty()
                {
                    r.consumed_capacity = Some(
                        dev.capacities
                            .iter()
                            .zip(consumed.iter())
                            .map(|(c, q)| (c.name.clone(), q.to_api()))
                            .collect(),
                    );
                }
            }
            results.push(r);
        }

        // Configuration: class configs first (each class once), then claim configs.
        let mut config: Vec<DeviceAllocationConfiguration> = Vec::new();
        let mut class_ranges: Vec<(String, usize, usize)> = Vec::new();
        let chosen_alt = |ri: usize| chosen[ri].map(|ai| &claim.requests()[ri].alternatives[ai]);
        for ri in 0..claim.requests().len() {
            let Some(alt) = chosen_alt(ri) else { continue };
            let class_name = alt.class.metadata.name.clone().unwrap_or_default();
            if let Some((_, start, end)) = class_ranges.iter().find(|(n, _, _)| *n == class_name) {
                for c in &mut config[*start..*end] {
                    c.requests
                        .get_or_insert_with(Vec::new)
                        .push(alt.full_name.clone());
                }
                continue;
            }
            let start = config.len();
            for c in alt
                .class
                .spec
                .as_ref()
                .and_then(|s| s.config.as_ref())
                .into_iter()
                .flatten()
            {
                config.push(DeviceAllocationConfiguration {
                    opaque: c.opaque.clone(),
                    requests: Some(vec![alt.full_name.clone()]),
                    source: "FromClass".to_string(),
                });
            }
            class_ranges.push((class_name, start, config.len()));
        }
        let claim_config = claim
            .claim()
            .spec
            .as_ref()
            .and_then(|s| s.devices.as_ref())
            .and_then(|d| d.config.as_ref());
        for c in claim_config.into_iter().flatten() {
            let requests = c.requests.as_deref().unwrap_or_default();
            let applies = requests.is_empty()
                || (0..claim.requests().len()).any(|ri| {
                    requests.contains(&claim.requests()[ri].name)
                        || chosen_alt(ri)
                            .is_some_and(|a| a.subrequest.is_some() && requests.contains(&a.full_name))
                });
            if applies {
                config.push(DeviceAllocationConfiguration {
                    opaque: c.opaque.clone(),
                    requests: (!requests.is_empty()).then(|| requests.to_vec()),
                    source: "FromClaim".to_string(),
                });
            }
        }
        for c in &mut config {
            let Some(requests) = &c.requests else { continue };
            let all = (0..claim.requests().len()).all(|ri| {
                requests.contains(&claim.requests()[ri].name)
                    || chosen_alt(ri)
                        .is_some_and(|a| a.subrequest.is_some() && requests.contains(&a.full_name))
            });
            if all {
                c.requests = None;
            }
        }

        let node_selector = self.node_selector(claim, picks, g, node)?;
        Ok(AllocationResult {
            allocation_timestamp: None,
            devices: Some(DeviceAllocationResult {
                results: Some(results),
                config: (!config.is_empty()).then_some(config),
            }),
            node_selector,
        })
    }

    fn node_selector(
        &self,
        claim: &PreparedClaim,
        picks: &[Pick],
        g: &Gathered<'_>,
        node: &Node,
    ) -> Result<Option<NodeSelector>, AllocationError> {
        let mut fields: Vec<NodeSelectorRequirement> = Vec::new();
        let mut exprs: Vec<NodeSelectorRequirement> = Vec::new();
        for p in picks {
            let d = g.devices[p.dev as usize];
            let spec = &d.slice.slice().spec;
            let api = d.slice.api_device(d.dev as usize);
            let (node_name, selector) = if d.slice.per_device_node_selection() {
                (
                    api.and_then(|a| a.node_name.as_ref()),
                    api.and_then(|a| a.node_selector.as_ref()),
                )
            } else {
                (spec.node_name.as_ref(), spec.node_selector.as_ref())
            };
            let binds = api.and_then(|a| a.binds_to_node).unwrap_or(false);
            if node_name.is_some_and(|n| !n.is_empty()) || binds {
                return Ok(Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_fields: Some(vec![NodeSelectorRequirement {
                            key: "metadata.name".to_string(),
                            operator: "In".to_string(),
                            values: Some(vec![node.metadata.name.clone().unwrap_or_default()]),
                        }]),
                        match_expressions: None,
                    }],
                }));
            }
            if let Some(sel) = selector {
                match sel.node_selector_terms.as_slice() {
                    [] => {}
                    [term] => {
                        add_requirements(term.match_fields.as_deref().unwrap_or_default(), &mut fields);
                        add_requirements(term.match_expressions.as_deref().unwrap_or_default(), &mut exprs);
                    }
                    terms => {
                        return Err(FatalError::InvalidRequest {
                            claim: claim.key().to_string(),
                            request: String::new(),
                            message: format!(
                                "create NodeSelector: unsupported ResourceSlice.NodeSelector with {} terms",
                                terms.len()
                            ),
                        }
                        .into());
                    }
                }
            }
        }
        if fields.is_empty() && exprs.is_empty() {
            return Ok(None);
        }
        Ok(Some(NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: (!exprs.is_empty()).then_some(exprs),
                match_fields: (!fields.is_empty()).then_some(fields),
            }],
        }))
    }
}

fn same_requirement(a: &NodeSelectorRequirement, b: &NodeSelectorRequirement) -> bool {
    if a.key != b.key || a.operator != b.operator {
        return false;
    }
    let mut x: Vec<&String> = a.values.iter().flatten().collect();
    let mut y: Vec<&String> = b.values.iter().flatten().collect();
    x.sort();
    x.dedup();
    y.sort();
    y.dedup();
    x == y
}

fn add_requirements(from: &[NodeSelectorRequirement], to: &mut Vec<NodeSelectorRequirement>) {
    for r in from {
        if !to.iter().any(|t| same_requirement(t, r)) {
            to.push(r.clone());
        }
    }
}

/// Phase 3 state.
struct Search<'s, 'i> {
    alloc: &'s Allocator,
    claims: &'s [&'s PreparedClaim],
    gathered: &'s Gathered<'i>,
    alts: &'s [Vec<Vec<AltData>>],
    /// Per gathered device: claims it is being allocated to exclusively in this search.
    allocating: Vec<Vec<u32>>,
    /// Per gathered device: capacity consumed by shares picked in this search, and their number.
    sharing: Vec<Option<(Vec<Quantity>, u32)>>,
    /// Per gathered pool: counters consumed in this search.
    counter_use: Vec<Option<Vec<Quantity>>>,
    constraints: Vec<Vec<ConstraintState>>,
    picks: Vec<Vec<Pick>>,
    steps: u64,
    deadline: Deadline<'s>,
    diag: Vec<Vec<Diag>>,
    all_mode_failure: Option<(usize, usize, UnschedulableReason)>,
    /// Set when mode `All` meets a device that breaks a constraint: ends the search with an error.
    fatal: Option<FatalError>,
    /// Per claim, per constraint, per gathered device: the device's attribute values.
    attr_cache: Vec<Vec<Vec<OnceCell<Option<AttrSet>>>>>,
}

impl Search<'_, '_> {
    fn attr_set(&self, c: usize, k: usize, dev: u32) -> Option<&AttrSet> {
        let cell = self.attr_cache.get(c)?.get(k)?.get(dev as usize)?;
        cell.get_or_init(|| {
            let gd = self.gathered.devices[dev as usize];
            let name = &self.claims[c].constraints()[k].attribute;
            device_attribute(gd.slice, gd.dev, name)
                .and_then(|a| attribute_set(a, self.alloc.features.list_type_attributes))
        })
        .as_ref()
    }

    fn allocate_one(
        &mut self,
        c: usize,
        r: usize,
        alt: usize,
        d: usize,
        in_alternative: bool,
        start: usize,
    ) -> Result<bool, Stop> {
        self.steps += 1;
        if self.steps % DEADLINE_CHECK_INTERVAL == 1
            && let Some(why) = self.deadline.expired()
        {
            return Err(Stop::Abort(AllocationError::Aborted(why)));
        }
        let Some(claim) = self.claims.get(c) else {
            return Ok(true);
        };
        let Some(request) = claim.requests().get(r) else {
            return match self.allocate_one(c + 1, 0, 0, 0, false, 0) {
                Err(Stop::MaxSize) => Ok(false),
                other => other,
            };
        };
        if request.has_subrequests && !in_alternative {
            let mut all_exceeded = true;
            for a in 0..request.alternatives.len() {
                match self.allocate_one(c, r, a, 0, true, 0) {
                    Err(Stop::MaxSize) => continue,
                    Err(e) => return Err(e),
                    Ok(true) => return Ok(true),
                    Ok(false) => all_exceeded = false,
                }
            }
            return if all_exceeded && !request.alternatives.is_empty() {
                Err(Stop::MaxSize)
            } else {
                Ok(false)
            };
        }
        let data = &self.alts[c][r][alt];
        if data.failure.is_some() {
            return Ok(false);
        }
        let spec = &request.alternatives[alt];
        let all_mode = spec.mode == AllocationMode::All;
        let needed = match spec.mode {
            AllocationMode::ExactCount(n) => n,
            AllocationMode::All => data.cands.len(),
        };
        if d >= needed {
            return self.allocate_one(c, r + 1, 0, 0, false, 0);
        }
        if self.picks[c].len() + needed - d > ALLOCATION_RESULTS_MAX_SIZE {
            self.diag[c][r].max_size = true;
            return Err(Stop::MaxSize);
        }
        if all_mode {
            let cand = data.cands[d].clone();
            if !self.try_allocate(c, r, alt, &cand, true) {
                return match self.fatal.take() {
                    Some(e) => Err(Stop::Abort(AllocationError::Fatal(Box::new(e)))),
                    None => Ok(false),
                };
            }
            let outcome = self.allocate_one(c, r, alt, d + 1, in_alternative, 0);
            if !matches!(outcome, Ok(true)) {
                self.undo_last(c);
            }
            return outcome;
        }
        let total = data.cands.len();
        // How many of the remaining candidates could still be added given what this search has
        // picked so far (devices in use, constraint values). Constraints only get stricter as
        // devices are added, so fewer compatible candidates than still needed means no solution
        // below this point. This cuts the exponential blow-up of e.g. `matchAttribute` over many
        // devices. Skipped for the common single-device request without constraints.
        let remaining = needed - d;
        let compatible: Option<Vec<usize>> = if remaining > 1 || !self.constraints[c].is_empty() {
            let mut suffix = vec![0usize; total.saturating_sub(start) + 1];
            for i in (start..total).rev() {
                let ok = match self.compatible(c, spec, &self.alts[c][r][alt].cands[i]) {
                    Compat::Yes => true,
                    Compat::InUse => {
                        self.diag[c][r].in_use = true;
                        false
                    }
                    Compat::Constraint(k) => {
                        self.diag[c][r].constraint.get_or_insert(k);
                        false
                    }
                };
                suffix[i - start] = suffix[i - start + 1] + usize::from(ok);
            }
            Some(suffix)
        } else {
            None
        };
        for i in start..total {
            // Not enough candidates left to complete this request.
            let left = compatible.as_ref().map_or(total - i, |s| s[i - start]);
            if left < remaining {
                break;
            }
            if compatible
                .as_ref()
                .is_some_and(|s| s[i - start] == s[i - start + 1])
            {
                continue;
            }
            let cand = self.alts[c][r][alt].cands[i].clone();
            if !self.try_allocate(c, r, alt, &cand, false) {
                continue;
            }
            match self.allocate_one(c, r, alt, d + 1, in_alternative, i + 1) {
                Ok(true) => return Ok(true),
                Ok(false) => self.undo_last(c),
                Err(e) => {
                    self.undo_last(c);
                    return Err(e);
                }
            }
        }
        Ok(false)
    }

    /// Whether a candidate could be added now, judging by devices in use and constraints only.
    fn compatible(&self, c: usize, spec: &PreparedAlternative, cand: &Cand) -> Compat {
        let di = cand.dev as usize;
        let multi =
            self.alloc.features.consumable_capacity && self.gathered.devices[di].prepared().allow_multiple;
        if spec.admin_access {
            if !multi && self.allocating[di].contains(&(c as u32)) {
                return Compat::InUse;
            }
        } else if !self.allocating[di].is_empty() {
            return Compat::InUse;
        }
        for (k, con) in self.constraints[c].iter().enumerate() {
            if !con.applies(&spec.request, spec.subrequest.as_deref()) {
                continue;
            }
            let ok = match self.attr_set(c, k, cand.dev) {
                None => false,
                Some(set) if con.distinct => con.stack.iter().all(|prev| !intersects(prev, set)),
                Some(set) => con.stack.last().is_none_or(|top| intersects(top, set)),
            };
            if !ok {
                return Compat::Constraint(k);
            }
        }
        Compat::Yes
    }

    fn existing_capacity(&self, dev: &PreparedDevice) -> Vec<Quantity> {
        match self.alloc.state.consumed_capacity(&dev.id) {
            LayeredCapacity::Amounts(m) => dev
                .capacities
                .iter()
                .map(|c| m.get(&c.name).cloned().unwrap_or_default())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Tries to add one candidate; on success the pick is recorded (undo with `undo_last`).
    fn try_allocate(&mut self, c: usize, r: usize, alt: usize, cand: &Cand, must: bool) -> bool {
        let alloc = self.alloc;
        let f = &alloc.features;
        let spec = &self.claims[c].requests()[r].alternatives[alt];
        let gd = self.gathered.devices[cand.dev as usize];
        let dev = gd.prepared();
        let di = cand.dev as usize;
        let multi = f.consumable_capacity && dev.allow_multiple;

        if !multi && spec.admin_access && self.allocating[di].contains(&(c as u32)) {
            self.diag[c][r].in_use = true;
            return false;
        }
        if !spec.admin_access && !self.allocating[di].is_empty() {
            self.diag[c][r].in_use = true;
            return false;
        }

        // Capacity shared with earlier picks of this search.
        if multi && let (Some(consumed), Some((used, _))) = (&cand.consumed, &self.sharing[di]) {
            let existing = self.existing_capacity(dev);
            if !fits(&dev.capacities, consumed, &[&existing, used]) {
                self.diag[c][r].capacity.get_or_insert(cand.dev);
                self.note_all_mode(
                    must,
                    c,
                    r,
                    UnschedulableReason::CapacityExhausted {
                        device: Some(dev.id.to_string()),
                    },
                );
                return false;
            }
        }

        // Counters: charged once per device (for shared devices by the first share).
        let mut charged = false;
        if !dev.consumes.is_empty() {
            let already_shared = multi && (alloc.state.has_shares(&dev.id) || self.sharing[di].is_some());
            if !already_shared {
                let gp = &self.gathered.pools[gd.gpool as usize];
                let avail = alloc.available_counters(gp.index, gp.rec);
                let consumption = gp
                    .rec
                    .consumption
                    .get(gd.slice_pos as usize)
                    .and_then(|p| p.get(gd.dev as usize));
                let used = self.counter_use[gd.gpool as usize]
                    .get_or_insert_with(|| vec![Quantity::default(); gp.rec.counters.len()]);
                let ok = consumption.into_iter().flatten().all(|(ci, amount)| {
                    let ci = *ci as usize;
                    match (used.get(ci).and_then(|u| u.checked_add(amount)), avail.get(ci)) {
                        (Some(total), Some(a)) => total <= *a,
                        _ => false,
                    }
                });
                if !ok {
                    self.diag[c][r].counters.get_or_insert(gd.gpool);
                    self.note_all_mode(
                        must,
                        c,
                        r,
                        UnschedulableReason::CountersExhausted {
                            pool: gp.rec.key.to_string(),
                        },
                    );
                    return false;
                }
                for (ci, amount) in consumption.into_iter().flatten() {
                    if let Some(u) = used.get_mut(*ci as usize) {
                        *u = u.checked_add(amount).unwrap_or_else(|| u.clone());
                    }
                }
                charged = true;
            }
        }

        // Constraints.
        let request_name = spec.request.as_str();
        let sub = spec.subrequest.as_deref();
        let mut added = 0;
        let mut failed = None;
        for k in 0..self.constraints[c].len() {
            if !self.constraints[c][k].applies(request_name, sub) {
                added += 1;
                continue;
            }
            let set = self.attr_set(c, k, cand.dev).cloned();
            if !self.constraints[c][k].add(set.as_ref()) {
                failed = Some(k);
                break;
            }
            added += 1;
        }
        if let Some(k) = failed {
            for con in self.constraints[c][..added].iter_mut() {
                if con.applies(request_name, sub) {
                    con.stack.pop();
                }
            }
            if charged {
                self.uncharge(gd);
            }
            self.diag[c][r].constraint.get_or_insert(k);
            if must {
                self.fatal = Some(FatalError::AllModeConstraint {
                    claim: self.claims[c].key().to_string(),
                    request: spec.full_name.clone(),
                    device: dev.id.clone(),
                });
                return false;
            }
            let con = &self.claims[c].constraints()[k];
            self.note_all_mode(
                must,
                c,
                r,
                UnschedulableReason::ConstraintUnsatisfied {
                    attribute: con.attribute.clone(),
                    distinct: con.distinct,
                },
            );
            return false;
        }

        if multi {
            let consumed = cand.consumed.as_deref().unwrap_or_default();
            let entry =
                self.sharing[di].get_or_insert_with(|| (vec![Quantity::default(); dev.capacities.len()], 0));
            for (u, q) in entry.0.iter_mut().zip(consumed) {
                *u = u.checked_add(q).unwrap_or_else(|| u.clone());
            }
            entry.1 += 1;
        } else {
            self.allocating[di].push(c as u32);
        }
        self.picks[c].push(Pick {
            req: r,
            alt,
            dev: cand.dev,
            consumed: cand.consumed.clone(),
            counters_charged: charged,
            multi,
        });
        true
    }

    fn note_all_mode(&mut self, must: bool, c: usize, r: usize, reason: UnschedulableReason) {
        if must && self.all_mode_failure.is_none() {
            self.all_mode_failure = Some((c, r, reason));
        }
    }

    fn uncharge(&mut self, gd: GDev<'_>) {
        let gp = &self.gathered.pools[gd.gpool as usize];
        let consumption = gp
            .rec
            .consumption
            .get(gd.slice_pos as usize)
            .and_then(|p| p.get(gd.dev as usize));
        if let Some(used) = self.counter_use[gd.gpool as usize].as_mut() {
            for (ci, amount) in consumption.into_iter().flatten() {
                if let Some(u) = used.get_mut(*ci as usize) {
                    *u = u.checked_sub(amount).unwrap_or_else(|| u.clone());
                }
            }
        }
    }

    fn undo_last(&mut self, c: usize) {
        let Some(p) = self.picks[c].pop() else { return };
        let spec = &self.claims[c].requests()[p.req].alternatives[p.alt];
        let (request_name, sub) = (spec.request.as_str(), spec.subrequest.as_deref());
        for con in self.constraints[c].iter_mut() {
            if con.applies(request_name, sub) {
                con.stack.pop();
            }
        }
        let di = p.dev as usize;
        if p.multi {
            if let Some((used, n)) = self.sharing[di].as_mut() {
                for (u, q) in used.iter_mut().zip(p.consumed.as_deref().unwrap_or_default()) {
                    *u = u.checked_sub(q).unwrap_or_else(|| u.clone());
                }
                *n -= 1;
                if *n == 0 {
                    self.sharing[di] = None;
                }
            }
        } else if let Some(pos) = self.allocating[di].iter().rposition(|x| *x == c as u32) {
            self.allocating[di].remove(pos);
        }
        if p.counters_charged {
            let gd = self.gathered.devices[di];
            self.uncharge(gd);
        }
    }

    /// The reason for a failed search.
    fn failure(&self) -> AllocationError {
        let alloc = self.alloc;
        if let Some((c, r, reason)) = &self.all_mode_failure {
            let name = self.claims[*c].requests()[*r].name.clone();
            return alloc.unschedulable(self.gathered, self.claims[*c].key(), Some(name), reason.clone());
        }
        // The deepest request where something was rejected.
        let mut found = None;
        for (c, per_req) in self.diag.iter().enumerate() {
            for (r, d) in per_req.iter().enumerate() {
                if d.constraint.is_some()
                    || d.counters.is_some()
                    || d.capacity.is_some()
                    || d.in_use
                    || d.max_size
                {
                    found = Some((c, r, d.clone()));
                }
            }
        }
        let Some((c, r, d)) = found else {
            let claim = self
                .claims
                .first()
                .map(|c| c.key().to_string())
                .unwrap_or_default();
            return alloc.unschedulable(self.gathered, &claim, None, UnschedulableReason::NoCombination);
        };
        let claim = self.claims[c];
        let reason = if let Some(k) = d.constraint {
            let con = &claim.constraints()[k];
            UnschedulableReason::ConstraintUnsatisfied {
                attribute: con.attribute.clone(),
                distinct: con.distinct,
            }
        } else if let Some(gp) = d.counters {
            UnschedulableReason::CountersExhausted {
                pool: self.gathered.pools[gp as usize].rec.key.to_string(),
            }
        } else if let Some(dev) = d.capacity {
            UnschedulableReason::CapacityExhausted {
                device: Some(self.gathered.devices[dev as usize].prepared().id.to_string()),
            }
        } else if d.max_size {
            UnschedulableReason::TooManyDevices
        } else {
            UnschedulableReason::NoCombination
        };
        alloc.unschedulable(
            self.gathered,
            claim.key(),
            Some(claim.requests()[r].name.clone()),
            reason,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_ids_are_uuid_shaped_and_deterministic() {
        let a = share_id("uid-1", "req", "d/p/dev", 0);
        assert_eq!(a, share_id("uid-1", "req", "d/p/dev", 0));
        assert_ne!(a, share_id("uid-1", "req", "d/p/dev", 1));
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "8");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"));
    }

    #[test]
    fn scalar_refs_group_as_attribute_sets_compare() {
        let attrs = [
            DeviceAttribute {
                int: Some(3),
                ..Default::default()
            },
            DeviceAttribute {
                int: Some(4),
                ..Default::default()
            },
            DeviceAttribute {
                bool: Some(true),
                ..Default::default()
            },
            DeviceAttribute {
                string: Some("3".into()),
                ..Default::default()
            },
            DeviceAttribute {
                version: Some("3".into()),
                ..Default::default()
            },
            DeviceAttribute {
                string: Some("a".into()),
                ..Default::default()
            },
            DeviceAttribute {
                ints: Some(vec![3]),
                ..Default::default()
            },
            DeviceAttribute {
                ints: Some(vec![]),
                ..Default::default()
            },
            DeviceAttribute::default(),
        ];
        for list_mode in [false, true] {
            for a in &attrs {
                let set = attribute_set(a, list_mode);
                match scalar_ref(a, list_mode) {
                    Ok(None) => assert_eq!(set, None, "{a:?}"),
                    Ok(Some(_)) => assert_eq!(set.as_ref().map(Vec::len), Some(1), "{a:?}"),
                    Err(()) => assert!(list_mode && set.is_some(), "{a:?}"),
                }
                for b in &attrs {
                    if let (Ok(Some(x)), Ok(Some(y))) = (scalar_ref(a, list_mode), scalar_ref(b, list_mode)) {
                        assert_eq!(
                            x == y,
                            attribute_set(a, list_mode) == attribute_set(b, list_mode),
                            "{a:?} {b:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn attribute_sets() {
        let scalar = DeviceAttribute {
            int: Some(3),
            ..Default::default()
        };
        let list = DeviceAttribute {
            ints: Some(vec![3, 1, 3]),
            ..Default::default()
        };
        assert_eq!(attribute_set(&scalar, false), Some(vec![AttrScalar::Int(3)]));
        assert_eq!(attribute_set(&list, false), None);
        assert_eq!(
            attribute_set(&list, true),
            Some(vec![AttrScalar::Int(1), AttrScalar::Int(3)])
        );
        let mut m = ConstraintState {
            distinct: false,
            requests: vec![],
            stack: vec![],
        };
        assert!(m.add(attribute_set(&list, true).as_ref()));
        assert!(m.add(attribute_set(&scalar, true).as_ref()));
        assert!(!m.add(Some(&vec![AttrScalar::Int(1)])));
        m.stack.pop();
        assert!(
            m.add(Some(&vec![AttrScalar::Int(1)])),
            "intersection restored on backtrack"
        );
        let mut dis = ConstraintState {
            distinct: true,
            requests: vec![],
            stack: vec![],
        };
        assert!(dis.add(Some(&vec![AttrScalar::Int(1)])));
        assert!(!dis.add(Some(&vec![AttrScalar::Int(1), AttrScalar::Int(2)])));
        assert!(dis.add(Some(&vec![AttrScalar::Str("1".into())])));
    }
}
