//! Prometheus against the real binary: the dashboard's queries and the alert rules work on what
//! unisched actually exports.
//!
//! 1. `promtool check rules` and `promtool test rules` on deploy/prometheus/.
//! 2. `unisched sim --serve --no-scheduler` (the embedded control plane) with three nodes and a
//!    few pods, deploy/manifests' ServiceAccount and RBAC objects applied, and Prometheus's
//!    service account `monitoring/prometheus-k8s` bound to the ClusterRole
//!    `unisched-metrics-reader` as deploy/README.md tells; the sim issues both accounts' tokens
//!    (TokenRequest) and answers TokenReviews and SubjectAccessReviews from its RBAC objects.
//!    Then `unisched run` against it with the Deployment's own arguments and the ConfigMap's own
//!    configuration (leader election on, lease in unisched-system): HTTPS on a free loopback port,
//!    its self-signed certificate in the temporary directory (`--cert-dir`), authentication and
//!    authorization delegated to the sim.
//! 3. The secure port answers like a cluster's: `/readyz` without credentials; `/metrics` 401
//!    with a token the sim never issued, 403 without a token (the request is anonymous, as
//!    kube-scheduler treats it, and `system:anonymous` has no role) and for the scheduler's own
//!    account (it has RBAC rules, but not the metrics reader's), 200 for Prometheus's.
//! 4. Prometheus (Debian's package) scraping it every second over HTTPS with
//!    deploy/prometheus/prometheus.yml (target filled in; the bearer token and the certificate as
//!    files beside it) and the alert rules loaded, while waves of pods are created and scheduled.
//!    Three more jobs scrape the same port with a token nobody issued, without a token, and with
//!    the scheduler's: their targets are down with 401, 403 and 403.
//! 5. Every expression of the Grafana dashboard (panels and template variables) runs as an instant
//!    query and must succeed with data; every alert rule must evaluate with health "ok", and none
//!    may be active on this healthy cluster.
//!
//! Everything listens on 127.0.0.1, the whole run is bounded (90 s), and the child processes and
//! the temporary directory are removed on drop, also when an assertion fails. Prometheus is not
//! optional: CI installs it (`.ci/run`), so its absence fails the test.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

mod common;

use std::{
    fs,
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use common::free_port;
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_unisched");
const BUDGET: Duration = Duration::from_secs(90);
const NAMESPACE: &str = "unisched-system";
const CONFIG_PATH: &str = "/etc/unisched/config.yaml";
/// The Deployment's secure port, replaced by a free one.
const DEPLOYED_SECURE_PORT: &str = "--secure-port=10259";
/// Prometheus's namespace and service account, as in deploy/README.md's binding example.
const PROMETHEUS_NAMESPACE: &str = "monitoring";
const PROMETHEUS_ACCOUNT: &str = "prometheus-k8s";
/// Files beside prometheus.yml that deploy/prometheus/prometheus.yml names.
const TOKEN_FILE: &str = "unisched-metrics.token";
const CERTIFICATE_FILE: &str = "unisched.crt";
const INSTALL_HINT: &str =
    "install Debian's prometheus: apt-get install -y prometheus (CI does this in .ci/run)";

/// Dashboard expressions allowed to return no series, and why. They must still succeed.
const MAY_BE_EMPTY: &[(&str, &str)] = &[
    (
        "plugin=\"DynamicResources\"",
        "no pod in this scenario has ResourceClaims, so the DynamicResources plugin records no timings \
         (and it is not registered in every build yet)",
    ),
    (
        "unisched_dra_allocations_total",
        "counter vector without label values until the first device allocation; this scenario has no DRA",
    ),
    (
        "unisched_extended_resource_claims_total",
        "counter vector without label values until the first KEP-5004 claim; this scenario has none",
    ),
    (
        "unisched_node_allocatable_rejections_total",
        "counter vector without label values until a KEP-5517 rejection; this scenario has no DRA",
    ),
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    let p = repo().join(rel);
    fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

/// A single-document YAML file of deploy/, as JSON.
fn yaml(rel: &str) -> Value {
    serde_yaml::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// An executable on PATH.
fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

// ---------------------------------------------------------------------------------------------
// A tiny HTTP/1.1 client (loopback only, no keep-alive), plain or over TLS.
// ---------------------------------------------------------------------------------------------

fn dechunk(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = body;
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let size_line = String::from_utf8_lossy(&rest[..eol]);
        let size = usize::from_str_radix(size_line.split(';').next().unwrap_or("0").trim(), 16).unwrap_or(0);
        rest = &rest[eol + 2..];
        if size == 0 || rest.len() < size {
            break;
        }
        out.extend_from_slice(&rest[..size]);
        rest = rest.get(size + 2..).unwrap_or_default();
    }
    out
}

fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.set_write_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAccept: application/json\r\n\
         Content-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    parse_response(&raw)
}

/// Status and (de-chunked) body of a whole HTTP/1.1 response.
fn parse_response(raw: &[u8]) -> std::io::Result<(u16, String)> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of HTTP headers"))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line: {head}")))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = &raw[split + 4..];
    let body = if chunked { dechunk(body) } else { body.to_vec() };
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    http(addr, "GET", path, "text/plain", "")
}

/// unisched's HTTPS port, trusting only the self-signed certificate it wrote to --cert-dir.
struct SecurePort {
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
}

impl SecurePort {
    /// None until the certificate file exists and parses.
    fn new(addr: SocketAddr, certificate: &Path) -> Option<Self> {
        use rustls::pki_types::{CertificateDer, pem::PemObject};
        let pem = fs::read(certificate).ok()?;
        let certificate = CertificateDer::from_pem_slice(&pem).ok()?;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(certificate).ok()?;
        let config =
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
        Some(SecurePort {
            addr,
            config: Arc::new(config),
        })
    }

    /// One GET, with `Authorization: Bearer <token>` when given. The server name checked is
    /// 127.0.0.1, as Prometheus checks it.
    fn get(&self, path: &str, token: Option<&str>) -> std::io::Result<(u16, String)> {
        self.send("GET", path, token, "")
    }

    /// One request of `method` with `body`, as [`SecurePort::get`].
    fn send(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: &str,
    ) -> std::io::Result<(u16, String)> {
        let tcp = TcpStream::connect_timeout(&self.addr, Duration::from_secs(2))?;
        tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
        tcp.set_write_timeout(Some(Duration::from_secs(10)))?;
        let name = rustls::pki_types::ServerName::IpAddress(self.addr.ip().into());
        let connection =
            rustls::ClientConnection::new(self.config.clone(), name).map_err(std::io::Error::other)?;
        let mut tls = rustls::StreamOwned::new(connection, tcp);
        let authorization = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        write!(
            tls,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n{authorization}\
             Content-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        )?;
        tls.flush()?;
        let mut raw = Vec::new();
        match tls.read_to_end(&mut raw) {
            Ok(_) => {}
            // A peer that closes without close_notify: the response is complete nonetheless.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
            Err(e) => return Err(e),
        }
        parse_response(&raw)
    }
}

fn url_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Harness: child processes and a temporary directory, cleaned up on drop.
// ---------------------------------------------------------------------------------------------

struct Harness {
    dir: PathBuf,
    children: Vec<(String, Child)>,
    deadline: Instant,
    started: Instant,
}

impl Harness {
    fn new() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let dir = std::env::temp_dir().join(format!("unisched-prometheus-{}-{nanos}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let started = Instant::now();
        Harness {
            dir,
            children: Vec::new(),
            deadline: started + BUDGET,
            started,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path(name);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        fs::write(&p, text).unwrap();
        p
    }

    /// Starts a child with stdout and stderr in `<name>.log`.
    fn spawn(&mut self, name: &str, cmd: &mut Command) {
        let log = fs::File::create(self.path(&format!("{name}.log"))).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        self.children.push((name.to_string(), child));
    }

    /// Fails if a child has exited (it should run until dropped).
    fn check_alive(&mut self) {
        for (name, child) in &mut self.children {
            if let Ok(Some(status)) = child.try_wait() {
                let log = fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default();
                panic!("{name} exited early ({status}):\n{log}");
            }
        }
    }

    /// Polls `f` every 100 ms until it returns Some, within `limit` and the overall budget.
    fn wait<T>(&mut self, what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
        let until = (Instant::now() + limit).min(self.deadline);
        loop {
            if let Some(v) = f() {
                return v;
            }
            self.check_alive();
            assert!(
                Instant::now() < until,
                "timed out after {:?} waiting for {what}",
                self.started.elapsed()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log_tail(&self, name: &str, lines: usize) -> String {
        let text = fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for (name, _) in &self.children {
                eprintln!("---- last lines of {name}.log ----\n{}", self.log_tail(name, 40));
            }
        }
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

// ---------------------------------------------------------------------------------------------
// Prometheus queries
// ---------------------------------------------------------------------------------------------

fn query(prom: SocketAddr, expr: &str) -> Value {
    let (status, body) = http(
        prom,
        "POST",
        "/api/v1/query",
        "application/x-www-form-urlencoded",
        &format!("query={}", url_encode(expr)),
    )
    .unwrap_or_else(|e| panic!("querying Prometheus for {expr}: {e}"));
    let v: Value = serde_json::from_str(&body)
        .unwrap_or_else(|e| panic!("{expr}: HTTP {status}, not JSON ({e}): {body}"));
    assert_eq!(v["status"], "success", "query failed: {expr}\n{body}");
    v
}

/// The numeric values of an instant-vector (or scalar) result.
fn values(v: &Value) -> Vec<f64> {
    let data = &v["data"];
    let parse = |x: &Value| x[1].as_str().and_then(|s| s.parse::<f64>().ok());
    match data["resultType"].as_str() {
        Some("vector") => data["result"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| parse(&s["value"]))
            .collect(),
        Some("scalar") => parse(&data["result"]).into_iter().collect(),
        _ => Vec::new(),
    }
}

fn first_value(prom: SocketAddr, expr: &str) -> Option<f64> {
    values(&query(prom, expr)).into_iter().next()
}

/// Grafana's variables, as a test resolves them: intervals become 1m, and the multi-value
/// variables (always used with =~) match everything.
fn resolve(expr: &str) -> String {
    let mut s = expr.to_string();
    for (from, to) in [
        ("${__rate_interval}", "1m"),
        ("$__rate_interval", "1m"),
        ("${__interval}", "1m"),
        ("$__interval", "1m"),
        ("${__range}", "1m"),
        ("$__range", "1m"),
    ] {
        s = s.replace(from, to);
    }
    for var in ["job", "instance", "profile"] {
        s = s
            .replace(&format!("${{{var}}}"), ".*")
            .replace(&format!("${var}"), ".*");
    }
    assert!(!s.contains('$'), "unresolved variable in {s}");
    s
}

/// `label_values(selector, label)` (a Grafana variable query) as PromQL.
fn variable_query(def: &str) -> String {
    let inner = def
        .trim()
        .strip_prefix("label_values(")
        .and_then(|s| s.strip_suffix(')'))
        .unwrap_or_else(|| panic!("unsupported variable query {def}"));
    let (selector, label) = inner
        .rsplit_once(',')
        .unwrap_or_else(|| panic!("label_values without a label: {def}"));
    format!("count by ({}) ({})", label.trim(), selector.trim())
}

/// (what, expr) for every panel target and every query variable of the dashboard.
fn dashboard_queries() -> Vec<(String, String)> {
    let d: Value = serde_json::from_str(&read("deploy/grafana/unisched-dashboard.json")).unwrap();
    let mut out = Vec::new();
    for v in d["templating"]["list"].as_array().unwrap() {
        if v["type"] == "query" {
            let def = v["definition"].as_str().unwrap();
            out.push((
                format!("variable ${}", v["name"].as_str().unwrap()),
                variable_query(def),
            ));
        }
    }
    for p in d["panels"].as_array().unwrap() {
        let nested = p["panels"].as_array().cloned().unwrap_or_default();
        for p in std::iter::once(p).chain(nested.iter()) {
            for t in p["targets"].as_array().into_iter().flatten() {
                let title = format!(
                    "panel {:?} target {}",
                    p["title"].as_str().unwrap_or(""),
                    t["refId"].as_str().unwrap_or("")
                );
                out.push((title, t["expr"].as_str().unwrap().to_string()));
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The scenario
// ---------------------------------------------------------------------------------------------

fn node(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels: {{kubernetes.io/hostname: {name}}}\n\
         status:\n  capacity: {{cpu: \"8\", memory: 16Gi, pods: \"110\"}}\n  allocatable: {{cpu: \"8\", memory: 16Gi, pods: \"110\"}}\n"
    )
}

fn pod(name: &str, cpu: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "unisched",
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]
        }
    })
}

fn create(api: SocketAddr, path: &str, obj: &Value) -> Value {
    let (status, body) = http(api, "POST", path, "application/json", &obj.to_string()).unwrap();
    assert!(
        status == 201 || status == 200,
        "POST {path}: HTTP {status}: {body}"
    );
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("POST {path}: not JSON ({e}): {body}"))
}

/// Applies every document of a multi-document YAML file of deploy/manifests (the kinds the RBAC
/// and ServiceAccount files hold).
fn apply_manifests(api: SocketAddr, rel: &str) {
    let text = read(rel);
    for document in serde_yaml::Deserializer::from_str(&text) {
        let obj: Value = serde::Deserialize::deserialize(document).unwrap_or_else(|e| panic!("{rel}: {e}"));
        if obj.is_null() {
            continue;
        }
        let namespace = obj["metadata"]["namespace"].as_str().unwrap_or_default();
        let path = match obj["kind"].as_str().unwrap_or_default() {
            "ServiceAccount" => format!("/api/v1/namespaces/{namespace}/serviceaccounts"),
            "ClusterRole" => "/apis/rbac.authorization.k8s.io/v1/clusterroles".to_string(),
            "ClusterRoleBinding" => "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings".to_string(),
            "Role" => format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles"),
            "RoleBinding" => {
                format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings")
            }
            other => panic!("{rel}: no path for kind {other}"),
        };
        create(api, &path, &obj);
    }
}

/// A token for a service account, from the sim's TokenRequest.
fn request_token(api: SocketAddr, namespace: &str, account: &str) -> String {
    let request = json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"audiences": [], "expirationSeconds": 3600}
    });
    let answer = create(
        api,
        &format!("/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"),
        &request,
    );
    answer["status"]["token"]
        .as_str()
        .unwrap_or_else(|| panic!("no token in {answer}"))
        .to_string()
}

/// Prometheus's account bound to the metrics reader role, as deploy/README.md shows it; the
/// tokens of Prometheus's account and of the scheduler's own (which may not read /metrics).
fn metrics_identities(api: SocketAddr) -> (String, String) {
    apply_manifests(api, "deploy/manifests/serviceaccount.yaml");
    apply_manifests(api, "deploy/manifests/rbac.yaml");
    create(
        api,
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PROMETHEUS_NAMESPACE}}),
    );
    create(
        api,
        &format!("/api/v1/namespaces/{PROMETHEUS_NAMESPACE}/serviceaccounts"),
        &json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": PROMETHEUS_ACCOUNT, "namespace": PROMETHEUS_NAMESPACE}}),
    );
    create(
        api,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "prometheus-unisched-metrics"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "unisched-metrics-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": PROMETHEUS_ACCOUNT,
                          "namespace": PROMETHEUS_NAMESPACE}]
        }),
    );
    (
        request_token(api, PROMETHEUS_NAMESPACE, PROMETHEUS_ACCOUNT),
        request_token(api, NAMESPACE, "unisched"),
    )
}

/// The health and last error of the active target of `job`, once it has been scraped.
fn target_health(prom: SocketAddr, job: &str) -> Option<(String, String)> {
    let (_, body) = get(prom, "/api/v1/targets?state=active").ok()?;
    let v: Value = serde_json::from_str(&body).ok()?;
    let target = v["data"]["activeTargets"]
        .as_array()?
        .iter()
        .find(|t| t["labels"]["job"] == job)?;
    let health = target["health"].as_str()?.to_string();
    (health != "unknown").then(|| (health, target["lastError"].as_str().unwrap_or("").to_string()))
}

/// The scheduler's arguments: the Deployment's, with the config path, the secure port and the
/// kubeconfigs pointed at this test's files and port.
fn scheduler_args(config: &Path, kubeconfig: &Path, secure: SocketAddr, cert_dir: &Path) -> Vec<String> {
    let deployment = yaml("deploy/manifests/deployment.yaml");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let mut args: Vec<String> = container["args"]
        .as_array()
        .expect("container args")
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .map(|a| {
            if a == CONFIG_PATH {
                config.display().to_string()
            } else if a == DEPLOYED_SECURE_PORT {
                format!("--secure-port={}", secure.port())
            } else {
                a
            }
        })
        .collect();
    assert_eq!(args[0], "run");
    assert!(
        args.contains(&format!("--secure-port={}", secure.port())),
        "the Deployment no longer serves on {DEPLOYED_SECURE_PORT}: {args:?}"
    );
    assert!(
        !args.iter().any(|a| a.starts_with("--metrics-bind-address")),
        "the Deployment serves plain HTTP: {args:?}"
    );
    args.extend([
        // Loopback only, the certificate beside prometheus.yml, reviews by the sim.
        format!("--bind-address={}", secure.ip()),
        format!("--cert-dir={}", cert_dir.display()),
        format!("--authentication-kubeconfig={}", kubeconfig.display()),
        format!("--authorization-kubeconfig={}", kubeconfig.display()),
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
        // A fixed seed makes the 10 % plugin-timing sample deterministic.
        "--seed".into(),
        "7".into(),
    ]);
    args
}

/// The `config.yaml` of the ConfigMap in deploy/manifests.
fn shipped_config() -> String {
    let cm = yaml("deploy/manifests/configmap.yaml");
    cm["data"]["config.yaml"]
        .as_str()
        .expect("config.yaml in the ConfigMap")
        .to_string()
}

#[test]
fn dashboard_queries_and_alert_rules_work_against_the_real_binary() {
    let (Some(prometheus), Some(promtool)) = (which("prometheus"), which("promtool")) else {
        panic!("prometheus and promtool must be on PATH: {INSTALL_HINT}");
    };
    let mut h = Harness::new();

    // 1. The rule file is valid and its unit tests pass.
    let rules = repo().join("deploy/prometheus/unisched-alerts.yaml");
    let out = Command::new(&promtool)
        .arg("check")
        .arg("rules")
        .arg(&rules)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool check rules:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&promtool)
        .arg("test")
        .arg("rules")
        .arg(repo().join("deploy/prometheus/unisched-alerts.test.yaml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool test rules:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // 2. The control plane, with three nodes and four pods.
    let mut scenario = (0..3)
        .map(|i| node(&format!("node-{i}")))
        .collect::<Vec<_>>()
        .join("---\n");
    for i in 0..4 {
        scenario.push_str("---\n");
        scenario.push_str(&serde_yaml::to_string(&pod(&format!("initial-{i}"), "100m")).unwrap());
    }
    let scenario_dir = h
        .write("scenario/cluster.yaml", &scenario)
        .parent()
        .unwrap()
        .to_path_buf();
    let kubeconfig = h.path("kubeconfig");
    h.spawn(
        "sim",
        Command::new(BIN)
            .arg("sim")
            .arg(&scenario_dir)
            .args([
                "--serve",
                "--no-scheduler",
                "--settle-ms",
                "100",
                "--timeout",
                "20",
                "--kubeconfig-out",
            ])
            .arg(&kubeconfig),
    );
    let api: SocketAddr = h.wait("the sim's kubeconfig", Duration::from_secs(30), || {
        let text = fs::read_to_string(&kubeconfig).ok()?;
        let server = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: http://"))?;
        server.trim().parse().ok()
    });
    create(
        api,
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
    );
    let (prometheus_token, scheduler_token) = metrics_identities(api);

    // 3. The scheduler as deployed: the Deployment's arguments, the ConfigMap's configuration,
    // HTTPS with its certificate written beside prometheus.yml.
    let config = h.write("config.yaml", &shipped_config());
    let secure_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let args = scheduler_args(&config, &kubeconfig, secure_addr, &h.dir);
    h.spawn(
        "unisched",
        Command::new(BIN).args(&args).env("POD_NAMESPACE", NAMESPACE),
    );
    let certificate = h.path(CERTIFICATE_FILE);
    let secure = h.wait("the serving certificate", Duration::from_secs(30), || {
        SecurePort::new(secure_addr, &certificate)
    });
    h.wait("/readyz and the leader lease", Duration::from_secs(30), || {
        let ready = secure.get("/readyz", None).ok()?.0 == 200;
        let leader = secure
            .get("/metrics", Some(&prometheus_token))
            .ok()?
            .1
            .lines()
            .any(|l| l.trim() == "unisched_leader 1");
        (ready && leader).then_some(())
    });
    let scheduler_ready = h.started.elapsed();
    for (token, want, who) in [
        (Some("not-a-token-the-sim-issued"), 401, "an unknown token"),
        (None, 403, "no token (anonymous)"),
        (
            Some(scheduler_token.as_str()),
            403,
            "the scheduler's own account (no metrics role)",
        ),
        (Some(prometheus_token.as_str()), 200, "Prometheus's account"),
    ] {
        let (status, body) = secure.get("/metrics", token).unwrap();
        assert_eq!(status, want, "/metrics with {who}: {body}");
    }

    // 4. Prometheus, from deploy/prometheus/prometheus.yml with the target and intervals filled in,
    // the token and certificate files it names beside it, and two jobs that must be refused.
    let template = read("deploy/prometheus/prometheus.yml");
    for needle in [
        "127.0.0.1:10259",
        "scrape_interval: 15s",
        "evaluation_interval: 15s",
        "- unisched-alerts.yaml",
        "scheme: https",
        &format!("credentials_file: {TOKEN_FILE}"),
        &format!("ca_file: {CERTIFICATE_FILE}"),
    ] {
        assert!(
            template.contains(needle),
            "deploy/prometheus/prometheus.yml no longer contains {needle:?}"
        );
    }
    let mut prom_config = template
        .replace("127.0.0.1:10259", &secure_addr.to_string())
        .replace("scrape_interval: 15s", "scrape_interval: 1s")
        .replace("evaluation_interval: 15s", "evaluation_interval: 1s");
    h.write(TOKEN_FILE, &prometheus_token);
    h.write("scheduler.token", &scheduler_token);
    h.write("unknown.token", "not-a-token-the-sim-issued");
    prom_config.push_str(&format!(
        "  - job_name: unisched-unknown-token\n    scheme: https\n    tls_config: {{ca_file: {CERTIFICATE_FILE}}}\n\
         \x20   authorization: {{credentials_file: unknown.token}}\n\
         \x20   static_configs: [{{targets: [\"{secure_addr}\"]}}]\n\
         \x20 - job_name: unisched-without-token\n    scheme: https\n    tls_config: {{ca_file: {CERTIFICATE_FILE}}}\n\
         \x20   static_configs: [{{targets: [\"{secure_addr}\"]}}]\n\
         \x20 - job_name: unisched-without-role\n    scheme: https\n    tls_config: {{ca_file: {CERTIFICATE_FILE}}}\n\
         \x20   authorization: {{credentials_file: scheduler.token}}\n\
         \x20   static_configs: [{{targets: [\"{secure_addr}\"]}}]\n"
    ));
    h.write(
        "unisched-alerts.yaml",
        &read("deploy/prometheus/unisched-alerts.yaml"),
    );
    let prom_config_path = h.write("prometheus.yml", &prom_config);
    let out = Command::new(&promtool)
        .arg("check")
        .arg("config")
        .arg(&prom_config_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool check config:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let prom: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    h.spawn(
        "prometheus",
        Command::new(&prometheus)
            .arg(format!("--config.file={}", prom_config_path.display()))
            .arg(format!("--storage.tsdb.path={}", h.path("tsdb").display()))
            .arg(format!("--web.listen-address={prom}"))
            .arg("--log.level=warn"),
    );
    h.wait("Prometheus to be ready", Duration::from_secs(30), || {
        (get(prom, "/-/ready").ok()?.0 == 200).then_some(())
    });
    h.wait("the first scrape of unisched", Duration::from_secs(20), || {
        (first_value(prom, "up{job=\"unisched\"}")? == 1.0).then_some(())
    });
    for (job, code) in [
        ("unisched-unknown-token", "401"),
        ("unisched-without-token", "403"),
        ("unisched-without-role", "403"),
    ] {
        let (health, error) = h.wait(
            &format!("the first scrape of {job}"),
            Duration::from_secs(20),
            || target_health(prom, job),
        );
        assert_eq!(
            health, "down",
            "{job} must be refused, but its target is {health}"
        );
        assert!(error.contains(code), "{job}: expected HTTP {code}, got {error:?}");
    }

    // 5. Waves of pods while Prometheus scrapes; two can never fit (64 CPUs on 8-CPU nodes).
    let mut schedulable = 4;
    for wave in 0..4 {
        for i in 0..10 {
            let cpu = if wave == 1 && i < 2 { "64" } else { "100m" };
            create(
                api,
                "/api/v1/namespaces/default/pods",
                &pod(&format!("wave{wave}-{i}"), cpu),
            );
            if cpu == "100m" {
                schedulable += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let want = format!(
        "sum(scheduler_schedule_attempts_total{{job=\"unisched\",result=\"scheduled\"}}) >= {schedulable}"
    );
    h.wait(
        "Prometheus to see every schedulable pod scheduled",
        Duration::from_secs(30),
        || first_value(prom, &want).map(|_| ()),
    );
    h.wait(
        "unschedulable attempts in Prometheus",
        Duration::from_secs(20),
        || {
            first_value(
                prom,
                "sum(scheduler_schedule_attempts_total{job=\"unisched\",result=\"unschedulable\"}) > 0",
            )
            .map(|_| ())
        },
    );
    // A few more scrapes, so every rate() has samples on both sides of the scheduling.
    let scrapes_before = first_value(prom, "count_over_time(up{job=\"unisched\"}[5m])").unwrap_or(0.0);
    h.wait("three more scrapes", Duration::from_secs(10), || {
        (first_value(prom, "count_over_time(up{job=\"unisched\"}[5m])")? >= scrapes_before + 3.0)
            .then_some(())
    });
    h.check_alive();

    // 6. Every dashboard query succeeds and returns data (MAY_BE_EMPTY excepted, with reasons).
    let mut failures = Vec::new();
    let mut empty_allowed = Vec::new();
    let queries = dashboard_queries();
    assert!(
        queries.len() >= 20,
        "found only {} dashboard queries",
        queries.len()
    );
    for (what, expr) in &queries {
        let resolved = resolve(expr);
        let vals = values(&query(prom, &resolved));
        if vals.is_empty() {
            match MAY_BE_EMPTY.iter().find(|(needle, _)| expr.contains(needle)) {
                Some((_, why)) => empty_allowed.push(format!("{what}: {why}")),
                None => failures.push(format!("{what}: no data for {resolved}")),
            }
        } else if vals.iter().all(|v| v.is_nan()) {
            failures.push(format!("{what}: only NaN for {resolved}"));
        }
    }
    assert!(
        failures.is_empty(),
        "dashboard queries without data:\n  {}",
        failures.join("\n  ")
    );
    eprintln!(
        "dashboard: {} queries with data; allowed to be empty:\n  {}",
        queries.len() - empty_allowed.len(),
        empty_allowed.join("\n  ")
    );

    // 6b. The upstream metrics this scenario exercises have series (whether or not a panel
    // shows them): set by the queue, the framework, the leader elector and the API client.
    let required = [
        "scheduler_queue_incoming_pods_total{queue=\"active\",event=\"UnscheduledPodAdd\"}",
        "scheduler_plugin_evaluation_total{extension_point=\"Filter\"}",
        "scheduler_plugin_evaluation_total{extension_point=\"Score\"}",
        "scheduler_framework_extension_point_duration_seconds_count{extension_point=\"Score\"}",
        "scheduler_framework_extension_point_duration_seconds_count{extension_point=\"PostBind\"}",
        "scheduler_event_handling_duration_seconds_count",
        "leader_election_master_status == 1",
        "rest_client_requests_total{method=\"GET\"}",
        "rest_client_request_duration_seconds_count",
        "process_cpu_seconds_total > 0",
    ];
    let missing: Vec<&str> = required
        .iter()
        .copied()
        .filter(|e| values(&query(prom, e)).is_empty())
        .collect();
    assert!(missing.is_empty(), "no series for:\n  {}", missing.join("\n  "));

    // 7. Every alert rule evaluates without error, and none is pending or firing.
    let rule_doc = yaml("deploy/prometheus/unisched-alerts.yaml");
    let exprs: Vec<(String, String)> = rule_doc["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter())
        .map(|r| {
            (
                r["alert"].as_str().unwrap().to_string(),
                r["expr"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (_, expr) in &exprs {
        query(prom, expr); // asserts status "success"
    }
    let rules_json = h.wait("every rule to be evaluated", Duration::from_secs(15), || {
        let (_, body) = get(prom, "/api/v1/rules?type=alert").ok()?;
        let v: Value = serde_json::from_str(&body).ok()?;
        let rules: Vec<Value> = v["data"]["groups"]
            .as_array()?
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        let evaluated = rules.iter().all(|r| {
            r["lastEvaluation"]
                .as_str()
                .is_some_and(|t| !t.starts_with("0001-"))
        });
        (rules.len() == exprs.len() && evaluated).then_some(rules)
    });
    let unhealthy: Vec<String> = rules_json
        .iter()
        .filter(|r| r["health"] != "ok")
        .map(|r| format!("{}: health {} {}", r["name"], r["health"], r["lastError"]))
        .collect();
    assert!(
        unhealthy.is_empty(),
        "alert rules that fail to evaluate:\n  {}",
        unhealthy.join("\n  ")
    );
    let active: Vec<String> = rules_json
        .iter()
        .flat_map(|r| r["alerts"].as_array().cloned().unwrap_or_default())
        .map(|a| format!("{} ({})", a["labels"]["alertname"], a["state"]))
        .collect();
    assert!(
        active.is_empty(),
        "alerts active on a healthy cluster: {active:?}"
    );

    eprintln!(
        "prometheus e2e: scheduler ready after {scheduler_ready:?}, {} dashboard queries and {} rules checked in {:?}",
        queries.len(),
        exprs.len(),
        h.started.elapsed()
    );
}

/// With `enableProfiling: true`, the `/debug/pprof/` endpoints sit behind the same delegated
/// authentication and authorization as `/metrics`, against the embedded control plane's
/// TokenReviews and SubjectAccessReviews: 401 for a token nobody issued, 403 for anonymous and for
/// the scheduler's own account (no right on the path), 200 for an account whose ClusterRole grants
/// `get` on the non-resource URLs `/debug/pprof/*`; Go-only profiles are 404 even then.
#[test]
fn profiling_endpoints_need_a_non_resource_url_right() {
    let mut h = Harness::new();
    let scenario_dir = h
        .write("scenario/cluster.yaml", &node("node-0"))
        .parent()
        .unwrap()
        .to_path_buf();
    let kubeconfig = h.path("kubeconfig");
    h.spawn(
        "sim",
        Command::new(BIN)
            .arg("sim")
            .arg(&scenario_dir)
            .args([
                "--serve",
                "--no-scheduler",
                "--settle-ms",
                "100",
                "--timeout",
                "20",
                "--kubeconfig-out",
            ])
            .arg(&kubeconfig),
    );
    let api: SocketAddr = h.wait("the sim's kubeconfig", Duration::from_secs(30), || {
        let text = fs::read_to_string(&kubeconfig).ok()?;
        let server = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: http://"))?;
        server.trim().parse().ok()
    });
    create(
        api,
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
    );
    let (metrics_token, scheduler_token) = metrics_identities(api);
    create(
        api,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "unisched-profiler"},
            "rules": [
                {"nonResourceURLs": ["/debug/pprof", "/debug/pprof/*"], "verbs": ["get"]},
                {"nonResourceURLs": ["/debug/flags/v"], "verbs": ["put"]}
            ]
        }),
    );
    create(
        api,
        &format!("/api/v1/namespaces/{PROMETHEUS_NAMESPACE}/serviceaccounts"),
        &json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "profiler", "namespace": PROMETHEUS_NAMESPACE}}),
    );
    create(
        api,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "profiler-unisched"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "unisched-profiler"},
            "subjects": [{"kind": "ServiceAccount", "name": "profiler",
                          "namespace": PROMETHEUS_NAMESPACE}]
        }),
    );
    let profiler_token = request_token(api, PROMETHEUS_NAMESPACE, "profiler");

    let config = h.write(
        "config.yaml",
        &format!("{}enableProfiling: true\n", shipped_config()),
    );
    let secure_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let args = scheduler_args(&config, &kubeconfig, secure_addr, &h.dir);
    h.spawn(
        "unisched",
        Command::new(BIN).args(&args).env("POD_NAMESPACE", NAMESPACE),
    );
    let certificate = h.path(CERTIFICATE_FILE);
    let secure = h.wait("the serving certificate", Duration::from_secs(30), || {
        SecurePort::new(secure_addr, &certificate)
    });
    h.wait("/readyz", Duration::from_secs(30), || {
        (secure.get("/readyz", None).ok()?.0 == 200).then_some(())
    });

    for (token, want, who) in [
        (Some("not-a-token-the-sim-issued"), 401, "an unknown token"),
        (None, 403, "no token (anonymous)"),
        (
            Some(scheduler_token.as_str()),
            403,
            "the scheduler's own account (no right on the path)",
        ),
        (
            Some(metrics_token.as_str()),
            403,
            "the metrics reader (its right is /metrics only)",
        ),
        (Some(profiler_token.as_str()), 200, "the profiler's account"),
    ] {
        let (status, body) = secure.get("/debug/pprof/", token).unwrap();
        assert_eq!(status, want, "/debug/pprof/ with {who}: {body}");
        if status == 403 {
            assert!(body.contains(r#"cannot get path \"/debug/pprof/\""#), "{body}");
        }
    }
    let profiler = Some(profiler_token.as_str());
    let (status, index) = secure.get("/debug/pprof/", profiler).unwrap();
    assert_eq!(status, 200);
    assert!(index.contains("<a href='profile'>profile</a>"), "{index}");
    let (status, cmdline) = secure.get("/debug/pprof/cmdline", profiler).unwrap();
    assert_eq!(status, 200);
    assert!(cmdline.split('\0').any(|a| a == "run"), "{cmdline:?}");
    let (status, _) = secure.get("/debug/pprof/profile?seconds=1", profiler).unwrap();
    assert_eq!(status, 200, "a one-second CPU profile");
    let (status, body) = secure.get("/debug/pprof/trace", profiler).unwrap();
    assert_eq!(status, 404, "{body}");
    assert!(body.starts_with("Unknown profile: trace"), "{body}");
    let (status, _) = secure
        .get("/debug/pprof/profile?seconds=1", Some(&scheduler_token))
        .unwrap();
    assert_eq!(status, 403, "no profile without the right");
    let (status, _) = secure.get("/metrics", profiler).unwrap();
    assert_eq!(status, 403, "the profiler's right is not the metrics reader's");

    // The log verbosity, changed with `put` on /debug/flags/v (the HTTP method is the verb).
    let (status, body) = secure
        .send("PUT", "/debug/flags/v", Some(&scheduler_token), "4")
        .unwrap();
    assert_eq!(status, 403, "{body}");
    assert!(body.contains(r#"cannot put path \"/debug/flags/v\""#), "{body}");
    let (status, body) = secure.send("PUT", "/debug/flags/v", profiler, "4").unwrap();
    assert_eq!(
        (status, body.as_str()),
        (200, "successfully set klog.logging.verbosity to 4\n")
    );
    let (status, body) = secure.send("PUT", "/debug/flags/v", profiler, "loud").unwrap();
    assert_eq!(status, 400, "{body}");
    let log = fs::read_to_string(h.path("unisched.log")).unwrap();
    assert!(
        log.contains("log verbosity changed through /debug/flags/v"),
        "the change is logged (and, at -v 4, visible):\n{log}"
    );
}
