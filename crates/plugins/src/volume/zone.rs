//! VolumeZone: a pod must run in the zone (and region) of the PVs it uses (upstream
//! `volumezone`).
//!
//! PreFilter collects, from each bound PV, the topology it is confined to: its
//! `topology.kubernetes.io/{zone,region}` labels (and the deprecated `failure-domain.beta…` ones),
//! a value `a__b` meaning "a or b"; and, beyond upstream, the zone/region requirements of a PV whose
//! required node affinity is a single term (several terms are ORed and VolumeBinding checks them in
//! full). Unbound `WaitForFirstConsumer` claims are skipped: VolumeBinding picks their PV per node.
//! So are generic ephemeral volumes, as upstream: their claims and PVs are VolumeBinding's to check.
//! Filter rejects a node whose label for such a key is missing or not allowed, unless the node has
//! no topology labels at all (upstream: then nothing can be said).

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use k8s_openapi::api::core::v1::PersistentVolume;
use unisched_cache::{
    LABEL_FAILURE_DOMAIN_BETA_REGION, LABEL_FAILURE_DOMAIN_BETA_ZONE, LABEL_TOPOLOGY_REGION,
    LABEL_TOPOLOGY_ZONE, VolumeCache,
};
use unisched_framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, CycleState, EnqueueExtensions, EventObject,
    EventResource, EventSide, FilterPlugin, NodeInfo, Plugin, PodInfo, PreFilterPlugin, PreFilterResult,
    QueueingHint, QueueingHintError, Status,
};

use super::binding::WAIT_FOR_FIRST_CONSUMER;
use super::{claim_class, claim_volume_name, resolve_persistent_claims};

/// The plugin name.
pub const NAME: &str = "VolumeZone";

/// Filter: the node is outside a PV's zone or region.
pub const ERR_REASON_ZONE_CONFLICT: &str = "node(s) had no available volume zone";

const STATE_KEY: &str = "PreFilterVolumeZone";
const MULTI_ZONE_DELIMITER: &str = "__";
const TOPOLOGY_LABELS: [&str; 4] = [
    LABEL_FAILURE_DOMAIN_BETA_ZONE,
    LABEL_FAILURE_DOMAIN_BETA_REGION,
    LABEL_TOPOLOGY_ZONE,
    LABEL_TOPOLOGY_REGION,
];

/// The GA label a deprecated label was replaced by (a node may carry only the GA one).
fn ga_label(key: &str) -> &str {
    match key {
        LABEL_FAILURE_DOMAIN_BETA_ZONE => LABEL_TOPOLOGY_ZONE,
        LABEL_FAILURE_DOMAIN_BETA_REGION => LABEL_TOPOLOGY_REGION,
        other => other,
    }
}

/// `(key, allowed values)` constraints of the pod's PVs.
#[derive(Clone, Debug, Default)]
struct PreFilterState(Vec<(String, BTreeSet<String>)>);

/// The zones and regions a PV's topology labels allow (a value may list several, joined by `__`).
fn pv_label_topologies(pv: &PersistentVolume) -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for key in TOPOLOGY_LABELS {
        if let Some(v) = pv.metadata.labels.as_ref().and_then(|l| l.get(key)) {
            out.insert(
                key.to_string(),
                v.split(MULTI_ZONE_DELIMITER).map(str::to_string).collect(),
            );
        }
    }
    out
}

fn pv_topologies(pv: &PersistentVolume) -> Vec<(String, BTreeSet<String>)> {
    let mut out = pv_label_topologies(pv);
    let terms = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default();
    if let [term] = terms {
        for r in term.match_expressions.iter().flatten() {
            if r.operator == "In" && TOPOLOGY_LABELS.contains(&r.key.as_str()) {
                let values: BTreeSet<String> = r.values.iter().flatten().cloned().collect();
                out.entry(r.key.clone())
                    .and_modify(|v| *v = v.intersection(&values).cloned().collect())
                    .or_insert(values);
            }
        }
    }
    out.into_iter().collect()
}

/// The plugin. See the module documentation.
#[derive(Clone, Debug, Default)]
pub struct VolumeZone {
    volumes: Option<Arc<VolumeCache>>,
}

impl VolumeZone {
    /// A plugin over the volume state; without it, pods with claims are unresolvable.
    pub fn new(volumes: Option<Arc<VolumeCache>>) -> Self {
        VolumeZone { volumes }
    }
}

impl Plugin for VolumeZone {
    fn name(&self) -> &str {
        NAME
    }
    unisched_framework::serves!(as_pre_filter, as_filter, as_enqueue_extensions);
}

impl PreFilterPlugin for VolumeZone {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        if !super::pod_has_claims(&pod.pod) {
            return (None, Status::skip());
        }
        let Some(cache) = &self.volumes else {
            return (
                None,
                Status::unresolvable("volume state is not available to the scheduler"),
            );
        };
        let mut topologies = Vec::new();
        // Only the pod's `persistentVolumeClaim` volumes, as upstream.
        let claims = match resolve_persistent_claims(cache, &pod.pod) {
            Ok(c) => c,
            Err(e) => return (None, Status::unresolvable(e.to_string())),
        };
        for (_, pvc) in claims {
            let Some(pv_name) = claim_volume_name(&pvc) else {
                let class_name = claim_class(&pvc);
                if class_name.is_empty() {
                    return (
                        None,
                        Status::unresolvable("PersistentVolumeClaim had no pv name and storageClass name"),
                    );
                }
                let Some(class) = cache.class(class_name) else {
                    return (
                        None,
                        Status::unresolvable(format!("storageclass.storage.k8s.io {class_name:?} not found")),
                    );
                };
                match class.volume_binding_mode.as_deref() {
                    Some("WaitForFirstConsumer") => continue,
                    Some(_) => return (None, Status::unresolvable("PersistentVolume had no name")),
                    None => {
                        return (
                            None,
                            Status::unresolvable(format!(
                                "VolumeBindingMode not set for StorageClass {class_name:?}"
                            )),
                        );
                    }
                }
            };
            let Some(pv) = cache.pv(pv_name) else {
                return (
                    None,
                    Status::unresolvable(format!("persistentvolume {pv_name:?} not found")),
                );
            };
            topologies.extend(pv_topologies(&pv));
        }
        if topologies.is_empty() {
            return (None, Status::skip());
        }
        state.write(STATE_KEY, PreFilterState(topologies));
        (None, Status::success())
    }
}

impl FilterPlugin for VolumeZone {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Ok(PreFilterState(topologies)) = state.read::<PreFilterState>(STATE_KEY) else {
            return Status::success();
        };
        let Some(n) = node.node() else {
            return Status::error("node not found");
        };
        let Some(labels) = n.metadata.labels.as_ref() else {
            return Status::success();
        };
        if !TOPOLOGY_LABELS.iter().any(|k| labels.contains_key(*k)) {
            return Status::success();
        }
        for (key, allowed) in topologies {
            let value = labels.get(key).or_else(|| labels.get(ga_label(key)));
            if !value.is_some_and(|v| allowed.contains(v)) {
                return Status::unresolvable(ERR_REASON_ZONE_CONFLICT);
            }
        }
        Status::success()
    }
}

impl EnqueueExtensions for VolumeZone {
    /// Upstream 1.37.2's events and hints: a new WaitForFirstConsumer class (a class's binding
    /// mode is immutable, so its updates are not registered), a new node or changed node labels,
    /// the pod's claim created or changed, a new PV or one whose topology labels changed (its node
    /// affinity is immutable).
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        let add_update = ActionType::ADD.or(ActionType::UPDATE);
        vec![
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::StorageClass, ActionType::ADD, "StorageClassAdd"),
                |_pod, _old, new| class_added_hint(new),
            ),
            ClusterEventWithHint::new(ClusterEvent::new(
                EventResource::Node,
                ActionType::ADD.or(ActionType::UPDATE_NODE_LABEL),
                "NodeAdd|UpdateNodeLabel",
            )),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::PersistentVolumeClaim,
                    add_update,
                    "PersistentVolumeClaimAdd|Update",
                ),
                // Only `persistentVolumeClaim` volumes: Filter reads no ephemeral volume's claim.
                |pod, old, new| super::claim_event_hint(super::ClaimVolumes::PersistentOnly, pod, old, new),
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::PersistentVolume,
                    add_update,
                    "PersistentVolumeAdd|Update",
                ),
                |_pod, old, new| pv_change_hint(old, new),
            ),
        ]
    }
}

/// Only a new class that waits for the first consumer can change a zone decision.
fn class_added_hint(new: Option<&EventObject>) -> Result<QueueingHint, QueueingHintError> {
    let Some(EventObject::StorageClass(class)) = new else {
        return Err(QueueingHintError::NotObject {
            expected: "StorageClass",
            side: EventSide::New,
        });
    };
    Ok(
        if class.volume_binding_mode.as_deref() == Some(WAIT_FOR_FIRST_CONSUMER) {
            QueueingHint::Queue
        } else {
            QueueingHint::Skip
        },
    )
}

/// A new PV may fit; an updated one only when its topology labels changed.
fn pv_change_hint(
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, QueueingHintError> {
    let Some(EventObject::PersistentVolume(pv)) = new else {
        return Err(QueueingHintError::NotObject {
            expected: "PersistentVolume",
            side: EventSide::New,
        });
    };
    match old {
        None => Ok(QueueingHint::Queue),
        Some(EventObject::PersistentVolume(o)) if pv_label_topologies(o) != pv_label_topologies(pv) => {
            Ok(QueueingHint::Queue)
        }
        Some(EventObject::PersistentVolume(_)) => Ok(QueueingHint::Skip),
        Some(_) => Err(QueueingHintError::NotObject {
            expected: "PersistentVolume",
            side: EventSide::Old,
        }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use unisched_framework::Code;

    use k8s_openapi::api::core::v1::Pod;

    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder};
    use crate::volume::testing::{PvBuilder, PvcBuilder, storage_class, with_claims, with_ephemeral_volume};

    #[test]
    fn filter_table() {
        struct Case {
            name: &'static str,
            pv: PvBuilder,
            node: NodeBuilder,
            code: Code,
        }
        let pv = || PvBuilder::new("pv1", "standard", "1Gi").claim("default", "data");
        let node = || NodeBuilder::new("n1");
        let cases = [
            Case {
                name: "zone label matches",
                pv: pv().label(LABEL_TOPOLOGY_ZONE, "a"),
                node: node().label(LABEL_TOPOLOGY_ZONE, "a"),
                code: Code::Success,
            },
            Case {
                name: "zone label differs",
                pv: pv().label(LABEL_TOPOLOGY_ZONE, "a"),
                node: node().label(LABEL_TOPOLOGY_ZONE, "b"),
                code: Code::UnschedulableAndUnresolvable,
            },
            Case {
                name: "multi-zone value",
                pv: pv().label(LABEL_TOPOLOGY_ZONE, "a__b"),
                node: node().label(LABEL_TOPOLOGY_ZONE, "b"),
                code: Code::Success,
            },
            Case {
                name: "beta PV label against GA node label",
                pv: pv().label(LABEL_FAILURE_DOMAIN_BETA_ZONE, "a"),
                node: node().label(LABEL_TOPOLOGY_ZONE, "a"),
                code: Code::Success,
            },
            Case {
                name: "region differs",
                pv: pv().label(LABEL_TOPOLOGY_REGION, "r1"),
                node: node()
                    .label(LABEL_TOPOLOGY_REGION, "r2")
                    .label(LABEL_TOPOLOGY_ZONE, "a"),
                code: Code::UnschedulableAndUnresolvable,
            },
            Case {
                name: "node without topology labels",
                pv: pv().label(LABEL_TOPOLOGY_ZONE, "a"),
                node: node().label("other", "x"),
                code: Code::Success,
            },
            Case {
                name: "node affinity on zone",
                pv: pv().node_affinity(LABEL_TOPOLOGY_ZONE, &["a", "c"]),
                node: node().label(LABEL_TOPOLOGY_ZONE, "b"),
                code: Code::UnschedulableAndUnresolvable,
            },
            Case {
                name: "node affinity on zone matches",
                pv: pv().node_affinity(LABEL_TOPOLOGY_ZONE, &["a", "c"]),
                node: node().label(LABEL_TOPOLOGY_ZONE, "c"),
                code: Code::Success,
            },
        ];
        for case in cases {
            let cache = Arc::new(VolumeCache::new());
            cache.apply_pv(case.pv.arc());
            cache.apply_pvc(PvcBuilder::new("data", "standard", "1Gi").bound_to("pv1").arc());
            let pl = VolumeZone::new(Some(cache));
            let pod = PodInfo::new(with_claims(PodBuilder::new("p").build(), &["data"]));
            let mut state = CycleState::new();
            let (_, s) = pl.pre_filter(&mut state, &pod, &[]);
            assert_eq!(s.code(), Code::Success, "{}", case.name);
            let s = pl.filter(&state, &pod, &case.node.info());
            assert_eq!(s.code(), case.code, "{}", case.name);
            if case.code != Code::Success {
                assert_eq!(
                    s.reasons(),
                    [ERR_REASON_ZONE_CONFLICT.to_string()],
                    "{}",
                    case.name
                );
            }
        }
    }

    #[test]
    fn pre_filter_table() {
        struct Case {
            name: &'static str,
            claims: Vec<&'static str>,
            code: Code,
            reason: &'static str,
        }
        let cases = [
            Case {
                name: "no claims",
                claims: vec![],
                code: Code::Skip,
                reason: "",
            },
            Case {
                name: "missing claim",
                claims: vec!["nope"],
                code: Code::UnschedulableAndUnresolvable,
                reason: "persistentvolumeclaim \"nope\" not found",
            },
            Case {
                name: "unbound delayed claim is skipped",
                claims: vec!["wffc"],
                code: Code::Skip,
                reason: "",
            },
            Case {
                name: "unbound immediate claim",
                claims: vec!["immediate"],
                code: Code::UnschedulableAndUnresolvable,
                reason: "PersistentVolume had no name",
            },
            Case {
                name: "bound to a PV without topology",
                claims: vec!["plain"],
                code: Code::Skip,
                reason: "",
            },
            Case {
                name: "unbound claim of a class without a binding mode",
                claims: vec!["modeless"],
                code: Code::UnschedulableAndUnresolvable,
                reason: "VolumeBindingMode not set for StorageClass \"modeless\"",
            },
        ];
        let cache = Arc::new(VolumeCache::new());
        cache.apply_class(storage_class("wffc", "x", "WaitForFirstConsumer", None));
        cache.apply_class(storage_class("imm", "x", "Immediate", None));
        cache.apply_pvc(PvcBuilder::new("wffc", "wffc", "1Gi").arc());
        cache.apply_pvc(PvcBuilder::new("immediate", "imm", "1Gi").arc());
        cache.apply_pvc(PvcBuilder::new("plain", "imm", "1Gi").bound_to("pv0").arc());
        cache.apply_pv(PvBuilder::new("pv0", "imm", "1Gi").arc());
        let mut modeless = (*storage_class("modeless", "x", "Immediate", None)).clone();
        modeless.volume_binding_mode = None;
        cache.apply_class(Arc::new(modeless));
        cache.apply_pvc(PvcBuilder::new("modeless", "modeless", "1Gi").arc());
        // A generic ephemeral volume's claim, bound to a PV confined to zone a.
        cache.apply_pvc(PvcBuilder::new("p-scratch", "imm", "1Gi").bound_to("zonal").arc());
        cache.apply_pv(
            PvBuilder::new("zonal", "imm", "1Gi")
                .label(LABEL_TOPOLOGY_ZONE, "a")
                .arc(),
        );
        let pl = VolumeZone::new(Some(cache));
        {
            // Upstream's VolumeZone reads only `persistentVolumeClaim` volumes.
            let pod = PodInfo::new(with_ephemeral_volume(PodBuilder::new("p").build(), "scratch"));
            let mut state = CycleState::new();
            let (_, s) = pl.pre_filter(&mut state, &pod, &[]);
            assert_eq!(s.code(), Code::Skip, "an ephemeral volume's PV: {s:?}");
        }
        for case in cases {
            let pod = PodInfo::new(with_claims(PodBuilder::new("p").build(), &case.claims));
            let mut state = CycleState::new();
            let (_, s) = pl.pre_filter(&mut state, &pod, &[]);
            assert_eq!(s.code(), case.code, "{}", case.name);
            if !case.reason.is_empty() {
                assert_eq!(s.reasons(), [case.reason.to_string()], "{}", case.name);
            }
        }
    }

    /// Upstream's `TestIsSchedulableAfterStorageClassAdded`.
    #[test]
    fn class_added_hints() {
        let pv = EventObject::PersistentVolume(PvBuilder::new("v", "", "1Gi").arc());
        let class = |mode: &str| EventObject::StorageClass(storage_class("SC_1", "p", mode, None));
        assert!(class_added_hint(Some(&pv)).is_err(), "not a StorageClass");
        assert_eq!(
            class_added_hint(Some(&class("Immediate"))).unwrap(),
            QueueingHint::Skip
        );
        assert_eq!(
            class_added_hint(Some(&class(WAIT_FOR_FIRST_CONSUMER))).unwrap(),
            QueueingHint::Queue
        );
    }

    /// Upstream's `TestIsSchedulableAfterPersistentVolumeClaimAdded`, through the registered hint,
    /// and the claim of a generic ephemeral volume, which VolumeZone does not read.
    #[test]
    fn claim_change_hints() {
        let claim = |name: &str, namespace: &str, volume: &str| {
            let mut pvc = PvcBuilder::new(name, "", "1Gi").build();
            pvc.metadata.namespace = Some(namespace.into());
            if let Some(spec) = pvc.spec.as_mut() {
                spec.volume_name = (!volume.is_empty()).then(|| volume.to_string());
            }
            EventObject::PersistentVolumeClaim(Arc::new(pvc))
        };
        let uses = |claim: &str| with_claims(PodBuilder::new("pod_1").build(), &[claim]);
        let no_claims = PodBuilder::new("pod_1").build();
        let ephemeral = with_ephemeral_volume(PodBuilder::new("pod_1").build(), "scratch");
        let cases: Vec<(&str, Pod, Option<EventObject>, EventObject, QueueingHint)> = vec![
            (
                "pvc-was-added-but-pod-refers-no-pvc",
                no_claims.clone(),
                None,
                claim("PVC_1", "default", "Vol_1"),
                QueueingHint::Skip,
            ),
            (
                "pvc-was-added-and-pod-was-bound-to-different-pvc",
                uses("PVC_2"),
                None,
                claim("PVC_1", "default", "Vol_1"),
                QueueingHint::Skip,
            ),
            (
                "pvc-was-added-and-pod-was-bound-to-pvc-but-different-ns",
                uses("PVC_1"),
                None,
                claim("PVC_1", "ns1", "Vol_1"),
                QueueingHint::Skip,
            ),
            (
                "pvc-was-added-and-pod-was-bound-to-the-pvc",
                uses("PVC_1"),
                None,
                claim("PVC_1", "default", "Vol_1"),
                QueueingHint::Queue,
            ),
            (
                "pvc-was-updated-and-pod-was-bound-to-the-pvc",
                uses("PVC_1"),
                Some(claim("PVC_1", "default", "")),
                claim("PVC_1", "default", "Vol_1"),
                QueueingHint::Queue,
            ),
            (
                "pvc-was-updated-but-pod-refers-no-pvc",
                no_claims,
                Some(claim("PVC_1", "default", "")),
                claim("PVC_1", "default", "Vol_1"),
                QueueingHint::Skip,
            ),
            (
                "the claim of the pod's generic ephemeral volume",
                ephemeral,
                None,
                claim("pod_1-scratch", "default", "Vol_1"),
                QueueingHint::Skip,
            ),
        ];
        let events = VolumeZone::new(None).events_to_register();
        let claim_event = events
            .iter()
            .find(|e| e.event.resource == EventResource::PersistentVolumeClaim)
            .expect("VolumeZone registers claim events");
        let hint = claim_event.hint.clone().expect("with a hint");
        for (name, pod, old, new, want) in cases {
            assert_eq!(hint(&pod, old.as_ref(), Some(&new)).unwrap(), want, "{name}");
        }
        let pv = EventObject::PersistentVolume(PvBuilder::new("v", "", "1Gi").arc());
        assert!(
            hint(&uses("PVC_1"), None, Some(&pv)).is_err(),
            "error-wrong-new-object"
        );
    }

    /// Upstream's `TestIsSchedulableAfterPersistentVolumeChange`, and a reordered multi-zone value
    /// (the same zones) that changes nothing.
    #[test]
    fn pv_change_hints() {
        let pv = |labels: &[(&str, &str)]| {
            let mut b = PvBuilder::new("Vol_1", "", "1Gi");
            for (k, v) in labels {
                b = b.label(k, v);
            }
            EventObject::PersistentVolume(b.arc())
        };
        let class = EventObject::StorageClass(storage_class("sc", "p", "Immediate", None));
        let beta = LABEL_FAILURE_DOMAIN_BETA_ZONE;
        let cases: Vec<(&str, Option<EventObject>, EventObject, Result<QueueingHint, ()>)> = vec![
            ("not a PV", None, class.clone(), Err(())),
            ("old side not a PV", Some(class), pv(&[]), Err(())),
            (
                "a new PV",
                None,
                pv(&[(beta, "us-west1-b")]),
                Ok(QueueingHint::Queue),
            ),
            (
                "zone label changed",
                Some(pv(&[(beta, "us-west1-a")])),
                pv(&[(beta, "us-west1-b")]),
                Ok(QueueingHint::Queue),
            ),
            (
                "topology label added",
                Some(pv(&[(beta, "us-west1-a")])),
                pv(&[(beta, "us-west1-a"), (LABEL_TOPOLOGY_ZONE, "zone")]),
                Ok(QueueingHint::Queue),
            ),
            (
                "topology unchanged",
                Some(pv(&[(beta, "us-west1-a"), (LABEL_TOPOLOGY_ZONE, "zone")])),
                pv(&[(beta, "us-west1-a"), (LABEL_TOPOLOGY_ZONE, "zone")]),
                Ok(QueueingHint::Skip),
            ),
            (
                "the same zones in another order",
                Some(pv(&[(LABEL_TOPOLOGY_ZONE, "a__b")])),
                pv(&[(LABEL_TOPOLOGY_ZONE, "b__a"), ("other", "x")]),
                Ok(QueueingHint::Skip),
            ),
        ];
        for (name, old, new, want) in cases {
            assert_eq!(
                pv_change_hint(old.as_ref(), Some(&new)).map_err(|_| ()),
                want,
                "{name}"
            );
        }
    }
}
