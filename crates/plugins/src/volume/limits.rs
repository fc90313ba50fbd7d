//! NodeVolumeLimits: a node can attach only so many volumes of each CSI driver (upstream
//! `nodevolumelimits`, the CSI part).
//!
//! The limit is the node's `CSINode.spec.drivers[].allocatable.count`; a node without a CSINode,
//! or a driver without a count, has no limit. Filter counts the distinct volumes of each driver the
//! node's pods already use, plus the node's VolumeAttachments of volumes no pod there uses (a
//! volume stays attached until it is detached, after its pod is gone), plus the ones this pod adds
//! (a volume a pod on the node already uses counts once), and rejects with `node(s) exceed max
//! volume count` (Unschedulable: preemption can free slots). As upstream, a volume of the new pod
//! that is attached without a pod using it counts both as attached and as new.
//!
//! A volume is identified by its PV's CSI driver and `volumeHandle`; an unbound claim counts against
//! its class' provisioner, identified by the claim itself (it will become one new volume). Volumes
//! this plugin cannot resolve (missing claim or PV, non-CSI PV) are not counted, as upstream.
//!
//! With `VolumeLimitScaling`, a driver can also say that pods must not land where it is missing
//! (`preventPodSchedulingIfMissing` in its CSIDriver): a node whose CSINode does not list a driver
//! of the pod's volumes is then rejected (`<driver> CSI driver is not installed on the node`,
//! Unschedulable), because the kubelet there could not mount them. This is checked before the
//! limits, and also for nodes without a CSINode. A driver without a CSIDriver object is assumed
//! to be installed: it may not be a CSI driver at all.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use k8s_openapi::api::{
    core::v1::{Pod, Volume},
    storage::v1::{CSINode, VolumeAttachment},
};
use unisched_cache::VolumeCache;
use unisched_framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, CycleState, EnqueueExtensions, EventObject,
    EventResource, EventSide, FilterPlugin, NodeInfo, Plugin, PodInfo, PreFilterPlugin, PreFilterResult,
    QueueingHint, QueueingHintError, Status,
};

use super::{claim_class, claim_volume_name, pod_claim_names, pod_namespace};
use crate::helper::{event_pod_objects, object_kind};

/// The plugin name.
pub const NAME: &str = "NodeVolumeLimits";

/// Filter: the node would exceed a driver's attach limit.
pub const ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED: &str = "node(s) exceed max volume count";

const STATE_KEY: &str = "PreFilterNodeVolumeLimits";

/// Distinct volumes per CSI driver.
type VolumesByDriver = BTreeMap<String, BTreeSet<String>>;

#[derive(Clone, Debug, Default)]
struct PreFilterState(VolumesByDriver);

/// The plugin. See the module documentation.
#[derive(Clone, Debug)]
pub struct NodeVolumeLimits {
    volumes: Option<Arc<VolumeCache>>,
    /// `VolumeLimitScaling`: reject nodes missing a driver that asks for it.
    check_installed_drivers: bool,
}

impl Default for NodeVolumeLimits {
    fn default() -> Self {
        Self::new(None)
    }
}

impl NodeVolumeLimits {
    /// A plugin over the volume state (without it there is nothing to count), with upstream's
    /// default gates (`VolumeLimitScaling` on).
    pub fn new(volumes: Option<Arc<VolumeCache>>) -> Self {
        NodeVolumeLimits {
            volumes,
            check_installed_drivers: true,
        }
    }

    /// Sets `VolumeLimitScaling`.
    #[must_use]
    pub fn with_volume_limit_scaling(mut self, on: bool) -> Self {
        self.check_installed_drivers = on;
        self
    }
}

/// A driver of the pod's volumes that asks for pods to be kept off nodes without it
/// (`preventPodSchedulingIfMissing`), and that the node's CSINode does not list.
fn missing_driver<'a>(cache: &VolumeCache, drivers: &'a VolumesByDriver, node: &str) -> Option<&'a str> {
    let csi_node = cache.csi_node(node);
    drivers.keys().map(String::as_str).find(|driver| {
        let required = cache
            .csi_driver(driver)
            .is_some_and(|d| d.spec.prevent_pod_scheduling_if_missing == Some(true));
        required
            && !csi_node
                .as_ref()
                .is_some_and(|n| n.spec.drivers.iter().any(|d| d.name == *driver))
    })
}

/// The CSI volume a VolumeAttachment attaches, as `(driver, volumeHandle)`: its attacher and its
/// PV's handle. None for an attachment without an attacher or a PV name, or whose PV is gone or not
/// a CSI volume (upstream does not count those either).
fn attached_volume(cache: &VolumeCache, attachment: &VolumeAttachment) -> Option<(String, String)> {
    let driver = &attachment.spec.attacher;
    let pv_name = attachment.spec.source.persistent_volume_name.as_deref()?;
    if driver.is_empty() {
        return None;
    }
    let handle = cache
        .pv(pv_name)?
        .spec
        .as_ref()?
        .csi
        .as_ref()?
        .volume_handle
        .clone();
    Some((driver.clone(), handle))
}

/// The CSI volumes of a pod's claims, by driver.
fn csi_volumes(cache: &VolumeCache, pod: &Pod, into: &mut VolumesByDriver) {
    let ns = pod_namespace(pod);
    for name in pod_claim_names(pod) {
        let Some(pvc) = cache.pvc(ns, &name) else {
            continue;
        };
        // A claim without its PV (unbound, or bound to a PV not seen or gone) counts as one new
        // volume of its class' provisioner, as upstream.
        match claim_volume_name(&pvc).and_then(|pv_name| cache.pv(pv_name)) {
            Some(pv) => {
                if let Some(csi) = pv.spec.as_ref().and_then(|s| s.csi.as_ref()) {
                    into.entry(csi.driver.clone())
                        .or_default()
                        .insert(csi.volume_handle.clone());
                }
            }
            None => {
                if let Some(class) = cache.class(claim_class(&pvc)) {
                    into.entry(class.provisioner.clone())
                        .or_default()
                        .insert(format!("{ns}/{name}"));
                }
            }
        }
    }
}

impl Plugin for NodeVolumeLimits {
    fn name(&self) -> &str {
        NAME
    }
    unisched_framework::serves!(as_pre_filter, as_filter, as_enqueue_extensions);
}

impl PreFilterPlugin for NodeVolumeLimits {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        let Some(cache) = &self.volumes else {
            return (None, Status::skip());
        };
        if !super::pod_has_claims(&pod.pod) {
            return (None, Status::skip());
        }
        let mut mine = VolumesByDriver::new();
        csi_volumes(cache, &pod.pod, &mut mine);
        if mine.is_empty() {
            return (None, Status::skip());
        }
        state.write(STATE_KEY, PreFilterState(mine));
        (None, Status::success())
    }
}

impl FilterPlugin for NodeVolumeLimits {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let (Some(cache), Ok(PreFilterState(mine))) =
            (&self.volumes, state.read::<PreFilterState>(STATE_KEY))
        else {
            return Status::success();
        };
        if self.check_installed_drivers
            && let Some(driver) = missing_driver(cache, mine, node.name())
        {
            return Status::unschedulable(format!("{driver} CSI driver is not installed on the node"));
        }
        let Some(csi_node) = cache.csi_node(node.name()) else {
            return Status::success();
        };
        let limits: BTreeMap<&str, i64> = csi_node
            .spec
            .drivers
            .iter()
            .filter_map(|d| Some((d.name.as_str(), i64::from(d.allocatable.as_ref()?.count?))))
            .collect();
        if !mine.keys().any(|d| limits.contains_key(d.as_str())) {
            return Status::success();
        }
        let mut attached = VolumesByDriver::new();
        for p in &node.pods {
            csi_volumes(cache, &p.pod, &mut attached);
        }
        // Volumes still attached to the node that no pod there uses.
        let mut only_attached = VolumesByDriver::new();
        for attachment in cache.attachments_on(node.name()) {
            if let Some((driver, handle)) = attached_volume(cache, &attachment)
                && !attached.get(&driver).is_some_and(|a| a.contains(&handle))
            {
                only_attached.entry(driver).or_default().insert(handle);
            }
        }
        for (driver, volumes) in mine {
            let Some(&limit) = limits.get(driver.as_str()) else {
                continue;
            };
            let on_node = attached.get(driver);
            let new = volumes
                .iter()
                .filter(|v| !on_node.is_some_and(|a| a.contains(*v)))
                .count();
            let used = on_node.map_or(0, BTreeSet::len) + only_attached.get(driver).map_or(0, BTreeSet::len);
            if i64::try_from(used + new).unwrap_or(i64::MAX) > limit {
                return Status::unschedulable(ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED);
            }
        }
        Status::success()
    }
}

impl EnqueueExtensions for NodeVolumeLimits {
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            // A new CSINode may list drivers the pod needs; an updated one helps only when a
            // driver's attachable count rose (upstream 1.37.2's events and hint).
            ClusterEventWithHint::new(ClusterEvent::new(
                EventResource::CsiNode,
                ActionType::ADD,
                "CSINodeAdd",
            )),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::CsiNode, ActionType::UPDATE, "CSINodeUpdate"),
                |_pod, old, new| csi_node_updated_hint(old, new),
            ),
            // Only a placed pod with attachable volumes held attachments.
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::AssignedPod,
                    ActionType::DELETE,
                    "AssignedPodDelete",
                ),
                |_pod, old, new| {
                    let (deleted, _) = event_pod_objects(old, new)?;
                    Ok(match deleted {
                        Some(d) if !held_attachments(d) => QueueingHint::Skip,
                        _ => QueueingHint::Queue,
                    })
                },
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::PersistentVolumeClaim,
                    ActionType::ADD,
                    "PersistentVolumeClaimAdd",
                ),
                |pod, old, new| super::claim_event_hint(super::ClaimVolumes::All, pod, old, new),
            ),
            // A detached volume frees a slot; as upstream, it can help any pod with a
            // `persistentVolumeClaim` volume, and a pod with an in-tree volume of the detached
            // volume's driver.
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::VolumeAttachment,
                    ActionType::DELETE,
                    "VolumeAttachmentDelete",
                ),
                attachment_deleted_hint,
            ),
        ]
    }
}

/// Whether `pod`, deleted, may have held attachments: it was bound or nominated and has a claim
/// (persistent or generic ephemeral) or an in-tree volume CSI migration covers (upstream counts
/// those as their CSI driver's).
fn held_attachments(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    crate::helper::bound_or_nominated(pod)
        && spec
            .and_then(|s| s.volumes.as_deref())
            .unwrap_or_default()
            .iter()
            .any(|v| {
                v.persistent_volume_claim.is_some() || v.ephemeral.is_some() || migrated_driver(v).is_some()
            })
}

/// The CSI driver that replaces an in-tree inline volume under CSI migration: `Ok(None)` for a
/// volume no migration covers, `Err` for one the translation rejects (as upstream's translator: an
/// EBS id in URL form that names no `vol-…`, an Azure disk of another kind than `Managed`).
fn migrated_driver(v: &Volume) -> Option<Result<&'static str, String>> {
    if let Some(ebs) = &v.aws_elastic_block_store {
        let id = &ebs.volume_id;
        let ok = id.strip_prefix("aws://").is_none_or(|rest| {
            // `aws://<zone>/<id>`: the id is the path, which must be a volume id.
            let path = rest.split_once('/').map_or("", |(_, p)| p).trim_matches('/');
            path.starts_with("vol-") && !path.contains('/')
        });
        return Some(if ok {
            Ok("ebs.csi.aws.com")
        } else {
            Err(format!("volume {}: invalid AWS EBS volume id {id}", v.name))
        });
    }
    if let Some(disk) = &v.azure_disk {
        return Some(match disk.kind.as_deref() {
            Some(kind) if !kind.eq_ignore_ascii_case("Managed") => Err(format!(
                "volume {}: Azure disk kind {kind} is not supported in CSI migration",
                v.name
            )),
            _ => Ok("disk.csi.azure.com"),
        });
    }
    let driver = if v.gce_persistent_disk.is_some() {
        "pd.csi.storage.gke.io"
    } else if v.cinder.is_some() {
        "cinder.csi.openstack.org"
    } else if v.azure_file.is_some() {
        "file.csi.azure.com"
    } else if v.vsphere_volume.is_some() {
        "csi.vsphere.vmware.com"
    } else if v.portworx_volume.is_some() {
        "pxd.portworx.com"
    } else {
        return None;
    };
    Some(Ok(driver))
}

/// A VolumeAttachment was deleted: a pod with a `persistentVolumeClaim` volume may fit now, and so
/// may one with an in-tree volume that migrates to the detached volume's driver. Volumes are read
/// in order, and the first one that decides answers (an in-tree volume that does not translate is
/// an error, which requeues).
fn attachment_deleted_hint(
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, QueueingHintError> {
    let attachment = match old.or(new) {
        Some(EventObject::VolumeAttachment(a)) => a,
        Some(other) => {
            return Err(QueueingHintError::UnexpectedKind {
                expected: "VolumeAttachment",
                got: object_kind(other),
            });
        }
        None => {
            return Err(QueueingHintError::EmptyEvent {
                kind: "VolumeAttachment",
            });
        }
    };
    let volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default();
    for v in volumes {
        if v.persistent_volume_claim.is_some() {
            return Ok(QueueingHint::Queue);
        }
        match migrated_driver(v) {
            None => {}
            Some(Err(err)) => return Err(err.into()),
            Some(Ok(driver)) if driver == attachment.spec.attacher => return Ok(QueueingHint::Queue),
            Some(Ok(_)) => {}
        }
    }
    Ok(QueueingHint::Skip)
}

/// A driver's attachable count, absent counted as 0 (as upstream's hint counts it).
fn driver_counts(node: &CSINode) -> BTreeMap<&str, i32> {
    node.spec
        .drivers
        .iter()
        .map(|d| {
            let count = d.allocatable.as_ref().and_then(|a| a.count).unwrap_or(0);
            (d.name.as_str(), count)
        })
        .collect()
}

/// An updated CSINode helps when some driver's count rose above its old one (0 when it was not
/// listed).
fn csi_node_updated_hint(
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, QueueingHintError> {
    let (Some(EventObject::CsiNode(old)), Some(EventObject::CsiNode(new))) = (old, new) else {
        return Err(QueueingHintError::NotObject {
            expected: "CSINode",
            side: EventSide::New,
        });
    };
    let before = driver_counts(old);
    let rose = driver_counts(new)
        .into_iter()
        .any(|(name, count)| count > before.get(name).copied().unwrap_or(0));
    Ok(if rose {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use k8s_openapi::api::storage::v1::{VolumeAttachmentSource, VolumeAttachmentSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use unisched_framework::Code;

    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder};
    use crate::volume::testing::{PvBuilder, PvcBuilder, csi_driver, csi_node, storage_class, with_claims};

    const DRIVER: &str = "ebs.csi.example.com";

    fn cache() -> Arc<VolumeCache> {
        let c = Arc::new(VolumeCache::new());
        c.apply_class(storage_class("csi", DRIVER, "WaitForFirstConsumer", None));
        for i in 0..4 {
            let (pvc, pv) = (format!("c{i}"), format!("pv{i}"));
            c.apply_pv(
                PvBuilder::new(&pv, "csi", "1Gi")
                    .csi(DRIVER, &format!("vol-{i}"))
                    .arc(),
            );
            c.apply_pvc(PvcBuilder::new(&pvc, "csi", "1Gi").bound_to(&pv).arc());
        }
        c.apply_pvc(PvcBuilder::new("new", "csi", "1Gi").arc());
        c.apply_pvc(
            PvcBuilder::new("bound-to-missing", "csi", "1Gi")
                .bound_to("no-such-pv")
                .arc(),
        );
        c
    }

    #[test]
    fn filter_table() {
        struct Case {
            name: &'static str,
            limit: Option<i32>,
            existing: Vec<&'static str>,
            /// VolumeAttachments on the node: (attacher, PV).
            attachments: Vec<(&'static str, &'static str)>,
            claims: Vec<&'static str>,
            code: Code,
        }
        let cases = [
            Case {
                name: "under the limit",
                limit: Some(2),
                existing: vec!["c0"],
                attachments: vec![],
                claims: vec!["c1"],
                code: Code::Success,
            },
            // upstream's "should count VolumeAttachments towards volume limit when no pods exist"
            Case {
                name: "attachments without pods fill the node",
                limit: Some(2),
                existing: vec![],
                attachments: vec![(DRIVER, "pv0"), (DRIVER, "pv1")],
                claims: vec!["c2"],
                code: Code::Unschedulable,
            },
            // upstream's "should schedule pod when VolumeAttachments count does not exceed limit"
            Case {
                name: "an attachment under the limit",
                limit: Some(2),
                existing: vec![],
                attachments: vec![(DRIVER, "pv0")],
                claims: vec!["c2"],
                code: Code::Success,
            },
            Case {
                name: "an attachment of a pod's volume counts once",
                limit: Some(2),
                existing: vec!["c0"],
                attachments: vec![(DRIVER, "pv0")],
                claims: vec!["c2"],
                code: Code::Success,
            },
            Case {
                name: "attachments of another driver, of a missing PV or without an attacher do not count",
                limit: Some(1),
                existing: vec![],
                attachments: vec![("other.csi.example.com", "pv0"), (DRIVER, "gone"), ("", "pv1")],
                claims: vec!["c2"],
                code: Code::Success,
            },
            Case {
                // As upstream: only volumes pods on the node use are taken off the new ones.
                name: "the new pod's own volume attached without a pod counts twice",
                limit: Some(1),
                existing: vec![],
                attachments: vec![(DRIVER, "pv2")],
                claims: vec!["c2"],
                code: Code::Unschedulable,
            },
            Case {
                name: "over the limit",
                limit: Some(2),
                existing: vec!["c0", "c1"],
                attachments: vec![],
                claims: vec!["c2"],
                code: Code::Unschedulable,
            },
            Case {
                name: "already attached volume counts once",
                limit: Some(2),
                existing: vec!["c0", "c1"],
                attachments: vec![],
                claims: vec!["c1"],
                code: Code::Success,
            },
            Case {
                // upstream falls back to the class when the PV cannot be found.
                name: "a claim bound to a missing PV counts against the provisioner",
                limit: Some(1),
                existing: vec!["c0"],
                attachments: vec![],
                claims: vec!["bound-to-missing"],
                code: Code::Unschedulable,
            },
            Case {
                name: "unbound claim counts against the provisioner",
                limit: Some(1),
                existing: vec!["c0"],
                attachments: vec![],
                claims: vec!["new"],
                code: Code::Unschedulable,
            },
            Case {
                name: "no count: no limit",
                limit: None,
                existing: vec!["c0", "c1", "c2"],
                attachments: vec![],
                claims: vec!["c3"],
                code: Code::Success,
            },
        ];
        for case in cases {
            let c = cache();
            c.apply_csi_node(csi_node("n1", DRIVER, case.limit));
            for (i, (attacher, pv)) in case.attachments.iter().enumerate() {
                c.apply_attachment(Arc::new(VolumeAttachment {
                    metadata: ObjectMeta {
                        name: Some(format!("va-{i}")),
                        ..Default::default()
                    },
                    spec: VolumeAttachmentSpec {
                        attacher: (*attacher).into(),
                        node_name: "n1".into(),
                        source: VolumeAttachmentSource {
                            persistent_volume_name: Some((*pv).into()),
                            ..Default::default()
                        },
                    },
                    status: None,
                }));
            }
            let pl = NodeVolumeLimits::new(Some(c));
            let existing = PodInfo::new(with_claims(
                PodBuilder::new("q").uid("q").node_name("n1").build(),
                &case.existing,
            ));
            let node = NodeBuilder::new("n1").info_with([existing]);
            let pod = PodInfo::new(with_claims(PodBuilder::new("p").build(), &case.claims));
            let mut state = CycleState::new();
            let (_, s) = pl.pre_filter(&mut state, &pod, &[]);
            assert_eq!(s.code(), Code::Success, "{}", case.name);
            let s = pl.filter(&state, &pod, &node);
            assert_eq!(s.code(), case.code, "{}", case.name);
            if case.code != Code::Success {
                assert_eq!(s.reasons(), [ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED.to_string()]);
            }
        }
    }

    /// Upstream `TestVolumeLimitScalingGate`: (name, gate, limit on the CSINode (None: the
    /// CSINode lists no driver), CSIDriver present, preventPodSchedulingIfMissing, fits).
    /// upstream's "a pod has PVC when VolumeAttachment is deleting" and "a pod has no PVC when
    /// VolumeAttachment is deleting".
    #[test]
    fn a_detached_volume_retries_pods_with_claims_only() {
        let pl = NodeVolumeLimits::new(Some(cache()));
        let events = pl.events_to_register();
        let detach = events
            .iter()
            .find(|e| e.event.resource == EventResource::VolumeAttachment)
            .expect("VolumeAttachment deletions are registered");
        assert_eq!(detach.event.action, ActionType::DELETE);
        let detached = attachment("any.csi.example.com", None);
        let hint = |pod: &Pod| (detach.hint.as_ref().unwrap())(pod, Some(&detached), None).unwrap();
        let with_claim = with_claims(PodBuilder::new("p").build(), &["c0"]);
        assert_eq!(hint(&with_claim), QueueingHint::Queue);
        assert_eq!(hint(&PodBuilder::new("q").build()), QueueingHint::Skip);
    }

    #[test]
    fn installed_driver_table() {
        let cases = [
            ("driver object without the opt-in", true, None, true, false, true),
            (
                "not installed and the driver asks for it",
                true,
                None,
                true,
                true,
                false,
            ),
            ("gate off: not checked", false, None, true, true, true),
            ("installed, within the limit", true, Some(2), true, true, true),
            (
                "no driver object: assumed installed",
                true,
                None,
                false,
                false,
                true,
            ),
        ];
        for (name, gate, limit, driver_object, prevent, fits) in cases {
            let c = cache();
            match limit {
                Some(limit) => {
                    c.apply_csi_node(csi_node("n1", DRIVER, Some(limit)));
                }
                None => {
                    let mut empty = (*csi_node("n1", DRIVER, None)).clone();
                    empty.spec.drivers.clear();
                    c.apply_csi_node(Arc::new(empty));
                }
            }
            if driver_object {
                c.apply_csi_driver(csi_driver(DRIVER, false, prevent));
            }
            let pl = NodeVolumeLimits::new(Some(c)).with_volume_limit_scaling(gate);
            let pod = PodInfo::new(with_claims(PodBuilder::new("p").build(), &["c0"]));
            let mut state = CycleState::new();
            assert_eq!(
                pl.pre_filter(&mut state, &pod, &[]).1.code(),
                Code::Success,
                "{name}"
            );
            let s = pl.filter(&state, &pod, &NodeBuilder::new("n1").info());
            if fits {
                assert_eq!(s.code(), Code::Success, "{name}: {s:?}");
            } else {
                assert_eq!(s.code(), Code::Unschedulable, "{name}");
                assert_eq!(
                    s.reasons(),
                    [format!("{DRIVER} CSI driver is not installed on the node")],
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn a_node_without_csinode_lacks_every_driver() {
        let c = cache();
        c.apply_csi_driver(csi_driver(DRIVER, false, true));
        let pl = NodeVolumeLimits::new(Some(c));
        let pod = PodInfo::new(with_claims(PodBuilder::new("p").build(), &["new"]));
        let mut state = CycleState::new();
        pl.pre_filter(&mut state, &pod, &[]);
        let s = pl.filter(&state, &pod, &NodeBuilder::new("n1").info());
        assert_eq!(
            s.code(),
            Code::Unschedulable,
            "an unbound claim counts against its provisioner"
        );
    }

    #[test]
    fn pods_without_csi_volumes_skip() {
        let pl = NodeVolumeLimits::new(Some(cache()));
        let mut state = CycleState::new();
        let pod = PodBuilder::new("p").info();
        assert_eq!(pl.pre_filter(&mut state, &pod, &[]).1.code(), Code::Skip);
        let node = NodeBuilder::new("n-without-csinode").info();
        let pod = PodInfo::new(with_claims(PodBuilder::new("p").build(), &["c0"]));
        pl.pre_filter(&mut state, &pod, &[]);
        assert!(pl.filter(&state, &pod, &node).is_success());
    }

    /// Upstream's `TestCSILimitsAfterCSINodeUpdatedQHint`, with a driver newly listed and one whose
    /// count was unset.
    #[test]
    fn csi_node_update_hints() {
        use k8s_openapi::api::storage::v1::{CSINodeDriver, CSINodeSpec, VolumeNodeResources};
        let node = |drivers: &[(&str, Option<i32>)]| {
            EventObject::CsiNode(Arc::new(CSINode {
                metadata: ObjectMeta {
                    name: Some("test-node".into()),
                    ..Default::default()
                },
                spec: CSINodeSpec {
                    drivers: drivers
                        .iter()
                        .map(|(name, count)| CSINodeDriver {
                            name: (*name).into(),
                            node_id: "test-node".into(),
                            allocatable: Some(VolumeNodeResources { count: *count }),
                            ..Default::default()
                        })
                        .collect(),
                },
                ..Default::default()
            }))
        };
        let ebs = "ebs.csi.aws.com";
        let cases = [
            (
                "limit raised, queue",
                node(&[(ebs, Some(1))]),
                node(&[(ebs, Some(2))]),
                QueueingHint::Queue,
            ),
            (
                "limit decreased, skip",
                node(&[(ebs, Some(2))]),
                node(&[(ebs, Some(1))]),
                QueueingHint::Skip,
            ),
            (
                "limit unchanged, skip",
                node(&[(ebs, Some(1))]),
                node(&[(ebs, Some(1))]),
                QueueingHint::Skip,
            ),
            (
                "a driver newly listed with a count",
                node(&[(ebs, Some(1))]),
                node(&[(ebs, Some(1)), ("other.csi", Some(3))]),
                QueueingHint::Queue,
            ),
            (
                "a count set where none was",
                node(&[(ebs, None)]),
                node(&[(ebs, Some(1))]),
                QueueingHint::Queue,
            ),
            (
                "a count unset counts as 0",
                node(&[(ebs, Some(1))]),
                node(&[(ebs, None)]),
                QueueingHint::Skip,
            ),
        ];
        for (name, old, new, want) in cases {
            assert_eq!(
                csi_node_updated_hint(Some(&old), Some(&new)).unwrap(),
                want,
                "{name}"
            );
        }
        let class = EventObject::StorageClass(crate::volume::testing::storage_class(
            "sc",
            "p",
            "Immediate",
            None,
        ));
        assert!(csi_node_updated_hint(Some(&class), Some(&node(&[]))).is_err());
    }

    /// A deleted VolumeAttachment of `attacher`, for an inline volume of `inline_driver` when given
    /// (else for PV `pv1`).
    fn attachment(attacher: &str, inline_driver: Option<&str>) -> EventObject {
        use k8s_openapi::api::core::v1::{CSIPersistentVolumeSource, PersistentVolumeSpec};
        EventObject::VolumeAttachment(Arc::new(VolumeAttachment {
            metadata: ObjectMeta {
                name: Some("volumeattachment1".into()),
                ..Default::default()
            },
            spec: VolumeAttachmentSpec {
                attacher: attacher.into(),
                node_name: "fake-node".into(),
                source: match inline_driver {
                    Some(driver) => VolumeAttachmentSource {
                        inline_volume_spec: Some(PersistentVolumeSpec {
                            csi: Some(CSIPersistentVolumeSource {
                                driver: driver.into(),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                    None => VolumeAttachmentSource {
                        persistent_volume_name: Some("pv1".into()),
                        ..Default::default()
                    },
                },
            },
            status: None,
        }))
    }

    fn inline_ebs(id: &str) -> Volume {
        Volume {
            name: "ebs".into(),
            aws_elastic_block_store: Some(k8s_openapi::api::core::v1::AWSElasticBlockStoreVolumeSource {
                volume_id: id.into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn inline_gce(pd: &str) -> Volume {
        Volume {
            name: "gce".into(),
            gce_persistent_disk: Some(k8s_openapi::api::core::v1::GCEPersistentDiskVolumeSource {
                pd_name: pd.into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn ephemeral(name: &str) -> Volume {
        Volume {
            name: name.into(),
            ephemeral: Some(k8s_openapi::api::core::v1::EphemeralVolumeSource::default()),
            ..Default::default()
        }
    }

    fn hint_for(resource: EventResource) -> unisched_framework::QueueingHintFn {
        NodeVolumeLimits::new(None)
            .events_to_register()
            .into_iter()
            .find(|e| e.event.resource == resource)
            .and_then(|e| e.hint)
            .unwrap()
    }

    /// Upstream's `TestCSILimitsQHint` (an assigned pod was deleted), plus a deleted pod's generic
    /// ephemeral volume and a deletion that is not a pod.
    #[test]
    fn deleted_pod_hints() {
        use crate::volume::testing::with_volume;
        let target = with_claims(PodBuilder::new("p").build(), &["csi-ebs.csi.aws.com-2"]);
        let on_node = || PodBuilder::new("d").node_name("csi-node");
        let cases = [
            (
                "return a Queue when a deleted pod has a PVC",
                with_claims(on_node().build(), &["placeholder"]),
                QueueingHint::Queue,
            ),
            (
                "return a Queue when a deleted pod has a inline migratable volume",
                with_volume(on_node().build(), inline_ebs("")),
                QueueingHint::Queue,
            ),
            (
                "return a QueueSkip when a deleted pod doesn't have any volume",
                on_node().build(),
                QueueingHint::Skip,
            ),
            (
                "return a QueueSkip when a deleted pod is not scheduled.",
                with_claims(PodBuilder::new("d").build(), &["csi-ebs.csi.aws.com-0"]),
                QueueingHint::Skip,
            ),
            (
                "a nominated pod's claim",
                with_claims(PodBuilder::new("d").nominated_node("csi-node").build(), &["c"]),
                QueueingHint::Queue,
            ),
            (
                "a generic ephemeral volume",
                with_volume(on_node().build(), ephemeral("scratch")),
                QueueingHint::Queue,
            ),
        ];
        let hint = hint_for(EventResource::AssignedPod);
        for (name, deleted, want) in cases {
            let old = EventObject::pod(deleted);
            assert_eq!(hint(&target, Some(&old), None).unwrap(), want, "{name}");
        }
        assert!(hint(&target, Some(&EventObject::Other), None).is_err());
    }

    /// Upstream's `TestCSILimitsAddedPVCQHint`.
    #[test]
    fn added_claim_hints() {
        use crate::volume::testing::with_volume;
        let claim = |name: &str, ns: &str| {
            let mut c = PvcBuilder::new(name, "", "1Gi").build();
            c.metadata.namespace = Some(ns.into());
            EventObject::PersistentVolumeClaim(Arc::new(c))
        };
        let in_ns1 = |name: &str| PodBuilder::new(name).namespace("ns1").build();
        let cases = [
            (
                "a pod isn't in the same namespace as an added PVC",
                in_ns1("p"),
                claim("", "ns2"),
                QueueingHint::Skip,
            ),
            (
                "a pod is in the same namespace as an added PVC",
                with_claims(in_ns1("p"), &["pvc1"]),
                claim("pvc1", "ns1"),
                QueueingHint::Queue,
            ),
            (
                "a pod has an ephemeral volume related to an added PVC",
                with_volume(in_ns1("pod1"), ephemeral("ephemeral")),
                claim("pod1-ephemeral", "ns1"),
                QueueingHint::Queue,
            ),
            (
                "a pod doesn't have the same PVC as an added PVC",
                with_claims(in_ns1("p"), &["pvc1"]),
                claim("pvc2", "ns1"),
                QueueingHint::Skip,
            ),
            (
                "a pod doesn't have any PVC attached",
                in_ns1("p"),
                claim("pvc2", "ns1"),
                QueueingHint::Skip,
            ),
        ];
        let hint = hint_for(EventResource::PersistentVolumeClaim);
        for (name, pod, added, want) in cases {
            assert_eq!(hint(&pod, None, Some(&added)).unwrap(), want, "{name}");
        }
    }

    /// Upstream's `TestCSILimitsDeletedVolumeAttachmentQHint`, plus the errors: an in-tree volume
    /// the translation rejects, and a deletion that is not a VolumeAttachment.
    #[test]
    fn deleted_attachment_hints() {
        use crate::volume::testing::with_volume;
        let ns1 = || PodBuilder::new("p").namespace("ns1").build();
        let ebs_and_claim = || with_claims(with_volume(ns1(), inline_ebs("test")), &["pvc1"]);
        let cases = [
            (
                "a pod has PVC when VolumeAttachment is deleting",
                with_claims(ns1(), &["pvc1"]),
                attachment("test.storage.gke.io", None),
                QueueingHint::Queue,
            ),
            (
                "a pod has an Inline Migratable volume (AWSEBSDriver) when VolumeAttachment (AWSEBSDriver) is deleting (match)",
                with_volume(ns1(), inline_ebs("test")),
                attachment("ebs.csi.aws.com", Some("ebs.csi.aws.com")),
                QueueingHint::Queue,
            ),
            (
                "a pod has an Inline Migratable volume (GCEPDDriver) when VolumeAttachment (AWSEBSDriver) is deleting (no match)",
                with_volume(ns1(), inline_gce("test")),
                attachment("ebs.csi.aws.com", Some("ebs.csi.aws.com")),
                QueueingHint::Skip,
            ),
            (
                "a pod has an Inline Migratable volume (AWSEBSDriver) and PVC when VolumeAttachment (AWSEBSDriver) is deleting",
                ebs_and_claim(),
                attachment("ebs.csi.aws.com", Some("ebs.csi.aws.com")),
                QueueingHint::Queue,
            ),
            (
                "a pod has an Inline Migratable volume (AWSEBSDriver) and PVC when VolumeAttachment (AWSEBSDriver)  is deleting",
                ebs_and_claim(),
                attachment("test.storage.gke.io", None),
                QueueingHint::Queue,
            ),
            (
                "a pod has no PVC when VolumeAttachment is deleting",
                ns1(),
                attachment("test.storage.gke.io", None),
                QueueingHint::Skip,
            ),
            (
                "an EBS id in URL form",
                with_volume(ns1(), inline_ebs("aws://us-east-1a/vol-123")),
                attachment("ebs.csi.aws.com", Some("ebs.csi.aws.com")),
                QueueingHint::Queue,
            ),
        ];
        let hint = hint_for(EventResource::VolumeAttachment);
        for (name, pod, deleted, want) in cases {
            assert_eq!(hint(&pod, Some(&deleted), None).unwrap(), want, "{name}");
        }
        let bad = with_volume(ns1(), inline_ebs("aws://us-east-1a/not-a-volume"));
        assert!(hint(&bad, Some(&attachment("ebs.csi.aws.com", None)), None).is_err());
        assert!(hint(&ns1(), Some(&EventObject::Other), None).is_err());
    }
}
