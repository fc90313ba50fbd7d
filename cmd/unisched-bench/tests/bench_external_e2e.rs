//! `unisched-bench --external` as a user runs it: what it starts does not outlive a signal, and
//! the embedded column comes from the same invocation.
//!
//! The real control plane needs upstream's binaries (the upstream tier covers a real run); here a
//! stand-in `control-plane` script starts the embedded API server (`unisched sim --serve`) as a
//! daemon with pid files, exactly the contract `e2e/upstream/control-plane` keeps.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use common::{ChildGuard, bench_bin, tempdir, unisched_bin, wait_for};

const STAND_IN: &str = r#"#!/usr/bin/env bash
set -eu
dir="$2"
case "$1" in
start)
    mkdir -p "$dir"
    "$UNISCHED_BIN" sim --serve --no-scheduler --kubeconfig-out "$dir/admin.kubeconfig.tmp" \
        >"$dir/apiserver.log" 2>&1 &
    echo $! >"$dir/kube-apiserver.pid"
    echo $! >"$dir/etcd.pid"
    for _ in $(seq 600); do [[ -s "$dir/admin.kubeconfig.tmp" ]] && break; sleep 0.1; done
    sleep 0.2
    cp "$dir/admin.kubeconfig.tmp" "$dir/admin.kubeconfig"
    cp "$dir/admin.kubeconfig.tmp" "$dir/scheduler.kubeconfig"
    echo "FEATURE_GATES=" >"$dir/env"
    ;;
stop)
    echo "stop $dir" >>"$dir/../stops"
    kill -TERM "$(cat "$dir/kube-apiserver.pid")" 2>/dev/null || true
    ;;
esac
"#;

fn stand_in_control_plane(dir: &Path) -> PathBuf {
    let script = dir.join("control-plane");
    std::fs::write(&script, STAND_IN).unwrap();
    let mut perms = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).unwrap();
    script
}

/// `unisched-bench --external` of the smoke-sized `SchedulingBasic/500Nodes` for `schedulers`,
/// JSON report on stdout, control planes below `work`, no stdin; callers add the rest.
fn smoke_external(schedulers: &str, work: &Path) -> Command {
    let mut cmd = Command::new(bench_bin());
    cmd.args(["--v=0", "--external", "--smoke", "-w", "SchedulingBasic/500Nodes"])
        .args(["--schedulers", schedulers, "-o", "json", "--work-dir"])
        .arg(work)
        .stdin(Stdio::null());
    cmd
}

/// Alive and not a zombie (a killed orphan may wait to be reaped by init).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.trim_start().to_string()))
        .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
}

/// Processes whose command line contains `needle`.
fn pids_with_arg(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(needle) && running(pid) {
            out.push(pid);
        }
    }
    out
}

#[test]
fn sigterm_stops_the_scheduler_and_control_plane_it_started() {
    let dir = tempdir("bench-sigterm");
    let script = stand_in_control_plane(&dir);
    let work = dir.join("work");
    let child = smoke_external("unisched", &work)
        .arg("--control-plane")
        .arg(&script)
        .env("UNISCHED_BIN", unisched_bin())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut bench = ChildGuard(child);
    let run_dir = work.join("schedulingbasic-500nodes-unisched");
    // The scheduler's configuration is written just before it is spawned; then the harness gives
    // it three seconds to sync before creating anything.
    wait_for(Duration::from_secs(60), || {
        run_dir.join("unisched.yaml").exists().then_some(())
    })
    .expect("the scheduler under test was started");
    std::thread::sleep(Duration::from_millis(500));
    let apiserver: u32 = std::fs::read_to_string(run_dir.join("kube-apiserver.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let kubeconfig = run_dir.join("scheduler.kubeconfig").display().to_string();
    let schedulers = pids_with_arg(&kubeconfig);
    assert!(running(apiserver), "the stand-in API server runs");
    assert_eq!(
        schedulers.len(),
        1,
        "one `unisched run` under test: {schedulers:?}"
    );

    let status = Command::new("kill")
        .args(["-TERM", &bench.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit =
        wait_for(Duration::from_secs(30), || bench.0.try_wait().unwrap()).expect("bench exits after SIGTERM");
    assert_eq!(
        exit.code(),
        Some(143),
        "128 + SIGTERM, as a shell reports it: {exit}"
    );

    let stops = std::fs::read_to_string(work.join("stops")).unwrap_or_default();
    assert_eq!(
        stops.trim(),
        format!("stop {}", run_dir.display()),
        "control-plane stop ran once"
    );
    wait_for(Duration::from_secs(10), || (!running(apiserver)).then_some(()))
        .expect("the control plane's API server is gone");
    assert!(!running(schedulers[0]), "the scheduler under test is gone");
    assert!(pids_with_arg(&kubeconfig).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_embedded_column_comes_from_the_same_invocation() {
    let dir = tempdir("bench-embedded");
    let out = smoke_external("embedded", &dir.join("work"))
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    assert_eq!(run["scheduler"], "unisched-embedded");
    assert_eq!(run["workload"], "SchedulingBasic/500Nodes");
    let measured = run["measuredPods"].as_u64().unwrap();
    assert!(measured > 0);
    assert_eq!(run["scheduled"].as_u64(), Some(measured), "every smoke pod fits");
    assert!(run["schedulerCpu"]["seconds"].as_f64().unwrap() > 0.0);
    assert!(run["schedulerPeakRssBytes"].as_u64().unwrap() > 0);
    assert!(run.get("skipped").is_none());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A control-plane script that is not there (the default path is relative to the working
/// directory) ends the run at once: the reason is in the report and on stderr, and the exit
/// status says the run failed.
#[test]
fn a_missing_control_plane_script_is_reported_on_stderr_and_in_the_report() {
    let dir = tempdir("bench-missing-cp");
    let missing = dir.join("no-such-control-plane");
    let out = smoke_external("unisched", &dir.join("work"))
        .arg("--control-plane")
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let reason = format!("running {}", missing.display());
    assert!(
        stderr.contains(&reason) && stderr.contains("No such file"),
        "stderr: {stderr}"
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let skipped = report["runs"][0]["skipped"].as_str().unwrap();
    assert!(skipped.contains(&reason), "{skipped}");
    let _ = std::fs::remove_dir_all(&dir);
}
