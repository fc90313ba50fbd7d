//! Preemption dry runs: devices freed by evicted pods (upstream's DRA PreFilter extensions, §5.10
//! of the reference).
//!
//! DefaultPreemption removes victims from a copy of a node and re-runs Filter. For DRA, evicting a
//! pod frees the devices of every allocated claim that nobody else uses: the claim controller will
//! drop the pod from `reservedFor` and deallocate. So `RemovePod` records the victim against each of
//! its allocated claims; a claim whose every pod consumer has been removed (or that has no
//! consumer at all) is *released*, and Filter then allocates for the preemptor against the
//! allocated-device state without those claims. `AddPod` (a reprieved victim) undoes it.
//!
//! The record lives in the cycle state under its own key as a small `Clone` value, so each
//! candidate node's deep-copied state has its own; the pod's main DRA state is shared and never
//! changed. A claim reserved by anything other than pods (a pod group) is never released by
//! removing single pods. Node-allocatable (KEP-5517) amounts need nothing here: they are part of
//! the victim's requests and leave the node copy with it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::resource::v1::ResourceClaim;
use unisched_cache::DraCache;
use unisched_dra::{AllocatedState, Allocator, Features, StateLayers};
use unisched_framework::{CycleState, PodInfo};

use super::claims;
use super::state::PodState;

/// Cycle-state key of the [`Simulation`].
pub(crate) const SIM_KEY: &str = "DynamicResources/preemption";

/// Victims removed in this dry run and the claims that released.
#[derive(Clone, Debug, Default)]
pub(crate) struct Simulation {
    /// Claim UID → UIDs of removed pods that consumed it.
    removed: BTreeMap<String, BTreeSet<String>>,
    /// Released claims by UID.
    released: BTreeMap<String, Arc<ResourceClaim>>,
    /// The allocated state without the released claims (`None`: nothing released).
    allocated: Option<Arc<AllocatedState>>,
    /// An allocator over it and the in-flight state of the pod's PreFilter (`None`: nothing
    /// released).
    pub allocator: Option<Arc<Allocator>>,
}

/// The pod-consumer UIDs of a claim; `None` when something other than a pod reserved it.
fn pod_consumers(claim: &ResourceClaim) -> Option<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    for r in claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_ref())
        .into_iter()
        .flatten()
    {
        if r.resource != "pods" || r.api_group.as_deref().is_some_and(|g| !g.is_empty()) {
            return None;
        }
        out.insert(r.uid.clone());
    }
    Some(out)
}

/// The victim's allocated claims, each once.
fn allocated_claims(dra: &DraCache, victim: &PodInfo) -> Vec<Arc<ResourceClaim>> {
    let Ok(refs) = claims::resolve(&victim.pod) else {
        return Vec::new();
    };
    let names: BTreeSet<String> = refs.into_iter().map(|r| r.claim_name).collect();
    names
        .iter()
        .filter_map(|n| dra.claim(&victim.namespace, n))
        .filter(|c| claims::is_allocated(c))
        .collect()
}

fn uid_of(c: &ResourceClaim) -> String {
    c.metadata.uid.clone().unwrap_or_default()
}

fn released(claim: &ResourceClaim, removed: &BTreeSet<String>) -> bool {
    pod_consumers(claim).is_some_and(|consumers| consumers.is_subset(removed))
}

impl Simulation {
    fn rebuild(&mut self, data: &PodState, features: Features) {
        if self.released.is_empty() {
            self.allocated = None;
            self.allocator = None;
            return;
        }
        let mut allocated = (**data.snapshot.allocated()).clone();
        for c in self.released.values() {
            allocated.remove_claim(c);
        }
        let allocated = Arc::new(allocated);
        self.allocator = Some(Arc::new(allocator_over(
            data,
            allocated.clone(),
            data.snapshot.in_flight().clone(),
            features,
        )));
        self.allocated = Some(allocated);
    }
}

/// An allocator for the pod's claims over `allocated` and `in_flight`.
fn allocator_over(
    data: &PodState,
    allocated: Arc<AllocatedState>,
    in_flight: Arc<AllocatedState>,
    features: Features,
) -> Allocator {
    let prepared = data
        .to_allocate
        .iter()
        .filter_map(|&i| data.claims.get(i).and_then(|c| c.prepared.clone()))
        .collect();
    Allocator::new(
        data.snapshot.index().clone(),
        StateLayers::new(vec![allocated, in_flight]),
        prepared,
        features,
    )
}

impl Simulation {}

/// RemovePod: `victim` leaves the node in the dry run.
pub(crate) fn remove_pod(
    state: &mut CycleState,
    data: &PodState,
    dra: &DraCache,
    features: Features,
    victim: &PodInfo,
) {
    // Nothing to allocate: freed devices cannot help this pod.
    if data.allocator.is_none() {
        return;
    }
    let claims = allocated_claims(dra, victim);
    if claims.is_empty() {
        return;
    }
    let mut sim = state.read::<Simulation>(SIM_KEY).cloned().unwrap_or_default();
    let mut changed = false;
    for c in claims {
        let uid = uid_of(&c);
        let removed = sim.removed.entry(uid.clone()).or_default();
        removed.insert(victim.uid.clone());
        if !sim.released.contains_key(&uid) && released(&c, removed) {
            sim.released.insert(uid, c);
            changed = true;
        }
    }
    if changed {
        sim.rebuild(data, features);
    }
    state.write(SIM_KEY, sim);
}

/// AddPod: a pod (a reprieved victim, or a nominated pod) is on the node again.
pub(crate) fn add_pod(state: &mut CycleState, data: &PodState, features: Features, pod: &PodInfo) {
    let Ok(current) = state.read::<Simulation>(SIM_KEY) else {
        return;
    };
    if !current.removed.values().any(|s| s.contains(&pod.uid)) {
        return;
    }
    let mut sim = current.clone();
    let mut changed = false;
    for (uid, removed) in &mut sim.removed {
        if removed.remove(&pod.uid) && sim.released.remove(uid).is_some() {
            changed = true;
        }
    }
    sim.removed.retain(|_, s| !s.is_empty());
    if changed {
        sim.rebuild(data, features);
    }
    state.write(SIM_KEY, sim);
}

/// The allocator Filter should use in a dry run, when victims released devices.
pub(crate) fn allocator_override(state: &CycleState) -> Option<Arc<Allocator>> {
    state
        .read::<Simulation>(SIM_KEY)
        .ok()
        .and_then(|s| s.allocator.clone())
}

/// The allocator Filter uses in a pod-group preemption's dry run: the allocated devices without
/// the released claims, and the devices held in flight *now*. A member's PreFilter saw the
/// members placed before it in the simulated placement; the reprieve that follows takes those
/// back and places the members again one by one, reserving each member's devices before it
/// checks the next, so only the current in-flight state tells a member what its predecessors
/// hold. `None` when the pod has nothing to allocate.
pub(crate) fn group_dry_run_allocator(
    state: &CycleState,
    data: &PodState,
    dra: &DraCache,
    features: Features,
) -> Option<Arc<Allocator>> {
    data.allocator.as_ref()?;
    let allocated = state
        .read::<Simulation>(SIM_KEY)
        .ok()
        .and_then(|s| s.allocated.clone())
        .unwrap_or_else(|| data.snapshot.allocated().clone());
    let in_flight = dra.snapshot().in_flight().clone();
    Some(Arc::new(allocator_over(data, allocated, in_flight, features)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use k8s_openapi::api::core::v1::{
        PodResourceClaim, ResourceClaim as ContainerClaim, ResourceRequirements,
    };
    use k8s_openapi::api::resource::v1::{
        AllocationResult, DeviceAllocationResult, DeviceRequestAllocationResult,
        ResourceClaimConsumerReference,
    };
    use unisched_dra::testing::{claim, class, dev, req, slice};
    use unisched_framework::{FilterPlugin, NodeInfo, PreFilterPlugin};

    use super::super::testing::FakeDraApi;
    use super::super::{DraApi, DynamicResources, DynamicResourcesArgs};
    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder};

    const GPU: &str = "gpu.example.com";

    fn pod_with_claim(name: &str, claim_name: &str, prio: i32) -> Arc<PodInfo> {
        let mut p = PodBuilder::new(name).priority(prio).build();
        let spec = p.spec.as_mut().unwrap();
        spec.resource_claims = Some(vec![PodResourceClaim {
            name: "gpu".into(),
            resource_claim_name: Some(claim_name.into()),
            resource_claim_template_name: None,
        }]);
        spec.containers[0]
            .resources
            .get_or_insert_with(ResourceRequirements::default)
            .claims = Some(vec![ContainerClaim {
            name: "gpu".into(),
            request: None,
        }]);
        Arc::new(PodInfo::new(p))
    }

    fn held_claim(name: &str, consumers: &[(&str, &str)]) -> ResourceClaim {
        let mut c = claim("default", name).request(req("gpu", GPU)).build();
        let st = c.status.get_or_insert_with(Default::default);
        st.allocation = Some(AllocationResult {
            devices: Some(DeviceAllocationResult {
                results: Some(vec![DeviceRequestAllocationResult {
                    request: "gpu".into(),
                    driver: GPU.into(),
                    pool: "n1".into(),
                    device: "gpu-0".into(),
                    ..Default::default()
                }]),
                config: None,
            }),
            ..Default::default()
        });
        st.reserved_for = Some(
            consumers
                .iter()
                .map(|(resource, uid)| ResourceClaimConsumerReference {
                    api_group: None,
                    name: uid.to_string(),
                    resource: resource.to_string(),
                    uid: uid.to_string(),
                })
                .collect(),
        );
        c
    }

    #[test]
    fn removed_victims_release_their_devices() {
        struct Case {
            name: &'static str,
            consumers: Vec<(&'static str, &'static str)>,
            removed: Vec<&'static str>,
            fits: bool,
        }
        let cases = vec![
            Case {
                name: "only consumer removed",
                consumers: vec![("pods", "victim")],
                removed: vec!["victim"],
                fits: true,
            },
            Case {
                name: "shared with a pod that stays",
                consumers: vec![("pods", "victim"), ("pods", "other")],
                removed: vec!["victim"],
                fits: false,
            },
            Case {
                name: "shared, both consumers removed",
                consumers: vec![("pods", "victim"), ("pods", "other")],
                removed: vec!["victim", "other"],
                fits: true,
            },
            Case {
                name: "allocated but unreserved",
                consumers: vec![],
                removed: vec!["victim"],
                fits: true,
            },
            Case {
                name: "reserved by a pod group",
                consumers: vec![("podgroups", "group")],
                removed: vec!["victim"],
                fits: false,
            },
            Case {
                name: "unrelated pod removed",
                consumers: vec![("pods", "victim")],
                removed: vec!["stranger"],
                fits: false,
            },
        ];
        for c in cases {
            let dra = Arc::new(DraCache::new());
            let api = FakeDraApi::new();
            api.echo_to(dra.clone());
            let plugin = DynamicResources::new(
                &DynamicResourcesArgs::default(),
                Some(dra.clone()),
                Some(api.clone() as Arc<dyn DraApi>),
            );
            dra.apply_class(Arc::new(class(GPU, GPU))).unwrap();
            dra.apply_slice(Arc::new(
                slice("n1-gpu", GPU, "n1", "n1").device(dev("gpu-0")).build(),
            ))
            .unwrap();
            api.seed_claim(held_claim("held", &c.consumers));
            api.seed_claim(claim("default", "want").request(req("gpu", GPU)).build());
            let node = NodeBuilder::new("n1")
                .alloc("cpu", "8")
                .alloc("pods", "110")
                .info();
            let high = pod_with_claim("high", "want", 100);
            let mut st = CycleState::new();
            let (_, s) = plugin.pre_filter(&mut st, &high, &[]);
            assert!(s.is_success(), "{}: {s:?}", c.name);
            assert!(!plugin.filter(&st, &high, &node).is_success(), "{}", c.name);

            let mut dry = st.deep_clone();
            let pods: Vec<Arc<PodInfo>> = c
                .removed
                .iter()
                .map(|n| pod_with_claim(n, if *n == "stranger" { "none" } else { "held" }, 1))
                .collect();
            let mut node_copy: NodeInfo = node.clone();
            for p in &pods {
                node_copy.remove_pod(&p.uid);
                assert!(plugin.remove_pod(&mut dry, &high, p, &node_copy).is_success());
            }
            assert_eq!(
                plugin.filter(&dry, &high, &node_copy).is_success(),
                c.fits,
                "{}",
                c.name
            );
            assert!(
                !plugin.filter(&st, &high, &node).is_success(),
                "{}: the original state is untouched",
                c.name
            );
            // Reprieving the victims takes their devices back.
            for p in &pods {
                assert!(plugin.add_pod(&mut dry, &high, p, &node_copy).is_success());
            }
            assert!(!plugin.filter(&dry, &high, &node_copy).is_success(), "{}", c.name);
        }
    }

    #[test]
    fn pods_without_allocation_needs_are_left_alone() {
        // The preemptor's claim is already allocated: nothing to simulate.
        let dra = Arc::new(DraCache::new());
        let api = FakeDraApi::new();
        api.echo_to(dra.clone());
        let plugin = DynamicResources::new(
            &DynamicResourcesArgs::default(),
            Some(dra.clone()),
            Some(api.clone() as Arc<dyn DraApi>),
        );
        dra.apply_class(Arc::new(class(GPU, GPU))).unwrap();
        api.seed_claim(held_claim("held", &[("pods", "victim")]));
        api.seed_claim(held_claim("mine", &[]));
        let high = pod_with_claim("high", "mine", 100);
        let mut st = CycleState::new();
        let (_, s) = plugin.pre_filter(&mut st, &high, &[]);
        assert!(s.is_success());
        let node = NodeBuilder::new("n1").info();
        let victim = pod_with_claim("victim", "held", 1);
        assert!(plugin.remove_pod(&mut st, &high, &victim, &node).is_success());
        assert!(st.read::<Simulation>(SIM_KEY).is_err());
    }
}
