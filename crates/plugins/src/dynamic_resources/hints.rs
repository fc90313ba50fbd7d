//! Which cluster events can make a pod that DynamicResources rejected schedulable.
//!
//! A pod waiting for a GPU should not be retried for every claim, slice or node change in the
//! cluster. The hints follow upstream where it has them and add the obvious ones where it has none:
//!
//! * **ResourceClaim add/update/delete** — a deleted claim helps only if it was still allocated;
//!   while some of the pod's claims are missing, being deleted or not its own nothing helps;
//!   otherwise a deallocated claim frees devices for everybody (Queue), and else only the pod's own
//!   claims matter (by name, or its extended-resource claim): a new claim or a changed status
//!   helps, a metadata-only change (a driver adding a finalizer) does not.
//! * **ResourceSlice add/update** — new devices may help; an update that leaves the spec unchanged
//!   does not.
//! * **DeviceClass add/update** — only a class the pod's requests (or extended resources) name.
//! * **Node add / label / allocatable / taint changes** — always (node selection of slices, device
//!   plugins vs DRA for extended resources, KEP-5517 allocatable).
//! * **Pod generated-claim update** of the pod itself — when all its claims now resolve, exist and
//!   are usable.
//! * **Assigned pod delete** — frees node allocatable a KEP-5517 footprint may need.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use unisched_cache::{DraCache, IMPLICIT_EXTENDED_RESOURCE_PREFIX};
use unisched_framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, EventObject, EventResource, EventSide, QueueingHint,
    QueueingHintError,
};

use super::claims;
use crate::helper::unexpected_object;

fn claim_of(o: Option<&EventObject>) -> Option<&Arc<ResourceClaim>> {
    match o {
        Some(EventObject::ResourceClaim(c)) => Some(c),
        _ => None,
    }
}

fn same_namespace(pod: &Pod, claim: &ResourceClaim) -> bool {
    pod.metadata.namespace.as_deref().unwrap_or("default")
        == claim.metadata.namespace.as_deref().unwrap_or("default")
}

/// The claim hint (see the module documentation).
pub(crate) fn claim_hint(
    dra: Option<&DraCache>,
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    claim_hint_with(dra, pod, old, new, true)
}

/// [`claim_hint`]; `skip_unrelated: false` turns off the shortcut for claims the pod neither owns
/// nor names (the tests check that both give the same answer).
///
/// The order is upstream's: a deletion is judged on the claim's last state alone; otherwise, while
/// some claim of the pod is missing, being deleted or not the pod's own, nothing helps (not even a
/// deallocation: the pod's own claim events or its generated-claim update will wake it); then a
/// deallocation helps everybody; then only the pod's claims matter, created or with a new status.
fn claim_hint_with(
    dra: Option<&DraCache>,
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    skip_unrelated: bool,
) -> QueueingHint {
    let (old, new) = (claim_of(old), claim_of(new));
    let Some(claim) = new else {
        // Deleted. The event carries the cache's last state of the claim (never an unknown final
        // state), so only a claim that still held devices frees any.
        return if old.is_some_and(|c| claims::is_allocated(c)) {
            QueueingHint::Queue
        } else {
            QueueingHint::Skip
        };
    };
    let deallocated = old.is_some_and(|c| claims::is_allocated(c)) && !claims::is_allocated(claim);
    let same_ns = same_namespace(pod, claim);
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    // The pool is offered every claim event, and almost every claim is someone else's: answer
    // those without resolving the pod's claims (which allocates). A claim the pod does not own and
    // names nowhere (neither in spec nor in its generated-claim statuses) cannot be among the
    // resolved references, and without ownership it is not its extended-resource claim either, so
    // unless it was deallocated the answer below is Skip.
    let for_pod = same_ns && claims::is_for_pod(pod, claim, true);
    let related = for_pod || (same_ns && claims::names_claim(pod, name));
    if skip_unrelated && !deallocated && !related {
        return QueueingHint::Skip;
    }
    if !claims_ready(dra, pod, Some(claim)) {
        return QueueingHint::Skip;
    }
    if deallocated {
        return QueueingHint::Queue;
    }
    if !same_ns {
        return QueueingHint::Skip;
    }
    let own_extended = for_pod
        && claim
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(unisched_cache::EXTENDED_RESOURCE_CLAIM_ANNOTATION))
            .is_some_and(|v| v == "true");
    let used =
        own_extended || claims::resolve(pod).is_ok_and(|refs| refs.iter().any(|r| r.claim_name == name));
    if !used {
        return QueueingHint::Skip;
    }
    match old {
        None => QueueingHint::Queue,
        Some(o) if o.status == claim.status => QueueingHint::Skip,
        Some(_) => QueueingHint::Queue,
    }
}

/// Whether every claim the pod's `spec.resourceClaims` refer to can be used: each resolves to a
/// name (a template's claim is generated), exists, is not being deleted, and a generated one is
/// the pod's own. `current` is the event's claim, which stands in for the cached one of its name;
/// without a DRA cache the other claims are taken to exist.
pub(crate) fn claims_ready(dra: Option<&DraCache>, pod: &Pod, current: Option<&Arc<ResourceClaim>>) -> bool {
    let Ok(refs) = claims::resolve(pod) else {
        return false;
    };
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    refs.iter().all(|r| {
        let current = current
            .filter(|c| same_namespace(pod, c) && c.metadata.name.as_deref() == Some(r.claim_name.as_str()));
        let claim = match (current, dra) {
            (Some(c), _) => Some(c.clone()),
            (None, None) => return true,
            (None, Some(d)) => d.claim(ns, &r.claim_name),
        };
        // The same checks PreFilter makes (exists, not being deleted, the pod's or its group's).
        claims::check(pod, r, claim, true).is_ok()
    })
}

/// [`EventNarrowing`](unisched_framework::EventNarrowing) keys of a claim event: the claim's
/// namespaced name and the uid of its controller. `None` (any pod) for a deallocation, which frees
/// devices for everybody. The claim hint can only answer Queue for a pod in the claim's namespace
/// that owns it ([`claims::is_for_pod`]) or names it ([`claims::names_claim`]), which is what the
/// keys express (see [`claim_pod_keys`]).
pub(crate) fn claim_event_keys(old: Option<&EventObject>, new: Option<&EventObject>) -> Option<Vec<String>> {
    let (old, new) = (claim_of(old), claim_of(new));
    if old.is_some_and(|c| claims::is_allocated(c)) && !new.is_some_and(|c| claims::is_allocated(c)) {
        return None;
    }
    let Some(claim) = new.or(old) else {
        return Some(Vec::new());
    };
    let ns = claim.metadata.namespace.as_deref().unwrap_or("default");
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    let owners = claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|o| o.controller == Some(true))
        .map(|o| owner_key(ns, &o.uid));
    Some(std::iter::once(claim_name_key(ns, name)).chain(owners).collect())
}

/// A pod's keys for [`claim_event_keys`]: its uid as a claim owner, and every claim name it refers
/// to (spec `resourceClaimName`s and generated claims in its status).
pub(crate) fn claim_pod_keys(pod: &Pod) -> Vec<String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let names = claims::claim_names(pod).map(|n| claim_name_key(ns, n));
    pod.metadata
        .uid
        .as_deref()
        .map(|uid| owner_key(ns, uid))
        .into_iter()
        .chain(names)
        .collect()
}

fn claim_name_key(ns: &str, name: &str) -> String {
    format!("ResourceClaim:{ns}/{name}")
}

fn owner_key(ns: &str, uid: &str) -> String {
    format!("ResourceClaim owner:{ns}/{uid}")
}

/// The class hint: does the pod (its claims' requests, or its extended resources) name the class?
pub(crate) fn class_hint(dra: Option<&DraCache>, pod: &Pod, new: Option<&EventObject>) -> QueueingHint {
    let Some(EventObject::DeviceClass(class)) = new else {
        return QueueingHint::Queue;
    };
    let name = class.metadata.name.as_deref().unwrap_or_default();
    let explicit = class
        .spec
        .as_ref()
        .and_then(|s| s.extended_resource_name.as_deref());
    let implicit = format!("{IMPLICIT_EXTENDED_RESOURCE_PREFIX}{name}");
    if let Some(spec) = pod.spec.as_ref() {
        for c in spec
            .init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter())
        {
            let res = c.resources.as_ref();
            let names = res
                .and_then(|r| r.requests.as_ref())
                .into_iter()
                .flatten()
                .chain(res.and_then(|r| r.limits.as_ref()).into_iter().flatten())
                .map(|(k, _)| k.as_str());
            for n in names {
                if n == implicit || Some(n) == explicit {
                    return QueueingHint::Queue;
                }
            }
        }
    }
    let Some(dra) = dra else {
        return QueueingHint::Queue;
    };
    let Ok(refs) = claims::resolve(pod) else {
        return QueueingHint::Skip;
    };
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    for r in refs {
        let Some(claim) = dra.claim(ns, &r.claim_name) else {
            continue;
        };
        let requests = claim
            .spec
            .as_ref()
            .and_then(|s| s.devices.as_ref())
            .and_then(|d| d.requests.as_ref());
        for req in requests.into_iter().flatten() {
            let uses = req.exactly.as_ref().is_some_and(|e| e.device_class_name == name)
                || req
                    .first_available
                    .iter()
                    .flatten()
                    .any(|s| s.device_class_name == name);
            if uses {
                return QueueingHint::Queue;
            }
        }
    }
    QueueingHint::Skip
}

/// The events DynamicResources registers.
/// A claim event must carry claims, at least one: anything else is an error (the queue then
/// retries the pod), as upstream's hint fails on an object of another kind.
fn check_claim_objects(
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<(), QueueingHintError> {
    for (o, side) in [(old, EventSide::Old), (new, EventSide::New)] {
        if let Some(other) = o.filter(|o| !matches!(o, EventObject::ResourceClaim(_))) {
            return Err(unexpected_object("ResourceClaim", side, other));
        }
    }
    if old.is_none() && new.is_none() {
        return Err(QueueingHintError::EmptyEvent { kind: "claim" });
    }
    Ok(())
}

/// The pod itself got its generated claims recorded: it may go on once every claim it refers to
/// is there and usable ([`claims_ready`]).
fn target_pod_update_hint(
    dra: Option<&DraCache>,
    pod: &Pod,
    new: Option<&EventObject>,
) -> Result<QueueingHint, QueueingHintError> {
    let updated = match new {
        Some(EventObject::Pod(p)) => &*p.pod,
        Some(other) => return Err(unexpected_object("Pod", EventSide::New, other)),
        None => {
            return Err(QueueingHintError::MissingObject {
                expected: "Pod",
                side: EventSide::New,
            });
        }
    };
    if updated.metadata.uid != pod.metadata.uid {
        return Ok(QueueingHint::Skip);
    }
    Ok(if claims_ready(dra, updated, None) {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    })
}

pub(crate) fn events(dra: Option<Arc<DraCache>>) -> Vec<ClusterEventWithHint> {
    let d1 = dra.clone();
    let d2 = dra.clone();
    let d3 = dra;
    vec![
        ClusterEventWithHint::new(ClusterEvent::new(
            EventResource::Node,
            ActionType::ADD
                .or(ActionType::UPDATE_NODE_LABEL)
                .or(ActionType::UPDATE_NODE_ALLOCATABLE),
            "NodeAdd|UpdateNodeLabel|UpdateNodeAllocatable",
        )),
        ClusterEventWithHint::with_hint(
            ClusterEvent::new(
                EventResource::ResourceClaim,
                ActionType::ADD.or(ActionType::UPDATE).or(ActionType::DELETE),
                "resource.k8s.io/ResourceClaim",
            ),
            move |pod, old, new| {
                check_claim_objects(old, new)?;
                Ok(claim_hint(d1.as_deref(), pod, old, new))
            },
        )
        .narrowed_by(claim_event_keys, claim_pod_keys),
        ClusterEventWithHint::with_hint(
            ClusterEvent::new(
                EventResource::ResourceSlice,
                ActionType::ADD.or(ActionType::UPDATE),
                "resource.k8s.io/ResourceSlice",
            ),
            |_pod, old, new| {
                Ok(match (old, new) {
                    (Some(EventObject::ResourceSlice(o)), Some(EventObject::ResourceSlice(n)))
                        if o.spec == n.spec =>
                    {
                        QueueingHint::Skip
                    }
                    _ => QueueingHint::Queue,
                })
            },
        ),
        ClusterEventWithHint::with_hint(
            ClusterEvent::new(
                EventResource::DeviceClass,
                ActionType::ADD.or(ActionType::UPDATE),
                "resource.k8s.io/DeviceClass",
            ),
            move |pod, _old, new| Ok(class_hint(d2.as_deref(), pod, new)),
        ),
        ClusterEventWithHint::with_hint(
            ClusterEvent::new(
                EventResource::UnscheduledPod,
                ActionType::UPDATE_POD_GENERATED_RESOURCE_CLAIM,
                "UnscheduledPodUpdate",
            ),
            move |pod, _old, new| target_pod_update_hint(d3.as_deref(), pod, new),
        ),
        ClusterEventWithHint::with_hint(
            ClusterEvent::new(
                EventResource::AssignedPod,
                ActionType::DELETE,
                "AssignedPodDelete",
            ),
            |_pod, old, _new| {
                let Some(EventObject::Pod(deleted)) = old else {
                    return Ok(QueueingHint::Queue);
                };
                // The derived requests: a bound pod's PodInfo has no containers to add up.
                let freed = !deleted.requests().is_zero()
                    || deleted
                        .pod
                        .status
                        .as_ref()
                        .and_then(|s| s.node_allocatable_resource_claim_statuses.as_ref())
                        .is_some_and(|s| !s.is_empty());
                Ok(if freed {
                    QueueingHint::Queue
                } else {
                    QueueingHint::Skip
                })
            },
        ),
    ]
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{PodResourceClaim, PodResourceClaimStatus, PodSpec, PodStatus};
    use k8s_openapi::api::resource::v1::{AllocationResult, ResourceClaimStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    use super::*;

    fn pod(shape: usize) -> Pod {
        let direct = |name: &str| PodResourceClaim {
            name: "direct".into(),
            resource_claim_name: Some(name.into()),
            ..Default::default()
        };
        let template = PodResourceClaim {
            name: "gpu".into(),
            resource_claim_template_name: Some("tmpl".into()),
            ..Default::default()
        };
        let generated = |name: &str| PodResourceClaimStatus {
            name: "gpu".into(),
            resource_claim_name: Some(name.into()),
        };
        // 0: no claims; 1: a named claim; 2: a template not generated yet; 3: a generated claim;
        // 4: both; 5: a status entry without a matching spec entry.
        let (claims, statuses) = match shape {
            0 => (vec![], vec![]),
            1 => (vec![direct("a")], vec![]),
            2 => (vec![template.clone()], vec![]),
            3 => (vec![template.clone()], vec![generated("b")]),
            4 => (vec![direct("a"), template.clone()], vec![generated("b")]),
            _ => (vec![direct("a")], vec![generated("b")]),
        };
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                uid: Some("pod-uid".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                resource_claims: Some(claims),
                ..Default::default()
            }),
            status: Some(PodStatus {
                resource_claim_statuses: Some(statuses),
                ..Default::default()
            }),
        }
    }

    fn claim(
        name: &str,
        ns: &str,
        owner: Option<&str>,
        extended: bool,
        allocated: bool,
        rv: &str,
    ) -> ResourceClaim {
        ResourceClaim {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                resource_version: Some(rv.into()),
                owner_references: owner.map(|uid| {
                    vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Pod".into(),
                        name: "owner".into(),
                        uid: uid.into(),
                        controller: Some(true),
                        ..Default::default()
                    }]
                }),
                annotations: extended.then(|| {
                    BTreeMap::from([(
                        unisched_cache::EXTENDED_RESOURCE_CLAIM_ANNOTATION.to_string(),
                        "true".to_string(),
                    )])
                }),
                ..Default::default()
            },
            status: allocated.then(|| ResourceClaimStatus {
                allocation: Some(AllocationResult::default()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Every combination of pod shape, claim (name, namespace, owner, annotation) and event (add,
    /// delete, allocation, deallocation, metadata-only update): the shortcut for unrelated claims
    /// gives the answer the full evaluation gives, and it does answer most of them; where the
    /// event's narrowing keys miss the pod's, the hint says Skip (the narrowing contract).
    #[test]
    fn skipping_unrelated_claims_early_gives_the_same_hints() {
        let mut shortcut_taken = 0;
        let mut narrowed_away = 0;
        let mut cases = 0;
        for shape in 0..6 {
            let pod = pod(shape);
            for name in ["a", "b", "c"] {
                for ns in ["ns", "other"] {
                    for owner in [None, Some("pod-uid"), Some("someone-else")] {
                        for extended in [false, true] {
                            let obj = |allocated: bool, rv: &str| {
                                EventObject::ResourceClaim(Arc::new(claim(
                                    name, ns, owner, extended, allocated, rv,
                                )))
                            };
                            let events: [(Option<EventObject>, Option<EventObject>); 5] = [
                                (None, Some(obj(false, "1"))),
                                (Some(obj(false, "1")), None),
                                (Some(obj(false, "1")), Some(obj(true, "2"))),
                                (Some(obj(true, "1")), Some(obj(false, "2"))),
                                (Some(obj(false, "1")), Some(obj(false, "2"))),
                            ];
                            for (old, new) in &events {
                                cases += 1;
                                let fast = claim_hint_with(None, &pod, old.as_ref(), new.as_ref(), true);
                                let full = claim_hint_with(None, &pod, old.as_ref(), new.as_ref(), false);
                                assert_eq!(
                                    fast, full,
                                    "pod shape {shape}, claim {ns}/{name} owner {owner:?} extended {extended}, event {old:?} -> {new:?}"
                                );
                                let event_keys = claim_event_keys(old.as_ref(), new.as_ref());
                                let pod_keys = claim_pod_keys(&pod);
                                if event_keys
                                    .as_ref()
                                    .is_some_and(|k| !k.iter().any(|k| pod_keys.contains(k)))
                                {
                                    narrowed_away += 1;
                                    assert_eq!(
                                        full,
                                        QueueingHint::Skip,
                                        "narrowing keys {event_keys:?} / {pod_keys:?} leave out a pod the hint queues: \
                                         pod shape {shape}, claim {ns}/{name} owner {owner:?} extended {extended}, event {old:?} -> {new:?}"
                                    );
                                }
                                let related = owner == Some("pod-uid") || claims::names_claim(&pod, name);
                                if ns == "ns" && !related {
                                    shortcut_taken += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(cases, 6 * 3 * 2 * 3 * 2 * 5);
        // Unrelated same-namespace claims: 240 of the 1,080 cases exercise the shortcut.
        assert_eq!(shortcut_taken, 240, "cases where the shortcut answers");
        // The queue's narrowing leaves out every claim of the other namespace (432) and the
        // unrelated ones of the pod's (192 = 240 less their deallocations, which concern everybody).
        assert_eq!(narrowed_away, 432 + 192, "cases the queue's narrowing leaves out");
    }

    /// A deleted bound pod frees something for a DRA pod when it held resources, whether they
    /// came from its containers or from node-allocatable claim statuses. The bound pod arrives
    /// lean, as the watch handler keeps it: the answer must come from the derived requests.
    #[test]
    fn assigned_pod_delete_hint_reads_the_derived_requests() {
        let deleted = |requests: serde_json::Value, statuses: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "d", "namespace": "ns", "uid": "d"},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": requests}}]},
                "status": {"nodeAllocatableResourceClaimStatuses": statuses}
            }))
            .expect("a valid pod")
        };
        let cases = [
            (
                "cpu from a container",
                deleted(serde_json::json!({"cpu": "1"}), serde_json::json!([])),
                QueueingHint::Queue,
            ),
            (
                "an extended resource from a container",
                deleted(serde_json::json!({"example.com/gpu": "1"}), serde_json::json!([])),
                QueueingHint::Queue,
            ),
            (
                "node-allocatable claim statuses only",
                deleted(
                    serde_json::json!({}),
                    serde_json::json!([{"resourceClaimName": "c", "resources": {"cpu": "2"}}]),
                ),
                QueueingHint::Queue,
            ),
            (
                "nothing held",
                deleted(serde_json::json!({}), serde_json::json!([])),
                QueueingHint::Skip,
            ),
        ];
        let registered = events(None);
        let hint = registered
            .iter()
            .find(|e| e.event.label == "AssignedPodDelete")
            .and_then(|e| e.hint.clone())
            .expect("DynamicResources registers AssignedPodDelete with a hint");
        let waiting = pod(1);
        for (name, deleted, want) in cases {
            let old = EventObject::pod(deleted);
            let EventObject::Pod(info) = &old else {
                unreachable!()
            };
            assert!(info.lean, "{name}: a bound pod's event object is lean");
            assert_eq!(hint(&waiting, Some(&old), None).unwrap(), want, "{name}");
        }
    }
}
