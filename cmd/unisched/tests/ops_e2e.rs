//! Operability of the real binary against an API server that does not answer: logs (JSON shape,
//! no colour on a pipe, klog verbosity, rate-limited repeats), `/configz` (the effective
//! configuration) and the REST client metrics of the failing requests.
//!
//! Nothing listens on the API address (a port bound and closed again), so every watch, list and
//! lease call fails at once: the worst case for repeated log lines.
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

/// How long each run is observed.
const OBSERVE: Duration = Duration::from_secs(4);

fn kubeconfig(dir: &Path) -> std::path::PathBuf {
    let server = format!("http://127.0.0.1:{}", free_port());
    let kc = dir.join("kubeconfig");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"{server}\"}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\nusers:\n- name: u\n  user: {{}}\n"
        ),
    )
    .unwrap();
    kc
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
    let (head, body) = buf.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

struct Run {
    stderr: String,
    configz: Option<Value>,
    metrics: String,
}

/// Runs `unisched run` with `args` for [`OBSERVE`], reading /configz and /metrics meanwhile.
fn run(tag: &str, config: &str, args: &[&str]) -> Run {
    let dir = tempdir(tag);
    let kc = kubeconfig(&dir);
    let cfg = dir.join("config.yaml");
    std::fs::write(&cfg, config).unwrap();
    let port = free_port();
    let err_path = dir.join("stderr");
    let child = Command::new(bin())
        .args(args)
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
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let guard = ChildGuard(child);
    let configz = wait_for(Duration::from_secs(20), || http_get(port, "/configz"))
        .map(|b| serde_json::from_str(&b).unwrap_or_else(|e| panic!("configz not JSON ({e}): {b}")));
    std::thread::sleep(OBSERVE);
    let metrics = http_get(port, "/metrics").unwrap_or_default();
    drop(guard);
    Run {
        stderr: std::fs::read_to_string(&err_path).unwrap(),
        configz,
        metrics,
    }
}

const CONFIG: &str = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
leaderElection: {leaderElect: true, resourceNamespace: unisched-system}\n\
profiles:\n- schedulerName: unisched\n  plugins: {score: {disabled: [{name: ImageLocality}]}}\n";

#[test]
fn json_logs_are_one_object_per_line_without_colour_and_rate_limited() {
    let r = run("logs-json", CONFIG, &["--logging-format", "json", "-v", "2"]);
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert!(!lines.is_empty(), "some warnings expected with no API server");
    for l in &lines {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("not one JSON object ({e}): {l}"));
        assert_eq!(
            l.matches("\"message\":").count(),
            1,
            "exactly one message key: {l}"
        );
        assert!(
            v["message"].is_string() && v["level"].is_string() && v["ts"].is_string(),
            "{l}"
        );
        assert!(!l.contains('\u{1b}'), "ANSI escape in {l}");
    }
    let warnings = lines.iter().filter(|l| l.contains("\"level\":\"warn\"")).count();
    assert!(warnings >= 1, "the failing watches are reported: {}", r.stderr);
    // Unlimited, every watcher's retries (each watch backs off from ~0.8 s) and every
    // leader-election round (every 2 s) would repeat their lines several times in this run.
    // Repeats of the same record are written once per 10 s and the run is shorter than that, so
    // each distinct record appears once.
    let mut seen = std::collections::BTreeMap::new();
    for l in &lines {
        let mut v: Value = serde_json::from_str(l).unwrap();
        v.as_object_mut().unwrap().remove("ts");
        *seen.entry(v.to_string()).or_insert(0) += 1;
    }
    let repeated: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(repeated.is_empty(), "repeated records: {repeated:#?}");
    assert!(
        lines.len() <= 40,
        "{} lines in {OBSERVE:?}:\n{}",
        lines.len(),
        r.stderr
    );
}

#[test]
fn text_logs_have_no_colour_on_a_pipe_and_v0_has_no_info_chatter() {
    let r = run("logs-v0", CONFIG, &["-v", "0"]);
    assert!(
        !r.stderr.contains('\u{1b}'),
        "ANSI escapes on a pipe:\n{}",
        r.stderr
    );
    let info: Vec<&str> = r.stderr.lines().filter(|l| l.contains(" INFO ")).collect();
    for l in &info {
        assert!(
            l.contains("unisched::run") || l.contains("unisched_runtime::leader"),
            "-v 0 prints only klog-v0 INFO lines (startup, lease): {l}"
        );
    }
    assert!(
        info.iter().any(|l| l.contains("serving /metrics")),
        "the serving line stays at -v 0:\n{}",
        r.stderr
    );
    let r2 = run("logs-v2", CONFIG, &["-v", "2"]);
    assert!(!r2.stderr.contains('\u{1b}'));
    assert!(r2.stderr.lines().any(|l| l.contains(" WARN ")), "{}", r2.stderr);
}

#[test]
fn configz_serves_the_effective_configuration() {
    let r = run("configz", CONFIG, &[]);
    let v = r.configz.expect("/configz answered");
    let c = &v["componentconfig"];
    assert_eq!(c["apiVersion"], "kubescheduler.config.k8s.io/v1", "{v:#}");
    assert_eq!(c["kind"], "KubeSchedulerConfiguration");
    assert_eq!(c["parallelism"], 16);
    assert_eq!(c["podInitialBackoffSeconds"], 1);
    assert_eq!(c["percentageOfNodesToScore"], 0);
    assert_eq!(c["enableProfiling"], false, "profiling is off unless asked for");
    assert_eq!(c["leaderElection"]["leaseDuration"], "15s");
    assert_eq!(c["leaderElection"]["resourceName"], "unisched");
    assert_eq!(c["leaderElection"]["resourceNamespace"], "unisched-system");
    assert_eq!(c["clientConnection"]["burst"], 100);
    let p = &c["profiles"][0];
    assert_eq!(p["schedulerName"], "unisched");
    let names = |point: &str| -> Vec<String> {
        p["plugins"][point]["enabled"]
            .as_array()
            .unwrap_or_else(|| panic!("{point} in {p:#}"))
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(names("filter").contains(&"NodeResourcesFit".to_string()), "{p:#}");
    assert!(names("bind").contains(&"DefaultBinder".to_string()), "{p:#}");
    let score = names("score");
    assert!(score.contains(&"NodeResourcesFit".to_string()), "{p:#}");
    assert!(
        !score.contains(&"ImageLocality".to_string()),
        "disabled in the file: {p:#}"
    );
    assert!(
        p["plugins"]["score"]["enabled"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["weight"].as_i64().is_some_and(|w| w > 0)),
        "score weights: {p:#}"
    );
    // The failing requests are counted by the instrumented client.
    assert!(
        r.metrics
            .lines()
            .any(|l| l.starts_with("rest_client_requests_total{code=\"<error>\"")),
        "{}",
        r.metrics
    );
    assert!(r.metrics.contains("rest_client_request_duration_seconds_bucket"));
    assert!(
        r.metrics
            .contains("leader_election_master_status{name=\"unisched\"} 0"),
        "{}",
        r.metrics
    );
}
