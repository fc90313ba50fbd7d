//! The real-control-plane tier of `unisched-bench`: `--external` against upstream etcd,
//! kube-apiserver 1.37.2 and kube-controller-manager (`e2e/upstream/control-plane`), with
//! upstream kube-scheduler and `unisched run` (the `unisched` binary next to this one).
//!
//! Built only with the `upstream-tier` feature (`e2e/upstream/tier` runs it after building the
//! binaries); a missing binary fails the test, it never skips it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use common::bench_bin;
use serde_json::Value;

/// The repository root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `unisched-bench --external`: a smoke-sized DRA workload decided by upstream
/// kube-scheduler and then by `unisched run`, each on its own fresh control plane. Self-contained:
/// the command starts and stops its control planes itself.
#[test]
fn bench_external_runs_both_schedulers_on_fresh_control_planes_and_reports_both() {
    let work = std::env::temp_dir().join(format!("unisched-bench-external-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let out = Command::new(bench_bin())
        .current_dir(repo())
        .args(["--v=0", "--external", "--smoke", "-o", "json"])
        .args(["-w", "SchedulingWithResourceClaimTemplate/5000pods_500nodes"])
        .arg("--work-dir")
        .arg(&work)
        .stdin(Stdio::null())
        .output()
        .expect("running unisched-bench --external");
    assert!(
        out.status.success(),
        "bench --external failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    let runs = report["runs"].as_array().expect("runs");
    let schedulers: Vec<&str> = runs.iter().map(|r| r["scheduler"].as_str().unwrap()).collect();
    assert_eq!(schedulers, ["kube-scheduler", "unisched"]);
    for r in runs {
        let who = &r["scheduler"];
        assert!(r.get("skipped").is_none(), "{who}: {r}");
        // The smoke size: 10 measured pods, every one bound, none left pending.
        assert_eq!(r["measuredPods"], 10, "{who}: {r}");
        assert_eq!(r["scheduled"], 10, "{who}: {r}");
        assert_eq!(r["pending"], 0, "{who}: {r}");
        assert!(r["schedulerCpu"]["seconds"].as_f64().unwrap() > 0.0, "{who}: {r}");
        assert!(r["schedulerCpuMsPerPod"].as_f64().unwrap() > 0.0, "{who}: {r}");
        assert!(r["schedulerPeakRssBytes"].as_u64().unwrap() > 0, "{who}: {r}");
        assert!(r["apiserverCpu"]["seconds"].as_f64().unwrap() > 0.0, "{who}: {r}");
        assert!(!r["bound"].as_str().unwrap().is_empty(), "{who}: {r}");
    }
    // Both control planes were stopped: no kube-apiserver of this run is left.
    for r in ["kube-scheduler", "unisched"] {
        let dir = work.join(format!(
            "schedulingwithresourceclaimtemplate-5000pods-500nodes-{r}"
        ));
        assert!(dir.join("admin.kubeconfig").exists(), "{}", dir.display());
        assert!(
            !dir.join("kube-apiserver.pid").exists(),
            "{} still running",
            dir.display()
        );
    }
    let _ = std::fs::remove_dir_all(&work);
}
