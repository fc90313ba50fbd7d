//! `unisched run` against the embedded control plane: startup validation and leader election.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    io::{Read, Write},
    net::TcpStream,
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use common::*;
use serde_json::Value;

#[test]
fn invalid_config_is_rejected_at_startup_naming_the_field() {
    let dir = tempdir("badconfig");
    let cases = [
        ("parallelism: 0\n", "parallelism: Invalid value: 0"),
        ("parallelizm: 4\n", "parallelizm"),
        (
            "profiles:\n- schedulerName: a\n  plugins: {filter: {enabled: [{name: NoSuchPlugin}]}}\n",
            "NoSuchPlugin",
        ),
        (
            "leaderElection: {leaseDuration: 1s, renewDeadline: 2s}\n",
            "LeaseDuration must be greater than RenewDeadline",
        ),
        (
            "profiles:\n- schedulerName: \"\"\n",
            "profiles[0].schedulerName: Required value",
        ),
        (
            "leaderElection: {leaseDuration: 15s, renewDeadline: 2s, retryPeriod: 5s}\n",
            "renewDeadline must be greater than retryPeriod*JitterFactor",
        ),
    ];
    // Written as is (no apiVersion/kind header): an empty file and one with only a comment.
    let raw = [
        ("", "the configuration is empty"),
        ("# nothing\n", "the configuration is empty"),
    ];
    let header = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";
    let files = cases
        .iter()
        .map(|(yaml, want)| (format!("{header}{yaml}"), *want))
        .chain(raw.iter().map(|(text, want)| (text.to_string(), *want)));
    for (i, (text, want)) in files.enumerate() {
        let cfg = dir.join(format!("c{i}.yaml"));
        std::fs::write(&cfg, text).unwrap();
        // A kubeconfig pointing nowhere: validation must fail before any connection is tried,
        // except for the plugin check, which needs the profile to be built (no API calls either).
        let kc = dir.join("kc");
        std::fs::write(&kc, unisched_kubeconfig("http://127.0.0.1:9")).unwrap();
        let out = Command::new(bin())
            .args([
                "run",
                "--metrics-bind-address",
                "127.0.0.1:0",
                "--secure-port",
                "0",
                "--config",
            ])
            .arg(&cfg)
            .arg("--kubeconfig")
            .arg(&kc)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success(), "case {i} must fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "case {i}: want {want:?} in {err}");
    }
}

fn unisched_kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"{server}\"}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\nusers:\n- name: u\n  user: {{}}\n"
    )
}

fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    Some(buf)
}

fn metric(port: u16, prefix: &str) -> Option<f64> {
    let body = http_get(port, "/metrics")?;
    let sum: f64 = body
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    Some(sum)
}

fn start_replica(kc: &Path, cfg: &Path, port: u16) -> ChildGuard {
    ChildGuard(
        Command::new(bin())
            .args(["run", "--config"])
            .arg(cfg)
            .arg("--kubeconfig")
            .arg(kc)
            .args([
                "--metrics-bind-address",
                &format!("127.0.0.1:{port}"),
                "--secure-port",
                "0",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

fn create_pods(kc: &Path, dir: &Path, prefix: &str, n: usize) {
    let docs: Vec<String> = (0..n)
        .map(|i| pod_yaml(&format!("{prefix}-{i:02}"), "100m"))
        .collect();
    let f = dir.join(format!("{prefix}.yaml"));
    std::fs::write(&f, docs.join("---\n")).unwrap();
    let (ok, out, err) = kubectl(kc, &["create", "-f", f.to_str().unwrap()]);
    assert!(ok, "{out}{err}");
}

fn pods(kc: &Path) -> Vec<Value> {
    let (ok, out, _) = kubectl(kc, &["get", "pods", "-A", "-o", "json"]);
    if !ok {
        return Vec::new();
    }
    serde_json::from_str::<Value>(&out)
        .ok()
        .and_then(|v| v["items"].as_array().cloned())
        .unwrap_or_default()
}

fn all_bound(kc: &Path, n: usize) -> bool {
    let p = pods(kc);
    p.len() == n
        && p.iter()
            .all(|p| p["spec"]["nodeName"].as_str().is_some_and(|s| !s.is_empty()))
}

#[test]
fn leader_election_failover_binds_every_pod_once() {
    let dir = tempdir("leader");
    let nodes: Vec<String> = (0..4)
        .map(|i| node_yaml(&format!("node-{i}"), "16", "32Gi"))
        .collect();
    std::fs::write(dir.join("nodes.yaml"), nodes.join("---\n")).unwrap();
    let (_cp, kc) = serve(&dir, &dir.join("nodes.yaml"), &["--no-scheduler"]);
    let cfg = dir.join("config.yaml");
    std::fs::write(
        &cfg,
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nleaderElection:\n  leaderElect: true\n  leaseDuration: 3s\n  renewDeadline: 2s\n  retryPeriod: 250ms\n  resourceNamespace: default\n",
    )
    .unwrap();
    let ports = [free_port(), free_port()];
    let mut replicas: Vec<Option<ChildGuard>> =
        ports.iter().map(|p| Some(start_replica(&kc, &cfg, *p))).collect();
    // Exactly one of them leads.
    let leader = wait_for(Duration::from_secs(30), || {
        let flags: Vec<i64> = ports
            .iter()
            .map(|p| metric(*p, "unisched_leader").map(|v| v as i64))
            .collect::<Option<_>>()?;
        match flags.as_slice() {
            [1, 0] => Some(0),
            [0, 1] => Some(1),
            _ => None,
        }
    })
    .expect("exactly one leader");
    let standby = 1 - leader;
    create_pods(&kc, &dir, "first", 15);
    assert!(
        wait_for(Duration::from_secs(30), || all_bound(&kc, 15).then_some(())).is_some(),
        "first pods bound"
    );
    // Only the leader wrote.
    assert_eq!(
        metric(ports[standby], "unisched_api_writes_total"),
        Some(0.0),
        "the standby must not write"
    );
    assert!(metric(ports[leader], "unisched_api_writes_total").unwrap() >= 15.0);
    let (ok, lease, _) = kubectl(&kc, &["get", "lease", "unisched", "-n", "default", "-o", "json"]);
    assert!(ok, "lease exists");
    let holder_before: Value = serde_json::from_str(&lease).unwrap();
    // Kill the leader mid-run; the standby takes over within the lease duration.
    drop(replicas[leader].take());
    create_pods(&kc, &dir, "second", 15);
    assert!(
        wait_for(Duration::from_secs(30), || all_bound(&kc, 30).then_some(())).is_some(),
        "second pods bound"
    );
    check_once(&kc, 30);
    check_new_holder(&kc, &holder_before);
    assert_eq!(metric(ports[standby], "unisched_leader"), Some(1.0));
}

fn check_new_holder(kc: &Path, before: &Value) {
    let (_, lease, _) = kubectl(kc, &["get", "lease", "unisched", "-n", "default", "-o", "json"]);
    let after: Value = serde_json::from_str(&lease).unwrap();
    assert_ne!(
        after["spec"]["holderIdentity"], before["spec"]["holderIdentity"],
        "the standby took the lease"
    );
    assert!(after["spec"]["leaseTransitions"].as_i64().unwrap() >= 1);
}

/// Every pod has exactly one `Scheduled` event: no pod was bound twice.
fn check_once(kc: &Path, n: usize) {
    let counts = wait_for(Duration::from_secs(15), || {
        let (ok, out, _) = kubectl(kc, &["get", "events.events.k8s.io", "-A", "-o", "json"]);
        if !ok {
            return None;
        }
        let v: Value = serde_json::from_str(&out).ok()?;
        let mut counts = std::collections::BTreeMap::new();
        for e in v["items"].as_array()? {
            if e["reason"] == "Scheduled" {
                *counts
                    .entry(e["regarding"]["name"].as_str()?.to_string())
                    .or_insert(0) += 1;
            }
        }
        (counts.len() == n).then_some(counts)
    })
    .expect("a Scheduled event for every pod");
    for (pod, c) in counts {
        assert_eq!(c, 1, "{pod} scheduled {c} times");
    }
}

/// `--feature-gates`: upstream's errors before anything starts; the effective gates in
/// `/configz` and `kubernetes_feature_enabled`.
#[test]
fn feature_gates_are_checked_at_startup_and_reported() {
    let dir = tempdir("gates");
    let kc = dir.join("kc");
    std::fs::write(&kc, unisched_kubeconfig("http://127.0.0.1:9")).unwrap();
    let cases = [
        (
            "NoSuchGate=true",
            "invalid argument \"NoSuchGate=true\" for \"--feature-gates\" flag: unrecognized feature gate: NoSuchGate",
        ),
        (
            "DynamicResourceAllocation=false",
            "cannot set feature gate DynamicResourceAllocation to false, feature is locked to true",
        ),
        (
            "PodLevelResources=maybe",
            "invalid value of PodLevelResources=maybe",
        ),
        (
            "InterPodAffinityHostnameFastPath=true",
            "feature gate InterPodAffinityHostnameFastPath=true is not supported by unisched, which always runs \
             InterPodAffinityHostnameFastPath=false",
        ),
    ];
    for (flag, want) in cases {
        let out = Command::new(bin())
            .args([
                "run",
                "--secure-port",
                "0",
                "--feature-gates",
                flag,
                "--kubeconfig",
            ])
            .arg(&kc)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{flag}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{flag}: want {want:?} in {err}");
    }

    std::fs::write(dir.join("nodes.yaml"), node_yaml("node-0", "4", "8Gi")).unwrap();
    let (_cp, kc) = serve(&dir, &dir.join("nodes.yaml"), &["--no-scheduler"]);
    let port = free_port();
    let _replica = ChildGuard(
        Command::new(bin())
            .args([
                "run",
                "--leader-elect=false",
                "--secure-port",
                "0",
                "--kubeconfig",
            ])
            .arg(&kc)
            .args([
                "--metrics-bind-address",
                &format!("127.0.0.1:{port}"),
                "--feature-gates",
                "PodLevelResources=true,APIResponseCompression=false",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let metrics = wait_for(Duration::from_secs(30), || {
        http_get(port, "/metrics").filter(|b| b.contains("kubernetes_feature_enabled"))
    })
    .expect("metrics served");
    for line in [
        r#"kubernetes_feature_enabled{name="APIResponseCompression",stage="BETA"} 0"#,
        r#"kubernetes_feature_enabled{name="PodLevelResources",stage="BETA"} 1"#,
        r#"kubernetes_feature_enabled{name="GenericWorkload",stage="BETA"} 1"#,
        r#"kubernetes_feature_enabled{name="CompositePodGroup",stage="ALPHA"} 0"#,
        r#"kubernetes_feature_enabled{name="DynamicResourceAllocation",stage=""} 1"#,
        r#"kubernetes_feature_enabled{name="DRANodeAllocatableResources",stage="ALPHA"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} in /metrics");
    }
    let configz = http_get(port, "/configz").unwrap();
    let body = &configz[configz.find("\r\n\r\n").unwrap() + 4..];
    let v: Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["featureGates"]["APIResponseCompression"], false);
    assert_eq!(v["featureGates"]["DRANodeAllocatableResources"], true);
    assert_eq!(v["componentconfig"]["kind"], "KubeSchedulerConfiguration");
}
