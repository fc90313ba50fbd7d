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

use k8s_openapi::api::core::v1::{
    ContainerExtendedResourceRequest, Node, NodeAllocatableResourceClaimStatus, NodeSelector,
};
use k8s_openapi::api::resource::v1::{AllocationResult, ResourceClaim};
use parking_lot::{Mutex, RwLock};
use unisched_cache::DraSnapshot;
use unisched_dra::{Allocator, CelSelectorEngine, Deadline, Features, PreparedClaim};
use unisched_fasthash::FastHashMap;
use unisched_framework::{NodeFootprints, NodeInfo};

use super::extended::{ExtendedPlan, Variant};
use super::reasons::{FailureLog, NodeFailure};
use super::short_nodes::ShortTable;

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
    /// Already reserved for this pod.
    pub reserved_for_pod: bool,
    /// Prepared for allocation (unallocated claims only).
    pub prepared: Option<Arc<PreparedClaim>>,
}

impl PodClaim {
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
    pub nodes: RwLock<FastHashMap<String, Arc<NodeResult>>>,
    pub failures: Arc<FailureLog>,
    /// Claims (indices) found unavailable on some node (PostFilter candidates).
    pub unavailable: Mutex<BTreeSet<usize>>,
    pub binding: Mutex<BindingProgress>,
}

impl PodState {
    /// Reserve chose `node`: forgets Filter's results and footprints for every other node. The
    /// binding cycle keeps this state alive while it waits on the API server (seconds under load,
    /// for hundreds of pods at once), and a result per feasible node of each of them added up to
    /// a tenth of the scheduler's memory at 5,000 nodes; nothing reads another node's entry after
    /// Reserve (PreBind and Unreserve work on the chosen node only).
    pub fn retain_only(&self, node: &str) {
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

    /// Filter's result for `node`, with a deferred allocation (decided by the device summary)
    /// completed now by the allocator and stored: the same allocator and allocated state as
    /// Filter, so the devices are the ones a full Filter run would have chosen. `Err` when the
    /// allocator disagrees with the summary (a bug, reported instead of binding).
    pub fn node_result(&self, node: &str) -> Result<Option<Arc<NodeResult>>, String> {
        let Some(result) = self.nodes.read().get(node).cloned() else {
            return Ok(None);
        };
        let (Some(deferred), Some(allocator)) = (&result.deferred, &self.allocator) else {
            return Ok(Some(result));
        };
        let mut list = self.to_allocate_list();
        if let Some(v) = &deferred.extended {
            list.push(&v.prepared);
        }
        let mut allocations = allocator
            .allocate_claims(&deferred.node, &list, Deadline::none())
            .map_err(|e| format!("allocating on node {node} after the device summary said it fits: {e}"))?;
        if allocations.len() != list.len() {
            return Err(format!(
                "allocating on node {node} after the device summary said it fits: {} of {} claims allocated",
                allocations.len(),
                list.len()
            ));
        }
        let extended = match &deferred.extended {
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
