//! Table tests of VolumeBinding: upstream's volume-binding cases (PreFilter, Filter, `FindPodVolumes`,
//! PreBind's wait), written as ours.

use unisched_framework::Code;

use super::*;
use crate::testing::{NodeBuilder, PodBuilder};
use crate::volume::ANNOTATION_BIND_COMPLETED;
use crate::volume::testing::{FakeVolumeApi, PvBuilder, PvcBuilder, VolumeWrite, storage_class, with_claims};

const HOST: &str = "kubernetes.io/hostname";

fn cache() -> Arc<VolumeCache> {
    let c = Arc::new(VolumeCache::new());
    c.apply_class(storage_class(
        "local",
        NO_PROVISIONER,
        WAIT_FOR_FIRST_CONSUMER,
        None,
    ));
    c.apply_class(storage_class(
        "fast",
        "csi.example.com",
        WAIT_FOR_FIRST_CONSUMER,
        Some(("zone", &["a"])),
    ));
    c.apply_class(storage_class("standard", "csi.example.com", "Immediate", None));
    c
}

fn nodes() -> Vec<NodeInfo> {
    ["n1", "n2"]
        .into_iter()
        .map(|n| {
            NodeBuilder::new(n)
                .label(HOST, n)
                .label("zone", if n == "n1" { "a" } else { "b" })
                .info()
        })
        .collect()
}

fn plugin(c: &Arc<VolumeCache>, api: Option<Arc<FakeVolumeApi>>) -> VolumeBinding {
    let args = VolumeBindingArgs {
        bind_timeout_seconds: 2,
        ..VolumeBindingArgs::default()
    };
    VolumeBinding::new(&args, Some(c.clone()), api.map(|a| a as Arc<dyn VolumeApi>))
}

#[test]
fn pre_filter_table() {
    struct Case {
        name: &'static str,
        claims: Vec<&'static str>,
        pvcs: Vec<PersistentVolumeClaim>,
        code: Code,
        reason: &'static str,
    }
    let cases = [
        Case {
            name: "no claims: skip",
            claims: vec![],
            pvcs: vec![],
            code: Code::Skip,
            reason: "",
        },
        Case {
            name: "missing claim",
            claims: vec!["data"],
            pvcs: vec![],
            code: Code::UnschedulableAndUnresolvable,
            reason: "persistentvolumeclaim \"data\" not found",
        },
        Case {
            name: "unbound immediate claim",
            claims: vec!["data"],
            pvcs: vec![PvcBuilder::new("data", "standard", "1Gi").build()],
            code: Code::UnschedulableAndUnresolvable,
            reason: ERR_REASON_UNBOUND_IMMEDIATE,
        },
        Case {
            name: "unbound claim without class is immediate",
            claims: vec!["data"],
            pvcs: vec![PvcBuilder::new("data", "", "1Gi").build()],
            code: Code::UnschedulableAndUnresolvable,
            reason: ERR_REASON_UNBOUND_IMMEDIATE,
        },
        Case {
            name: "bound immediate claim",
            claims: vec!["data"],
            pvcs: vec![PvcBuilder::new("data", "standard", "1Gi").bound_to("pv1").build()],
            code: Code::Success,
            reason: "",
        },
        Case {
            name: "delayed claim",
            claims: vec!["data"],
            pvcs: vec![PvcBuilder::new("data", "local", "1Gi").build()],
            code: Code::Success,
            reason: "",
        },
        Case {
            // upstream's "prebound-pvc": the PV controller has not completed the binding.
            name: "a claim naming its volume before the controller bound it waits as Immediate",
            claims: vec!["data"],
            pvcs: vec![
                PvcBuilder::new("data", "local", "1Gi")
                    .naming_volume("pv1")
                    .build(),
            ],
            code: Code::UnschedulableAndUnresolvable,
            reason: ERR_REASON_UNBOUND_IMMEDIATE,
        },
        Case {
            name: "a claim whose class does not exist is Immediate",
            claims: vec!["data"],
            pvcs: vec![PvcBuilder::new("data", "gone", "1Gi").build()],
            code: Code::UnschedulableAndUnresolvable,
            reason: ERR_REASON_UNBOUND_IMMEDIATE,
        },
        Case {
            name: "a class without a binding mode is an error",
            claims: vec!["data"],
            pvcs: vec![PvcBuilder::new("data", "modeless", "1Gi").build()],
            code: Code::Error,
            reason: "VolumeBindingMode not set for StorageClass \"modeless\"",
        },
        Case {
            name: "one delayed claim and one still naming its volume",
            claims: vec!["a", "b"],
            pvcs: vec![
                PvcBuilder::new("a", "local", "1Gi").build(),
                PvcBuilder::new("b", "local", "1Gi").naming_volume("pv1").build(),
            ],
            code: Code::UnschedulableAndUnresolvable,
            reason: ERR_REASON_UNBOUND_IMMEDIATE,
        },
    ];
    for case in cases {
        let c = cache();
        let mut modeless = (*storage_class("modeless", "csi.example.com", "Immediate", None)).clone();
        modeless.volume_binding_mode = None;
        c.apply_class(Arc::new(modeless));
        for p in case.pvcs {
            c.apply_pvc(Arc::new(p));
        }
        let pod = PodInfo::new(with_claims(PodBuilder::new("p").build(), &case.claims));
        let mut state = CycleState::new();
        let (_, s) = plugin(&c, None).pre_filter(&mut state, &pod, &[]);
        assert_eq!(s.code(), case.code, "{}: {s:?}", case.name);
        if !case.reason.is_empty() {
            assert_eq!(s.reasons(), [case.reason.to_string()], "{}", case.name);
        }
    }
}

#[test]
fn filter_table() {
    struct Case {
        name: &'static str,
        pvs: Vec<PersistentVolume>,
        pvcs: Vec<PersistentVolumeClaim>,
        claims: Vec<&'static str>,
        /// Per node n1, n2: expected reasons (empty: fits).
        want: [Vec<&'static str>; 2],
    }
    let cases = [
        Case {
            name: "bound PV with node affinity",
            pvs: vec![
                PvBuilder::new("pv1", "local", "1Gi")
                    .node_affinity(HOST, &["n2"])
                    .claim("default", "data")
                    .build(),
            ],
            pvcs: vec![PvcBuilder::new("data", "local", "1Gi").bound_to("pv1").build()],
            claims: vec!["data"],
            want: [vec![ERR_REASON_NODE_CONFLICT], vec![]],
        },
        Case {
            name: "bound to a missing PV",
            pvs: vec![],
            pvcs: vec![PvcBuilder::new("data", "local", "1Gi").bound_to("gone").build()],
            claims: vec!["data"],
            want: [vec![ERR_REASON_PV_NOT_EXIST], vec![ERR_REASON_PV_NOT_EXIST]],
        },
        Case {
            name: "local PV on one node",
            pvs: vec![
                PvBuilder::new("pv1", "local", "10Gi")
                    .node_affinity(HOST, &["n1"])
                    .build(),
            ],
            pvcs: vec![PvcBuilder::new("data", "local", "5Gi").build()],
            claims: vec!["data"],
            want: [vec![], vec![ERR_REASON_BIND_CONFLICT]],
        },
        Case {
            name: "PV too small",
            pvs: vec![PvBuilder::new("pv1", "local", "1Gi").build()],
            pvcs: vec![PvcBuilder::new("data", "local", "5Gi").build()],
            claims: vec!["data"],
            want: [vec![ERR_REASON_BIND_CONFLICT], vec![ERR_REASON_BIND_CONFLICT]],
        },
        Case {
            name: "access mode mismatch",
            pvs: vec![PvBuilder::new("pv1", "local", "10Gi").build()],
            pvcs: vec![
                PvcBuilder::new("data", "local", "5Gi")
                    .access_modes(&["ReadWriteMany"])
                    .build(),
            ],
            claims: vec!["data"],
            want: [vec![ERR_REASON_BIND_CONFLICT], vec![ERR_REASON_BIND_CONFLICT]],
        },
        Case {
            name: "PV claimed by another claim",
            pvs: vec![
                PvBuilder::new("pv1", "local", "10Gi")
                    .claim("default", "other")
                    .build(),
            ],
            pvcs: vec![PvcBuilder::new("data", "local", "5Gi").build()],
            claims: vec!["data"],
            want: [vec![ERR_REASON_BIND_CONFLICT], vec![ERR_REASON_BIND_CONFLICT]],
        },
        Case {
            name: "two claims, one PV",
            pvs: vec![PvBuilder::new("pv1", "local", "10Gi").build()],
            pvcs: vec![
                PvcBuilder::new("a", "local", "1Gi").build(),
                PvcBuilder::new("b", "local", "1Gi").build(),
            ],
            claims: vec!["a", "b"],
            want: [vec![ERR_REASON_BIND_CONFLICT], vec![ERR_REASON_BIND_CONFLICT]],
        },
        Case {
            name: "provisioning limited by allowed topologies",
            pvs: vec![],
            pvcs: vec![PvcBuilder::new("data", "fast", "5Gi").build()],
            claims: vec!["data"],
            want: [vec![], vec![ERR_REASON_BIND_CONFLICT]],
        },
    ];
    for case in cases {
        let c = cache();
        for p in case.pvs {
            c.apply_pv(Arc::new(p));
        }
        for p in case.pvcs {
            c.apply_pvc(Arc::new(p));
        }
        let pl = plugin(&c, None);
        let pod = PodInfo::new(with_claims(PodBuilder::new("p").build(), &case.claims));
        let mut state = CycleState::new();
        let (_, s) = pl.pre_filter(&mut state, &pod, &[]);
        assert_eq!(s.code(), Code::Success, "{}: {s:?}", case.name);
        for (node, want) in nodes().iter().zip(case.want.iter()) {
            let s = pl.filter(&state, &pod, node);
            if want.is_empty() {
                assert_eq!(s.code(), Code::Success, "{} on {}: {s:?}", case.name, node.name());
            } else {
                assert_eq!(
                    s.code(),
                    Code::UnschedulableAndUnresolvable,
                    "{} on {}",
                    case.name,
                    node.name()
                );
                let want: Vec<String> = want.iter().map(|r| r.to_string()).collect();
                assert_eq!(s.reasons(), want, "{} on {}", case.name, node.name());
            }
        }
    }
}

/// Upstream's `FindPodVolumes` cases (binder_test.go, without and with provisioning) on node
/// n1: which PV each claim gets, which claims are provisioned, and the reasons, in upstream's
/// order. `node1`/`node2` there are n1/n2 here; `waitClass` is `local` (no provisioner),
/// `waitClassWithProvisioner` is `fast`.
#[test]
fn find_pod_volumes_table() {
    struct Case {
        name: &'static str,
        pvs: Vec<PersistentVolume>,
        pvcs: Vec<PersistentVolumeClaim>,
        want_bindings: &'static [(&'static str, &'static str)],
        want_provisions: &'static [&'static str],
        want_reasons: &'static [&'static str],
    }
    let on = |name: &str, node: &str, size: &str| {
        PvBuilder::new(name, "local", size)
            .node_affinity(HOST, &[node])
            .build()
    };
    let unbound = || PvcBuilder::new("unbound-pvc", "local", "1G").build();
    let unbound2 = || PvcBuilder::new("unbound-pvc2", "local", "5G").build();
    let bound = || {
        PvcBuilder::new("bound-pvc", "local", "1G")
            .bound_to("pv-bound")
            .build()
    };
    let pv_bound = |node: &str| {
        PvBuilder::new("pv-bound", "local", "1G")
            .node_affinity(HOST, &[node])
            .claim("default", "bound-pvc")
            .build()
    };
    let provisioned = || PvcBuilder::new("provisioned-pvc", "fast", "1Gi").build();
    let selected = |node: &str| {
        let mut pvc = PvcBuilder::new("selected-pvc", "fast", "1Gi").build();
        pvc.metadata.annotations = Some(BTreeMap::from([(ANNOTATION_SELECTED_NODE.into(), node.into())]));
        pvc
    };
    let cases = [
        Case {
            name: "unbound-pvc,pv-same-node",
            pvs: vec![
                on("pv-node2", "n2", "1G"),
                on("pv-node1a", "n1", "5G"),
                on("pv-node1b", "n1", "10G"),
            ],
            pvcs: vec![unbound()],
            want_bindings: &[("unbound-pvc", "pv-node1a")],
            want_provisions: &[],
            want_reasons: &[],
        },
        Case {
            name: "unbound-pvc,pv-different-node",
            pvs: vec![on("pv-node2", "n2", "1G")],
            pvcs: vec![unbound()],
            want_bindings: &[],
            want_provisions: &[],
            want_reasons: &[ERR_REASON_BIND_CONFLICT],
        },
        Case {
            name: "two-unbound-pvcs",
            pvs: vec![on("pv-node1a", "n1", "5G"), on("pv-node1b", "n1", "10G")],
            pvcs: vec![unbound(), unbound2()],
            want_bindings: &[("unbound-pvc", "pv-node1a"), ("unbound-pvc2", "pv-node1b")],
            want_provisions: &[],
            want_reasons: &[],
        },
        Case {
            // The pod lists the larger claim first; the smaller still gets the smaller PV.
            name: "two-unbound-pvcs,order-by-size",
            pvs: vec![on("pv-node1a", "n1", "5G"), on("pv-node1b", "n1", "10G")],
            pvcs: vec![unbound2(), unbound()],
            want_bindings: &[("unbound-pvc", "pv-node1a"), ("unbound-pvc2", "pv-node1b")],
            want_provisions: &[],
            want_reasons: &[],
        },
        Case {
            name: "two-unbound-pvcs,partial-match",
            pvs: vec![on("pv-node1a", "n1", "5G")],
            pvcs: vec![unbound(), unbound2()],
            want_bindings: &[],
            want_provisions: &[],
            want_reasons: &[ERR_REASON_BIND_CONFLICT],
        },
        Case {
            name: "one-bound,one-unbound",
            pvs: vec![pv_bound("n1"), on("pv-node1a", "n1", "5G")],
            pvcs: vec![unbound(), bound()],
            want_bindings: &[("unbound-pvc", "pv-node1a")],
            want_provisions: &[],
            want_reasons: &[],
        },
        Case {
            name: "one-bound,one-unbound,no-match",
            pvs: vec![pv_bound("n1"), on("pv-node2", "n2", "1G")],
            pvcs: vec![unbound(), bound()],
            want_bindings: &[],
            want_provisions: &[],
            want_reasons: &[ERR_REASON_BIND_CONFLICT],
        },
        Case {
            name: "one-provisioned",
            pvs: vec![],
            pvcs: vec![provisioned()],
            want_bindings: &[],
            want_provisions: &["provisioned-pvc"],
            want_reasons: &[],
        },
        Case {
            name: "two-unbound-pvcs,one-matched,one-provisioned",
            pvs: vec![on("pv-node1a", "n1", "5G")],
            pvcs: vec![unbound(), provisioned()],
            want_bindings: &[("unbound-pvc", "pv-node1a")],
            want_provisions: &["provisioned-pvc"],
            want_reasons: &[],
        },
        Case {
            name: "one-bound,one-provisioned",
            pvs: vec![pv_bound("n1")],
            pvcs: vec![bound(), provisioned()],
            want_bindings: &[],
            want_provisions: &["provisioned-pvc"],
            want_reasons: &[],
        },
        Case {
            name: "one-binding,one-selected-node",
            pvs: vec![pv_bound("n1")],
            pvcs: vec![bound(), selected("n1")],
            want_bindings: &[],
            want_provisions: &["selected-pvc"],
            want_reasons: &[],
        },
        Case {
            name: "invalid-provisioner",
            pvs: vec![],
            pvcs: vec![PvcBuilder::new("no-provisioner-pvc", "local", "1Gi").build()],
            want_bindings: &[],
            want_provisions: &[],
            want_reasons: &[ERR_REASON_BIND_CONFLICT],
        },
        Case {
            name: "volume-topology-unsatisfied",
            pvs: vec![],
            pvcs: vec![PvcBuilder::new("topo-mismatch-pvc", "elsewhere", "1Gi").build()],
            want_bindings: &[],
            want_provisions: &[],
            want_reasons: &[ERR_REASON_BIND_CONFLICT],
        },
        Case {
            name: "a claim handed to the provisioner for this node is not matched to a PV",
            pvs: vec![
                PvBuilder::new("fast-n1", "fast", "10Gi")
                    .node_affinity(HOST, &["n1"])
                    .build(),
            ],
            pvcs: vec![selected("n1")],
            want_bindings: &[],
            want_provisions: &["selected-pvc"],
            want_reasons: &[],
        },
        Case {
            name: "a claim handed to the provisioner for another node",
            pvs: vec![],
            pvcs: vec![selected("n2")],
            want_bindings: &[],
            want_provisions: &[],
            want_reasons: &[ERR_REASON_BIND_CONFLICT],
        },
        Case {
            name: "an unmatched claim and a bound PV elsewhere: upstream's reason order",
            pvs: vec![pv_bound("n2"), on("pv-node2", "n2", "1G")],
            pvcs: vec![bound(), unbound()],
            want_bindings: &[],
            want_provisions: &[],
            want_reasons: &[ERR_REASON_BIND_CONFLICT, ERR_REASON_NODE_CONFLICT],
        },
        Case {
            name: "a bound claim whose PV is gone and an unmatched claim",
            pvs: vec![on("pv-node2", "n2", "1G")],
            pvcs: vec![bound(), unbound()],
            want_bindings: &[],
            want_provisions: &[],
            want_reasons: &[ERR_REASON_BIND_CONFLICT, ERR_REASON_PV_NOT_EXIST],
        },
    ];
    for case in cases {
        let c = cache();
        c.apply_class(storage_class(
            "elsewhere",
            "csi.example.com",
            WAIT_FOR_FIRST_CONSUMER,
            Some(("zone", &["z"])),
        ));
        for pv in case.pvs {
            c.apply_pv(Arc::new(pv));
        }
        let names: Vec<String> = case
            .pvcs
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        for pvc in case.pvcs {
            c.apply_pvc(Arc::new(pvc));
        }
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let pl = plugin(&c, None);
        let pod = PodInfo::new(with_claims(PodBuilder::new("p").build(), &names));
        let mut state = CycleState::new();
        let (_, s) = pl.pre_filter(&mut state, &pod, &[]);
        assert_eq!(s.code(), Code::Success, "{}: {s:?}", case.name);
        let s = pl.filter(&state, &pod, &nodes()[0]);
        let want: Vec<String> = case.want_reasons.iter().map(|r| r.to_string()).collect();
        assert_eq!(s.reasons(), want, "{}", case.name);
        if !want.is_empty() {
            assert_eq!(s.code(), Code::UnschedulableAndUnresolvable, "{}", case.name);
            continue;
        }
        let data = VolumeBinding::data(&state).unwrap();
        let decision = data.decisions.read().get("n1").cloned().unwrap();
        let bindings: Vec<(&str, &str)> = decision
            .bindings
            .iter()
            .map(|(i, pv)| {
                (
                    data.delayed[*i].name.as_str(),
                    pv.metadata.name.as_deref().unwrap(),
                )
            })
            .collect();
        assert_eq!(bindings, case.want_bindings, "{}", case.name);
        let provisions: Vec<&str> = decision
            .provisions
            .iter()
            .map(|p| data.delayed[p.claim].name.as_str())
            .collect();
        assert_eq!(provisions, case.want_provisions, "{}", case.name);
    }
}

#[test]
fn bound_local_pvs_narrow_the_nodes() {
    struct Case {
        name: &'static str,
        pvs: Vec<PvBuilder>,
        want: Option<Vec<&'static str>>,
    }
    let cases = [
        Case {
            name: "hostname affinity",
            pvs: vec![PvBuilder::new("pv0", "local", "1Gi").node_affinity(HOST, &["n1", "n2"])],
            want: Some(vec!["n1", "n2"]),
        },
        Case {
            name: "two PVs intersect",
            pvs: vec![
                PvBuilder::new("pv0", "local", "1Gi").node_affinity(HOST, &["n1", "n2"]),
                PvBuilder::new("pv1", "local", "1Gi").node_affinity(HOST, &["n2"]),
            ],
            want: Some(vec!["n2"]),
        },
        Case {
            name: "zone affinity does not narrow",
            pvs: vec![PvBuilder::new("pv0", "local", "1Gi").node_affinity("zone", &["a"])],
            want: None,
        },
        Case {
            name: "no affinity",
            pvs: vec![PvBuilder::new("pv0", "local", "1Gi")],
            want: None,
        },
    ];
    for case in cases {
        let c = cache();
        let mut claims = Vec::new();
        for (i, pv) in case.pvs.into_iter().enumerate() {
            let claim = format!("c{i}");
            c.apply_pv(pv.claim("default", &claim).arc());
            c.apply_pvc(
                PvcBuilder::new(&claim, "local", "1Gi")
                    .bound_to(&format!("pv{i}"))
                    .arc(),
            );
            claims.push(claim);
        }
        let names: Vec<&str> = claims.iter().map(String::as_str).collect();
        let pod = PodInfo::new(with_claims(PodBuilder::new("p").build(), &names));
        let (result, s) = plugin(&c, None).pre_filter(&mut CycleState::new(), &pod, &[]);
        assert!(s.is_success(), "{}: {s:?}", case.name);
        let got = result.and_then(|r| r.node_names);
        let want = case
            .want
            .map(|w| w.into_iter().map(String::from).collect::<BTreeSet<_>>());
        assert_eq!(got, want, "{}", case.name);
    }
}

#[test]
fn smallest_fitting_pv_is_chosen_and_assumed() {
    let c = cache();
    c.apply_pv(PvBuilder::new("big", "local", "100Gi").arc());
    c.apply_pv(PvBuilder::new("small", "local", "10Gi").arc());
    c.apply_pv(PvBuilder::new("tiny", "local", "1Gi").arc());
    c.apply_pvc(PvcBuilder::new("data", "local", "5Gi").arc());
    c.apply_pvc(PvcBuilder::new("data2", "local", "5Gi").arc());
    let api = FakeVolumeApi::completing(c.clone());
    let pl = plugin(&c, Some(api.clone()));
    let pod = PodInfo::new(with_claims(PodBuilder::new("p").build(), &["data"]));
    let node = &nodes()[0];
    let mut state = CycleState::new();
    assert_eq!(pl.pre_filter(&mut state, &pod, &[]).1.code(), Code::Success);
    assert!(pl.filter(&state, &pod, node).is_success());
    assert!(pl.reserve(&mut state, &pod, "n1").is_success());
    assert!(c.is_pv_assumed("small"));

    // The next pod sees "small" as taken and gets "big".
    let pod2 = PodInfo::new(with_claims(PodBuilder::new("p2").build(), &["data2"]));
    let mut state2 = CycleState::new();
    pl.pre_filter(&mut state2, &pod2, &[]);
    assert!(pl.filter(&state2, &pod2, node).is_success());
    assert!(pl.reserve(&mut state2, &pod2, "n1").is_success());
    assert!(c.is_pv_assumed("big"));
    pl.unreserve(&mut state2, &pod2, "n1");
    pl.unreserve(&mut state2, &pod2, "n1");
    assert!(!c.is_pv_assumed("big"));

    // PreBind patches the claimRef and waits for the (fake) controller.
    assert!(pl.pre_bind_pre_flight(&state, &pod, "n1").is_success());
    let s = pl.pre_bind(&mut state, &pod, "n1");
    assert!(s.is_success(), "{s:?}");
    let writes = api.writes();
    assert_eq!(writes.len(), 1);
    let VolumeWrite::Pv(name, patch) = &writes[0] else {
        panic!("{writes:?}")
    };
    assert_eq!(name, "small");
    assert_eq!(patch["spec"]["claimRef"]["name"], "data");
    assert_eq!(patch["spec"]["claimRef"]["uid"], "uid-data");
    assert_eq!(
        c.api_pvc("default", "data")
            .unwrap()
            .spec
            .as_ref()
            .unwrap()
            .volume_name
            .as_deref(),
        Some("small")
    );
}

#[test]
fn provisioning_annotates_selected_node() {
    let c = cache();
    c.apply_pvc(PvcBuilder::new("data", "fast", "5Gi").arc());
    let api = FakeVolumeApi::completing(c.clone());
    let pl = plugin(&c, Some(api.clone()));
    let pod = PodInfo::new(with_claims(PodBuilder::new("p").build(), &["data"]));
    let mut state = CycleState::new();
    pl.pre_filter(&mut state, &pod, &[]);
    assert!(pl.filter(&state, &pod, &nodes()[0]).is_success());
    assert!(pl.reserve(&mut state, &pod, "n1").is_success());
    let assumed = c.pvc("default", "data").unwrap();
    assert_eq!(selected_node(&assumed), Some("n1"));
    assert!(pl.pre_bind(&mut state, &pod, "n1").is_success());
    assert_eq!(
        api.writes(),
        vec![VolumeWrite::Pvc(
            "default/data".into(),
            json!({"metadata": {"annotations": {ANNOTATION_SELECTED_NODE: "n1"}}})
        )]
    );
}

/// upstream's "provisioning-pvc-selected-node-dropped" and "…-wrong-node": a claim whose
/// selected-node annotation the provisioner removed or changed fails the wait at once; an API
/// version that merely predates PreBind's own patch does not.
#[test]
fn a_provisioner_giving_up_fails_the_wait_once_the_annotation_was_seen() {
    let c = cache();
    c.apply_pvc(PvcBuilder::new("data", "fast", "5Gi").arc());
    let pl = plugin(&c, Some(FakeVolumeApi::new()));
    let pod = PodInfo::new(with_claims(PodBuilder::new("p").build(), &["data"]));
    let mut state = CycleState::new();
    pl.pre_filter(&mut state, &pod, &[]);
    assert!(pl.filter(&state, &pod, &nodes()[0]).is_success());
    assert!(pl.reserve(&mut state, &pod, "n1").is_success());
    let data = VolumeBinding::data(&state).unwrap();
    let reserved = data.reserved.lock().take().unwrap();
    assert_eq!(reserved.pvcs, [("default".to_string(), "data".to_string())]);
    let progress = |seen: &mut Observed| {
        VolumeBinding::binding_progress(&c, &data, &reserved, "n1", seen).map_err(|e| e.to_string())
    };
    let api_version = |rv: &str, selected: Option<&str>| {
        let mut pvc = PvcBuilder::new("data", "fast", "5Gi").build();
        pvc.metadata.resource_version = Some(rv.into());
        if let Some(node) = selected {
            pvc.metadata.annotations = Some(BTreeMap::from([(ANNOTATION_SELECTED_NODE.into(), node.into())]));
        }
        Arc::new(pvc)
    };
    let mut annotated = Observed::default();
    // The watch has not shown PreBind's patch yet: waiting, not failed.
    assert_eq!(progress(&mut annotated), Ok(false));
    // A stale annotation of an earlier attempt on another node is not a failure either.
    c.apply_pvc(api_version("2", Some("n2")));
    assert_eq!(progress(&mut annotated), Ok(false));
    c.apply_pvc(api_version("3", Some("n1")));
    assert_eq!(progress(&mut annotated), Ok(false));
    // Dropped after it was seen: the provisioner gave up.
    c.apply_pvc(api_version("4", None));
    assert_eq!(
        progress(&mut annotated),
        Err("provisioning failed for PVC \"data\"".to_string())
    );
    // Moved to another node after it was seen: the same.
    c.apply_pvc(api_version("5", Some("n2")));
    assert_eq!(
        progress(&mut annotated),
        Err("provisioning failed for PVC \"data\"".to_string())
    );
    // Bound by the PV controller (volumeName and bind-completed), annotation kept: done.
    let mut bound = (*api_version("6", Some("n1"))).clone();
    bound.spec.as_mut().unwrap().volume_name = Some("pvc-data".into());
    bound
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(ANNOTATION_BIND_COMPLETED.into(), "yes".into());
    c.apply_pvc(Arc::new(bound));
    assert_eq!(progress(&mut annotated), Ok(true));
}

/// upstream's "binding-claimref-nil" and "binding-claimref-uid-empty": a volume that loses the
/// `claimRef` PreBind gave it fails the wait at once, but only once the watch has shown that
/// `claimRef` (an API version from before PreBind's patch has none yet).
#[test]
fn a_volume_unbound_after_its_claim_ref_was_seen_fails_the_wait() {
    let c = cache();
    c.apply_pv(PvBuilder::new("pv1", "local", "10Gi").arc());
    c.apply_pvc(PvcBuilder::new("data", "local", "5Gi").arc());
    let pl = plugin(&c, Some(FakeVolumeApi::new()));
    let pod = PodInfo::new(with_claims(PodBuilder::new("p").build(), &["data"]));
    let mut state = CycleState::new();
    pl.pre_filter(&mut state, &pod, &[]);
    assert!(pl.filter(&state, &pod, &nodes()[0]).is_success());
    assert!(pl.reserve(&mut state, &pod, "n1").is_success());
    let data = VolumeBinding::data(&state).unwrap();
    let reserved = data.reserved.lock().take().unwrap();
    assert_eq!(reserved.pvs, ["pv1"]);
    let api_version = |rv: &str, uid: Option<&str>| {
        let mut pv = PvBuilder::new("pv1", "local", "10Gi").build();
        pv.metadata.resource_version = Some(rv.into());
        if let Some(uid) = uid {
            let mut claimed = PvBuilder::new("pv1", "local", "10Gi")
                .claim("default", "data")
                .build();
            claimed.spec.as_mut().unwrap().claim_ref.as_mut().unwrap().uid = Some(uid.into());
            pv.spec = claimed.spec;
        }
        Arc::new(pv)
    };
    for (round, (undone, uid_after)) in [("dropped", None), ("uid emptied", Some(""))]
        .into_iter()
        .enumerate()
    {
        let rv = |step: usize| (10 * round + step).to_string();
        let mut seen = Observed::default();
        let mut progress = |c: &VolumeCache| {
            VolumeBinding::binding_progress(c, &data, &reserved, "n1", &mut seen).map_err(|e| e.to_string())
        };
        // Before PreBind's patch shows: waiting.
        c.apply_pv(api_version(&rv(2), None));
        assert_eq!(progress(&c), Ok(false), "{undone}");
        c.apply_pv(api_version(&rv(3), Some("uid-data")));
        assert_eq!(progress(&c), Ok(false), "{undone}");
        c.apply_pv(api_version(&rv(4), uid_after));
        assert_eq!(
            progress(&c),
            Err("ClaimRef got reset for pv \"pv1\"".to_string()),
            "{undone}"
        );
    }
}

#[test]
fn pre_bind_times_out_and_fails_on_api_errors() {
    let c = cache();
    c.apply_pv(PvBuilder::new("pv1", "local", "10Gi").arc());
    c.apply_pvc(PvcBuilder::new("data", "local", "5Gi").arc());
    let api = FakeVolumeApi::new();
    let args = VolumeBindingArgs {
        bind_timeout_seconds: 0,
        ..VolumeBindingArgs::default()
    };
    let pl = VolumeBinding::new(&args, Some(c.clone()), Some(api.clone() as Arc<dyn VolumeApi>));
    let pod = PodInfo::new(with_claims(PodBuilder::new("p").build(), &["data"]));
    let mut state = CycleState::new();
    pl.pre_filter(&mut state, &pod, &[]);
    assert!(pl.filter(&state, &pod, &nodes()[0]).is_success());
    assert!(pl.reserve(&mut state, &pod, "n1").is_success());
    let s = pl.pre_bind(&mut state, &pod, "n1");
    assert_eq!(s.code(), Code::Error);
    assert!(s.to_string().contains("context deadline exceeded"), "{s}");
    api.fail_with(Some(crate::volume::VolumeApiError::Other("boom".into())));
    let s = pl.pre_bind(&mut state, &pod, "n1");
    assert!(s.to_string().contains("boom"), "{s}");
    pl.unreserve(&mut state, &pod, "n1");
    assert!(!c.is_pv_assumed("pv1"));
}

#[test]
fn pre_bind_fails_fast_when_the_pv_goes_to_another_claim() {
    let c = cache();
    c.apply_pv(PvBuilder::new("pv1", "local", "10Gi").arc());
    c.apply_pvc(PvcBuilder::new("data", "local", "5Gi").arc());
    let pl = plugin(&c, Some(FakeVolumeApi::new()));
    let pod = PodInfo::new(with_claims(PodBuilder::new("p").build(), &["data"]));
    let mut state = CycleState::new();
    pl.pre_filter(&mut state, &pod, &[]);
    assert!(pl.filter(&state, &pod, &nodes()[0]).is_success());
    assert!(pl.reserve(&mut state, &pod, "n1").is_success());
    let mut stolen = PvBuilder::new("pv1", "local", "10Gi")
        .claim("default", "thief")
        .build();
    stolen.metadata.resource_version = Some("2".into());
    c.apply_pv(Arc::new(stolen));
    let started = std::time::Instant::now();
    let s = pl.pre_bind(&mut state, &pod, "n1");
    assert_eq!(s.code(), Code::Error);
    assert!(s.to_string().contains("bound to another claim \"thief\""), "{s}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "no waiting for the timeout"
    );
}

/// Upstream's `TestIsSchedulableAfterStorageClassChange`: a pod without claims is queued by any
/// new class (a creation tells nothing more), and by a change of allowed topologies only.
#[test]
fn class_hints() {
    let ev = |class: Arc<StorageClass>| EventObject::StorageClass(class);
    let plain = ev(storage_class(
        "sc-a",
        "csi.example.com",
        WAIT_FOR_FIRST_CONSUMER,
        None,
    ));
    let zoned = ev(storage_class(
        "sc-a",
        "csi.example.com",
        WAIT_FOR_FIRST_CONSUMER,
        Some(("kubernetes.io/hostname", &["node-a"])),
    ));
    let other_provisioner = ev(storage_class("sc-a", "other.example.com", "Immediate", None));
    let node = EventObject::Node(Arc::new(NodeBuilder::new("n").build()));
    struct Case {
        name: &'static str,
        old: Option<EventObject>,
        new: EventObject,
        want: Result<QueueingHint, ()>,
    }
    let cases = [
        Case {
            name: "a new class queues, also one no claim of the pod uses",
            old: None,
            new: plain.clone(),
            want: Ok(QueueingHint::Queue),
        },
        Case {
            name: "allowed topologies changed",
            old: Some(plain.clone()),
            new: zoned.clone(),
            want: Ok(QueueingHint::Queue),
        },
        Case {
            name: "allowed topologies removed",
            old: Some(zoned),
            new: plain.clone(),
            want: Ok(QueueingHint::Queue),
        },
        Case {
            name: "no change",
            old: Some(plain.clone()),
            new: plain.clone(),
            want: Ok(QueueingHint::Skip),
        },
        Case {
            // Both are immutable in the API; an update can only carry them unchanged.
            name: "provisioner and binding mode are not looked at",
            old: Some(plain.clone()),
            new: other_provisioner,
            want: Ok(QueueingHint::Skip),
        },
        Case {
            name: "not a StorageClass",
            old: None,
            new: node.clone(),
            want: Err(()),
        },
        Case {
            name: "old side not a StorageClass",
            old: Some(node),
            new: plain,
            want: Err(()),
        },
    ];
    for case in cases {
        let got = class_hint(case.old.as_ref(), Some(&case.new)).map_err(|_| ());
        assert_eq!(got, case.want, "{}", case.name);
    }
}

/// Upstream's `TestIsSchedulableAfterCSINodeChange`.
#[test]
fn csi_node_hints() {
    let csi_node = |migrated: Option<&str>| {
        let mut n = k8s_openapi::api::storage::v1::CSINode {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("csinode-a".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        if let Some(m) = migrated {
            n.metadata.annotations = Some(
                [(MIGRATED_PLUGINS_ANNOTATION.to_string(), m.to_string())]
                    .into_iter()
                    .collect(),
            );
        }
        EventObject::CsiNode(Arc::new(n))
    };
    let class = EventObject::StorageClass(storage_class("sc", "p", "Immediate", None));
    let cases = [
        ("unexpected objects are passed", None, class, Err(())),
        (
            "CSINode is newly created",
            None,
            csi_node(None),
            Ok(QueueingHint::Queue),
        ),
        (
            "CSINode's migrated-plugins annotation is added",
            Some(csi_node(None)),
            csi_node(Some("test1")),
            Ok(QueueingHint::Queue),
        ),
        (
            "CSINode's migrated-plugins annotation is updated",
            Some(csi_node(Some("test1"))),
            csi_node(Some("test1, test2")),
            Ok(QueueingHint::Queue),
        ),
        (
            "CSINode's migrated-plugins annotation is replaced",
            Some(csi_node(Some("test1"))),
            csi_node(Some("test2")),
            Ok(QueueingHint::Queue),
        ),
        (
            "CSINode is updated but migrated-plugins annotation gets unchanged",
            Some(csi_node(Some("test1"))),
            csi_node(Some("test1")),
            Ok(QueueingHint::Skip),
        ),
    ];
    for (name, old, new, want) in cases {
        let got = csi_node_hint(old.as_ref(), Some(&new)).map_err(|_| ());
        assert_eq!(got, want, "{name}");
    }
}

/// The events are upstream 1.37.2's: any PV change queues (no hint), node taints are not
/// registered.
#[test]
fn registered_events_are_upstreams() {
    let plugin = VolumeBinding::new(&VolumeBindingArgs::default(), None, None);
    let events = plugin.events_to_register();
    let find = |r: EventResource| {
        events
            .iter()
            .find(|e| e.event.resource == r)
            .unwrap_or_else(|| panic!("{r:?} registered"))
    };
    let node = find(EventResource::Node);
    assert_eq!(
        node.event.action,
        ActionType::ADD.or(ActionType::UPDATE_NODE_LABEL)
    );
    assert!(!node.event.action.intersects(ActionType::UPDATE_NODE_TAINT));
    let pv = find(EventResource::PersistentVolume);
    assert!(pv.hint.is_none(), "every PV add and update queues");
    assert_eq!(pv.event.action, ActionType::ADD.or(ActionType::UPDATE));
    assert!(find(EventResource::CsiNode).hint.is_some());
    assert!(find(EventResource::StorageClass).hint.is_some());
}
