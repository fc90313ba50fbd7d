//! VolumeRestrictions: volumes that cannot be shared (upstream `volumerestrictions`).
//!
//! * **Disk conflicts** (Filter, per node): the same GCE PD, AWS EBS volume, RBD image or iSCSI
//!   target cannot be mounted by two pods on one node unless both mount it read-only (EBS: never).
//!   `node(s) had no available disk`, Unschedulable.
//! * **ReadWriteOncePod** (PreFilter counts, Filter rejects): a claim with that access mode may be
//!   used by one pod in the whole cluster. PreFilter counts the other pods using the pod's RWOP
//!   claims; any → every node is Unschedulable (not unresolvable: preempting the user frees it), and
//!   AddPod/RemovePod keep the count right for preemption dry runs.
//!
//! A pod with neither kind of volume returns Skip from PreFilter.

use std::{collections::BTreeSet, sync::Arc};

use k8s_openapi::api::core::v1::{Pod, Volume};
use unisched_cache::VolumeCache;
use unisched_framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, CycleState, EnqueueExtensions, EventResource,
    FilterPlugin, NodeInfo, Plugin, PodInfo, PreFilterPlugin, PreFilterResult, QueueingHint, Status,
};

use super::{
    ClaimVolumes, claim_event_hint, persistent_claim_names, pod_namespace, resolve_persistent_claims,
};
use crate::helper::event_pod_objects;

/// The plugin name.
pub const NAME: &str = "VolumeRestrictions";

/// Filter: a disk the pod mounts is mounted by a pod on the node.
pub const ERR_REASON_DISK_CONFLICT: &str = "node(s) had no available disk";
/// Filter: a ReadWriteOncePod claim of the pod is in use.
pub const ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT: &str = "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod";

const STATE_KEY: &str = "PreFilterVolumeRestrictions";
const READ_WRITE_ONCE_POD: &str = "ReadWriteOncePod";

#[derive(Clone, Debug, Default)]
struct PreFilterState {
    namespace: String,
    /// The pod's claims with ReadWriteOncePod access.
    rwop_claims: BTreeSet<String>,
    /// Other pods using one of them.
    conflicting_refs: usize,
}

impl PreFilterState {
    /// How many of `other`'s volumes are one of our RWOP claims.
    fn refs_of(&self, other: &Pod) -> usize {
        if pod_namespace(other) != self.namespace {
            return 0;
        }
        persistent_claim_names(other)
            .into_iter()
            .filter(|n| self.rwop_claims.contains(*n))
            .count()
    }
}

/// The plugin. See the module documentation.
#[derive(Clone, Debug, Default)]
pub struct VolumeRestrictions {
    volumes: Option<Arc<VolumeCache>>,
}

impl VolumeRestrictions {
    /// A plugin over the volume state (needed for ReadWriteOncePod; disk conflicts work without).
    pub fn new(volumes: Option<Arc<VolumeCache>>) -> Self {
        VolumeRestrictions { volumes }
    }
}

fn has_exclusive_disk(v: &Volume) -> bool {
    v.gce_persistent_disk.is_some()
        || v.aws_elastic_block_store.is_some()
        || v.rbd.is_some()
        || v.iscsi.is_some()
}

/// Whether two volumes are the same disk in a way that cannot be shared.
fn disks_conflict(a: &Volume, b: &Volume) -> bool {
    if let (Some(x), Some(y)) = (&a.gce_persistent_disk, &b.gce_persistent_disk) {
        return x.pd_name == y.pd_name && !(x.read_only == Some(true) && y.read_only == Some(true));
    }
    if let (Some(x), Some(y)) = (&a.aws_elastic_block_store, &b.aws_elastic_block_store) {
        return x.volume_id == y.volume_id;
    }
    if let (Some(x), Some(y)) = (&a.iscsi, &b.iscsi) {
        return x.iqn == y.iqn && !(x.read_only == Some(true) && y.read_only == Some(true));
    }
    if let (Some(x), Some(y)) = (&a.rbd, &b.rbd) {
        let pool = |p: &Option<String>| p.clone().unwrap_or_else(|| "rbd".into());
        let shared_monitor = x.monitors.iter().any(|m| y.monitors.contains(m));
        return shared_monitor
            && pool(&x.pool) == pool(&y.pool)
            && x.image == y.image
            && !(x.read_only == Some(true) && y.read_only == Some(true));
    }
    false
}

fn volumes(pod: &Pod) -> &[Volume] {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default()
}

/// Whether deleting `deleted` can help `pod`: it mounted a disk the pod conflicts with, or used one
/// of the pod's claims. As upstream, only a pod of the same namespace counts, for disks too: a
/// conflict with a pod of another namespace waits for another event or the unschedulable timeout.
fn frees_something_for(pod: &Pod, deleted: &Pod) -> bool {
    if pod_namespace(pod) != pod_namespace(deleted) {
        return false;
    }
    let mine = volumes(pod);
    if volumes(deleted)
        .iter()
        .any(|theirs| mine.iter().any(|v| disks_conflict(v, theirs)))
    {
        return true;
    }
    let theirs = persistent_claim_names(deleted);
    persistent_claim_names(pod).iter().any(|c| theirs.contains(c))
}

impl Plugin for VolumeRestrictions {
    fn name(&self) -> &str {
        NAME
    }
    unisched_framework::serves!(as_pre_filter, as_filter, as_enqueue_extensions);
}

impl PreFilterPlugin for VolumeRestrictions {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        let needs_disk_check = volumes(&pod.pod).iter().any(has_exclusive_disk);
        let mut s = PreFilterState {
            namespace: pod_namespace(&pod.pod).to_string(),
            ..PreFilterState::default()
        };
        // ReadWriteOncePod: the claims of the pod's `persistentVolumeClaim` volumes only, as
        // upstream (a generic ephemeral volume's claim is the pod's own).
        if let Some(cache) = &self.volumes
            && super::pod_has_claims(&pod.pod)
        {
            let claims = match resolve_persistent_claims(cache, &pod.pod) {
                Ok(c) => c,
                Err(e) => return (None, Status::unresolvable(e.to_string())),
            };
            s.rwop_claims = claims
                .into_iter()
                .filter(|(_, pvc)| {
                    pvc.spec
                        .as_ref()
                        .and_then(|sp| sp.access_modes.as_ref())
                        .is_some_and(|m| m.iter().any(|m| m == READ_WRITE_ONCE_POD))
                })
                .map(|(n, _)| n)
                .collect();
            if !s.rwop_claims.is_empty() {
                s.conflicting_refs = nodes
                    .iter()
                    .flat_map(|n| n.pods.iter())
                    .filter(|p| p.uid != pod.uid)
                    .map(|p| s.refs_of(&p.pod))
                    .sum();
            }
        }
        if !needs_disk_check && s.conflicting_refs == 0 {
            return (None, Status::skip());
        }
        state.write(STATE_KEY, s);
        (None, Status::success())
    }

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
        if let Ok(s) = state.read::<PreFilterState>(STATE_KEY) {
            let mut s = s.clone();
            s.conflicting_refs += s.refs_of(&pod_to_add.pod);
            state.write(STATE_KEY, s);
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
        if let Ok(s) = state.read::<PreFilterState>(STATE_KEY) {
            let mut s = s.clone();
            s.conflicting_refs = s.conflicting_refs.saturating_sub(s.refs_of(&pod_to_remove.pod));
            state.write(STATE_KEY, s);
        }
        Status::success()
    }
}

impl FilterPlugin for VolumeRestrictions {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let mine = volumes(&pod.pod);
        if mine.iter().any(has_exclusive_disk) {
            for other in &node.pods {
                for theirs in volumes(&other.pod) {
                    if mine.iter().any(|v| disks_conflict(v, theirs)) {
                        return Status::unschedulable(ERR_REASON_DISK_CONFLICT);
                    }
                }
            }
        }
        if state
            .read::<PreFilterState>(STATE_KEY)
            .is_ok_and(|s| s.conflicting_refs > 0)
        {
            return Status::unschedulable(ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT);
        }
        Status::success()
    }
}

impl EnqueueExtensions for VolumeRestrictions {
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            // A pod holding the disk or the RWOP claim went away.
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::AssignedPod,
                    ActionType::DELETE,
                    "AssignedPodDelete",
                ),
                |pod, old, new| {
                    let (deleted, _) = event_pod_objects(old, new)?;
                    Ok(match deleted {
                        Some(d) if frees_something_for(pod, d) => QueueingHint::Queue,
                        Some(_) => QueueingHint::Skip,
                        None => QueueingHint::Queue,
                    })
                },
            ),
            // Any new node may be free of the conflict (no hint, as upstream).
            ClusterEventWithHint::new(ClusterEvent::new(EventResource::Node, ActionType::ADD, "NodeAdd")),
            // The claim a `persistentVolumeClaim` volume of the pod names was created (its access
            // modes are immutable, so an update cannot help).
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::PersistentVolumeClaim,
                    ActionType::ADD,
                    "PersistentVolumeClaimAdd",
                ),
                |pod, old, new| claim_event_hint(ClaimVolumes::PersistentOnly, pod, old, new),
            ),
        ]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use k8s_openapi::api::core::v1::{
        AWSElasticBlockStoreVolumeSource, GCEPersistentDiskVolumeSource, ISCSIVolumeSource, RBDVolumeSource,
    };
    use unisched_framework::{Code, EventObject};

    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder};
    use crate::volume::testing::{PvcBuilder, with_claims, with_ephemeral_volume, with_volume};

    fn gce(pd: &str, ro: bool) -> Volume {
        Volume {
            name: format!("gce-{pd}"),
            gce_persistent_disk: Some(GCEPersistentDiskVolumeSource {
                pd_name: pd.into(),
                read_only: Some(ro),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn ebs(id: &str) -> Volume {
        Volume {
            name: format!("ebs-{id}"),
            aws_elastic_block_store: Some(AWSElasticBlockStoreVolumeSource {
                volume_id: id.into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn iscsi(iqn: &str, ro: bool) -> Volume {
        Volume {
            name: "iscsi".into(),
            iscsi: Some(ISCSIVolumeSource {
                iqn: iqn.into(),
                lun: 0,
                target_portal: "127.0.0.1:3260".into(),
                read_only: Some(ro),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn rbd(monitors: &[&str], image: &str) -> Volume {
        Volume {
            name: "rbd".into(),
            rbd: Some(RBDVolumeSource {
                monitors: monitors.iter().map(|m| (*m).to_string()).collect(),
                image: image.into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn disk_conflicts() {
        struct Case {
            name: &'static str,
            mine: Volume,
            existing: Option<Volume>,
            code: Code,
        }
        let cases = [
            Case {
                name: "empty node",
                mine: gce("a", false),
                existing: None,
                code: Code::Success,
            },
            Case {
                name: "same GCE PD read-write",
                mine: gce("a", false),
                existing: Some(gce("a", false)),
                code: Code::Unschedulable,
            },
            Case {
                name: "same GCE PD both read-only",
                mine: gce("a", true),
                existing: Some(gce("a", true)),
                code: Code::Success,
            },
            Case {
                name: "different GCE PD",
                mine: gce("a", false),
                existing: Some(gce("b", false)),
                code: Code::Success,
            },
            Case {
                name: "same EBS volume",
                mine: ebs("vol-1"),
                existing: Some(ebs("vol-1")),
                code: Code::Unschedulable,
            },
            Case {
                name: "same iSCSI target",
                mine: iscsi("iqn.a", false),
                existing: Some(iscsi("iqn.a", true)),
                code: Code::Unschedulable,
            },
            Case {
                name: "same RBD image on a shared monitor",
                mine: rbd(&["m1", "m2"], "img"),
                existing: Some(rbd(&["m2"], "img")),
                code: Code::Unschedulable,
            },
            Case {
                name: "same RBD image, other cluster",
                mine: rbd(&["m1"], "img"),
                existing: Some(rbd(&["m3"], "img")),
                code: Code::Success,
            },
        ];
        let pl = VolumeRestrictions::new(None);
        for case in cases {
            let pod = PodInfo::new(with_volume(PodBuilder::new("p").build(), case.mine));
            let existing = case.existing.map(|v| {
                PodInfo::new(with_volume(
                    PodBuilder::new("q").uid("q").node_name("n1").build(),
                    v,
                ))
            });
            let node = NodeBuilder::new("n1").info_with(existing);
            let mut state = CycleState::new();
            let (_, s) = pl.pre_filter(&mut state, &pod, &[]);
            assert_eq!(s.code(), Code::Success, "{}", case.name);
            let s = pl.filter(&state, &pod, &node);
            assert_eq!(s.code(), case.code, "{}", case.name);
            if case.code != Code::Success {
                assert_eq!(s.reasons(), [ERR_REASON_DISK_CONFLICT.to_string()]);
            }
        }
    }

    #[test]
    fn pod_delete_hint() {
        let pod = with_volume(
            with_claims(PodBuilder::new("p").build(), &["data"]),
            gce("a", false),
        );
        let cases = [
            (
                "same disk",
                with_volume(PodBuilder::new("q").build(), gce("a", false)),
                true,
            ),
            (
                "other disk",
                with_volume(PodBuilder::new("q").build(), gce("b", false)),
                false,
            ),
            (
                "same claim",
                with_claims(PodBuilder::new("q").build(), &["data"]),
                true,
            ),
            ("nothing shared", PodBuilder::new("q").build(), false),
        ];
        for (name, deleted, want) in cases {
            assert_eq!(frees_something_for(&pod, &deleted), want, "{name}");
        }
    }

    #[test]
    fn read_write_once_pod() {
        let cache = Arc::new(VolumeCache::new());
        cache.apply_pvc(
            PvcBuilder::new("solo", "local", "1Gi")
                .access_modes(&["ReadWriteOncePod"])
                .bound_to("pv1")
                .arc(),
        );
        cache.apply_pvc(PvcBuilder::new("shared", "local", "1Gi").bound_to("pv2").arc());
        let pl = VolumeRestrictions::new(Some(cache));
        let user = Arc::new(PodInfo::new(with_claims(
            PodBuilder::new("user").uid("user").node_name("n1").build(),
            &["solo"],
        )));
        let node = Arc::new(NodeBuilder::new("n1").info_with([(*user).clone()]));
        let empty = Arc::new(NodeBuilder::new("n2").info());
        let nodes = vec![node.clone(), empty.clone()];

        struct Case {
            name: &'static str,
            claims: Vec<&'static str>,
            pre_filter: Code,
            filter: Code,
        }
        let cases = [
            Case {
                name: "no claims",
                claims: vec![],
                pre_filter: Code::Skip,
                filter: Code::Success,
            },
            Case {
                name: "shared claim",
                claims: vec!["shared"],
                pre_filter: Code::Skip,
                filter: Code::Success,
            },
            Case {
                name: "RWOP claim in use",
                claims: vec!["solo"],
                pre_filter: Code::Success,
                filter: Code::Unschedulable,
            },
            Case {
                name: "missing claim",
                claims: vec!["nope"],
                pre_filter: Code::UnschedulableAndUnresolvable,
                filter: Code::Success,
            },
        ];
        for case in cases {
            let pod = PodInfo::new(with_claims(PodBuilder::new("p").uid("p").build(), &case.claims));
            let mut state = CycleState::new();
            let (_, s) = pl.pre_filter(&mut state, &pod, &nodes);
            assert_eq!(s.code(), case.pre_filter, "{}: {s:?}", case.name);
            if case.pre_filter != Code::Success {
                continue;
            }
            let s = pl.filter(&state, &pod, &empty);
            assert_eq!(s.code(), case.filter, "{}", case.name);
            if case.filter == Code::Unschedulable {
                assert_eq!(s.reasons(), [ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT.to_string()]);
                // Preempting the user frees the claim.
                pl.remove_pod(&mut state, &pod, &user, &node);
                assert!(pl.filter(&state, &pod, &empty).is_success());
                pl.add_pod(&mut state, &pod, &user, &node);
                assert_eq!(pl.filter(&state, &pod, &empty).code(), Code::Unschedulable);
            }
        }
        // A generic ephemeral volume's claim is not read here, as upstream (VolumeBinding waits for
        // it): no claim yet is no refusal from this plugin.
        let pod = PodInfo::new(with_ephemeral_volume(
            PodBuilder::new("p").uid("p").build(),
            "scratch",
        ));
        let mut state = CycleState::new();
        let (_, s) = pl.pre_filter(&mut state, &pod, &nodes);
        assert_eq!(
            s.code(),
            Code::Skip,
            "an ephemeral volume without its claim: {s:?}"
        );
    }

    /// The events are upstream 1.37.2's: a pod holding a disk or claim deleted (hinted), any new
    /// node (no hint), the claim created.
    #[test]
    fn registered_events_are_upstreams() {
        let events = VolumeRestrictions::new(None).events_to_register();
        let got: Vec<(EventResource, u32, bool)> = events
            .iter()
            .map(|e| (e.event.resource, e.event.action.0, e.hint.is_some()))
            .collect();
        assert_eq!(
            got,
            vec![
                (EventResource::AssignedPod, ActionType::DELETE.0, true),
                (EventResource::Node, ActionType::ADD.0, false),
                (EventResource::PersistentVolumeClaim, ActionType::ADD.0, true),
            ]
        );
    }

    /// Upstream's `Test_isSchedulableAfterAssignedPodDeleted`, through the registered hint, plus
    /// the namespace rule upstream applies first (no upstream case covers it).
    #[test]
    fn assigned_pod_deleted_upstream_cases() {
        fn rbd_pool(monitors: &[&str]) -> Volume {
            let mut v = rbd(monitors, "bar");
            if let Some(r) = v.rbd.as_mut() {
                r.pool = Some("foo".into());
                r.fs_type = Some("ext4".into());
            }
            v
        }
        let on = |v: Volume| with_volume(PodBuilder::new("q").build(), v);
        let claims = |name: &str, c: &str| with_claims(PodBuilder::new(name).build(), &[c]);
        let cases = [
            (
                "queue-new-object-gcedisk-conflict",
                on(gce("foo", false)),
                on(gce("foo", false)),
                QueueingHint::Queue,
            ),
            (
                "skip-new-object-gcedisk-no-conflict",
                on(gce("foo", false)),
                on(gce("bar", false)),
                QueueingHint::Skip,
            ),
            (
                "queue-new-object-awsdisk-conflict",
                on(ebs("foo")),
                on(ebs("foo")),
                QueueingHint::Queue,
            ),
            (
                "skip-new-object-awsdisk-no-conflict",
                on(ebs("foo")),
                on(ebs("bar")),
                QueueingHint::Skip,
            ),
            (
                "queue-new-object-rbddisk-conflict",
                on(rbd_pool(&["a", "b"])),
                on(rbd_pool(&["a", "b"])),
                QueueingHint::Queue,
            ),
            (
                "skip-new-object-rbddisk-no-conflict",
                on(rbd_pool(&["a", "b"])),
                on(rbd_pool(&["c", "d"])),
                QueueingHint::Skip,
            ),
            (
                "queue-new-object-iscsidisk-conflict",
                on(iscsi("iqn.2016-12.server:storage.target01", false)),
                on(iscsi("iqn.2016-12.server:storage.target01", false)),
                QueueingHint::Queue,
            ),
            (
                "skip-new-object-iscsidisk-no-conflict",
                on(iscsi("iqn.2016-12.server:storage.target01", false)),
                on(iscsi("iqn.2017-12.server:storage.target01", false)),
                QueueingHint::Skip,
            ),
            (
                "queue-has-same-claim",
                claims("pod1", "claim-rwop"),
                claims("pod2", "claim-rwop"),
                QueueingHint::Queue,
            ),
            (
                "skip-no-same-claim",
                claims("pod1", "claim-1-rwop"),
                claims("pod2", "claim-2-rwop"),
                QueueingHint::Skip,
            ),
            (
                "skip on a conflicting disk in another namespace",
                on(gce("foo", false)),
                with_volume(PodBuilder::new("q").namespace("other").build(), gce("foo", false)),
                QueueingHint::Skip,
            ),
        ];
        let hint = VolumeRestrictions::new(None).events_to_register()[0]
            .hint
            .clone()
            .unwrap();
        for (name, pod, deleted, want) in cases {
            let old = EventObject::pod(deleted);
            assert_eq!(hint(&pod, Some(&old), None).unwrap(), want, "{name}");
        }
    }

    /// Upstream's `Test_isSchedulableAfterPersistentVolumeClaimChange`, through the registered
    /// hint, plus a generic ephemeral volume's claim (upstream does not look at those).
    #[test]
    fn claim_change_upstream_cases() {
        let rwx = |name: &str| {
            EventObject::PersistentVolumeClaim(Arc::new(
                PvcBuilder::new(name, "", "1Gi")
                    .access_modes(&["ReadWriteMany"])
                    .build(),
            ))
        };
        let one = with_claims(
            PodBuilder::new("pod-with-one-pvc").node_name("node-1").build(),
            &["claim-with-rwx-1"],
        );
        let two = with_claims(
            PodBuilder::new("pod-with-two-pvcs").node_name("node-1").build(),
            &["claim-with-rwx-1", "claim-with-rwx-2"],
        );
        let other_ns = with_claims(
            PodBuilder::new("pod-with-one-pvc")
                .namespace("kube-system")
                .build(),
            &["claim-with-rwx-1"],
        );
        let ephemeral = with_ephemeral_volume(PodBuilder::new("p").build(), "scratch");
        let cases = [
            (
                "queue-new-object-pvc-belong-pod",
                &two,
                rwx("claim-with-rwx-1"),
                QueueingHint::Queue,
            ),
            (
                "skip-new-object-unused",
                &one,
                rwx("claim-with-rwx-2"),
                QueueingHint::Skip,
            ),
            (
                "skip-new-object-namespace-not-equal-pod",
                &other_ns,
                rwx("claim-with-rwx-1"),
                QueueingHint::Skip,
            ),
            (
                "skip on the claim of a generic ephemeral volume",
                &ephemeral,
                rwx("p-scratch"),
                QueueingHint::Skip,
            ),
        ];
        let hint = VolumeRestrictions::new(None).events_to_register()[2]
            .hint
            .clone()
            .unwrap();
        for (name, pod, claim, want) in cases {
            assert_eq!(hint(pod, None, Some(&claim)).unwrap(), want, "{name}");
        }
        assert!(
            hint(&one, None, Some(&EventObject::Other)).is_err(),
            "a non-claim object is an error"
        );
    }
}
