//! Filter for one node: the steps DynamicResources runs, in order, to decide whether the pod's
//! claims can be satisfied on a node and what that costs there.
//!
//! 1. [`DynamicResources::extended_variant`]: which of the pod's extended resources DRA serves on
//!    this node (KEP-5004), as the variant of its extended-resource claim.
//! 2. [`DynamicResources::check_allocated_claims`]: claims allocated already must be usable here.
//! 3. [`DynamicResources::allocate_on_node`]: the device summary decides simple claims without a
//!    search; otherwise the allocator allocates the claims still to allocate.
//! 4. [`node_allocatable_statuses`] and [`DynamicResources::check_node_allocatable_fit`]: the
//!    KEP-5517 node-allocatable footprint of the allocations, whether it fits the node, and the
//!    record of it for the resource scorers.
//!
//! Each step either continues or returns the node's [`Rejection`]. Filter runs for every node in
//! parallel, so the steps allocate nothing beyond what the node's result keeps.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, NodeAllocatableResourceClaimStatus};
use k8s_openapi::api::resource::v1::AllocationResult;
use unisched_dra::nodesel::node_selector_matches;
use unisched_dra::{AllocationError, Allocator, Deadline, FatalError, NodeSummary, PreparedClaim};
use unisched_framework::{NodeInfo, PodInfo, Status};
use unisched_resource::node_allocatable_claim_footprint;

use super::extended::{PLACEHOLDER_NAME, Variant};
use super::reasons::NodeFailure;
use super::state::{Deferred, NodeResult, PodState};
use super::{DynamicResources, FIRST_AVAILABLE_MAX, claims, node_allocatable, prebind, reason, short_nodes};

/// Why a node was rejected: the status Filter returns, and the failure recorded to explain it
/// (`None`: nothing beyond the status).
pub(crate) type Rejection = (Status, Option<NodeFailure>);

/// What the allocation step decided on one node.
enum NodeAllocation {
    /// The device summary decided the node fits without allocating: the result to record, or
    /// `None` when the node is recorded in `data.fits` instead.
    Decided(Option<NodeResult>),
    /// The allocations for the claims to allocate, in `data.to_allocate` order, and for the
    /// extended-resource variant.
    Allocated {
        claims: Vec<AllocationResult>,
        extended: Option<AllocationResult>,
    },
}

/// What the device summary said about the pod's one claim on a node.
enum SummaryVerdict {
    /// Fits, and the node is recorded in `data.fits`.
    Recorded,
    /// Fits; the allocation is made later, for the chosen node only.
    Fits,
    /// Too few devices.
    Short,
    /// The summary cannot tell; the allocator decides.
    Undecided,
}

impl DynamicResources {
    /// Filter for one node, returning the result to record: `None` when the node is recorded in
    /// `data.fits` instead. `allocator` is `data.allocator`, or in a preemption dry run the one
    /// that sees the victims' devices as free.
    pub(super) fn filter_node(
        &self,
        data: &PodState,
        allocator: Option<&Allocator>,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Result<Option<NodeResult>, Rejection> {
        let Some(node_obj) = node.node() else {
            return Err((Status::unresolvable("node not found"), None));
        };
        let variant = self.extended_variant(data, node)?;
        self.check_allocated_claims(data, node_obj)?;
        let (allocations, ext_alloc) =
            match self.allocate_on_node(data, allocator, node, node_obj, variant.as_ref())? {
                NodeAllocation::Decided(None) => return Ok(None),
                NodeAllocation::Decided(Some(mut result)) => {
                    if let Some(deferred) = &mut result.deferred {
                        deferred.extended = variant;
                    }
                    return Ok(Some(result));
                }
                NodeAllocation::Allocated { claims, extended } => (claims, extended),
            };
        let statuses = node_allocatable_statuses(
            data,
            pod,
            &allocations,
            variant.as_deref().zip(ext_alloc.as_ref()),
        )?;
        Self::check_node_allocatable_fit(data, pod, node, &statuses)?;
        let score = if data.has_first_available {
            first_available_score(data, &allocations)
        } else {
            0
        };
        Ok(Some(NodeResult {
            allocations,
            extended: variant.zip(ext_alloc),
            statuses,
            score,
            deferred: None,
        }))
    }

    /// The variant of the pod's extended-resource claim for this node: which of its extended
    /// resources DRA serves here (`None`: the pod has none, or the node serves them all itself).
    fn extended_variant(&self, data: &PodState, node: &NodeInfo) -> Result<Option<Arc<Variant>>, Rejection> {
        let Some(plan) = &data.extended else {
            return Ok(None);
        };
        if plan.has_stale_claim() {
            return Err((Status::unresolvable(reason::STALE_EXTENDED), None));
        }
        plan.variant_for(&node.allocatable, &data.snapshot, &*self.engine, &self.features)
            .map_err(|e| {
                let message = e.to_string();
                (
                    Status::unresolvable(message.clone()),
                    Some(NodeFailure::Invalid { message }),
                )
            })
    }

    /// Claims allocated already must be usable on the node: their allocation reaches it and
    /// their binding has neither failed nor timed out. The unusable ones are remembered for
    /// PostFilter, which deallocates them.
    fn check_allocated_claims(&self, data: &PodState, node_obj: &Node) -> Result<(), Rejection> {
        let mut unavailable = Vec::new();
        for (i, c) in data.claims.iter().enumerate() {
            if !c.allocated {
                continue;
            }
            let usable = match &c.available_on {
                None => true,
                Some(sel) => node_selector_matches(sel, node_obj).unwrap_or(false),
            };
            if !usable || prebind::binding_failed_or_timed_out(&c.claim, self.args.binding_timeout.0) {
                unavailable.push(i);
            }
        }
        if unavailable.is_empty() {
            return Ok(());
        }
        let first = data.claims[unavailable[0]].key.clone();
        data.unavailable.lock().extend(unavailable);
        Err((
            Status::unresolvable(reason::NOT_AVAILABLE),
            Some(NodeFailure::ClaimUnavailable { claim: first }),
        ))
    }

    /// Allocates the claims still to allocate, and the extended-resource claim's `variant`, on the
    /// node; without an allocator or anything to allocate, nothing is allocated.
    fn allocate_on_node(
        &self,
        data: &PodState,
        allocator: Option<&Allocator>,
        node: &NodeInfo,
        node_obj: &Arc<Node>,
        variant: Option<&Arc<Variant>>,
    ) -> Result<NodeAllocation, Rejection> {
        let Some(allocator) = allocator.filter(|_| !data.to_allocate.is_empty() || variant.is_some()) else {
            return Ok(NodeAllocation::Allocated {
                claims: Vec::new(),
                extended: None,
            });
        };
        let mut list = data.to_allocate_list();
        if let Some(v) = variant {
            list.push(&v.prepared);
        }
        match self.summarize(data, allocator, node, &list, variant.is_some()) {
            SummaryVerdict::Recorded => return Ok(NodeAllocation::Decided(None)),
            SummaryVerdict::Fits => {
                // The caller puts the variant in: it owns it.
                return Ok(NodeAllocation::Decided(Some(NodeResult {
                    deferred: Some(Deferred {
                        node: node_obj.clone(),
                        extended: None,
                    }),
                    ..NodeResult::default()
                })));
            }
            SummaryVerdict::Short => return Err((Status::unresolvable(reason::CANNOT_ALLOCATE), None)),
            SummaryVerdict::Undecided => {}
        }
        let deadline = match self.args.filter_timeout() {
            Some(d) => Deadline::after(d),
            None => Deadline::none(),
        };
        match allocator.allocate_claims(node_obj, &list, deadline) {
            Ok(mut results) => {
                if results.len() != list.len() {
                    return Err((Status::unresolvable(reason::CANNOT_ALLOCATE), None));
                }
                let extended = if variant.is_some() { results.pop() } else { None };
                Ok(NodeAllocation::Allocated {
                    claims: results,
                    extended,
                })
            }
            Err(e) => {
                let (status, failure) = allocation_failure(&list, e);
                Err((status, Some(failure)))
            }
        }
    }

    /// The device summary's verdict on the pod's one claim (`list`) on the node.
    ///
    /// The summary decides the simple claim without a search; the allocation itself is made for
    /// the chosen node only (`PodState::node_result`). The claim is the pod's one claim or, for a
    /// pod with no claims, its extended-resource claim. Not in preemption dry runs (their
    /// allocator sees victims' devices as free), not with other claims of the pod whose
    /// node-allocatable statuses need the full path. (The summary decides only nodes whose devices
    /// are plain, so the decided claim itself has no node-allocatable statuses to compute.) A node
    /// it finds short gets the same status the allocator's failure gives; why it failed is asked of
    /// the allocator only if no node fits ([`super::reasons::DetailSource`]), so Filter records
    /// nothing for it.
    fn summarize(
        &self,
        data: &PodState,
        allocator: &Allocator,
        node: &NodeInfo,
        list: &[&PreparedClaim],
        has_variant: bool,
    ) -> SummaryVerdict {
        let own_allocator = data
            .allocator
            .as_ref()
            .is_some_and(|a| std::ptr::eq(a, allocator));
        if !(self.summary && own_allocator && data.claims.len() + usize::from(has_variant) == 1) {
            return SummaryVerdict::Undecided;
        }
        let slot = short_nodes::node_slot(allocator.index(), node);
        match allocator.summarize_in_slot(slot, list) {
            NodeSummary::Fits => {
                if !has_variant
                    && let Some(slot) = slot
                    && data.fits.insert(slot)
                {
                    return SummaryVerdict::Recorded;
                }
                SummaryVerdict::Fits
            }
            NodeSummary::Short { free } => {
                // The table is for the snapshot's index, the allocator's too.
                if let Some((table, _)) = &data.short
                    && Arc::ptr_eq(data.snapshot.index(), allocator.index())
                    && let Some(slot) = slot
                {
                    table.record(slot, free);
                }
                SummaryVerdict::Short
            }
            NodeSummary::Undecided => SummaryVerdict::Undecided,
        }
    }

    /// KEP-5517: whether the node-allocatable footprint of the allocations fits the node; when
    /// there is one, it is recorded for the resource scorers ([`unisched_framework::NodeFootprints`]).
    fn check_node_allocatable_fit(
        data: &PodState,
        pod: &PodInfo,
        node: &NodeInfo,
        statuses: &[NodeAllocatableResourceClaimStatus],
    ) -> Result<(), Rejection> {
        if statuses.is_empty() {
            return Ok(());
        }
        if let Err((status, shortfalls)) = node_allocatable::check_fit(&pod.pod, statuses, node) {
            let failure = (!shortfalls.is_empty()).then_some(NodeFailure::Allocatable { shortfalls });
            return Err((status, failure));
        }
        data.footprints
            .set(node.name(), node_allocatable_claim_footprint(statuses, &pod.pod));
        Ok(())
    }
}

/// KEP-5517: the node-allocatable statuses of the pod's claims on the node (allocated already, or
/// in `allocations` in `data.to_allocate` order) and of its extended-resource claim (`extended`:
/// the variant with its allocation), sorted by claim name.
fn node_allocatable_statuses(
    data: &PodState,
    pod: &PodInfo,
    allocations: &[AllocationResult],
    extended: Option<(&Variant, &AllocationResult)>,
) -> Result<Vec<NodeAllocatableResourceClaimStatus>, Rejection> {
    let mut statuses: Vec<NodeAllocatableResourceClaimStatus> = Vec::new();
    let index = data.snapshot.index();
    let mut new_alloc = allocations.iter();
    for (i, c) in data.claims.iter().enumerate() {
        let allocation: Option<&AllocationResult> = if c.allocated {
            c.decided_allocation()
        } else if data.to_allocate.contains(&i) {
            new_alloc.next()
        } else {
            None
        };
        let Some(allocation) = allocation else { continue };
        let computed = node_allocatable::claim_allocatable(c.name(), &c.containers, allocation, index)
            .map_err(|e| {
                let message = format!("claim {}: {e}", c.key);
                (
                    Status::unresolvable(message.clone()),
                    Some(NodeFailure::Invalid { message }),
                )
            })?;
        let Some(ca) = computed else { continue };
        // A mapped device's CPU and memory are counted for one pod: a claim already reserved for
        // someone else (the pod's own PodGroup excepted: `reserved_for_pod` covers it), or shared
        // with another member of this PodGroup try, cannot add them to a second pod.
        let reserved_elsewhere = !c.reserved_for_pod && claims::reserved_for_others(&c.claim, &pod.uid) > 0;
        if ca.mapped && (reserved_elsewhere || c.shared_pending.is_some()) {
            return Err((
                Status::unresolvable(format!(
                    "node allocatable resource claim {} has a mapped device and cannot be shared across pods",
                    // Upstream names the claim without its namespace here.
                    c.claim.metadata.name.as_deref().unwrap_or_default()
                )),
                Some(NodeFailure::MappedShared { claim: c.key.clone() }),
            ));
        }
        statuses.push(ca.status);
    }
    if let Some((v, a)) = extended {
        let containers: Vec<String> = v
            .mappings
            .iter()
            .map(|m| m.container_name.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if let Some(ca) = node_allocatable::claim_allocatable(PLACEHOLDER_NAME, &containers, a, index)
            .map_err(|e| {
                let message = e.to_string();
                (
                    Status::unresolvable(message.clone()),
                    Some(NodeFailure::Invalid { message }),
                )
            })?
        {
            statuses.push(ca.status);
        }
    }
    statuses.sort_by(|a, b| a.resource_claim_name.cmp(&b.resource_claim_name));
    Ok(statuses)
}

/// A fatal allocator error as a user-facing message (upstream wording for a missing class, which
/// names the request but not the claim).
pub(super) fn fatal_message(e: &FatalError) -> String {
    match e {
        FatalError::ClassNotFound { request, class, .. } => {
            format!("request {request}: device class {class} does not exist")
        }
        other => other.to_string(),
    }
}

/// The status and recorded reason of a node where the allocator failed.
pub(crate) fn allocation_failure(list: &[&PreparedClaim], e: AllocationError) -> (Status, NodeFailure) {
    match e {
        AllocationError::Unschedulable(u) => {
            let needed = needed_devices(list, &u);
            (
                Status::unresolvable(reason::CANNOT_ALLOCATE),
                NodeFailure::Allocation { reason: u, needed },
            )
        }
        AllocationError::Aborted(_) => (Status::unresolvable(reason::TIMED_OUT), NodeFailure::Timeout),
        // Something is wrong with the claim or class itself (a CEL runtime error on some device,
        // an `All` request contradicting its constraint): another node would only hide it, so
        // the attempt ends with an error and the pod stays pending (upstream).
        AllocationError::Fatal(e) => {
            let message = fatal_message(&e);
            (Status::error(message.clone()), NodeFailure::Invalid { message })
        }
    }
}

/// The device count of the failing request, to say "fewer than N devices".
fn needed_devices(list: &[&PreparedClaim], u: &unisched_dra::Unschedulable) -> Option<usize> {
    let claim = list.iter().find(|c| c.key() == u.claim)?;
    let request = u.request.as_deref()?;
    claim
        .requests()
        .iter()
        .flat_map(|r| r.alternatives.iter())
        .find(|a| a.full_name == request)
        .map(|a| a.min_devices())
}

/// Σ over the `firstAvailable` requests of `8 - index of the chosen subrequest`.
fn first_available_score(data: &PodState, allocations: &[AllocationResult]) -> i64 {
    let mut score = 0;
    for (k, &i) in data.to_allocate.iter().enumerate() {
        let (Some(pc), Some(a)) = (data.claims[i].prepared.as_ref(), allocations.get(k)) else {
            continue;
        };
        let chosen: BTreeSet<&str> = a
            .devices
            .iter()
            .flat_map(|d| d.results.iter().flatten())
            .map(|r| r.request.as_str())
            .collect();
        for req in pc.requests().iter().filter(|r| r.has_subrequests) {
            if let Some(pos) = req
                .alternatives
                .iter()
                .position(|alt| chosen.contains(alt.full_name.as_str()))
            {
                score += FIRST_AVAILABLE_MAX - i64::try_from(pos).unwrap_or(FIRST_AVAILABLE_MAX);
            }
        }
    }
    score
}
