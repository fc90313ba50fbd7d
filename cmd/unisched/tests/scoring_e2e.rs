//! Unified scoring end to end: each scenario under `e2e/scenarios/scoring/` runs through
//! `unisched sim --output json` with unified scoring and with spec-only scoring; the two choose
//! different nodes, and the unified choice is the right one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{collections::BTreeMap, path::PathBuf, process::Command};

use common::bin;
use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Pod name → (node, reason) after running `scenario` with `config`.
fn placements(scenario: &str, config: &str) -> BTreeMap<String, (Option<String>, Option<String>)> {
    let root = repo();
    let out = Command::new(bin())
        .args(["sim", "-o", "json", "--timeout", "60", "--scheduler-config"])
        .arg(root.join(config))
        .arg(root.join("e2e/scenarios/scoring").join(scenario))
        .output()
        .unwrap();
    assert!(
        out.status.success() || out.status.code() == Some(1),
        "sim failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let s = |k: &str| p[k].as_str().map(str::to_string);
            (s("name").unwrap(), (s("node"), s("reason")))
        })
        .collect()
}

fn node_of(p: &BTreeMap<String, (Option<String>, Option<String>)>, pod: &str) -> Option<String> {
    p.get(pod)
        .unwrap_or_else(|| panic!("no pod {pod} in {p:?}"))
        .0
        .clone()
}

const UNIFIED: &str = "config/unified-scoring.yaml";
const SPEC_ONLY: &str = "config/spec-only-scoring.yaml";

#[test]
fn least_allocated_avoids_the_node_committed_through_cpu_claims() {
    let unified = placements("cpu-claims", UNIFIED);
    let spec = placements("cpu-claims", SPEC_ONLY);
    assert_eq!(node_of(&unified, "pinned").as_deref(), Some("node-a"));
    assert_eq!(node_of(&unified, "busy").as_deref(), Some("node-b"));
    // Spec-only sees a 100m pod: node-a (2 of 8 CPUs used) looks emptier than node-b (12 of 32).
    assert_eq!(node_of(&spec, "incoming").as_deref(), Some("node-a"), "{spec:?}");
    // Unified sees 4.1 CPUs: node-a would be 76 % full, node-b 50 %.
    assert_eq!(
        node_of(&unified, "incoming").as_deref(),
        Some("node-b"),
        "{unified:?}"
    );
}

#[test]
fn most_allocated_packs_the_second_exclusive_cpu_pod_next_to_the_first() {
    let unified = placements(
        "cpu-claims",
        "e2e/scenarios/scoring/configs/most-allocated-unified.yaml",
    );
    let spec = placements(
        "cpu-claims",
        "e2e/scenarios/scoring/configs/most-allocated-spec-only.yaml",
    );
    assert_eq!(node_of(&spec, "incoming").as_deref(), Some("node-b"), "{spec:?}");
    assert_eq!(
        node_of(&unified, "incoming").as_deref(),
        Some("node-a"),
        "{unified:?}"
    );
    assert_eq!(node_of(&unified, "pinned"), node_of(&unified, "incoming"));
}

#[test]
fn device_packing_keeps_a_whole_gpu_free() {
    let packed = placements("gpu-packing", "config/device-packing.yaml");
    let spec = placements("gpu-packing", SPEC_ONLY);
    assert_eq!(node_of(&packed, "first").as_deref(), Some("gpu-a"));
    // Spec-only spreads the second half-GPU pod; no whole GPU is left.
    assert_eq!(node_of(&spec, "second").as_deref(), Some("gpu-b"), "{spec:?}");
    assert_eq!(node_of(&spec, "whole"), None, "{spec:?}");
    assert_eq!(spec["whole"].1.as_deref(), Some("Unschedulable"));
    // Device packing puts it next to the first and the full-GPU pod gets gpu-b.
    assert_eq!(node_of(&packed, "second").as_deref(), Some("gpu-a"), "{packed:?}");
    assert_eq!(node_of(&packed, "whole").as_deref(), Some("gpu-b"), "{packed:?}");
}

/// `--explain` shows why: the unified choice for `incoming` comes with the nodes it beat and
/// NodeResourcesFit's share of the total; without the flag the JSON has no `explanations`.
#[test]
fn explain_shows_the_top_nodes_with_per_plugin_scores() {
    let root = repo();
    let run = |extra: &[&str]| -> Value {
        let out = Command::new(bin())
            .args(["sim", "-o", "json", "--timeout", "60", "--scheduler-config"])
            .arg(root.join(UNIFIED))
            .args(extra)
            .arg(root.join("e2e/scenarios/scoring/cpu-claims"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "sim failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let plain = run(&[]);
    assert!(plain.get("explanations").is_none(), "{plain}");

    let v = run(&["--explain"]);
    let all = v["explanations"].as_array().expect("explanations");
    let e = all
        .iter()
        .find(|e| e["pod"] == "demo/incoming")
        .unwrap_or_else(|| panic!("no explanation for incoming: {all:?}"));
    assert_eq!(e["node"], "node-b");
    let top = e["top"].as_array().unwrap();
    assert_eq!(top.len(), 2, "two feasible nodes: {e}");
    assert_eq!(top[0]["node"], "node-b", "the chosen node ranks first: {e}");
    assert_eq!(top[1]["node"], "node-a");
    assert!(
        top[0]["total"].as_i64().unwrap() > top[1]["total"].as_i64().unwrap(),
        "{e}"
    );
    for n in top {
        let scores = n["scores"].as_object().unwrap();
        let sum: i64 = scores.values().map(|s| s.as_i64().unwrap()).sum();
        assert_eq!(
            sum,
            n["total"].as_i64().unwrap(),
            "total is the sum of plugin scores: {n}"
        );
        assert!(scores.contains_key("NodeResourcesFit"), "{n}");
    }
    // The unified footprint makes node-a's LeastAllocated score lower than node-b's.
    assert!(
        top[0]["scores"]["NodeResourcesFit"].as_i64().unwrap()
            > top[1]["scores"]["NodeResourcesFit"].as_i64().unwrap(),
        "{e}"
    );
    assert_eq!(e["feasibleNodes"], 2);
}
