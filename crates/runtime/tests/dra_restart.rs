//! DRA pods must not stay Pending after a restart although a node has room.
//!
//! A first scheduler places part of a tightly packed DRA workload (consumable-capacity shares,
//! partitions of a device with shared counters, one claim shared by two pods) and stops; a second
//! one starts against the same API server, its informers delivering the claims the first one
//! allocated, plus one claim the first one allocated and reserved for a pod it never bound (a crash
//! between PreBind and Bind). Claim-status answers are lost after commit half of the time, which
//! makes the watch echo a claim while its allocation is still recorded as in flight (the window of
//! the double count). Every pod fits, exactly: the second scheduler must bind all of them, moved by
//! cluster events and backoff, never by the unschedulable-pods flush, without a device in two
//! allocations or a device over its capacity or counters.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::{incoming_by_event, wait_until};

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use unisched_sim::{Patch, Store};

/// Shares of 2Gi on one 8Gi device per node.
const SHARES_PER_NODE: usize = 4;
/// Partitions of 4Gi out of an 8Gi counter set per node.
const PARTITIONS_PER_NODE: usize = 2;
const NODES: usize = 2;
/// `podMaxBackoffSeconds` (default 10 s) plus slack for two schedulers' start-up. Stays below the
/// 30 s period of the unschedulable-pods flush, so a pod bound in time was not bound by it.
const BOUND_WITHIN: Duration = Duration::from_secs(10 + 15);

fn create(store: &Store, resource: &str, ns: Option<&str>, obj: Value) {
    store.create(resource, ns, obj).unwrap();
}

fn seed_cluster(store: &Store) {
    for (class, driver) in [("mem", "mem.example.com"), ("gpu", "gpu.example.com")] {
        create(
            store,
            "deviceclasses",
            None,
            json!({"metadata": {"name": class},
                   "spec": {"selectors": [{"cel": {"expression": format!("device.driver == '{driver}'")}}]}}),
        );
    }
    for n in 0..NODES {
        let node = format!("n{n}");
        create(
            store,
            "nodes",
            None,
            json!({"metadata": {"name": node},
                   "status": {"capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}),
        );
        create(
            store,
            "resourceslices",
            None,
            json!({"metadata": {"name": format!("{node}-mem")},
                   "spec": {"driver": "mem.example.com", "nodeName": node,
                            "pool": {"name": format!("{node}-mem"), "generation": 1, "resourceSliceCount": 1},
                            "devices": [{"name": "shared", "allowMultipleAllocations": true,
                                         "capacity": {"mem.example.com/memory": {"value": "8Gi"}}}]}}),
        );
        create(
            store,
            "resourceslices",
            None,
            json!({"metadata": {"name": format!("{node}-gpu-counters")},
                   "spec": {"driver": "gpu.example.com", "nodeName": node,
                            "pool": {"name": format!("{node}-gpu"), "generation": 1, "resourceSliceCount": 2},
                            "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "8Gi"}}}]}}),
        );
        let parts: Vec<Value> = (0..4)
            .map(|p| {
                json!({"name": format!("part-{p}"),
                       "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": "4Gi"}}}]})
            })
            .collect();
        create(
            store,
            "resourceslices",
            None,
            json!({"metadata": {"name": format!("{node}-gpu-devices")},
                   "spec": {"driver": "gpu.example.com", "nodeName": node,
                            "pool": {"name": format!("{node}-gpu"), "generation": 1, "resourceSliceCount": 2},
                            "devices": parts}}),
        );
    }
}

fn claim(store: &Store, name: &str, class: &str) {
    let mut request = json!({"name": "r", "exactly": {"deviceClassName": class}});
    if class == "mem" {
        request["exactly"]["capacity"] = json!({"requests": {"mem.example.com/memory": "2Gi"}});
    }
    create(
        store,
        "resourceclaims",
        Some("default"),
        json!({"metadata": {"name": name, "namespace": "default"},
               "spec": {"devices": {"requests": [request]}}}),
    );
}

fn pod(store: &Store, name: &str, claim: &str) {
    create(
        store,
        "pods",
        Some("default"),
        json!({"metadata": {"name": name, "namespace": "default"},
               "spec": {"schedulerName": "unisched",
                        "resourceClaims": [{"name": "dev", "resourceClaimName": claim}],
                        "containers": [{"name": "c", "image": "x",
                                        "resources": {"requests": {"cpu": "100m"}, "claims": [{"name": "dev"}]}}]}}),
    );
}

/// Pod name → the claim it uses.
fn workload(phase: u8) -> Vec<(String, String, &'static str)> {
    // 7 private shares + 1 shared claim = 8 shares = 2 nodes x 4; 4 partitions = 2 nodes x 2.
    // Both users of the shared claim come in phase 2, so the second one is tried while the
    // first one's allocation of it is in flight.
    let (mem, gpu) = if phase == 1 { (0..4, 0..2) } else { (4..7, 2..4) };
    let mut w: Vec<_> = mem
        .map(|i| (format!("m{i}"), format!("mem-{i}"), "mem"))
        .chain(gpu.map(|i| (format!("g{i}"), format!("gpu-{i}"), "gpu")))
        .collect();
    if phase == 2 {
        w.insert(0, ("s0".to_string(), "shared".to_string(), "mem"));
        w.insert(1, ("s1".to_string(), "shared".to_string(), "mem"));
    }
    w
}

fn bound(store: &Store) -> BTreeMap<String, String> {
    store
        .list_all("pods", Some("default"))
        .unwrap()
        .iter()
        .filter_map(|p| {
            let node = p["spec"]["nodeName"].as_str().filter(|n| !n.is_empty())?;
            Some((p.name().to_string(), node.to_string()))
        })
        .collect()
}

/// The allocated results of every claim: (claim, pool, device, share id).
fn results(store: &Store) -> Vec<(String, String, String, Option<String>)> {
    let mut out = Vec::new();
    for c in store.list_all("resourceclaims", None).unwrap() {
        for r in c["status"]["allocation"]["devices"]["results"]
            .as_array()
            .into_iter()
            .flatten()
        {
            out.push((
                c.name().to_string(),
                r["pool"].as_str().unwrap_or_default().to_string(),
                r["device"].as_str().unwrap_or_default().to_string(),
                r["shareID"].as_str().map(str::to_string),
            ));
        }
    }
    out
}

/// No device in two allocations, no device over its capacity or counters, every bound pod holding
/// its claim. Returns (double allocations, overcommitted devices) for the report.
fn check_invariants(store: &Store) -> (usize, usize) {
    let results = results(store);
    let mut exclusive = BTreeSet::new();
    let mut doubles = 0;
    let mut shares: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut partitions: BTreeMap<String, usize> = BTreeMap::new();
    for (claim, pool, device, share) in &results {
        match share {
            None => {
                if !exclusive.insert(format!("{pool}/{device}")) {
                    doubles += 1;
                }
                *partitions.entry(pool.clone()).or_default() += 1;
            }
            Some(id) => {
                if !shares
                    .entry(format!("{pool}/{device}"))
                    .or_default()
                    .insert(id.clone())
                {
                    doubles += 1;
                }
                assert!(claim.starts_with("mem-") || claim == "shared", "{claim}");
            }
        }
    }
    let over = shares.values().filter(|s| s.len() > SHARES_PER_NODE).count()
        + partitions.values().filter(|&&n| n > PARTITIONS_PER_NODE).count();
    assert_eq!(doubles, 0, "a device or share is in two allocations: {results:?}");
    assert_eq!(over, 0, "a device is over its capacity or counters: {results:?}");
    for (pod, _) in bound(store) {
        let claim = match pod.as_str() {
            "s0" | "s1" => "shared".to_string(),
            p if p.starts_with('m') => format!("mem-{}", &p[1..]),
            p => format!("gpu-{}", &p[1..]),
        };
        let c = store.get("resourceclaims", Some("default"), &claim).unwrap();
        assert!(
            c["status"]["allocation"].is_object(),
            "{pod} is bound but {claim} is not allocated"
        );
        let reserved = c["status"]["reservedFor"].as_array().cloned().unwrap_or_default();
        assert!(
            reserved.iter().any(|r| r["name"] == pod.as_str()),
            "{pod} is bound but not in {claim}'s reservedFor: {reserved:?}"
        );
    }
    (doubles, over)
}

/// `scheduler_queue_incoming_pods_total` by event label.
/// What the previous leader left when it died between PreBind and Bind: `claim` allocated on a
/// node with a free share and reserved for `pod`, which stays unbound.
fn leave_half_bound(store: &Store, claim: &str, pod: &str) -> String {
    let used = |node: &str| {
        results(store)
            .iter()
            .filter(|(_, pool, _, share)| *pool == format!("{node}-mem") && share.is_some())
            .count()
    };
    let node = (0..NODES)
        .map(|n| format!("n{n}"))
        .find(|n| used(n) < SHARES_PER_NODE)
        .expect("a node with a free share");
    let uid = store.get("pods", Some("default"), pod).unwrap().uid().to_string();
    let status = json!({"status": {
        "allocation": {
            "devices": {"results": [{
                "request": "r", "driver": "mem.example.com", "pool": format!("{node}-mem"),
                "device": "shared", "shareID": "8f2c1a6e-0000-4000-8000-00000000c0de",
                "consumedCapacity": {"mem.example.com/memory": "2Gi"}}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
        "reservedFor": [{"resource": "pods", "name": pod, "uid": uid}]}});
    store
        .patch_status("resourceclaims", Some("default"), claim, &Patch::Merge(status))
        .unwrap();
    node
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dra_pods_that_fit_are_bound_after_a_restart_without_the_flush() {
    let server = support::serve().await;
    let store = server.store().clone();
    let faults = server.faults().clone();
    seed_cluster(&store);
    claim(&store, "shared", "mem");

    // The first scheduler places phase 1 and stops. It binds as `unisched run` does, on
    // connections of its own (whose claim answers are the ones lost); the second through the
    // shared client.
    let (first, task) = support::start_scheduler_with(&server, "first", 11, true).await;
    faults.fail_after_commit("PATCH", "/resourceclaims/", 500, 2, 1000);
    let phase1 = workload(1);
    for (p, c, class) in &phase1 {
        if c != "shared" {
            claim(&store, c, class);
        }
        pod(&store, p, c);
    }
    wait_until("phase 1 bound", BOUND_WITHIN, || {
        bound(&store).len() == phase1.len()
    })
    .await;
    check_invariants(&store);
    let first_events = incoming_by_event(&first);
    first.stop();
    let _ = tokio::time::timeout(Duration::from_secs(15), task).await;

    // While no scheduler runs: phase 2 arrives, and one claim is left half-bound.
    let phase2 = workload(2);
    for (p, c, class) in &phase2 {
        if c != "shared" {
            claim(&store, c, class);
        }
        pod(&store, p, c);
    }
    let half_node = leave_half_bound(&store, "mem-6", "m6");

    // The second scheduler starts; its informers list everything the first one allocated.
    let (second, task) = support::start_scheduler(&server, "second", 11).await;
    let total = phase1.len() + phase2.len();
    let start = Instant::now();
    while bound(&store).len() < total {
        check_invariants(&store);
        assert!(
            start.elapsed() < BOUND_WITHIN,
            "pods that fit are still pending after {BOUND_WITHIN:?}: bound {:?}, events {:?}",
            bound(&store),
            incoming_by_event(&second)
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let (doubles, over) = check_invariants(&store);
    let placed = bound(&store);
    assert_eq!(
        placed["m6"], half_node,
        "the half-bound pod goes where its claim is allocated"
    );
    assert_eq!(
        placed["s0"], placed["s1"],
        "both users of the shared claim share its node"
    );
    let second_events = incoming_by_event(&second);
    for events in [&first_events, &second_events] {
        assert_eq!(
            events.get("UnschedulableTimeout").copied().unwrap_or(0),
            0,
            "no pod was moved by the unschedulable-pods flush: {events:?}"
        );
    }
    assert!(
        faults.injected() >= 2,
        "lost claim answers were injected: {}",
        faults.injected()
    );
    eprintln!(
        "dra_restart: pods {total}, faults injected {}, double allocations {doubles}, overcommitted devices {over}, \
         first scheduler's queue moves {first_events:?}, second's {second_events:?}",
        faults.injected()
    );
    second.stop();
    let _ = tokio::time::timeout(Duration::from_secs(15), task).await;
    server.shutdown().await;
}
