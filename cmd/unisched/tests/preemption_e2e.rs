//! End-to-end preemption tests of the real binary on the embedded control plane: a high-priority
//! pod that fits nowhere evicts the fewest, least important pods (DefaultPreemption), is retried
//! when they are gone, and ends bound where it preempted. Fixtures: `e2e/scenarios/preemption/`,
//! each with a first step that fills the cluster and a second that adds the preemptor.
//!
//! * `minimal-victims`: two of four low-priority pods go; the mid-priority node is untouched.
//! * `claim-cpu`: the CPU the preemptor needs is held through a KEP-5517 claim by a victim; only
//!   that victim goes, and its claim is released.
//! * `claim-device`: the GPU the preemptor needs is allocated to the victim's claim; the dry run
//!   counts it free because the victim is the claim's only consumer, and after the eviction the
//!   preemptor gets that device.
//! * `pdb`: a PodDisruptionBudget with no disruptions left steers preemption to the other node.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use common::*;
use serde_json::Value;

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../e2e/scenarios/preemption")
        .join(name)
}

/// Runs only the first step of a fixture (copied to `dir`) and requires that it settled.
fn first_step(dir: &Path, name: &str) -> Value {
    let partial = dir.join("partial");
    let to = partial.join("01-low");
    std::fs::create_dir_all(&to).unwrap();
    for e in std::fs::read_dir(scenario(name).join("01-low")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
    let (v, code) = sim_json(&[&partial], &["--timeout", "60"]);
    assert_eq!(code, 0, "{v}");
    v
}

fn pods(v: &Value) -> Vec<(String, Option<String>, String)> {
    let mut out: Vec<_> = v["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["node"].as_str().map(str::to_string),
                p["phase"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

fn running(name: &str, node: &str) -> (String, Option<String>, String) {
    (name.to_string(), Some(node.to_string()), "Running".to_string())
}

fn kubectl_json(kc: &Path, args: &[&str]) -> Value {
    let (ok, out, err) = kubectl(kc, args);
    assert!(ok, "kubectl {args:?}: {err}");
    serde_json::from_str(&out).unwrap()
}

/// `(reason, regarding name, note)` of every event.
fn events(kc: &Path) -> Vec<(String, String, String)> {
    let v = kubectl_json(kc, &["get", "events.events.k8s.io", "-A", "-o", "json"]);
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or_default().to_string(),
                e["regarding"]["name"].as_str().unwrap_or_default().to_string(),
                e["note"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[test]
fn minimal_victims_on_the_cheapest_node() {
    let dir = tempdir("preempt-minimal");
    let v = first_step(&dir, "minimal-victims");
    assert_eq!(
        pods(&v),
        vec![
            running("low-1", "n1"),
            running("low-2", "n1"),
            running("low-3", "n1"),
            running("low-4", "n1"),
            running("mid-1", "n2"),
            running("mid-2", "n2"),
        ]
    );

    let (_guard, kc, v) = serve_with_report(
        &dir,
        &scenario("minimal-victims"),
        &["--timeout", "60"],
        Duration::from_secs(120),
    );
    let got = pods(&v);
    assert!(got.contains(&running("urgent", "n1")), "{v}");
    assert!(got.contains(&running("mid-1", "n2")) && got.contains(&running("mid-2", "n2")));
    let lows: Vec<&(String, Option<String>, String)> =
        got.iter().filter(|p| p.0.starts_with("low-")).collect();
    assert_eq!(
        lows.len(),
        2,
        "exactly two low-priority pods are evicted: {got:?}"
    );
    assert!(
        lows.iter()
            .all(|p| p.1.as_deref() == Some("n1") && p.2 == "Running")
    );
    let n1 = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "n1")
        .unwrap();
    assert_eq!(n1["requested"]["cpu"], "4");

    // The victims are gone from the API, each with a Preempted event naming the preemptor.
    let api_pods = kubectl_json(&kc, &["get", "pods", "-n", "default", "-o", "json"]);
    let urgent_uid = api_pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["metadata"]["name"] == "urgent")
        .map(|p| p["metadata"]["uid"].as_str().unwrap().to_string())
        .unwrap();
    assert_eq!(api_pods["items"].as_array().unwrap().len(), 5);
    let ev = events(&kc);
    let preempted: Vec<&(String, String, String)> = ev.iter().filter(|e| e.0 == "Preempted").collect();
    assert_eq!(preempted.len(), 2, "{ev:?}");
    for e in preempted {
        assert!(e.1.starts_with("low-"), "{e:?}");
        assert!(
            !got.iter().any(|p| p.0 == e.1),
            "{e:?} names a victim that still exists"
        );
        assert_eq!(e.2, format!("Preempted by pod {urgent_uid} on node n1"));
    }
    // The first attempt failed and nominated n1; the retry bound the pod there.
    assert!(
        ev.iter().any(|e| e.0 == "FailedScheduling" && e.1 == "urgent"),
        "{ev:?}"
    );
    assert!(
        ev.iter()
            .any(|e| e.0 == "Scheduled" && e.1 == "urgent" && e.2.ends_with("to n1")),
        "{ev:?}"
    );
}

#[test]
fn claim_cpu_victim_frees_node_allocatable() {
    let dir = tempdir("preempt-claim");
    let v = first_step(&dir, "claim-cpu");
    assert_eq!(pods(&v), vec![running("claimer", "n1"), running("small", "n1")]);
    let n1 = &v["nodes"][0];
    assert_eq!(
        n1["requested"]["cpu"], "4",
        "3 cpus through the claim + 1 in spec: {v}"
    );

    let (_guard, kc, v) = serve_with_report(
        &dir,
        &scenario("claim-cpu"),
        &["--timeout", "60"],
        Duration::from_secs(120),
    );
    assert_eq!(
        pods(&v),
        vec![running("small", "n1"), running("urgent", "n1")],
        "{v}"
    );
    assert_eq!(v["nodes"][0]["requested"]["cpu"], "4");
    // The victim's claim no longer holds the device for it.
    let claims = kubectl_json(&kc, &["get", "resourceclaims", "-A", "-o", "json"]);
    for c in claims["items"].as_array().unwrap() {
        let name = c["metadata"]["name"].as_str().unwrap();
        assert!(
            !name.starts_with("claimer-") || c["status"]["allocation"].is_null(),
            "leaked allocation: {c}"
        );
        assert!(
            c["status"]["reservedFor"].as_array().is_none_or(Vec::is_empty),
            "still reserved: {c}"
        );
    }
}

#[test]
fn pdb_steers_preemption_to_the_other_node() {
    let dir = tempdir("preempt-pdb");
    let v = first_step(&dir, "pdb");
    assert_eq!(pods(&v), vec![running("free", "n2"), running("guarded", "n1")]);
    let (v, code) = sim_json(&[&scenario("pdb")], &["--timeout", "60"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        pods(&v),
        vec![running("guarded", "n1"), running("urgent", "n2")],
        "the budget protects 'guarded' although it has the lower priority"
    );
}

#[test]
fn victim_device_goes_to_the_preemptor() {
    let dir = tempdir("preempt-device");
    let v = first_step(&dir, "claim-device");
    assert_eq!(pods(&v), vec![running("gpu-user", "n1")]);
    let (v, code) = sim_json(&[&scenario("claim-device")], &["--timeout", "60"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(pods(&v), vec![running("urgent", "n1")], "{v}");
    let urgent = &v["pods"][0];
    let devices: Vec<(&str, &str)> = urgent["claims"][0]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["pool"].as_str().unwrap(), d["device"].as_str().unwrap()))
        .collect();
    assert_eq!(devices, [("n1-gpu", "gpu-0")]);
    assert_eq!(v["nodes"][0]["requested"]["cpu"], "1");
}
