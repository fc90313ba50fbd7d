//! Storage capacity in VolumeBinding: whether a node can get a new volume of a claim's size, and
//! how full the storage it would come from becomes (upstream's capacity check and scorer).
//!
//! A CSI driver that opts in (`storageCapacity: true` in its CSIDriver object) publishes
//! CSIStorageCapacity objects: per storage class and per set of nodes (a label selector,
//! `nodeTopology`), how much it can still create there. Dynamic provisioning of a claim of such a
//! driver on a node needs one of them that selects the node, names the claim's class and has room
//! for the request (`maximumVolumeSize` when given, it is the sharper bound, else `capacity`);
//! otherwise the node gets [`ERR_REASON_NOT_ENOUGH_SPACE`]. A driver without a CSIDriver object,
//! or one that does not opt in, and a claim without a storage request, are not checked: nothing
//! says how much room there is, so there is nothing to refuse on.
//!
//! With `StorageCapacityScoring`, nodes are scored by the utilisation the pod's volumes would
//! reach: for each storage class, requested over available (the PVs picked for static bindings,
//! or the capacity found for the claims to provision), through the `shape` of
//! `VolumeBindingArgs`; the node's score is the mean over classes. The default shape prefers the
//! node with the most free storage.
//!
//! Capacities are read in `namespace/name` order, so that when several select a node the same
//! one is used for scoring every time (upstream takes its lister's order, which is not fixed).

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::api::{
    core::v1::Node,
    storage::v1::{CSIStorageCapacity, StorageClass},
};
use unisched_cache::VolumeCache;
use unisched_framework::{EventObject, EventSide, MAX_NODE_SCORE, QueueingHint, QueueingHintError};
use unisched_resource::Quantity;

use crate::{
    label_selector::{NO_LABELS, api_selector_matches},
    noderesources::UtilizationShapePoint,
    resource_scoring::{MAX_CUSTOM_PRIORITY_SCORE, broken_linear},
};

/// Filter: no CSIStorageCapacity selecting the node has room for a claim to provision.
pub const ERR_REASON_NOT_ENOUGH_SPACE: &str = "node(s) did not have enough free storage";

/// Utilisation is scored in percent.
const MAX_UTILIZATION: i64 = 100;

/// What the capacity check says about provisioning one claim on one node.
#[derive(Clone, Debug)]
pub(super) enum CapacityVerdict {
    /// The driver does not publish capacity, or the claim requests no size: not checked.
    NotTracked,
    /// This capacity object selects the node and has room.
    Enough(Arc<CSIStorageCapacity>),
    /// The driver publishes capacity and none of it on this node has room.
    NotEnough,
}

/// Whole bytes of a quantity, rounded up as upstream's `Quantity.Value`.
pub(super) fn whole_bytes(nanos: i128) -> i128 {
    const NANOS_PER_UNIT: i128 = 1_000_000_000;
    nanos.div_euclid(NANOS_PER_UNIT) + i128::from(nanos.rem_euclid(NANOS_PER_UNIT) != 0)
}

fn quantity_bytes(q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity) -> Option<i128> {
    Quantity::from_api(q).ok().map(|q| whole_bytes(q.nanos()))
}

/// The largest volume a capacity object admits: `maximumVolumeSize` when given, else `capacity`;
/// `None` when it gives neither (then it admits nothing).
pub(super) fn volume_limit(capacity: &CSIStorageCapacity) -> Option<i128> {
    capacity
        .maximum_volume_size
        .as_ref()
        .or(capacity.capacity.as_ref())
        .and_then(quantity_bytes)
}

/// The capacity a capacity object reports (what scoring divides by); 0 when it reports none.
pub(super) fn reported_capacity(capacity: &CSIStorageCapacity) -> i128 {
    capacity.capacity.as_ref().and_then(quantity_bytes).unwrap_or(0)
}

/// Whether the capacity object's `nodeTopology` selects the node (no topology: no node).
fn selects_node(capacity: &CSIStorageCapacity, node: &Node) -> bool {
    let labels = node.metadata.labels.as_ref().unwrap_or(&NO_LABELS);
    api_selector_matches(capacity.node_topology.as_ref(), labels)
}

/// Checks that `node` can get a new volume of `request_bytes` (None: the claim gives no size)
/// from the class' provisioner.
pub(super) fn check(
    volumes: &VolumeCache,
    class: &StorageClass,
    request_bytes: Option<i128>,
    node: &Node,
) -> CapacityVerdict {
    let Some(request) = request_bytes else {
        return CapacityVerdict::NotTracked;
    };
    let tracked = volumes
        .csi_driver(&class.provisioner)
        .is_some_and(|d| d.spec.storage_capacity == Some(true));
    if !tracked {
        return CapacityVerdict::NotTracked;
    }
    let class_name = class.metadata.name.as_deref().unwrap_or_default();
    volumes
        .capacities_of_class(class_name)
        .into_iter()
        .find(|c| volume_limit(c).is_some_and(|limit| limit >= request) && selects_node(c, node))
        .map_or(CapacityVerdict::NotEnough, CapacityVerdict::Enough)
}

/// Storage requested from one class on a node, and what is available for it there, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct ClassUsage {
    /// What the pod's claims of the class request.
    pub(super) requested: i128,
    /// The room they would come from.
    pub(super) capacity: i128,
}

/// The capacity scorer: the `shape` of `VolumeBindingArgs`, its scores scaled to node scores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct CapacityScorer {
    /// (utilisation in percent, node score), increasing utilisation.
    shape: Vec<(i64, i64)>,
}

impl CapacityScorer {
    /// A scorer over a validated shape.
    pub(super) fn new(shape: &[UtilizationShapePoint]) -> Self {
        let scale = MAX_NODE_SCORE / MAX_CUSTOM_PRIORITY_SCORE;
        CapacityScorer {
            shape: shape
                .iter()
                .map(|p| (i64::from(p.utilization), i64::from(p.score) * scale))
                .collect(),
        }
    }

    fn class_score(&self, usage: ClassUsage) -> i64 {
        if usage.capacity == 0 || usage.requested > usage.capacity {
            return broken_linear(&self.shape, MAX_UTILIZATION);
        }
        let percent = usage.requested * i128::from(MAX_UTILIZATION) / usage.capacity;
        broken_linear(&self.shape, i64::try_from(percent).unwrap_or(MAX_UTILIZATION))
    }

    /// The node's score: the mean of the classes' scores, rounded (0 without classes).
    pub(super) fn score(&self, classes: &BTreeMap<String, ClassUsage>) -> i64 {
        if classes.is_empty() {
            return 0;
        }
        let sum: i64 = classes.values().map(|u| self.class_score(*u)).sum();
        let count = i64::try_from(classes.len()).unwrap_or(i64::MAX);
        // Round half away from zero, as Go's math.Round on a non-negative mean.
        (2 * sum + count) / (2 * count)
    }
}

/// The default shape with the gate on: an empty class scores the most, a full one nothing.
pub(super) fn default_shape() -> Vec<UtilizationShapePoint> {
    vec![
        UtilizationShapePoint {
            utilization: 0,
            score: 10,
        },
        UtilizationShapePoint {
            utilization: 100,
            score: 0,
        },
    ]
}

/// A CSIStorageCapacity event helps when it is new, or when its volume limit grew (upstream
/// `isSchedulableAfterCSIStorageCapacityChange`; its class and topology cannot change).
pub(super) fn capacity_hint(
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, QueueingHintError> {
    let Some(EventObject::CsiStorageCapacity(new)) = new else {
        return Err(QueueingHintError::NotObject {
            expected: "CSIStorageCapacity",
            side: EventSide::New,
        });
    };
    let old = match old {
        None => return Ok(QueueingHint::Queue),
        Some(EventObject::CsiStorageCapacity(old)) => old,
        Some(_) => {
            return Err(QueueingHintError::NotObject {
                expected: "CSIStorageCapacity",
                side: EventSide::Old,
            });
        }
    };
    let grew = match (volume_limit(old), volume_limit(new)) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(before), Some(after)) => after > before,
    };
    Ok(if grew {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    })
}

/// A CSIDriver update helps a pod with an inline CSI volume of that driver when the driver stops
/// publishing capacity (upstream `isSchedulableAfterCSIDriverChange`, which looks at the pod's
/// inline CSI volumes only).
pub(super) fn driver_hint(
    pod: &k8s_openapi::api::core::v1::Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, QueueingHintError> {
    let Some(EventObject::CsiDriver(new)) = new else {
        return Err(QueueingHintError::NotObject {
            expected: "CSIDriver",
            side: EventSide::New,
        });
    };
    let Some(EventObject::CsiDriver(old)) = old else {
        return Err(QueueingHintError::NotObject {
            expected: "CSIDriver",
            side: EventSide::Old,
        });
    };
    let name = new.metadata.name.as_deref().unwrap_or_default();
    let uses_driver = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .any(|v| v.csi.as_ref().is_some_and(|c| c.driver == name));
    let stopped_tracking = old.spec.storage_capacity == Some(true) && new.spec.storage_capacity != Some(true);
    Ok(if uses_driver && stopped_tracking {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use k8s_openapi::api::core::v1::{CSIVolumeSource, Volume};

    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder};
    use crate::volume::testing::{csi_driver, storage_capacity, storage_class, with_volume};

    const PROVISIONER: &str = "csi.example.com";
    const CLASS: &str = "waitClassWithProvisioner";
    const OTHER_CLASS: &str = "waitClass";
    const NODE_LABEL: &str = "kubernetes.io/hostname";

    fn shape(points: &[(i32, i32)]) -> Vec<UtilizationShapePoint> {
        points
            .iter()
            .map(|&(utilization, score)| UtilizationShapePoint { utilization, score })
            .collect()
    }

    fn usage(classes: &[(&str, i128, i128)]) -> BTreeMap<String, ClassUsage> {
        classes
            .iter()
            .map(|&(class, requested, capacity)| (class.to_string(), ClassUsage { requested, capacity }))
            .collect()
    }

    /// Upstream `TestScore` (its custom shape is given there in node scores, here in the
    /// configuration's 0..=10 scores).
    #[test]
    fn scorer_table() {
        let default = CapacityScorer::new(&default_shape());
        let custom = CapacityScorer::new(&shape(&[(50, 0), (80, 3), (100, 5)]));
        let cases: [(&CapacityScorer, &[(&str, i128, i128)], i64); 18] = [
            (&default, &[("hdd", 0, 100)], 100),
            (&default, &[("hdd", 30, 100)], 70),
            (&default, &[("hdd", 50, 100)], 50),
            (&default, &[("hdd", 100, 100)], 0),
            (&default, &[("hdd", 0, 100), ("ssd", 0, 100)], 100),
            (&default, &[("hdd", 0, 100), ("ssd", 30, 100)], 85),
            (&default, &[("hdd", 30, 100), ("ssd", 30, 100)], 70),
            (&default, &[("hdd", 30, 100), ("ssd", 60, 100)], 55),
            (&default, &[("hdd", 50, 100), ("ssd", 50, 100)], 50),
            (&default, &[("hdd", 50, 100), ("ssd", 100, 100)], 25),
            (&default, &[("hdd", 100, 100), ("ssd", 100, 100)], 0),
            (&custom, &[("hdd", 0, 100), ("ssd", 0, 100)], 0),
            (&custom, &[("hdd", 0, 100), ("ssd", 30, 100)], 0),
            (&custom, &[("hdd", 30, 100), ("ssd", 30, 100)], 0),
            (&custom, &[("hdd", 30, 100), ("ssd", 60, 100)], 5),
            (&custom, &[("hdd", 50, 100), ("ssd", 100, 100)], 25),
            (&custom, &[("hdd", 90, 100), ("ssd", 90, 100)], 40),
            (&custom, &[("hdd", 100, 100), ("ssd", 100, 100)], 50),
        ];
        for (i, (scorer, classes, want)) in cases.iter().enumerate() {
            assert_eq!(scorer.score(&usage(classes)), *want, "case {i}: {classes:?}");
        }
    }

    #[test]
    fn scorer_edges() {
        let default = CapacityScorer::new(&default_shape());
        assert_eq!(default.score(&BTreeMap::new()), 0, "no classes");
        assert_eq!(default.score(&usage(&[("hdd", 1, 0)])), 0, "no capacity: full");
        assert_eq!(
            default.score(&usage(&[("hdd", 200, 100)])),
            0,
            "over capacity: full"
        );
    }

    #[test]
    fn whole_bytes_round_up() {
        assert_eq!(whole_bytes(0), 0);
        assert_eq!(whole_bytes(1), 1);
        assert_eq!(whole_bytes(1_000_000_000), 1);
        assert_eq!(whole_bytes(1_500_000_000), 2);
    }

    /// Upstream `TestCapacity`, with and without the driver opting in.
    #[test]
    fn check_table() {
        type Capacities = Vec<Arc<CSIStorageCapacity>>;
        let network_attached = || storage_capacity("net", CLASS, None, Some("1Gi"), None);
        let on_node = |name: &str, node: &str, cap: Option<&str>, max: Option<&str>| {
            storage_capacity(name, CLASS, Some((NODE_LABEL, node)), cap, max)
        };
        // (name, capacities, the capacity expected to be found; None: not enough).
        let cases: [(&str, Capacities, Option<&str>); 11] = [
            ("network-attached", vec![network_attached()], Some("net")),
            (
                "local-storage",
                vec![on_node("node1", "node1", Some("1Gi"), None)],
                Some("node1"),
            ),
            (
                "multiple: the first that fits, in namespace/name order",
                vec![
                    on_node("a-node2", "node2", Some("1Gi"), None),
                    on_node("b-node1", "node1", Some("1Gi"), None),
                    network_attached(),
                ],
                Some("b-node1"),
            ),
            ("no-storage", vec![], None),
            (
                "wrong-node",
                vec![on_node("net", "node2", Some("1Gi"), None)],
                None,
            ),
            (
                "wrong-storage-class",
                vec![storage_capacity(
                    "net",
                    OTHER_CLASS,
                    Some((NODE_LABEL, "node1")),
                    Some("1Gi"),
                    None,
                )],
                None,
            ),
            (
                "insufficient-storage",
                vec![on_node("net", "node1", Some("1Mi"), None)],
                None,
            ),
            (
                "insufficient-volume-size",
                vec![on_node("net", "node1", Some("1Gi"), Some("1Mi"))],
                None,
            ),
            (
                "zero-storage",
                vec![on_node("net", "node1", Some("0Mi"), None)],
                None,
            ),
            (
                "zero-volume-size",
                vec![on_node("net", "node1", None, Some("0Mi"))],
                None,
            ),
            ("nil-storage", vec![on_node("net", "node1", None, None)], None),
        ];
        let class = storage_class(CLASS, PROVISIONER, "WaitForFirstConsumer", None);
        let node = NodeBuilder::new("node1").label(NODE_LABEL, "node1").build();
        for opt_in in [true, false] {
            for (name, capacities, want) in &cases {
                let volumes = VolumeCache::new();
                volumes.apply_csi_driver(csi_driver(PROVISIONER, opt_in, false));
                for c in capacities {
                    volumes.apply_capacity(c.clone());
                }
                let got = check(&volumes, &class, Some(1 << 30), &node);
                match (opt_in, want, got) {
                    (false, _, CapacityVerdict::NotTracked) | (true, None, CapacityVerdict::NotEnough) => {}
                    (true, Some(want), CapacityVerdict::Enough(found)) => {
                        assert_eq!(found.metadata.name.as_deref(), Some(*want), "{name}");
                    }
                    (_, _, got) => panic!("{name} (opt in: {opt_in}): {got:?}"),
                }
            }
        }
    }

    #[test]
    fn unchecked_without_a_driver_object_or_a_request() {
        let class = storage_class(CLASS, PROVISIONER, "WaitForFirstConsumer", None);
        let node = NodeBuilder::new("node1").label(NODE_LABEL, "node1").build();
        let volumes = VolumeCache::new();
        assert!(matches!(
            check(&volumes, &class, Some(1), &node),
            CapacityVerdict::NotTracked
        ));
        volumes.apply_csi_driver(csi_driver(PROVISIONER, true, false));
        assert!(matches!(
            check(&volumes, &class, None, &node),
            CapacityVerdict::NotTracked
        ));
        assert!(matches!(
            check(&volumes, &class, Some(1), &node),
            CapacityVerdict::NotEnough
        ));
    }

    #[test]
    fn a_capacity_without_topology_selects_no_node() {
        let class = storage_class(CLASS, PROVISIONER, "WaitForFirstConsumer", None);
        let node = NodeBuilder::new("node1").label(NODE_LABEL, "node1").build();
        let volumes = VolumeCache::new();
        volumes.apply_csi_driver(csi_driver(PROVISIONER, true, false));
        let mut c = (*storage_capacity("net", CLASS, None, Some("1Gi"), None)).clone();
        c.node_topology = None;
        volumes.apply_capacity(Arc::new(c));
        assert!(matches!(
            check(&volumes, &class, Some(1), &node),
            CapacityVerdict::NotEnough
        ));
    }

    fn capacity_object(capacity: Option<i64>, maximum: Option<i64>) -> EventObject {
        let q = |v: i64| v.to_string();
        EventObject::CsiStorageCapacity(storage_capacity(
            "cap",
            CLASS,
            None,
            capacity.map(q).as_deref(),
            maximum.map(q).as_deref(),
        ))
    }

    /// Upstream `TestIsSchedulableAfterCSIStorageCapacityChange`.
    #[test]
    fn capacity_hints() {
        use QueueingHint::{Queue, Skip};
        // (capacity, maximumVolumeSize) before and after.
        type Limits = (Option<i64>, Option<i64>);
        let cases: [(&str, Option<Limits>, Limits, QueueingHint); 11] = [
            ("created", None, (None, None), Queue),
            ("capacity set", Some((None, None)), (Some(100), None), Queue),
            ("maximum set", Some((None, None)), (None, Some(100)), Queue),
            ("capacity grew", Some((Some(50), None)), (Some(100), None), Queue),
            (
                "maximum unset",
                Some((Some(100), Some(50))),
                (Some(100), None),
                Queue,
            ),
            (
                "maximum grew",
                Some((Some(100), Some(50))),
                (Some(100), Some(60)),
                Queue,
            ),
            (
                "unchanged",
                Some((Some(100), Some(50))),
                (Some(100), Some(50)),
                Skip,
            ),
            ("capacity equal", Some((Some(100), None)), (Some(100), None), Skip),
            (
                "maximum unset, equal",
                Some((Some(100), Some(50))),
                (Some(50), None),
                Skip,
            ),
            ("capacity shrank", Some((Some(100), None)), (Some(90), None), Skip),
            ("maximum shrank", Some((None, Some(100))), (None, Some(90)), Skip),
        ];
        for (name, old, (cap, max), want) in cases {
            let old = old.map(|(c, m)| capacity_object(c, m));
            let new = capacity_object(cap, max);
            assert_eq!(capacity_hint(old.as_ref(), Some(&new)).unwrap(), want, "{name}");
        }
        assert!(
            capacity_hint(None, Some(&EventObject::Other)).is_err(),
            "not a capacity"
        );
    }

    fn pod_with_csi(driver: Option<&str>) -> k8s_openapi::api::core::v1::Pod {
        let pod = PodBuilder::new("pod-a").build();
        match driver {
            None => pod,
            Some(d) => with_volume(
                pod,
                Volume {
                    name: "inline".into(),
                    csi: Some(CSIVolumeSource {
                        driver: d.into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ),
        }
    }

    fn driver_object(name: &str, storage_capacity: Option<bool>) -> EventObject {
        let mut d = (*csi_driver(name, false, false)).clone();
        d.spec.storage_capacity = storage_capacity;
        EventObject::CsiDriver(Arc::new(d))
    }

    /// Upstream `TestIsSchedulableAfterCSIDriverChange`.
    #[test]
    fn driver_hints() {
        use QueueingHint::{Queue, Skip};
        let cases = [
            (
                "pod has no CSI volume",
                None,
                "test1",
                Some(true),
                Some(false),
                Skip,
            ),
            (
                "other driver",
                Some("test1"),
                "test2",
                Some(true),
                Some(false),
                Skip,
            ),
            ("was unset", Some("test1"), "test1", None, None, Skip),
            (
                "was false",
                Some("test1"),
                "test1",
                Some(false),
                Some(false),
                Skip,
            ),
            ("becomes unset", Some("test1"), "test1", Some(true), None, Queue),
            ("stays true", Some("test1"), "test1", Some(true), Some(true), Skip),
            (
                "becomes false",
                Some("test1"),
                "test1",
                Some(true),
                Some(false),
                Queue,
            ),
        ];
        for (name, pod_driver, driver, old, new, want) in cases {
            let pod = pod_with_csi(pod_driver);
            let (old, new) = (driver_object(driver, old), driver_object(driver, new));
            assert_eq!(driver_hint(&pod, Some(&old), Some(&new)).unwrap(), want, "{name}");
        }
        let pod = pod_with_csi(Some("test1"));
        assert!(
            driver_hint(&pod, Some(&EventObject::Other), Some(&EventObject::Other)).is_err(),
            "unexpected objects"
        );
    }
}

/// VolumeBinding's Filter and Score with storage capacity, through the plugin.
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod plugin_tests {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use unisched_framework::{
        Code, CycleState, FilterPlugin, NodeInfo, PodInfo, PreFilterPlugin, PreScorePlugin, ScorePlugin,
    };

    use super::*;
    use crate::{
        VolumeBinding, VolumeBindingArgs,
        helper::PluginArgsError,
        testing::{NodeBuilder, PodBuilder},
        volume::{
            NO_PROVISIONER,
            reason::ERR_REASON_BIND_CONFLICT,
            testing::{PvBuilder, PvcBuilder, csi_driver, storage_capacity, storage_class, with_claims},
        },
    };

    const DRIVER: &str = "capacity.csi.example.com";
    const ZONE: &str = "topology.kubernetes.io/zone";
    const HOST: &str = "kubernetes.io/hostname";

    /// n1 in zone a with 10Gi, n2 in zone b with 100Gi but volumes of at most 1Gi, n3 (zone b)
    /// without capacity; class `tracked` everywhere, `zoned` in zone a only, `local` by hand.
    fn cache() -> Arc<VolumeCache> {
        let c = Arc::new(VolumeCache::new());
        c.apply_csi_driver(csi_driver(DRIVER, true, false));
        c.apply_class(storage_class("tracked", DRIVER, "WaitForFirstConsumer", None));
        c.apply_class(storage_class(
            "zoned",
            DRIVER,
            "WaitForFirstConsumer",
            Some((ZONE, &["a"])),
        ));
        c.apply_class(storage_class(
            "local",
            NO_PROVISIONER,
            "WaitForFirstConsumer",
            None,
        ));
        c.apply_capacity(storage_capacity(
            "n1",
            "tracked",
            Some((HOST, "n1")),
            Some("10Gi"),
            None,
        ));
        c.apply_capacity(storage_capacity(
            "n1-zoned",
            "zoned",
            Some((HOST, "n1")),
            Some("10Gi"),
            None,
        ));
        c.apply_capacity(storage_capacity(
            "n2",
            "tracked",
            Some((HOST, "n2")),
            Some("100Gi"),
            Some("1Gi"),
        ));
        c
    }

    fn nodes() -> Vec<NodeInfo> {
        [("n1", "a"), ("n2", "b"), ("n3", "b")]
            .into_iter()
            .map(|(n, zone)| NodeBuilder::new(n).label(HOST, n).label(ZONE, zone).info())
            .collect()
    }

    fn plugin(c: &Arc<VolumeCache>, storage_capacity_scoring: bool) -> VolumeBinding {
        let args =
            VolumeBindingArgs::from_value_with(&serde_json::Value::Null, storage_capacity_scoring).unwrap();
        VolumeBinding::new(&args, Some(c.clone()), None)
    }

    fn selected(mut pvc: PersistentVolumeClaim, node: &str) -> PersistentVolumeClaim {
        pvc.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(crate::volume::ANNOTATION_SELECTED_NODE.into(), node.into());
        pvc
    }

    #[test]
    fn filter_table() {
        let fits: Vec<&str> = vec![];
        let space = vec![ERR_REASON_NOT_ENOUGH_SPACE];
        let bind = vec![ERR_REASON_BIND_CONFLICT];
        let cases = [
            (
                "capacity on n1 only; n2's volumes are too small",
                vec![PvcBuilder::new("data", "tracked", "5Gi").build()],
                [fits.clone(), space.clone(), space.clone()],
            ),
            (
                "a small volume fits n2's maximum volume size",
                vec![PvcBuilder::new("data", "tracked", "1Gi").build()],
                [fits.clone(), fits.clone(), space.clone()],
            ),
            (
                "topology is checked before capacity",
                vec![PvcBuilder::new("data", "zoned", "5Gi").build()],
                [fits.clone(), bind.clone(), bind.clone()],
            ),
            (
                "the first claim that cannot be provisioned decides the reason",
                vec![
                    PvcBuilder::new("a", "zoned", "5Gi").build(),
                    PvcBuilder::new("b", "tracked", "50Gi").build(),
                ],
                [space.clone(), bind.clone(), bind.clone()],
            ),
            (
                "a claim provisioned for another node rules the node out first",
                vec![
                    PvcBuilder::new("a", "tracked", "50Gi").build(),
                    selected(PvcBuilder::new("b", "tracked", "1Gi").build(), "n9"),
                ],
                [bind.clone(), bind.clone(), bind.clone()],
            ),
        ];
        for (name, pvcs, want) in cases {
            let c = cache();
            let claims: Vec<String> = pvcs.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
            for p in pvcs {
                c.apply_pvc(Arc::new(p));
            }
            let claims: Vec<&str> = claims.iter().map(String::as_str).collect();
            let pl = plugin(&c, true);
            let pod = PodInfo::new(with_claims(PodBuilder::new("p").build(), &claims));
            let mut state = CycleState::new();
            assert_eq!(
                pl.pre_filter(&mut state, &pod, &[]).1.code(),
                Code::Success,
                "{name}"
            );
            for (node, want) in nodes().iter().zip(want) {
                let s = pl.filter(&state, &pod, node);
                if want.is_empty() {
                    assert_eq!(s.code(), Code::Success, "{name} on {}: {s:?}", node.name());
                } else {
                    assert_eq!(
                        s.code(),
                        Code::UnschedulableAndUnresolvable,
                        "{name} on {}",
                        node.name()
                    );
                    let want: Vec<String> = want.iter().map(ToString::to_string).collect();
                    assert_eq!(s.reasons(), want, "{name} on {}", node.name());
                }
            }
        }
    }

    #[test]
    fn without_capacity_tracking_nothing_is_refused() {
        let c = cache();
        c.apply_csi_driver(csi_driver(DRIVER, false, false));
        c.apply_pvc(PvcBuilder::new("data", "tracked", "500Gi").arc());
        let pl = plugin(&c, true);
        let pod = PodInfo::new(with_claims(PodBuilder::new("p").build(), &["data"]));
        let mut state = CycleState::new();
        pl.pre_filter(&mut state, &pod, &[]);
        for node in nodes() {
            assert_eq!(
                pl.filter(&state, &pod, &node).code(),
                Code::Success,
                "{}",
                node.name()
            );
        }
    }

    /// Scores of the feasible nodes, after PreScore (None: PreScore skipped).
    fn scores(pl: &VolumeBinding, claims: &[&str], nodes: &[NodeInfo]) -> Option<Vec<i64>> {
        let pod = PodInfo::new(with_claims(PodBuilder::new("p").build(), claims));
        let mut state = CycleState::new();
        pl.pre_filter(&mut state, &pod, &[]);
        let feasible: Vec<Arc<NodeInfo>> = nodes
            .iter()
            .filter(|n| pl.filter(&state, &pod, n).code() == Code::Success)
            .cloned()
            .map(Arc::new)
            .collect();
        if pl.pre_score(&mut state, &pod, &feasible).code() == Code::Skip {
            return None;
        }
        Some(
            feasible
                .iter()
                .map(|n| pl.score(&state, &pod, n).unwrap())
                .collect(),
        )
    }

    #[test]
    fn provisioned_claims_prefer_the_emptiest_storage() {
        let c = cache();
        // n2 now takes volumes of any size, and has ten times n1's room.
        c.apply_capacity(storage_capacity(
            "n2",
            "tracked",
            Some((HOST, "n2")),
            Some("100Gi"),
            None,
        ));
        c.apply_pvc(PvcBuilder::new("data", "tracked", "5Gi").arc());
        c.apply_pvc(PvcBuilder::new("more", "tracked", "5Gi").arc());
        let pl = plugin(&c, true);
        let two = &nodes()[..2];
        assert_eq!(scores(&pl, &["data"], two), Some(vec![50, 95]));
        // Both claims come from the same pool: its capacity counts once, the requests add up.
        assert_eq!(scores(&pl, &["data", "more"], two), Some(vec![0, 90]));
        assert_eq!(
            scores(&plugin(&c, false), &["data"], two),
            None,
            "gate off: no scoring"
        );
    }

    #[test]
    fn static_bindings_score_by_the_chosen_volumes() {
        let c = cache();
        c.apply_pv(
            PvBuilder::new("pv-n1", "local", "10Gi")
                .node_affinity(HOST, &["n1"])
                .arc(),
        );
        c.apply_pv(
            PvBuilder::new("pv-n2", "local", "100Gi")
                .node_affinity(HOST, &["n2"])
                .arc(),
        );
        c.apply_pvc(PvcBuilder::new("data", "local", "5Gi").arc());
        let pl = plugin(&c, true);
        assert_eq!(scores(&pl, &["data"], &nodes()), Some(vec![50, 95]));
    }

    #[test]
    fn args_shape_follows_the_gate() {
        let on = VolumeBindingArgs::from_value_with(&serde_json::Value::Null, true).unwrap();
        assert_eq!(on.shape, Some(default_shape()), "defaulted with the gate on");
        let off = VolumeBindingArgs::from_value_with(&serde_json::Value::Null, false).unwrap();
        assert_eq!(off.shape, None);
        let shaped =
            serde_json::json!({"shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]});
        let Err(PluginArgsError::Invalid(errs)) = VolumeBindingArgs::from_value_with(&shaped, false) else {
            panic!("a shape with the gate off is refused");
        };
        assert_eq!(
            errs,
            [
                "shape: Invalid value: []config.UtilizationShapePoint{config.UtilizationShapePoint{Utilization:0, Score:0}, \
              config.UtilizationShapePoint{Utilization:100, Score:10}}: unexpected field `shape`, remove it or turn \
              on the feature gate StorageCapacityScoring"
            ]
        );
        let kept = VolumeBindingArgs::from_value_with(&shaped, true).unwrap();
        assert_eq!(kept.shape.unwrap().len(), 2);
        let unsorted =
            serde_json::json!({"shape": [{"utilization": 50, "score": 0}, {"utilization": 10, "score": 11}]});
        let Err(PluginArgsError::Invalid(errs)) = VolumeBindingArgs::from_value_with(&unsorted, true) else {
            panic!("an invalid shape is refused");
        };
        assert_eq!(
            errs,
            [
                "shape[1].utilization: Invalid value: 10: values must be sorted in increasing order",
                "shape[1].score: Invalid value: 11: not in valid range [0, 10]",
            ]
        );
    }
}
