#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceAllocationResult, DeviceClass, DeviceClassSpec, DeviceRequestAllocationResult,
    DeviceTaint, DeviceTaintRule, DeviceTaintRuleSpec, DeviceTaintSelector, ResourceClaim,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use proptest::prelude::*;
use unisched_dra::testing::{claim, dev, slice};
use unisched_dra::{AllocatedState, DeviceId};

use super::*;

fn result(device: &str, share: Option<&str>) -> DeviceRequestAllocationResult {
    DeviceRequestAllocationResult {
        request: "r".into(),
        driver: "d".into(),
        pool: "p".into(),
        device: device.into(),
        share_id: share.map(String::from),
        consumed_capacity: share.map(|_| {
            [("mem".to_string(), ApiQuantity("1Gi".into()))]
                .into_iter()
                .collect()
        }),
        ..Default::default()
    }
}

fn alloc(devices: &[(&str, Option<&str>)]) -> AllocationResult {
    AllocationResult {
        devices: Some(DeviceAllocationResult {
            results: Some(devices.iter().map(|(d, s)| result(d, *s)).collect()),
            config: None,
        }),
        ..Default::default()
    }
}

fn rc(name: &str, uid: &str, rv: u64, allocation: Option<AllocationResult>) -> Arc<ResourceClaim> {
    let mut c = claim("default", name).build();
    c.metadata.uid = Some(uid.into());
    c.metadata.resource_version = Some(rv.to_string());
    if let Some(a) = allocation {
        c.status.get_or_insert_with(Default::default).allocation = Some(a);
    }
    Arc::new(c)
}

fn id(d: &str) -> DeviceId {
    DeviceId::new("d", "p", d)
}

#[test]
fn assume_layer_and_watch_versions() {
    let cache = DraCache::new();
    cache.apply_claim(rc("c", "u1", 5, None)).unwrap();
    assert!(!cache.snapshot().allocated().is_allocated(&id("a")));

    // Our write: visible at once.
    let change = cache
        .assume_claim(rc("c", "u1", 6, Some(alloc(&[("a", None)]))))
        .unwrap();
    assert!(change.changed() && change.allocation_changed());
    assert!(cache.snapshot().allocated().is_allocated(&id("a")));
    assert!(cache.is_claim_assumed("u1"));

    // An older watch event (the write not yet echoed) keeps the assumed copy.
    let change = cache.apply_claim(rc("c", "u1", 5, None)).unwrap();
    assert!(!change.changed(), "effective claim unchanged");
    assert!(cache.snapshot().allocated().is_allocated(&id("a")));

    // The echo replaces it.
    cache
        .apply_claim(rc("c", "u1", 6, Some(alloc(&[("a", None)]))))
        .unwrap();
    assert!(!cache.is_claim_assumed("u1"));
    assert!(cache.snapshot().allocated().is_allocated(&id("a")));

    // Assuming the version the watch already has is a no-op.
    let change = cache
        .assume_claim(rc("c", "u1", 6, Some(alloc(&[("a", None)]))))
        .unwrap();
    assert!(!change.changed());
    assert!(!cache.is_claim_assumed("u1"));

    // Assuming something older than the watch copy is refused.
    assert!(matches!(
        cache.assume_claim(rc("c", "u1", 3, None)),
        Err(DraCacheError::StaleAssume { .. })
    ));

    // Forget restores the watch copy; idempotent.
    cache.assume_claim(rc("c", "u1", 7, None)).unwrap();
    assert!(!cache.snapshot().allocated().is_allocated(&id("a")));
    cache.forget_claim("u1");
    cache.forget_claim("u1");
    assert!(cache.snapshot().allocated().is_allocated(&id("a")));

    // Delete removes everything.
    cache.remove_claim("default", "c");
    assert!(cache.claim("default", "c").is_none());
    assert_eq!(cache.snapshot().allocated().exclusive_len(), 0);
}

#[test]
fn recreated_claim_replaces_assumed_copy() {
    let cache = DraCache::new();
    cache.apply_claim(rc("c", "u1", 5, None)).unwrap();
    cache
        .assume_claim(rc("c", "u1", 9, Some(alloc(&[("a", None)]))))
        .unwrap();
    // Deleted and recreated under a new UID with a smaller (unparseable ordering irrelevant) version.
    cache.apply_claim(rc("c", "u2", 2, None)).unwrap();
    assert_eq!(
        cache.claim("default", "c").unwrap().metadata.uid.as_deref(),
        Some("u2")
    );
    assert!(!cache.snapshot().allocated().is_allocated(&id("a")));
    assert!(cache.claim_by_uid("u1").is_none());
}

#[test]
fn non_numeric_versions_let_the_watch_win() {
    let cache = DraCache::new();
    let mut a = (*rc("c", "u1", 0, None)).clone();
    a.metadata.resource_version = Some("abc".into());
    cache.apply_claim(Arc::new(a.clone())).unwrap();
    cache
        .assume_claim(rc("c", "u1", 9, Some(alloc(&[("a", None)]))))
        .unwrap();
    cache.apply_claim(Arc::new(a)).unwrap();
    assert!(!cache.is_claim_assumed("u1"));
}

#[test]
fn in_flight_allocations_count_and_release() {
    let cache = DraCache::new();
    cache.reserve_in_flight("u1", alloc(&[("a", None)]));
    let s = cache.snapshot();
    assert!(s.has_pending_allocation("u1"));
    assert!(s.state_layers().is_allocated(&id("a")));
    // Replace: the old devices are released.
    cache.reserve_in_flight("u1", alloc(&[("b", None)]));
    let s2 = cache.snapshot();
    assert!(!s2.state_layers().is_allocated(&id("a")));
    assert!(s2.state_layers().is_allocated(&id("b")));
    // The first snapshot is untouched (copy-on-write).
    assert!(s.state_layers().is_allocated(&id("a")));
    assert!(cache.release_in_flight("u1"));
    assert!(!cache.release_in_flight("u1"), "idempotent");
    assert!(!cache.snapshot().state_layers().is_allocated(&id("b")));
}

#[test]
fn a_group_allocation_is_shared_within_its_attempt_and_held_until_the_last_holder_lets_go() {
    let cache = DraCache::new();
    let attempt: Arc<str> = Arc::from("ns/train#7");
    cache.reserve_in_flight_shareable("g1", alloc(&[("a", None)]), Some(attempt.clone()));
    // Another attempt, or a pod outside any group, cannot share it.
    assert_eq!(cache.share_in_flight("g1", "ns/train#8"), None);
    assert_eq!(cache.share_in_flight("missing", "ns/train#7"), None);
    // Two more members of the same attempt can.
    let shared = cache.share_in_flight("g1", "ns/train#7").expect("shared");
    assert_eq!(*shared, alloc(&[("a", None)]));
    assert!(cache.share_in_flight("g1", "ns/train#7").is_some());
    assert_eq!(cache.in_flight("g1").map(|f| f.holders), Some(3));
    // The devices stay in flight until the third release.
    assert!(cache.release_in_flight("g1"));
    assert!(cache.release_in_flight("g1"));
    assert!(cache.snapshot().state_layers().is_allocated(&id("a")));
    assert!(cache.release_in_flight("g1"));
    assert!(!cache.snapshot().state_layers().is_allocated(&id("a")));
    assert!(!cache.release_in_flight("g1"));
    // A pod's own allocation is never shared.
    cache.reserve_in_flight("p1", alloc(&[("b", None)]));
    assert_eq!(cache.share_in_flight("p1", "ns/train#7"), None);
}

#[test]
fn snapshot_is_reused_when_nothing_changed() {
    let cache = DraCache::new();
    cache
        .apply_slice(Arc::new(slice("s1", "d", "n1", "p").device(dev("a")).build()))
        .unwrap();
    let a = cache.snapshot();
    let b = cache.snapshot();
    assert!(Arc::ptr_eq(&a, &b));
    // A claim change that does not touch allocations keeps the snapshot.
    cache.apply_claim(rc("c", "u1", 1, None)).unwrap();
    assert!(Arc::ptr_eq(&a, &cache.snapshot()));
    // An in-flight allocation changes it, but shares the index.
    cache.reserve_in_flight("u1", alloc(&[("a", None)]));
    let c = cache.snapshot();
    assert!(!Arc::ptr_eq(&a, &c));
    assert!(Arc::ptr_eq(a.index(), c.index()));
    assert!(Arc::ptr_eq(a.classes(), c.classes()));
}

fn class(name: &str, ext: Option<&str>, created: i64) -> Arc<DeviceClass> {
    Arc::new(DeviceClass {
        metadata: ObjectMeta {
            name: Some(name.into()),
            creation_timestamp: Some(Time(k8s_openapi::jiff::Timestamp::from_second(created).unwrap())),
            ..Default::default()
        },
        spec: Some(DeviceClassSpec {
            extended_resource_name: ext.map(String::from),
            ..Default::default()
        }),
    })
}

#[test]
fn extended_resource_map_clash_rules() {
    struct Case {
        name: &'static str,
        classes: Vec<Arc<DeviceClass>>,
        resource: &'static str,
        want: Option<&'static str>,
    }
    let cases = [
        Case {
            name: "implicit name",
            classes: vec![class("gpu.example.com", None, 1)],
            resource: "deviceclass.resource.kubernetes.io/gpu.example.com",
            want: Some("gpu.example.com"),
        },
        Case {
            name: "explicit name",
            classes: vec![class("gpu.nvidia.com", Some("nvidia.com/gpu"), 1)],
            resource: "nvidia.com/gpu",
            want: Some("gpu.nvidia.com"),
        },
        Case {
            name: "newest class wins",
            classes: vec![
                class("old", Some("example.com/gpu"), 1),
                class("new", Some("example.com/gpu"), 2),
            ],
            resource: "example.com/gpu",
            want: Some("new"),
        },
        Case {
            name: "same age: smallest name",
            classes: vec![
                class("b", Some("example.com/gpu"), 1),
                class("a", Some("example.com/gpu"), 1),
            ],
            resource: "example.com/gpu",
            want: Some("a"),
        },
        Case {
            name: "unknown",
            classes: vec![class("a", None, 1)],
            resource: "example.com/gpu",
            want: None,
        },
    ];
    for c in cases {
        let cache = DraCache::new();
        for cl in &c.classes {
            cache.apply_class(cl.clone()).unwrap();
        }
        assert_eq!(
            cache.class_for_extended_resource(c.resource).as_deref(),
            c.want,
            "{}",
            c.name
        );
        assert_eq!(
            cache.snapshot().class_for_extended_resource(c.resource),
            c.want,
            "{}",
            c.name
        );
    }
    let cache = DraCache::new();
    cache.apply_class(class("a", Some("x/y"), 1)).unwrap();
    assert!(cache.remove_class("a"));
    assert_eq!(cache.class_for_extended_resource("x/y"), None);
}

fn rule(name: &str, driver: &str, device: Option<&str>) -> Arc<DeviceTaintRule> {
    Arc::new(DeviceTaintRule {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: DeviceTaintRuleSpec {
            device_selector: Some(DeviceTaintSelector {
                driver: Some(driver.into()),
                device: device.map(String::from),
                pool: None,
            }),
            taint: DeviceTaint {
                key: "broken".into(),
                value: None,
                effect: "NoSchedule".into(),
                time_added: None,
            },
        },
        status: None,
    })
}

fn taints_of(cache: &DraCache, slice: &str, device: &str) -> usize {
    cache
        .slice(slice)
        .unwrap()
        .spec
        .devices
        .iter()
        .flatten()
        .find(|d| d.name == device)
        .and_then(|d| d.taints.as_ref().map(Vec::len))
        .unwrap_or(0)
}

#[test]
fn taint_rules_apply_to_selected_slices_only() {
    let cache = DraCache::new();
    cache
        .apply_slice(Arc::new(
            slice("s1", "gpu", "n1", "p1")
                .device(dev("a"))
                .device(dev("b"))
                .build(),
        ))
        .unwrap();
    cache
        .apply_slice(Arc::new(slice("s2", "nic", "n1", "p2").device(dev("a")).build()))
        .unwrap();
    let before = cache.snapshot();
    cache.apply_taint_rule(rule("r", "gpu", Some("a"))).unwrap();
    assert_eq!(taints_of(&cache, "s1", "a"), 1);
    assert_eq!(taints_of(&cache, "s1", "b"), 0);
    assert_eq!(taints_of(&cache, "s2", "a"), 0);
    assert!(!Arc::ptr_eq(before.index(), cache.snapshot().index()));
    // A slice added later gets the taint too.
    cache
        .apply_slice(Arc::new(slice("s1", "gpu", "n1", "p1").device(dev("a")).build()))
        .unwrap();
    assert_eq!(taints_of(&cache, "s1", "a"), 1);
    // Changing the rule's selector moves the taint.
    cache.apply_taint_rule(rule("r", "nic", None)).unwrap();
    assert_eq!(taints_of(&cache, "s1", "a"), 0);
    assert_eq!(taints_of(&cache, "s2", "a"), 1);
    assert!(cache.remove_taint_rule("r"));
    assert_eq!(taints_of(&cache, "s2", "a"), 0);
    assert!(cache.remove_slice("s2"));
    assert_eq!(cache.slice_count(), 1);
}

#[test]
fn extended_claim_index_by_owner() {
    let cache = DraCache::new();
    let mut c = (*rc("pod-extended-resources-abc", "u9", 1, None)).clone();
    c.metadata.annotations = Some(BTreeMap::from([(
        EXTENDED_RESOURCE_CLAIM_ANNOTATION.to_string(),
        "true".to_string(),
    )]));
    c.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: "pod".into(),
        uid: "pod-uid".into(),
        controller: Some(true),
        block_owner_deletion: None,
    }]);
    cache.apply_claim(Arc::new(c)).unwrap();
    assert_eq!(
        cache
            .extended_resource_claim_for_pod("pod-uid")
            .and_then(|c| c.metadata.uid.clone())
            .as_deref(),
        Some("u9")
    );
    cache.remove_claim("default", "pod-extended-resources-abc");
    assert!(cache.extended_resource_claim_for_pod("pod-uid").is_none());
}

// ----- property: the incremental index equals a recomputation -----

#[derive(Clone, Debug)]
enum Op {
    Apply {
        name: usize,
        uid: usize,
        rv: u64,
        devices: Vec<usize>,
    },
    Remove {
        name: usize,
    },
    Assume {
        name: usize,
        uid: usize,
        rv: u64,
        devices: Vec<usize>,
    },
    Forget {
        name: usize,
        uid: usize,
    },
    Reserve {
        claim: usize,
        devices: Vec<usize>,
    },
    Release {
        claim: usize,
    },
    Snapshot,
}

const DEVICES: [(&str, Option<&str>); 5] = [
    ("a", None),
    ("b", None),
    ("c", None),
    ("s", Some("1")),
    ("s", Some("2")),
];

fn devs(idx: &[usize]) -> Option<AllocationResult> {
    if idx.is_empty() {
        return None;
    }
    Some(alloc(&idx.iter().map(|i| DEVICES[*i]).collect::<Vec<_>>()))
}

fn op() -> impl Strategy<Value = Op> {
    let d = || proptest::collection::vec(0usize..5, 0..3);
    prop_oneof![
        (0usize..3, 0usize..2, 1u64..8, d()).prop_map(|(name, uid, rv, devices)| Op::Apply {
            name,
            uid,
            rv,
            devices
        }),
        (0usize..3).prop_map(|name| Op::Remove { name }),
        (0usize..3, 0usize..2, 1u64..8, d()).prop_map(|(name, uid, rv, devices)| Op::Assume {
            name,
            uid,
            rv,
            devices
        }),
        (0usize..3, 0usize..2).prop_map(|(name, uid)| Op::Forget { name, uid }),
        (0usize..4, d()).prop_map(|(claim, devices)| Op::Reserve { claim, devices }),
        (0usize..4).prop_map(|claim| Op::Release { claim }),
        Just(Op::Snapshot),
    ]
}

/// An independent model of the rules: per key (watch copy, assumed copy).
#[derive(Default)]
struct Model {
    claims: HashMap<String, (Option<Arc<ResourceClaim>>, Option<Arc<ResourceClaim>>)>,
    in_flight: HashMap<String, AllocationResult>,
}

impl Model {
    fn effective(&self) -> Vec<Arc<ResourceClaim>> {
        self.claims
            .values()
            .filter_map(|(i, a)| a.clone().or_else(|| i.clone()))
            .collect()
    }
}

fn rv(c: &ResourceClaim) -> u64 {
    c.metadata.resource_version.as_deref().unwrap().parse().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn allocated_state_matches_recomputation(ops in proptest::collection::vec(op(), 1..40)) {
        let cache = DraCache::new();
        let mut model = Model::default();
        let mut held = Vec::new();
        let mut before = cache.snapshot();
        for op in ops {
            match op {
                Op::Apply { name, uid, rv: v, devices } => {
                    let c = rc(&format!("c{name}"), &format!("u{name}-{uid}"), v, devs(&devices));
                    cache.apply_claim(c.clone()).unwrap();
                    let e = model.claims.entry(format!("default/c{name}")).or_default();
                    if let Some(a) = &e.1
                        && (a.metadata.uid != c.metadata.uid || rv(&c) >= rv(a))
                    {
                        e.1 = None;
                    }
                    e.0 = Some(c);
                }
                Op::Remove { name } => {
                    cache.remove_claim("default", &format!("c{name}"));
                    model.claims.remove(&format!("default/c{name}"));
                }
                Op::Assume { name, uid, rv: v, devices } => {
                    let c = rc(&format!("c{name}"), &format!("u{name}-{uid}"), v, devs(&devices));
                    let ok = cache.assume_claim(c.clone()).is_ok();
                    let e = model.claims.entry(format!("default/c{name}")).or_default();
                    let same_uid = |i: &Arc<ResourceClaim>| i.metadata.uid == c.metadata.uid;
                    let stale = e.0.as_ref().is_some_and(|i| same_uid(i) && rv(&c) < rv(i));
                    let echoed = e.1.is_none() && e.0.as_ref().is_some_and(|i| same_uid(i) && rv(&c) == rv(i));
                    prop_assert_eq!(ok, !stale);
                    if !stale && !echoed {
                        e.1 = Some(c);
                    }
                    if e.0.is_none() && e.1.is_none() {
                        model.claims.remove(&format!("default/c{name}"));
                    }
                }
                Op::Forget { name, uid } => {
                    let u = format!("u{name}-{uid}");
                    cache.forget_claim(&u);
                    let key = format!("default/c{name}");
                    if let Some(e) = model.claims.get_mut(&key)
                        && e.1.as_ref().is_some_and(|a| a.metadata.uid.as_deref() == Some(u.as_str()))
                    {
                        e.1 = None;
                        if e.0.is_none() {
                            model.claims.remove(&key);
                        }
                    }
                }
                Op::Reserve { claim, devices } => {
                    let a = devs(&devices).unwrap_or_default();
                    cache.reserve_in_flight(&format!("f{claim}"), a.clone());
                    model.in_flight.insert(format!("f{claim}"), a);
                }
                Op::Release { claim } => {
                    let released = cache.release_in_flight(&format!("f{claim}"));
                    prop_assert_eq!(released, model.in_flight.remove(&format!("f{claim}")).is_some());
                }
                Op::Snapshot => {
                    let want = AllocatedState::from_claims(model.effective().iter().map(|c| &**c));
                    held.push((cache.snapshot(), want));
                }
            }
            let snap = cache.snapshot();
            let want = AllocatedState::from_claims(model.effective().iter().map(|c| &**c));
            prop_assert_eq!(&**snap.allocated(), &want);
            prop_assert_eq!(&**snap.allocated(), &cache.recomputed_allocated());
            let mut want_in_flight = AllocatedState::new();
            for a in model.in_flight.values() {
                want_in_flight.add_allocation(a);
            }
            prop_assert_eq!(&**snap.in_flight(), &want_in_flight);
            prop_assert_eq!(cache.claim_count(), model.claims.len());
            // Nothing in use became free unless the frees counter moved.
            if snap.frees() == before.frees() {
                for (d, _) in DEVICES {
                    prop_assert!(
                        !before.state_layers().is_allocated(&id(d)) || snap.state_layers().is_allocated(&id(d)),
                        "device {} freed without the counter moving",
                        d
                    );
                }
            }
            prop_assert!(snap.frees() >= before.frees());
            before = snap;
        }
        // Snapshots taken along the way were never modified afterwards.
        for (s, want) in held {
            prop_assert_eq!(&**s.allocated(), &want);
        }
    }
}

/// Consumed `mem` of device `s` as one scheduling cycle sees it (both layers).
fn layered_mem(cache: &DraCache) -> Option<String> {
    match cache.snapshot().state_layers().consumed_capacity(&id("s")) {
        unisched_dra::state::LayeredCapacity::Amounts(m) => m.get("mem").map(ToString::to_string),
        unisched_dra::state::LayeredCapacity::None => None,
        unisched_dra::state::LayeredCapacity::Full => Some("full".into()),
    }
}

/// The watch echoes a claim's allocation (or PreBind assumes it) while the same
/// allocation is still recorded as in flight; a snapshot taken in between must count the
/// consumable-capacity share once, not twice. The extended-resource claim is keyed in flight by
/// its placeholder UID, not the claim's, so the de-duplication cannot rely on UIDs.
#[test]
fn a_share_in_flight_and_echoed_is_counted_once() {
    // (in-flight key, claim uid, echo by the watch (true) or by our assume (false))
    let cases = [
        ("u1", "u1", true),
        ("u1", "u1", false),
        ("placeholder-of-pod", "u-ext", true),
    ];
    for (key, uid, by_watch) in cases {
        let cache = DraCache::new();
        cache.apply_claim(rc("c", uid, 5, None)).unwrap();
        let a = alloc(&[("s", Some("share-1"))]);
        cache.reserve_in_flight(key, a.clone());
        assert_eq!(
            layered_mem(&cache).as_deref(),
            Some("1Gi"),
            "{key}: in flight only"
        );

        let echoed = rc("c", uid, 6, Some(a.clone()));
        if by_watch {
            cache.apply_claim(echoed).unwrap();
        } else {
            cache.assume_claim(echoed).unwrap();
        }
        // Both layers hold share-1 now: the window between the echo and the in-flight release.
        assert!(cache.snapshot().allocated().has_shares(&id("s")));
        assert!(cache.snapshot().in_flight().has_shares(&id("s")));
        assert_eq!(
            layered_mem(&cache).as_deref(),
            Some("1Gi"),
            "{key}: the share is counted once while in flight and allocated"
        );

        // A second, distinct share on the same device does add up.
        cache.reserve_in_flight("u9", alloc(&[("s", Some("share-2"))]));
        assert_eq!(
            layered_mem(&cache).as_deref(),
            Some("2Gi"),
            "{key}: distinct shares add"
        );

        cache.release_in_flight(key);
        cache.release_in_flight("u9");
        assert_eq!(
            layered_mem(&cache).as_deref(),
            Some("1Gi"),
            "{key}: committed share stays"
        );
        assert_eq!(cache.recomputed_in_flight(), AllocatedState::new());
    }
}

/// Restart: the new leader's informer lists claims the previous leader allocated
/// (shares s-old-*), then this leader allocates more shares of the same device; while they are in
/// flight and echoed, the device's consumption is the sum of the distinct shares.
#[test]
fn after_a_restart_listed_and_new_shares_are_each_counted_once() {
    let cache = DraCache::new();
    cache
        .apply_claim(rc("old-1", "o1", 3, Some(alloc(&[("s", Some("s-old-1"))]))))
        .unwrap();
    cache
        .apply_claim(rc("old-2", "o2", 4, Some(alloc(&[("s", Some("s-old-2"))]))))
        .unwrap();
    assert_eq!(layered_mem(&cache).as_deref(), Some("2Gi"));
    cache.apply_claim(rc("new", "n1", 5, None)).unwrap();
    let a = alloc(&[("s", Some("s-new"))]);
    cache.reserve_in_flight("n1", a.clone());
    cache.apply_claim(rc("new", "n1", 6, Some(a))).unwrap();
    assert_eq!(
        layered_mem(&cache).as_deref(),
        Some("3Gi"),
        "2 listed + 1 new, not 4"
    );
    // The relist of a previous leader's claim (same version again) changes nothing.
    cache
        .apply_claim(rc("old-1", "o1", 3, Some(alloc(&[("s", Some("s-old-1"))]))))
        .unwrap();
    assert_eq!(layered_mem(&cache).as_deref(), Some("3Gi"));
    cache.release_in_flight("n1");
    assert_eq!(layered_mem(&cache).as_deref(), Some("3Gi"));
    assert_eq!(
        *cache.snapshot().allocated().as_ref(),
        cache.recomputed_allocated()
    );
}

/// The scheduler's own steps reach the observer (without an event a pod rejected
/// meanwhile waits for the 5-minute flush): assume and forget always, an in-flight release only
/// when it frees devices (not after a successful PreBind, whose assumed claim holds them).
#[test]
fn the_observer_hears_the_schedulers_own_claim_changes() {
    let cache = DraCache::new();
    let heard: Arc<parking_lot::Mutex<Vec<(bool, bool)>>> = Arc::default();
    let h = heard.clone();
    cache.set_observer(Arc::new(move |c: &ClaimChange| {
        let allocated = |o: &Option<Arc<ResourceClaim>>| {
            o.as_ref()
                .is_some_and(|c| c.status.as_ref().is_some_and(|s| s.allocation.is_some()))
        };
        h.lock().push((allocated(&c.old), allocated(&c.new)));
    }));
    let take = || std::mem::take(&mut *heard.lock());
    cache.apply_claim(rc("c", "u1", 5, None)).unwrap();
    assert!(
        take().is_empty(),
        "watch changes are reported by the watch handler, not here"
    );

    // A successful PreBind: in flight, assumed, released. Only the assume is heard.
    let a = alloc(&[("s", Some("share-1"))]);
    cache.reserve_in_flight("u1", a.clone());
    cache.assume_claim(rc("c", "u1", 6, Some(a.clone()))).unwrap();
    assert!(cache.release_in_flight("u1"));
    assert_eq!(take(), [(false, true)]);

    // Unreserve after the assume: the forget is heard (allocated -> not).
    cache.forget_claim("u1");
    assert_eq!(take(), [(true, false)]);

    // A binding cycle that failed before writing: the release frees the share and is heard,
    // also for an extended-resource placeholder that names no claim.
    for key in ["u1", "placeholder"] {
        cache.reserve_in_flight(key, a.clone());
        assert!(cache.release_in_flight(key));
        assert_eq!(take(), [(true, false)], "{key}");
        assert!(!cache.release_in_flight(key), "idempotent");
        assert!(take().is_empty());
    }

    // An echo that arrives before the release: the committed claim holds the share, nothing freed.
    cache.reserve_in_flight("u1", a.clone());
    cache.apply_claim(rc("c", "u1", 7, Some(a))).unwrap();
    cache.release_in_flight("u1");
    assert!(take().is_empty());
}

/// `DraSnapshot::frees` moves when a device may have come free and not otherwise, so a node found
/// short of devices in one snapshot is known short in a later one with the same counter.
#[test]
fn frees_counts_what_can_free_devices_and_nothing_else() {
    let cache = DraCache::new();
    let frees = |cache: &DraCache| cache.snapshot().frees();
    let apply = |name: &str, uid: &str, rv: u64, a: Option<AllocationResult>| {
        cache.apply_claim(rc(name, uid, rv, a)).unwrap();
    };
    let start = frees(&cache);
    // Allocating, in flight then written (the normal binding), moves nothing.
    cache.reserve_in_flight("u1", alloc(&[("a", None)]));
    assert_eq!(frees(&cache), start, "reserve");
    cache
        .assume_claim(rc("c1", "u1", 2, Some(alloc(&[("a", None)]))))
        .unwrap();
    assert_eq!(frees(&cache), start, "assume");
    assert!(cache.release_in_flight("u1"));
    assert_eq!(frees(&cache), start, "hand-over to the written claim");
    apply("c1", "u1", 3, Some(alloc(&[("a", None)])));
    assert_eq!(frees(&cache), start, "watch echo of the same allocation");
    let mut rewritten = alloc(&[("a", None)]);
    rewritten.allocation_timestamp = Some(Time(Default::default()));
    apply("c1", "u1", 4, Some(rewritten));
    assert_eq!(frees(&cache), start, "the same devices, another field changed");
    apply("c2", "u2", 4, Some(alloc(&[("b", None)])));
    assert_eq!(frees(&cache), start, "someone else's allocation");
    cache.reserve_in_flight("u4", alloc(&[("e", None)]));
    cache.reserve_in_flight("u4", alloc(&[("e", None)]));
    assert_eq!(
        frees(&cache),
        start,
        "the same in-flight allocation recorded again"
    );

    // Each of these can free a device.
    cache.reserve_in_flight("u4", alloc(&[("f", None)]));
    let after_replace = frees(&cache);
    assert!(after_replace > start, "an in-flight allocation replaced");
    assert!(cache.release_in_flight("u4"));
    let after_release = frees(&cache);
    assert!(
        after_release > after_replace,
        "an in-flight allocation dropped unwritten"
    );
    apply("c2", "u2", 9, None);
    let after_deallocate = frees(&cache);
    assert!(after_deallocate > after_release, "deallocation");
    apply("c3", "u3", 1, Some(alloc(&[("s", Some("1"))])));
    let before_share = frees(&cache);
    apply("c3", "u3", 2, Some(alloc(&[("s", Some("1")), ("b", None)])));
    assert!(
        frees(&cache) > before_share,
        "a share rewritten under its id may have shrunk"
    );
    let before_delete = frees(&cache);
    cache.remove_claim("default", "c1");
    assert!(frees(&cache) > before_delete, "an allocated claim deleted");
}
