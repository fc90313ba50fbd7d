//! DynamicResources: schedules pods that use DRA ResourceClaims, extended resources backed by DRA
//! (KEP-5004) and devices that take node allocatable (KEP-5517).
//!
//! Extension points (upstream semantics, upstream reason strings):
//!
//! * **PreEnqueue** — the pod waits until every claim it names exists (generated claims controlled
//!   by the pod) and none is being deleted.
//! * **PreFilter** — resolves the claims (template claims through `status.resourceClaimStatuses`),
//!   rejects claims reserved by too many others or in flight for another pod, resolves classes and
//!   compiles selectors once ([`unisched_dra::PreparedClaim`]), and builds the allocator against the
//!   cache's [`DraSnapshot`] (committed + in-flight allocations). Nothing to do → Skip.
//! * **Filter** (parallel, step by step in [`node_filter`]) — allocated claims must be usable on the node; the others are allocated
//!   with the filter timeout (a pod with one simple claim is decided by the device summary,
//!   [`unisched_dra::Allocator::fits_without_search`], and allocated only for the node Reserve
//!   gets); then the KEP-5517 footprint is computed and checked against the node's
//!   remaining allocatable (authoritative; NodeResourcesFit only checks spec requests). Per-node
//!   results, footprints (for scoring, [`NodeFootprints`]) and typed failure reasons are recorded.
//!   PreFilter also publishes the framework's read-only [`unisched_framework::DeviceClassCapacity`]
//!   handle, through which the resource scorers count the devices of DRA-backed extended
//!   resources ([`class_capacity`]) without reading this plugin's state.
//! * **PreFilter extensions** ([`preemption`]) — in preemption dry runs, a removed victim's
//!   allocated claims that nobody else consumes count as free, so Filter can hand their devices
//!   to the preemptor; AddPod undoes it.
//! * **PostFilter** — when no node fits: deallocates one unavailable claim reserved by nobody or only
//!   by this pod, or deletes a stale extended-resource claim.
//! * **PreScore/Score** — prefer nodes where higher-ranked `firstAvailable` subrequests were used.
//! * **Reserve/Unreserve** — record/drop in-flight allocations in the cache; Unreserve also undoes
//!   PreBind's API writes. Idempotent.
//! * **AssumedPod** — the assumed pod carries `status.nodeAllocatableResourceClaimStatuses`, so the
//!   cache's node accounting includes the claims at once.
//! * **PreBind** ([`prebind`]) — writes claim status (allocation + `reservedFor`), creates the
//!   extended-resource claim, patches pod status, waits for binding conditions.
//! * **Events** ([`hints`]) — claim, slice, class, node and pod events with queueing hints.
//!
//! Bad input never panics: invalid CEL, a missing class, a malformed claim become
//! UnschedulableAndUnresolvable statuses in PreFilter; a fatal allocator error in Filter (a CEL
//! runtime error, an `All` request its own constraint rules out) is an Error status that ends the
//! scheduling attempt, as upstream.

mod api;
pub use device_scoring::{DEVICE_RESOURCES, DeviceResources, DeviceResourcesArgs};
mod args;
mod claims;
mod class_capacity;
pub(crate) use class_capacity::ClassCapacity;
use class_capacity::ClassCapacitySource;
mod device_scoring;
mod extended;
mod hints;
mod node_allocatable;
mod node_filter;
mod prebind;
mod preemption;
mod reasons;
mod short_nodes;
mod state;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use parking_lot::{Mutex, RwLock};
use unisched_cache::DraCache;
use unisched_dra::{Allocator, CelSelectorEngine, Features, PreparedClaim, summary_shape};
use unisched_fasthash::FastHashMap;
use unisched_framework::{
    ClusterEventWithHint, Code, CycleState, DEVICE_CLASS_CAPACITY_KEY, DIAGNOSIS_DETAIL_KEY, DiagnosisDetail,
    EnqueueExtensions, FilterPlugin, FrameworkHandle, NODE_FOOTPRINTS_KEY, NODE_VETO_KEY, NodeFootprints,
    NodeInfo, NodeScore, NodeToStatus, NodeVetoHandle, Plugin, PodGroupKey, PodGroupStore, PodInfo,
    PostFilterPlugin, PostFilterResult, PreBindPlugin, PreEnqueuePlugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, ReservePlugin, ScorePlugin, Status, StatusFuture,
};

pub use api::{ClaimFuture, DraApi, DraApiError, DraApiLater, merge_patch};
pub use args::{DEFAULT_BINDING_TIMEOUT, DEFAULT_FILTER_TIMEOUT, DynamicResourcesArgs};
pub use claims::RESERVED_FOR_MAX_SIZE;
pub use extended::PLACEHOLDER_NAME;

pub(crate) use node_filter::allocation_failure;
use node_filter::fatal_message;
use reasons::{DetailSource, FailureLog};
use short_nodes::{ShortNodeVeto, ShortNodes};
use state::{BindingProgress, CycleData, PodClaim, PodState, STATE_KEY, SummaryFits};

/// The plugin name.
pub const NAME: &str = "DynamicResources";

/// The finalizer that protects allocated claims from deletion.
pub const FINALIZER: &str = "resource.kubernetes.io/delete-protection";

/// Upstream `FirstAvailableDeviceRequestMaxSize`: scores are `8 - chosen subrequest index`.
const FIRST_AVAILABLE_MAX: i64 = 8;

/// Upstream reason strings.
pub mod reason {
    /// Filter: the allocator found no solution on the node.
    pub const CANNOT_ALLOCATE: &str = "cannot allocate all claims";
    /// Filter: an allocated claim cannot be used on the node.
    pub const NOT_AVAILABLE: &str = "resourceclaim not available on the node";
    /// Filter: the filter timeout passed.
    pub const TIMED_OUT: &str = "timed out trying to allocate devices";
    /// PreFilter: the claim is reserved by too many consumers.
    pub const IN_USE: &str = "resourceclaim in use";
    /// Filter: a stale extended-resource claim exists.
    pub const STALE_EXTENDED: &str = "cannot schedule extended resource claim";
    /// PostFilter outcomes.
    pub const DEALLOCATED: &str = "deallocation of ResourceClaim completed";
    /// PostFilter: the stale extended-resource claim was deleted.
    pub const DELETED: &str = "deletion of ResourceClaim completed";
    /// PostFilter: nothing to undo (upstream's text; unisched returns it as the status' error-free
    /// code only, without a reason, so it does not clutter the FailedScheduling message).
    pub const STILL_NOT_SCHEDULABLE: &str = "still not schedulable";
    /// PostFilter: the pod has no claims (likewise not shown).
    pub const NO_CLAIMS: &str = "no new claims to deallocate";
}

/// The plugin. See the module documentation.
pub struct DynamicResources {
    args: DynamicResourcesArgs,
    dra: Option<Arc<DraCache>>,
    api: Option<Arc<dyn DraApi>>,
    engine: Arc<CelSelectorEngine>,
    features: Features,
    /// How often PreBind re-checks binding conditions (upstream: 5 s).
    poll_interval: Duration,
    /// Filter may decide simple claims from the device summary (off with the environment
    /// variable [`NO_SUMMARY_ENV`], to measure or rule out the fast path; decisions are the same).
    summary: bool,
    /// Nodes the summary found short, for the node veto ([`short_nodes`]).
    short_nodes: ShortNodes,
    /// The PodGroups, when their claims are shared by their pods (DRAWorkloadResourceClaims);
    /// `None`: every claim is reserved for the pod that uses it.
    pod_groups: Option<Arc<PodGroupStore>>,
}

/// Set (to anything) in the scheduler's environment, Filter runs the full allocator on every
/// node instead of deciding simple claims from the device summary.
pub const NO_SUMMARY_ENV: &str = "UNISCHED_DRA_NO_SUMMARY";

impl std::fmt::Debug for DynamicResources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamicResources")
            .field("args", &self.args)
            .field("dra", &self.dra.is_some())
            .field("api", &self.api.is_some())
            .finish_non_exhaustive()
    }
}

impl DynamicResources {
    /// A plugin over the cache's DRA state and an API writer. Without a DRA cache, pods with claims
    /// are rejected as unresolvable and other pods are ignored; without an API, PreBind and
    /// PostFilter fail with an error.
    pub fn new(
        args: &DynamicResourcesArgs,
        dra: Option<Arc<DraCache>>,
        api: Option<Arc<dyn DraApi>>,
    ) -> Self {
        DynamicResources {
            args: args.clone(),
            dra,
            api,
            engine: Arc::new(CelSelectorEngine::new()),
            features: Features::default(),
            poll_interval: Duration::from_secs(5),
            summary: std::env::var_os(NO_SUMMARY_ENV).is_none(),
            short_nodes: ShortNodes::default(),
            pod_groups: None,
        }
    }

    /// Shares PodGroup claims among the groups' pods (DRAWorkloadResourceClaims): a pod's claim
    /// entry that matches one of its PodGroup's is reserved for the group, allocated once for it,
    /// and a claim the group's template generated is the pod's to use.
    #[must_use]
    pub fn with_pod_group_claims(mut self, groups: Arc<PodGroupStore>) -> Self {
        self.pod_groups = Some(groups);
        self
    }

    /// The pod's PodGroup, when PodGroup claims are on and the pod belongs to one. A group that
    /// does not exist is upstream's lister miss.
    fn pod_group(&self, pod: &PodInfo) -> Result<Option<Arc<PodGroup>>, String> {
        let Some(groups) = &self.pod_groups else {
            return Ok(None);
        };
        let Some(name) = claims::pod_group_name(&pod.pod) else {
            return Ok(None);
        };
        let key = PodGroupKey {
            namespace: pod.namespace.clone(),
            name: name.to_string(),
        };
        match groups.group(&key) {
            Some(info) => Ok(Some(info.object.clone())),
            None => Err(format!("podgroup.scheduling.k8s.io {name:?} not found")),
        }
    }

    /// Overrides the DRA feature gates (all on by default).
    #[must_use]
    pub fn with_features(mut self, features: Features) -> Self {
        self.features = features;
        self
    }

    /// Overrides how often PreBind polls binding conditions (tests).
    #[must_use]
    pub fn with_poll_interval(mut self, d: Duration) -> Self {
        self.poll_interval = d;
        self
    }

    fn data(state: &CycleState) -> Option<Arc<PodState>> {
        state.read::<CycleData>(STATE_KEY).ok().map(|d| d.0.clone())
    }

    /// Reserve succeeded. The binding cycle, which can wait on the API server for seconds (and
    /// hundreds of pods can be waiting), needs only the chosen node's result, the claims and the
    /// binding progress. What only Filter, Score and PostFilter read is let go here: the allocator
    /// and the DRA snapshot (which pins the cache's in-flight map and allocated state of its
    /// moment, so each waiting pod kept its own copy of them), the short-node veto and the
    /// diagnosis source. Nothing is let go while another holder of the state exists.
    fn shed_filter_state(state: &mut CycleState) {
        state.delete(NODE_VETO_KEY);
        state.delete(DIAGNOSIS_DETAIL_KEY);
        state.delete(DEVICE_CLASS_CAPACITY_KEY);
        let Some(mut data) = Self::data(state) else {
            return;
        };
        state.delete(STATE_KEY);
        if let Some(only) = Arc::get_mut(&mut data) {
            only.allocator = None;
            only.snapshot = Arc::default();
        }
        state.write(STATE_KEY, CycleData(data));
    }

    /// Claims (and the extended-resource plan) of a pod, checked, or the rejection.
    fn prepare(
        &self,
        dra: &DraCache,
        pod: &PodInfo,
        group_try: Option<&Arc<str>>,
    ) -> Result<Option<PodState>, Status> {
        let snapshot = dra.snapshot();
        let p = &*pod.pod;
        let refs = claims::resolve(p).map_err(Status::unresolvable)?;
        let group_claims = self.pod_groups.is_some();
        let group = if refs.is_empty() {
            None
        } else {
            self.pod_group(pod).map_err(Status::unschedulable)?
        };
        let group_try = group_try.filter(|_| group_claims).cloned();
        let existing_ext = dra.extended_resource_claim_for_pod(&pod.uid);
        let ext = extended::plan(p, &snapshot, existing_ext);
        if refs.is_empty() && ext.is_none() {
            return Ok(None);
        }
        let mut pod_claims = Vec::with_capacity(refs.len());
        let mut to_allocate = Vec::new();
        let mut prepared_list = Vec::new();
        let mut has_first_available = false;
        for r in &refs {
            let claim = claims::check(p, r, dra.claim(&pod.namespace, &r.claim_name), group_claims)
                .map_err(|e| Status::unresolvable(e.to_string()))?;
            let consumer = match claims::pod_claim_entry(p, &r.pod_claim_name) {
                Some(entry) => claims::Consumer::for_claim(p, &pod.uid, group.as_deref(), entry)
                    .map_err(Status::unschedulable)?,
                None => claims::Consumer::pod(&pod.name, &pod.uid),
            };
            let key = format!("{}/{}", pod.namespace, r.claim_name);
            let uid = claim.metadata.uid.clone().unwrap_or_default();
            let mut allocated = claims::is_allocated(&claim);
            let reserved_for_pod = claims::is_reserved_for_pod(&claim, p, &pod.uid, group_claims);
            let mut prepared = None;
            let mut available_on = None;
            let mut shared_pending = None;
            // A group claim that another member of this try allocated in Reserve: use that.
            let shareable = match (&group_try, snapshot.pending_allocation(&uid)) {
                (Some(t), Some(pending)) if !allocated && consumer.is_group() => {
                    (pending.share_key.as_deref() == Some(&**t)).then(|| pending.allocation.clone())
                }
                _ => None,
            };
            if let Some(pending) = shareable {
                available_on = pending.node_selector.clone();
                shared_pending = Some(pending);
                allocated = true;
            } else if allocated {
                if !reserved_for_pod && claims::reserved_for_others(&claim, &pod.uid) >= RESERVED_FOR_MAX_SIZE
                {
                    return Err(Status::unresolvable(reason::IN_USE));
                }
                available_on = claim
                    .status
                    .as_ref()
                    .and_then(|s| s.allocation.as_ref())
                    .and_then(|a| a.node_selector.clone());
            } else {
                if snapshot.has_pending_allocation(&uid) {
                    return Err(Status::unresolvable(format!(
                        "resource claim {key} is in the process of being allocated"
                    )));
                }
                let pc = PreparedClaim::new(claim.clone(), &*snapshot, &*self.engine, &self.features)
                    .map_err(|e| Status::unresolvable(fatal_message(&e)))?;
                has_first_available |= pc.requests().iter().any(|r| r.has_subrequests);
                let pc = Arc::new(pc);
                prepared_list.push(pc.clone());
                prepared = Some(pc);
                to_allocate.push(pod_claims.len());
            }
            pod_claims.push(PodClaim {
                containers: claims::containers_referencing(p, &r.pod_claim_name),
                claim,
                key,
                uid,
                available_on,
                allocated,
                reserved_for_pod,
                consumer,
                shared_pending,
                prepared,
            });
        }
        // One claim of the summary's shape and nothing else to allocate: remember short nodes.
        let short = match (&prepared_list[..], &ext) {
            ([only], None) if self.summary && pod_claims.len() == 1 => summary_shape(only)
                .map(|(alt, needed)| (self.short_nodes.table_for(&snapshot, &alt.selection_key), needed)),
            _ => None,
        };
        let allocator = (!to_allocate.is_empty() || ext.is_some()).then(|| {
            Allocator::new(
                snapshot.index().clone(),
                snapshot.state_layers(),
                prepared_list,
                self.features,
            )
        });
        // Room for a bit per node slot when the device summary may decide nodes in Filter.
        let fits = match &allocator {
            Some(a) if self.summary && pod_claims.len() + usize::from(ext.is_some()) == 1 => {
                SummaryFits::with_slots(a.index().node_slot_count())
            }
            _ => SummaryFits::default(),
        };
        Ok(Some(PodState {
            snapshot,
            engine: self.engine.clone(),
            features: self.features,
            short,
            claims: pod_claims,
            to_allocate,
            extended: ext,
            allocator,
            has_first_available,
            footprints: NodeFootprints::default(),
            nodes: RwLock::new(FastHashMap::default()),
            fits,
            failures: Arc::new(FailureLog::default()),
            unavailable: Mutex::new(BTreeSet::new()),
            binding: Mutex::new(BindingProgress::default()),
            group_try,
        }))
    }
}

impl Plugin for DynamicResources {
    fn name(&self) -> &str {
        NAME
    }

    unisched_framework::serves!(
        as_pre_enqueue,
        as_pre_filter,
        as_filter,
        as_post_filter,
        as_pre_score,
        as_score,
        as_reserve,
        as_pre_bind,
        as_assumed_pod,
        as_enqueue_extensions,
    );
}

impl PreEnqueuePlugin for DynamicResources {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        if !claims::has_claims(&pod.pod) {
            return Status::success();
        }
        let Some(dra) = &self.dra else {
            return Status::unresolvable("DRA state is not available to the scheduler");
        };
        let refs = match claims::resolve(&pod.pod) {
            Ok(r) => r,
            Err(e) => return Status::unresolvable(e),
        };
        for r in &refs {
            let claim = dra.claim(&pod.namespace, &r.claim_name);
            if let Err(e) = claims::check(&pod.pod, r, claim, self.pod_groups.is_some()) {
                return Status::unresolvable(e.to_string());
            }
        }
        Status::success()
    }

    /// Nothing while the pod waits for the ResourceClaim controller to create a claim from a
    /// template (the controller reports its own failures on the pod). Under load that wait
    /// outlasts the reporting grace for a good share of the pods, and each report cost the API
    /// server an event and one or more status patches: more writes per pod than upstream, whose
    /// DynamicResources opts out of this case too (KEP-5501). A claim named by
    /// `resourceClaimName` that does not exist is the user's to fix and is reported.
    fn rejection_message(&self, pod: &PodInfo, status: &Status) -> Option<String> {
        let awaits_controller = matches!(
            claims::resolve(&pod.pod),
            Err(claims::Unresolved::NotCreatedYet(_))
        );
        (!awaits_controller).then(|| status.message())
    }
}

impl PreFilterPlugin for DynamicResources {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        let Some(dra) = &self.dra else {
            if claims::has_claims(&pod.pod) {
                return (
                    None,
                    Status::unresolvable("DRA state is not available to the scheduler"),
                );
            }
            return (None, Status::skip());
        };
        let group_try = state.pod_group.as_ref().map(|g| g.try_key.clone());
        let data = match self.prepare(dra, pod, group_try.as_ref()) {
            Ok(Some(d)) => Arc::new(d),
            Ok(None) => return (None, Status::skip()),
            Err(s) => return (None, s),
        };
        state.write(NODE_FOOTPRINTS_KEY, data.footprints.clone());
        state.write(
            DEVICE_CLASS_CAPACITY_KEY,
            ClassCapacitySource::handle(data.clone()),
        );
        state.write(
            DIAGNOSIS_DETAIL_KEY,
            DiagnosisDetail(Arc::new(DetailSource(data.clone()))),
        );
        // A pod-group preemption's dry run took pods out of the cluster: their devices are free
        // (as RemovePod frees a single victim's), so no node is short of devices for sure.
        let removed = state.pod_group.as_ref().and_then(|g| g.removed.clone());
        if let Some((table, needed)) = &data.short
            && removed.is_none()
        {
            state.write(
                NODE_VETO_KEY,
                NodeVetoHandle {
                    plugin: NAME.to_string(),
                    veto: Arc::new(ShortNodeVeto {
                        index: data.snapshot.index().clone(),
                        table: table.clone(),
                        needed: *needed,
                    }),
                },
            );
        }
        state.write(STATE_KEY, CycleData(data.clone()));
        for victim in removed.iter().flat_map(|r| r.iter()) {
            preemption::remove_pod(state, &data, dra, self.features, victim);
        }
        (None, Status::success())
    }

    /// Preemption dry runs: victims' claims release their devices ([`preemption`]).
    fn has_extensions(&self) -> bool {
        true
    }

    fn add_pod(
        &self,
        state: &mut CycleState,
        _pod: &PodInfo,
        pod_to_add: &Arc<PodInfo>,
        _node: &NodeInfo,
    ) -> Status {
        if let Some(data) = Self::data(state) {
            preemption::add_pod(state, &data, self.features, pod_to_add);
        }
        Status::success()
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        _pod: &PodInfo,
        pod_to_remove: &Arc<PodInfo>,
        _node: &NodeInfo,
    ) -> Status {
        if let (Some(data), Some(dra)) = (Self::data(state), &self.dra) {
            preemption::remove_pod(state, &data, dra, self.features, pod_to_remove);
        }
        Status::success()
    }
}

impl FilterPlugin for DynamicResources {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(data) = Self::data(state) else {
            return Status::success();
        };
        let group_dry_run = state.pod_group.as_ref().is_some_and(|g| g.removed.is_some());
        let simulated = match &self.dra {
            Some(dra) if group_dry_run => {
                preemption::group_dry_run_allocator(state, &data, dra, self.features)
            }
            _ => preemption::allocator_override(state),
        };
        let allocator = simulated.as_deref().or(data.allocator.as_ref());
        // A node is recorded once, in the map or in `fits`: an earlier Filter of the same node in
        // this attempt (a preemption dry run, a run with nominated pods) may have recorded it the
        // other way. Mostly nodes were never recorded: a shared read lock answers those (Filter
        // runs on several threads), the write lock is taken only to drop an earlier result.
        let forget_entry = || {
            if data.nodes.read().contains_key(node.name()) {
                data.nodes.write().remove(node.name());
            }
        };
        let forget_bit = || {
            if let Some(slot) = data
                .allocator
                .as_ref()
                .and_then(|a| short_nodes::node_slot(a.index(), node))
            {
                data.fits.remove(slot);
            }
        };
        match self.filter_node(&data, allocator, pod, node) {
            Ok(Some(result)) => {
                forget_bit();
                data.nodes
                    .write()
                    .insert(node.name().to_string(), Arc::new(result));
                Status::success()
            }
            Ok(None) => {
                forget_entry();
                Status::success()
            }
            Err((status, failure)) => {
                forget_entry();
                forget_bit();
                data.footprints.remove(node.name());
                if let Some(f) = failure {
                    data.failures.record(node.name(), f);
                }
                status
            }
        }
    }
}

impl PostFilterPlugin for DynamicResources {
    fn post_filter(
        &self,
        _fwk: &dyn FrameworkHandle,
        state: &mut CycleState,
        pod: &PodInfo,
        _statuses: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        // Nothing done: Unschedulable without a reason, so the message stays upstream's.
        let nothing = || Status::new(Code::Unschedulable, Vec::<String>::new());
        let Some(data) = Self::data(state) else {
            return (None, nothing());
        };
        let Some(api) = &self.api else {
            return (None, nothing());
        };
        let candidates: Vec<usize> = data.unavailable.lock().iter().copied().collect();
        for i in candidates {
            let c = &data.claims[i];
            let others = claims::reserved_for_others(&c.claim, &pod.uid);
            if others > 0 {
                continue;
            }
            match prebind::deallocate(api.as_ref(), self.dra.as_deref(), c.namespace(), c.name(), &c.uid) {
                Ok(()) => return (None, Status::unschedulable(reason::DEALLOCATED)),
                Err(e) => return (None, Status::error(format!("deallocating claim {}: {e}", c.key))),
            }
        }
        if let Some(plan) = &data.extended
            && let Some(stale) = &plan.existing
        {
            let ns = stale.metadata.namespace.as_deref().unwrap_or_default();
            let name = stale.metadata.name.as_deref().unwrap_or_default();
            let uid = stale.metadata.uid.as_deref().unwrap_or_default();
            return match prebind::delete_claim(api.as_ref(), self.dra.as_deref(), ns, name, uid) {
                Ok(()) => (None, Status::unschedulable(reason::DELETED)),
                Err(e) => (None, Status::error(format!("deleting claim {ns}/{name}: {e}"))),
            };
        }
        (None, nothing())
    }
}

impl PreScorePlugin for DynamicResources {
    fn pre_score(&self, state: &mut CycleState, _pod: &PodInfo, _nodes: &[Arc<NodeInfo>]) -> Status {
        match Self::data(state) {
            Some(d) if d.has_first_available => Status::success(),
            _ => Status::skip(),
        }
    }
}

impl ScorePlugin for DynamicResources {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(Self::data(state)
            .and_then(|d| d.nodes.read().get(node.name()).map(|r| r.score))
            .unwrap_or(0))
    }

    fn has_normalize(&self) -> bool {
        true
    }

    fn normalize_score(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [NodeScore<'_>]) -> Status {
        crate::default_normalize_score(unisched_framework::MAX_NODE_SCORE, false, scores);
        Status::success()
    }
}

impl ReservePlugin for DynamicResources {
    fn reserve(&self, state: &mut CycleState, _pod: &PodInfo, node: &str) -> Status {
        let Some(data) = Self::data(state) else {
            return Status::success();
        };
        data.retain_only(node);
        let Some(dra) = &self.dra else {
            return Status::success();
        };
        let shares = data.claims.iter().any(|c| c.shared_pending.is_some());
        if data.to_allocate.is_empty() && data.extended.is_none() && !shares {
            return Status::success();
        }
        let snapshot = state.snapshot();
        let result = match data.node_result(node, || snapshot.get(node).and_then(|n| n.node().cloned())) {
            Ok(r) => r,
            Err(e) => return Status::error(e),
        };
        let Some(result) = result else {
            if data.to_allocate.is_empty() {
                // Extended resources served by device plugins on this node.
                return Status::success();
            }
            return Status::error("claim allocation not found for node");
        };
        if result.allocations.len() != data.to_allocate.len() {
            return Status::error(format!(
                "internal error, have {} allocations for {} claims",
                result.allocations.len(),
                data.to_allocate.len()
            ));
        }
        let mut progress = data.binding.lock();
        for c in data.claims.iter().filter(|c| c.shared_pending.is_some()) {
            let shared = data
                .group_try
                .as_deref()
                .and_then(|t| dra.share_in_flight(&c.uid, t));
            if shared.is_none() {
                return Status::error(format!(
                    "claim {}: the allocation made for its PodGroup is no longer in flight",
                    c.key
                ));
            }
            progress.in_flight.push(c.uid.clone());
        }
        for (k, &i) in data.to_allocate.iter().enumerate() {
            let c = &data.claims[i];
            let share_key = data.group_try.clone().filter(|_| c.consumer.is_group());
            dra.reserve_in_flight_shareable(&c.uid, result.allocations[k].clone(), share_key);
            progress.in_flight.push(c.uid.clone());
        }
        if let (Some(plan), Some((_, a))) = (&data.extended, &result.extended) {
            dra.reserve_in_flight(&plan.placeholder_uid, a.clone());
            progress.in_flight.push(plan.placeholder_uid.clone());
        }
        drop(progress);
        drop(data);
        // A pod-group preemption's dry run reserves only to take it back, and then asks Filter
        // again, victim by victim, whether the member still fits: its allocator must stay.
        let dry_run = state.pod_group.as_ref().is_some_and(|g| g.removed.is_some());
        if !dry_run {
            Self::shed_filter_state(state);
        }
        Status::success()
    }

    fn unreserve(&self, state: &mut CycleState, pod: &PodInfo, _node: &str) {
        let Some(data) = Self::data(state) else {
            return;
        };
        let progress = std::mem::take(&mut *data.binding.lock());
        if let Some(dra) = &self.dra {
            for uid in &progress.in_flight {
                dra.release_in_flight(uid);
            }
        }
        prebind::undo(self.api.as_deref(), self.dra.as_deref(), pod, progress);
    }
}

impl unisched_framework::AssumedPodPlugin for DynamicResources {
    fn prepare_assumed_pod(&self, state: &CycleState, pod: &mut Pod, node: &str) -> bool {
        let Some(data) = Self::data(state) else {
            return false;
        };
        let Some(result) = data.nodes.read().get(node).cloned() else {
            return false;
        };
        if result.statuses.is_empty() {
            return false;
        }
        pod.status
            .get_or_insert_with(Default::default)
            .node_allocatable_resource_claim_statuses = Some(result.statuses.clone());
        true
    }
}

impl PreBindPlugin for DynamicResources {
    fn pre_bind_pre_flight(&self, state: &CycleState, _pod: &PodInfo, _node: &str) -> Status {
        match Self::data(state) {
            Some(_) => Status::success(),
            None => Status::skip(),
        }
    }

    fn pre_bind(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        let Some(data) = Self::data(state) else {
            return Status::success();
        };
        let (Some(api), Some(dra)) = (&self.api, &self.dra) else {
            return Status::error("DynamicResources has no API writer");
        };
        prebind::pre_bind(self, api.as_ref(), dra, &data, pod, node)
    }

    fn pre_bind_async(&self, state: &CycleState, _pod: &PodInfo, node: &str) -> Option<StatusFuture> {
        let data = Self::data(state)?;
        let later = self.api.as_ref()?.later()?;
        let dra = self.dra.clone()?;
        prebind::pre_bind_later(self, later, dra, data, node)
    }
}

impl EnqueueExtensions for DynamicResources {
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        hints::events(self.dra.clone())
    }
}

/// Lets NodeResourcesFit ask the DRA state which class serves an extended resource.
impl crate::ExtendedResourceResolver for DraCache {
    fn device_class_for(&self, resource: &str) -> Option<String> {
        self.class_for_extended_resource(resource)
    }
}
