//! The per-attempt state, stored in the cycle state under `DynamicResources`.
//!
//! PreFilter builds it once: the pod's claims resolved and checked, the allocator input prepared
//! (classes resolved, CEL compiled), the extended-resource plan. Filter runs in parallel over nodes
//! with `&CycleState`, so everything it records per node (allocation results, node-allocatable
//! statuses, scores, failures, unavailable claims) sits behind locks here. The state is shared, not
//! copied, when the cycle state is cloned (as upstream's `Clone` returns itself): the binding cycle
//! then continues with what Reserve and PreBind recorded in [`BindingProgress`].

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::{
    ContainerExtendedResourceRequest, Node, NodeAllocatableResourceClaimStatus, NodeSelector,
};
use k8s_openapi::api::resource::v1::{AllocationResult, ResourceClaim};
use parking_lot::{Mutex, RwLock};
use unisched_cache::DraSnapshot;
use unisched_dra::{AllocationError, Allocator, CelSelectorEngine, Deadline, Features, PreparedClaim};
use unisched_fasthash::FastHashMap;
use unisched_framework::{NodeFootprints, NodeInfo};

use super::claims::Consumer;
use super::extended::{ExtendedPlan, Variant};
use super::reasons::{FailureLog, NodeFailure};
use super::short_nodes::ShortTable;

/// Why Filter's result for a node could not be completed after the device summary vouched for it:
/// a disagreement between the summary and the allocator (a bug, reported instead of binding), or
/// a node gone from the snapshot.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NodeResultError {
    /// The node passed Filter but the snapshot no longer has it.
    #[error("node {node} passed Filter but is not in the scheduling snapshot")]
    NotInSnapshot {
        /// The node's name.
        node: String,
    },
    /// The allocator failed where the summary said the claims fit.
    #[error("allocating on node {node} after the device summary said it fits: {source}")]
    Allocate {
        /// The node's name.
        node: String,
        /// The allocator's error.
        #[source]
        source: AllocationError,
    },
    /// The allocator allocated fewer claims than asked.
    #[error(
        "allocating on node {node} after the device summary said it fits: {allocated} of {wanted} claims allocated"
    )]
    Incomplete {
        /// The node's name.
        node: String,
        /// How many claims were allocated.
        allocated: usize,
        /// How many were asked for.
        wanted: usize,
    },
}

/// Cycle-state key.
pub(crate) const STATE_KEY: &str = "DynamicResources";

/// One user claim of the pod.
#[derive(Debug)]
pub(crate) struct PodClaim {
    /// The claim as PreFilter saw it.
    pub claim: Arc<ResourceClaim>,
    /// `namespace/name`.
    pub key: String,
    /// `metadata.uid`.
    pub uid: String,
    /// Containers (init first) referencing the claim.
    pub containers: Vec<String>,
    /// For an allocated claim: its node selector (None: everywhere).
    pub available_on: Option<NodeSelector>,
    /// Already allocated.
    pub allocated: bool,
    /// Already reserved for this pod (or for its PodGroup, when that is the consumer).
    pub reserved_for_pod: bool,
    /// What PreBind reserves the claim for: the pod, or its PodGroup for a group claim.
    pub consumer: Consumer,
    /// An allocation another member of the same PodGroup try made in Reserve and has not written
    /// yet: this pod uses it as if it were allocated, and PreBind writes it if the other member
    /// has not. Set together with `allocated`.
    pub shared_pending: Option<Arc<AllocationResult>>,
    /// Prepared for allocation (unallocated claims only).
    pub prepared: Option<Arc<PreparedClaim>>,
}

impl PodClaim {
    /// The allocation the pod will use when it is already decided: the claim's, or the one
    /// shared within the PodGroup try.
    pub fn decided_allocation(&self) -> Option<&AllocationResult> {
        self.shared_pending
            .as_deref()
            .or_else(|| self.claim.status.as_ref().and_then(|s| s.allocation.as_ref()))
    }

    pub fn namespace(&self) -> &str {
        self.claim.metadata.namespace.as_deref().unwrap_or_default()
    }

    pub fn name(&self) -> &str {
        self.claim.metadata.name.as_deref().unwrap_or_default()
    }
}

/// What Filter decided for one node.
#[derive(Debug, Default)]
pub(crate) struct NodeResult {
    /// Allocation per claim in `PodState::to_allocate` order.
    pub allocations: Vec<AllocationResult>,
    /// The extended-resource claim for this node and its allocation.
    pub extended: Option<(Arc<Variant>, AllocationResult)>,
    /// KEP-5517 statuses (sorted by claim name; the extended claim under its placeholder name).
    pub statuses: Vec<NodeAllocatableResourceClaimStatus>,
    /// Raw Score (`firstAvailable` preference).
    pub score: i64,
    /// Filter decided this node from the device summary
    /// ([`unisched_dra::Allocator::fits_without_search`]) without allocating: `allocations` and
    /// `extended` are empty until [`PodState::node_result`] runs the allocator for this node.
    pub deferred: Option<Deferred>,
}

/// What [`PodState::node_result`] needs to make the allocation the device summary vouched for.
#[derive(Debug)]
pub(crate) struct Deferred {
    /// The node.
    pub node: Arc<Node>,
    /// The extended-resource claim for this node, when that is the claim decided (KEP-5004).
    pub extended: Option<Arc<Variant>>,
}

/// A claim whose status PreBind wrote.
#[derive(Clone, Debug)]
pub(crate) struct Written {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// We allocated it in this attempt (Unreserve may deallocate it).
    pub allocated_by_us: bool,
}

/// What Reserve and PreBind did, so Unreserve can undo exactly that (idempotently).
#[derive(Debug, Default)]
pub(crate) struct BindingProgress {
    /// Claim UIDs (and the placeholder key) with in-flight allocations.
    pub in_flight: Vec<String>,
    /// Claims whose status we wrote.
    pub written: Vec<Written>,
    /// The extended claim we created: (namespace, name, uid, mappings).
    pub created_extended: Option<(String, String, String, Vec<ContainerExtendedResourceRequest>)>,
    /// The pod status was patched.
    pub pod_status_patched: bool,
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct PodState {
    pub snapshot: Arc<DraSnapshot>,
    /// The plugin's CEL engine (compilations cached), for class matching outside the allocator.
    pub engine: Arc<CelSelectorEngine>,
    /// The plugin's DRA feature gates.
    pub features: Features,
    /// Where Filter records nodes the device summary finds short, and how many devices the
    /// pod's one claim needs, when that claim has the summary's shape ([`super::short_nodes`]).
    pub short: Option<(Arc<ShortTable>, usize)>,
    pub claims: Vec<PodClaim>,
    /// Indices into `claims` that need allocation, in allocator order.
    pub to_allocate: Vec<usize>,
    pub extended: Option<ExtendedPlan>,
    pub allocator: Option<Allocator>,
    pub has_first_available: bool,
    pub footprints: NodeFootprints,
    /// Filter's result per node, where it has more to say than [`Self::fits`] does.
    pub nodes: RwLock<FastHashMap<String, Arc<NodeResult>>>,
    /// Nodes the device summary passed without an extended-resource claim (see [`SummaryFits`]).
    pub fits: SummaryFits,
    pub failures: Arc<FailureLog>,
    /// Claims (indices) found unavailable on some node (PostFilter candidates).
    pub unavailable: Mutex<BTreeSet<usize>>,
    pub binding: Mutex<BindingProgress>,
    /// The PodGroup try this pod is scheduled in, when PodGroup claims are on: the allocations it
    /// makes for its group's claims may be shared by the try's other members.
    pub group_try: Option<Arc<str>>,
}

impl PodState {
    /// Reserve chose `node`: forgets Filter's results and footprints for every other node. The
    /// binding cycle keeps this state alive while it waits on the API server (seconds under load,
    /// for hundreds of pods at once), and a result per feasible node of each of them added up to
    /// a tenth of the scheduler's memory at 5,000 nodes; nothing reads another node's entry after
    /// Reserve (PreBind and Unreserve work on the chosen node only).
    pub fn retain_only(&self, node: &str) {
        let kept = self.fits_slot(node);
        self.fits.clear_all();
        if let Some(slot) = kept {
            self.fits.insert(slot);
        }
        {
            let mut nodes = self.nodes.write();
            let kept = nodes.remove(node);
            *nodes = FastHashMap::default();
            if let Some(result) = kept {
                nodes.insert(node.to_string(), result);
            }
        }
        self.footprints.retain_only(node);
    }

    /// The claims to allocate, in allocator order.
    pub fn to_allocate_list(&self) -> Vec<&PreparedClaim> {
        self.to_allocate
            .iter()
            .filter_map(|&i| self.claims[i].prepared.as_deref())
            .collect()
    }

    /// Filter's result for `node`, with an allocation the device summary vouched for (a
    /// [`Deferred`] entry or a bit of [`Self::fits`]) made now by the allocator and stored: the
    /// same allocator and allocated state as Filter, so the devices are the ones a full Filter
    /// run would have chosen. `node_obj` gives the node for a bit of `fits` (the map entry holds
    /// its own). `Err` when the allocator disagrees with the summary (a bug, reported instead of
    /// binding) or the node is gone from the snapshot.
    pub fn node_result(
        &self,
        node: &str,
        node_obj: impl FnOnce() -> Option<Arc<Node>>,
    ) -> Result<Option<Arc<NodeResult>>, NodeResultError> {
        let Some(allocator) = &self.allocator else {
            return Ok(self.nodes.read().get(node).cloned());
        };
        let entry = self.nodes.read().get(node).cloned();
        let (node_obj, extended) = match entry {
            Some(result) => match &result.deferred {
                Some(deferred) => (deferred.node.clone(), deferred.extended.clone()),
                None => return Ok(Some(result)),
            },
            None => {
                if self.fits_slot(node).is_none() {
                    return Ok(None);
                }
                let obj = node_obj().ok_or_else(|| NodeResultError::NotInSnapshot {
                    node: node.to_string(),
                })?;
                (obj, None)
            }
        };
        let mut list = self.to_allocate_list();
        if let Some(v) = &extended {
            list.push(&v.prepared);
        }
        let mut allocations = allocator
            .allocate_claims(&node_obj, &list, Deadline::none())
            .map_err(|source| NodeResultError::Allocate {
                node: node.to_string(),
                source,
            })?;
        if allocations.len() != list.len() {
            return Err(NodeResultError::Incomplete {
                node: node.to_string(),
                allocated: allocations.len(),
                wanted: list.len(),
            });
        }
        let extended = match &extended {
            Some(v) => allocations.pop().map(|a| (v.clone(), a)),
            None => None,
        };
        let full = Arc::new(NodeResult {
            allocations,
            extended,
            ..NodeResult::default()
        });
        self.nodes.write().insert(node.to_string(), full.clone());
        Ok(Some(full))
    }

    /// The slot of `node` in the allocator's index, if Filter recorded the node as a bit of
    /// [`Self::fits`].
    fn fits_slot(&self, node: &str) -> Option<u32> {
        self.allocator
            .as_ref()?
            .index()
            .node_slot(node)
            .filter(|&slot| self.fits.contains(slot))
    }

    /// Filter passed `node` and recorded it (a map entry or a bit of [`Self::fits`]).
    #[cfg(test)]
    pub fn passed(&self, node: &str) -> bool {
        self.nodes.read().contains_key(node) || self.fits_slot(node).is_some()
    }
}

/// The nodes Filter passed on the device summary's word alone, for a pod whose one claim is not
/// an extended-resource claim: a bit per node slot of the allocator's index
/// ([`unisched_dra::DraSnapshotIndex::node_slot`]) instead of a map entry. Such a node's result
/// holds nothing yet (no allocation, no statuses, score 0) and most feasible nodes of the common
/// claim are such nodes: their entries (a name and a result allocated per node and attempt,
/// inserted under the map's write lock) were the larger part of Filter's own cost. Slots the
/// set has no room for, nodes without a slot and extended-resource claims keep map entries.
#[derive(Debug, Default)]
pub(crate) struct SummaryFits(Box<[AtomicU64]>);

impl SummaryFits {
    /// Room for `slots` node slots.
    pub fn with_slots(slots: usize) -> Self {
        SummaryFits((0..slots.div_ceil(64)).map(|_| AtomicU64::new(0)).collect())
    }

    /// Records the node in `slot`; false if the set has no room for it.
    pub fn insert(&self, slot: u32) -> bool {
        let (word, bit) = Self::at(slot);
        match self.0.get(word) {
            Some(w) => {
                w.fetch_or(bit, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// Forgets the node in `slot`.
    pub fn remove(&self, slot: u32) {
        let (word, bit) = Self::at(slot);
        if let Some(w) = self.0.get(word) {
            w.fetch_and(!bit, Ordering::Relaxed);
        }
    }

    /// Whether the node in `slot` is recorded.
    pub fn contains(&self, slot: u32) -> bool {
        let (word, bit) = Self::at(slot);
        self.0
            .get(word)
            .is_some_and(|w| w.load(Ordering::Relaxed) & bit != 0)
    }

    /// Forgets every node.
    pub fn clear_all(&self) {
        for w in self.0.iter() {
            w.store(0, Ordering::Relaxed);
        }
    }

    fn at(slot: u32) -> (usize, u64) {
        ((slot / 64) as usize, 1 << (slot % 64))
    }
}

impl PodState {
    /// Why the claims do not allocate on `node`, for a node Filter rejected from the device
    /// summary without recording a reason (see [`super::reasons::DetailSource`]): the allocator
    /// runs on it now, for the claim the summary decided. `None` if it unexpectedly succeeds.
    pub fn explain_short(&self, node: &NodeInfo) -> Option<NodeFailure> {
        let allocator = self.allocator.as_ref()?;
        let node_obj = node.node()?;
        let variant = match &self.extended {
            Some(plan) => plan
                .variant_for(&node.allocatable, &self.snapshot, &*self.engine, &self.features)
                .ok()?,
            None => None,
        };
        let mut list = self.to_allocate_list();
        if let Some(v) = &variant {
            list.push(&v.prepared);
        }
        // The summary decides only one exact-count request with at most one matchAttribute; the
        // search gives up on a value as soon as too few candidates share it, so it ends quickly
        // without a deadline.
        match allocator.allocate_claims(node_obj, &list, Deadline::none()) {
            Ok(_) => None,
            Err(e) => Some(super::allocation_failure(&list, e).1),
        }
    }
}

/// The cycle-state value: a shared handle.
#[derive(Clone, Debug)]
pub(crate) struct CycleData(pub Arc<PodState>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_fits_records_each_slot_on_its_own() {
        let fits = SummaryFits::with_slots(130);
        for slot in [0, 63, 64, 129] {
            assert!(fits.insert(slot), "{slot}");
        }
        let held: Vec<u32> = (0..130).filter(|&s| fits.contains(s)).collect();
        assert_eq!(held, vec![0, 63, 64, 129]);
        fits.remove(63);
        assert!(!fits.contains(63) && fits.contains(0) && fits.contains(64));
        // The last word's spare bits are room too; beyond them there is none.
        assert!(fits.insert(191));
        assert!(!fits.insert(192) && !fits.contains(192));
        fits.clear_all();
        assert!((0..192).all(|s| !fits.contains(s)));
        // A pod the summary does not decide has no room at all.
        assert!(!SummaryFits::default().insert(0));
    }
}
