//! Spreading and co-location end to end: each scenario under `e2e/scenarios/spread/` runs through
//! `unisched sim --output json` (embedded control plane, real runtime and watches), and the test
//! asserts the placements in the report.
//!
//! * `zone-spread`: a hard `topologySpreadConstraints` (maxSkew 1 on the zone, DoNotSchedule) puts
//!   exactly 2 of 6 replicas in each of 3 zones, although one zone's nodes are far emptier.
//! * `anti-affinity`: required `podAntiAffinity` on the hostname places one replica per node; the
//!   fourth stays Pending with upstream's message.
//! * `namespace-selector`: affinity and anti-affinity terms that name their namespaces only through
//!   `namespaceSelector`. They can only be satisfied when the runtime's namespace watch feeds
//!   InterPodAffinity the namespace labels, so this checks that wiring.
//! * `namespace-relabel`: a pod Pending on such a term is retried as soon as a namespace is
//!   relabelled (`kubectl label` against `--serve`), long before the unschedulable pool's
//!   5-minute flush would retry it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    time::Duration,
};

use common::{kubectl, serve_with_report, sim_json, tempdir, wait_for};
use serde_json::Value;

/// `e2e/scenarios/spread/<name>` in the repository.
fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../e2e/scenarios/spread")
        .join(name)
}

/// One pod of the report.
#[derive(Debug)]
struct Placement {
    node: Option<String>,
    reason: Option<String>,
    message: Option<String>,
}

/// Runs a fixture, requires that every step settled, and returns `namespace/name` → placement.
fn run(name: &str) -> BTreeMap<String, Placement> {
    let (v, code) = sim_json(&[&scenario(name)], &["--timeout", "60"]);
    assert_eq!(code, 0, "scenario {name} did not settle: {v}");
    v["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p: &Value| {
            let s = |k: &str| p[k].as_str().map(str::to_string);
            (
                format!("{}/{}", s("namespace").unwrap(), s("name").unwrap()),
                Placement {
                    node: s("node"),
                    reason: s("reason"),
                    message: s("message"),
                },
            )
        })
        .collect()
}

fn node_of<'a>(pods: &'a BTreeMap<String, Placement>, key: &str) -> Option<&'a str> {
    pods.get(key)
        .unwrap_or_else(|| panic!("no pod {key} in {pods:?}"))
        .node
        .as_deref()
}

#[test]
fn hard_zone_spread_puts_two_replicas_in_each_zone() {
    let pods = run("zone-spread");
    // The fixture's nodes: node-1,2 in zone-a, node-3,4 in zone-b, node-5,6 in zone-c.
    let zone = |node: &str| match node {
        "node-1" | "node-2" => "zone-a",
        "node-3" | "node-4" => "zone-b",
        "node-5" | "node-6" => "zone-c",
        other => panic!("unknown node {other}"),
    };
    assert_eq!(pods.len(), 6, "{pods:?}");
    let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
    for i in 0..6 {
        let key = format!("default/web-{i}");
        let node = node_of(&pods, &key).unwrap_or_else(|| panic!("{key} not scheduled: {pods:?}"));
        *per_zone.entry(zone(node)).or_default() += 1;
    }
    assert_eq!(
        per_zone,
        BTreeMap::from([("zone-a", 2), ("zone-b", 2), ("zone-c", 2)]),
        "{pods:?}"
    );
}

#[test]
fn required_anti_affinity_places_one_replica_per_node() {
    let pods = run("anti-affinity");
    assert_eq!(pods.len(), 4, "{pods:?}");
    let bound: Vec<&str> = pods.values().filter_map(|p| p.node.as_deref()).collect();
    let distinct: BTreeSet<&str> = bound.iter().copied().collect();
    assert_eq!(bound.len(), 3, "three replicas bound: {pods:?}");
    assert_eq!(
        distinct,
        BTreeSet::from(["node-1", "node-2", "node-3"]),
        "on distinct nodes: {pods:?}"
    );
    let pending: Vec<&Placement> = pods.values().filter(|p| p.node.is_none()).collect();
    assert_eq!(pending.len(), 1, "{pods:?}");
    let p = pending[0];
    assert_eq!(p.reason.as_deref(), Some("Unschedulable"), "{p:?}");
    // Upstream's FitError message. With DefaultPreemption enabled, upstream appends the
    // preemption outcome (the replicas have equal priority, so there is no victim).
    let message = p.message.as_deref().unwrap_or_default();
    let filter = "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules.";
    assert!(message.starts_with(filter), "{message:?}");
    let rest = &message[filter.len()..];
    assert!(
        rest.is_empty()
            || rest
                == " preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.",
        "{message:?}"
    );
}

#[test]
fn namespace_selector_terms_see_namespace_labels() {
    let pods = run("namespace-selector");
    assert_eq!(node_of(&pods, "team-a/db"), Some("node-2"), "{pods:?}");
    assert_eq!(node_of(&pods, "team-b/db"), Some("node-3"), "{pods:?}");
    // Affinity to app=db pods in namespaces labelled team=a: only team-a's db counts, not
    // team-b's identical pod on node-3.
    assert_eq!(node_of(&pods, "default/web"), Some("node-2"), "{pods:?}");
    // Anti-affinity to app=db pods in namespaces labelled team in (a, b): the only node without one.
    assert_eq!(node_of(&pods, "default/loner"), Some("node-1"), "{pods:?}");
}

#[test]
fn relabelling_a_namespace_retries_pods_waiting_on_its_labels() {
    let dir = tempdir("spread-relabel");
    let (_guard, kc, v) = serve_with_report(
        &dir,
        &scenario("namespace-relabel"),
        &["--timeout", "60"],
        Duration::from_secs(90),
    );
    let pod = |name: &str| {
        v["pods"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("pod {name} not in report: {v}"))
            .clone()
    };
    assert_eq!(pod("db")["node"], "node-2", "{v}");
    let web = pod("web");
    assert!(web["node"].is_null(), "{v}");
    let message = web["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("0/2 nodes are available: 2 node(s) didn't match pod affinity rules."),
        "{message:?}"
    );

    let (ok, _, err) = kubectl(&kc, &["label", "namespace", "platform", "team=a", "--overwrite"]);
    assert!(ok, "kubectl label: {err}");
    // Well under the pool's 30 s flush tick and 5 min timeout: only the namespace watch's
    // requeue can place the pod this fast.
    let node = wait_for(Duration::from_secs(15), || {
        let (ok, out, _) = kubectl(&kc, &["get", "pod", "web", "-n", "default", "-o", "json"]);
        if !ok {
            return None;
        }
        let p: Value = serde_json::from_str(&out).ok()?;
        p["spec"]["nodeName"].as_str().map(str::to_string)
    });
    assert_eq!(
        node.as_deref(),
        Some("node-2"),
        "web was not retried after the relabel"
    );
}
