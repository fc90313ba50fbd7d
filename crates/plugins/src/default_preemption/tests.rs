//! DefaultPreemption through the real default profile: Filter, PreFilter extensions and the
//! message format exactly as a scheduling attempt produces them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{NodeAllocatableMappedResources, NodeAllocatableResourceClaimStatus};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use unisched_framework::{
    CycleState, Framework, NodeInfo, PodInfo, PodNominator, ScheduleError, SchedulingAlgorithm,
    config::KubeSchedulerProfile,
};

use super::eligibility::tests::being_preempted;
use super::pdb::tests::pdb;
use super::*;
use crate::testing::{NodeBuilder, PodBuilder, RecordingBinder, snapshot};
use crate::{PluginContext, Registry};

#[derive(Default)]
struct Nominations(HashMap<String, Vec<Arc<PodInfo>>>);

impl PodNominator for Nominations {
    fn nominated_pods_for_node(&self, node: &str) -> Vec<Arc<PodInfo>> {
        self.0.get(node).cloned().unwrap_or_default()
    }
    fn nominations(&self) -> HashMap<String, Vec<Arc<PodInfo>>> {
        self.0.clone()
    }
}

struct Outcome {
    nominated: Option<String>,
    message: String,
    plans: Vec<PreemptionPlan>,
    attempts: usize,
}

fn run_with(
    nodes: Vec<NodeInfo>,
    pod: PodInfo,
    pdbs: Vec<Arc<PodDisruptionBudget>>,
    nominator: &Nominations,
) -> Outcome {
    let rec = RecordingPreemptor::new();
    let ctx =
        PluginContext::new(RecordingBinder::new()).with_preemption(rec.clone(), Arc::new(StaticPdbs(pdbs)));
    let fwk = Framework::new(&KubeSchedulerProfile::default(), &Registry::in_tree(ctx)).unwrap();
    let mut algo = SchedulingAlgorithm::new(1, None, 7);
    let mut state = CycleState::with_snapshot(snapshot(nodes));
    match algo.schedule_pod(&fwk, &mut state, &pod, nominator) {
        Err(ScheduleError::Fit(fit, nomination)) => Outcome {
            nominated: nomination.and_then(|n| n.nominated_node_name),
            message: fit.to_string(),
            plans: rec.plans(),
            attempts: rec.attempts(),
        },
        Ok(r) => panic!("unexpectedly scheduled on {}", r.suggested_host),
        Err(ScheduleError::Error(s)) => panic!("error: {s}"),
    }
}

fn run(nodes: Vec<NodeInfo>, pod: PodInfo, pdbs: Vec<Arc<PodDisruptionBudget>>) -> Outcome {
    run_with(nodes, pod, pdbs, &Nominations::default())
}

fn low(name: &str, node: &str, cpu: &str, prio: i32) -> PodInfo {
    PodBuilder::new(name)
        .node_name(node)
        .req("cpu", cpu)
        .priority(prio)
        .info()
}

fn node(name: &str, cpu: &str, pods: Vec<PodInfo>) -> NodeInfo {
    NodeBuilder::new(name)
        .alloc("cpu", cpu)
        .alloc("memory", "8Gi")
        .alloc("pods", "110")
        .info_with(pods)
}

fn high(cpu: &str) -> PodInfo {
    PodBuilder::new("high").req("cpu", cpu).priority(100).info()
}

fn victim_names(p: &PreemptionPlan) -> Vec<String> {
    p.victims.iter().map(|v| v.name.clone()).collect()
}

#[test]
fn minimal_victims_most_important_kept() {
    let n1 = node(
        "n1",
        "4",
        vec![
            low("p1", "n1", "1", 1),
            low("p2", "n1", "1", 2),
            low("p3", "n1", "1", 3),
            low("p4", "n1", "1", 4),
        ],
    );
    let o = run(vec![n1], high("2"), vec![]);
    assert_eq!(o.nominated.as_deref(), Some("n1"));
    assert_eq!(o.plans.len(), 1);
    assert_eq!(
        victim_names(&o.plans[0]),
        ["p2", "p1"],
        "lowest two, most important first"
    );
    assert_eq!(
        o.plans[0].scheduler_name,
        unisched_framework::config::DEFAULT_SCHEDULER_NAME
    );
    assert_eq!(o.attempts, 1);
    assert_eq!(
        o.message, "0/1 nodes are available: 1 Insufficient cpu.",
        "a successful preemption adds nothing to the message"
    );
}

#[test]
fn chooses_node_by_victim_priority_and_pdb() {
    struct Case {
        name: &'static str,
        nodes: Vec<NodeInfo>,
        pdbs: Vec<Arc<PodDisruptionBudget>>,
        want_node: &'static str,
        want_victims: Vec<&'static str>,
    }
    let labelled = |name: &str, node: &str, prio: i32, app: &str| {
        PodBuilder::new(name)
            .node_name(node)
            .req("cpu", "2")
            .priority(prio)
            .label("app", app)
            .info()
    };
    let cases = vec![
        Case {
            name: "lower victim priority wins",
            nodes: vec![
                node("n1", "2", vec![low("a", "n1", "2", 50)]),
                node("n2", "2", vec![low("b", "n2", "2", 10)]),
            ],
            pdbs: vec![],
            want_node: "n2",
            want_victims: vec!["b"],
        },
        Case {
            name: "fewer victims wins on equal top priority",
            nodes: vec![
                node(
                    "n1",
                    "2",
                    vec![low("a1", "n1", "1", 10), low("a2", "n1", "1", 10)],
                ),
                node("n2", "2", vec![low("b", "n2", "2", 10)]),
            ],
            pdbs: vec![],
            want_node: "n2",
            want_victims: vec!["b"],
        },
        Case {
            name: "pdb violation outweighs priority",
            nodes: vec![
                node("n1", "2", vec![labelled("a", "n1", 1, "guarded")]),
                node("n2", "2", vec![labelled("b", "n2", 50, "free")]),
            ],
            pdbs: vec![pdb("guard", "guarded", 0, &[])],
            want_node: "n2",
            want_victims: vec!["b"],
        },
        Case {
            name: "pdb with disruptions left is no violation",
            nodes: vec![
                node("n1", "2", vec![labelled("a", "n1", 1, "guarded")]),
                node("n2", "2", vec![labelled("b", "n2", 50, "free")]),
            ],
            pdbs: vec![pdb("guard", "guarded", 1, &[])],
            want_node: "n1",
            want_victims: vec!["a"],
        },
    ];
    for c in cases {
        let o = run(c.nodes, high("2"), c.pdbs);
        assert_eq!(o.nominated.as_deref(), Some(c.want_node), "{}", c.name);
        assert_eq!(victim_names(&o.plans[0]), c.want_victims, "{}", c.name);
    }
}

#[test]
fn failure_messages() {
    let never = {
        let mut p = PodBuilder::new("high").req("cpu", "2").priority(100).build();
        p.spec.as_mut().unwrap().preemption_policy = Some("Never".into());
        PodInfo::new(p)
    };
    let cases: Vec<(&str, Vec<NodeInfo>, PodInfo, &str)> = vec![
        (
            "no lower-priority pods",
            vec![
                node("n1", "2", vec![low("a", "n1", "2", 100)]),
                node("n2", "2", vec![low("b", "n2", "2", 200)]),
            ],
            high("2"),
            "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No \
             preemption victims found for incoming pod.",
        ),
        (
            "unresolvable nodes are not tried",
            vec![
                node("n1", "2", vec![low("a", "n1", "2", 1)]),
                NodeBuilder::new("n2")
                    .alloc("cpu", "2")
                    .alloc("pods", "110")
                    .info_with([low("b", "n2", "2", 200)]),
            ],
            PodBuilder::new("high").req("cpu", "3").priority(100).info(),
            "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 Preemption \
             is not helpful for scheduling.",
        ),
        (
            "mixed",
            vec![
                node("n1", "2", vec![low("a", "n1", "2", 100)]),
                NodeBuilder::new("n2")
                    .alloc("cpu", "2")
                    .unschedulable(true)
                    .info(),
            ],
            high("2"),
            "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) were unschedulable. preemption: 0/2 nodes \
             are available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for \
             scheduling.",
        ),
        (
            "still does not fit without the victims",
            vec![node(
                "n1",
                "2",
                vec![low("a", "n1", "1", 1), low("b", "n1", "1", 200)],
            )],
            high("2"),
            "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 Insufficient \
             cpu.",
        ),
        (
            "preemptionPolicy Never",
            vec![node("n1", "2", vec![low("a", "n1", "2", 1)])],
            never,
            "0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never.",
        ),
    ];
    for (name, nodes, pod, want) in cases {
        let o = run(nodes, pod, vec![]);
        assert_eq!(o.message, want, "{name}");
        assert!(o.plans.is_empty(), "{name}");
        assert_eq!(o.nominated, None, "{name}");
    }
}

#[test]
fn terminating_victims_block_a_second_preemption() {
    let victim = PodInfo::new(being_preempted(
        PodBuilder::new("v").node_name("n1").req("cpu", "2").priority(1),
    ));
    let pod = PodBuilder::new("high")
        .req("cpu", "2")
        .priority(100)
        .nominated_node("n1")
        .info();
    let o = run(vec![node("n1", "2", vec![victim])], pod, vec![]);
    assert!(o.plans.is_empty());
    assert!(
        o.message
            .ends_with("preemption: not eligible due to a terminating pod on the nominated node.")
    );
}

#[test]
fn stale_nomination_is_cleared_when_nothing_helps() {
    let pod = PodBuilder::new("high")
        .req("cpu", "2")
        .priority(100)
        .nominated_node("n1")
        .info();
    let o = run(vec![node("n1", "2", vec![low("a", "n1", "2", 500)])], pod, vec![]);
    assert_eq!(o.nominated.as_deref(), Some(""));
}

#[test]
fn nominated_pods_count_and_lower_ones_lose_their_nomination() {
    // n1 has room for one 2-cpu pod after eviction; a higher-priority pod already nominated there
    // takes it, so n2 must be chosen even though its victim has a higher priority.
    let nominated_high = PodBuilder::new("other").req("cpu", "2").priority(150).arc();
    let nominated_low = PodBuilder::new("lowly").req("cpu", "1").priority(5).arc();
    let nominator = Nominations(HashMap::from([
        ("n1".to_string(), vec![nominated_high]),
        ("n2".to_string(), vec![nominated_low]),
    ]));
    let nodes = vec![
        node("n1", "2", vec![low("a", "n1", "2", 1)]),
        node("n2", "3", vec![low("b", "n2", "2", 50)]),
    ];
    let o = run_with(nodes, high("2"), vec![], &nominator);
    assert_eq!(o.nominated.as_deref(), Some("n2"));
    let plan = &o.plans[0];
    assert_eq!(victim_names(plan), ["b"]);
    let cleared: Vec<String> = plan.clear_nominations.iter().map(|p| p.name.clone()).collect();
    assert_eq!(cleared, ["lowly"]);
}

#[test]
fn node_allocatable_claim_cpu_is_freed_with_its_pod() {
    // KEP-5517: the victim's CPU comes from a claim, recorded in its status; the preemptor asks for
    // spec CPU only. Removing the victim from the node must free that CPU.
    let mut v = PodBuilder::new("claimer").node_name("n1").priority(1).build();
    v.status
        .get_or_insert_default()
        .node_allocatable_resource_claim_statuses = Some(vec![NodeAllocatableResourceClaimStatus {
        resource_claim_name: "cpus".into(),
        containers: Some(vec!["c0".into()]),
        mapping: Some(vec![NodeAllocatableMappedResources {
            name: "cpu".into(),
            quantity: Quantity("3".into()),
        }]),
        overhead: None,
    }]);
    let v = PodInfo::new(v);
    assert_eq!(
        v.requests().milli_cpu,
        3000,
        "the claim's CPU is part of the pod's requests"
    );
    let mut n = node("n1", "4", vec![v.clone()]);
    assert_eq!(n.requested.milli_cpu, 3000);
    n.remove_pod(&v.uid);
    assert_eq!(
        n.requested.milli_cpu, 0,
        "NodeInfo::remove_pod releases the claim's CPU"
    );

    let nodes = vec![node("n1", "4", vec![v, low("small", "n1", "1", 1)])];
    let o = run(nodes, high("3"), vec![]);
    assert_eq!(o.nominated.as_deref(), Some("n1"));
    assert_eq!(victim_names(&o.plans[0]), ["claimer"]);
}

#[test]
fn dry_run_is_deterministic_and_bounded() {
    // 20 equal nodes: every one is a candidate; with minCandidateNodesAbsolute 1 and 10%, two are
    // dry-run; the same pod always gets the same node.
    let nodes: Vec<NodeInfo> = (0..20)
        .map(|i| {
            node(
                &format!("n{i:02}"),
                "2",
                vec![low(&format!("v{i:02}"), &format!("n{i:02}"), "2", 1)],
            )
        })
        .collect();
    let pick = || {
        let rec = RecordingPreemptor::new();
        let ctx = PluginContext::new(RecordingBinder::new())
            .with_preemption(rec.clone(), Arc::new(StaticPdbs::default()));
        let mut profile = KubeSchedulerProfile::default();
        profile
            .plugin_config
            .push(unisched_framework::config::PluginConfig {
                name: NAME.into(),
                args: serde_json::json!({"minCandidateNodesAbsolute": 1}),
            });
        let fwk = Framework::new(&profile, &Registry::in_tree(ctx)).unwrap();
        let mut algo = SchedulingAlgorithm::new(1, None, 7);
        let mut state = CycleState::with_snapshot(snapshot(nodes.clone()));
        let r = algo.schedule_pod(&fwk, &mut state, &high("2"), &Nominations::default());
        assert!(matches!(r, Err(ScheduleError::Fit(..))));
        rec.plans()[0].node.clone()
    };
    assert_eq!(pick(), pick());
}

#[test]
fn bad_args_fail_the_profile() {
    let mut profile = KubeSchedulerProfile::default();
    profile
        .plugin_config
        .push(unisched_framework::config::PluginConfig {
            name: NAME.into(),
            args: serde_json::json!({"minCandidateNodesPercentage": 200}),
        });
    let err = Framework::new(
        &profile,
        &Registry::in_tree(PluginContext::new(RecordingBinder::new())),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("minCandidateNodesPercentage: Invalid value: 200"),
        "{err}"
    );
}

#[test]
fn victims_devices_are_released_in_the_dry_run() {
    use k8s_openapi::api::core::v1::{
        PodResourceClaim, ResourceClaim as ContainerClaim, ResourceRequirements,
    };
    use k8s_openapi::api::resource::v1::{
        AllocationResult, DeviceAllocationResult, DeviceRequestAllocationResult,
        ResourceClaimConsumerReference,
    };
    use unisched_cache::DraCache;
    use unisched_dra::testing::{claim, class, dev, req, slice};

    use crate::dynamic_resources::testing::FakeDraApi;

    const GPU: &str = "gpu.example.com";
    let with_claim = |b: PodBuilder, claim_name: &str| {
        let mut p = b.build();
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
        PodInfo::new(p)
    };
    // n1: 2 cpus and one GPU, both held by `victim` (the GPU through an allocated claim). The
    // preemptor needs a cpu and a GPU: only evicting `victim` frees both.
    let run_case = |simulate_release: bool| {
        let dra = Arc::new(DraCache::new());
        let api = FakeDraApi::new();
        api.echo_to(dra.clone());
        dra.apply_class(Arc::new(class(GPU, GPU))).unwrap();
        dra.apply_slice(Arc::new(
            slice("n1-gpu", GPU, "n1", "n1").device(dev("gpu-0")).build(),
        ))
        .unwrap();
        let mut held = claim("default", "held").request(req("gpu", GPU)).build();
        let st = held.status.get_or_insert_with(Default::default);
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
        st.reserved_for = Some(vec![ResourceClaimConsumerReference {
            api_group: None,
            name: "victim".into(),
            resource: "pods".into(),
            uid: if simulate_release {
                "victim"
            } else {
                "someone-else"
            }
            .into(),
        }]);
        api.seed_claim(held);
        api.seed_claim(claim("default", "want").request(req("gpu", GPU)).build());
        let victim = with_claim(
            PodBuilder::new("victim")
                .node_name("n1")
                .req("cpu", "2")
                .priority(1),
            "held",
        );
        let rec = RecordingPreemptor::new();
        let ctx = PluginContext::new(RecordingBinder::new())
            .with_dra(dra.clone(), api.clone())
            .with_preemption(rec.clone(), Arc::new(StaticPdbs::default()));
        let fwk = Framework::new(&KubeSchedulerProfile::default(), &Registry::in_tree(ctx)).unwrap();
        let mut algo = SchedulingAlgorithm::new(1, None, 7);
        let mut state = CycleState::with_snapshot(snapshot([node("n1", "2", vec![victim])]));
        let pod = with_claim(PodBuilder::new("high").req("cpu", "1").priority(100), "want");
        let r = algo.schedule_pod(&fwk, &mut state, &pod, &Nominations::default());
        let Err(ScheduleError::Fit(fit, nomination)) = r else {
            panic!("must not fit")
        };
        (
            fit.to_string(),
            nomination.and_then(|n| n.nominated_node_name),
            rec.plans(),
        )
    };
    let (_, nominated, plans) = run_case(true);
    assert_eq!(nominated.as_deref(), Some("n1"));
    assert_eq!(victim_names(&plans[0]), ["victim"]);
    // When another pod also consumes the claim, evicting the victim does not free the GPU.
    let (msg, nominated, plans) = run_case(false);
    assert_eq!(nominated, None);
    assert!(plans.is_empty());
    assert!(
        msg.ends_with("preemption: 0/1 nodes are available: 1 cannot allocate all claims."),
        "{msg}"
    );
}

#[test]
fn victims_waiting_at_permit_are_rejected_not_deleted() {
    let rec = RecordingPreemptor::new();
    let ctx = PluginContext::new(RecordingBinder::new())
        .with_preemption(rec.clone(), Arc::new(StaticPdbs::default()));
    let fwk = Framework::new(&KubeSchedulerProfile::default(), &Registry::in_tree(ctx)).unwrap();
    fwk.waiting_pods().add(
        "waiting",
        std::collections::BTreeMap::from([("SomePermit".to_string(), std::time::Duration::from_secs(60))]),
    );
    let nodes = vec![node(
        "n1",
        "2",
        vec![low("waiting", "n1", "1", 1), low("bound", "n1", "1", 1)],
    )];
    let mut algo = SchedulingAlgorithm::new(1, None, 7);
    let mut state = CycleState::with_snapshot(snapshot(nodes));
    let r = algo.schedule_pod(&fwk, &mut state, &high("2"), &Nominations::default());
    assert!(matches!(r, Err(ScheduleError::Fit(..))));
    let plan = &rec.plans()[0];
    assert_eq!(victim_names(plan), ["bound"]);
    let rejected: Vec<String> = plan.rejected_at_permit.iter().map(|p| p.name.clone()).collect();
    assert_eq!(rejected, ["waiting"]);
    let s = fwk.waiting_pods().wait("waiting");
    assert_eq!(s.message(), "preempted");
    assert_eq!(s.plugin(), Some(NAME));
}

#[test]
fn no_second_preemption_while_evictions_are_written() {
    let rec = RecordingPreemptor::new();
    rec.preempting.lock().push("high".into());
    let ctx = PluginContext::new(RecordingBinder::new())
        .with_preemption(rec.clone(), Arc::new(StaticPdbs::default()));
    let fwk = Framework::new(&KubeSchedulerProfile::default(), &Registry::in_tree(ctx)).unwrap();
    let mut algo = SchedulingAlgorithm::new(1, None, 7);
    let mut state = CycleState::with_snapshot(snapshot([node("n1", "2", vec![low("a", "n1", "2", 1)])]));
    let Err(ScheduleError::Fit(fit, nomination)) =
        algo.schedule_pod(&fwk, &mut state, &high("2"), &Nominations::default())
    else {
        panic!("must not fit")
    };
    assert!(rec.plans().is_empty());
    assert_eq!(nomination.and_then(|n| n.nominated_node_name), None);
    assert!(
        fit.to_string()
            .ends_with("preemption: waiting for the preemption for this pod to be finished"),
        "{fit}"
    );
}

/// Upstream's PreEnqueue cases for asynchronous preemption (the ones without composite groups):
/// a pod is held while its own evictions are being written; another pod is not; a pod of a
/// PodGroup is left to its group when pod groups are on (held only while its group's evictions
/// are written, below), and is held like any pod when they are off.
#[test]
fn pre_enqueue_holds_a_pod_while_its_preemption_is_written() {
    let rec = RecordingPreemptor::new();
    rec.preempting.lock().push("p".into());
    let plugin = |groups: bool| {
        DefaultPreemption::new(
            &DefaultPreemptionArgs::default(),
            Some(rec.clone() as Arc<dyn Preemptor>),
            None,
        )
        .unwrap()
        .with_pod_groups(groups.then(|| Arc::new(PodGroupStore::new())))
    };
    let pod = PodBuilder::new("p").uid("p").info();
    let other = PodBuilder::new("p_other").uid("p_other").info();
    let grouped = PodBuilder::new("p").uid("p").pod_group("pg1").info();
    // (case, pod groups on, pod, held)
    let cases = [
        ("same pod", false, &pod, true),
        ("different pod", false, &other, false),
        (
            "pod of a group, groups on: its group decides",
            true,
            &grouped,
            false,
        ),
        ("pod of a group, groups off: held as a pod", false, &grouped, true),
    ];
    for (name, groups, p, held) in cases {
        let s = plugin(groups).pre_enqueue(p);
        if held {
            assert_eq!(s.code(), Code::UnschedulableAndUnresolvable, "{name}");
            assert_eq!(s.message(), WAITING_FOR_PREEMPTION, "{name}");
        } else {
            assert!(s.is_success(), "{name}: {s:?}");
        }
    }
    // Not reported on the pod, and requeued by the victims' deletions through the other plugins.
    let s = plugin(false).pre_enqueue(&pod);
    assert_eq!(plugin(false).rejection_message(&pod, &s), None);
    let events = plugin(false).events_to_register();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event.resource, EventResource::AssignedPod);
    let hint = events[0].hint.as_ref().unwrap();
    assert_eq!(hint(&pod.pod, None, None).unwrap(), QueueingHint::Skip);
    // Without a preemptor nothing is held.
    let none = DefaultPreemption::new(&DefaultPreemptionArgs::default(), None, None).unwrap();
    assert!(none.pre_enqueue(&pod).is_success());
}
