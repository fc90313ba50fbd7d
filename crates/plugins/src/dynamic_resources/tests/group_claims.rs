//! PodGroup claims (DRAWorkloadResourceClaims) through the pod-group cycle and the members'
//! binding cycles, with the node cache, the DRA cache, the plugin and the fake API: a gang's shared
//! claim is allocated once, for the group, and a gang that does not fit leaves it untouched.

use k8s_openapi::api::scheduling::v1beta1::{
    GangSchedulingPolicy, PodGroup, PodGroupResourceClaim, PodGroupSchedulingPolicy, PodGroupSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use unisched_cache::Cache;
use unisched_framework::config::KubeSchedulerProfile;
use unisched_framework::{
    Framework, MemberDecision, NoNominations, PodGroupCycleInput, PodGroupInfo, PodGroupStore,
    SchedulingAlgorithm, run_binding_cycle, run_pod_group_cycle,
};

use super::*;
use crate::testing::RecordingBinder;
use crate::{PluginContext, PluginFeatures, Registry};

const GROUP: &str = "train";
const GROUP_UID: &str = "train-uid";
/// The pod's and the group's claim entry.
const ENTRY: &str = "imex";

fn pod_group(min_count: i32, claim: PodGroupResourceClaim) -> Arc<PodGroup> {
    Arc::new(PodGroup {
        metadata: ObjectMeta {
            namespace: Some("default".into()),
            name: Some(GROUP.into()),
            uid: Some(GROUP_UID.into()),
            ..Default::default()
        },
        spec: PodGroupSpec {
            scheduling_policy: PodGroupSchedulingPolicy {
                gang: Some(GangSchedulingPolicy { min_count }),
                ..Default::default()
            },
            resource_claims: Some(vec![claim]),
            ..Default::default()
        },
        ..Default::default()
    })
}

/// A member asking for 2 CPUs and the group's claim entry.
fn member(i: usize, entry: &PodResourceClaim) -> Arc<PodInfo> {
    let mut p = PodBuilder::new(&format!("m{i}"))
        .uid(&format!("m{i}"))
        .pod_group(GROUP)
        .req("cpu", "2")
        .build();
    p.spec.as_mut().unwrap().resource_claims = Some(vec![entry.clone()]);
    Arc::new(PodInfo::new(p))
}

struct Setup {
    env: Env,
    cache: Cache,
    fwk: Framework,
    binder: Arc<RecordingBinder>,
    group: PodGroupInfo,
    members: Vec<Arc<PodInfo>>,
}

/// Nodes n1..n3 (`cpus` each, n2 `n2_cpu`), one device on n2 only, the group claim `shared`
/// (unallocated) and `members` members naming it with `entry`.
fn setup(
    group_claims: bool,
    members: usize,
    n2_cpu: &str,
    entry: PodResourceClaim,
    shared: ResourceClaim,
) -> Setup {
    let env = env();
    let cache = Cache::new();
    for (n, cpu) in [("n1", "8"), ("n2", n2_cpu), ("n3", "8")] {
        cache.add_node(Arc::new(
            NodeBuilder::new(n)
                .alloc("cpu", cpu)
                .alloc("memory", "16Gi")
                .alloc("pods", "110")
                .build(),
        ));
    }
    env.slice(gpus("n2", 1, "a100"));
    env.claim(shared);
    let pg = pod_group(
        i32::try_from(members).unwrap(),
        PodGroupResourceClaim {
            name: entry.name.clone(),
            resource_claim_name: entry.resource_claim_name.clone(),
            resource_claim_template_name: entry.resource_claim_template_name.clone(),
        },
    );
    let store = Arc::new(PodGroupStore::new());
    let group = (*store.set_group(pg)).clone();
    let members: Vec<_> = (0..members).map(|i| member(i, &entry)).collect();
    for m in &members {
        store.observe_pod(&m.pod);
    }
    let binder = RecordingBinder::new();
    let features = PluginFeatures {
        workload_resource_claims: group_claims,
        ..PluginFeatures::default()
    };
    let ctx = PluginContext::new(binder.clone())
        .with_dra(env.dra.clone(), env.api.clone() as Arc<dyn DraApi>)
        .with_features(features)
        .with_pod_groups(store, false);
    let fwk = Framework::new(&KubeSchedulerProfile::default(), &Registry::in_tree(ctx)).unwrap();
    Setup {
        env,
        cache,
        fwk,
        binder,
        group,
        members,
    }
}

/// The group cycle, then the binding cycle of every placed member; the nodes bound and the
/// members' failure messages.
fn schedule(s: &Setup) -> (Vec<String>, Vec<String>) {
    let mut algo = SchedulingAlgorithm::new(1, None, 7);
    let result = run_pod_group_cycle(
        &s.fwk,
        &mut algo,
        &s.cache,
        &NoNominations,
        PodGroupCycleInput {
            group: &s.group,
            members: s.members.clone(),
            already_scheduled: 0,
            record_plugin_metrics: false,
        },
    );
    let mut nodes = Vec::new();
    let mut failures = Vec::new();
    for m in result.members {
        match m {
            MemberDecision::Bind(task) => match run_binding_cycle(&s.fwk, &s.cache, *task) {
                Ok(b) => nodes.push(b.node),
                Err(f) => failures.push(f.message),
            },
            MemberDecision::Failed(f) => failures.push(f.message),
            MemberDecision::Skipped(why) => failures.push(why.to_string()),
        }
    }
    (nodes, failures)
}

fn group_reservation() -> Vec<ResourceClaimConsumerReference> {
    vec![ResourceClaimConsumerReference {
        api_group: Some("scheduling.k8s.io".into()),
        name: GROUP.into(),
        resource: "podgroups".into(),
        uid: GROUP_UID.into(),
    }]
}

fn named_entry() -> PodResourceClaim {
    PodResourceClaim {
        name: ENTRY.into(),
        resource_claim_name: Some("shared".into()),
        resource_claim_template_name: None,
    }
}

#[test]
fn a_gang_allocates_its_group_claim_once_and_reserves_it_for_the_group() {
    let s = setup(true, 3, "8", named_entry(), gpu_claim("shared", 1));
    let (nodes, failures) = schedule(&s);
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(nodes, vec!["n2"; 3], "the device is on n2 only");
    assert_eq!(s.binder.bindings().len(), 3);
    let claim = s.env.api.claim("default", "shared").unwrap();
    let status = claim.status.unwrap();
    assert_eq!(
        device_names_of(status.allocation.as_ref().unwrap()),
        vec!["gpu-0"]
    );
    assert_eq!(status.reserved_for.unwrap(), group_reservation());
    // Written once (allocation and the group's reservation together), by whichever member came
    // first; the others found it written. Nothing is left in flight.
    let claim_writes = s
        .env
        .api
        .writes()
        .into_iter()
        .filter(|w| format!("{w:?}").contains("shared"))
        .count();
    assert_eq!(claim_writes, 2, "finalizer and status: {:?}", s.env.api.writes());
    assert_eq!(s.env.dra.in_flight_count(), 0);
}

#[test]
fn a_gang_that_does_not_fit_leaves_its_group_claim_untouched() {
    // n2 holds two members' CPUs, not three: the gang of three fails as a whole.
    let s = setup(true, 3, "5", named_entry(), gpu_claim("shared", 1));
    let (nodes, failures) = schedule(&s);
    assert!(nodes.is_empty(), "{nodes:?}");
    assert_eq!(failures.len(), 3, "{failures:?}");
    assert!(
        failures
            .iter()
            .any(|m| m.contains("minCount (3) cannot be satisfied")),
        "{failures:?}"
    );
    let claim = s.env.api.claim("default", "shared").unwrap();
    assert!(
        claim
            .status
            .as_ref()
            .and_then(|st| st.allocation.as_ref())
            .is_none(),
        "{claim:?}"
    );
    assert!(s.env.api.writes().is_empty(), "{:?}", s.env.api.writes());
    assert_eq!(
        s.env.dra.in_flight_count(),
        0,
        "the taken-back members hold nothing in flight"
    );
}

/// A claim the control plane made from the group's template: controlled by the PodGroup, named
/// in each member's `status.resourceClaimStatuses`.
fn template_setup(group_claims: bool) -> Setup {
    let entry = PodResourceClaim {
        name: ENTRY.into(),
        resource_claim_name: None,
        resource_claim_template_name: Some("imex-channel".into()),
    };
    let mut shared = gpu_claim("train-imex-x", 1);
    shared.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "scheduling.k8s.io/v1beta1".into(),
        kind: "PodGroup".into(),
        name: GROUP.into(),
        uid: GROUP_UID.into(),
        controller: Some(true),
        ..Default::default()
    }]);
    let mut s = setup(group_claims, 2, "8", entry, shared);
    s.members = s
        .members
        .iter()
        .map(|m| {
            let mut p = (*m.pod).clone();
            p.status
                .get_or_insert_with(Default::default)
                .resource_claim_statuses = Some(vec![k8s_openapi::api::core::v1::PodResourceClaimStatus {
                name: ENTRY.into(),
                resource_claim_name: Some("train-imex-x".into()),
            }]);
            Arc::new(PodInfo::new(p))
        })
        .collect();
    s
}

#[test]
fn a_claim_generated_for_the_group_is_its_members_to_use() {
    let s = template_setup(true);
    let (nodes, failures) = schedule(&s);
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(nodes, vec!["n2"; 2]);
    let claim = s.env.api.claim("default", "train-imex-x").unwrap();
    assert_eq!(claim.status.unwrap().reserved_for.unwrap(), group_reservation());
}

#[test]
fn without_group_claims_a_claim_generated_for_the_group_is_not_the_pods() {
    let s = template_setup(false);
    let (nodes, failures) = schedule(&s);
    assert!(nodes.is_empty(), "{nodes:?}");
    assert!(
        failures.iter().any(|m| m.contains(
            "ResourceClaim default/train-imex-x was not created for Pod default/m0 (Pod is not owner)"
        )),
        "{failures:?}"
    );
}

/// The plugin over `e`'s caches, sharing the claims of `group` among its pods.
fn plugin_with_group_claims(e: &Env, group: Arc<PodGroup>) -> DynamicResources {
    let store = Arc::new(PodGroupStore::new());
    store.set_group(group);
    DynamicResources::new(
        &DynamicResourcesArgs::default(),
        Some(e.dra.clone()),
        Some(e.api.clone() as Arc<dyn DraApi>),
    )
    .with_pod_group_claims(store)
}

/// A cycle state over node n1, as one member's attempt in the PodGroup try `try_key` (if any).
fn state_on_n1(try_key: Option<&str>) -> CycleState {
    let mut st = CycleState::with_snapshot(Arc::new(Snapshot::from_node_infos([node("n1")])));
    st.pod_group = try_key.map(|k| unisched_framework::PodGroupAttempt {
        placement: None,
        try_key: Arc::from(k),
        removed: None,
    });
    st
}

/// A mapped device's CPUs count for one pod only (upstream's sharing rule for node-allocatable
/// claims): a claim reserved for the pod's own PodGroup is the pod's to use, but a claim another
/// member of the same try is already taking cannot add its CPUs to a second member.
#[test]
fn a_mapped_group_claim_counts_its_cpus_for_one_member_only() {
    let e = env();
    cpu_class(&e);
    e.slice(grouped_cpu_slice("n1", "8"));
    let mut cpu_result = result("cpus", "dra.cpu", "n1", "numa0");
    cpu_result.share_id = Some("s1".into());
    cpu_result.consumed_capacity = Some(BTreeMap::from([("dra.cpu/cpu".to_string(), q("2"))]));
    let mut reserved = with_allocation(
        cpu_claim("mapped", "2"),
        allocation(vec![cpu_result.clone()]),
        &[],
    );
    reserved.status.as_mut().unwrap().reserved_for = Some(group_reservation());
    e.claim(reserved);
    let entry = PodResourceClaim {
        name: ENTRY.into(),
        resource_claim_name: Some("mapped".into()),
        resource_claim_template_name: None,
    };
    let group = pod_group(
        2,
        PodGroupResourceClaim {
            name: ENTRY.into(),
            resource_claim_name: Some("mapped".into()),
            resource_claim_template_name: None,
        },
    );
    let pod = member(0, &entry);
    let shared =
        "node allocatable resource claim mapped has a mapped device and cannot be shared across pods";

    // Reserved for the pod's PodGroup in an earlier cycle: the pod's, with group claims on.
    let with_groups = plugin_with_group_claims(&e, group.clone());
    let mut st = state_on_n1(None);
    assert!(with_groups.pre_filter(&mut st, &pod, &[]).1.is_success());
    let s = with_groups.filter(&st, &pod, &node("n1"));
    assert!(s.is_success(), "{s:?}");
    // Without them the group's reservation is someone else's.
    let (st, s) = e.prefilter(&pod);
    assert!(s.is_success(), "{s:?}");
    let s = e.filter(&st, &pod, &node("n1"));
    assert_eq!(
        (s.code(), s.message()),
        (Code::UnschedulableAndUnresolvable, shared.to_string())
    );

    // Allocated in flight by another member of the same try: not a second time.
    let mut pending = cpu_claim("mapped2", "2");
    pending.metadata.uid = Some("mapped2-uid".into());
    e.claim(pending);
    e.dra.reserve_in_flight_shareable(
        "mapped2-uid",
        allocation(vec![cpu_result]),
        Some(Arc::from("train#1")),
    );
    let entry2 = PodResourceClaim {
        name: ENTRY.into(),
        resource_claim_name: Some("mapped2".into()),
        resource_claim_template_name: None,
    };
    let group2 = pod_group(
        2,
        PodGroupResourceClaim {
            name: ENTRY.into(),
            resource_claim_name: Some("mapped2".into()),
            resource_claim_template_name: None,
        },
    );
    let plugin = plugin_with_group_claims(&e, group2);
    let second = member(1, &entry2);
    let mut st = state_on_n1(Some("train#1"));
    assert!(plugin.pre_filter(&mut st, &second, &[]).1.is_success());
    let s = plugin.filter(&st, &second, &node("n1"));
    let message =
        "node allocatable resource claim mapped2 has a mapped device and cannot be shared across pods";
    assert_eq!(
        (s.code(), s.message()),
        (Code::UnschedulableAndUnresolvable, message.to_string())
    );
    // In another try the allocation is someone else's in flight: the pod waits for it.
    let mut st = state_on_n1(Some("train#2"));
    let s = plugin.pre_filter(&mut st, &second, &[]).1;
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable, "{s:?}");
    assert!(
        s.message().contains("is in the process of being allocated"),
        "{s:?}"
    );
}
