//! Graceful shutdown of `unisched run`: SIGTERM of the leader stops it taking pods,
//! lets in-flight bindings finish, releases the lease (empty `holderIdentity`) and exits 0, so the
//! standby leads at its next retry — long before the lease would expire — and no pod is lost or
//! bound twice. Also the ways a leader stops leading without being asked: the lease taken from it,
//! and a pause (SIGSTOP) longer than the lease, after which it must not write again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    io::{Read, Write},
    net::TcpStream,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use common::*;
use serde_json::Value;

fn metric(port: u16, name: &str) -> Option<f64> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(
        body.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}

fn lease(kc: &Path) -> Value {
    let (ok, out, err) = kubectl(kc, &["get", "lease", "unisched", "-n", "default", "-o", "json"]);
    assert!(ok, "{err}");
    serde_json::from_str(&out).unwrap()
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

/// `Scheduled` events per pod name.
fn scheduled_events(kc: &Path) -> std::collections::BTreeMap<String, usize> {
    let (ok, out, _) = kubectl(kc, &["get", "events.events.k8s.io", "-A", "-o", "json"]);
    let mut counts = std::collections::BTreeMap::new();
    if !ok {
        return counts;
    }
    let v: Value = serde_json::from_str(&out).unwrap_or_default();
    for e in v["items"].as_array().into_iter().flatten() {
        if e["reason"] == "Scheduled"
            && let Some(name) = e["regarding"]["name"].as_str()
        {
            *counts.entry(name.to_string()).or_insert(0) += 1;
        }
    }
    counts
}

#[test]
fn sigterm_releases_the_lease_and_the_standby_leads_within_two_seconds() {
    let dir = tempdir("shutdown");
    let nodes: Vec<String> = (0..4)
        .map(|i| node_yaml(&format!("node-{i}"), "16", "32Gi"))
        .collect();
    std::fs::write(dir.join("nodes.yaml"), nodes.join("---\n")).unwrap();
    let (_cp, kc) = serve(&dir, &dir.join("nodes.yaml"), &["--no-scheduler"]);
    // A long lease: without the release the standby would wait 20 s.
    let cfg = dir.join("config.yaml");
    std::fs::write(
        &cfg,
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nleaderElection:\n  leaderElect: true\n  leaseDuration: 20s\n  renewDeadline: 15s\n  retryPeriod: 200ms\n  resourceNamespace: default\n",
    )
    .unwrap();
    let ports = [free_port(), free_port()];
    let mut replicas: Vec<ChildGuard> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| {
            ChildGuard(
                Command::new(bin())
                    .args(["run", "--config"])
                    .arg(&cfg)
                    .arg("--kubeconfig")
                    .arg(&kc)
                    .args([
                        "--metrics-bind-address",
                        &format!("127.0.0.1:{p}"),
                        "--secure-port",
                        "0",
                    ])
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(dir.join(format!("replica-{i}.log"))).unwrap())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
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
    let holder = lease(&kc)["spec"]["holderIdentity"].as_str().unwrap().to_string();
    assert!(!holder.is_empty());

    // 40 pods; SIGTERM the leader while it is binding them.
    let n = 40;
    let docs: Vec<String> = (0..n).map(|i| pod_yaml(&format!("p-{i:02}"), "100m")).collect();
    std::fs::write(dir.join("pods.yaml"), docs.join("---\n")).unwrap();
    let (ok, out, err) = kubectl(&kc, &["create", "-f", dir.join("pods.yaml").to_str().unwrap()]);
    assert!(ok, "{out}{err}");
    wait_for(Duration::from_secs(30), || {
        (pods(&kc).iter().any(|p| p["spec"]["nodeName"].is_string())).then_some(())
    })
    .expect("the leader started binding");
    let pid = replicas[leader].0.id().to_string();
    let sent = Instant::now();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );

    // The standby leads within 2 s of the SIGTERM (the lease duration is 20 s).
    let took_over = wait_for(Duration::from_secs(10), || {
        (metric(ports[standby], "unisched_leader") == Some(1.0)).then(|| sent.elapsed())
    })
    .expect("the standby leads");
    assert!(
        took_over <= Duration::from_secs(2),
        "standby led {took_over:?} after SIGTERM; the lease was not released"
    );
    // The old leader exited 0 after releasing the lease.
    let status = wait_for(Duration::from_secs(20), || replicas[leader].0.try_wait().unwrap())
        .expect("the leader exits after SIGTERM");
    let log = std::fs::read_to_string(dir.join(format!("replica-{leader}.log"))).unwrap_or_default();
    assert_eq!(status.code(), Some(0), "exit status {status}; log:\n{log}");
    assert!(log.contains("released the leader lease"), "log:\n{log}");
    assert!(!log.contains("panicked"), "no panic during shutdown; log:\n{log}");
    let after = lease(&kc);
    let new_holder = after["spec"]["holderIdentity"].as_str().unwrap_or_default();
    assert!(
        !new_holder.is_empty() && new_holder != holder,
        "new holder {new_holder:?}"
    );

    // No pod lost: the standby binds the rest. None bound twice: one Scheduled event each.
    wait_for(Duration::from_secs(60), || {
        let p = pods(&kc);
        (p.len() == n
            && p.iter()
                .all(|p| p["spec"]["nodeName"].as_str().is_some_and(|s| !s.is_empty())))
        .then_some(())
    })
    .expect("every pod bound");
    let counts = wait_for(Duration::from_secs(15), || {
        let c = scheduled_events(&kc);
        (c.len() == n).then_some(c)
    })
    .unwrap_or_else(|| panic!("a Scheduled event for every pod: {:?}", scheduled_events(&kc)));
    for (pod, c) in counts {
        assert_eq!(c, 1, "{pod} scheduled {c} times");
    }
}

#[test]
fn losing_the_lease_mid_binding_exits_1_without_a_panic() {
    let dir = tempdir("leaselost");
    let nodes: Vec<String> = (0..2)
        .map(|i| node_yaml(&format!("node-{i}"), "64", "64Gi"))
        .collect();
    std::fs::write(dir.join("nodes.yaml"), nodes.join("---\n")).unwrap();
    let (_cp, kc) = serve(&dir, &dir.join("nodes.yaml"), &["--no-scheduler"]);
    let cfg = dir.join("config.yaml");
    std::fs::write(
        &cfg,
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nleaderElection:\n  leaderElect: true\n  leaseDuration: 10s\n  renewDeadline: 8s\n  retryPeriod: 200ms\n  resourceNamespace: default\n",
    )
    .unwrap();
    let port = free_port();
    let mut replica = ChildGuard(
        Command::new(bin())
            .args(["run", "--config"])
            .arg(&cfg)
            .arg("--kubeconfig")
            .arg(&kc)
            .args([
                "--metrics-bind-address",
                &format!("127.0.0.1:{port}"),
                "--secure-port",
                "0",
            ])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("replica.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    wait_for(Duration::from_secs(30), || {
        (metric(port, "unisched_leader") == Some(1.0)).then_some(())
    })
    .expect("leads");
    let docs: Vec<String> = (0..150).map(|i| pod_yaml(&format!("q-{i:03}"), "10m")).collect();
    std::fs::write(dir.join("pods.yaml"), docs.join("---\n")).unwrap();
    let (ok, out, err) = kubectl(&kc, &["create", "-f", dir.join("pods.yaml").to_str().unwrap()]);
    assert!(ok, "{out}{err}");
    wait_for(Duration::from_secs(30), || {
        (pods(&kc).iter().any(|p| p["spec"]["nodeName"].is_string())).then_some(())
    })
    .expect("binding started");
    // Another replica takes the lease while bindings are in flight.
    let (ok, out, err) = kubectl(
        &kc,
        &[
            "patch",
            "lease",
            "unisched",
            "-n",
            "default",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"holderIdentity":"someone-else"}}"#,
        ],
    );
    assert!(ok, "{out}{err}");
    let status = wait_for(Duration::from_secs(20), || replica.0.try_wait().unwrap())
        .expect("exits after losing the lease");
    let log = std::fs::read_to_string(dir.join("replica.log")).unwrap_or_default();
    assert_eq!(status.code(), Some(1), "log:\n{log}");
    assert!(log.contains("leaderelection lost"), "log:\n{log}");
    assert!(
        !log.contains("panicked") && !log.contains("being shutdown"),
        "no panic during shutdown; log:\n{log}"
    );
}

/// Runs kubectl and requires success.
fn kubectl_ok(kc: &Path, args: &[&str]) -> String {
    let (ok, out, err) = kubectl(kc, args);
    assert!(ok, "kubectl {args:?}: {out}{err}");
    out
}

fn items(kc: &Path, kind: &str) -> Vec<Value> {
    let (ok, out, _) = kubectl(kc, &["get", kind, "-A", "-o", "json"]);
    if !ok {
        return Vec::new();
    }
    serde_json::from_str::<Value>(&out)
        .ok()
        .and_then(|v| v["items"].as_array().cloned())
        .unwrap_or_default()
}

fn bound_count(kc: &Path) -> usize {
    pods(kc)
        .iter()
        .filter(|p| p["spec"]["nodeName"].as_str().is_some_and(|s| !s.is_empty()))
        .count()
}

/// DRA invariants from the API server's view: every bound pod's claim is allocated on the pod's
/// node and reserved for it; no device is in two allocations.
fn check_devices_of_bound_pods(kc: &Path) {
    let claims: std::collections::BTreeMap<String, Value> = items(kc, "resourceclaims")
        .into_iter()
        .map(|c| (c["metadata"]["name"].as_str().unwrap().to_string(), c))
        .collect();
    let mut devices = std::collections::BTreeSet::new();
    for c in claims.values() {
        for r in c["status"]["allocation"]["devices"]["results"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let device = format!(
                "{}/{}",
                r["pool"].as_str().unwrap(),
                r["device"].as_str().unwrap()
            );
            assert!(devices.insert(device.clone()), "{device} is in two allocations");
        }
    }
    for p in pods(kc) {
        let Some(node) = p["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) else {
            continue;
        };
        let name = p["metadata"]["name"].as_str().unwrap();
        let claim_name = p["spec"]["resourceClaims"][0]["resourceClaimName"]
            .as_str()
            .unwrap();
        let claim = &claims[claim_name];
        let results = claim["status"]["allocation"]["devices"]["results"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            results.len(),
            1,
            "{name} is bound to {node} but {claim_name} is {claim}"
        );
        assert_eq!(
            results[0]["pool"], node,
            "{claim_name}'s device is on the pod's node"
        );
        assert!(
            claim["status"]["reservedFor"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|r| r["name"] == name),
            "{name} is bound but not in {claim_name}'s reservedFor: {claim}"
        );
    }
}

#[test]
fn a_leader_paused_past_its_lease_writes_nothing_after_it_resumes() {
    const PODS: usize = 24;
    let dir = tempdir("paused");
    let nodes: Vec<String> = (0..4)
        .map(|i| node_yaml(&format!("node-{i}"), "16", "32Gi"))
        .collect();
    std::fs::write(dir.join("nodes.yaml"), nodes.join("---\n")).unwrap();
    let (_cp, kc) = serve(&dir, &dir.join("nodes.yaml"), &["--no-scheduler"]);
    // One GPU per pod, 8 per node; each pod has a claim of its own.
    let mut dra = vec![
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu.example.com}\nspec:\n  selectors: [{cel: {expression: \"device.driver == 'gpu.example.com'\"}}]\n".to_string(),
    ];
    for n in 0..4 {
        let devices: Vec<String> = (0..8).map(|d| format!("{{name: gpu-{d}}}")).collect();
        dra.push(format!(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: node-{n}-gpu}}\nspec:\n  driver: gpu.example.com\n  nodeName: node-{n}\n  pool: {{name: node-{n}, generation: 1, resourceSliceCount: 1}}\n  devices: [{}]\n",
            devices.join(", ")
        ));
    }
    std::fs::write(dir.join("dra.yaml"), dra.join("---\n")).unwrap();
    kubectl_ok(&kc, &["create", "-f", dir.join("dra.yaml").to_str().unwrap()]);
    // Short lease timings; a low QPS keeps the leader busy binding when it is paused.
    let cfg = dir.join("config.yaml");
    std::fs::write(
        &cfg,
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection:\n  qps: 8\n  burst: 2\nleaderElection:\n  leaderElect: true\n  leaseDuration: 3s\n  renewDeadline: 2s\n  retryPeriod: 250ms\n  resourceNamespace: default\n",
    )
    .unwrap();
    let ports = [free_port(), free_port()];
    // Each replica talks to the API server through a proxy of its own that records its requests.
    let upstream = server_address(&kc);
    let proxies = [RecordingProxy::start(&upstream), RecordingProxy::start(&upstream)];
    let mut replicas: Vec<ChildGuard> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| {
            ChildGuard(
                Command::new(bin())
                    .args(["run", "--config"])
                    .arg(&cfg)
                    .arg("--kubeconfig")
                    .arg(proxies[i].kubeconfig(&dir))
                    .args([
                        "--metrics-bind-address",
                        &format!("127.0.0.1:{p}"),
                        "--secure-port",
                        "0",
                    ])
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(dir.join(format!("replica-{i}.log"))).unwrap())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
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
    let old_identity = lease(&kc)["spec"]["holderIdentity"].as_str().unwrap().to_string();

    let mut docs = Vec::new();
    for i in 0..PODS {
        docs.push(format!(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: claim-{i:02}, namespace: default}}\nspec:\n  devices:\n    requests: [{{name: gpu, exactly: {{deviceClassName: gpu.example.com}}}}]\n"
        ));
        docs.push(format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p-{i:02}, namespace: default}}\nspec:\n  schedulerName: unisched\n  resourceClaims: [{{name: gpu, resourceClaimName: claim-{i:02}}}]\n  containers: [{{name: c, image: registry.example/app:1, resources: {{requests: {{cpu: 100m}}, claims: [{{name: gpu}}]}}}}]\n"
        ));
    }
    std::fs::write(dir.join("pods.yaml"), docs.join("---\n")).unwrap();
    kubectl_ok(&kc, &["create", "-f", dir.join("pods.yaml").to_str().unwrap()]);
    wait_for(Duration::from_secs(60), || (bound_count(&kc) >= 2).then_some(()))
        .expect("the leader started binding");

    // Pause the leader mid-binding, for longer than the lease: the standby takes over.
    let pid = replicas[leader].0.id().to_string();
    let signal = |sig: &str| {
        assert!(Command::new("kill").args([sig, &pid]).status().unwrap().success());
    };
    signal("-STOP");
    let stopped = Instant::now();
    wait_for(Duration::from_secs(60), || {
        (metric(ports[standby], "unisched_leader") == Some(1.0)).then_some(())
    })
    .expect("the standby leads while the leader is paused");
    // The standby binds too, so the old leader's stale view would now conflict.
    let before = bound_count(&kc);
    wait_for(Duration::from_secs(60), || {
        let now = bound_count(&kc);
        (now > before || now == PODS).then_some(())
    })
    .expect("the standby binds");
    // Paused for at least twice the lease duration (a wait, not an assertion on time).
    std::thread::sleep(Duration::from_secs(6).saturating_sub(stopped.elapsed()));
    let resumed = k8s_openapi::jiff::Timestamp::now();
    let resumed_at = Instant::now();
    signal("-CONT");

    // The old leader notices it lost the lease and exits 1, cleanly.
    let status = wait_for(Duration::from_secs(30), || replicas[leader].0.try_wait().unwrap())
        .expect("the resumed leader exits");
    let log = std::fs::read_to_string(dir.join(format!("replica-{leader}.log"))).unwrap_or_default();
    assert_eq!(status.code(), Some(1), "exit status {status}; log:\n{log}");
    assert!(log.contains("leaderelection lost"), "log:\n{log}");
    assert!(
        !log.contains("panicked") && !log.contains("being shutdown"),
        "no panic after resuming; log:\n{log}"
    );

    // The standby finishes; from the API server's view nothing was bound twice or lost its device.
    wait_for(Duration::from_secs(120), || {
        (bound_count(&kc) == PODS).then_some(())
    })
    .unwrap_or_else(|| panic!("every pod bound: {} of {PODS}", bound_count(&kc)));
    check_devices_of_bound_pods(&kc);
    // At most one Scheduled event per pod: none bound twice. (A Scheduled event the old leader
    // had queued but not written when it was paused is lost: it may not write after resuming.)
    for (pod, c) in scheduled_events(&kc) {
        assert_eq!(c, 1, "{pod} scheduled {c} times");
    }
    // From the API server's side: the old leader sent writes before its pause, none after it.
    let writes = |after: Option<Instant>| -> Vec<String> {
        proxies[leader]
            .requests()
            .into_iter()
            .filter(|r| r.method != "GET" && after.is_none_or(|t| r.at >= t))
            .map(|r| format!("{} {}", r.method, r.path))
            .collect()
    };
    assert!(
        writes(None).iter().any(|w| w.ends_with("/binding")),
        "the proxy saw the leader's bindings before the pause: {:?}",
        writes(None)
    );
    let late = writes(Some(resumed_at));
    assert!(late.is_empty(), "the old leader wrote after SIGCONT: {late:?}");
    // Nor did any event of the old leader get written (created or series-bumped) after it resumed.
    let old_events: Vec<Value> = items(&kc, "events.events.k8s.io")
        .into_iter()
        .filter(|e| e["reportingInstance"] == old_identity.as_str())
        .collect();
    assert!(
        !old_events.is_empty(),
        "the old leader's events carry its identity"
    );
    let late_events: Vec<String> = old_events
        .iter()
        .filter(|e| {
            [&e["eventTime"], &e["series"]["lastObservedTime"]]
                .iter()
                .filter_map(|t| t.as_str()?.parse::<k8s_openapi::jiff::Timestamp>().ok())
                .any(|t| t >= resumed)
        })
        .map(|e| format!("{} {} {}", e["reason"], e["regarding"]["name"], e["eventTime"]))
        .collect();
    assert!(
        late_events.is_empty(),
        "the old leader wrote events after SIGCONT: {late_events:?}"
    );
    // The lease stays with the new leader.
    let holder = lease(&kc)["spec"]["holderIdentity"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        !holder.is_empty() && holder != old_identity,
        "lease holder {holder:?}"
    );
    assert_eq!(metric(ports[standby], "unisched_leader"), Some(1.0));
}
