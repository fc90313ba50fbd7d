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
        placements(&serde_json::from_slice(&out.stdout).unwrap())
    };
    let first = placement();
    assert_eq!(
        first.iter().filter(|(_, n)| n != "null").count(),
        20,
        "all fit: {first:?}"
    );
    assert_eq!(first, placement());
}

/// A pod with a claim from a template cannot be scheduled before the claim exists and the
/// scheduler has seen it. Here 40 pods with a template claim and plain pods alternate, all with
/// equal scores on four equal nodes: if a step's pods went to the scheduler while claims were
/// still being created, the order of attempts (and so every seeded tie-break after it) would
/// follow thread timing and change from run to run.
#[test]
fn pods_with_template_claims_are_placed_the_same_every_run() {
    let dir = tempdir("template-claims-order");
    // The class and templates come with node n0's slice; n1 to n3 get slices of their own.
    let mut docs = vec![gpu_inventory("n0", 8)];
    for n in 0..4 {
        docs.push(node_yaml(&format!("n{n}"), "8", "32Gi"));
    }
    for n in 1..4 {
        let devices: String = (0..8).map(|d| format!("  - {{name: gpu-{d}}}\n")).collect();
        docs.push(format!(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: n{n}-gpus}}\nspec:\n  driver: gpu.example.com\n  nodeName: n{n}\n  pool: {{name: n{n}, generation: 1, resourceSliceCount: 1}}\n  devices:\n{devices}"
        ));
    }
    for i in 0..40 {
        let claims: &[(&str, &str)] = if i % 2 == 0 { &[("gpu", "one-gpu")] } else { &[] };
        docs.push(pod_with(&format!("p{i:02}"), "unisched", "100m", None, claims));
    }
    std::fs::write(dir.join("s.yaml"), docs.join("---\n")).unwrap();
    let placement = || {
        let (v, code) = sim_json(&[&dir.join("s.yaml")], &[]);
        assert_eq!(code, 0, "{v:#}");
        assert_eq!(v["summary"]["scheduled"], 40, "{v:#}");
        placements(&v)
    };
    let first = placement();
    for _ in 0..4 {
        assert_eq!(placement(), first);
    }
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

/// Each pod of a report with its node (as JSON text, `null` when unplaced), in report order.
fn placements(report: &Value) -> Vec<(String, String)> {
    report["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].to_string(), p["node"].to_string()))
        .collect()
}

/// A scenario object: a pod for `scheduler` with a cpu request, optional `nodeName` and claims
/// from templates (`(entry, template)`).
fn pod_with(name: &str, scheduler: &str, cpu: &str, node: Option<&str>, claims: &[(&str, &str)]) -> String {
    let mut y = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  schedulerName: {scheduler}\n"
    );
    if let Some(n) = node {
        y.push_str(&format!("  nodeName: {n}\n"));
    }
    if !claims.is_empty() {
        y.push_str("  resourceClaims:\n");
        for (entry, template) in claims {
            y.push_str(&format!(
                "  - {{name: {entry}, resourceClaimTemplateName: {template}}}\n"
            ));
        }
    }
    y.push_str(&format!(
        "  containers:\n  - name: c\n    image: registry.example/app:1\n    resources: {{requests: {{cpu: \"{cpu}\"}}"
    ));
    if !claims.is_empty() {
        let names: Vec<String> = claims.iter().map(|(e, _)| format!("{{name: {e}}}")).collect();
        y.push_str(&format!(", claims: [{}]", names.join(", ")));
    }
    y.push_str("}\n");
    y
}

/// A DeviceClass `gpu`, a ResourceSlice with `n` GPUs on `node`, and templates `one-gpu` and
/// `two-gpus`.
fn gpu_inventory(node: &str, n: usize) -> String {
    let devices: String = (0..n).map(|i| format!("  - {{name: gpu-{i}}}\n")).collect();
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {{name: gpu}}\nspec:\n  selectors:\n  - cel: {{expression: 'device.driver == \"gpu.example.com\"'}}\n---\n\
         apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: {node}-gpus}}\nspec:\n  driver: gpu.example.com\n  nodeName: {node}\n  pool: {{name: {node}, generation: 1, resourceSliceCount: 1}}\n  devices:\n{devices}---\n\
         apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {{name: one-gpu, namespace: default}}\nspec:\n  spec:\n    devices:\n      requests:\n      - {{name: gpu, exactly: {{deviceClassName: gpu}}}}\n---\n\
         apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {{name: two-gpus, namespace: default}}\nspec:\n  spec:\n    devices:\n      requests:\n      - {{name: gpu, exactly: {{deviceClassName: gpu, count: 2}}}}\n"
    )
}

fn pod<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no pod {name} in {report}"))
}

/// `(claim name, pool/device…)` of a pod in a report.
fn claim_devices(p: &Value) -> Vec<(String, Vec<String>)> {
    p["claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let devs = c["devices"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| {
                    format!(
                        "{}/{}",
                        d["pool"].as_str().unwrap(),
                        d["device"].as_str().unwrap()
                    )
                })
                .collect();
            (c["name"].as_str().unwrap().to_string(), devs)
        })
        .collect()
}

/// The source server's objects with their resourceVersions, and its list resourceVersion: any
/// write, by anyone, changes one of them.
fn source_state(kc: &std::path::Path) -> (Vec<(String, String)>, String) {
    let (ok, out, err) = kubectl(
        kc,
        &[
            "get",
            "nodes,pods,resourceclaims,resourceclaimtemplates,resourceslices,deviceclasses,namespaces,events",
            "-A",
            "-o",
            "json",
        ],
    );
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let mut objects: Vec<(String, String)> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                format!(
                    "{}/{}/{}",
                    o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]
                ),
                o["metadata"]["resourceVersion"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    objects.sort();
    let (ok, raw, err) = kubectl(kc, &["get", "--raw", "/api/v1/pods"]);
    assert!(ok, "{err}");
    let rv: Value = serde_json::from_str(&raw).unwrap();
    (
        objects,
        rv["metadata"]["resourceVersion"].as_str().unwrap().to_string(),
    )
}

#[test]
fn from_cluster_copies_a_live_cluster_decides_its_pending_pods_and_never_writes_to_it() {
    let dir = tempdir("from-cluster");
    // The "live" cluster: a second embedded control plane with its own scheduler.
    let source = [
        node_yaml("node-a", "4", "8Gi"),
        node_yaml("node-b", "8", "8Gi"),
        gpu_inventory("node-a", 2),
        // First, so that the source's scheduler sees it before it places the others.
        pod_with("bound-elsewhere", "other-scheduler", "4", Some("node-b"), &[]),
        pod_with("trainer", "unisched", "3", None, &[("gpu", "one-gpu")]),
        pod_with("big", "unisched", "6", None, &[]),
        pod_with("theirs", "other-scheduler", "1", None, &[]),
    ]
    .join("---\n");
    std::fs::create_dir_all(dir.join("source")).unwrap();
    std::fs::write(dir.join("source/s.yaml"), source).unwrap();
    let (_guard, kc, live) = serve_with_report(
        &dir.join("source"),
        &dir.join("source/s.yaml"),
        &[],
        Duration::from_secs(60),
    );
    let trainer_live = claim_devices(pod(&live, "trainer"));
    assert_eq!(pod(&live, "trainer")["node"], "node-a");
    assert_eq!(trainer_live[0].1.len(), 1, "{trainer_live:?}");
    assert!(pod(&live, "big")["node"].is_null(), "6 cpu fits nowhere there");
    let before = source_state(&kc);

    // The what-if: one more node and three new pods.
    let whatif = [
        node_yaml("node-c", "8", "8Gi"),
        pod_with("new-gpu", "unisched", "500m", None, &[("gpu", "one-gpu")]),
        pod_with("new-two", "unisched", "100m", None, &[("gpu", "two-gpus")]),
    ]
    .join("---\n");
    std::fs::write(dir.join("whatif.yaml"), whatif).unwrap();
    let out = Command::new(bin())
        .args(["sim", "-o", "json", "--timeout", "30", "--from-cluster"])
        .arg(&kc)
        .arg(dir.join("whatif.yaml"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();

    // Bound pods stay where they are, with the claim and device they had.
    assert_eq!(pod(&v, "trainer")["node"], "node-a");
    assert_eq!(
        claim_devices(pod(&v, "trainer")),
        trainer_live,
        "allocation kept, not redone"
    );
    assert_eq!(pod(&v, "bound-elsewhere")["node"], "node-b");
    let node_b = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "node-b")
        .unwrap();
    assert_eq!(
        node_b["requested"]["cpu"], "4",
        "another scheduler's bound pod occupies node-b"
    );
    // The pending pod is decided here: it fits the new node only.
    assert_eq!(pod(&v, "big")["node"], "node-c");
    // The new GPU pod gets the GPU the trainer does not hold.
    let held = &trainer_live[0].1[0];
    let other = if held == "node-a/gpu-0" {
        "node-a/gpu-1"
    } else {
        "node-a/gpu-0"
    };
    assert_eq!(pod(&v, "new-gpu")["node"], "node-a");
    assert_eq!(claim_devices(pod(&v, "new-gpu"))[0].1, vec![other.to_string()]);
    // Two GPUs are never free at once: a specific reason.
    let two = pod(&v, "new-two");
    assert!(two["node"].is_null());
    assert_eq!(two["reason"], "Unschedulable");
    assert!(
        two["message"]
            .as_str()
            .unwrap()
            .contains("cannot allocate all claims"),
        "{two}"
    );
    // The other scheduler's pending pod is not copied, but listed.
    assert!(
        v["pods"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["name"] != "theirs")
    );
    let from = &v["fromCluster"];
    assert_eq!(
        from["notOurs"],
        serde_json::json!(["default/theirs (schedulerName other-scheduler)"])
    );
    assert_eq!(from["pending"], serde_json::json!(["default/big"]));
    assert_eq!(from["copied"]["Node"], 2);
    assert_eq!(from["copied"]["ResourceClaim"], 1);
    assert_eq!(from["rejected"], serde_json::json!([]));

    // Read only: not one object of the source changed, nor its resourceVersion.
    assert_eq!(source_state(&kc), before, "the source cluster was written to");
}

#[test]
fn from_cluster_errors_are_clear() {
    let dir = tempdir("from-cluster-errors");
    // Nothing listens on port 9 of localhost.
    let kc = dir.join("kubeconfig");
    std::fs::write(
        &kc,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n\
         users: [{name: u, user: {}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .unwrap();
    let out = Command::new(bin())
        .args(["sim", "--from-cluster"])
        .arg(&kc)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the API server at http://127.0.0.1:9/") && err.contains("does not answer"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn same_scenario_and_seed_give_the_same_claim_names() {
    let dir = tempdir("claim-names");
    let mut docs = vec![node_yaml("node-a", "8", "8Gi"), gpu_inventory("node-a", 4)];
    docs.extend((0..3).map(|i| pod_with(&format!("p{i}"), "unisched", "100m", None, &[("gpu", "one-gpu")])));
    std::fs::write(dir.join("s.yaml"), docs.join("---\n")).unwrap();
    let names = |seed: &str| {
        let (v, code) = sim_json(&[&dir.join("s.yaml")], &["--seed", seed]);
        assert_eq!(code, 0);
        let names: Vec<String> = v["pods"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(claim_devices)
            .map(|(name, _)| name)
            .collect();
        names
    };
    let first = names("7");
    assert_eq!(first.len(), 3, "{first:?}");
    for (i, n) in first.iter().enumerate() {
        let prefix = format!("p{i}-gpu-");
        assert!(
            n.starts_with(&prefix) && n.len() == prefix.len() + 5,
            "{n}: <pod>-<entry>-<5 characters>"
        );
    }
    assert_eq!(first, names("7"), "same scenario, same seed: same names");
    assert_ne!(first, names("8"), "the seed decides the suffixes");
}

#[test]
fn a_missing_claim_template_is_reported_with_the_claim_controllers_event_without_waiting() {
    let dir = tempdir("missing-template");
    let docs = [
        node_yaml("node-a", "4", "8Gi"),
        pod_with("orphan", "unisched", "100m", None, &[("gpu", "nope")]),
        pod_yaml("plain", "100m"),
    ];
    std::fs::write(dir.join("s.yaml"), docs.join("---\n")).unwrap();
    // With a 20 s timeout an undecided pod would end the run with exit 3.
    let (v, code) = sim_json(&[&dir.join("s.yaml")], &["--timeout", "20"]);
    assert_eq!(code, 0, "the pod's reason is known: the step is settled");
    let p = pod(&v, "orphan");
    assert!(p["node"].is_null());
    assert_eq!(p["reason"], "FailedResourceClaimCreation");
    assert_eq!(
        p["message"],
        "PodResourceClaim gpu: resource claim template \"nope\": resourceclaimtemplate.resource.k8s.io \"nope\" not found"
    );
    assert_eq!(pod(&v, "plain")["node"], "node-a");
}

#[test]
fn pods_never_attempted_do_not_hold_the_step_open() {
    let dir = tempdir("never-attempted");
    let gated = "apiVersion: v1\nkind: Pod\nmetadata: {name: gated, namespace: default}\nspec:\n  schedulerName: unisched\n  schedulingGates: [{name: example.com/wait}]\n  containers: [{name: c, image: registry.example/app:1}]\n";
    let docs = [
        node_yaml("node-a", "4", "8Gi"),
        pod_with("theirs", "other-scheduler", "100m", None, &[]),
        gated.to_string(),
        pod_yaml("mine", "100m"),
    ];
    std::fs::write(dir.join("s.yaml"), docs.join("---\n")).unwrap();
    let (v, code) = sim_json(&[&dir.join("s.yaml")], &["--timeout", "20"]);
    assert_eq!(
        code, 0,
        "neither the gated pod nor another scheduler's holds the run until the timeout"
    );
    assert_eq!(pod(&v, "mine")["node"], "node-a");
    assert!(pod(&v, "theirs")["node"].is_null());
    assert_eq!(pod(&v, "gated")["reason"], "SchedulingGated");
}

#[test]
fn a_delete_file_written_as_a_yaml_list_is_a_clear_error() {
    let dir = tempdir("delete-list");
    std::fs::create_dir_all(dir.join("01")).unwrap();
    std::fs::create_dir_all(dir.join("02")).unwrap();
    std::fs::write(dir.join("01/s.yaml"), node_yaml("n", "4", "8Gi")).unwrap();
    std::fs::write(dir.join("02/gone.delete.yaml"), "- {kind: Node, name: n}\n").unwrap();
    let out = Command::new(bin()).arg("sim").arg(&dir).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("gone.delete.yaml (document 0)") && err.contains("not a YAML list"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "nothing ran");
}

#[test]
fn a_rejected_pod_is_retried_before_the_next_step_counts_as_settled() {
    let dir = tempdir("retry");
    std::fs::create_dir_all(dir.join("01-no-gpus")).unwrap();
    std::fs::create_dir_all(dir.join("02-gpus")).unwrap();
    let inventory = gpu_inventory("node-a", 1);
    let (slice_free, rest): (Vec<&str>, Vec<&str>) = inventory
        .split("---\n")
        .partition(|d| !d.contains("kind: ResourceSlice"));
    let mut first = vec![node_yaml("node-a", "4", "8Gi")];
    first.extend(slice_free.iter().map(|d| d.to_string()));
    first.push(pod_with("waits", "unisched", "100m", None, &[("gpu", "one-gpu")]));
    std::fs::write(dir.join("01-no-gpus/s.yaml"), first.join("---\n")).unwrap();
    std::fs::write(dir.join("02-gpus/slice.yaml"), rest.join("---\n")).unwrap();
    let (v, code) = sim_json(&[&dir], &["--timeout", "30"]);
    assert_eq!(code, 0);
    let p = pod(&v, "waits");
    assert_eq!(p["node"], "node-a", "retried once the slice arrived: {p}");
    assert_eq!(claim_devices(p)[0].1, vec!["node-a/gpu-0".to_string()]);
}

/// `kubectl drain` against `sim --serve`: the pod without a budget is evicted, the one whose
/// budget allows no disruption is refused with upstream's 429 (kubectl retries until its timeout)
/// and stays on the node.
#[test]
fn kubectl_drain_honours_pod_disruption_budgets() {
    let dir = tempdir("drain");
    let budget = "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: guarded-pdb, namespace: default}\n\
        spec:\n  minAvailable: 1\n  selector: {matchLabels: {app: guarded}}\n\
        status: {observedGeneration: 1, disruptionsAllowed: 0, currentHealthy: 1, desiredHealthy: 1, expectedPods: 1}\n";
    let labelled = |name: &str| {
        pod_yaml(name, "100m").replace(
            &format!("name: {name}, namespace: default"),
            &format!("name: {name}, namespace: default, labels: {{app: {name}}}"),
        )
    };
    let scenario = [
        node_yaml("node-1", "4", "8Gi"),
        labelled("free"),
        labelled("guarded"),
        budget.to_string(),
    ]
    .join("---\n");
    std::fs::write(dir.join("drain.yaml"), scenario).unwrap();
    let (_guard, kc) = serve(&dir, &dir.join("drain.yaml"), &[]);
    for name in ["free", "guarded"] {
        wait_for(Duration::from_secs(30), || {
            let (ok, out, _) = kubectl(&kc, &["get", "pod", name, "-o", "json"]);
            let v: Value = serde_json::from_str(&out).ok()?;
            (ok && v["status"]["phase"] == "Running").then_some(())
        })
        .unwrap_or_else(|| panic!("{name} runs on node-1"));
    }
    // The pods have no controller, hence --force.
    let (ok, out, err) = kubectl(
        &kc,
        &[
            "drain",
            "node-1",
            "--force",
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=8s",
        ],
    );
    assert!(
        !ok,
        "drain cannot finish while the budget allows nothing:\n{out}\n{err}"
    );
    assert!(out.contains("pod/free evicted"), "{out}\n{err}");
    assert!(!out.contains("pod/guarded evicted"), "{out}\n{err}");
    assert!(
        err.contains("error when evicting pods/\"guarded\" -n \"default\" (will retry after 5s): Cannot evict pod as it would violate the pod's disruption budget."),
        "{err}"
    );
    let (ok, out, _) = kubectl(&kc, &["get", "pods", "-o", "name"]);
    assert!(ok, "{out}");
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        ["pod/guarded"],
        "only the guarded pod is left"
    );
    let (ok, out, _) = kubectl(
        &kc,
        &[
            "get",
            "pdb",
            "guarded-pdb",
            "-o",
            "jsonpath={.status.disruptionsAllowed}",
        ],
    );
    assert!(ok && out == "0", "the refused evictions took nothing: {out}");
}
