//! Which PersistentVolume serves which claim: upstream's volume matching (`FindMatchingVolume`
//! in component-helpers), split in two because VolumeBinding asks it once per node.
//!
//! PreFilter keeps, per claim that waits for its first consumer, the class' PVs that could serve
//! it on *some* node ([`DelayedClaim::new`]): everything except node affinity, which Filter then
//! checks per node ([`matching_volume`]). The rules are upstream's, including its two quieter
//! ones: a PV pre-bound to the claim (its `claimRef` names it) is the claim's volume or none is,
//! so when that PV's node affinity rules a node out no other PV is tried there; and only
//! `Available` PVs are offered to claims they are not pre-bound to.

use std::{collections::BTreeSet, sync::Arc};

use k8s_openapi::api::{
    core::v1::{Node, PersistentVolume, PersistentVolumeClaim},
    storage::v1::StorageClass,
};
use unisched_resource::Quantity;

use super::pv_node_affinity_matches;
use crate::label_selector::{NO_LABELS, api_selector_matches};

/// A claim that waits for its first consumer: what Filter needs to match it.
#[derive(Debug)]
pub(super) struct DelayedClaim {
    pub(super) pvc: Arc<PersistentVolumeClaim>,
    pub(super) name: String,
    /// Requested storage in nano-units (0 when not given).
    pub(super) request: i128,
    /// Whether the claim requests a size at all (the capacity check needs one).
    pub(super) has_request: bool,
    pub(super) access_modes: Vec<String>,
    pub(super) volume_mode: String,
    /// `volumeAttributesClassName` ("" when unset): a PV must name the same class.
    pub(super) attributes_class: String,
    /// Its `WaitForFirstConsumer` class.
    pub(super) class: Arc<StorageClass>,
    /// The class' PVs that could serve this claim on some node: those pre-bound to the claim
    /// first, then the rest smallest first.
    candidates: Vec<Candidate>,
}

/// A PV that could serve a [`DelayedClaim`] on some node.
#[derive(Debug)]
struct Candidate {
    /// Its `claimRef` names the claim: it is the claim's volume or none is, whatever its size.
    prebound: bool,
    capacity: i128,
    pv: Arc<PersistentVolume>,
}

impl DelayedClaim {
    /// The claim `name` (`pvc`) of class `class`, with the PVs among `pvs` (its class' PVs) that
    /// could serve it somewhere: pre-bound ones first, then smallest first.
    pub(super) fn new(
        name: String,
        pvc: Arc<PersistentVolumeClaim>,
        class: Arc<StorageClass>,
        pvs: Vec<Arc<PersistentVolume>>,
    ) -> Self {
        let spec = pvc.spec.as_ref();
        let requested = spec
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"));
        let mut claim = DelayedClaim {
            request: storage_nanos(requested),
            has_request: requested.is_some(),
            access_modes: spec.and_then(|s| s.access_modes.clone()).unwrap_or_default(),
            volume_mode: spec
                .and_then(|s| s.volume_mode.clone())
                .unwrap_or_else(|| "Filesystem".into()),
            attributes_class: spec
                .and_then(|s| s.volume_attributes_class_name.clone())
                .unwrap_or_default(),
            class,
            candidates: Vec::new(),
            pvc,
            name,
        };
        let mut candidates: Vec<Candidate> = pvs
            .into_iter()
            .filter_map(|pv| {
                let prebound = pv_fits_claim(&pv, &claim)?;
                Some(Candidate {
                    prebound,
                    capacity: pv_capacity(&pv),
                    pv,
                })
            })
            .collect();
        candidates.sort_by_key(|c| (!c.prebound, c.capacity));
        claim.candidates = candidates;
        claim
    }
}

/// A storage quantity in nano-units (0 when absent or unparsable, as upstream's zero value).
fn storage_nanos(q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>) -> i128 {
    q.and_then(|q| Quantity::from_api(q).ok())
        .map_or(0, |q| q.nanos())
}

/// The PV's `capacity.storage` in nano-units.
pub(super) fn pv_capacity(pv: &PersistentVolume) -> i128 {
    storage_nanos(
        pv.spec
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage")),
    )
}

/// Whether the PV's `claimRef` names the claim (a `uid` in it must be the claim's); `None`
/// when it has no `claimRef`.
fn claim_ref_matches(pv: &PersistentVolume, pvc: &PersistentVolumeClaim) -> Option<bool> {
    let r = pv.spec.as_ref()?.claim_ref.as_ref()?;
    let same = r.name == pvc.metadata.name
        && r.namespace.as_deref().unwrap_or("default")
            == pvc.metadata.namespace.as_deref().unwrap_or("default")
        && (r.uid.is_none() || r.uid == pvc.metadata.uid);
    Some(same)
}

/// Whether the PV could serve the claim on some node (node affinity is per node), as upstream's
/// volume matching decides it: `Some(pre-bound)` when it could, `None` when it cannot. A PV whose
/// `claimRef` names another claim never can; one pre-bound to this claim needs only the size,
/// volume mode and attributes class; any other must also be `Available`, match the claim's
/// selector and offer every access mode it asks for.
fn pv_fits_claim(pv: &PersistentVolume, claim: &DelayedClaim) -> Option<bool> {
    let spec = pv.spec.as_ref()?;
    let prebound = match claim_ref_matches(pv, &claim.pvc) {
        Some(false) => return None,
        Some(true) => true,
        None => false,
    };
    if pv_capacity(pv) < claim.request
        || spec.volume_mode.as_deref().unwrap_or("Filesystem") != claim.volume_mode
        || spec.volume_attributes_class_name.as_deref().unwrap_or_default() != claim.attributes_class
        || pv.metadata.deletion_timestamp.is_some()
    {
        return None;
    }
    if prebound {
        return Some(true);
    }
    // Anything else (Pending, Bound, Released, Failed) is on its way somewhere, and binding it
    // now would most likely conflict.
    if pv.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Available") {
        return None;
    }
    if let Some(sel) = claim.pvc.spec.as_ref().and_then(|s| s.selector.as_ref()) {
        let labels = pv.metadata.labels.as_ref().unwrap_or(&NO_LABELS);
        if !api_selector_matches(Some(sel), labels) {
            return None;
        }
    }
    let modes = spec.access_modes.as_deref().unwrap_or_default();
    claim
        .access_modes
        .iter()
        .all(|m| modes.contains(m))
        .then_some(false)
}

/// The PV that serves `claim` on `node`, none of `taken`: the first volume pre-bound to the claim
/// decides alone (when its node affinity rules the node out, no other PV is tried: the claim
/// must get that volume or be provisioned), else the smallest whose node affinity admits the node.
pub(super) fn matching_volume<'a>(
    claim: &'a DelayedClaim,
    node: &Node,
    taken: &BTreeSet<&str>,
) -> Option<&'a Arc<PersistentVolume>> {
    for c in &claim.candidates {
        if taken.contains(c.pv.metadata.name.as_deref().unwrap_or_default()) {
            continue;
        }
        let admits = pv_node_affinity_matches(&c.pv, node);
        if c.prebound {
            return admits.then_some(&c.pv);
        }
        if admits {
            return Some(&c.pv);
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::testing::NodeBuilder;
    use crate::volume::testing::{PvBuilder, PvcBuilder, storage_class};
    use crate::volume::{NO_PROVISIONER, binding::WAIT_FOR_FIRST_CONSUMER};

    /// Upstream's volume-matching cases (component-helpers `TestFindMatchVolumeWithNode`), with the
    /// attributes-class gate on (GA and locked in 1.37, so its "disabled" cases cannot happen), and
    /// the phase and pre-bound rules the same function applies.
    #[test]
    fn matching_volume_table() {
        /// Upstream's volumes: two of other classes, then of the claims' class two on nodes
        /// `key1=value1`, one pre-bound to `claim02` there, one on `value3` and one not Available
        /// on `value4`. `class` gives every one of them that attributes class.
        fn volumes(class: Option<&str>) -> Vec<PersistentVolume> {
            let pvs = [
                PvBuilder::new("local001", "", "5G"),
                PvBuilder::new("local002", "large", "200E"),
                PvBuilder::new("affinity001", "local", "100G").node_affinity("key1", &["value1"]),
                PvBuilder::new("affinity002", "local", "150G").node_affinity("key1", &["value1"]),
                PvBuilder::new("affinity003-prebound", "local", "100G")
                    .node_affinity("key1", &["value1"])
                    .claim("default", "claim02"),
                PvBuilder::new("affinity003", "local", "200G").node_affinity("key1", &["value3"]),
                PvBuilder::new("affinity004", "local", "200G")
                    .node_affinity("key1", &["value4"])
                    .phase(None),
            ];
            pvs.into_iter()
                .map(|pv| match class {
                    Some(c) => pv.attributes_class(c).build(),
                    None => pv.build(),
                })
                .collect()
        }
        struct Case {
            name: &'static str,
            pvs: Vec<PersistentVolume>,
            claim: PvcBuilder,
            /// The node's `key1` label.
            node: &'static str,
            taken: &'static [&'static str],
            want: Option<&'static str>,
        }
        let claim = |name| PvcBuilder::new(name, "local", "100G");
        let cases = [
            Case {
                name: "success-match",
                pvs: volumes(None),
                claim: claim("claim01"),
                node: "value1",
                taken: &[],
                want: Some("affinity001"),
            },
            Case {
                name: "success-prebound",
                pvs: volumes(None),
                claim: claim("claim02"),
                node: "value1",
                taken: &[],
                want: Some("affinity003-prebound"),
            },
            Case {
                name: "success-exclusion",
                pvs: volumes(None),
                claim: claim("claim01"),
                node: "value1",
                taken: &["affinity001"],
                want: Some("affinity002"),
            },
            Case {
                name: "fail-exclusion",
                pvs: volumes(None),
                claim: claim("claim01"),
                node: "value1",
                taken: &["affinity001", "affinity002"],
                want: None,
            },
            Case {
                name: "fail-accessmode",
                pvs: volumes(None),
                claim: claim("claim01").access_modes(&["ReadWriteMany"]),
                node: "value1",
                taken: &[],
                want: None,
            },
            Case {
                name: "fail-nodeaffinity",
                pvs: volumes(None),
                claim: claim("claim01"),
                node: "value2",
                taken: &[],
                want: None,
            },
            Case {
                // affinity003 would fit on value3, but the claim's own volume decides alone.
                name: "fail-prebound-node-affinity",
                pvs: volumes(None),
                claim: claim("claim02"),
                node: "value3",
                taken: &[],
                want: None,
            },
            Case {
                name: "fail-nonavailable",
                pvs: volumes(None),
                claim: claim("claim04"),
                node: "value4",
                taken: &[],
                want: None,
            },
            Case {
                name: "success-bad-and-good-node-affinity",
                pvs: volumes(None),
                claim: claim("claim03"),
                node: "value3",
                taken: &[],
                want: Some("affinity003"),
            },
            Case {
                name: "success-match-with-vac",
                pvs: volumes(Some("gold")),
                claim: claim("claim01").attributes_class("gold"),
                node: "value1",
                taken: &[],
                want: Some("affinity001"),
            },
            Case {
                name: "fail-vac",
                pvs: volumes(None),
                claim: claim("claim01").attributes_class("silver"),
                node: "value1",
                taken: &[],
                want: None,
            },
            Case {
                name: "fail-prebound-vac",
                pvs: volumes(Some("gold")),
                claim: claim("claim02").attributes_class("silver"),
                node: "value1",
                taken: &[],
                want: None,
            },
            Case {
                name: "a claim without an attributes class takes no volume that has one",
                pvs: volumes(Some("gold")),
                claim: claim("claim01"),
                node: "value1",
                taken: &[],
                want: None,
            },
            Case {
                name: "the pre-bound volume needs no access mode the claim asks for",
                pvs: volumes(None),
                claim: claim("claim02").access_modes(&["ReadWriteMany"]),
                node: "value1",
                taken: &[],
                want: Some("affinity003-prebound"),
            },
            Case {
                name: "a Released volume is not Available",
                pvs: vec![
                    PvBuilder::new("released", "local", "100G")
                        .phase(Some("Released"))
                        .build(),
                ],
                claim: claim("claim01"),
                node: "value1",
                taken: &[],
                want: None,
            },
        ];
        for case in cases {
            // The class' PVs, as the volume cache lists them for PreFilter.
            let pvs = case
                .pvs
                .into_iter()
                .filter(|pv| pv.spec.as_ref().unwrap().storage_class_name.as_deref() == Some("local"))
                .map(Arc::new)
                .collect();
            let pvc = case.claim.arc();
            let class = storage_class("local", NO_PROVISIONER, WAIT_FOR_FIRST_CONSUMER, None);
            let claim = DelayedClaim::new(pvc.metadata.name.clone().unwrap(), pvc, class, pvs);
            let node = NodeBuilder::new("n").label("key1", case.node).info();
            let taken: BTreeSet<&str> = case.taken.iter().copied().collect();
            let got = matching_volume(&claim, node.node().unwrap(), &taken)
                .and_then(|pv| pv.metadata.name.as_deref());
            assert_eq!(got, case.want, "{}", case.name);
        }
    }
}
