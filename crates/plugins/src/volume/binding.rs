//! VolumeBinding: places pods whose PersistentVolumeClaims are bound, or can be bound on the node,
//! and binds them (upstream `volumebinding`).
//!
//! * **PreFilter** sorts the pod's claims into bound ones (the PV controller completed the binding;
//!   their PV's node affinity must admit the node), unbound ones of a `WaitForFirstConsumer` class
//!   (decided per node) and the rest: claims of an `Immediate` class, of no class or of a class
//!   that does not exist, and claims that name their volume before the controller has bound them.
//!   The PV controller binds those on its own schedule, and the pod cannot be placed before that
//!   (`pod has unbound immediate PersistentVolumeClaims`). A missing claim is
//!   unresolvable with the API server's NotFound text. No claims: Skip, so other pods pay nothing.
//!   The candidate PVs of each class are collected here once, smallest first, and bound PVs with
//!   hostname affinity narrow the nodes worth filtering (as upstream's `GetEligibleNodes`).
//! * **Filter** per node: bound PVs' node affinity; for each delayed claim the PV pre-bound to it,
//!   else the smallest `Available` PV that fits (class, access modes, volume mode, attributes
//!   class, selector, capacity, node affinity; each PV used once per pod; [`super::matching`]),
//!   else dynamic provisioning when the class has a real provisioner whose
//!   `allowedTopologies` admit the node and, for a CSI driver that publishes storage capacity,
//!   room on the node ([`super::capacity`]). The decision is recorded for Reserve.
//! * **Score** (`StorageCapacityScoring`): how full the storage the pod's volumes come from would
//!   be on the node, through the `shape` of the args ([`super::capacity`]).
//! * **Reserve** assumes the decision in the [`VolumeCache`] (the PV's `claimRef`, the claim's
//!   `selected-node` annotation), so the next pod already sees the PV as taken; **Unreserve**
//!   restores the API versions.
//! * **PreBind** writes the decision ([`VolumeApi`] merge patches) and waits, up to
//!   `bindTimeoutSeconds`, until the watch shows the PV controller has bound every claim
//!   (`volumeName` and the bind-completed annotation). It fails at once when a claim, or a volume
//!   Reserve chose, is deleted, when the volume goes to another claim or loses the `claimRef`
//!   PreBind gave it, and when the provisioner gives up on a claim (it drops the selected-node
//!   annotation PreBind set).
//!
//! Not implemented: in-tree volume migration.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
    time::Duration,
};

use k8s_openapi::api::{
    core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod},
    storage::v1::{CSIStorageCapacity, StorageClass},
};
use parking_lot::{Mutex, RwLock};
use serde_json::json;
use unisched_cache::VolumeCache;
use unisched_framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, CycleState, EnqueueExtensions, EventObject,
    EventResource, EventSide, FilterPlugin, NodeInfo, Plugin, PodInfo, PreBindPlugin, PreFilterPlugin,
    PreFilterResult, PreScorePlugin, QueueingHint, QueueingHintError, ReservePlugin, ScorePlugin, Status,
};

use super::binding_args::VolumeBindingArgs;
use super::matching::{DelayedClaim, matching_volume, pv_capacity};
use super::{
    VolumeApi,
    capacity::{self, CapacityScorer, CapacityVerdict, ClassUsage},
    claim_class, claim_fully_bound, claim_volume_name, pod_namespace, pv_node_affinity_matches,
    resolve_claims,
};
use crate::label_selector::NO_LABELS;

/// The plugin name.
pub const NAME: &str = "VolumeBinding";

/// Filter: a bound PV's node affinity excludes the node.
pub const ERR_REASON_NODE_CONFLICT: &str = "node(s) didn't match PersistentVolume's node affinity";
/// Filter: no PV to bind and no way to provision one on the node.
pub const ERR_REASON_BIND_CONFLICT: &str = "node(s) didn't find available persistent volumes to bind";
/// Filter: a claim is bound to a PV that does not exist.
pub const ERR_REASON_PV_NOT_EXIST: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
/// PreFilter: an Immediate claim is not bound yet.
pub const ERR_REASON_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";

/// The annotation telling the external provisioner where to create the volume.
pub const ANNOTATION_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The provisioner of classes whose volumes are all created by hand (local volumes).
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
const ANNOTATION_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
const STATE_KEY: &str = "PreFilterVolumeBinding";
pub(super) const WAIT_FOR_FIRST_CONSUMER: &str = "WaitForFirstConsumer";

/// Why the volume binding PreBind waits for can no longer complete as Reserve decided it.
#[derive(Debug, thiserror::Error)]
enum BindingLostError {
    /// One of the pod's claims is gone.
    #[error("persistentvolumeclaim {0:?} was deleted")]
    ClaimDeleted(String),
    /// A volume Reserve chose is gone.
    #[error("persistentvolume {0:?} was deleted")]
    VolumeDeleted(String),
    /// A volume Reserve chose was bound to a claim of someone else.
    #[error("persistentvolume {volume:?} was bound to another claim {claim:?}")]
    VolumeTaken {
        /// The volume.
        volume: String,
        /// The claim that took it.
        claim: String,
    },
    /// A volume Reserve chose lost the `claimRef` PreBind gave it (the PV controller unbinds a
    /// volume it cannot bind). Upstream's wording.
    #[error("ClaimRef got reset for pv {0:?}")]
    ClaimRefReset(String),
    /// The provisioner gave up on a claim: it removed (or changed) the selected-node annotation,
    /// which is how it asks for the pod to be scheduled again. Upstream's wording.
    #[error("provisioning failed for PVC {0:?}")]
    ProvisioningFailed(String),
}

/// What PreBind's wait has seen of its own writes. Until the watch shows a write, the API version
/// may simply predate it; only a write seen and then undone means the binding was lost.
#[derive(Debug, Default)]
struct Observed {
    /// Claims being provisioned seen with the selected-node annotation PreBind set.
    selected: BTreeSet<String>,
    /// Volumes seen with the `claimRef` (with a UID) PreBind set.
    claimed: BTreeSet<String>,
}

/// A claim Filter decided to provision on a node.
#[derive(Debug)]
struct Provision {
    /// Index into `delayed`.
    claim: usize,
    /// The capacity object that has room for it, when its driver publishes capacity.
    capacity: Option<Arc<CSIStorageCapacity>>,
}

/// What Filter decided for one node.
#[derive(Debug, Default)]
struct NodeDecision {
    /// (index into `delayed`, PV to bind).
    bindings: Vec<(usize, Arc<PersistentVolume>)>,
    /// Claims to provision.
    provisions: Vec<Provision>,
}

/// What Reserve assumed, for PreBind and Unreserve.
#[derive(Debug, Default)]
struct Reserved {
    pvs: Vec<String>,
    pvcs: Vec<(String, String)>,
}

#[derive(Debug)]
struct PodVolumes {
    namespace: String,
    /// (claim name, its PV; None when the PV does not exist).
    bound: Vec<(String, Option<Arc<PersistentVolume>>)>,
    delayed: Vec<DelayedClaim>,
    decisions: RwLock<HashMap<String, Arc<NodeDecision>>>,
    reserved: Mutex<Option<Reserved>>,
}

#[derive(Clone, Debug)]
struct CycleData(Arc<PodVolumes>);

/// The plugin. See the module documentation.
pub struct VolumeBinding {
    volumes: Option<Arc<VolumeCache>>,
    api: Option<Arc<dyn VolumeApi>>,
    bind_timeout: Duration,
    /// Present when `StorageCapacityScoring` is on (and the args have a shape).
    scorer: Option<CapacityScorer>,
}

impl std::fmt::Debug for VolumeBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VolumeBinding")
            .field("volumes", &self.volumes.is_some())
            .field("api", &self.api.is_some())
            .field("bind_timeout", &self.bind_timeout)
            .field("scorer", &self.scorer)
            .finish()
    }
}

/// Whether the class' `allowedTopologies` admit the node (none: every node).
fn topology_allows(class: &StorageClass, node: &Node) -> bool {
    let Some(terms) = class.allowed_topologies.as_ref().filter(|t| !t.is_empty()) else {
        return true;
    };
    let labels = node.metadata.labels.as_ref().unwrap_or(&NO_LABELS);
    terms.iter().any(|t| {
        t.match_label_expressions
            .iter()
            .flatten()
            .all(|r| labels.get(&r.key).is_some_and(|v| r.values.contains(v)))
    })
}

fn selected_node(pvc: &PersistentVolumeClaim) -> Option<&str> {
    pvc.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_SELECTED_NODE))
        .map(String::as_str)
}

impl VolumeBinding {
    /// A plugin over the volume state and API writer. Without a volume cache, pods with claims are
    /// unresolvable; without an API, PreBind fails for pods that need a binding. It scores nodes
    /// by storage capacity when the args have a `shape` (which they have exactly when
    /// `StorageCapacityScoring` is on: see [`VolumeBindingArgs::from_value_with`]).
    pub fn new(
        args: &VolumeBindingArgs,
        volumes: Option<Arc<VolumeCache>>,
        api: Option<Arc<dyn VolumeApi>>,
    ) -> Self {
        VolumeBinding {
            volumes,
            api,
            bind_timeout: Duration::from_secs(u64::try_from(args.bind_timeout_seconds).unwrap_or(0)),
            scorer: args
                .shape
                .as_deref()
                .filter(|s| !s.is_empty())
                .map(CapacityScorer::new),
        }
    }

    fn data(state: &CycleState) -> Option<Arc<PodVolumes>> {
        state.read::<CycleData>(STATE_KEY).ok().map(|d| d.0.clone())
    }

    fn prepare(&self, volumes: &VolumeCache, pod: &Pod) -> Result<PodVolumes, Status> {
        let claims = resolve_claims(volumes, pod).map_err(|e| Status::unresolvable(e.to_string()))?;
        let mut bound = Vec::new();
        let mut delayed = Vec::new();
        let mut immediate = false;
        for (name, pvc) in claims {
            if pvc.metadata.deletion_timestamp.is_some() {
                return Err(Status::unresolvable(format!(
                    "persistentvolumeclaim {name:?} is being deleted"
                )));
            }
            if let Some(pv_name) = claim_fully_bound(&pvc) {
                bound.push((name, volumes.pv(pv_name)));
                continue;
            }
            // A claim that names its volume but whose binding the PV controller has not
            // completed waits for the controller, as an Immediate one does.
            if claim_volume_name(&pvc).is_some() {
                immediate = true;
                continue;
            }
            let class_name = claim_class(&pvc);
            // No class, or a class that does not exist (yet): the claim is not the scheduler's
            // to bind, so it is Immediate too.
            let class = if class_name.is_empty() {
                None
            } else {
                volumes.class(class_name)
            };
            let Some(class) = class else {
                immediate = true;
                continue;
            };
            match class.volume_binding_mode.as_deref() {
                Some(WAIT_FOR_FIRST_CONSUMER) => {}
                Some(_) => {
                    immediate = true;
                    continue;
                }
                None => {
                    return Err(Status::error(format!(
                        "VolumeBindingMode not set for StorageClass {class_name:?}"
                    )));
                }
            }
            let pvs = volumes.pvs_of_class(class_name);
            let claim = DelayedClaim::new(name, pvc, class, pvs);
            delayed.push(claim);
        }
        // Smallest requests first, so each claim gets the smallest PV left that fits (as upstream;
        // equal requests keep the pod's order).
        delayed.sort_by_key(|c| c.request);
        if immediate {
            return Err(Status::unresolvable(ERR_REASON_UNBOUND_IMMEDIATE));
        }
        Ok(PodVolumes {
            namespace: pod_namespace(pod).to_string(),
            bound,
            delayed,
            decisions: RwLock::new(HashMap::new()),
            reserved: Mutex::new(None),
        })
    }

    /// Upstream's `FindPodVolumes` on one node. Bound claims: the first whose PV is missing or
    /// whose node affinity rules the node out decides. Delayed claims: one already handed to the
    /// provisioner for another node rules the node out at once; the others are matched to PVs
    /// (smallest claims first, PreFilter sorted them), except those handed to the provisioner for
    /// this node, which stay with it; the claims left must all be provisionable here, the first
    /// that is not deciding the reason. The reasons come in upstream's order.
    fn filter_node(
        volumes: Option<&VolumeCache>,
        data: &PodVolumes,
        node: &Node,
    ) -> Result<NodeDecision, Vec<&'static str>> {
        let mut node_conflict = false;
        let mut pv_missing = false;
        for (_, pv) in &data.bound {
            match pv {
                None => {
                    pv_missing = true;
                    break;
                }
                Some(pv) if !pv_node_affinity_matches(pv, node) => {
                    node_conflict = true;
                    break;
                }
                Some(_) => {}
            }
        }
        let node_name = node.metadata.name.as_deref().unwrap_or_default();
        let mut decision = NodeDecision::default();
        let mut bind_conflict = data
            .delayed
            .iter()
            .any(|c| selected_node(&c.pvc).is_some_and(|selected| selected != node_name));
        let mut not_enough_space = false;
        if !bind_conflict {
            let mut taken: BTreeSet<&str> = BTreeSet::new();
            let (mut to_provision, to_match): (Vec<usize>, Vec<usize>) =
                (0..data.delayed.len()).partition(|&i| selected_node(&data.delayed[i].pvc).is_some());
            for i in to_match {
                match matching_volume(&data.delayed[i], node, &taken) {
                    Some(pv) => {
                        taken.insert(pv.metadata.name.as_deref().unwrap_or_default());
                        decision.bindings.push((i, pv.clone()));
                    }
                    None => to_provision.push(i),
                }
            }
            for i in to_provision {
                match provision_verdict(volumes, &data.delayed[i], node) {
                    Some(CapacityVerdict::NotTracked) => decision.provisions.push(Provision {
                        claim: i,
                        capacity: None,
                    }),
                    Some(CapacityVerdict::Enough(capacity)) => decision.provisions.push(Provision {
                        claim: i,
                        capacity: Some(capacity),
                    }),
                    Some(CapacityVerdict::NotEnough) => {
                        not_enough_space = true;
                        break;
                    }
                    None => {
                        bind_conflict = true;
                        break;
                    }
                }
            }
        }
        let reasons: Vec<&'static str> = [
            (bind_conflict, ERR_REASON_BIND_CONFLICT),
            (node_conflict, ERR_REASON_NODE_CONFLICT),
            (not_enough_space, capacity::ERR_REASON_NOT_ENOUGH_SPACE),
            (pv_missing, ERR_REASON_PV_NOT_EXIST),
        ]
        .into_iter()
        .filter_map(|(failed, reason)| failed.then_some(reason))
        .collect();
        if reasons.is_empty() {
            Ok(decision)
        } else {
            Err(reasons)
        }
    }

    /// What the pod's volumes would use on a node with this decision, per storage class: the PVs
    /// picked for static bindings when there are any, else the capacity found for the claims to
    /// provision (upstream scores one or the other, never both).
    fn class_usage(data: &PodVolumes, decision: &NodeDecision) -> BTreeMap<String, ClassUsage> {
        let mut classes: BTreeMap<String, ClassUsage> = BTreeMap::new();
        if !decision.bindings.is_empty() {
            for (i, pv) in &decision.bindings {
                let class = pv
                    .spec
                    .as_ref()
                    .and_then(|s| s.storage_class_name.clone())
                    .unwrap_or_default();
                let usage = classes.entry(class).or_default();
                usage.requested += capacity::whole_bytes(data.delayed[*i].request);
                usage.capacity += capacity::whole_bytes(pv_capacity(pv));
            }
            return classes;
        }
        for p in &decision.provisions {
            let Some(found) = &p.capacity else {
                continue;
            };
            let claim = &data.delayed[p.claim];
            let usage = classes.entry(claim_class(&claim.pvc).to_string()).or_default();
            // The same pool serves every claim of the class: its capacity is counted once.
            usage.capacity = capacity::reported_capacity(found);
            usage.requested += capacity::whole_bytes(claim.request);
        }
        classes
    }

    /// Where the claims stand in the API: Ok(true) all bound, Ok(false) still waiting, Err when the
    /// binding can no longer complete as decided.
    ///
    /// A claim counts as bound once the PV controller has completed the binding (as upstream:
    /// `volumeName` and the bind-completed annotation). A claim being provisioned that was seen
    /// with the selected-node annotation for `node` and then not is a provisioning failure; a
    /// volume seen with its `claimRef` and then without one (or without its UID) was unbound.
    fn binding_progress(
        volumes: &VolumeCache,
        data: &PodVolumes,
        reserved: &Reserved,
        node: &str,
        seen: &mut Observed,
    ) -> Result<bool, BindingLostError> {
        let mut all = true;
        for name in data
            .bound
            .iter()
            .map(|(n, _)| n)
            .chain(data.delayed.iter().map(|c| &c.name))
        {
            let Some(pvc) = volumes.api_pvc(&data.namespace, name) else {
                return Err(BindingLostError::ClaimDeleted(name.clone()));
            };
            if claim_fully_bound(&pvc).is_none() {
                all = false;
            }
        }
        for (_, name) in &reserved.pvcs {
            let Some(pvc) = volumes.api_pvc(&data.namespace, name) else {
                return Err(BindingLostError::ClaimDeleted(name.clone()));
            };
            if selected_node(&pvc) == Some(node) {
                seen.selected.insert(name.clone());
            } else if seen.selected.contains(name) {
                return Err(BindingLostError::ProvisioningFailed(name.clone()));
            }
        }
        for pv_name in &reserved.pvs {
            let Some(pv) = volumes.api_pv(pv_name) else {
                return Err(BindingLostError::VolumeDeleted(pv_name.clone()));
            };
            let claimed_by = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
            match claimed_by {
                Some(r)
                    if !(r.namespace.as_deref().unwrap_or("default") == data.namespace
                        && data
                            .delayed
                            .iter()
                            .any(|c| r.name.as_deref() == Some(c.name.as_str()))) =>
                {
                    return Err(BindingLostError::VolumeTaken {
                        volume: pv_name.clone(),
                        claim: r.name.clone().unwrap_or_default(),
                    });
                }
                Some(r) if r.uid.as_deref().is_some_and(|u| !u.is_empty()) => {
                    seen.claimed.insert(pv_name.clone());
                }
                _ if seen.claimed.contains(pv_name) => {
                    return Err(BindingLostError::ClaimRefReset(pv_name.clone()));
                }
                _ => {}
            }
        }
        Ok(all)
    }
}

impl Plugin for VolumeBinding {
    fn name(&self) -> &str {
        NAME
    }
    unisched_framework::serves!(
        as_pre_filter,
        as_filter,
        as_pre_score,
        as_score,
        as_reserve,
        as_pre_bind,
        as_enqueue_extensions
    );
}

impl PreFilterPlugin for VolumeBinding {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        if !super::pod_has_claims(&pod.pod) {
            return (None, Status::skip());
        }
        let Some(volumes) = &self.volumes else {
            return (
                None,
                Status::unresolvable("volume state is not available to the scheduler"),
            );
        };
        match self.prepare(volumes, &pod.pod) {
            Ok(data) => {
                let eligible = eligible_nodes(&data);
                state.write(STATE_KEY, CycleData(Arc::new(data)));
                (
                    eligible.map(|names| PreFilterResult {
                        node_names: Some(names),
                    }),
                    Status::success(),
                )
            }
            Err(s) => (None, s),
        }
    }
}

impl FilterPlugin for VolumeBinding {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(data) = Self::data(state) else {
            return Status::success();
        };
        let Some(n) = node.node() else {
            return Status::error("node not found");
        };
        match Self::filter_node(self.volumes.as_deref(), &data, n) {
            Ok(decision) => {
                data.decisions
                    .write()
                    .insert(node.name().to_string(), Arc::new(decision));
                Status::success()
            }
            Err(reasons) => {
                data.decisions.write().remove(node.name());
                Status::new(unisched_framework::Code::UnschedulableAndUnresolvable, reasons)
            }
        }
    }
}

impl ReservePlugin for VolumeBinding {
    fn reserve(&self, state: &mut CycleState, _pod: &PodInfo, node: &str) -> Status {
        let Some(data) = Self::data(state) else {
            return Status::success();
        };
        let Some(volumes) = &self.volumes else {
            return Status::success();
        };
        let Some(decision) = data.decisions.read().get(node).cloned() else {
            if data.delayed.is_empty() {
                return Status::success();
            }
            return Status::error(format!("no volume binding decision for node {node:?}"));
        };
        let mut reserved = Reserved::default();
        let mut failure = None;
        for (i, pv) in &decision.bindings {
            let claim = &data.delayed[*i];
            let mut assumed = (**pv).clone();
            assumed
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(ANNOTATION_BOUND_BY_CONTROLLER.into(), "yes".into());
            assumed.spec.get_or_insert_with(Default::default).claim_ref = Some(claim_ref(&claim.pvc));
            let name = pv.metadata.name.clone().unwrap_or_default();
            match volumes.assume_pv(assumed) {
                Ok(()) => reserved.pvs.push(name),
                Err(e) => {
                    failure = Some(e.to_string());
                    break;
                }
            }
        }
        if failure.is_none() {
            for p in &decision.provisions {
                let claim = &data.delayed[p.claim];
                let mut assumed = (*claim.pvc).clone();
                assumed
                    .metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(ANNOTATION_SELECTED_NODE.into(), node.into());
                match volumes.assume_pvc(assumed) {
                    Ok(()) => reserved.pvcs.push((data.namespace.clone(), claim.name.clone())),
                    Err(e) => {
                        failure = Some(e.to_string());
                        break;
                    }
                }
            }
        }
        let mut slot = data.reserved.lock();
        if let Some(e) = failure {
            restore(volumes, &reserved);
            *slot = None;
            return Status::error(format!("assuming volumes: {e}"));
        }
        *slot = Some(reserved);
        Status::success()
    }

    fn unreserve(&self, state: &mut CycleState, _pod: &PodInfo, _node: &str) {
        let Some(data) = Self::data(state) else {
            return;
        };
        let Some(volumes) = &self.volumes else {
            return;
        };
        if let Some(reserved) = data.reserved.lock().take() {
            restore(volumes, &reserved);
        }
    }
}

fn restore(volumes: &VolumeCache, reserved: &Reserved) {
    for pv in &reserved.pvs {
        volumes.restore_pv(pv);
    }
    for (ns, name) in &reserved.pvcs {
        volumes.restore_pvc(ns, name);
    }
}

/// The reference a PV's `spec.claimRef` holds for a claim.
fn claim_ref(pvc: &PersistentVolumeClaim) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolumeClaim".into()),
        namespace: pvc.metadata.namespace.clone(),
        name: pvc.metadata.name.clone(),
        uid: pvc.metadata.uid.clone(),
        resource_version: pvc.metadata.resource_version.clone(),
        ..Default::default()
    }
}

impl PreBindPlugin for VolumeBinding {
    fn pre_bind_pre_flight(&self, state: &CycleState, _pod: &PodInfo, _node: &str) -> Status {
        match Self::data(state) {
            Some(d) if !d.delayed.is_empty() => Status::success(),
            _ => Status::skip(),
        }
    }

    fn pre_bind(&self, state: &mut CycleState, _pod: &PodInfo, node: &str) -> Status {
        let Some(data) = Self::data(state) else {
            return Status::success();
        };
        if data.delayed.is_empty() {
            return Status::success();
        }
        let (Some(volumes), Some(api)) = (&self.volumes, &self.api) else {
            return Status::error("VolumeBinding has no API writer");
        };
        let Some(decision) = data.decisions.read().get(node).cloned() else {
            return Status::error(format!("no volume binding decision for node {node:?}"));
        };
        for (i, pv) in &decision.bindings {
            let claim = &data.delayed[*i];
            let pv_name = pv.metadata.name.as_deref().unwrap_or_default();
            let patch = json!({
                "metadata": {"annotations": {ANNOTATION_BOUND_BY_CONTROLLER: "yes"}},
                "spec": {"claimRef": claim_ref(&claim.pvc)},
            });
            if let Err(e) = api.patch_pv(pv_name, patch) {
                return Status::error(format!("binding volumes: persistentvolume {pv_name:?}: {e}"));
            }
        }
        for p in &decision.provisions {
            let claim = &data.delayed[p.claim];
            let patch = json!({"metadata": {"annotations": {ANNOTATION_SELECTED_NODE: node}}});
            if let Err(e) = api.patch_pvc(&data.namespace, &claim.name, patch) {
                return Status::error(format!(
                    "binding volumes: persistentvolumeclaim {:?}: {e}",
                    claim.name
                ));
            }
        }
        let reserved = data.reserved.lock().take().unwrap_or_default();
        let seen = std::cell::RefCell::new(Observed::default());
        let progress_now =
            |v: &VolumeCache| Self::binding_progress(v, &data, &reserved, node, &mut seen.borrow_mut());
        let finished = volumes.wait_until(self.bind_timeout, |v| !matches!(progress_now(v), Ok(false)));
        let progress = progress_now(volumes);
        // Put it back so Unreserve can restore the assumed objects if binding fails.
        *data.reserved.lock() = Some(reserved);
        match progress {
            Ok(true) => Status::success(),
            Ok(false) if !finished => Status::error("binding volumes: context deadline exceeded"),
            Ok(false) => Status::error("binding volumes: claims not bound"),
            Err(e) => Status::error(format!("binding volumes: {e}")),
        }
    }
}

impl EnqueueExtensions for VolumeBinding {
    /// The events are upstream 1.37.2's, with its hints: any PV change, a new StorageClass or one
    /// whose allowed topologies changed, a CSINode whose migrated plugins changed, a new node or
    /// changed node labels (not taints: a taint does not change which volumes fit a node).
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        let add_update = ActionType::ADD.or(ActionType::UPDATE);
        vec![
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::PersistentVolumeClaim,
                    add_update,
                    "PersistentVolumeClaimAdd|Update",
                ),
                |pod, old, new| super::claim_event_hint(super::ClaimVolumes::All, pod, old, new),
            ),
            // Any PV event queues, as upstream: a PV's class, claimRef, phase or node affinity
            // can each change which claim it serves.
            ClusterEventWithHint::new(ClusterEvent::new(
                EventResource::PersistentVolume,
                add_update,
                "PersistentVolumeAdd|Update",
            )),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::StorageClass, add_update, "StorageClassAdd|Update"),
                |_pod, old, new| class_hint(old, new),
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::CsiNode, add_update, "CSINodeAdd|Update"),
                |_pod, old, new| csi_node_hint(old, new),
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::CsiDriver, ActionType::UPDATE, "CSIDriverUpdate"),
                capacity::driver_hint,
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::CsiStorageCapacity,
                    add_update,
                    "CSIStorageCapacityAdd|Update",
                ),
                |_pod, old, new| capacity::capacity_hint(old, new),
            ),
            ClusterEventWithHint::new(ClusterEvent::new(
                EventResource::Node,
                ActionType::ADD.or(ActionType::UPDATE_NODE_LABEL),
                "NodeAdd|UpdateNodeLabel",
            )),
        ]
    }
}

/// Whether a claim without a fitting PV can be provisioned on the node: `None` when the class has
/// no real provisioner or its topology excludes the node, else what the capacity check says.
fn provision_verdict(
    volumes: Option<&VolumeCache>,
    claim: &DelayedClaim,
    node: &Node,
) -> Option<CapacityVerdict> {
    let class =
        Some(&*claim.class).filter(|c| c.provisioner != NO_PROVISIONER && topology_allows(c, node))?;
    let request = claim.has_request.then(|| capacity::whole_bytes(claim.request));
    Some(match volumes {
        Some(v) => capacity::check(v, class, request, node),
        None => CapacityVerdict::NotTracked,
    })
}

impl PreScorePlugin for VolumeBinding {
    fn pre_score(&self, state: &mut CycleState, _pod: &PodInfo, _nodes: &[Arc<NodeInfo>]) -> Status {
        if self.scorer.is_none() || Self::data(state).is_none() {
            return Status::skip();
        }
        Status::success()
    }
}

impl ScorePlugin for VolumeBinding {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let (Some(scorer), Some(data)) = (&self.scorer, Self::data(state)) else {
            return Ok(0);
        };
        let Some(decision) = data.decisions.read().get(node.name()).cloned() else {
            return Ok(0);
        };
        Ok(scorer.score(&Self::class_usage(&data, &decision)))
    }
}

/// The nodes the bound PVs' hostname affinity names (upstream `GetEligibleNodes`): `None` when some
/// bound PV can be used on nodes it does not name by hostname. Like upstream, a hostname label is
/// taken to be the node name; Filter still checks the full affinity.
fn eligible_nodes(data: &PodVolumes) -> Option<BTreeSet<String>> {
    let mut eligible: Option<BTreeSet<String>> = None;
    for (_, pv) in &data.bound {
        let Some(terms) = pv
            .as_ref()
            .and_then(|pv| pv.spec.as_ref())
            .and_then(|s| s.node_affinity.as_ref())
            .and_then(|a| a.required.as_ref())
            .map(|r| &r.node_selector_terms)
        else {
            continue;
        };
        let mut names = BTreeSet::new();
        let mut restricted = !terms.is_empty();
        for term in terms {
            let mut term_names: Option<BTreeSet<String>> = None;
            for r in term.match_expressions.iter().flatten() {
                if r.key == HOSTNAME_LABEL && r.operator == "In" {
                    let values: BTreeSet<String> = r.values.iter().flatten().cloned().collect();
                    term_names = Some(match term_names {
                        None => values,
                        Some(prev) => prev.intersection(&values).cloned().collect(),
                    });
                }
            }
            match term_names {
                Some(t) => names.extend(t),
                // A term without a hostname requirement admits nodes by other labels.
                None => restricted = false,
            }
        }
        if restricted {
            eligible = Some(match eligible {
                None => names,
                Some(prev) => prev.intersection(&names).cloned().collect(),
            });
        }
    }
    eligible
}

/// The CSINode annotation that lists the in-tree plugins migrated to CSI on the node.
const MIGRATED_PLUGINS_ANNOTATION: &str = "storage.alpha.kubernetes.io/migrated-plugins";

/// A StorageClass event helps when the class is new (nothing more can be told of a creation), or
/// when its allowed topologies changed; its provisioner and binding mode are immutable.
fn class_hint(
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, QueueingHintError> {
    let Some(EventObject::StorageClass(class)) = new else {
        return Err(QueueingHintError::NotObject {
            expected: "StorageClass",
            side: EventSide::New,
        });
    };
    match old {
        None => Ok(QueueingHint::Queue),
        Some(EventObject::StorageClass(o)) if o.allowed_topologies != class.allowed_topologies => {
            Ok(QueueingHint::Queue)
        }
        Some(EventObject::StorageClass(_)) => Ok(QueueingHint::Skip),
        Some(_) => Err(QueueingHintError::NotObject {
            expected: "StorageClass",
            side: EventSide::Old,
        }),
    }
}

/// A CSINode event helps when the node is new, or when the in-tree plugins migrated to CSI on it
/// changed (that decides how an in-tree PV is translated).
fn csi_node_hint(
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, QueueingHintError> {
    let Some(EventObject::CsiNode(node)) = new else {
        return Err(QueueingHintError::NotObject {
            expected: "CSINode",
            side: EventSide::New,
        });
    };
    let migrated = |n: &k8s_openapi::api::storage::v1::CSINode| {
        n.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(MIGRATED_PLUGINS_ANNOTATION))
            .cloned()
    };
    match old {
        None => Ok(QueueingHint::Queue),
        Some(EventObject::CsiNode(o)) if migrated(o) != migrated(node) => Ok(QueueingHint::Queue),
        Some(EventObject::CsiNode(_)) => Ok(QueueingHint::Skip),
        Some(_) => Err(QueueingHintError::NotObject {
            expected: "CSINode",
            side: EventSide::Old,
        }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "binding_tests.rs"]
mod tests;
