//! Gangs (PodGroups with a `minCount`) under faults: lost write answers while several gangs compete
//! for too few devices, the scheduler killed while a gang's members are being bound, a PodGroup
//! deleted while its members are waiting or being bound, the leader killed between evicting a
//! preempting gang's victims and binding the gang, and lost answers to the victims' deletions.
//!
//! A gang is all or nothing only up to its binding cycles: once one member is bound, nothing takes
//! it back, so every fault must end with each gang at 0 or at least `minCount` bound members, and no
//! device held for a pod or a group that does not use it. After each fault the cluster is left to
//! settle and these invariants are checked:
//! - (a) every allocated claim has a consumer that uses it: a bound pod in its `reservedFor`, or a
//!   live PodGroup (same UID) with a bound member; a bound pod holds its own claims;
//! - (b) every live gang has 0 or at least `minCount` members bound;
//! - (c) no device is in two allocations;
//! - (d) the scheduler keeps running: a pod created afterwards is bound.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::{wait_until, wait_until_explained};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use unisched_framework::config::KubeSchedulerConfiguration;
use unisched_runtime::{Scheduler, SchedulerOptions};
use unisched_sim::{DeleteOptions, RunningServer, Store};

const NS: &str = "default";
const GPU_DRIVER: &str = "gpu.example.com";
const CHANNEL_DRIVER: &str = "channel.example.com";
/// The template a PodGroup's channel claim is made from (one channel for the whole gang).
const CHANNEL_TEMPLATE: &str = "channel";
/// Generous: two cores shared with other builds, and gangs retried on backoff.
const SETTLE: Duration = Duration::from_secs(60);

/// A scheduler on `server` as `unisched run` starts it (binding cycles on connections of their
/// own, so the lost answers are lost on those), with `shutdown_grace` for in-flight bindings.
async fn start_scheduler(
    server: &RunningServer,
    identity: &str,
    shutdown_grace: Duration,
) -> (Arc<Scheduler>, tokio::task::JoinHandle<()>) {
    let mut config = KubeSchedulerConfiguration::defaulted();
    config.leader_election.leader_elect = false;
    config.client_connection.qps = -1.0;
    let options = SchedulerOptions {
        config,
        seed: 5,
        identity: identity.into(),
        health_addr: None,
        default_namespace: NS.into(),
        binding_connections: Some(kube::Config::new(server.url().parse().unwrap())),
        feature_gates: Default::default(),
    };
    let s = Scheduler::new(support::client(server), options)
        .await
        .unwrap()
        .with_shutdown_grace(shutdown_grace);
    let s = Arc::new(s);
    let runner = s.clone();
    let task = tokio::spawn(async move {
        let _ = runner.run().await;
    });
    (s, task)
}

fn create(store: &Store, resource: &str, ns: Option<&str>, obj: Value) {
    store.create(resource, ns, obj).unwrap();
}

/// Nodes `n0..` with `gpus_per_node` GPUs each (a pool per node), and `channels` channels reachable
/// from every node (one pool).
fn seed_cluster(store: &Store, nodes: usize, gpus_per_node: usize, channels: usize) {
    for (class, driver) in [("gpu", GPU_DRIVER), ("channel", CHANNEL_DRIVER)] {
        create(
            store,
            "deviceclasses",
            None,
            json!({"metadata": {"name": class},
                   "spec": {"selectors": [{"cel": {"expression": format!("device.driver == '{driver}'")}}]}}),
        );
    }
    create(
        store,
        "resourceclaimtemplates",
        Some(NS),
        json!({"metadata": {"name": CHANNEL_TEMPLATE, "namespace": NS},
               "spec": {"spec": {"devices": {"requests": [
                   {"name": "channel", "exactly": {"deviceClassName": "channel"}}]}}}}),
    );
    for n in 0..nodes {
        let node = format!("n{n}");
        create(
            store,
            "nodes",
            None,
            json!({"metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}},
                   "status": {"capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}),
        );
        if gpus_per_node == 0 {
            continue;
        }
        let gpus: Vec<Value> = (0..gpus_per_node)
            .map(|g| json!({"name": format!("gpu-{g}")}))
            .collect();
        create(
            store,
            "resourceslices",
            None,
            json!({"metadata": {"name": format!("{node}-gpu")},
                   "spec": {"driver": GPU_DRIVER, "nodeName": node,
                            "pool": {"name": format!("{node}-gpu"), "generation": 1, "resourceSliceCount": 1},
                            "devices": gpus}}),
        );
    }
    if channels > 0 {
        let devices: Vec<Value> = (0..channels)
            .map(|c| json!({"name": format!("channel-{c}")}))
            .collect();
        create(
            store,
            "resourceslices",
            None,
            json!({"metadata": {"name": "fabric"},
                   "spec": {"driver": CHANNEL_DRIVER, "allNodes": true,
                            "pool": {"name": "fabric", "generation": 1, "resourceSliceCount": 1},
                            "devices": devices}}),
        );
    }
}

/// What each member of a gang asks for.
#[derive(Clone, Copy, Debug)]
struct Needs {
    /// A GPU claim of its own (`<pod>-gpu`, created with the pod).
    gpu: bool,
    /// The gang's channel: the PodGroup's own claim, shared by the members.
    group_channel: bool,
}

/// A PodGroup `name` with a gang of `min_count` (and the channel claim when `needs` says so).
fn pod_group(store: &Store, name: &str, min_count: usize, needs: Needs) {
    create(
        store,
        "podgroups",
        Some(NS),
        pod_group_object(name, min_count, needs),
    );
}

fn pod_group_object(name: &str, min_count: usize, needs: Needs) -> Value {
    let mut group = json!({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}});
    if needs.group_channel {
        group["spec"]["resourceClaims"] =
            json!([{"name": "channel", "resourceClaimTemplateName": CHANNEL_TEMPLATE}]);
    }
    group
}

/// Member `i` of gang `group`, named `<group>-<i>`.
fn member(store: &Store, group: &str, i: usize, needs: Needs) {
    let pod = member_object(store, group, i, needs);
    create(store, "pods", Some(NS), pod);
}

/// Member `i` of gang `group` (its own GPU claim created when `needs` says so).
fn member_object(store: &Store, group: &str, i: usize, needs: Needs) -> Value {
    let name = format!("{group}-{i}");
    let mut claims = Vec::new();
    let mut uses = Vec::new();
    if needs.gpu {
        let claim = format!("{name}-gpu");
        create(
            store,
            "resourceclaims",
            Some(NS),
            json!({"metadata": {"name": claim, "namespace": NS},
                   "spec": {"devices": {"requests": [
                       {"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}}),
        );
        claims.push(json!({"name": "gpu", "resourceClaimName": claim}));
        uses.push(json!({"name": "gpu"}));
    }
    if needs.group_channel {
        claims.push(json!({"name": "channel", "resourceClaimTemplateName": CHANNEL_TEMPLATE}));
        uses.push(json!({"name": "channel"}));
    }
    json!({"metadata": {"name": name, "namespace": NS},
           "spec": {"schedulerName": "unisched",
                    "schedulingGroup": {"podGroupName": group},
                    "resourceClaims": claims,
                    "containers": [{"name": "c", "image": "x",
                                    "resources": {"requests": {"cpu": "100m"}, "claims": uses}}]}})
}

/// A gang: its PodGroup and `members` pods.
fn gang(store: &Store, name: &str, min_count: usize, members: usize, needs: Needs) {
    pod_group(store, name, min_count, needs);
    for i in 0..members {
        member(store, name, i, needs);
    }
}

/// A gang whose PodGroup and members are of PriorityClass `class`, disrupted as a whole.
fn gang_of_class(store: &Store, name: &str, min_count: usize, members: usize, needs: Needs, class: &str) {
    let mut group = pod_group_object(name, min_count, needs);
    group["spec"]["priorityClassName"] = json!(class);
    group["spec"]["disruptionMode"] = json!({"all": {}});
    create(store, "podgroups", Some(NS), group);
    for i in 0..members {
        let mut pod = member_object(store, name, i, needs);
        pod["spec"]["priorityClassName"] = json!(class);
        create(store, "pods", Some(NS), pod);
    }
}

fn is_bound(pod: &Value) -> bool {
    pod["spec"]["nodeName"].as_str().is_some_and(|n| !n.is_empty())
}

/// Bound members per gang (gangs with none bound included when they have pods).
fn bound_by_gang(store: &Store) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for p in store.list_all("pods", Some(NS)).unwrap() {
        let Some(group) = p["spec"]["schedulingGroup"]["podGroupName"].as_str() else {
            continue;
        };
        *out.entry(group.to_string()).or_default() += usize::from(is_bound(p.value()));
    }
    out
}

fn bound_count(store: &Store, gang: &str) -> usize {
    bound_by_gang(store).get(gang).copied().unwrap_or(0)
}

/// Each pod's node, nomination, deletion and conditions, for a failure message.
fn pod_states(store: &Store) -> String {
    let mut out = String::new();
    for p in store.list_all("pods", Some(NS)).unwrap() {
        out.push_str(&format!(
            "\n  {} node={} nominated={} deleting={} conditions={}",
            p.name(),
            p["spec"]["nodeName"],
            p["status"]["nominatedNodeName"],
            !p["metadata"]["deletionTimestamp"].is_null(),
            p["status"]["conditions"]
        ));
    }
    out
}

/// Allocated claims: name → (`driver/pool/device` of each result, `reservedFor`).
fn allocated_claims(store: &Store) -> BTreeMap<String, (Vec<String>, Vec<Value>)> {
    let mut out = BTreeMap::new();
    for c in store.list_all("resourceclaims", Some(NS)).unwrap() {
        let Some(results) = c["status"]["allocation"]["devices"]["results"].as_array() else {
            continue;
        };
        let devices = results
            .iter()
            .map(|r| {
                format!(
                    "{}/{}/{}",
                    r["driver"].as_str().unwrap_or_default(),
                    r["pool"].as_str().unwrap_or_default(),
                    r["device"].as_str().unwrap_or_default()
                )
            })
            .collect();
        let reserved = c["status"]["reservedFor"].as_array().cloned().unwrap_or_default();
        out.insert(c.name().to_string(), (devices, reserved));
    }
    out
}

/// What the invariants saw, for the report.
#[derive(Debug, Default)]
struct Figures {
    bound_by_gang: BTreeMap<String, usize>,
    allocated_claims: usize,
    allocated_devices: usize,
}

/// Checks the invariants of the module documentation; `min_counts` gives the `minCount` of every
/// gang whose PodGroup exists. (c) and "a bound pod holds its own device" hold at every moment;
/// (a) and (b) only once the cluster is `settled` (a claim is allocated before its pod is bound,
/// and a gang's members are bound one by one).
fn check_invariants(store: &Store, min_counts: &BTreeMap<&str, usize>, settled: bool) -> Figures {
    let pods: BTreeMap<String, Value> = store
        .list_all("pods", Some(NS))
        .unwrap()
        .iter()
        .map(|p| (p.name().to_string(), p.to_value()))
        .collect();
    let by_gang = bound_by_gang(store);
    let claims = allocated_claims(store);

    // (c) No device in two allocations.
    let mut seen = BTreeSet::new();
    for (claim, (devices, _)) in &claims {
        for d in devices {
            assert!(
                seen.insert(d.clone()),
                "{d} is allocated twice (again in {claim}): {claims:?}"
            );
        }
    }

    // (a) Every allocated claim is used: by a bound pod it is reserved for, or by a live PodGroup
    // with a bound member.
    for (claim, (_, reserved)) in claims.iter().filter(|_| settled) {
        let used = reserved.iter().any(|r| {
            let name = r["name"].as_str().unwrap_or_default();
            match r["resource"].as_str() {
                Some("pods") => pods
                    .get(name)
                    .is_some_and(|p| p["metadata"]["uid"] == r["uid"] && is_bound(p)),
                Some("podgroups") => {
                    store
                        .try_get("podgroups", Some(NS), name)
                        .is_some_and(|g| g.uid() == r["uid"].as_str().unwrap_or_default())
                        && by_gang.get(name).copied().unwrap_or(0) > 0
                }
                _ => false,
            }
        });
        assert!(
            used,
            "{claim} is allocated for nobody that uses it: reservedFor {reserved:?}, bound {by_gang:?}"
        );
    }
    // ... and a bound pod holds its own GPU.
    for (name, p) in &pods {
        let own_gpu = p["spec"]["resourceClaims"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|c| c["resourceClaimName"].as_str());
        if !is_bound(p) || own_gpu.is_none() {
            continue;
        }
        let claim = own_gpu.unwrap();
        let holds = claims.get(claim).is_some_and(|(devices, reserved)| {
            !devices.is_empty() && reserved.iter().any(|r| r["name"] == name.as_str())
        });
        assert!(
            holds,
            "{name} is bound without its device: {claim} is {:?}",
            claims.get(claim)
        );
    }

    // (b) Every live gang has none or at least minCount members bound.
    for (gang, min_count) in min_counts.iter().filter(|_| settled) {
        let bound = by_gang.get(*gang).copied().unwrap_or(0);
        assert!(
            bound == 0 || bound >= *min_count,
            "gang {gang} holds {bound} bound members, below its minCount {min_count}: {by_gang:?}"
        );
    }

    Figures {
        bound_by_gang: by_gang,
        allocated_claims: claims.len(),
        allocated_devices: seen.len(),
    }
}

/// Lets the scheduler settle (idle, nothing bound or allocated for a while), checking the
/// invariants all along; returns the last figures.
async fn settle(store: &Store, sched: &Scheduler, min_counts: &BTreeMap<&str, usize>) -> Figures {
    let start = Instant::now();
    let mut quiet_since = Instant::now();
    let mut last = String::new();
    loop {
        let figures = check_invariants(store, min_counts, false);
        let now = format!("{figures:?}");
        if now != last || !sched.is_idle() {
            quiet_since = Instant::now();
            last = now;
        }
        if quiet_since.elapsed() >= Duration::from_secs(2) {
            return check_invariants(store, min_counts, true);
        }
        assert!(start.elapsed() < SETTLE, "the cluster did not settle: {last}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// (d): a plain pod created now is bound, and the scheduler's task is still running.
async fn assert_still_scheduling(store: &Store, task: &tokio::task::JoinHandle<()>, name: &str) {
    assert!(!task.is_finished(), "the scheduler stopped");
    create(
        store,
        "pods",
        Some(NS),
        json!({"metadata": {"name": name, "namespace": NS},
               "spec": {"schedulerName": "unisched",
                        "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "100m"}}}]}}),
    );
    wait_until(&format!("{name} bound"), SETTLE, || {
        is_bound(store.get("pods", Some(NS), name).unwrap().value())
    })
    .await;
}

/// The `PodScheduled=False` message of a pod, if it has one.
fn unscheduled_message(store: &Store, pod: &str) -> Option<String> {
    let p = store.get("pods", Some(NS), pod).unwrap();
    p["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "PodScheduled" && c["status"] == "False")
        .and_then(|c| c["message"].as_str())
        .map(str::to_string)
}

async fn stop(sched: Arc<Scheduler>, task: tokio::task::JoinHandle<()>, server: RunningServer) {
    sched.stop();
    let _ = tokio::time::timeout(Duration::from_secs(15), task).await;
    let _ = tokio::time::timeout(Duration::from_secs(15), server.shutdown()).await;
}

/// Fault 1: three gangs of three (minCount 3) compete for room for two; every binding answer and
/// every second claim and pod-status answer is lost after commit.
async fn lost_answers_while_gangs_compete(needs: Needs, nodes: usize, gpus_per_node: usize, channels: usize) {
    let server = support::serve().await;
    let store = server.store().clone();
    seed_cluster(&store, nodes, gpus_per_node, channels);
    let (sched, task) = start_scheduler(&server, "gang-lost-answers", Duration::from_secs(10)).await;
    wait_until("nodes in cache", Duration::from_secs(20), || {
        sched.cache().node_count() == nodes
    })
    .await;
    let faults = server.faults().clone();
    faults.fail_after_commit("POST", "/binding", 500, 1, 1000);
    faults.fail_after_commit("PATCH", "/resourceclaims/", 500, 2, 1000);
    faults.fail_after_commit("PATCH", "/pods/", 503, 2, 1000);
    let gangs = ["a", "b", "c"];
    for g in gangs {
        gang(&store, g, 3, 3, needs);
    }
    let min_counts: BTreeMap<&str, usize> = gangs.iter().map(|g| (*g, 3)).collect();
    wait_until("two gangs bound", SETTLE, || {
        bound_by_gang(&store).values().filter(|&&n| n == 3).count() == 2
    })
    .await;
    let figures = settle(&store, &sched, &min_counts).await;
    let mut counts: Vec<usize> = figures.bound_by_gang.values().copied().collect();
    counts.sort_unstable();
    assert_eq!(
        counts,
        [0, 3, 3],
        "two gangs placed whole, the third not at all: {figures:?}"
    );
    let expected_claims = if needs.gpu { 6 } else { 2 };
    assert_eq!(figures.allocated_claims, expected_claims, "{figures:?}");
    assert_eq!(
        figures.allocated_devices, expected_claims,
        "one device per claim: {figures:?}"
    );
    let lost = faults.injected();
    assert!(lost >= 6, "every binding answer was lost: {lost}");
    faults.clear();
    assert_still_scheduling(&store, &task, "probe").await;
    eprintln!("gang_faults lost answers ({needs:?}): answers lost {lost}, {figures:?}");
    stop(sched, task, server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_answers_inside_gangs_with_their_own_gpus() {
    // 8 GPUs, 9 wanted: two gangs fit, the third could place two members but must place none.
    lost_answers_while_gangs_compete(
        Needs {
            gpu: true,
            group_channel: false,
        },
        2,
        4,
        0,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_answers_inside_gangs_sharing_a_group_claim() {
    // Two channels for three gangs: the third gang's channel claim stays unallocated.
    lost_answers_while_gangs_compete(
        Needs {
            gpu: false,
            group_channel: true,
        },
        2,
        0,
        2,
    )
    .await;
}

/// Fault 2: the scheduler dies while a gang's members are being bound. The API server holds the
/// bindings of two of the three members (as a busy server would), the first member's binding goes
/// through, and the scheduler is stopped with no grace (whatever its binding cycles try afterwards
/// is refused, as for a dead process). A bound member cannot be taken back, so the new scheduler
/// on the same store must complete the gang: its other members are members that arrive after the
/// group was placed, and they fit (their claims already allocated for them, the group's channel
/// allocated for the group).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_partly_bound_when_the_scheduler_dies_is_completed_by_the_next() {
    let server = support::serve().await;
    let store = server.store().clone();
    // One node, four GPUs, one channel.
    seed_cluster(&store, 1, 4, 1);
    let faults = server.faults().clone();
    let (first, first_task) = start_scheduler(&server, "first", Duration::ZERO).await;
    wait_until("node in cache", Duration::from_secs(20), || {
        first.cache().node_count() == 1
    })
    .await;
    // The held bindings are never answered while the test runs.
    for held in ["a-1", "a-2"] {
        faults.slow_down("POST", &format!("/pods/{held}/binding"), Duration::from_secs(120));
    }
    let needs = Needs {
        gpu: true,
        group_channel: true,
    };
    gang(&store, "a", 3, 3, needs);
    wait_until("a-0 bound while another member's binding is held", SETTLE, || {
        bound_count(&store, "a") == 1 && faults.peak_held() >= 1
    })
    .await;
    let held = faults.peak_held();
    let claims_at_kill = allocated_claims(&store).len();
    first.stop();
    tokio::time::timeout(Duration::from_secs(30), first_task)
        .await
        .expect("the first scheduler stops")
        .unwrap();
    faults.clear();
    assert_eq!(bound_count(&store, "a"), 1, "the held bindings were not applied");

    let (second, task) = start_scheduler(&server, "second", Duration::from_secs(10)).await;
    wait_until("the new scheduler completes gang a", SETTLE, || {
        bound_count(&store, "a") == 3
    })
    .await;
    // A gang that arrives now needs two GPUs; one is left, so it must hold nothing.
    gang(
        &store,
        "b",
        2,
        2,
        Needs {
            gpu: true,
            group_channel: false,
        },
    );
    let min_counts = BTreeMap::from([("a", 3), ("b", 2)]);
    wait_until("gang b refused with a reason", SETTLE, || {
        (0..2).all(|i| unscheduled_message(&store, &format!("b-{i}")).is_some())
    })
    .await;
    let figures = settle(&store, &second, &min_counts).await;
    assert_eq!(figures.bound_by_gang.get("b"), Some(&0), "{figures:?}");
    // Three GPUs and the channel.
    assert_eq!(figures.allocated_claims, 4, "{figures:?}");
    assert_still_scheduling(&store, &task, "probe").await;
    eprintln!(
        "gang_faults leader killed: bindings held at the kill {held}, claims allocated at the kill \
         {claims_at_kill}, b-0: {:?}, {figures:?}",
        unscheduled_message(&store, "b-0")
    );
    stop(second, task, server).await;
}

/// Fault 3: PodGroups deleted mid-cycle.
/// - `placed` (bound, its channel allocated for the group): deleting the group releases the
///   channel (the claim controller drops the reservation of a gone PodGroup).
/// - `waiting` (two of its three members created): its members wait for their quorum; once the
///   group is gone they wait for the group, say so when next checked, and hold nothing.
/// - `binding` (deleted while the server holds its members' bindings, after the group's channel
///   was allocated): the held bindings land, the scheduler keeps running, and the channel of the
///   gone group is released. A gone group has no `minCount` left to keep, so how many of its
///   members end up bound is reported, not asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_groups_deleted_mid_cycle_release_what_they_hold() {
    let server = support::serve().await;
    let store = server.store().clone();
    seed_cluster(&store, 1, 0, 3);
    let faults = server.faults().clone();
    let (sched, task) = start_scheduler(&server, "pod-group-deleted", Duration::from_secs(10)).await;
    wait_until("node in cache", Duration::from_secs(20), || {
        sched.cache().node_count() == 1
    })
    .await;
    let needs = Needs {
        gpu: false,
        group_channel: true,
    };
    let channel_of = |group: &str| -> Option<String> {
        store.try_get("podgroups", Some(NS), group)?["status"]["resourceClaimStatuses"][0]
            ["resourceClaimName"]
            .as_str()
            .map(str::to_string)
    };
    let allocated = |claim: &str| allocated_claims(&store).contains_key(claim);

    // `placed`: bound whole, then its group is deleted.
    gang(&store, "placed", 2, 2, needs);
    wait_until("placed bound", SETTLE, || bound_count(&store, "placed") == 2).await;
    let placed_channel = channel_of("placed").unwrap();
    assert!(allocated(&placed_channel));
    store
        .delete("podgroups", Some(NS), "placed", &DeleteOptions::default())
        .unwrap();
    wait_until("the gone group's channel released", SETTLE, || {
        !allocated(&placed_channel)
    })
    .await;

    // `waiting`: below its quorum, then its group is deleted.
    pod_group(&store, "waiting", 3, needs);
    for i in 0..2 {
        member(&store, "waiting", i, needs);
    }
    let quorum = "waiting for minCount pods from a gang to appear in scheduling queue";
    wait_until("waiting members report their quorum", SETTLE, || {
        (0..2).all(|i| unscheduled_message(&store, &format!("waiting-{i}")).as_deref() == Some(quorum))
    })
    .await;
    let waiting_channel = channel_of("waiting").unwrap();
    store
        .delete("podgroups", Some(NS), "waiting", &DeleteOptions::default())
        .unwrap();
    // The deletion re-checks no member: a gone group cannot make a pod schedulable (upstream's
    // GangScheduling registers no PodGroup delete either), so the members keep the reason they were
    // given while the group existed, and stay where they are.
    wait_until("the gone group's channel claim deleted", SETTLE, || {
        store
            .try_get("resourceclaims", Some(NS), &waiting_channel)
            .is_none()
    })
    .await;
    for i in 0..2 {
        assert_eq!(
            unscheduled_message(&store, &format!("waiting-{i}")).as_deref(),
            Some(quorum)
        );
    }
    // Neither does a change to the member itself (GangScheduling registers no pod update, as
    // upstream's). A new member of the group does re-check them (as a PodGroup created again
    // would): every member then says it waits for its group.
    member(&store, "waiting", 2, needs);
    let gone = "waiting for pods's pod group \"waiting\" to appear in scheduling queue";
    let start = Instant::now();
    while !(0..3).all(|i| unscheduled_message(&store, &format!("waiting-{i}")).as_deref() == Some(gone)) {
        assert!(
            start.elapsed() < SETTLE,
            "waiting members report {:?}",
            (0..3)
                .map(|i| unscheduled_message(&store, &format!("waiting-{i}")))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(bound_count(&store, "waiting"), 0);
    assert!(!allocated(&waiting_channel), "a waiting gang holds its channel");

    // `binding`: deleted while its members' bindings are held by the server.
    for i in 0..2 {
        faults.slow_down(
            "POST",
            &format!("/pods/binding-{i}/binding"),
            Duration::from_secs(2),
        );
    }
    gang(&store, "binding", 2, 2, needs);
    wait_until("binding's bindings held", SETTLE, || faults.peak_held() >= 1).await;
    let binding_channel = channel_of("binding").unwrap();
    store
        .delete("podgroups", Some(NS), "binding", &DeleteOptions::default())
        .unwrap();
    faults.clear();
    // No PodGroup is live now: (b) has nothing to check, (a) and (c) still hold.
    let figures = settle(&store, &sched, &BTreeMap::new()).await;
    assert!(
        !allocated(&binding_channel),
        "the gone group's channel is released: {figures:?}"
    );
    assert_eq!(figures.allocated_claims, 0, "{figures:?}");
    assert_still_scheduling(&store, &task, "probe").await;
    eprintln!(
        "gang_faults pod groups deleted: {figures:?}, binding-0: {:?}, binding-1: {:?}",
        unscheduled_message(&store, "binding-0"),
        unscheduled_message(&store, "binding-1")
    );
    stop(sched, task, server).await;
}

/// Each gang member's own GPU, no group channel.
const GPU: Needs = Needs {
    gpu: true,
    group_channel: false,
};

/// The cluster of the preemption faults: one node with four GPUs, PriorityClasses `low` (100) and
/// `urgent` (1000), a scheduler (`identity`, `shutdown_grace`) with the node in its cache, and a
/// gang `low` of four bound on the node, holding every GPU.
async fn low_gang_holding_every_gpu(
    server: &RunningServer,
    identity: &str,
    shutdown_grace: Duration,
) -> (Arc<Scheduler>, tokio::task::JoinHandle<()>) {
    let store = server.store();
    seed_cluster(store, 1, 4, 0);
    for (class, value) in [("low", 100), ("urgent", 1000)] {
        create(
            store,
            "priorityclasses",
            None,
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                   "metadata": {"name": class}, "value": value}),
        );
    }
    let (sched, task) = start_scheduler(server, identity, shutdown_grace).await;
    wait_until("node in cache", Duration::from_secs(20), || {
        sched.cache().node_count() == 1
    })
    .await;
    gang_of_class(store, "low", 4, 4, GPU, "low");
    wait_until("the low gang holds every GPU", SETTLE, || {
        bound_count(store, "low") == 4
    })
    .await;
    assert_eq!(allocated_claims(store).len(), 4);
    (sched, task)
}

/// Fault 4: the leader killed between evicting a gang's victims and binding the gang.
///
/// A low-priority gang (disrupted as a whole) holds the node's four GPUs; an urgent gang of two
/// needs two of them. The first scheduler preempts: every member of the low gang is evicted (one
/// member alone would leave it below its quorum), and the urgent gang is placed, its GPUs
/// allocated, but the server holds its bindings. The scheduler is killed there. The next one
/// must bind the urgent gang without allocating anything twice, and once the cluster settles
/// every allocated GPU belongs to a bound pod: none is left to an evicted victim or to an unbound
/// preemptor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_killed_between_evicting_victims_and_binding_the_preemptor_gang() {
    let server = support::serve().await;
    let store = server.store().clone();
    let faults = server.faults().clone();
    let (first, first_task) = low_gang_holding_every_gpu(&server, "first", Duration::ZERO).await;

    // The urgent gang's bindings are never answered while the first scheduler runs.
    for held in ["urgent-0", "urgent-1"] {
        faults.slow_down("POST", &format!("/pods/{held}/binding"), Duration::from_secs(120));
    }
    gang_of_class(&store, "urgent", 2, 2, GPU, "urgent");
    let victims_gone = || {
        store
            .list_all("pods", Some(NS))
            .unwrap()
            .iter()
            .all(|p| !p.name().starts_with("low-"))
    };
    wait_until_explained(
        "the victims evicted and a binding of the urgent gang held",
        SETTLE,
        || victims_gone() && faults.peak_held() >= 1,
        || {
            format!(
                " (held {}): {}\n  allocated claims: {:?}",
                faults.peak_held(),
                pod_states(&store),
                allocated_claims(&store)
            )
        },
    )
    .await;
    let held = faults.peak_held();
    let at_kill = allocated_claims(&store);
    first.stop();
    tokio::time::timeout(Duration::from_secs(30), first_task)
        .await
        .expect("the first scheduler stops")
        .unwrap();
    faults.clear();
    assert_eq!(
        bound_count(&store, "urgent"),
        0,
        "the held bindings were not applied"
    );
    check_invariants(&store, &BTreeMap::from([("urgent", 2)]), false);

    let (second, task) = start_scheduler(&server, "second", Duration::from_secs(10)).await;
    wait_until("the next leader binds the urgent gang", SETTLE, || {
        bound_count(&store, "urgent") == 2
    })
    .await;
    let min_counts = BTreeMap::from([("low", 4), ("urgent", 2)]);
    let figures = settle(&store, &second, &min_counts).await;
    assert_eq!(figures.bound_by_gang.get("urgent"), Some(&2), "{figures:?}");
    assert_eq!(
        figures.bound_by_gang.get("low"),
        None,
        "no victim came back: {figures:?}"
    );
    // The urgent gang's two GPUs, and nothing for the victims.
    assert_eq!(figures.allocated_claims, 2, "{figures:?}");
    for (claim, _) in allocated_claims(&store) {
        assert!(claim.starts_with("urgent-"), "{claim} is still allocated");
    }
    assert_still_scheduling(&store, &task, "probe").await;
    eprintln!(
        "gang_faults leader killed mid-preemption: bindings held at the kill {held}, claims allocated \
         at the kill {:?}, {figures:?}",
        at_kill.keys().collect::<Vec<_>>()
    );
    stop(second, task, server).await;
}

/// Fault 5: every victim's deletion is committed and its answer lost.
///
/// The same gangs as above: a low-priority gang (disrupted as a whole) holds the node's four GPUs,
/// and an urgent gang of two needs two of them. Each `DELETE` of a victim removes the pod but the
/// scheduler sees a 500; it retries, finds the pod gone (404), and counts the victim as evicted.
/// The urgent gang must then be bound whole, each of its GPUs allocated once, none left to a
/// victim, and the scheduler keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_answers_to_victim_deletions_still_free_the_devices_once() {
    let server = support::serve().await;
    let store = server.store().clone();
    let faults = server.faults().clone();
    let (sched, task) = low_gang_holding_every_gpu(&server, "lost-deletions", Duration::from_secs(10)).await;

    faults.fail_after_commit("DELETE", "/pods/low-", 500, 1, 1000);
    gang_of_class(&store, "urgent", 2, 2, GPU, "urgent");
    wait_until("the urgent gang bound", SETTLE, || {
        bound_count(&store, "urgent") == 2
    })
    .await;
    let lost = faults.injected();
    assert_eq!(lost, 4, "every victim's deletion lost its answer once");
    faults.clear();

    let min_counts = BTreeMap::from([("low", 4), ("urgent", 2)]);
    let figures = settle(&store, &sched, &min_counts).await;
    assert_eq!(figures.bound_by_gang.get("urgent"), Some(&2), "{figures:?}");
    assert_eq!(
        figures.bound_by_gang.get("low"),
        None,
        "every victim is gone: {figures:?}"
    );
    assert_eq!(figures.allocated_claims, 2, "{figures:?}");
    for (claim, _) in allocated_claims(&store) {
        assert!(claim.starts_with("urgent-"), "{claim} is still allocated");
    }
    assert_still_scheduling(&store, &task, "probe").await;
    eprintln!("gang_faults lost victim deletions: {lost} answers lost, {figures:?}");
    stop(sched, task, server).await;
}
