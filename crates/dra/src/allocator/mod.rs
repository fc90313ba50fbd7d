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

use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::AllocationResult;
use parking_lot::RwLock;
use unisched_resource::Quantity;

use crate::claims::{Features, PreparedClaim};
use crate::error::{AllocationError, FatalError};
use crate::pools::DraSnapshotIndex;
use crate::state::StateLayers;

use search::{Search, SearchStop};

mod candidates;
mod constraints;
mod deadline;
mod diagnostics;
mod gathering;
mod result;
mod search;
mod summary;

pub use deadline::Deadline;
pub use summary::{NodeSummary, summary_shape};

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
        let alternative_candidates = self.all_candidates(claims, node, &gathered, deadline.at)?;
        if let Some(failure) = self.first_unservable_request(claims, &gathered, &alternative_candidates) {
            return Err(failure);
        }
        let mut search = Search::new(self, claims, &gathered, &alternative_candidates, deadline);
        let outcome = search.allocate_one(0, 0, 0, 0, false, 0);
        self.search_steps.fetch_add(search.steps, AtomicOrdering::Relaxed);
        match outcome {
            Ok(true) => {}
            Ok(false) | Err(SearchStop::MaxSize) => return Err(search.failure()),
            Err(SearchStop::Abort(e)) => return Err(e),
        }
        let picks = std::mem::take(&mut search.picks);
        drop(search);
        let mut out = Vec::with_capacity(claims.len());
        for (ci, claim) in claims.iter().enumerate() {
            out.push(self.build_result(claim, &picks[ci], &gathered, node)?);
        }
        Ok(out)
    }
}
