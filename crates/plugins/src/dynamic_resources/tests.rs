//! Table-driven tests of every extension point and rule (see the module documentation).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Node, NodeAllocatableResourceClaimStatus, Pod, PodResourceClaim, PodResourceClaimStatus,
    ResourceClaim as ContainerClaim, ResourceRequirements,
};
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceAllocationResult, DeviceRequestAllocationResult, NodeAllocatableMapping,
    NodeAllocatableOverhead, NodeAllocatableResource, ResourceClaim, ResourceClaimConsumerReference,
    ResourceClaimStatus,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use unisched_cache::DraCache;
use unisched_dra::testing::{DeviceBuilder, claim, class, dev, first_available, req, slice};
use unisched_framework::{
    Code, CycleState, DIAGNOSIS_DETAIL_KEY, DiagnosisDetail, EventObject, FilterPlugin, NODE_FOOTPRINTS_KEY,
    NODE_VETO_KEY, NodeFootprints, NodeInfo, NodeToStatus, NodeVetoHandle, PodInfo, PostFilterPlugin,
    PreEnqueuePlugin, PreFilterPlugin, QueueingHint, ReservePlugin, ScorePlugin, Snapshot, Status,
};

use super::testing::{ApiWrite, FakeDraApi};
use super::*;
use crate::testing::{NodeBuilder, PodBuilder, poll_to_end};

// ----- fixtures -----

const GPU: &str = "gpu.example.com";

struct Env {
    dra: Arc<DraCache>,
    api: Arc<FakeDraApi>,
    plugin: Arc<DynamicResources>,
}

fn env() -> Env {
    env_with(DynamicResourcesArgs::default())
}

fn env_with(args: DynamicResourcesArgs) -> Env {
    let dra = Arc::new(DraCache::new());
    let api = FakeDraApi::new();
    api.echo_to(dra.clone());
    let plugin = Arc::new(
        DynamicResources::new(&args, Some(dra.clone()), Some(api.clone() as Arc<dyn DraApi>))
            .with_poll_interval(Duration::from_millis(2)),
    );
    dra.apply_class(Arc::new(class(GPU, GPU))).unwrap();
    Env { dra, api, plugin }
}

fn gpus(node: &str, n: usize, model: &str) -> k8s_openapi::api::resource::v1::ResourceSlice {
    let mut s = slice(&format!("{node}-gpu"), GPU, node, node);
    for i in 0..n {
        s = s.device(
            dev(&format!("gpu-{i}"))
                .string("model", model)
                .int("index", i as i64),
        );
    }
    s.build()
}

impl Env {
    fn slice(&self, s: k8s_openapi::api::resource::v1::ResourceSlice) {
        self.dra.apply_slice(Arc::new(s)).unwrap();
    }
    fn claim(&self, c: ResourceClaim) -> ResourceClaim {
        self.api.seed_claim(c)
    }
    /// PreFilter in a cycle state whose snapshot has a [`node`] for every node with slices, as
    /// the framework's would (Reserve looks the chosen node up there).
    fn prefilter(&self, pod: &PodInfo) -> (CycleState, Status) {
        let names: BTreeSet<String> = self
            .dra
            .snapshot()
            .index()
            .slices()
            .iter()
            .filter_map(|s| s.slice().spec.node_name.clone())
            .collect();
        let snapshot = Snapshot::from_node_infos(names.iter().map(|n| node(n)));
        let mut st = CycleState::with_snapshot(Arc::new(snapshot));
        let (_, s) = self.plugin.pre_filter(&mut st, pod, &[]);
        (st, s)
    }
    fn filter(&self, st: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        self.plugin.filter(st, pod, node)
    }
    /// The sentence the framework appends to FailedScheduling when no node fits: the detail hook
    /// PreFilter registered, given the rejected nodes with their Filter statuses (attributed to the
    /// plugin, as the framework does).
    fn detail(&self, st: &CycleState, rejected: &[(&NodeInfo, &Status)]) -> String {
        let mut statuses = NodeToStatus::default();
        for (n, s) in rejected {
            statuses.set(n.name(), (*s).clone().with_plugin(NAME));
        }
        let snapshot = Snapshot::from_node_infos(rejected.iter().map(|(n, _)| (*n).clone()));
        let hook = st.read::<DiagnosisDetail>(DIAGNOSIS_DETAIL_KEY).unwrap();
        let sentences = hook.0.detail(&statuses, &snapshot);
        assert!(sentences.len() <= 1, "{sentences:?}");
        sentences.into_iter().next().unwrap_or_default()
    }
}

fn node(name: &str) -> NodeInfo {
    NodeBuilder::new(name)
        .alloc("cpu", "8")
        .alloc("memory", "32Gi")
        .alloc("pods", "110")
        .info()
}

/// A pod whose container `c0` references each claim.
fn pod_with(name: &str, claims: &[&str]) -> Pod {
    let mut p = PodBuilder::new(name).req("cpu", "1").build();
    for c in claims {
        add_claim_ref(&mut p, c, Some(c), true);
    }
    p
}

fn add_claim_ref(p: &mut Pod, pod_claim: &str, claim_name: Option<&str>, referenced: bool) {
    let spec = p.spec.as_mut().unwrap();
    spec.resource_claims
        .get_or_insert_with(Vec::new)
        .push(PodResourceClaim {
            name: pod_claim.into(),
            resource_claim_name: claim_name.map(String::from),
            resource_claim_template_name: claim_name.is_none().then(|| "tmpl".to_string()),
        });
    if referenced {
        for c in &mut spec.containers {
            c.resources
                .get_or_insert_with(ResourceRequirements::default)
                .claims
                .get_or_insert_with(Vec::new)
                .push(ContainerClaim {
                    name: pod_claim.into(),
                    request: None,
                });
        }
    }
}

fn owned_by(mut c: ResourceClaim, pod: &Pod) -> ResourceClaim {
    c.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: pod.metadata.name.clone().unwrap(),
        uid: pod.metadata.uid.clone().unwrap(),
        controller: Some(true),
        block_owner_deletion: None,
    }]);
    c
}

fn info(p: &Pod) -> PodInfo {
    PodInfo::new(p.clone())
}

fn gpu_claim(name: &str, count: i64) -> ResourceClaim {
    claim("default", name)
        .request(req("gpu", GPU).count(count))
        .build()
}

fn result(request: &str, driver: &str, pool: &str, device: &str) -> DeviceRequestAllocationResult {
    DeviceRequestAllocationResult {
        request: request.into(),
        driver: driver.into(),
        pool: pool.into(),
        device: device.into(),
        ..Default::default()
    }
}

fn allocation(results: Vec<DeviceRequestAllocationResult>) -> AllocationResult {
    AllocationResult {
        devices: Some(DeviceAllocationResult {
            results: Some(results),
            config: None,
        }),
        ..Default::default()
    }
}

fn with_allocation(mut c: ResourceClaim, a: AllocationResult, reserved_for: &[&str]) -> ResourceClaim {
    let st = c.status.get_or_insert_with(Default::default);
    st.allocation = Some(a);
    if !reserved_for.is_empty() {
        st.reserved_for = Some(
            reserved_for
                .iter()
                .map(|u| ResourceClaimConsumerReference {
                    api_group: None,
                    name: u.to_string(),
                    resource: "pods".into(),
                    uid: u.to_string(),
                })
                .collect(),
        );
    }
    c
}

fn q(s: &str) -> ApiQuantity {
    ApiQuantity(s.into())
}

fn with_nar(mut d: DeviceBuilder, resource: &str, nar: NodeAllocatableResource) -> DeviceBuilder {
    d.0.node_allocatable_resources
        .get_or_insert_with(BTreeMap::new)
        .insert(resource.into(), nar);
    d
}

fn node_obj(ni: &NodeInfo) -> Node {
    (**ni.node().unwrap()).clone()
}

// ----- PreEnqueue / PreFilter -----

#[test]
fn pre_enqueue_and_pre_filter_claim_resolution() {
    struct Case {
        name: &'static str,
        setup: fn(&Env) -> Pod,
        pre_enqueue: Result<(), &'static str>,
        pre_filter: Result<Code, &'static str>,
    }
    let cases = [
        Case {
            name: "no claims: skip",
            setup: |_| PodBuilder::new("p").build(),
            pre_enqueue: Ok(()),
            pre_filter: Ok(Code::Skip),
        },
        Case {
            name: "direct claim",
            setup: |e| {
                e.claim(gpu_claim("c", 1));
                pod_with("p", &["c"])
            },
            pre_enqueue: Ok(()),
            pre_filter: Ok(Code::Success),
        },
        Case {
            name: "missing claim",
            setup: |_| pod_with("p", &["c"]),
            pre_enqueue: Err("could not find ResourceClaim \"default/c\""),
            pre_filter: Err("could not find ResourceClaim \"default/c\""),
        },
        Case {
            name: "template claim resolved via pod status",
            setup: |e| {
                let mut p = PodBuilder::new("p").build();
                add_claim_ref(&mut p, "gpu", None, true);
                p.status
                    .get_or_insert_with(Default::default)
                    .resource_claim_statuses = Some(vec![PodResourceClaimStatus {
                    name: "gpu".into(),
                    resource_claim_name: Some("p-gpu-x".into()),
                }]);
                e.claim(owned_by(gpu_claim("p-gpu-x", 1), &p));
                p
            },
            pre_enqueue: Ok(()),
            pre_filter: Ok(Code::Success),
        },
        Case {
            name: "template claim not created yet",
            setup: |_| {
                let mut p = PodBuilder::new("p").build();
                add_claim_ref(&mut p, "gpu", None, true);
                p
            },
            pre_enqueue: Err("pod \"default/p\": ResourceClaim not created yet"),
            pre_filter: Err("ResourceClaim not created yet"),
        },
        Case {
            name: "template claim intentionally not created: skipped",
            setup: |_| {
                let mut p = PodBuilder::new("p").build();
                add_claim_ref(&mut p, "gpu", None, true);
                p.status
                    .get_or_insert_with(Default::default)
                    .resource_claim_statuses = Some(vec![PodResourceClaimStatus {
                    name: "gpu".into(),
                    resource_claim_name: None,
                }]);
                p
            },
            pre_enqueue: Ok(()),
            pre_filter: Ok(Code::Skip),
        },
        Case {
            name: "generated claim of another pod",
            setup: |e| {
                let mut p = PodBuilder::new("p").build();
                add_claim_ref(&mut p, "gpu", None, true);
                p.status
                    .get_or_insert_with(Default::default)
                    .resource_claim_statuses = Some(vec![PodResourceClaimStatus {
                    name: "gpu".into(),
                    resource_claim_name: Some("x".into()),
                }]);
                let other = PodBuilder::new("other").build();
                e.claim(owned_by(gpu_claim("x", 1), &other));
                p
            },
            pre_enqueue: Err("ResourceClaim default/x was not created for Pod default/p (Pod is not owner)"),
            pre_filter: Err("(Pod is not owner)"),
        },
        Case {
            name: "claim being deleted",
            setup: |e| {
                let mut c = gpu_claim("c", 1);
                c.metadata.deletion_timestamp =
                    Some(Time(k8s_openapi::jiff::Timestamp::from_second(1).unwrap()));
                e.claim(c);
                pod_with("p", &["c"])
            },
            pre_enqueue: Err("resourceclaim \"c\" is being deleted"),
            pre_filter: Err("is being deleted"),
        },
        Case {
            name: "claim in flight for another pod",
            setup: |e| {
                let c = e.claim(gpu_claim("c", 1));
                e.dra.reserve_in_flight(
                    c.metadata.uid.as_deref().unwrap(),
                    allocation(vec![result("gpu", GPU, "n1", "gpu-0")]),
                );
                pod_with("p", &["c"])
            },
            pre_enqueue: Ok(()),
            pre_filter: Err("resource claim default/c is in the process of being allocated"),
        },
        Case {
            name: "missing class",
            setup: |e| {
                e.claim(claim("default", "c").request(req("gpu", "nope")).build());
                pod_with("p", &["c"])
            },
            pre_enqueue: Ok(()),
            pre_filter: Err("request gpu: device class nope does not exist"),
        },
        Case {
            name: "invalid CEL names the claim",
            setup: |e| {
                e.claim(
                    claim("default", "c")
                        .request(req("gpu", GPU).selector("device.attributes["))
                        .build(),
                );
                pod_with("p", &["c"])
            },
            pre_enqueue: Ok(()),
            pre_filter: Err("claim default/c"),
        },
        Case {
            name: "claim reserved by too many pods",
            setup: |e| {
                let mut c = with_allocation(gpu_claim("c", 1), allocation(vec![]), &[]);
                c.status.as_mut().unwrap().reserved_for = Some(
                    (0..RESERVED_FOR_MAX_SIZE)
                        .map(|i| ResourceClaimConsumerReference {
                            api_group: None,
                            name: format!("x{i}"),
                            resource: "pods".into(),
                            uid: format!("x{i}"),
                        })
                        .collect(),
                );
                e.claim(c);
                pod_with("p", &["c"])
            },
            pre_enqueue: Ok(()),
            pre_filter: Err("resourceclaim in use"),
        },
    ];
    for c in cases {
        let e = env();
        let pod = info(&(c.setup)(&e));
        let s = e.plugin.pre_enqueue(&pod);
        match c.pre_enqueue {
            Ok(()) => assert!(s.is_success(), "{}: pre_enqueue {s:?}", c.name),
            Err(want) => {
                assert_eq!(s.code(), Code::UnschedulableAndUnresolvable, "{}", c.name);
                assert!(s.message().contains(want), "{}: {}", c.name, s.message());
            }
        }
        let (_, s) = e.prefilter(&pod);
        match c.pre_filter {
            Ok(code) => assert_eq!(s.code(), code, "{}: {s:?}", c.name),
            Err(want) => {
                assert_eq!(s.code(), Code::UnschedulableAndUnresolvable, "{}: {s:?}", c.name);
                assert!(s.message().contains(want), "{}: {}", c.name, s.message());
            }
        }
    }
}

/// KEP-5501: which PreEnqueue refusals are passed on to the user. The wait for the claim
/// controller to create a template's claim is not (it ends in seconds, and the controller reports
/// its own failures); a claim that is missing or being deleted is, with the refusal's message.
#[test]
fn pre_enqueue_reports_every_refusal_but_the_wait_for_a_generated_claim() {
    let template_pod = |status: Option<&str>| {
        let mut p = PodBuilder::new("p").build();
        add_claim_ref(&mut p, "gpu", None, true);
        if let Some(name) = status {
            p.status
                .get_or_insert_with(Default::default)
                .resource_claim_statuses = Some(vec![PodResourceClaimStatus {
                name: "gpu".into(),
                resource_claim_name: Some(name.into()),
            }]);
        }
        p
    };
    let cases: [(&str, Pod, Option<&str>); 4] = [
        ("template claim not created yet", template_pod(None), None),
        (
            "template claim created but not seen",
            template_pod(Some("p-gpu-x")),
            Some("could not find ResourceClaim \"default/p-gpu-x\""),
        ),
        (
            "named claim missing",
            pod_with("p", &["c"]),
            Some("could not find ResourceClaim \"default/c\""),
        ),
        (
            // The first unresolved reference decides: once the claim controller is done, the
            // missing named claim refuses the pod, and that is reported.
            "named claim missing, template claim not created yet",
            {
                let mut p = pod_with("p", &["c"]);
                add_claim_ref(&mut p, "gpu", None, true);
                p
            },
            None,
        ),
    ];
    for (name, pod, want) in cases {
        let e = env();
        let pod = info(&pod);
        let status = e.plugin.pre_enqueue(&pod);
        assert!(!status.is_success(), "{name}: {status:?}");
        let got = e.plugin.rejection_message(&pod, &status);
        assert_eq!(got.is_some(), want.is_some(), "{name}: {got:?}");
        if let (Some(got), Some(want)) = (got, want) {
            assert!(got.contains(want), "{name}: {got}");
        }
    }
}

#[test]
fn missing_class_message_has_no_claim_prefix() {
    let e = env();
    e.claim(claim("default", "c").request(req("gpu", "nope")).build());
    let (_, s) = e.prefilter(&info(&pod_with("p", &["c"])));
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(s.message(), "request gpu: device class nope does not exist");
}

// ----- Filter -----

/// A fatal allocator error on one node is an Error status (the attempt ends), while a node
/// that cannot serve the claim stays a per-node rejection (upstream's CEL runtime error and
/// `All`-with-constraint cases).
#[test]
fn filter_fatal_errors_are_errors() {
    struct Case {
        name: &'static str,
        claim: ResourceClaim,
        /// (node, expected code, text the message contains).
        want: Vec<(&'static str, Code, &'static str)>,
    }
    let healthy = format!(r#"device.attributes["{GPU}"].healthy"#);
    let cases = [
        Case {
            name: "CEL runtime error on the node whose devices lack the attribute",
            claim: claim("default", "c")
                .request(req("gpu", GPU).selector(&healthy))
                .build(),
            want: vec![
                ("n1", Code::Error, "CEL runtime error"),
                ("n2", Code::Success, ""),
            ],
        },
        Case {
            name: "All request whose constraint the devices cannot meet",
            claim: claim("default", "c")
                .request(req("gpu", GPU).all())
                .match_attribute(&format!("{GPU}/index"), &[])
                .build(),
            want: vec![(
                "n2",
                Code::Error,
                "claim default/c, request gpu: cannot add device gpu.example.com/n2/gpu-1 \
                 because a claim constraint would not be satisfied",
            )],
        },
        Case {
            name: "All request whose constraint holds",
            claim: claim("default", "c")
                .request(req("gpu", GPU).all())
                .match_attribute(&format!("{GPU}/model"), &[])
                .build(),
            want: vec![("n2", Code::Success, "")],
        },
        Case {
            name: "too few devices stays a node rejection",
            claim: gpu_claim("c", 3),
            want: vec![("n2", Code::UnschedulableAndUnresolvable, reason::CANNOT_ALLOCATE)],
        },
    ];
    for c in cases {
        let e = env();
        e.slice(gpus("n1", 1, "a100"));
        let mut s2 = slice("n2-gpu", GPU, "n2", "n2");
        for i in 0..2 {
            s2 = s2.device(
                dev(&format!("gpu-{i}"))
                    .string("model", "a100")
                    .int("index", i)
                    .boolean("healthy", true),
            );
        }
        e.slice(s2.build());
        e.claim(c.claim);
        let pod = info(&pod_with("p", &["c"]));
        let (st, s) = e.prefilter(&pod);
        assert!(s.is_success(), "{}: {s:?}", c.name);
        for (n, code, text) in c.want {
            let s = e.filter(&st, &pod, &node(n));
            assert_eq!(s.code(), code, "{} on {n}: {s:?}", c.name);
            assert!(s.message().contains(text), "{} on {n}: {}", c.name, s.message());
        }
    }
}

/// A node the device summary found short is vetoed for the next pods with the same selectors
/// (the algorithm then passes over it), until a device may have been freed; a node without
/// devices is vetoed from the start. Pods the summary does not decide get no veto.
#[test]
fn short_nodes_are_vetoed_until_a_device_may_be_free() {
    let e = env();
    e.slice(gpus("n1", 1, "a100"));
    e.slice(gpus("n2", 1, "a100"));
    let taken = with_allocation(
        gpu_claim("taken", 1),
        allocation(vec![result("gpu", GPU, "n1", "gpu-0")]),
        &["other"],
    );
    e.claim(taken.clone());
    let veto = |st: &CycleState| {
        st.read::<NodeVetoHandle>(NODE_VETO_KEY)
            .ok()
            .map(|h| (h.plugin.clone(), h.veto.clone()))
    };
    let (n1, n2, n3) = (node("n1"), node("n2"), node("n3"));

    e.claim(gpu_claim("a", 1));
    let pa = info(&pod_with("pa", &["a"]));
    let (st, _) = e.prefilter(&pa);
    let (plugin, v) = veto(&st).expect("a pod with one claim of the summary's shape gets a veto");
    assert_eq!(plugin, NAME);
    assert!(!v.vetoes(&n1), "nothing found yet");
    assert!(v.vetoes(&n3), "a node without devices");
    assert_eq!(e.filter(&st, &pa, &n1).message(), reason::CANNOT_ALLOCATE);
    assert!(e.filter(&st, &pa, &n2).is_success());
    assert!(v.vetoes(&n1), "found short by Filter");
    assert!(!v.vetoes(&n2), "it fits there");

    // The next pod with the same selectors starts from what the first one found.
    e.claim(gpu_claim("b", 1));
    let pb = info(&pod_with("pb", &["b"]));
    let (st, _) = e.prefilter(&pb);
    let (_, v) = veto(&st).unwrap();
    assert!(v.vetoes(&n1) && !v.vetoes(&n2) && v.vetoes(&n3));

    // Other selectors: their own record.
    let sel = format!("device.attributes[\"{GPU}\"].model == \"a100\"");
    e.claim(
        claim("default", "c")
            .request(req("gpu", GPU).selector(&sel))
            .build(),
    );
    let pc = info(&pod_with("pc", &["c"]));
    let (st, _) = e.prefilter(&pc);
    assert!(!veto(&st).unwrap().1.vetoes(&n1));

    // Two claims, or an allocation mode the summary leaves alone: no veto.
    let (st, _) = e.prefilter(&info(&pod_with("pab", &["a", "b"])));
    assert!(veto(&st).is_none());
    e.claim(claim("default", "all").request(req("gpu", GPU).all()).build());
    let (st, _) = e.prefilter(&info(&pod_with("pall", &["all"])));
    assert!(veto(&st).is_none());

    // n1's device is freed: what was found no longer holds.
    let mut freed = taken;
    freed.status = None;
    e.claim(freed);
    let (st, _) = e.prefilter(&pb);
    let (_, v) = veto(&st).unwrap();
    assert!(!v.vetoes(&n1), "a device may have been freed");
    assert!(e.filter(&st, &pb, &n1).is_success());
}

#[test]
fn filter_allocates_per_node() {
    let e = env();
    e.slice(gpus("n1", 2, "a100"));
    e.slice(gpus("n2", 1, "a100"));
    e.claim(gpu_claim("c", 2));
    let pod = info(&pod_with("p", &["c"]));
    let (st, s) = e.prefilter(&pod);
    assert!(s.is_success());
    struct Case {
        node: &'static str,
        want: Result<(), &'static str>,
    }
    let mut rejected = Vec::new();
    for c in [
        Case {
            node: "n1",
            want: Ok(()),
        },
        Case {
            node: "n2",
            want: Err(reason::CANNOT_ALLOCATE),
        },
        Case {
            node: "n3",
            want: Err(reason::CANNOT_ALLOCATE),
        },
    ] {
        let n = node(c.node);
        let s = e.filter(&st, &pod, &n);
        match c.want {
            Ok(()) => assert!(s.is_success(), "{}: {s:?}", c.node),
            Err(r) => {
                assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
                assert_eq!(s.message(), r, "{}", c.node);
                rejected.push((n, s));
            }
        }
    }
    let data = DynamicResources::data(&st).unwrap();
    assert!(data.passed("n1"));
    assert!(!data.passed("n2"));
    let rejected: Vec<(&NodeInfo, &Status)> = rejected.iter().map(|(n, s)| (n, s)).collect();
    assert_eq!(
        e.detail(&st, &rejected),
        "claim default/c request gpu: on 1 node no devices; \
         claim default/c request gpu: on 1 node fewer than 2 usable devices (at most 1)."
    );
}

/// The device summary decides the simple claim in Filter without allocating; Reserve then makes
/// exactly the allocation the full allocator makes for that node, and a node the summary cannot
/// decide goes through the allocator in Filter.
#[test]
fn summary_in_filter_allocation_in_reserve() {
    let e = env();
    e.slice(gpus("n1", 3, "a100"));
    e.slice(gpus("n2", 1, "a100"));
    let c = e.claim(gpu_claim("c", 2));
    let pod = info(&pod_with("p", &["c"]));
    let (mut st, s) = e.prefilter(&pod);
    assert!(s.is_success());
    assert!(e.filter(&st, &pod, &node("n1")).is_success());
    let n2 = e.filter(&st, &pod, &node("n2"));
    assert_eq!(n2.message(), reason::CANNOT_ALLOCATE);
    let data = DynamicResources::data(&st).unwrap();
    // Recorded as a bit of `fits`, without a result of its own.
    assert!(data.passed("n1"));
    assert!(!data.nodes.read().contains_key("n1"));
    // What the allocator alone chooses on n1.
    let want = data
        .allocator
        .as_ref()
        .unwrap()
        .allocate(
            &node("n1").node().unwrap().clone(),
            unisched_dra::Deadline::none(),
        )
        .unwrap();
    // With the summary off, Filter itself allocates, the same devices.
    let mut full = DynamicResources::new(
        &DynamicResourcesArgs::default(),
        Some(e.dra.clone()),
        Some(e.api.clone() as Arc<dyn DraApi>),
    );
    full.summary = false;
    let mut st_full = CycleState::new();
    assert!(full.pre_filter(&mut st_full, &pod, &[]).1.is_success());
    assert!(full.filter(&st_full, &pod, &node("n1")).is_success());
    let filtered = DynamicResources::data(&st_full).unwrap().nodes.read()["n1"].clone();
    assert!(filtered.deferred.is_none());
    assert_eq!(filtered.allocations, want);
    assert!(e.plugin.reserve(&mut st, &pod, "n1").is_success());
    let uid = c.metadata.uid.clone().unwrap();
    let got = e.dra.in_flight(&uid).unwrap();
    assert_eq!(*got.allocation, want[0]);
    assert_eq!(device_names_of(&got.allocation), vec!["gpu-0", "gpu-1"]);
    let stored = data.nodes.read().get("n1").cloned().unwrap();
    assert!(stored.deferred.is_none() && stored.allocations.len() == 1);
}

/// Reserve keeps Filter's result for the chosen node only and lets go of the allocator and the
/// DRA snapshot: the binding cycle holds the cycle state while it waits on the API server, and
/// none of that is read again. PreBind still works from what is kept.
#[test]
fn reserve_forgets_the_other_nodes_results() {
    let e = env();
    for n in ["n1", "n2", "n3"] {
        e.slice(gpus(n, 2, "a100"));
    }
    let c = e.claim(gpu_claim("c", 1));
    let pod = info(&pod_with("p", &["c"]));
    let (mut st, s) = e.prefilter(&pod);
    assert!(s.is_success());
    for n in ["n1", "n2", "n3"] {
        assert!(e.filter(&st, &pod, &node(n)).is_success(), "{n}");
    }
    let data = DynamicResources::data(&st).unwrap();
    data.footprints.set("n3", Default::default());
    data.footprints.set("n2", Default::default());
    assert!(["n1", "n2", "n3"].iter().all(|n| data.passed(n)));
    assert!(data.allocator.is_some());
    let held_index = Arc::downgrade(data.snapshot.index());
    drop(data);
    assert!(e.plugin.reserve(&mut st, &pod, "n2").is_success());
    let data = DynamicResources::data(&st).unwrap();
    // The allocator and the DRA snapshot are let go (the cache still holds its own index).
    assert!(data.allocator.is_none());
    assert!(!Arc::ptr_eq(
        &held_index.upgrade().unwrap(),
        data.snapshot.index()
    ));
    let kept: Vec<String> = data.nodes.read().keys().cloned().collect();
    assert_eq!(kept, vec!["n2".to_string()]);
    assert!(!data.passed("n1") && !data.passed("n3"));
    assert!(data.footprints.get("n3").is_none());
    assert!(data.footprints.get("n2").is_some());
    // The chosen node's allocation is what Reserve put in flight.
    let uid = c.metadata.uid.clone().unwrap();
    let got = e.dra.in_flight(&uid).unwrap();
    assert_eq!(device_names_of(&got.allocation).len(), 1);
    assert!(e.plugin.pre_bind(&mut st, &pod, "n2").is_success());
}

fn device_names_of(a: &AllocationResult) -> Vec<String> {
    a.devices
        .iter()
        .flat_map(|d| d.results.iter().flatten())
        .map(|r| r.device.clone())
        .collect()
}

#[test]
fn filter_allocated_claim_only_on_its_nodes() {
    let e = env();
    e.slice(gpus("n1", 1, "a100"));
    let mut a = allocation(vec![result("gpu", GPU, "n1", "gpu-0")]);
    a.node_selector = Some(unisched_dra::testing::label_selector(&[(
        "kubernetes.io/hostname",
        "n1",
    )]));
    e.claim(with_allocation(gpu_claim("c", 1), a, &[]));
    let pod = info(&pod_with("p", &["c"]));
    let (st, s) = e.prefilter(&pod);
    assert!(s.is_success(), "{s:?}");
    let n1 = NodeBuilder::new("n1")
        .alloc("cpu", "8")
        .alloc("pods", "10")
        .label("kubernetes.io/hostname", "n1")
        .info();
    let n2 = NodeBuilder::new("n2")
        .alloc("cpu", "8")
        .alloc("pods", "10")
        .label("kubernetes.io/hostname", "n2")
        .info();
    assert!(e.filter(&st, &pod, &n1).is_success());
    let s = e.filter(&st, &pod, &n2);
    assert_eq!(s.message(), reason::NOT_AVAILABLE);
}

#[test]
fn filter_timeout_is_reported() {
    let args = DynamicResourcesArgs {
        filter_timeout: unisched_framework::config::GoDuration(Duration::from_nanos(1)),
        ..DynamicResourcesArgs::default()
    };
    let e = env_with(args);
    // 16 devices with 7 distinct values and a distinctAttribute over 8 of them: an exhaustive
    // search (a matchAttribute claim would be decided by the device summary without one).
    let mut s = slice("n1-gpu", GPU, "n1", "n1");
    for i in 0..16 {
        s = s.device(dev(&format!("gpu-{i}")).int("group", i % 7));
    }
    e.slice(s.build());
    e.claim(
        claim("default", "c")
            .request(req("gpu", GPU).count(8))
            .distinct_attribute(&format!("{GPU}/group"), &[])
            .build(),
    );
    let pod = info(&pod_with("p", &["c"]));
    let (st, _) = e.prefilter(&pod);
    let n1 = node("n1");
    let s = e.filter(&st, &pod, &n1);
    assert_eq!(s.message(), reason::TIMED_OUT, "{s:?}");
    assert!(e.detail(&st, &[(&n1, &s)]).contains("allocation timed out"));
}

// ----- PostFilter -----

#[test]
fn post_filter_deallocates_unused_claim() {
    let e = env();
    e.slice(gpus("n1", 1, "a100"));
    let mut a = allocation(vec![result("gpu", GPU, "elsewhere", "gpu-0")]);
    a.node_selector = Some(unisched_dra::testing::label_selector(&[(
        "kubernetes.io/hostname",
        "gone",
    )]));
    e.claim(with_allocation(gpu_claim("c", 1), a.clone(), &[]));
    e.claim(with_allocation(gpu_claim("shared", 1), a, &["someone-else"]));
    struct Case {
        claims: &'static [&'static str],
        want: &'static str,
        deallocated: Option<&'static str>,
    }
    for c in [
        Case {
            claims: &["shared"],
            want: "",
            deallocated: None,
        },
        Case {
            claims: &["c"],
            want: reason::DEALLOCATED,
            deallocated: Some("c"),
        },
    ] {
        let pod = info(&pod_with("p", c.claims));
        let (mut st, s) = e.prefilter(&pod);
        assert!(s.is_success());
        assert_eq!(e.filter(&st, &pod, &node("n1")).message(), reason::NOT_AVAILABLE);
        let (_, s) = e.plugin.post_filter(
            &crate::testing::NullHandle,
            &mut st,
            &pod,
            &NodeToStatus::default(),
        );
        assert_eq!(s.code(), Code::Unschedulable);
        assert_eq!(s.message(), c.want);
        if let Some(name) = c.deallocated {
            let stored = e.api.claim("default", name).unwrap();
            assert!(
                stored
                    .status
                    .as_ref()
                    .and_then(|s| s.allocation.as_ref())
                    .is_none()
            );
            assert!(
                e.dra
                    .claim("default", name)
                    .unwrap()
                    .status
                    .as_ref()
                    .unwrap()
                    .allocation
                    .is_none()
            );
        }
    }
    // A pod without DRA state.
    let (_, s) = e.plugin.post_filter(
        &crate::testing::NullHandle,
        &mut CycleState::new(),
        &info(&pod_with("q", &[])),
        &NodeToStatus::default(),
    );
    assert_eq!((s.code(), s.message()), (Code::Unschedulable, String::new()));
}

// ----- Reserve / Unreserve / PreBind -----

fn scheduled(e: &Env, pod: &PodInfo, node_name: &str) -> CycleState {
    let (mut st, s) = e.prefilter(pod);
    assert!(s.is_success(), "{s:?}");
    assert!(e.filter(&st, pod, &node(node_name)).is_success());
    assert!(e.plugin.reserve(&mut st, pod, node_name).is_success());
    st
}

#[test]
fn reserve_unreserve_symmetric_and_idempotent() {
    let e = env();
    e.slice(gpus("n1", 2, "a100"));
    e.claim(gpu_claim("c", 1));
    let before = e.dra.snapshot();
    let pod = info(&pod_with("p", &["c"]));
    let mut st = scheduled(&e, &pod, "n1");
    assert_eq!(e.dra.in_flight_count(), 1);
    let during = e.dra.snapshot();
    assert!(
        during
            .state_layers()
            .is_allocated(&unisched_dra::DeviceId::new(GPU, "n1", "gpu-0"))
    );
    // A second pod sharing the claim must wait.
    let (_, s) = e.prefilter(&info(&pod_with("q", &["c"])));
    assert!(s.message().contains("in the process of being allocated"), "{s:?}");
    e.plugin.unreserve(&mut st, &pod, "n1");
    e.plugin.unreserve(&mut st, &pod, "n1");
    assert_eq!(e.dra.in_flight_count(), 0);
    assert_eq!(**e.dra.snapshot().in_flight(), **before.in_flight());
    assert_eq!(**e.dra.snapshot().allocated(), **before.allocated());
    // Unreserve without Reserve is fine too.
    e.plugin.unreserve(&mut CycleState::new(), &pod, "n1");
    assert!(e.api.writes().is_empty());
}

#[test]
fn pre_bind_writes_and_retries() {
    struct Case {
        name: &'static str,
        finalizer: bool,
        conflicts: u32,
        want_writes: usize,
    }
    for c in [
        Case {
            name: "finalizer present: one write",
            finalizer: true,
            conflicts: 0,
            want_writes: 1,
        },
        Case {
            name: "finalizer missing: two writes",
            finalizer: false,
            conflicts: 0,
            want_writes: 2,
        },
        Case {
            name: "conflict then retry",
            finalizer: true,
            conflicts: 1,
            want_writes: 1,
        },
        Case {
            name: "two conflicts",
            finalizer: false,
            conflicts: 2,
            want_writes: 2,
        },
    ] {
        let e = env();
        e.slice(gpus("n1", 2, "a100"));
        let mut cl = gpu_claim("c", 1);
        if c.finalizer {
            cl.metadata.finalizers = Some(vec![FINALIZER.into()]);
        }
        e.claim(cl);
        let pod = info(&pod_with("p", &["c"]));
        let mut st = scheduled(&e, &pod, "n1");
        e.api.inject_conflicts(c.conflicts);
        let s = e.plugin.pre_bind(&mut st, &pod, "n1");
        assert!(s.is_success(), "{}: {s:?}", c.name);
        assert_eq!(
            e.api.writes().len(),
            c.want_writes,
            "{}: {:?}",
            c.name,
            e.api.writes()
        );
        assert!(matches!(
            e.api.writes().last(),
            Some(ApiWrite::PatchClaimStatus { .. })
        ));
        let stored = e.api.claim("default", "c").unwrap();
        let status = stored.status.as_ref().unwrap();
        assert_eq!(
            status
                .allocation
                .as_ref()
                .map(|a| a.devices.as_ref().unwrap().results.as_ref().unwrap().len()),
            Some(1)
        );
        assert_eq!(status.reserved_for.as_ref().unwrap()[0].uid, "p");
        // Binding conditions are on (Kubernetes 1.37's default): the allocation we write is
        // stamped even without conditions, as upstream stamps it.
        assert!(
            status.allocation.as_ref().unwrap().allocation_timestamp.is_some(),
            "{}",
            c.name
        );
        assert!(
            stored
                .metadata
                .finalizers
                .unwrap()
                .contains(&FINALIZER.to_string())
        );
        // The cache holds the written claim; nothing is in flight any more.
        assert_eq!(e.dra.in_flight_count(), 0, "{}", c.name);
        assert!(claims::is_allocated(&e.dra.claim("default", "c").unwrap()));
        // Unreserve undoes the write: pod removed, our allocation cleared.
        e.plugin.unreserve(&mut st, &pod, "n1");
        let stored = e.api.claim("default", "c").unwrap();
        assert!(stored.status.as_ref().unwrap().allocation.is_none(), "{}", c.name);
        assert!(stored.status.as_ref().unwrap().reserved_for.is_none());
        assert!(!claims::is_allocated(&e.dra.claim("default", "c").unwrap()));
    }
}

/// A claim as stored, with the allocation's timestamp reduced to its presence (two runs stamp
/// different seconds).
fn without_timestamp(claim: Option<ResourceClaim>) -> Option<ResourceClaim> {
    let mut claim = claim?;
    if let Some(a) = claim.status.as_mut().and_then(|s| s.allocation.as_mut())
        && a.allocation_timestamp.is_some()
    {
        a.allocation_timestamp = Some(Time(Default::default()));
    }
    Some(claim)
}

/// PreBind as a future (the runtime's I/O path) makes exactly the writes PreBind makes on a
/// binding thread, in the same order, with the same retries and result, and leaves Unreserve the
/// same record to undo.
#[test]
fn pre_bind_as_a_future_matches_pre_bind() {
    struct Case {
        name: &'static str,
        finalizer: bool,
        conflicts: u32,
        allocated_by_other: bool,
        deallocated: bool,
        fail_status_write: bool,
    }
    let case = |name| Case {
        name,
        finalizer: false,
        conflicts: 0,
        allocated_by_other: false,
        deallocated: false,
        fail_status_write: false,
    };
    for c in [
        case("finalizer missing"),
        Case {
            finalizer: true,
            ..case("finalizer present")
        },
        Case {
            conflicts: 2,
            ..case("two conflicts")
        },
        Case {
            conflicts: 5,
            ..case("conflicts until giving up")
        },
        Case {
            allocated_by_other: true,
            ..case("allocated by someone else: reserved only")
        },
        Case {
            allocated_by_other: true,
            deallocated: true,
            ..case("deallocated in the meantime")
        },
        Case {
            finalizer: true,
            fail_status_write: true,
            ..case("the status write fails")
        },
    ] {
        let run = |futures: bool| {
            let e = env();
            e.api.offer_futures(futures);
            e.slice(gpus("n1", 2, "a100"));
            let mut cl = gpu_claim("c", 1);
            if c.finalizer {
                cl.metadata.finalizers = Some(vec![FINALIZER.into()]);
            }
            if c.allocated_by_other {
                cl.status = Some(ResourceClaimStatus {
                    allocation: Some(allocation(vec![result("gpu", GPU, "n1", "gpu-1")])),
                    ..ResourceClaimStatus::default()
                });
            }
            e.claim(cl);
            let pod = info(&pod_with("p", &["c"]));
            let mut st = scheduled(&e, &pod, "n1");
            if c.deallocated {
                let current = e.api.claim("default", "c").unwrap();
                e.api
                    .patch_claim_status("default", "c", &current, serde_json::json!({"allocation": null}))
                    .unwrap();
            }
            e.api.clear_writes();
            e.api.inject_conflicts(c.conflicts);
            if c.fail_status_write {
                e.api
                    .fail_next(DraApiError::Other("the API server is on fire".into()));
            }
            let future = e.plugin.pre_bind_async(&st, &pod, "n1");
            assert_eq!(
                future.is_some(),
                futures,
                "{}: a future exactly when offered",
                c.name
            );
            let s = match future {
                Some(f) => poll_to_end(f),
                None => e.plugin.pre_bind(&mut st, &pod, "n1"),
            };
            let written = (
                s.code(),
                s.message().to_string(),
                e.api.writes(),
                without_timestamp(e.api.claim("default", "c")),
                e.dra.in_flight_count(),
            );
            e.plugin.unreserve(&mut st, &pod, "n1");
            let undone = without_timestamp(e.api.claim("default", "c"));
            (written, undone, e.dra.in_flight_count())
        };
        let on_a_thread = run(false);
        let as_a_future = run(true);
        assert_eq!(on_a_thread, as_a_future, "{}", c.name);
    }
}

/// PreBind that has to wait (binding conditions) or does more than claim writes keeps to the
/// binding thread.
#[test]
fn pre_bind_that_waits_has_no_future() {
    let e = env();
    e.api.offer_futures(true);
    e.slice(
        slice("n1-gpu", GPU, "n1", "n1")
            .device(dev("gpu-0").binding_conditions(&["Ready"]))
            .build(),
    );
    e.claim(gpu_claim("c", 1));
    let pod = info(&pod_with("p", &["c"]));
    let st = scheduled(&e, &pod, "n1");
    assert!(e.plugin.pre_bind_async(&st, &pod, "n1").is_none());
    assert!(e.api.writes().is_empty(), "deciding writes nothing");
}

/// A claim someone else allocated is only reserved: no finalizer of ours and its allocation as it
/// was (upstream adds the finalizer only with an allocation of its own); one that was deallocated
/// meanwhile fails with upstream's reason instead of a reservation the API server refuses.
#[test]
fn pre_bind_reserves_claims_allocated_by_others() {
    struct Case {
        name: &'static str,
        deallocated_before_pre_bind: bool,
        want_error: Option<&'static str>,
    }
    for c in [
        Case {
            name: "allocated by another scheduler, without our finalizer",
            deallocated_before_pre_bind: false,
            want_error: None,
        },
        Case {
            name: "deallocated between Reserve and PreBind",
            deallocated_before_pre_bind: true,
            want_error: Some("claim default/c got deallocated elsewhere in the meantime"),
        },
    ] {
        let e = env();
        e.slice(gpus("n1", 2, "a100"));
        let mut cl = gpu_claim("c", 1);
        let theirs = allocation(vec![result("gpu", GPU, "n1", "gpu-0")]);
        cl.status = Some(ResourceClaimStatus {
            allocation: Some(theirs.clone()),
            ..ResourceClaimStatus::default()
        });
        e.claim(cl);
        let pod = info(&pod_with("p", &["c"]));
        let mut st = scheduled(&e, &pod, "n1");
        if c.deallocated_before_pre_bind {
            let current = e.api.claim("default", "c").unwrap();
            e.api
                .patch_claim_status("default", "c", &current, serde_json::json!({"allocation": null}))
                .unwrap();
        }
        e.api.inject_conflicts(0);
        let writes_before = e.api.writes().len();
        let s = e.plugin.pre_bind(&mut st, &pod, "n1");
        let stored = e.api.claim("default", "c").unwrap();
        let status = stored.status.clone().unwrap_or_default();
        match c.want_error {
            Some(want) => {
                assert_eq!(s.code(), Code::Error, "{}", c.name);
                assert!(s.message().contains(want), "{}: {s:?}", c.name);
                assert!(status.reserved_for.is_none(), "{}: {status:?}", c.name);
            }
            None => {
                assert!(s.is_success(), "{}: {s:?}", c.name);
                let writes = &e.api.writes()[writes_before..];
                assert!(
                    matches!(writes, [ApiWrite::PatchClaimStatus { .. }]),
                    "{}: {writes:?}",
                    c.name
                );
                assert!(stored.metadata.finalizers.is_none(), "{}: {stored:?}", c.name);
                assert_eq!(status.allocation, Some(theirs), "{}", c.name);
                assert_eq!(status.reserved_for.unwrap()[0].uid, "p", "{}", c.name);
            }
        }
    }
}

#[test]
fn pre_bind_fails_when_allocated_elsewhere() {
    let e = env();
    e.slice(gpus("n1", 2, "a100"));
    e.claim(gpu_claim("c", 1));
    let pod = info(&pod_with("p", &["c"]));
    let mut st = scheduled(&e, &pod, "n1");
    // Someone else allocates the claim to gpu-1 before our write.
    let current = e.api.claim("default", "c").unwrap();
    e.api
        .patch_claim_status(
            "default",
            "c",
            &current,
            serde_json::json!({"allocation": allocation(vec![result("gpu", GPU, "n1", "gpu-1")])}),
        )
        .unwrap();
    e.api.inject_conflicts(0);
    // Our copy is stale: the first write conflicts, the re-read shows the other allocation.
    let s = e.plugin.pre_bind(&mut st, &pod, "n1");
    assert_eq!(s.code(), Code::Error);
    assert!(
        s.message().contains("got allocated elsewhere in the meantime"),
        "{s:?}"
    );
}

#[test]
fn binding_conditions_wait_and_fail() {
    let args = DynamicResourcesArgs {
        binding_timeout: unisched_framework::config::GoDuration(Duration::from_secs(1)),
        ..DynamicResourcesArgs::default()
    };
    let e = env_with(args);
    e.slice(
        slice("n1-gpu", GPU, "n1", "n1")
            .device(dev("gpu-0").binding_conditions(&["Ready"]))
            .build(),
    );
    let mut cl = gpu_claim("c", 1);
    cl.metadata.finalizers = Some(vec![FINALIZER.into()]);
    e.claim(cl);
    let pod = info(&pod_with("p", &["c"]));
    let mut st = scheduled(&e, &pod, "n1");
    let started = std::time::Instant::now();
    let s = e.plugin.pre_bind(&mut st, &pod, "n1");
    assert_eq!(s.code(), Code::Error);
    assert!(s.message().contains("binding timeout"), "{s:?}");
    assert!(started.elapsed() >= Duration::from_secs(1));
    // The allocation carries a timestamp.
    let stored = e.api.claim("default", "c").unwrap();
    assert!(
        stored
            .status
            .unwrap()
            .allocation
            .unwrap()
            .allocation_timestamp
            .is_some()
    );
}

// ----- Score -----

#[test]
fn score_prefers_higher_ranked_subrequests() {
    let e = env();
    e.slice(gpus("n1", 1, "h200"));
    e.slice(gpus("n2", 1, "a100"));
    e.claim(
        claim("default", "c")
            .request(first_available(
                "gpu",
                vec![
                    req("big", GPU).selector(&format!("device.attributes[\"{GPU}\"].model == \"h200\"")),
                    req("small", GPU),
                ],
            ))
            .build(),
    );
    let pod = info(&pod_with("p", &["c"]));
    let (mut st, _) = e.prefilter(&pod);
    let (n1, n2) = (node("n1"), node("n2"));
    assert!(e.filter(&st, &pod, &n1).is_success());
    assert!(e.filter(&st, &pod, &n2).is_success());
    assert!(unisched_framework::PreScorePlugin::pre_score(&*e.plugin, &mut st, &pod, &[]).is_success());
    let s1 = e.plugin.score(&st, &pod, &n1).unwrap();
    let s2 = e.plugin.score(&st, &pod, &n2).unwrap();
    assert_eq!((s1, s2), (8, 7));
    let mut scores = vec![
        unisched_framework::NodeScore {
            name: "n1",
            score: s1,
        },
        unisched_framework::NodeScore {
            name: "n2",
            score: s2,
        },
    ];
    e.plugin.normalize_score(&st, &pod, &mut scores);
    assert_eq!((scores[0].score, scores[1].score), (100, 87));
}

// ----- KEP-5004 -----

fn ext_class(e: &Env) {
    let mut c = class("gpu.example.com-ext", GPU);
    c.spec.as_mut().unwrap().extended_resource_name = Some("example.com/gpu".into());
    e.dra.apply_class(Arc::new(c)).unwrap();
}

/// A pod whose only DRA claim is its extended-resource claim (KEP-5004) is decided by the device
/// summary like a one-claim pod: the same verdicts as the full allocator on every node, and the
/// allocation made later for the chosen node is the one the allocator makes in Filter.
#[test]
fn extended_resource_claim_decided_by_summary_allocates_as_the_full_path() {
    let e = env();
    ext_class(&e);
    e.slice(gpus("n1", 3, "a100"));
    e.slice(gpus("n2", 1, "a100"));
    let pod = info(&PodBuilder::new("p").req("example.com/gpu", "2").build());
    let mut full = DynamicResources::new(
        &DynamicResourcesArgs::default(),
        Some(e.dra.clone()),
        Some(e.api.clone() as Arc<dyn DraApi>),
    );
    full.summary = false;
    let (st, s) = e.prefilter(&pod);
    assert!(s.is_success(), "{s:?}");
    let mut st_full = CycleState::new();
    assert!(full.pre_filter(&mut st_full, &pod, &[]).1.is_success());
    for n in ["n1", "n2"] {
        let summary = e.filter(&st, &pod, &node(n));
        let allocator = full.filter(&st_full, &pod, &node(n));
        assert_eq!(
            (summary.code(), summary.message()),
            (allocator.code(), allocator.message()),
            "{n}"
        );
    }
    let data = DynamicResources::data(&st).unwrap();
    let decided = data.nodes.read()["n1"].clone();
    assert!(decided.deferred.is_some() && decided.extended.is_none());
    let filtered = DynamicResources::data(&st_full).unwrap().nodes.read()["n1"].clone();
    assert!(filtered.deferred.is_none());
    let want = filtered
        .extended
        .clone()
        .expect("the full path allocates in Filter");
    let got = data.node_result("n1", || None).unwrap().unwrap();
    let got = got.extended.as_ref().expect("allocated when asked for");
    assert_eq!(got.1, want.1);
    assert_eq!(device_names_of(&got.1), vec!["gpu-0", "gpu-1"]);
    assert!(Arc::ptr_eq(&got.0, &want.0) || got.0.claim == want.0.claim);
    // Stored: the next caller (PreBind after Reserve) gets the same allocation without a search.
    assert!(data.nodes.read()["n1"].deferred.is_none());
}

#[test]
fn extended_resources_on_dra_and_device_plugin_nodes() {
    let e = env();
    ext_class(&e);
    e.slice(gpus("dra-node", 2, "a100"));
    let pod_obj = PodBuilder::new("p")
        .req("cpu", "1")
        .container("second")
        .req("example.com/gpu", "2")
        .req("cpu", "1")
        .build();
    let pod = info(&pod_obj);
    let (mut st, s) = e.prefilter(&pod);
    assert!(s.is_success(), "{s:?}");
    let dra_node = node("dra-node");
    let dp_node = NodeBuilder::new("dp-node")
        .alloc("cpu", "8")
        .alloc("pods", "10")
        .alloc("example.com/gpu", "4")
        .info();
    assert!(
        e.filter(&st, &pod, &dp_node).is_success(),
        "device plugin node: left to NodeResourcesFit"
    );
    assert!(e.filter(&st, &pod, &dra_node).is_success());
    let data = DynamicResources::data(&st).unwrap();
    assert!(
        data.node_result("dp-node", || None)
            .unwrap()
            .unwrap()
            .extended
            .is_none()
    );
    // The device summary decided the DRA node in Filter; the allocation is made when asked for.
    assert!(data.nodes.read()["dra-node"].deferred.is_some());
    let (variant, a) = data
        .node_result("dra-node", || None)
        .unwrap()
        .unwrap()
        .extended
        .clone()
        .unwrap();
    // container 1 ("second"), its sorted request names [cpu, example.com/gpu]: index 1.
    let requests = variant
        .claim
        .spec
        .as_ref()
        .unwrap()
        .devices
        .as_ref()
        .unwrap()
        .requests
        .clone()
        .unwrap();
    assert_eq!(
        requests.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
        ["container-1-request-1"]
    );
    assert_eq!(requests[0].exactly.as_ref().unwrap().count, Some(2));
    assert_eq!(a.devices.unwrap().results.unwrap().len(), 2);

    // Reserve + PreBind on the DRA node: claim created, written, pod status patched.
    assert!(e.plugin.reserve(&mut st, &pod, "dra-node").is_success());
    assert_eq!(e.dra.in_flight_count(), 1);
    assert!(e.plugin.pre_bind(&mut st, &pod, "dra-node").is_success());
    assert_eq!(e.dra.in_flight_count(), 0);
    let created = e
        .api
        .claims()
        .into_iter()
        .find(|c| c.metadata.generate_name.is_some())
        .unwrap();
    let name = created.metadata.name.clone().unwrap();
    assert!(name.starts_with("p-extended-resources-"));
    assert_eq!(
        created
            .metadata
            .annotations
            .as_ref()
            .unwrap()
            .get("resource.kubernetes.io/extended-resource-claim")
            .map(String::as_str),
        Some("true")
    );
    let owner = &created.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("Pod", "p", Some(true))
    );
    assert_eq!(
        created.status.as_ref().unwrap().reserved_for.as_ref().unwrap()[0].uid,
        "p"
    );
    let writes = e.api.writes();
    assert!(matches!(writes[0], ApiWrite::CreateClaim { .. }));
    assert!(matches!(writes[1], ApiWrite::PatchClaimStatus { .. }));
    assert_eq!(writes.len(), 3, "{writes:?}");
    let status = e.api.pod_status("default", "p");
    assert_eq!(
        status["extendedResourceClaimStatus"]["resourceClaimName"],
        serde_json::json!(name)
    );
    assert_eq!(
        status["extendedResourceClaimStatus"]["requestMappings"],
        serde_json::json!([{"containerName": "second", "resourceName": "example.com/gpu", "requestName": "container-1-request-1"}])
    );
    // Unreserve deletes the claim and clears the pod status.
    e.plugin.unreserve(&mut st, &pod, "dra-node");
    assert!(e.api.claim("default", &name).is_none());
    assert_eq!(
        e.api.pod_status("default", "p")["extendedResourceClaimStatus"],
        serde_json::Value::Null
    );
}

#[test]
fn implicit_extended_resource_name_and_stale_claim() {
    let e = env();
    e.slice(gpus("n1", 1, "a100"));
    let pod_obj = PodBuilder::new("p")
        .req(&format!("deviceclass.resource.kubernetes.io/{GPU}"), "1")
        .build();
    let pod = info(&pod_obj);
    let (st, s) = e.prefilter(&pod);
    assert!(s.is_success(), "{s:?}");
    assert!(e.filter(&st, &pod, &node("n1")).is_success());
    // A stale claim of an earlier attempt blocks, and PostFilter deletes it.
    let mut stale = gpu_claim("p-extended-resources-old", 1);
    stale.metadata.annotations = Some(BTreeMap::from([(
        "resource.kubernetes.io/extended-resource-claim".to_string(),
        "true".to_string(),
    )]));
    let stale = e.claim(owned_by(stale, &pod_obj));
    let (mut st, _) = e.prefilter(&pod);
    assert_eq!(e.filter(&st, &pod, &node("n1")).message(), reason::STALE_EXTENDED);
    let (_, s) = e.plugin.post_filter(
        &crate::testing::NullHandle,
        &mut st,
        &pod,
        &NodeToStatus::default(),
    );
    assert_eq!(s.message(), reason::DELETED);
    assert!(
        e.api
            .claim("default", stale.metadata.name.as_deref().unwrap())
            .is_none()
    );
    assert!(e.dra.extended_resource_claim_for_pod("p").is_none());
}

// ----- KEP-5517 -----

fn cpu_class(e: &Env) {
    e.dra.apply_class(Arc::new(class("dra.cpu", "dra.cpu"))).unwrap();
}

/// dra-driver-cpu grouped mode: one NUMA device with consumable `dra.cpu/cpu` and a mapping.
fn grouped_cpu_slice(node_name: &str, cpus: &str) -> k8s_openapi::api::resource::v1::ResourceSlice {
    let d = with_nar(
        dev("numa0").multi().cap("dra.cpu/cpu", cpus),
        "cpu",
        NodeAllocatableResource {
            mapping: Some(NodeAllocatableMapping {
                capacity_key: Some("dra.cpu/cpu".into()),
                capacity_multiplier: Some(q("1")),
                device_multiplier: None,
            }),
            overhead: None,
        },
    );
    slice(&format!("{node_name}-cpu"), "dra.cpu", node_name, node_name)
        .device(d)
        .build()
}

fn cpu_claim(name: &str, cpus: &str) -> ResourceClaim {
    claim("default", name)
        .request(req("cpus", "dra.cpu").capacity("dra.cpu/cpu", cpus))
        .build()
}

fn statuses(st: &CycleState, node: &str) -> Vec<NodeAllocatableResourceClaimStatus> {
    DynamicResources::data(st)
        .unwrap()
        .nodes
        .read()
        .get(node)
        .map(|r| r.statuses.clone())
        .unwrap_or_default()
}

#[test]
fn node_allocatable_capacity_key_and_overcommit() {
    let e = env();
    cpu_class(&e);
    e.slice(grouped_cpu_slice("n1", "8"));
    e.claim(cpu_claim("a", "4"));
    e.claim(cpu_claim("b", "4"));
    let n1 = node("n1");
    // Pod A: 1 cpu in spec + 4 through the claim.
    let pa = info(&pod_with("pa", &["a"]));
    let (st, s) = e.prefilter(&pa);
    assert!(s.is_success());
    assert!(e.filter(&st, &pa, &n1).is_success());
    let sts = statuses(&st, "n1");
    assert_eq!(sts.len(), 1);
    assert_eq!(sts[0].resource_claim_name, "a");
    assert_eq!(sts[0].containers.as_deref(), Some(&["c0".to_string()][..]));
    assert_eq!(sts[0].mapping.as_ref().unwrap()[0].quantity, q("4"));
    let fp = st
        .read::<NodeFootprints>(NODE_FOOTPRINTS_KEY)
        .unwrap()
        .get("n1")
        .unwrap();
    assert_eq!(fp.milli_cpu, 4000);
    // The assumed pod carries the statuses, so the node's ledger counts 5 cpus.
    let mut assumed = (*pa.pod).clone();
    // A node Filter never saw has no statuses: the pod is left as it is, and the plugin says so.
    let before = assumed.clone();
    assert!(!unisched_framework::AssumedPodPlugin::prepare_assumed_pod(
        &*e.plugin,
        &st,
        &mut assumed,
        "n2"
    ));
    assert_eq!(assumed, before);
    assert!(unisched_framework::AssumedPodPlugin::prepare_assumed_pod(
        &*e.plugin,
        &st,
        &mut assumed,
        "n1"
    ));
    let assumed = PodInfo::new(assumed);
    assert_eq!(assumed.requests().milli_cpu, 5000);
    // Pod B on the same node: 5 more do not fit in 8 − 5 (the device itself has room).
    let mut st_a = st;
    assert!(e.plugin.reserve(&mut st_a, &pa, "n1").is_success());
    let mut n1_with_a = n1.clone();
    n1_with_a.add_pod(Arc::new(assumed));
    let pb = info(&pod_with("pb", &["b"]));
    let (st, _) = e.prefilter(&pb);
    let s = e.filter(&st, &pb, &n1_with_a);
    assert_eq!(s.code(), Code::Unschedulable);
    assert_eq!(s.message(), "Insufficient cpu");
    let summary = e.detail(&st, &[(&n1_with_a, &s)]);
    assert!(summary.contains("cpu short by at least 2"), "{summary}");
}

#[test]
fn node_allocatable_device_multiplier_and_overhead() {
    let e = env();
    cpu_class(&e);
    // Individual mode: one device per CPU, deviceMultiplier 1.
    let mut s = slice("n1-cpu", "dra.cpu", "n1", "n1");
    for i in 0..4 {
        s = s.device(with_nar(
            dev(&format!("cpu{i}")),
            "cpu",
            NodeAllocatableResource {
                mapping: Some(NodeAllocatableMapping {
                    device_multiplier: Some(q("1")),
                    ..Default::default()
                }),
                overhead: None,
            },
        ));
    }
    e.slice(s.build());
    // A GPU with host-memory overhead.
    e.slice(
        slice("n1-gpu", GPU, "n1", "n1-gpu")
            .device(with_nar(
                dev("gpu-0"),
                "memory",
                NodeAllocatableResource {
                    mapping: None,
                    overhead: Some(NodeAllocatableOverhead {
                        per_pod: Some(q("1Gi")),
                        per_container: Some(q("256Mi")),
                    }),
                },
            ))
            .build(),
    );
    e.claim(
        claim("default", "cpus")
            .request(req("cpus", "dra.cpu").count(3))
            .build(),
    );
    e.claim(gpu_claim("gpu", 1));
    let mut p = PodBuilder::new("p")
        .req("cpu", "100m")
        .container("c1")
        .req("cpu", "100m")
        .build();
    add_claim_ref(&mut p, "cpus", Some("cpus"), false);
    add_claim_ref(&mut p, "gpu", Some("gpu"), true); // both containers reference the GPU claim
    // Only c0 references the CPU claim.
    p.spec.as_mut().unwrap().containers[0]
        .resources
        .as_mut()
        .unwrap()
        .claims
        .as_mut()
        .unwrap()
        .push(ContainerClaim {
            name: "cpus".into(),
            request: None,
        });
    let pod = info(&p);
    let (st, s) = e.prefilter(&pod);
    assert!(s.is_success(), "{s:?}");
    let s = e.filter(&st, &pod, &node("n1"));
    assert!(s.is_success(), "{s:?}");
    let sts = statuses(&st, "n1");
    let by_name: BTreeMap<&str, &NodeAllocatableResourceClaimStatus> =
        sts.iter().map(|s| (s.resource_claim_name.as_str(), s)).collect();
    let cpus = by_name["cpus"];
    assert_eq!(cpus.mapping.as_ref().unwrap()[0].name, "cpu");
    assert_eq!(cpus.mapping.as_ref().unwrap()[0].quantity, q("3"));
    let gpu = by_name["gpu"];
    assert!(gpu.mapping.is_none());
    let o = &gpu.overhead.as_ref().unwrap()[0];
    assert_eq!(
        (o.name.as_str(), o.per_pod.clone(), o.per_container.clone()),
        ("memory", Some(q("1Gi")), Some(q("256Mi")))
    );
    assert_eq!(gpu.containers.as_ref().unwrap().len(), 2);
    let fp = st
        .read::<NodeFootprints>(NODE_FOOTPRINTS_KEY)
        .unwrap()
        .get("n1")
        .unwrap();
    assert_eq!(fp.milli_cpu, 3000);
    assert_eq!(fp.memory, (1 << 30) + 2 * (256 << 20));
}

#[test]
fn node_allocatable_sharing_rules() {
    let e = env();
    cpu_class(&e);
    e.slice(grouped_cpu_slice("n1", "8"));
    e.slice(
        slice("n1-gpu", GPU, "n1", "n1-gpu")
            .device(with_nar(
                dev("gpu-0"),
                "memory",
                NodeAllocatableResource {
                    mapping: None,
                    overhead: Some(NodeAllocatableOverhead {
                        per_pod: Some(q("1Gi")),
                        per_container: None,
                    }),
                },
            ))
            .build(),
    );
    let mut cpu_result = result("cpus", "dra.cpu", "n1", "numa0");
    cpu_result.share_id = Some("s1".into());
    cpu_result.consumed_capacity = Some(BTreeMap::from([("dra.cpu/cpu".to_string(), q("2"))]));
    e.claim(with_allocation(
        cpu_claim("mapped", "2"),
        allocation(vec![cpu_result]),
        &["other-pod"],
    ));
    e.claim(with_allocation(
        gpu_claim("overhead", 1),
        allocation(vec![result("gpu", GPU, "n1-gpu", "gpu-0")]),
        &["other-pod"],
    ));
    struct Case {
        claim: &'static str,
        want: Result<(), &'static str>,
    }
    for c in [
        Case {
            claim: "mapped",
            want: Err(
                "node allocatable resource claim mapped has a mapped device and cannot be shared across pods",
            ),
        },
        Case {
            claim: "overhead",
            want: Ok(()),
        },
    ] {
        let pod = info(&pod_with("p", &[c.claim]));
        let (st, s) = e.prefilter(&pod);
        assert!(s.is_success());
        let s = e.filter(&st, &pod, &node("n1"));
        match c.want {
            Ok(()) => {
                assert!(s.is_success(), "{}: {s:?}", c.claim);
                let fp = st
                    .read::<NodeFootprints>(NODE_FOOTPRINTS_KEY)
                    .unwrap()
                    .get("n1")
                    .unwrap();
                assert_eq!(fp.memory, 1 << 30, "overhead charged per pod");
            }
            Err(m) => {
                assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
                assert_eq!(s.message(), m);
            }
        }
    }
}

#[test]
fn pod_level_resources_must_cover_dra() {
    let e = env();
    cpu_class(&e);
    e.slice(grouped_cpu_slice("n1", "8"));
    e.claim(cpu_claim("a", "4"));
    let mut p = pod_with("p", &["a"]);
    p.spec.as_mut().unwrap().resources = Some(ResourceRequirements {
        requests: Some(BTreeMap::from([("cpu".to_string(), q("2"))])),
        ..Default::default()
    });
    let pod = info(&p);
    let (st, _) = e.prefilter(&pod);
    let s = e.filter(&st, &pod, &node("n1"));
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
    assert!(
        s.message()
            .starts_with("pod level request for cpu is insufficient"),
        "{s:?}"
    );
}

#[test]
fn pre_bind_patches_node_allocatable_statuses() {
    let e = env();
    cpu_class(&e);
    e.slice(grouped_cpu_slice("n1", "8"));
    let mut c = cpu_claim("a", "4");
    c.metadata.finalizers = Some(vec![FINALIZER.into()]);
    e.claim(c);
    let pod = info(&pod_with("p", &["a"]));
    let mut st = scheduled(&e, &pod, "n1");
    assert!(e.plugin.pre_bind(&mut st, &pod, "n1").is_success());
    let writes = e.api.writes();
    assert_eq!(writes.len(), 2, "{writes:?}");
    let status = e.api.pod_status("default", "p");
    assert_eq!(
        status["nodeAllocatableResourceClaimStatuses"][0]["resourceClaimName"],
        "a"
    );
    assert_eq!(
        status["nodeAllocatableResourceClaimStatuses"][0]["mapping"][0]["quantity"],
        "4"
    );
}

// ----- reasons -----

#[test]
fn aggregated_reason_sentence() {
    let e = env();
    for n in ["n1", "n2", "n3"] {
        e.slice(gpus(n, 4, "a100"));
    }
    let sel = format!("device.attributes[\"{GPU}\"].model == \"h200\"");
    e.claim(
        claim("default", "train")
            .request(req("gpu", GPU).count(2).selector(&sel))
            .build(),
    );
    let pod = info(&pod_with("p", &["train"]));
    let (st, _) = e.prefilter(&pod);
    let nodes: Vec<NodeInfo> = ["n1", "n2", "n3"].into_iter().map(node).collect();
    let statuses: Vec<Status> = nodes.iter().map(|n| e.filter(&st, &pod, n)).collect();
    for s in &statuses {
        assert_eq!(s.message(), reason::CANNOT_ALLOCATE);
    }
    let rejected: Vec<(&NodeInfo, &Status)> = nodes.iter().zip(&statuses).collect();
    let summary = e.detail(&st, &rejected);
    assert_eq!(
        summary,
        format!("claim default/train request gpu: on 3 nodes fewer than 2 devices matched selector '{sel}'.")
    );
}

#[test]
fn summarize_orders_groups_and_truncates() {
    use super::node_allocatable::Shortfall;
    use super::reasons::{NodeFailure, summarize};
    let alloc = |claim: &str, r: unisched_dra::UnschedulableReason| NodeFailure::Allocation {
        reason: Box::new(unisched_dra::Unschedulable {
            claim: claim.into(),
            request: Some("gpu".into()),
            reason: r,
        }),
        needed: Some(1),
    };
    let failures = [
        alloc("ns/a", unisched_dra::UnschedulableReason::DevicesInUse),
        alloc("ns/a", unisched_dra::UnschedulableReason::DevicesInUse),
        alloc(
            "ns/a",
            unisched_dra::UnschedulableReason::CountersExhausted { pool: "d/p".into() },
        ),
        NodeFailure::Allocatable {
            shortfalls: vec![Shortfall {
                resource: "cpu".into(),
                demand: 5000,
                free: 2500,
            }],
        },
        NodeFailure::Allocatable {
            shortfalls: vec![Shortfall {
                resource: "cpu".into(),
                demand: 5000,
                free: 4000,
            }],
        },
        NodeFailure::Timeout,
        alloc(
            "ns/b",
            unisched_dra::UnschedulableReason::ConstraintUnsatisfied {
                attribute: "x/y".into(),
                distinct: false,
            },
        ),
        alloc(
            "ns/c",
            unisched_dra::UnschedulableReason::DevicesTainted {
                taint: "k=v:NoSchedule".into(),
            },
        ),
    ];
    let s = summarize(failures.iter()).unwrap();
    assert!(
        s.starts_with("claim ns/a request gpu: on 2 nodes the matching devices are already allocated; node allocatable: on 2 nodes the pod with its claims does not fit (cpu short by at least 1)"),
        "{s}"
    );
    assert!(s.ends_with("; and 2 more."), "{s}");
    assert_eq!(summarize(std::iter::empty()), None);
}

// ----- hints -----

#[test]
fn claim_queueing_hints() {
    let e = env();
    let pod = pod_with("p", &["mine"]);
    let mine = Arc::new(e.claim(gpu_claim("mine", 1)));
    let other = Arc::new(gpu_claim("other", 1));
    let allocated = |c: &ResourceClaim| Arc::new(with_allocation(c.clone(), allocation(vec![]), &[]));
    let obj = |c: &Arc<ResourceClaim>| EventObject::ResourceClaim(c.clone());
    let mut finalized = (*mine).clone();
    finalized.metadata.finalizers = Some(vec!["x".into()]);
    let finalized = Arc::new(finalized);
    struct Case {
        name: &'static str,
        old: Option<EventObject>,
        new: Option<EventObject>,
        want: QueueingHint,
    }
    let cases = [
        Case {
            name: "other claim deallocated",
            old: Some(obj(&allocated(&other))),
            new: Some(obj(&other)),
            want: QueueingHint::Queue,
        },
        Case {
            name: "other claim changed",
            old: Some(obj(&other)),
            new: Some(obj(&allocated(&other))),
            want: QueueingHint::Skip,
        },
        Case {
            name: "own claim created",
            old: None,
            new: Some(obj(&mine)),
            want: QueueingHint::Queue,
        },
        Case {
            name: "own claim metadata only",
            old: Some(obj(&mine)),
            new: Some(obj(&finalized)),
            want: QueueingHint::Skip,
        },
        Case {
            name: "own claim status changed",
            old: Some(obj(&mine)),
            new: Some(obj(&allocated(&mine))),
            want: QueueingHint::Queue,
        },
    ];
    for c in cases {
        assert_eq!(
            hints::claim_hint(Some(&e.dra), &pod, c.old.as_ref(), c.new.as_ref()),
            c.want,
            "{}",
            c.name
        );
    }
    // While another claim of the pod is missing, nothing helps.
    let pod2 = pod_with("p2", &["mine", "missing"]);
    assert_eq!(
        hints::claim_hint(Some(&e.dra), &pod2, None, Some(&obj(&mine))),
        QueueingHint::Skip
    );
}

/// The registered hint of the first event on `resource`.
fn registered_hint(
    e: &Env,
    resource: unisched_framework::EventResource,
) -> unisched_framework::QueueingHintFn {
    hints::events(Some(e.dra.clone()))
        .into_iter()
        .find(|h| h.event.resource == resource)
        .and_then(|h| h.hint)
        .unwrap()
}

/// Upstream's fixtures for its claim hint tables: pod `my-pod` (uid `1234`) with one claim
/// `my-resource`, named directly or from a template, and that claim `my-pod-my-resource`, owned
/// by the pod.
mod upstream_fixtures {
    use super::*;

    pub(super) const CLAIM: &str = "my-pod-my-resource";

    pub(super) fn pod_with_claim_name() -> Pod {
        let mut p = PodBuilder::new("my-pod").uid("1234").build();
        add_claim_ref(&mut p, "my-resource", Some(CLAIM), false);
        p
    }

    pub(super) fn pod_with_claim_templates(resources: &[&str]) -> Pod {
        let mut p = PodBuilder::new("my-pod").uid("1234").build();
        for r in resources {
            add_claim_ref(&mut p, r, None, false);
        }
        p
    }

    /// `pod` with `generated` (pod claim name, claim name) recorded in its status.
    pub(super) fn with_generated(mut pod: Pod, generated: &[(&str, &str)]) -> Pod {
        pod.status
            .get_or_insert_with(Default::default)
            .resource_claim_statuses = Some(
            generated
                .iter()
                .map(|(name, claim)| PodResourceClaimStatus {
                    name: (*name).into(),
                    resource_claim_name: Some((*claim).into()),
                })
                .collect(),
        );
        pod
    }

    pub(super) fn pending_claim() -> ResourceClaim {
        owned_by(gpu_claim(CLAIM, 1), &pod_with_claim_name())
    }

    pub(super) fn allocated(c: ResourceClaim) -> ResourceClaim {
        with_allocation(c, allocation(vec![result("gpu", GPU, "n1", "gpu-0")]), &[])
    }
}

/// Upstream's `TestIsSchedulableAfterClaimChange`, through the registered hint, each case with its
/// own cache of existing claims. Upstream's three "final-state-unknown" cases have no equivalent
/// object here: a deletion always carries the cache's last state of the claim. The nearest event,
/// one with no claim at all, is an error, which the queue treats as Queue (upstream's answer).
#[test]
fn claim_change_upstream_cases() {
    use upstream_fixtures::*;
    let claim_obj = |c: ResourceClaim| Some(EventObject::ResourceClaim(Arc::new(c)));
    struct Case {
        name: &'static str,
        pod: Pod,
        existing: Vec<ResourceClaim>,
        old: Option<EventObject>,
        new: Option<EventObject>,
        want: Option<QueueingHint>,
    }
    let template_pod = || pod_with_claim_templates(&["my-resource"]);
    let cases = vec![
        Case {
            name: "skip-deletes",
            pod: template_pod(),
            existing: vec![],
            old: claim_obj(pending_claim()),
            new: None,
            want: Some(QueueingHint::Skip),
        },
        Case {
            name: "queue-on-delete-with-allocation",
            pod: template_pod(),
            existing: vec![],
            old: claim_obj(allocated(pending_claim())),
            new: None,
            want: Some(QueueingHint::Queue),
        },
        Case {
            name: "no claim in the event (nearest to queue-on-delete-final-state-unknown-without-object)",
            pod: template_pod(),
            existing: vec![],
            old: None,
            new: None,
            want: None,
        },
        Case {
            name: "backoff-wrong-new-object",
            pod: template_pod(),
            existing: vec![],
            old: None,
            new: Some(EventObject::Other),
            want: None,
        },
        Case {
            name: "skip-wrong-claim",
            pod: template_pod(),
            existing: vec![],
            old: None,
            new: claim_obj({
                let mut c = allocated(pending_claim());
                c.metadata.owner_references.as_mut().unwrap()[0].uid += "123";
                c
            }),
            want: Some(QueueingHint::Skip),
        },
        Case {
            name: "skip-unrelated-claim",
            pod: template_pod(),
            existing: vec![allocated(pending_claim())],
            old: None,
            new: claim_obj({
                let mut c = allocated(pending_claim());
                c.metadata.name = Some(format!("{CLAIM}-foo"));
                c
            }),
            want: Some(QueueingHint::Skip),
        },
        Case {
            name: "queue-on-add",
            pod: pod_with_claim_name(),
            existing: vec![pending_claim()],
            old: None,
            new: claim_obj(pending_claim()),
            want: Some(QueueingHint::Queue),
        },
        Case {
            name: "backoff-wrong-old-object",
            pod: pod_with_claim_name(),
            existing: vec![pending_claim()],
            old: Some(EventObject::Other),
            new: claim_obj(pending_claim()),
            want: None,
        },
        Case {
            name: "skip-adding-finalizer",
            pod: pod_with_claim_name(),
            existing: vec![pending_claim()],
            old: claim_obj(pending_claim()),
            new: claim_obj({
                let mut c = pending_claim();
                c.metadata
                    .finalizers
                    .get_or_insert_with(Vec::new)
                    .push("foo".into());
                c
            }),
            want: Some(QueueingHint::Skip),
        },
        Case {
            name: "queue-on-status-change",
            pod: pod_with_claim_name(),
            existing: vec![pending_claim()],
            old: claim_obj(pending_claim()),
            new: claim_obj({
                let mut c = pending_claim();
                c.status.get_or_insert_with(Default::default).allocation = Some(AllocationResult::default());
                c
            }),
            want: Some(QueueingHint::Queue),
        },
        Case {
            name: "claim-deallocate",
            pod: pod_with_claim_name(),
            existing: vec![pending_claim(), allocated(gpu_claim("not-my-claim", 1))],
            old: claim_obj(allocated(gpu_claim("not-my-claim", 1))),
            new: claim_obj(gpu_claim("not-my-claim", 1)),
            want: Some(QueueingHint::Queue),
        },
        // Beyond upstream's table, from the same rule: while a claim of the pod is missing or
        // being deleted, even another claim's deallocation is no reason to retry.
        Case {
            name: "deallocation while the pod's claim is missing",
            pod: pod_with_claim_name(),
            existing: vec![allocated(gpu_claim("not-my-claim", 1))],
            old: claim_obj(allocated(gpu_claim("not-my-claim", 1))),
            new: claim_obj(gpu_claim("not-my-claim", 1)),
            want: Some(QueueingHint::Skip),
        },
        Case {
            name: "the pod's claim marked for deletion",
            pod: pod_with_claim_name(),
            existing: vec![pending_claim()],
            old: claim_obj(pending_claim()),
            new: claim_obj({
                let mut c = pending_claim();
                c.metadata.deletion_timestamp = Some(Time(Default::default()));
                c
            }),
            want: Some(QueueingHint::Skip),
        },
    ];
    for c in cases {
        let e = env();
        for claim in c.existing {
            e.claim(claim);
        }
        let hint = registered_hint(&e, unisched_framework::EventResource::ResourceClaim);
        match (hint(&c.pod, c.old.as_ref(), c.new.as_ref()), c.want) {
            (Ok(got), Some(want)) => assert_eq!(got, want, "{}", c.name),
            (Err(_), None) => {}
            (got, want) => panic!("{}: got {got:?}, want {want:?}", c.name),
        }
    }
}

/// Upstream's `TestIsSchedulableAfterTargetPodUpdate`, through the registered hint.
#[test]
fn target_pod_update_upstream_cases() {
    use upstream_fixtures::*;
    let pod_obj = |p: Pod| Some(EventObject::pod(p));
    let cases = [
        (
            "complete",
            vec![pending_claim()],
            pod_with_claim_templates(&["my-resource"]),
            pod_obj(with_generated(
                pod_with_claim_templates(&["my-resource"]),
                &[("my-resource", CLAIM)],
            )),
            Some(QueueingHint::Queue),
        ),
        (
            "missing-claim",
            vec![],
            pod_with_claim_templates(&["my-resource"]),
            pod_obj(with_generated(
                pod_with_claim_templates(&["my-resource"]),
                &[("my-resource", CLAIM)],
            )),
            Some(QueueingHint::Skip),
        ),
        (
            "incomplete",
            vec![pending_claim()],
            pod_with_claim_templates(&["my-resource", "my-resource-2"]),
            pod_obj(with_generated(
                pod_with_claim_templates(&["my-resource", "my-resource-2"]),
                &[("my-resource", CLAIM)],
            )),
            Some(QueueingHint::Skip),
        ),
        (
            "backoff-wrong-new-object",
            vec![],
            pod_with_claim_templates(&["my-resource"]),
            Some(EventObject::Other),
            None,
        ),
    ];
    for (name, existing, pod, new, want) in cases {
        let e = env();
        for claim in existing {
            e.claim(claim);
        }
        let hint = registered_hint(&e, unisched_framework::EventResource::UnscheduledPod);
        match (hint(&pod, None, new.as_ref()), want) {
            (Ok(got), Some(want)) => assert_eq!(got, want, "{name}"),
            (Err(_), None) => {}
            (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn class_and_slice_hints() {
    let e = env();
    e.claim(gpu_claim("c", 1));
    let pod = pod_with("p", &["c"]);
    let ev = |name: &str| EventObject::DeviceClass(Arc::new(class(name, "x")));
    assert_eq!(
        hints::class_hint(Some(&e.dra), &pod, Some(&ev(GPU))),
        QueueingHint::Queue
    );
    assert_eq!(
        hints::class_hint(Some(&e.dra), &pod, Some(&ev("unrelated"))),
        QueueingHint::Skip
    );
    let ext_pod = PodBuilder::new("q").req("example.com/gpu", "1").build();
    let mut c = class("ext", "x");
    c.spec.as_mut().unwrap().extended_resource_name = Some("example.com/gpu".into());
    assert_eq!(
        hints::class_hint(
            Some(&e.dra),
            &ext_pod,
            Some(&EventObject::DeviceClass(Arc::new(c)))
        ),
        QueueingHint::Queue
    );
    let events = hints::events(Some(e.dra.clone()));
    let slice_hint = events
        .iter()
        .find(|h| h.event.resource == unisched_framework::EventResource::ResourceSlice)
        .unwrap();
    let s = Arc::new(gpus("n1", 1, "a100"));
    let mut relabeled = (*s).clone();
    relabeled.metadata.labels = Some(BTreeMap::from([("a".to_string(), "b".to_string())]));
    let f = slice_hint.hint.as_ref().unwrap();
    let old = EventObject::ResourceSlice(s.clone());
    assert_eq!(
        f(
            &pod,
            Some(&old),
            Some(&EventObject::ResourceSlice(Arc::new(relabeled)))
        )
        .unwrap(),
        QueueingHint::Skip
    );
    assert_eq!(f(&pod, None, Some(&old)).unwrap(), QueueingHint::Queue);
}

#[test]
fn no_dra_state_is_handled() {
    let p = DynamicResources::new(&DynamicResourcesArgs::default(), None, None);
    let pod = info(&pod_with("p", &["c"]));
    let mut st = CycleState::new();
    assert_eq!(
        p.pre_filter(&mut st, &pod, &[]).1.code(),
        Code::UnschedulableAndUnresolvable
    );
    assert_eq!(p.pre_enqueue(&pod).code(), Code::UnschedulableAndUnresolvable);
    let plain = info(&PodBuilder::new("q").build());
    assert!(p.pre_filter(&mut st, &plain, &[]).1.is_skip());
    let _ = node_obj(&node("n1"));
}

mod cycle;
mod group_claims;

/// KEP-5004 in scoring: a DRA-backed extended resource has no allocatable on the node, so
/// NodeResourcesFit counts the class's devices there as its capacity and the allocated ones as its
/// usage (upstream's rule). Without a resolver the resource drops out of the score.
#[test]
fn dra_backed_extended_resource_scores_on_device_counts() {
    use crate::{
        ExtendedResourceResolver, NodeResourcesFit, NodeResourcesFitArgs, ResourceSpec, ScoringStrategy,
    };
    use unisched_framework::PreScorePlugin;

    let e = env();
    ext_class(&e);
    e.slice(gpus("busy", 4, "a100"));
    e.slice(gpus("idle", 4, "a100"));
    let taken = allocation(
        (0..3)
            .map(|i| result("gpu", GPU, "busy", &format!("gpu-{i}")))
            .collect(),
    );
    e.claim(with_allocation(gpu_claim("taken", 3), taken, &["other"]));
    let pod = info(&PodBuilder::new("p").req("example.com/gpu", "1").build());
    let device_plugin = NodeBuilder::new("device-plugin")
        .alloc("cpu", "8")
        .alloc("pods", "10")
        .alloc("example.com/gpu", "4")
        .info();
    let nodes = [node("busy"), node("idle"), device_plugin, node("no-gpus")];

    let strategy = |type_: &str| NodeResourcesFitArgs {
        scoring_strategy: Some(ScoringStrategy {
            type_: type_.into(),
            resources: vec![ResourceSpec {
                name: "example.com/gpu".into(),
                weight: 1,
            }],
            requested_to_capacity_ratio: None,
        }),
        ..Default::default()
    };
    let resolver = Some(e.dra.clone() as Arc<dyn ExtendedResourceResolver>);
    // (strategy, resolver, scores for busy, idle, device-plugin, no-gpus)
    let cases: Vec<(&str, bool, [i64; 4])> = vec![
        // busy: 3 of 4 taken + 1 → 100 % used; idle: 1 of 4; device plugin: allocatable 4.
        ("LeastAllocated", true, [0, 75, 75, 0]),
        ("MostAllocated", true, [100, 25, 25, 0]),
        // Spec-only: DRA nodes have no allocatable for the resource, so it is not scored.
        ("LeastAllocated", false, [0, 0, 75, 0]),
    ];
    for (type_, with_resolver, want) in cases {
        let fit = NodeResourcesFit::new(
            &strategy(type_),
            if with_resolver { resolver.clone() } else { None },
        )
        .unwrap();
        let (mut st, s) = e.prefilter(&pod);
        assert!(s.is_success(), "{s:?}");
        assert!(fit.pre_score(&mut st, &pod, &[]).is_success());
        let got: Vec<i64> = nodes.iter().map(|n| fit.score(&st, &pod, n).unwrap()).collect();
        assert_eq!(got, want, "{type_}, resolver {with_resolver}");
    }
}

/// DeviceResources weighs a DeviceClass (named `deviceclass.resource.kubernetes.io/<class>`) on
/// its own devices only, where a driver weight sees every device of the driver.
#[test]
fn device_resources_scores_per_class_or_per_driver() {
    use crate::{DeviceResources, DeviceResourcesArgs, ResourceSpec, ScoringStrategy};
    use unisched_dra::testing::class_with;
    use unisched_framework::PreScorePlugin;

    let e = env();
    for model in ["a100", "t4"] {
        let sel = format!("device.attributes[\"{GPU}\"].model == \"{model}\"");
        e.dra
            .apply_class(Arc::new(class_with(
                model,
                &[&format!("device.driver == \"{GPU}\""), &sel],
            )))
            .unwrap();
    }
    for n in ["node-a", "node-b"] {
        let mut s = slice(&format!("{n}-gpu"), GPU, n, n);
        for (i, model) in ["a100", "a100", "t4", "t4"].iter().enumerate() {
            s = s.device(dev(&format!("gpu-{i}")).string("model", model));
        }
        e.slice(s.build());
    }
    // node-a: one t4 taken; node-b: one a100 taken.
    let taken = |name: &str, node: &str, device: &str| {
        with_allocation(
            gpu_claim(name, 1),
            allocation(vec![result("gpu", GPU, node, device)]),
            &["other"],
        )
    };
    e.claim(taken("t4-a", "node-a", "gpu-2"));
    e.claim(taken("a100-b", "node-b", "gpu-0"));
    e.claim(claim("default", "want-t4").request(req("gpu", "t4")).build());
    let pod = info(&pod_with("p", &["want-t4"]));
    let (st, s) = e.prefilter(&pod);
    assert!(s.is_success(), "{s:?}");
    let nodes = [node("node-a"), node("node-b")];
    for n in &nodes {
        assert!(e.filter(&st, &pod, n).is_success());
    }
    let scorer = |name: &str| {
        DeviceResources::new(&DeviceResourcesArgs {
            scoring_strategy: Some(ScoringStrategy {
                type_: "MostAllocated".into(),
                resources: vec![ResourceSpec::new(name, 1)],
                requested_to_capacity_ratio: None,
            }),
            ..Default::default()
        })
        .unwrap()
    };
    let cases: &[(&str, [i64; 2])] = &[
        // Driver: two of four GPUs used after the pod's t4 on either node.
        (GPU, [50, 50]),
        // t4 class: node-a would have both t4s used, node-b one of two.
        ("deviceclass.resource.kubernetes.io/t4", [100, 50]),
        // a100 class: untouched by the pod; only node-b has one in use.
        ("deviceclass.resource.kubernetes.io/a100", [0, 50]),
        // An unknown class is left out of the score.
        ("deviceclass.resource.kubernetes.io/missing", [0, 0]),
    ];
    for (name, want) in cases {
        let p = scorer(name);
        let got: Vec<i64> = nodes.iter().map(|n| p.score(&st, &pod, n).unwrap()).collect();
        assert_eq!(got, want.to_vec(), "{name}");
        // Through PreScore (classes compiled once per attempt), as the framework runs it.
        let mut prescored = st.clone();
        assert!(p.pre_score(&mut prescored, &pod, &[]).is_success());
        let got: Vec<i64> = nodes
            .iter()
            .map(|n| p.score(&prescored, &pod, n).unwrap())
            .collect();
        assert_eq!(got, want.to_vec(), "{name} after PreScore");
    }
}
