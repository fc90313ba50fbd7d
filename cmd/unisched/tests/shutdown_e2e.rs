//! Graceful shutdown of `unisched run` (issue 16.1): SIGTERM of the leader stops it taking pods,
//! lets in-flight bindings finish, releases the lease (empty `holderIdentity`) and exits 0, so the
//! standby leads at its next retry — long before the lease would expire — and no pod is lost or
//! bound twice.
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
                    .args(["--metrics-bind-address", &format!("127.0.0.1:{p}")])
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
            .args(["--metrics-bind-address", &format!("127.0.0.1:{port}")])
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
