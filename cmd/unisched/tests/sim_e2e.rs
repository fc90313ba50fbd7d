//! End-to-end tests of the real binary on the embedded control plane: the JSON report contract,
//! bad scenario files, and kubectl against `unisched sim --serve`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{process::Command, time::Duration};

use common::*;
use serde_json::Value;

#[test]
fn json_report_has_the_contract_shape() {
    let dir = tempdir("json");
    let text = [
        node_yaml("node-a", "4", "8Gi"),
        node_yaml("node-b", "2", "4Gi"),
        pod_yaml("fits", "1500m"),
        pod_yaml("too-big", "8"),
    ]
    .join("---\n");
    std::fs::write(dir.join("s.yaml"), text).unwrap();
    let out = Command::new(bin())
        .args(["sim", "-o", "json", "--timeout", "30"])
        .arg(dir.join("s.yaml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let pods = v["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 2);
    for p in pods {
        for key in [
            "namespace",
            "name",
            "node",
            "phase",
            "reason",
            "message",
            "claims",
            "extendedResourceClaimStatus",
            "nodeAllocatableResourceClaimStatuses",
        ] {
            assert!(p.get(key).is_some(), "pod report lacks {key}: {p}");
        }
    }
    let fits = pods.iter().find(|p| p["name"] == "fits").unwrap();
    assert_eq!(
        fits["node"], "node-a",
        "only node-a has room for 1500m… and node-b too; LeastAllocated prefers node-a"
    );
    assert_eq!(fits["phase"], "Running");
    assert!(fits["reason"].is_null() && fits["message"].is_null());
    let big = pods.iter().find(|p| p["name"] == "too-big").unwrap();
    assert!(big["node"].is_null());
    assert_eq!(big["reason"], "Unschedulable");
    assert_eq!(
        big["message"],
        "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 Preemption is \
         not helpful for scheduling."
    );
    let nodes = v["nodes"].as_array().unwrap();
    let a = nodes.iter().find(|n| n["name"] == "node-a").unwrap();
    assert_eq!(a["allocatable"]["cpu"], "4");
    assert_eq!(a["allocatable"]["memory"], "8Gi");
    assert_eq!(a["requested"]["cpu"], "1500m");
    assert_eq!(v["summary"]["scheduled"], 1);
    assert_eq!(v["summary"]["unschedulable"], 1);
    assert!(v["summary"]["seconds"].as_f64().unwrap() > 0.0);
}

#[test]
fn same_scenario_same_report() {
    let dir = tempdir("determinism");
    let mut docs: Vec<String> = (0..6).map(|i| node_yaml(&format!("n{i}"), "4", "8Gi")).collect();
    docs.extend((0..20).map(|i| pod_yaml(&format!("p{i:02}"), "700m")));
    std::fs::write(dir.join("s.yaml"), docs.join("---\n")).unwrap();
    let placement = || {
        let out = Command::new(bin())
            .args(["sim", "-o", "json"])
            .arg(dir.join("s.yaml"))
            .output()
            .unwrap();
        assert!(out.status.success());
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["pods"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["name"].to_string(), p["node"].to_string()))
            .collect::<Vec<_>>()
    };
    let first = placement();
    assert_eq!(
        first.iter().filter(|(_, n)| n != "null").count(),
        20,
        "all fit: {first:?}"
    );
    assert_eq!(first, placement());
}

#[test]
fn bad_scenario_is_rejected_before_anything_runs() {
    let dir = tempdir("bad");
    std::fs::write(dir.join("a.yaml"), node_yaml("n", "4", "8Gi")).unwrap();
    std::fs::write(
        dir.join("b.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: 7}\n",
    )
    .unwrap();
    let out = Command::new(bin()).arg("sim").arg(&dir).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("b.yaml") && err.contains("document 0"), "{err}");
    assert!(out.stdout.is_empty(), "no report for a rejected scenario");
}

#[test]
fn json_logging_keeps_sim_progress_in_the_json_stream() {
    let dir = tempdir("json-progress");
    std::fs::write(dir.join("a.yaml"), node_yaml("n", "4", "8Gi")).unwrap();
    std::fs::write(dir.join("b.yaml"), pod_yaml("p", "1")).unwrap();
    for verbosity in ["0", "2"] {
        let out = Command::new(bin())
            .args(["--logging-format", "json", "-v", verbosity, "sim"])
            .arg(&dir)
            .args(["-o", "json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let records: Vec<serde_json::Value> = stderr
            .lines()
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("-v {verbosity}: not JSON ({e}): {l}"))
            })
            .collect();
        assert!(
            records.iter().any(|r| r["target"] == "unisched::sim"
                && r["message"].as_str().is_some_and(|m| m.contains("control plane"))),
            "-v {verbosity}: no sim progress record in {stderr}"
        );
        assert!(
            !stderr.contains("[sim]"),
            "-v {verbosity}: plain progress line in {stderr}"
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["summary"]["scheduled"], 1, "{report:#}");
    }
}

#[test]
fn kubectl_against_sim_serve() {
    let dir = tempdir("kubectl");
    std::fs::write(dir.join("nodes.yaml"), node_yaml("node-1", "4", "8Gi")).unwrap();
    let (_guard, kc) = serve(&dir, &dir.join("nodes.yaml"), &[]);
    let (ok, out, err) = kubectl(&kc, &["get", "nodes"]);
    assert!(ok && out.contains("node-1"), "get nodes: {out}{err}");
    std::fs::write(dir.join("pod.yaml"), pod_yaml("web", "500m")).unwrap();
    let pod_file = dir.join("pod.yaml");
    let (ok, out, err) = kubectl(&kc, &["create", "-f", pod_file.to_str().unwrap()]);
    assert!(ok, "create: {out}{err}");
    let running = wait_for(Duration::from_secs(30), || {
        let (ok, out, _) = kubectl(&kc, &["get", "pod", "web", "-o", "json"]);
        let v: Value = serde_json::from_str(&out).ok()?;
        (ok && v["spec"]["nodeName"] == "node-1" && v["status"]["phase"] == "Running").then_some(v)
    });
    let v = running.expect("pod scheduled to node-1 and Running");
    let scheduled = v["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    assert!(scheduled, "{v}");
    let (ok, out, _) = kubectl(&kc, &["get", "pods", "-A"]);
    assert!(ok && out.contains("web"), "{out}");
    let (ok, out, err) = kubectl(&kc, &["delete", "pod", "web"]);
    assert!(ok, "delete: {out}{err}");
}
